"""`ppb census RUN.yaml`: a torchtitan run's block under its checkpointing, measured beside the rules.

The figures the command prints must be the library's: `measure_block` at the run's widths and the
torchtitan memory rules on one device (test_census_torchtitan's `_predicted`, its own run config).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from small_models import SMALL_TORCHTITAN_RUN as RUN
from test_census_torchtitan import _predicted

from ppb_core.census.torchtitan import BlockDims, measure_block
from ppb_core.cli.main import main

AC = ("none", "op", "full")


def _run(tmp_path: Path, text: str = RUN) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_prints_the_library_figures_per_checkpointing_mode(tmp_path, capsys) -> None:
    dims, tokens = BlockDims(128, 2, 1, 352), 64
    expected = {ac: (measure_block(dims, tokens, ac).kept_bytes, _predicted(dims, tokens, ac)) for ac in AC}
    # the rules leave out the norms' fp32 statistics, 2 norms · 4 bytes · 64 tokens, kept under none only
    assert expected["none"][0] - expected["none"][1] == 2 * 4 * 64
    assert all(measured == predicted for measured, predicted in (expected["op"], expected["full"]))

    run = _run(tmp_path)
    assert main(["census", str(run), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["tokens"] == 64 and printed["dtype"] == "bf16" and printed["compiled"] is False
    for mode in printed["modes"]:
        measured, predicted = expected[mode["ac"]]
        assert (mode["measured_bytes"], mode["predicted_bytes"]) == (measured, predicted)
        assert mode["difference"] == pytest.approx((predicted - measured) / measured)
    assert [mode["ac"] for mode in printed["modes"]] == ["none", "op", "full"]

    assert main(["census", str(run)]) == 0
    rows = {
        cells[0]: cells[1:]
        for line in capsys.readouterr().out.splitlines()
        if len(cells := [cell.strip() for cell in line.strip("│ ").split("│")]) == 4 and cells[0] in expected
    }
    for ac, (measured, predicted) in expected.items():
        assert rows[ac] == [
            f"{measured / 1e6:,.3f}",
            f"{predicted / 1e6:,.3f}",
            f"{(predicted - measured) / measured:+.2%}",
        ]
    assert rows["none"][2] == "-0.17%"  # 512 / 296,960 bytes (the statistics over the measured block)
