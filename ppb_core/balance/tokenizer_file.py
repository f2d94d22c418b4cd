"""A tokenizer file's vocabulary, read offline and without the tokenizer libraries, as Megatron-LM
counts it (Megatron-LM d98e8a64, megatron/core/tokenizers/text/libraries/):

* huggingface_tokenizer.py `HuggingFaceTokenizer.vocab_size` is `len(self.tokenizer)`: for the fast
  tokenizer AutoTokenizer builds from a `tokenizer.json`, the tokens of the model's vocabulary and of
  `added_tokens` together, each string once (tokenizers' `Tokenizer.get_vocab_size(with_added_tokens=True)`
  counts `get_vocab(true)`, one map from token to id), and the tokens a folder's `tokenizer_config.json`
  declares that are not among them, which transformers adds as it loads (`added_tokens_decoder`, the
  special tokens `bos_token` ... `mask_token`, `extra_special_tokens` or else `additional_special_tokens`;
  measured with transformers 5.25's AutoTokenizer, tests/test_check_tokenizer_file.py);
* sentencepiece_tokenizer.py `SentencePieceTokenizer.vocab_size` is `get_piece_size()`: the `pieces`
  (field 1) of the `.model` file's `ModelProto` protobuf, counted here from the protobuf wire format.
"""

from __future__ import annotations

import json
from pathlib import Path

from ppb_core.errors import InputError

_PIECES = 1  # sentencepiece_model.proto: `repeated SentencePiece pieces = 1` of ModelProto


def huggingface_tokens(path: Path) -> set[str]:
    """The tokens a HuggingFace `tokenizer.json` (or a folder holding one) holds: `len(tokenizer)` of them."""
    file = path / "tokenizer.json" if path.is_dir() else path
    where = str(file)
    try:
        document = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(where, None, f"is not a readable tokenizer.json: {err}") from None
    model = document.get("model") if isinstance(document, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        tokens = set(vocab)
    elif isinstance(vocab, list) and all(isinstance(entry, list) and entry for entry in vocab):
        tokens = {str(entry[0]) for entry in vocab}  # Unigram: [piece, score] pairs
    else:
        raise InputError(where, "model.vocab", "missing: a tokenizer.json's model states its vocabulary")
    added = document.get("added_tokens") or []
    if not isinstance(added, list) or not all(isinstance(token, dict) and "content" in token for token in added):
        raise InputError(where, "added_tokens", "must be a list of tokens with their content")
    tokens |= {str(token["content"]) for token in added}
    config = path / "tokenizer_config.json"
    return tokens | (_declared_tokens(config) if path.is_dir() and config.is_file() else set())


_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _content(token: object) -> str | None:
    """A token as tokenizer_config.json writes it: a string, or an AddedToken's dict with its content."""
    if isinstance(token, str):
        return token
    if isinstance(token, dict) and isinstance(token.get("content"), str):
        return token["content"]
    return None


def _declared_tokens(config: Path) -> set[str]:
    """The tokens a tokenizer_config.json declares (module docstring)."""
    where = str(config)
    try:
        document = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(where, None, f"is not a readable tokenizer_config.json: {err}") from None
    if not isinstance(document, dict):
        raise InputError(where, None, "is not a JSON object")
    decoder = document.get("added_tokens_decoder") or {}
    found = list(decoder.values()) if isinstance(decoder, dict) else []
    found += [document.get(name) for name in _SPECIAL]
    # transformers 5's tokenization_utils_base.py `_from_pretrained`: the deprecated
    # additional_special_tokens stand in for extra_special_tokens only where those are not given
    listed = document.get("extra_special_tokens") or document.get("additional_special_tokens") or []
    found += list(listed.values()) if isinstance(listed, dict) else list(listed) if isinstance(listed, list) else []
    return {text for token in found if (text := _content(token)) is not None}


def _varint(data: bytes, at: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise InputError(where, None, "is not a SentencePiece model: a truncated protobuf varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _records(data: bytes, where: str) -> list[tuple[int, bytes | None]]:
    """A protobuf message's (field number, bytes of a length-delimited record, else None)."""
    found: list[tuple[int, bytes | None]] = []
    at = 0
    while at < len(data):
        key, at = _varint(data, at, where)
        field, wire = key >> 3, key & 7
        body: bytes | None = None
        if wire == 0:
            _, at = _varint(data, at, where)
        elif wire == 1:
            at += 8
        elif wire == 2:
            length, at = _varint(data, at, where)
            body, at = data[at : at + length], at + length
        elif wire == 5:
            at += 4
        else:  # groups (3, 4) and unknown wire types: no ModelProto field is one
            raise InputError(where, None, f"is not a SentencePiece model: protobuf wire type {wire}")
        if at > len(data) or field == 0:
            raise InputError(where, None, "is not a SentencePiece model: a protobuf record runs past the file")
        found.append((field, body))
    return found


def sentencepiece_pieces(path: Path) -> list[str]:
    """The pieces of a SentencePiece `.model`, in order: its ModelProto's field-1 records, each a
    SentencePiece message whose field 1 is the piece; `get_piece_size()` is their count."""
    where = str(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(where, None, f"is not readable: {err}") from None
    pieces = []
    for field, body in _records(data, where):
        if field != _PIECES or body is None:
            continue
        text = next((value for number, value in _records(body, where) if number == 1 and value is not None), b"")
        pieces.append(text.decode("utf-8", errors="replace"))
    if not pieces:
        raise InputError(where, "pieces", "none: a SentencePiece model holds its pieces")
    return pieces
