"""Every part of `ppb balance` ends within its limits: many chunks per stage once listed every
combination of chunks (98^8 for demo.json at V=8) and ran for minutes past `-t`.

The seconds asserted here are a hang guard, ten times and more what the runs take, not a speed
figure (bench/balance.py measures speed).
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import pytest
from small_models import two_kind_bodies

from ppb_core.balance import BalanceInput, solve
from ppb_core.balance.baselines import uniform_plan
from ppb_core.balance.choices import Catalogue
from ppb_core.balance.program import even_split_best_options
from ppb_core.balance.progress import WorkLimits
from ppb_core.cli.main import main
from ppb_core.payload.sapp import layer_set, read_sapp_file

DATA = Path(__file__).parent / "data"
HANG_GUARD_S = 60.0


def _demo(stages: int, micro_batches: int, chunks: int, memory_mb: float) -> BalanceInput:
    descriptions, constant = read_sapp_file(DATA / "demo.json")
    return BalanceInput(
        layer_set(descriptions, "demo.json"), stages, micro_batches, chunks, memory_mb, constant, "1f1b", "demo.json"
    )


def test_eight_chunks_that_cannot_fit_end_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    code = main(["balance", str(DATA / "demo.json"), "-mb", "8", "-mem", "4", "-i", "8", "-t", "1"])
    seconds = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "no plan fits in 4 MB per device" in err
    assert seconds < HANG_GUARD_S


def test_eight_chunks_that_fit_give_the_best_plan_found_and_its_gap(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    code = main(["balance", str(DATA / "demo.json"), "-mb", "8", "-mem", "150000", "-i", "8", "-t", "1", "--json"])
    seconds = time.perf_counter() - started
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["status"] == "time_limit" and result["stopped_by"] in ("time_limit", "work_limit")
    assert 0 < result["bound"] <= result["objective"] and result["gap"] > 0
    assert all(stage["memory_mb"] <= 150000 for stage in result["stages"])
    assert seconds < HANG_GUARD_S


def test_interleave_search_ends_within_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.perf_counter()
    code = main(["balance", str(DATA / "demo.json"), "-mb", "16", "-mem", "150000", "-i", "auto", "-t", "1", "-q"])
    seconds = time.perf_counter() - started
    assert code == 0
    assert seconds < HANG_GUARD_S


def test_a_listing_cut_by_its_work_budget_is_repeatable() -> None:
    """Stopped by the listing's work budget, not the clock: the same plan twice, proven bound below it."""
    problem = _demo(4, 8, 8, 150000.0)
    limits = WorkLimits(listing_work=20_000_000)
    first = solve(problem, 600.0, limits=limits)
    second = solve(problem, 600.0, limits=limits)
    assert first.stopped_by == "work_limit" and second.stopped_by == "work_limit"
    assert first.plan is not None and second.plan is not None
    assert first.plan.counts == second.plan.counts
    assert first.bound is not None and 0 < first.bound <= first.objective


def _two_kinds(stages: int, chunks: int) -> list[dict]:
    """2 light layers then P·V + 2 heavy ones."""
    return two_kind_bodies(stages * chunks + 2)


@pytest.mark.parametrize("memory_mb", [500.0, 700.0])
def test_a_cut_listing_falls_back_on_the_cell_program_and_proves_the_same_optimum(memory_mb: float) -> None:
    """V = 3 with the stage listing's budget too small for one stage: the program over cell choices
    (`cell_model`) proves the optimum that the listed stage choices prove."""
    problem = BalanceInput(layer_set(_two_kinds(2, 3)), 2, 4, 3, memory_mb)
    # the clock is only a safety net here (16 s at load 5 on 2 cores): the work limits decide
    listed = solve(problem, 600.0)
    cut = solve(problem, 600.0, limits=WorkLimits(listing_work=200))
    assert listed.status == "optimal"
    assert "stage listing stopped by the work limit" in cut.notes
    assert cut.status == "optimal" and cut.stopped_by == "optimal"
    assert cut.objective == pytest.approx(listed.objective, rel=1e-9)
    assert cut.plan is not None and cut.plan.fits and not cut.plan.problems()


def test_too_many_stage_choices_count_as_a_cut_listing() -> None:
    """Past `WorkLimits.stage_choices` the listing counts as cut (the program over them would be too
    large): the cell program proves the same optimum, and the solve says why it took that path."""
    problem = BalanceInput(layer_set(_two_kinds(2, 3)), 2, 4, 3, 700.0)
    listed = solve(problem)
    assert listed.status == "optimal" and listed.choices > 10
    cut = solve(problem, limits=WorkLimits(stage_choices=10))
    assert "stage listing stopped by the work limit" in cut.notes
    assert cut.stopped_by == "optimal" and cut.objective == pytest.approx(listed.objective, rel=1e-9)
    assert cut.plan is not None and cut.plan.fits and not cut.plan.problems()


@pytest.mark.parametrize(
    ("stages", "chunks", "memory_mb"), [(4, 2, 125000.0), (4, 2, 140000.0), (8, 3, 100000.0), (8, 3, 110000.0)]
)
def test_even_split_options_equal_an_exhaustive_search(stages: int, chunks: int, memory_mb: float) -> None:
    """Each stage's least total backward time that fits, against every combination of its cells' choices."""
    problem = _demo(stages, 16, chunks, memory_mb)
    catalogue = Catalogue(problem)
    found = even_split_best_options(problem, catalogue)
    layout = uniform_plan(problem, problem.options[0])
    expected = 0.0
    for s in range(problem.stages):
        per_chunk = []
        for v in range(chunks):
            bodies = tuple(b for b in range(len(layout.counts)) if layout.body_layers(b, v, s))
            sizes = tuple(layout.body_layers(b, v, s) for b in bodies)
            per_chunk.append(catalogue.cell_choices(bodies, sizes))
        totals = [
            sum(cell.backward for cell in cells) for cells in itertools.product(*per_chunk) if catalogue.fits(s, cells)
        ]
        assert totals, "every stage fits in these cases"
        expected += min(totals)
    assert found is not None
    backward = sum(found.cell_backward[v][s] for v in range(chunks) for s in range(problem.stages))
    head_tail = sum(problem.fixed_time("B", v, s) for v in range(chunks) for s in range(problem.stages))
    assert backward == pytest.approx(expected + head_tail, rel=1e-12)
