"""TransformerEngine's fused grouped MLP under Megatron's op fuser, the rank capacity and the paged expert stash.

Expectations from the code read by hand: TransformerEngine 2e559f062 (v2.17.0)
transformer_engine/pytorch/ops/fused/grouped_mlp.py `_GroupedMLP_CuTeGEMMBase.fuser_forward` / `fuser_backward`;
Megatron-LM d98e8a64 megatron/core/transformer/moe/experts.py `TEGroupedMLP._is_fused_impl_supported` /
`_fused_forward`, moe/paged_stash.py `allocate_stash_buffers`, transformer_config.py `__post_init__`.
"""

from __future__ import annotations

import copy

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory.activations import moe_terms, routed_rows, stashed_rows
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.walk import model_kinds
from ppb_core.timing.flops import OpGeometry, layer_ops
from ppb_core.timing.pricer import TimeModel

# Qwen3 30B-A3B's MoE layer (hidden 2048, 128 experts of 768, top 8) in a one-layer model
_SPEC = {
    "vocab_size": 1024,
    "hidden_size": 2048,
    "num_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 768,
    "num_experts": 128,
    "experts_per_token": 8,
    "moe_intermediate_size": 768,
}
_FUSED = {"use_transformer_engine_op_fuser": True, "moe_mlp_glu_interleave_size": 32}
# the recipes' `_enable_hybridep_full_iteration_mxfp8` (Megatron-Bridge perf_recipes/qwen/common.py, 6e1b47893)
_STASH = {
    **_FUSED,
    "moe_expert_rank_capacity_factor": 1.5,
    "moe_paged_stash": True,
    "moe_paged_stash_buffer_size_factor_cuda": 1.2,
    "moe_paged_stash_buffer_size_factor_cpu": 1.0,
}


def _raw(device: str = "gb200", recipe: str = "mxfp8", spec: dict | None = None, **timing) -> dict:
    return {
        "name": "fused-experts",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": spec or _SPEC}],
        "parallel": {"dp": 8, "ep": 8, "devices_per_node": 8},
        "training": {"seq_length": 4096, "micro_batch_size": 4, "flash_attention": True},
        "device": {"name": device},
        "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe, "moe_dispatcher": "hybridep", **timing},
    }


def _ops(**timing) -> dict:
    run = parse_run_config(_raw(**timing))
    _, bodies, _ = model_kinds(run, "llm")
    return {op.name: op for op in layer_ops(bodies[0], OpGeometry.from_run(run))}


# a rank's expert rows: MBS 4 · 4096 tokens, 8 copies each, balanced over EP 8 ranks of 16 experts
ROWS = 4 * 4096 * 8
WIDTH = 768


def test_the_activation_runs_in_fc1_s_epilogue_and_fc2_s_input_arrives_quantized():
    plain, fused = _ops(), _ops(**_FUSED)
    # grouped_gemm_glu_wrapper_sm100 writes the GLU times the probability quantized row- and column-wise (a byte
    # each) and reads HybridEP's fp32 probabilities: 131,072 · 768 · 2 + 131,072 · 4 bytes beside fc1's GEMM
    assert fused["experts_in"].bytes - plain["experts_in"].bytes == pytest.approx(ROWS * WIDTH * 2 + ROWS * 4)
    # no activation kernel either way
    act = fused["experts_act"]
    assert (act.bytes, act.backward_bytes, act.launches) == (0.0, 0.0, (0.0, 0.0))
    # dGLU's epilogue: the saved 16-bit pre-activation read (2 · 768 a row, 2 bytes), fc1's output gradient
    # written quantized both ways (2 · 768, 2 bytes), the probabilities read and their gradient written (4 + 4),
    # less fc2's 16-bit input gradient it does not write (768 · 2)
    extra = ROWS * (2 * WIDTH * 2 + 2 * WIDTH * 2 + 8 - WIDTH * 2)
    assert fused["experts_out"].backward_bytes - plain["experts_out"].backward_bytes == pytest.approx(extra)
    # fc1's output gradient and fc2's input come quantized; each GEMM one persistent kernel over the experts
    assert (fused["experts_in"].prequantized, fused["experts_out"].prequantized) == ((False, True), (True, False))
    assert fused["experts_in"].persistent_grouped and fused["experts_out"].persistent_grouped
    # launches: fc1 forward offsets, input quantize, weight swizzle, probabilities' cast, GLU kernel (5); backward
    # weight swizzle, ones, dgrad, wgrad (4). fc2 forward swizzle, ones, quant kernel (3); backward dy quantize,
    # zeros, swizzle, dGLU, gradient cast, wgrad (6)
    assert (fused["experts_in"].launches, fused["experts_out"].launches) == ((5.0, 4.0), (3.0, 6.0))
    # the FLOPs are the same products
    for name in ("experts_in", "experts_out"):
        assert fused[name].flops == plain[name].flops and fused[name].gemm == plain[name].gemm


def test_the_fused_gemms_pay_no_cast_of_a_prequantized_operand_and_no_per_stream_rounds():
    plain, fused = TimeModel(parse_run_config(_raw())), TimeModel(parse_run_config(_raw(**_FUSED)))
    by_name, unfused = _ops(**_FUSED), _ops()
    # MXFP8 quantizes in one pass, read 2 bytes and write a row-wise and a column-wise byte (`_cast_bytes`): 4;
    # fused, fc2's input and fc1's output gradient not at all
    assert plain._cast_bytes(unfused["experts_out"], gradient=False) == 4.0
    assert fused._cast_bytes(by_name["experts_out"], gradient=False) == 0.0
    assert fused._cast_bytes(by_name["experts_in"], gradient=True) == 0.0
    assert fused._cast_bytes(by_name["experts_in"], gradient=False) == 4.0  # the input's group quantize
    assert fused._cast_bytes(by_name["experts_out"], gradient=True) == 4.0  # fc2's output gradient's
    # TE's multi-stream cuBLAS loop: 16 experts over 4 streams, ceil(16 / 4) − 1 = 3 more fixed times; fused none
    assert plain._grouped_rounds(unfused["experts_out"], 16) == 3
    assert fused._grouped_rounds(by_name["experts_out"], 16) == 0
    # so fc2's forward is faster by its input's quantization (131,072 · 768 elements at 4 bytes, at the measured
    # MXFP8 quantize share of HBM) and the three rounds' fixed times
    device = plain.device
    quantize = ROWS * WIDTH * 4 / (device.hbm_bandwidth_gbs * 1e9 * device.mxfp8_quantize_efficiency)
    saved = plain._phase_s(unfused["experts_out"], "forward") - fused._phase_s(by_name["experts_out"], "forward")
    assert saved == pytest.approx(quantize + 3 * plain.kernels.kernel_s)
    assert fused._phase_s(by_name["experts_act"], "forward") == 0.0


def test_gpt_oss_s_clamp_and_fc2_bias_go_into_the_kernels():
    gpt_oss = {
        **_SPEC,
        "num_experts": 32,
        "experts_per_token": 4,
        "hidden_size": 2880,
        "moe_intermediate_size": 2880,
        "intermediate_size": 2880,
        "activation": "quick_geglu",
        "activation_clamp": 7.0,
        "expert_bias": True,
    }
    run = parse_run_config(_raw(spec=gpt_oss, **_FUSED))
    _, bodies, _ = model_kinds(run, "llm")
    ops = {op.name: op for op in layer_ops(bodies[0], OpGeometry.from_run(run))}
    assert "experts_clamp" not in ops
    # fc2's bias scaled by the probabilities in its epilogue; backward `compute_grouped_dbias_dscales` reads the
    # 16-bit output gradient (4 · 4096 · 4 rows of 2880) and the fp32 probabilities, writes their gradient
    rows = 4 * 4096 * 4
    bias = ops["experts_bias"]
    assert (bias.bytes, bias.backward_bytes) == (0.0, pytest.approx(rows * 2880 * 2 + rows * 8))
    assert bias.launches == (0.0, 2.0)


@pytest.mark.parametrize(
    ("changes", "field", "said"),
    [
        ({"fp8_recipe": "tensorwise"}, "use_transformer_engine_op_fuser", "MXFP8 only"),
        ({"device": "h100-80gb"}, "use_transformer_engine_op_fuser", "sm100 kernels"),
        ({"moe_mlp_glu_interleave_size": None}, "use_transformer_engine_op_fuser", "interleave_size 32"),
        ({"etp": 2}, "use_transformer_engine_op_fuser", "expert tensor parallelism"),
        ({"transformer_engine": "2.13"}, "use_transformer_engine_op_fuser", "v2.14"),
        ({"megatron_core": "2026-05-01"}, "use_transformer_engine_op_fuser", "core_v0.18.0"),
        ({"use_transformer_engine_op_fuser": False}, "moe_mlp_glu_interleave_size", "reorders"),
        ({"moe_expert_rank_capacity_factor": 1.5, "moe_dispatcher": "deepep"}, "moe_expert_rank_capacity", "HybridEP"),
        ({"moe_paged_stash": True}, "moe_paged_stash", "moe_expert_rank_capacity_factor"),
        ({"moe_paged_stash_buffer_size_factor_cuda": 1.2}, "moe_paged_stash_buffer_size_factor_cuda", "read only"),
    ],
)
def test_settings_te_or_megatron_refuse_or_ppb_does_not_price_are_refused_in_one_line(changes, field, said):
    raw = _raw(**_FUSED)
    changes = dict(changes)
    if "device" in changes:
        raw["device"]["name"] = changes.pop("device")
    if "fp8_recipe" in changes:
        raw["timing"]["fp8_recipe"] = changes.pop("fp8_recipe")
    if "etp" in changes:
        raw["parallel"].update(etp=changes.pop("etp"), dp=16, ep=8)
    for library in ("transformer_engine", "megatron_core"):
        if library in changes:
            raw["framework_release"] = {library: changes.pop(library)}
    for key, value in changes.items():
        if value is None:
            raw["timing"].pop(key)
        else:
            raw["timing"][key] = value
    if not raw["timing"]["use_transformer_engine_op_fuser"]:
        raw["timing"].pop("use_transformer_engine_op_fuser")
    with pytest.raises(InputError) as refused:
        parse_run_config(raw)
    message = str(refused.value)
    assert f"timing.{field}" in message and said in message and "\n" not in message


def test_the_rank_capacity_needs_the_op_fuser_under_hybridep():
    raw = _raw(moe_expert_rank_capacity_factor=1.5)
    with pytest.raises(InputError, match="needs the op fuser"):
        parse_run_config(raw)


def test_the_stash_holds_its_buffer_factor_times_the_balanced_rows_whatever_the_routing():
    raw = _raw(**_STASH)
    run = parse_run_config(raw)
    setup = MemorySetup.from_run(run)
    _, bodies, _ = model_kinds(run, "llm")
    moe = bodies[0].mlp
    # balanced: 4 · 4096 · 8 = 131,072 rows; the device buffer 1.2 times them (allocate_stash_buffers: positive
    # factor times the most balanced rows in flight)
    assert stashed_rows(moe, setup) == pytest.approx(1.2 * ROWS)
    # a stated imbalance of 1.5 moves the routed rows, not the stash
    imbalanced = copy.deepcopy(raw)
    imbalanced["training"]["moe"] = {"dropless_imbalance": 1.5}
    skewed = MemorySetup.from_run(parse_run_config(imbalanced))
    assert routed_rows(moe, skewed) == pytest.approx(1.5 * ROWS)
    assert stashed_rows(moe, skewed) == pytest.approx(1.2 * ROWS)
    # the saved pre-activation (gate and up, 2 · 768 a row, 2 bytes) in the stash's rows
    terms = {term.op: term for term in moe_terms(bodies[0], bodies[0].mlp, setup)}
    assert terms["moe.expert.gate_up_output"].bytes == pytest.approx(1.2 * ROWS * 2 * WIDTH * 2)
    # without the stash: the routed rows
    plain = MemorySetup.from_run(parse_run_config(_raw(**_FUSED)))
    assert stashed_rows(moe, plain) == pytest.approx(ROWS)
