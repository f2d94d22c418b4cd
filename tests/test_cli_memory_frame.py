"""Every command prints a stage's peak in one frame: allocated (the run config's device.reserved_mb, the CUDA
context and NCCL's buffers outside the allocator, aside), held to the device's usable memory (the device less
reserved_mb). `ppb estimate --json` keeps `peak_bytes` with `reserved_bytes` in it (its documented key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"
RUN = str(CONFIGS / "llama3-8b.yaml")
RESERVED_MB = 4000  # configs/llama3-8b.yaml: device: {name: h100-80gb, reserved_mb: 4000}
MB = 2**20


def _rows(out: str) -> list[list[str]]:
    """The cells of a rich table's rows whose first cell is a stage number."""
    rows = []
    for line in out.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells and cells[0].isdigit():
            rows.append(cells)
    return rows


@pytest.fixture
def estimated(capsys: pytest.CaptureFixture[str]) -> dict:
    """`ppb estimate --json` of configs/llama3-8b.yaml (uniform split, its SLCT recompute)."""
    assert main(["estimate", RUN, "--json", "--no-times"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_prints_allocated_peaks_against_usable_memory(
    capsys: pytest.CaptureFixture[str], estimated: dict
) -> None:
    stages = estimated["stages"]
    assert all(stage["reserved_bytes"] == RESERVED_MB * MB for stage in stages)
    assert main(["estimate", RUN, "--no-times"]) == 0
    out = capsys.readouterr().out
    rows = [row for row in _rows(out) if len(row) == 14]
    assert len(rows) == len(stages) == 4
    device_mb = estimated["run"]["device"]["memory_mb"]
    for row, stage in zip(rows, stages, strict=True):
        # columns: stage layers in-flight static activations buffers working loss reserved peak moment full usable
        assert row[8] == f"{RESERVED_MB:,.1f}"
        assert row[9] == f"{stage['peak_bytes'] / MB - RESERVED_MB:,.1f}"  # the JSON's peak less reserved_mb
        assert row[12] == f"{device_mb - RESERVED_MB:,.1f}"  # 81,559 - 4,000 = 77,559.0
    out = " ".join(out.split())
    top = max(stage["peak_bytes"] for stage in stages) / MB - RESERVED_MB
    assert f"run peak: {top:,.1f} MB allocated" in out
    assert f"of {device_mb - RESERVED_MB:,.1f} MB usable" in out


def test_check_and_balance_print_the_estimates_peaks(
    capsys: pytest.CaptureFixture[str], estimated: dict, tmp_path: Path
) -> None:
    """The uniform split at the run's SLCT, as a MindFormers yaml plan to `ppb check` and as `ppb balance`'s
    SLCT baseline, prices each stage to the MB `ppb estimate` prints (same frame, three paths)."""
    allocated = [stage["peak_bytes"] / MB - RESERVED_MB for stage in estimated["stages"]]
    usable = estimated["run"]["device"]["memory_mb"] - RESERVED_MB
    plan = tmp_path / "plan.yaml"
    plan.write_text("offset: [0, 0, 0, 0]\nrecompute: False\nselect_recompute: True\nselect_comm_recompute: False\n")
    assert main(["check", RUN, "--plan", str(plan), "--json", "--no-optimum"]) == 0
    checked = json.loads(capsys.readouterr().out)["stages"]
    assert [row["peak_mb"] for row in checked] == pytest.approx(allocated, abs=0.05)
    assert all(row["device_mb"] == usable for row in checked)
    assert main(["check", RUN, "--plan", str(plan), "--no-optimum"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the table's title wraps
    assert "usable MB" in out and "the device less device.reserved_mb" in out

    assert main(["balance", RUN, "--json"]) == 0
    balanced = json.loads(capsys.readouterr().out)
    assert balanced["input"]["memory_mb"] == usable
    slct = next(row for row in balanced["baselines"] if row["option"] == "SLCT")
    assert slct["peak_mb"] == pytest.approx(max(allocated), abs=0.05)
    assert main(["balance", RUN]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"memory {usable:,g} MB usable (the device less device.reserved_mb)" in out
