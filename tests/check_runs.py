"""What the `ppb check` flag tests share: configs/llama3-8b.yaml with a recompute and a split put in, the
check's JSON, and the independent route (`ppb estimate` on the run config itself) to compare it with."""

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


def llama_run(folder: Path, recompute: object, layout: str | None = None, framework: str | None = None) -> Path:
    """configs/llama3-8b.yaml with *recompute* (and *layout*, *framework*) in place of its own."""
    raw = yaml.safe_load((CONFIGS / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / "hf" / "llama3-8b.json")
    raw["training"]["recompute"] = recompute
    if framework is not None:
        raw["framework"] = framework
    if layout is not None:
        raw["parallel"]["layout"] = layout
    path = folder / f"llama3-8b-{len(list(folder.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def check_json(capsys: pytest.CaptureFixture[str], run: Path, plan: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", str(run), "--plan", plan, "--json", "--no-optimum", "-q"])
    return code, json.loads(capsys.readouterr().out)


def figures(out: dict[str, Any]) -> tuple[list[float], float]:
    return [stage["peak_mb"] for stage in out["stages"]], out["iteration_s"]


def estimated(capsys: pytest.CaptureFixture[str], run: Path) -> tuple[list[float], float]:
    """`ppb estimate`'s stage peaks (less what the run reserves, as `ppb check` shows them) and seconds."""
    assert main(["estimate", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    peaks = [(stage["peak_bytes"] - stage["reserved_bytes"]) / 2**20 for stage in out["stages"]]
    return peaks, out["iteration"]["seconds"]
