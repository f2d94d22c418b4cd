"""Properties of the terms the 2026-12-06 session 6 added (hypothesis, derandomized, few run-level examples):

- a persistent GEMM beside a collective (`kernels.persistent_added_s`): the pair's wall time never falls as
  either grows, and lies between the longer of the two and the two one after the other;
- more overlap never raises the iteration on Hopper, whose persistent GEMMs wait for a TP collective's SMs,
  under TE 2.x's SM margin or TE 1.x's none (`timing.ub_sm_margin`), and the Dagster chain's run-config
  table carries the margin, the attention backend and a stated mesh unchanged;
- a full mesh (`Links.mesh_links`): a group's share of the node never falls as more of its ranks share the
  node, so an in-node collective of a given payload never slows as the group grows; at a given link rate
  more links never slow a collective of a given group; more bandwidth never slows any collective;
- TE 2.x's SM margin is never slower than TE 1.x's late CTAs beside a userbuffers kernel;
- a grouped GEMM's launches (`launches.op_launches`, `cpp_gemm_share`) never fall as experts or the share
  grow, and at a share of at most one never exceed a SequentialMLP's launch an expert.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from small_models import SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.tables.run import run_from_frame, run_to_frame
from ppb_core.timing.comm import Group, Links, collective_seconds, hop_seconds
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, P2P, REDUCE_SCATTER, Collective, Op
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.kernels import persistent_added_s
from ppb_core.timing.launches import op_launches
from ppb_core.timing.pricer import TimeModel

FAST = settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
MANY = settings(max_examples=300, deadline=None, derandomize=True)
SECONDS = st.floats(0.0, 1.0, allow_nan=False)
KINDS = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, ALL_TO_ALL, P2P)


@MANY
@given(SECONDS, SECONDS, SECONDS, SECONDS)
def test_a_persistent_gemm_beside_a_collective_never_ends_sooner_when_either_grows(g1, g2, c1, c2):
    short_g, long_g = sorted((g1, g2))
    short_c, long_c = sorted((c1, c2))

    def wall(gemm: float, comm: float) -> float:
        return gemm + persistent_added_s(gemm, comm)

    tol = 1e-12
    assert wall(short_g, short_c) <= wall(long_g, short_c) + tol
    assert wall(short_g, short_c) <= wall(short_g, long_c) + tol
    # never shorter than either alone, never longer than one after the other
    assert max(long_g, long_c) - tol <= wall(long_g, long_c) <= long_g + long_c + tol


def _hopper_run(overlap: dict, margin: bool, extra_timing: dict | None = None):
    return parse_run_config(
        {
            "name": "p",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": SMALL_GQA}],
            "parallel": {"dp": 2, "tp": 4, "pp": 1, "sequence_parallel": True},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": 2, "dtype": "bf16"},
            "device": {"name": "h100-80gb"},
            "timing": {"overlap": overlap, **({} if margin else {"ub_sm_margin": False}), **(extra_timing or {})},
        }
    )


@FAST
@given(st.sampled_from(["tp", "tp_async"]), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.booleans())
def test_more_overlap_never_raises_a_hopper_iteration_under_either_margin(name, a, b, margin):
    low, high = sorted((a, b))
    # userbuffers on (overlap.tp > 0), so that ub_sm_margin false is a setting Megatron reads
    base = {"tp": 1.0} if name == "tp_async" else {}
    slow = run_iteration(_hopper_run({**base, name: max(low, 1e-3) if name == "tp" else low}, margin)).seconds
    fast = run_iteration(_hopper_run({**base, name: max(high, 1e-3) if name == "tp" else high}, margin)).seconds
    assert 0.0 < fast <= slow * (1 + 1e-12)


def test_the_chain_s_run_config_table_carries_the_session_s_fields():
    # ppb_core/chain/stages.py reads the run config back from its table (`run_from_frame`) before every stage
    run = _hopper_run({"tp": 1.0}, False, {"te_attention_backend": "flash"})
    back = run_from_frame(run_to_frame(run))
    assert back.timing == run.timing and back.timing.ub_sm_margin is False
    assert back.timing.te_attention_backend == "flash"
    assert run_iteration(back).seconds == run_iteration(run).seconds
    meshed = run.model_copy(update={"device": run.device.model_copy(update={"intra_node_links": 7})})
    assert run_from_frame(run_to_frame(meshed)).device.profile().intra_node_links == 7


def _links(links: int, bytes_per_s: float, group: Group) -> Links:
    return Links(
        intra_node_bytes_per_s=bytes_per_s,
        inter_node_bytes_per_s=20e9,
        latency_s=5e-6,
        devices_per_node=links + 1 if links else 8,
        groups={"g": group},
        inter_node_latency_s=5e-6,
        mesh_links=links,
    )


@MANY
@given(st.integers(1, 15), st.integers(1, 16), st.integers(1, 16))
def test_a_mesh_group_s_share_of_the_node_never_falls_as_it_gains_local_ranks(links, a, b):
    few, many = sorted((a, b))
    found = _links(links, 1e11, Group(2, 2))
    assert found.node_bytes_per_s(few) <= found.node_bytes_per_s(many) <= found.intra_node_bytes_per_s


@MANY
@given(st.sampled_from(KINDS[:3]), st.floats(1.0, 1e9), st.integers(2, 8), st.integers(2, 8))
def test_an_in_node_collective_on_the_910b_mesh_never_slows_as_its_group_grows(kind, payload, a, b):
    # 7 HCCS links, the group's ranks consecutive inside the 8-NPU server
    small, big = sorted((a, b))
    seconds = [
        collective_seconds(Collective(kind, "g", payload, "tp"), _links(7, 156.8e9, Group(k, k))) for k in (small, big)
    ]
    assert seconds[1] <= seconds[0] * (1 + 1e-12)  # (k-1)/k of P over k-1 links: P/k a link, one step


@MANY
@given(st.sampled_from(KINDS), st.floats(1.0, 1e9), st.integers(1, 8), st.integers(1, 8), st.integers(2, 16))
def test_at_a_link_rate_more_links_never_slow_a_collective(kind, payload, a, b, size):
    # a device with n links of 22.4e9 B/s (910B's HCCS at 0.8) in a node of n + 1, a group of consecutive
    # ranks: more links a device put more of the group in the node, never slowing it (nor a ring's hop)
    few, many = sorted((a, b))
    collective = Collective(kind, "g", payload, "tp")

    def seconds(links: int) -> float:
        found = _links(links, links * 22.4e9, Group(size, size))
        return collective_seconds(collective, found) + hop_seconds(collective, found)

    assert seconds(many) <= seconds(few) * (1 + 1e-12)


@MANY
@given(st.sampled_from(KINDS), st.floats(1.0, 1e9), st.integers(0, 7), st.integers(2, 16), st.floats(1e9, 1e12))
def test_more_bandwidth_never_slows_a_collective(kind, payload, links, size, rate):
    collective = Collective(kind, "g", payload, "tp")
    group = Group(size, size)
    assert collective_seconds(collective, _links(links, 2 * rate, group)) <= collective_seconds(
        collective, _links(links, rate, group)
    ) * (1 + 1e-12)


@MANY
@given(st.integers(1, 64), st.integers(1, 64), st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.booleans())
def test_a_grouped_gemm_s_launches_never_fall_as_experts_or_the_share_grow(a, b, s1, s2, wgrad_fused):
    few, many = sorted((a, b))
    low, high = sorted((s1, s2))
    kw = {"tp": 1, "mla": False, "rope_fusion": True, "cross_entropy_fusion": False, "wgrad_fused": wgrad_fused}

    def grouped(experts: int, share: float) -> tuple[float, float]:
        op = Op("experts_in", "moe", "matmul", gemm=(64.0, 32.0, 32.0, experts, 32.0), weight_elements=experts)
        return op_launches(op, **kw, cpp_gemm_share=share)

    def sequential(experts: int) -> tuple[float, float]:  # a SequentialMLP's GEMM: a launch an expert
        gemm = (64.0, 32.0, 32.0, experts, 32.0)
        return op_launches(
            Op("experts_in", "moe", "matmul", gemm=gemm, weight_elements=experts, sequential=experts), **kw
        )

    for pass_ in (0, 1):
        assert grouped(few, low)[pass_] <= grouped(many, low)[pass_] + 1e-9
        assert grouped(few, low)[pass_] <= grouped(few, high)[pass_] + 1e-9
        assert grouped(many, min(high, 1.0))[pass_] <= sequential(many)[pass_] + 1e-9


@FAST
@given(st.sampled_from([2, 4, 8]), st.sampled_from([512, 1024, 2048]), st.sampled_from([1024, 2048]))
def test_te_2_s_sm_margin_is_never_slower_than_te_1_s_late_ctas(tp, hidden, seq):
    # Under --tp-comm-overlap on Hopper a bulk kernel's GEMM launched for the SMs it leaves (TE 2.x) loses
    # those SMs' share while they overlap; launched for all (TE 1.x) its late CTAs wait for them. Neither the
    # slowed GEMM nor the waiting one can end before the other would: the margin is never the slower, even
    # where the collective outlasts its GEMM (small GEMMs at TP 8).
    spec = dict(SMALL_GQA, hidden_size=hidden, num_attention_heads=16, num_key_value_heads=8)
    spec["intermediate_size"] = 4 * hidden
    prices = {}
    for margin in (True, False):
        run = parse_run_config(
            {
                "name": "p",
                "framework": "megatron",
                "models": [{"name": "llm", "spec": spec}],
                "parallel": {"tp": tp, "sequence_parallel": True},
                "training": {"seq_length": seq, "micro_batch_size": 1, "micro_batches": 2},
                "device": {"name": "h100-80gb"},
                "timing": {"overlap": {"tp": 1.0}, "ub_sm_margin": margin},
            }
        )
        model = TimeModel(run)
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        prices[margin] = model.op_prices(body)
    for name, price in prices[True].items():
        assert price.backward_ms <= prices[False][name].backward_ms * (1 + 1e-12) + 1e-15, name
        assert price.forward_ms <= prices[False][name].forward_ms * (1 + 1e-12) + 1e-15, name
