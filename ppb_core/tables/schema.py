"""What a stored table is: its columns, each with a dtype, a unit and a description.

Every table the chain stores declares a `Schema` here in `ppb_core.tables`; the Parquet files
carry each column's description and unit as field metadata, and the Dagster assets show them as
column descriptions. A table whose figures about the whole are no row (a plan's objective and
status, a report's headline) is a `Summarized`: its rows and a JSON-able summary, which storage
keeps as the Parquet file's key-value metadata (`ppb.summary`), where any Parquet reader sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# Units a column may state; its name ends in the same (`_bytes`, `_mb`, `_ms`, `_s`).
UNITS: tuple[str, ...] = ("", "bytes", "MB", "ms", "s", "elements", "layers", "share", "JSON")


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # a pandas dtype: string, int64, Int64, float64, Float64, bool
    description: str
    unit: str = ""

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"column {self.name}: unit {self.unit!r} is none of {UNITS}")


@dataclass(frozen=True)
class Schema:
    """A table's columns in order. *more* describes columns a table may add beyond them."""

    name: str
    description: str
    columns: tuple[Column, ...]
    more: str = ""

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: a column is declared twice")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def dtypes(self) -> dict[str, str]:
        return {c.name: c.dtype for c in self.columns}

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def describe(self, name: str) -> tuple[str, str]:
        """(description, unit) of a column, declared or one of the *more* ones."""
        column = self.column(name)
        return (column.description, column.unit) if column else (self.more, "")

    def frame(self, records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
        """The records as a table of exactly these columns, in order, with their dtypes."""
        rows = list(records)
        return pd.DataFrame({c.name: pd.array([row.get(c.name) for row in rows], dtype=c.dtype) for c in self.columns})

    def require(self, frame: pd.DataFrame) -> None:
        """ValueError naming the missing columns unless *frame* has every declared one."""
        missing = [name for name in self.names if name not in frame.columns]
        if missing:
            raise ValueError(f"not a {self.name} table: no column {', '.join(missing)}")


@dataclass(frozen=True, eq=False)
class Summarized:
    """A table's rows and the figures about it as a whole (plain JSON data)."""

    frame: pd.DataFrame
    summary: Mapping[str, Any] = field(default_factory=dict)


Stored = pd.DataFrame | Summarized


def rows_of(value: Stored) -> pd.DataFrame:
    """The rows of a stored table, summarized or not."""
    return value.frame if isinstance(value, Summarized) else value
