"""A plan: how many layers of each body type run under each option in each (chunk, stage) cell.

Evaluating a plan is exact and independent of the integer program: memory is summed in
`Fraction`s of the descriptions' own numbers, and time comes from running the schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from ppb_core.balance import schedule_times
from ppb_core.balance.problem import BalanceInput
from ppb_core.model.switches import CELL_RANK, OPTIONS
from ppb_core.schedules import Timeline, closed_form_time

Counts = tuple[tuple[tuple[tuple[int, ...], ...], ...], ...]  # [body][chunk][stage][option index]


def empty_counts(problem: BalanceInput) -> list[list[list[list[int]]]]:
    return [
        [[[0] * len(OPTIONS) for _ in range(problem.stages)] for _ in range(problem.chunks)]
        for _ in problem.layers.bodies
    ]


def freeze(counts: Sequence[Sequence[Sequence[Sequence[int]]]]) -> Counts:
    return tuple(tuple(tuple(tuple(int(n) for n in cell) for cell in row) for row in body) for body in counts)


@dataclass(frozen=True)
class Plan:
    """`counts[body][chunk][stage][k]`: layers of that body type under OPTIONS[k] in that cell."""

    problem: BalanceInput
    counts: Counts

    # -- structure -----------------------------------------------------------------------------

    def cell_options(self, chunk: int, stage: int) -> tuple[int, ...]:
        """Layers under each option in a cell, all body types together."""
        return tuple(sum(body[chunk][stage][k] for body in self.counts) for k in range(len(OPTIONS)))

    def cell_layers(self, chunk: int, stage: int) -> int:
        return sum(self.cell_options(chunk, stage))

    def body_layers(self, body: int, chunk: int, stage: int) -> int:
        return sum(self.counts[body][chunk][stage])

    def problems(self) -> list[str]:
        """Every rule of the program the plan breaks, in words; empty for a valid plan."""
        p = self.problem
        found: list[str] = []
        for index, body in enumerate(p.layers.bodies):
            placed = sum(sum(cell) for row in self.counts[index] for cell in row)
            if placed != body.nb_layer:
                found.append(f"{body.name}: {placed} layers placed, {body.nb_layer} described")
            for row in self.counts[index]:
                for cell in row:
                    for k, n in enumerate(cell):
                        if n < 0 or (n and OPTIONS[k] not in p.options):
                            found.append(f"{body.name}: {n} layers under {OPTIONS[k]}")
        for chunk, stage in p.cells:
            if (chunk, stage) not in p.reserved_cells and self.cell_layers(chunk, stage) < 1:
                found.append(f"cell (chunk {chunk}, stage {stage}) is empty")
            if (chunk, stage) in p.closed_cells and self.cell_layers(chunk, stage):
                found.append(f"cell (chunk {chunk}, stage {stage}) holds body layers after the MTP layers")
            options = self.cell_options(chunk, stage)
            if options[OPTIONS.index("SLCT")] and options[OPTIONS.index("COMM")]:
                found.append(f"cell (chunk {chunk}, stage {stage}) mixes SLCT and COMM, which the yaml cannot say")
        found += self._order_problems()
        return found

    def _order_problems(self) -> list[str]:
        """Body types in pipeline order, and within a cell options in MindFormers' order along the layers."""
        found: list[str] = []
        sequence: list[tuple[int, int]] = []  # (body, cell position) of every layer along the model
        # torchtitan's every-N-th block setting puts FULL wherever the rank's count says
        # (`torchtitan_settings.EveryNth`): MindFormers' order along a cell is not its rule
        ordered = self.problem.framework != "torchtitan"
        for position, (chunk, stage) in enumerate(self.problem.cells):
            previous_ranks: list[int] = []
            for body in range(len(self.counts)):
                sequence += [(body, position)] * self.body_layers(body, chunk, stage)
                ranks = [CELL_RANK[OPTIONS[k]] for k, n in enumerate(self.counts[body][chunk][stage]) if n]
                if ordered and ranks and previous_ranks and min(ranks) < max(previous_ranks):
                    found.append(
                        f"cell (chunk {chunk}, stage {stage}): a later body type recomputes more than an "
                        "earlier one, which MindFormers' per-stage counts cannot say"
                    )
                if ranks:
                    previous_ranks = ranks
        bodies = [body for body, _ in sequence]
        if bodies != sorted(bodies):
            found.append("body types are out of pipeline order")
        return found

    # -- time ----------------------------------------------------------------------------------

    def cell_time(self, kind: str, chunk: int, stage: int) -> float:
        """Forward ("F") or backward ("B") time of one micro-batch through a cell, head and tail included."""
        p = self.problem
        total = 0.0
        if kind == "F":
            total = sum(
                body.forward_time * self.body_layers(index, chunk, stage) for index, body in enumerate(p.layers.bodies)
            )
        else:
            for index, body in enumerate(p.layers.bodies):
                for k, n in enumerate(self.counts[index][chunk][stage]):
                    if n:
                        total += n * body.backward_time[OPTIONS[k]]
        return total + p.fixed_time(kind, chunk, stage)

    @cached_property
    def cell_forward(self) -> list[list[float]]:
        """Forward time of one micro-batch through each cell, head and tail included."""
        return self._cell_times("F")

    @cached_property
    def cell_backward(self) -> list[list[float]]:
        return self._cell_times("B")

    def _cell_times(self, kind: str) -> list[list[float]]:
        p = self.problem
        times = [[0.0] * p.stages for _ in range(p.chunks)]
        for chunk, stage in p.cells:
            times[chunk][stage] = self.cell_time(kind, chunk, stage)
        return times

    @cached_property
    def timeline(self) -> Timeline:
        return schedule_times.timeline(self.problem, self.cell_forward, self.cell_backward)

    @cached_property
    def cell_recompute(self) -> list[list[float]]:
        """The part of each cell's backward spent recomputing: backward under its options less the
        least backward its body types offer."""
        p = self.problem
        times = [[0.0] * p.stages for _ in range(p.chunks)]
        for chunk, stage in p.cells:
            for index, body in enumerate(p.layers.bodies):
                least = min(body.backward_time[o] for o in p.options)
                for k, n in enumerate(self.counts[index][chunk][stage]):
                    if n:
                        times[chunk][stage] += n * (body.backward_time[OPTIONS[k]] - least)
        return times

    def timeline_json(self) -> dict[str, object]:
        """What the timeline picture needs: the schedule and each cell's times."""
        p = self.problem
        return {
            "schedule": p.schedule_name,
            **({"lock_step": True} if p.lock_step else {}),
            "micro_batches": p.micro_batches,
            **({"microbatch_group_size_per_vp_stage": p.group} if p.group is not None else {}),
            "forward": self.cell_forward,
            "backward": self.cell_backward,
            "recompute": self.cell_recompute,
            "iteration": self.iteration_time,
        }

    @cached_property
    def critical_path_counts(self) -> dict[tuple[str, int, int], int]:
        """How many forwards and backwards of each (kind, chunk, stage) a longest path runs."""
        return schedule_times.path(self.problem, self.cell_forward, self.cell_backward)[1]

    @cached_property
    def iteration_time(self) -> float:
        """The simulated iteration time: the schedule's critical path for this plan's cells."""
        if "timeline" in self.__dict__:
            return self.timeline.makespan
        return schedule_times.iteration_time(self.problem, self.cell_forward, self.cell_backward)

    @property
    def closed_form_time(self) -> float:
        """The schedule's textbook estimate for these cells (1F1B: Σ_s C_s + (m − 1)·max_s C_s)."""
        return closed_form_time(
            self.problem.schedule_name, self.cell_forward, self.cell_backward, self.problem.micro_batches
        )

    def stage_time(self, stage: int) -> float:
        """Forward plus backward of one micro-batch through every chunk a stage holds."""
        return sum(self.cell_forward[c][stage] + self.cell_backward[c][stage] for c in range(self.problem.chunks))

    def bubble(self, stage: int) -> float:
        """The share of the iteration a stage is idle."""
        makespan = self.iteration_time
        return 0.0 if makespan <= 0 else 1.0 - self.timeline.busy(stage) / makespan

    # -- memory --------------------------------------------------------------------------------

    def _parameters(self, stage: int) -> Fraction:
        p = self.problem
        total = Fraction(0)
        for index, body in enumerate(p.layers.bodies):
            layers = sum(self.body_layers(index, chunk, stage) for chunk in range(p.chunks))
            total += layers * Fraction(body.memory_parameter_mb)
        return total

    def _activation(self, chunk: int, stage: int) -> Fraction:
        """MB one micro-batch in flight keeps in a cell's body layers."""
        total = Fraction(0)
        for index, body in enumerate(self.problem.layers.bodies):
            for k, n in enumerate(self.counts[index][chunk][stage]):
                if n:
                    total += n * Fraction(body.memory_mb[OPTIONS[k]])
        return total

    def stage_bodies(self, stage: int) -> list[int]:
        """The body types the stage holds layers of, in any chunk."""
        p = self.problem
        return [b for b in range(len(p.layers.bodies)) if any(self.body_layers(b, v, stage) for v in range(p.chunks))]

    def _constant(self, stage: int) -> float:
        """The constant less the stage's relief for the body types it holds (`BalanceInput.relief_mb`)."""
        p = self.problem
        return p.constant_memory_mb - p.relief_mb(stage, self.stage_bodies(stage))

    def exact_stage_memory(self, stage: int) -> Fraction:
        """The stage's peak MB, exactly: the largest over the schedule's in-flight vectors."""
        p = self.problem
        base = self._parameters(stage) + Fraction(self._constant(stage))
        activations = [self._activation(chunk, stage) for chunk in range(p.chunks)]
        peak = None
        for vector in p.vectors[stage]:
            total = base + sum(n * a for n, a in zip(vector, activations, strict=True))
            total += Fraction(p.head_stage_memory_mb(stage, vector))
            peak = total if peak is None else max(peak, total)
        return peak if peak is not None else base

    @cached_property
    def stage_memory_mb(self) -> list[float]:
        return [float(self.exact_stage_memory(stage)) for stage in range(self.problem.stages)]

    @property
    def peak_memory_mb(self) -> float:
        return max(self.stage_memory_mb)

    @property
    def fits(self) -> bool:
        return all(self.stage_fits(s) for s in range(self.problem.stages))

    def stage_fits(self, stage: int) -> bool:
        """Whether the stage's exact peak is at most the device: summed in floating point first,
        where rounding (relative 1e-15 a term) cannot cross a margin of 1e-9 of the device; in
        `Fraction`s only within that margin."""
        p = self.problem
        room = p.memory_mb
        base = self._constant(stage)
        activations = [0.0] * p.chunks
        for index, body in enumerate(p.layers.bodies):
            for chunk in range(p.chunks):
                for k, n in enumerate(self.counts[index][chunk][stage]):
                    if n:
                        base += n * body.memory_parameter_mb
                        activations[chunk] += n * body.memory_mb[OPTIONS[k]]
        peak = max(
            (
                base
                + sum(n * a for n, a in zip(vector, activations, strict=True))
                + p.head_stage_memory_mb(stage, vector)
                for vector in p.vectors[stage]
            ),
            default=base,
        )
        if peak <= room * (1 - 1e-9):
            return True
        if peak > room * (1 + 1e-9):
            return False
        return self.exact_stage_memory(stage) <= Fraction(room)

    def memory_over_time(self, stage: int) -> list[tuple[float, float]]:
        """(time, MB) after every op of a stage: activations come with a forward and go with its backward."""
        p = self.problem
        activations = [float(self._activation(chunk, stage)) for chunk in range(p.chunks)]
        head_tail = {c: 0.0 for c in range(p.chunks)}
        for chunk in range(p.chunks):
            one = tuple(1 if c == chunk else 0 for c in range(p.chunks))
            zero = (0,) * p.chunks
            head_tail[chunk] = p.head_stage_memory_mb(stage, one) - p.head_stage_memory_mb(stage, zero)
        base = float(self._parameters(stage)) + self._constant(stage) + p.head_stage_memory_mb(stage, (0,) * p.chunks)
        held = base
        series = [(0.0, held)]
        timeline = self.timeline
        for op, end in zip(timeline.orders[stage], timeline.ends[stage], strict=True):
            step = activations[op.chunk] + head_tail[op.chunk]
            held += step if op.kind == "F" else -step
            series.append((end, held))
        return series
