"""The planning chain in order: each stage a pure function of the tables of the stages before it.

`ppb plan` runs it end to end and the Dagster assets call one stage each, so both produce the
same tables, serialized by the same `to_parquet_bytes` into the same layout
(`<root>/<stage>/<key>.parquet`, the key being the run config's file stem). A stage may also
render artifacts next to its table (the SAPP JSON, the report's image); they are a function of
the stage's table alone, so a rerun from stored Parquet renders the same files.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ppb_core.config import config_hash, load_run_config, run_from_frame, run_to_frame
from ppb_core.io import atomic_write_bytes
from ppb_core.model import walk, walk_to_frame

PARQUET = ".parquet"


# --- the stages ----------------------------------------------------------------------------------


def run_config(path: str | Path) -> pd.DataFrame:
    """The run config read, validated and resolved into one self-contained row."""
    run = load_run_config(path)  # errors name the file as given; the table records where it was
    return run_to_frame(run.model_copy(update={"source": str(Path(path).resolve())}))


def layer_walk(run_config: pd.DataFrame) -> pd.DataFrame:
    """Every layer of the run in pipeline order with its (chunk, stage) cell."""
    return walk_to_frame(walk(run_from_frame(run_config)))


@dataclass(frozen=True)
class Stage:
    """One step of the chain: its function, the stages it reads, the core modules it rests on."""

    name: str
    func: Callable[..., pd.DataFrame]
    inputs: tuple[str, ...]
    core_modules: tuple[str, ...]
    artifacts: Callable[[pd.DataFrame], dict[str, bytes]] | None = None
    artifact_suffixes: tuple[str, ...] = ()
    doc: str = field(default="", compare=False)

    @property
    def description(self) -> str:
        return self.doc or (inspect.getdoc(self.func) or "").split("\n\n")[0]


# The first stage reads the run config file; each later one reads the tables named in `inputs`.
STAGES: tuple[Stage, ...] = (
    Stage("run_config", run_config, (), ("ppb_core.config",)),
    Stage("layer_walk", layer_walk, ("run_config",), ("ppb_core.config", "ppb_core.model")),
)


def stage(name: str) -> Stage:
    for candidate in STAGES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no stage named {name!r} (stages: {', '.join(s.name for s in STAGES)})")


def run_stage(name: str, tables: Mapping[str, pd.DataFrame], path: str | Path | None = None) -> pd.DataFrame:
    """One stage from its upstream tables (the first stage from the run config *path*)."""
    step = stage(name)
    if not step.inputs:
        if path is None:
            raise ValueError(f"stage {name} reads the run config file: give its path")
        return step.func(path)
    return step.func(*(tables[upstream] for upstream in step.inputs))


def run_chain(path: str | Path, until: str | None = None) -> dict[str, pd.DataFrame]:
    """Every stage's table for one run config, in chain order (up to and including *until*)."""
    tables: dict[str, pd.DataFrame] = {}
    for step in STAGES:
        tables[step.name] = run_stage(step.name, tables, path)
        if step.name == until:
            break
    return tables


def partition_key(path: str | Path) -> str:
    """The key a run config's tables are stored under: its file stem (also the Dagster partition)."""
    return Path(path).stem


# --- checks: what must hold of a stage's table before later stages read it -----------------------


def walk_problems(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> list[str]:
    """Each sub-model walked whole (one HEAD, its body layers, one TAIL) and no empty cell."""
    run = run_from_frame(run_config)
    problems = []
    for model in run.model_names:
        rows = layer_walk[layer_walk["model_name"] == model]
        for node, expected in (("HEAD", 1), ("BODY", run.spec(model).num_layers), ("TAIL", 1)):
            found = int((rows["node"] == node).sum())
            if found != expected:
                problems.append(f"{model}: {found} {node} layers, expected {expected}")
    body = layer_walk[layer_walk["node"] == "BODY"]
    for chunk in range(run.parallel.vpp):
        for stage_index in range(run.parallel.pp):
            if not ((body["chunk"] == chunk) & (body["stage"] == stage_index)).any():
                problems.append(f"chunk {chunk}, stage {stage_index} holds no body layer")
    return problems


# --- storage -------------------------------------------------------------------------------------


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


def stage_artifacts(name: str, frame: pd.DataFrame) -> dict[str, bytes]:
    """The files a stage renders next to its table, by suffix (none for most stages)."""
    step = stage(name)
    files = step.artifacts(frame) if step.artifacts is not None else {}
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


# --- versions ------------------------------------------------------------------------------------


def _core_imports(module: str) -> set[str]:
    """The ppb_core modules *module* imports anywhere in its source (functions included)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return set()
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("ppb_core"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ppb_core"):
            found.add(node.module)
            # `from ppb_core.memory import static` may name a submodule rather than a function.
            found.update(f"{node.module}.{a.name}" for a in node.names if _exists(f"{node.module}.{a.name}"))
    return found


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def core_closure(modules: tuple[str, ...]) -> list[str]:
    """*modules* and every ppb_core module they import, directly or not, sorted."""
    seen: set[str] = set()
    pending = list(modules)
    while pending:
        module = pending.pop()
        if module in seen or not _exists(module):
            continue
        seen.add(module)
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:  # a package: its __init__ and parts
            pending.extend(
                f"{module}.{p.stem}" for p in Path(next(iter(spec.submodule_search_locations))).glob("*.py")
                if p.stem != "__init__"
            )
        pending.extend(_core_imports(module) - seen)
    return sorted(seen)


def code_version(name: str) -> str:
    """A digest of the stage's own function and every core module it rests on.

    Editing any of them gives the stage a new code version, which is how Dagster tells which
    stored tables are stale; formatting-only edits count too (rerunning costs little).
    """
    step = stage(name)
    digest = hashlib.sha256(inspect.getsource(step.func).encode())
    if step.artifacts is not None:
        digest.update(inspect.getsource(step.artifacts).encode())
    for module in core_closure(step.core_modules):
        origin = importlib.util.find_spec(module).origin
        digest.update(module.encode())
        digest.update(Path(origin).read_bytes())
    return digest.hexdigest()[:16]


__all__ = [
    "PARQUET",
    "STAGES",
    "Stage",
    "code_version",
    "config_hash",
    "core_closure",
    "from_parquet_bytes",
    "layer_walk",
    "partition_key",
    "read_stage",
    "run_chain",
    "run_config",
    "run_stage",
    "stage",
    "stage_artifact_suffixes",
    "stage_artifacts",
    "stage_path",
    "to_parquet_bytes",
    "walk_problems",
    "write_stage",
]
