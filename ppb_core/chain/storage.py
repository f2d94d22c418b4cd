"""Where and how a stage's table and artifacts are stored: `<root>/<stage>/<key>.parquet`, written atomically.

A table's Parquet file carries its schema's words: each column's description and unit as field
metadata (`description`, `unit`), the table's name and description as file metadata
(`ppb.table`, `ppb.description`), and a summarized table's summary as JSON (`ppb.summary`).
`pyarrow.parquet.read_schema(path)` shows them all; pandas reads the rows as before.
"""

from __future__ import annotations

import io
import json
import weakref
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ppb_core.chain.stages import stage
from ppb_core.errors import InputError
from ppb_core.io import read_bytes, write_files
from ppb_core.tables.schema import Schema, Stored, Summarized, rows_of

PARQUET = ".parquet"
TABLE_KEY, DESCRIPTION_KEY, SUMMARY_KEY = b"ppb.table", b"ppb.description", b"ppb.summary"


def to_parquet_bytes(value: Stored, schema: Schema | None = None) -> bytes:
    """The one serialization of a stage table; deterministic, so equal tables give equal bytes."""
    table = pa.Table.from_pandas(rows_of(value), preserve_index=False)
    fields = []
    for item in table.schema:
        metadata = {}
        if schema is not None:
            description, unit = schema.describe(item.name)
            metadata = {b"description": description.encode(), **({b"unit": unit.encode()} if unit else {})}
        fields.append(item.with_metadata(metadata) if metadata else item)
    metadata = dict(table.schema.metadata or {})
    if schema is not None:
        metadata[TABLE_KEY] = schema.name.encode()
        metadata[DESCRIPTION_KEY] = schema.description.encode()
    if isinstance(value, Summarized):
        metadata[SUMMARY_KEY] = json.dumps(value.summary, sort_keys=True).encode()
    table = pa.Table.from_arrays(table.columns, schema=pa.schema(fields, metadata=metadata))
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def from_parquet_bytes(data: bytes, source: str | Path = "<parquet>") -> Stored:
    """A stored table back: a `Summarized` where the file holds a summary, else the rows alone.

    Bytes that are not a readable Parquet table (cut, corrupt, a bad summary) are an InputError naming *source*.
    """
    try:
        table = pq.read_table(io.BytesIO(data))
        frame = table.to_pandas()
        summary = (table.schema.metadata or {}).get(SUMMARY_KEY)
        return Summarized(frame, json.loads(summary)) if summary is not None else frame
    except (OSError, ValueError, pa.ArrowException) as err:  # json.JSONDecodeError is a ValueError
        problem = " ".join(str(err).split())[:160]
        raise InputError(source, None, f"not a readable Parquet table ({type(err).__name__}: {problem})") from None


def stage_path(root: str | Path, name: str, key: str, suffix: str = PARQUET) -> Path:
    """Where a stage's table (or an artifact of it) for one run config lives under *root*."""
    return Path(root) / name / f"{key}{suffix}"


_last_rendered: tuple[weakref.ref, str, dict[str, bytes]] | None = None


def stage_artifacts(name: str, value: Stored) -> dict[str, bytes]:
    """The files a stage renders next to its table, by suffix (none for most stages).

    The last rendering is kept while its table lives, so the asset that shows the chart and the
    IO manager that writes it render it once.
    """
    global _last_rendered
    if _last_rendered is not None and _last_rendered[0]() is value and _last_rendered[1] == name:
        return dict(_last_rendered[2])
    step = stage(name)
    files = step.artifacts(value) if step.artifacts is not None else {}
    if files:
        _last_rendered = (weakref.ref(value), name, dict(files))
    if tuple(files) != step.artifact_suffixes:
        raise RuntimeError(f"stage {name} rendered {tuple(files)}, declared {step.artifact_suffixes}")
    return files


def stage_artifact_suffixes(name: str) -> tuple[str, ...]:
    return stage(name).artifact_suffixes


def stage_files(name: str, value: Stored) -> dict[str, bytes]:
    """Every file of a stage's result by suffix: its Parquet table and the artifacts it renders."""
    return {PARQUET: to_parquet_bytes(value, stage(name).schema), **stage_artifacts(name, value)}


def _stage_files_at(root: str | Path, name: str, key: str, value: Stored) -> dict[Path, bytes]:
    return {stage_path(root, name, key, suffix): data for suffix, data in stage_files(name, value).items()}


def write_stage(root: str | Path, name: str, key: str, value: Stored) -> list[Path]:
    """A stage's table and artifacts, all or none: each written aside, then all renamed into place."""
    files = _stage_files_at(root, name, key, value)
    write_files(files)
    return list(files)


def write_stages(root: str | Path, key: str, tables: dict[str, Stored]) -> dict[str, list[Path]]:
    """Every stage's files, all or none (`ppb plan`): a failing write leaves no stage written."""
    by_stage = {name: _stage_files_at(root, name, key, value) for name, value in tables.items()}
    write_files({path: data for files in by_stage.values() for path, data in files.items()})
    return {name: list(files) for name, files in by_stage.items()}


def read_stage(root: str | Path, name: str, key: str) -> Stored:
    path = stage_path(root, name, key)
    return from_parquet_bytes(read_bytes(path, limit=2**40), path)
