"""Blackwell Ultra: the catalog's `b300` and `gb300` entries checked by hand against their public figures, NeMo's
published GB300 / B300 rows (bench/_nemo.py) as their presets set them, and `ppb estimate` on a B300."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from bench_modules import load_bench

from ppb_core.cli.main import main
from ppb_core.config.devices import (
    ATTENTION_BACK_TO_BACK_SHARE_B200,
    DEVICE_CATALOG,
    GEMM_FULL_INTENSITY_B200,
    HOST_KERNEL_US_DGX_B200,
    HOST_KERNEL_US_DGX_GB200,
    LAYER_GEMM_SHARE_BLACKWELL,
    MXFP8_MATMUL_RATIO_BLACKWELL,
)
from ppb_core.timing.kernels import Kernels

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
MIB = 2**20


def test_b300_follows_the_dgx_b300_datasheet_and_its_measured_mamf():
    b300 = DEVICE_CATALOG["b300"]
    # DGX B300 datasheet (ml-engineering's table): 2.25 PFLOPS dense BF16, 4.5 dense FP8 a GPU
    assert b300.peak_flops("bf16") == 2250e12 and b300.peak_flops("fp8") == 4500e12
    # nvidia-smi's 275040 MiB is 275040 · 1,048,576 = 288,400,343,040 bytes: the datasheet's "288 GB"
    assert b300.memory_mb * MIB == 288_400_343_040
    assert b300.memory_mb * MIB / 1e9 == pytest.approx(288, rel=2e-3)
    # NVLink 5: 1.8 TB/s bidirectional, 900 GB/s a direction; one 800 Gb/s ConnectX-8 a GPU: 800 / 8 = 100 GB/s
    assert (b300.intra_node_bandwidth_gbs, b300.inter_node_bandwidth_gbs) == (1800 / 2, 800 / 8)
    # 148 SMs (device readings; 8192 dense 16-bit FLOP a clock: 2250e12 / (148 · 8192) = 1.856 GHz, B200's)
    assert b300.sm_count == 148
    # MAMF (ml-engineering): 1769.0 of 2250 = 0.7862, 3353.3 of 4500 = 0.7452
    assert (b300.matmul_efficiency, b300.fp8_matmul_efficiency) == (0.786, 0.745)
    # sm_103; the shares TE's GEMM profiling guide measured on a B300 are its own
    assert b300.compute_capability == 10.3
    assert b300.layer_gemm_share == LAYER_GEMM_SHARE_BLACKWELL
    assert b300.mxfp8_matmul_ratio == MXFP8_MATMUL_RATIO_BLACKWELL
    # inherited: B200's HBM rate, tile rule, attention back-to-back share and DGX host launch time
    b200 = DEVICE_CATALOG["b200"]
    assert (b300.hbm_bandwidth_gbs, b300.gemm_full_intensity) == (b200.hbm_bandwidth_gbs, GEMM_FULL_INTENSITY_B200)
    assert (b300.attention_back_to_back_share, b300.host_kernel_us) == (
        ATTENTION_BACK_TO_BACK_SHARE_B200,
        HOST_KERNEL_US_DGX_B200,
    )
    # attention: NVIDIA's GB300 cuDNN 9.22 rates (2014 forward, 1536 backward at 16k, no mask) at the B300's tensor
    # rate over the GB300's, the layer GEMMs aiconfigurator timed (12.3465 ms B300, 10.4916 GB300, BF16: 1.177):
    # 2014 / 1.177 = 1711.13, / 2250 = 0.76050 (up); 1536 / 1.177 = 1305.0, / 2250 = 0.5800
    assert (b300.attention_forward_efficiency, b300.attention_backward_efficiency) == (0.761, 0.580)


def test_gb300_follows_the_nvl72_specifications():
    gb300 = DEVICE_CATALOG["gb300"]
    # GB300 NVL72: 360 PFLOPS FP16/BF16 and 720 FP8, with sparsity, over 72 GPUs: 2.5 PF and 5 PF dense a GPU
    assert gb300.peak_flops("bf16") == pytest.approx(360e15 / 2 / 72)
    assert gb300.peak_flops("fp8") == pytest.approx(720e15 / 2 / 72)
    # nvidia-smi's 284208 MiB a GPU; 72 of them 72 · 284208 · 1,048,576 = 21.46e12 bytes, the rack's "up to 21 TB"
    assert 72 * gb300.memory_mb * MIB / 1e12 == pytest.approx(21.46, abs=0.01)
    # NVLink 5's 1.8 TB/s a GPU, 900 a direction (the rack's "130 TB/s": 72 · 1.8 = 129.6); 72 ConnectX-8 of 800 Gb/s
    assert gb300.intra_node_bandwidth_gbs == 1800 / 2
    assert gb300.inter_node_bandwidth_gbs == 100.0
    # 148 SMs (device readings; 2500e12 / (148 · 8192) = 2.062 GHz)
    assert gb300.sm_count == 148
    # cuDNN 9.22 on a GB300, 16k no mask: 2014 / 2500 = 0.8056, 1536 / 2500 = 0.6144
    assert (gb300.attention_forward_efficiency, gb300.attention_backward_efficiency) == (0.806, 0.614)
    # inherited from GB200: HBM, the Grace host
    gb200 = DEVICE_CATALOG["gb200"]
    assert (gb300.hbm_bandwidth_gbs, gb300.host_kernel_us) == (gb200.hbm_bandwidth_gbs, HOST_KERNEL_US_DGX_GB200)


def test_gb300_gemms_run_at_the_b300_s_mamf_times_aiconfigurator_s_layer_ratio():
    """NVIDIA's aiconfigurator, TRT-LLM 1.3.0rc20 gemm_perf tables of the "NVIDIA B300 SXM6 AC" and the "NVIDIA
    GB300" (ai-dynamo/aiconfigurator at 095f58a): the 12 GEMMs of TE's guide layer (hidden 4096, FFN 16384) at
    16,384 tokens, ms, in the order fprop QKV, proj, FC1, FC2; dgrad the same; wgrad the same (as 4096 x N x 16384).
    The B300's MAMF (ml-engineering: 1769.0 BF16, 3353.3 FP8) times the B300-over-GB300 time of the layer."""
    b300_bf16 = [0.9053, 0.3444, 1.2747, 1.3528, 1.1039, 0.3444, 1.3528, 1.2747, 1.1152, 0.3166, 1.4808, 1.4808]
    gb300_bf16 = [0.8977, 0.3069, 1.1856, 1.1963, 0.8228, 0.3069, 1.1963, 1.1856, 0.8274, 0.3348, 1.1156, 1.1156]
    b300_fp8 = [0.6124, 0.2849, 0.7269, 0.9205, 0.7996, 0.2849, 0.9205, 0.7269, 0.6464, 0.3071, 0.7813, 0.7813]
    gb300_fp8 = [0.5537, 0.2440, 0.6745, 0.8702, 0.6767, 0.2440, 0.8702, 0.6745, 0.5488, 0.2473, 0.6803, 0.6803]
    # 12.3465 / 10.4916 = 1.1768; 1769.0 · 1.1768 = 2081.8 of 2500 = 0.8327
    bf16_ratio = sum(b300_bf16) / sum(gb300_bf16)
    # FP8 without each GEMM's input cast (the same tables' quantize rows, collector/trtllm/collect_computescale.py:
    # `compute_scale` + `scale_matrix` at each GEMM's m x k input; session 29): 12 casts, ms
    b300_cast = [0.0965, 0.0965, 0.0965, 0.3068, 0.2428, 0.0965, 0.3068, 0.0965, 0.0965, 0.0965, 0.0965, 0.0965]
    gb300_cast = [0.0943, 0.0943, 0.0943, 0.2969, 0.2349, 0.0943, 0.2969, 0.0943, 0.0944, 0.0944, 0.0944, 0.0944]
    # 7.7926 - 1.7249 = 6.0677 over 6.9645 - 1.6778 = 5.2867: 1.1477; 3353.3 · 1.1477 = 3848.6 of 5000 = 0.7697
    fp8_ratio = (sum(b300_fp8) - sum(b300_cast)) / (sum(gb300_fp8) - sum(gb300_cast))
    gb300 = DEVICE_CATALOG["gb300"]
    assert gb300.matmul_efficiency == pytest.approx(1769.0 * bf16_ratio / 2500, abs=5e-4) == 0.833
    assert gb300.fp8_matmul_efficiency == pytest.approx(3353.3 * fp8_ratio / 5000, abs=5e-4) == 0.770
    # the same die, SM count and tile rule as the B300, at its layer shares: the ratio carries over whole
    b300 = DEVICE_CATALOG["b300"]
    assert (gb300.sm_count, gb300.gemm_full_intensity) == (b300.sm_count, b300.gemm_full_intensity)
    assert (gb300.layer_gemm_share, gb300.fp8_layer_gemm_share) == (b300.layer_gemm_share, b300.fp8_layer_gemm_share)


def test_gb300_attention_runs_nvidia_s_gb300_level_along_gb200_s_curves():
    """At 16k without the mask the GB300 level itself: 128 (sequence, head) pairs of 128 query blocks over 148
    SMs, 16384 blocks in 111 waves of 148 (0.99732): 2014 · 0.99732 = 2008.6 (the level's rounding to 0.806:
    within 0.1%). At 2k the curve is GB200's (cudnn-frontend's gb200 file): 1433 / 1697 of the level, 2048
    blocks in 14 waves (0.98842): 2014 · 0.84443 · 0.98842 = 1681.0."""
    kernels = Kernels.from_device(DEVICE_CATALOG["gb300"])
    rate_16k = 2500 * kernels.attention_efficiency(False, 2 * 64, 16384, 16384, 128, False)
    assert rate_16k == pytest.approx(2014 * 16384 / (111 * 148), rel=1e-3)
    rate_2k = 2500 * kernels.attention_efficiency(False, 2 * 64, 2048, 2048, 128, False)
    assert rate_2k == pytest.approx(2014 * 1433 / 1697 * 2048 / (14 * 148), rel=1e-3)


@pytest.fixture(scope="module")
def public():
    return load_bench("public_runs")


@pytest.fixture(scope="module")
def ultra(public):
    sources = (public.NEMO_2604_ULTRA, public.NEMO_2511_ULTRA)
    return {row.name: row for row in public.public_runs() if row.source in sources}


def test_nemo_gb300_and_b300_rows_take_their_presets(public, ultra):
    # 13 rows of 26.04.01 (4 Llama, 4 Qwen3, 2 DeepSeek-V3, Kimi K2, 2 GPT-OSS) and 3 of 25.11's DGX-GB300 table
    assert len(ultra) == 16
    assert {public.config(row).device.name for row in ultra.values()} == {"b300", "gb300"}
    # 405B FP8 on 256 GB300: GBS 1536 of 8192 at 1024 tokens/s a GPU: 12,582,912 / 262,144 = 48.0 s; TP 4 · PP 8 =
    # 32 a replica, DP 8, 1536 / 8 = 192 micro-batches; 126 layers + embedding and loss over 32 cells of 4
    row = ultra["NeMo 26.04 Llama 3.1 405B FP8 TP4 PP8 VP4 (256 GB300)"]
    assert row.seconds == pytest.approx(48.0)
    run = public.config(row)
    assert (run.parallel.dp, run.parallel.vpp, run.training.micro_batches) == (8, 4, 192)
    cells = [count for chunk in run.layout_cells() for count in chunk]
    assert (len(cells), sum(cells), cells[0], cells[-1]) == (32, 126, 3, 3)
    # 64 nodes of 4 in sbatch segments of 16: 64 GPUs an NVLink domain; TP 4: the userbuffers overlap
    assert run.parallel.devices_per_node == 64 and run.timing.overlap.tp == 1.0
    # 70B FP8 (..._GB300_FP8_CS_V2): Megatron FSDP over 64, MBS 2, TE's CPU offloading of 20 layers: 256 / (2 · 64)
    fsdp = public.config(ultra["NeMo 26.04 Llama 3 70B FP8 FSDP (64 GB300)"])
    assert (fsdp.parallel.fsdp, fsdp.training.cpu_offloading_num_layers, fsdp.training.micro_batches) == (True, 20, 2)
    # Qwen3 235B on 256 GB300: 8192 · 4096 / (6944 · 256) = 33,554,432 / 1,777,664 = 18.876 s; PP 4, EP 32, DP 64,
    # MBS 2: 8192 / (2 · 64) = 64 micro-batches; 96 counted layers over 48 virtual stages of 2
    qwen = ultra["NeMo 26.04 Qwen3 235B MXFP8 PP4 VP12 EP32 (256 GB300)"]
    assert qwen.seconds == pytest.approx(18.876, rel=1e-4)
    big = public.config(qwen)
    assert (big.parallel.dp, big.training.micro_batches) == (64, 64)
    # 12 chunks of 4 stages; the first cell the embedding and 1 layer
    assert (len(big.layout_cells()), len(big.layout_cells()[0]), big.layout_cells()[0][0]) == (12, 4, 1)
    assert sum(map(sum, big.layout_cells())) == 94
    assert big.timing.moe_dispatcher == "hybridep" and big.timing.cuda_graph_modules[0] == "attn"
    # DeepSeek-V3 on 256 B300 (DEEPSEEK_V3_PRETRAIN_CONFIG_B300_V2): 4096 · 4096 / (3456 · 256) = 16,777,216 /
    # 884,736 = 18.963 s; PP 8, DP 32, MBS 2: 64 micro-batches; the (8, 1) layout, 8 layers a stage, the last 5
    ds_row = ultra["NeMo 26.04 DeepSeekV3 MXFP8 PP8 EP8 (256 B300)"]
    assert ds_row.seconds == pytest.approx(18.963, rel=1e-4)
    ds = public.config(ds_row)
    assert (ds.parallel.dp, ds.training.micro_batches) == (32, 64)
    assert ds.layout_cells() == [[8] * 7 + [5]]
    # a DGX B300 is one 8-GPU NVLink domain; the 26.04 container's cuDNN
    assert ds.parallel.devices_per_node == 8 and ds.timing.cudnn_version == (9, 20)
    # Kimi K2 (KIMI_K2_PRETRAIN_CONFIG_GB300): 4096 · 4096 / (5328 · 256) = 16,777,216 / 1,363,968 = 12.300 s; PP 4,
    # DP 64, MBS 2: 32 micro-batches; Muon, no FP8 parameter gathers; (4, 4): 16 cells, the first 4 layers, the last 1
    kimi_row = ultra["NeMo 26.04 Kimi K2 MXFP8 PP4 VP4 EP64 (256 GB300)"]
    assert kimi_row.seconds == pytest.approx(12.300, rel=1e-4)
    kimi = public.config(kimi_row)
    assert (kimi.parallel.dp, kimi.training.micro_batches, kimi.training.optimizer) == (64, 32, "muon")
    assert not kimi.timing.fp8_param_gather
    cells = [count for chunk in kimi.layout_cells() for count in chunk]
    assert (len(cells), sum(cells), cells[0], cells[-1]) == (16, 61, 4, 1)
    # GPT-OSS: the GB300 preset names no flex backend (alltoall), the B300's HybridEP
    oss = public.config(ultra["NeMo 26.04 GPT-OSS 120B BF16 EP64 GBS1280 (64 GB300)"])
    assert (oss.timing.moe_dispatcher, oss.parallel.ep, oss.parallel.devices_per_node) == ("alltoall", 64, 64)
    oss_b300 = public.config(ultra["NeMo 26.04 GPT-OSS 120B BF16 EP8 GBS1280 (64 B300)"])
    assert oss_b300.timing.moe_dispatcher == "hybridep"
    # ..._GB300_BF16_V1 / _B300_BF16_V1 (v0.4.2) name no recompute_modules, unlike GB200's and B200's
    # ["layernorm", "moe_act"]: the recipe's recompute_granularity None stands, nothing recomputed
    assert not oss.training.recompute and not oss_b300.training.recompute
    # 25.11's GB300 8B at the table's MBS 2: 128 · 8192 / (37556 · 8) = 1,048,576 / 300,448 = 3.490 s
    assert ultra["NeMo 25.11 Llama 3 8B FP8 (8 GB300)"].seconds == pytest.approx(3.4900, rel=1e-4)
    # NVFP4 rows are named, not priced
    skipped = dict(load_bench("_nemo").ULTRA_SKIPPED)
    assert sum("NVFP4" in label for label in skipped) == 2


def test_ppb_estimate_runs_a_b300_config(tmp_path, capsys):
    raw = yaml.safe_load((CONFIGS / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / "hf" / "llama3-8b.json")
    raw["device"] = {"name": "b300"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    assert main(["estimate", str(tmp_path / "run.yaml"), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    # every stage on the device's 275040 MiB
    assert {stage["device_bytes"] for stage in said["stages"]} == {275040 * MIB}
    assert said["iteration"]["seconds"] > 0
