"""The planning chain in order: each stage a pure function of the tables of the stages before it.

`ppb plan` runs it end to end and the Dagster assets call one stage each, so both produce the
same tables, serialized by the same `to_parquet_bytes` into the same layout
(`<root>/<stage>/<key>.parquet`, the key being the run config's file stem). A stage may also
render artifacts next to its table (the SAPP JSON, the report's image); they are a function of
the stage's table alone, so a rerun from stored Parquet renders the same files.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import io
import json
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ppb_core.balance import balance
from ppb_core.balance.problem import run_problem
from ppb_core.config import RunConfig, load_run_config, run_from_frame, run_to_frame
from ppb_core.errors import InputError
from ppb_core.estimate import estimate, estimate_to_frame
from ppb_core.io import atomic_write_bytes
from ppb_core.memory import MemoryModel, run_in_flight_counts
from ppb_core.model import LayerWalk, walk, walk_from_frame, walk_to_frame
from ppb_core.ppb import combine, describe_layers, many_in_flight, profile_layers, scale, withdraw
from ppb_core.ppb_frames import descriptions_from_frame, descriptions_to_frame, profiles_to_frame
from ppb_core.report import plan_stages, report_files
from ppb_core.sapp import validate_descriptions
from ppb_core.switches import MEMORY_KEY, OPTIONS
from ppb_core.timing import TimeModel

PARQUET = ".parquet"
# The columns that name a distinct layer in the memory and time tables.
TIME_KEY_COLUMNS = ("model_name", "node", "kind", "kind_json", "count")


# --- the stages ----------------------------------------------------------------------------------


def run_config(path: str | Path) -> pd.DataFrame:
    """The run config read, validated and resolved into one self-contained row."""
    run = load_run_config(path)  # errors name the file as given; the table records where it was
    return run_to_frame(run.model_copy(update={"source": str(Path(path).resolve())}))


def layer_walk(run_config: pd.DataFrame) -> pd.DataFrame:
    """Every layer of the run in pipeline order with its (chunk, stage) cell."""
    return walk_to_frame(walk(run_from_frame(run_config)))


def _run_and_walk(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> tuple[RunConfig, LayerWalk]:
    run = run_from_frame(run_config)
    return run, walk_from_frame(layer_walk, run.parallel.pp, run.parallel.vpp)


def layer_memory(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> pd.DataFrame:
    """Each distinct layer's bytes on one device under every recompute option, and each stage's peak.

    One row per distinct (model, node, kind) of the walk (`ppb_core.estimate`'s table); the
    stages' peaks against the device's memory ride along as JSON in `attrs["stage_peaks"]`.
    """
    run, walked = _run_and_walk(run_config, layer_walk)
    result = estimate(run, layer_walk=walked)
    frame = estimate_to_frame(result)
    frame.attrs["stage_peaks"] = json.dumps(result.to_json()["stages"], sort_keys=True)
    return frame


def layer_times(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> pd.DataFrame:
    """Each distinct layer's forward and backward milliseconds under every recompute option."""
    run, walked = _run_and_walk(run_config, layer_walk)
    frame = estimate_to_frame(estimate(run, times=TimeModel(run), layer_walk=walked, stages=False))
    return frame[[*TIME_KEY_COLUMNS, *(c for c in frame.columns if "_ms_" in c)]]


def switch_profiles(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> pd.DataFrame:
    """Per model and body kind, what each recompute switch alone saves and costs (`ppb profile`'s).

    The buffers are split at the most micro-batches in flight any (chunk, stage) of the schedule
    keeps, and the linear split's excess is stated at every count the schedule uses.
    """
    run, walked = _run_and_walk(run_config, layer_walk)
    counts = run_in_flight_counts(run)
    profiles = profile_layers(
        walked, MemoryModel(run), TimeModel(run), many=max(2, max(counts)), counts=counts, switches_of=run.switches
    )
    return profiles_to_frame(profiles)


def layer_descriptions(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> pd.DataFrame:
    """The SAPP layer descriptions of the walk, identical layers merged (`nb_layer`), with times."""
    run, walked = _run_and_walk(run_config, layer_walk)
    descriptions = describe_layers(
        walked, MemoryModel(run), TimeModel(run),
        many=many_in_flight(run.parallel.pp, run.training.micro_batches), switches_of=run.switches,
    )
    return descriptions_to_frame(descriptions)


def combined_descriptions(run_config: pd.DataFrame, layer_descriptions: pd.DataFrame) -> pd.DataFrame:
    """The bodies the run config's `ppb.combined` groups, each group described as one body."""
    run = run_from_frame(run_config)
    return descriptions_to_frame(combine(descriptions_from_frame(layer_descriptions), run.ppb.combined))


def withdrawn_descriptions(combined_descriptions: pd.DataFrame) -> pd.DataFrame:
    """The selective options no body the balancer sees is better off with, withdrawn from every body."""
    return descriptions_to_frame(withdraw(descriptions_from_frame(combined_descriptions)))


def scaled_descriptions(withdrawn_descriptions: pd.DataFrame) -> pd.DataFrame:
    """Times in units of the first body's forward time: what the balancer reads (also as SAPP JSON)."""
    return descriptions_to_frame(scale(descriptions_from_frame(withdrawn_descriptions)))


def sapp_json(scaled_descriptions: pd.DataFrame) -> dict[str, bytes]:
    """The scaled descriptions as the SAPP balancer's file, `{"layers_description": [...]}`."""
    descriptions = validate_descriptions(descriptions_from_frame(scaled_descriptions), "scaled_descriptions")
    return {".json": (json.dumps({"layers_description": descriptions}, indent=2) + "\n").encode()}


# Seconds the balancer may search; at the limit it returns its best plan with its gap.
PLAN_TIME_LIMIT_S = 90.0
PLAN_COLUMNS = ("stage", "layers", "layers_per_chunk", *(o.lower() for o in OPTIONS), "memory_mb", "time", "bubble",
                "cells_json")
# What the balancer reports that differs from one solve to the next: wall-clock seconds.
_VOLATILE = ("seconds",)


def plan_to_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """One row per stage of a `ppb balance --json` result; the whole result in `attrs["plan"]`.

    Per stage: layers (and per chunk), layers under each option, the balancer's predicted memory
    (MB), time of one micro-batch (the descriptions' unit) and idle share, and each chunk's option
    counts as JSON. An infeasible problem gives no row. Wall-clock seconds are left out of the
    stored result (the solver's notes too, which quote them), so equal plans give equal bytes.
    """
    stable = {key: value for key, value in result.items() if key not in _VOLATILE}
    if "solver" in stable:
        stable["solver"] = {key: value for key, value in stable["solver"].items() if key != "notes"}
    rows = []
    for row in result.get("stages", []):
        stage_index = row["stage"]
        cells = [chunk_row[stage_index]["options"] for chunk_row in result["cells"]]
        rows.append({
            "stage": stage_index,
            "layers": row["layers"],
            "layers_per_chunk": json.dumps(row["layers_per_chunk"]),
            **{o.lower(): sum(int(cell.get(o, 0)) for cell in cells) for o in OPTIONS},
            "memory_mb": float(row["memory_mb"]),
            "time": float(row["time"]),
            "bubble": float(row["bubble"]),
            "cells_json": json.dumps(cells, sort_keys=True),
        })
    frame = pd.DataFrame(rows, columns=list(PLAN_COLUMNS)).astype({
        "stage": "int64", "layers": "int64", "layers_per_chunk": "string", **{o.lower(): "int64" for o in OPTIONS},
        "memory_mb": "float64", "time": "float64", "bubble": "float64", "cells_json": "string",
    })
    frame.attrs["plan"] = json.dumps(stable, sort_keys=True)
    return frame


def pipeline_plan(
    run_config: pd.DataFrame, scaled_descriptions: pd.DataFrame, time_limit_s: float = PLAN_TIME_LIMIT_S
) -> pd.DataFrame:
    """The balancer's plan: layers per (chunk, stage) and their recompute options, the fastest that fits.

    The problem's sizes come from the run config as `ppb balance RUN.yaml` takes them: pp stages,
    the micro-batches, vpp chunks and the schedule, the device's memory less reserved_mb.
    """
    run = run_from_frame(run_config)
    problem = run_problem(run, descriptions_from_frame(scaled_descriptions))
    return plan_to_frame(balance(problem, time_limit_s))


def plan_json(pipeline_plan: pd.DataFrame) -> dict[str, bytes]:
    """The plan as `ppb balance --json` prints it (less wall-clock seconds)."""
    return {".json": (json.dumps(json.loads(pipeline_plan.attrs["plan"]), indent=2) + "\n").encode()}


def plan_report(run_config: pd.DataFrame, pipeline_plan: pd.DataFrame) -> pd.DataFrame:
    """Each stage of the plan re-evaluated by the memory and time models: a chart and a summary beside it."""
    run = run_from_frame(run_config)
    plan = json.loads(pipeline_plan.attrs["plan"])
    if pipeline_plan.empty:
        raise InputError(run.source, "plan", f"no plan to report ({plan['status']}): {plan.get('message', '')}")
    by_stage = [json.loads(text) for text in pipeline_plan["cells_json"]]
    cells = [[by_stage[s][c] for s in range(len(by_stage))] for c in range(len(by_stage[0]))]
    stages = plan_stages(run, cells, planned_mb=pipeline_plan["memory_mb"].tolist())
    best = plan.get("best_baseline")
    headline = [
        ("balancer", f"{plan['status']}, gap {plan['gap']:.3g}" if plan.get("gap") is not None else plan["status"]),
        ("iteration time", f"{plan['objective']:.6g} (in units of the first body's forward time)"),
        ("speedup over the best uniform split", f"{plan['speedup']:.3f}× ({best})" if plan.get("speedup") else "none"),
        ("peak memory (balancer)", f"{plan['peak_memory_mb']:,.0f} of {plan['input']['memory_mb']:,.0f} MB"),
        *((key, str(plan[key])) for key in ("offset", "recompute", "select_recompute", "select_comm_recompute")),
    ]
    if plan.get("megatron", {}).get("layout"):
        headline.append(("Megatron-LM layout", f"`{plan['megatron']['layout']}`"))
    stages.attrs.update(title=f"{run.name}: pipeline plan", headline=json.dumps(headline),
                        image=f"{partition_key(run.source)}.png")
    return stages


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
_PPB = ("ppb_core.ppb", "ppb_core.ppb_frames", "ppb_core.memory", "ppb_core.timing")
STAGES: tuple[Stage, ...] = (
    Stage("run_config", run_config, (), ("ppb_core.config",)),
    Stage("layer_walk", layer_walk, ("run_config",), ("ppb_core.config", "ppb_core.model")),
    Stage("layer_memory", layer_memory, ("run_config", "layer_walk"), ("ppb_core.estimate", "ppb_core.memory")),
    Stage("layer_times", layer_times, ("run_config", "layer_walk"), ("ppb_core.estimate", "ppb_core.timing")),
    Stage("switch_profiles", switch_profiles, ("run_config", "layer_walk"), (*_PPB, "ppb_core.cli.profile")),
    Stage("layer_descriptions", layer_descriptions, ("run_config", "layer_walk"), _PPB),
    Stage("combined_descriptions", combined_descriptions, ("run_config", "layer_descriptions"), _PPB),
    Stage("withdrawn_descriptions", withdrawn_descriptions, ("combined_descriptions",), _PPB),
    Stage("scaled_descriptions", scaled_descriptions, ("withdrawn_descriptions",), (*_PPB, "ppb_core.sapp"),
          artifacts=sapp_json, artifact_suffixes=(".json",)),
    Stage("pipeline_plan", pipeline_plan, ("run_config", "scaled_descriptions"), ("ppb_core.balance", "ppb_core.sapp"),
          artifacts=plan_json, artifact_suffixes=(".json",)),
    Stage("plan_report", plan_report, ("run_config", "pipeline_plan"), ("ppb_core.report",),
          artifacts=report_files, artifact_suffixes=(".png", ".md")),
)


def stage(name: str) -> Stage:
    for candidate in STAGES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no stage named {name!r} (stages: {', '.join(s.name for s in STAGES)})")


def run_stage(
    name: str, tables: Mapping[str, pd.DataFrame], path: str | Path | None = None, **settings: Any
) -> pd.DataFrame:
    """One stage from its upstream tables (the first stage from the run config *path*).

    *settings* go to the stage function as keywords (e.g. `time_limit_s` for `pipeline_plan`).
    """
    step = stage(name)
    if not step.inputs:
        if path is None:
            raise ValueError(f"stage {name} reads the run config file: give its path")
        return step.func(path, **settings)
    return step.func(*(tables[upstream] for upstream in step.inputs), **settings)


def run_chain(
    path: str | Path, until: str | None = None, settings: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, pd.DataFrame]:
    """Every stage's table for one run config, in chain order (up to and including *until*).

    *settings* maps a stage name to keyword settings of its function.
    """
    tables: dict[str, pd.DataFrame] = {}
    for step in STAGES:
        tables[step.name] = run_stage(step.name, tables, path, **(settings or {}).get(step.name, {}))
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


def offered_options(description: Mapping[str, object]) -> tuple[str, ...]:
    """The recompute options a BODY description offers the balancer: those whose memory key it has."""
    return tuple(option for option in OPTIONS if MEMORY_KEY[option] in description)


def _is_time(key: str) -> bool:
    return key == "time" or key.endswith("_time")


def description_problems(frame: pd.DataFrame) -> list[str]:
    """No negative or missing figure, at least one body, and every body offering the same options.

    The balancer takes the options it considers from the first body; a body offering others
    would be planned with options it does not have.
    """
    descriptions = descriptions_from_frame(frame)
    problems = []
    for desc in descriptions:
        for key, value in desc.items():
            if (key.startswith("memory") or _is_time(key)) and not (isinstance(value, int | float) and value >= 0):
                problems.append(f"{desc.get('name')}: {key} is {value!r}, not a non-negative number")
        if not (isinstance(desc.get("nb_layer"), int) and desc["nb_layer"] >= 1):
            problems.append(f"{desc.get('name')}: nb_layer is {desc.get('nb_layer')!r}")
    bodies = [desc for desc in descriptions if desc.get("type") == "BODY"]
    if not bodies:
        problems.append("no BODY description")
    offered = {desc["name"]: offered_options(desc) for desc in bodies}
    if len(set(offered.values())) > 1:
        listed = "; ".join(f"{name} {'/'.join(options)}" for name, options in offered.items())
        problems.append(f"bodies offer different options: {listed}")
    return problems


def scaling_problems(withdrawn: pd.DataFrame, scaled: pd.DataFrame, rel: float = 1e-12) -> list[str]:
    """Every time of the scaled descriptions is the withdrawn one over the first body's forward time."""
    before, after = descriptions_from_frame(withdrawn), descriptions_from_frame(scaled)
    unit = next((d["forward_time"] for d in before if d["type"] == "BODY" and d.get("forward_time")), None)
    if unit is None:
        return ["no body has a forward time to scale by"]
    problems = []
    if len(before) != len(after):
        problems.append(f"{len(after)} scaled descriptions for {len(before)}")
    for old, new in zip(before, after, strict=False):
        if [k for k in old if not _is_time(k)] != [k for k in new if not _is_time(k)]:
            problems.append(f"{new.get('name')}: keys differ from the withdrawn description")
        for key, value in old.items():
            if not _is_time(key) or value is None:
                continue
            expected = value / unit
            if not abs(new.get(key, float("nan")) - expected) <= rel * abs(expected):
                problems.append(f"{new.get('name')}: {key} is {new.get(key)}, expected {value} / {unit}")
    first = next(d for d in after if d["type"] == "BODY" and d.get("forward_time"))
    if first["forward_time"] != 1.0:
        problems.append(f"the first body's forward time is {first['forward_time']}, not 1")
    return problems


def plan_problems(run_config: pd.DataFrame, pipeline_plan: pd.DataFrame) -> list[str]:
    """A plan exists, places every body layer, and each stage's predicted memory fits the device.

    The device memory is the run config's own (less reserved_mb), not the one the plan states.
    """
    run = run_from_frame(run_config)
    plan = json.loads(pipeline_plan.attrs["plan"])
    if pipeline_plan.empty:
        return [f"no plan: the balancer says {plan['status']}: {plan.get('message', '')}".strip()]
    problems = []
    limit = float(run.device.usable_mb)
    for row in pipeline_plan.itertuples(index=False):
        if row.memory_mb > limit:
            problems.append(f"stage {row.stage} needs {row.memory_mb:,.0f} MB, the device has {limit:,.0f}")
    placed = int(pipeline_plan["layers"].sum())
    described = sum(int(body["nb_layer"]) for body in plan["input"]["bodies"])
    if placed != described:
        problems.append(f"{placed} body layers placed, {described} described")
    return problems


def report_problems(plan_report: pd.DataFrame) -> list[str]:
    """Stages the memory model, evaluating the plan layer by layer, finds over the device's memory."""
    total = plan_report["parameters_mb"] + plan_report["activations_mb"] + plan_report["buffers_mb"]
    return [
        f"stage {stage}: {need:,.0f} MB by the memory model, the device has {limit:,.0f}"
        for stage, need, limit in zip(plan_report["stage"], total, plan_report["device_mb"], strict=True)
        if need > limit
    ]


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


# --- versions ------------------------------------------------------------------------------------


@functools.cache
def _core_imports(module: str) -> frozenset[str]:
    """The ppb_core modules *module* imports anywhere in its source (functions included)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return frozenset()
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("ppb_core"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ppb_core"):
            found.add(node.module)
            # `from ppb_core.memory import static` may name a submodule rather than a function.
            found.update(f"{node.module}.{a.name}" for a in node.names if _exists(f"{node.module}.{a.name}"))
    return frozenset(found)


@functools.cache
def _own_source() -> bytes:
    return Path(__file__).read_bytes()


@functools.cache
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
    """A digest of the stage's name, this module (the stage functions and the table helpers they
    share) and every core module the stage rests on.

    Editing any of them gives the stage a new code version, which is how Dagster tells which
    stored tables are stale; formatting-only edits count too (rerunning costs little).
    """
    step = stage(name)
    digest = hashlib.sha256(name.encode())
    digest.update(_own_source())
    for module in core_closure(step.core_modules):
        origin = importlib.util.find_spec(module).origin
        digest.update(module.encode())
        digest.update(Path(origin).read_bytes())
    return digest.hexdigest()[:16]

