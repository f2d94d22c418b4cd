"""Progress when stderr is not a terminal (CI logs, pipes): plain lines, throttled, and why it stopped."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
from test_balance_near_options import _near_body

from ppb_core.balance import BalanceInput, program, solve
from ppb_core.balance import memory_floor as floor
from ppb_core.balance.choices import LISTING_STEPS
from ppb_core.balance.progress import Progress, WorkLimits
from ppb_core.cli import console
from ppb_core.cli.console import PlainLines, progress_hook
from ppb_core.cli.main import main
from ppb_core.payload.sapp import layer_set

DATA = Path(__file__).parent / "data"


def test_plain_lines_come_at_most_every_few_seconds_and_end_with_why() -> None:
    moments = iter([0.0, 1.0, 4.9, 5.0, 6.0, 9.9, 10.0, 11.0])  # the start, then one per step
    written: list[str] = []
    lines = PlainLines(now=lambda: next(moments), write=written.append)
    for step in ("a", "b", "c", "d", "e", "f"):  # at 1.0, 4.9, 5.0, 6.0, 9.9, 10.0
        lines(step)
    lines("done", last=True)  # at 11.0: shown, since lines came before
    # 5 s after the start (c at 5.0), 5 s after c (f at 10.0), and the end
    assert written == ["c", "f", "done"]


def test_a_quick_command_prints_no_progress() -> None:
    moments = iter([0.0, 0.5, 1.0])
    written: list[str] = []
    lines = PlainLines(now=lambda: next(moments), write=written.append)
    lines("round")
    lines("done", last=True)
    assert written == []


def test_piped_balance_writes_progress_lines_to_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "PIPED_EVERY_S", 0.0)  # every step, for the test
    code = main(["balance", str(DATA / "demo.json"), "-s", "4", "-mb", "8", "-mem", "150000", "-t", "60", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    result = json.loads(captured.out)  # stdout is the plan alone
    lines = captured.err.splitlines()
    assert lines and all(line.startswith("[") for line in lines)
    assert any("incumbent" in line and "bound" in line and "gap" in line for line in lines)
    assert lines[-1].split("] ", 1)[1].startswith("done") and "proven optimal" in lines[-1]
    assert f"incumbent {result['objective']:.6g}" in lines[-1]


def test_quiet_prints_nothing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "PIPED_EVERY_S", 0.0)
    argv = ["balance", str(DATA / "demo.json"), "-s", "4", "-mb", "8", "-mem", "150000", "-t", "60", "--json", "-q"]
    code = main(argv)
    assert code == 0 and capsys.readouterr().err == ""
    with progress_hook(quiet=True) as hook:
        assert hook is None


def test_the_hook_shows_seconds_when_the_unit_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "PIPED_EVERY_S", 0.0)
    written: list[str] = []
    monkeypatch.setattr(console, "PlainLines", lambda: PlainLines(write=written.append))
    clock = iter([50.0, 52.0])  # the hook made at 50 s, the step heard at 52 s: 2.0 s into the command
    monkeypatch.setattr(console.time, "perf_counter", lambda: next(clock))
    with progress_hook(unit_s=1e-3) as hook:
        assert hook is not None
        hook(Progress("round", "round 1", 2.0, incumbent=3271.0, bound=3104.0))
    assert written == ["[2.0 s] round: incumbent 3.271 s, bound 3.104 s, gap 5.11% — round 1"]


def test_two_solves_of_one_command_keep_one_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3's balance solves MTP with the loss, then apart: the second solve's steps printed its own
    clock, `[14.0 s] done` then `[6.3 s] probing` (session 33). The command's clock now: made at 100 s, the first
    solve's end heard at 114.0 s (its own 14.0 s), the second's step at 120.3 s (its own 6.3 s): 14.0 and 20.3 s."""
    monkeypatch.setattr(console, "PIPED_EVERY_S", 0.0)
    written: list[str] = []
    monkeypatch.setattr(console, "PlainLines", lambda: PlainLines(write=written.append))
    clock = iter([100.0, 114.0, 120.3])
    monkeypatch.setattr(console.time, "perf_counter", lambda: next(clock))
    with progress_hook() as hook:
        assert hook is not None
        hook(Progress("done", "proven optimal", 14.0))
        hook(Progress("probing", "round 1", 6.3))
    assert written == ["[14.0 s] done — proven optimal", "[20.3 s] probing — round 1"]


def test_a_model_that_cannot_fit_reports_its_least_memory_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The least-memory program after an infeasible balance can run a minute on a hopeless model: it
    says it started (a printed line) and, as it runs, its nodes, best plan and bound (the spinner)."""
    monkeypatch.setattr(floor, "WATCH_EVERY_S", 0.0)  # every callback of the search, whatever the clock
    steps: list[Progress] = []
    problem = BalanceInput(layer_set([_near_body(26)]), 2, 16, 12, 40_000.0)
    assert solve(problem, progress=steps.append).status == "infeasible"
    phases = [step.phase for step in steps]
    assert "least_memory" in console.PRINTED_PHASES and "least_memory_search" not in console.PRINTED_PHASES
    started = [step.message for step in steps if step.phase == "least_memory"]
    assert started[0].startswith("no plan fits: finding the least memory a plan needs, even split ")
    assert any("nodes, best plan" in step.message for step in steps if step.phase == "least_memory_search")
    assert phases.index("least_memory") < phases.index("done")


def test_a_long_stage_listing_reports_its_work_as_it_goes() -> None:
    """The stage listing can run seconds before its budget cuts it: it tells how much of its budget it has
    spent each 1/`LISTING_STEPS` of it, rising, never past the budget (the near-equal options on P=2, V=12
    list millions of elements before they prove that none fits in 40,000 MB; the budget here is 3,000,000)."""
    steps: list[Progress] = []
    budget = 3_000_000
    problem = BalanceInput(layer_set([_near_body(26)]), 2, 16, 12, 40_000.0)
    solve(problem, progress=steps.append, limits=WorkLimits(listing_work=budget))
    told = [step.message for step in steps if step.phase == "listing_work" and "stage choices" in step.message]
    spent = [int(text.split(": ", 1)[1].split(" of ", 1)[0].replace(",", "")) for text in told]
    assert len(spent) >= 2 and spent == sorted(spent) and spent[-1] <= budget
    assert all(f"of {budget:,} elements of work" in text for text in told)
    assert all(b - a >= budget / LISTING_STEPS for a, b in pairwise(spent))


def test_a_round_of_the_program_reports_its_nodes_as_it_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """One round of a large program can run minutes (1,024 layers over P=64, V=8: a round of 20 nodes, over ten
    minutes of strong branching on a loaded machine, said nothing): its nodes are shown as they go (the spinner's
    step, not a printed line), and the plan is the one solved unwatched (the callback only reads)."""
    monkeypatch.setattr(program, "WATCH_EVERY_S", 0.0)  # every callback of the search, whatever the clock
    steps: list[Progress] = []
    problem = BalanceInput(layer_set([_near_body(26)]), 4, 16, 2, 150_000.0)
    watched = solve(problem, progress=steps.append)
    searching = [step for step in steps if step.phase == "round_search"]
    assert searching and "round_search" not in console.PRINTED_PHASES
    assert all("branch-and-bound nodes this round" in step.message for step in searching)
    unwatched = solve(problem)
    assert (watched.objective, watched.plan) == (unwatched.objective, unwatched.plan)
