"""Megatron-Core refuses `--recompute-modules moe_act` without `--moe-grouped-gemm`
(megatron/core/transformer/transformer_config.py `TransformerConfig.__post_init__`, Megatron-LM
d98e8a64: "moe_act in recompute_modules is only supported with moe_grouped_gemm"). So the flags ppb
prints for such a plan carry the switch, and `ppb check` refuses a whole command line (one stating
`--num-layers`) that names moe_act and leaves the switch out, as Megatron would.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppb_core.balance.megatron import GROUPED_GEMM, Setting, parse_flags
from ppb_core.cli.main import main

MIXTRAL = Path(__file__).parent.parent / "configs" / "mixtral-8x7b.yaml"
LAYOUT = "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'"
MOE_ACT = "--recompute-granularity selective --recompute-modules moe_act"


def test_printed_flags_carry_the_switch() -> None:
    flags = Setting("selective").flags(("core_attn", "moe_act"))
    assert flags == [
        "--recompute-granularity",
        "selective",
        "--recompute-modules",
        "core_attn",
        "moe_act",
        GROUPED_GEMM,
    ]
    read = parse_flags(" ".join(flags))
    assert read.modules == ("core_attn", "moe_act") and GROUPED_GEMM in read.switches
    assert GROUPED_GEMM not in Setting("selective").flags(("core_attn", "mlp"))
    assert GROUPED_GEMM not in Setting("selective").flags()


def _check(capsys: pytest.CaptureFixture[str], plan: str) -> tuple[int, str, str]:
    code = main(["check", str(MIXTRAL), "--plan", plan, "--json", "--no-optimum", "-q"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def test_a_whole_command_without_the_switch_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _check(capsys, f"--num-layers 32 {LAYOUT} {MOE_ACT}")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "--recompute-modules" in err and f"moe_act needs {GROUPED_GEMM}" in err


def test_with_the_switch_moe_act_is_not_what_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # the whole command still leaves other flags at Megatron-LM's defaults (--num-experts 0): refused for those
    code, _, err = _check(capsys, f"--num-layers 32 {LAYOUT} {MOE_ACT} {GROUPED_GEMM}")
    assert code == 2 and "moe_act" not in err


def test_a_partial_text_is_priced(capsys: pytest.CaptureFixture[str]) -> None:
    # a layout and recompute flags say nothing of the rest of the command line: priced as given
    code, out, _ = _check(capsys, f"{LAYOUT} {MOE_ACT}")
    assert code in (0, 1)
    assert json.loads(out)["plan_recompute"] == {"granularity": "selective", "modules": ["moe_act"]}
