"""The run-config fields added for issues 11 and 12 in the 2026-12-06 sessions, refused as every bad input
is (docs/inputs.md): one line naming the file, the field and the problem, exit status 2, nothing written;
and each framework's words refused under another framework."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"
FP8 = {"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"}


def _run(name: str) -> dict[str, Any]:
    if name == MINDFORMERS:  # configs/llama3-8b.yaml under SAPP's conventions
        return {**_run(MEGATRON), "framework": "mindformers"}
    raw = yaml.safe_load((CONFIGS / name).read_text())
    for model in raw["models"]:
        model["config"] = str(CONFIGS / model["config"])
    return raw


def _estimate_refusal(capsys: pytest.CaptureFixture[str], tmp_path: Path, raw: dict[str, Any]) -> tuple[Path, str]:
    """`ppb estimate` on *raw* written as run.yaml: exit 2 and one line; the file and that line."""
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(raw))
    code = main(["estimate", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    return run, err


MEGATRON, TITAN, MINDFORMERS = "llama3-8b.yaml", "llama3.1-8b-torchtitan.yaml", "mindformers"
# a small dense model given inline (no config.json), for the spec fields' refusals
SMALL_SPEC = {
    "vocab_size": 1024,
    "hidden_size": 256,
    "num_layers": 8,
    "num_attention_heads": 4,
    "intermediate_size": 512,
}
GROUP = "parallel.microbatch_group_size_per_vp_stage"
INTERLEAVED = {"vpp": 2, "schedule": "interleaved"}  # llama3-8b: pp 4, 8 micro-batches
TITAN_PP = {"dp": 4, "pp": 2, "vpp": 2, "schedule": "interleaved"}
CASES = [
    # (base run, section, values, the field named, words of the problem)
    (MEGATRON, "timing", {"fsdp_units": "root"}, "timing.fsdp_units", "torchtitan's"),
    (MEGATRON, "timing", {"optimizer_implementation": "foreach"}, "timing.optimizer_implementation", "torchtitan's"),
    (TITAN, "timing", {"fsdp_units": "leaf"}, "timing.fsdp_units", "'split' or 'root'"),
    (TITAN, "timing", {"optimizer_implementation": "forloop"}, "timing.optimizer_implementation", "'for-loop'"),
    (TITAN, "timing", {"attention_mask_in_dataloader": False}, "timing.attention_mask_in_dataloader", "megatron"),
    (MEGATRON, "timing", {"attention_mask_in_dataloader": "no"}, "timing.attention_mask_in_dataloader", "boolean"),
    (MEGATRON, "timing", {"fp8_param_gather": True}, "timing.fp8_param_gather", "matmul_dtype fp8"),
    (TITAN, "timing", {"fp8_param_gather": True, **FP8}, "timing.fp8_param_gather", "framework megatron"),
    (MEGATRON, "timing", {"fp8_bf16_layers": [1, 1]}, "timing.fp8_bf16_layers", "matmul_dtype fp8"),
    (
        MEGATRON,
        "timing",
        {"fp8_bf16_layers": [1, 1], "matmul_dtype": "fp8"},
        "timing.fp8_bf16_layers",
        "delayed scaling",
    ),
    (MEGATRON, "timing", {"fp8_bf16_layers": [9, 0], **FP8}, "timing.fp8_bf16_layers", "stage's 8 layers"),
    (MEGATRON, "timing", {"fp8_bf16_layers": [-1, 1], **FP8}, "timing.fp8_bf16_layers.0", "greater than"),
    (MEGATRON, "timing", {"fp8_bf16_layers": [1, 1, 1], **FP8}, "timing.fp8_bf16_layers", "at most 2"),
    (TITAN, "timing", {"fp8_bf16_layers": [1, 1], **FP8}, "timing.fp8_bf16_layers", "framework megatron"),
    (MEGATRON, "timing", {"pipe_partitioned": "maybe"}, "timing.pipe_partitioned", "boolean"),
    (TITAN, "timing", {"pipe_partitioned": True}, "timing.pipe_partitioned", "DeepSpeed's"),
    # DeepSpeed's BF16_Optimizer (config/run.py `_check_bf16_optimizer`): Megatron-DeepSpeed's F.linear
    # writes 16-bit gradients, so Megatron's fused accumulation cannot be on beside it
    (MEGATRON, "timing", {"deepspeed_bf16_optimizer": True}, "timing.gradient_accumulation_fusion", "must be false"),
    (TITAN, "timing", {"deepspeed_bf16_optimizer": True}, "timing.deepspeed_bf16_optimizer", "Megatron-LM's"),
    (TITAN, "timing", {"deepspeed_pipeline": True}, "timing.deepspeed_pipeline", "Megatron-LM's"),
    (MEGATRON, "training", {"layer_wise_param_layout": False}, "training.layer_wise_param_layout", "muon"),
    (TITAN, "training", {"layer_wise_param_layout": False}, "training.layer_wise_param_layout", "muon"),
    (MEGATRON, "device", {"mxfp8_matmul_ratio": 1.5}, "device.mxfp8_matmul_ratio", "less than or equal to 1"),
    (MEGATRON, "device", {"mxfp8_matmul_ratio": 0}, "device.mxfp8_matmul_ratio", "greater than"),
    # Megatron-LM's flags, read nowhere in a torchtitan run (config/run.py MEGATRON_TIMING)
    (TITAN, "timing", {"cross_entropy_fusion": True}, "timing.cross_entropy_fusion", "Megatron-LM's"),
    (TITAN, "timing", {"transformer_impl": "local"}, "timing.transformer_impl", "Megatron-LM's"),
    (TITAN, "timing", {"exit_duration_in_mins": 230}, "timing.exit_duration_in_mins", "Megatron-LM's"),
    (TITAN, "timing", {"overlap_p2p_comm_warmup_flush": True}, "timing.overlap_p2p_comm_warmup_flush", "Megatron-LM's"),
    (TITAN, "timing", {"weight_hash_interval": 1}, "timing.weight_hash_interval", "Megatron-LM's"),
    (MEGATRON, "timing", {"weight_hash_interval": 0}, "timing.weight_hash_interval", "greater than or equal to 1"),
    (MEGATRON, "device", {"host_boost_ghz": 11}, "device.host_boost_ghz", "less than or equal to 10"),
    (MEGATRON, "timing", {"overlap_p2p_comm_warmup_flush": True}, "timing.overlap_p2p_comm_warmup_flush", "1f1b"),
    # Megatron's --no-overlap-p2p-communication: read nowhere else; the flush needs it on (model_parallel_config.py)
    (TITAN, "timing", {"overlap_p2p_comm": False}, "timing.overlap_p2p_comm", "Megatron-LM's"),
    (MEGATRON, "timing", {"overlap_p2p_comm": "maybe"}, "timing.overlap_p2p_comm", "boolean"),
    (MINDFORMERS, "timing", {"log_params_norm": True}, "timing.log_params_norm", "framework is mindformers"),
    # Megatron's --cuda-graph-warmup-steps (training.py reads it only where graphs are captured)
    (TITAN, "timing", {"cuda_graph_warmup_steps": 0}, "timing.cuda_graph_warmup_steps", "Megatron-LM's"),
    (MEGATRON, "timing", {"cuda_graph_warmup_steps": 0}, "timing.cuda_graph_warmup_steps", "set cuda_graph_impl"),
    (MEGATRON, "timing", {"cuda_graph_warmup_steps": -1}, "timing.cuda_graph_warmup_steps", "greater than or equal"),
    # Megatron's --microbatch-group-size-per-virtual-pipeline-stage (schedules.py, d98e8a64)
    (MEGATRON, "parallel", {"microbatch_group_size_per_vp_stage": 4}, GROUP, "this run's is 1f1b"),
    (MEGATRON, "parallel", {**INTERLEAVED, "microbatch_group_size_per_vp_stage": 3}, GROUP, "outside"),
    (MEGATRON, "parallel", {**INTERLEAVED, "microbatch_group_size_per_vp_stage": 6}, GROUP, "last group of 2"),
    (MEGATRON, "parallel", {**INTERLEAVED, "microbatch_group_size_per_vp_stage": 0}, GROUP, "greater than 0"),
    (TITAN, "parallel", {**TITAN_PP, "microbatch_group_size_per_vp_stage": 2}, GROUP, "framework is torchtitan"),
    (MINDFORMERS, "parallel", {**INTERLEAVED, "microbatch_group_size_per_vp_stage": 4}, GROUP, "mindformers"),
    # transformer_config.py __post_init__ asserts the combined 1F1B for --delay-wgrad-compute; arguments.py
    # validate_args virtual stages for --overlap-param-gather-with-optimizer-step (d98e8a64; llama3-8b: 1F1B)
    (MEGATRON, "timing", {"delay_wgrad_compute": True}, "timing.delay_wgrad_compute", "overlap_moe_expert"),
    (
        MEGATRON,
        "timing",
        {"overlap_param_gather_with_optimizer_step": True},
        "timing.overlap_param_gather_with_optimizer_step",
        "interleaved schedule",
    ),
]


@pytest.mark.parametrize(("base", "section", "values", "field", "words"), CASES)
def test_a_bad_value_is_one_line_and_nothing_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, base: str, section: str, values: dict, field: str, words: str
) -> None:
    raw = _run(base)
    raw.setdefault(section, {}).update(values)
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(raw))
    plan = tmp_path / "plan.json"
    code = main(["balance", "-q", str(run), "-o", str(plan)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"ppb: error: {run}: {field}: ") and words in err, err
    assert not plan.exists()


def test_latent_norms_off_need_an_mla_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`mla_latent_norms` is MLA's (Megatron's --qk-layernorm under --multi-latent-attention): false on a
    model without latent attention would say nothing, so it is refused."""
    raw = _run(MEGATRON)
    raw["models"][0].pop("config")
    raw["models"][0]["spec"] = {
        **SMALL_SPEC,
        "mla_latent_norms": False,
    }
    run, err = _estimate_refusal(capsys, tmp_path, raw)
    assert f"{run}: models.0.spec: mla_latent_norms false needs an MLA model" in err, err


@pytest.mark.parametrize(
    ("section", "values", "words"),
    [
        ("training", {"dtype": "fp16"}, "runs under bf16; this run's training.dtype is fp16"),
        ("parallel", {"zero": 0}, "(zero 1); this run shards at level 0"),
        ("parallel", {"zero": 2}, "(zero 1); this run shards at level 2"),
    ],
)
def test_the_bf16_optimizer_needs_bf16_and_its_own_zero_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, section: str, values: dict, words: str
) -> None:
    """DeepSpeed's BF16_Optimizer (deepspeed/runtime/bf16_optimizer.py, 93e9307d) runs under bf16 only and
    partitions its fp32 state over data parallelism itself (ZeRO-1's layout)."""
    raw = _run(MEGATRON)
    raw["timing"] = {"deepspeed_bf16_optimizer": True, "gradient_accumulation_fusion": False}
    raw[section].update(values)
    run, err = _estimate_refusal(capsys, tmp_path, raw)
    assert err.startswith(f"ppb: error: {run}: timing.deepspeed_bf16_optimizer: ") and words in err, err


@pytest.mark.parametrize(
    ("parallel", "words"),
    [
        ({"pp": 1, "dp": 32}, "needs pipeline parallelism (pp > 1)"),
        (INTERLEAVED, "runs 1F1B alone: schedule 1f1b, vpp 1"),
    ],
)
def test_deepspeed_s_pipeline_engine_runs_1f1b_over_a_pipeline(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, parallel: dict, words: str
) -> None:
    """DeepSpeed's PipelineEngine runs its TrainSchedule (runtime/pipe/schedule.py, 93e9307d): 1F1B, one
    stage a rank; without a pipeline it would price nothing."""
    raw = _run(MEGATRON)
    raw["timing"] = {"deepspeed_pipeline": True}
    raw["parallel"].update(parallel)
    run, err = _estimate_refusal(capsys, tmp_path, raw)
    assert err.startswith(f"ppb: error: {run}: timing.deepspeed_pipeline: ") and words in err, err


@pytest.mark.parametrize(
    ("base", "extra", "words"),
    [
        (TITAN, {}, "alibi: has no ALiBi in torchtitan's models"),
        (MEGATRON, {"kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32}, "MLA"),
    ],
)
def test_alibi_is_refused_where_no_code_runs_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, base: str, extra: dict, words: str
) -> None:
    """ALiBi (`position_embedding: alibi`) is priced as Megatron-DeepSpeed's baddbmm with the bias; torchtitan's
    models and MLA's attention have no such path, so it would say nothing there."""
    raw = _run(base)
    raw["models"][0].pop("config")
    raw["models"][0]["spec"] = {
        **SMALL_SPEC,
        "position_embedding": "alibi",
        **extra,
    }
    run, err = _estimate_refusal(capsys, tmp_path, raw)
    assert f"{run}: models.0.spec.position_embedding: " in err and words in err, err
