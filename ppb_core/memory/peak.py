"""A stage's peak memory: the largest of the moments its framework reaches, against the device.

Each moment is what is alive then (docs/memory.md, "Stage peak"):

* **backward** (as the first backward runs at the end of warm-up): static memory (every layer of
  the stage, HEAD and TAIL included, and the GEMM libraries' workspaces,
  `FrameworkRules.workspace_bytes`) + activations × micro-batches in flight of each layer's
  chunk + kept buffers with that many in flight + the largest working set of one layer's
  backward (recompute, gradients, the framework's gathered parameters, gradient buffers and the
  workspaces it holds once per stage);
* **loss** (the stage holding a TAIL): the same kept memory + what the loss's forward and
  backward hold beyond the TAIL's kept activations (`FrameworkRules.loss_bytes`);
* **reduction** (where the framework's gradient reduction is a moment of its own: torchtitan's
  FSDP2 under PP, `perform_reduce_grad` after the last backward, nothing in flight): the step's
  static memory + what the reduction holds beyond it (`FrameworkRules.reduction_bytes`);
* **optimizer** (the step, every micro-batch's activations freed): the static memory held then;

each + the device's reserved memory. The peak is the largest; `moment` names it.

Whether the stage fits (`fits`, `fit_bytes`) adds what the caching allocator reserves beyond that peak where
ppb prices it (`allocator_bytes`: torchtitan's FSDP2 pools, `ppb_core.memory.reserved`) and, under torchtitan's
async TP, torch's symmetric-memory workspace (`symm_workspace_bytes`, `ppb_core.memory.symm_mem`); 0 elsewhere.

Micro-batches in flight come from `ppb_core.schedules` (owned by the balancer): where a stage runs
several chunks whose layers keep different amounts per micro-batch, its peak is the largest over
every per-chunk count vector the schedule reaches (`in_flight_vectors`), as the balancer charges
it. `stage_peaks` also takes the counts as plain numbers so tests can state them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ppb_core.config.run import RunConfig
from ppb_core.dominance import undominated
from ppb_core.errors import InputError
from ppb_core.memory.combined import ChunkNodes, chunk_nodes, node_bytes, step_extra_bytes
from ppb_core.memory.frameworks import te_offload
from ppb_core.memory.graphs import graph_buffer_bytes, graphed_layers
from ppb_core.memory.reserved import priced, reserved_pools
from ppb_core.memory.symm_mem import async_tp, workspace_bytes
from ppb_core.model.kinds import BodyKind, HeadKind, TailKind
from ppb_core.model.walk import BODY, KindSlot, Layer, LayerWalk
from ppb_core.schedules import (
    backward_vectors,
    combined_in_flight_vectors,
    combined_steps,
    in_flight_vectors,
    micro_batches_in_flight,
    stage_orders,
)

if TYPE_CHECKING:  # stage_peaks is given a model: the model is built above this module (model.py)
    from ppb_core.memory.model import MemoryModel


MOMENTS: tuple[str, ...] = ("backward", "loss", "first_loss", "reduction", "optimizer")
ADAM_MOMENT_BYTES = 8  # exp_avg and exp_avg_sq, fp32, created at the first optimizer step


@dataclass(frozen=True)
class StagePeak:
    stage: int
    body_layers: int
    in_flight: tuple[int, ...]  # micro-batches in flight of each chunk
    static_bytes: float
    activation_bytes: float  # activations × micro-batches in flight
    buffer_bytes: float
    working_bytes: float  # the largest working set of one layer's backward
    reserved_bytes: float
    device_bytes: float
    loss_bytes: float = 0.0  # what the loss adds beyond the TAIL's kept activations (the TAIL's stage)
    step_static_bytes: float | None = None  # static memory at the optimizer step (None: static_bytes)
    holds_tail: bool = False
    # what the gradient reduction holds beyond the step's static memory (None: no moment of its own)
    reduction_bytes: float | None = None
    # what the loss's first call adds once, in the first iteration (`FrameworkRules.first_call_bytes`), and the
    # static memory the first optimizer step creates (Adam's moments), not yet there then
    first_call_bytes: float = 0.0
    first_step_bytes: float = 0.0
    # what PyTorch's caching allocator reserves beyond the allocated peak, which the run must also find on the
    # device: torchtitan's FSDP2 stream pools (`memory.reserved.ReservedPools.beyond_allocated_bytes`); 0 where
    # ppb prices no pools (Megatron and MindFormers, whose fit stays the allocated peak); with torchtitan's async TP
    # it also holds torch's symmetric-memory workspace, outside the caching allocator (`symm_workspace_bytes`)
    allocator_bytes: float = 0.0
    # of `allocator_bytes`, async TP's symmetric-memory workspace (`ppb_core.memory.symm_mem`); 0 without async TP
    symm_workspace_bytes: float = 0.0

    @property
    def step_bytes(self) -> float:
        """Static memory at the optimizer step."""
        return self.static_bytes if self.step_static_bytes is None else self.step_static_bytes

    @property
    def kept_bytes(self) -> float:
        """Static memory, activations and kept buffers at the stage's most micro-batches in flight."""
        return self.static_bytes + self.activation_bytes + self.buffer_bytes

    @property
    def moments(self) -> dict[str, float]:
        """Bytes at each moment the stage reaches, reserved memory included."""
        step = self.step_bytes
        found = {"backward": self.kept_bytes + self.working_bytes + self.reserved_bytes}
        if self.holds_tail:
            found["loss"] = self.kept_bytes + self.loss_bytes + self.reserved_bytes
            if self.first_call_bytes:
                first = self.kept_bytes - self.first_step_bytes + self.loss_bytes + self.first_call_bytes
                found["first_loss"] = first + self.reserved_bytes
        if self.reduction_bytes is not None:
            found["reduction"] = step + self.reduction_bytes + self.reserved_bytes
        found["optimizer"] = step + self.reserved_bytes
        return found

    @property
    def moment(self) -> str:
        """The moment that sets the peak (the first listed on a tie)."""
        moments = self.moments
        return max(moments, key=lambda name: (moments[name], -MOMENTS.index(name)))

    @property
    def peak_bytes(self) -> float:
        return max(self.moments.values())

    @property
    def fit_bytes(self) -> float:
        """What the stage needs of the device: its peak and what the allocator reserves beyond it."""
        return self.peak_bytes + self.allocator_bytes

    @property
    def fits(self) -> bool:
        return self.fit_bytes <= self.device_bytes

    def terms(self) -> dict[str, float]:
        """The terms of the peak at its moment, reserved memory aside (`memory.calibration.TERMS`)."""
        moment = self.moment
        if moment in ("optimizer", "reduction"):
            held = (self.reduction_bytes or 0.0) if moment == "reduction" else 0.0
            return {"static": self.step_bytes + held, "activations": 0.0, "buffers": 0.0, "working": 0.0}
        if moment == "first_loss":
            extra = self.loss_bytes + self.first_call_bytes
        else:
            extra = self.loss_bytes if moment == "loss" else self.working_bytes
        first = self.first_step_bytes if moment == "first_loss" else 0.0
        return {
            "static": self.static_bytes - first,
            "activations": self.activation_bytes,
            "buffers": self.buffer_bytes,
            "working": extra,
        }


def configured_option(memory: MemoryModel, model_name: str) -> str:
    """The option a run config asks of most body layers: FULL where `training.recompute` fully
    recomputes every layer, SLCT where it recomputes part of one, else NONE (`configured_options`
    gives each layer's where the framework's words recompute some layers fully)."""
    recompute = memory.run.recompute
    if recompute.full in ("all", "uniform"):
        return "FULL"
    selective = recompute.selective or 0 in memory.configured_switches(model_name).values()
    return "SLCT" if selective else "NONE"


def configured_options(run: RunConfig, layer_walk: LayerWalk) -> dict[Layer, str]:
    """Each body layer's option as the run's `training.recompute` asks it, chunk by chunk.

    Megatron's `block` method recomputes the first layers of every chunk; torchtitan's every
    N-th block counts the blocks a stage's rank builds across its chunks in order
    (`ppb_core.config.recompute.Recompute.chunk_options`).
    """
    recompute = run.recompute
    selective = {
        name: "SLCT" if recompute.modules or 0 in run.switches(name).values() else "NONE" for name in run.model_names
    }
    options: dict[Layer, str] = {}
    for stage in range(layer_walk.stages):
        first = 0
        for chunk in range(layer_walk.chunks):
            body = [layer for layer in layer_walk.in_cell(chunk, stage) if isinstance(layer.kind, BodyKind)]
            for layer, option in zip(body, recompute.chunk_options(len(body), first), strict=True):
                options[layer] = "FULL" if option == "FULL" else selective[layer.model_name]
            first += len(body)
    return options


def _beside(ordered: Sequence[Layer], position: int, step: int) -> KindSlot | None:
    """The layer that runs just before (*step* −1) or after (+1) the one at *position* in its cell."""
    layer, other = ordered[position], position + step
    if 0 <= other < len(ordered) and (ordered[other].stage, ordered[other].chunk) == (layer.stage, layer.chunk):
        found = ordered[other]
        return KindSlot(found.model_name, found.node, found.kind, 1)
    return None


def _full_group(memory: MemoryModel) -> int:
    """Layers Megatron's `uniform` method checkpoints as one (1 for every other form)."""
    recompute = memory.run.recompute
    return recompute.num_layers or 1 if recompute.full == "uniform" else 1


def stage_peaks(
    memory: MemoryModel,
    layer_walk: LayerWalk,
    in_flight: Sequence[Sequence[int]],
    device_bytes: float,
    reserved_bytes: float = 0.0,
    option_of: Callable[[Layer], str] | None = None,
    vectors: Sequence[Sequence[Sequence[int]]] | None = None,
    steps: Sequence[Sequence[tuple[Sequence[int], int, int]]] | None = None,
) -> list[StagePeak]:
    """Each stage's peak with *in_flight* [chunk][stage] micro-batches in flight, by moment.

    *vectors*, per stage, lists every per-chunk count at which the stage may peak (default: the
    one of *in_flight*); the largest kept memory among them is the stage's. *steps*, per stage,
    lists the combined 1F1B steps of Megatron's `--overlap-moe-expert-parallel-comm` (the counts as
    a step starts, its forward's chunk, its backward's: `schedules.combined_steps`), each charged
    at its start's kept memory and what the step adds within (`memory.combined`). Where a chunk's first
    backward makes static memory (torchtitan's FSDP2 accumulators under PP), the schedule's own order is
    walked in place of *vectors* (`_first_backward_walk`). *option_of* gives a
    body layer's option (default: `configured_options`, what the run's recompute asks of each).
    Identical layers in one cell are evaluated once. Where Megatron's `uniform` method checkpoints
    N layers as one, a cell's fully recomputed layers keep ⌈n/N⌉ inputs and a backward rebuilds N.
    """
    if option_of is None:
        options = configured_options(memory.run, layer_walk)
        option_of = options.__getitem__
    groups: Counter = Counter()
    full_in_cell: Counter = Counter()
    ordered = list(layer_walk)
    beside = memory.rules.uses_neighbours(memory.setup)  # only FSDP2's backward depends on them
    for position, layer in enumerate(ordered):
        option = option_of(layer) if isinstance(layer.kind, BodyKind) else None
        before, after = (_beside(ordered, position, step) for step in (-1, 1)) if beside else (None, None)
        groups[(layer.stage, layer.chunk, layer.model_name, layer.node, layer.kind, option, before, after)] += 1
        if option == "FULL":
            full_in_cell[(layer.chunk, layer.stage)] += 1
    in_stage: dict[int, list[Layer]] = {}  # each stage's layers in the walk's (forward) order
    for layer in ordered:
        in_stage.setdefault(layer.stage, []).append(layer)
    cells: dict[tuple[int, int], set] = {}  # the kinds of each (stage, chunk): its pipeline buffers
    for stage, chunk, _model, _node, kind, *_ in groups:
        cells.setdefault((stage, chunk), set()).add(kind)
    group_size = _full_group(memory)
    chunks = len(in_flight)
    stages = layer_walk.stages
    if vectors is None:
        vectors = [[tuple(in_flight[chunk][stage] for chunk in range(chunks))] for stage in range(stages)]
    extras = [[0.0] * len(vectors[stage]) for stage in range(stages)]
    made_later = _made_by_first_backward(memory, groups) if steps is None else {}
    walked = _first_backward_walk(memory, stages, chunks, made_later) if made_later else None
    # at each vector, the static memory a chunk's first backward makes that is not there yet (negative)
    unmade = [[0.0] * len(vectors[stage]) for stage in range(stages)]
    if walked is not None:  # torchtitan's FSDP2 accumulators under PP: charged from each chunk's first backward
        vectors, unmade = walked
        extras = [[0.0] * len(vectors[stage]) for stage in range(stages)]
    if steps is not None:
        vectors = [[*vectors[stage], *(tuple(start) for start, _, _ in steps[stage])] for stage in range(stages)]
        unmade = [[*unmade[stage], *(0.0 for _ in steps[stage])] for stage in range(stages)]
        extras = [
            [*extras[stage], *_step_extras(memory, layer_walk, option_of, stage, steps[stage])]
            for stage in range(stages)
        ]
    totals = {
        stage: {"static": 0.0, "step": 0.0, "work": 0.0, "loss": 0.0, "deferred": 0.0, "body": 0, "tail": False}
        | {"first_call": 0.0, "first_step": 0.0}
        for stage in range(stages)
    }
    # moments made at the first step (torch, TE, apex), unless they exist before it (a resumed run, or Megatron-FSDP's
    # fsdp_dtensor load: `Training.optimizer_states_at_start`)
    training = memory.run.training
    adam = training.optimizer in ("adam", "adamw") and not training.optimizer_states_at_start
    candidates = [len(vectors[stage]) for stage in range(stages)]  # the peak vector is one of these
    attention = _attention_workspaces(memory, groups)
    backward_starts = _backward_starts(memory, stages, chunks) if attention and steps is None else None
    if backward_starts is not None:  # kept memory as each backward starts, for the attention workspaces
        vectors = [[*vectors[stage], *(v for v, _ in backward_starts[stage])] for stage in range(stages)]
        extras = [[*extras[stage], *(0.0 for _ in backward_starts[stage])] for stage in range(stages)]
        unmade = [[*unmade[stage], *(0.0 for _ in backward_starts[stage])] for stage in range(stages)]
    cell_workspace: dict[tuple[int, int], float] = {}  # a body's working set + its attention workspace
    tail_held: dict[tuple[int, int], float] = {}  # the TAIL's kept memory of one micro-batch
    # where the framework frees the TAIL's micro-batch before the layers under it run their backward
    # (`FrameworkRules.held_after_loss_bytes`): what of it stays, and each cell's largest working set
    # of a layer not a TAIL
    tail_left: dict[tuple[int, int], float] = {}
    after_loss: dict[tuple[int, int], float] = {}
    # activations and buffers at each candidate vector of the stage
    dynamic = {stage: [[0.0, 0.0] for _ in vectors[stage]] for stage in range(stages)}
    resident: dict[int, float] = {}  # one layer's offloaded groups, held while micro-batches are in flight
    for (stage, chunk, model_name, node, kind, option, before, after), count in groups.items():
        layer = Layer(model_name, node, kind, 0, chunk, stage)
        state, switches = memory.option_state(layer, option or "NONE")  # HEAD and TAIL have one state
        kept_count, group = count, 1
        if option == "FULL" and group_size > 1:  # Megatron uniform: one input per group of the cell
            full = full_in_cell[(chunk, stage)]
            kept_count, group = count * math.ceil(full / group_size) / full, group_size
        held = memory.state_memory(layer, state, switches)  # what dynamic_bytes gives, looked up once
        static = memory.static_breakdown(layer)
        resident[stage] = max(resident.get(stage, 0.0), held.offloaded_bytes)
        for vector, sums in zip(vectors[stage], dynamic[stage], strict=True):
            sums[0] += kept_count * held.activation_bytes * vector[chunk]
            sums[1] += count * held.buffers.at(vector[chunk])
            if not vector[chunk]:  # what the layer's modules keep while none of its micro-batches is in flight
                sums[1] += count * static.idle_bytes
        total = totals[stage]
        total["static"] += count * static.total
        total["step"] += count * static.step_bytes
        total["first_step"] += count * ADAM_MOMENT_BYTES * static.optimizer_states if adam else 0.0
        neighbours = (before, after) if beside else None
        working = memory.working_extra_bytes(
            layer, state, switches, 2, on_saved=True, group=group, neighbours=neighbours
        )
        if not isinstance(kind, TailKind):  # in the TAIL's cell its backward runs after the loss's
            cell = (stage, chunk)
            after_loss[cell] = max(after_loss.get(cell, 0.0), working)
        else:
            total["work"] = max(total["work"], working)
        if attention.get(kind):
            cell = (stage, chunk)
            during = memory.attention_backward_bytes(layer, state, switches, working, 2, group, neighbours)
            cell_workspace[cell] = max(cell_workspace.get(cell, 0.0), during)
        if isinstance(kind, TailKind) and kind.has_output:  # a standalone MTP's MTP chunk has no loss
            one = held.activation_bytes + held.buffers.at(1) - held.buffers.at(0)
            tail_held[(stage, chunk)] = tail_held.get((stage, chunk), 0.0) + count * one
            left = memory.held_after_loss_bytes(layer, held)
            if left is not None:
                tail_left[(stage, chunk)] = tail_left.get((stage, chunk), 0.0) + count * left
            total["tail"] = True
            total["loss"] = max(total["loss"], memory.loss_bytes(layer, before))
            total["first_call"] = max(total["first_call"], memory.first_call_bytes(layer))
            deferred = memory.rules.deferred_bytes(kind, memory.setup, memory.run.training.micro_batches)
            total["deferred"] = max(total["deferred"], deferred)
        if option is not None:
            total["body"] += count
    kinds_of: dict[int, set] = {stage: set() for stage in range(stages)}
    for stage, _chunk, _model, _node, kind, *_ in groups:
        kinds_of[stage].add(kind)
    for stage, held_bytes in resident.items():  # frameworks/offload.py: the margin and the reload window
        for vector, sums in zip(vectors[stage], dynamic[stage], strict=True):
            sums[1] += held_bytes if any(vector) else 0.0
    if memory.setup.cpu_offload_layers:  # TE's CPU offloading (frameworks/te_offload.py): what leaves the device
        for stage, layers in in_stage.items():
            relief = _cpu_offload_relief(memory, layers, option_of)
            for vector, sums in zip(vectors[stage], dynamic[stage], strict=True):
                sums[0] -= relief if any(vector) else 0.0
    counts: dict[int, Counter] = {stage: Counter() for stage in range(stages)}
    for (stage, _chunk, _model, _node, kind, *_), count in groups.items():
        counts[stage][kind] += count
    for stage, layers in counts.items():  # how the framework shares the stage's parameters out as a whole
        shared = memory.rules.stage_static_bytes(memory.setup, tuple(layers.items()))
        totals[stage]["static"] += shared
        totals[stage]["step"] += shared
    micro_batches = memory.run.training.micro_batches
    for (stage, chunk), cell_kinds in cells.items():
        for vector, sums in zip(vectors[stage], dynamic[stage], strict=True):
            sums[1] += memory.rules.pipeline_buffer_bytes(memory.setup, cell_kinds, micro_batches, vector[chunk])
        # at the optimizer step nothing is in flight: what each chunk holds then
        totals[stage]["step"] += memory.rules.pipeline_buffer_bytes(memory.setup, cell_kinds, micro_batches, 0)
    peaks = []
    for stage, total in totals.items():
        workspace = memory.rules.workspace_bytes(memory.setup, kinds_of[stage])  # once per device, always
        workspace += _graph_buffers(memory.run, groups, stage, vectors[stage])  # CUDA graphs' static buffers
        # the vector of the largest activations + buffers (on a tie, the first listed)
        index = max(
            range(candidates[stage]),
            key=lambda i: (sum(dynamic[stage][i]) + extras[stage][i] + unmade[stage][i], -i),
        )
        peak_kept = sum(dynamic[stage][index]) + extras[stage][index] + unmade[stage][index]
        working = total["work"]
        for (at, chunk), cell_working in after_loss.items():
            if at != stage:
                continue
            # in the TAIL's chunk a backward runs after the loss's and the TAIL's of its micro-batch,
            # which freed that micro-batch's TAIL (where the peak vector holds one)
            freed = _freed(tail_held, tail_left, (stage, chunk)) if vectors[stage][index][chunk] else 0.0
            working = max(working, cell_working - freed)
        if backward_starts is not None:
            # a chunk's attention workspace while its backward runs, with what is kept as it starts; in the
            # TAIL's chunk the loss's backward has freed that micro-batch's TAIL first
            for i, (_, chunk) in enumerate(backward_starts[stage], start=candidates[stage]):
                if (stage, chunk) in cell_workspace:
                    held = sum(dynamic[stage][i]) - _freed(tail_held, tail_left, (stage, chunk))
                    working = max(working, held + cell_workspace[(stage, chunk)] - peak_kept)
        elif cell_workspace:  # no schedule to follow (combined 1F1B): at the peak vector, no credit
            working = max(working, *(ws for (s, _), ws in cell_workspace.items() if s == stage), 0.0)
        peaks.append(
            StagePeak(
                stage=stage,
                body_layers=total["body"],
                in_flight=tuple(vectors[stage][index]),
                static_bytes=total["static"] + workspace + unmade[stage][index],
                activation_bytes=dynamic[stage][index][0] + extras[stage][index],
                buffer_bytes=dynamic[stage][index][1] + total["deferred"],  # held to the flush, not the step
                working_bytes=working,
                reserved_bytes=reserved_bytes,
                device_bytes=device_bytes,
                loss_bytes=total["loss"],
                step_static_bytes=total["step"] + workspace,
                holds_tail=total["tail"],
                reduction_bytes=memory.reduction_bytes(in_stage.get(stage, [])),
                first_call_bytes=total["first_call"],
                first_step_bytes=total["first_step"] if total["first_call"] else 0.0,
            )
        )
    if priced(memory):  # torchtitan FSDP2: what the stream pools reserve beyond each peak
        peaks = [_with_pools(memory, in_stage.get(peak.stage, []), peak) for peak in peaks]
    if async_tp(memory):  # torchtitan's async TP: its symmetric-memory workspace, beside the pools
        peaks = [_with_workspace(workspace_bytes(memory, in_stage.get(peak.stage, [])), peak) for peak in peaks]
    return peaks


def _with_workspace(workspace: float, peak: StagePeak) -> StagePeak:
    """The stage's peak charged async TP's symmetric-memory workspace (`memory.symm_mem`) in its fit."""
    allocator = peak.allocator_bytes + workspace
    return dataclasses.replace(peak, allocator_bytes=allocator, symm_workspace_bytes=workspace)


def _with_pools(memory: MemoryModel, layers: Sequence[Layer], peak: StagePeak) -> StagePeak:
    """The stage's peak charged what the allocator's pools reserve beyond it (`memory.reserved`)."""
    pools = reserved_pools(memory, layers, peak)
    return peak if pools is None else dataclasses.replace(peak, allocator_bytes=pools.beyond_allocated_bytes)


def _cpu_offload_relief(memory: MemoryModel, layers: Sequence[Layer], option_of: Callable[[Layer], str]) -> float:
    """Of a micro-batch's body activations on the stage, what TE's CPU offloading keeps off the device at the
    most it holds (`te_offload.held_bytes`), the decoder's layers in forward order."""
    kept, moved = [], []
    for layer in layers:
        if layer.node != BODY:
            continue
        held = memory.state_memory(layer, *memory.option_state(layer, option_of(layer)))
        kept.append(held.activation_bytes)
        moved.append(te_offload.offloaded_bytes(held))
    return sum(kept) - te_offload.held_bytes(kept, moved, memory.setup.cpu_offload_layers)


def _freed(tail_held: dict[tuple[int, int], float], tail_left: dict[tuple[int, int], float], cell: tuple) -> float:
    """What the loss's and the TAIL's backward of a micro-batch free in *cell* before its other layers'
    (`FrameworkRules.held_after_loss_bytes`; none where the framework frees none, or no TAIL is there)."""
    if cell not in tail_left:
        return 0.0
    return max(0.0, tail_held.get(cell, 0.0) - tail_left[cell])


def _graph_buffers(run: RunConfig, groups: Counter, stage: int, vectors: Sequence[Sequence[int]]) -> float:
    """The static buffers Megatron's CUDA graphs hold on *stage* for the run (`ppb_core.memory.graphs`)."""
    if run.timing.cuda_graph_impl == "none":
        return 0.0
    modules = run.timing.cuda_graph_modules
    per_chunk: Counter = Counter()
    hidden = 0
    for (at, chunk, _model, _node, kind, *_), count in groups.items():
        if at == stage and graphed_layers(kind, modules):
            per_chunk[chunk] += count * graphed_layers(kind, modules)
            hidden = max(hidden, kind.hidden_size)
    return graph_buffer_bytes(run, per_chunk, vectors, hidden)


def _attention_workspaces(memory: MemoryModel, groups: Counter) -> dict:
    """{layer kind: its attention backward's workspace} for the kinds that take one (none: empty)."""
    found = {}
    for stage, chunk, model_name, node, kind, *_ in groups:
        if kind not in found:
            found[kind] = memory.attention_workspace_bytes(Layer(model_name, node, kind, 0, chunk, stage))
    return {kind: bytes_ for kind, bytes_ in found.items() if bytes_ > 0}


def _made_by_first_backward(memory: MemoryModel, groups: Counter) -> dict[tuple[int, int], float]:
    """{(stage, chunk): the static memory its first backward of the step creates} where there is any
    (`FrameworkRules.first_backward_bytes`: torchtitan's FSDP2 accumulators under PP), scaled as static is."""
    made: dict[tuple[int, int], float] = {}
    for (stage, chunk, model_name, node, kind, *_), count in groups.items():
        layer = Layer(model_name, node, kind, 0, chunk, stage)
        found = memory.rules.first_backward_bytes(memory.parameters(layer), memory.setup) * memory.correction.static
        if found:
            made[(stage, chunk)] = made.get((stage, chunk), 0.0) + count * found
    return made


def _first_backward_walk(
    memory: MemoryModel, stages: int, chunks: int, made_later: dict[tuple[int, int], float]
) -> tuple[list[list[tuple[int, ...]]], list[list[float]]] | None:
    """Per stage, the micro-batches held per chunk at every moment of its order that can peak, each with
    what is not yet there of the static memory a chunk's first backward makes (negative): as each backward
    starts (its chunk's memory not made if it is the first) and, after a chunk's first backward, with it made
    and that micro-batch freed (within that backward the layers' accumulators grow as their activations go,
    so the larger is at an end). The static sums count it whole; these extras take off what is not yet
    made. None where the run's schedule cannot say (sizes it refuses)."""
    run = memory.run
    par = run.parallel
    try:
        moments = _first_backward_moments(
            par.schedule, stages, chunks, run.training.micro_batches, par.microbatch_group_size_per_vp_stage
        )
    except ValueError:
        return None
    vectors: list[list[tuple[int, ...]]] = []
    extras: list[list[float]] = []
    for stage, by_made in enumerate(moments):
        kept_vectors: list[tuple[int, ...]] = []
        unmade: list[float] = []
        for done, held_vectors in by_made:
            missing = -sum(made_later.get((stage, chunk), 0.0) for chunk in range(chunks) if chunk not in done)
            kept_vectors += held_vectors
            unmade += [missing] * len(held_vectors)
        vectors.append(kept_vectors)
        extras.append(unmade)
    return vectors, extras


@functools.lru_cache(maxsize=64)
def _first_backward_moments(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None
) -> tuple[tuple[tuple[frozenset[int], tuple[tuple[int, ...], ...]], ...], ...]:
    """Per stage, (the chunks whose first backward has run, the Pareto-maximal vectors held with those made) for
    every made set its order passes through (`_first_backward_walk`; at most chunks + 1): the schedule's alone,
    so a search's many plans of one schedule walk it once."""
    found_by_stage = []
    for order in stage_orders(schedule, stages, chunks, micro_batches, group):
        held = [0] * chunks
        made: set[int] = set()
        found: dict[tuple[tuple[int, ...], frozenset[int]], None] = {}
        for op in order:
            if op.kind == "F":
                held[op.chunk] += 1
                found[(tuple(held), frozenset(made))] = None
                continue
            found[(tuple(held), frozenset(made))] = None  # as the backward starts
            held[op.chunk] -= 1
            if op.chunk not in made:
                made.add(op.chunk)
                found[(tuple(held), frozenset(made))] = None
        by_made: dict[frozenset[int], list[tuple[int, ...]]] = {}
        for vector, done in found:
            by_made.setdefault(done, []).append(vector)
        # with the same made, the Pareto-maximal vectors are the ones that can peak
        found_by_stage.append(
            tuple(
                (done, tuple(vectors[i] for i in undominated([[-n for n in vector] for vector in vectors])))
                for done, vectors in by_made.items()
            )
        )
    return tuple(found_by_stage)


def _backward_starts(memory: MemoryModel, stages: int, chunks: int) -> list[list[tuple[tuple[int, ...], int]]] | None:
    """Per stage, the counts in flight as each chunk's backward starts (`schedules.backward_vectors`), or
    None where the run's schedule cannot say (sizes it refuses)."""
    run = memory.run
    try:
        par = run.parallel
        return backward_vectors(
            par.schedule, stages, chunks, run.training.micro_batches, par.microbatch_group_size_per_vp_stage
        )
    except ValueError:
        return None


def _chunk_nodes(
    memory: MemoryModel, layer_walk: LayerWalk, option_of: Callable[[Layer], str], stage: int, chunk: int
) -> ChunkNodes:
    """One cell's layers as the combined 1F1B schedule's nodes hold them, one micro-batch each."""
    head, bodies, tail = 0.0, [], None
    for layer in layer_walk.in_cell(chunk, stage):
        option = option_of(layer) if isinstance(layer.kind, BodyKind) else "NONE"
        held = memory.state_memory(layer, *memory.option_state(layer, option))
        if isinstance(layer.kind, HeadKind):
            head += held.activation_bytes + held.buffers.kept_bytes()
            continue
        stated = sum(t.bytes for t in held.terms)
        scale = held.activation_bytes / stated if stated else 0.0  # a memory correction scales them all
        named = [(t.op, t.bytes * scale) for t in held.terms]
        named += [(b.name, b.bytes) for b in held.buffers.terms if b.kept]
        if isinstance(layer.kind, TailKind):  # a cell may hold two parts of a split TAIL ('tm': norm and MTP)
            parts = node_bytes(named)
            tail = parts if tail is None else {node: tail[node] + parts[node] for node in tail}
        else:
            bodies.append(node_bytes(named))
    return chunk_nodes(head, bodies, tail)


def _step_extras(
    memory: MemoryModel,
    layer_walk: LayerWalk,
    option_of: Callable[[Layer], str],
    stage: int,
    steps: Sequence[tuple[Sequence[int], int, int]],
) -> list[float]:
    """What each combined 1F1B step of *stage* holds beyond its start (`memory.combined`)."""
    cells = {chunk: _chunk_nodes(memory, layer_walk, option_of, stage, chunk) for chunk in range(layer_walk.chunks)}
    return [step_extra_bytes(cells[forward], cells[backward]) for _, forward, backward in steps]


@functools.lru_cache(maxsize=256)
def _in_flight(
    schedule: str, stages: int, chunks: int, micro_batches: int, group: int | None = None
) -> tuple[tuple[int, ...], ...]:
    """The schedule's counts, once per size: simulating the op orders costs more than the layers' memory."""
    return tuple(tuple(row) for row in micro_batches_in_flight(schedule, stages, chunks, micro_batches, group))


def run_in_flight(run: RunConfig) -> list[list[int]]:
    """[chunk][stage] micro-batches in flight of the run's schedule."""
    par = run.parallel
    try:
        found = _in_flight(
            par.schedule, par.pp, par.vpp, run.training.micro_batches, par.microbatch_group_size_per_vp_stage
        )
        return [list(row) for row in found]
    except ValueError as err:
        raise InputError(run.source, "training.micro_batches", str(err)) from None


def run_in_flight_counts(run: RunConfig) -> list[int]:
    """Every count of micro-batches in flight a (chunk, stage) of the run's schedule keeps, ascending."""
    return sorted({count for row in run_in_flight(run) for count in row})


@functools.lru_cache(maxsize=256)
def _vectors(
    schedule: str, stages: int, chunks: int, micro_batches: int, combined: bool, group: int | None = None
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    if combined:
        vectors = combined_in_flight_vectors(stages, chunks, micro_batches, schedule, group)
        return tuple(tuple(stage) for stage in vectors)
    return tuple(tuple(stage) for stage in in_flight_vectors(schedule, stages, chunks, micro_batches, group))


def run_in_flight_vectors(run: RunConfig) -> list[list[tuple[int, ...]]]:
    """Per stage, every per-chunk count of micro-batches in flight at which the stage may peak (under
    Megatron's combined 1F1B, between its steps: `run_combined_steps` gives the steps)."""
    par = run.parallel
    try:
        found = _vectors(
            par.schedule,
            par.pp,
            par.vpp,
            run.training.micro_batches,
            par.overlap_moe_expert_parallel_comm,
            par.microbatch_group_size_per_vp_stage,
        )
    except ValueError as err:
        raise InputError(run.source, "training.micro_batches", str(err)) from None
    return [list(stage) for stage in found]


def run_combined_steps(run: RunConfig) -> list[list[tuple[tuple[int, ...], int, int]]] | None:
    """The steps of the run's combined 1F1B schedule per stage (`schedules.combined_steps`), or None
    where the run does not overlap its expert all-to-alls (`--overlap-moe-expert-parallel-comm`)."""
    par = run.parallel
    if not par.overlap_moe_expert_parallel_comm:
        return None
    return combined_steps(
        par.schedule, par.pp, par.vpp, run.training.micro_batches, par.microbatch_group_size_per_vp_stage
    )


__all__ = [
    "ADAM_MOMENT_BYTES",
    "MOMENTS",
    "StagePeak",
    "configured_option",
    "configured_options",
    "run_combined_steps",
    "run_in_flight",
    "run_in_flight_counts",
    "run_in_flight_vectors",
    "stage_peaks",
]
