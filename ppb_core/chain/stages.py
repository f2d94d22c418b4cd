"""The planning chain in order: each stage a pure function of the tables of the stages before it.

`ppb plan` runs it end to end and the Dagster assets call one stage each, so both produce the
same tables, stored by `ppb_core.chain.storage` in the same layout. A stage may also render
artifacts next to its table (the SAPP JSON, the report's image); they are a function of the
stage's table alone, so a rerun from stored Parquet renders the same files.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ppb_core.balance import balance
from ppb_core.balance.fitting import fitting_placement
from ppb_core.balance.mtp_apart import standalone_problem
from ppb_core.balance.outputs import YAML_KEYS, says_yaml_keys
from ppb_core.balance.problem import run_problem
from ppb_core.balance.progress import ProgressHook, WorkLimits, showing_seconds
from ppb_core.balance.stopped import ended_words
from ppb_core.balance.torchtitan_plan import add_torchtitan
from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError
from ppb_core.estimate.inputs import load_run
from ppb_core.estimate.plan import (
    iteration_headline,
    iteration_price,
    plan_overrun_mb,
    plan_stages,
    speedup_words,
    time_unit_s,
    with_stage_peaks,
)
from ppb_core.estimate.run import estimate
from ppb_core.estimate.seconds import plan_in_seconds
from ppb_core.memory import MemoryModel, run_in_flight_counts
from ppb_core.model.placement import model_cell_options
from ppb_core.model.walk import LayerWalk, walk
from ppb_core.payload.describe import batch_loading_ms, describe_layers, many_in_flight
from ppb_core.payload.postprocess import combine, scale, withdraw
from ppb_core.payload.profiling import profile_layers
from ppb_core.payload.sapp import validate_descriptions
from ppb_core.report.render import report_files
from ppb_core.tables.estimate import LAYER_MEMORY, LAYER_TIMES, estimate_to_frame, times_frame
from ppb_core.tables.payload import (
    DESCRIPTIONS,
    PROFILES,
    descriptions_from_frame,
    descriptions_to_frame,
    profiles_to_frame,
)
from ppb_core.tables.plan import PIPELINE_PLAN, plan_cells, plan_to_frame
from ppb_core.tables.report import PLAN_REPORT, report_to_frame
from ppb_core.tables.run import RUN_CONFIG, run_from_frame, run_to_frame
from ppb_core.tables.schema import Schema, Stored, Summarized
from ppb_core.tables.walk import LAYER_WALK, walk_from_frame, walk_to_frame
from ppb_core.timing.pricer import TimeModel


def run_config(path: str | Path) -> pd.DataFrame:
    """The run config read, validated and resolved into one self-contained row."""
    run = load_run(path)  # errors name the file as given; the table records where it was
    return run_to_frame(run.model_copy(update={"source": str(Path(path).resolve())}))


def layer_walk(run_config: pd.DataFrame) -> pd.DataFrame:
    """Every layer of the run in pipeline order with its (chunk, stage) cell."""
    return walk_to_frame(walk(run_from_frame(run_config)))


def _run_and_walk(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> tuple[RunConfig, LayerWalk]:
    run = run_from_frame(run_config)
    return run, walk_from_frame(layer_walk, run.parallel.pp, run.parallel.vpp)


def layer_memory(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> Summarized:
    """Each distinct layer's bytes on one device under every recompute option, and each stage's peak.

    One row per distinct (model, node, kind) of the walk; the run's summary and the stages' peaks
    against the device's memory are the table's summary.
    """
    run, walked = _run_and_walk(run_config, layer_walk)
    return estimate_to_frame(estimate(run, layer_walk=walked))


def layer_times(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> pd.DataFrame:
    """Each distinct layer's forward and backward milliseconds under every recompute option."""
    run, walked = _run_and_walk(run_config, layer_walk)
    return times_frame(estimate_to_frame(estimate(run, times=TimeModel(run), layer_walk=walked, stages=False)))


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
    times = TimeModel(run)
    descriptions = describe_layers(
        walked,
        MemoryModel(run),
        times,
        many=many_in_flight(run.parallel.pp, run.training.micro_batches),
        switches_of=run.switches,
        loading_ms=batch_loading_ms(run, walked, times),
    )
    return descriptions_to_frame(descriptions)


def combined_descriptions(run_config: pd.DataFrame, layer_descriptions: pd.DataFrame) -> pd.DataFrame:
    """The bodies the run config's `ppb.combined` groups, each group described as one body."""
    run = run_from_frame(run_config)
    return descriptions_to_frame(combine(descriptions_from_frame(layer_descriptions), run.ppb.combined, run.source))


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


# Wall-clock seconds the balancer may search (a last-resort safety net; at the limit it returns its best
# plan with its gap and says the clock stopped it).
PLAN_TIME_LIMIT_S: float | None = None  # no wall-clock limit: the balancer's work limits end it


def pipeline_plan(
    run_config: pd.DataFrame,
    scaled_descriptions: pd.DataFrame,
    time_limit_s: float | None = PLAN_TIME_LIMIT_S,
    progress: ProgressHook | None = None,
    work: float = 1.0,
) -> Summarized:
    """The balancer's plan: layers per (chunk, stage) and their recompute options, the fastest that fits.

    The problem's sizes come from the run config as `ppb balance RUN.yaml` takes them: pp stages,
    the micro-batches, vpp chunks and the schedule, the device's memory less reserved_mb. The
    solve's steps go to *progress* as they happen (the plan does not depend on it). *work* multiplies the
    balancer's work limits (`WorkLimits.scaled`), as `ppb balance --work` does.
    """
    run = run_from_frame(run_config)
    problem = run_problem(run, descriptions_from_frame(scaled_descriptions))
    hook = showing_seconds(progress, time_unit_s(run, problem.describe()))
    limits = None if work == 1 else WorkLimits().scaled(work)
    # a Megatron run with MTP layers: also the MTP layers apart from the loss (described again with
    # the TAIL split, `payload.describe.describe_mtp_apart`), the faster plan kept
    overrun = plan_overrun_mb(run)  # the plan fits as the report re-evaluates it (`balance.fitting`)
    result = fitting_placement(
        problem,
        standalone_problem(run, problem),
        lambda placed, **cuts: balance(
            placed, time_limit_s, progress=hook, price=iteration_price(run), overrun=overrun, limits=limits, **cuts
        ),
        overrun,
        hook,
    )
    add_torchtitan(result, run)  # a torchtitan run's job TOML lines, as `ppb balance` prints
    # in seconds, each stage's peak as `ppb check` prices the plan: what `ppb balance RUN.yaml` gives
    return plan_to_frame(with_stage_peaks(run, plan_in_seconds(run, result)))


def no_plan_words(plan: Mapping[str, Any]) -> str:
    """Why a plan summary holds no plan, naming what to raise where the limits ended the search first."""
    said = plan.get("message", "")
    if plan["status"] == "infeasible":
        return said or "no plan fits"
    if plan.get("stopped_by") == "time_limit":
        return f"{said}: the time limit stopped the balancer first; raise it (ppb plan -t, the asset's time_limit_s)"
    return f"{said}: the work limits stopped the balancer first; raise them (ppb plan --work, the asset's work)"


def plan_json(pipeline_plan: Summarized) -> dict[str, bytes]:
    """The plan as `ppb balance --json` prints it."""
    return {".json": (json.dumps(pipeline_plan.summary, indent=2, sort_keys=True) + "\n").encode()}


def plan_report(run_config: pd.DataFrame, pipeline_plan: Summarized) -> Summarized:
    """Each stage of the plan re-evaluated by the memory and time models: a chart and a summary beside it.

    The summary states the plan's iteration in seconds by the time model, against the best
    uniform split's (`plan_iterations`): what the plan gains, in a person's units.
    """
    run = run_from_frame(run_config)
    plan = pipeline_plan.summary
    if pipeline_plan.frame.empty:
        if plan["status"] == "infeasible":  # the device is too small: said as `ppb balance` says it
            raise InputError(run.source, "memory", no_plan_words(plan))
        raise InputError(run.source, "plan", f"no plan to report: {no_plan_words(plan)}")
    cells = plan_cells(pipeline_plan)
    by_model = model_cell_options(plan["cells"], plan["input"]["bodies"])
    apart = plan["input"].get("mtp_cell")  # the MTP layers apart from the loss (`balance.mtp_apart`)
    mtp_cell = None if apart is None else (int(apart[0]), int(apart[1]))
    stages = report_to_frame(plan_stages(run, cells, by_model, mtp_cell), pipeline_plan.frame["memory_mb"].tolist())
    headline = [
        # why the solve ended, as `ppb balance` says it (the status "time_limit" only says the proof was not reached)
        ("balancer", ended_words(plan)),
        *iteration_headline(plan),
        ("speedup over the best uniform split", speedup_words(plan)),
        # the balancer's charge (whole-MB terms, the run's largest working set on every stage), not a peak: the
        # stages' peaks are the table's and the tightest stage's line (called "peak memory" until session 28)
        (
            "memory the balancer charged (fullest stage)",
            f"{plan['peak_memory_mb']:,.0f} of {plan['input']['memory_mb']:,.0f} MB",
        ),
        # the MindFormers yaml keys where they are the plan's words (`says_yaml_keys`), as `ppb balance` prints them
        *((key, str(plan[key])) for key in YAML_KEYS if says_yaml_keys(run.framework, plan.get("megatron") or {})),
    ]
    headline += _mtp_headline(plan)
    # a torchtitan run's plan is said in its job TOML, a MindFormers run's in the yaml keys above, as `ppb balance`
    # and `ppb check` say them: the report gave a torchtitan run `--pipeline-model-parallel-layout 'Et*32L'` (and
    # every run the yaml keys until session 33)
    if run.framework == "megatron":
        headline += megatron_headline(plan.get("megatron", {}), plan.get("megatron_iteration"))
    headline += torchtitan_headline(plan.get("torchtitan") or {})
    about = {
        "title": f"{run.name}: pipeline plan",
        "headline": headline,
        "image": f"{partition_key(run.source)}.png",
        "status": plan["status"],
        "iteration_s": plan.get("iteration", {}).get("seconds"),
        "baseline": plan.get("baseline_iteration", {}).get("option"),
        "baseline_iteration_s": plan.get("baseline_iteration", {}).get("seconds"),
        # what the Megatron-LM flags printed run, where the plan is one Megatron-Core cannot say
        "megatron_iteration_s": (plan.get("megatron_iteration") or {}).get("seconds")
        if run.framework == "megatron"
        else None,
        # the report's timeline picture: the plan's and the best uniform split's cell times, in seconds
        "timeline": plan.get("timeline"),
    }
    return Summarized(stages, json.loads(json.dumps(about)))


def _mtp_headline(plan: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Where the plan runs the MTP layers, beside the other placement's layers' schedule (`balance.mtp_apart`)."""
    rows = plan.get("mtp_placement") or []
    if not rows:
        return []
    words = {"apart": "apart from the loss", "with_loss": "with the loss"}
    chosen = next(row for row in rows if row["chosen"])
    where = words[chosen["mtp"]]
    if chosen["mtp"] == "apart":
        chunk, stage = plan["input"]["mtp_cell"]
        where += f" (stage {stage}, chunk {chunk})"
    others = [
        f"{words[row['mtp']]} {row['objective_s']:,.3f} s"
        if row.get("objective_s") is not None
        else f"{words[row['mtp']]} {row['status'].replace('_', ' ')}"
        for row in rows
        if not row["chosen"]
    ]
    return [("MTP layers", f"{where}; layers' schedule {chosen['objective_s']:,.3f} s, " + ", ".join(others))]


@dataclass(frozen=True)
class Stage:
    """One step of the chain: its function, the stages it reads, the schema of the table it stores."""

    name: str
    func: Callable[..., Stored]
    inputs: tuple[str, ...]
    schema: Schema
    artifacts: Callable[[Stored], dict[str, bytes]] | None = None
    artifact_suffixes: tuple[str, ...] = ()
    doc: str = field(default="", compare=False)

    @property
    def description(self) -> str:
        return self.doc or (inspect.getdoc(self.func) or "").split("\n\n")[0]


# The first stage reads the run config file; each later one reads the tables named in `inputs`.
STAGES: tuple[Stage, ...] = (
    Stage("run_config", run_config, (), RUN_CONFIG),
    Stage("layer_walk", layer_walk, ("run_config",), LAYER_WALK),
    Stage("layer_memory", layer_memory, ("run_config", "layer_walk"), LAYER_MEMORY),
    Stage("layer_times", layer_times, ("run_config", "layer_walk"), LAYER_TIMES),
    Stage("switch_profiles", switch_profiles, ("run_config", "layer_walk"), PROFILES),
    Stage("layer_descriptions", layer_descriptions, ("run_config", "layer_walk"), DESCRIPTIONS),
    Stage("combined_descriptions", combined_descriptions, ("run_config", "layer_descriptions"), DESCRIPTIONS),
    Stage("withdrawn_descriptions", withdrawn_descriptions, ("combined_descriptions",), DESCRIPTIONS),
    Stage(
        "scaled_descriptions",
        scaled_descriptions,
        ("withdrawn_descriptions",),
        DESCRIPTIONS,
        artifacts=sapp_json,
        artifact_suffixes=(".json",),
    ),
    Stage(
        "pipeline_plan",
        pipeline_plan,
        ("run_config", "scaled_descriptions"),
        PIPELINE_PLAN,
        artifacts=plan_json,
        artifact_suffixes=(".json",),
    ),
    Stage(
        "plan_report",
        plan_report,
        ("run_config", "pipeline_plan"),
        PLAN_REPORT,
        artifacts=report_files,
        artifact_suffixes=(".png", ".md"),
    ),
)


def stage(name: str) -> Stage:
    for candidate in STAGES:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no stage named {name!r} (stages: {', '.join(s.name for s in STAGES)})")


def run_stage(name: str, tables: Mapping[str, Stored], path: str | Path | None = None, **settings: Any) -> Stored:
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
    path: str | Path,
    until: str | None = None,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    starting: Callable[[str], None] | None = None,
) -> dict[str, Stored]:
    """Every stage's table for one run config, in chain order (up to and including *until*).

    *settings* maps a stage name to keyword settings of its function; *starting* hears each
    stage's name as it starts (progress on a terminal).
    """
    tables: dict[str, Stored] = {}
    for step in STAGES:
        if starting is not None:
            starting(step.name)
        tables[step.name] = run_stage(step.name, tables, path, **(settings or {}).get(step.name, {}))
        if step.name == until:
            break
    return tables


def partition_key(path: str | Path) -> str:
    """The key a run config's tables are stored under: its file stem (also the Dagster partition)."""
    return Path(path).stem


def megatron_headline(said: Mapping[str, Any], priced: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """The report's Megatron-LM lines: the flags that run as they stand first (the plan's, or the
    fastest plan Megatron-Core can say, with its cost and, *priced*, its iteration: `plan_iterations`'
    `megatron_iteration`); the plan's own layout alone, when Megatron cannot say its recompute, marked
    as not runnable (`balance.megatron_text` says why)."""
    if not said.get("layout"):
        return []
    lines = []
    if said.get("flags"):
        lines.append(("Megatron-LM", f"`{said['flags']}`"))
    alternative = said.get("alternative")
    if said.get("flags_of") == "alternative" and alternative:
        lines.append(
            (
                "Megatron-LM flags are",
                f"the fastest plan it can say ({alternative['setting']}), {alternative['slower_by']:.2%} slower by the "
                "layers' schedule" + (f": iteration {priced['seconds']:,.3f} s" if priced else ""),
            )
        )
    if said.get("layout_only"):
        lines.append(("the plan's own layout, NOT runnable alone (no recompute)", f"`{said['layout_only']}`"))
    if said.get("replaces_note") and (said.get("flags") or said.get("layout_only")):
        lines.append(("pasting the layout", said["replaces_note"]))
    if said.get("note"):
        # the note says why the plan is not said, or, beside the plan's own flags, what to do with them (`the plan
        # recomputes nothing: drop every --recompute-* flag the launch has`), which the report called
        # "Megatron-LM cannot say the plan" until session 28
        own = said.get("flags") and said.get("flags_of") != "alternative"
        lines.append(("with these flags" if own else "Megatron-LM cannot say the plan", said["note"]))
    return lines


def torchtitan_headline(said: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The report's torchtitan lines (a torchtitan run's plan): the job TOML to paste, as a TOML block
    (`balance.torchtitan_plan`; a release configured in Python: its config lines, a Python block), or why it
    is not said."""
    if not said.get("lines"):
        return [("torchtitan", said["note"])] if said.get("note") else []
    python = said.get("format") == "python"
    what, fence = ("torchtitan config (Python)", "python") if python else ("torchtitan job TOML", "toml")
    key = what if said.get("recompute_expressible") else f"{what}, the plan's split only, NOT runnable alone"
    block = "\n".join(["", "", f"  ```{fence}", *(f"  {line}" for line in said["lines"]), "  ```"])
    return [(key, block)] + ([("torchtitan cannot say the plan", said["note"])] if said.get("note") else [])
