"""Every number the `ppb` text outputs print carries its unit, in the line or in its table's title or
caption (the house rule: numbers people read in their units)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from ppb_core.cli.balance import render
from ppb_core.cli.estimate import print_iteration
from ppb_core.cli.main import main
from ppb_core.cli.plan import wall_time
from ppb_core.units import counted

CONFIGS = Path(__file__).parent.parent / "configs"


def test_the_estimate_stage_table_says_its_memory_unit(capsys: pytest.CaptureFixture[str]) -> None:
    """The stage table's static, activations, ..., peak and device columns are MB; neither its title
    nor its caption said so (only the run-peak line under it did)."""
    assert main(["estimate", str(CONFIGS / "llama3-8b.yaml")]) == 0
    text = capsys.readouterr().out
    title = next(line for line in text.splitlines() if "Stages (" in line)
    assert "MB" in title, title


def test_a_part_of_the_iteration_rounding_to_zero_prints_no_minus_sign() -> None:
    """A PP 1 run's bubble came out of the schedule as -1e-12 s and printed "-0.0000" seconds, "-0.0%" of
    the iteration (Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh imported, `ppb estimate`)."""
    console = Console(width=200, record=True)
    breakdown = {"compute": 8.7416, "bubble": -1e-12, "dp_communication": 0.0196}
    iteration = {
        "framework": "megatron",
        "seconds": 8.7612,
        "tokens_per_second_per_device": 14_899.0,
        "mfu": 0.775,
        "hfu": 0.775,
        "tokens": 1_048_576,
        "devices": 8,
        "breakdown": breakdown,
    }
    print_iteration(console, iteration)
    bubble = next(line for line in console.export_text().splitlines() if "bubble" in line)
    assert "-" not in bubble and "0.0000" in bubble and "0.0%" in bubble, bubble


def test_the_balance_closed_form_is_in_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    """From a run config the closed form and its optimum are seconds, as the simulated iteration
    beside them: `closed form 3.235 (its optimum 3.235)` printed them bare."""
    assert main(["balance", str(CONFIGS / "llama3-8b.yaml"), "-q"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "closed form" in line)
    assert re.search(r"closed form [\d,]+\.\d{3} s \(its optimum [\d,]+\.\d{3} s\)", line), line


def test_a_closed_form_never_solved_for_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """A search cut short at its listing's work limit (Llama 3 70B, TP4 PP4 VPP5 on 64 H100s) never runs the
    closed form's own program: it printed `closed form 15.336 s (its optimum —)`, a dash nobody could read."""
    assert main(["balance", str(CONFIGS / "llama3-8b.yaml"), "-q", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    result["closed_form"]["optimum_s"] = None  # as such a search leaves it (`program._cut_short`)
    render(result, 1.0)
    line = next(line for line in capsys.readouterr().out.splitlines() if "closed form" in line)
    assert re.search(r"closed form [\d,]+\.\d{3} s \(its own optimum not solved for\)$", line), line


@pytest.mark.parametrize(("seconds", "said"), [(0.676, "676 ms"), (91.013, "91.0 s"), (1234.5, "1,234.5 s")])
def test_ppb_plan_says_its_wall_time_in_seconds_past_one(seconds: float, said: str) -> None:
    """`ppb plan configs/deepseek-v3.yaml -o DIR` titled its table '11 stages in 91013 ms'."""
    assert wall_time(seconds) == said


def test_counts_take_their_nouns_number() -> None:
    assert counted(0, "stage") == "0 stages"
    assert counted(1, "stage") == "1 stage"
    assert counted(2, "layer") == "2 layers"
    assert counted(1, "strategy", "strategies") == "1 strategy"
    assert counted(1234, "strategy", "strategies") == "1,234 strategies"


def test_balance_says_one_stage_mixing_options(capsys: pytest.CaptureFixture[str]) -> None:
    """`ppb balance` printed "1 stages mixing options": its tie line with counts of one, from a real result."""
    assert main(["balance", str(CONFIGS / "llama3-8b.yaml"), "--json", "-q"]) == 0
    result = json.loads(capsys.readouterr().out)
    result["ties"].update(recomputed_layers=1, stages_mixing_options=1)
    render(result, 1.0)
    line = next(line for line in capsys.readouterr().out.splitlines() if "among equally fast plans" in line)
    assert "1 layer recomputed, 1 stage mixing options" in line, line


def test_the_estimate_caption_names_no_cuda_for_reserved_memory_on_ascend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stage table's caption said reserved_mb was "(CUDA context, NCCL)" on every device, an Ascend 910B
    MindFormers run's too (until session 34)."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    run = tmp_path / "ascend.yaml"
    run.write_text("framework: mindformers\n" + text.replace("name: h100-80gb", "name: ascend-910b"))
    assert main(["estimate", str(run), "--no-times"]) == 0
    caption = " ".join(capsys.readouterr().out.split())
    assert "reserved: the run config's device.reserved_mb (the runtime's context and communication" in caption
    assert "CUDA context" not in caption
