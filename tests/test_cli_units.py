"""Every number the `ppb` text outputs print carries its unit, in the line or in its table's title or
caption (the house rule: numbers people read in their units)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"


def test_the_estimate_stage_table_says_its_memory_unit(capsys: pytest.CaptureFixture[str]) -> None:
    """The stage table's static, activations, ..., peak and device columns are MB; neither its title
    nor its caption said so (only the run-peak line under it did)."""
    assert main(["estimate", str(CONFIGS / "llama3-8b.yaml")]) == 0
    text = capsys.readouterr().out
    title = next(line for line in text.splitlines() if "Stages (" in line)
    assert "MB" in title, title


def test_the_balance_closed_form_is_in_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    """From a run config the closed form and its optimum are seconds, as the simulated iteration
    beside them: `closed form 3.235 (its optimum 3.235)` printed them bare."""
    assert main(["balance", str(CONFIGS / "llama3-8b.yaml"), "-q"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "closed form" in line)
    assert re.search(r"closed form [\d,]+\.\d{3} s \(its optimum [\d,]+\.\d{3} s\)", line), line
