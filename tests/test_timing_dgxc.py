"""NVIDIA/dgxc-benchmarking's NeMo 1 and NeMo 2 recipes (bench/_dgxc.py): published step seconds, the settings each
tag's yaml, launch scripts and NeMo recipes set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def public():
    return load_bench("public_runs")


@pytest.fixture(scope="module")
def rows(public):
    return {
        row.name: row
        for row in public.public_runs()
        if row.source.startswith(public.DGXC) and not row.source.startswith(public.DGXC_NEMO2)
    }


@pytest.fixture(scope="module")
def nemo2(public):
    return {row.name: row for row in public.public_runs() if row.source.startswith(public.DGXC_NEMO2)}


def test_rows_are_the_tables_step_seconds_and_agree_with_their_tokens_per_second(rows):
    # two tags x four tables x BF16 and FP8
    assert len(rows) == 16
    # v24.11.1 llama3.1/README_70b.md, "Llama 3.1 70b 24.09 FP8", 64 H100 (GBS 128): 11.01 s a step, and its
    # "Throughput in tokens per second" 95239 = 8192 · 128 / 11.01 = 95,238.9
    row = rows["dgxc v24.11.1 24.09 Llama 3.1 70B TP4 PP4 CP2 VP5 FP8 (64 H100)"]
    assert row.seconds == 11.01
    assert 8192 * 128 / row.seconds == pytest.approx(95239, abs=1)
    # v25.02.02 nemo_megatron/README_175b.md, BF16 on 128 H100 (GBS 256, sequence 2048): 8.309 s; its tokens row:
    # 2048 · 256 / 8.309 = 63,099.0, the table's 63099
    row = rows["dgxc v25.02.02 24.12 GPT3 175B TP4 PP8 VP6 BF16 (128 H100)"]
    assert row.seconds == 8.309
    assert 2048 * 256 / row.seconds == pytest.approx(63099, abs=1)
    # v24.11.1 llama3.1/README_405b.md FP8 on 576 H100 (GBS 252): 11.24 s; 8192 · 252 / 11.24 = 183,664.3, its 183664
    row = rows["dgxc v24.11.1 24.09 Llama 3.1 405B TP8 PP9 CP2 VP7 FP8 (576 H100)"]
    assert 8192 * 252 / row.seconds == pytest.approx(183664, abs=1)


def test_layouts_and_micro_batches_are_the_yamls(public, rows):
    # llama3.1_405b.yaml: TP 8, PP 9, VP 7, CP 2 on 72 nodes (576 GPUs): DP 576 / 144 = 4; GBS 252 at MBS 1:
    # 63 micro-batches a replica (the table's GA=63); 126 layers, 14 a stage, 2 a model chunk
    run = public.config(rows["dgxc v25.02.02 24.12 Llama 3.1 405B TP8 PP9 CP2 VP7 BF16 (576 H100)"])
    assert (run.parallel.tp, run.parallel.pp, run.parallel.cp, run.parallel.dp, run.parallel.vpp) == (8, 9, 2, 4, 7)
    assert (run.training.micro_batch_size, run.training.micro_batches) == (1, 63)
    # and the yaml's defer_embedding_wgrad_compute with wgrad_deferral_limit 50
    assert (run.training.defer_embedding_wgrad_compute, run.training.wgrad_deferral_limit) == (True, 50)
    # llama3.1_8b.yaml: CP 2 on one node: DP 4, GBS 128: 32 micro-batches (GA=32); no TP, so no userbuffers
    run = public.config(rows["dgxc v24.11.1 24.09 Llama 3.1 8B CP2 FP8 (8 H100)"])
    assert (run.parallel.dp, run.training.micro_batches, run.timing.overlap.tp) == (4, 32, 0)
    assert run.training.defer_embedding_wgrad_compute is False  # llama3.1_8b.yaml: false
    # gpt3_175b_hydra.yaml: VP 12 at v24.11.1, 6 at v25.02.02; TP 4 PP 8 on 128 GPUs: DP 4, GBS 256: 64
    assert public.config(rows["dgxc v24.11.1 24.05 GPT3 175B TP4 PP8 VP12 FP8 (128 H100)"]).parallel.vpp == 12
    run = public.config(rows["dgxc v25.02.02 24.12 GPT3 175B TP4 PP8 VP6 FP8 (128 H100)"])
    assert (run.parallel.vpp, run.training.micro_batches, run.training.seq_length) == (6, 64, 2048)
    assert run.timing.overlap.tp == 1  # ub_tp_comm_overlap: true


def test_precision_releases_and_attention_backend_follow_each_tag(public, rows):
    # configure.sh: model.fp8, fp8_hybrid and +model.fp8_params follow DTYPE; grad_sync_dtype bf16
    fp8 = public.config(rows["dgxc v24.11.1 24.09 Llama 3.1 70B TP4 PP4 CP2 VP5 FP8 (64 H100)"])
    bf16 = public.config(rows["dgxc v24.11.1 24.09 Llama 3.1 70B TP4 PP4 CP2 VP5 BF16 (64 H100)"])
    assert (fp8.timing.matmul_dtype, fp8.timing.fp8_recipe, fp8.timing.fp8_param_gather) == ("fp8", "delayed", True)
    # model.fp8=false: the GEMMs in training.dtype (no matmul_dtype), no FP8 weight copies
    assert (bf16.timing.matmul_dtype, bf16.timing.fp8_param_gather, bf16.training.fp8_cache) == (None, False, "none")
    assert fp8.training.grad_bytes == bf16.training.grad_bytes == 2
    # FW_VERSION 24.09: Megatron Core 0.9.0, TE 1.10 (the user guide's component table); the 175B's 24.05: 0.7.0
    assert fp8.framework_release.megatron_core == "0.9.0"
    assert fp8.framework_release.transformer_engine == "1.10"
    old = public.config(rows["dgxc v24.11.1 24.05 GPT3 175B TP4 PP8 VP12 BF16 (128 H100)"])
    assert old.framework_release.megatron_core == "0.7.0"
    # v24.11.1's 175B launch.sh NVTE_FUSED_ATTN=0: TE's flash-attn; v25.02.02's configure.sh NVTE_FUSED_ATTN=1
    assert old.timing.te_attention_backend == "flash"
    new = public.config(rows["dgxc v25.02.02 24.12 GPT3 175B TP4 PP8 VP6 BF16 (128 H100)"])
    assert (new.timing.te_attention_backend, new.framework_release.megatron_core) == ("fused", "0.10.0")


def test_every_row_fits_its_device(public, rows, nemo2):
    # they trained: ppb's peak must fit the device (80 GB H100, 186 GB GB200)
    assert public.over_device([*rows.values(), *nemo2.values()]) == []


def test_nemo2_rows_are_the_tables_step_seconds(nemo2):
    # v25.04.02: 8B, 70B (BF16 and FP8 layouts apart), 405B, two dtypes each; v25.05.05: 405B on GB200 and H100,
    # two dtypes each, and DeepSeek-V3 BF16 on each
    assert len(nemo2) == 12
    # v25.04.02 llama3.1/README.md "Llama 3.1 8b BF16", 8 H100: 12.27 s, and its tokens/s 85459 = 8192 · 128 / 12.27
    # = 85,459.2 (GBS 16 a GPU: llama31_auto_configs)
    row = nemo2["dgxc v25.04.02 25.02.01 Llama 3.1 8B CP2 BF16 (8 H100)"]
    assert row.seconds == 12.27
    assert 8192 * 128 / row.seconds == pytest.approx(85459, abs=1)
    # v25.05.05 "Llama3.1 405b FP8", 128 GB200 (GBS 64): 6.131 s; 8192 · 64 / 6.131 = 85,514.6, the table's 85514
    row = nemo2["dgxc v25.05.05 25.04.01 Llama 3.1 405B TP4 PP8 CP2 VP8 FP8 (128 GB200)"]
    assert 8192 * 64 / row.seconds == pytest.approx(85514, abs=1)


def test_nemo2_rows_run_the_scripts_defaults(public, nemo2):
    # llama31_auto_configs (v25.04.02): the 70B's FP8 sizes TP 4, PP 8, CP 1, VP 5 on 64 GPUs: DP 2, GBS 2 a GPU =
    # 128, 64 micro-batches; DP, PP and VP above 1: parameter gathers with the optimizer step (set_primary_perf_configs)
    run = public.config(nemo2["dgxc v25.04.02 25.02.01 Llama 3.1 70B TP4 PP8 VP5 FP8 (64 H100)"])
    assert (run.parallel.pp, run.parallel.cp, run.parallel.dp, run.training.micro_batches) == (8, 1, 2, 64)
    assert run.timing.overlap_param_gather_with_optimizer_step is True
    # the scripts' default fp8_recipe "ds": bf16_with_fp8_mixed, delayed scaling with FP8 parameters; the
    # performance recipes' grad_reduce_in_fp32 False
    assert (run.timing.fp8_recipe, run.timing.fp8_param_gather, run.training.grad_bytes) == ("delayed", True, 2)
    # userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192: proj_fprop / fc2_fprop pipelined, set_sm_margin True
    assert run.timing.overlap.tp == 1 and run.timing.ub_sm_margin is True
    assert run.timing.tp_comm_overlap_methods == {}
    # userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192 (GB200's): ring-exchange proj_fprop and fc2_fprop
    run = public.config(nemo2["dgxc v25.05.05 25.04.01 Llama 3.1 405B TP4 PP8 CP2 VP8 FP8 (128 GB200)"])
    assert run.timing.tp_comm_overlap_methods == {"proj_fprop": "ring_exchange", "fc2_fprop": "ring_exchange"}
    # NeMo 6f2c6fdaff (v25.05.05) holds 8f3e86df5a "ub fp8 h100 fixes": userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_
    # seqlen8192 there is RingExchangeOverlapCfg for proj_fprop and fc2_fprop, its bulk GEMMs set_sm_margin=False
    h100 = public.config(nemo2["dgxc v25.05.05 25.04.01 Llama 3.1 405B TP8 PP8 CP2 VP8 FP8 (512 H100)"])
    assert h100.timing.tp_comm_overlap_methods == {"proj_fprop": "ring_exchange", "fc2_fprop": "ring_exchange"}
    assert h100.timing.ub_sm_margin is False
    # ... while its BF16 config still pipelines both with set_sm_margin=True: ppb's defaults
    h100 = public.config(nemo2["dgxc v25.05.05 25.04.01 Llama 3.1 405B TP8 PP8 CP2 VP8 BF16 (512 H100)"])
    assert (h100.timing.tp_comm_overlap_methods, h100.timing.ub_sm_margin) == ({}, True)
    # launch.sh: 128 GB200, TP 4 PP 8 CP 2: DP 2, GBS 64: 32 micro-batches; TE's fused cross-entropy at 6f2c6fdaff
    assert (run.parallel.dp, run.training.micro_batches, run.timing.cross_entropy_fusion_impl) == (2, 32, "te")
    # d2b21556f2's set_primary_perf_configs sets no cross_entropy_fusion_impl (the native fusion)
    old = public.config(nemo2["dgxc v25.04.02 25.02.01 Llama 3.1 405B TP8 PP8 CP2 VP8 BF16 (1024 H100)"])
    assert old.timing.cross_entropy_fusion_impl != "te"
    assert (old.timing.matmul_dtype, old.training.fp8_cache, old.timing.fp8_param_gather) == (None, "none", False)
    # 1024 GPUs at TP 8, PP 8, CP 2: DP 8; GBS half the GPUs, 512: 64 micro-batches
    assert (old.parallel.dp, old.training.micro_batches) == (8, 64)


def test_deepseek_rows_run_launch_sh_and_the_perf_script(public, nemo2):
    # v25.05.05 deepseek_v3/pretraining/README.md, 512 H100: 48.948 s; its tokens/s 342755.90 = 4096 · 4096 / 48.948
    # (GBS 8 a GPU: launch.sh); 128 GB200: 34.168 s, 1024 · 4096 / 34.168 = 122,755.3, the table's 122755.33
    h100 = nemo2["dgxc v25.05.05 25.04.01 DeepSeek-V3 TP2 PP8 EP64 BF16 (512 H100)"]
    assert 4096 * 4096 / h100.seconds == pytest.approx(342755.90, abs=0.1)
    gb200 = nemo2["dgxc v25.05.05 25.04.01 DeepSeek-V3 TP2 PP4 EP32 BF16 (128 GB200)"]
    assert 1024 * 4096 / gb200.seconds == pytest.approx(122755.33, abs=0.1)
    # H100: TP 2, PP 8 on 512 GPUs: DP 32 (the table's), GBS 4096: 128 micro-batches (GA 128)
    run = public.config(h100)
    assert (run.parallel.tp, run.parallel.pp, run.parallel.ep, run.parallel.dp) == (2, 8, 64, 32)
    assert run.training.micro_batches == 128
    # pretrain_deepseek_v3.py: 64 // 8 = 8 layers a middle stage, 7 in the first, 6 in the last (with MTP and the
    # loss): 7 + 6 · 8 + 6 = 61
    layout = run.parallel.layout
    assert layout == "E" + "t" * 7 + "|" + ("t" * 8 + "|") * 6 + "t" * 6 + "mL"
    assert layout.count("t") == 61
    # USE_TOKEN_DROP: capacity factor 1.0 (MegatronTokenDropCallback), so not dropless; bf16_mixed's
    # grad_reduce_in_fp32 True (cleared only for FP8)
    assert (run.training.moe.dropless, run.training.moe.capacity_factor, run.training.grad_bytes) == (False, 1.0, 4)
    # MegatronTokenDropCallback pads the experts' inputs to the capacity (moe_pad_expert_input_to_capacity True)
    assert run.training.moe.pad_to_capacity and run.routed_share == 1.0
    assert run.training.recompute.modules == ("mla_up_proj",)
    # GB200: PP 4 (16 a middle stage: 15, 16, 16, 14), EP 32, core_attn recomputed; 128 GPUs: DP 16, 64 micro-batches
    run = public.config(gb200)
    assert run.parallel.layout.split("|")[0].count("t") == 15 and run.parallel.layout.count("t") == 61
    assert (run.parallel.ep, run.parallel.dp, run.training.micro_batches) == (32, 16, 64)
    assert run.training.recompute.modules == ("core_attn",)
    # MLA's query/key heads are 128 + 64 = 192 wide, its value heads 128. TransformerEngine before 71c76b6ba
    # (2025-06-14, v2.5) refuses cuDNN's fused attention on sm100 above 128 (fused_attn.cpp
    # `nvte_get_fused_attn_backend`, v2.2-v2.4) and FlashAttention at unequal widths (utils.py
    # `get_attention_backend`): GB200 runs TE's unfused attention, H100 (sm90, cuDNN 9 to 256) the fused one
    hf = json.loads((Path(__file__).parents[1] / "configs" / "hf" / "deepseek-v3.json").read_text())
    assert (hf["qk_nope_head_dim"] + hf["qk_rope_head_dim"], hf["v_head_dim"]) == (192, 128)
    assert (run.training.flash_attention, public.config(h100).training.flash_attention) == (False, True)
