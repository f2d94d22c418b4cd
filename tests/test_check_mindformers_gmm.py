"""`ppb check --plan` of a MindFormers yaml whose `moe_config.use_gmm` is on: MindFormers then runs MoEV3
(mindformers/models/llama/llama_layer.py `LlamaFeedForwardWithMoE.__init__`, 6bac7f5ab^, the DeepSeek-V3
pretrain yaml's path), whose experts are whole on each expert-parallel rank (moev3.py `FFN`,
`ffn_forward_func`: AlltoAllV over `expert_parallel` ranks, GroupedMatmul on the whole weights) and which
ignores the capacity factor (`MoEV3.__init__`: "Capacity factor is ignored"). A run config pricing expert
TP at tp or a capacity prices another MoE: refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppb_core.cli.main import main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _run(folder: Path, parallel: str, moe: str, tp: int = 2) -> Path:
    """configs/mixtral-8x7b.yaml's model and sizes as a MindFormers run on 910B (tp 2 + SP, ep 8; or *tp*)."""
    path = folder / "run.yaml"
    path.write_text(
        "framework: mindformers\n"
        f"models: [{{name: llm, config: {CONFIGS / 'hf' / 'mixtral-8x7b.json'}}}]\n"
        f"parallel: {{dp: {32 // tp}, tp: {tp}, pp: 4, ep: 8, {parallel}sequence_parallel: true, "
        "enable_parallel_optimizer: true,"
        " world_size: 128}\n"
        "training: {seq_length: 4096, micro_batch_size: 1, micro_batches: 64, dtype: bf16, optimizer: adam,"
        f" flash_attention: true, moe: {moe}}}\n"
        "device: {name: ascend-910b, reserved_mb: 4000}\n"
    )
    return path


def _plan(folder: Path, use_gmm: object, moe_config: str | None = None) -> Path:
    """A MindFormers yaml plan with *moe_config* as its yaml text, else `{use_gmm: <use_gmm>}`."""
    path = folder / "plan.yaml"
    path.write_text(f"offset: [0, 0, 0, 0]\nmoe_config: {moe_config or f'{{use_gmm: {use_gmm}}}'}\n")
    return path


@pytest.mark.parametrize(
    ("parallel", "moe", "line"),
    [
        # etp unset is Megatron's default, tp: MoEV3 has no expert TP
        (
            "",
            "{dropless: true}",
            "moe_config.use_gmm: true runs MoEV3, whose experts have no tensor parallelism; the run config's "
            "parallel.etp is not set, so tp (2): set parallel.etp 1",
        ),
        # at tp 1 (a capacity MoE's etp is tp, `run._check_padding`: etp 1 beside tp 2 is refused in the run config)
        (
            "",
            "{dropless: false, capacity_factor: 1.5}",
            "moe_config.use_gmm: true runs MoEV3, which ignores capacity_factor and routes every token; the run "
            "config has training.moe.dropless false: set it true",
        ),
    ],
)
def test_a_gmm_yaml_beside_another_moe_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, parallel: str, moe: str, line: str
) -> None:
    plan = _plan(tmp_path, True)
    tp = 1 if "capacity_factor" in moe else 2
    code = main(["check", str(_run(tmp_path, parallel, moe, tp)), "--plan", str(plan), "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert f"{plan}: {line}" in captured.err, captured.err


@pytest.mark.parametrize(
    ("use_gmm", "said"),
    [
        # MindFormers tests use_gmm by its truth (llama_layer.py `elif self.use_gmm:`): a string or 1 is on,
        # and the refusal quotes what the yaml says
        ('"yes"', "'yes'"),
        ("1", "1"),
    ],
)
def test_a_gmm_yaml_s_own_value_is_quoted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, use_gmm: str, said: str
) -> None:
    plan = _plan(tmp_path, use_gmm)
    code = main(["check", str(_run(tmp_path, "", "{dropless: true}")), "--plan", str(plan), "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert f"{plan}: moe_config.use_gmm: {said} runs MoEV3, whose experts" in captured.err, captured.err


@pytest.mark.parametrize(("moe_config", "said"), [("[use_gmm]", "a list of 1 item"), ("gmm", "'gmm'")])
def test_a_moe_config_that_is_no_mapping_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, moe_config: str, said: str
) -> None:
    # MindFormers builds MoEConfig(**moe_config) from a true moe_config (core/parallel_config.py
    # `build_parallel_config`), which no list or string can be
    plan = _plan(tmp_path, None, moe_config)
    code = main(["check", str(_run(tmp_path, "etp: 1, ", "{dropless: true}")), "--plan", str(plan), "--no-optimum"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured.err
    line = f"{plan}: moe_config: {said}: must be a mapping (MindFormers builds MoEConfig from its keys)"
    assert line in captured.err, captured.err


@pytest.mark.parametrize(
    ("parallel", "moe", "use_gmm"),
    [
        ("etp: 1, ", "{dropless: true}", True),  # MoEV3 as it runs
        ("", "{dropless: false, capacity_factor: 1.5}", False),  # MoEV2 (BatchMatMul): experts split over mp
    ],
)
def test_the_moe_the_yaml_runs_is_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, parallel: str, moe: str, use_gmm: bool
) -> None:
    """Not refused: checked as the run's own split, and it fits. Offset [0, 0, 0, 0] and no recompute lists
    are the uniform split without recompute (MindFormers' defaults), which is what `ppb estimate` prices for
    the run config: the second path the figures are held to."""
    run, plan = _run(tmp_path, parallel, moe), _plan(tmp_path, use_gmm)
    code = main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q", "--json"])
    captured = capsys.readouterr()
    assert captured.err == "", captured.err
    checked = json.loads(captured.out)
    assert main(["estimate", str(run), "--json"]) == 0
    estimated = json.loads(capsys.readouterr().out)
    # Mixtral-8x7B's 32 layers over pp 4 at offset 0: 8 a stage, none recomputed
    assert [(stage["layers"], stage["options"]) for stage in checked["stages"]] == [(8, {"NONE": 8})] * 4
    # usable: the 910B's 64 GiB (65,536 MB) less device.reserved_mb 4,000
    assert {stage["device_mb"] for stage in checked["stages"]} == {61_536}
    # estimate's peak_bytes adds reserved_bytes (`ppb estimate --help`), the check's peak leaves it out
    assert [stage["peak_mb"] for stage in checked["stages"]] == pytest.approx(
        [stage["peak_bytes"] / 2**20 - 4_000 for stage in estimated["stages"]]
    )
    assert checked["iteration_s"] == pytest.approx(estimated["iteration"]["seconds"])
    # exit 0: every stage's peak is under its 61,536 usable MB (1 would say a stage runs out of memory)
    assert all(stage["peak_mb"] < 61_536 for stage in checked["stages"])
    assert code == 0 and checked["fits"] is True
