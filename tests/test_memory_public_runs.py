"""Published memory peaks (bench/public_memory.py): the transcriptions, read by hand."""

from __future__ import annotations

import pytest
from bench_modules import load_bench

from ppb_core.memory.allocated import allocated_peak_bytes, uncounted_bytes
from ppb_core.memory.model import MemoryModel, run_stage_peaks
from ppb_core.model.walk import walk


@pytest.fixture(scope="module")
def bench():
    return load_bench("public_memory")


def test_trainy_s_h200_rows_are_the_file_s_runs(bench):
    rows = {row.name: row for row in bench.measured_peaks() if row.source == bench.TRAINY}
    # llama3-8b_h200_202506_trainy-whitefiber.md: NUM_NODES 4 and 8 of 8 H200, 47.96 and 46.97 GiB,
    # local batch 2 of 8192 (llama3_8b.toml at e7c0cae), FSDP over every GPU, per-op checkpointing.
    assert sorted((bench.config(row).parallel.dp, row.measured_gib) for row in rows.values()) == [
        (32, 47.96),
        (64, 46.97),
    ]
    for row in rows.values():
        run = bench.config(row)
        assert (run.training.seq_length, run.training.micro_batch_size, run.training.micro_batches) == (8192, 2, 1)
        assert run.device.name == "h200" and run.timing.torch_compile and not row.allocated


def test_every_row_prices_a_stage(bench):
    for row in bench.measured_peaks():
        predicted, moment = bench.predicted_gib(row)
        assert predicted > 0 and moment


def test_the_december_2024_rows_are_the_file_s_tables(bench):
    # llama3_h100_202412_torchtitan.md Tables 1 (8 GPUs) and 3 (128): FSDP, + torch.compile, + Float8,
    # local batch 2, selective (per-op) AC; torchtitan 9dec370 compiles the blocks, not the loss
    rows = [row for row in bench.measured_peaks() if row.name.startswith("torchtitan Llama 3.1 8B FSDP")]
    found = sorted((bench.config(r).parallel.dp, r.measured_gib, bench.config(r).timing.torch_compile) for r in rows)
    assert found == [
        (8, 76.8, True), (8, 77.0, True), (8, 82.4, False),
        (128, 61.8, True), (128, 62.0, True), (128, 67.0, False),
    ]  # fmt: skip
    for row in rows:
        run = bench.config(row)
        assert not run.timing.compiled_loss and not row.allocated
        assert (run.training.recompute.mode, run.training.recompute.option) == ("selective", "op")


def test_no_torchtitan_row_is_priced_above_its_reserved_bound(bench):
    # the caching allocator's reserved peak is at least the allocated peak ppb prices
    for row in bench.measured_peaks():
        if not row.allocated:
            assert bench.predicted_gib(row)[0] <= row.measured_gib, row.name


def test_torchao_s_rows_are_the_readme_s_tables(bench):
    # pytorch/ao 8c81863ba torchao/float8/README.md (8 H100: bf16 47.65, tensorwise with float8 all-gather 47.77)
    # and d8bb51f63 torchao/prototype/mx_formats/README.md (8 B200: 33.71, 33.38; bf16 leaves matmul_dtype unset):
    # Llama3-8b, batch 1 of 8192, FSDP2 over the 8, per-op SAC, --training.compile; the rowwise and MX rows have
    # no ppb recipe
    rows = [row for row in bench.measured_peaks() if row.name.startswith("torchao")]
    found = sorted((bench.config(r).device.name, r.measured_gib, bench.config(r).timing.matmul_dtype) for r in rows)
    assert found == [("b200", 33.38, "fp8"), ("b200", 33.71, None), ("h100-80gb", 47.65, None),
                     ("h100-80gb", 47.77, "fp8")]  # fmt: skip
    for row in rows:
        run = bench.config(row)
        assert (run.parallel.dp, run.training.seq_length, run.training.micro_batch_size) == (8, 8192, 1)
        assert (run.training.recompute.mode, run.training.recompute.option) == ("selective", "op")
        assert run.timing.torch_compile and not row.allocated
        h100 = run.device.name == "h100-80gb"
        # March 2025's torchtitan: the loss eager (bbb1b616e compiled it), 9dec370's root unit, torch 2.7.0a0
        assert run.timing.compiled_loss is not h100 and (run.timing.fsdp_units == "root") is h100
        assert run.framework_release.pytorch == ("2.7" if h100 else "2.9")


def test_the_reserved_pools_of_the_8_gpu_december_row(bench):
    # Llama 3.1 8B, FSDP over 8, 2 · 8192 tokens: the loss's free hole, the bf16 logits, 2 · 16384 · 128256 =
    # 4,202,692,608 bytes; the copy-in stream's root unit output, the embedding and output layer
    # (2 · 128256 · 4096) and the final norm (4096) at bf16, 2,101,354,496, beside the first block's output,
    # 218,112,000 parameters (4096 · 10240 attention + 3 · 4096 · 14336 MLP + 2 · 4096 norms) at bf16, and its
    # shard copy, 436,224,000 · 9/8 = 490,752,000: 2,592,106,496; the sharded fp32 gradients,
    # 8,030,261,248 / 8 · 4 = 4,015,130,624 (the peak, the loss, runs without them)
    row = next(r for r in bench.measured_peaks() if r.name == "torchtitan Llama 3.1 8B FSDP 8 (reserved)")
    pools = bench.reserved_gib(row)
    allocated, moment = bench.predicted_gib(row)
    assert moment == "loss" and pools.allocated_bytes == pytest.approx(allocated * 2**30, rel=1e-12)
    assert pools.loss_hole_bytes == 4_202_692_608
    assert pools.compute_bytes == pools.allocated_bytes + 4_202_692_608
    assert pools.copy_in_bytes == 2_592_106_496
    assert pools.reduce_scatter_bytes == 4_015_130_624
    assert all(bench.reserved_gib(r) is None for r in bench.measured_peaks() if r.allocated)


def test_the_15b_release_rows_are_the_golden_files(bench):
    # gpt3_15b_8t_release_sm golden_values_dev_dgx_h100.json / _lts_dgx_a100.json (iteration 12715) and
    # gpt3_15b_8t_release_sm_gb200 golden_values_dev_dgx_gb200.json (iteration 13000): mem-max-allocated-bytes,
    # mem-allocated-bytes, iteration 1's mem-max-allocated-bytes; micro-batch 4 of a global 384 over dp
    rows = [row for row in bench.measured_peaks() if row.name.startswith("Megatron 15B release")]
    found = sorted(
        (
            bench.config(r).device.name,
            round(r.measured_gib * 2**30),
            r.after_step_bytes,
            r.first_iteration_bytes,
            (bench.config(r).parallel.tp, bench.config(r).parallel.pp, bench.config(r).parallel.dp),
            bench.config(r).training.micro_batches,
        )
        for r in rows
    )
    # and the GB200 file as 6657173fd7 recorded it (--cross-entropy-fusion-impl te then): 34434887680, 14650828800,
    # 33457934336 at iterations 13000 and 1
    assert found == [
        ("a100-80gb", 28391712768, 12698492928, 27893811200, (8, 1, 32), 3),  # 384 / (4 · 32)
        ("gb200", 34434887680, 14650828800, 33457934336, (4, 2, 16), 6),
        ("gb200", 42639351808, 14700898304, 41662402560, (4, 2, 16), 6),  # 384 / (4 · 16)
        ("h100-80gb", 28160194560, 13269043200, 27658764288, (8, 1, 32), 3),
    ]
    for row in rows:
        run = bench.config(row)
        spec = run.models[0].spec
        assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads) == (
            32, 6144, 48, 8,
        )  # fmt: skip
        assert (spec.vocab_size, spec.tied_embeddings, run.training.seq_length) == (256000, False, 4096)
        assert run.parallel.zero == 1 and run.parallel.sequence_parallel and row.stage == run.parallel.pp - 1
        assert run.timing.cross_entropy_fusion_impl == ("te" if row.name.endswith("TE loss)") else "native")


def test_the_mixtral_release_rows_are_the_golden_files(bench):
    # mixtral/<case>/golden_values_dev_dgx_h100.json and _lts_dgx_a100.json at d98e8a64, the last logged iteration
    # (22685 and 23405 for the alltoall case's windows, 200 and 150 for the others): mem-max-allocated-bytes,
    # mem-allocated-bytes, iteration 1's mem-max-allocated-bytes; micro-batch 1 of global 1024 (alltoall) or 256
    rows = [row for row in bench.measured_peaks() if row.name.startswith("Megatron Mixtral")]
    found = sorted(
        (
            r.source.split("/")[-2],
            bench.config(r).device.name,
            round(r.measured_gib * 2**30),
            r.after_step_bytes,
            r.first_iteration_bytes,
            bench.config(r).training.micro_batches,
        )
        for r in rows
    )
    assert found == [
        ("mixtral_8x22b_tp2pp8ep8vpp1_release", "a100-80gb", 28168466432, 22284785664, 26512646144, 32),  # 256 / 8
        ("mixtral_8x22b_tp2pp8ep8vpp1_release", "h100-80gb", 28533706752, 23002929152, 23002945536, 32),
        ("mixtral_8x7b_alltoall_tp2pp4ep4_release", "a100-80gb", 25339500544, 17448753152, 23085549568, 64),  # 1024/16
        ("mixtral_8x7b_alltoall_tp2pp4ep4_release", "h100-80gb", 25603858432, 17703634944, 23340781568, 64),
        ("mixtral_8x7b_tp1pp4ep8vpp8_release", "a100-80gb", 35900022784, 19085930496, 30055743488, 32),
        ("mixtral_8x7b_tp1pp4ep8vpp8_release", "h100-80gb", 35505844224, 19743387648, 29394774016, 32),
    ]
    for row in rows:
        run = bench.config(row)
        spec, par = run.models[0].spec, run.parallel
        assert (spec.num_experts, spec.experts_per_token, spec.num_key_value_heads) == (8, 2, 8)
        assert row.stage == par.pp - 1 and par.zero == 1 and run.training.micro_batch_size == 1
        # 8x7B: 32 layers of 4096 (experts of 14336); 8x22B: 56 of 6144 (16384); the tokenizer's 256000 or 32000
        assert (spec.num_layers, spec.hidden_size, spec.moe_intermediate_size) in ((32, 4096, 14336), (56, 6144, 16384))
        assert spec.vocab_size == (256000 if "alltoall" in row.name else 32000)
        # TP 2 everywhere (the EP 8 case's flags set it after the name's tp1); PP 4, 4 with 8 chunks, 8; EP 4 or 8
        assert (par.tp, par.pp, par.ep) in ((2, 4, 4), (2, 4, 8), (2, 8, 8))


def test_the_deepseek_v3_proxy_rows_are_the_golden_files(bench):
    # mixtral/deepseekv3_proxy_flex_*_release_sm golden_values_dev_dgx_{h100,gb200}.json at iteration 9535:
    # mem-max-allocated-bytes, mem-allocated-bytes, iteration 1's; global batch 512 over dp 8 at micro-batch 1 or 4
    rows = [row for row in bench.measured_peaks() if row.name.startswith("Megatron DeepSeek-V3 proxy")]
    found = sorted(
        (
            bench.config(r).device.name,
            round(r.measured_gib * 2**30),
            r.after_step_bytes,
            r.first_iteration_bytes,
            (bench.config(r).parallel.tp, bench.config(r).parallel.pp, bench.config(r).parallel.ep),
            bench.config(r).training.micro_batches,
        )
        for r in rows
    )
    # and the full-length files (iteration 47680): the GB200 one of f098fe8482, the H100 one of be2b2cd70d, both with
    # --cross-entropy-fusion-impl te then (168cb15d70 set native), the H100 one on DeepEP (--moe-enable-deepep)
    assert found == [
        ("gb200", 100344504320, 58533773312, 85005172736, (2, 2, 8), 16),
        ("gb200", 121062998016, 58583740416, 106022002688, (2, 2, 8), 16),  # 512 / (4 · 8)
        ("h100-80gb", 46128394240, 33395759104, 37005148160, (2, 4, 16), 64),
        ("h100-80gb", 51399831552, 33393860608, 42198188032, (2, 4, 16), 64),  # 512 / (1 · 8)
    ]
    for row in rows:
        run = bench.config(row)
        spec = run.models[0].spec
        assert (spec.num_layers, spec.num_experts, spec.experts_per_token, spec.mtp_layers) == (14, 64, 8, 1)
        te_loss = row.name.endswith("TE loss")
        assert run.timing.cross_entropy_fusion_impl == ("te" if te_loss else "native")
        deepep = te_loss and run.device.name == "h100-80gb"
        assert run.timing.moe_dispatcher == ("deepep" if deepep else "hybridep")


def test_hybridep_s_buffers_are_not_counted_by_the_allocator(bench):
    # HybridEP maps its buffers with cuMemCreate / cudaMalloc (DeepEP hybrid-ep 94a9f8f allocator.cu, intranode.cu,
    # internode_doca.cu), beside PyTorch's caching allocator. The H100 proxy: T = 4096·1/tp 2 = 2048 tokens a rank,
    # G = ep 16 ranks, R = 8 a node, N = 2 nodes, L = 64/16 = 4 local experts, h 7168.
    # NVLink: 2048·16·7168·2 + 2048·16·4·8·4 + 2048·16·56·4 = 469,762,048 + 4,194,304 + 7,340,032 = 481,296,384;
    # RDMA dispatch: 2048·7168·2 + 2048·4·8·2·4 + 2048·56·4 = 30,343,168, + 1·2048·(14336 + 128 + 224) = 30,081,024;
    # combine 2·1·2048·(14336 + 128) = 59,244,544; in all 600,965,120 bytes
    row = next(r for r in bench.measured_peaks() if r.name == "Megatron DeepSeek-V3 proxy H100 TP2 PP4 EP16")
    run = bench.config(row)
    memory, layer_walk = MemoryModel(run), walk(run)
    assert uncounted_bytes(memory, layer_walk, row.stage) == 600_965_120
    peak = run_stage_peaks(run, memory, layer_walk)[row.stage]
    assert allocated_peak_bytes(memory, layer_walk, peak) == peak.peak_bytes - 600_965_120
    assert bench.predicted_after_step_gib(row) == pytest.approx((peak.moments["optimizer"] - 600_965_120) / 2**30)
    # a run without a flex dispatcher: nothing uncounted, the allocator's peak is the peak
    dense = next(r for r in bench.measured_peaks() if r.name == "Megatron GPT 7B TP4 PP1 (H100)")
    run = bench.config(dense)
    memory, layer_walk = MemoryModel(run), walk(run)
    peak = run_stage_peaks(run, memory, layer_walk)[0]
    assert uncounted_bytes(memory, layer_walk, 0) == 0 and allocated_peak_bytes(memory, layer_walk, peak) is None


def test_the_december_2024_float8_settings_are_the_tomls(bench):
    # torchtitan 9dec370 train_configs/llama3_405b.toml [float8]: enable_float8_linear,
    # enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp = true; llama3_8b.toml and
    # llama3_70b.toml: enable_float8_linear = false, the tables' Float8 a flag (config_manager.py's
    # --float8.enable_fsdp_float8_all_gather is a store_true flag: off unless named, and the file names none)
    rows = [row for row in bench.measured_peaks() if row.source.startswith(bench.TORCHTITAN)]
    assert len(rows) == 17  # Tables 1 and 3: 6; Table 2: 4; Table 4: 1; Table 5: 2; Table 6: 4
    for row in rows:
        timing = bench.config(row).timing
        if "405B" in row.name:
            assert (timing.matmul_dtype, timing.fp8_recipe) == ("fp8", "tensorwise"), row.name
            assert timing.fp8_fsdp_all_gather and timing.fp8_precompute_scale, row.name
        else:
            assert not timing.fp8_fsdp_all_gather, row.name
            float8 = "Float8" in row.name or "CP" in row.name or "70B" in row.name
            assert (timing.matmul_dtype == "fp8") is float8, row.name


def test_the_405b_stages_hold_their_blocks_linear_weights_at_a_byte(bench):
    # Under PP FSDP2 keeps each block gathered through the step; with the float8 all-gather the gathered
    # linear weights are torchao float8/fsdp_utils.py `fsdp_post_all_gather`'s float8 data, a byte an element
    # (the norms stay bf16). Llama 3 405B's block per TP rank (8): wq and wo 16384², wk and wv 16384·1024
    # (8 KV heads of 128), w1, w3, w2 16384·53248:
    # (2·268,435,456 + 2·16,777,216 + 3·872,415,232) / 8 = 3,187,671,040 / 8 = 398,458,880 elements,
    # so a byte less each: 398,458,880 bytes a block
    row = next(row for row in bench.measured_peaks() if row.name.startswith("torchtitan 405B FSDP8 TP8 PP8 1f1b"))
    held = {}
    for gather in (True, False):
        raw = {
            **row.raw,
            "timing": {**row.raw["timing"], "fp8_fsdp_all_gather": gather, "fp8_precompute_scale": gather},
        }
        run = bench.run_config(raw, row.name)
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        held[gather] = MemoryModel(run).static_breakdown(body).held_through_step_bytes
    assert held[False] - held[True] == 398_458_880


def test_the_logged_rank_holds_the_last_experts(bench):
    # training_log's mem-max-allocated-bytes comes from rank world - 1 (global_vars.py `_set_tensorboard_writer`),
    # the last of every mixed-radix dimension: the last stage, and EP rank ep - 1, whose local experts are
    # ep_rank · (E/ep) + i (moe_layer.py): MoE-MLA 32 experts over EP 4 -> 24..31; Mixtral 8 over EP 4 -> 6, 7 and
    # over EP 8 -> 7; the DeepSeek-V3 proxy's 64 over EP 16 -> 60..63 and over EP 8 -> 56..63
    expected = {
        "Megatron MoE-MLA 16L TP2 PP2 EP4 (H100)": range(24, 32),
        "Megatron MoE-MLA layout, selective recompute (H100)": range(24, 32),
        "Megatron Mixtral 8x7B alltoall TP2 PP4 EP4 (H100)": range(6, 8),
        "Megatron Mixtral 8x7B TP2 PP4 VPP8 EP8 (H100)": range(7, 8),
        "Megatron Mixtral 8x22B TP2 PP8 EP8 (A100, core 0.12.0)": range(7, 8),
        "Megatron DeepSeek-V3 proxy H100 TP2 PP4 EP16": range(60, 64),
        "Megatron DeepSeek-V3 proxy GB200 TP2 PP2 EP8": range(56, 64),
        "Megatron GPT 7B TP1 PP4 (H100)": None,
    }
    rows = {row.name: row for row in bench.measured_peaks()}
    for name, experts in expected.items():
        row = rows[name]
        assert bench.logged_experts(row) == experts, name
        assert row.stage == bench.config(row).parallel.pp - 1, name


def test_iteration_one_and_later_are_split_where_no_load_precedes_them(bench):
    # the MoE-MLA CI cases run 50 iterations in one launch from an initialisation (lm loss 11.05 at iteration 1);
    # the release runs from an initialisation (alltoall: lm loss 12.67, the DeepSeek-V3 proxies 13.90 at iteration 1)
    # end in a later window; the Mixtral EP 8 cases load trained weights (--finetune) before iteration 1
    rows = {row.name: row for row in bench.measured_peaks()}
    split = {name: bench.routing_after_first_gib(row) for name, row in rows.items()}
    later = {name for name, parts in split.items() if parts is not None and parts[1] is not None}
    assert later == {
        "Megatron MoE-MLA 16L TP2 PP2 EP4 (H100)",
        "Megatron MoE-MLA 16L TP2 PP2 EP4 (H100, DGX Cloud)",
        "Megatron MoE-MLA layout, selective recompute (H100)",
    }
    trained = {name for name, row in rows.items() if row.trained_router}
    assert trained == {name for name in rows if "Mixtral 8x7B TP2 PP4 VPP8" in name or "Mixtral 8x22B" in name}
    assert all(split[name][0] is None for name in trained)
    assert split["Megatron Mixtral 8x7B alltoall TP2 PP4 EP4 (H100)"][0] is not None
    # memory_speed at 11debfa7b4: 60,111,630,336 B last, 55,051,542,528 B at iteration 1: a rise of 5,060,087,808 B
    # = 4.7126 GiB; 'later' is that rise less ppb's own (its Adam moments), so later - it. 1's error is the row's
    # measured minus ppb's peak
    row = rows["Megatron MoE-MLA 16L TP2 PP2 EP4 (H100)"]
    first_error, rise_beyond = split[row.name]
    predicted, _ = bench.predicted_gib(row)
    assert row.measured_gib - row.first_iteration_bytes / 2**30 == pytest.approx(4.7126, abs=1e-4)
    assert rise_beyond - first_error == pytest.approx(row.measured_gib - predicted, abs=1e-9)
