"""The program's optimum equals an exhaustive search over every plan, on random small instances.

The search is written from the rules alone (docs/balance.md), sharing no code with the program
but the schedule simulator, which tests/test_schedules.py checks against hand-derived figures:
every split of the layers over the cells (each cell without head or tail non-empty, body types in
order), every option sequence MindFormers' yaml can say in each cell (options by rank FULL, BOTH,
SLCT or COMM, NONE along the cell, never SLCT with COMM), memory summed here per stage at every
in-flight vector of the schedule, and the iteration time from running the schedule.

Smart enumeration, still exhaustive: the iteration time is a longest path, which never shrinks
when an op grows, so per stage and split only option choices whose per-cell backward times are
not all beaten by another fitting choice can be optimal; and a split whose cells all take their
least backward that fits is already no better than the best found is skipped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import solve
from ppb_core.balance.progress import WorkLimits
from ppb_core.balance.stage_workspace import StageWorkspace
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import canonical, cell_order, in_flight_vectors, simulate

OPTIONS = ("NONE", "SLCT", "COMM", "BOTH", "FULL")
MEMORY = {
    "NONE": "memory_activation",
    "SLCT": "memory_select_rec",
    "COMM": "memory_select_comm",
    "BOTH": "memory_both_comm_select",
    "FULL": "memory_recompute",
}
TIME = {
    "NONE": "backward_time",
    "SLCT": "select_rec_time",
    "COMM": "select_comm_time",
    "BOTH": "both_comm_select_time",
    "FULL": "recompute_time",
}
RANKED = [("FULL", "BOTH", "SLCT", "NONE"), ("FULL", "BOTH", "COMM", "NONE")]


def _compositions(total: int, cells: int, minimum: list[int]):
    """Every way to put `total` layers in `cells` cells, cell i holding at least minimum[i]."""
    if cells == 1:
        if total >= minimum[0]:
            yield (total,)
        return
    for first in range(minimum[0], total - sum(minimum[1:]) + 1):
        for rest in _compositions(total - first, cells - 1, minimum[1:]):
            yield (first, *rest)


def _cell_sequences(layer_types: tuple[int, ...]):
    """Every option sequence along a cell's layers that the yaml can say."""
    found = set()
    for ranked in RANKED:
        for sequence in itertools.combinations_with_replacement(ranked, len(layer_types)):
            found.add(sequence)
    return sorted(found)


def closed_form(forward: list[list[float]], backward: list[list[float]], micro_batches: int) -> float:
    """The issue's formula: 1F1B Σ_s S_s + (m − 1)·max_s S_s, interleaved Σ_s S_s / V + (m − 1/V)·max_s S_s,
    S_s = Σ_v (F_v,s + B_v,s); both the same formula at V = 1."""
    chunks, stages = len(forward), len(forward[0])
    work = [sum(forward[v][s] + backward[v][s] for v in range(chunks)) for s in range(stages)]
    return sum(work) / chunks + (micro_batches - 1 / chunks) * max(work)


def exhaustive(
    descriptions: list[dict],
    stages: int,
    chunks: int,
    micro_batches: int,
    memory_mb: float,
    objective: str = "critical_path",
    constant_mb: float = 0.0,
    relief: Callable[[int, frozenset[str], frozenset[int]], float] | None = None,
) -> float:
    """The least iteration time (or closed form) over every valid plan that fits (inf if none does).
    Every stage holds *constant_mb* less *relief(stage, the ends it holds, the body types it holds)*."""

    def value(forward: list[list[float]], backward: list[list[float]]) -> float:
        if objective == "closed_form":
            return closed_form(forward, backward, micro_batches)
        return simulate(schedule, forward, backward, micro_batches).makespan

    schedule = canonical("1f1b", chunks)
    heads = [d for d in descriptions if d["type"] == "HEAD"]
    tails = [d for d in descriptions if d["type"] == "TAIL"]
    bodies = [d for d in descriptions if d["type"] == "BODY"]
    cells = cell_order(schedule, stages, chunks)
    head_cell, tail_cell = cells[0], cells[-1]
    reserved = ({head_cell} if heads else set()) | ({tail_cell} if tails else set())
    vectors = in_flight_vectors(schedule, stages, chunks, micro_batches)
    layer_types = [t for t, body in enumerate(bodies) for _ in range(body["nb_layer"])]
    head_f = sum(h["time"] for h in heads)
    head_b = sum(2 * h["time"] for h in heads)
    tail_f = sum(t["time"] for t in tails)
    tail_b = sum(2 * t["time"] for t in tails)

    def backward(t: int, option: str) -> float:
        return bodies[t][TIME[option]]

    best = math.inf
    minimum = [0 if cell in reserved else 1 for cell in cells]
    for split in _compositions(len(layer_types), len(cells), minimum):
        start = 0
        types_in: dict[tuple[int, int], tuple[int, ...]] = {}
        for cell, size in zip(cells, split, strict=True):
            types_in[cell] = tuple(layer_types[start : start + size])
            start += size
        forward = [[0.0] * stages for _ in range(chunks)]
        for v, s in cells:
            forward[v][s] = sum(bodies[t]["time"] for t in types_in[(v, s)])
        forward[head_cell[0]][head_cell[1]] += head_f
        forward[tail_cell[0]][tail_cell[1]] += tail_f
        fronts = []
        for s in range(stages):
            stage_cells = [(v, s) for v in range(chunks)]
            per_cell = [
                [
                    (
                        seq,
                        sum(backward(t, o) for t, o in zip(types_in[c], seq, strict=True)),
                        sum(bodies[t][MEMORY[o]] for t, o in zip(types_in[c], seq, strict=True)),
                    )
                    for seq in _cell_sequences(types_in[c])
                ]
                for c in stage_cells
            ]
            parameters = sum(bodies[t]["memory_parameter"] for c in stage_cells for t in types_in[c])
            parameters += constant_mb
            if relief is not None:
                ends = {"head"} if heads and head_cell[1] == s else set()
                ends |= {"tail"} if tails and tail_cell[1] == s else set()
                parameters -= relief(s, frozenset(ends), frozenset(t for c in stage_cells for t in types_in[c]))
            fitting = []
            for combo in itertools.product(*per_cell):
                peak = 0.0
                for vector in vectors[s]:
                    used = parameters + sum(n * a for n, (_, _, a) in zip(vector, combo, strict=True))
                    if heads and head_cell[1] == s:
                        used += sum(h["memory_parameter"] for h in heads)
                    if tails and tail_cell[1] == s:
                        used += sum(t["memory_parameter"] for t in tails)
                    peak = max(peak, used)
                if peak <= memory_mb:
                    fitting.append(tuple(b for _, b, _ in combo))
            front = [
                b
                for b in set(fitting)
                if not any(o != b and all(x <= y for x, y in zip(o, b, strict=True)) for o in fitting)
            ]
            if not front:
                break
            fronts.append(front)
        else:

            def times(choice: tuple[tuple[float, ...], ...]) -> list[list[float]]:
                grid = [[0.0] * stages for _ in range(chunks)]
                for s, per_chunk in enumerate(choice):
                    for v, b in enumerate(per_chunk):
                        grid[v][s] = b
                grid[head_cell[0]][head_cell[1]] += head_b
                grid[tail_cell[0]][tail_cell[1]] += tail_b
                return grid

            lowest = tuple(tuple(min(b[v] for b in front) for v in range(chunks)) for front in fronts)
            if value(forward, times(lowest)) >= best:
                continue
            for choice in itertools.product(*fronts):
                best = min(best, value(forward, times(choice)))
    return best


@st.composite
def instances(draw):
    stages = draw(st.integers(1, 4))
    chunks = draw(st.integers(1, 2)) if stages > 1 else 1
    cells = stages * chunks
    micro_batches = stages * draw(st.integers(1, 2)) if chunks > 1 else draw(st.integers(1, 2 * stages))
    with_head = draw(st.booleans())
    with_tail = draw(st.booleans())
    kinds = draw(st.integers(1, 2))
    total = draw(st.integers(max(kinds, cells - with_head - with_tail), min(12, cells + 3)))
    first = draw(st.integers(1, total - 1)) if kinds == 2 else total
    descriptions: list[dict] = []
    if with_head:
        descriptions.append(
            {
                "name": "HEAD",
                "type": "HEAD",
                "nb_layer": 1,
                "time": draw(st.integers(0, 3)),
                "memory_parameter": draw(st.integers(0, 20)),
            }
        )
    for index, count in enumerate([first, total - first] if kinds == 2 else [total]):
        forward = draw(st.integers(1, 10))
        activation = sorted(draw(st.lists(st.integers(1, 40), min_size=5, max_size=5)), reverse=True)
        slowdown = sorted(draw(st.lists(st.integers(0, 10), min_size=4, max_size=4)))
        body = {
            "name": f"BODY_{index}",
            "type": "BODY",
            "nb_layer": count,
            "time": forward,
            "memory_parameter": draw(st.integers(1, 30)),
        }
        # activations fall and backward times grow from NONE to FULL, SLCT/COMM in either order
        order = ["NONE", *draw(st.permutations(["SLCT", "COMM"])), "BOTH", "FULL"]
        for rank, option in enumerate(order):
            body[MEMORY[option]] = activation[rank]
            body[TIME[option]] = 2 * forward + (slowdown[rank - 1] if rank else 0)
        descriptions.append(body)
    if with_tail:
        descriptions.append(
            {
                "name": "TAIL",
                "type": "TAIL",
                "nb_layer": 1,
                "time": draw(st.integers(0, 3)),
                "memory_parameter": draw(st.integers(0, 20)),
            }
        )
    # memory between what the leanest and the fattest even plans need, so it binds
    per_layer_max = max(
        d["memory_parameter"] + micro_batches * max(d[MEMORY[o]] for o in OPTIONS)
        for d in descriptions
        if d["type"] == "BODY"
    )
    ceiling = (total // cells + 1) * per_layer_max * 2 + 40
    memory = draw(st.integers(ceiling // 6, ceiling))
    return descriptions, stages, chunks, micro_batches, float(memory)


# `--closed-form` lists far fewer stage choices (program.work_limit): none that can be optimal is lost.
@pytest.mark.parametrize("objective", ["critical_path", "closed_form"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=instances())
def test_program_optimum_equals_exhaustive_search(objective, instance) -> None:
    _assert_solves_as_exhaustive_search(instance, objective)


def _assert_solves_as_exhaustive_search(instance, objective: str = "critical_path") -> None:
    """The balancer's status and optimum are the exhaustive search's, its plan fits. No time limit: the
    solve ends on its work limits, so a loaded machine cannot cut it short."""
    descriptions, stages, chunks, micro_batches, memory = instance
    expected = exhaustive(descriptions, stages, chunks, micro_batches, memory, objective=objective)
    problem = BalanceInput(layer_set(descriptions), stages, micro_batches, chunks, memory)
    solution = solve(problem, exact=objective == "critical_path")
    event(f"P={stages} V={chunks}, {solution.status}")
    if math.isinf(expected):
        assert solution.status == "infeasible"
        return
    assert solution.status == "optimal"
    assert solution.objective == pytest.approx(expected, rel=1e-9)
    assert solution.plan.fits and not solution.plan.problems()


@st.composite
def alternating_instances(draw):
    """Two layer kinds taking turns (dense and MoE every other layer, kept in model order): every
    layer is a body type of its own, as a model whose kinds alternate is described."""
    stages = draw(st.integers(1, 3))
    chunks = draw(st.integers(1, 2)) if stages > 1 else 1
    cells = stages * chunks
    micro_batches = stages * draw(st.integers(1, 2)) if chunks > 1 else draw(st.integers(1, 2 * stages))
    total = draw(st.integers(max(2, cells), min(8, cells + 3)))
    kinds = []
    for _ in range(2):
        forward = draw(st.integers(1, 10))
        activation = sorted(draw(st.lists(st.integers(1, 40), min_size=5, max_size=5)), reverse=True)
        slowdown = sorted(draw(st.lists(st.integers(0, 10), min_size=4, max_size=4)))
        kind = {"type": "BODY", "nb_layer": 1, "time": forward, "memory_parameter": draw(st.integers(1, 30))}
        order = ["NONE", *draw(st.permutations(["SLCT", "COMM"])), "BOTH", "FULL"]
        for rank, option in enumerate(order):
            kind[MEMORY[option]] = activation[rank]
            kind[TIME[option]] = 2 * forward + (slowdown[rank - 1] if rank else 0)
        kinds.append(kind)
    descriptions: list[dict] = [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": draw(st.integers(0, 3)), "memory_parameter": 5}
    ]
    descriptions += [{**kinds[i % 2], "name": f"BODY_{i}"} for i in range(total)]
    per_layer_max = max(k["memory_parameter"] + micro_batches * max(k[MEMORY[o]] for o in OPTIONS) for k in kinds)
    ceiling = (total // cells + 1) * per_layer_max * 2 + 20
    memory = draw(st.integers(ceiling // 6, ceiling))
    return descriptions, stages, chunks, micro_batches, float(memory)


# a model whose layer kinds alternate: a body type per layer, cells holding runs of many types
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=alternating_instances())
def test_alternating_kinds_optimum_equals_exhaustive_search(instance) -> None:
    _assert_solves_as_exhaustive_search(instance)


@st.composite
def workspace_instances(draw):
    """`instances` with two body kinds and a stage workspace relief (`BalanceInput.workspace`): a constant, and
    per set of ends a stage holds, a relief by the body types it holds that never grows as it holds more."""
    descriptions, stages, chunks, micro_batches, memory = draw(instances())
    bodies = sum(1 for d in descriptions if d["type"] == "BODY")
    group_of = tuple(draw(st.sampled_from([(0,) * bodies, tuple(range(bodies))])))
    groups = max(group_of) + 1
    rows = []
    for roles in (frozenset(), frozenset({"head"}), frozenset({"tail"}), frozenset({"head", "tail"})):
        drawn = draw(st.lists(st.integers(0, 30), min_size=1 << groups, max_size=1 << groups))
        row: list[float] = []
        for mask, value in enumerate(drawn):  # a subset's relief caps its superset's
            row.append(float(min([value, *(row[mask & ~(1 << g)] for g in range(groups) if mask >> g & 1)])))
        rows.append((roles, tuple(row)))
    return descriptions, stages, chunks, micro_batches, memory + 30.0, StageWorkspace(group_of, tuple(rows))


# What a stage is charged depends on the layer kinds it holds (TE's dummy weight gradients per weight shape):
# the listed stage choices and the cell program (`cell_model._relief`) both meet the exhaustive search's optimum.
@pytest.mark.parametrize("listing", ["listed", "cells"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instance=workspace_instances())
def test_a_relief_by_the_kinds_a_stage_holds_keeps_the_exhaustive_optimum(listing, instance) -> None:
    descriptions, stages, chunks, micro_batches, memory, workspace = instance
    by_roles = dict(workspace.relief_mb)

    def relief(_stage: int, ends: frozenset[str], types: frozenset[int]) -> float:
        mask = sum(1 << g for g in {workspace.group_of[t] for t in types})
        return by_roles[ends][mask]

    expected = exhaustive(descriptions, stages, chunks, micro_batches, memory, constant_mb=30.0, relief=relief)
    problem = BalanceInput(layer_set(descriptions), stages, micro_batches, chunks, memory, 30.0, workspace=workspace)
    limits = WorkLimits(listing_work=1) if listing == "cells" else WorkLimits()
    solution = solve(problem, limits=limits)
    event(f"{listing}: {solution.status}, {'no plan fits' if math.isinf(expected) else 'a plan fits'}")
    if math.isinf(expected):
        assert solution.status == "infeasible" or solution.plan is None
        return
    if listing == "cells" and solution.status != "optimal":
        return  # the cell program ran out of its own limits: nothing to compare
    assert solution.status == "optimal"
    assert solution.objective == pytest.approx(expected, rel=1e-9)
    assert solution.plan.fits and not solution.plan.problems()
