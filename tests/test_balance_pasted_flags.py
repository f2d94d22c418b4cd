"""Every Megatron-LM flags string `ppb balance` prints for a shipped config runs as it stands: fed
back to `ppb check --plan` it fits (exit 0). `ppb check` prices the flags by the memory model from
the run config, a path independent of the balancer's choice of plan.

A plan Megatron-Core cannot say (DeepSeek-V3's mixes recompute options per stage) leads with the
fastest plan it can say, whole; its own layout is printed marked as not runnable alone, and alone it
does not fit (issue 13: it ran out by 126,846 MB on stage 0).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from ppb_core.cli.main import main

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


def _balance(capsys: pytest.CaptureFixture[str], config: Path) -> tuple[dict, list[str]]:
    assert main(["balance", str(config), "--json", "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert main(["balance", str(config), "--quiet"]) == 0
    return result, capsys.readouterr().out.splitlines()


def _check(capsys: pytest.CaptureFixture[str], config: Path, flags: str) -> int:
    code = main(["check", str(config), "--plan", flags, "--no-optimum", "--json"])
    capsys.readouterr()
    return code


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.stem)
def test_every_printed_megatron_line_fits(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    result, lines = _balance(capsys, config)
    said = result.get("megatron") or {}
    printed = [line.removeprefix("Megatron-LM: ") for line in lines if line.startswith("Megatron-LM: ")]
    if not said.get("flags"):
        assert printed == []  # DualPipeV, a vision tower: nothing Megatron's to paste
        return
    if result["input"]["framework"] == "torchtitan":
        # a torchtitan run's plan is said in its job TOML lines (none at PP 1), not as Megatron-LM flags; the
        # JSON's layout still reads back
        assert printed == []
    else:
        assert printed == [said["flags"]]  # the JSON and the text give the same flags, and one line of them
    assert _check(capsys, config, said["flags"]) == 0
    if said.get("first_last"):  # said instead of the layout: the recompute flags stay
        words = shlex.split(said["flags"])
        at = words.index("--pipeline-model-parallel-layout")
        swapped = [*words[:at], *shlex.split(said["first_last"]), *words[at + 2 :]]
        assert _check(capsys, config, shlex.join(swapped)) == 0
    if said["flags_of"] == "alternative":
        assert said["alternative"]["flags"] == said["flags"] and not said["recompute_expressible"]
        marked = [line for line in lines if said["layout_only"] in line]
        assert len(marked) == 1 and "NOT runnable alone" in marked[0]


def test_deepseek_v3_leads_with_what_megatron_can_run(capsys: pytest.CaptureFixture[str]) -> None:
    config = next(path for path in CONFIGS if path.stem == "deepseek-v3")
    result, _ = _balance(capsys, config)
    said = result["megatron"]
    assert said["flags_of"] == "alternative" and "--recompute-granularity" in said["flags"]
    # the plan's layout alone runs no recompute: ppb check finds a stage out of memory
    assert _check(capsys, config, said["layout_only"]) == 1
    # the iteration printed for those flags is what `ppb check` prices them at, read back from the flags (its own
    # path: Megatron-LM's words parsed, the layout and the block recompute placed): until session 32 only the
    # plan's 43.7 s was priced, the flags' own (54.3 s) never said
    assert main(["check", str(config), "--plan", said["flags"], "--no-optimum", "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)["iteration"]["seconds"]
    assert result["megatron_iteration"]["seconds"] == pytest.approx(checked, rel=1e-9)
    assert result["megatron_iteration"]["seconds"] > result["iteration"]["seconds"]


def test_the_printed_layout_says_which_launch_flags_it_replaces(capsys: pytest.CaptureFixture[str]) -> None:
    # configs/qwen2.5-7b.yaml runs 2 virtual stages a rank without a layout: its launch says them with
    # --num-layers-per-virtual-pipeline-stage (or --num-virtual-stages-per-pipeline-rank). Megatron-LM's
    # arguments.py `validate_args` (d98e8a64) takes no more than one of those and the layout ("No more than one of
    # the following arguments can be set at the same time"), and transformer_config.py `__post_init__` no layout
    # beside --decoder-first/last-pipeline-num-layers or --account-for-embedding/loss-in-pipeline-split. The
    # layout printed alone gave no word of it; pasted beside the launch's own flag it is refused.
    config = next(path for path in CONFIGS if path.stem == "qwen2.5-7b")
    result, lines = _balance(capsys, config)
    said = result["megatron"]
    assert said["replaces"] == [
        "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
    ]
    after = lines[lines.index(f"Megatron-LM: {said['flags']}") + 1]
    assert after.startswith("  (the layout replaces any --num-layers-per-virtual-pipeline-stage, ")
    assert "Megatron-LM refuses them beside a layout" in after
    # beside the launch's own virtual-stage flag the flags are refused (ppb check reads them as Megatron-LM does)
    assert _check(capsys, config, f"{said['flags']} --num-layers-per-virtual-pipeline-stage 7") == 2
    assert _check(capsys, config, said["flags"]) == 0
