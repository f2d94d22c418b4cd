"""Where and how a stage's table and artifacts are stored: `<root>/<stage>/<key>.parquet`, written atomically."""

from __future__ import annotations

import io
import weakref
from pathlib import Path

import pandas as pd
import pyarrow as pa

from ppb_core.chain.stages import stage
from ppb_core.errors import InputError
from ppb_core.io import read_bytes, write_files

PARQUET = ".parquet"


def to_parquet_bytes(frame: pd.DataFrame) -> bytes:
    """The one serialization of a stage table; deterministic, so equal tables give equal bytes."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, engine="pyarrow")
    return buffer.getvalue()


def from_parquet_bytes(data: bytes, source: str | Path = "<parquet>") -> pd.DataFrame:
    """A stored table; bytes that are not a readable Parquet table are an InputError naming *source*."""
    try:
        return pd.read_parquet(io.BytesIO(data), engine="pyarrow")
    except (OSError, ValueError, pa.ArrowException) as err:
        problem = " ".join(str(err).split())[:160]
        raise InputError(source, None, f"not a readable Parquet table ({type(err).__name__}: {problem})") from None


def stage_path(root: str | Path, name: str, key: str, suffix: str = PARQUET) -> Path:
    """Where a stage's table (or an artifact of it) for one run config lives under *root*."""
    return Path(root) / name / f"{key}{suffix}"


_last_rendered: tuple[weakref.ref, str, dict[str, bytes]] | None = None


def stage_artifacts(name: str, frame: pd.DataFrame) -> dict[str, bytes]:
    """The files a stage renders next to its table, by suffix (none for most stages).

    The last rendering is kept while its table lives, so the asset that shows the chart and the
    IO manager that writes it render it once.
    """
    global _last_rendered
    if _last_rendered is not None and _last_rendered[0]() is frame and _last_rendered[1] == name:
        return dict(_last_rendered[2])
    step = stage(name)
    files = step.artifacts(frame) if step.artifacts is not None else {}
    if files:
        _last_rendered = (weakref.ref(frame), name, dict(files))
    if tuple(files) != step.artifact_suffixes:
        raise RuntimeError(f"stage {name} rendered {tuple(files)}, declared {step.artifact_suffixes}")
    return files


def stage_artifact_suffixes(name: str) -> tuple[str, ...]:
    return stage(name).artifact_suffixes


def stage_files(root: str | Path, name: str, key: str, frame: pd.DataFrame) -> dict[Path, bytes]:
    """A stage's table and artifacts as the files they are stored in, by path."""
    files = {PARQUET: to_parquet_bytes(frame), **stage_artifacts(name, frame)}
    return {stage_path(root, name, key, suffix): data for suffix, data in files.items()}


def write_stage(root: str | Path, name: str, key: str, frame: pd.DataFrame) -> list[Path]:
    """A stage's table and artifacts, all or none: each written aside, then all renamed into place."""
    files = stage_files(root, name, key, frame)
    write_files(files)
    return list(files)


def write_stages(root: str | Path, key: str, tables: dict[str, pd.DataFrame]) -> dict[str, list[Path]]:
    """Every stage's files, all or none (`ppb plan`): a failing write leaves no stage written."""
    by_stage = {name: stage_files(root, name, key, frame) for name, frame in tables.items()}
    write_files({path: data for files in by_stage.values() for path, data in files.items()})
    return {name: list(files) for name, files in by_stage.items()}


def read_stage(root: str | Path, name: str, key: str) -> pd.DataFrame:
    path = stage_path(root, name, key)
    return from_parquet_bytes(read_bytes(path, limit=2**40), path)
