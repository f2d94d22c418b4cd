"""Properties of the host on the critical path (ppb_core/timing/host.py): more GPU work never shortens a pass.

The host launches kernels ahead of the GPU; where it falls behind (after a synchronization, or when a pass's
kernels take less than their launches) the GPU waits. A longer kernel can hide launches behind it (the wait
shrinks), but by no more than it lengthens the GPU's work: a pass's seconds (its GPU work plus its waits)
never drop when one op's GPU seconds grow, forward or backward. The same for a Megatron MoE run's iteration
when its links get slower."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_memory_activations import MOE
from test_memory_runs import make_run

from ppb_core.timing.flops import COMM, Op
from ppb_core.timing.host import layer_host_waits
from ppb_core.timing.iteration import run_iteration

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def layer_ops(router_syncs: int, clamp_syncs: int) -> list[Op]:
    """A MoE layer as Megatron runs it: attention, the router (sinkhorn's loop synchronizes), the allgather
    dispatcher's gathers, the permutation, the dispatch, the experts (GPT-OSS's clamp synchronizes), the
    unpermutation and the combine."""
    return [
        Op("attention.qkv", "attention", "matmul", gemm=(8, 4, 4)),
        Op("attention.core", "attention", "memory"),
        Op("moe.router", "moe", "memory", syncs=router_syncs),
        Op("moe.dispatch_map", "moe", COMM),
        Op("moe.permute", "moe", "memory"),
        Op("moe.dispatch", "moe", COMM),
        Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.experts_clamp", "moe", "memory", syncs=clamp_syncs),
        Op("moe.experts_act", "moe", "memory"),
        Op("moe.experts_out", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.unpermute", "moe", "memory"),
        Op("moe.combine", "moe", COMM),
    ]


NAMES = [op.name for op in layer_ops(0, 0)]
SECONDS = st.floats(0.0, 5.0, allow_nan=False)
LAUNCHES = st.integers(0, 8).map(lambda halves: halves / 2)  # a fused GEMM's share is a fraction
RERUNS = st.one_of(
    st.just(()),
    st.just(tuple(NAMES)),  # full recompute
    st.just(tuple(name for name in NAMES if name.startswith("moe."))),  # Megatron's `moe` module
    st.just(("moe.experts_clamp", "moe.experts_act")),  # `moe_act`
    st.sets(st.sampled_from(NAMES)).map(lambda names: tuple(name for name in NAMES if name in names)),
)


@st.composite
def layers(draw):
    """(ops, forward seconds, backward seconds, launches, rerun, launch seconds, dispatcher, dropless, copy)."""
    ops = layer_ops(draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    forward = {name: draw(SECONDS) for name in NAMES}
    backward = {name: draw(SECONDS) for name in NAMES}
    launches = {name: (draw(LAUNCHES), draw(LAUNCHES)) for name in NAMES}
    dispatcher = draw(st.sampled_from([None, "alltoall", "allgather", "deepep"]))
    copy = dispatcher == "alltoall" and draw(st.booleans())
    return (
        ops,
        forward,
        backward,
        launches,
        draw(RERUNS),
        draw(st.floats(0.0, 2.0)),
        dispatcher,
        draw(st.booleans()),
        copy,
    )


def pass_seconds(layer, forward: dict[str, float], backward: dict[str, float]) -> tuple[float, float]:
    """The layer's forward and backward: their GPU work (the backward's with what it reruns) and their waits."""
    ops, _, _, launches, rerun, launch_s, dispatcher, dropless, copy = layer
    device = (sum(forward.values()), sum(backward.values()), sum(forward[name] for name in rerun))
    waits = layer_host_waits(
        ops, forward, launches, rerun, device, launch_s, dispatcher, dropless, copy, backward_s=backward
    )
    return device[0] + waits.forward, device[1] + device[2] + waits.backward


@PROPERTY
@given(layers(), st.sampled_from(NAMES), st.booleans(), st.floats(0.01, 3.0))
def test_a_longer_op_never_shortens_a_pass(layer, name, in_forward, more):
    _, forward, backward = layer[:3]
    before = pass_seconds(layer, forward, backward)
    if in_forward:
        forward = {**forward, name: forward[name] + more}
    else:
        backward = {**backward, name: backward[name] + more}
    after = pass_seconds(layer, forward, backward)
    # each pass on its own: the backward's waits after a rerun dispatch are the backward's, not the forward's
    assert after[0] >= before[0] - 1e-9
    assert after[1] >= before[1] - 1e-9


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["alltoall", "allgather"]),
    # none, full, and Megatron's `moe` module (a rerun dispatch; the attention not rerun)
    st.sampled_from([None, "full", {"granularity": "selective", "modules": ["moe"]}]),
    st.floats(0.2, 0.95),
    st.booleans(),
)
def test_slower_links_never_shorten_a_host_bound_moe_iteration(dispatcher, recompute, share, combined):
    # the combined 1F1B schedule (--overlap-moe-expert-parallel-comm) hides the dispatcher's waits: Megatron
    # allows it with the alltoall dispatcher and neither full recompute nor the moe module (`_check_combined_1f1b`)
    combined = combined and dispatcher == "alltoall" and recompute is None

    # MOE's tiny layers (hidden 32) under Megatron: host-bound, the case where a longer collective hides launches
    def run(factor):
        return make_run(
            MOE,
            parallel={"dp": 4, "ep": 4, "overlap_moe_expert_parallel_comm": combined},
            training={"micro_batches": 2, **({"recompute": recompute} if recompute else {})},
            device={"name": "h100-80gb", "intra_node_bandwidth_gbs": 450.0 * factor},
            framework="megatron",
            timing={"moe_dispatcher": dispatcher},
        )

    assert run_iteration(run(share)).seconds >= run_iteration(run(1.0)).seconds - 1e-12
