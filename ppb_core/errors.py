"""The one error type bad input raises, so every front end can print one clear line."""

from __future__ import annotations

import re
from pathlib import Path


class InputError(Exception):
    """Bad input: names the file, the field and the problem, and prints as one line."""

    def __init__(self, source: str | Path | None, field: str | None, problem: str) -> None:
        self.source = str(source) if source is not None else None
        self.field = field
        self.problem = " ".join(str(problem).split())
        super().__init__(self.line())

    def line(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        return ": ".join([*parts, self.problem])

    def __str__(self) -> str:
        return self.line()


# Longest string an error message quotes; longer ones (and containers) are described, never echoed.
SHOWN_CHARS = 40


def shown(value: object) -> str:
    """A value as an error message may show it: bounded, whatever the input (never a file's content
    nor an alias-expanded structure: a container is described by its type and size)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        digits = len(str(abs(value))) if abs(value) < 10**4000 else None
        return repr(value) if digits is not None and digits <= 24 else f"a {digits or 'huge'}-digit integer"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if len(value) <= SHOWN_CHARS and value.isprintable():
            return repr(value)
        return f"a {len(value):,}-character string"
    if isinstance(value, list | tuple):
        return f"a list of {len(value):,} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        return f"a mapping of {len(value):,} key{'' if len(value) == 1 else 's'}"
    return f"a {type(value).__name__}"


def shown_key(key: object) -> str:
    """A mapping key as a part of a field path: itself when short and printable, else described."""
    text = shown(key)
    return text[1:-1] if isinstance(key, str) and text.startswith("'") else f"<{text}>"


def field_path(parts: list[str | int]) -> str | None:
    """Keys and indices of a nested value as one field name (`training.recompute.0`), long paths shortened."""
    named = [part if isinstance(part, str) else str(part) for part in parts]
    if len(named) > 8:
        named = [*named[:4], "…", *named[-3:]]
    return ".".join(named) or None


def shown_name(value: object) -> str:
    """A value read from a file that is meant to be a name or a number (a CSV cell, a column):
    quoted when it looks like one, else only described, so a file that is not what it should be
    (`/etc/passwd` as a calibration CSV) never has its content echoed."""
    if isinstance(value, str) and re.fullmatch(r"[\w.+-]{1,40}", value):
        return repr(value)
    if value == "":
        return "an empty value"
    size = f"{len(value):,} characters" if isinstance(value, str) else shown(value)
    return f"a value that is not a name ({size})"


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: how many one-character edits turn *a* into *b*."""
    row = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (char != other))
    return row[-1]


def misspelt(word: str, names: object, most_edits: int = 2) -> str | None:
    """The first of *names* that *word* is within *most_edits* one-character edits of (not itself):
    a key a person meant to write, for a "did you mean" (keys of 5 characters or more only)."""
    if len(word) < 5 or len(word) > 64:
        return None
    for name in names:  # type: ignore[attr-defined]
        if name != word and abs(len(name) - len(word)) <= most_edits and _edits(word, name) <= most_edits:
            return name
    return None


def meant(word: str, names: object) -> str | None:
    """The name of *names* a person most likely meant by *word*, for a "did you mean" only (never a refusal):
    the same name in another case or with `-` for `_` (`B300`: b300), else the nearest within two edits
    (`misspelt`), else, for a word of 3 or 4 characters, the one name within one edit (`topp`: top; none where
    several are; a swap of two neighbours counts as one: `nmae`, name)."""
    if not isinstance(word, str) or len(word) > 64:
        return None
    known = [name for name in names if isinstance(name, str)]  # type: ignore[attr-defined]
    folded = word.lower().replace("-", "_")
    same = [name for name in known if name != word and name.lower().replace("-", "_") == folded]
    if same:
        return same[0]
    if len(word) >= 5:  # the nearest within two edits (`b3000`: b300, not b200), the first listed on a tie
        near = [(_edits(word, name), i) for i, name in enumerate(known) if misspelt(word, [name]) is not None]
        return known[min(near)[1]] if near else None
    close = [name for name in known if name != word and (_edits(word, name) <= 1 or _swapped(word, name))]
    return close[0] if len(close) == 1 and len(word) >= 3 else None


def _swapped(a: str, b: str) -> bool:
    """Whether *b* is *a* with two neighbouring characters swapped (`nmae`: name), two edits by `_edits`."""
    differ = [i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
    return (
        len(a) == len(b)
        and len(differ) == 2
        and differ[1] == differ[0] + 1
        and a[differ[0]] == b[differ[1]]
        and a[differ[1]] == b[differ[0]]
    )


def did_you_mean(word: str, names: object) -> str:
    """The end of a refusal: `: did you mean X?` where *word* is near a name of *names* (`meant`), else nothing."""
    found = meant(word, names)
    return f": did you mean {found}?" if found else ""
