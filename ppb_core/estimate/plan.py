"""A balancer plan re-evaluated by the memory and time models, one evaluation per pipeline stage.

`plan_stages` places each layer and recomputes it as the plan says (`ppb_core.tables.report`
makes the report's table of it); `plan_iterations` prices a plan's iteration in seconds;
`plan_overrun_mb` says how far a plan's fullest stage is over its memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.memory import (
    MemoryModel,
    StagePeak,
    run_combined_steps,
    run_in_flight,
    run_in_flight_vectors,
    stage_peaks,
)
from ppb_core.model.kinds import WHOLE
from ppb_core.model.placement import CellOptions, model_cell_options, place_plan
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import BODY, HEAD, TAIL, LayerWalk
from ppb_core.payload.describe import describe
from ppb_core.payload.postprocess import combine, time_unit
from ppb_core.timing.iteration import batch_loading, run_iteration
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import MB


@dataclass(frozen=True)
class StageEvaluation:
    """One stage of a plan as the memory and time models see it."""

    peak: StagePeak  # the memory model's peak (the backward's working set included)
    options: dict[str, int]  # body layers under each option
    forward_ms: float  # one micro-batch through the stage, every chunk
    backward_ms: float  # recomputation included
    models: str  # what the stage holds of each sub-model, e.g. "vit HEAD + 7 · llm HEAD + 7"


def _tail_words(kind: Any) -> tuple[str, ...]:
    """What a TAIL layer is, as a stage holds it: the TAIL (the loss), or the parts Megatron-Core's standalone
    MTP places apart (`kinds.standalone_parts`): the final norm and the MTP layers. Until session 34 every part
    read "TAIL", so a DualPipeV stage holding the MTP layers apart from the loss seemed to hold the loss too."""
    if getattr(kind, "part", WHOLE) == WHOLE:
        return ("TAIL",)
    return tuple(
        word
        for word, held in (("norm", kind.has_final_norm), ("MTP", kind.has_mtp_modules), ("TAIL", kind.has_output))
        if held
    )


def stage_models(placed: LayerWalk) -> list[str]:
    """Per stage, what each sub-model has there: "vit HEAD + 7 · llm 7 + TAIL" (body layers between its ends;
    "norm" and "MTP" for the parts of a TAIL Megatron-Core's standalone MTP places apart from the loss)."""
    held: list[dict[str, tuple[list[int], list[str]]]] = [{} for _ in range(placed.stages)]
    for layer in placed:
        ends, tail = held[layer.stage].setdefault(layer.model_name, ([0, 0], []))
        if layer.node == TAIL:
            tail += [word for word in _tail_words(layer.kind) if word not in tail]
        else:
            ends[{HEAD: 0, BODY: 1}[layer.node]] += 1
    order = ("norm", "MTP", "TAIL")
    return [
        " · ".join(
            f"{model} "
            + " + ".join(p for p in ("HEAD" if h else "", str(b) if b else "", *sorted(tail, key=order.index)) if p)
            for model, ((h, b), tail) in stage.items()
        )
        for stage in held
    ]


def plan_stages(
    run: RunConfig,
    cell_options: Sequence[Sequence[Mapping[str, int]]],
    by_model: Mapping[str, CellOptions] | None = None,
    mtp_cell: tuple[int, int] | None = None,
) -> list[StageEvaluation]:
    """Each stage of a plan as the memory and time models see it.

    *cell_options* [chunk][stage] maps options to body layer counts (the balancer's cells). Each
    layer is evaluated where the plan puts it, under the option its position in the cell gets;
    memory is the memory model's stage peak (with the backward's working set, which SAPP's
    descriptions do not count; the device limit is its memory less what the run config reserves).
    *by_model* places each sub-model on its own (`model.placement.model_cell_options`), as
    combined bodies need. *mtp_cell*: the plan runs the MTP layers there, apart from the loss.
    """
    par = run.parallel
    placed, chosen = place_plan(run, cell_options, by_model, mtp_cell)
    held = stage_models(placed)
    memory, times = MemoryModel(run), TimeModel(run)
    device = run.device
    peaks = stage_peaks(
        memory,
        placed,
        run_in_flight(run),
        device.profile().memory_mb * MB,
        device.reserved * MB,
        option_of=lambda layer: chosen[layer],
        vectors=run_in_flight_vectors(run),
        steps=run_combined_steps(run),
    )
    forward = [0.0] * par.pp
    backward = [0.0] * par.pp
    for layer in placed:
        state, switches = memory.option_state(layer, chosen.get(layer, "NONE"))
        f, b = times.layer_times(layer, state, switches)
        forward[layer.stage] += f
        backward[layer.stage] += b
    if run.framework == "megatron" and run.timing.batch_broadcast:  # get_batch's, as the iteration adds them
        for (_, stage), seconds in batch_loading(run, placed.layers, times.links).items():
            forward[stage] += seconds * 1e3
    evaluations = []
    for peak in peaks:
        counts = dict.fromkeys(OPTIONS, 0)
        for layer, option in chosen.items():
            if layer.stage == peak.stage:
                counts[option] += 1
        evaluations.append(StageEvaluation(peak, counts, forward[peak.stage], backward[peak.stage], held[peak.stage]))
    return evaluations


def sized_like(run: RunConfig, given: Mapping[str, Any]) -> RunConfig:
    """The run with the pipeline sizes a plan was solved for (its `input`: stages, micro-batches,
    interleave, schedule), which flags may have changed from the run config's."""
    par = run.parallel
    stages, chunks = int(given.get("stages", par.pp)), int(given.get("interleave", par.vpp))
    schedule = str(given.get("schedule", par.schedule))
    if chunks > 1 and schedule == "1f1b":
        schedule = "interleaved"
    group = given.get("microbatch_group_size_per_vp_stage")  # the plan's (`BalanceInput.group`)
    parallel = par.model_copy(
        update={
            # the run's layout places its layers at its own sizes; at others (`ppb balance -i 1` of a run laid out
            # in 2 chunks) the plan's cells place them, and a layout of other sizes was refused as a bad input
            "layout": par.layout if (stages, chunks) == (par.pp, par.vpp) else None,
            "pp": stages,
            "vpp": chunks,
            "schedule": schedule,
            "world_size": None,
            "microbatch_group_size_per_vp_stage": None if group is None else int(group),
        }
    )
    training = run.training.model_copy(
        update={"micro_batches": int(given.get("micro_batches", run.training.micro_batches))}
    )
    return run.model_copy(update={"parallel": parallel, "training": training})


def plan_iterations(run: RunConfig, plan: Mapping[str, Any]) -> dict[str, Any]:
    """A balancer result's iteration in seconds, beside its best uniform baseline's.

    `iteration` prices the plan's cells, `baseline_iteration` the uniform split under the best
    feasible baseline's option (`ppb_core.timing.iteration.run_iteration`), and `megatron_iteration`,
    where the flags printed for Megatron-LM are the fastest plan it can say rather than the plan, that one.
    """
    sized = sized_like(run, plan.get("input", {}))
    times, memory = TimeModel(sized), MemoryModel(sized)
    out: dict[str, Any] = {}
    bodies = plan.get("input", {}).get("bodies", [])

    mtp_cell = plan.get("input", {}).get("mtp_cell")  # the MTP layers apart from the loss (standalone)

    def priced(plan_cells: Sequence[Sequence[Mapping[str, Any]]], apart: Sequence[int] | None = None) -> dict[str, Any]:
        cells = [[dict(cell["options"]) for cell in row] for row in plan_cells]
        by_model = model_cell_options(plan_cells, bodies)
        at = None if apart is None else (int(apart[0]), int(apart[1]))
        return run_iteration(sized, cells, times, memory, by_model, at).to_json()

    if plan.get("cells"):
        out["iteration"] = priced(plan["cells"], mtp_cell)
    said = plan.get("megatron") or {}
    alternative = said.get("alternative") or {}
    if run.framework == "megatron" and said.get("flags_of") == "alternative" and alternative.get("cells"):
        # the plan's recompute is not Megatron-Core's to say: what its printed flags run, priced the same way
        out["megatron_iteration"] = priced(alternative["cells"], alternative.get("mtp_cell"))
    best = plan.get("best_baseline")
    if best:
        baseline = next(b for b in plan["baselines"] if b["option"] == best)
        # no mtp_cell: the baselines are always the fused problem's, MTP with the loss (`mtp_apart.faster_placement`)
        out["baseline_iteration"] = {"option": best, **priced(baseline["cells"])}
    return out


def iteration_price(run: RunConfig) -> Callable[[Mapping[str, Any], Sequence[Sequence[Mapping[str, Any]]]], float]:
    """A plan's iteration in seconds for *run*, given its problem's sizes (a balance input's
    `describe()`) and its cells (`balance.outputs.cells`), as `plan_iterations` prices a result's
    `iteration`: what `balance.report` compares a plan with its best uniform split by
    (`balance.faster_uniform`). The models of each size are built once."""
    held: dict[str, tuple[RunConfig, TimeModel, MemoryModel]] = {}

    def price(given: Mapping[str, Any], plan_cells: Sequence[Sequence[Mapping[str, Any]]]) -> float:
        key = repr(sorted((k, repr(v)) for k, v in given.items() if k != "bodies"))
        if key not in held:
            sized = sized_like(run, given)
            held[key] = (sized, TimeModel(sized), MemoryModel(sized))
        sized, times, memory = held[key]
        options = [[dict(cell["options"]) for cell in row] for row in plan_cells]
        by_model = model_cell_options(plan_cells, given.get("bodies", []))
        apart = given.get("mtp_cell")
        at = None if apart is None else (int(apart[0]), int(apart[1]))
        return run_iteration(sized, options, times, memory, by_model, at).seconds

    return price


def result_peaks(
    run: RunConfig, given: Mapping[str, Any], plan_cells: Sequence[Sequence[Mapping[str, Any]]]
) -> list[StagePeak]:
    """Each stage's peak of a balancer plan (its problem's sizes *given*, a balance input's `describe()`,
    and its cells) as the memory model evaluates it layer by layer (`plan_stages`, as `ppb check` does)."""
    sized = sized_like(run, given)
    cells = [[dict(cell["options"]) for cell in row] for row in plan_cells]
    by_model = model_cell_options(plan_cells, given.get("bodies", []))
    apart = given.get("mtp_cell")
    at = None if apart is None else (int(apart[0]), int(apart[1]))
    return [stage.peak for stage in plan_stages(sized, cells, by_model, at)]


def plan_overrun_mb(run: RunConfig) -> Callable[[Mapping[str, Any], Sequence[Sequence[Mapping[str, Any]]]], float]:
    """How many MB a plan's fullest stage needs beyond its problem's memory (`memory_mb` of a balance
    input's `describe()`) when the memory model evaluates it layer by layer (`result_peaks`, as `ppb check`
    does: its peak and what the caching allocator reserves beyond it, `StagePeak.fit_bytes`); negative where
    every stage fits. What `balance.fitting.fitting_placement` holds a plan to."""

    def overrun(given: Mapping[str, Any], plan_cells: Sequence[Sequence[Mapping[str, Any]]]) -> float:
        return max(map(_fit_mb, result_peaks(run, given, plan_cells))) - float(given["memory_mb"])

    return overrun


def with_stage_peaks(run: RunConfig, result: Mapping[str, Any]) -> dict[str, Any]:
    """A balance result whose stages say their peak as `ppb check` prices the same plan: `peak_mb` (the memory
    model's, what the run config reserves left out) and the `moment` that sets it, beside `memory_mb`, the
    balancer's own charge. The charge is not the peak: its descriptions truncate each term to whole MB (SAPP's
    rule, `payload.describe.mb`), a few MB under on the loss's stage (configs/llama3-8b.yaml stage 3: 13,830
    against 13,833.2), and its constant is the run's largest working set on every stage (the loss's 1,066 MB
    where a stage of bodies holds 288 at most), over elsewhere. Each uniform split gets its fullest stage's peak
    the same way (`baselines[].peak_mb` beside `peak_memory_mb`). A torchtitan stage under FSDP2 or async TP also
    says what it needs beyond its allocated peak (`allocator_mb`: the allocator's FSDP2 pools, async TP's
    symmetric-memory workspace), which its fit counts (`plan_overrun_mb`). A result without a plan is given back as
    it is."""
    out = dict(result)
    if not result.get("cells") or "stages" not in result:
        return out
    given = result["input"]
    peaks = result_peaks(run, given, result["cells"])
    out["stages"] = [
        {
            **row,
            "peak_mb": _peak_mb(peak),
            "moment": peak.moment,
            # torchtitan FSDP2 or async TP: what the stage needs beyond the peak, which the fit counts
            **({"allocator_mb": peak.allocator_bytes / MB} if peak.allocator_bytes else {}),
        }
        for row, peak in zip(result["stages"], peaks, strict=True)
    ]
    out["baselines"] = [
        {**row, "peak_mb": max(map(_peak_mb, result_peaks(run, given, row["cells"])))} if row.get("cells") else row
        for row in result.get("baselines", [])
    ]
    return out


def _peak_mb(peak: StagePeak) -> float:
    """A stage's peak in MB, what the run config reserves left out (as `ppb check` prints it)."""
    return (peak.peak_bytes - peak.reserved_bytes) / MB


def _fit_mb(peak: StagePeak) -> float:
    """What a stage needs of the device's usable memory in MB (`StagePeak.fit_bytes`, as `ppb check` fits it)."""
    return (peak.fit_bytes - peak.reserved_bytes) / MB


def time_unit_s(run: RunConfig, given: Mapping[str, Any]) -> float:
    """The balancer's time unit for this run, in seconds, for the sizes *given* (a balance input's
    `describe()`): what `payload.postprocess.scale` divided the descriptions' times by, the forward
    time of the first body the balancer sees; with `ppb.combined` that body may be a combined one,
    whose forward time sums one layer of each part."""
    sized = sized_like(run, given)
    described = combine(describe(sized, MemoryModel(sized), TimeModel(sized)), sized.ppb.combined, sized.source)
    unit_ms = time_unit(described)
    if unit_ms is None:
        raise ValueError(f"{run.source}: no body layer with a forward time")
    return unit_ms / 1e3


def iteration_headline(iterations: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The report's lines for a plan's iteration and its baseline's (`plan_iterations`), in seconds."""
    lines = []
    for key, label in (("iteration", "iteration"), ("baseline_iteration", "best uniform split")):
        if key in iterations:
            it = iterations[key]
            option = f"{it['option']}: " if "option" in it else ""
            lines.append(
                (
                    label,
                    f"{option}{it['seconds']:,.3f} s, {it['tokens_per_second_per_device']:,.0f} tokens/s per device, "
                    f"MFU {100 * it['mfu']:.1f}%, HFU {100 * it['hfu']:.1f}%",
                )
            )
    return lines


def speedup_words(plan: Mapping[str, Any]) -> str:
    """The gain over the best uniform split, by the iterations the lines above it give (P2P, DP
    reduction and optimizer included) and by the layers' schedule the balancer minimised (`speedup`);
    the report gave the latter alone under the former's seconds (1.160× beside 3.303 s and 3.798 s)."""
    if not plan.get("speedup"):
        return "none"
    best = plan.get("best_baseline")
    ours, theirs = plan.get("iteration", {}).get("seconds"), plan.get("baseline_iteration", {}).get("seconds")
    if not ours or not theirs:
        return f"{plan['speedup']:.3f}× ({best})"
    return f"{theirs / ours:.3f}× by the iteration ({best}); {plan['speedup']:.3f}× by the layers' schedule alone"
