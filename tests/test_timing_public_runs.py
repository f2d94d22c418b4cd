"""Published runs (bench/public_runs.py): the conversions to seconds by hand, and a guard on our mean error."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from bench_modules import load_bench

from ppb_core.config.devices import (
    ATTENTION_DROPOUT_COST_SM90,
    B200_OVER_GB200_ATTENTION,
    DEVICE_CATALOG,
    FP8_GEMM_KERNEL_US_B200,
    FP8_GEMM_KERNEL_US_HOPPER,
    GEMM_KERNEL_US_B200,
    LAYER_GEMM_SHARE_H100,
)
from ppb_core.config.run import parse_run_config
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import BODY, HEAD, TAIL, walk
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel


@pytest.fixture(scope="module")
def public():
    return load_bench("public_runs")


def test_published_throughput_becomes_seconds(public):
    rows = {row.name: row for row in public.public_runs()}
    # Megatron 1.7B: 12·192·4096·24·2048²·((1 + 1 + 4096/2048) + 4 + 131072/(2·24·2048)) FLOPs at
    # 48 × 408.8 TFLOP/s. 12·192·4096·24·2048² = 951,268,147,200,000 (9.5127e14), × 9.3333 = 8.8785e15.
    flops = 12 * 192 * 4096 * 24 * 2048**2 * (4 + 4 + 131072 / (2 * 24 * 2048))
    assert rows["Megatron GPT 1.7B (48 H100, TP1 PP1 DP48)"].seconds == pytest.approx(flops / (48 * 408.8e12))
    # torchtitan on 8 GPUs: local batch 2 of 8192 tokens at 5,762 tokens/s per GPU.
    assert rows["torchtitan Llama 3.1 8B FSDP (8 H100)"].seconds == pytest.approx(2 * 8192 / 5762)
    # DeepSeek-V3: 15360 sequences of 4096 on 2048 GPUs at 1e12 / (180,000 · 3600) tokens/s each.
    tps = 1e12 / (180_000 * 3600)
    assert rows["DeepSeek-V3 671B (2048 H800, PP16 EP64 DP128)"].seconds == pytest.approx(15360 * 4096 / (tps * 2048))
    # NeMo 25.11, DGX-B200 Llama 3 8B: GBS 128 of 8192 tokens on 8 GPUs at 30,624 tokens/s each:
    # 1,048,576 / 244,992 = 4.2801 s. Qwen3 235B on 256 H100: 2048 · 4096 / (1575 · 256) = 20.805 s.
    assert rows["NeMo Llama 3 8B FP8 (8 B200)"].seconds == pytest.approx(4.2801, rel=1e-4)
    assert rows["NeMo Qwen3 235B FP8 TP2 PP8 EP32 (256 H100)"].seconds == pytest.approx(20.805, rel=1e-4)


def test_torchtitan_benchmark_rows_count_tokens_as_torchtitan_s_train_py(public):
    rows = {row.name: row for row in public.public_runs() if row.source.startswith(public.TITAN_SOURCES)}
    assert len(rows) == 26
    # torchtitan train.py (9dec370): tps = labels of the local batch (before CP shards them) over the
    # window's time and cp·tp·pp. Table 2, FSDP 4 CP 2: 1 · 65536 / (2540 · 2) = 12.9008 s.
    assert rows["torchtitan 8B FSDP4 CP2 s65536 (8 H100)"].seconds == pytest.approx(12.9008, rel=1e-4)
    # Table 5, interleaved: local batch 32 of 8192 at 128 tokens/s over tp 8 · pp 8: 262,144 / 8,192 = 32 s.
    assert rows["torchtitan 405B FSDP8 TP8 PP8 interleaved (512 H100)"].seconds == pytest.approx(32.0)
    # the async-TP file, 8B Float8 async: 12 · 8192 / (5570.1 · 8) = 98,304 / 44,560.8 = 2.2061 s.
    assert rows["torchtitan 8B FSDP8 TP8 Float8 AsyncTP (64 H100, 2025)"].seconds == pytest.approx(2.2061, rel=1e-4)
    # Trainy's H200, 4 nodes, no TP/PP/CP: 2 · 8192 / 10938 = 1.4979 s.
    assert rows["torchtitan 8B FSDP32 compile + Float8 (32 H200)"].seconds == pytest.approx(1.4979, rel=1e-4)
    # Table 5's local batch of 32 in the PP degree's 8 micro-batches of 4; FSDP over the 8 replicas
    run = public.config(rows["torchtitan 405B FSDP8 TP8 PP8 1f1b (512 H100)"])
    assert (run.training.micro_batch_size, run.training.micro_batches, run.parallel.dp) == (4, 8, 8)
    compiled = public.config(rows["torchtitan 8B FSDP compile + Float8 (8 H100)"]).timing
    assert compiled.torch_compile and compiled.matmul_dtype == "fp8" and compiled.fp8_recipe == "tensorwise"
    # the loss: eager at 9dec370 (train.py calls it; components/loss.py compiles it only from bbb1b616e),
    # compiled with the blocks at e7c0cae (Trainy's rows)
    assert not compiled.compiled_loss
    assert public.config(rows["torchtitan 8B FSDP32 compile + Float8 (32 H200)"]).timing.compiled_loss
    # Tables 5 and 6 run llama3_405b.toml at 9dec370, whose [float8] turns on FSDP's Float8 all-gather and
    # the scale precompute; the 8B and 70B tomls set neither (their Float8 from the command line)
    for name in (
        "torchtitan 405B FSDP8 TP8 PP8 1f1b (512 H100)",
        "torchtitan 405B FSDP2 CP4 TP8 PP8 s131072 (512 H100)",
    ):
        timing = public.config(rows[name]).timing
        assert timing.fp8_fsdp_all_gather and timing.fp8_precompute_scale
    for name in ("torchtitan 70B FSDP32 TP8 2D (256 H100)", "torchtitan 8B FSDP2 CP4 s131072 (8 H100)"):
        assert not public.config(rows[name]).timing.fp8_fsdp_all_gather


def test_bloom_s_logged_seconds_agree_with_its_logged_throughput(public):
    (row,) = [row for row in public.public_runs() if row.source.startswith(public.BLOOM)]
    assert row.seconds == 104.70
    # The same log line: 2048 samples at 19.561 a second = 104.70 s; and 149.77 TFLOP/s by
    # Narayanan eq. 3, 96·B·s·l·h²·(1 + s/6h + V/16lh): 96·2048·2048·70·14336² = 5.7925e18, times
    # (1 + 2048/86016 + 250880/16056320) = 1.039435, is 6.0209e18 FLOPs over 384 GPUs · 104.70 s.
    assert pytest.approx(104.70, abs=0.01) == 2048 / 19.561
    flops = 96 * 2048 * 2048 * 70 * 14336**2 * (1 + 2048 / 86016 + 250880 / 16056320)
    assert flops / (384 * 104.70) / 1e12 == pytest.approx(149.77, abs=0.02)
    run = public.config(row)
    # TP 4 · PP 12 · DP 8 = 384; GBS 2048 / (MBS 2 · DP 8) = 128 micro-batches; 5 + 6·10 + 5 = 70 layers
    assert (run.parallel.tp, run.parallel.pp, run.parallel.dp, run.training.micro_batches) == (4, 12, 8, 128)
    assert run.layout_cells() == [[5] + [6] * 10 + [5]]  # one virtual stage a rank
    assert run.device.profile().inter_node_bandwidth_gbs == pytest.approx(6.25)  # 4 × 100 Gb/s over 8 GPUs


def test_nemo_26_04_rows_take_the_v0_4_x_presets(public):
    rows = {row.name: row for row in public.public_runs() if row.source == public.NEMO_2604}
    assert len(rows) == 14
    # the GB300 FSDP row's twin (LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2): 4224 tokens/s on 64 GB200 at GBS 256 of
    # 8192: 2,097,152 / 270,336 = 7.758 s; Megatron FSDP over all 64 (ZeRO-3), MBS 2, so 256 / (2 · 64) = 2
    # micro-batches; TE's CPU offloading of 40 layers (the GB300 preset's 20); gradient accumulation fusion off
    twin = rows["NeMo 26.04 Llama 3 70B FP8 FSDP (64 GB200)"]
    assert twin.seconds == pytest.approx(7.758, rel=1e-4)
    fsdp = public.config(twin)
    assert (fsdp.parallel.dp, fsdp.parallel.zero, fsdp.training.micro_batches) == (64, 3, 2)
    assert fsdp.training.cpu_offloading_num_layers == 40 and not fsdp.timing.gradient_accumulation_fusion
    # the 26.04.01 revision's figures (docs/performance-summary.md at 21d102f5e): GBS 1536 of 8192 on 256 GB200
    # at 864 tokens/s each (74695a06d had 842): 12,582,912 / 221,184 = 56.889 s.
    fp8 = rows["NeMo 26.04 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)"]
    assert fp8.seconds == pytest.approx(56.889, rel=1e-4)
    run = public.config(fp8)
    # TP 4 · PP 16 = 64 a replica, DP 4, 1536 / 4 = 384 micro-batches; 126 layers over 16 · 4 cells
    assert (run.parallel.dp, run.parallel.vpp, run.training.micro_batches) == (4, 4, 384)
    assert sum(map(sum, run.layout_cells())) == 126
    # set_post_overrides: the gathers ride the optimizer step (DP, PP, VP > 1), but not under fp8_mx
    assert run.timing.overlap_param_gather_with_optimizer_step
    mx = public.config(rows["NeMo 26.04 Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)"])
    assert (mx.parallel.vpp, mx.timing.fp8_recipe) == (8, "mxfp8")
    assert not mx.timing.overlap_param_gather_with_optimizer_step
    # the 26.04 container's cuDNN 9.20.0.48 (Megatron-Bridge docs/releases/software-versions.md at v0.4.0):
    # from 9.17 on, the newest measured sm100 kernels
    assert run.timing.cudnn_version == mx.timing.cudnn_version == (9, 20)
    assert TimeModel(mx).kernels.attention_kernel == "cudnn_sm100"
    # 16 · 8 = 128 cells: the embedding's alone, 126 of one layer, the loss's alone
    cells = [count for chunk in mx.layout_cells() for count in chunk]
    assert (len(cells), sum(cells), mx.layout_cells()[0][0], mx.layout_cells()[-1][-1]) == (128, 126, 0, 0)
    # GB200 jobs run 4 GPUs a node in sbatch segments of up to 18 trays (executors.py `slurm_executor`, v0.4.2):
    # 256 GPUs = 64 nodes, segments of 16 (64's largest divisor up to 18), 64 GPUs an NVLink domain; 64 GPUs = 16
    # nodes, one segment; 8 GPUs = 2 nodes, one segment of 8 GPUs. 96 GPUs = 24 nodes: segments of 12, 48 GPUs.
    assert run.parallel.devices_per_node == mx.parallel.devices_per_node == 64
    assert public.config(rows["NeMo 26.04 Qwen3 30B-A3B MXFP8 EP8 (8 GB200)"]).parallel.devices_per_node == 8
    assert [load_bench("_nemo").nvlink_domain(gpus) for gpus in (8, 64, 256, 96)] == [8, 64, 64, 48]
    # Llama 3.1 405B on 1024 H100 (LLAMA31_405B_PRETRAIN_CONFIG_H100_FP8_CS_V2): TP 8 · PP 8 · CP 2 = 128, DP 8,
    # GBS 1536 / 8 = 192 micro-batches; 1536 · 8192 / (328 · 1024) = 12,582,912 / 335,872 = 37.463 s
    h100 = rows["NeMo 26.04 Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)"]
    assert h100.seconds == pytest.approx(37.463, rel=1e-4)
    big = public.config(h100)
    assert (big.parallel.dp, big.parallel.cp, big.training.micro_batches) == (8, 2, 192)
    assert big.timing.overlap_param_gather_with_optimizer_step and big.timing.fp8_recipe == "tensorwise"
    # Qwen3 30B-A3B on 16 H100 (QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1): EP 16, GBS 1024, MBS 1, so 64
    # micro-batches a replica of DP 16; HybridEP on 32 SMs (_set_common_perf_overrides), no graphs, no
    # moe_a2a_overlap. 1024 · 4096 / (8960 · 16) = 4,194,304 / 143,360 = 29.257 s.
    qwen = rows["NeMo 26.04 Qwen3 30B-A3B FP8 EP16 (16 H100)"]
    assert qwen.seconds == pytest.approx(29.257, rel=1e-4)
    small = public.config(qwen)
    assert (small.parallel.dp, small.parallel.ep, small.training.micro_batches) == (16, 16, 64)
    assert (small.timing.moe_dispatcher, small.timing.moe_flex_dispatcher_num_sms) == ("hybridep", 32)
    assert small.timing.cuda_graph_impl == "none" and not small.parallel.overlap_moe_expert_parallel_comm
    # Qwen3 235B MXFP8 on 256 GB200 (..._GB200_FP8_MX_V2): PP 8, VP 3, EP 32, so DP 32 and 8192 / 32 = 256
    # micro-batches; 94 layers + the embedding and the loss = 96 over 24 virtual stages of 4; TE graphs of
    # attention and the router; fp8_mx: no gathers with the step
    grace = public.config(rows["NeMo 26.04 Qwen3 235B MXFP8 PP8 VP3 EP32 (256 GB200)"])
    assert (grace.parallel.dp, grace.parallel.vpp, grace.training.micro_batches) == (32, 3, 256)
    assert sum(map(sum, grace.layout_cells())) == 94 and grace.layout_cells()[0][0] == 3
    assert grace.timing.cuda_graph_modules == ["attn", "moe_router", "moe_preprocess"]
    assert not grace.timing.overlap_param_gather_with_optimizer_step
    # the B200 235B names no flex backend: qwen3_235b_a22b_pretrain_config_b200 sets alltoall
    assert public.config(rows["NeMo 26.04 Qwen3 235B MXFP8 PP8 EP8 (256 B200)"]).timing.moe_dispatcher == "alltoall"
    # DeepSeek-V3 on 256 B200 (DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2): PP 8, VP 2, EP 32, DP 32, 4096 / 32 =
    # 128 micro-batches; the (8, 2) layout: 4 layers a virtual stage but the last's 1 (+ MTP, loss); DeepEP with
    # moe_a2a_overlap (combined 1F1B, delayed weight gradients); recompute mla_up_proj and mlp.
    # 4096 · 4096 / (3328 · 256) = 16,777,216 / 851,968 = 19.692 s.
    ds_row = rows["NeMo 26.04 DeepSeekV3 MXFP8 PP8 VP2 EP32 (256 B200)"]
    assert ds_row.seconds == pytest.approx(19.692, rel=1e-4)
    ds = public.config(ds_row)
    assert (ds.parallel.dp, ds.parallel.ep, ds.training.micro_batches) == (32, 32, 128)
    assert [list(chunk) for chunk in ds.layout_cells()] == [[4] * 8, [4] * 7 + [1]]
    assert ds.timing.moe_dispatcher == "deepep" and ds.parallel.overlap_moe_expert_parallel_comm
    assert ds.timing.delay_wgrad_compute and set(ds.recompute.modules) == {"mla_up_proj", "mlp"}
    # on GB200 (..._GB200_V2): PP 4, VP 4, EP 64 inside one rack's 64-GPU NVLink domain
    nvl = public.config(rows["NeMo 26.04 DeepSeekV3 MXFP8 PP4 VP4 EP64 (256 GB200)"])
    assert (nvl.parallel.ep, nvl.parallel.devices_per_node, nvl.timing.moe_dispatcher) == (64, 64, "hybridep")


def test_nemo_26_04_gpt_oss_rows_take_the_v0_4_0_v2_presets(public):
    rows = {row.name: row for row in public.public_runs() if row.source == public.NEMO_2604_GPT_OSS}
    assert len(rows) == 3
    # GBS 1280 of 4096 on 64 H100 at 5,810 tokens/s each: 5,242,880 / 371,840 = 14.0998 s
    h100 = rows["NeMo 26.04 GPT-OSS 120B BF16 PP4 EP8 GBS1280 (64 H100)"]
    assert h100.seconds == pytest.approx(14.0998, rel=1e-4)
    run = public.config(h100)
    # GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2: PP 4 -> DP 16, MBS 1: 1280 / 16 = 80 micro-batches; no flex
    assert (run.parallel.dp, run.parallel.pp, run.parallel.ep, run.training.micro_batches) == (16, 4, 8, 80)
    assert run.timing.moe_dispatcher == "alltoall"
    # recompute_modules ["layernorm", "moe_act"]: the norms and the experts' activation rerun
    assert run.recompute.modules == {"layernorm", "moe_act"}
    assert (run.recompute.switches["normOp"], run.recompute.switches["ffAct"]) == (0, 0)
    # B200 and GB200: MBS 4 over DP 64: 1280 / 256 = 5 micro-batches, HybridEP on 32 SMs
    b200 = public.config(rows["NeMo 26.04 GPT-OSS 120B BF16 EP8 GBS1280 (64 B200)"])
    gb200 = public.config(rows["NeMo 26.04 GPT-OSS 120B BF16 EP64 GBS1280 (64 GB200)"])
    for blackwell in (b200, gb200):
        assert (blackwell.parallel.dp, blackwell.training.micro_batches) == (64, 5)
        assert (blackwell.timing.moe_dispatcher, blackwell.timing.moe_flex_dispatcher_num_sms) == ("hybridep", 32)
    # GB200's moe_a2a_overlap and its NVL72 rack: EP 64 on one NVLink domain
    assert gb200.parallel.overlap_moe_expert_parallel_comm and gb200.timing.delay_wgrad_compute
    assert (gb200.parallel.ep, gb200.parallel.devices_per_node, b200.parallel.devices_per_node) == (64, 64, 8)
    # the model as the HF file has it: alternate 128-key windows, sinks, biased experts
    spec = run.spec("llm")
    windows = (spec.sliding_window, spec.window_layers[:2])
    assert windows == (128, (0, 2)) and spec.attention_sinks and spec.expert_bias
    # GPTOSSBridge's YaRN rotary (factor 32: mscale 1.3466) runs Megatron's unfused steps; the clamp at 7
    assert (spec.rope_yarn_factor, spec.activation_clamp, run.rope_fused) == (32.0, 7.0, False)
    # 25.11 (v0.2.0): the table's GBS 512, MBS 4; the preset's EP 64 (bench/_nemo.py: the table's 8 is the H100
    # row's; the 26.02 table's EP 64 B200 run, 8,047 tokens/s, matches); no flex dispatcher; cuDNN 9.13's kernels
    old = {row.name: row for row in public.public_runs() if row.source == public.NEMO_2511_GPT_OSS}
    assert len(old) == 2
    # 512 · 4096 = 2,097,152 tokens on 64 B200 at 8,213 each: 2,097,152 / 525,632 = 3.98977 s
    b200_2511 = old["NeMo 25.11 GPT-OSS 120B BF16 EP64 GBS512 (64 B200)"]
    assert b200_2511.seconds == pytest.approx(3.98977, rel=1e-5)
    run = public.config(b200_2511)
    # EP 64 over 8 DGX B200 nodes of 8: the all-to-all crosses nodes
    assert (run.parallel.dp, run.parallel.ep, run.training.micro_batches) == (64, 64, 2)
    assert run.parallel.devices_per_node == 8
    assert run.timing.moe_dispatcher == "alltoall" and TimeModel(run).kernels.attention_kernel == "cudnn_sm100_913"
    h100_2511 = public.config(old["NeMo 25.11 GPT-OSS 120B BF16 PP4 EP8 GBS512 (64 H100)"])
    # the preset's MBS 1 (bench/_nemo.py: the table's MBS 4 and GA 2 disagree): 512 / 16 = 32 micro-batches
    assert (h100_2511.parallel.dp, h100_2511.training.micro_batch_size, h100_2511.training.micro_batches) == (16, 1, 32)


def test_mindformers_row_counts_the_global_batch_as_its_trainer_does(public):
    (row,) = [row for row in public.public_runs() if row.source.startswith(public.MINDFORMERS)]
    # base_trainer.py (5175aff94), full batch, one stage: 1 · dp 8 · 1 · 1 = 8 sequences of 8192 a step,
    # 65,536 tokens over 8 devices at 2703 tokens/s each: 65,536 / 21,624 = 3.0307 s.
    assert row.seconds == pytest.approx(3.0307, rel=1e-4)
    run = public.config(row)
    assert (run.parallel.dp, run.training.micro_batch_size * run.training.micro_batches) == (8, 1)
    assert run.framework == "mindformers" and run.device.name == "ascend-910b"


def test_torchtitan_2024_docs_rows_agree_with_their_own_mfu(public):
    rows = {row.name: row for row in public.public_runs() if row.source.startswith(public.DOCS_SOURCES)}
    assert len(rows) == 10
    # utils.py get_num_flop_per_token (1ea476e9f): 6 · parameters + 12 · l · h · q · t. Llama 3 8B:
    # embedding and output 2 · 128256 · 4096 = 1,050,673,152; a layer 2 · 4096² + 2 · 4096 · 1024
    # + 3 · 4096 · 14336 + 2 · 4096 = 218,112,000, × 32; the final norm 4096: 8,030,261,248.
    # 6 · that + 12 · 32 · 32 · 128 · 8192 = 61,066,469,376 FLOPs a token; at 2904 tokens/s on a
    # 312 TFLOP/s A100: 56.8%, the doc's MFU.
    params_8b = 2 * 128256 * 4096 + 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096) + 4096
    assert params_8b == 8_030_261_248
    flops_8b = 6 * params_8b + 12 * 32 * 32 * 128 * 8192
    assert 2904 * flops_8b / 312e12 == pytest.approx(0.568, abs=5e-4)
    # Llama 2 13B: 2 · 32000 · 5120 + 40 · (4 · 5120² + 3 · 5120 · 13824 + 2 · 5120) + 5120 = 13,015,864,320;
    # 6 · that + 12 · 40 · 40 · 128 · 4096 = 88,161,515,520; at 2162 tokens/s: 61.1%.
    params_13b = 2 * 32000 * 5120 + 40 * (4 * 5120**2 + 3 * 5120 * 13824 + 2 * 5120) + 5120
    assert 2162 * (6 * params_13b + 12 * 40 * 40 * 128 * 4096) / 312e12 == pytest.approx(0.611, abs=5e-4)
    # seconds: local batch · sequence / WPS (model_parallel_size 1): 8192 / 2904 and 2 · 4096 / 2162
    assert rows["torchtitan Llama 3 8B selective layer FSDP64 (64 A100, 2024)"].seconds == pytest.approx(8192 / 2904)
    assert rows["torchtitan Llama 2 13B no AC FSDP64 (64 A100, 2024)"].seconds == pytest.approx(8192 / 2162)
    # 405B on 128 H100, FSDP 16 × TP 8: WPS divided by model_parallel_size 8: 2 · 8192 / (109 · 8)
    assert rows["torchtitan Llama 3.1 405B FSDP16 TP8 compiled (128 H100, 2024)"].seconds == pytest.approx(16384 / 872)
    layer = public.config(rows["torchtitan Llama 3 8B selective layer FSDP64 (64 A100, 2024)"])
    assert layer.device.name == "a100-80gb" and layer.training.micro_batch_size == 1


def test_nemo_rows_take_the_table_s_parallel_sizes_and_the_recipes_flags(public):
    rows = {row.name: public.config(row) for row in public.public_runs() if row.source == public.NEMO}
    assert len(rows) == 15
    # every 25.11 row ran the container's cuDNN 9.13.1.26 (Megatron-Bridge docs/releases/software-versions.md
    # at v0.2.0): on B200 and GB200 9.13's measured attention kernels
    assert {run.timing.cudnn_version for run in rows.values()} == {(9, 13)}
    b200 = rows["NeMo Llama 3 8B MXFP8 (8 B200)"]
    assert TimeModel(b200).kernels.attention_kernel == "cudnn_sm100_913"
    # Qwen3 30B-A3B MXFP8 on 8 GB200 (QWEN3_30B_A3B_GB200_FP8_MX_BASE_CONFIG, v0.2.0): DP 8, MBS 4, GBS 512 /
    # (4 · 8) = 16 micro-batches; HybridEP on 32 SMs (set_common_perf_overrides), TE graphs of the router and
    # the preprocessing. 2,097,152 / (23,766 · 8 = 190,128) = 11.0302 s.
    grace = rows["NeMo Qwen3 30B-A3B MXFP8 EP8 (8 GB200)"]
    assert (grace.parallel.dp, grace.parallel.ep, grace.training.micro_batches) == (8, 8, 16)
    assert (grace.timing.moe_dispatcher, grace.timing.moe_flex_dispatcher_num_sms) == ("hybridep", 32)
    assert grace.timing.cuda_graph_modules == ["moe_router", "moe_preprocess"] and grace.device.name == "gb200"
    (grace_row,) = [row for row in public.public_runs() if row.name == "NeMo Qwen3 30B-A3B MXFP8 EP8 (8 GB200)"]
    assert grace_row.seconds == pytest.approx(11.0302, rel=1e-5)
    # DeepSeek-V3 on 256 B200: PP 16 so DP 16, GBS 2048 / 16 = 128 micro-batches of one; the recipe's
    # (16, 1) layout: the embedding and 4 layers, 14 stages of 4, then 1 layer, the MTP layer and the loss
    # (4 + 14 · 4 + 1 = 61). 2048 · 4096 / (2139 · 256) = 15.3193 s.
    deepseek = rows["NeMo DeepSeekV3 MXFP8 PP16 EP8 (256 B200)"]
    assert (deepseek.parallel.dp, deepseek.parallel.ep, deepseek.training.micro_batches) == (16, 8, 128)
    assert [list(chunk) for chunk in deepseek.layout_cells()] == [[4] * 15 + [1]]
    assert deepseek.timing.fp8_recipe == "mxfp8" and deepseek.timing.cuda_graph_impl == "none"
    (ds_row,) = [row for row in public.public_runs() if row.name == "NeMo DeepSeekV3 MXFP8 PP16 EP8 (256 B200)"]
    assert ds_row.seconds == pytest.approx(15.3193, rel=1e-5)
    # The table's parenthesized FP8-MX figures and its DGX-GB200 Llama 3 8B row: the same recipes
    # (LLAMA3_8B_GB200_FP8_MX_BASE_CONFIG = ..._FP8_CS_...: MBS 2, graphs over the full iteration).
    for name, device, recipe in (
        ("NeMo Llama 3 8B MXFP8 (8 B200)", "b200", "mxfp8"),
        ("NeMo Llama 3 8B FP8 (8 GB200)", "gb200", "tensorwise"),
        ("NeMo Llama 3 8B MXFP8 (8 GB200)", "gb200", "mxfp8"),
    ):
        run = rows[name]
        assert (run.device.name, run.timing.fp8_recipe, run.training.micro_batch_size) == (device, recipe, 2)
        assert run.timing.cuda_graph_impl == "full_iteration"
    # GBS 128 of 8192 tokens on 8 GB200 at 31,508 tokens/s each: 1,048,576 / 252,064 = 4.1599 s.
    (gb200,) = [row for row in public.public_runs() if row.name == "NeMo Llama 3 8B FP8 (8 GB200)"]
    assert gb200.seconds == pytest.approx(4.1599, rel=1e-4)
    # 405B on 1024 H100: TP 8 · PP 8 · CP 2 = 128 a replica, DP 8; GBS 512 / 8 = 64 micro-batches of one;
    # the embedding and the loss counted as layers: 126 + 2 over 8 · 8 virtual stages of two.
    llama = rows["NeMo Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)"]
    assert (llama.parallel.dp, llama.parallel.cp, llama.training.micro_batches) == (8, 2, 64)
    assert llama.layout_cells() is not None and sum(map(sum, llama.layout_cells())) == 126
    assert llama.timing.matmul_dtype == "fp8" and llama.timing.overlap.tp == 1.0
    # bf16_with_fp8_current_scaling_mixed sets fp8_param_gather (mixed_precision.py, v0.2.0), as the MXFP8 preset
    assert llama.timing.fp8_param_gather and b200.timing.fp8_param_gather
    # Qwen3 30B on 16 H100: PP 2, so DP 8; its preset's MBS 1 and VP 12 (bench/_nemo.py, not the table's 2 and
    # 24): GBS 512 / (MBS 1 · 8) = 64; EP 8 with the combined 1F1B.
    qwen = rows["NeMo Qwen3 30B-A3B FP8 PP2 EP8 (16 H100)"]
    assert (qwen.parallel.dp, qwen.parallel.ep, qwen.training.micro_batches) == (8, 8, 64)
    assert (qwen.training.micro_batch_size, qwen.parallel.vpp) == (1, 12)
    assert qwen.parallel.overlap_moe_expert_parallel_comm
    # moe_a2a_overlap also delays the weight gradients (helpers.py set_moe_a2a_overlap_overrides, v0.2.0);
    # the 30B on 8 B200 sets no moe_a2a_overlap (QWEN3_30B_A3B_B200_FP8_CS_BASE_CONFIG)
    assert qwen.timing.delay_wgrad_compute
    assert not rows["NeMo Qwen3 30B-A3B MXFP8 EP8 (8 B200)"].timing.delay_wgrad_compute
    # Qwen3 235B MXFP8 on 64 B200: qwen3_235b_a22b_b200_config (v0.2.0) turns overlap_param_gather off for
    # fp8_mx, so the gathers run after the step, not with it, though DP 8, PP 8 and VP 2 all exceed 1;
    # the other Qwen3 rows keep them behind the forward.
    apart = rows["NeMo Qwen3 235B MXFP8 PP8 EP8 (64 B200)"]
    assert (apart.parallel.dp, apart.parallel.pp) == (8, 8)
    assert apart.timing.overlap.param_gather == 0.0 and not apart.timing.overlap_param_gather_with_optimizer_step
    assert rows["NeMo Qwen3 235B FP8 TP2 PP8 EP32 (256 H100)"].timing.overlap_param_gather_with_optimizer_step
    assert qwen.timing.overlap.param_gather == 1.0


def test_megatron_bridge_card_rows_take_the_h100_recipe_with_only_the_overlap_changed(public):
    rows = [row for row in public.public_runs() if row.source == public.BRIDGE_CARDS]
    runs = {row.name: public.config(row) for row in rows}
    assert len(runs) == 2
    # qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config (Megatron-Bridge 8198fd9cd): TP 1, PP 1, EP 16 on 16 H100, so DP
    # 16; GBS 1024 / (MBS 1 · 16) = 64 micro-batches; BF16 GEMMs, HybridEP on 32 SMs (_benchmark_common), TE graphs
    # of the router and its preprocessing, delay_wgrad_compute off in both
    for run in runs.values():
        assert (run.parallel.dp, run.parallel.ep, run.parallel.pp, run.training.micro_batches) == (16, 16, 1, 64)
        assert (run.timing.matmul_dtype, run.timing.moe_dispatcher) == ("bf16", "hybridep")
        assert run.timing.moe_flex_dispatcher_num_sms == 32 and not run.timing.delay_wgrad_compute
        assert run.timing.cuda_graph_modules == ["moe_router", "moe_preprocess"]
        # the commit's submodule 6cd6ea530e is of 2026-07-23, its TE pin 2.17.0, the PyTorch 26.06 base's cuDNN 9.21
        release = run.framework_release
        assert (release.megatron_core, release.transformer_engine) == ("2026-07-23", "2.17")
        assert run.timing.cudnn_version == (9, 21)
    off = runs["Megatron-Bridge Qwen3 30B-A3B BF16 EP16 HybridEP (16 H100)"]
    on = runs["Megatron-Bridge Qwen3 30B-A3B BF16 EP16 HybridEP EP-overlap (16 H100)"]
    assert not off.parallel.overlap_moe_expert_parallel_comm and on.parallel.overlap_moe_expert_parallel_comm
    # the card's 20,992.030 ms a step and the skill's 24.7138 s: seconds as stated, no conversion
    assert sorted(row.seconds for row in rows) == [pytest.approx(20.99203), pytest.approx(24.7138)]


def test_megatron_lm_moe_recipe_rows_take_each_recipe_s_settings(public):
    rows = {row.name: row for row in public.public_runs() if row.source == public.MOE_RECIPES}
    runs = {name: public.config(row) for name, row in rows.items()}
    assert len(runs) == 5
    prefix = "Megatron-LM recipe Qwen3 30B-A3B "
    stash = runs.pop(prefix + "MXFP8 EP16 HybridEP paged stash full-iteration graphs (16 GB200)")
    h100_bf16, h100_fp8 = (
        runs[prefix + "BF16 EP8 HybridEP (32 H100)"],
        runs[prefix + "FP8 blockwise EP8 HybridEP graphs (32 H100)"],
    )
    gb200_bf16, gb200_mx = (
        runs[prefix + "BF16 EP16 HybridEP (16 GB200)"],
        runs[prefix + "MXFP8 EP16 HybridEP graphs (16 GB200)"],
    )
    # examples/moe_recipes/qwen3_30b (Megatron-LM dev): H100 TP 1, PP 1, EP 8 on 32 GPUs, DP 32, GBS 256 / (MBS 1 · 32)
    # = 8 micro-batches; GB200 EP 16 on 16 GPUs, DP 16, GBS 512 / (MBS 4 · 16) = 8
    for run in (h100_bf16, h100_fp8):
        assert (run.parallel.dp, run.parallel.ep, run.training.micro_batch_size, run.training.micro_batches) == (
            32,
            8,
            1,
            8,
        )
        assert run.timing.overlap.dp == 1.0 and run.timing.overlap.param_gather == 1.0
    for run in (gb200_bf16, gb200_mx):
        assert (run.parallel.dp, run.parallel.ep, run.training.micro_batch_size, run.training.micro_batches) == (
            16,
            16,
            4,
            8,
        )
        # neither overlap_grad_reduce nor overlap_param_gather in the GB200 recipes; one NVL72 domain of 16
        assert run.timing.overlap.dp == 0.0 and run.timing.overlap.param_gather == 0.0
        assert run.parallel.devices_per_node == 16
    for run in runs.values():
        # flex/hybridep at HybridEP's own defaults at the recipes' DeepEP (hybrid-ep 7febc6e hybrid_ep_buffer.py:
        # 32 SMs inside one NVLink domain, enable_custom_allgather False), the NaN check (Megatron's default), both
        # logging reductions
        assert run.timing.moe_dispatcher == "hybridep" and run.timing.moe_flex_dispatcher_num_sms == 32
        assert run.timing.hybridep_custom_allgather is False
        assert run.timing.check_for_nan_in_grad and run.timing.log_params_norm and run.timing.log_num_zeros_in_grad
        assert run.training.moe.router.force_balance
    # and every recipe's ARGS `moe_router_dtype: fp32`, the paged-stash one's too
    assert {run.training.moe.router_dtype for run in (*runs.values(), stash)} == {"fp32"}
    assert (h100_bf16.timing.matmul_dtype, gb200_bf16.timing.matmul_dtype) == ("bf16", "bf16")
    assert (h100_fp8.timing.fp8_recipe, gb200_mx.timing.fp8_recipe) == ("blockwise", "mxfp8")
    assert h100_fp8.timing.fp8_param_gather and not gb200_mx.timing.fp8_param_gather
    for run in (h100_fp8, gb200_mx):
        assert run.timing.cuda_graph_modules == ["attn", "moe_router", "moe_preprocess"]
    assert not h100_bf16.timing.cuda_graph_modules and not gb200_bf16.timing.cuda_graph_modules
    # Megatron's FLOPs a token (training.py transformer_flops): a layer's attention linears 6·2048·(4096 + 2·512) +
    # 6·4096·2048 = 62,914,560 + 50,331,648 = 113,246,208, its experts 6·2048·768·8·3 = 226,492,416, so 48 layers
    # 16,307,453,952; logits 6·2048·151,936 = 1,866,989,568; the causal core 6·4096·4096·48 = 4,831,838,208 a
    # token at sequence 4096: 23,006,281,728. The step is GBS · 4096 tokens of that over GPUs · TFLOP/s.
    per_token = 23_006_281_728
    expected = {
        prefix + "BF16 EP8 HybridEP (32 H100)": 256 * 4096 * per_token / (32 * 234.1e12),  # 3.2203 s
        prefix + "FP8 blockwise EP8 HybridEP graphs (32 H100)": 256 * 4096 * per_token / (32 * 232.4e12),  # 3.2438
        prefix + "BF16 EP16 HybridEP (16 GB200)": 512 * 4096 * per_token / (16 * 528e12),  # 5.7111 s
        prefix + "MXFP8 EP16 HybridEP graphs (16 GB200)": 512 * 4096 * per_token / (16 * 514e12),  # 5.8667 s
    }
    # the paged-stash recipe (mxfp8_16GPU_TP1PP1EP16_paged_stash.yaml): 646.8 TFLOP/s, 5.8667 · 514 / 646.8 = 4.6622 s
    expected[prefix + "MXFP8 EP16 HybridEP paged stash full-iteration graphs (16 GB200)"] = (
        512 * 4096 * per_token / (16 * 646.8e12)
    )
    assert {name: row.seconds for name, row in rows.items()} == pytest.approx(expected, rel=1e-12)
    # its settings: the partial-CG recipe's without TE graphs, with full-iteration graphs, the op fuser at a 32-wide
    # GLU interleave, rank capacity 1.5, the paged stash at a device buffer of 1.1 and no host one, no NaN check
    assert (stash.parallel.dp, stash.parallel.ep, stash.training.micro_batches, stash.parallel.devices_per_node) == (
        16,
        16,
        8,
        16,
    )
    assert stash.timing.cuda_graph_impl == "full_iteration" and not stash.timing.cuda_graph_modules
    assert stash.timing.use_transformer_engine_op_fuser and stash.timing.moe_mlp_glu_interleave_size == 32
    assert (stash.timing.moe_expert_rank_capacity_factor, stash.timing.moe_paged_stash) == (1.5, True)
    timing = stash.timing
    factors = (timing.moe_paged_stash_buffer_size_factor_cuda, timing.moe_paged_stash_buffer_size_factor_cpu)
    assert factors == (1.1, 0.0) and not timing.check_for_nan_in_grad
    assert stash.timing.fp8_recipe == "mxfp8" and not stash.timing.fp8_dot_product_attention


def test_megatron_bridge_verification_card_rows_take_each_commit_s_perf_recipe(public):
    rows = {row.name: row for row in public.public_runs() if row.source == public.BRIDGE_VERIFICATION}
    runs = {name: public.config(row) for name, row in rows.items()}
    assert len(runs) == 20
    # deepseek_v3_pretrain_1024gpu_h100_bf16_config at 79308d0d9: TP 2, PP 8, VP 4, EP 64 on 1024 H100, so
    # DP = 1024 / (2 · 8) = 64 and GBS 16384 / (MBS 1 · 64) = 256 micro-batches; SP on, overlap_grad_reduce off,
    # gathers with the optimizer step, HybridEP (apply_flex_dispatcher_backend on a Hopper), BF16 GEMMs
    deepseek = runs["Megatron-Bridge card DeepSeekV3 BF16 TP2 PP8 VP4 EP64 (1024 H100)"]
    assert (deepseek.parallel.dp, deepseek.parallel.tp, deepseek.parallel.pp, deepseek.parallel.vpp) == (64, 2, 8, 4)
    assert (deepseek.parallel.ep, deepseek.training.micro_batches) == (64, 256)
    assert deepseek.parallel.sequence_parallel and deepseek.timing.overlap.dp == 0.0
    assert deepseek.timing.overlap_param_gather_with_optimizer_step
    assert (deepseek.timing.moe_dispatcher, deepseek.timing.matmul_dtype) == ("hybridep", "bf16")
    # gpt_oss_120b_pretrain_64gpu_gb200_bf16_config at a8038f6d9: EP 64 on 64 GB200, DP 64, GBS 1280 / (MBS 4 · 64)
    # = 5; the base recipe's alltoall and per-token loss (average_in_collective off); the combined 1F1B
    gpt_oss = runs["Megatron-Bridge card GPT-OSS 120B BF16 EP64 (64 GB200)"]
    assert (gpt_oss.parallel.dp, gpt_oss.parallel.ep, gpt_oss.training.micro_batches) == (64, 64, 5)
    assert gpt_oss.timing.moe_dispatcher == "alltoall" and gpt_oss.timing.calculate_per_token_loss
    assert gpt_oss.parallel.overlap_moe_expert_parallel_comm and gpt_oss.timing.delay_wgrad_compute
    # Qwen3 30B at 3a9559f01: the 8198fd9cd H100 recipe (DP 16, 1024 / 16 = 64) plus permute fusion in HybridEP
    qwen = runs["Megatron-Bridge card Qwen3 30B-A3B BF16 EP16 HybridEP EP-overlap permute-in-HybridEP (16 H100)"]
    assert (qwen.parallel.dp, qwen.parallel.ep, qwen.training.micro_batches) == (16, 16, 64)
    assert qwen.timing.moe_permute_fusion_into_hybridep and not qwen.timing.delay_wgrad_compute
    # releases: each commit's Megatron-LM submodule date (14346b65a2 2026-08-12, d12f6c8c9a 2026-08-08, cd4afffa64
    # 2026-07-25), uv.lock's TE (2.18.0+e7c550c5, 2.17.1, 2.17.0+2e559f06), the pytorch:26.06 base's 2.12.0a0
    releases = [
        (run.framework_release.megatron_core, run.framework_release.transformer_engine) for run in runs.values()
    ]
    assert releases[:3] == [("2026-08-12", "2.18"), ("2026-08-08", "2.17"), ("2026-07-25", "2.17")]
    assert {run.framework_release.pytorch for run in list(runs.values())[:3]} == {"2.12.0a0"}
    # the pretrain entries (bounded runs on real data): Qwen3 8B at 619cc20bd, TP 1 on 16 H100, so DP 16 and 1024 /
    # (1 · 16) = 64 micro-batches, dense, NaN checks on (the card's command), rope fusion at Megatron-Core's default
    # off; in the card's container pytorch:26.04-py3 (PyTorch 2.11.0a0, cuDNN 9.20), at submodule adfb8ec792
    # (2026-07-20)
    dense = runs["Megatron-Bridge card Qwen3 8B BF16 DP16 (16 H100)"]
    assert (dense.parallel.dp, dense.parallel.tp, dense.training.micro_batches) == (16, 1, 64)
    assert dense.timing.check_for_nan_in_grad and not dense.timing.rope_fusion
    assert (dense.framework_release.megatron_core, dense.framework_release.pytorch) == ("2026-07-20", "2.11.0a0")
    assert dense.timing.cudnn_version == (9, 20) and dense.timing.ddp_average_in_collective
    # Qwen3 30B at 5b9d9cf50 (submodule 61f31145df, 2026-07-17): EP 16, DP 16, 64 micro-batches, no combined
    # 1F1B, HybridEP, natural routing (the card's moe_router_force_load_balancing=false)
    natural = runs["Megatron-Bridge card Qwen3 30B-A3B BF16 EP16 HybridEP natural routing (16 H100)"]
    assert (natural.parallel.dp, natural.parallel.ep, natural.training.micro_batches) == (16, 16, 64)
    assert not natural.parallel.overlap_moe_expert_parallel_comm and natural.timing.moe_dispatcher == "hybridep"
    assert not natural.training.moe.router.force_balance and natural.timing.check_for_nan_in_grad
    assert natural.framework_release.megatron_core == "2026-07-17"
    # seconds: the card's last_10_steps_step_time_ms_avg / 1000 (61,756.130; 4,995.630; 20,147.290 ms), which the
    # card's own tokens/s per GPU agree with: GBS · 4096 / (GPUs · s) = 16384 · 4096 / (1024 · 61.75613) = 1,061.2,
    # 1280 · 4096 / (64 · 4.99563) = 16,398.3, 1024 · 4096 / (16 · 20.14729) = 13,011.4
    # and 25,070.320 and 30,289.550 ms / 1000: 1024 · 4096 / (16 · 25.07032) = 10,456.3 and
    # 1024 · 4096 / (16 · 30.28955) = 8,654.6, as the card states
    # GPT-OSS 120B at a8038f6d9: TP 2, PP 4 on 64 H100, so DP = 64 / (2 · 4) = 8 and GBS 512 / (MBS 1 · 8) = 64;
    # EP 16, SP on, FP32 gradient reduction (`_pretrain_common`'s ddp.grad_reduce_in_fp32), per-token loss
    gpt_h100 = runs["Megatron-Bridge card GPT-OSS 120B BF16 TP2 PP4 EP16 natural routing (64 H100)"]
    assert (gpt_h100.parallel.dp, gpt_h100.parallel.tp, gpt_h100.parallel.pp, gpt_h100.parallel.ep) == (8, 2, 4, 16)
    assert gpt_h100.training.micro_batches == 64 and gpt_h100.training.grad_bytes == 4
    assert gpt_h100.parallel.sequence_parallel and gpt_h100.timing.calculate_per_token_loss
    assert not gpt_h100.timing.ddp_average_in_collective and gpt_h100.timing.moe_dispatcher == "alltoall"
    # both GPT-OSS pretrain entries train the rp2 tokenizer's vocabulary (Llama's SentencePiece, 32,000 pieces: the
    # deepseek-v4-flash card's "token IDs 0-31999"; recipes/common.py `_pretrain_common` use_tokenizer_vocab_size
    # True from af17edf52), padded to 128 · TP 2 = 256: 32,000 / 256 = 125, so 32,000 (not 201,088)
    assert gpt_h100.vocab_size("llm") == 32000 and gpt_h100.specs["llm"].num_layers == 36
    # Moonlight at 411c6b1dc: EP 8 on 16 H100 (DP 16), GBS 1024 / (MBS 2 · 16) = 32; 27 layers, 64 experts top 6
    moonlight = runs["Megatron-Bridge card Moonlight 16B-A3B BF16 EP8 HybridEP EP-overlap natural routing (16 H100)"]
    assert (moonlight.parallel.dp, moonlight.parallel.ep, moonlight.training.micro_batches) == (16, 8, 32)
    assert moonlight.parallel.overlap_moe_expert_parallel_comm and moonlight.timing.delay_wgrad_compute
    assert moonlight.timing.moe_dispatcher == "hybridep" and moonlight.timing.moe_flex_dispatcher_num_sms == 32
    assert moonlight.framework_release.megatron_core == "2026-07-21"
    # GPT-OSS 20B at 6799f0997: TP 2, PP 4 on 16 H100, DP = 16 / (2 · 4) = 2, 512 / 2 = 256 micro-batches, EP 4;
    # 24 layers of 32 experts (openai/gpt-oss-20b config.json)
    small = runs["Megatron-Bridge card GPT-OSS 20B BF16 TP2 PP4 EP4 natural routing (16 H100)"]
    assert (small.parallel.dp, small.parallel.ep, small.training.micro_batches) == (2, 4, 256)
    spec = small.specs["llm"]
    assert (spec.num_layers, spec.num_experts, spec.experts_per_token) == (24, 32, 4)
    assert small.vocab_size("llm") == 32000
    # Qwen3 30B MXFP8 at 487f56398 (`qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_functional_config`): EP 8 on 8 GB200,
    # DP 8, 512 / (4 · 8) = 16 micro-batches (the card's "16-way gradient accumulation"), MXFP8 with its parameter
    # gathers, TE's FP8 attention, the combined 1F1B with delayed weight gradients, one NVLink domain of 8, cuDNN
    # 9.21 (MXFP8 attention needs 9.21: TE v2.17.0 utils.py `get_attention_backend`)
    label = "Qwen3 30B-A3B MXFP8 EP8 HybridEP EP-overlap FP8 attention natural routing (8 GB200)"
    mx = runs[f"Megatron-Bridge card {label}"]
    assert (mx.parallel.dp, mx.parallel.ep, mx.training.micro_batches, mx.parallel.devices_per_node) == (8, 8, 16, 8)
    assert (mx.timing.matmul_dtype, mx.timing.fp8_recipe) == ("fp8", "mxfp8") and mx.timing.fp8_param_gather
    assert mx.timing.fp8_dot_product_attention and mx.timing.cudnn_version == (9, 21)
    assert mx.parallel.overlap_moe_expert_parallel_comm and mx.timing.delay_wgrad_compute
    assert not mx.training.moe.router.force_balance and mx.training.grad_bytes == 2
    # the recipe's use_transformer_engine_op_fuser, moe_mlp_glu_interleave_size 32 and NVTE_CUTEDSL_FUSED_GROUPED_MLP=1:
    # TE's fused grouped MLP (Megatron-Core 6cd6ea530e `TEGroupedMLP._fused_forward`), without a rank capacity
    assert mx.timing.use_transformer_engine_op_fuser and mx.timing.moe_mlp_glu_interleave_size == 32
    assert mx.timing.moe_expert_rank_capacity_factor is None and not mx.timing.moe_paged_stash
    assert (mx.framework_release.megatron_core, mx.framework_release.transformer_engine) == ("2026-07-23", "2.17")
    seconds = [row.seconds for row in rows.values()][:9]
    stated = [61.75613, 4.99563, 20.14729, 25.07032, 30.28955, 16.66493, 11.63635, 22.40088, 12.36234]
    assert seconds == [pytest.approx(value) for value in stated]
    published = [(16384, 1024, 1061.206), (1280, 64, 16398.332), (1024, 16, 13011.378), (1024, 16, 10456.348)]
    published.append((1024, 16, 8654.602))
    # 512 · 4096 / (64 · 16.66493) = 1,966.3 and 1024 · 4096 / (16 · 11.63635) = 22,528.0, as the cards state
    # and 512 · 4096 / (16 · 22.40088) = 5,851.2
    published += [(512, 64, 1966.285), (1024, 16, 22528.026), (512, 16, 5851.199)]
    # and 512 · 4096 / (8 · 12.36234) = 21,205.0, the GB200 entry's 21,205.047
    published.append((512, 8, 21205.047))
    for (gbs, gpus, tokens), s in zip(published, seconds, strict=True):
        assert gbs * 4096 / (gpus * s) == pytest.approx(tokens, rel=1e-5)


def test_the_mxfp8_blackwell_card_rows_take_the_paged_stash_recipes(public):
    cards = [row for row in public.public_runs() if row.source == public.BRIDGE_VERIFICATION]
    rows = {row.name: row for row in cards if "paged stash" in row.name}
    runs = {name: public.config(row) for name, row in rows.items()}
    assert len(runs) == 11
    # `_enable_hybridep_full_iteration_mxfp8` (perf_recipes/qwen/common.py at 6e1b47893, 0480586879, fbb7570cf):
    # full-iteration graphs, the op fuser with a 32-wide GLU interleave, rank capacity 1.5, the paged stash with
    # buffers of 1.2 (device) and 1.0 (host), FP8 attention, the combined 1F1B with delayed weight gradients
    for run in runs.values():
        timing = run.timing
        assert (timing.cuda_graph_impl, timing.moe_dispatcher, timing.fp8_recipe) == (
            "full_iteration",
            "hybridep",
            "mxfp8",
        )
        assert timing.use_transformer_engine_op_fuser and timing.moe_mlp_glu_interleave_size == 32
        assert (timing.moe_expert_rank_capacity_factor, timing.moe_paged_stash) == (1.5, True)
        factors = (timing.moe_paged_stash_buffer_size_factor_cuda, timing.moe_paged_stash_buffer_size_factor_cpu)
        assert factors == (1.2, 1.0)
        assert run.parallel.overlap_moe_expert_parallel_comm and timing.delay_wgrad_compute
        assert run.parallel.tp == 1 and run.training.moe.router.force_balance
    # (GPUs, DP, micro-batches, MBS): GB200 at 6e1b47893 MBS 4, GBS 512 / (4 · 8) = 16; GB300 at 0480586879 and the
    # weak-scaling points at fbb7570cf MBS 8: 512 / (8 · 8) = 2048 / (8 · 32) = 8192 / (8 · 128) = 16384 / (8 · 256) = 8
    # Qwen3 235B (94 + 2 counted layers): GB200 at 0480586879 PP 8, VP 3, MBS 1: DP 256 / 8 = 32, 8192 / 32 = 256;
    # GB300 at fbb7570cf PP 4, VP 12, MBS 2: DP 64, 8192 / (2 · 64) = 64. GPT-OSS 120B GB300 at 0480586879: EP 16 on
    # 64, DP 64, 1280 / (4 · 64) = 5. DeepSeek-V3 at 79308d0d9, GBS 4096, MBS 1: GB200 PP 4, VP 4, EP 64, DP 64,
    # 4096 / 64 = 64; GB300 PP 2, VP 8, EP 32, DP 128, 4096 / 128 = 32
    shapes = [
        (r.parallel.dp, r.parallel.pp, r.parallel.ep, r.training.micro_batches, r.training.micro_batch_size)
        for r in runs.values()
    ]
    assert shapes == [
        (8, 1, 8, 16, 4),
        (8, 1, 8, 8, 8),
        (8, 1, 8, 8, 8),
        (32, 1, 8, 8, 8),
        (128, 1, 8, 8, 8),
        (256, 1, 8, 8, 8),
        (32, 8, 32, 256, 1),
        (64, 4, 32, 64, 2),
        (64, 1, 16, 5, 4),
        (64, 4, 64, 64, 1),
        (128, 2, 32, 32, 1),
    ]
    releases = [(r.framework_release.megatron_core, r.framework_release.transformer_engine) for r in runs.values()]
    assert releases == [("2026-07-23", "2.17")] + [("2026-08-13", "2.18")] * 8 + [("2026-08-12", "2.18")] * 2
    # FP8 attention: every recipe but DeepSeek-V3's GB200 (`_enable_deepseek_full_iteration_mxfp8`'s default off)
    assert [r.timing.fp8_dot_product_attention for r in runs.values()] == [True] * 9 + [False, True]
    # the cards' last_10_steps_step_time_ms_avg / 1000 agree with their tokens/s per GPU: GBS · 4096 / (GPUs · s)
    published = [(512, 8, 40322.898), (512, 8, 44773.361), (512, 8, 44511.004), (2048, 32, 45086.158)]
    published += [(8192, 128, 44951.404), (16384, 256, 45052.607), (8192, 256, 7320.274), (8192, 256, 8784.492)]
    published += [(1280, 64, 33017.081), (4096, 256, 4734.856), (4096, 256, 6143.635)]
    for (gbs, gpus, tokens), row in zip(published, rows.values(), strict=True):
        assert gbs * 4096 / (gpus * row.seconds) == pytest.approx(tokens, rel=1e-5)


def test_every_row_runs_and_the_mean_error_stays_bounded(public):
    results = public.evaluate()
    assert len(results) == len(public.public_runs())
    found = public.groups(results)
    ci, nemo, titan = found["Megatron CI"], found["NeMo 25.11 performance-summary"], found["other torchtitan benchmark"]
    tables = found["published tables'"]
    assert sum(map(len, found.values())) == len(results)
    assert len(ci) == 6 and len(tables) == 18
    # 27 cards' rows and, from session 32, research/deepseek2/readme.md's DeepSeek-V2 236B finetune: 28
    assert len(found["MindFormers model-card"]) == 28
    # A guard, not a fit: the mean absolute error today is 14.8% over the published tables' runs and
    # 27.0% over Megatron's CI runs (docs/timing-validation.md: ppb's layers run faster than Megatron's runs on
    # both H100 and A100); the aim is 5%.
    assert public.mean_error(tables) < 0.16
    assert public.mean_error(ci) < 0.30
    # NeMo 25.11's rows, held out: 28.5% today (docs/timing-validation.md), the B200 MoE rows the worst (host-bound)
    assert public.mean_error(nemo) < 0.40
    # torchtitan's compiled, Float8, 2D-4D rows, held out: 22.6% today, every row fast (docs/timing-validation.md)
    assert public.mean_error(titan) < 0.30


def test_megatron_ci_seconds_are_the_median_of_the_steady_logged_iterations(public):
    rows = {row.name: row for row in public.public_runs()}
    # gpt3_7b_tp1_pp4 on H100: 11 values at iterations 4-24; sorted, the 6th is 1.15017
    # (1.14861, 1.14909, 1.14912, 1.14967, 1.1501 below it; 1.15077, 1.15105, 1.15138, 1.15255, 1.16377 above).
    assert rows["Megatron CI GPT 7B TP1 PP4 (H100)"].seconds == pytest.approx(1.15017)
    # gpt3_7b_tp4_pp1 on A100: two values, at iterations 10 and 20: (2.57769 + 2.596) / 2 = 2.586845.
    assert rows["Megatron CI GPT 7B TP4 PP1 (A100)"].seconds == pytest.approx(2.586845)
    # the layout case, iterations 5-50 (10 values, the first still warming up at 2.06 s): the mean of
    # the 5th and 6th sorted, (1.09805 + 1.10049) / 2 = 1.09927.
    assert rows["Megatron CI MoE-MLA layout, selective recompute (H100)"].seconds == pytest.approx(1.09927)
    for row in rows.values():
        if row.source.startswith(public.MEGATRON_TESTS):
            assert "golden_values_dev_dgx_" in row.source and "values of " in row.source


def test_the_power_limited_hopper_ceiling_reproduces_transformer_engine_s_h200_nvl_measurement(public):
    # TransformerEngine docs/examples/gemm_profiling/gemm_profiling.rst (commit 1609c890e), H200 NVL,
    # BF16, M = 31·512 = 15,872 tokens of a hidden-4096, FFN-16384 layer: forward GEMMs (QKV
    # 15872×12288×4096, output 15872×4096×4096, MLP up 15872×16384×4096, down 15872×4096×16384) in
    # 10.653 ms, their input gradients in 10.813 ms and weight gradients in 10.548 ms; 2·15872·4096·49152
    # = 6.391e12 FLOPs each (600, 591, 606 TFLOP/s).
    device = DEVICE_CATALOG["h100-80gb"].replace(
        peak_tflops=public.H200_NVL_PEAK_TFLOPS, matmul_efficiency=public.H200_NVL_GEMM_CEILING
    )
    kernels = Kernels.from_device(device, "bf16")
    m, h, f = 15872, 4096, 16384
    forward = [(m, 3 * h, h), (m, h, h), (m, f, h), (m, h, f)]
    input_grad = [(m, h, 3 * h), (m, h, h), (m, h, f), (m, f, h)]
    weight_grad = [(3 * h, h, m), (h, h, m), (f, h, m), (h, f, m)]
    for shapes, measured_ms in ((forward, 10.653), (input_grad, 10.813), (weight_grad, 10.548)):
        modelled_ms = sum(kernels.gemm_compute_s(*shape) for shape in shapes) * 1e3
        assert modelled_ms == pytest.approx(measured_ms, rel=0.025)
    # The torchtitan rows' H100 runs its GEMMs at the same TFLOP/s over its own peak.
    titan = public.TITAN_H100
    assert titan["matmul_efficiency"] * titan["peak_tflops"] == pytest.approx(0.732 * 835.5, rel=1e-3)
    # The same example pre-quantized ("raw GEMM kernel throughput"), FP8 current scaling: 5.577 /
    # 5.661 / 5.547 ms for the same 6.391e12 FLOPs each (1,146 / 1,129 / 1,152 TFLOP/s): at the
    # catalog's H100 FP8 fraction of the NVL's FP8 peak (2 × 835.5): 5.488 / 5.518 / 5.563 ms (−1.6%, −2.5%, +0.3%).
    fp8 = Kernels.from_device(
        device.replace(fp8_matmul_efficiency=public.H200_NVL_FP8_CEILING), "bf16", matmul_dtype="fp8"
    )
    assert DEVICE_CATALOG["h100-80gb"].fp8_matmul_efficiency == public.H200_NVL_FP8_CEILING
    for shapes, measured_ms in ((forward, 5.577), (input_grad, 5.661), (weight_grad, 5.547)):
        modelled_ms = sum(fp8.gemm_compute_s(*shape) for shape in shapes) * 1e3
        assert modelled_ms == pytest.approx(measured_ms, rel=0.03)
    assert titan["fp8_matmul_efficiency"] * titan["peak_tflops"] == pytest.approx(0.709 * 835.5, rel=1e-3)


# deepseek-ai/DeepGEMM README (Feb 2025), H800, FP8 with fine-grained scaling: (M, N, K, groups, TFLOP/s).
DEEPGEMM_H800 = (
    (4096, 2112, 7168, 1, 1058),
    (4096, 24576, 1536, 1, 990),
    (4096, 32768, 512, 1, 590),
    (4096, 7168, 16384, 1, 1358),
    (4096, 4096, 7168, 1, 1304),
    (4096, 7168, 2048, 1, 1025),
    (8192, 4096, 7168, 4, 1297),  # grouped, contiguous layout: 4 groups of 8192 rows
    (8192, 7168, 2048, 4, 1099),
    (4096, 4096, 7168, 8, 1288),
    (4096, 7168, 2048, 8, 1093),
)


def test_deepseek_s_fp8_kernels_reproduce_deepgemm_s_h800_measurements(public):
    # 2·M·N·K·groups FLOPs over our modelled seconds against DeepGEMM's TFLOP/s, each within 7.5%;
    # e.g. 4096×32768×512 (K short): 1.374e11 FLOPs in 233 us, 590 TFLOP/s measured.
    device = DEVICE_CATALOG["h800"].replace(
        fp8_matmul_efficiency=public.DEEPGEMM_CEILING, fp8_tile_overhead_us=public.DEEPGEMM_TILE_US
    )
    kernels = Kernels.from_device(device, "bf16", matmul_dtype="fp8")
    for m, n, k, groups, measured in DEEPGEMM_H800:
        modelled = 2 * m * n * k * groups / kernels.gemm_compute_s(m, n, k, groups) / 1e12
        assert modelled == pytest.approx(measured, rel=0.075), (m, n, k, groups)
    # Without the per-tile time the short-K shapes come out far too fast (the catalog's MAMF ceiling).
    plain = Kernels.from_device(DEVICE_CATALOG["h800"], "bf16", matmul_dtype="fp8")
    assert 2 * 4096 * 32768 * 512 / plain.gemm_compute_s(4096, 32768, 512) / 1e12 > 2 * 590


# FlashAttention-3 paper (Shah et al. 2024), Fig. 5 and 6: cuDNN's attention on an H100 80GB SXM5, head
# size 128, BF16, 16k tokens a batch (batch 16384 / s) over 16 heads (hidden 2048), TFLOPS/s by sequence
# length; causal FLOPs counted as half. What TransformerEngine runs on sm90.
CUDNN_H100 = {
    "forward": {512: 497, 1024: 574, 2048: 617, 4096: 609, 8192: 600, 16384: 595},
    "forward causal": {512: 315, 1024: 410, 2048: 484, 4096: 518, 8192: 529, 16384: 539},
    "backward": {1024: 408, 2048: 465, 4096: 499, 8192: 518, 16384: 516},
}


def test_hopper_attention_follows_cudnn_s_measured_rates():
    """The device's levels are the 16k no-mask points and its curves by mask and length these figures
    (`ppb_core.timing.attention_rates`): every point comes back at −3.0%, the waves (2048 query blocks
    over 2112 slots: 0.97), which the measured level carries already (before the curves, the sequence
    ramp and a causal half-block gave the causal forward within 5%, the rest within 12%)."""
    kernels = Kernels.from_device(DEVICE_CATALOG["h100-80gb"])
    for series, points in CUDNN_H100.items():
        causal = "causal" in series
        for s, measured in points.items():
            sequences = 16384 // s * 16
            mean_keys = (s + 1) / 2 if causal else s
            rate = 989 * kernels.attention_efficiency(series == "backward", sequences, s, mean_keys, 128, causal)
            assert rate == pytest.approx(measured * 2048 / 2112, rel=1e-3), (series, s, rate)


# cuDNN 9.22 on a GB200, BF16, head size 128, Llama 3.1 405B's 64 query and 8 KV heads, batch 2, TFLOP/s
# (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1/gb200/
# llama3.1_20260424_100750.csv at fb682ce; causal = its top_left mask, FLOPs halved)
CUDNN_GB200 = {
    "forward": {2048: 1433, 4096: 1599, 8192: 1771, 16384: 1697, 32768: 1634},
    "backward": {2048: 1124, 4096: 1350, 8192: 1404, 16384: 1374, 32768: 1262},
    "forward causal": {2048: 1097, 4096: 1408, 8192: 1574, 16384: 1708, 32768: 1622},
    "backward causal": {2048: 885, 4096: 1148, 8192: 1332, 16384: 1328, 32768: 1226},
}


def test_blackwell_attention_follows_cudnn_s_measured_gb200_rates():
    """B200's levels: the GB200 16k no-mask points at the two parts' measured attention ratio, 0.918
    (aiconfigurator's power-sampled vLLM 0.22 context-attention tables, the catalog's comment; their MAMF ratio
    1745/1822 before): forward 1697·0.918 = 1557.8, / 2250 = 0.692; backward 1374·0.918 = 1261.3, / 2250 =
    0.561. The curves by mask and length are this table (`ppb_core.timing.attention_rates`),
    so every point, 2k to 32k, comes back to the waves: 128 (sequence, head) pairs of s/128 query blocks
    over 148 SMs, at 2k 2048 blocks in 14 waves (0.988), at 16k 16384 in 111 (0.997). (Before the
    curves, the sm90-fitted ramp made the 2k points 10% to 28% fast.)"""
    b200 = DEVICE_CATALOG["b200"]
    # the measured ratio sits within 1.1% of the SMs times their maximum clocks, 148 · 1965 / (152 · 2062) = 0.928
    assert B200_OVER_GB200_ATTENTION == 0.918 == pytest.approx(148 * 1965 / (152 * 2062), rel=0.015)
    assert b200.attention_forward_efficiency == pytest.approx(1697 * 0.918 / 2250, abs=5e-4) == 0.692
    assert b200.attention_backward_efficiency == pytest.approx(1374 * 0.918 / 2250, abs=5e-4) == 0.561
    kernels = Kernels.from_device(b200)
    for series, points in CUDNN_GB200.items():
        causal = "causal" in series
        for s, measured in points.items():
            mean_keys = (s + 1) / 2 if causal else s
            blocks = 128 * s // 128
            waves = blocks / (-(-blocks // 148) * 148)
            rate = 2250 * kernels.attention_efficiency("backward" in series, 2 * 64, s, mean_keys, 128, causal)
            # the level's rounding to 3 decimals: within 0.1%
            assert rate == pytest.approx(measured * 0.918 * waves, rel=1e-3), (series, s, rate)


# The same figures at head size 64 (Fig. 5a and 6a: 32 heads of 64, 16k tokens a batch, no mask), cuDNN
# and FlashAttention-2, TFLOPS/s by sequence length.
HEAD64_H100 = {
    "cudnn forward": {512: 335, 1024: 373, 2048: 395, 4096: 408, 8192: 412, 16384: 413},
    # Fig. 5b, causal
    "cudnn forward causal": {512: 225, 1024: 288, 2048: 334, 4096: 363, 8192: 379, 16384: 388},
    "flash2 forward causal": {512: 180, 1024: 229, 2048: 262, 4096: 284, 8192: 295, 16384: 299},
    "cudnn backward": {1024: 348, 2048: 395, 4096: 417, 8192: 432, 16384: 433},
    "flash2 forward": {2048: 318, 4096: 321, 8192: 322, 16384: 324},
    "flash2 backward": {1024: 238, 2048: 264, 4096: 279, 8192: 287, 16384: 291},
}


def _flash_attn_2() -> Kernels:
    """flash-attn 2 itself on the H100 (TransformerEngine's flash backend under Megatron), whose series the
    FlashAttention-3 paper and Dao-AILab's pull requests measure; torchtitan's PyTorch SDPA copy runs its
    forward at 0.938 of it (tests/test_timing_sdpa_flash.py)."""
    return Kernels.from_device(DEVICE_CATALOG["h100-80gb"], "bf16", "megatron", te_attention_backend="flash")


def test_hopper_attention_at_head_size_64_follows_the_measured_rates():
    """cuDNN's head-64 forward runs at 0.694 of its head-128 rate (413 against 595 at 16k), not the
    generic law's 0.90, which made it 25% fast. With that ratio and the head-64 curves by mask and length
    (`ppb_core.timing.attention_rates`) every point comes back to the waves, 4096 query blocks over 4224
    slots (0.970), and the ratios' rounding to 3 decimals (before the curves: forward within 5%, the
    backward and FlashAttention-2 within 8%)."""
    best = Kernels.from_device(DEVICE_CATALOG["h100-80gb"])
    flash2 = _flash_attn_2()
    for series, points in HEAD64_H100.items():
        kernels = flash2 if series.startswith("flash2") else best
        backward = series.endswith("backward")
        causal = series.endswith("causal")
        for s, measured in points.items():
            keys = (s + 1) / 2 if causal else s
            rate = 989 * kernels.attention_efficiency(backward, 16384 // s * 32, s, keys, 64, float(causal))
            assert rate == pytest.approx(measured * 4096 / 4224, rel=2e-3), (series, s)
    # Without the measured ratio (the generic law) the cuDNN forward at 16k comes out 25% fast.
    law = dataclasses.replace(best, attention_head64_forward=0.0)
    assert 989 * law.attention_efficiency(False, 32, 16384, 16384, 64) / 413 - 1 > 0.2


# FlashAttention-2 at head size 128 in the same paper (Fig. 5c, 5d, 6b), what torchtitan's SDPA ran before
# v0.2.2, TFLOPS/s by sequence length; causal FLOPs counted as half.
FLASH2_H100 = {
    "forward": {512: 309, 1024: 350, 2048: 362, 4096: 368, 8192: 370, 16384: 370},
    "forward causal": {512: 191, 1024: 260, 2048: 298, 4096: 319, 8192: 333, 16384: 335},
    "backward": {512: 214, 1024: 260, 2048: 291, 4096: 310, 8192: 318, 16384: 322},
}


def test_sdpa_s_flash_attention_2_follows_its_measured_rates_causal_or_not():
    """FlashAttention-2 (level 370/322 at 16k, no mask) at every measured length and mask:
    the waves (2048 query blocks over 2112 slots) and the levels' rounding (0.374 of 989 = 369.9, 0.326
    = 322.4). The causal forward at 16k runs at 335, 0.905 of the no-mask rate: before the curves ppb gave
    0.977 (a half-block diagonal and the key ramp), pricing a 32k-token torchtitan layer's forward fast."""
    kernels = _flash_attn_2()
    for series, points in FLASH2_H100.items():
        causal = "causal" in series
        backward = series == "backward"
        level = (0.326 / (322 / 989)) if backward else (0.374 / (370 / 989))
        for s, measured in points.items():
            keys = (s + 1) / 2 if causal else s
            rate = 989 * kernels.attention_efficiency(backward, 16384 // s * 16, s, keys, 128, float(causal))
            assert rate == pytest.approx(measured * level * 2048 / 2112, rel=1e-9), (series, s)


def test_the_causal_curves_agree_with_the_other_published_runs():
    """Held out (not used to set the curves). cuDNN's causal forward over its no-mask forward in the
    FlashAttention-3 paper against cuDNN 9.19's own on an H200 (NVIDIA/cudnn-frontend
    results/h200_919_only_cudnn/llama3.1_20260227_034703.csv at df73764: 484/633, 591/671, 644/691,
    673/702 at 2k, 4k, 8k, 16k): 0.784, 0.851, 0.882, 0.906 against 0.765, 0.881, 0.932, 0.959, within
    6% (the newer cuDNN loses less at long sequences); and against the cuDNN of September 2024 in
    cudnn-frontend's earlier benchmark (benchmark/benchmark_results.csv at de355c7, H200: 613.49/704.41,
    645.95/696.52, 649.99/687.97 at 4k, 8k, 16k): 0.871, 0.927, 0.945, within 5%. FlashAttention-2's
    causal forward at 8k in Dao-AILab/flash-attention pull request #1893 (Sept 2025, H100, 2 × 16 heads
    of 128): 306.2 TFLOP/s, ppb 322.8 (+5.4%; 342.5, +11.8%, before the curves). Not reproduced: pull
    request #1791's flash-attn 2.8 build at 8k (causal over no-mask 0.768 forward, 0.988 backward,
    against PyTorch SDPA's 0.884 and 0.902 that ppb follows)."""
    cudnn = Kernels.from_device(DEVICE_CATALOG["h100-80gb"])
    newer = ((2048, 484, 633), (4096, 591, 671), (8192, 644, 691), (16384, 673, 702))
    older = ((4096, 613.49, 704.41), (8192, 645.95, 696.52), (16384, 649.99, 687.97))
    for points, tolerance in ((newer, 0.06), (older, 0.05)):
        for s, causal_rate, plain_rate in points:
            ours = cudnn.attention_efficiency(False, 64, s, (s + 1) / 2, 128, 1.0) / cudnn.attention_efficiency(
                False, 64, s, s, 128
            )
            assert ours == pytest.approx(causal_rate / plain_rate, rel=tolerance), s
    flash2 = _flash_attn_2()
    causal_forward = 4 * 2 * 16 * 8192**2 * 128 / 2
    seconds = flash2.attention_s(causal_forward, 0.0, False, 32, 8192, 4096.5, 128, 1.0)
    assert causal_forward / seconds / 1e12 == pytest.approx(306.2, rel=0.06)


def test_the_transformer_engine_layer_bench_counts_the_layer_s_gemms_and_infers_their_time():
    bench = load_bench("te_layer")
    rows = bench.layer_rows()
    forward = sum(r.flops for r in rows if r.phase == "forward" and bench.op_class(r.name, r.category) == "gemm")
    # 16384 tokens × 4096 inputs into QKV 12288, projection 4096, FC1 16384; FC2 16384 → 4096.
    assert forward == pytest.approx(2 * 16384 * 4096 * (12288 + 4096 + 16384 + 16384))
    # (35.709 − 23.406) / (1 − 18.978/32.014) = 12.303 / 0.40720 = 30.21 ms of BF16 GEMMs.
    inferred = (bench.MEASURED_MS - bench.MEASURED_FP8_MS) / (1 - bench.FP8_OVER_BF16_GEMMS)
    assert inferred == pytest.approx(30.21, abs=0.01)


def test_hopper_gemms_follow_transformer_engine_s_kernels_in_a_tp8_gpt3_layer():
    # NVIDIA/Fuser PR #4844 (nsys, one forward of te.TransformerLayer, GPT-3 175B layer, TP 8 without
    # sequence parallelism, 2048 tokens, 8 H100 80GB HBM3): the QKV GEMM with its bias 288.415 us, the
    # output projection 109.663, FC1 and FC2 384.733 and 401.214 (told apart by FLOPs: bench/te_layer_tp8.py).
    bench = load_bench("te_layer_tp8")
    kernels = Kernels.from_device(DEVICE_CATALOG["h100-80gb"], "bf16")
    shapes = {  # (m, n, k): 2048 tokens; QKV 3·12288/8 wide, projection from 12288/8, FC 4·12288/8 wide
        "qkv": [(2048, 4608, 12288)],
        "out_proj": [(2048, 12288, 1536)],
        "mlp_in + mlp_out": [(2048, 6144, 12288), (2048, 12288, 6144)],
    }
    ours = {name: sum(kernels.gemm_compute_s(m, n, k) for m, n, k in gemms) * 1e6 for name, gemms in shapes.items()}
    # QKV by hand: 128x128 tiles, 16·36 = 576, ⌈576/132⌉ = 5 waves of 2·128·128·12288 FLOPs at
    # 989.4e12·0.803/132 = 6.019e12 a SM (66.9 us), plus 5.3 us: 339.8 us, 17.9% over the kernel cuBLAS ran,
    # whose 192x192 tiles (a size our tile set lacks) make 11·24 = 264 = 2 exact waves.
    assert ours["qkv"] == pytest.approx(339.8, abs=0.5)
    errors = {name: ours[name] / bench.MEASURED_GEMM_US[name] - 1 for name in shapes}
    assert errors["out_proj"] == pytest.approx(0.0, abs=0.05)
    assert errors["mlp_in + mlp_out"] == pytest.approx(0.0, abs=0.05)
    # the four kernels together: 1259 us against 1184 measured (+6.4%): these GEMMs run at our rates
    total = sum(ours.values()) / sum(bench.MEASURED_GEMM_US.values()) - 1
    assert 0.0 < total < 0.10
    # the bench prices the same four through the layer's op table, as a training step's GEMMs: at the H100
    # SXM's back-to-back share of the tiles' ceiling (0.847, `LAYER_GEMM_SHARE_H100`), the fixed 5.3 us kept;
    # 1483 us, +25% over this trace, whose GPU sat idle between its 20 ms all-reduce waits
    step = dataclasses.replace(kernels, gemm_ceiling=kernels.gemm_ceiling * LAYER_GEMM_SHARE_H100)
    stepped = sum(step.gemm_compute_s(m, n, k) for gemms in shapes.values() for m, n, k in gemms) * 1e6
    ms, _ = bench.priced(sequence_parallel=False)
    priced = sum(ms[op, "forward"] for ops in bench.GEMM_OPS.values() for op in ops) * 1e3
    assert priced == pytest.approx(stepped, rel=1e-6)
    assert priced / sum(bench.MEASURED_GEMM_US.values()) - 1 == pytest.approx(0.252, abs=0.002)


def _flash_ms(raw: dict) -> dict[tuple[str, str], float]:
    """Our ms of a one-layer run's flash-attention ops, by (op, pass)."""
    run = parse_run_config(raw, "test")
    model = TimeModel(run)
    layer = next(layer for layer in walk(run).layers if layer.node == BODY)
    rows = model.breakdown(layer, LayerType.NOT_REC_LAYER)
    return {(r.name, r.phase): r.ms for r in rows if r.name.endswith(("flash_scores", "flash_context"))}


def test_attention_dropout_costs_cudnn_its_measured_share_on_hopper():
    # NVIDIA/TransformerEngine issue #3312: FusedAttention, sbhd, H200, forward + backward 0.594 ms at
    # dropout 0 and 0.614 ms at 0.1: 0.614 / 0.594 = 1.03367.
    assert abs(ATTENTION_DROPOUT_COST_SM90 - 0.0337) < 1e-4
    assert DEVICE_CATALOG["h100-80gb"].attention_dropout_cost == ATTENTION_DROPOUT_COST_SM90
    bench = load_bench("te_layer_tp8")
    with_dropout = bench.gpt3_layer(True)  # attention dropout 0.1
    without = {**with_dropout, "models": [{**with_dropout["models"][0]}]}
    without["models"][0]["spec"] = {**with_dropout["models"][0]["spec"], "attention_dropout": 0.0}
    on, off = _flash_ms(with_dropout), _flash_ms(without)
    assert set(on) == set(off) and len(on) == 4  # scores and context, forward and backward
    for key in on:
        assert on[key] == pytest.approx(off[key] * 1.0337, rel=1e-9)
    # No measurement for FlashAttention-2 (torchtitan's SDPA) nor A100: priced as without dropout.
    for framework, device in (("torchtitan", "h100-80gb"), ("megatron", "a100-80gb")):
        edits = {"framework": framework, "device": {"name": device}}
        on, off = _flash_ms({**with_dropout, **edits}), _flash_ms({**without, **edits})
        assert on == off


# XLA's measured sm_90 matmul table (tensorflow/tensorflow third_party/xla/xla/service/gpu/model/
# matmul_interpolator_data.h at 372d578b; median CUPTI kernel times, xla/tools/matmul_perf_table_gen.cc):
# (batch, m, n, k, BF16 FLOP/s), its first 27 sm_90 entries in file order.
XLA_SM90_BF16 = (
    (1, 1024, 2048, 256, 139519467775467),
    (2, 256, 2048, 2048, 332247798870580),
    (1, 256, 2048, 256, 41838443890274),
    (4, 512, 256, 256, 42366707070707),
    (1, 4096, 512, 512, 238821580071174),
    (4, 4096, 256, 2048, 588674245614035),
    (1, 512, 256, 512, 21788592207792),
    (2, 2048, 256, 512, 139230008298755),
    (2, 1024, 2048, 1024, 493447529411764),
    (1, 256, 2048, 4096, 285873755058572),
    (2, 512, 2048, 2048, 525314003913894),
    (4, 1024, 2048, 2048, 712739345502821),
    (1, 4096, 1024, 512, 343707370038412),
    (1, 2048, 2048, 2048, 631984593290170),
    (4, 256, 256, 256, 22550021505376),
    (2, 256, 256, 1024, 36954220264317),
    (1, 256, 512, 4096, 91678775956284),
    (1, 256, 1024, 256, 22671913513513),
    (1, 4096, 4096, 256, 392162828341855),
    (2, 256, 1024, 2048, 216131607085346),
    (2, 2048, 4096, 1024, 678724288242730),
    (2, 4096, 512, 256, 211034163522012),
    (2, 4096, 4096, 2048, 763011394582711),
    (4, 512, 2048, 1024, 487178686025408),
    (4, 1024, 512, 2048, 514244168582375),
    (1, 2048, 512, 2048, 347714321243523),
    (2, 512, 512, 2048, 216480206451612),
)


def test_every_hopper_gemm_kernel_pays_the_fixed_time_xla_s_sm90_table_shows():
    kernels = Kernels.from_device(DEVICE_CATALOG["h100-80gb"], "bf16")
    assert kernels.kernel_s == pytest.approx(5.3e-6)
    # The smallest product, 4 × 256×256×256: 4·2·256³ = 134,217,728 FLOPs at 22.55 TFLOP/s = 5.95 us.
    # The tile model: 64×64 tiles, 4·4·4 = 64 of them, one wave, each 2·64·64·256 FLOPs at a 64×64
    # tile's half rate, 989e12·0.803·0.5/132 a SM: 0.698 us; plus the kernel's 5.3: 6.0 us.
    assert kernels.gemm_compute_s(256, 256, 256, 4) * 1e6 == pytest.approx(0.698 + 5.3, abs=0.01)
    errors = []
    for b, m, n, k, rate in XLA_SM90_BF16:
        measured = 2 * b * m * n * k / rate
        traffic = (m * k + k * n + m * n) * 2 * b
        errors.append(max(kernels.gemm_compute_s(m, n, k, b), kernels.memory_s(traffic)) / measured - 1)
    # Without the fixed time the model is 47% fast on average over these shapes (88% on the smallest);
    # with it 7.3% off, from -25% (4096×4096×256: a k loop of 4 blocks) to +11% (2048×512×2048).
    assert sum(abs(e) for e in errors) / len(errors) < 0.08
    assert min(errors) > -0.26 and max(errors) < 0.12


def test_every_blackwell_gemm_kernel_pays_the_fixed_time_xla_s_sm100_table_shows():
    # XLA's sm_100_B200 table (openxla/xla default_matmul_perf_table.txtpb at 336bb15c), BF16, b = 1:
    # 256x256x256 at 6.765e12 FLOP/s: 2·256³ = 33,554,432 FLOPs in 4.960 us. Ppb's tiles without a fixed
    # time (Blackwell's rule: a tile runs at min(1, Tm·Tn/(Tm+Tn) / 130) of a SM's ceiling): 64×64 tiles,
    # 16 of them split 4 ways over k (64 ≤ 2·148 SMs: one wave), each 2·64·64·64 = 524,288 FLOPs at
    # 2250e12·0.776/148 · 32/130 = 2.9039e12: 0.1805 us; the split's fp32 partial sums written and read
    # back, 2·4·256·256·4 = 2,097,152 B at 7672e9·0.8: 0.3417 us; 0.5222 us in all (every other tiling is
    # slower): 4.44 us beyond it. The three of twice its work, 256x512x256 at 13.400e12, 256x256x512 at
    # 12.593e12, 512x256x256 at 13.568e12 (5.008, 5.329, 4.946 us against tiles of 0.703): 4.31, 4.63,
    # 4.24. Median of the four: (4.31 + 4.44)/2 = 4.37 → 4.4.
    b200 = DEVICE_CATALOG["b200"]
    assert b200.gemm_kernel_us == GEMM_KERNEL_US_B200 == pytest.approx(4.4)
    tiles_only = Kernels.from_device(b200.replace(gemm_kernel_us=0.0), "bf16")
    assert tiles_only.gemm_compute_s(256, 256, 256) * 1e6 == pytest.approx(0.1805 + 0.3417, abs=0.001)
    measured_us = 2 * 256**3 / 6765006451612 * 1e6
    assert measured_us == pytest.approx(4.960, abs=0.001)
    kernels = Kernels.from_device(b200, "bf16")
    assert kernels.gemm_compute_s(256, 256, 256) * 1e6 == pytest.approx(0.5222 + 4.4, abs=0.002)
    assert kernels.gemm_compute_s(256, 256, 256) * 1e6 == pytest.approx(measured_us, rel=0.01)


def test_a_blackwell_fp8_gemm_kernel_pays_its_fixed_time_too():
    # The same table's e4m3 x e4m3 -> bf16 products: 256x256x256 at 6.920e12 FLOP/s, 4.849 us. FP8 tiles
    # on B200: 64×64, 16 split 2 ways, each 1,048,576 FLOPs at 4500e12·0.763/148 · 32/130 = 5.7106e12:
    # 0.1836 us, plus the split's 0.1708 us of fp32 partial sums (1,048,576 B): 0.3545, the best tiling:
    # 4.849 − 0.354 = 4.50 beyond. 256x512x256 at 12.405e12 (5.410 us), 256x256x512 at 13.187e12 (5.089),
    # 512x256x256 at 12.863e12 (5.217), tiles 0.367, 0.525, 0.367: 5.04, 4.56, 4.85.
    # Median of the four: (4.56 + 4.85)/2 = 4.71 → 4.7.
    b200 = DEVICE_CATALOG["b200"]
    assert b200.fp8_gemm_kernel_us == FP8_GEMM_KERNEL_US_B200 == pytest.approx(4.7)
    tiles_only = Kernels.from_device(b200.replace(fp8_gemm_kernel_us=0.0), "bf16", matmul_dtype="fp8")
    assert tiles_only.gemm_compute_s(256, 256, 256) * 1e6 == pytest.approx(0.1836 + 0.1708, abs=0.001)
    kernels = Kernels.from_device(b200, "bf16", matmul_dtype="fp8")
    measured_us = 2 * 256**3 / 6919866364198 * 1e6  # 4.849: the median's 4.7 puts this shape 4% slow
    assert kernels.gemm_compute_s(256, 256, 256) * 1e6 == pytest.approx(measured_us, rel=0.05)


# NVIDIA's aiconfigurator on an H100 SXM, TensorRT-LLM 1.3.0rc20 (ai-dynamo/aiconfigurator 095f58a, systems/data/
# h100_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet, 3 warm-ups and 6 CUDA-graph replays): (m, n, k, per-tensor FP8
# Linear us, BF16 us) at its 18 smallest products; the FP8 op holds its input's cast, which the same collection's
# quantize tables time alone (quantize/trtllm/1.3.0rc20: computescale_perf, scale_matrix_perf) by (m, k), us.
AIC_H100_SMALL = (
    (256, 256, 256, 13.286, 3.206),
    (256, 256, 512, 13.492, 3.421),
    (256, 256, 1024, 13.915, 4.228),
    (256, 512, 256, 12.881, 3.193),
    (256, 512, 512, 13.476, 3.589),
    (256, 512, 1024, 13.961, 4.258),
    (256, 1024, 256, 13.354, 3.211),
    (256, 1024, 512, 13.901, 3.770),
    (256, 1024, 1024, 14.118, 4.832),
    (512, 256, 256, 13.297, 3.229),
    (512, 256, 512, 13.609, 3.665),
    (512, 256, 1024, 14.512, 4.311),
    (512, 512, 256, 13.293, 3.430),
    (512, 512, 512, 13.648, 3.867),
    (512, 512, 1024, 14.135, 4.676),
    (512, 1024, 256, 13.190, 3.462),
    (512, 1024, 512, 14.225, 3.882),
    (512, 1024, 1024, 14.707, 4.847),
)
AIC_H100_CAST = {
    (256, 256): (7.475, 1.471),
    (256, 512): (7.609, 1.488),
    (256, 1024): (7.518, 1.552),
    (512, 256): (7.613, 1.491),
    (512, 512): (7.477, 1.538),
    (512, 1024): (7.444, 1.668),
}


def test_a_hopper_fp8_gemm_kernel_pays_the_bf16_kernel_s_fixed_time():
    # No CUPTI table times H100 FP8 kernels. In aiconfigurator's one harness the FP8 GEMM less its cast runs a
    # median 3.80 us beyond ppb's FP8 tiles at these shapes, the BF16 GEMM 2.42 beyond its tiles (every shape's FP8
    # excess 0.9-2.0 us over BF16's): a small FP8 kernel takes no less than a BF16 one. XLA's CUPTI table on B200
    # (above) has FP8's fixed time BF16's within 0.3 us: H100's FP8 kernels take BF16's 5.3 us, the lower bound.
    h100 = DEVICE_CATALOG["h100-80gb"]
    fp8_tiles = Kernels.from_device(h100.replace(fp8_gemm_kernel_us=0.0), "bf16", matmul_dtype="fp8")
    bf16_tiles = Kernels.from_device(h100.replace(gemm_kernel_us=0.0), "bf16")
    fp8_beyond, bf16_beyond = [], []
    for m, n, k, fp8_us, bf16_us in AIC_H100_SMALL:
        cast_us = sum(AIC_H100_CAST[m, k])
        fp8_beyond.append(fp8_us - cast_us - fp8_tiles.gemm_compute_s(m, n, k) * 1e6)
        bf16_beyond.append(bf16_us - bf16_tiles.gemm_compute_s(m, n, k) * 1e6)
    assert statistics.median(fp8_beyond) == pytest.approx(3.80, abs=0.01)
    assert statistics.median(bf16_beyond) == pytest.approx(2.42, abs=0.01)
    assert min(f - b for f, b in zip(fp8_beyond, bf16_beyond, strict=True)) > 0.9
    assert h100.fp8_gemm_kernel_us == FP8_GEMM_KERNEL_US_HOPPER == h100.gemm_kernel_us == 5.3
    assert DEVICE_CATALOG["h200"].fp8_gemm_kernel_us == 5.3
    assert DEVICE_CATALOG["h800"].fp8_gemm_kernel_us == 0.0  # DeepGEMM's kernels: `fp8_tile_overhead_us`
    kernels = Kernels.from_device(h100, "bf16", matmul_dtype="fp8")
    assert kernels.kernel_s == pytest.approx(5.3e-6)


# XLA's measured sm_100_B200 table (openxla/xla default_matmul_perf_table.txtpb at 336bb15c), b = 1:
# (m, n, k, BF16 FLOP/s) for m = 4096 and 2048×4096×4096, and the largest FP8 (e4m3 × e4m3 → bf16) products
XLA_SM100_BF16 = (
    (4096, 256, 256, 89717732620320),
    (4096, 512, 256, 161708106024096),
    (4096, 1024, 256, 271112693851786),
    (4096, 2048, 256, 403586477729750),
    (4096, 4096, 256, 514706368985559),
    (4096, 256, 512, 160884300869044),
    (4096, 512, 512, 287943637436310),
    (4096, 1024, 512, 465175706270984),
    (4096, 2048, 512, 652334036452004),
    (4096, 4096, 512, 805318951108611),
    (4096, 256, 1024, 283683440951122),
    (4096, 512, 1024, 490573077784123),
    (4096, 1024, 1024, 715648970424060),
    (4096, 2048, 1024, 913822828936170),
    (4096, 4096, 1024, 1075624166291009),
    (4096, 256, 2048, 458766000427259),
    (4096, 512, 2048, 762397673914972),
    (4096, 1024, 2048, 990308345861194),
    (4096, 2048, 2048, 1170011862566826),
    (4096, 4096, 2048, 1277788708367422),
    (4096, 256, 4096, 645132151107773),
    (4096, 512, 4096, 991451361034164),
    (4096, 1024, 4096, 1204928403983728),
    (4096, 2048, 4096, 1343541814655509),
    (4096, 4096, 4096, 1416867213789406),
    (2048, 4096, 4096, 1342544381979447),
)
XLA_SM100_FP8 = (
    (4096, 4096, 4096, 2764981863158106), (4096, 2048, 4096, 2499435394486069), (4096, 4096, 2048, 2484974207564909),
    (4096, 1024, 4096, 1951814267666439), (4096, 2048, 2048, 1833497244823906), (4096, 4096, 1024, 1895395982347749),
    (2048, 4096, 4096, 2491280334106728),
)  # fmt: skip


def test_blackwell_gemms_follow_xla_s_sm100_table():
    """Held out (only the four smallest products set the fixed time): with Blackwell's tile rule (2-SM
    256-wide tiles, a full-rate intensity of 130 a SM) the 26 BF16 shapes come out 6.9% fast on average
    (|error| 14.3%, from −39% at 4096×256×4096 to +24% at 4096×4096×256), 4096³ at 1419 TFLOP/s against
    1417 measured; the 7 FP8 ones 2.5% fast (|error| 5.5%). Under Hopper's rule (128×128 at full rate,
    no pair tiles) the same shapes were 16.7% and 7.9% fast, 4096³ at 1632."""
    b200 = DEVICE_CATALOG["b200"]
    hopper_rule = b200.replace(gemm_full_intensity=64.0, compute_capability=9.0)
    means = {}
    for device in (b200, hopper_rule):
        for table, matmul, io_bytes in ((XLA_SM100_BF16, None, 2), (XLA_SM100_FP8, "fp8", 1)):
            kernels = Kernels.from_device(device, "bf16", matmul_dtype=matmul)
            errors = [
                max(kernels.gemm_compute_s(m, n, k), kernels.memory_s((m * k + k * n + m * n) * io_bytes))
                / (2 * m * n * k / rate)
                - 1
                for m, n, k, rate in table
            ]
            means[device.compute_capability, matmul] = sum(errors) / len(errors)
    assert means[10.0, None] == pytest.approx(-0.069, abs=0.005)
    assert means[10.0, "fp8"] == pytest.approx(-0.025, abs=0.005)
    assert means[9.0, None] == pytest.approx(-0.167, abs=0.005)
    assert means[9.0, "fp8"] == pytest.approx(-0.079, abs=0.005)
    ours_4096 = 2 * 4096**3 / Kernels.from_device(b200, "bf16").gemm_compute_s(4096, 4096, 4096) / 1e12
    assert ours_4096 == pytest.approx(1417, rel=0.01)


def test_b200_collectives_run_at_nccl_s_nvlink5_link_figure():
    # NCCL src/graph/topo.h: SM100_NVLINK_BW 40.1 GB/s a link, NVLink 5's 50 per direction: 0.802
    assert DEVICE_CATALOG["b200"].comm_efficiency == pytest.approx(40.1 / 50)
    assert DEVICE_CATALOG["b200"].intra_node_bandwidth_gbs * DEVICE_CATALOG["b200"].comm_efficiency == pytest.approx(
        18 * 40.1
    )


def test_torchtitan_s_eager_kernels_cost_about_what_its_compiled_runs_save(public):
    # torchtitan's published table (benchmarks/llama3_h100_202412_torchtitan.md, Table 1 and 3): FSDP
    # 5,762 / 5,605 tokens/s per GPU eager, 6,667 / 6,514 with torch.compile (which fuses the
    # element-wise ops our `EAGER_TRAFFIC` prices): the compiled runs take 1/1.157 and 1/1.162 of
    # the eager ones' time. Ours: 1.225 (1.098 with the old RMSNorm count without its fp32 upcast and
    # without repeat_kv); the compiled rows themselves come out 15% fast, as the eager ones were.
    for row, published in zip(public._torchtitan_runs(), (6667 / 5762, 6514 / 5605), strict=True):
        # 9dec370 compiles the blocks only: train.py calls the loss eagerly
        raw = dict(row.raw, timing={**row.raw.get("timing", {}), "torch_compile": True, "compile_loss": False})
        eager = run_iteration(public.config(row)).seconds
        compiled = run_iteration(public.run_config(raw, row.name)).seconds
        assert eager / compiled == pytest.approx(published, abs=0.08)


def test_flash_attention_2_s_deterministic_backward_follows_its_measured_h100_time():
    # Dao-AILab/flash-attention PR #1893 (Sept 2025), H100: head size 128, causal, 8192 tokens,
    # 16 heads, deterministic, batch 2 (its 306.2 TFLOP/s forward in 1.796 ms counts 4·2·16·8192²·128/2
    # FLOPs): "Fav2 bwd: 8.279ms, 166.0 TFLOPS". FlashAttention-2's rates on H100 (SDPA's, FA3 paper)
    # with its deterministic launch (⌈132/32⌉ = 5 splits: 160 blocks, 2 waves) give 8.30 ms (+0.3%; 7.77,
    # -6%, before its causal backward followed PyTorch SDPA's measured causal ratio).
    flash2 = _flash_attn_2()
    kernels = dataclasses.replace(flash2, deterministic_backward=True)
    flops = 2.5 * 4 * 2 * 16 * 8192**2 * 128 / 2
    seconds = kernels.attention_s(flops, 0.0, True, 32, 8192, 4096, 128, 1)
    assert seconds == pytest.approx(8.279e-3, rel=0.02)


def test_the_class_diagnostic_finds_the_factor_that_slows_a_run_to_a_target(public):
    # slow the 7B TP4 A100 run's GEMMs by 1.5 by hand, then ask the bisection for that time back
    raw = public.gpt3_7b_run(4, 1, 1, 2, "a100")
    target = public._slowed(raw, "GEMMs", 1.5)
    assert public.class_factor(raw, target, "GEMMs") == pytest.approx(1.5, rel=1e-4)
    # a run already slower than its target needs no slowing: no factor
    assert public.class_factor(raw, target / 10, "attention") is None


def test_ascend_flash_level_reproduces_the_measured_910b2_kernel():
    # hw-native-sys/pto-isa kernels/manual/common/flash_atten/README.md (9e0503520), "910B2 Multi-Core
    # Comparison": torch_npu's FlashAttentionScore, one (sequence, head) pair, head size 128, no mask,
    # forward; MOps = S·S·128·4. At 32768 tokens 549,755.81 MOps in 3646.173 us, 42.60% of the peak the
    # table counts against (150.78 / 0.4260 = 353.9 TFLOPS), on the part's 24 AI cores.
    b2 = dataclasses.replace(DEVICE_CATALOG["ascend-910b"], peak_tflops=353.9, sm_count=24)
    kernels = Kernels.from_device(b2, "bf16", framework="mindformers")
    flops = 4 * 32768 * 32768 * 128
    assert flops == 549_755_813_888
    assert kernels.attention_s(flops, 0.0, False, 1, 32768, 32768, 128) == pytest.approx(3646.173e-6, rel=0.01)
    # shorter sequences carry the kernel's fixed time, which the level does not: 16384 tokens measured
    # 1118.462 us, priced ~12% less (137,438.95 MOps at the same level)
    shorter = kernels.attention_s(4 * 16384 * 16384 * 128, 0.0, False, 1, 16384, 16384, 128)
    assert 0.85 * 1118.462e-6 < shorter < 1118.462e-6


def test_ascend_gemm_fraction_agrees_with_the_measured_910b2_gemms():
    # zzc0721/torch-performance-test-data issue #109 (Ascend910B2, torch 2.5.1): BF16 square GEMMs,
    # 4096^3 315.36, 8192^3 301.23, 10240^3 300.94 TFLOPS. The catalog's A100 fraction (0.869) on a
    # 910B2 (353.9 TFLOPS, 24 AI cores, the pto-isa table's figures) prices them within 4%:
    b2 = dataclasses.replace(DEVICE_CATALOG["ascend-910b"], peak_tflops=353.9, sm_count=24)
    kernels = Kernels.from_device(b2, "bf16", framework="mindformers")
    for n, measured_tflops in ((4096, 315.36), (8192, 301.23), (10240, 300.94)):
        priced_tflops = 2 * n**3 / kernels.gemm_s(n, n, n) / 1e12
        assert priced_tflops == pytest.approx(measured_tflops, rel=0.04)


def test_llama3_rows_place_one_layer_a_chunk_as_the_paper_says(public):
    """The Llama 3 paper, §3.3.2: one Transformer layer taken from the first and the last stages leaves "the first
    model chunk on the first stage" with "only the embedding" and the last chunk of the last stage with "only output
    projection and loss calculation": a chunk held one layer. 126 layers + 2 = 128 places over PP 16: V = 8."""
    rows = [row for row in public.public_runs() if row.name.startswith("Llama 3 405B")]
    assert len(rows) == 2
    for row in rows:
        placed = walk(public.config(row))
        assert (placed.stages, placed.chunks) == (16, 8)
        cells = {(c, s): placed.in_cell(c, s) for c in range(8) for s in range(16)}
        assert [layer.node for layer in cells[0, 0]] == [HEAD]
        assert [layer.node for layer in cells[7, 15]] == [TAIL]
        others = [cell for key, cell in cells.items() if key not in ((0, 0), (7, 15))]
        assert all([layer.node for layer in cell] == [BODY] for cell in others)
        assert sum(len(cell) for cell in others) == 126
