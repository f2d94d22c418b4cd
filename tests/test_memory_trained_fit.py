"""What Megatron-Core + Transformer Engine really keep where NeMo's published runs put ppb over their devices:
the attention output projection's input under FP8, TE's fused loss; and those runs, which trained, fitting
(bench/public_runs.py `over_device`)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench
from test_memory_runs import DENSE, body, layers, make_run

from ppb_core.config.run import parse_run_config
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import LayerType

NOT = LayerType.NOT_REC_LAYER


def _fp8_run(recipe: str, release: dict[str, str] | None) -> Any:
    raw: dict[str, Any] = {
        "name": "fp8-proj",
        "models": [{"name": "m", "spec": DENSE}],
        "training": {"seq_length": 64, "fp8_cache": "linear"},
        "device": {"name": "h100-80gb"},
        "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe},
    }
    if release is not None:
        raw["framework_release"] = release
    return parse_run_config(raw, "fp8-proj.yaml")


# DENSE at s 64 (tests/test_frameworks.py `test_fp8_caches_of_linear_inputs`): 115712 bytes in bf16; its linear
# inputs are the two normed inputs and the attention output (64·64 each) and the SwiGLU output (64·128).
ALL_FP8 = 115712 - 2 * 20480 + 1.03125 * 20480
# Megatron-LM core_v0.15.0 (781e765818) attention.py `Attention.__init__`, at core_v0.17.0 lines 363-379:
# `set_save_original_input(self.linear_proj)` when fp8_recipe != 'delayed' and TE >= 2.6 (TE 07afda985,
# module/linear.py `save_original_input`): the projection keeps the bf16 attention output the core attention
# saves anyway, so that 64·64 term stays 2 bytes: 115712 − 2·16384 + 1.03125·16384
PROJ_ORIGINAL = 115712 - 2 * 16384 + 1.03125 * 16384


@pytest.mark.parametrize(
    ("recipe", "release", "expected"),
    [
        ("tensorwise", {"megatron_core": "0.17.0", "transformer_engine": "2.14"}, PROJ_ORIGINAL),
        ("mxfp8", None, PROJ_ORIGINAL),  # unstated: the newest code
        ("tensorwise", {"megatron_core": "0.14.0", "transformer_engine": "2.14"}, ALL_FP8),  # before 781e765818
        ("tensorwise", {"megatron_core": "0.17.0", "transformer_engine": "2.5"}, ALL_FP8),  # TE before v2.6
        ("delayed", {"megatron_core": "0.17.0", "transformer_engine": "2.14"}, ALL_FP8),  # delayed scaling
    ],
)
def test_output_projection_saves_its_original_input(recipe, release, expected):
    run = _fp8_run(recipe, release)
    assert MemoryModel(run).activation_bytes(body(run), NOT) == expected


@pytest.mark.parametrize("tp", [1, 2])
def test_te_fused_loss_keeps_the_16_bit_logits_in_place(tp):
    # TE v2.14.1 pytorch/triton/cross_entropy.py `cross_entropy_forward` writes the logits' gradient into the
    # bf16 logits it saves (cross_entropy.py `ctx.save_for_backward(inp.detach())`), with fp32 `loss_1d` and
    # `m_d_X_y` (1 + 3 per token) and under TP `m_d_X_y_gathered` (3·t). DENSE at s 64, vocabulary 1024:
    # logits 64 · 1024/t elements at 2 bytes (native: 4, the fp32 softmax); beyond them 4 · (4 + 3·t if t > 1) · 64.
    timing = {"cross_entropy_fusion": True, "attention_mask_in_dataloader": False}
    parallel = {"tp": tp, "sequence_parallel": tp > 1}
    te = make_run(DENSE, parallel=parallel, timing={**timing, "cross_entropy_fusion_impl": "te"})
    native = make_run(DENSE, parallel=parallel, timing=timing)
    found = {}
    for name, run in (("te", te), ("native", native)):
        memory, tail = MemoryModel(run), layers(run)["TAIL"]
        terms = {t.op: t for t in memory.activation_terms(tail, NOT)}
        found[name] = (terms["output.logits_softmax"].bytes, memory.loss_bytes(tail))
    logits = 64 * 1024 // tp
    assert found["te"] == (2 * logits, 4 * (4 + (3 * tp if tp > 1 else 0)) * 64)
    assert found["native"][0] == 4 * logits


@pytest.fixture(scope="module")
def bench():
    return load_bench("public_runs")


# NeMo's runs that ppb put over their device before its FP8 caches (session 26's report): 26.04's Qwen3 30B-A3B at
# MBS 8 (290,906 MiB on GB300's 284,208 and B300's 275,040), the 70B FSDP + CPU offload row (299,002) and the GB200
# 405B FP8 TP4 PP16 row (195,628 on 190,464); DeepSeek-V3 as its report trained (94,583 on H800's 81,559,
# without the report's FP8 caches and BF16 moments). They trained.
TRAINED = (
    "DeepSeek-V3 671B (2048 H800, PP16 EP64 DP128)",
    "NeMo 26.04 Qwen3 30B-A3B MXFP8 EP8 (8 GB300)",
    "NeMo 26.04 Qwen3 30B-A3B MXFP8 EP8 (8 B300)",
    "NeMo 26.04 Llama 3 70B FP8 FSDP (64 GB300)",
    "NeMo 26.04 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)",
)


def test_nemo_runs_that_trained_fit_their_devices(bench):
    rows = [row for row in bench.public_runs() if row.name in TRAINED]
    assert sorted(row.name for row in rows) == sorted(TRAINED)
    assert bench.over_device(rows) == []


def test_the_qwen3_30b_row_keeps_its_experts_inputs_quantized(bench):
    # Qwen3 30B-A3B at MBS 8 × 4096 = 32768 tokens, top 8 of 128 experts over EP 8 (forced balance): a rank's
    # experts take 32768 · 8 rows of 2048, 1/8 of them its own (the activation term: 32768 · 2048 elements) and
    # 7/8 a buffer of 7 · 32768 · 2048 elements; TE's GroupedLinear saves them MXFP8, columnwise only (TE v2.14.1
    # module/grouped_linear.py `update_usage(rowwise_usage=False, columnwise_usage=True)`): 1 + 1/32 bytes each.
    row = next(row for row in bench.public_runs() if row.name == TRAINED[1])
    run = bench.config(row)
    memory = MemoryModel(run)
    layer = body(run)
    terms = {term.op: term for term in memory.activation_terms(layer, NOT)}
    assert terms["moe.dispatched_tokens"].elements == 32768 * 2048
    assert terms["moe.dispatched_tokens"].element_bytes == 1 + 1 / 32
    assert memory.buffers(layer, NOT).kept_bytes() == 7 * 32768 * 2048 * (1 + 1 / 32)
    # the router reads the MoE norm's output in bf16; the attention output stays bf16 (the projection's original)
    assert terms["moe.norm_output"].element_bytes == terms["attention.core_output"].element_bytes == 2


LLAMA3 = ("Llama 3 405B (8192 H100, TP8 PP16 DP64)", "Llama 3 405B (16384 H100, TP8 PP16 DP128)")
# A Llama 3 405B layer per TP 8 rank: q and o 16384² each, k and v 16384·1024 each (8 KV heads of 128), the SwiGLU
# 3·16384·53248, split 8 ways; the two RMSNorm weights (16384 each) whole on every TP rank:
# (2·268,435,456 + 2·16,777,216 + 2,617,245,696) / 8 + 2·16384 = 398,458,880 + 32,768 = 398,491,648.
LLAMA3_LAYER_PER_TP_RANK = (2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248) // 8 + 2 * 16384


def test_llama3_405b_rows_shard_gradients_as_the_paper_says(bench):
    # The Llama 3 paper, §3.3.2: "Our use of FSDP for Llama 3 shards optimizer states and gradients, but for model
    # shards we do not reshard after forward computation" (ZeRO-2). Stage 1 holds 8 body layers: against ZeRO-1,
    # which keeps every fp32 gradient whole, it holds 4 bytes a parameter × (1 − 1/DP) less.
    for name, dp in zip(LLAMA3, (64, 128), strict=True):
        row = next(row for row in bench.public_runs() if row.name == name)
        assert row.raw["parallel"]["zero"] == 2
        zero1 = bench.run_config({**row.raw, "parallel": {**row.raw["parallel"], "zero": 1}}, name)
        sharded, whole = bench.run_stage_peaks(bench.config(row))[1], bench.run_stage_peaks(zero1)[1]
        assert sharded.body_layers == 8
        saved = 8 * LLAMA3_LAYER_PER_TP_RANK * 4 * (1 - 1 / dp)
        assert whole.static_bytes - sharded.static_bytes == pytest.approx(saved, rel=1e-9)


def test_llama3_405b_rows_that_trained_fit_their_devices(bench):
    # At ZeRO-1 stage 1 held 92,054 MiB (DP 64) and 84,967 MiB (DP 128) on H100's 81,559 (session 26); the paper's
    # gradient sharding takes 8 · 398,491,648 · 4 · 63/64 B = 11,971 MiB (DP 64) off: 81,347 MiB, just under.
    rows = [row for row in bench.public_runs() if row.name in LLAMA3]
    assert len(rows) == 2
    assert bench.over_device(rows) == []
