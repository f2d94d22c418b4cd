"""The vocabulary a Megatron-LM launch's tokenizer builds, before Megatron pads it: the one rule that
`ppb import megatron` (`megatron_import`) and `ppb check --plan` (`megatron_run`) both follow.

megatron/core/tokenizers/utils/build_tokenizer.py `build_tokenizer` (Megatron-LM d98e8a64) passes
`--vocab-size` only to TikTokenizer (tiktoken_tokenizer.py: `vocab_size`, default
`DEFAULT_TIKTOKEN_MAX_VOCAB` 2**17) and NullTokenizer (null_tokenizer.py: exactly `vocab_size`; it
has no default, so Megatron fails without it); the GPT-2 BPE (`pretrain_gpt.py`'s default,
`args_defaults={'tokenizer_type': 'GPT2BPETokenizer'}`) has its vocab.json's 50257 entries whatever
`--vocab-size` says; HuggingFace and SentencePiece tokenizers read their size from the tokenizer's
file (`--tokenizer-model`), which a launch names but does not hold: `file_vocabulary` reads it where
that file is on this machine (`tokenizer_file`), and Megatron pads the size as any other
(build_tokenizer.py `vocab_size_with_padding`: to a multiple of `--make-vocab-size-divisible-by` × TP).
"""

from __future__ import annotations

from pathlib import Path

from ppb_core.balance.tokenizer_file import huggingface_tokens, sentencepiece_pieces
from ppb_core.errors import InputError, shown

DEFAULT_TOKENIZER = "GPT2BPETokenizer"  # pretrain_gpt.py's args_defaults
GPT2_BPE_VOCAB = 50257  # the GPT-2 BPE's vocab.json entries
TIKTOKEN_DEFAULT_VOCAB = 2**17  # tiktoken_tokenizer.py DEFAULT_TIKTOKEN_MAX_VOCAB
READS_VOCAB_SIZE = ("NullTokenizer", "TikTokenizer")  # build_tokenizer passes them `--vocab-size`
FILE_TOKENIZERS = ("HuggingFaceTokenizer", "SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer")


def tokenizer_vocabulary(kind: str, vocab_size: int | None, where: str | None) -> int | None:
    """The vocabulary tokenizer *kind* builds given `--vocab-size` *vocab_size* (None: not given);
    None for a tokenizer read from a file. A tokenizer ppb knows no size of is refused, naming it."""
    if kind == "GPT2BPETokenizer":
        return GPT2_BPE_VOCAB
    if kind == "NullTokenizer":
        if not vocab_size:
            raise InputError(where, "--vocab-size", "NullTokenizer needs --vocab-size")
        return vocab_size
    if kind == "TikTokenizer":
        return vocab_size or TIKTOKEN_DEFAULT_VOCAB
    if kind in FILE_TOKENIZERS:
        return None
    raise InputError(where, "--tokenizer-type", f"{shown(kind)} is not a GPT tokenizer ppb knows the size of")


def unread_vocab_size(kind: str, vocab_size: int, vocabulary: int) -> str:
    """Why a launch's `--vocab-size` does not size the model: *kind* does not read it (`build_tokenizer` hands it
    to NullTokenizer and TikTokenizer only), and with `pad_vocab_size` on, Megatron pads the tokenizer's own
    *vocabulary* (`_set_padded_vocab_size`), which `gpt_config_from_args` then takes as the padded size."""
    return (
        f"--vocab-size {vocab_size}: Megatron-LM's {kind} does not read it (build_tokenizer passes it to "
        f"{' and '.join(READS_VOCAB_SIZE)} only): the model's vocabulary is the tokenizer's {vocabulary:,}, padded"
    )


def file_vocabulary(
    kind: str, model: str | None, special_tokens: list[str], legacy: bool, vocab_file: str | None
) -> int | str:
    """The vocabulary file tokenizer *kind* builds from `--tokenizer-model` *model* (d98e8a64,
    megatron/core/tokenizers/text/libraries/): HuggingFaceTokenizer `len(self.tokenizer)`, the
    tokenizer.json's tokens plus the `--tokenizer-special-tokens` not among them (its
    `add_special_tokens` adds only those); the SentencePiece kinds `get_piece_size()`, plus, under
    `--tokenizer-sentencepiece-legacy`, the special tokens no piece spells (`add_special_tokens`).
    A str says why it was not read (the file is not here, or the launch loads it otherwise)."""
    if model is None:
        return f"--tokenizer-type {kind} reads its vocabulary from --tokenizer-model, which the plan does not give"
    path = Path(model)
    if not path.exists():
        return f"--tokenizer-model {model} is no file or folder on this machine (a hub name or another machine's path)"
    if kind == "HuggingFaceTokenizer":
        if vocab_file is not None:  # AutoTokenizer.from_pretrained(vocab_file=...): the slow files' vocabulary
            return f"--tokenizer-type {kind} with --vocab-file loads that file's vocabulary, which ppb does not read"
        if path.is_dir() and not (path / "tokenizer.json").is_file():
            return f"--tokenizer-model {model} holds no tokenizer.json (ppb reads no slow tokenizer's files)"
        tokens = huggingface_tokens(path)
        return len(tokens) + len(set(special_tokens) - tokens)
    if path.is_dir():
        return f"--tokenizer-model {model} is a folder, not a SentencePiece .model file"
    pieces = sentencepiece_pieces(path)
    if special_tokens and not legacy:  # sentencepiece_tokenizer.py refuses them (ValueError)
        return f"--tokenizer-special-tokens without --tokenizer-sentencepiece-legacy: Megatron-LM's {kind} refuses them"
    return len(pieces) + len(set(special_tokens) - set(pieces))
