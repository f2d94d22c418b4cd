"""Delayed scaling's amax all-reduces, two a model chunk a micro-batch (ppb_core.timing.fp8_amax): Megatron-Core
core_r0.9.0 transformer_block.py `TransformerBlock.forward` (one `fp8_autocast` around a chunk's layers, its group
`get_amax_reduction_group(with_context_parallel=True)`), TransformerEngine v1.10 fp8.py
`reduce_and_update_fp8_tensors` on the autocast's exit and in the chunk's first module's backward."""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, make_run

from ppb_core.timing.comm import Links
from ppb_core.timing.fp8_amax import amax_group, amax_reduction_seconds, delayed_amax_reductions, in_node_all_reduce_s
from ppb_core.timing.iteration import run_iteration

FP8 = {"matmul_dtype": "fp8", "fp8_recipe": "delayed"}


def _run(parallel: dict, timing: dict | None = None, framework: str = "megatron", micro_batches: int = 8):
    return make_run(
        DENSE,
        parallel=parallel,
        training={"micro_batches": micro_batches},
        framework=framework,
        timing={**FP8, **(timing or {})},
    )


def test_the_group_is_a_stage_s_tensor_context_and_data_parallel_ranks():
    run = _run({"tp": 4, "cp": 2, "dp": 2, "world_size": 16})
    assert (amax_group(run).size, amax_group(run).span) == (16, 16)


def test_one_reduction_is_nccl_s_measured_latency_in_the_node_and_a_tree_across():
    # tp 4 · cp 2 · dp 2 = 16 consecutive ranks on DGX H100 nodes of 8: inside the node nccl-tests' 8-GPU
    # all-reduce of 256 half elements, 15.59 us (aiconfigurator, NCCL 2.29.2), and NCCL's tree across the 2
    # nodes, 2·⌈log2 2⌉ = 2 steps at 5 + 5 µs: 15.59 + 20 = 35.59 µs
    run = _run({"tp": 4, "cp": 2, "dp": 2, "world_size": 16})
    assert amax_reduction_seconds(run, Links.from_run(run)) == pytest.approx(35.59e-6, rel=1e-9)
    # one node (tp 2 · dp 4 = 8): 15.59 µs
    one = _run({"tp": 2, "dp": 4, "world_size": 8})
    assert amax_reduction_seconds(one, Links.from_run(one)) == pytest.approx(15.59e-6, rel=1e-9)


def test_the_in_node_latency_between_past_and_without_measurements():
    links = Links(450e9, 50e9, 5e-6, 8, {})
    measured = ((2, 6.18), (4, 9.46), (8, 15.59))
    # 6 ranks: halfway between 4 and 8, (9.46 + 15.59) / 2 = 12.525 µs
    assert in_node_all_reduce_s(6, links, measured) == pytest.approx(12.525e-6, rel=1e-9)
    # 16 ranks of an NVLink domain: 8's per ring step, 15.59 / 7 · 15 = 33.407 µs
    assert in_node_all_reduce_s(16, links, measured) == pytest.approx(15.59e-6 / 7 * 15, rel=1e-9)
    # unmeasured: the scalar rule's 2·7 steps of 5 µs = 70 µs; one rank none
    assert in_node_all_reduce_s(8, links, ()) == pytest.approx(70e-6, rel=1e-9)
    assert in_node_all_reduce_s(1, links, measured) == 0.0


@pytest.mark.parametrize(
    ("timing", "framework"),
    [
        ({"fp8_recipe": "tensorwise"}, "megatron"),  # current scaling keeps no global amax buffer
        ({"fp8_recipe": "mxfp8"}, "megatron"),
        ({"matmul_dtype": "bf16"}, "megatron"),
        ({"fp8_recipe": "tensorwise"}, "torchtitan"),  # torchao's casts: flops._titan_amax_reductions
    ],
)
def test_only_delayed_scaling_under_transformer_engine_reduces(timing: dict, framework: str):
    run = _run({"tp": 2, "dp": 4, "world_size": 8}, timing, framework)
    assert not delayed_amax_reductions(run)
    assert amax_reduction_seconds(run, Links.from_run(run)) == 0.0


def test_the_iteration_adds_two_a_chunk_a_micro_batch_on_the_busiest_stage():
    # pp 2 · vp 2: the busiest stage holds two chunks of FP8 layers; 8 micro-batches · 2 chunks · 2 reductions
    # of tp 2 · dp 2 = 4 ranks in one node, nccl-tests' 9.46 µs each
    run = _run({"tp": 2, "pp": 2, "vpp": 2, "schedule": "interleaved", "dp": 2, "world_size": 8})
    reduction = amax_reduction_seconds(run, Links.from_run(run))
    assert reduction == pytest.approx(9.46e-6, rel=1e-9)
    iteration = run_iteration(run)
    assert iteration.compute_parts["amax_reduction"] == pytest.approx(8 * 2 * 2 * reduction, rel=1e-9)
    # BF16 adds none
    plain = run_iteration(
        _run(
            {"tp": 2, "pp": 2, "vpp": 2, "schedule": "interleaved", "dp": 2, "world_size": 8}, {"matmul_dtype": "bf16"}
        )
    )
    assert plain.compute_parts["amax_reduction"] == 0.0


def test_deepseek_s_own_recipe_reduces_none():
    # training.fp8_cache deepseek marks DeepSeek-V3's framework (tile- and block-wise scales computed online)
    run = make_run(
        DENSE,
        parallel={"tp": 2, "dp": 4, "world_size": 8},
        training={"fp8_cache": "deepseek"},
        framework="megatron",
        timing=FP8,
    )
    assert not delayed_amax_reductions(run)
