"""NeMo's archived performance tables (bench/_nemo_releases.py): each row its release's figure and settings."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def public():
    return load_bench("public_runs")


@pytest.fixture(scope="module")
def rows(public):
    return {row.name: row for row in public.public_runs() if row.source.startswith(public.ARCHIVE)}


def test_archive_rows_convert_their_tables_figures(rows):
    # 26.02: 10 dense rows, 5 Qwen3 30B-A3B, 5 235B, 4 DeepSeek-V3, 5 GPT-OSS; 26.02.01: 8 dense (its GB300 70B MXFP8
    # row not priced), 4 30B (its H100 row not priced), 3 235B (its B300 row not priced), 4 DeepSeek-V3, 3 GPT-OSS
    # (its B300 and B200 rows not priced); 26.06: 5 dense, 3 Qwen3 30B-A3B, 2 235B, 2 DeepSeek-V3 and 2 GPT-OSS (MXFP8,
    # paged stash); 25.09: 13 dense
    assert len(rows) == 78
    # 26.02 Llama 3 70B on 64 H100 at 1,621 tokens/s each: 256 · 8192 / (1621 · 64) = 2,097,152 / 103,744 = 20.2147
    assert rows["NeMo 26.02 Llama 3 70B FP8 TP4 PP8 GBS256 (64 H100)"].seconds == pytest.approx(20.2147, rel=1e-5)
    # 26.06 Llama 3.1 405B on 1024 H100 at 326: 1536 · 8192 / (326 · 1024) = 12,582,912 / 333,824 = 37.6932 s
    assert rows["NeMo 26.06 Llama 3.1 405B FP8 TP8 PP8 CP2 (1024 H100)"].seconds == pytest.approx(37.6932, rel=1e-5)


def test_archive_rows_run_their_containers_releases(public, rows):
    old = public.config(rows["NeMo 26.02 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)"])
    new = public.config(rows["NeMo 26.06 Llama 3.1 405B FP8 TP4 PP16 (256 GB200)"])
    # Megatron Core 0.16 (26.02) holds 4295be1a6c (core_r0.10's send waits, first in 0.10) but not 260cba7133
    # (first in 0.18); 26.06's 0.18.0 holds both (ppb_core.config.releases CHANGES)
    assert old.send_waits == "core_r0.10"
    assert new.send_waits == "core_v0.18"
    # cuDNN 9.18.0.50 (v0.3.0 software-versions.md) and 9.21.1.3 (v0.5.1's, "NeMo Framework 26.06")
    assert (old.timing.cudnn_version, new.timing.cudnn_version) == ((9, 18), (9, 21))
    # TP 4 · PP 16 = 64 a replica of 256: DP 4, 1536 / 4 = 384 micro-batches, VP 4 (126 layers + 2 over 64 cells)
    assert (old.parallel.dp, old.parallel.vpp, old.training.micro_batches) == (4, 4, 384)
    assert sum(map(sum, old.layout_cells())) == 126
    # FP8_CS: the gathers ride the optimizer step (set_post_overrides, DP, PP, VP > 1); fp8_mx's do not
    assert old.timing.overlap_param_gather_with_optimizer_step
    mx = public.config(rows["NeMo 26.02 Llama 3.1 405B MXFP8 TP4 PP16 VP8 (256 GB200)"])
    assert mx.timing.fp8_recipe == "mxfp8" and not mx.timing.overlap_param_gather_with_optimizer_step


def test_archive_qwen3_rows_take_their_tags_presets(public, rows):
    # v0.3.0's B200 preset names no flex backend and leaves MBS 1: alltoall; v0.3.1's is MBS 4 with HybridEP on 32 SMs
    # and TE graphs of attention and the router. GBS 512 on 8 GPUs: 64 and 16 micro-batches a replica
    old = public.config(rows["NeMo 26.02 Qwen3 30B-A3B MXFP8 EP8 MBS1 (8 B200)"])
    new = public.config(rows["NeMo 26.02.01 Qwen3 30B-A3B MXFP8 EP8 (8 B200)"])
    assert (old.timing.moe_dispatcher, old.training.micro_batches) == ("alltoall", 64)
    assert (new.timing.moe_dispatcher, new.timing.moe_flex_dispatcher_num_sms, new.training.micro_batches) == (
        "hybridep",
        32,
        16,
    )
    assert new.timing.cuda_graph_modules == ["attn", "moe_router", "moe_preprocess"]
    # v0.3.0's H100 preset: 16 GPUs, GBS 1024, PP 2 · VP 12, EP 8, DeepEP with moe_a2a_overlap (combined 1F1B and
    # delayed weight gradients): DP 8, 1024 / 8 = 128 micro-batches; 1024 · 4096 / (5113 · 16) = 51.270 s
    h100_row = rows["NeMo 26.02 Qwen3 30B-A3B FP8 PP2 VP12 EP8 (16 H100)"]
    assert h100_row.seconds == pytest.approx(51.270, rel=1e-4)
    h100 = public.config(h100_row)
    assert (h100.parallel.dp, h100.parallel.vpp, h100.training.micro_batches) == (8, 12, 128)
    assert h100.timing.moe_dispatcher == "deepep" and h100.parallel.overlap_moe_expert_parallel_comm
    assert h100.timing.delay_wgrad_compute
    # the 235B on 256 H100, TP 2 · PP 8 = 16, DP 16, 8192 / 16 = 512 micro-batches; 94 layers + the embedding and the
    # loss over 8 · 4 virtual stages of 3. v0.3.0 names no backend (alltoall), v0.3.1's base config DeepEP
    big_old = public.config(rows["NeMo 26.02 Qwen3 235B FP8 TP2 PP8 VP4 EP32 (256 H100)"])
    big_new = public.config(rows["NeMo 26.02.01 Qwen3 235B FP8 TP2 PP8 VP4 EP32 (256 H100)"])
    assert (big_old.parallel.dp, big_old.training.micro_batches) == (16, 512)
    assert sum(map(sum, big_old.layout_cells())) == 94 and big_old.layout_cells()[0][0] == 2
    assert (big_old.timing.moe_dispatcher, big_new.timing.moe_dispatcher) == ("alltoall", "deepep")
    # DeepSeek-V3 on 256 B200 (v0.3.0 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V2): PP 16, EP 8, DP 16, 4096 / 16 = 256
    # micro-batches, HybridEP, recompute mla_up_proj; the (16, 1) layout: 4 layers a stage, the last 1 with MTP.
    # 4096 · 4096 / (2689 · 256) = 16,777,216 / 688,384 = 24.372 s
    ds_row = rows["NeMo 26.02 DeepSeekV3 MXFP8 PP16 EP8 (256 B200)"]
    assert ds_row.seconds == pytest.approx(24.372, rel=1e-4)
    ds = public.config(ds_row)
    assert (ds.parallel.dp, ds.training.micro_batches, ds.timing.moe_dispatcher) == (16, 256, "hybridep")
    assert [list(chunk) for chunk in ds.layout_cells()] == [[4] * 15 + [1]]
    assert list(ds.recompute.modules) == ["mla_up_proj"]
    # GPT-OSS 120B on 64 B300 (v0.3.0 GPT_OSS_120B_PRETRAIN_CONFIG_B300_BF16_V2): EP 64, MBS 4, GBS 1280, so DP 64 and
    # 1280 / (4 · 64) = 5 micro-batches; no flex backend (alltoall), TE graphs of attention and the router, no
    # recompute. 1280 · 4096 / (8359 · 64) = 5,242,880 / 534,976 = 9.8003 s
    oss_row = rows["NeMo 26.02 GPT-OSS 120B BF16 EP64 GBS1280 (64 B300)"]
    assert oss_row.seconds == pytest.approx(9.8003, rel=1e-4)
    oss = public.config(oss_row)
    assert (oss.parallel.dp, oss.parallel.ep, oss.training.micro_batches) == (64, 64, 5)
    assert oss.timing.moe_dispatcher == "alltoall" and oss.timing.matmul_dtype is None  # BF16: the compute dtype
    assert oss.timing.cuda_graph_modules == ["attn", "moe_router", "moe_preprocess"] and not oss.recompute.modules


def test_archive_26_06_qwen3_mxfp8_rows_take_v0_5_0s_paged_stash_presets(public, rows):
    # v0.5.0 QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1: MBS 4, EP 8 on 8 GPUs, so 512 / (4 · 8) = 16 micro-batches;
    # cutedsl_fused_grouped_mlp (overrides.py: the op fuser, a 32-wide GLU interleave), full-iteration graphs,
    # qwen3_llm_pretrain.py `set_full_iter_cg_configs` (rank capacity 1.5, the paged stash at 1.2 and 1.0), FP8
    # attention, moe_a2a_overlap; 512 · 4096 / (40706 · 8) = 2,097,152 / 325,648 = 6.4399 s
    row = rows["NeMo 26.06 Qwen3 30B-A3B MXFP8 EP8 paged stash (8 GB200)"]
    assert row.seconds == pytest.approx(6.4399, rel=1e-4)
    run = public.config(row)
    assert (run.parallel.dp, run.training.micro_batches, run.timing.cuda_graph_impl) == (8, 16, "full_iteration")
    assert run.timing.use_transformer_engine_op_fuser and run.timing.moe_mlp_glu_interleave_size == 32
    assert (run.timing.moe_expert_rank_capacity_factor, run.timing.moe_paged_stash) == (1.5, True)
    assert run.timing.fp8_dot_product_attention and run.parallel.overlap_moe_expert_parallel_comm
    assert run.framework_release.transformer_engine == "2.16" and run.timing.cudnn_version == (9, 21)
    # the 235B on 256 GB300 (..._GB300_FP8_MX_V2): PP 4 · VP 12, MBS 2, DP 64, 8192 / (2 · 64) = 64 micro-batches, 96
    # counted layers over 48 virtual stages of 2
    big = public.config(rows["NeMo 26.06 Qwen3 235B MXFP8 PP4 VP12 EP32 paged stash (256 GB300)"])
    assert (big.parallel.dp, big.parallel.vpp, big.training.micro_batches) == (64, 12, 64)
    assert sum(map(sum, big.layout_cells())) == 94 and big.timing.moe_paged_stash
    # DeepSeek-V3 on 256 GB300 (DEEPSEEK_V3_PRETRAIN_CONFIG_GB300_FP8_MX_V2): PP 2, VP 8, EP 32, MBS 1, DP 128, 4096 /
    # 128 = 32 micro-batches, nothing recomputed, FP8 attention; 4096 · 4096 / (6338 · 256) = 10.3404 s
    ds_row = rows["NeMo 26.06 DeepSeekV3 MXFP8 PP2 VP8 EP32 paged stash (256 GB300)"]
    assert ds_row.seconds == pytest.approx(10.3404, rel=1e-4)
    ds = public.config(ds_row)
    assert (ds.parallel.dp, ds.training.micro_batches) == (128, 32) and not ds.recompute.modules
    assert ds.timing.fp8_dot_product_attention and ds.timing.moe_paged_stash
    assert ds.parallel.overlap_moe_expert_parallel_comm
    # GPT-OSS 120B on 64 GB200 (GPT_OSS_120B_PRETRAIN_CONFIG_GB200_FP8_MX_V2): EP 64, MBS 4, DP 64, 1280 / (4 · 64) = 5
    # micro-batches, no recompute, MXFP8 with the fused grouped MLP; 1280 · 4096 / (28947 · 64) = 2.8302 s
    oss_row = rows["NeMo 26.06 GPT-OSS 120B MXFP8 EP64 paged stash (64 GB200)"]
    assert oss_row.seconds == pytest.approx(2.8302, rel=1e-4)
    oss = public.config(oss_row)
    assert (oss.parallel.ep, oss.training.micro_batches, oss.timing.fp8_recipe) == (64, 5, "mxfp8")
    assert oss.timing.use_transformer_engine_op_fuser and not oss.recompute.modules


def test_archive_25_09_rows_take_v0_1_0rc3s_perf_matrix(public, rows):
    # llama31_405b_llm_pretrain.yaml, gb200 num_gpus_128 fp8_cs: TP 2, Megatron FSDP, 95 layers' activations offloaded,
    # GBS 64, MBS 1: DP 64, one micro-batch; run_script.py keeps gradient accumulation fusion on; comm_overlap.py leaves
    # the gathers off the optimizer step. 64 · 8192 / (729 · 128) = 524,288 / 93,312 = 5.6187 s
    row = rows["NeMo 25.09 Llama 3.1 405B FP8 FSDP TP2 (128 GB200)"]
    assert row.seconds == pytest.approx(5.6187, rel=1e-4)
    run = public.config(row)
    assert (run.parallel.dp, run.parallel.tp, run.training.micro_batches) == (64, 2, 1)
    assert run.parallel.fsdp and run.training.cpu_offloading_num_layers == 95
    assert run.timing.gradient_accumulation_fusion and not run.timing.overlap_param_gather_with_optimizer_step
    # the 25.09 container (Megatron-Bridge docs/releases/software-versions.md at v0.2.0): cuDNN 9.11, below 9.17
    assert run.timing.cudnn_version == (9, 11)
    # llama3_8b_llm_pretrain.yaml gb200: MBS 2 with cuda_graphs (MCore's enable_cuda_graph: the local graphs)
    eight = public.config(rows["NeMo 25.09 Llama 3 8B FP8 (8 GB200)"])
    assert eight.timing.cuda_graph_impl == "local"
    # run_script.py passes no comm_overlap config, so recipes/llama/llama31_405b.py's own stands: the output layer's
    # weight gradients deferred, limit 50 (llama3_70b.py: 22; llama3_8b.py: none); set_megatron_fsdp_overrides
    # turns it off under Megatron FSDP
    deferred = public.config(rows["NeMo 25.09 Llama 3.1 405B FP8 TP4 PP8 CP2 (128 B200)"]).training
    assert deferred.defer_embedding_wgrad_compute and deferred.wgrad_deferral_limit == 50
    deferred = public.config(rows["NeMo 25.09 Llama 3 70B FP8 TP4 PP8 (64 H100)"]).training
    assert deferred.defer_embedding_wgrad_compute and deferred.wgrad_deferral_limit == 22
    assert not run.training.defer_embedding_wgrad_compute and not eight.training.defer_embedding_wgrad_compute


def test_archive_fsdp_rows_offload_as_their_presets(public, rows):
    # LLAMA3_70B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 (v0.3.0): MBS 2, Megatron FSDP over 64, CPU offloading of 40
    # layers; GBS 256 / (2 · 64) = 2 micro-batches; GB300's offloads 20
    gb200 = public.config(rows["NeMo 26.02 Llama 3 70B FP8 FSDP (64 GB200)"])
    assert (gb200.parallel.dp, gb200.training.micro_batch_size, gb200.training.micro_batches) == (64, 2, 2)
    assert gb200.parallel.fsdp and gb200.training.cpu_offloading_num_layers == 40
    gb300 = public.config(rows["NeMo 26.02.01 Llama 3 70B FP8 FSDP (64 GB300)"])
    assert gb300.training.cpu_offloading_num_layers == 20


def test_archive_rows_are_a_group_of_their_own(public, rows):
    results = [(row, row.seconds) for row in rows.values()]
    found = public.groups(results)
    assert len(found["NeMo archive 25.09 / 26.02 / 26.02.01 / 26.06"]) == 78
    assert sum(map(len, found.values())) == 78  # no other group takes one


def test_archive_rows_fit_their_devices(public, rows):
    # the runs trained: ppb's peak of each must fit its device (bench/public_runs.py `over_device`)
    assert public.over_device(list(rows.values())) == []


def test_nemo_24_07_rows_take_the_launchers_settings(public):
    rows = {row.name: row for row in public.public_runs() if row.source == public.NEMO_2407}
    assert len(rows) == 9
    # GPT3 175B on 128 H100 at 716 tokens/s each: 256 · 2048 / (716 · 128) = 524,288 / 91,648 = 5.7207 s
    big = rows["NeMo 24.07 GPT3 175B FP8 TP4 PP8 VP6 (128 H100)"]
    assert big.seconds == pytest.approx(5.7207, rel=1e-4)
    run = public.config(big)
    # TP 4 · PP 8 = 32 a replica: DP 4, 256 / 4 = 64 micro-batches; 96 layers over 8 · 6 virtual stages of 2
    assert (run.parallel.dp, run.parallel.vpp, run.training.micro_batches) == (4, 6, 64)
    # megatron_gpt_config.yaml's GPT: GPT-2 BPE's 50,257 tokens padded to 128 · TP 4 = 512: 50,688; tied embeddings
    assert run.vocab_size("llm") == 50688
    # the 175B yaml leaves ub_tp_comm_overlap False; the example sets fp8 and fp8_hybrid: delayed scaling
    assert run.timing.overlap.tp == 0.0 and run.timing.fp8_recipe == "delayed"
    # Megatron Core 0.8 (the 24.07 container's): before 4295be1a6c's tunable schedule (first in 0.10)
    assert run.send_waits == "core_r0.8"
    # Llama 3 70B: TP 4 · PP 4 · CP 2 = 32, DP 2, 128 / 2 = 64 micro-batches, the fp8 userbuffers config
    llama = public.config(rows["NeMo 24.07 Llama 3 70B FP8 TP4 PP4 CP2 VP5 (64 H100)"])
    assert (llama.parallel.dp, llama.parallel.cp, llama.training.micro_batches) == (2, 2, 64)
    assert llama.timing.overlap.tp == 1.0 and llama.parallel.sequence_parallel
    assert public.over_device(list(rows.values())) == []


def test_nemo2_rows_take_each_releases_recipe(public):
    rows = {row.name: row for row in public.public_runs() if row.source.startswith(public.NEMO2)}
    assert len(rows) == 11
    # 25.02 Llama 3 70B on 64 B200 at 3,062 tokens/s each: 128 · 8192 / (3062 · 64) = 1,048,576 / 195,968 = 5.3507 s
    row = rows["NeMo 25.02 Llama 3 70B FP8 TP2 PP4 CP2 VP5 (64 B200)"]
    assert row.seconds == pytest.approx(5.3507, rel=1e-4)
    run = public.config(row)
    # TP 2 · PP 4 · CP 2 = 16: DP 4, 128 / 4 = 32 micro-batches; bf16_with_fp8_mixed: delayed scaling, FP8 gathers;
    # set_primary_perf_configs: gathers with the step (DP 4, PP 4, VP 5 > 1); the recipe's deferral limit 22
    assert (run.parallel.dp, run.training.micro_batches, run.timing.fp8_recipe) == (4, 32, "delayed")
    assert run.timing.fp8_param_gather and run.timing.overlap_param_gather_with_optimizer_step
    assert run.training.defer_embedding_wgrad_compute and run.training.wgrad_deferral_limit == 22
    assert run.timing.check_for_nan_in_grad  # the recipes' DistributedDataParallelConfig
    # NeMo v2.2.0: manifest "ngc-pytorch" nvcr.io/nvidia/pytorch:25.01-py3 and no TE build in Dockerfile.ci (a0e8ed197a
    # dropped it), so the base's TE: 1.14 (NGC PyTorch rel-25-01, cited by NVIDIA/bionemo-framework 67a869b3c), not
    # the manifest's stale 7d576ed25 (1.8.0.dev0); Megatron-LM the manifest's 791b70e031 (2025-02-24)
    assert (run.framework_release.megatron_core, run.framework_release.transformer_engine) == ("2025-02-24", "1.14")
    # 1.14 saves no FP8 scale-inverse copy (#1083, v1.11) but transposes an SP row-parallel input late (before v2.0)
    assert run.framework_release.holds("te_fp8_scale_inv_with_data")
    assert not run.framework_release.holds("te_fp8_input_transposed_in_forward")
    # 25.04 Llama 3 70B under Megatron FSDP (the csv's use_mcore_fsdp): no FP8 gathers, no deferral, no wgrad fusion;
    # 64 GPUs in one GB200 segment (16 nodes, `slurm_executor` segments only beyond 18)
    fsdp = public.config(rows["NeMo 25.04 Llama 3 70B FP8 FSDP (64 GB200)"])
    assert fsdp.parallel.fsdp and not fsdp.timing.fp8_param_gather and not fsdp.training.defer_embedding_wgrad_compute
    assert (fsdp.timing.fp8_recipe, fsdp.parallel.devices_per_node) == ("tensorwise", 64)
    # the csv's cuda_graphs on GB200: MCore's enable_cuda_graph, the local per-layer graphs
    assert public.config(rows["NeMo 25.04 Llama 3 8B FP8 (8 GB200)"]).timing.cuda_graph_impl == "local"
    # v2.4.0 (25.07) helpers.py `set_perf_optimization_configs`: ddp.check_for_nan_in_grad = False (v2.3.0 sets none)
    assert not public.config(rows["NeMo 25.07 Llama 3 8B FP8 (8 GB200)"]).timing.check_for_nan_in_grad
    assert public.config(rows["NeMo 25.04 Llama 3 8B FP8 (8 GB200)"]).timing.check_for_nan_in_grad
    # v2.2.0's userbuffers_b200 FP8 configs ring-exchange proj_fprop and fc2_fprop, bulk set_sm_margin False ...
    assert (run.timing.tp_comm_overlap_methods["proj_fprop"], run.timing.ub_sm_margin) == ("ring_exchange", False)
    # ... but userbuffers_fp8_h100_h12288_tp4_mbs1_seqlen2048 pipelines proj_fprop (PipelineOverlapCfg num_sm 24,
    # num_splits 4, set_sm_margin True; TE's default method) and ring-exchanges fc2_fprop only
    h100 = public.config(rows["NeMo 25.02 GPT3 175B FP8 TP4 PP8 VP6 MBS2 (512 H100)"])
    assert h100.timing.tp_comm_overlap_methods == {"fc2_fprop": "ring_exchange"} and h100.timing.ub_sm_margin
    assert public.over_device(list(rows.values())) == []
