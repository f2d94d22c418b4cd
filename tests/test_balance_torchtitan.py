"""`ppb balance` of a torchtitan run prints torchtitan v0.2.2's TOML lines for the plan's split
(`ppb_core.balance.torchtitan_plan`), and `ppb import torchtitan` reads them back to that split."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ppb_core.balance.torchtitan_import import import_torchtitan
from ppb_core.balance.torchtitan_plan import activation_checkpoint, module_fqns, torchtitan, torchtitan_lines
from ppb_core.cli.main import main
from ppb_core.config.recompute import TorchtitanRecompute

# The rest of a job TOML: Llama-3.1-8B (32 layers), TP 2, 8 GPUs (dp_shard 1 × tp 2 × pp 4, or pp 2 × dp 2).
REST = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 8
seq_len = 8192
"""


def test_module_names_per_stage_are_torchtitans() -> None:
    # generate_llm_fqn_per_model_part's names: tok_embeddings first, layers.N counted on, norm and output last
    assert module_fqns([2, 0, 1]) == [["tok_embeddings", "layers.0", "layers.1"], [], ["layers.2", "norm", "output"]]


def test_one_mode_for_every_block_or_none_said() -> None:
    op = TorchtitanRecompute(mode="selective", option="op")
    assert activation_checkpoint({"NONE"}, None) == ({"mode": "none"}, None)
    assert activation_checkpoint({"FULL"}, op) == ({"mode": "full"}, None)
    assert activation_checkpoint({"SLCT"}, op) == ({"mode": "selective", "selective_ac_option": "op"}, None)
    ac, why = activation_checkpoint({"SLCT"}, {"attBMM": 0})  # ppb's switch set: not torchtitan's op policy
    assert ac is None and "torchtitan's words" in (why or "")
    ac, why = activation_checkpoint({"NONE", "FULL"}, op)
    assert ac is None and "FULL, NONE on different layers" in (why or "")


def _result(grid: list[list[dict[str, int]]], schedule: str, framework: str = "torchtitan") -> dict[str, Any]:
    given = {"stages": len(grid[0]), "interleave": len(grid), "schedule": schedule, "framework": framework}
    return {"input": given, "cells": [[{"options": options} for options in row] for row in grid]}


def test_a_mixed_plan_gives_the_split_only_and_stage_order_is_chunk_by_chunk() -> None:
    # [chunk][stage]: P = 2, V = 2; torchtitan's loop style puts stage rank + chunk·P on each rank, so
    # the parts in order are (0,0) 2 layers, (0,1) 1, (1,0) 1, (1,1) 2 → layers 0-1 | 2 | 3 | 4-5
    grid = [[{"FULL": 2}, {"NONE": 1}], [{"NONE": 1}, {"NONE": 2}]]
    said = torchtitan(_result(grid, "interleaved"), TorchtitanRecompute(mode="full"))
    assert said is not None and said["activation_checkpoint"] is None and "not expressible" in said["note"]
    assert said["lines"] == [
        "[parallelism]",
        "pipeline_parallel_degree = 2",
        'pipeline_parallel_schedule = "Interleaved1F1B"',
        'module_fqns_per_model_part = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2"], ["layers.3"], '
        '["layers.4", "layers.5", "norm", "output"]]',
    ]
    assert torchtitan(_result(grid, "interleaved", "megatron"), None) is None
    assert torchtitan(_result([[{"NONE": 6}]], "1f1b"), None) is None  # PP 1: no split to say
    assert torchtitan(_result(grid, "dualpipev"), None)["lines"] is None  # type: ignore[index]
    assert torchtitan(_result(grid, "gpipe"), None)["lines"] is None  # type: ignore[index]


def _balance(tmp_path: Path, parallelism: str, memory: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    job = tmp_path / "job.toml"
    job.write_text(REST + parallelism + '[activation_checkpoint]\nmode = "full"\n')
    run = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(run)]) == 0
    capsys.readouterr()
    assert main(["balance", str(run), "--json", *(["--memory", memory] if memory else [])]) == 0
    return json.loads(capsys.readouterr().out)


PP4 = "[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 2\npipeline_parallel_degree = 4\n"
PP2V2 = (
    "[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
    'pipeline_parallel_schedule = "Interleaved1F1B"\npipeline_parallel_layers_per_stage = 9\n'
)


# the device's memory, or less (MB) so that the plan mixes options on its layers
@pytest.mark.parametrize(("parallelism", "memory"), [(PP4, ""), (PP4, "30000"), (PP2V2, ""), (PP2V2, "45000")])
def test_the_printed_lines_import_back_to_the_plans_split(
    tmp_path: Path, parallelism: str, memory: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _balance(tmp_path, parallelism, memory, capsys)
    said = result["torchtitan"]
    # the plan's split from its stage table, in model order (chunk by chunk), as a layout
    rows = result["stages"]
    chunks = len(rows[0]["layers_per_chunk"])
    counts = [row["layers_per_chunk"][v] for v in range(chunks) for row in rows]
    split = "|".join(
        ("E" if i == 0 else "") + "t" * n + ("L" if i == len(counts) - 1 else "") for i, n in enumerate(counts)
    )
    dp = (
        "data_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n"
        if chunks == 1
        else ("data_parallel_shard_degree = 2\ntensor_parallel_degree = 2\n")
    )
    toml = REST + "\n".join(said["lines"]).replace("[parallelism]\n", "[parallelism]\n" + dp, 1) + "\n"
    raw = import_torchtitan(toml, 8, "h100-80gb").raw
    assert raw["parallel"]["layout"] == split
    assert raw["parallel"]["pp"] == len(rows) and raw["parallel"]["vpp"] == chunks
    used = {o for row in rows for o, n in row["options"].items() if n}
    assert said["recompute_expressible"] == (memory == "")
    if said["recompute_expressible"]:
        assert raw["training"]["recompute"] == {"mode": {"NONE": "none", "FULL": "full"}[used.pop()]}
    else:
        assert len(used) > 1 and "[activation_checkpoint]" not in said["lines"]
        # beside it, the fastest plan torchtitan can say: one mode for every block, that fits, no faster
        alternative = said["alternative"]
        toml = REST + "\n".join(alternative["lines"]).replace("[parallelism]\n", "[parallelism]\n" + dp, 1) + "\n"
        raw = import_torchtitan(toml, 8, "h100-80gb").raw
        modes = {"no recompute": "none", "every layer fully recomputed": "full"}
        assert raw["training"]["recompute"] == {"mode": modes[alternative["setting"]]}
        assert raw["parallel"]["layout"].count("t") == 32 and raw["parallel"]["layout"].count("|") == len(counts) - 1
        assert alternative["peak_memory_mb"] <= float(memory) and alternative["slower_by"] >= -1e-6


def test_what_runs_as_it_stands_is_printed_first() -> None:
    said = {
        "lines": ["[parallelism]", "pipeline_parallel_degree = 2"],
        "recompute_expressible": False,
        "note": "why",
        "alternative": {"lines": ["[activation_checkpoint]", 'mode = "full"'], "setting": "full", "slower_by": 0.125},
    }
    assert torchtitan_lines(said) == [
        "torchtitan job TOML (the fastest plan torchtitan can say: full, 12.50% slower than the plan above):",
        "  [activation_checkpoint]",
        '  mode = "full"',
        "torchtitan job TOML, the plan's split only, NOT runnable alone (it leaves out the plan's recompute):",
        "  [parallelism]",
        "  pipeline_parallel_degree = 2",
        "  (why)",
    ]
