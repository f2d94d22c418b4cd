"""`ppb check RUN.yaml --plan FLAGS` with full recompute: Megatron-LM's `uniform` method over N layers
checkpoints each group of N consecutive layers of a virtual stage as one (megatron/core/recompute.py
`checkpointed_forward`, Megatron-LM d98e8a64: one checkpointed `chunk_runner` per N layers), so a stage
keeps one input per group per micro-batch, not one per layer; `block` N fully recomputes the first N
layers of each virtual stage and leaves the rest alone.

The independent route is `ppb estimate` on the run config itself, the same recompute written as its
`training.recompute` in Megatron's words and the same split as its `parallel.layout`: the same stage
peaks and iteration seconds (tests/test_check_recompute_flags.py does the same for selective flags).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from check_runs import CONFIGS, LAYOUT, SPLIT, check_json, estimated, figures, llama_run

from ppb_core.cli.main import main


def _run_config(folder: Path, recompute: object, layout: str | None = None) -> Path:
    """configs/llama3-8b.yaml as a Megatron run with *recompute* (None: none) and *layout* in place of its own."""
    return llama_run(folder, recompute if recompute is not None else {}, layout, framework="megatron")


def _full(method: str, layers: int) -> tuple[str, dict[str, Any]]:
    flags = f"--recompute-granularity full --recompute-method {method} --recompute-num-layers {layers}"
    return flags, {"granularity": "full", "method": method, "num_layers": layers}


@pytest.mark.parametrize(("method", "layers"), [("uniform", 1), ("uniform", 2), ("uniform", 4), ("block", 3)])
def test_full_flags_are_priced_as_the_run_config_would_price_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, method: str, layers: int
) -> None:
    flags, words = _full(method, layers)
    code, given = check_json(capsys, _run_config(tmp_path, None), f"{LAYOUT} {flags}")
    assert code == 0
    full = [min(layers, n) if method == "block" else n for n in (9, 8, 8, 7)]
    assert [stage["options"] for stage in given["stages"]] == [
        {"FULL": f, **({"NONE": n - f} if n > f else {})} for f, n in zip(full, (9, 8, 8, 7), strict=True)
    ]
    assert figures(given) == estimated(capsys, _run_config(tmp_path, words, SPLIT))


@pytest.mark.parametrize(("layers", "inputs"), [(1, 8), (2, 4), (3, 3), (4, 2), (8, 1)])
def test_a_group_keeps_one_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, layers: int, inputs: int) -> None:
    """By hand: stages 1 and 2 hold 8 layers each and, under 1F1B with P = 4, 3 and 2 micro-batches in
    flight; their peaks differ by one micro-batch's kept memory, all else (weights, the group rebuilt in
    the backward, workspaces) being equal. Under full recompute a checkpoint keeps its input only,
    s·b·h·2 bytes, divided by t under sequence parallelism (Korthikanti et al. 2022, §4.1):
    8192·1·4096·2 / 2 B = 32 MiB, and uniform over N keeps ⌈8/N⌉ of them: 8, 4, 3, 2, 1 for
    N = 1, 2, 3, 4, 8. The seconds do not change: every layer is recomputed once either way."""
    _, given = check_json(capsys, _run_config(tmp_path, None), f"{LAYOUT} {_full('uniform', layers)[0]}")
    peaks = [stage["peak_mb"] for stage in given["stages"]]
    assert [stage["in_flight"] for stage in given["stages"]][1:3] == [[3], [2]]
    assert peaks[1] - peaks[2] == pytest.approx(inputs * 32, abs=1e-6)
    _, single = check_json(capsys, _run_config(tmp_path, None), f"{LAYOUT} {_full('uniform', 1)[0]}")
    assert given["iteration_s"] == pytest.approx(single["iteration_s"], rel=1e-12)


def test_the_flags_group_replaces_the_run_configs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The run config says uniform over 4; the flags say uniform over 1 (and block 3): the flags' are priced."""
    run = _run_config(tmp_path, _full("uniform", 4)[1])
    for method, layers in (("uniform", 1), ("block", 3)):
        flags, words = _full(method, layers)
        code, given = check_json(capsys, run, f"{LAYOUT} {flags}")
        assert code == 0 and given["plan_recompute"] == words
        assert figures(given) == estimated(capsys, _run_config(tmp_path, words, SPLIT))


def test_uniform_groups_need_a_megatron_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    raw = yaml.safe_load((CONFIGS / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / "hf" / "llama3-8b.json")
    raw["framework"] = "torchtitan"
    raw["parallel"]["zero"] = 3  # torchtitan shards with FSDP2
    raw["training"]["recompute"] = {}
    path = tmp_path / "titan.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = main(["check", str(path), "--plan", f"{LAYOUT} {_full('uniform', 2)[0]}", "--json", "--no-optimum", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "uniform method over layer groups" in err[0] and "torchtitan" in err[0]
