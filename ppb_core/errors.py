"""The one error type bad input raises, so every front end can print one clear line."""

from __future__ import annotations

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
