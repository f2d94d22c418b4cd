"""Layer descriptions and their merging (`_ppb.py`'s lay_ppb and add_to_ppb_list in mindspore-ai/hyper-parallel,
the cases of its test_ppb.py), on the hand-checkable fakes."""

from __future__ import annotations

import copy

import pytest
from test_ppb_fakes import EMB, MB, NOT, OUT, SEL, SPEC, FakeMemory, FakePricer, layer_of, small_run

from ppb_core.model.switches import KEEP_ALL, MEMORY_KEY, OPTIONS, TIME_KEY, recomputed
from ppb_core.model.walk import BODY, HEAD, TAIL, walk
from ppb_core.payload.describe import (
    Evaluation,
    add_to_list,
    describe,
    describe_layer,
    describe_layers,
    many_in_flight,
    mb,
)
from ppb_core.payload.run import describe_run

SOFTMAX = dict(KEEP_ALL, softmax=0)


def _body(dp_mb=0, configured=SOFTMAX, timed=True, pricer=None, memory=None):
    layer = layer_of(BODY)
    memory = memory or FakeMemory(dp_mb=dp_mb)
    pricer = pricer if pricer is not None else (FakePricer() if timed else None)
    # test_ppb.py's config has neither p nor m, so the buffers are split at 2 micro-batches in flight.
    return describe_layer(layer, memory, pricer, many=2, configured=configured)


def _option(desc, option):
    return desc[MEMORY_KEY[option]], desc[TIME_KEY[option]]


def test_timed_body_prices_every_option_as_section_8_1_states():
    pricer = FakePricer()
    desc = _body(pricer=pricer)
    # Memory per micro-batch, MB: activations at 1 (8 − freed) + buffers per micro-batch. With dp 0
    # the buffers are the 2 MB·k gathers, so 2 MB per micro-batch and nothing once, unless the
    # gathers are recomputed. Backward: 20, + 1 per op recomputed, + 3 for the gathers; FULL 30.
    assert _option(desc, "NONE") == (8 + 2, 20)
    assert _option(desc, "SLCT") == (7 + 2, 20 + 1)  # softmax
    assert _option(desc, "COMM") == (8 + 0, 20 + 3)  # gather
    assert _option(desc, "BOTH") == (7 + 0, 20 + 1 + 3)  # softmax and gather
    assert _option(desc, "FULL") == (1 + 0, 30)
    assert desc["memory_parameter"] == 4 + 0  # 4 MB static, no buffers held once
    assert desc["forward_time"] == 10 and desc["time"] == 10
    selective_calls = [recomputed(switches) for _, state, switches in pricer.calls if state is SEL]
    assert selective_calls == [{"softmax"}, {"gather"}, {"gather", "softmax"}]
    layers = {layer for layer, _, _ in pricer.calls}
    assert len(layers) == 1 and next(iter(layers)).kind.name == "dense"


def test_the_configured_switches_come_back_unchanged():
    configured = dict(SOFTMAX)
    run = small_run(recompute={"softmax": 0})
    before = (copy.deepcopy(run.training.recompute), run.switches("a"))
    desc = _body(configured=configured)
    assert configured == SOFTMAX
    assert "memory_both_comm_select" in desc
    describe_run(run, FakeMemory(), FakePricer())
    assert (run.training.recompute, run.switches("a")) == before


def test_switches_reach_the_memory_model_through_the_evaluation_context():
    memory = FakeMemory()
    _body(memory=memory)
    selective = {recomputed(switches) for _, state, switches, _ in memory.calls if state is SEL}
    assert selective == {frozenset({"softmax"}), frozenset({"gather"}), frozenset({"gather", "softmax"})}
    assert all(switches is None for _, state, switches, _ in memory.calls if state is not SEL)
    context = Evaluation(memory, layer_of(BODY), SOFTMAX)
    inner = context.selective({"gather": 0})
    # Over the layer's own switches, without touching the context it came from.
    assert recomputed(inner.running) == {"softmax", "gather"} and context.switches is None


def test_head_and_tail_are_priced_as_ends_without_their_kind():
    pricer = FakePricer()
    head = describe_layer(layer_of(HEAD), FakeMemory(), pricer, many=2, configured=SOFTMAX)
    tail = describe_layer(layer_of(TAIL), FakeMemory(), pricer, many=2, configured=SOFTMAX)
    assert (head["forward_time"], head["backward_time"]) == (1.0, 2.0)
    assert (tail["forward_time"], tail["backward_time"]) == (3.0, 6.0)
    assert [(layer.node, state, switches) for layer, state, switches in pricer.calls] == [
        (HEAD, EMB, None),
        (TAIL, OUT, None),
    ]
    # memory_parameter: 4 MB static + MB(8 MB kept + max(0, 2 MB) buffers at one micro-batch).
    assert head["memory_parameter"] == 4 + 10 and tail["memory_parameter"] == 14
    assert list(head) == ["model_name", "type", "memory_parameter", "time", "forward_time", "backward_time"]
    assert head["time"] == 1 and head["type"] == HEAD and tail["type"] == TAIL


def test_head_and_tail_are_measured_as_ends():
    memory = FakeMemory()
    describe_layer(layer_of(HEAD), memory, None, many=2, configured=SOFTMAX)
    describe_layer(layer_of(TAIL), memory, None, many=2, configured=SOFTMAX)
    assert [(state, in_flight) for _, state, _, in_flight in memory.calls] == [(EMB, 1), (OUT, 1)]


def test_untimed_body_has_none_slct_and_full_only():
    desc = _body(timed=False)
    assert list(desc) == [
        "model_name",
        "type",
        "memory_parameter",
        "memory_activation",
        "memory_select_rec",
        "memory_recompute",
        "time",
    ]
    figures = (desc["memory_activation"], desc["memory_select_rec"], desc["memory_recompute"], desc["time"])
    assert figures == (10, 9, 1, 1)


def test_timed_body_keys_come_in_the_seed_order():
    assert list(_body()) == [
        "model_name",
        "type",
        "memory_parameter",
        "memory_activation",
        "memory_select_rec",
        "memory_select_comm",
        "memory_both_comm_select",
        "memory_recompute",
        "time",
        "forward_time",
        "backward_time",
        "select_rec_time",
        "select_comm_time",
        "both_comm_select_time",
        "recompute_time",
    ]


@pytest.mark.parametrize(
    ("dp_mb", "parameter", "activation", "select_comm"),
    [
        # dp 0: buffers 2 MB·k (per micro-batch 2, once 0); COMM drops them: 8 + 0.
        (0, 4, 10, 8),
        # dp 5: buffers max(5, 2k) = 5 at k = 1 and 2, all held once: parameter 4 + 5, NONE 8 + 0.
        (5, 9, 8, 8),
    ],
)
def test_the_buffers_split_between_per_micro_batch_and_once(dp_mb, parameter, activation, select_comm):
    desc = _body(dp_mb=dp_mb)
    assert (desc["memory_parameter"], desc["memory_activation"], desc["memory_select_comm"]) == (
        parameter,
        activation,
        select_comm,
    )


class _Odd(FakeMemory):
    """Buffers and activations that are not whole MB, to pin the per-term truncation."""

    def static_bytes(self, layer):
        return 4.9 * MB

    def dynamic_bytes(self, layer, state, switches, in_flight):
        activation, buffers = super().dynamic_bytes(layer, state, switches, in_flight)
        return activation + 0.6 * MB, buffers + 0.7 * MB * in_flight + 0.9 * MB


def test_every_term_is_truncated_to_whole_mb_on_its_own():
    desc = _body(memory=_Odd())
    # NONE: activations 8.6 MB → 8; buffers 2.7·k + 0.9: per micro-batch 2.7 → 2, once 0.9.
    # memory_parameter: static 4.9 → 4, plus the largest once (0.9 everywhere; FULL dp 0 + 0.9) → 0.
    assert desc["memory_activation"] == 8 + 2
    assert desc["memory_select_comm"] == 8 + 0  # gathers gone: per micro-batch 0.7 → 0
    assert desc["memory_parameter"] == 4 + 0
    assert mb(2.99 * MB) == 2 and mb(-0.5 * MB) == 0 and mb((0.6 * MB, 0.6 * MB)) == 1


def test_many_is_the_most_micro_batches_a_1f1b_stage_keeps_and_at_least_two():
    assert many_in_flight(4, 32) == 4 and many_in_flight(8, 3) == 3 and many_in_flight(1, 32) == 2


def test_describe_splits_the_buffers_at_many_in_flight():
    # pp 4, 3 micro-batches: split at min(4, 3) = 3 in flight, asked at 3 and 1 only.
    run = small_run(pp=4, micro_batches=3)
    memory = FakeMemory()
    describe(run, memory)
    assert {in_flight for _, state, _, in_flight in memory.calls if state is NOT} == {1, 3}


# --- merging -------------------------------------------------------------------------------------


def test_identical_layers_merge_with_a_count_and_bodies_are_numbered_in_order():
    listed: list[dict] = []
    head = {"model_name": "a", "type": HEAD, "memory_parameter": 3, "time": 1}
    body = {"model_name": "a", "type": BODY, "memory_parameter": 4, "memory_activation": 10, "time": 1}
    other = dict(body, memory_activation=11)
    for desc in (head, body, body, other, body, {}):
        add_to_list(listed, desc)
    # the body after `other` is not counted with the first two: the list keeps the model's order
    # (body, body, other, body), which the balancer places along the pipeline
    assert [(d["name"], d["nb_layer"]) for d in listed] == [("HEAD", 1), ("BODY_0", 2), ("BODY_1", 1), ("BODY_2", 1)]
    assert "nb_layer" not in body and "name" not in body  # the caller's description is copied
    # A second model's head is another description with the same name (SAPP's behaviour).
    add_to_list(listed, dict(head, model_name="b"))
    assert [d["name"] for d in listed] == ["HEAD", "BODY_0", "BODY_1", "BODY_2", "HEAD"]


def test_the_walk_describes_heads_bodies_and_tails_in_pipeline_order():
    run = small_run(models=(("a", SPEC), ("b", SPEC)))
    descriptions = describe(run, FakeMemory(), FakePricer())
    assert [(d["model_name"], d["name"], d["nb_layer"]) for d in descriptions] == [
        ("a", "HEAD", 1),
        ("a", "BODY_0", 4),
        ("a", "TAIL", 1),
        ("b", "HEAD", 1),
        ("b", "BODY_1", 4),
        ("b", "TAIL", 1),
    ]


def test_measuring_each_distinct_kind_once_equals_describing_every_layer():
    run = small_run(models=(("a", SPEC),), pp=2)
    memory = FakeMemory(dp_mb=5)
    merged = describe(run, memory, FakePricer())
    every: list[dict] = []
    for layer in walk(run):
        add_to_list(
            every,
            describe_layer(layer, FakeMemory(dp_mb=5), FakePricer(), many=2, configured=run.switches(layer.model_name)),
        )
    assert merged == every
    # Three distinct (model, node, kind): HEAD, the dense body, TAIL. The body asks for NONE, SLCT,
    # COMM, BOTH, FULL at 1 and many in flight: 10 calls; each end one call.
    assert len(memory.calls) == 10 + 2
    assert describe_layers(walk(run), FakeMemory(dp_mb=5), FakePricer(), many=2, switches_of=run.switches) == merged


def test_the_keys_are_the_sapp_balancers_own():
    # sapp_ppb/utils/recompute.py: the balancer's TYPE order, JSON_MEMORY_NAME and JSON_TIME_NAME.

    assert OPTIONS == ("NONE", "SLCT", "COMM", "BOTH", "FULL")
    assert [MEMORY_KEY[o] for o in OPTIONS] == [
        "memory_activation",
        "memory_select_rec",
        "memory_select_comm",
        "memory_both_comm_select",
        "memory_recompute",
    ]
    assert [TIME_KEY[o] for o in OPTIONS] == [
        "backward_time",
        "select_rec_time",
        "select_comm_time",
        "both_comm_select_time",
        "recompute_time",
    ]
    assert all(key == key.strip() for key in (*MEMORY_KEY.values(), *TIME_KEY.values()))
