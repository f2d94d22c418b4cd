"""Kernel launches per op under Megatron with TransformerEngine, and the host's time per launch measured
by Megatron CI's 12-layer case (`ppb_core.timing.launches`, `DeviceProfile.host_kernel_us`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA
from test_memory_runs import make_run

from ppb_core.config.devices import (
    DEVICE_CATALOG,
    HOST_KERNEL_US_DGX_A100,
    HOST_KERNEL_US_DGX_B200,
    HOST_KERNEL_US_DGX_GB200,
    HOST_KERNEL_US_DGX_H100,
)
from ppb_core.config.run import FrameworkRelease, parse_run_config
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import BODY, walk
from ppb_core.timing.flops import ALL_REDUCE, COMM, Collective, Op
from ppb_core.timing.host import host_excess_s, launch_wait_s
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.launches import (
    CPP_GEMM_US,
    PLAIN_OP_SHARE,
    PY_STEP_SHARE,
    fill_launches,
    fsdp_unit_launches,
    grouped_python_steps,
    layer_launches,
    mxfp8_swizzles,
    op_launches,
    plain,
)
from ppb_core.timing.nan_fill import deterministic_fill_bytes
from ppb_core.timing.pricer import TimeModel

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from _public import run_config  # noqa: E402
from decompose import SMALL_TP4_GOLDEN, small_tp4_run  # noqa: E402


def _small(gpu: str, host_kernel_us: float | None = None):
    return run_config(small_tp4_run(gpu, host_kernel_us), f"small-{gpu}")


def _launches(run, layer):
    ops = TimeModel(run).ops(layer)
    return layer_launches(
        ops,
        tp=run.parallel.tp,
        rope_fusion=run.timing.rope_fusion,
        cross_entropy_fusion=run.timing.cross_entropy_fusion,
        wgrad_fused=run.timing.gradient_accumulation_fusion,
        fills=deterministic_fill_bytes(ops, run.training.dtype_bytes, run.timing.gradient_accumulation_fusion),
    )


def test_a_dense_layer_s_launches_by_hand():
    # Megatron CI's 12-layer case: TE, TP 4 without SP, unfused attention with dropout, biases,
    # --deterministic-mode (NaN fills), --no-gradient-accumulation-fusion. Forward:
    #   LayerNormLinear qkv: norm 1 + its NaN fill 1, the fused QKV GEMM 1 + its output's fill 1    4
    #   TE's unfused core (backends.py, TE d0067d0d): get_full_mask's 2 aranges and 8 ops 10, the scores'
    #   torch.empty NaN fill 1, baddbmm 1, fused softmax 1, dropout 1, bmm 1 + the context's
    #   .contiguous() copy 1                                                                      16
    #   proj GEMM 1 + fill 1, all-reduce 1, bias-dropout-add 1                                     4
    #   LayerNormLinear fc1: norm 1 + fill 1, GEMM 1 + fill 1; bias-GeLU 1                         5
    #   fc2 GEMM 1 + fill 1, all-reduce 1, bias-dropout-add 1                                      4   = 33
    # Backward:
    #   each norm: its kernel, the weight-gradient finalize, DDP's main-grad add, dx's fill       2 × 4
    #   qkv: dgrad, wgrad, main-grad add, fills of dgrad and the 16-bit wgrad; the dgrad's all-reduce 6
    #   scores 2 + baddbmm's alpha on dQ and dK 2 + the Q/K/V gradients' concatenation 1; softmax 1;
    #   dropout 1; context 2 + the V gradient's part of the concatenation 1                      10
    #   proj, fc1, fc2: dgrad, wgrad, main-grad add, bias-gradient pass, two fills               3 × 6
    #   fc1's dgrad all-reduce 1, bias-GeLU 1, the two bias-dropout-adds 2                          4   = 46
    run = _small("h100")
    body = next(layer for layer in walk(run).layers if layer.node == "BODY")
    counts = _launches(run, body)
    assert sum(f for f, _ in counts.values()) == pytest.approx(33)
    assert sum(b for _, b in counts.values()) == pytest.approx(46)


def test_named_ops_follow_the_code_path():
    kw = {"tp": 2, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    # a grouped GEMM of 8 local experts: 8 GEMMs forward, 16 backward (fused wgrad: no main-grad add)
    experts = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 8, 32.0), weight_elements=8 * 32 * 32)
    assert op_launches(experts, **kw) == (8.0, 16.0)
    # unfused, each expert's weight gradient is added into its main gradient: 8 more
    assert op_launches(experts, **{**kw, "wgrad_fused": False}) == (8.0, 24.0)
    # DeepSpeed's BF16_Optimizer casts each to fp32 first (`update_hp_grads`: `.to(fp32)`, then `add_`): 16 more
    assert op_launches(experts, **{**kw, "wgrad_fused": False, "accumulate_kernels": 2}) == (8.0, 32.0)
    # the loss's all-reduces: max, target logit, sum of exponentials; fused two
    loss_reduce = Op("output.reduce_loss", "output", COMM, forward_comm=Collective(ALL_REDUCE, "tp", 12.0, "tp"))
    assert op_launches(loss_reduce, **kw) == (3.0, 0.0)
    assert op_launches(loss_reduce, **{**kw, "cross_entropy_fusion": True}) == (2.0, 0.0)
    # unfused rotary (rope_utils.py `_apply_rotary_pos_emb_bshd`, d98e8a64), per tensor Q and K: the
    # angles' cos, `* mscale`, `.to(t.dtype)` and the same for sin (6), then t·cos, the negation and cat of
    # `_rotate_half`, ·sin, the sum, the final cat (6): 12 each, 24 forward; backward 7 each (the angles
    # need no gradient); MLA one interleaving cat more each (13 + 13) and Q, K joined and V copied (3):
    # 29; backward 10 + 10 + 3 = 23. Fused one kernel each
    rope = Op("rope", "attention", "memory")
    assert op_launches(rope, **kw) == (2.0, 2.0)
    assert op_launches(rope, **{**kw, "rope_fusion": False}) == (24.0, 14.0)
    assert op_launches(rope, **{**kw, "rope_fusion": False, "mla": True}) == (29.0, 23.0)
    # --qk-layernorm: `self.q_layernorm(query)` then `self.k_layernorm(key)` (attention.py, 0d8e0714cd), two
    # TENorm modules: 2 forward, each backward its kernel, its finalize and DDP's main-gradient add: 6
    qk_norm = Op("qk_norm", "attention", "memory")
    assert op_launches(qk_norm, **kw) == (2.0, 6.0)
    assert op_launches(Op("norm1", "attention", "memory"), **kw) == (1.0, 3.0)
    # under deterministic mode each norm module's output and input gradient are NaN-filled: two of each
    assert fill_launches(qk_norm, (1.0, 1.0), wgrad_fused=True) == (2.0, 2.0)


def test_a_grouped_gemm_s_experts_after_the_first_are_issued_from_te_s_cpp_loop():
    # TE v2.9 gemm.cpp `te_general_grouped_gemm` -> cublaslt_gemm.cu `multi_stream_cublas_gemm`: one call from
    # Python a GEMM, the experts' cuBLASLt GEMMs in C++. TE PR #3134 (SM100, "pure" rows): 8 experts through
    # the loop 0.267 ms, one CUTLASS kernel for all 0.069 ms: (0.267 - 0.069) / 8 = 24.75 -> 25 us an expert
    assert abs(CPP_GEMM_US - (0.267 - 0.069) / 8 * 1e3) <= 0.3
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    experts = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 8, 32.0), weight_elements=8 * 32 * 32)
    # on DGX H100 (80.9 us a launch) an expert's GEMM after the call's first is 25 / 80.9 of a launch:
    # forward 1 + 7 · 25 / 80.9 = 3.1632; backward the dgrad's and the wgrad's calls, twice that = 6.3263
    share = 25.0 / 80.9
    forward, backward = op_launches(experts, **kw, cpp_gemm_share=share)
    assert (forward, backward) == (pytest.approx(3.1632, abs=1e-4), pytest.approx(6.3263, abs=1e-4))
    # unfused wgrad: DDP's hook adds each expert's gradient from Python, 8 whole launches more
    unfused = op_launches(experts, **{**kw, "wgrad_fused": False}, cpp_gemm_share=share)
    assert unfused[1] == pytest.approx(14.3263, abs=1e-4)
    # a SequentialMLP's experts each call from Python (experts.py `SequentialMLP.forward`): no share
    sequential = Op(
        "experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 1, 32.0), weight_elements=32 * 32, sequential=8
    )
    assert op_launches(sequential, **kw, cpp_gemm_share=share) == op_launches(sequential, **kw)

    # biased experts (GPT-OSS): DDP's hook adds each of fc1's and fc2's 8 expert biases' gradients into their main
    # gradient (distributed_data_parallel.py `_make_backward_post_hook`: `param.main_grad.add_`), 16 launches
    biased = dataclasses.replace(experts, grad_adds=16.0)
    assert op_launches(biased, **kw, cpp_gemm_share=share)[1] == pytest.approx(6.3263 + 16, abs=1e-4)


def _gpt_oss_moe_ops(biased: bool) -> dict[str, Op]:
    spec = {"vocab_size": 1000, "hidden_size": 2880, "num_layers": 1, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "activation": "quick_geglu",
            "num_experts": 128, "experts_per_token": 4, "moe_intermediate_size": 2880, "expert_bias": biased,
            "router_bias": biased}  # fmt: skip
    config = {"name": "x", "models": [{"name": "llm", "spec": spec}], "parallel": {"dp": 8, "ep": 8},
              "training": {"seq_length": 4096}, "device": {"name": "h100-80gb"}}  # fmt: skip
    run = parse_run_config(config)
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    return {op.name: op for op in TimeModel(run).ops(body)}


def test_gpt_oss_expert_and_router_biases_add_their_gradients_in_ddp_s_hook():
    # GPT-OSS's MoE at EP 8: 128 experts, 16 local; TEGroupedMLP's fc1 and fc2 GroupedLinears hold one bias an
    # expert each (TE v2.14 grouped_linear.py `bias{i}`): 2 · 16 = 32 main-gradient adds; the router's bias one
    ops = _gpt_oss_moe_ops(biased=True)
    assert (ops["experts_in"].grad_adds, ops["router"].grad_adds, ops["experts_out"].grad_adds) == (32.0, 1.0, 0.0)
    ops = _gpt_oss_moe_ops(biased=False)
    assert (ops["experts_in"].grad_adds, ops["router"].grad_adds) == (0.0, 0.0)


# a BF16 MoE layer: 8 experts, top-2, grouped GEMM, alltoall, 4-way data parallel
_MOE_SPEC = {"vocab_size": 1024, "hidden_size": 1024, "num_layers": 2, "num_attention_heads": 8,
             "intermediate_size": 4096, "num_experts": 8, "experts_per_token": 2,
             "moe_intermediate_size": 2048}  # fmt: skip


def _body_waits_at_ep_2_and_4(**sections) -> dict:
    """The MoE body's host waits at EP 2 (4 local experts) and EP 4 (2), the run otherwise as *sections* say."""
    waits = {}
    for ep in (2, 4):
        run = make_run(_MOE_SPEC, parallel={"tp": 1, "dp": 4, "ep": ep}, training={"seq_length": 4096}, **sections)
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        waits[ep] = TimeModel(run).host(body, LayerType.NOT_REC_LAYER)
    return waits


def test_the_pricer_prices_each_further_expert_gemm_at_the_cpp_loop_s_time():
    # The same BF16 MoE layer (8 experts, top-2, grouped GEMM, alltoall) on DGX H100 at EP 2 (4 local
    # experts) and EP 4 (2): the host's launch time differs only by the experts after each call's first:
    # their GEMMs, each 25 us whatever the host: forward 2 grouped GEMMs (fc1, fc2) x 2 experts x 25 = 100 us,
    # backward their dgrad and wgrad calls, 200 us (gradient-accumulation fusion: no per-expert adds); at a
    # whole launch each (80.9 us) they would be 323.6 and 647.2 us. And GroupedLinear's Python steps, each
    # 350 / 128 us · 80.9 / 98.0 = 2.25725 us (TE issue #2897's GB200 allocations at H100's launch): forward
    # 2 a further expert (input and weight saved), 2 · 2 · 2 = 8 steps, 18.0580 us; backward 4 (both restored,
    # the wgrad's tensor, the input released), 16 steps, 36.1161 us.
    step_us = 350.0 / 128 * 80.9 / 98.0
    run = make_run(_MOE_SPEC, parallel={"tp": 1, "dp": 4, "ep": 2}, training={"seq_length": 4096})
    assert run.timing.gradient_accumulation_fusion and TimeModel(run).launch_s() == pytest.approx(80.9e-6)
    waits = _body_waits_at_ep_2_and_4()
    assert waits[2].launch_forward - waits[4].launch_forward == pytest.approx(100e-6 + 8 * step_us * 1e-6)
    assert waits[2].launch_backward - waits[4].launch_backward == pytest.approx(200e-6 + 16 * step_us * 1e-6)
    assert abs(8 * step_us - 18.0580) < 1e-4
    # a host that launches from Python in 10 us (under the C++ loop's 25): the experts' GEMMs cost no more
    # than a launch each, 4 · 10 = 40 us forward and 80 backward; the Python steps at 10 / 98.0 of 2.73438 us,
    # 0.279018 us each: 8 forward (2.23214 us), 16 backward (4.46429 us)
    step_us = 350.0 / 128 * 10.0 / 98.0
    waits = _body_waits_at_ep_2_and_4(device={"name": "h100-80gb", "host_kernel_us": 10.0})
    assert waits[2].launch_forward - waits[4].launch_forward == pytest.approx(40e-6 + 8 * step_us * 1e-6)
    assert waits[2].launch_backward - waits[4].launch_backward == pytest.approx(80e-6 + 16 * step_us * 1e-6)


def test_a_grouped_gemm_s_experts_are_quantized_in_te_s_cpp_loop():
    # TE v2.9 extensions/cast.cpp `split_quantize` -> `multi_tensor_quantize_impl` (v2.14 the same): one Python
    # call a grouped GEMM's input (forward) and output gradient (backward), the experts' `quantize` one after
    # another in C++ under MXFP8 and current scaling (the fused multi-tensor kernel is delayed scaling's only).
    # The call's first kernel a launch (it carries the call's Python), every further kernel of the call, the
    # first expert's included, at the C++ loop's share, as its GEMMs: s = 25 / 80.9 = 0.3090235 on DGX H100,
    # 8 experts, GEMMs 1 + 7 s = 3.16316 a call (test above).
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    experts = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 8, 32.0), weight_elements=8 * 32 * 32)
    share = 25.0 / 80.9
    calls = 1 + 7 * share
    # current scaling: 4 kernels an expert (amax zeroed, amax, scale, cast), 32 in the call: 1 + 31 s =
    # 10.57973; forward 3.16316 + 10.57973 = 13.74289, backward the dgrad and wgrad calls 6.32633 + 10.57973
    # = 16.90606
    forward, backward = op_launches(experts, **kw, fp8_recipe="tensorwise", cpp_gemm_share=share)
    assert (forward, backward) == (pytest.approx(13.74289, abs=1e-5), pytest.approx(16.90606, abs=1e-5))
    # MXFP8 (TE before v2.12): one kernel an expert (1 + 7 s = 3.16316), the swizzles a GEMM call's two kernels
    # issued from the GEMM call's C++ (2 s forward, 4 s backward): forward 3.16316 + 3.16316 + 0.61805 =
    # 6.94437, backward 6.32633 + 3.16316 + 1.23609 = 10.72559
    forward, backward = op_launches(experts, **kw, fp8_recipe="mxfp8", cpp_gemm_share=share)
    assert (forward, backward) == (pytest.approx(6.94437, abs=1e-5), pytest.approx(10.72559, abs=1e-5))
    # delayed scaling: one fused cast-transpose for all the experts, one call: 3.16316 + 1 forward
    forward, _ = op_launches(experts, **kw, fp8_recipe="delayed", cpp_gemm_share=share)
    assert forward == pytest.approx(calls + 1)
    # a SequentialMLP's experts each quantize in their own Python call (a TE Linear each): per expert its
    # call's first kernel a launch and its 3 further kernels at s: 8 · (1 + 3 s) = 15.41656; its GEMMs a launch
    # each: forward 8 + 15.41656 = 23.41656, backward 16 + 15.41656 = 31.41656
    looped = Op("experts_in", "moe", "matmul", gemm=(8.0, 32.0, 32.0, 8, 32.0), weight_elements=8192, sequential=8)
    forward, backward = op_launches(looped, **kw, fp8_recipe="tensorwise", cpp_gemm_share=share)
    assert (forward, backward) == (pytest.approx(23.41656, abs=1e-5), pytest.approx(31.41656, abs=1e-5))


def test_a_quantization_s_kernels_after_its_call_s_first_are_issued_from_te_s_cpp():
    # TE v2.9 and v2.14 csrc/quantizer.cpp `Float8CurrentScalingQuantizer::quantize_impl`: one `tex.quantize`
    # call from Python issues the amax (zeroed, then computed: `nvte_compute_amax`), the scale
    # (`nvte_compute_scale_from_amax`) and the cast (`nvte_quantize_v2`) from C++, back to back: the first a
    # launch, the other 3 at s = 25 / 80.9 each: 1.92707. A dense GEMM under current scaling: forward its GEMM
    # + 1.92707 = 2.92707, backward its 2 GEMMs + the output gradient's 1.92707 = 3.92707.
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    share = 25.0 / 80.9
    dense = Op("proj", "attention", "matmul", gemm=(64.0, 32.0, 32.0, 1, 32.0), weight_elements=1024)
    forward, backward = op_launches(dense, **kw, fp8_recipe="tensorwise", cpp_gemm_share=share)
    assert (forward, backward) == (pytest.approx(2.92707, abs=1e-5), pytest.approx(3.92707, abs=1e-5))
    # fed by a TE norm (LayerNormLinear): extensions/normalization.cpp `rmsnorm_fwd` (FUSED_NORM_AMAX_FP8)
    # zeroes the amax, runs the norm and then `quantize_with_amax` (scale, cast) in the norm's one C++ call,
    # whose Python the norm's launch carries: all 3 at s, 0.92707; forward 1 + 0.92707
    norm = Op("norm1", "attention", "memory")
    qkv = Op(
        "qkv", "attention", "matmul", inputs=("norm1",), gemm=(64.0, 32.0, 96.0, 1, 96.0), weight_elements=3072,
        norm_input=True,
    )  # fmt: skip
    layer_kw = {key: value for key, value in kw.items() if key != "mla"}
    launches = layer_launches([norm, qkv], **layer_kw, fp8_recipe="tensorwise", cpp_gemm_share=share)
    assert launches["qkv"] == (pytest.approx(1.92707, abs=1e-5), pytest.approx(3.92707, abs=1e-5))
    # MXFP8 (TE v2.9, gemm.cpp `te_general_gemm` swizzling both operands' scales in C++ before its GEMM): the
    # input's cast a launch, the swizzles 2 s forward, 4 s backward: 1 + 1 + 0.61805, 2 + 1 + 1.23609
    forward, backward = op_launches(dense, **kw, fp8_recipe="mxfp8", cpp_gemm_share=share)
    assert (forward, backward) == (pytest.approx(2.61805, abs=1e-5), pytest.approx(4.23609, abs=1e-5))
    # at a C++ share of 1 (no measured host) every kernel is a launch, as before
    assert op_launches(dense, **kw, fp8_recipe="tensorwise") == (5.0, 6.0)


def test_mxfp8_activations_carry_gemm_swizzled_scales_from_te_2_12():
    # TE 99df88106 (v2.12, PR #2486) module/linear.py, layernorm_linear.py, grouped_linear.py `_get_quantizers`:
    # `input_quantizer.optimize_for_gemm = True` unless a column-parallel linear under SP (its input all-gathered),
    # `grad_output_quantizer.optimize_for_gemm = True` unless a row-parallel one under SP; csrc/extensions/
    # swizzle.cpp `swizzle_scales_for_gemm` returns early for scales already swizzled. Before: every operand's
    # swizzled in the GEMM call (forward weight and input 2; dgrad weight and output gradient 2, wgrad input
    # and output gradient 2). From v2.12 the forward's and the dgrad's weight only (1, 1); an all-gathered input
    # adds its forward and wgrad swizzles (2, 2), an all-gathered output gradient its dgrad and wgrad ones (1, 3).
    assert mxfp8_swizzles(False) == (2.0, 4.0)
    assert mxfp8_swizzles(True) == (1.0, 1.0)
    assert mxfp8_swizzles(True, gathered=True) == (2.0, 2.0)
    assert mxfp8_swizzles(True, scattered=True) == (1.0, 3.0)
    assert mxfp8_swizzles(False, gathered=True, scattered=True) == (2.0, 4.0)
    # the grouped GEMM of the test above at s = 25 / 80.9: forward 3.16316 + 3.16316 + s = 6.63535, backward
    # 6.32633 + 3.16316 + s = 9.79852
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    share = 25.0 / 80.9
    experts = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 8, 32.0), weight_elements=8 * 32 * 32)
    forward, backward = op_launches(
        experts, **kw, fp8_recipe="mxfp8", cpp_gemm_share=share, swizzles=mxfp8_swizzles(True)
    )
    assert (forward, backward) == (pytest.approx(6.63535, abs=1e-5), pytest.approx(9.79852, abs=1e-5))


def test_the_pricer_swizzles_only_mxfp8_weights_from_te_2_12():
    # A small MXFP8 run on B200 (tp 1: no SP gathers): per layer the GEMM calls of qkv, out_proj, fc1 and fc2
    # (qkv's parts share one call) each lose 1 swizzle forward and 3 backward from TE v2.11 to v2.12, at
    # the C++ share 25 / 76.9 of a B200 launch: 4 · 1 · 25 us = 100 us forward, 4 · 3 · 25 = 300 us backward.
    spec = {"vocab_size": 1024, "hidden_size": 1024, "num_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 4096}  # fmt: skip
    waits = {}
    for release in ("v2.11", "v2.12"):
        run = make_run(
            spec,
            parallel={"tp": 1, "dp": 8},
            training={"seq_length": 4096},
            timing={"matmul_dtype": "fp8", "fp8_recipe": "mxfp8"},
            device={"name": "b200"},
        )
        run = run.model_copy(update={"framework_release": FrameworkRelease(transformer_engine=release)})
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        waits[release] = TimeModel(run).host(body, LayerType.NOT_REC_LAYER)
    assert waits["v2.11"].launch_forward - waits["v2.12"].launch_forward == pytest.approx(100e-6, abs=1e-10)
    assert waits["v2.11"].launch_backward - waits["v2.12"].launch_backward == pytest.approx(300e-6, abs=1e-10)


def test_the_pricer_prices_each_further_expert_s_quantization_at_the_cpp_loop_s_time():
    # The BF16 layer of the test above it (8 experts, top-2, grouped GEMM, alltoall, DGX H100) in FP8 with
    # current scaling, at EP 2 (4 local experts) and EP 4 (2): beside the GEMMs' 100 us forward and 200 us
    # backward, each of the 2 further experts' 4 quantization kernels at 25 us, for fc1's and fc2's input
    # forward (2 · 2 · 4 · 25 = 400 us) and their output gradients backward (400 us): 500 and 600 us; and
    # GroupedLinear's Python steps (2.25725 us each, the test above), under FP8 forward 4 a further expert
    # (saved input and weight, the weight's workspace fetched, the input retargeted): 16, 36.1161 us;
    # backward 5 (restored both, the weight retargeted, the wgrad's tensor, the input released): 20, 45.1451 us.
    step_us = 350.0 / 128 * 80.9 / 98.0
    waits = _body_waits_at_ep_2_and_4(timing={"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"})
    assert waits[2].launch_forward - waits[4].launch_forward == pytest.approx(500e-6 + 16 * step_us * 1e-6)
    assert waits[2].launch_backward - waits[4].launch_backward == pytest.approx(600e-6 + 20 * step_us * 1e-6)


def test_deterministic_mode_fills_a_grouped_gemm_s_weight_gradients_once_an_expert_before_te_2_16():
    # TE v1.13 to v2.15 `_GroupedLinear.backward` without wgrad fusion: `[torch.empty(w.size(), ...) for w in
    # weights]`, one NaN-filled buffer an expert; from cb59ef156 (v2.16) one bulk buffer. 8 experts: backward
    # the dgrad's buffer and 8 weight gradients' = 9 fills, else 2; forward the one output either way.
    experts = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 8, 32.0), weight_elements=8 * 32 * 32)
    assert fill_launches(experts, (1.0, 1.0), wgrad_fused=False, wgrad_per_expert=True) == (1.0, 9.0)
    assert fill_launches(experts, (1.0, 1.0), wgrad_fused=False) == (1.0, 2.0)
    # fused, no 16-bit weight gradient is allocated: the dgrad's alone
    assert fill_launches(experts, (1.0, 1.0), wgrad_fused=True, wgrad_per_expert=True) == (1.0, 1.0)
    # a SequentialMLP's 8 experts are 8 TE Linears, each its own output, dgrad and wgrad buffers: 8 and 16
    looped = Op("experts_in", "moe", "matmul", gemm=(8.0, 32.0, 32.0, 8, 32.0), weight_elements=8192, sequential=8)
    assert fill_launches(looped, (1.0, 1.0), wgrad_fused=False, wgrad_per_expert=True) == (8.0, 16.0)


def test_the_pricer_fills_each_expert_s_weight_gradient_under_a_te_before_2_16():
    # The BF16 layer above (8 experts, grouped GEMM, EP 2: 4 local experts, DGX H100 80.9 us a launch) under
    # --deterministic-mode without gradient-accumulation fusion: at TE 2.15 fc1's and fc2's backward each
    # fill 4 weight-gradient buffers where 2.16 fills one, 2 · 3 = 6 launches more, 485.4 us; forward alike.
    spec = {"vocab_size": 1024, "hidden_size": 1024, "num_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 4096, "num_experts": 8, "experts_per_token": 2,
            "moe_intermediate_size": 2048}  # fmt: skip
    waits = {}
    for release in ("2.15.0", "2.16.0"):
        run = make_run(spec, parallel={"tp": 1, "dp": 4, "ep": 2}, training={"seq_length": 4096},
                       timing={"deterministic": True, "gradient_accumulation_fusion": False})  # fmt: skip
        run = run.model_copy(update={"framework_release": FrameworkRelease(transformer_engine=release)})
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        waits[release] = TimeModel(run).host(body, LayerType.NOT_REC_LAYER)
    assert waits["2.15.0"].launch_backward - waits["2.16.0"].launch_backward == pytest.approx(6 * 80.9e-6)
    assert waits["2.15.0"].launch_forward == pytest.approx(waits["2.16.0"].launch_forward)


def test_grouped_linear_s_per_expert_python_steps_by_hand():
    # TE d0067d0d module/grouped_linear.py `_GroupedLinear`, the experts after the call's first (the first's
    # steps are in its launch, as a dense TE Linear's): forward `prepare_for_saving(*inputmats, *weights_fp8,
    # *saved_weights, ...)` saves each expert's input and GEMM weight (2); under FP8 `quantize_weight` fetches
    # its workspace and `inputmat.update_usage(...)` retargets the input (2 more). Backward the 2 restored,
    # each weight's tensor for autograd (`handle_custom_ddp_from_mcore` / the bulk buffer's view) and
    # `clear_tensor_data(*inputmats)` (4); under FP8 `weight.update_usage(columnwise_usage=True)` before the
    # dgrad (5). TE v2.3 to v2.16 also save and restore `*weights`, the original weights: one more each way.
    # 8 experts: 7 further.
    experts = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 8, 32.0), weight_elements=8 * 32 * 32)
    assert grouped_python_steps(experts, fp8=False, weights_saved=False) == (14.0, 28.0)
    assert grouped_python_steps(experts, fp8=True, weights_saved=False) == (28.0, 35.0)
    assert grouped_python_steps(experts, fp8=True, weights_saved=True) == (35.0, 42.0)
    # a fused GEMM's part carries its share (half of two): 7 · 2 / 2 = 7 forward
    part = Op("fc1_gate", "moe", "matmul", gemm=(64.0, 32.0, 16.0, 8, 32.0), weight_elements=8 * 32 * 16)
    assert grouped_python_steps(part, fp8=False, weights_saved=False) == (7.0, 14.0)
    # a SequentialMLP's experts are TE Linears called from Megatron's Python, each in its own launches; one
    # expert has no further one; a dense linear is not grouped
    looped = Op("experts_in", "moe", "matmul", gemm=(8.0, 32.0, 32.0, 8, 32.0), weight_elements=8192, sequential=8)
    one = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 1, 32.0), weight_elements=32 * 32)
    assert grouped_python_steps(looped, fp8=True, weights_saved=True) == (0.0, 0.0)
    assert grouped_python_steps(one, fp8=True, weights_saved=True) == (0.0, 0.0)
    # in launches: TE issue #2897's 350 us for 2 · 64 per-expert `torch.empty`s on GB200 (98.0 us a launch):
    # 0.0279018 a step; BF16, fused wgrad, C++ share 1: forward 8 GEMM launches + 14 · 0.0279018 = 8.39063,
    # backward 16 + 28 · 0.0279018 = 16.78125
    assert abs(PY_STEP_SHARE - 350.0 / 128 / HOST_KERNEL_US_DGX_GB200) < 1e-12
    assert abs(PY_STEP_SHARE - 0.0279018) < 1e-7
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    forward, backward = op_launches(experts, **kw, python_step_share=PY_STEP_SHARE)
    assert (forward, backward) == (pytest.approx(8.39063, abs=1e-5), pytest.approx(16.78125, abs=1e-5))
    assert op_launches(looped, **kw, python_step_share=PY_STEP_SHARE) == op_launches(looped, **kw)


def test_the_pricer_prices_the_original_weights_te_saved_from_2_3_to_2_16():
    # The BF16 layer above (8 experts, grouped GEMM, EP 2: 4 local experts, DGX H100): TE v2.3 (b59d1d8b3) to
    # v2.16 save each expert's original weight beside its input and GEMM weight, v2.17 (f8bda5d0a) not, v2.2
    # not yet: 3 further experts · 2 GroupedLinears (fc1, fc2) · 1 step each way, 6 · 2.25725 = 13.5435 us a pass.
    spec = {"vocab_size": 1024, "hidden_size": 1024, "num_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 4096, "num_experts": 8, "experts_per_token": 2,
            "moe_intermediate_size": 2048}  # fmt: skip
    waits = {}
    for release in ("v2.2", "v2.9", "v2.17"):
        run = make_run(spec, parallel={"tp": 1, "dp": 4, "ep": 2}, training={"seq_length": 4096})
        run = run.model_copy(update={"framework_release": FrameworkRelease(transformer_engine=release)})
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        waits[release] = TimeModel(run).host(body, LayerType.NOT_REC_LAYER)
    for unsaved in ("v2.2", "v2.17"):
        assert waits["v2.9"].launch_forward - waits[unsaved].launch_forward == pytest.approx(13.5435e-6, abs=1e-10)
        assert waits["v2.9"].launch_backward - waits[unsaved].launch_backward == pytest.approx(13.5435e-6, abs=1e-10)


def test_the_host_s_time_per_launch_is_what_the_small_case_leaves_over_its_launches():
    # Launches of one micro-batch on a rank of the 12-layer TP4 case (one stage):
    #   embedding: forward the masked lookup under TP 8, the all-reduce 1, dropout 1 = 10; backward the
    #     dense gradient 6 + main-grad add 1, dropout 1 = 8                                         18
    #   12 layers × (33 + 46) (test above)                                                        948
    #   output: forward the final norm 1 + fill 1, the logits' GEMM 1 (Megatron's own linear: no
    #     fill), the unfused loss 25, its three all-reduces 3 = 31; backward the norm 3 + fill 1, the
    #     output gradient's all-reduce 1, the logits' dgrad, wgrad and main-grad add 3, the loss 10 = 18  49
    # = 1,015 a micro-batch, × 4 micro-batches = 4,060 an iteration.
    launches = 4 * (18 + 12 * (33 + 46) + 49)
    run = _small("h100")
    total = sum(f + b for layer in walk(run).layers for f, b in _launches(run, layer).values())
    assert 4 * total == pytest.approx(launches)
    # Of them plain PyTorch ops (`PLAIN_OP_SHARE` of a launch each): the masked lookup 8 + its gradient 7,
    # the loss 25 + 10, the 12 layers' attention masks 12 × 10: 170 a micro-batch, so
    # 4 × (1,015 − 0.6 · 170) = 3,652 launches' worth.
    worth = 4 * (1015 - (1 - PLAIN_OP_SHARE) * 170)
    assert worth == pytest.approx(3652)
    # This case's own figure: (measured − ppb's terms outside the layers) / 3,652, on each system: DGX
    # H100 (0.24667 − 0.0006) / 3,652 = 67.4 us, DGX A100 (0.405835 − 0.0008) / 3,652 = 110.9 (the catalog's
    # figures are the median over every host-bound dense case, bench/host_derive.py: 80.9 and 112.3). DGX
    # GB200 (Grace): (0.30897 − 0.0004) / 3,652 = 84.5 us, its GPU work 0.022 s on the gb200 entry (the
    # catalog's is the median over the 50 two-tray host-bound dense cases: 98.0).
    systems = (("h100", 67.4), ("a100", 110.9), ("gb200", 84.5))
    for gpu, figure in systems:
        gpu_only = run_iteration(_small(gpu, 0.0))
        outside = gpu_only.seconds - gpu_only.breakdown["compute"]
        assert figure == pytest.approx((SMALL_TP4_GOLDEN[gpu].median_s - outside) / worth * 1e6, abs=0.05)
    assert (HOST_KERNEL_US_DGX_H100, HOST_KERNEL_US_DGX_A100) == (80.9, 112.3)  # bench/host_derive.py's medians
    assert DEVICE_CATALOG["h100-80gb"].host_kernel_us == HOST_KERNEL_US_DGX_H100
    assert DEVICE_CATALOG["a100-80gb"].host_kernel_us == HOST_KERNEL_US_DGX_A100
    assert DEVICE_CATALOG["h200"].host_kernel_us == HOST_KERNEL_US_DGX_H100  # the same host CPUs
    # DGX B200 (no CI values): DGX H100's figure at the two hosts' max boost clocks, Xeon Platinum 8480C
    # 3.8 GHz and 8570 4.0 GHz (DGX H100 datasheet, DGX B200 User Guide): 80.9 · 3.8 / 4.0 = 76.86 -> 76.9
    assert DEVICE_CATALOG["b200"].host_kernel_us == HOST_KERNEL_US_DGX_B200
    assert abs(HOST_KERNEL_US_DGX_B200 - HOST_KERNEL_US_DGX_H100 * 3.8 / 4.0) <= 0.05
    assert DEVICE_CATALOG["gb200"].host_kernel_us == HOST_KERNEL_US_DGX_GB200 == 98.0  # host_derive.py's median


def test_host_bound_passes_by_hand():
    # 100 launches at 70 us: 7 ms of host time against 5 ms of GPU work: 2 ms more; against 9: none
    assert host_excess_s(5e-3, 100, 70e-6) == pytest.approx(2e-3)
    assert host_excess_s(9e-3, 100, 70e-6) == 0.0
    # a fused GEMM's two parts carry 2/3 and 1/3 of its one launch: at 1.5 a launch, nothing queued,
    # the first part is launched at 1.5 · 2/3 = 1 (the GPU waits 1), the second at 1.5, when the GPU
    # is still on the first part's 2 units: no more wait
    assert launch_wait_s(0.0, [(2 / 3, 2.0), (1 / 3, 1.0)], 1.5) == pytest.approx(1.0)


def test_a_slower_host_never_shortens_the_iteration():
    fast, slow = run_iteration(_small("h100", 10.0)), run_iteration(_small("h100", 100.0))
    assert slow.seconds > fast.seconds


def test_the_iteration_states_the_host_s_part_of_compute():
    # The small case is launch-bound throughout: every layer's forward and backward wait for the host, so
    # of `compute` all but the layers' GPU work is the wait (3,652 launches' worth × 80.9 us − GPU work)
    host_bound = run_iteration(_small("h100"))
    gpu_only = run_iteration(_small("h100", 0.0))
    assert host_bound.host_wait_seconds == pytest.approx(
        host_bound.breakdown["compute"] - gpu_only.breakdown["compute"], rel=1e-9
    )
    assert gpu_only.host_wait_seconds == 0.0
    assert host_bound.to_json()["host_wait_seconds"] == host_bound.host_wait_seconds


def test_fp8_training_launches_the_quantization_kernels_of_its_recipe():
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    experts = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, 8, 32.0), weight_elements=8 * 32 * 32)
    # 8 GEMMs forward, 16 backward (above). Tensorwise (current) scaling quantizes each expert's input
    # and output gradient on its own, the amax zeroed (current_scaling.cu `zero_amax_kernel`) + amax +
    # scale + cast (TE 2.9 quantizer.cpp, cast.cpp): 8 · 4 = 32 more each way; delayed scaling one
    # multi-tensor cast-transpose each way; MXFP8 one kernel an expert, and before each grouped GEMM call
    # one multi-tensor swizzle of A's scales and one of B's (TE 2.9 gemm.cpp `te_general_grouped_gemm`):
    # forward 8 + 8 + 2, backward (dgrad, wgrad) 16 + 8 + 2 · 2.
    assert op_launches(experts, **kw, fp8_recipe="tensorwise") == (8.0 + 32.0, 16.0 + 32.0)
    assert op_launches(experts, **kw, fp8_recipe="delayed") == (9.0, 17.0)
    assert op_launches(experts, **kw, fp8_recipe="mxfp8") == (8.0 + 8.0 + 2.0, 16.0 + 8.0 + 4.0)
    # A plain GEMM under MXFP8 (`te_general_gemm`: `swizzle_scaling_factors` for A and for B): its GEMM,
    # its input's cast and 2 swizzles forward; 2 GEMMs, the gradient's cast and 2 · 2 swizzles backward.
    dense = Op("fc1", "mlp", "matmul", gemm=(64.0, 32.0, 128.0, 1, 128.0), weight_elements=4096)
    assert op_launches(dense, **kw, fp8_recipe="mxfp8") == (1.0 + 1.0 + 2.0, 2.0 + 1.0 + 4.0)
    # A SequentialMLP's experts each make their own GEMM calls: 8 · 2 swizzles forward, 8 · 4 backward.
    looped = Op("experts_in", "moe", "matmul", gemm=(8.0, 32.0, 32.0, 8, 32.0), weight_elements=8192, sequential=8)
    assert op_launches(looped, **kw, fp8_recipe="mxfp8") == (8.0 + 8.0 + 16.0, 16.0 + 8.0 + 32.0)
    # A GEMM fed by a TE norm inside its linear (LayerNormLinear, `Op.norm_input`): the norm writes FP8
    # itself under delayed scaling (no cast), and its amax under tensorwise scaling (the amax's
    # `amax.zero_()` before the norm, scale + cast: 3); the output gradient is quantized in full (4,
    # delayed 1). The same GEMM after a norm module of its own (an MoE layer's pre-MLP norm, MLA's input
    # norm: TENorm, then a TE linear) quantizes the 16-bit input itself: 4, delayed 1.
    norm = Op("norm1", "attention", "memory")
    qkv = Op(
        "qkv",
        "attention",
        "matmul",
        inputs=("norm1",),
        gemm=(64.0, 32.0, 96.0, 1, 96.0),
        weight_elements=3072,
        norm_input=True,
    )
    layer_kw = {key: value for key, value in kw.items() if key != "mla"}
    tensorwise = layer_launches([norm, qkv], **layer_kw, fp8_recipe="tensorwise")
    assert tensorwise["qkv"] == (1.0 + 3.0, 2.0 + 4.0)
    assert layer_launches([norm, qkv], **layer_kw, fp8_recipe="delayed")["qkv"] == (1.0, 3.0)
    apart = dataclasses.replace(qkv, norm_input=False)
    assert layer_launches([norm, apart], **layer_kw, fp8_recipe="tensorwise")["qkv"] == (1.0 + 4.0, 2.0 + 4.0)
    assert layer_launches([norm, apart], **layer_kw, fp8_recipe="delayed")["qkv"] == (2.0, 3.0)
    # Without FP8 training, and for the GEMMs FP8 training leaves in 16 bits (the output layer), none.
    assert layer_launches([norm, qkv], **layer_kw)["qkv"] == (1.0, 2.0)
    logits = Op("logits", "output", "matmul", gemm=(64.0, 32.0, 128.0, 1, 128.0), weight_elements=4096, fp8=False)
    assert op_launches(logits, **kw, fp8_recipe="tensorwise") == (1.0, 2.0)


def test_unfused_bias_gelu_adds_the_bias_in_its_own_kernel():
    """Megatron-LM d98e8a64 megatron/core/transformer/mlp.py `MLP.forward`: with bias_activation_fusion
    off (--no-bias-gelu-fusion) fc1's bias is added by `intermediate_parallel + bias_parallel` before
    `F.gelu`: one more forward kernel reading and writing the fc1 output, 2048 tokens × 2816 × 2 bytes
    each way: 2 · 2048 · 2816 · 2 = 23,068,672 bytes; the backward is unchanged (the add passes the
    gradient through; the bias's reduction, 2048 · 2816 · 2 = 11,534,336 bytes, is there either way).
    Without a bias, or under SwiGLU (bias_swiglu_fusion decides there), nothing changes."""

    def fc1(fusion: bool, **spec):
        raw = {
            "name": "s",
            "models": [{"name": "llm", "spec": {**SMALL_GQA, **spec}}],
            "parallel": {"dp": 1, "tp": 1, "pp": 1},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": 1, "dtype": "bf16"},
            "device": ROUND_DEVICE,
            "timing": {"bias_gelu_fusion": fusion},
        }
        run = parse_run_config(raw)
        body = next(layer for layer in walk(run).layers if layer.node == "BODY")
        ops = TimeModel(run).ops(body)
        counts = layer_launches(ops, tp=1, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True)
        op = next(op for op in ops if op.name.endswith("mlp_in"))
        return op.side_bytes, counts[op.name]

    gelu = {"mlp_bias": True, "activation": "gelu"}
    assert fc1(True, **gelu) == ((0.0, 11_534_336.0), (1.0, 3.0))
    assert fc1(False, **gelu) == ((23_068_672.0, 11_534_336.0), (2.0, 3.0))
    assert fc1(False, mlp_bias=True) == fc1(True, mlp_bias=True)  # SwiGLU
    assert fc1(False, activation="gelu") == fc1(True, activation="gelu")  # no bias


def _local_softmax(dtype: str, **timing):
    """The small GQA layer under Megatron's own attention (--transformer-impl local, no flash), tp 1:
    its softmax op, its launches, and the layer's activation terms at one micro-batch."""
    raw = {
        "name": "s",
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 1, "tp": 1, "pp": 1},
        "training": {
            "seq_length": 2048,
            "micro_batch_size": 1,
            "micro_batches": 1,
            "dtype": dtype,
            "flash_attention": False,
        },
        "device": ROUND_DEVICE,
        "timing": {"transformer_impl": "local", **timing},
    }
    run = parse_run_config(raw)
    body = next(layer for layer in walk(run).layers if layer.node == "BODY")
    ops = TimeModel(run).ops(body)
    counts = layer_launches(ops, tp=1, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True)
    op = next(op for op in ops if op.name.endswith("softmax"))
    terms = {term.op: term.bytes for term in MemoryModel(run).activation_terms(body, LayerType.NOT_REC_LAYER)}
    return op, counts[op.name], terms


def test_unfused_masked_softmax_runs_pytorch_ops_and_keeps_its_fp32_output():
    """Megatron-LM d98e8a64 fused_softmax.py `FusedScaleMaskSoftmax.forward_torch_softmax` (with
    --no-masked-softmax-fusion): per score element, fp16 scores with the softmax in fp32 and query-key
    layer scaling: upcast 2 + 4, scale 4 + 4, masked_fill_ 4 + 4, softmax 4 + 4, cast back 4 + 2 = 36
    bytes in 5 kernels forward; backward the casts' 6 + 6, scale 8, masked fill 8, softmax 4 + 4 + 4:
    40 in 5. Without fp32 (bf16) the masked fill and softmax alone: 8 bytes and 10, 2 kernels each way.
    Fused (the default), the causal kernel reads the lower triangle: (0.5 + 1)·2 = 3 and (1 + 1)·2 = 4.
    Score elements: 16 heads × 2048 × 2048 = 67,108,864. Memory: `_softmax` keeps its fp32 output (4
    bytes an element, 268,435,456) and, without attention dropout, the bmm keeps the fp16 cast (2)."""
    pairs = 16 * 2048 * 2048
    scaled = {"masked_softmax_fusion": False, "apply_query_key_layer_scaling": True}
    op, launches, terms = _local_softmax("fp16", **scaled)
    assert (op.bytes, op.backward_bytes, launches) == (36 * pairs, 40 * pairs, (5.0, 5.0))
    assert terms["attention.softmax_output"] == 4 * pairs
    assert terms["attention.probabilities"] == 2 * pairs
    op, launches, _ = _local_softmax("bf16", masked_softmax_fusion=False)
    assert (op.bytes, op.backward_bytes, launches) == (8 * pairs, 10 * pairs, (2.0, 2.0))
    op, launches, terms = _local_softmax("fp16", apply_query_key_layer_scaling=True)
    assert (op.bytes, op.backward_bytes, launches) == (3 * pairs, 4 * pairs, (1.0, 1.0))
    assert terms["attention.softmax_output"] == 2 * pairs
    assert "attention.probabilities" not in terms


def test_plain_pytorch_ops_cost_a_share_of_a_module_launch_where_the_host_is_measured():

    # the three Megatron CI pairs that differ by --no-rope-fusion (golden values of one commit each): a
    # layer pass launches 24 + 14 plain ops unfused against 2 + 2 TE kernels fused, 18 layer passes on the
    # critical path (12 layers over pp 2, 2 micro-batches: 3 slots of 6), so the measured difference is
    # 18 · host · (38 · share − 4): DGX H100 0.13464 − 0.11836 = 16.28 ms at 80.9 us, DGX A100
    # 0.184625 − 0.15935 = 25.275 ms and 0.163545 − 0.144105 = 19.44 ms at 112.3 us:
    # (16.28 / 1.4562 + 4) / 38 = 0.399, (25.275 / 2.0214 + 4) / 38 = 0.434, (19.44 / 2.0214 + 4) / 38 = 0.358
    shares = [
        (delta / (18 * host) + 4) / 38
        for delta, host in ((16.28e-3, 80.9e-6), (25.275e-3, 112.3e-6), (19.44e-3, 112.3e-6))
    ]
    assert shares == pytest.approx([0.399, 0.434, 0.358], abs=1e-3)
    assert round(sum(shares) / 3, 1) == PLAIN_OP_SHARE == 0.4
    loss = Op("output.loss", "output", "memory")
    rope = Op("rope", "attention", "memory")
    gemm = Op("fc1", "mlp", "matmul", gemm=(64.0, 32.0, 32.0, 1, 32.0), weight_elements=32 * 32)
    reduce = Op("output.reduce_loss", "output", COMM, forward_comm=Collective(ALL_REDUCE, "tp", 12.0, "tp"))
    assert plain(loss, True) and plain(rope, False) and not plain(rope, True)
    assert not plain(gemm, True) and not plain(reduce, True)
    kw = {"tp": 2, "rope_fusion": False, "cross_entropy_fusion": False, "wgrad_fused": True}
    counts = layer_launches([loss, rope, gemm], **kw, plain_share=0.5)
    # the loss 25 / 10 and unfused rotary 24 / 14 at half; the GEMM's 1 / 2 whole
    assert counts == {"output.loss": (12.5, 5.0), "rope": (12.0, 7.0), "fc1": (1.0, 2.0)}


def test_alibi_s_bias_is_copied_into_the_scores_by_a_kernel_of_its_own():
    """Megatron-DeepSpeed's `torch.baddbmm(alibi, q, kᵀ, beta=1.0)` (megatron/model/transformer.py at
    9bb3dc33): PyTorch's CUDA baddbmm copies the broadcast bias into its output before the batched GEMM,
    one kernel more forward; the backward (the bias needs no gradient) is the plain core's."""

    def scores(position: str) -> tuple[float, float]:
        raw = {
            "name": "s",
            "models": [{"name": "llm", "spec": {**SMALL_GQA, "position_embedding": position}}],
            "parallel": {"dp": 1, "tp": 1, "pp": 1},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": 1, "flash_attention": False},
            "device": ROUND_DEVICE,
            "timing": {"transformer_impl": "local"},
        }
        run = parse_run_config(raw)
        body = next(layer for layer in walk(run).layers if layer.node == "BODY")
        counts = layer_launches(
            TimeModel(run).ops(body), tp=1, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True
        )
        return counts["scores"]

    plain, alibi = scores("none"), scores("alibi")
    assert alibi == (plain[0] + 1.0, plain[1])


def test_per_tensor_fp8_on_hopper_transposes_after_each_sp_all_gather():
    # TE v2.9: under SP a per-tensor quantizer casts the sequence shard row-wise only (delayed: one kernel,
    # not the cast-transpose) and the weight gradient's transpose is made after the gather, its own kernel:
    # distributed.py `_all_gather_fp8` `_create_transpose()` for a row-parallel linear's output gradient,
    # `update_usage(columnwise_usage=True)` on the re-gathered input in `_LayerNormLinear.backward`. So one
    # more backward kernel per gathered tensor: the fused QKV's input shared by its parts (2/3 and 1/3 of
    # 96 + 48 = 144 columns), the row-parallel proj's gradient whole. Delayed, fed by the norm (no input
    # cast), a fused GEMM's launches split by its columns: qk 2/3 forward, (2 GEMMs + 1 gradient cast) · 2/3
    # + 2/3 = 2 + 2/3 backward; v 1/3, 3 · 1/3 + 1/3 = 4/3; proj (1 + 1 cast, 2 + 1 + 1 transpose).
    kw = {"tp": 2, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    norm = Op("norm1", "attention", "memory")
    qk = Op(
        "qk",
        "attention",
        "matmul",
        inputs=("norm1",),
        gemm=(64.0, 32.0, 96.0, 1, 144.0),
        weight_elements=3072,
        norm_input=True,
    )
    v = dataclasses.replace(qk, name="v", gemm=(64.0, 32.0, 48.0, 1, 144.0), weight_elements=1536)
    proj = Op("proj", "attention", "matmul", inputs=("v",), gemm=(64.0, 144.0, 32.0, 1, 32.0), weight_elements=4608)
    ops = [norm, qk, v, proj]
    launches = layer_launches(ops, **kw, fp8_recipe="delayed", sp_transposes=({"qk", "v"}, {"proj"}))
    assert launches["qk"] == pytest.approx((2 / 3, 2.0 + 2 / 3))
    assert launches["v"] == pytest.approx((1 / 3, 4 / 3))
    assert launches["proj"] == pytest.approx((2.0, 4.0))
    # without them (MXFP8, Blackwell, no SP) the counts stay
    assert layer_launches(ops, **kw, fp8_recipe="delayed")["proj"] == (2.0, 3.0)


def test_te_before_1_11_copies_each_fp8_module_s_scale_inverses_each_forward():
    # TE v1.10 linear.py `_Linear.forward` and layernorm_linear.py `_LayerNormLinear.forward` save
    # `fp8_meta["scaling_fwd"].scale_inv.clone()` for the backward (v1.6 likewise), gone from v1.11 (8e3561bf8,
    # #1083): one PyTorch copy kernel a module a forward. A dense FP8 GEMM under delayed scaling: its GEMM, its
    # input's cast-transpose and the copy, 3 forward; backward unchanged (2 GEMMs and the gradient's cast, 3).
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": True}
    dense = Op("proj", "attention", "matmul", gemm=(64.0, 32.0, 32.0, 1, 32.0), weight_elements=1024)
    assert op_launches(dense, **kw, fp8_recipe="delayed") == (2.0, 3.0)
    assert op_launches(dense, **kw, fp8_recipe="delayed", scale_inv_clone=True) == (3.0, 3.0)
    # a fused module's parts share its one copy by their columns (qk 96 of 128, v 32): 0.75 and 0.25
    qk = Op("qk_proj", "attention", "matmul", gemm=(64.0, 32.0, 96.0, 1, 128.0), weight_elements=3072)
    assert op_launches(qk, **kw, fp8_recipe="delayed", scale_inv_clone=True)[0] == pytest.approx(0.75 * 3)
    # BF16 copies nothing
    assert op_launches(dense, **kw, scale_inv_clone=True) == (1.0, 2.0)


def test_the_pricer_copies_the_scale_inverses_under_a_te_before_1_11():
    # A small FP8 (delayed) run on DGX H100 at TP 1: a layer's 4 TE modules (qkv, proj, fc1, fc2) each one copy
    # a forward under v1.10, none under v1.11: 4 launches of the catalog's 80.9 us, 323.6 us; the backward alike
    spec = {"vocab_size": 1024, "hidden_size": 1024, "num_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 4096}  # fmt: skip
    waits = {}
    for release in ("v1.10", "v1.11"):
        run = make_run(
            spec,
            parallel={"tp": 1, "dp": 8},
            training={"seq_length": 4096},
            timing={"matmul_dtype": "fp8", "fp8_recipe": "delayed"},
        )
        run = run.model_copy(update={"framework_release": FrameworkRelease(transformer_engine=release)})
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        waits[release] = TimeModel(run).host(body, LayerType.NOT_REC_LAYER)
    launch = HOST_KERNEL_US_DGX_H100 * 1e-6
    assert DEVICE_CATALOG["h100-80gb"].host_kernel_us == HOST_KERNEL_US_DGX_H100
    assert waits["v1.10"].launch_forward - waits["v1.11"].launch_forward == pytest.approx(4 * launch, abs=1e-10)
    assert waits["v1.10"].launch_backward == pytest.approx(waits["v1.11"].launch_backward, abs=1e-12)


def test_megatron_fsdp_s_unit_launches_by_hand():
    # Megatron-FSDP under optim_grads_params, one bucket a dense TransformerLayer (param_and_grad_buffer.py
    # `_get_parameter_groups`, 3806ec2754 / 4e85d74ae9): forward its all-gather 1; backward the all-gather
    # again 1, the reduce-scatter 1, `grad_data.mul_` and `local_buffer += grad_shard` at 0.4 each: 2.8
    dense = [Op("norm1", "attention", "memory"), Op("qkv", "attention", "matmul", gemm=(1, 1, 1, 1, 1))]
    assert fsdp_unit_launches(dense, scaled=True, plain_share=0.4) == pytest.approx((1.0, 2.8))
    # --calculate-per-token-loss: no scaling factor, no mul_: 2.4
    assert fsdp_unit_launches(dense, scaled=False, plain_share=0.4) == pytest.approx((1.0, 2.4))
    # routed experts' parameters are a bucket of their own (they reduce over the expert data-parallel group)
    moe = [*dense, Op("experts_in", "moe", "matmul", gemm=(1, 1, 1, 2, 1))]
    assert fsdp_unit_launches(moe, scaled=True, plain_share=0.4) == pytest.approx((2.0, 5.6))


def test_the_pricer_adds_megatron_fsdp_s_unit_launches_to_each_transformer_layer():
    plain = _small("h100")
    raw = plain.model_dump()
    raw["parallel"] |= {"fsdp": True, "fsdp_impl": "megatron_fsdp"}
    fsdp = type(plain).model_validate(raw)
    launch_s = TimeModel(plain).launch_s()
    body = next(layer for layer in walk(plain).layers if layer.node == BODY)
    head = walk(plain).layers[0]
    before, after = TimeModel(plain), TimeModel(fsdp)
    state = (LayerType.NOT_REC_LAYER,)
    # the small case's 12 layers are dense, their gradients scaled by 1/dp: (1, 2 + 2 · 0.4) launches more
    assert after.host(body, *state).launch_forward - before.host(body, *state).launch_forward == pytest.approx(launch_s)
    assert after.host(body, *state).launch_backward - before.host(body, *state).launch_backward == pytest.approx(
        (2 + 2 * PLAIN_OP_SHARE) * launch_s
    )
    # full recompute: the rerun's pre-forward hook gathers the bucket (its 1 launch among the rerun's), so the
    # pre-backward hook's gather is not launched again: 2.8 - 1 + 1, the backward's host count as without recompute
    full = (LayerType.FULL_REC_LAYER,)
    assert after.host(body, *full).launch_backward - before.host(body, *full).launch_backward == pytest.approx(
        (2 + 2 * PLAIN_OP_SHARE) * launch_s
    )
    # the embedding is no FSDP unit: its module's buckets stay gathered (not counted)
    embedding = (LayerType.EMBEDDING_LAYER,)
    assert after.host(head, *embedding).launch_forward == pytest.approx(before.host(head, *embedding).launch_forward)


# the router's dtype (fp32) is not the training dtype's (bf16): `router_cast`, counted once whichever place holds it
_ROUTER_KW = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": True, "wgrad_fused": True,
              "router_cast": True}  # fmt: skip


def _fp32_router_op(release: str | None) -> tuple[Op, TimeModel]:
    """The router op of `_MOE_SPEC`'s layer under --moe-router-dtype fp32 at sequence 4096, MBS 1, TP 1, the
    Megatron-Core of *release* (None: the newest), and the time model that prices it."""
    training = {"seq_length": 4096, "moe": {"router_dtype": "fp32"}}
    raw = {"name": "x", "models": [{"name": "llm", "spec": _MOE_SPEC}], "parallel": {"dp": 4, "ep": 2},
           "training": training, "device": {"name": "h100-80gb"}}  # fmt: skip
    if release is not None:
        raw["framework_release"] = {"megatron_core": release}
    run = parse_run_config(raw)
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    model = TimeModel(run)
    return next(op for op in model.ops(body) if op.name.endswith("router")), model


def test_an_fp32_router_s_casts_and_fp32_operands_are_priced_beside_its_gemm():
    # Megatron-LM moe_utils.py `RouterGatingLinearFunction` (0f058666a8, core_v0.13.0; unchanged at d98e8a64): 4096
    # tokens, hidden 1024, 8 experts. th = 4096·1024 = 4,194,304; te = 4096·8 = 32,768; eh = 8·1024 = 8,192.
    # Forward: one TE GEMM writing fp32 logits, 2 bytes more each: 2·32,768 = 65,536. Backward: both GEMMs on fp32
    # operands, 2 bytes more an element read or written: (2·te + 2·th + 2·eh)·2 = (65,536 + 8,388,608 + 16,384)·2
    # = 16,941,056; the weight and the input cast up, both gradients cast back (read 2, write 4 or back: 6):
    # 2·(th + eh)·6 = 2·4,202,496·6 = 50,429,952; so 67,371,008 in 4 kernels
    op, _ = _fp32_router_op(None)
    assert op.side_bytes == (65_536, 16_941_056 + 50_429_952) and op.side_kernels == (0.0, 4.0)
    # the launches stay the gating GEMM's 1 forward; backward its 2 GEMMs, DDP's main-gradient add and the 4 casts
    assert op_launches(op, **_ROUTER_KW) == (1.0, 7.0)
    # before it (router.py `TopKRouter.gating`: `F.linear(input.to(fp32), weight.to(fp32))`): the forward casts
    # input and weight, 4,202,496·6 = 25,214,976, and its fp32 GEMM reads both and writes the logits 2 bytes more,
    # (th + eh + te)·2 = 4,235,264·2 = 8,470,528: 33,685,504 in 2 kernels; the backward the same fp32 GEMMs,
    # 16,941,056, and both gradients cast back, 25,214,976: 42,156,032 in 2 kernels
    old, _ = _fp32_router_op("0.12")
    assert old.side_bytes == (33_685_504, 42_156_032) and old.side_kernels == (2.0, 2.0)
    assert op_launches(old, **_ROUTER_KW) == (3.0, 5.0)


def test_the_pricer_adds_an_fp32_router_s_passes_at_hbm_rate():
    # the same router in bf16 (no passes) against fp32 at the newest Megatron-Core: the backward longer by the
    # passes' 67,371,008 bytes at the memory rate plus 4 memory-bound kernels' fixed time; the forward by 65,536
    # bytes (it launches no kernel of its own: the TE GEMM writes the fp32 logits)
    op, model = _fp32_router_op(None)
    plain = dataclasses.replace(op, side_bytes=(0.0, 0.0), side_kernels=(1.0, 1.0))
    kernels = model.kernels
    forward = model._phase_s(op, "forward") - model._phase_s(plain, "forward")
    backward = model._phase_s(op, "backward") - model._phase_s(plain, "backward")
    assert forward == pytest.approx(kernels.memory_s(65_536))
    assert backward == pytest.approx(kernels.memory_s(67_371_008) + 4 * kernels.elementwise_kernel_s)
