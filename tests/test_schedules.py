"""Pipeline schedules: micro-batches in flight and iteration times, against hand-derived figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppb_core.schedules import (
    in_flight_vectors,
    iteration_time,
    micro_batches_in_flight,
    one_f_one_b_time,
    simulate,
    stage_orders,
)


def test_1f1b_in_flight_matches_megatrons_warm_up() -> None:
    # Megatron-LM's 1F1B (megatron/core/pipeline_parallel/schedules.py): P=4, V=1 → [4, 3, 2, 1]
    # (stage s runs P − s − 1 warm-up forwards, then one more).
    assert micro_batches_in_flight("1f1b", 4, 1, 8) == [[4, 3, 2, 1]]


def test_interleaved_in_flight_matches_megatrons_warm_up() -> None:
    # Megatron-LM's interleaved 1F1B: P=4, V=2, m=8 → chunk 0 [7, 5, 4, 4], chunk 1 [4, 4, 3, 1].
    # Megatron-LM: stage s runs 2(P − s − 1) + (V − 1)·P warm-up forwards and one more before its
    # first backward; forwards go in groups of P micro-batches, chunk 0 then chunk 1:
    # s=0: 6 + 4 + 1 = 11 forwards = 4 (c0) + 4 (c1) + 3 (c0) → (7, 4); s=1: 9 → (5, 4);
    # s=2: 7 → (4, 3); s=3: 5 → (4, 1).
    assert micro_batches_in_flight("interleaved", 4, 2, 8) == [[7, 5, 4, 4], [4, 4, 3, 1]]


def test_interleaved_peak_vectors_include_the_steady_state_shift() -> None:
    # After stage 0's first backward (chunk 1, micro-batch 0) it runs chunk 0's micro-batch 7:
    # (7, 4) → (7, 3) → (8, 3). Both vectors hold 11 micro-batches; which one is the peak depends
    # on what each chunk keeps, so the balancer charges both (SAPP's sapp_solver.py charges (7, 4) only).
    assert in_flight_vectors("interleaved", 4, 2, 8)[0] == [(8, 3), (7, 4)]


def test_1f1b_clamps_by_micro_batches() -> None:
    # Where we differ from both reference formulas: with m = 2 < P = 4, stage s holds
    # min(P − s, m) micro-batches: [2, 2, 2, 1]. SAPP's P − s gives [4, 3, 2, 1] (more than exist)
    # and MemEst's pp_1f1b_micro_factor, min(P, m) − s, gives [2, 1, 0, −1].
    assert micro_batches_in_flight("1f1b", 4, 1, 2) == [[2, 2, 2, 1]]


def test_dualpipev_in_flight() -> None:
    # DualPipeV step 1 runs 2(P − s − 1) chunk-0 forwards and step 2 s + 1 (F0, F1) pairs: chunk 0
    # holds 2P − s − 1, chunk 1 s + 1; step 4 then overlaps a chunk-0 forward with a chunk-1
    # backward, so chunk 0 reaches 2P − s with chunk 1 still at s + 1 (SAPP's sapp_solver.py;
    # MemEst's pp_1f1b_micro_factor, 2P − 1 − s and s, are the counts one step earlier).
    # P=4: chunk 0 [8, 7, 6, 5], chunk 1 [1, 2, 3, 4].
    assert micro_batches_in_flight("dualpipev", 4, 2, 8) == [[8, 7, 6, 5], [1, 2, 3, 4]]


def test_gpipe_holds_every_micro_batch() -> None:
    # GPipe runs every forward before any backward: all m micro-batches (MemEst's pp_1f1b_micro_factor
    # says p, wrong for m ≠ p).
    assert micro_batches_in_flight("gpipe", 4, 1, 6) == [[6, 6, 6, 6]]


def test_1f1b_with_interleave_runs_interleaved() -> None:
    assert micro_batches_in_flight("1f1b", 4, 2, 8) == micro_batches_in_flight("interleaved", 4, 2, 8)


@pytest.mark.parametrize(
    ("schedule", "stages", "chunks", "micro_batches"),
    [
        ("interleaved", 4, 2, 3),
        ("interleaved", 5, 2, 7),
        ("dualpipev", 4, 2, 7),
        ("dualpipev", 4, 3, 8),
        ("warp", 2, 1, 2),
    ],
)
def test_impossible_sizes_are_refused(schedule: str, stages: int, chunks: int, micro_batches: int) -> None:
    with pytest.raises(ValueError):
        stage_orders(schedule, stages, chunks, micro_batches)


def _uniform(stages: int, chunks: int, value: float) -> list[list[float]]:
    return [[value] * stages for _ in range(chunks)]


@pytest.mark.parametrize(("stages", "micro_batches"), [(1, 3), (2, 2), (4, 8), (4, 2), (8, 3)])
def test_1f1b_even_stages(stages: int, micro_batches: int) -> None:
    # Even stages: (m + P − 1)·(f + b) with f = 1, b = 2.
    got = iteration_time("1f1b", _uniform(stages, 1, 1.0), _uniform(stages, 1, 2.0), micro_batches)
    assert got == (micro_batches + stages - 1) * 3


@pytest.mark.parametrize(("stages", "chunks", "micro_batches"), [(4, 2, 8), (4, 3, 12), (2, 2, 4), (8, 4, 16)])
def test_interleaved_even_cells(stages: int, chunks: int, micro_batches: int) -> None:
    # Narayanan et al. 2021: with m a multiple of P the bubble is (P − 1)·(f + b) per chunk, so
    # the iteration is (m·V + P − 1)·(f + b) with per-chunk f = 1, b = 2.
    got = iteration_time("interleaved", _uniform(stages, chunks, 1.0), _uniform(stages, chunks, 2.0), micro_batches)
    assert got == (micro_batches * chunks + stages - 1) * 3


def test_gpipe_even_stages() -> None:
    # (m + P − 1)·f forward wave, then (m + P − 1)·b backward wave: (8 + 3)·3 = 33.
    assert iteration_time("gpipe", _uniform(4, 1, 1.0), _uniform(4, 1, 2.0), 8) == 33


def test_uneven_1f1b_differs_from_the_closed_form() -> None:
    # P=2, m=2, F = (3, 1), B = (1, 1). Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1:
    # s0.F0 [0,3], s0.F1 [3,6], s1.F0 [3,4], s1.B0 [4,5], s1.F1 [6,7], s1.B1 [7,8], s0.B0 [6,7],
    # s0.B1 [8,9]: 9. The closed form Σ C + (m − 1)·max C = (4 + 2) + 4 = 10 overstates it.
    assert iteration_time("1f1b", [[3.0, 1.0]], [[1.0, 1.0]], 2) == 9
    assert one_f_one_b_time([3.0, 1.0], [1.0, 1.0], 2) == 10
    # The critical path: s0.F0, s0.F1, s1.F1, s1.B1, s0.B1 = 3 + 3 + 1 + 1 + 1.
    timeline = simulate("1f1b", [[3.0, 1.0]], [[1.0, 1.0]], 2)
    assert timeline.path_counts() == {("F", 0, 0): 2, ("F", 0, 1): 1, ("B", 0, 1): 1, ("B", 0, 0): 1}


@settings(max_examples=60, deadline=None)
@given(
    schedule=st.sampled_from(["1f1b", "interleaved", "gpipe", "dualpipev"]),
    stages=st.integers(1, 5),
    extra=st.integers(0, 6),
    data=st.data(),
)
def test_schedules_are_complete_and_respect_dependencies(schedule: str, stages: int, extra: int, data) -> None:
    chunks = {"1f1b": 1, "interleaved": 2, "gpipe": 1, "dualpipev": 2}[schedule]
    if schedule == "dualpipev" and stages == 1:
        stages = 2
    micro_batches = (2 * stages if schedule == "dualpipev" else stages) + extra
    if schedule == "interleaved":
        micro_batches = stages * (1 + extra % 3)
    times = st.lists(st.floats(0.5, 10.0), min_size=stages * chunks, max_size=stages * chunks)
    flat_forward, flat_backward = data.draw(times), data.draw(times)
    forward = [flat_forward[c * stages : (c + 1) * stages] for c in range(chunks)]
    backward = [flat_backward[c * stages : (c + 1) * stages] for c in range(chunks)]
    timeline = simulate(schedule, forward, backward, micro_batches)
    for stage, order in enumerate(timeline.orders):
        ops = {(op.kind, op.chunk, op.micro_batch) for op in order}
        assert len(ops) == len(order) == 2 * chunks * micro_batches
        for start, end, previous_end in zip(
            timeline.starts[stage][1:], timeline.ends[stage][1:], timeline.ends[stage][:-1], strict=True
        ):
            assert start >= previous_end - 1e-9 and end >= start
        held = [0] * chunks
        for op in order:
            held[op.chunk] += 1 if op.kind == "F" else -1
            assert held[op.chunk] >= 0  # never a backward before its forward
    # Every stage is busy for its own work, so the iteration is at least the busiest stage.
    busiest = max(micro_batches * sum(forward[c][s] + backward[c][s] for c in range(chunks)) for s in range(stages))
    assert timeline.makespan >= busiest - 1e-9
