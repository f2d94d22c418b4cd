"""Delayed scaling's amax all-reduces, two a model chunk a micro-batch (ppb_core.timing.fp8_amax): Megatron-Core
core_r0.9.0 transformer_block.py `TransformerBlock.forward` (one `fp8_autocast` around a chunk's layers, its group
`get_amax_reduction_group(with_context_parallel=True)`), TransformerEngine v1.10 fp8.py
`reduce_and_update_fp8_tensors` on the autocast's exit and in the chunk's first module's backward."""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, make_run

from ppb_core.config.run import parse_run_config
from ppb_core.timing.comm import Links
from ppb_core.timing.fp8_amax import (
    REDUCTION_LAUNCHES,
    amax_buffers,
    amax_group,
    amax_reduction_launches,
    amax_reduction_seconds,
    delayed_amax_reductions,
    host_added_s,
    in_node_all_reduce_s,
)
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


def _params_run(release: str, param_gather: bool = True):
    """tp 2 · dp 4 under the distributed optimizer, FP8 parameters gathered or not, on TE *release*."""
    raw = _run({"tp": 2, "dp": 4, "world_size": 8, "zero": 1}, {"fp8_param_gather": param_gather})
    raw = raw.model_dump(mode="json", exclude_none=True) | {"framework_release": {"transformer_engine": release}}
    return parse_run_config(raw)


def test_te_before_1_13_reduces_fp8_parameters_apart_from_the_attention():
    # TE v1.10 fp8.py `get_key_in_buffer`: f"{fwd_bwd_key}_{fp8_weights}_{autocast_key}": under FP8 parameters the
    # linears' buffer (fp8_weights True) and TE DotProductAttention's (no parameters: None) are two keys, each
    # concatenated, all-reduced and updated; 28aa41a3f (#1326, v1.13) keys by direction and autocast alone
    old, new = _params_run("1.10"), _params_run("1.13")
    assert (amax_buffers(old), amax_buffers(new)) == (2, 1)
    assert amax_buffers(_params_run("1.10", param_gather=False)) == 1  # no Float8Tensor weights: one key
    # tp 2 · dp 4 = 8 ranks in one node: nccl-tests' 15.59 µs a buffer
    assert amax_reduction_seconds(old, Links.from_run(old)) == pytest.approx(2 * 15.59e-6, rel=1e-9)
    assert amax_reduction_seconds(new, Links.from_run(new)) == pytest.approx(15.59e-6, rel=1e-9)
    # the host: torch.cat (a plain op, 0.4 of a launch), the NCCL all-reduce, the fused update a buffer
    assert round(REDUCTION_LAUNCHES, 9) == 2.4
    assert amax_reduction_launches(old) == pytest.approx(4.8)
    assert amax_reduction_launches(new) == pytest.approx(2.4)
    # a group of one skips the all-reduce (`get_world_size(group) > 1`), not the concatenation and update
    alone = _run({"world_size": 1})
    assert amax_reduction_launches(alone) == pytest.approx(1.4)
    assert amax_reduction_launches(_run({"tp": 2, "dp": 4, "world_size": 8}, {"fp8_recipe": "tensorwise"})) == 0.0


def test_the_host_s_reduction_launches_cost_what_the_layer_leaves_uncovered():
    # 200 us of launches, 20 us of all-reduce: a host already behind (launches 1.0 ms against 0.8 ms of GPU work)
    # shows 200 − 20 = 180 us; one 100 us ahead (0.8 against 0.9) 200 − 20 − 100 = 80; 300 us ahead none
    assert host_added_s(1.0e-3, 0.8e-3, 200e-6, 20e-6) == pytest.approx(180e-6)
    assert host_added_s(0.8e-3, 0.9e-3, 200e-6, 20e-6) == pytest.approx(80e-6)
    assert host_added_s(0.8e-3, 1.1e-3, 200e-6, 20e-6) == 0.0


def test_the_iteration_adds_the_reduction_launches_where_the_host_is_behind():
    # DENSE at 64 tokens: each layer's GPU work is microseconds against ~20 launches of 80.9 us (DGX H100), so
    # the host is behind in every pass and each reduction adds its launches less its all-reduce: (2.4 · 80.9 −
    # 9.46) us = 184.70 us, twice a chunk a micro-batch: 8 micro-batches · 2 chunks · 2 · 184.70 us = 5.9104 ms
    run = _run({"tp": 2, "pp": 2, "vpp": 2, "schedule": "interleaved", "dp": 2, "world_size": 8})
    iteration = run_iteration(run)
    assert iteration.compute_parts["amax_host"] == pytest.approx(8 * 2 * 2 * (2.4 * 80.9 - 9.46) * 1e-6, rel=1e-9)
    # they are waits for the host too
    assert iteration.host_wait_seconds >= iteration.compute_parts["amax_host"]
    # BF16 launches none
    plain = run_iteration(
        _run(
            {"tp": 2, "pp": 2, "vpp": 2, "schedule": "interleaved", "dp": 2, "world_size": 8}, {"matmul_dtype": "bf16"}
        )
    )
    assert plain.compute_parts["amax_host"] == 0.0
