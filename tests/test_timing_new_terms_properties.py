"""Properties of the time terms the 2026-12-06 sessions added (hypothesis, derandomized, few examples):

- more overlap never raises the iteration, under Megatron (1F1B and interleaved, its p2p protocols) and
  torchtitan (FSDP2 units split or root, each optimizer implementation);
- more data parallelism never lowers the gradient reduction's link time (Megatron's chunk reductions,
  torchtitan's per-unit reduce-scatters);
- a longer sequence never makes one attention call cheaper, on every measured kernel curve
  (`timing.attention_rates`: FlashAttention-2, cuDNN sm90 and sm100; causal or not; head size 64 to 128);
- torchtitan's optimizer step and FSDP2 traffic are non-negative and never fall as the parameters grow;
  `titan_step.fsdp2_units` moves each collective, never drops or invents one;
- the pipeline's sends and receives (`pipeline_p2p`, DeepSpeed's partitioned sends) never make the
  iteration shorter than the schedule without them: the `p2p` term is never negative.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.model.kinds import body_kind
from ppb_core.model.walk import BODY, HEAD, TAIL
from ppb_core.timing.flops import OpGeometry, layer_ops
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.titan_step import FSDP_UNITS, OPTIMIZER_IMPLEMENTATIONS, fsdp2_units, optimizer_bytes_per_element

# small and derandomized: the same examples on every run, a few seconds in all
FAST = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
DEVICES = [ROUND_DEVICE, {"name": "h100-80gb"}, {"name": "a100-80gb"}, {"name": "b200"}]
OVERLAPS = ("tp", "tp_async", "cp_ring", "cp_a2a", "ep", "dp", "param_gather")


def run_of(
    framework: str = "megatron",
    dp: int = 2,
    tp: int = 1,
    pp: int = 2,
    m: int = 4,
    device: dict | None = None,
    timing: dict | None = None,
    spec: dict | None = None,
    seq: int = 2048,
    **parallel,
):
    return parse_run_config(
        {
            "name": "p",
            "framework": framework,
            "models": [{"name": "llm", "spec": spec or SMALL_GQA}],
            "parallel": {"dp": dp, "tp": tp, "pp": pp, "sequence_parallel": tp > 1, **parallel},
            "training": {"seq_length": seq, "micro_batch_size": 1, "micro_batches": m, "dtype": "bf16"},
            "device": device or ROUND_DEVICE,
            "timing": timing or {},
        }
    )


@st.composite
def pipelines(draw) -> dict:
    """A framework and the settings of its new terms: Megatron's 1F1B or interleaved (its p2p protocols,
    DeepSpeed's partitioned sends), torchtitan's FSDP2 units and optimizer implementation."""
    framework = draw(st.sampled_from(["megatron", "torchtitan"]))
    tp, pp = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    found: dict = {"framework": framework, "tp": tp, "pp": pp, "device": draw(st.sampled_from(DEVICES))}
    if framework == "torchtitan":
        found["timing"] = {
            "fsdp_units": draw(st.sampled_from(FSDP_UNITS)),
            "optimizer_implementation": draw(st.sampled_from(OPTIMIZER_IMPLEMENTATIONS)),
        }
    else:
        found["timing"] = {"pipe_partitioned": draw(st.booleans())}
        if pp == 2 and draw(st.booleans()):
            found.update(vpp=2, schedule="interleaved")
        found["sequence_parallel"] = tp > 1 and draw(st.booleans())
    return found


@FAST
@given(pipelines(), st.sampled_from(OVERLAPS), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_more_overlap_never_raises_the_iteration(setting: dict, name: str, a: float, b: float) -> None:
    # Megatron refuses --tp-comm-overlap without sequence parallelism (arguments.py validate_args): not drawn
    megatron_without_sp = setting["framework"] == "megatron" and not setting.get("sequence_parallel")
    assume(not (name == "tp" and megatron_without_sp and max(a, b) > 0))
    low, high = sorted((a, b))
    runs = []
    for share in (low, high):
        timing = dict(setting["timing"], overlap={name: share})
        runs.append(run_iteration(run_of(**{**setting, "timing": timing})))
    slow, fast = runs
    assert fast.seconds <= slow.seconds * (1 + 1e-12)


@FAST
@given(pipelines(), st.sampled_from([1, 2, 4]))
def test_more_data_parallel_never_lowers_the_gradient_reduction(setting: dict, dp: int) -> None:
    small = run_iteration(run_of(dp=dp, **setting))
    big = run_iteration(run_of(dp=2 * dp, **setting))
    # Megatron's DDP reduction (buckets, the interleaved chunks' own); torchtitan's reduce-scatters per unit
    key = "fsdp_communication" if setting["framework"] == "torchtitan" else "dp_communication"
    assert big.link_seconds[key] >= small.link_seconds[key] * (1 - 1e-12)
    assert big.link_seconds[key] > 0.0


def _attention_seconds(run) -> list[tuple[float, float]]:
    """(forward, backward) seconds of each attention call of a body layer (`TimeModel._phase_s`)."""
    model = TimeModel(run)
    ops = layer_ops(body_kind(run.spec("llm"), 0, run.training.dropout), OpGeometry.from_run(run))
    calls = [op for op in ops if op.attention is not None]
    assert calls
    return [(model._phase_s(op, "forward"), model._phase_s(op, "backward")) for op in calls]


@FAST
@given(
    st.sampled_from(["megatron", "torchtitan"]),
    st.sampled_from(DEVICES[1:]),
    st.sampled_from(["cudnn", "flash"]),
    st.sampled_from([64, 96, 128]),
    st.sampled_from([256, 1024, 4096, 16384]),
    st.sampled_from([2, 3, 4]),
)
def test_a_longer_sequence_never_makes_an_attention_call_cheaper(
    framework: str, device: dict, backend: str, head_dim: int, seq: int, grow: int
) -> None:
    spec = dict(SMALL_GQA, head_dim=head_dim, max_position_embeddings=65536)
    timing = {"sdpa_backend": backend} if framework == "torchtitan" else {}
    short = run_of(framework, dp=1, pp=1, device=device, timing=timing, spec=spec, seq=seq)
    long = run_of(framework, dp=1, pp=1, device=device, timing=timing, spec=spec, seq=seq * grow)
    for (forward, backward), (longer_forward, longer_backward) in zip(
        _attention_seconds(short), _attention_seconds(long), strict=True
    ):
        assert longer_forward >= forward > 0.0 and longer_backward >= backward > 0.0


@FAST
@given(
    st.sampled_from(FSDP_UNITS),
    st.sampled_from(OPTIMIZER_IMPLEMENTATIONS),
    st.sampled_from([1, 2]),
    st.sampled_from(DEVICES),
    st.sampled_from(["intermediate_size", "hidden_size", "num_layers", "vocab_size"]),
)
def test_torchtitans_step_terms_are_non_negative_and_grow_with_the_parameters(
    units: str, implementation: str, pp: int, device: dict, grown: str
) -> None:
    small_spec = dict(SMALL_GQA, num_layers=4)
    big_spec = dict(small_spec, **{grown: small_spec[grown] * 2})
    timing = {"fsdp_units": units, "optimizer_implementation": implementation}
    small = run_iteration(run_of("torchtitan", dp=4, pp=pp, device=device, timing=timing, spec=small_spec))
    big = run_iteration(run_of("torchtitan", dp=4, pp=pp, device=device, timing=timing, spec=big_spec))
    for it in (small, big):
        assert it.breakdown["optimizer"] > 0.0 and it.breakdown["fsdp_communication"] >= 0.0
        assert it.link_seconds["fsdp_communication"] > 0.0
    assert big.breakdown["optimizer"] >= small.breakdown["optimizer"] * (1 - 1e-12)
    assert big.link_seconds["fsdp_communication"] >= small.link_seconds["fsdp_communication"] * (1 - 1e-12)


def test_the_foreach_optimizer_never_moves_fewer_bytes_than_the_fused_one() -> None:
    for grad_bytes in (2, 4):
        for decoupled in (True, False):
            fused = optimizer_bytes_per_element("fused", grad_bytes, decoupled)
            assert 0 < fused <= optimizer_bytes_per_element("foreach", grad_bytes, decoupled)
            assert optimizer_bytes_per_element("foreach", grad_bytes, decoupled) == optimizer_bytes_per_element(
                "for-loop", grad_bytes, decoupled
            )


@st.composite
def cells(draw) -> tuple:
    """A cell's layers in forward order: maybe the HEAD, bodies (the model's last block maybe among
    them), maybe the TAIL; each layer's own gather and reduce-scatter seconds."""
    bodies = draw(st.integers(1, 4))
    nodes = [HEAD] * draw(st.booleans()) + [BODY] * bodies + [TAIL] * draw(st.booleans())
    last = [False] * len(nodes)
    if TAIL in nodes or draw(st.booleans()):
        last[max(i for i, node in enumerate(nodes) if node == BODY)] = True
    seconds = st.lists(st.floats(0.0, 1.0), min_size=len(nodes), max_size=len(nodes))
    return nodes, last, draw(seconds), draw(seconds)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(cells(), st.sampled_from(FSDP_UNITS), st.booleans())
def test_fsdp2_units_move_each_collective_and_invent_none(cell: tuple, units: str, reshard: bool) -> None:
    nodes, last, gathers, reduces = cell
    found = fsdp2_units(nodes, last, gathers, reduces, units, reshard)
    assert min(found.forward + found.backward + found.reduces) >= 0.0
    # every layer's gather runs once before the forward and its reduce-scatter once after the backward,
    # wherever its unit puts them; the backward gathers again at most what the forward gathered
    assert abs(sum(found.forward) - sum(gathers)) <= 1e-9
    assert abs(sum(found.reduces) - sum(reduces)) <= 1e-9
    assert sum(found.backward) <= sum(gathers) + 1e-9
    if not reshard:
        assert sum(found.backward) == 0.0


@FAST
@given(pipelines(), st.integers(2, 6))
def test_pipeline_sends_never_shorten_the_iteration(setting: dict, m: int) -> None:
    setting = dict(setting, pp=2)
    it = run_iteration(run_of(m=m, **setting))
    assert it.breakdown["p2p"] >= -1e-12
    assert it.seconds >= it.breakdown["compute"] * (1 - 1e-12)
