"""A SAPP file's `stage_const_mem` is charged on every stage (MindFormers' description builder
writes it: mindspore-lab/mindformers toolkit/pipeline_balance/utils/config.py `get_stage_const_mem`,
passed to its balancer as `constant_memory` by run_pipeline_balance.py).

tests/data/stage_const_mem.json: 4 body layers, time 10 (forward 10, backward 2·10 = 20 under NONE,
(1 + 0.5)·20 = 30 under FULL, SAPP's fallbacks), 100 MB of parameters and 30 MB (NONE) or 5 MB (FULL)
of activations per layer and micro-batch in flight, and stage_const_mem 1000 MB.
At P = 2, m = 4, 1F1B, stage 0 holds 2 micro-batches in flight and stage 1 holds 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppb_core.cli.main import main
from ppb_core.payload.sapp import read_sapp_file

FILE = Path(__file__).parent / "data" / "stage_const_mem.json"


def _balance(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    code = main(["balance", str(FILE), "-s", "2", "-mb", "4", "-t", "30", "--json", *flags])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def test_the_file_s_constant_is_read() -> None:
    assert read_sapp_file(FILE)[1] == 1000.0


def test_every_stage_is_charged_the_constant(capsys: pytest.CaptureFixture[str]) -> None:
    # Room enough for NONE everywhere: the even split 2 | 2.
    # stage 0: 1000 + 2·100 + 2 in flight · 2 layers · 30 = 1320 MB
    # stage 1: 1000 + 2·100 + 1 in flight · 2 layers · 30 = 1260 MB
    result = _balance(capsys, "-mem", "5000")
    assert result["input"]["constant_memory_mb"] == 1000.0
    assert result["recompute"] == [0, 0]
    assert result["stage_memory_mb"] == [1320.0, 1260.0]
    # without the constant (the flag overrides the file) each stage holds 1000 MB less
    assert _balance(capsys, "-mem", "5000", "--constant-memory", "0")["stage_memory_mb"] == [320.0, 260.0]


def test_the_constant_makes_stage_0_recompute(capsys: pytest.CaptureFixture[str]) -> None:
    # 1300 MB per device. Without the constant NONE fits (320, 260 MB) and the iteration is
    # 1F1B's (m + P − 1)·(f + b) = 5·(20 + 40) = 300.
    free = _balance(capsys, "-mem", "1300", "--constant-memory", "0")
    assert free["objective"] == 300.0 and free["recompute"] == [0, 0]
    # With it: stage 0 under NONE needs 1320 > 1300. Three layers on a stage need at least
    # 1000 + 300 + 15·(its in-flight count) ≥ 1315 > 1300, so the split stays 2 | 2; stage 0
    # must recompute one layer (1000 + 200 + 2·(30 + 5) = 1270 MB), stage 1 keeps NONE (1260 MB).
    # Stage 0 then runs f = 20, b = 20 + 30 = 50; stage 1 f = 20, b = 40. 1F1B by hand
    # (S0: F1 F2 B1 F3 B2 F4 B3 B4; S1: F1 B1 F2 B2 F3 B3 F4 B4), [start, end]:
    #   S0 F1 [0,20] F2 [20,40]; S1 F1 [20,40] B1 [40,80]; S0 B1 [80,130] F3 [130,150];
    #   S1 F2 [80,100] B2 [100,140]; S0 B2 [150,200] F4 [200,220]; S1 F3 [150,170] B3 [170,210];
    #   S0 B3 [220,270]; S1 F4 [220,240] B4 [240,280]; S0 B4 [280,330]  → 330.
    tight = _balance(capsys, "-mem", "1300")
    assert tight["status"] == "optimal"
    assert tight["objective"] == 330.0
    assert tight["recompute"] == [1, 0] and tight["offset"] == [0, 0]
    assert tight["stage_memory_mb"] == [1270.0, 1260.0]


def test_the_help_says_the_file_s_constant_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    """`--constant-memory`'s help said "from layers.json, 0" until session 34, against the command's own
    description and what the balance does (the file's stage_const_mem, above)."""
    with pytest.raises(SystemExit):
        main(["balance", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "from a layers.json, its stage_const_mem, 0 without one" in said
    assert "from layers.json, 0)" not in said
