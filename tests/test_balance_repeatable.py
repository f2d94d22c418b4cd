"""The same input gives the same plan: byte-identical JSON (it holds no wall-clock time) across runs,
time limits and machine load, whenever the solve ends on its own (proven optimal, or a
deterministic work limit) rather than on the clock."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ppb_core.balance import BalanceInput, highs, program
from ppb_core.balance.progress import WORK_BUDGETS, Clock, WorkLimits
from ppb_core.balance.result import balance
from ppb_core.cli.main import main
from ppb_core.payload.sapp import layer_set, read_sapp_file
from ppb_core.search.rank import work_limits

DATA = Path(__file__).parent / "data"
CONFIGS = Path(__file__).parents[1] / "configs"


def _cli_json(capsys: pytest.CaptureFixture[str], time_limit: str) -> tuple[dict[str, Any], str]:
    argv = ["balance", str(DATA / "demo.json"), "-s", "8", "-mb", "16", "-mem", "100000", "-t", time_limit, "--json"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    return json.loads(text), text


def test_two_runs_print_and_write_the_same_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ppb balance RUN.yaml --json -o` twice, every V searched (`-i auto`): stdout and the plan file are
    byte-identical, since the JSON holds results only; the seconds the solve took are said on stderr."""
    printed, written = [], []
    for run in ("first", "second"):
        out = tmp_path / f"{run}.json"
        argv = ["balance", str(CONFIGS / "llama3-8b.yaml"), "-i", "auto", "--json", "-o", str(out)]
        assert main(argv) == 0
        printed.append(capsys.readouterr().out)
        written.append(out.read_bytes())
    assert printed[0] == printed[1] and written[0] == written[1]
    result = json.loads(printed[0])
    assert "seconds" not in result and len(result["interleave_search"]) == 4
    assert all("seconds" not in entry for entry in result["interleave_search"])
    assert result["iteration"]["seconds"] > 0  # the time model's iteration, a result, stays


def test_same_json_from_two_runs_and_two_time_limits(capsys: pytest.CaptureFixture[str]) -> None:
    first, first_text = _cli_json(capsys, "30")
    _, second_text = _cli_json(capsys, "30")
    longer, longer_text = _cli_json(capsys, "300")
    assert first["stopped_by"] == "optimal" and longer["stopped_by"] == "optimal"
    assert first_text == second_text == longer_text


@contextlib.contextmanager
def busy_core() -> Iterator[subprocess.Popen]:
    """Another process spinning on a core meanwhile: the machine under load."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield spinner
    finally:
        spinner.kill()
        spinner.wait()


def _work_limited() -> str:
    descriptions, constant = read_sapp_file(DATA / "demo.json")
    problem = BalanceInput(layer_set(descriptions, "demo.json"), 4, 8, 8, 150000.0, constant, "1f1b", "demo.json")
    # eight chunks per stage: the stage listing runs past this budget and the solve ends on it
    result = balance(problem, 600.0, limits=WorkLimits(listing_work=20_000_000))
    assert result["stopped_by"] == "work_limit"
    return json.dumps(result, indent=2, sort_keys=True)


def test_same_plan_when_a_work_limit_ends_the_solve() -> None:
    assert _work_limited() == _work_limited()


def test_same_plan_under_load() -> None:
    quiet = _work_limited()
    with busy_core() as spinner:
        loaded = _work_limited()
        assert spinner.poll() is None
    assert loaded == quiet


def _megatron_run(time_limit: float) -> tuple[dict[str, Any], str]:
    """llama2_70b.json at P=4, m=8, 56,000 MB for a Megatron-Core run: the plan mixes full recompute
    and none over the stages, which Megatron-Core cannot say, so the fastest plan under each of its
    settings (none, full, block 1..24) is solved beside it."""
    descriptions, constant = read_sapp_file(DATA / "llama2_70b.json")
    problem = BalanceInput(
        layer_set(descriptions, "llama2_70b.json"), 4, 8, 1, 56000.0, constant, "1f1b", "l.json", framework="megatron"
    )
    result = balance(problem, time_limit)
    return result, json.dumps(result, indent=2, sort_keys=True)


def test_the_megatron_alternative_is_the_same_whatever_the_time_limit() -> None:
    # the short limit only has to stay above what the deterministic work limits allow: 30 s of wall
    # clock ran out on a 2-core machine at load 10 with the spinner beside it (a suite among others)
    short, short_text = _megatron_run(120.0)
    _, long_text = _megatron_run(600.0)
    assert short["megatron"]["recompute_expressible"] is False and short["megatron"]["alternative"] is not None
    assert short_text == long_text
    with busy_core() as spinner:
        _, loaded_text = _megatron_run(120.0)
        assert spinner.poll() is None
    assert loaded_text == short_text


def test_the_megatron_settings_share_one_solves_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each setting's solve gets 1/n of every work budget (n settings), so together they may spend
    what one solve spends, whatever their number: the time limit stays a safety bound only."""
    heard: list[WorkLimits] = []
    real = program._solve

    def recording(*args: Any, **kwargs: Any) -> Any:
        heard.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(program, "_solve", recording)
    _megatron_run(600.0)
    full, *settings = heard
    assert full == WorkLimits() and len(settings) > 2
    for name in WORK_BUDGETS:
        assert sum(getattr(limits, name) for limits in settings) <= getattr(full, name), name
    # the limits that are not a budget of work stay
    assert all(limits.rounds == full.rounds and limits.closed_nodes == full.closed_nodes for limits in settings)


def test_scaled_limits_scale_every_budget_once() -> None:
    half = WorkLimits().scaled(0.5)
    for name in WORK_BUDGETS:
        assert getattr(half, name) == max(1, getattr(WorkLimits(), name) // 2), name
    assert half.rounds == WorkLimits().rounds and half.cell_choices == WorkLimits().cell_choices
    # a strategy search's share of the balancer's work is the same helper, never above the defaults
    assert work_limits(0.5) == half and work_limits(3.0) == WorkLimits()


def test_settings_cut_short_leave_the_alternative_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting's solve stops once it is proven no faster than the best setting before it: the
    alternative (and everything else in the JSON) is that of searching every setting to its end."""
    real = program._solve
    stopped: list[str] = []

    def heard(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        stopped.append(found.stopped_by)
        return found

    monkeypatch.setattr(program, "_solve", heard)
    _, cut_text = _megatron_run(600.0)
    assert "cutoff" in stopped  # some settings were cut short here

    def uncut(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **{**kwargs, "cutoff": math.inf})

    monkeypatch.setattr(program, "_solve", uncut)
    _, whole_text = _megatron_run(600.0)
    assert whole_text == cut_text


def test_every_solver_is_made_deterministic_and_without_a_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every HiGHS solver a default solve makes runs on one thread with the fixed seed, no restart, and
    no time limit (HiGHS reads its clock only for `time_limit`): its searches end on node and
    relaxation counts, the same on any machine and load."""
    made: list[Any] = []
    real = highs.new_solver

    def recording(*args: Any, **kwargs: Any) -> Any:
        solver = real(*args, **kwargs)
        made.append(solver)
        return solver

    monkeypatch.setattr(highs, "new_solver", recording)
    descriptions, constant = read_sapp_file(DATA / "llama2_70b.json")
    problem = BalanceInput(layer_set(descriptions, "llama2_70b.json"), 4, 8, 1, 56000.0, constant)
    solution = program.solve(problem)
    assert solution.stopped_by == "optimal" and len(made) > 3
    wanted = {"threads": 1, "parallel": "off", "simplex_strategy": 1, "random_seed": 0, "mip_allow_restart": False}
    assert wanted == highs.DETERMINISTIC
    for solver in made:
        for name, value in wanted.items():
            assert solver.getOptionValue(name)[1] == value, name
        assert solver.getOptionValue("time_limit")[1] == math.inf
    assert Clock().seconds == math.inf  # no wall-clock limit unless one is asked for


def _alternating(chunks: int) -> BalanceInput:
    """Ten layers, light and heavy taking turns (a body type each), on three stages: memory binds."""
    light = {"time": 1.0, "memory_parameter": 20, "memory_activation": 30, "memory_select_rec": 14}
    heavy = {"time": 2.5, "memory_parameter": 45, "memory_activation": 50, "memory_select_rec": 26}
    descriptions = [{"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 0.5, "memory_parameter": 60}]
    for i in range(10):
        kind = light if i % 2 == 0 else heavy
        descriptions.append({"name": f"BODY_{i}", "type": "BODY", "nb_layer": 1, **kind, "memory_recompute": 2})
    descriptions.append({"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1.5, "memory_parameter": 120})
    return BalanceInput(layer_set(descriptions), 3, 6, chunks, 700.0)


def test_same_plan_without_a_time_limit_quiet_and_under_load() -> None:
    """The default solve (no wall-clock limit) of alternating kinds: the same JSON on a quiet machine and
    with another process spinning on a core."""
    for chunks in (1, 2):
        quiet = json.dumps(balance(_alternating(chunks)), sort_keys=True)
        with busy_core() as spinner:
            loaded = json.dumps(balance(_alternating(chunks)), sort_keys=True)
            assert spinner.poll() is None
        assert loaded == quiet
        assert json.loads(quiet)["stopped_by"] == "optimal"


def test_a_solve_the_clock_stops_says_so_loudly(capsys: pytest.CaptureFixture[str]) -> None:
    """`-t` is a last resort: when it stops the search the JSON says so and stderr warns, even with -q."""
    argv = ["balance", str(DATA / "demo.json"), "-s", "8", "-mb", "16", "-mem", "100000", "-t", "0.05", "--json", "-q"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["stopped_by"] == "time_limit"
    assert "warning: the wall-clock limit (-t 0.05 s) stopped the search" in captured.err
    assert main([*argv[:-4], "--json", "-q"]) == 0  # no -t: the work limits end it, no warning
    captured = capsys.readouterr()
    assert json.loads(captured.out)["stopped_by"] == "optimal" and "warning" not in captured.err
