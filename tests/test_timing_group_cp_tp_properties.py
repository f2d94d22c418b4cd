"""Properties of the terms the 2026-12-06 session 5 added (hypothesis, derandomized, few examples):

- more overlap never raises the iteration where the new terms sit: Megatron's interleaved schedule with a
  micro-batch group (`parallel.microbatch_group_size_per_vp_stage`), torchtitan's ring attention eager or
  compiled under either rotation (`timing.cp_rotate_method`), torchtitan's TP at a micro-batch of 2 where
  the functional collectives and async TP's fused ops copy (`timing.funcol`);
- the micro-batches a stage holds under a group g are Megatron's warm-up count plus one, capped at every
  chunk's micro-batches: min(m·V, 2(P − s − 1) + (V − 1)·g + 1) (schedules.py `get_pp_rank_microbatches`,
  d98e8a64: `num_warmup_microbatches = (P − s − 1)·2 + (V − 1)·g`, all m·V when it reaches them), each
  chunk at least one and at most m;
- prefetching the interleaved warm-up's and cool-down's receives (`timing.overlap_p2p_comm_warmup_flush`)
  never lengthens the iteration, under each release's send waits (`timing.interleaved_send_waits`);
- the copies of `timing.funcol` never fall as the tensor or the micro-batch grows;
- an unfused attention core's score passes (`Op.score_keys`, `attention_rates.score_fraction`) never get
  cheaper as the sequence grows, at every head size, where the share is measured (H100) or not (A100).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.model.kinds import body_kind
from ppb_core.schedules import check, micro_batches_in_flight
from ppb_core.timing.flops import ALL_GATHER, REDUCE_SCATTER, OpGeometry, layer_ops
from ppb_core.timing.funcol import fused_gather_bytes, fused_scatter_bytes, sequence_copy_bytes
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.pricer import TimeModel

FAST = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
DEVICES = [ROUND_DEVICE, {"name": "h100-80gb"}, {"name": "a100-80gb"}]


@st.composite
def settings_with_new_terms(draw) -> tuple[dict, str]:
    """A run whose iteration prices one of the new terms, and the overlap share that hides it."""
    device = draw(st.sampled_from(DEVICES))
    case = draw(st.sampled_from(["group", "ring", "async_tp"]))
    if case == "group":  # P 2, V 2, m 4 or 6: groups 2 (the default), 3 (m 6), 4 (m 4) or 6
        m = draw(st.sampled_from([4, 6]))
        group = draw(st.sampled_from([g for g in (2, 3, 4, 6) if g <= m and not 0 < m % g < 2]))
        parallel = {"dp": 2, "tp": 2, "pp": 2, "vpp": 2, "schedule": "interleaved", "sequence_parallel": True}
        parallel["microbatch_group_size_per_vp_stage"] = group
        run = {"framework": "megatron", "parallel": parallel, "m": m, "batch": 1, "timing": {}}
        name = draw(st.sampled_from(["dp", "tp", "tp_async", "param_gather"]))
    elif case == "ring":
        timing = {
            "torch_compile": draw(st.booleans()),
            "cp_rotate_method": draw(st.sampled_from(["allgather", "alltoall"])),
        }
        parallel = {"dp": 2, "cp": 2, "pp": 1, "fsdp": True}
        run = {"framework": "torchtitan", "parallel": parallel, "m": 1, "batch": 1, "timing": timing}
        name = draw(st.sampled_from(["cp_ring", "dp", "param_gather"]))
    else:
        parallel = {"dp": 2, "tp": 2, "pp": 1, "fsdp": True, "sequence_parallel": True}
        timing = {"torch_compile": draw(st.booleans())}
        run = {"framework": "torchtitan", "parallel": parallel, "m": 1, "batch": 2, "timing": timing}
        name = draw(st.sampled_from(["tp", "tp_async"]))
    run["device"], run["spec"] = device, SMALL_GQA
    return run, name


def _run(setting: dict, overlap: dict):
    return parse_run_config(
        {
            "name": "p",
            "framework": setting["framework"],
            "models": [{"name": "llm", "spec": setting["spec"]}],
            "parallel": setting["parallel"],
            "training": {
                "seq_length": 2048,
                "micro_batch_size": setting["batch"],
                "micro_batches": setting["m"],
                "dtype": "bf16",
            },
            "device": setting["device"],
            "timing": {**setting["timing"], "overlap": overlap},
        }
    )


@FAST
@given(settings_with_new_terms(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_more_overlap_never_raises_the_iteration(drawn: tuple[dict, str], a: float, b: float) -> None:
    setting, name = drawn
    low, high = sorted((a, b))
    slow = run_iteration(_run(setting, {name: low})).seconds
    fast = run_iteration(_run(setting, {name: high})).seconds
    assert 0.0 < fast <= slow * (1 + 1e-12)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 5), st.integers(2, 4), st.data())
def test_a_groups_micro_batches_in_flight_are_megatrons_warmup_plus_one(stages: int, chunks: int, data) -> None:
    m = data.draw(st.integers(stages, 4 * stages))
    groups = [g for g in range(stages, m + 1) if not 0 < m % g < stages]
    group = data.draw(st.sampled_from(groups))
    check("interleaved", stages, chunks, m, group)  # Megatron runs it
    held = micro_batches_in_flight("interleaved", stages, chunks, m, group)
    for stage in range(stages):
        per_chunk = [held[chunk][stage] for chunk in range(chunks)]
        assert all(1 <= n <= m for n in per_chunk)
        assert sum(per_chunk) == min(m * chunks, 2 * (stages - stage - 1) + (chunks - 1) * group + 1)


@given(
    st.floats(0.0, 1e10),
    st.floats(0.0, 1e10),
    st.integers(1, 8),
    st.integers(1, 8),
    st.sampled_from([1, 2, 4, 8]),
    st.booleans(),
)
def test_the_funcol_copies_never_fall_as_the_tensor_or_the_batch_grows(
    a: float, b: float, batch_a: int, batch_b: int, tp: int, rows: bool
) -> None:
    small, big = sorted((a, b))
    few, many = sorted((batch_a, batch_b))
    for kind in (ALL_GATHER, REDUCE_SCATTER):
        assert 0.0 <= sequence_copy_bytes(kind, small, few, False) <= sequence_copy_bytes(kind, big, many, False)
        assert sequence_copy_bytes(kind, big, many, True) == 0.0  # fused away: the fused op's own copies instead
    assert 0.0 <= fused_gather_bytes(small, tp, few, rows) <= fused_gather_bytes(big, tp, many, rows)
    assert fused_gather_bytes(big, tp, many, False) <= fused_gather_bytes(big, tp, many, True)
    assert 0.0 <= fused_scatter_bytes(small, few) <= fused_scatter_bytes(big, many)


def _score_pass_seconds(device: dict, head_dim: int, seq: int) -> tuple[float, float]:
    """(forward, backward) seconds of a body layer's unfused score passes under Megatron, no flash."""
    spec = dict(SMALL_GQA, head_dim=head_dim, max_position_embeddings=65536)
    run = parse_run_config(
        {
            "name": "p",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": 1, "tp": 1, "pp": 1},
            "training": {"seq_length": seq, "micro_batch_size": 1, "micro_batches": 1, "flash_attention": False},
            "device": device,
        }
    )
    model = TimeModel(run)
    ops = [op for op in layer_ops(body_kind(run.spec("llm"), 0, 0.0), OpGeometry.from_run(run)) if op.score_keys]
    assert ops
    return sum(model._phase_s(op, "forward") for op in ops), sum(model._phase_s(op, "backward") for op in ops)


@FAST
@given(
    st.sampled_from([{"name": "h100-80gb"}, {"name": "a100-80gb"}]),
    st.sampled_from([64, 96, 128, 192]),
    st.sampled_from([256, 1024, 4096, 8192]),
    st.sampled_from([2, 3, 4]),
)
def test_a_longer_sequence_never_makes_the_unfused_score_passes_cheaper(
    device: dict, head_dim: int, seq: int, grow: int
) -> None:
    forward, backward = _score_pass_seconds(device, head_dim, seq)
    longer_forward, longer_backward = _score_pass_seconds(device, head_dim, seq * grow)
    assert longer_forward >= forward > 0.0 and longer_backward >= backward > 0.0


@FAST
@given(
    st.sampled_from(DEVICES),
    st.sampled_from([2, 4]),
    st.sampled_from([4, 8]),
    st.sampled_from([1, 2]),
    st.sampled_from(["core_r0.8", "core_r0.10", "core_v0.18"]),
)
def test_prefetching_the_warmup_and_flush_receives_never_lengthens_the_iteration(
    device: dict, pp: int, m: int, tp: int, release: str
) -> None:
    setting = {
        "framework": "megatron",
        "parallel": {"dp": 2, "tp": tp, "pp": pp, "vpp": 2, "schedule": "interleaved", "sequence_parallel": tp > 1},
        "m": m,
        "batch": 1,
        "device": device,
        "spec": dict(SMALL_GQA, num_layers=8),
    }
    seconds = []
    for flush in (False, True):
        setting["timing"] = {"overlap_p2p_comm_warmup_flush": flush, "interleaved_send_waits": release}
        seconds.append(run_iteration(_run(setting, {})).seconds)
    assert 0.0 < seconds[1] <= seconds[0] * (1 + 1e-12)
