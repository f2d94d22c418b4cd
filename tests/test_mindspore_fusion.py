"""MindSpore's fused gradient reductions and parameter gathers in a MindFormers run (iteration.py
`mindspore_fusion_id`, `fused_by_id`). Expected values worked by hand from MindFormers v1.4.0-beta2
models/utils.py `LayerSetting.set` and llama.py `LlamaModel.__init__`, and MindSpore's param_info.h
(default fusion_type_ 1) and communication_op_fusion.cc (one fused op per fusion id)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ppb_core.errors import InputError
from ppb_core.model.params import LayerParams
from ppb_core.model.walk import BODY, HEAD, TAIL
from ppb_core.timing.iteration import (
    MINDFORMERS_GRADIENT_AGGREGATION_GROUP,
    framework_rules,
    fused_by_id,
    mindspore_fusion_id,
    run_iteration,
)
from tests.test_timing_iteration import small_run


def _run(layers: int, pp: int = 1):
    """What `mindspore_fusion_id` reads of a run: the pipeline size and the model's layer count."""
    spec = SimpleNamespace(num_layers=layers)
    return SimpleNamespace(parallel=SimpleNamespace(pp=pp), spec=lambda name: spec)


def _layer(node: str, index: int):
    return SimpleNamespace(node=node, index=index, model_name="llm")


def test_thirty_two_layers_in_four_groups_the_embedding_with_the_last():
    # L = 32, groups 4: d = int(33 / 4) = 8: layers 0-7 id 1, 8-15 id 2, 16-23 id 3, 24-31 id 4; the
    # embedding 4 (llama.py: gradient_aggregation_group), the output projection the default 1.
    run = _run(32)
    ids = [mindspore_fusion_id(run, _layer(BODY, i), 4) for i in range(32)]
    assert ids == [1] * 8 + [2] * 8 + [3] * 8 + [4] * 8
    assert mindspore_fusion_id(run, _layer(HEAD, -1), 4) == 4
    assert mindspore_fusion_id(run, _layer(TAIL, 32), 4) == 1


def test_the_division_is_integral_as_mindformers_writes_it():
    # L = 24: d = int(25 / 4) = 6: layer 5 id 1, 6 id 2, 23 id 4. L = 30: d = int(31 / 4) = 7, so layers
    # 28 and 29 get id int(28 / 7) + 1 = 5, a fifth group, as LayerSetting.set computes it.
    assert [mindspore_fusion_id(_run(24), _layer(BODY, i), 4) for i in (5, 6, 23)] == [1, 2, 4]
    assert mindspore_fusion_id(_run(30), _layer(BODY, 28), 4) == 5


def test_a_pipeline_puts_every_layer_and_the_embedding_in_group_two():
    run = _run(32, pp=4)
    assert {mindspore_fusion_id(run, _layer(BODY, i), 4) for i in range(32)} == {2}
    assert mindspore_fusion_id(run, _layer(HEAD, -1), 4) == 2
    assert mindspore_fusion_id(run, _layer(TAIL, 32), 4) == 1


def test_a_fused_reduction_waits_for_its_last_gradient_and_a_gather_for_its_first_reader():
    # L = 4, groups 2: d = int(5 / 2) = 2: layers 0, 1 id 1; 2, 3 id 2; the embedding 2; the output 1.
    # Backward order with ready times: TAIL 1 (id 1), layer 3 at 2, 2 at 3 (id 2), 1 at 4, 0 at 5 (id 1),
    # HEAD at 6 (id 2). Reductions: id 1 at max(1, 4, 5) = 5 with 1 + 10 + 10 parameters, id 2 at
    # max(2, 3, 6) = 6 with 10 + 10 + 100. As gathers (first reader): id 1 at 1, id 2 at 2.
    run = _run(4)
    p = LayerParams(non_expert=10)
    members = [
        (1.0, LayerParams(non_expert=1), _layer(TAIL, 4)),
        (2.0, p, _layer(BODY, 3)),
        (3.0, p, _layer(BODY, 2)),
        (4.0, p, _layer(BODY, 1)),
        (5.0, p, _layer(BODY, 0)),
        (6.0, LayerParams(non_expert=100), _layer(HEAD, -1)),
    ]
    reduced = fused_by_id(run, members, 2)
    assert [(when, params.non_expert) for when, params in reduced] == [(5.0, 21), (6.0, 120)]
    gathered = fused_by_id(run, members, 2, first=True)
    assert [(when, params.non_expert) for when, params in gathered] == [(1.0, 21), (2.0, 120)]


def test_one_group_reduces_and_gathers_everything_unoverlapped():
    # gradient_aggregation_group 1: d = int(5 / 1) = 5, every layer, the embedding and the output id 1: one
    # fused reduce-scatter after the last gradient (the embedding's, at the backward's end) and one fused
    # all-gather before the embedding's forward, so all of both is exposed: the dp term equals their link time.
    run = small_run(dp=2, pp=1, m=1, framework="mindformers", timing={"gradient_aggregation_group": 1})
    assert framework_rules(run).fusion_groups == 1
    it = run_iteration(run)
    assert it.link_seconds["dp_communication"] > 0
    assert it.breakdown["dp_communication"] == pytest.approx(it.link_seconds["dp_communication"])
    # MindFormers' default, 4 groups of one layer each here, hides some of it behind the backward and forward
    default = run_iteration(small_run(dp=2, pp=1, m=1, framework="mindformers"))
    assert framework_rules(small_run(framework="mindformers")).fusion_groups == MINDFORMERS_GRADIENT_AGGREGATION_GROUP
    assert default.breakdown["dp_communication"] < default.link_seconds["dp_communication"]


def test_the_word_is_mindformers_only():
    with pytest.raises(InputError, match="gradient_aggregation_group"):
        small_run(timing={"gradient_aggregation_group": 4})


def _dp_link(m: int, param_dtype: str | None, parallel_optimizer: bool) -> float:
    """The dp term's link seconds of a DP 2 MindFormers run in one fusion group (every collective exposed)."""
    timing = {"gradient_aggregation_group": 1} | ({"param_dtype": param_dtype} if param_dtype else {})
    run = small_run(
        dp=2, pp=1, m=m, framework="mindformers", timing=timing, enable_parallel_optimizer=parallel_optimizer
    )
    return run_iteration(run).link_seconds["dp_communication"]


def test_gradients_reduce_and_parameters_gather_in_the_parameters_dtype():
    # MindSpore's step_parallel.cc (2024): without a pipeline the optimizer-parallel AllGather takes the
    # parameter as it is, its backward reduce-scatters the parameter's gradient; over micro-batches the
    # all-reduced tensor is `accu_grads`, a clone of the parameters, and the gather follows the cast to the
    # compute dtype. Only the sharded weights are gathered and reduce-scattered (`ApplyParallelOptOnParam`); the
    # whole ones (the embedding table, LlamaConfig's parallel_optimizer False; norm scales) are all-reduced by
    # their mirror op. SMALL_GQA by hand: 4 layers of 11,274,240 (q and o 1024·1024 each, k and v 256·1024 each,
    # the MLP 3·2816·1024, two norms of 1024), embedding and output 4096·1024 each, the final norm 1024:
    # 53,486,592 in all; at the default 64 KB threshold every matrix but the embedding table is sharded over
    # DP 2 (first dimensions 1024, 256, 2816, 4096 even): whole W = 4,194,304 + 9 · 1024 = 4,203,520, sharded
    # S = 49,283,072. ROUND_DEVICE has no latency, so a collective's seconds are linear in its bytes: over DP 2
    # a reduce-scatter (or all-gather) at 2 bytes moves 1 byte an element at ROUND_DEVICE's 100 GB/s in the
    # node × comm_efficiency 0.5 = 50 GB/s: s = S / 50e9, w = W / 50e9; an all-reduce twice that.
    s, w = 49_283_072 / 50e9, 4_203_520 / 50e9
    assert 49_283_072 + 4_203_520 == 53_486_592
    # bf16 parameters (param_init_type = compute_dtype): AG s + RS s + the mirrors' AR 2w
    assert _dp_link(1, None, True) == pytest.approx(2 * s + 2 * w, rel=1e-12)
    # float16 parameters under bf16 compute: still 2 bytes each way (not an fp32 main gradient's 4)
    assert _dp_link(1, "fp16", True) == pytest.approx(2 * s + 2 * w)
    # float32 parameters: each collective at 4 bytes
    assert _dp_link(1, "fp32", True) == pytest.approx(4 * s + 4 * w)
    # two micro-batches without a pipeline: accu_grads all-reduced in the parameters' dtype (the sharded and the
    # whole ones alike, one fused all-reduce), the gather of the parameter itself, as with one micro-batch
    # (`InsertAllGatherAfterCast` and `FindChildCastWithFP32ToFP16` test only the pipeline, v2.3.0-v2.6.0):
    # bf16 2(s + w) + s, fp32 4(s + w) + 2s
    assert _dp_link(2, None, True) == pytest.approx(3 * s + 2 * w)
    assert _dp_link(2, "fp32", True) == pytest.approx(6 * s + 4 * w)
    # without `enable_parallel_optimizer`: an all-reduce of every gradient, the mirror before the Linear's cast
    # (`InsertMirrorBeforeCast`, gradient_fp32_sync) reduces the parameter's gradient too, 2(s + w) and 4(s + w)
    assert _dp_link(1, None, False) == pytest.approx(2 * s + 2 * w)
    assert _dp_link(1, "fp32", False) == pytest.approx(4 * s + 4 * w)


def test_only_the_sharded_weights_are_gathered_and_the_whole_ones_all_reduced_on_their_own():
    """The same run with `model_config.parallel_optimizer` (the embedding table sharded too): S + W' with W' the
    9,216 norm elements; one micro-batch, bf16: AG + RS of 53,477,376 and the norms' all-reduce."""
    run = small_run(
        dp=2,
        pp=1,
        m=1,
        framework="mindformers",
        timing={"gradient_aggregation_group": 1},
        enable_parallel_optimizer=True,
        embedding_parallel_optimizer=True,
    )
    link = run_iteration(run).link_seconds["dp_communication"]
    assert link == pytest.approx(2 * 53_477_376 / 50e9 + 2 * 9_216 / 50e9, rel=1e-12)
