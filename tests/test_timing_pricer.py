"""The pricer: op prices on a device with round figures, collectives, overlap, states, options, memoization."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from small_models import ROUND_DEVICE

from ppb_core.config.devices import BLOCKWISE_MATMUL_RATIO_HOPPER, DEVICE_CATALOG, MXFP8_MATMUL_RATIO_BLACKWELL
from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.switches import OPTIONS, SWITCHES, LayerType, option_state
from ppb_core.model.walk import walk
from ppb_core.timing.comm import Group, Links, collective_seconds
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, Collective
from ppb_core.timing.kernels import Kernels, dp_workspace_bytes
from ppb_core.timing.launches import layer_launches
from ppb_core.timing.nan_fill import deterministic_fill_bytes
from ppb_core.timing.pricer import TimeModel

# 100 TFLOPS at 50% = 5e13 FLOP/s; 1000 GB/s HBM at 50% = 5e11 B/s; links 100 / 10 GB/s at 50%.
CONFIGS = ("llama3-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3")


def gelu_run(tp=1, sp=False, overlap=None, device=None, dropout=0.0, flash=False, framework="megatron", **parallel):
    spec = {
        "vocab_size": 4096,
        "hidden_size": 1024,
        "num_layers": 2,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "activation": "gelu",
        "norm": "layernorm",
        "position_embedding": "learned",
        "max_position_embeddings": 2048,
    }
    raw = {
        "name": "g",
        "framework": framework,
        "models": [{"name": "llm", "spec": spec}],
        "parallel": {"tp": tp, "sequence_parallel": sp, **parallel},
        "training": {"seq_length": 2048, "flash_attention": flash, "dropout": dropout},
        "device": device or ROUND_DEVICE,
    }
    if overlap is not None:
        raw["timing"] = {"overlap": overlap}
    return parse_run_config(raw)


def body(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


def test_ops_are_priced_by_the_roofline_and_hbm_bytes():
    run = gelu_run()
    prices = TimeModel(run).op_prices(body(run))
    # mlp_in: n=2048 tokens, 1024 → 4096. FLOPs 2·2048·1024·4096 = 17,179,869,184 → /5e13 = 0.343597 ms;
    # bytes (2048·1024 + 1024·4096 + 2048·4096)·2 = 29,360,128 → /5e11 = 0.0587 ms: compute-bound.
    assert prices["mlp_in"].forward_ms == pytest.approx(17_179_869_184 / 5e13 * 1e3, rel=1e-12)
    assert prices["mlp_in"].backward_ms == pytest.approx(2 * 17_179_869_184 / 5e13 * 1e3, rel=1e-12)
    # norm1: reads and writes 2048·1024 bf16 values, 8,388,608 bytes → /5e11; backward 3 tensors.
    assert prices["norm1"].forward_ms == pytest.approx(8_388_608 / 5e11 * 1e3, rel=1e-12)
    assert prices["norm1"].backward_ms == pytest.approx(12_582_912 / 5e11 * 1e3, rel=1e-12)
    # softmax (eager, TransformerEngine's masked kernel under the TE spec: the causal mask is a full
    # mask since TE v2.0): 16 heads × 2048² scores in bf16, every element read and written: 2 × 134,217,728.
    assert prices["softmax"].forward_ms == pytest.approx(16 * 2048 * 2048 * 2 * 2 / 5e11 * 1e3, rel=1e-12)


def test_a_small_matmul_is_bound_by_its_bytes():
    # The same layer with 16 tokens: mlp_in reads the 1024×4096 weights (8 MB) for 0.27 GFLOP.
    run = parse_run_config(
        {
            **gelu_run().model_dump(mode="json", exclude_none=True),
            "training": {"seq_length": 16, "flash_attention": False},
        }
    )
    price = TimeModel(run).op_prices(body(run))["mlp_in"]
    traffic = (16 * 1024 + 1024 * 4096 + 16 * 4096) * 2
    assert traffic / 5e11 > 2 * 16 * 1024 * 4096 / 5e13
    assert price.forward_ms == pytest.approx(traffic / 5e11 * 1e3, rel=1e-12)


def test_collectives_over_intra_and_inter_node_links():
    run = gelu_run(tp=4, dp=4, ep=16, etp=1, cp=1)
    links = Links.from_run(run, run.device.profile())
    P = 8_000_000
    # tp=4 inside a node: ring all-gather P·3/4 over 5e10 B/s; all-reduce twice that.
    assert collective_seconds(Collective("all_gather", "tp", P, "tp"), links) == pytest.approx(P * 3 / 4 / 5e10)
    assert collective_seconds(Collective("all_reduce", "tp", P, "tp"), links) == pytest.approx(2 * P * 3 / 4 / 5e10)
    # ep=16 spans 16 ranks, two nodes of 8: a rank sends P/16 to each of 7 local and 8 remote peers at
    # the same time; the remote share (8P/16 at 5e9 B/s) is the slower one.
    assert collective_seconds(Collective("all_to_all", "ep", P, "ep"), links) == pytest.approx(P * 8 / 16 / 5e9)


def test_a_ring_leaving_the_node_uses_every_local_rank_s_nic():
    """NCCL sends each channel out of the node through the NIC of the rank it leaves from, so a group
    with k ranks per node crosses through k NICs (nccl-tests issue #119: 24 A100 with 4 HDR NICs a
    node reach 85-96 of 4 × 25 GB/s), never faster than NVLink."""
    links = Links.from_run(gelu_run(), gelu_run().device.profile())  # 5e10 B/s NVLink, 5e9 B/s a NIC, 8 a node
    P = 16_000_000

    def reduce_scatter(size: int, span: int, base: Links = links) -> float:
        groups = {**base.groups, "dp": Group(size, span)}
        grouped = Links(
            base.intra_node_bytes_per_s, base.inter_node_bytes_per_s, 0.0, base.devices_per_node, groups, 0.0
        )
        return collective_seconds(Collective("reduce_scatter", "dp", P, "dp"), grouped)

    # 16 ranks side by side (TP 1): 8 in each node leave through 8 NICs, 4e10 B/s: P·15/16 / 4e10
    assert reduce_scatter(16, 16) == pytest.approx(P * 15 / 16 / 4e10)
    # 16 ranks two apart (TP 2): 4 a node, 2e10 B/s
    assert reduce_scatter(16, 32) == pytest.approx(P * 15 / 16 / 2e10)
    # 16 ranks eight apart (TP 8): one a node, one NIC, 5e9 B/s
    assert reduce_scatter(16, 128) == pytest.approx(P * 15 / 16 / 5e9)
    # inside one node: NVLink
    assert reduce_scatter(8, 8) == pytest.approx(P * 7 / 8 / 5e10)
    # with 20 GB/s NICs (1e10 B/s at 50%) 8 of them would give 8e10: NVLink's 5e10 caps the ring
    fast = gelu_run(device=dict(ROUND_DEVICE, inter_node_bandwidth_gbs=20.0))
    fast_links = Links.from_run(fast, fast.device.profile())
    assert reduce_scatter(16, 16, fast_links) == pytest.approx(P * 15 / 16 / 5e10)


def test_a_nic_runs_at_its_own_efficiency():
    # H100's catalog entry: NVLink 450 GB/s at 0.8 = 3.6e11 B/s; a 400 Gb/s NIC (50 GB/s) at the 46-48
    # GB/s NCCL's maintainers expect (nccl-tests issue #290): 0.94 → 4.7e10 B/s.
    run = gelu_run(device={"name": "h100-80gb"})
    links = Links.from_run(run, run.device.profile())
    assert links.intra_node_bytes_per_s == pytest.approx(3.6e11)
    assert links.inter_node_bytes_per_s == pytest.approx(4.7e10)
    # Without its own figure a NIC follows comm_efficiency (the round device: 10 GB/s at 0.5); a run
    # config may set it: 10 GB/s at 0.8.
    assert Links.from_run(gelu_run(), gelu_run().device.profile()).inter_node_bytes_per_s == pytest.approx(5e9)
    tuned = gelu_run(device=dict(ROUND_DEVICE, nic_efficiency=0.8))
    assert Links.from_run(tuned, tuned.device.profile()).inter_node_bytes_per_s == pytest.approx(8e9)


def test_an_fp8_kernel_pays_its_fixed_time_per_tile():
    # FP8 peak 2 × 100 TFLOPS at 0.5 = 1e14 FLOP/s over 64 SMs: 1.5625e12 a SM. 2048×4096×1024 in
    # 256×128 tiles: 8·32 = 256 tiles, 4 waves of 2·256·128·1024 / 1.5625e12 = 41.94 us, plus 10 us a
    # tile: 4 × 51.94 = 207.8 us (128×128 tiles: 8 waves of 20.97 + 10 us, 247.8 us, slower).
    device = gelu_run(device=dict(ROUND_DEVICE, fp8_matmul_efficiency=0.5, fp8_tile_overhead_us=10.0)).device
    fp8 = Kernels.from_device(device.profile(), "bf16", matmul_dtype="fp8")
    tile = 2 * 256 * 128 * 1024 / 1.5625e12
    assert fp8.gemm_compute_s(2048, 4096, 1024) == pytest.approx(4 * (tile + 10e-6))
    # BF16 GEMMs on the same device pay none.
    bf16 = Kernels.from_device(device.profile(), "bf16")
    assert bf16.gemm_compute_s(2048, 4096, 1024) == pytest.approx(2 * 2048 * 4096 * 1024 / 5e13)


def test_fp8_training_leaves_the_output_layer_in_16_bits():
    # Megatron-Core's output layer is its own ColumnParallelLinear, outside TransformerEngine's FP8
    # (gpt_model.py); the layers' GEMMs run in FP8. The round device: BF16 0.5 × 100 TFLOPS = 5e13,
    # FP8 0.5 × 200 = 1e14, HBM 5e11 B/s. The output layer's 2048×1024 by 1024×4096 forward:
    # 2·2048·1024·4096 = 17,179,869,184 FLOPs / 5e13 = 0.343597 ms, no cast; backward twice that.
    # mlp_in, the same shape in FP8: 17,179,869,184 / 1e14 = 0.171799 ms. Under delayed scaling (the default
    # recipe) its TE LayerNormLinear's norm writes the FP8 input itself (normalization.cpp FULLY_FUSED), and on
    # the round device (compute capability 9.0, the catalog's default) `nvte_transpose` makes its column-wise
    # copy: 2048·1024 values read and written in one byte, 4,194,304 B / 5e11 = 0.008389 ms.
    raw = gelu_run(device=dict(ROUND_DEVICE, fp8_matmul_efficiency=0.5)).model_dump(mode="json", exclude_none=True)
    run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8"}})
    model = TimeModel(run)
    layers = walk(run)
    logits = model.op_prices(next(layer for layer in layers if layer.node == "TAIL"))["output.logits"]
    assert logits.forward_ms == pytest.approx(17_179_869_184 / 5e13 * 1e3, rel=1e-12)
    assert logits.backward_ms == pytest.approx(2 * 17_179_869_184 / 5e13 * 1e3, rel=1e-12)
    mlp_in = model.op_prices(body(run))["mlp_in"]
    assert mlp_in.forward_ms == pytest.approx((17_179_869_184 / 1e14 + 4_194_304 / 5e11) * 1e3, rel=1e-12)


def test_fp8_quantization_moves_the_bytes_of_its_recipe():
    # TransformerEngine v2.9: tensorwise (current) scaling reads a tensor for its amax, then casts it
    # (read 2, write 1), and on Hopper writes the transpose the weight-gradient GEMM reads (1); after a
    # TE norm the amax comes with the norm. Round device: FP8 1e14 FLOP/s, HBM 5e11 B/s. mlp_out's input
    # (2048 × 4096, after the activation) forward: 2·2048·4096·1024 / 1e14 = 0.171799 ms, plus
    # (2 + 2 + 1 + 1) · 8,388,608 B / 5e11 = 0.100663 ms; mlp_in (2048 × 1024 after norm2): 0.171799 +
    # (2 + 1 + 1) · 2,097,152 / 5e11 = 0.016777 ms. On Blackwell no transpose (5 bytes: 0.083886 ms);
    # MXFP8 one pass writing a row-wise and a column-wise copy (4 bytes: 0.067109 ms), blockwise the same
    # (quantizer.cpp `Float8BlockQuantizer::create_tensor`: column-wise data wherever the usage asks, any
    # GPU). Delayed scaling (`Float8Quantizer`): one cast-transpose, the transpose on Hopper as current
    # scaling's (`Float8Quantizer::create_tensor` with_transpose below Blackwell): 2 + 1 + 1 = 4 bytes, on
    # Blackwell 3; mlp_in's input written in FP8 by its LayerNormLinear's norm (normalization.cpp
    # FULLY_FUSED), then on Hopper `nvte_transpose` (rmsnorm_api.cpp `rmsnorm_fwd`): 1 + 1 = 2 bytes, on
    # Blackwell none.
    # MXFP8's GEMM itself on Blackwell at 6.812 / 7.161 = 0.951 of the per-tensor FP8 rate (TE's GEMM
    # profiling guide, B300, pre-quantized: 7.161 against 6.812 ms a layer): 0.171799 / 0.951 = 0.180651 ms.
    def forward_ms(recipe: str, op: str, name: str | None = None) -> float:
        # (B200's layer share set to 1 and its quantize kernels' measured HBM shares to 0, the element-wise
        # rate: this test checks the casts' bytes beside a GEMM at the round ceiling; their rate:
        # tests/test_timing_quantize_rate.py)
        device = dict(
            ROUND_DEVICE,
            fp8_matmul_efficiency=0.5,
            fp8_layer_gemm_share=1.0,
            mxfp8_quantize_efficiency=0.0,
            fp8_quantize_efficiency=0.0,
            **({"name": name} if name else {}),
        )
        raw = gelu_run(device=device).model_dump(mode="json", exclude_none=True)
        run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe}})
        return TimeModel(run).op_prices(body(run))[op].forward_ms

    gemm = 2 * 2048 * 4096 * 1024 / 1e14
    act, normed = 2048 * 4096, 2048 * 1024
    assert forward_ms("tensorwise", "mlp_out") == pytest.approx((gemm + 6 * act / 5e11) * 1e3, rel=1e-12)
    assert forward_ms("tensorwise", "mlp_in") == pytest.approx((gemm + 4 * normed / 5e11) * 1e3, rel=1e-12)
    assert forward_ms("tensorwise", "mlp_out", "b200") == pytest.approx((gemm + 5 * act / 5e11) * 1e3, rel=1e-12)
    assert forward_ms("mxfp8", "mlp_out", "b200") == pytest.approx((gemm / 0.951 + 4 * act / 5e11) * 1e3, rel=1e-12)
    assert forward_ms("delayed", "mlp_out") == pytest.approx((gemm + 4 * act / 5e11) * 1e3, rel=1e-12)
    assert forward_ms("delayed", "mlp_out", "b200") == pytest.approx((gemm + 3 * act / 5e11) * 1e3, rel=1e-12)
    assert forward_ms("delayed", "mlp_in") == pytest.approx((gemm + 2 * normed / 5e11) * 1e3, rel=1e-12)
    assert forward_ms("delayed", "mlp_in", "b200") == pytest.approx(gemm * 1e3, rel=1e-12)
    assert forward_ms("blockwise", "mlp_out") == pytest.approx((gemm + 4 * act / 5e11) * 1e3, rel=1e-12)


def test_mxfp8_gemms_run_at_the_measured_share_of_per_tensor_fp8_on_blackwell():
    # TE's GEMM profiling guide (gemm_profiling.rst at 1609c890e), B300, pre-quantized operands, the 12
    # GEMMs of a hidden-4096 layer: 6.812 ms a layer with current scaling, 7.161 with MXFP8: 0.951.
    assert MXFP8_MATMUL_RATIO_BLACKWELL == 0.951 == round(6.812 / 7.161, 3)
    # FP8 MAMF over the FP8 peak, and the layer share from aiconfigurator's FP8 layer ratio to the B300 (the catalog's)
    for name, mamf, share in (("b200", 0.763, 0.802), ("gb200", 0.723, 0.815)):
        raw = gelu_run(device={"name": name}).model_dump(mode="json", exclude_none=True)
        ceilings = {}
        for recipe in ("tensorwise", "mxfp8"):
            run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe}})
            ceilings[recipe] = TimeModel(run).kernels.gemm_ceiling
        # a step's FP8 GEMMs at the part's layer share (`FP8_LAYER_GEMM_SHARE_B200` / `_GB200`)
        assert ceilings == pytest.approx({"tensorwise": mamf * share, "mxfp8": mamf * share * 0.951}, rel=1e-12)
    # Hopper has no MXFP8 tensor cores and no measurement: its ratio stays 1.
    assert DEVICE_CATALOG["h100-80gb"].mxfp8_matmul_ratio == 1.0


def test_blockwise_fp8_gemms_run_at_the_measured_share_of_per_tensor_fp8_on_hopper():
    # TE's GEMM profiling guide (gemm_profiling.rst at 1609c890e), H200 NVL, autocast, the 12 GEMMs of a
    # hidden-4096 layer at 15,872 tokens: 18.978 ms a layer with delayed scaling, 22.882 with block scaling. Both
    # quantize the same bytes by ppb's cast rule: 1,495,269,376 input elements at 4 bytes and 987,758,592 weight
    # elements at 3 = 8.944e9 bytes at 0.8 x 4.8 TB/s = 2.329 ms; (18.978 - 2.329) / (22.882 - 2.329) = 0.810.
    casts_ms = (1495269376 * 4 + 987758592 * 3) / (0.8 * 4.8e12) * 1e3
    assert casts_ms == pytest.approx(2.329, abs=5e-4)
    assert BLOCKWISE_MATMUL_RATIO_HOPPER == 0.81 == round((18.978 - 2.329) / (22.882 - 2.329), 3)
    for name, ratio in (("h100-80gb", 0.81), ("h200", 0.81), ("h800", 1.0), ("b200", 1.0)):
        raw = gelu_run(device={"name": name}).model_dump(mode="json", exclude_none=True)
        ceilings = {}
        for recipe in ("tensorwise", "blockwise"):
            run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe}})
            ceilings[recipe] = TimeModel(run).kernels.gemm_ceiling
        assert ceilings["blockwise"] == pytest.approx(ceilings["tensorwise"] * ratio, rel=1e-12)


def test_a_causal_pass_runs_at_the_kernel_s_measured_causal_rate():
    # FlashAttention-2 (the default kernel), forward level 0.6 at head size 128, 16k, no mask; its measured
    # H100 curves (FlashAttention-3's paper, Fig. 5c/5d): no mask 350 at 1k, 370 at 16k; causal 298 at 2k,
    # 319 at 4k. 33 (sequence, head) pairs of 2048 queries: 528 query blocks, 4 full waves over 132 SMs.
    kernels = Kernels(1e15, 0.8, 132, 3e12, 0.6, 0.5)
    # Without the mask each query walks 1024 keys: 0.6·350/370. Under it the triangle's side is 2048
    # (mean keys (2048 + 1)/2): 0.6·298/370.
    plain = kernels.attention_efficiency(False, 33, 2048, 1024, 128)
    causal = kernels.attention_efficiency(False, 33, 2048, 1024.5, 128, causal=1.0)
    assert plain == pytest.approx(0.6 * 350 / 370)
    assert causal == pytest.approx(0.6 * 298 / 370)
    assert kernels.attention_s(1e12, 0.0, False, 33, 2048, 1024.5, 128, 1.0) == pytest.approx(1e12 / (1e15 * causal))
    # Between measured lengths, linear in log2: a 3072-token triangle sits log2(1.5) = 0.58496 of the way
    # from 2k (298) to 4k (319): 298 + 21·0.58496 = 310.284.
    between = kernels.attention_efficiency(False, 33, 2048, 1536.5, 128, causal=1.0)
    assert between == pytest.approx(0.6 * 310.284 / 370, rel=1e-5)
    # Past 16k the paper's 16k rate follows PyTorch SDPA's measured trend (cudnn-frontend's benchmark at
    # de355c7: 356.15 at 32k, 360.62 at 64k over 360.50 at 16k); past 64k it holds. Below 512 the block
    # ramp w/(w + 1) carries 512's down: 256 keys, 309·(2/3)/(4/5) = 257.5.
    assert kernels.attention_efficiency(False, 33, 2048, 32768, 128) == pytest.approx(0.6 * 356.15 / 360.50)
    assert kernels.attention_efficiency(False, 33, 2048, 262144, 128) == pytest.approx(0.6 * 360.62 / 360.50)
    assert kernels.attention_efficiency(False, 33, 2048, 256, 128) == pytest.approx(0.6 * 257.5 / 370)
    # FlashAttention-2's causal backward (no panel in the paper): the paper's no-mask backward times PyTorch
    # SDPA's measured causal ratio, at 8k 318·275.40/305.47 = 286.70 of 322; at 32k the 16k rate times
    # SDPA's no-mask trend and its causal ratio, 322·(320.44/317.34)·(316.92/320.44) = 322·316.92/317.34.
    assert kernels.attention_efficiency(True, 33, 2048, 4096.5, 128, causal=1.0) == pytest.approx(
        0.5 * 318 * 275.40 / 305.47 / 322
    )
    assert kernels.attention_efficiency(True, 33, 2048, 16384.5, 128, causal=1.0) == pytest.approx(
        0.5 * 316.92 / 317.34
    )
    # below 4k its 4k ratio holds: a 2k triangle at 291·245.18/290.47
    assert kernels.attention_efficiency(True, 33, 2048, 1024.5, 128, causal=1.0) == pytest.approx(
        0.5 * 291 * 245.18 / 290.47 / 322
    )


def test_each_device_runs_its_own_kernel_s_curves():
    # cuDNN on Hopper (TransformerEngine's FusedAttention): the paper's no-mask backward times cuDNN 9.19's
    # measured causal ratio: at 16k 516·579/612 = 488.2; at 1k, below the ratio's 2k-32k, 408·370/504 =
    # 299.5; at 32k the 16k no-mask rate times 581/572: 524.1 (over the level's 516: 1.0157).
    h100 = Kernels.from_device(DEVICE_CATALOG["h100-80gb"])
    assert h100.attention_kernel == "cudnn_sm90"
    level = DEVICE_CATALOG["h100-80gb"].attention_backward_efficiency  # 132 sequences of one block: one wave
    assert h100.attention_efficiency(True, 132, 128, 8192.5, 128, 1.0) == pytest.approx(level * 488.2 / 516, rel=1e-4)
    assert h100.attention_efficiency(True, 132, 128, 512.5, 128, 1.0) == pytest.approx(level * 299.5 / 516, rel=1e-3)
    assert h100.attention_efficiency(True, 132, 128, 16384.5, 128, 1.0) == pytest.approx(level * 581 / 572, rel=1e-4)
    # Blackwell: NVIDIA's GB200 table itself; causal forward at 4k 1408 over the 16k no-mask 1697 (148
    # sequences of one block: B200's 148 SMs once).
    b200 = Kernels.from_device(DEVICE_CATALOG["b200"])
    assert b200.attention_kernel == "cudnn_sm100"
    forward = DEVICE_CATALOG["b200"].attention_forward_efficiency
    assert b200.attention_efficiency(False, 148, 128, 2048.5, 128, 1.0) == pytest.approx(forward * 1408 / 1697)
    # A100 runs flash-attn 2 under TransformerEngine, torchtitan's SDPA FlashAttention-2 everywhere.
    assert Kernels.from_device(DEVICE_CATALOG["a100-80gb"]).attention_kernel == "flash2"
    titan = Kernels.from_device(DEVICE_CATALOG["h100-80gb"], "bf16", "torchtitan", sdpa_backend="flash")
    assert titan.attention_kernel == "flash2"


def test_a_measured_head_64_rate_sets_smaller_heads():
    # The generic law: d/(d+16) over 128/144. Head 64: 0.8/0.8889 = 0.9; head 256: 256/272 over
    # 0.8889 = 1.0588, held at 1; head 32: (32/48)/0.8889 = 0.75.
    law = Kernels.head_size_factor
    assert law(64) == pytest.approx(0.9)
    assert law(256) == 1.0
    assert law(32) == pytest.approx(0.75)
    # A kernel measured at 0.694 of its head-128 rate at 64: 0.694 there, 1 at 128, halfway at 96
    # (0.694 + 0.306/2 = 0.847); at 32, 0.694 times the law's 32 over 64: (32/48)/(64/80) = 0.8333,
    # 0.5783; at and above 128 the law, as without a measurement.
    assert law(64, 0.694) == pytest.approx(0.694)
    assert law(96, 0.694) == pytest.approx(0.847)
    assert law(32, 0.694) == pytest.approx(0.694 * 0.8333333)
    assert law(128, 0.694) == law(256, 0.694) == 1.0
    # The pass picks its own ratio: 33 pairs of 2048 queries at 1024 keys (4 full waves), FlashAttention-2's
    # head-64 curves (the paper's Fig. 5a and 6a) over their 16k points: forward 306/324, backward 238/291;
    # at head size 96, halfway between those and head 128's (350/370 forward).
    kernels = Kernels(1e15, 0.8, 132, 3e12, 0.6, 0.5, attention_head64_forward=0.7, attention_head64_backward=0.85)
    assert kernels.attention_efficiency(False, 33, 2048, 1024, 64) == pytest.approx(0.6 * 0.7 * 306 / 324)
    assert kernels.attention_efficiency(True, 33, 2048, 1024, 64) == pytest.approx(0.5 * 0.85 * 238 / 291)
    halfway = (306 / 324 + 350 / 370) / 2
    assert kernels.attention_efficiency(False, 33, 2048, 1024, 96) == pytest.approx(0.6 * (0.7 + 0.15) * halfway)


def test_latency_adds_one_step_per_hop():
    device = dict(ROUND_DEVICE, collective_latency_us=10.0)
    run = gelu_run(tp=4, device=device)
    links = Links.from_run(run, run.device.profile())
    ring = collective_seconds(Collective("all_gather", "tp", 4e6, "tp"), links)
    assert ring == pytest.approx(4e6 * 3 / 4 / 5e10 + 3 * 10e-6)
    # An all-to-all over 16 ranks on two nodes: 15 steps, each 10 us plus 20 us across the nodes.
    device = dict(ROUND_DEVICE, collective_latency_us=10.0, inter_node_latency_us=20.0)
    run = gelu_run(tp=1, dp=16, ep=16, etp=1, device=device)
    links = Links.from_run(run, run.device.profile())
    spread = collective_seconds(Collective("all_to_all", "ep", 8e6, "ep"), links)
    assert spread == pytest.approx(8e6 * 8 / 16 / 5e9 + 15 * 30e-6)


def test_overlap_hides_a_collective_behind_its_partner_up_to_the_share():
    # Without SP, the input gradient of the QKV projections is all-reduced behind their weight
    # gradient: exposed = c − min(share·c, wgrad).
    run = gelu_run(tp=4, dp=2, overlap={"tp_async": 0.5})
    model = TimeModel(run)
    layer = body(run)
    prices = model.op_prices(layer)
    c = 2 * 2048 * 1024 * 2 * 3 / 4 / 5e10 * 1e3  # all-reduce of n·h bf16 over 4 ranks
    # qk_proj's weight gradient: Q and K (4 + 4 heads of 64 per rank, 512 columns) are 512/768 of the
    # fused QKV GEMM, whose weight gradient (1024×768, k = 2048 tokens) is 48 tiles of 128×128: one
    # wave of the 64 SMs, each tile 2·128·128·2048 FLOPs at 5e13/64 FLOP/s.
    wgrad = 512 / 768 * 2 * 128 * 128 * 2048 * 64 / 5e13 * 1e3
    assert prices["reduce_attention_grad"].backward_ms == pytest.approx(c - min(0.5 * c, wgrad), rel=1e-12)
    assert prices["reduce_attention_grad"].forward_ms == 0.0
    # The forward all-reduce after the output projection sits on the critical path (tp overlap 0).
    assert prices["reduce_attention"].forward_ms == pytest.approx(c, rel=1e-12)
    # The share hides it behind its partner GEMM. Megatron refuses --tp-comm-overlap without sequence
    # parallelism (arguments.py validate_args), so the share is read under MindFormers, whose op prices match.
    plain = TimeModel(gelu_run(tp=4, dp=2, framework="mindformers")).op_prices(layer)
    assert plain["reduce_attention"].forward_ms == pytest.approx(c, rel=1e-12)
    hidden = TimeModel(gelu_run(tp=4, dp=2, overlap={"tp": 1.0}, framework="mindformers")).op_prices(layer)
    assert hidden["reduce_attention"].forward_ms == pytest.approx(max(0.0, c - plain["out_proj"].forward_ms))


def test_a_resent_gather_hides_behind_the_input_gradient_and_never_costs_more_than_in_the_forward():
    # MindFormers re-sends the gathers only when `gather` is 0; Megatron in every backward (below).
    sp = TimeModel(gelu_run(tp=4, dp=2, sp=True, framework="mindformers"))
    prices = sp.op_prices(body(sp.run))
    c = 2048 * 1024 * 2 * 3 / 4 / 5e10 * 1e3
    assert prices["gather_attention"].forward_ms == pytest.approx(c, rel=1e-12)
    # qk_proj's input gradient: 512/768 of the fused QKV's (2048×1024, k = 768): 128 tiles of 128×128,
    # two whole waves of the 64 SMs, so its FLOPs at 5e13 FLOP/s.
    dgrad = 512 / 768 * 2 * 2048 * 1024 * 768 / 5e13 * 1e3
    assert prices["gather_attention"].recompute_ms == pytest.approx(max(0.0, c - dgrad), rel=1e-12)
    exposed = TimeModel(gelu_run(tp=4, dp=2, sp=True, overlap={"tp_async": 0.0}, framework="mindformers"))
    assert exposed.op_prices(body(exposed.run))["gather_attention"].recompute_ms == pytest.approx(c, rel=1e-12)
    megatron = TimeModel(gelu_run(tp=4, dp=2, sp=True))
    again = megatron.op_prices(body(megatron.run))["regather_attention"]
    assert (again.forward_ms, again.backward_ms) == pytest.approx((0.0, max(0.0, c - dgrad)), rel=1e-12)


def test_states_add_what_they_rerun_to_the_backward():
    run = gelu_run(tp=2, sp=True, dropout=0.1)
    model, layer = TimeModel(run), body(run)
    prices = model.op_prices(layer)
    forward, backward = model.layer_times(layer, LayerType.NOT_REC_LAYER)
    assert forward == pytest.approx(sum(p.forward_ms for p in prices.values()), rel=1e-12)
    assert backward == pytest.approx(sum(p.backward_ms for p in prices.values()), rel=1e-12)
    assert model.layer_times(layer, LayerType.FULL_REC_LAYER) == pytest.approx((forward, backward + forward))
    # softmax at 0: the scores are rebuilt, then TE's mask (`flops.te_attention_mask`), then the softmax
    rerun = ("attention_mask", "scores", "softmax")
    selective = model.layer_times(layer, LayerType.SEL_REC_LAYER, {"softmax": 0})
    assert selective == pytest.approx((forward, backward + sum(prices[n].recompute_ms for n in rerun)))


@pytest.mark.parametrize("config", CONFIGS)
def test_option_times_on_the_shipped_configs(config):
    run = load_run_config(f"configs/{config}.yaml")
    model = TimeModel(run)
    for slot in walk(run).distinct():
        layer = next(layer for layer in walk(run) if layer.kind == slot.kind and layer.model_name == slot.model_name)
        times = model.option_times(layer)
        assert tuple(times) == OPTIONS
        forward, backward = times["NONE"]
        assert forward > 0 and backward > 0
        if slot.node != "BODY":
            assert set(times.values()) == {(forward, backward)}
            continue
        for option in OPTIONS:
            assert times[option][0] == forward
            assert backward <= times[option][1] <= times["FULL"][1]
            state, switches = option_state(option, run.switches(layer.model_name))
            assert times[option] == model.layer_times(layer, state, switches)
        assert times["FULL"][1] == pytest.approx(backward + forward, rel=1e-12)


def test_switches_none_on_a_selective_layer_are_the_configured_ones():
    run = load_run_config("configs/llama3-8b.yaml")
    model, layer = TimeModel(run), body(load_run_config("configs/llama3-8b.yaml"))
    assert model.layer_times(layer, LayerType.SEL_REC_LAYER) == model.layer_times(
        layer, LayerType.SEL_REC_LAYER, run.switches("llm")
    )
    # On other states the switches change nothing.
    assert model.layer_times(layer, LayerType.NOT_REC_LAYER, {"ffAct": 0}) == model.layer_times(
        layer, LayerType.NOT_REC_LAYER
    )


def test_a_layer_is_priced_only_in_the_states_of_its_node():
    run = load_run_config("configs/llama3-8b.yaml")
    model = TimeModel(run)
    head = next(layer for layer in walk(run) if layer.node == "HEAD")
    with pytest.raises(ValueError, match="HEAD"):
        model.layer_times(head, LayerType.NOT_REC_LAYER)
    with pytest.raises(ValueError, match="BODY"):
        model.layer_times(body(run), LayerType.OUTPUT_LAYER)


def test_identical_layers_are_priced_once():
    run = load_run_config("configs/deepseek-v3.yaml")
    model = TimeModel(run)
    layers = list(walk(run))
    for layer in layers:
        model.option_times(layer)
    # 2 body kinds × 5 distinct settings (NONE, SLCT, COMM, BOTH, FULL), plus the head and the tail.
    assert len(model._parts) == 2 * 5 + 2
    assert len(model._prices) == 4
    first, last = (layer for layer in layers if layer.kind.name == "moe_mla" and layer.index in (3, 60))
    assert model.layer_times(first, LayerType.SEL_REC_LAYER) is model.layer_times(last, LayerType.SEL_REC_LAYER)


@pytest.mark.parametrize("config", ["llama3-8b", "deepseek-v3"])
def test_recompute_time_is_additive_over_switches(config):
    # Every setting's recompute time is the sum of its switches' alone (what profiles assume).
    run = load_run_config(f"configs/{config}.yaml")
    model = TimeModel(run)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")

    def extra(setting):
        return model.parts(layer, LayerType.SEL_REC_LAYER, setting).recompute_ms

    alone = {s: extra({s: 0}) for s in SWITCHES}
    for bits in itertools.product((0, 1), repeat=len(SWITCHES)):
        setting = dict(zip(SWITCHES, bits, strict=True))
        assert extra(setting) == pytest.approx(sum(alone[s] for s, b in setting.items() if not b), abs=1e-12)


def test_breakdown_rows_add_up_to_the_layer_times():
    run = load_run_config("configs/mixtral-8x7b.yaml")
    model, layer = TimeModel(run), body(run)
    rows = model.breakdown(layer, LayerType.SEL_REC_LAYER)
    forward, backward = model.layer_times(layer, LayerType.SEL_REC_LAYER)
    # the rows are the GPU's work; the layer's times add its waits for Megatron's host (`TimeModel.host`)
    host = model.host(layer, LayerType.SEL_REC_LAYER)
    assert sum(r.ms for r in rows if r.phase == "forward") + host.forward * 1e3 == pytest.approx(forward, rel=1e-12)
    assert sum(r.ms for r in rows if r.phase != "forward") + host.backward * 1e3 == pytest.approx(backward, rel=1e-12)
    recomputed = {r.name for r in rows if r.phase == "recompute"}
    # The config recomputes headCast (no such tensor with flash) and ffAct (the experts' activation).
    assert recomputed == {"experts_act"}


def test_device_overrides_reach_the_prices():
    base = gelu_run()
    slow = gelu_run(device=dict(ROUND_DEVICE, matmul_efficiency=0.25))
    fast = TimeModel(base).op_prices(body(base))["mlp_in"].forward_ms
    assert TimeModel(slow).op_prices(body(slow))["mlp_in"].forward_ms == pytest.approx(2 * fast, rel=1e-12)
    fp32 = parse_run_config(
        {
            **base.model_dump(mode="json", exclude_none=True),
            "training": {"seq_length": 2048, "flash_attention": False, "dtype": "fp32"},
        }
    )
    # TF32 at half the 16-bit rate, and twice the bytes (still compute-bound).
    assert TimeModel(fp32).op_prices(body(fp32))["mlp_in"].forward_ms == pytest.approx(2 * fast, rel=1e-12)


def test_overlap_settings_are_validated():
    with pytest.raises(InputError, match=r"timing\.overlap\.tp"):
        gelu_run(overlap={"tp": 1.5})
    with pytest.raises(InputError, match="unknown field"):
        gelu_run(overlap={"pp": 0.5})


def test_a_hidden_collective_costs_the_sms_it_takes():
    # 16 of the 64 SMs run the collective while it hides behind its partner: the partner loses a quarter
    # of the hidden time. The input-gradient all-reduce of the test above (c = 125.8 us, half of it, 62.9 us,
    # beside the 57.3 us weight gradient): the GEMM, slowed by a quarter of the 57.3 us it overlaps, ends at
    # 71.6 us, after the 62.9 us beside it; so the pair's wall is 71.6 us, 14.3 more than the GEMM, and the
    # other half of c runs alone: exposed = c/2 + max(c/2 − wgrad, wgrad/4) = 62.9 + 14.3 = 77.2 us (not
    # c − wgrad + wgrad/4 = 82.9 us, which counted the 5.6 us of the collective past the GEMM's unslowed end
    # and the slowdown that covers them both).
    run = gelu_run(tp=4, dp=2, overlap={"tp_async": 0.5}, device=dict(ROUND_DEVICE, comm_sms=16))
    prices = TimeModel(run).op_prices(body(run))
    c = 2 * 2048 * 1024 * 2 * 3 / 4 / 5e10 * 1e3
    wgrad = 512 / 768 * 2 * 128 * 128 * 2048 * 64 / 5e13 * 1e3
    assert (c, wgrad) == (pytest.approx(0.12583, abs=1e-5), pytest.approx(0.05727, abs=1e-5))
    expected = c / 2 + max(c / 2 - wgrad, wgrad / 4)
    assert prices["reduce_attention_grad"].backward_ms == pytest.approx(expected, rel=1e-12)
    # a collective wholly within its partner: the partner loses a quarter of it, c − hidden + hidden/4
    within = gelu_run(tp=4, dp=2, overlap={"tp_async": 0.25}, device=dict(ROUND_DEVICE, comm_sms=16))
    hidden = 0.25 * c
    assert hidden < wgrad
    assert TimeModel(within).op_prices(body(within))["reduce_attention_grad"].backward_ms == pytest.approx(
        c - hidden + hidden / 4, rel=1e-12
    )


def _titan_llama(compiled: bool):
    spec = {
        "vocab_size": 4096,
        "hidden_size": 1024,
        "num_layers": 2,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 2048,
        "max_position_embeddings": 2048,
    }
    raw = {
        "name": "t",
        "framework": "torchtitan",
        "models": [{"name": "llm", "spec": spec}],
        "training": {"seq_length": 2048, "flash_attention": True},
        "device": ROUND_DEVICE,
        # torchtitan 9dec370's kernels: eager RMSNorm, repeat_kv before FlashAttention-2
        "timing": {"torch_compile": compiled, "norm_type": "rmsnorm", "repeat_kv": True, "sdpa_backend": "flash"},
    }
    return parse_run_config(raw)


def test_torchtitan_s_eager_kernels_move_the_bytes_its_model_code_moves():
    # HBM at 1000 GB/s · 0.5 = 5e11 B/s; 2048 tokens, h 1024, 16 heads of 64 (4 for K and V), SwiGLU 2048.
    eager = TimeModel(_titan_llama(False)).op_prices(body(_titan_llama(False)))
    fused = TimeModel(_titan_llama(True)).op_prices(body(_titan_llama(True)))
    x = 2048 * 1024
    # RMSNorm (torchtitan 9dec370 norms.py, with its fp32 upcast): 36 bytes an element forward (float
    # 2+4, pow 4+4, mean 4, mul 4+4, type_as 4+2, weight 2+2), 92 backward; fused 4 and 6.
    assert eager["norm1"].forward_ms == pytest.approx(36 * x / 5e11 * 1e3)
    assert eager["norm1"].backward_ms == pytest.approx(92 * x / 5e11 * 1e3)
    assert fused["norm1"].forward_ms == pytest.approx(4 * x / 5e11 * 1e3)
    assert fused["norm1"].backward_ms == pytest.approx(6 * x / 5e11 * 1e3)
    # silu(w1 x) * w3 x over 2048 × 2048: 10 bytes an output element forward, 18 backward (fused 6, 10).
    act = 2048 * 2048
    assert eager["mlp_act"].forward_ms == pytest.approx(10 * act / 5e11 * 1e3)
    assert eager["mlp_act"].backward_ms == pytest.approx(18 * act / 5e11 * 1e3)
    assert fused["mlp_act"].backward_ms == pytest.approx(10 * act / 5e11 * 1e3)
    # Rotary on Q and K, (16 + 4) · 64 = 1280 values a token: 20 bytes each way (fused 4).
    assert eager["rope"].forward_ms == pytest.approx(20 * 2048 * 1280 / 5e11 * 1e3)
    assert eager["rope"].backward_ms == pytest.approx(20 * 2048 * 1280 / 5e11 * 1e3)
    # The residual add (no bias, no dropout): its backward is autograd's sum of two gradients, 6 bytes.
    assert eager["residual_attention"].backward_ms == pytest.approx(6 * x / 5e11 * 1e3)
    # repeat_kv: K and V read at 4 heads and written at 16, 2 · 2048 · (4 + 16) · 64 · 2 bytes, each way,
    # compiled or not (SDPA needs the copies either way).
    copied = 2 * 2048 * 20 * 64 * 2
    for prices in (eager, fused):
        assert prices["repeat_kv"].forward_ms == pytest.approx(copied / 5e11 * 1e3)
        assert prices["repeat_kv"].backward_ms == pytest.approx(copied / 5e11 * 1e3)


def test_a_layernorm_and_a_gelu_are_one_kernel_in_eager_pytorch_too():
    run = gelu_run(framework="torchtitan")
    prices = TimeModel(run).op_prices(body(run))
    # LayerNorm over 2048 × 1024 bf16: 4 bytes an element forward, 6 backward; GeLU over 2048 × 4096:
    # 4 and 6 (MHA: no repeat_kv).
    assert prices["norm1"].forward_ms == pytest.approx(4 * 2048 * 1024 / 5e11 * 1e3)
    assert prices["norm1"].backward_ms == pytest.approx(6 * 2048 * 1024 / 5e11 * 1e3)
    assert prices["mlp_act"].forward_ms == pytest.approx(4 * 2048 * 4096 / 5e11 * 1e3)
    assert prices["mlp_act"].backward_ms == pytest.approx(6 * 2048 * 4096 / 5e11 * 1e3)
    assert "repeat_kv" not in prices


def test_without_gradient_accumulation_fusion_megatron_adds_each_weight_gradient_in_its_own_kernel():
    raw = gelu_run().model_dump(mode="json", exclude_none=True)
    fused = TimeModel(gelu_run()).op_prices(body(gelu_run()))
    run = parse_run_config({**raw, "timing": {"gradient_accumulation_fusion": False}})
    unfused = TimeModel(run).op_prices(body(run))
    # mlp_in (1024 × 4096 weights): its weight gradient GEMM still compute-bound (2·2048·1024·4096 /
    # 5e13 = 0.3436 ms), then `main_grad.add_(grad)` reads the fp32 main gradient and the bf16
    # gradient and writes the fp32 one: (4 + 2 + 4) · 4,194,304 = 41,943,040 bytes / 5e11 = 0.0839 ms.
    added_ms = 10 * 1024 * 4096 / 5e11 * 1e3
    assert unfused["mlp_in"].backward_ms == pytest.approx(2 * 17_179_869_184 / 5e13 * 1e3 + added_ms, rel=1e-12)
    assert unfused["mlp_in"].forward_ms == fused["mlp_in"].forward_ms
    # attention's batched products multiply two activations: no weight, nothing added
    for name in ("scores", "context", "softmax"):
        assert unfused[name] == fused[name]


def test_deepspeed_s_bf16_optimizer_casts_each_weight_gradient_to_fp32_before_adding_it():
    raw = gelu_run().model_dump(mode="json", exclude_none=True)
    hook = parse_run_config({**raw, "timing": {"gradient_accumulation_fusion": False}})
    timing = {"gradient_accumulation_fusion": False, "deepspeed_bf16_optimizer": True}
    deepspeed = parse_run_config({**raw, "timing": timing})
    hooked, cast = TimeModel(hook).op_prices(body(hook)), TimeModel(deepspeed).op_prices(body(deepspeed))
    # mlp_in (1024 × 4096 weights): the weight-gradient GEMM as without fusion (compute-bound, 2·2048·1024·4096
    # / 5e13), then DeepSpeed 93e9307d's `hp_grad.add_(lp.grad.to(fp32))`: the cast reads the bf16 gradient
    # (2) and writes an fp32 copy (4), the add reads it (4) and the fp32 gradient (4) and writes that (4):
    # 18 bytes a weight, against Megatron's hook's 2 + 4 + 4 = 10.
    added_ms = 18 * 1024 * 4096 / 5e11 * 1e3
    assert cast["mlp_in"].backward_ms == pytest.approx(2 * 17_179_869_184 / 5e13 * 1e3 + added_ms, rel=1e-12)
    assert cast["mlp_in"].backward_ms - hooked["mlp_in"].backward_ms == pytest.approx(
        8 * 1024 * 4096 / 5e11 * 1e3, rel=1e-9
    )
    assert cast["mlp_in"].forward_ms == hooked["mlp_in"].forward_ms
    for name in ("scores", "context", "softmax"):
        assert cast[name] == hooked[name]
    # the embedding's dense table gradient (4096 × 1024 rows of the table and 2048 × 1024 of the learned
    # positions) takes the same two more fp32 passes: 2 · 4 bytes an element more
    head = next(layer for layer in walk(hook) if layer.node == "HEAD")
    table = (4096 + 2048) * 1024
    lookups = [TimeModel(one).op_prices(head)["embedding.lookup"].backward_ms for one in (deepspeed, hook)]
    assert lookups[0] - lookups[1] == pytest.approx(8 * table / 5e11 * 1e3, rel=1e-9)


def test_alibi_s_baddbmm_copies_the_bias_into_the_scores_and_reads_it_back():
    def run(position):
        raw = gelu_run().model_dump(mode="json", exclude_none=True)
        spec = {**raw["models"][0]["spec"], "position_embedding": position}
        return parse_run_config({**raw, "models": [{"name": "llm", "spec": spec}]})

    plain_run, alibi_run = run("none"), run("alibi")
    plain, alibi = TimeModel(plain_run).op_prices(body(plain_run)), TimeModel(alibi_run).op_prices(body(alibi_run))
    # 16 heads × 2048 × 2048 scores of one sequence (bf16): Megatron-DeepSpeed's `torch.baddbmm(alibi, q, kᵀ,
    # beta=1.0)` copies the broadcast bias into its output (one write of the scores, its own kernel) and the
    # batched GEMM reads it back as C (one read, in its own traffic). The plain scores BMM moves Q and K
    # (2 · 2048 · 16 · 64 · 2 bytes) and writes the scores, memory-bound on this device: its bytes at 5e11 B/s.
    scores = 16 * 2048 * 2048 * 2
    plain_bytes = 2 * 2048 * 16 * 64 * 2 + scores
    assert plain["scores"].forward_ms == pytest.approx(plain_bytes / 5e11 * 1e3, rel=1e-12)
    assert alibi["scores"].forward_ms == pytest.approx((plain_bytes + 2 * scores) / 5e11 * 1e3, rel=1e-12)
    # the bias needs no gradient: the backward, and every other op, as without it
    assert alibi["scores"].backward_ms == plain["scores"].backward_ms
    assert {k: v for k, v in alibi.items() if k != "scores"} == {k: v for k, v in plain.items() if k != "scores"}


def test_megatron_s_deterministic_mode_runs_flash_attention_2_s_deterministic_backward_below_hopper():
    a100, h100 = DEVICE_CATALOG["a100-80gb"], DEVICE_CATALOG["h100-80gb"]
    plain = Kernels.from_device(a100, "bf16")
    deterministic = Kernels.from_device(a100, "bf16", deterministic=True)
    # TransformerEngine keeps cuDNN attention on Hopper: the same kernels' rates, its backward decomposed
    hopper = Kernels.from_device(h100, "bf16", deterministic=True)
    assert hopper.attention_backward == h100.attention_backward_efficiency and not hopper.deterministic_backward
    assert hopper.dp_workspace and not Kernels.from_device(h100, "bf16").dp_workspace
    assert not deterministic.dp_workspace
    assert deterministic.attention_backward == a100.flash2_backward_efficiency
    # 32 (sequence, head) pairs of 8192 causal queries, head size 128, on 108 SMs: a plain backward runs
    # 32 · 8192/128 = 2048 blocks in 19 waves (2052 slots); the deterministic one ⌈108/32⌉ = 4 splits of
    # each pair, 128 blocks in 2 waves (216 slots), then zeroes and sums 3 more fp32 dQ slices than a
    # plain one: 2 · 3 · 32 · 8192 · 128 · 4 bytes at 2039 GB/s · 0.8.
    assert deterministic.deterministic_splits(32) == 4
    flops = 2.5 * 4 * 32 * 8192 * 8192 * 128 / 2
    plain_s = plain.attention_s(flops, 0.0, True, 32, 8192, 4096, 128, 1)
    slices_s = 2 * 3 * 32 * 8192 * 128 * 4 / (2039e9 * 0.8)
    expected = plain_s * (2048 / 2052) / (128 / 216) + slices_s
    assert deterministic.attention_s(flops, 0.0, True, 32, 8192, 4096, 128, 1) == pytest.approx(expected, rel=1e-12)
    # the forward is the same kernel as a plain run's (FlashAttention-2's, at the same rate on A100)
    assert deterministic.attention_s(flops / 2.5, 0.0, False, 32, 8192, 4096, 128, 1) == pytest.approx(
        plain.attention_s(flops / 2.5, 0.0, False, 32, 8192, 4096, 128, 1)
    )


def test_cudnn_s_deterministic_backward_on_hopper_stores_dp_and_runs_dq_as_its_own_product():
    # Megatron CI's 7B at TP 1 on H100: 32 (sequence, head) pairs of 8192 causal queries, mean keys
    # 8193/2 = 4096.5, head size 128; H100 HBM 3350 GB/s · 0.8 = 2.68e12 B/s achieved. cudnn-frontend
    # v1.22.0 (TE release_v2.16's 3rdparty) forces the dP-workspace path under the deterministic
    # algorithm (scaled_dot_product_flash_attention.h `CompositeSDPABackwardNode`).
    h100 = DEVICE_CATALOG["h100-80gb"]
    plain = Kernels.from_device(h100, "bf16")
    hopper = Kernels.from_device(h100, "bf16", deterministic=True)
    pairs = 32 * 8192 * 4096.5
    flops = 6 * pairs * 128  # the score op's backward: S again, dQ and dK
    args = (True, 32, 8192, 4096.5, 128, 1)
    # the workspace: 32 · 8192 · 8192 (8192 is a multiple of 64; keys = 2 · 4096.5 − 1) · 2 = 4 GiB
    assert dp_workspace_bytes(32, 8192, 4096.5, 1) == 4 * 2**30
    # non-causal keys are the mean keys; 100 queries and keys pad to 128: 2 · 128 · 128 · 2 = 65,536
    assert dp_workspace_bytes(2, 100, 100, 0) == 65_536
    # dQ = dS·K: reads dS (pairs · 2 = 2,147,745,792 B) and each sequence's K once (32 · 8192 · 128 · 2 =
    # 67,108,864), writes dQ once (67,108,864): 2,281,963,520 B at 2.68e12 = 0.8515 ms, over its
    # compute (2 · pairs · 128 = 275 GFLOP at 989 TFLOP/s · 0.803 ≈ 0.35 ms): bound by its bytes.
    dq_bytes = pairs * 2 + 2 * 32 * 8192 * 128 * 2
    assert dq_bytes == 2_281_963_520
    assert hopper.dq_product_s(32, 8192, 4096.5, 128, 1) == pytest.approx(dq_bytes / 2.68e12, rel=1e-12)
    assert hopper.gemm_compute_s(8192, 128, 4096.5, 32) < dq_bytes / 2.68e12 / 2
    # the fused kernel keeps S and dK (4 of the 6 units) at its measured rate; storing dS (2.15 GB,
    # 0.80 ms) hides under that compute (2/3 of the plain kernel's 1.73 ms)
    fused = plain.attention_s(flops, 0.0, *args) * 4 / 6
    assert hopper.attention_s(flops, 0.0, *args, carries_dq=True) == pytest.approx(fused + dq_bytes / 2.68e12)
    # the value half (dV, dP) and the forward are the plain kernel's
    assert hopper.attention_s(flops, 0.0, *args) == plain.attention_s(flops, 0.0, *args)
    assert hopper.attention_s(flops / 3, 0.0, False, *args[1:], carries_dq=True) == plain.attention_s(
        flops / 3, 0.0, False, *args[1:]
    )


def test_cudnn_s_deterministic_backward_on_sm100_is_the_same_decomposition_and_matches_nvidia_s_gb200_table():
    # TE release 2.18 (e7c550c5, Megatron CI's GB200 pin) keeps cuDNN for a deterministic backward on
    # sm100 from cuDNN 9.18.1 (fused_attn.cpp `nvte_get_fused_attn_backend`); cudnn-frontend forces the
    # dP workspace for any deterministic backward. sm120: no deterministic fused backend, not modelled.
    gb200 = DEVICE_CATALOG["gb200"]
    plain = Kernels.from_device(gb200, "bf16")
    blackwell = Kernels.from_device(gb200, "bf16", deterministic=True)
    assert blackwell.dp_workspace and not plain.dp_workspace and not blackwell.deterministic_backward
    assert not Kernels.from_device(replace(gb200, compute_capability=12.0), "bf16", deterministic=True).dp_workspace
    # NVIDIA's cuDNN 9.22 table on a GB200 (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/
    # results/llama3.1/gb200/llama3.1_20260424_100750.csv at fb682ce): batch 2, 64 query heads (128
    # (sequence, head) pairs), head size 128, BF16. Its 8192 causal backward: 4.127 ms plain, 4.754 ms
    # deterministic. By hand: 128 · 8192 · 4096.5 = 4,295,491,584 pairs; dQ = dS·K reads dS (8,590,983,168
    # B) and K, writes dQ (2 · 128 · 8192 · 128 · 2 = 536,870,912 B): 9,127,854,080 B at 7672e9 · 0.8 =
    # 1.4872 ms, over its compute (2 · pairs · 128 = 1.10e12 FLOP at 2500e12 · 0.729 ≈ 0.60
    # ms); the fused kernel keeps 8 of the backward's 10 units (S again, dK, dV, dP) at its measured rate.
    pairs = 128 * 8192 * 4096.5
    dq_bytes = 2 * pairs + 2 * 128 * 8192 * 128 * 2
    assert dq_bytes == 9_127_854_080
    assert blackwell.dq_product_s(128, 8192, 4096.5, 128, 1) == pytest.approx(dq_bytes / 6.1376e12, rel=1e-12)
    whole = 10 * pairs * 128  # the whole backward's FLOPs (2.5 forwards)
    args = (True, 128, 8192, 4096.5, 128, 1)
    expected = plain.attention_s(whole, 0.0, *args) * 8 / 10 + dq_bytes / 6.1376e12
    assert blackwell.attention_s(whole, 0.0, *args, carries_dq=True) == pytest.approx(expected, rel=1e-12)
    # Not fitted, checked: the deterministic backward over the plain one against the table's at 4k-32k
    # (queries, mask: plain ms, deterministic ms), each within 5% (measured 1.13-1.20, priced ~1.15).
    measured = {
        (4096, 1): (1.198, 1.352),
        (4096, 0): (2.037, 2.339),
        (8192, 1): (4.127, 4.754),
        (8192, 0): (7.831, 9.306),
        (16384, 1): (16.554, 19.007),
        (16384, 0): (32.014, 38.480),
        (32768, 1): (71.756, 82.343),
        (32768, 0): (139.364, 159.976),
    }
    for (s, causal), (plain_ms, deterministic_ms) in measured.items():
        mean = (s + 1) / 2 if causal else s
        flops = 10 * 128 * s * mean * 128
        shape = (True, 128, s, mean, 128, causal)
        ratio = blackwell.attention_s(flops, 0.0, *shape, carries_dq=True) / plain.attention_s(flops, 0.0, *shape)
        assert ratio == pytest.approx(deterministic_ms / plain_ms, rel=0.05), (s, causal)


def _deterministic_run(deterministic: bool, wgrad_fusion: bool = False, impl: str = "transformer_engine"):
    raw = {
        "name": "g",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": gelu_run().spec("llm").model_dump(exclude_none=True)}],
        "training": {"seq_length": 2048, "flash_attention": True},
        "device": ROUND_DEVICE,
        "timing": {
            "deterministic": deterministic,
            "gradient_accumulation_fusion": wgrad_fusion,
            "transformer_impl": impl,
        },
    }
    return parse_run_config(raw)


def test_deterministic_mode_writes_nan_over_what_transformer_engine_allocates():
    # PyTorch's NaN fill (ppb_core.timing.nan_fill) at 5e11 B/s; h 1024, 16 heads of 64, 2048 tokens, MLP
    # 4096, bf16. Each priced op gains its fill's bytes / 5e11, nothing else changes.
    plain, fill = (TimeModel(_deterministic_run(flag)) for flag in (False, True))
    layer = body(plain.run)
    before, after = plain.op_prices(layer), fill.op_prices(body(fill.run))

    def added(name):
        return ((after[name].forward_ms - before[name].forward_ms) * 1e-3 * 5e11,
                (after[name].backward_ms - before[name].backward_ms) * 1e-3 * 5e11)  # fmt: skip

    # norm1: its output forward, its input gradient backward, 2048·1024·2 = 4,194,304 bytes each
    assert added("norm1") == pytest.approx((4_194_304, 4_194_304))
    # qk_proj, Q and K: 2048 of the fused QKV GEMM's 3072 columns. Forward its output 2048·2048·2 =
    # 8,388,608; backward its share 2/3 of the input gradient 2048·1024·2 (2,796,202.7) and its 16-bit
    # weight gradient 1024·2048·2 = 4,194,304 (no gradient-accumulation fusion).
    assert added("qk_proj") == pytest.approx((8_388_608, 2_796_202.67 + 4_194_304))
    # the cuDNN kernel: O (2048·1024·2 = 4,194,304) and its fp32 statistics (16 heads · 2048 · 4 =
    # 131,072) forward; dQ, dK, dV (2048·3072·2 = 12,582,912) backward; the score half adds nothing.
    assert added("flash_context") == pytest.approx((4_325_376, 12_582_912))
    assert added("flash_scores")[0] == pytest.approx(0, abs=1e-3)
    # the test device states no compute capability (9.0, Hopper): the score op's backward carries
    # cuDNN's deterministic dP workspace, 16 heads · 2048 · 2048 · 2 = 134,217,728 bytes of 0xFF
    ops = plain.ops(layer)
    assert deterministic_fill_bytes(ops, 2, False, True)["flash_scores"] == (0.0, 134_217_728)
    assert "flash_scores" not in deterministic_fill_bytes(ops, 2, False, False)
    # fc1: output 2048·4096·2 = 16,777,216; input gradient 4,194,304 and weight gradient 8,388,608
    assert added("mlp_in") == pytest.approx((16_777_216, 12_582_912))
    # Megatron's own fused bias-GeLU and residual kernels, and the logits (Megatron's linear), none
    for name in ("mlp_act", "residual_mlp"):
        assert added(name) == pytest.approx((0, 0), abs=1e-3)
    tail = next(layer for layer in walk(plain.run) if layer.node == "TAIL")
    assert fill.op_prices(tail)["output.logits"] == plain.op_prices(tail)["output.logits"]
    # With gradient-accumulation fusion the weight gradient lands in the fp32 main gradient: no new tensor.
    fused_plain, fused_fill = (TimeModel(_deterministic_run(flag, wgrad_fusion=True)) for flag in (False, True))
    qk_before, qk_after = fused_plain.op_prices(layer)["qk_proj"], fused_fill.op_prices(layer)["qk_proj"]
    assert (qk_after.backward_ms - qk_before.backward_ms) * 1e-3 * 5e11 == pytest.approx(2_796_202.67)
    # Megatron's own modules (--transformer-impl local) allocate through PyTorch's operators: no fill.
    local_plain, local_fill = (TimeModel(_deterministic_run(flag, impl="local")) for flag in (False, True))
    assert local_fill.op_prices(layer) == local_plain.op_prices(layer)


def test_mindformers_casts_weights_kept_in_fp32_and_accumulates_their_gradients_in_fp32():
    raw = gelu_run(framework="mindformers").model_dump(mode="json", exclude_none=True)
    plain = TimeModel(gelu_run(framework="mindformers")).op_prices(body(gelu_run(framework="mindformers")))
    training = {**raw["training"], "micro_batches": 4}
    run = parse_run_config({**raw, "training": training, "timing": {"param_dtype": "fp32"}})
    fp32 = TimeModel(run).op_prices(body(run))
    # mindformers/modules/layers.py Linear.construct (a4dfb8219): mlp_in's 1024 × 4096 = 4,194,304 fp32
    # weights cast to bf16 each forward, read 4 and write 2 bytes: 25,165,824 bytes / 5e11 = 0.0503 ms
    # more. Its backward: the two GEMMs compute-bound (2 · 2·2048·1024·4096 / 5e13), then the weight
    # gradient cast back (read 2, write 4) and added into the fp32 accumulation buffer over the 4
    # micro-batches (read 4 + 4, write 4): 18 bytes a weight, 75,497,472 / 5e11 = 0.151 ms.
    weights = 1024 * 4096
    assert fp32["mlp_in"].forward_ms == pytest.approx(plain["mlp_in"].forward_ms + 6 * weights / 5e11 * 1e3, rel=1e-12)
    gemms_ms = 2 * 17_179_869_184 / 5e13 * 1e3
    assert fp32["mlp_in"].backward_ms == pytest.approx(gemms_ms + 18 * weights / 5e11 * 1e3, rel=1e-12)
    # weights in the compute dtype, one micro-batch: the GEMM's bf16 gradient is the parameter's, nothing added
    assert plain["mlp_in"].backward_ms == pytest.approx(gemms_ms, rel=1e-12)
    # attention's products of two activations hold no weight: nothing cast
    for name in ("scores", "context", "softmax"):
        assert fp32[name] == plain[name]


def test_param_dtype_is_mindformers_words():
    raw = gelu_run().model_dump(mode="json", exclude_none=True)
    with pytest.raises(InputError, match=r"timing\.param_dtype"):
        parse_run_config({**raw, "timing": {"param_dtype": "fp32"}})


def _fp8_body(recipe: str, **parallel):
    raw = gelu_run(device=dict(ROUND_DEVICE, fp8_matmul_efficiency=0.5), **parallel).model_dump(
        mode="json", exclude_none=True
    )
    run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe}})
    model = TimeModel(run)
    layer = body(run)
    return model, {op.name: op for op in model.ops(layer)}


def test_the_fused_qkv_input_is_quantized_once():
    # TransformerEngine v2.9 layernorm_linear.py `_LayerNormLinear.forward`: Megatron's linear_qkv is one
    # module, its normed input quantized once for the one GEMM. ppb splits it into qk_proj (Q and K,
    # (16 + 16)·64 = 2048 columns) and v_proj (16·64 = 1024) of the fused 3072: the cast of the 2048×1024
    # input, tensorwise scaling after the norm (its amax taken by the norm) 4 bytes an element on the round
    # device's Hopper (read bf16, write a byte and its transpose) = 8,388,608 B / 5e11 = 0.016777 ms, is paid
    # once: qk_proj 2/3 of it, v_proj 1/3. Delayed scaling: the norm writes the FP8 itself, and the one
    # `nvte_transpose` after it (read and write a byte, 4,194,304 B) is split alike. The GEMMs at 1e14
    # FLOP/s: qk_proj 2·2048·1024·2048 = 8,589,934,592 FLOPs, v_proj 4,294,967,296.
    for recipe, cast in (("tensorwise", 8_388_608), ("delayed", 4_194_304)):
        model, ops = _fp8_body(recipe)
        qk = model.op_prices(body(model.run))["qk_proj"].forward_ms
        v = model.op_prices(body(model.run))["v_proj"].forward_ms
        assert qk == pytest.approx((8_589_934_592 / 1e14 + cast * 2 / 3 / 5e11) * 1e3, rel=1e-12)
        assert v == pytest.approx((4_294_967_296 / 1e14 + cast / 3 / 5e11) * 1e3, rel=1e-12)
        both = model._cast_bytes(ops["qk_proj"], False) + model._cast_bytes(ops["v_proj"], False)
        assert both == pytest.approx(cast / (2048 * 1024))


def test_under_sp_te_quantizes_the_sequence_shard_before_its_fp8_all_gather():
    # TE v2.9: `_LayerNormLinear.forward` and `_Linear.forward` under sequence_parallel pass their quantizer
    # to `gather_along_first_dim` (distributed.py `_all_gather_fp8` / `_all_gather_mxfp8`: quantize the local
    # tensor row-wise, then `all_gather_into_tensor`); `grad_output_preprocess` does the same for a
    # row-parallel linear's output gradient. Per-tensor FP8 on Hopper (the round device, capability 9) makes
    # the transpose afterwards from the gathered FP8 data: read and write a byte of every gathered element.
    # tp 2, 2048 gathered rows of 1024: mlp_in's input, tensorwise after the norm (its amax fused): without
    # SP (2 + 1 + 1) · 2,097,152 = 8,388,608 B in the forward; with SP (2 + 1) · 2,097,152 / 2 = 3,145,728 B
    # forward and the transpose 2 · 2,097,152 = 4,194,304 B in the backward's weight gradient.
    # mlp_out's output gradient (2048 × 1024): without SP (2 + 2 + 1 + 1) · 2,097,152 = 12,582,912 B; with
    # SP (2 + 2 + 1) / 2 + 2 = 4.5 B an element, 9,437,184 B. MXFP8 (no transpose): (2 + 2) / 2 = 2 B.
    elements = 2048 * 1024
    plain, plain_ops = _fp8_body("tensorwise", tp=2)
    sp, sp_ops = _fp8_body("tensorwise", tp=2, sp=True)

    def bytes_of(phase: str, op: str) -> float:
        return (sp._phase_s(sp_ops[op], phase) - plain._phase_s(plain_ops[op], phase)) * 5e11

    assert bytes_of("forward", "mlp_in") == pytest.approx(3_145_728 - 8_388_608, rel=1e-9)
    assert bytes_of("wgrad", "mlp_in") == pytest.approx(4_194_304, rel=1e-9)
    assert bytes_of("dgrad", "mlp_out") == pytest.approx(9_437_184 - 12_582_912, rel=1e-9)
    assert sp._cast_bytes(sp_ops["mlp_out"], True) * elements == pytest.approx(9_437_184)
    # the fused QKV: its shard's cast shared by the two parts, (2 + 1) / 2 · 2/3 and · 1/3
    assert sp._cast_bytes(sp_ops["qk_proj"], False) == pytest.approx(1.0)
    assert sp._cast_bytes(sp_ops["v_proj"], False) == pytest.approx(0.5)
    # out_proj's input comes from the attention, not a gather: its cast stays on all its rows
    assert sp._cast_bytes(sp_ops["out_proj"], False) == plain._cast_bytes(plain_ops["out_proj"], False)
    mx, mx_ops = _fp8_body("mxfp8", tp=2, sp=True)
    assert mx._cast_bytes(mx_ops["mlp_out"], True) == pytest.approx(2.0)
    assert mx._te_sp_transpose_bytes(mx_ops["mlp_in"]) == 0.0


def test_under_userbuffers_mxfp8_gathers_its_scales_by_nccl():
    # TE v2.9 / v2.14 base.py `fill_userbuffers_buffer_for_all_gather`: an MXFP8 operand put through a
    # userbuffers all-gather (Megatron's --tp-comm-overlap) has its E8M0 scales, a byte a 32-block, gathered
    # with `torch.distributed.all_gather_into_tensor` first: 2048 gathered rows of 1024, 2048·1024/32 = 65,536 B.
    # Each column-parallel linear (qkv, fc1) fills it for its forward gather and its bulk-dgrad re-gather
    # (layernorm_linear.py, Megatron's tp_comm_bulk_dgrad default); each row-parallel one (proj, fc2) for
    # its output gradient's row-wise gather, exposed, and again for the column-wise copy on the dgrad GEMM's
    # send stream (linear.py `_Linear.backward`). tp 2 on one node at 10 µs a step, the round device's 100
    # GB/s at 0.5: 10 µs + 65,536 · 1/2 / 5e10 s = 10.655 µs, 0.0106554 ms.
    def mx_body(overlap_tp: float, recipe: str = "mxfp8"):
        device = dict(ROUND_DEVICE, fp8_matmul_efficiency=0.5, collective_latency_us=10.0)
        raw = gelu_run(device=device, tp=2, sp=True).model_dump(mode="json", exclude_none=True)
        timing = {"matmul_dtype": "fp8", "fp8_recipe": recipe, "overlap": {"tp": overlap_tp}}
        run = parse_run_config({**raw, "timing": timing})
        model = TimeModel(run)
        return model, {op.name: op for op in model.ops(body(run))}

    model, ops = mx_body(1.0)
    prices = model.op_prices(body(model.run))
    for stem, producer in (("attention", "out_proj"), ("mlp", "mlp_out")):
        entry = ops[f"scales_{stem}"]
        for comm in (entry.forward_comm, entry.backward_comm):
            assert (comm.kind, comm.group, comm.payload_bytes, comm.calls) == (ALL_GATHER, "tp", 65_536, 1)
        assert prices[f"scales_{stem}"].forward_ms == pytest.approx(0.0106554, rel=1e-4)
        assert prices[f"scales_{stem}"].backward_ms == pytest.approx(0.0106554, rel=1e-4)
        exit_ = ops[f"reduce_{stem}_scales"]
        assert exit_.forward_comm is None and exit_.backward_comm.payload_bytes == 65_536
        assert prices[f"reduce_{stem}_scales"].backward_ms == pytest.approx(0.0106554, rel=1e-4)
        beside = ops[f"reduce_{stem}_wgrad_scales"].backward_comm
        assert (beside.overlap, beside.partner) == ("tp_async", (producer, "dgrad"))
    # the row-parallel output gradient quantized twice from its bf16 shard, each pass reading it and writing
    # one copy: (2 + 1 + 2 + 1) / tp = 3 B an element of the gathered rows, against (2 + 2) / 2 = 2 in one pass
    assert model._cast_bytes(ops["mlp_out"], True) == pytest.approx(3.0)
    # ... the second a Python call into TE: one more backward launch for out_proj and mlp_out, none elsewhere
    sp_ops = (model._te_gathered, model._te_scattered)
    common = dict(tp=2, rope_fusion=True, cross_entropy_fusion=False, wgrad_fused=True, fp8_recipe="mxfp8")
    with_ub = layer_launches(tuple(ops.values()), **common, sp_ops=sp_ops, mxfp8_userbuffers=True)
    without = layer_launches(tuple(ops.values()), **common, sp_ops=sp_ops)
    assert {name: with_ub[name][1] - without[name][1] for name in ops if with_ub[name] != without[name]} == {
        "out_proj": 1.0,
        "mlp_out": 1.0,
    }
    # NCCL's own coalesced gather without userbuffers, and per-tensor recipes: no scale gathers
    for overlap_tp, recipe in ((0.0, "mxfp8"), (1.0, "tensorwise")):
        _, other_ops = mx_body(overlap_tp, recipe)
        assert not [name for name in other_ops if "scales" in name]
    plain, plain_ops = mx_body(0.0)
    assert plain._cast_bytes(plain_ops["mlp_out"], True) == pytest.approx(2.0)


def test_under_sp_te_all_gathers_fp8_data():
    # TE v2.9 (unchanged to v2.16.1): under sequence_parallel the quantizer goes to `gather_along_first_dim`
    # and distributed.py `_all_gather_fp8` / `_all_gather_mxfp8` gather the FP8 data, not bf16. tp 2, 2048
    # gathered rows of 1024, bf16 4,194,304 B a gather. Per-tensor (tensorwise, delayed): row-wise data only
    # (`supports_only_rowwise_all_gather`), a byte an element: 2,097,152 B for mlp_in's forward gather, its
    # backward re-gather and mlp_out's output-gradient gather. MXFP8: with an E8M0 scale a 32-block,
    # 33/32 B a copy; the forward input row-wise only (layernorm_linear.py `set_usage(rowwise=True,
    # columnwise=False)` before the gather), the re-gather column-wise only, the output gradient both
    # (linear.py `_Linear.backward` `set_usage(rowwise=True, columnwise=True)`): 2,162,688 B, 2,162,688 B,
    # 4,325,376 B. The input gradient's reduce-scatter stays bf16 (dgrad writes the compute dtype).
    bf16 = 2048 * 1024 * 2
    for recipe, forward, again, gradient in (
        ("tensorwise", 2_097_152, 2_097_152, 2_097_152),
        ("delayed", 2_097_152, 2_097_152, 2_097_152),
        ("mxfp8", 2_162_688, 2_162_688, 4_325_376),
    ):
        _, ops = _fp8_body(recipe, tp=2, sp=True)
        assert ops["gather_mlp"].forward_comm.payload_bytes == pytest.approx(forward)
        assert ops["gather_mlp"].backward_comm.payload_bytes == pytest.approx(bf16)
        assert ops["regather_mlp"].backward_comm.payload_bytes == pytest.approx(again)
        assert ops["reduce_mlp"].backward_comm.payload_bytes == pytest.approx(gradient)
        assert ops["reduce_mlp"].forward_comm.payload_bytes == pytest.approx(bf16)
        assert ops["gather_attention"].forward_comm.payload_bytes == pytest.approx(forward)
        assert ops["reduce_attention"].backward_comm.payload_bytes == pytest.approx(gradient)
    # without FP8 the same gathers move bf16
    model = TimeModel(gelu_run(device=dict(ROUND_DEVICE), tp=2, sp=True))
    plain = {op.name: op for op in model.ops(body(model.run))}
    assert plain["gather_mlp"].forward_comm.payload_bytes == pytest.approx(bf16)
    assert plain["reduce_mlp"].backward_comm.payload_bytes == pytest.approx(bf16)


def test_under_sp_current_scaling_all_reduces_each_gathered_amax():
    # TE v2.9 layernorm_linear.py / linear.py `_customize_quantizers_float8_current_scaling`: under
    # sequence_parallel a column-parallel linear's input quantizer and a row-parallel linear's output-gradient
    # quantizer get `with_amax_reduction` over the TP group; quantizer.cpp `quantize_impl` all-reduces the
    # fp32 amax (4 B) before the cast. Per TP region of the layer (attention, mlp): one in the forward, one
    # in the backward. tp 2 on one node, 10 µs a step: a ring all-reduce 2·(size-1) = 2 steps, 20 µs, plus
    # 2·4·(1/2) B at tens of GB/s (under 1e-6 ms): 0.020 ms each way. Delayed scaling and no SP: none.
    raw = gelu_run(device=dict(ROUND_DEVICE, fp8_matmul_efficiency=0.5, collective_latency_us=10.0), tp=2, sp=True)
    run = parse_run_config(
        {
            **raw.model_dump(mode="json", exclude_none=True),
            "timing": {"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"},
        }
    )
    model = TimeModel(run)
    ops = {op.name: op for op in model.ops(body(run))}
    prices = model.op_prices(body(run))
    for stem in ("attention", "mlp"):
        forward = ops[f"amax_{stem}"].forward_comm
        assert (forward.kind, forward.group, forward.payload_bytes) == (ALL_REDUCE, "tp", 4)
        backward = ops[f"reduce_{stem}_amax"].backward_comm
        assert (backward.kind, backward.group, backward.payload_bytes) == (ALL_REDUCE, "tp", 4)
        assert prices[f"amax_{stem}"].forward_ms == pytest.approx(0.020, rel=1e-3)
        assert prices[f"reduce_{stem}_amax"].backward_ms == pytest.approx(0.020, rel=1e-3)
    for recipe, sp in (("delayed", True), ("tensorwise", False)):
        _, others = _fp8_body(recipe, tp=2, sp=sp)
        assert not [name for name in others if "amax" in name]


def test_te_before_2_0_transposes_a_row_parallel_input_under_sp_in_the_backward():
    # TE v1.10 to v1.13 linear.py `_Linear.forward`: `fp8_cast_transpose_fused` only `and not sequence_parallel`,
    # else `cast_to_fp8` (read bf16, write a byte: 3 B an element); `_Linear.backward` then transposes the saved
    # FP8 input for the weight gradient, `tex.fp8_transpose` (read and write a byte: 2 B). From v2.0 (819a75219)
    # the forward's cast-transpose writes both copies (2 + 1 + 1 = 4 B), nothing in the backward. out_proj's
    # input (from the attention, 2048 rows of 1024 at tp 2) and mlp_out's on the round device's Hopper.
    def body_at(release: str):
        raw = gelu_run(device=dict(ROUND_DEVICE, fp8_matmul_efficiency=0.5), tp=2, sp=True).model_dump(
            mode="json", exclude_none=True
        )
        raw["framework_release"] = {"transformer_engine": release}
        run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": "delayed"}})
        model = TimeModel(run)
        return model, {op.name: op for op in model.ops(body(run))}

    old, old_ops = body_at("v1.13")
    new, new_ops = body_at("v2.0")
    for name in ("out_proj", "mlp_out"):
        assert new._cast_bytes(new_ops[name], False) == pytest.approx(4.0)
        assert new._te_sp_transpose_bytes(new_ops[name]) == 0.0
        assert old._cast_bytes(old_ops[name], False) == pytest.approx(3.0)
        assert old._te_sp_transpose_bytes(old_ops[name]) == pytest.approx(2.0)
    # the gathered, norm-fed mlp_in is the same in both
    assert old._cast_bytes(old_ops["mlp_in"], False) == new._cast_bytes(new_ops["mlp_in"], False)
    assert old._te_sp_transpose_bytes(old_ops["mlp_in"]) == new._te_sp_transpose_bytes(new_ops["mlp_in"])
    # the transpose is a kernel of its own in the backward: one launch more for each
    layer = body(old.run)
    launches = {
        release: model.host(layer, LayerType.NOT_REC_LAYER).launch_backward
        for release, model in (("old", old), ("new", new))
    }
    assert launches["old"] - launches["new"] == pytest.approx(2 * old.launch_s(), rel=1e-9)


def test_te_before_2_0_transposes_per_tensor_fp8_on_blackwell_too():
    # TE's "TE 2.0 code drop" (819a75219, v2.0) runs per-tensor FP8 GEMMs in every layout from compute capability
    # 10.0 (utils.py `non_tn_fp8_gemm_supported`; quantizer.cpp `create_transpose = columnwise_usage &&
    # !non_tn_fp8_gemm_supported()`), so on Blackwell a delayed-scaling cast reads bf16 and writes a byte: 3 B an
    # element, and a norm that wrote the FP8 itself leaves nothing. TE 1.14 (release_v1.14, NGC PyTorch 25.01's)
    # cast-transposes whatever the device (linear.py `_Linear.forward`: `fp8_cast_transpose_fused`), as Hopper
    # does: mlp_out's output gradient 2 + 1 + 1 = 4 B, and the fused QKV's normed input the transpose alone,
    # read and write a byte, 2 B split 2/3 and 1/3 over qk_proj and v_proj. TP 1, no SP, on the catalog's B200.
    def body_at(release: str | None):
        raw = gelu_run(device={"name": "b200"}).model_dump(mode="json", exclude_none=True)
        if release is not None:
            raw["framework_release"] = {"transformer_engine": release}
        run = parse_run_config({**raw, "timing": {"matmul_dtype": "fp8", "fp8_recipe": "delayed"}})
        model = TimeModel(run)
        return model, {op.name: op for op in model.ops(body(run))}

    for release, gradient, fused in (("1.14", 4.0, 2.0), ("v2.0", 3.0, 0.0), (None, 3.0, 0.0)):
        model, ops = body_at(release)
        assert model._cast_bytes(ops["mlp_out"], True) == pytest.approx(gradient)
        qkv = model._cast_bytes(ops["qk_proj"], False) + model._cast_bytes(ops["v_proj"], False)
        assert qkv == pytest.approx(fused)
