"""Units the numbers people read are stated in: one definition each.

MB is 2**20 bytes, as SAPP's payload builder divides and as `nvidia-smi` reports MiB; device
memory in the catalog and every `_mb` figure use it. GiB is 2**30 bytes.
"""

from __future__ import annotations

MB = 2**20
GIB = 2**30


def mb_words(value_mb: float) -> str:
    """A memory figure as a person reads it: thousands separated, whole MB (`9,991 MB`), three
    significant figures below 10 MB (a toy device's `4.5 MB`), never a bare float's `9991.0`."""
    return f"{value_mb:,.0f} MB" if abs(value_mb) >= 10 else f"{value_mb:.3g} MB"


def counted(count: int, word: str, words: str | None = None) -> str:
    """A count with its noun in the number it takes: `1 stage`, `2 stages`, `0 stages` (*words*: the
    plural when it is not *word* + "s"); thousands separated."""
    return f"{count:,} {word if count == 1 else (words or word + 's')}"
