"""`ppb check RUN.yaml --plan FLAGS`: Megatron-LM's recompute flags priced as the plan gives them,
in place of the run config's recompute (as its layout replaces the run config's split); refused
only where Megatron-LM refuses them.

The independent route is `ppb estimate` on the run config itself, the same recompute written as
its `training.recompute` in Megatron's words and the same split as its `parallel.layout`: the
same stage peaks and iteration seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"
SPLIT = "Et*9|t*8|t*8|t*7L"
LAYOUT = f"--pipeline-model-parallel-layout '{SPLIT}'"


def _run_config(folder: Path, recompute: object, layout: str | None = None) -> Path:
    """configs/llama3-8b.yaml (recompute in ppb's switches) with *recompute* in its place."""
    raw = yaml.safe_load((CONFIGS / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / "hf" / "llama3-8b.json")
    raw["training"]["recompute"] = recompute
    if layout is not None:
        raw["parallel"]["layout"] = layout
    path = folder / f"llama3-8b-{len(list(folder.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _check(capsys: pytest.CaptureFixture[str], run: Path, plan: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", str(run), "--plan", plan, "--json", "--no-optimum", "-q"])
    return code, json.loads(capsys.readouterr().out)


def _figures(out: dict[str, Any]) -> tuple[list[float], float]:
    return [stage["peak_mb"] for stage in out["stages"]], out["iteration_s"]


def _estimated(capsys: pytest.CaptureFixture[str], run: Path) -> tuple[list[float], float]:
    """`ppb estimate`'s stage peaks (less what the run reserves, as `ppb check` shows them) and seconds."""
    assert main(["estimate", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    peaks = [(stage["peak_bytes"] - stage["reserved_bytes"]) / 2**20 for stage in out["stages"]]
    return peaks, out["iteration"]["seconds"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ("--recompute-granularity selective", {"granularity": "selective"}),
        # megatron/training/arguments.py validate_args: --recompute-activations sets granularity selective
        ("--recompute-activations", {"granularity": "selective"}),
        (
            "--recompute-granularity selective --recompute-modules core_attn mlp",
            {"granularity": "selective", "modules": ["core_attn", "mlp"]},
        ),
    ],
)
def test_selective_flags_are_priced_as_the_run_config_would_price_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: str, words: dict[str, Any]
) -> None:
    # the shipped config says ppb's switches, not Megatron's words: once refused, now priced
    code, given = _check(capsys, CONFIGS / "llama3-8b.yaml", f"{LAYOUT} {flags}")
    assert code == 0 and given["plan_recompute"] == words
    assert [stage["options"] for stage in given["stages"]] == [{"SLCT": n} for n in (9, 8, 8, 7)]
    # the same recompute and split written in the run config, estimated
    assert _figures(given) == _estimated(capsys, _run_config(tmp_path, words, SPLIT))


def test_the_flags_modules_replace_the_run_configs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # the run config says core_attn; the flags say core_attn and mlp: the flags' modules are priced
    run = _run_config(tmp_path, {"granularity": "selective", "modules": ["core_attn"]})
    _, given = _check(capsys, run, f"{LAYOUT} --recompute-granularity selective --recompute-modules core_attn mlp")
    _, own = _check(capsys, run, f"{LAYOUT} --recompute-granularity selective")
    wider = _run_config(tmp_path, {"granularity": "selective", "modules": ["core_attn", "mlp"]}, SPLIT)
    assert _figures(given) == _estimated(capsys, wider)
    # recomputing the MLP's activation too keeps less on every stage
    assert all(a < b for a, b in zip(_figures(given)[0], _figures(own)[0], strict=True))


def test_no_recompute_flag_prices_no_recompute_whatever_the_run_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = _run_config(tmp_path, {"granularity": "selective"})
    _, out = _check(capsys, run, LAYOUT)
    assert [stage["options"] for stage in out["stages"]] == [{"NONE": n} for n in (9, 8, 8, 7)]


@pytest.mark.parametrize(
    ("flags", "field", "problem"),
    [
        # megatron/training/arguments.py validate_args (d98e8a64): "recompute method is not yet
        # supported for selective recomputing granularity"
        ("--recompute-granularity selective --recompute-method uniform", "--recompute-granularity", "method"),
        # transformer_config.py TransformerConfig.__post_init__: recompute_num_layers must be None
        # with selective granularity
        ("--recompute-granularity selective --recompute-num-layers 2", "--recompute-granularity", "num_layers"),
        # __post_init__: "Invalid choices for recompute_modules"
        ("--recompute-granularity selective --recompute-modules attention", "--recompute-modules", "core_attn"),
        # __post_init__: "mla_up_proj in recompute_modules is only supported with multi_latent_attention"
        ("--recompute-granularity selective --recompute-modules mla_up_proj", "--recompute-modules", "multi-latent"),
    ],
)
def test_what_megatron_refuses_is_one_line(
    capsys: pytest.CaptureFixture[str], flags: str, field: str, problem: str
) -> None:
    code = main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", f"{LAYOUT} {flags}", "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and f"--plan: {field}: " in captured.err and problem in captured.err
