"""A run config's plan fits as `ppb check` prices it (`balance.fitting.fitting_placement`): the balancer's
descriptions truncate every term to whole MB (SAPP's rule), so a plan filled to the last MB could need a
few MB more on the loss's stage than the balancer counted."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ppb_core.balance.fitting import ROUNDS, fitting_placement
from ppb_core.balance.progress import Progress
from ppb_core.cli.console import PRINTED_PHASES
from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"


@dataclasses.dataclass(frozen=True)
class _Problem:
    """What `fitting_placement` changes of a balance input: its constant memory."""

    constant_memory_mb: float


def _solver(calls: list[float]):
    def solve(placed: _Problem, **cuts: Any) -> dict[str, Any]:
        calls.append(placed.constant_memory_mb)
        return {"cells": [[{"options": {"NONE": 1}}]], "input": {"constant_memory_mb": placed.constant_memory_mb}}

    return solve


def test_the_constant_grows_by_the_whole_mb_the_plan_is_over() -> None:
    # the plan's fullest stage is 2.3 MB over at C = 100; each MB more of C frees one MB of the plan's
    # stages: ceil(2.3) = 3 MB more, C = 103, then 0.7 MB to spare, and no third solve
    calls: list[float] = []
    result = fitting_placement(
        _Problem(100.0), None, _solver(calls), lambda given, cells: 2.3 - (given["constant_memory_mb"] - 100.0)
    )
    assert calls == [100.0, 103.0]
    assert result["memory_margin_mb"] == 3
    assert "overrun_mb" not in result


def test_a_plan_that_fits_is_solved_once_and_says_nothing() -> None:
    calls: list[float] = []
    result = fitting_placement(_Problem(100.0), None, _solver(calls), lambda given, cells: -0.1)
    assert calls == [100.0]
    assert "memory_margin_mb" not in result


def test_without_an_overrun_the_plan_is_the_balancers() -> None:
    calls: list[float] = []
    result = fitting_placement(_Problem(100.0), None, _solver(calls), None)
    assert calls == [100.0]
    assert "memory_margin_mb" not in result


def test_a_plan_still_over_after_the_rounds_says_by_how_much() -> None:
    # 0.5 MB over whatever C: each round adds ceil(0.5) = 1 MB, ROUNDS of them, then the plan is kept
    calls: list[float] = []
    result = fitting_placement(_Problem(100.0), None, _solver(calls), lambda given, cells: 0.5)
    assert calls == [100.0 + n for n in range(ROUNDS + 1)]
    assert result["memory_margin_mb"] == ROUNDS
    assert result["overrun_mb"] == 0.5


def test_no_plan_is_not_re_evaluated() -> None:
    calls: list[float] = []

    def solve(placed: _Problem, **cuts: Any) -> dict[str, Any]:
        calls.append(placed.constant_memory_mb)
        return {"status": "infeasible", "input": {}}

    def overrun(given: Any, cells: Any) -> float:
        raise AssertionError("no plan to re-evaluate")

    assert "memory_margin_mb" not in fitting_placement(_Problem(1.0), None, solve, overrun)
    assert calls == [1.0]


def test_ppb_check_takes_the_plan_ppb_balance_printed_filled_to_the_last_mb(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """configs/llama3-8b.yaml with 12,994 MB usable (81,559 − 68,565): before `fitting_placement` the
    balancer filled stage 3 to 12,994 MB of its own count (its TAIL and 7 bodies, each term truncated)
    and `ppb check` priced that stage's loss moment at 12,995.3 MB: does not fit, exit 1."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    run = tmp_path / "tight.yaml"
    run.write_text(text.replace("reserved_mb: 4000", "reserved_mb: 68565"))
    plan = tmp_path / "plan.json"
    assert main(["balance", str(run), "-q", "--json", "-o", str(plan)]) == 0
    balanced = json.loads(capsys.readouterr().out)
    assert balanced["input"]["memory_mb"] == 12994
    assert balanced["memory_margin_mb"] >= 1
    code = main(["check", str(run), "--plan", str(plan), "-q", "--json"])
    checked = json.loads(capsys.readouterr().out)
    assert code == 0, checked.get("message")
    assert all(stage["peak_mb"] <= 12994 for stage in checked["stages"])
    assert checked["optimum"]["fits"]


def test_a_solve_again_says_why_before_it_starts() -> None:
    """The plan 2.3 MB over at C = 100 (as in the first test): between the two solves one printed step says the MB
    over and the MB charged (ceil(2.3) = 3), so the second "start" after "done" is not a mystery; a plan that fits
    is solved once and no such step comes."""
    events: list[str] = []
    calls: list[float] = []
    solve = _solver(calls)

    def solving(placed: _Problem, **cuts: Any) -> dict[str, Any]:
        events.append(f"solve {placed.constant_memory_mb:g}")
        return solve(placed, **cuts)

    steps: list[Progress] = []

    def hear(progress: Progress) -> None:
        steps.append(progress)
        events.append(progress.phase)

    fitting_placement(
        _Problem(100.0), None, solving, lambda given, cells: 2.3 - (given["constant_memory_mb"] - 100.0), hear
    )
    assert events == ["solve 100", "memory_refit", "solve 103"]
    assert "memory_refit" in PRINTED_PHASES
    said = steps[0].message
    assert "needs 2.3 MB more than the balancer counted" in said and "charged 3 MB more" in said
    assert "solve 2 of at most" in said
    events.clear()
    fitting_placement(_Problem(100.0), None, solving, lambda given, cells: -0.1, hear)
    assert events == ["solve 100"]
