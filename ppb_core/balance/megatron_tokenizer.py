"""The vocabulary a Megatron-LM launch's tokenizer builds, before Megatron pads it: the one rule that
`ppb import megatron` (`megatron_import`) and `ppb check --plan` (`megatron_run`) both follow.

megatron/core/tokenizers/utils/build_tokenizer.py `build_tokenizer` (Megatron-LM d98e8a64) passes
`--vocab-size` only to TikTokenizer (tiktoken_tokenizer.py: `vocab_size`, default
`DEFAULT_TIKTOKEN_MAX_VOCAB` 2**17) and NullTokenizer (null_tokenizer.py: exactly `vocab_size`; it
has no default, so Megatron fails without it); the GPT-2 BPE (`pretrain_gpt.py`'s default,
`args_defaults={'tokenizer_type': 'GPT2BPETokenizer'}`) has its vocab.json's 50257 entries whatever
`--vocab-size` says; HuggingFace and SentencePiece tokenizers read their size from the tokenizer's
file, which a launch does not hold.
"""

from __future__ import annotations

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
