"""The same input gives the same plan: byte-identical JSON but for the seconds a solve took, across
runs, time limits and machine load, whenever the solve ends on its own (proven optimal, or a
deterministic work limit) rather than on the clock."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ppb_core.balance import BalanceInput
from ppb_core.balance.progress import WorkLimits
from ppb_core.balance.result import balance
from ppb_core.cli.main import main
from ppb_core.payload.sapp import layer_set, read_sapp_file

DATA = Path(__file__).parent / "data"


def _without_seconds(value: Any) -> Any:
    """The JSON with every `seconds` field (the wall-clock time a solve took) left out."""
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_seconds(v) for v in value]
    return value


def _cli_json(capsys: pytest.CaptureFixture[str], time_limit: str) -> tuple[dict[str, Any], str]:
    argv = ["balance", str(DATA / "demo.json"), "-s", "8", "-mb", "16", "-mem", "100000", "-t", time_limit, "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    return result, json.dumps(_without_seconds(result), indent=2, sort_keys=True)


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
    return json.dumps(_without_seconds(result), indent=2, sort_keys=True)


def test_same_plan_when_a_work_limit_ends_the_solve() -> None:
    assert _work_limited() == _work_limited()


def test_same_plan_under_load() -> None:
    quiet = _work_limited()
    with busy_core() as spinner:
        loaded = _work_limited()
        assert spinner.poll() is None
    assert loaded == quiet
