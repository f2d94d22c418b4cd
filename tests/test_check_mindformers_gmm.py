"""`ppb check --plan` of a MindFormers yaml whose `moe_config.use_gmm` is on: MindFormers then runs MoEV3
(mindformers/models/llama/llama_layer.py `LlamaFeedForwardWithMoE.__init__`, 6bac7f5ab^, the DeepSeek-V3
pretrain yaml's path), whose experts are whole on each expert-parallel rank (moev3.py `FFN`,
`ffn_forward_func`: AlltoAllV over `expert_parallel` ranks, GroupedMatmul on the whole weights) and which
ignores the capacity factor (`MoEV3.__init__`: "Capacity factor is ignored"). A run config pricing expert
TP at tp or a capacity prices another MoE: refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppb_core.cli.main import main

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _run(folder: Path, parallel: str, moe: str) -> Path:
    """configs/mixtral-8x7b.yaml's model and sizes as a MindFormers run on 910B (tp 2 + SP, ep 8)."""
    path = folder / "run.yaml"
    path.write_text(
        "framework: mindformers\n"
        f"models: [{{name: llm, config: {CONFIGS / 'hf' / 'mixtral-8x7b.json'}}}]\n"
        f"parallel: {{dp: 16, tp: 2, pp: 4, ep: 8, {parallel}sequence_parallel: true, enable_parallel_optimizer: true,"
        " world_size: 128}\n"
        "training: {seq_length: 4096, micro_batch_size: 1, micro_batches: 64, dtype: bf16, optimizer: adam,"
        f" flash_attention: true, moe: {moe}}}\n"
        "device: {name: ascend-910b, reserved_mb: 4000}\n"
    )
    return path


def _plan(folder: Path, use_gmm: bool) -> Path:
    path = folder / "plan.yaml"
    path.write_text(f"offset: [0, 0, 0, 0]\nmoe_config: {{use_gmm: {use_gmm}}}\n")
    return path


@pytest.mark.parametrize(
    ("parallel", "moe", "line"),
    [
        # etp unset is Megatron's default, tp: MoEV3 has no expert TP
        (
            "",
            "{dropless: true}",
            "moe_config.use_gmm: True runs MoEV3, whose experts have no tensor parallelism; the run config's "
            "parallel.etp is not set, so tp (2): set parallel.etp 1",
        ),
        (
            "etp: 1, ",
            "{dropless: false, capacity_factor: 1.5}",
            "moe_config.use_gmm: True runs MoEV3, which ignores capacity_factor and routes every token; the run "
            "config has training.moe.dropless false: set it true",
        ),
    ],
)
def test_a_gmm_yaml_beside_another_moe_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, parallel: str, moe: str, line: str
) -> None:
    plan = _plan(tmp_path, True)
    code = main(["check", str(_run(tmp_path, parallel, moe)), "--plan", str(plan), "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert f"{plan}: {line}" in captured.err, captured.err


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
    plan = _plan(tmp_path, use_gmm)
    code = main(["check", str(_run(tmp_path, parallel, moe)), "--plan", str(plan), "--no-optimum", "-q"])
    assert code in (0, 1), capsys.readouterr().err
