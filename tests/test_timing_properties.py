"""Monotonicity of the time model over random architectures and parallel layouts (hypothesis).

- More recompute never lowers the backward: NONE ≤ SEL(S) ≤ SEL(S ∪ T) ≤ FULL, forward unchanged.
- More tokens (longer sequences or bigger micro-batches) never lower any time.
- More tensor parallelism never raises a device's FLOPs.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ppb_core.config.run import parse_run_config
from ppb_core.model.switches import SWITCHES, LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.flops import layer_flops
from ppb_core.timing.pricer import TimeModel

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def architectures(draw) -> dict:
    """A small model spec: dense or MoE, MHA/GQA/MQA or MLA, gated or not, with or without dropout."""
    heads = 16
    spec = {
        "vocab_size": 64 * draw(st.integers(4, 32)),
        "hidden_size": 64 * draw(st.integers(2, 8)),
        "num_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": draw(st.sampled_from([1, 2, 4, 8, 16])),
        "head_dim": 32,
        "intermediate_size": 64 * draw(st.integers(2, 16)),
        "activation": draw(st.sampled_from(["swiglu", "gelu"])),
        "qk_norm": draw(st.booleans()),
        "attention_dropout": draw(st.sampled_from([0.0, 0.1])),
        "hidden_dropout": draw(st.sampled_from([0.0, 0.1])),
    }
    if draw(st.booleans()):
        spec.update(
            num_experts=8,
            experts_per_token=draw(st.integers(1, 4)),
            moe_intermediate_size=64 * draw(st.integers(1, 4)),
            shared_experts=draw(st.integers(0, 1)),
        )
    if draw(st.booleans()):
        spec.update(
            num_key_value_heads=heads,
            kv_lora_rank=64,
            q_lora_rank=draw(st.sampled_from([0, 96])),
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
            qk_norm=False,
        )
    return spec


@st.composite
def layouts(draw) -> dict:
    cp = draw(st.sampled_from([1, 2]))
    return {
        "tp": draw(st.sampled_from([1, 2, 4])),
        "sequence_parallel": draw(st.booleans()),
        "cp": cp,
        "cp_variant": draw(st.sampled_from(["ring", "ulysses"])),
        "ep": draw(st.sampled_from([1, 2, 4])),
        "etp": draw(st.sampled_from([1, 2])),
        "devices_per_node": draw(st.sampled_from([2, 8])),
    }


def make_run(spec: dict, layout: dict, seq: int, micro: int, flash: bool, dtype: str = "bf16"):
    dp = 8  # enough ranks for any ep·etp above
    # Ulysses splits the key/value heads by tp·cp too (the run config refuses it otherwise, as TE asserts)
    kv = spec["num_key_value_heads"]
    assume(layout["cp"] == 1 or layout["cp_variant"] == "ring" or kv % (layout["tp"] * layout["cp"]) == 0)
    return parse_run_config(
        {
            "name": "p",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": dp, **layout},
            "training": {
                "seq_length": seq,
                "micro_batch_size": micro,
                "flash_attention": flash,
                "dtype": dtype,
                "moe": {"dropless_imbalance": 1.2},
            },
            "device": {"name": "h100-80gb", "collective_latency_us": 5.0},
        }
    )


def bodies(run):
    seen = {}
    for layer in walk(run):
        seen.setdefault((layer.node, layer.kind), layer)
    return list(seen.values())


def switch_sets():
    return st.sets(st.sampled_from(SWITCHES))


@PROPERTY
@given(architectures(), layouts(), st.booleans(), switch_sets(), switch_sets())
def test_more_recompute_never_lowers_the_backward(spec, layout, flash, first, more):
    run = make_run(spec, layout, 256, 1, flash)
    model = TimeModel(run)
    for layer in bodies(run):
        if layer.node != "BODY":
            continue
        forward, plain = model.layer_times(layer, LayerType.NOT_REC_LAYER)
        some = model.layer_times(layer, LayerType.SEL_REC_LAYER, dict.fromkeys(first, 0))
        most = model.layer_times(layer, LayerType.SEL_REC_LAYER, dict.fromkeys(first | more, 0))
        full = model.layer_times(layer, LayerType.FULL_REC_LAYER)
        assert some[0] == most[0] == full[0] == forward
        # equal where the host's launches bound the backward (`TimeModel.host`), up to round-off
        assert plain <= some[1] + 1e-12 and some[1] <= most[1] + 1e-12 and most[1] <= full[1] + 1e-12


@PROPERTY
@given(
    architectures(),
    layouts(),
    st.booleans(),
    st.sampled_from(["bf16", "fp32"]),
    st.sampled_from([128, 256, 512]),
    st.integers(1, 3),
    st.sampled_from(["seq", "micro"]),
)
def test_more_tokens_never_lower_any_time(spec, layout, flash, dtype, seq, micro, grow):
    small = make_run(spec, layout, seq, micro, flash, dtype)
    big = make_run(spec, layout, 2 * seq if grow == "seq" else seq, micro + (grow == "micro"), flash, dtype)
    small_model, big_model = TimeModel(small), TimeModel(big)
    for small_layer, big_layer in zip(bodies(small), bodies(big), strict=True):
        small_times, big_times = small_model.option_times(small_layer), big_model.option_times(big_layer)
        for option, (forward, backward) in small_times.items():
            assert big_times[option][0] >= forward * (1 - 1e-12), (small_layer.node, option)
            assert big_times[option][1] >= backward * (1 - 1e-12), (small_layer.node, option)


@PROPERTY
@given(architectures(), layouts(), st.booleans(), switch_sets())
def test_more_tensor_parallelism_never_raises_a_devices_flops(spec, layout, flash, recomputed):
    narrow_layout = dict(layout, tp=1 if layout["tp"] == 1 else layout["tp"] // 2)
    wide_layout = dict(layout, tp=max(2, layout["tp"]))
    narrow, wide = make_run(spec, narrow_layout, 256, 1, flash), make_run(spec, wide_layout, 256, 1, flash)
    narrow_model, wide_model = TimeModel(narrow), TimeModel(wide)
    switches = dict.fromkeys(recomputed, 0)
    for narrow_layer, wide_layer in zip(bodies(narrow), bodies(wide), strict=True):
        states = (
            [LayerType.EMBEDDING_LAYER]
            if narrow_layer.node == "HEAD"
            else ([LayerType.OUTPUT_LAYER] if narrow_layer.node == "TAIL" else list(LayerType)[:3])
        )
        for state in states:
            a = layer_flops(narrow_model.ops(narrow_layer), state, switches)
            b = layer_flops(wide_model.ops(wide_layer), state, switches)
            assert sum(b) <= sum(a) * (1 + 1e-12), (narrow_layer.node, state)
