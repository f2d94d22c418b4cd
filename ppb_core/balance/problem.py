"""What the balancer is asked: the layers, the pipeline's sizes, the schedule and the device memory."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ppb_core.balance.allocator_pools import allocator_pools
from ppb_core.balance.stage_workspace import StageWorkspace, stage_workspace
from ppb_core.balance.torchtitan_settings import op_policy
from ppb_core.balance.torchtitan_settings import runnable as torchtitan_runnable
from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel, run_working_set_bytes, run_workspace_bytes
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import FRAMEWORK_RULES, walk
from ppb_core.payload.sapp import LayerRecord, LayerSet, keep_options, layer_set
from ppb_core.schedules import canonical, cell_order, check, in_flight_vectors
from ppb_core.units import MB


@dataclass(frozen=True)
class BalanceInput:
    """One balancing problem. Memory in MB, times in the descriptions' unit."""

    layers: LayerSet
    stages: int
    micro_batches: int
    chunks: int = 1
    memory_mb: float = 56000.0
    constant_memory_mb: float = 0.0
    schedule: str = "1f1b"
    source: str | None = field(default=None, compare=False)
    # Whose rules the plan must follow (None: SAPP's), and the MTP modules the TAIL holds.
    framework: str | None = None
    mtp_layers: int = 0
    # Megatron-Core's standalone MTP: the TAIL parts in `mtp_apart` (the MTP layers, with the model's
    # final norm) run in `mtp_cell`, a last-chunk cell of an earlier stage, and the TAIL left is the
    # output layer and every head's loss; the cells after `mtp_cell` hold no body layer
    # (`PipelineParallelLayerLayout.validate_layer_layout`: no decoder layer after an MTP layer).
    mtp_cell: tuple[int, int] | None = None
    mtp_apart: tuple[LayerRecord, ...] = ()
    # Megatron's interleaved schedule's micro-batch group (`--microbatch-group-size-per-virtual-pipeline-stage`,
    # `schedules.check`); None: pp
    group: int | None = None
    # What the constant and the ends' descriptions charge a stage beyond the workspaces of the kinds it
    # runs (`stage_workspace.py`: TE's dummy weight gradients per weight shape); None: nothing
    workspace: StageWorkspace | None = None
    # Time by the op graph even where torch walks the lock step (`lock_step`): the lock step only adds waits
    # to the op graph's precedences where pp divides m, so a bound solved here bounds it (`program._none_floor`)
    op_graph: bool = False
    # torchtitan's every-N-th-block setting (`torchtitan_settings.EveryNth`) is one its release runs: gone
    # from 114151ad4 (2026-03-23; releases `torchtitan_op_sac_only`), so not offered to such a run's plan
    every_nth: bool = True

    def __post_init__(self) -> None:
        for name, value in (
            ("stages", self.stages),
            ("micro_batches", self.micro_batches),
            ("interleave", self.chunks),
        ):
            if not isinstance(value, int) or value < 1:
                raise InputError(self.source, name, f"must be a positive integer, got {value!r}")
        if self.framework not in FRAMEWORK_RULES:
            raise InputError(self.source, "framework", f"must be one of {', '.join(map(str, FRAMEWORK_RULES))}")
        if not isinstance(self.mtp_layers, int) or self.mtp_layers < 0:
            raise InputError(self.source, "mtp_layers", f"must be a non-negative integer, got {self.mtp_layers!r}")
        if self.mtp_cell is not None and (
            self.mtp_cell not in self.cells[:-1] or self.mtp_cell[0] != self.chunks - 1 or not self.mtp_apart
        ):
            raise InputError(
                self.source,
                "mtp_cell",
                f"{self.mtp_cell} must be a last-chunk cell before the loss's, holding the MTP part",
            )
        if not self.memory_mb > 0:
            raise InputError(self.source, "memory", f"must be positive, got {self.memory_mb}")
        if self.constant_memory_mb < 0:
            raise InputError(self.source, "constant_memory", f"must not be negative, got {self.constant_memory_mb}")
        try:
            check(self.schedule, self.stages, self.chunks, self.micro_batches, self.group)
        except ValueError as err:
            raise InputError(self.source, "schedule", str(err)) from None
        if self.workspace is not None and len(self.workspace.group_of) != len(self.layers.bodies):
            raise InputError(
                self.source,
                "workspace",
                f"groups {len(self.workspace.group_of)} body records, the problem has {len(self.layers.bodies)}",
            )
        refused = self._framework_interleaving()
        if refused is not None:
            raise InputError(self.source, "micro_batches", refused)
        cells_needing_layers = self.stages * self.chunks - len(self.reserved_cells)
        if self.layers.nb_body_layers < cells_needing_layers:
            raise InputError(
                self.source,
                "stages",
                f"{self.layers.nb_body_layers} body layers cannot fill the "
                f"{cells_needing_layers} (chunk, stage) cells that hold neither the head nor the tail",
            )

    def _framework_interleaving(self) -> str | None:
        """What the framework's interleaved schedule refuses of these sizes, as the run config refuses it
        (`config.run._check_framework_interleaving`), for sizes a flag or the interleave search chose:
        Megatron-LM d98e8a64 `forward_backward_pipelining_with_interleaving` raises unless the last group
        of m mod g is 0 or at least pp, its default g being pp; torch's ScheduleInterleaved1F1B (torchtitan's)
        runs max(1, m // pp) rounds and raises unless m is a multiple of them."""
        m, p = self.micro_batches, self.stages
        if canonical(self.schedule, self.chunks) != "interleaved" or m < p:
            return None
        if self.framework == "megatron" and self.group is None and m % p:
            return (
                f"{m} micro-batches in Megatron's default groups of pp {p} leave a last group of {m % p}: "
                "Megatron refuses it (parallel.microbatch_group_size_per_vp_stage sets another group)"
            )
        rounds = max(1, m // p)
        if self.framework == "torchtitan" and m % rounds:
            return f"torch's Interleaved1F1B runs {m} micro-batches in {rounds} rounds of pp {p}: not a multiple"
        return None

    @cached_property
    def schedule_name(self) -> str:
        return canonical(self.schedule, self.chunks)

    @cached_property
    def lock_step(self) -> bool:
        """Whether the ranks walk the schedule's time steps in lock step: torchtitan's interleaved schedule
        over a pipeline (torch 2.6.0 `PipelineScheduleMulti._step_microbatches`, `pipeline_lockstep`), as
        `timing.iteration` prices it; otherwise each op waits only for its stage and its input
        (`schedules`). `schedule_times` times the plans by it."""
        return (
            self.framework == "torchtitan"
            and self.schedule_name == "interleaved"
            and self.stages > 1
            and not self.op_graph
        )

    @cached_property
    def cells(self) -> list[tuple[int, int]]:
        """(chunk, stage) cells in the model's layer order."""
        return cell_order(self.schedule_name, self.stages, self.chunks)

    @property
    def head_cell(self) -> tuple[int, int]:
        return self.cells[0]

    @property
    def tail_cell(self) -> tuple[int, int]:
        return self.cells[-1]

    @cached_property
    def reserved_cells(self) -> frozenset[tuple[int, int]]:
        """Cells that may hold no body layer because the head or the tail already runs there.

        Megatron-Core runs a virtual stage holding only the embedding or the loss (its layout
        parser allows empty stages: docs/user-guide/features/pipeline_parallel_layout.md, `E||t|L`),
        and so does SAPP's program (reference §6.4: the head's and tail's cells are exempt).
        MindFormers places only transformer (and MTP) layers by its offsets (LayerSetting in
        mindformers/parallel_core/training_graph/transformer/utils.py) and MindSpore's pipeline
        interleave derives a stage's chunks from the layers it holds, so MindFormers needs a layer
        in every cell; there the tail's cell counts its MTP layers (LayerSetting counts them too).
        """
        reserved = set()
        empty_ends = FRAMEWORK_RULES[self.framework]
        if self.layers.heads and empty_ends:
            reserved.add(self.head_cell)
        if self.layers.tails and (empty_ends or self.mtp_layers):
            reserved.add(self.tail_cell)
        if self.mtp_cell is not None:  # Megatron-Core runs `m` alone (its DeepSeek-V3 layout `...,m|L`)
            reserved |= {self.mtp_cell, *self.closed_cells}
        return frozenset(reserved)

    @cached_property
    def closed_cells(self) -> frozenset[tuple[int, int]]:
        """Cells that hold no body layer: those after a standalone MTP's cell (Megatron-Core places no
        decoder layer after an MTP layer), the loss's among them."""
        if self.mtp_cell is None:
            return frozenset()
        return frozenset(self.cells[self.cells.index(self.mtp_cell) + 1 :])

    @cached_property
    def vectors(self) -> list[list[tuple[int, ...]]]:
        """Per stage, every per-chunk count of micro-batches in flight at which its memory can peak."""
        return in_flight_vectors(self.schedule_name, self.stages, self.chunks, self.micro_batches, self.group)

    @property
    def options(self) -> tuple[str, ...]:
        return self.layers.options

    @cached_property
    def option_indices(self) -> tuple[int, ...]:
        """The options' places in `OPTIONS` (kept: the stage listing asks for them per layer of every cell)."""
        return tuple(OPTIONS.index(option) for option in self.options)

    def fixed_time(self, kind: str, chunk: int, stage: int) -> float:
        """Forward ("F") or backward ("B") time the head and the tail add to a cell's op."""
        layers = self.layers
        total = 0.0
        if layers.heads and (chunk, stage) == self.head_cell:
            total += layers.head_forward() if kind == "F" else layers.head_backward()
        if layers.tails and (chunk, stage) == self.tail_cell:
            total += layers.tail_forward() if kind == "F" else layers.tail_backward()
        if (chunk, stage) == self.mtp_cell:
            total += sum(
                (r.forward_time if kind == "F" else r.backward_time["NONE"]) * r.nb_layer for r in self.mtp_apart
            )
        return total

    def fixed_work(self, stage: int) -> float:
        """Forward + backward the head and the tail add to a stage, over its chunks."""
        return sum(self.fixed_time(kind, chunk, stage) for chunk in range(self.chunks) for kind in ("F", "B"))

    def head_stage_memory_mb(self, stage: int, vector: tuple[int, ...]) -> float:
        """Head and tail memory a stage holds at a given in-flight vector."""
        total = 0.0
        if self.layers.heads and self.head_cell[1] == stage:
            total += self.layers.head_memory_mb(vector[self.head_cell[0]])
        if self.layers.tails and self.tail_cell[1] == stage:
            total += self.layers.tail_memory_mb(vector[self.tail_cell[0]])
        if self.mtp_cell is not None and self.mtp_cell[1] == stage:
            # the MTP layers keep their activations per micro-batch in flight in their chunk
            held = vector[self.mtp_cell[0]]
            total += sum(
                (r.memory_parameter_mb + held * r.memory_mb.get("NONE", 0.0)) * r.nb_layer for r in self.mtp_apart
            )
        return total

    @cached_property
    def _relief_rows(self) -> tuple[tuple[float, ...], ...]:
        """Per stage, its relief by group mask (`StageWorkspace`), for the ends it carries."""
        if self.workspace is None:
            return tuple((0.0,) for _ in range(self.stages))
        rows = []
        for stage in range(self.stages):
            roles = set()
            if self.layers.heads and self.head_cell[1] == stage:
                roles.add("head")
            if self.layers.tails and self.tail_cell[1] == stage:
                roles.add("tail")
            if self.mtp_cell is not None and self.mtp_cell[1] == stage:
                roles.add("mtp")
            rows.append(self.workspace.row(frozenset(roles)))
        return tuple(rows)

    def relief_row(self, stage: int) -> tuple[float, ...]:
        """The stage's relief (MB) indexed by `body_mask` of the body records it holds (one entry, 0, without
        a `workspace`): what the constant and the ends' descriptions charge it beyond its own workspaces."""
        return self._relief_rows[stage]

    def body_mask(self, bodies: Iterable[int]) -> int:
        """The `relief_row` index of a stage holding layers of the body records *bodies* (0 without a
        `workspace`)."""
        return 0 if self.workspace is None else self.workspace.mask(bodies)

    def relief_mb(self, stage: int, bodies: Iterable[int]) -> float:
        """MB a stage holding layers of the body records *bodies* is charged less than the constant and its
        ends' descriptions say (`stage_workspace.py`); it only shrinks as *bodies* grows."""
        return self._relief_rows[stage][self.body_mask(bodies)]

    def with_chunks(self, chunks: int) -> BalanceInput:
        return BalanceInput(
            self.layers,
            self.stages,
            self.micro_batches,
            chunks,
            self.memory_mb,
            self.constant_memory_mb,
            self.schedule,
            self.source,
            self.framework,
            self.mtp_layers,
            None if self.mtp_cell is None else (chunks - 1, self.mtp_cell[1]),
            self.mtp_apart,
            self.group,
            self.workspace,
            every_nth=self.every_nth,
        )

    def describe(self) -> dict[str, object]:
        return {
            "source": str(self.source) if self.source is not None else None,
            "stages": self.stages,
            "micro_batches": self.micro_batches,
            "interleave": self.chunks,
            "schedule": self.schedule_name,
            "memory_mb": self.memory_mb,
            "constant_memory_mb": self.constant_memory_mb,
            "options": list(self.options),
            "bodies": [
                {"name": b.name, "nb_layer": b.nb_layer, **({"models": list(b.models)} if b.models else {})}
                for b in self.layers.bodies
            ],
            "framework": self.framework,
            "mtp_layers": self.mtp_layers,
            **({"mtp_cell": list(self.mtp_cell)} if self.mtp_cell is not None else {}),
            **({"microbatch_group_size_per_vp_stage": self.group} if self.group is not None else {}),
            **({"stage_workspace": self.workspace.describe()} if self.workspace is not None else {}),
        }


def run_problem(
    run: RunConfig,
    descriptions: Sequence[Mapping[str, Any]],
    *,
    stages: int | None = None,
    micro_batches: int | None = None,
    chunks: int | None = None,
    memory_mb: float | None = None,
    schedule: str | None = None,
    constant_memory_mb: float | None = None,
    runnable: bool = True,
) -> BalanceInput:
    """The problem a run config poses: pp stages, its micro-batches, vpp chunks, its schedule and the
    device's memory less reserved_mb; a keyword given overrides the run config's value.

    The constant memory every stage holds besides its layers' descriptions defaults to the largest
    working set of one layer's backward (`memory.run_working_set_bytes`) and the GEMM libraries'
    workspaces of the body kinds (`memory.run_workspace_bytes`; what a HEAD or TAIL adds, TE's dummy
    weight gradient of the output layer's shape, its description carries): SAPP descriptions count neither
    the bodies' nor the working set, and a stage's peak comes while a backward runs. What of that a stage
    does not hold because it runs only some of the kinds (TE's dummy weight gradients of the dense MLP on a
    rank of MoE layers) comes off again by the body types its plan gives it (`workspace`,
    `stage_workspace.py`); a constant given is the whole charge. With it, every stage of a plan fits
    when the memory model evaluates it again layer by layer. A torchtitan run's records and computed constant
    also carry what it needs beyond the allocated peak under FSDP2 (the caching allocator's pools) or async TP
    (torch's symmetric-memory workspace) (`allocator_pools`), which its fit verdicts count (`StagePeak.fit_bytes`).

    For a torchtitan run the options torchtitan cannot run are withdrawn (`torchtitan_settings.runnable`),
    and FULL for a Megatron run under the combined 1F1B schedule (`--overlap-moe-expert-parallel-comm`),
    unless *runnable* is False (a user's plan priced whatever it says).
    """
    memory = MemoryModel(run)
    computed = constant_memory_mb is None
    if constant_memory_mb is None:
        fused = walk(run, fused_tail=True)  # the descriptions' layers: one TAIL, whatever the layout
        constant_memory_mb = math.ceil(
            (
                run_working_set_bytes(run, memory, layer_walk=fused)
                + run_workspace_bytes(run, memory, layer_walk=fused, ends=False)
            )
            / MB
        )
        workspace = stage_workspace(run, layer_set(descriptions, run.source).bodies, memory=memory)
    else:
        workspace = None  # the user's constant is the whole charge
    par = run.parallel
    layers = layer_set(descriptions, run.source)
    # torchtitan FSDP2: what the caching allocator's stream pools reserve beyond the allocated peak
    # (`allocator_pools`); the copy-in pool's share (and async TP's workspace) goes in the constant unless the
    # user gave it whole
    layers, beyond_mb = allocator_pools(run, layers, memory)
    if computed:
        constant_memory_mb += beyond_mb
    if runnable and run.framework == "torchtitan":
        layers = torchtitan_runnable(layers, op_policy(run.training.recompute))
    if runnable and run.framework == "megatron" and par.overlap_moe_expert_parallel_comm:
        # transformer_config.py `TransformerConfig.__post_init__` (d98e8a64) asserts recompute_granularity !=
        # 'full' under --overlap-moe-expert-parallel-comm: no layer of the plan may be fully recomputed
        layers = keep_options(layers, [option for option in layers.options if option != "FULL"])
    # the run's group where the problem keeps its sizes and schedule (another size runs Megatron's default)
    same = (stages or par.pp, micro_batches or run.training.micro_batches, chunks or par.vpp, schedule or par.schedule)
    group = par.microbatch_group_size_per_vp_stage
    if same != (par.pp, run.training.micro_batches, par.vpp, par.schedule):
        group = None
    return BalanceInput(
        layers,
        stages or par.pp,
        micro_batches or run.training.micro_batches,
        chunks or par.vpp,
        float(memory_mb or run.device.usable_mb),
        float(constant_memory_mb),
        schedule or par.schedule,
        run.source,
        run.framework,
        sum(getattr(run.spec(name), "mtp_layers", 0) for name in run.model_names),
        group=group,
        workspace=workspace,
        every_nth=not (run.framework == "torchtitan" and run.framework_release.holds("torchtitan_op_sac_only")),
    )


def source_name(path: str | Path | None) -> str | None:
    return None if path is None else str(path)
