"""The estimate: the JSON contract the README states, one row per distinct kind, tables through Parquet, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_memory_runs import DENSE, make_run

from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config
from ppb_core.estimate.run import (
    estimate,
)
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import OPTIONS, LayerType
from ppb_core.model.walk import walk
from ppb_core.tables.estimate import estimate_from_frame, estimate_to_frame, stages_from_frame, stages_to_frame

CONTRACT = {
    "model_name",
    "node",
    "kind",
    "count",
    "parameters",
    "static_bytes",
    "activation_bytes",
    "buffer_bytes_one",
    "buffer_bytes_per_micro_batch",
    "buffer_bytes_once",
}


@pytest.fixture(scope="module")
def llama():
    run = load_run_config("configs/llama3-8b.yaml")
    return run, estimate(run)


def test_json_contract(llama):
    run, result = llama
    data = json.loads(json.dumps(result.to_json()))
    assert set(data) >= {"run", "layers", "stages"}
    assert [(row["node"], row["kind"], row["count"]) for row in data["layers"]] == [
        ("HEAD", "embedding", 1),
        ("BODY", "dense", 32),
        ("TAIL", "output", 1),
    ]
    for row in data["layers"]:
        assert set(row) >= CONTRACT
        assert list(row["activation_bytes"]) == list(OPTIONS)
        assert row["buffer_bytes_one"] == row["buffer_bytes_per_micro_batch"] + row["buffer_bytes_once"]
    assert len(data["stages"]) == run.parallel.pp
    assert data["run"]["micro_batches_in_flight"] == [[4, 3, 2, 1]]


@pytest.mark.parametrize(
    ("framework", "parallel", "recompute", "expected"),
    [
        # Megatron's block method: the first 3 of each stage's 8 layers (recompute.py), 4 stages
        ("megatron", {}, {"granularity": "full", "method": "block", "num_layers": 3}, {"NONE": 20, "FULL": 12}),
        # torchtitan's every 2nd block of the one stage's 32 (activation_checkpoint.py `_apply_layer_sac`)
        (
            "torchtitan",
            {"dp": 64, "tp": 1, "pp": 1, "sequence_parallel": False, "zero": 3},
            {"mode": "selective", "option": 2},
            {"NONE": 16, "FULL": 16},
        ),
        ("megatron", {}, "full", {"FULL": 32}),
    ],
)
def test_the_summary_counts_the_layers_each_option_takes(framework, parallel, recompute, expected, capsys, tmp_path):
    """`layer_options`: the mix the run's recompute gives, where `stage_options` names the most's."""
    raw = {
        "framework": framework,
        "models": [{"name": "llm", "config": str(Path("configs/hf/llama3-8b.json").resolve())}],
        # configs/llama3-8b.yaml's layout: 32 layers, 4 stages of 8
        "parallel": {"dp": 8, "tp": 2, "pp": 4, "sequence_parallel": True, "world_size": 64, **parallel},
        "training": {"seq_length": 8192, "micro_batches": 32, "recompute": recompute},
        "device": {"name": "h100-80gb"},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    summary = estimate(load_run_config(path), stages=False).to_json()["run"]
    assert summary["layer_options"] == {"llm": expected}
    if len(expected) > 1:  # the table's title says the mix
        assert main(["estimate", str(path), "--no-times"]) == 0
        assert " · ".join(f"{o} {n}" for o, n in expected.items()) in capsys.readouterr().out


def test_rows_equal_every_layer_evaluated(llama):
    run, result = llama
    memory = MemoryModel(run)
    layers = list(walk(run))
    by_kind = {(row.model_name, row.node, row.kind): row for row in result.layers}
    assert sum(row.count for row in result.layers) == len(layers)
    for layer in layers:
        row = by_kind[(layer.model_name, layer.node, layer.kind.name)]
        assert row.static_bytes == memory.static_bytes(layer)
        for option in OPTIONS:
            state, switches = memory.option_state(layer, option)
            assert row.activation_bytes[option] == memory.activation_bytes(layer, state, switches)
    # the stage totals count every layer: static over the stages is the whole model's
    # each stage's static memory also holds its workspaces once (FrameworkRules.workspace_bytes)
    kinds = [{layer.kind for layer in layers if layer.stage == stage.stage} for stage in result.stages]
    workspaces = sum(memory.rules.workspace_bytes(memory.setup, stage_kinds) for stage_kinds in kinds)
    assert (
        sum(p.static_bytes for p in result.stages) == sum(memory.static_bytes(layer) for layer in layers) + workspaces
    )


def test_hand_figures_in_the_rows():
    # DENSE at tp 2 + SP, s 64: activations halve (115712/2); two gathered inputs of 4096 per
    # micro-batch; ZeRO-1 reduces in place, so nothing once.
    run = make_run(
        DENSE,
        parallel={"tp": 2, "sequence_parallel": True, "pp": 2},
        training={"seq_length": 64, "micro_batches": 4, "recompute": {"ffAct": 0}},
    )
    body = next(row for row in estimate(run).layers if row.node == "BODY")
    assert body.activation_bytes == {
        "NONE": 57856,
        "SLCT": 57856 - 8192,
        "COMM": 57856,
        "BOTH": 57856 - 8192,
        "FULL": 4096,
    }
    # Megatron-Core (the default framework) saves only the sequence shard of a column-parallel
    # linear's input and all-gathers it again in the backward (megatron/core/tensor_parallel/
    # layers.py, LinearWithGradAccumulationAndAsyncCommunication): no buffer per micro-batch; the
    # gathered copy, 64·64·2 = 8192 bytes whole, is a workspace of the stage's working set.
    assert (body.buffer_bytes_one, body.buffer_bytes_per_micro_batch, body.buffer_bytes_once) == (0, 0, 0)
    # MindFormers (SAPP's convention) keeps the all-gather's output unless select_comm_recompute:
    # (t−1)/t of it, 4096, for each of the two gathered inputs, per micro-batch
    mind = make_run(
        DENSE,
        parallel={"tp": 2, "sequence_parallel": True, "pp": 2},
        training={"seq_length": 64, "micro_batches": 4, "recompute": {"ffAct": 0}},
        framework="mindformers",
    )
    body = next(row for row in estimate(mind).layers if row.node == "BODY")
    assert (body.buffer_bytes_one, body.buffer_bytes_per_micro_batch, body.buffer_bytes_once) == (8192, 8192, 0)
    assert body.buffers_by_option["COMM"] == {"one": 0, "per_micro_batch": 0, "once": 0}


def test_time_hook_asks_the_time_source():
    class Times:
        def layer_times(self, layer, state, switches=None):
            return (1.0, 2.0 + (state is LayerType.FULL_REC_LAYER))

    run = make_run(DENSE, training={"seq_length": 64})
    data = estimate(run, times=Times()).to_json()
    body = next(row for row in data["layers"] if row["node"] == "BODY")
    assert body["forward_ms"] == dict.fromkeys(OPTIONS, 1.0)
    assert body["backward_ms"] == {"NONE": 2.0, "SLCT": 2.0, "COMM": 2.0, "BOTH": 2.0, "FULL": 3.0}
    assert "forward_ms" not in estimate(run).to_json()["layers"][0]


def test_tables_round_trip_through_parquet(llama, tmp_path):
    _, result = llama
    layers_path, stages_path = tmp_path / "layers.parquet", tmp_path / "stages.parquet"
    stored = estimate_to_frame(result)
    stored.frame.to_parquet(layers_path)
    stages_to_frame(result).to_parquet(stages_path)
    back = estimate_from_frame(pd.read_parquet(layers_path), run=result.run)
    assert back.to_json()["layers"] == result.to_json()["layers"]
    assert [row.layer_kind for row in back.layers] == [row.layer_kind for row in result.layers]
    assert stages_from_frame(pd.read_parquet(stages_path)) == result.stages
    assert stages_from_frame(pd.read_parquet(stages_path), "full") == result.stages_at_full
    assert estimate_from_frame(stored).to_json() == result.to_json()


def test_timed_rows_round_trip():
    class Times:
        def layer_times(self, layer, state, switches=None):
            return (0.5, 1.25)

    run = make_run(DENSE, training={"seq_length": 64})
    result = estimate(run, times=Times())
    stored = estimate_to_frame(result)
    assert stored.frame["forward_ms_none"].dtype == "Float64"
    assert estimate_from_frame(stored).to_json()["layers"] == result.to_json()["layers"]


def test_cli_json(capsys):
    assert main(["estimate", "configs/mixtral-8x7b.yaml", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [row["kind"] for row in data["layers"]] == ["embedding", "moe", "output"]
    assert data["run"]["parallel"]["ep"] == 8


def test_cli_table(capsys):
    assert main(["estimate", "configs/qwen2.5-7b.yaml"]) == 0
    out = capsys.readouterr().out
    assert "dense" in out and "Stages" in out and "FULL" in out


def test_cli_table_shows_no_hidden_share_for_what_nothing_sends(capsys):
    """torchtitan's FSDP over 8, no TP, PP or DP replicas: no layer collective, recompute gather or DP
    reduction is sent; the JSON says 1.0 hidden for them (`link_seconds` 0), the table "-", not "100%"."""
    assert main(["estimate", "configs/llama3.1-8b-torchtitan.yaml", "--json"]) == 0
    iteration = json.loads(capsys.readouterr().out)["iteration"]
    assert iteration["link_seconds"]["dp_communication"] == 0.0 and iteration["hidden"]["dp_communication"] == 1.0
    assert iteration["link_seconds"]["fsdp_communication"] > 0.0
    assert main(["estimate", "configs/llama3.1-8b-torchtitan.yaml"]) == 0
    rows = {
        line.split("│")[1].strip(): line.split("│")[3].strip()
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("│ hidden: ")
    }
    assert rows["hidden: dp communication"] == "-" and rows["hidden: layer collectives"] == "-"
    assert rows["hidden: fsdp communication"] == f"{iteration['hidden']['fsdp_communication']:.0%}"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (None, "file not found"),
        ("models: [\n", "not valid YAML"),
        ("models: []\ntraining: {seq_length: 8}\ndevice: {name: h100-80gb}\n", "models"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path, capsys, raw, message):
    path = tmp_path / "run.yaml"
    if raw is not None:
        path.write_text(raw)
    assert main(["estimate", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(path) in lines[0]


def test_cli_rows_without_stages(capsys):
    # DeepSeek-V3's rows: HEAD, 3 dense and 58 MoE layers (both MLA), TAIL with its MTP module
    assert main(["estimate", "configs/deepseek-v3.yaml", "--json", "--no-stages"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(row["kind"], row["count"]) for row in data["layers"]] == [
        ("embedding", 1),
        ("dense_mla", 3),
        ("moe_mla", 58),
        ("output_mtp", 1),
    ]
    assert data["stages"] == []


def _llama_at(tmp_path: Path, framework: str = "megatron", **parallel) -> Path:
    """configs/llama3-8b.yaml (32 layers) with *parallel* over its own, written beside its config.json."""
    raw = yaml.safe_load(Path("configs/llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(Path("configs/hf/llama3-8b.json").resolve())
    raw["framework"] = framework
    raw["parallel"].update(parallel)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("parallel", "said"),
    [
        # 32 % 3 = 2: Megatron-LM d98e8a64 arguments.py validate_args asserts num_layers % pp == 0. The layout
        # suggested is ppb's split: 10 each, the 2 left to the cells in order, the ends (embedding, loss) last:
        # stage 1 then stage 0, so 11 | 11 | 10
        ({"pp": 3, "world_size": 48}, "32 layers do not split evenly over pp 3: Megatron-LM refuses it without a "
         "layout (arguments.py validate_args); state the one you launch, e.g. layout: 'Et*11|t*11|t*10L'"),
        # 32 / 4 = 8 a rank, 8 % 3 != 0: transformer_block.py get_num_layers_to_build asserts a rank's share
        # divisible by vp_size. 32 = 12·2 + 8: the 8 extras to the non-end cells in model order (cells 1..8)
        ({"vpp": 3, "schedule": "interleaved"}, "32 layers do not split evenly over pp 4 × 3 virtual stages"),
        # MindFormers fd4deebc mindformers/models/utils.py LayerSetting._check_inputs: the offsets must sum to
        # 32 % 3 = 2, so its default offset 0 is refused; the split 11, 11, 10 is offset [1, 1, 0] over 10 each
        ({"pp": 3, "world_size": 48, "framework": "mindformers"}, "32 layers do not split evenly over pp 3: "
         "MindFormers refuses offset 0 (LayerSetting: the offsets sum to the remainder, 2); state the split you "
         "launch, e.g. layout: 'Et*11|t*11|t*10L' (offset [1, 1, 0])"),
    ],
)  # fmt: skip
def test_a_run_its_framework_would_refuse_is_refused_with_the_split_to_state(tmp_path, capsys, parallel, said):
    """Until session 28 `ppb estimate` priced an uneven Megatron or MindFormers run without a layout on its
    own split, which neither runs: now one line naming the file and parallel.pp, nothing on stdout, exit 2."""
    path = _llama_at(tmp_path, **parallel)
    assert main(["estimate", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1
    assert f"{path}: parallel.pp: {said}" in lines[0]


def test_the_layout_suggested_prices_what_the_run_was_priced_at_before(tmp_path, capsys):
    """The layout the refusal names is accepted by Megatron's rules (`parallel.layout` validated as
    Megatron-Core's) and prices the run on the split `ppb estimate` used before: the stages' layers
    11, 11, 10 (the refusal's `Et*11|t*11|t*10L`); a torchtitan run at pp 3 is not refused (torchtitan
    splits unevenly itself)."""
    path = _llama_at(tmp_path, pp=3, world_size=48, layout="Et*11|t*11|t*10L")
    assert main(["estimate", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [stage["body_layers"] for stage in data["stages"]] == [11, 11, 10]
    # the run without the layout, priced by the core (as `ppb estimate` priced it before): the same stages
    before = estimate(load_run_config(_llama_at(tmp_path, pp=3, world_size=48))).to_json()["stages"]
    assert before == data["stages"]
    titan = yaml.safe_load(Path("configs/llama3.1-8b-torchtitan.yaml").read_text())
    titan["models"][0]["config"] = str(Path("configs/hf/llama3.1-8b.json").resolve())
    titan["parallel"].update(pp=3, world_size=24)
    titan["training"]["micro_batches"] = 3
    (tmp_path / "titan.yaml").write_text(yaml.safe_dump(titan))
    assert main(["estimate", str(tmp_path / "titan.yaml"), "--json", "--no-stages"]) == 0


def _deepseek_mindformers_at(tmp_path: Path, pp: int) -> Path:
    """configs/deepseek-v3.yaml (61 layers, one MTP layer) under MindFormers, no layout, 1F1B over *pp* stages."""
    raw = yaml.safe_load(Path("configs/deepseek-v3.yaml").read_text())
    raw["models"][0]["config"] = str(Path("configs/hf/deepseek-v3.json").resolve())
    raw["framework"] = "mindformers"
    raw["parallel"] = {"dp": 2048 // pp, "tp": 1, "pp": pp, "ep": 64, "etp": 1, "zero": 1, "world_size": 2048}
    path = tmp_path / f"mf-pp{pp}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_mindformers_counts_the_mtp_layers_in_its_split(tmp_path, capsys):
    """MindFormers' LayerSetting splits num_layers + mtp_num_layers (parallel_core transformer_block.py at
    fd4deebc; research/deepseek3 deepseek2_model.py `LayerSetting(config.num_layers + self.mtp_depth, ...)`,
    whose DeepSeek-V3 pretrain yaml states offset [1]*15 + [-1] for pp 16: 4·15 + 2 = 62). Until session 32
    the refusal counted 61: "the offsets sum to the remainder, 13" and an offset summing to 13, which
    MindFormers (and `ppb check`) refuse; and a pp MindFormers splits evenly (62 / 2) was refused."""
    # pp 16: 62 = 16·3 + 14. ppb's split of the 61 body layers: 3 each, the 13 left to cells 0..12 (the MTP
    # cell, the last, after every other) -> 4·13, 3, 3, 3 + m; against 62 // 16 = 3 the offsets 1·13, 0, 0,
    # 1 (the last cell's 3 layers and its MTP layer), summing to 14
    path = _deepseek_mindformers_at(tmp_path, 16)
    assert main(["estimate", str(path), "--json"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (
        f"ppb: error: {path}: parallel.pp: 61 layers and 1 MTP (LayerSetting counts both: 62) do not split evenly "
        "over pp 16: MindFormers refuses offset 0 (LayerSetting: the offsets sum to the remainder, 14); state the "
        "split you launch, e.g. layout: 'Et*4|(t*4|)*12,t*3|t*3|t*3mL' "
        f"(offset {[1] * 13 + [0, 0, 1]})"
    )
    # pp 2: 62 / 2 = 31 a stage, MindFormers' offset 0: 31 layers, then 30 and the MTP layer
    assert main(["estimate", str(_deepseek_mindformers_at(tmp_path, 2)), "--json", "--no-times"]) == 0
    assert [stage["body_layers"] for stage in json.loads(capsys.readouterr().out)["stages"]] == [31, 30]
