"""Where and how a stage's table and artifacts are stored: `<root>/<stage>/<key>.parquet`, written atomically."""

from __future__ import annotations

import io
import weakref
from pathlib import Path

import pandas as pd

from ppb_core.chain.stages import stage
from ppb_core.io import atomic_write_bytes

PARQUET = ".parquet"


def to_parquet_bytes(frame: pd.DataFrame) -> bytes:
    """The one serialization of a stage table; deterministic, so equal tables give equal bytes."""
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False, engine="pyarrow")
    return buffer.getvalue()


def from_parquet_bytes(data: bytes) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(data), engine="pyarrow")


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


def write_stage(root: str | Path, name: str, key: str, frame: pd.DataFrame) -> list[Path]:
    """A stage's table and artifacts, each written aside and renamed into place."""
    files = {PARQUET: to_parquet_bytes(frame), **stage_artifacts(name, frame)}
    written = []
    for suffix, data in files.items():
        target = stage_path(root, name, key, suffix)
        atomic_write_bytes(target, data)
        written.append(target)
    return written


def read_stage(root: str | Path, name: str, key: str) -> pd.DataFrame:
    return from_parquet_bytes(stage_path(root, name, key).read_bytes())
