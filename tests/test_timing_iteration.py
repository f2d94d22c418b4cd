"""The iteration in seconds: each term outside the layers derived by hand, and properties over random runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.errors import InputError
from ppb_core.estimate.plan import plan_iterations
from ppb_core.memory import MemoryModel
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import Moe
from ppb_core.model.walk import walk
from ppb_core.schedules import simulate
from ppb_core.timing.comm import Group, Links, collective_seconds
from ppb_core.timing.flops import ALL_GATHER, REDUCE_SCATTER, Collective, OpGeometry, _remote_nodes
from ppb_core.timing.iteration import (
    BREAKDOWN_KEYS,
    _fsdp_exposed,
    bucket_ends,
    bucket_tail,
    framework_rules,
    gather_wait,
    grad_pass_bytes,
    optimizer_traffic,
    run_iteration,
)
from ppb_core.timing.model_flops import model_flops_per_iteration

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def small_run(
    dp=2,
    tp=1,
    pp=2,
    m=4,
    zero=None,
    overlap=None,
    framework="megatron",
    device=None,
    recompute=None,
    timing=None,
    dtype="bf16",
    **extra,
):
    spec = dict(SMALL_GQA)
    raw = {
        "name": "small",
        "framework": framework,
        "models": [{"name": "llm", "spec": spec}],
        # zero None: the framework's own default (Megatron's distributed optimizer ZeRO-1, torchtitan's FSDP2)
        "parallel": {"dp": dp, "tp": tp, "pp": pp, "sequence_parallel": tp > 1, **extra}
        | ({} if zero is None else {"zero": zero}),
        "training": {
            "seq_length": 2048,
            "micro_batch_size": 1,
            "micro_batches": m,
            "recompute": recompute or {},
            "dtype": dtype,
        },
        "device": device or ROUND_DEVICE,
        "timing": dict(timing or {}),
    }
    if overlap is not None:
        raw["timing"]["overlap"] = overlap
    return parse_run_config(raw)


# --- pipeline sends and receives ------------------------------------------------------------------


def test_p2p_on_two_stages_by_hand():
    # 1F1B, P = 2, m = 2, every forward f, backward b, a send x. Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1.
    # Blocking (the sender waits for its send): stage 0 F0 [0, f+x], F1 [f+x, 2f+2x]; stage 1 F0
    # [f+x, 2f+x], B0 [2f+x, 2f+b+2x], F1 [2f+b+2x, 3f+b+2x], B1 [3f+b+2x, 3f+2b+3x]; stage 0 B0 ends
    # 2f+2b+2x, B1 starts at 3f+2b+3x and ends 3f+3b+3x.
    # In the background (only the receiver waits): stage 1's F0 starts at f+x, its B0 reaches stage 0 at
    # 2f+b+2x, its B1 ends 3f+2b+x and reaches stage 0 at 3f+2b+2x: the iteration ends at 3f+3b+2x.
    f, b, x = 1.0, 2.0, 0.25
    forward, backward, transfer = [[f, f]], [[b, b]], [[x, x]]
    assert simulate("1f1b", forward, backward, 2).makespan == pytest.approx(3 * f + 3 * b)
    assert simulate("1f1b", forward, backward, 2, transfer, blocking=True).makespan == pytest.approx(
        3 * f + 3 * b + 3 * x
    )
    assert simulate("1f1b", forward, backward, 2, transfer, blocking=False).makespan == pytest.approx(
        3 * f + 3 * b + 2 * x
    )


def test_p2p_sends_the_stage_output_over_the_link_the_stages_share():
    # dp·tp = 2 ranks per stage: stages 0 and 1 are ranks {0,1} and {2,3}, one node of 8: NVLink at
    # 5e10 B/s. A micro-batch's hidden state: 2048 tokens × 1024 × 2 bytes = 4,194,304 bytes → 83.9 us.
    run = small_run(dp=2, pp=2)
    it = run_iteration(run)
    x = 2048 * 1024 * 2 / 5e10
    assert it.breakdown["p2p"] > 0
    # 1F1B blocking: each of the m = 4 micro-batches' forwards and backwards on the critical path sends
    # once between the two stages, at most 2m sends; at least the first forward's and the last backward's.
    assert 2 * x - 1e-12 <= it.breakdown["p2p"] <= 2 * 4 * x + 1e-12
    # 16 stages of 2 ranks span 32 ranks: four nodes; neighbours in different nodes use the NIC (5e9 B/s).
    far = run_iteration(small_run(dp=8, pp=2, devices_per_node=8))
    assert far.breakdown["p2p"] >= 2 * 2048 * 1024 * 2 / 5e9 - 1e-12


# --- data-parallel gradient reduction -----------------------------------------------------------


def test_bucket_tail_by_hand():
    # Backward ends at 10; buckets ready at 4, 7 and 10 taking 2, 2 and 1: the stream runs [4, 6],
    # [7, 9], [10, 11]: 1 past the end. Ready at 4 and 5 taking 3 each: [4, 7], [7, 10]: none past it.
    assert bucket_tail([(4, 2), (7, 2), (10, 1)], 10, 1.0) == (5, 1)
    assert bucket_tail([(4, 3), (5, 3)], 10, 1.0) == (6, 0)
    # Without overlap every bucket waits for the end: 5 exposed; half overlap, half of each.
    assert bucket_tail([(4, 2), (7, 2), (10, 1)], 10, 0.0) == (5, 5)
    assert bucket_tail([(4, 2), (7, 2), (10, 1)], 10, 0.5) == (5, 3)


def test_megatron_cuts_buckets_on_the_first_stage_s_first_chunk_only():
    """Megatron-Core r0.8 (distributed_data_parallel.py: no bucket size past pipeline rank 0;
    training.py get_model: disable_bucketing=(model_chunk_idx > 0)) against MindFormers' buckets."""
    megatron = dataclasses.replace(framework_rules(small_run()), bucket_parameters=70)
    mindformers = dataclasses.replace(framework_rules(small_run(framework="mindformers")), bucket_parameters=70)
    # Five layers of 30 parameters in backward order: chunk 1's two, then chunk 0's three.
    gradients = [(30, 1), (30, 1), (30, 0), (30, 0), (30, 0)]
    # Megatron, stage 0: chunk 1 is one bucket (closed by its end, index 1); chunk 0 is cut at 70:
    # 30, 60, 90 reaches it at index 4, which is also the end.
    assert bucket_ends(gradients, megatron, 0) == [1, 4]
    # Stage 1: no cutting at all, one bucket a chunk.
    assert bucket_ends(gradients, megatron, 1) == [1, 4]
    # With 50 a bucket on stage 0: chunk 1 one bucket [1]; chunk 0: 30, 60 closes at 3, 30 at the end 4.
    assert bucket_ends(gradients, dataclasses.replace(megatron, bucket_parameters=50), 0) == [1, 3, 4]
    assert bucket_ends(gradients, dataclasses.replace(megatron, bucket_parameters=50), 1) == [1, 4]
    # MindFormers fills across chunks: 30, 60, 90 closes at 2; 30, 60 at the end 4.
    assert bucket_ends(gradients, mindformers, 0) == [2, 4]
    # torchtitan (FSDP2) reduces every layer by itself.
    assert bucket_ends(gradients, framework_rules(small_run(framework="torchtitan")), 0) == [0, 1, 2, 3, 4]


def test_reduce_scatter_of_fp32_gradients_over_the_data_parallel_ring():
    # 10M parameters' fp32 gradients reduce-scattered over dp = 4 in one node: 40 MB · 3/4 at 5e10 B/s.
    links = Links(5e10, 5e9, 0.0, 8, {"dp": Group(4, 4)})
    seconds = collective_seconds(Collective(REDUCE_SCATTER, "dp", 10e6 * 4, "dp"), links)
    assert seconds == pytest.approx(40e6 * 3 / 4 / 5e10)
    # The same over dp = 4 spread on 4 nodes (tp = 8 between them): the NIC's 5e9 B/s.
    links = Links(5e10, 5e9, 0.0, 8, {"dp": Group(4, 32)})
    assert collective_seconds(Collective(REDUCE_SCATTER, "dp", 10e6 * 4, "dp"), links) == pytest.approx(
        40e6 * 3 / 4 / 5e9
    )


def test_the_dp_tail_is_what_the_last_backward_does_not_hide():
    # One stage (pp 1): no overlap exposes the whole reduction; full overlap never more than that, and
    # the parameter all-gather after the step is bucketed behind the next forward.
    exposed = run_iteration(small_run(pp=1, m=1, overlap={"dp": 0.0, "param_gather": 0.0}))
    hidden = run_iteration(small_run(pp=1, m=1, overlap={"dp": 1.0, "param_gather": 1.0}))
    assert exposed.link_seconds["dp_communication"] == pytest.approx(hidden.link_seconds["dp_communication"])
    # Besides the link time, Megatron's DDP passes over every gradient bucket on the compute stream
    # (norm 4 bytes + scale 8 bytes a parameter at dp 2: 12) at 1000 GB/s · 0.5.
    run = small_run(pp=1, m=1)
    memory = MemoryModel(run)
    params = sum(memory.parameters(layer).total for layer in walk(run))
    passes = params * 12 / 5e11
    assert exposed.breakdown["dp_communication"] == pytest.approx(exposed.link_seconds["dp_communication"] + passes)
    assert hidden.breakdown["dp_communication"] <= exposed.breakdown["dp_communication"]
    assert hidden.seconds <= exposed.seconds


def test_no_data_parallel_no_reduction():
    it = run_iteration(small_run(dp=1, pp=2, timing={"check_for_nan_in_grad": False}))
    assert it.breakdown["dp_communication"] == 0.0


def test_megatron_passes_over_each_gradient_bucket():
    """param_and_grad_buffer.py `start_grad_sync` (core_r0.8.0, d98e8a64): the NaN check's norm reads
    the fp32 bucket (4 bytes a parameter), scaling by 1/(dp·cp) reads and writes it (8), on the
    compute stream; no scaling with one data-parallel rank, no check when it is turned off or under
    fp16's dynamic loss scaling; other frameworks run neither."""
    assert grad_pass_bytes(small_run(dp=2)) == 4 + 8
    assert grad_pass_bytes(small_run(dp=1)) == 4
    assert grad_pass_bytes(small_run(dp=2, timing={"check_for_nan_in_grad": False})) == 8
    assert grad_pass_bytes(small_run(dp=1, timing={"check_for_nan_in_grad": False})) == 0
    assert grad_pass_bytes(small_run(dp=2, dtype="fp16")) == 8
    assert grad_pass_bytes(small_run(dp=2, framework="torchtitan")) == 0
    # --ddp-average-in-collective: non-expert factor 1 (NCCL's AVG), experts' expert-dp/(dp·cp) =
    # tp/(ep·etp), 1 at tp = ep = etp = 1; --calculate-per-token-loss: factor 1 (distributed_data_parallel.py)
    assert grad_pass_bytes(small_run(dp=2, timing={"ddp_average_in_collective": True})) == 4
    assert grad_pass_bytes(small_run(dp=2, timing={"ddp_average_in_collective": True}), expert=True) == 4
    assert grad_pass_bytes(small_run(dp=2, timing={"calculate_per_token_loss": True})) == 4
    assert grad_pass_bytes(small_run(dp=2, timing={"calculate_per_token_loss": True}), expert=True) == 4
    # One stage, one data-parallel rank: the norm alone, 4 bytes a parameter at 1000 GB/s · 0.5, adds
    # to the iteration after the last backward; the same flag's loss checks (isnan, isinf) sync the
    # host twice for each of the 4 micro-batches, 5 us each (timing/reporting.py).
    on, off = small_run(dp=1, pp=1), small_run(dp=1, pp=1, timing={"check_for_nan_in_grad": False})
    memory = MemoryModel(on)
    params = sum(memory.parameters(layer).total for layer in walk(on))
    expected = params * 4 / 5e11 + 2 * 4 * 5e-6
    assert run_iteration(on).seconds - run_iteration(off).seconds == pytest.approx(expected)


def test_parameter_gathers_run_one_bucket_ahead_by_hand():
    # Gathers of 1.5, 1.5 and 0.5 back to back from 0: in at 1.5, 3 and 3.5. Buckets first used at 0, 1
    # and 3: the first waits 1.5, the second 3 − 1 = 2, the third 0.5: the forwards wait 2 (the largest).
    assert gather_wait([(0.0, 1.5), (1.0, 1.5), (3.0, 0.5)]) == pytest.approx(2.0)
    # A later stage first uses its parameters at 4 (its first input): nothing waits.
    assert gather_wait([(4.0, 1.5), (5.0, 1.5)]) == pytest.approx(0.0)
    # With a tenth of the SMs taken: the 3.5 s of gathers less the 2 s waited ran beside compute: +0.15.
    assert gather_wait([(0.0, 1.5), (1.0, 1.5), (3.0, 0.5)], 0.1) == pytest.approx(2.15)
    # --overlap-param-gather-with-optimizer-step: the gathers start 1 s before the forward (the other
    # chunks' optimizer step): in at 0.5, 2 and 2.5 against uses at 0, 1 and 3: waits 0.5, 1, 0 → 1;
    # with a tenth of the SMs taken, 0.1 · (3.5 − 1) more: 1.25.
    assert gather_wait([(0.0, 1.5), (1.0, 1.5), (3.0, 0.5)], head_start=1.0) == pytest.approx(1.0)
    assert gather_wait([(0.0, 1.5), (1.0, 1.5), (3.0, 0.5)], 0.1, head_start=1.0) == pytest.approx(1.25)


def test_gathers_beside_the_optimizer_step_never_wait_longer():
    """optimizer.py `ChainedOptimizer._step` (d98e8a64): the first chunk's gathers start after its own
    step, beside the other chunks': they wait less than when launched at the forward's start; one
    chunk, no change."""
    flag = {"overlap_param_gather_with_optimizer_step": True}
    extra = {"vpp": 2, "schedule": "interleaved"}
    plain = run_iteration(small_run(dp=4, pp=2, m=4, zero=1, **extra)).breakdown["dp_communication"]
    early = run_iteration(small_run(dp=4, pp=2, m=4, zero=1, timing=flag, **extra)).breakdown["dp_communication"]
    assert early < plain  # the second chunk's step (its layer's states) runs beside the first chunk's gathers
    # one chunk, or no distributed optimizer: arguments.py validate_args asserts; the run config refuses it
    for shape in ({"vpp": 1, "schedule": "1f1b", "zero": 1}, {**extra, "zero": 0}):
        with pytest.raises(InputError) as err:
            small_run(dp=4, pp=2, m=4, timing=flag, **shape)
        assert err.value.field == "timing.overlap_param_gather_with_optimizer_step"


# --- ZeRO-3 / FSDP --------------------------------------------------------------------------------


def test_fsdp_prefetch_by_hand():
    # Three layers, forwards 1, 2, 3 and backwards 2, 4, 6; gathers 1.5 each, reduce-scatters 0.5.
    # Forward: the first gather exposed (1.5), the second behind the first layer (1.5 − 1 = 0.5), the
    # third behind the second (1.5 < 2: 0). Backward (megatron: reshard after forward, reduce every
    # micro-batch), layers in reverse: the last layer's gather exposed (1.5); the middle layer's gather
    # and the last layer's reduce-scatter (2.0) behind its backward of 6: 0; the first layer's gather
    # and the middle's reduce (2.0) behind 4: 0; the first layer's reduce-scatter after it: 0.5.
    rules = framework_rules(small_run())
    layers = [(1.0, 2.0), (2.0, 4.0), (3.0, 6.0)]
    fe, be, fl, bl, once_link = _fsdp_exposed(layers, [1.5] * 3, [0.5] * 3, rules)
    assert (fe, be) == pytest.approx((2.0, 2.0))
    assert (fl, bl, once_link) == pytest.approx((4.5, 4.5 + 1.5, 0.0))
    # torchtitan with a pipeline: parameters stay gathered (no gather in the backward) and gradients
    # reduce once per iteration, all 3 · 0.5 queued after the last micro-batch's backward has returned
    # (torch 2.6.0 stage.py `backward_maybe_with_nosync`; `titan_step.post_backward_reduce_end`), none of
    # it in the micro-batches' backward.
    titan = framework_rules(small_run(framework="torchtitan", pp=2, zero=3))
    fe, be, fl, bl, once_link = _fsdp_exposed(layers, [1.5] * 3, [0.5] * 3, titan)
    assert (fe, be, once_link) == pytest.approx((2.0, 0.0, 1.5))


def test_fsdp_gathers_cost_link_time():
    run = small_run(dp=4, pp=1, zero=3, fsdp=True)
    it = run_iteration(run)
    assert it.link_seconds["fsdp_communication"] > 0
    assert it.breakdown["fsdp_communication"] >= 0
    assert it.breakdown["dp_communication"] == 0.0  # FSDP reduces per layer, not in DDP buckets


# --- optimizer ------------------------------------------------------------------------------------


def test_optimizer_traffic_by_hand():
    # Adam with fp32 master and moments (12 bytes), fp32 gradients, bf16 parameters: per parameter whose
    # states the device holds 4 + 2·12 + 2 = 30 bytes; 4 more per held gradient for the norm, 4 per
    # parameter to zero the whole buffer. 1M states of 4M parameters (ZeRO-1 over 4), gradients whole:
    # 30·1M + 4·4M + 4·4M = 62 MB.
    setup = MemorySetup(seq_length=1, grad_bytes=4, state_bytes=12, dtype_bytes=2)
    assert optimizer_traffic(1e6, 4e6, 4e6, setup) == pytest.approx(62e6)
    # Megatron's mixed-precision optimizer reads the master copy again to write the 16-bit parameter
    # (+4 per state held: 66 MB); under fp16 loss scaling it unscales every held gradient in place
    # (read and write 4 bytes more each: +32 MB).
    assert optimizer_traffic(1e6, 4e6, 4e6, setup, master_copy=True) == pytest.approx(66e6)
    assert optimizer_traffic(1e6, 4e6, 4e6, setup, master_copy=True, loss_scaled=True) == pytest.approx(98e6)


def test_optimizer_step_of_a_run_by_hand():
    # No data parallel, one stage: every parameter's states are held. Parameters P from the memory model
    # (the same counts the memory estimate uses): (30 + 4)·P + 4·P + 4·P bytes at 5e11 B/s, Megatron
    # reading its master copy again.
    run = small_run(dp=1, pp=1)
    memory = MemoryModel(run)
    params = sum(memory.parameters(layer).total for layer in walk(run))
    assert run_iteration(run).breakdown["optimizer"] == pytest.approx(42 * params / 5e11, rel=1e-9)


# --- the whole -------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", ["llama3-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3"])
def test_breakdown_adds_up_and_rates_follow_from_the_seconds(config):
    run = load_run_config(CONFIGS / f"{config}.yaml")
    it = run_iteration(run)
    assert set(it.breakdown) == set(BREAKDOWN_KEYS)
    assert sum(it.breakdown.values()) == pytest.approx(it.seconds, rel=1e-12)
    assert all(value >= -1e-9 for value in it.breakdown.values())
    par, train = run.parallel, run.training
    devices = par.dp * par.tp * par.pp * par.cp
    tokens = train.micro_batch_size * train.micro_batches * par.dp * train.seq_length
    assert it.tokens_per_second_per_device == pytest.approx(tokens / it.seconds / devices, rel=1e-12)
    peak = run.device.profile().peak_flops(train.dtype)
    assert it.mfu == pytest.approx(model_flops_per_iteration(run) / (devices * peak * it.seconds), rel=1e-12)
    assert it.hfu >= it.mfu
    assert all(0.0 <= share <= 1.0 for share in it.hidden.values())
    data = it.to_json()
    assert set(data["breakdown"]) >= {"compute", "bubble", "p2p", "dp_communication", "optimizer"}


def test_a_plan_in_cells_prices_like_the_run_as_configured():
    # The run's own uniform split, given as a plan's cells, is the same iteration.
    run = load_run_config(CONFIGS / "llama3-8b.yaml")
    counts = walk(run).cell_counts
    cells = [[{"SLCT": n} for n in row] for row in counts]
    assert run_iteration(run, cells).seconds == pytest.approx(run_iteration(run).seconds, rel=1e-12)
    fuller = [[{"FULL": n} for n in row] for row in counts]
    slower = run_iteration(run, fuller)
    assert slower.seconds > run_iteration(run).seconds
    assert slower.hfu > slower.mfu


def test_recomputed_tp_gathers_cost_link_time_unless_hidden():
    # gather 0 re-sends the SP all-gathers in the backward; without async overlap they are on the path.
    # (MindFormers' rule: Megatron gathers again in every backward, whatever the switch.)
    mindformers = "mindformers"
    shown = small_run(tp=2, dp=1, pp=1, overlap={"tp_async": 0.0}, recompute={"gather": 0}, framework=mindformers)
    it = run_iteration(shown)
    assert it.link_seconds["recompute_gathers"] > 0
    assert it.hidden["recompute_gathers"] == pytest.approx(0.0)
    hidden = small_run(tp=2, dp=1, pp=1, overlap={"tp_async": 1.0}, recompute={"gather": 0}, framework=mindformers)
    assert run_iteration(hidden).hidden["recompute_gathers"] > 0


# --- properties ---------------------------------------------------------------------------------------

PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([1, 2]), st.integers(2, 6))
def test_more_data_parallel_never_lowers_the_reduction_time(dp, tp, pp, m):
    small = run_iteration(small_run(dp=dp, tp=tp, pp=pp, m=m))
    big = run_iteration(small_run(dp=2 * dp, tp=tp, pp=pp, m=m))
    assert big.link_seconds["dp_communication"] >= small.link_seconds["dp_communication"] * (1 - 1e-12)


OVERLAPS = ("tp", "tp_async", "dp", "param_gather")


@PROPERTY
@given(
    st.sampled_from(OVERLAPS),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 2]),
    st.booleans(),
)
def test_more_overlap_never_raises_the_iteration_time(setting, a, b, tp, pp, fsdp):
    # Megatron refuses --tp-comm-overlap without sequence parallelism, which it turns off at TP 1
    # (megatron/training/arguments.py validate_args): the run config refuses that pair, so it is not drawn.
    assume(not (setting == "tp" and tp == 1 and max(a, b) > 0))
    low, high = sorted((a, b))
    extra = {"zero": 3, "fsdp": True} if fsdp else {}
    slow = run_iteration(small_run(dp=2, tp=tp, pp=pp, overlap={setting: low}, **extra))
    fast = run_iteration(small_run(dp=2, tp=tp, pp=pp, overlap={setting: high}, **extra))
    assert fast.seconds <= slow.seconds * (1 + 1e-12)


@PROPERTY
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.integers(2, 6))
def test_more_micro_batches_never_shorten_the_iteration(dp, pp, m):
    assert run_iteration(small_run(dp=dp, pp=pp, m=m + 1)).seconds >= run_iteration(
        small_run(dp=dp, pp=pp, m=m)
    ).seconds * (1 - 1e-12)


@PROPERTY
@given(st.sampled_from(["megatron", "torchtitan", "mindformers"]), st.sampled_from([1, 2]), st.integers(2, 5))
def test_the_iteration_is_never_shorter_than_the_busiest_stages_work(framework, pp, m):
    it = run_iteration(small_run(dp=2, pp=pp, m=m, framework=framework))
    assert it.seconds >= it.breakdown["compute"]
    assert it.breakdown["bubble"] >= -1e-9


def test_gather_and_reduce_scatter_time_grow_with_the_group():
    # A ring over g ranks moves P·(g−1)/g: never less for more ranks, at one bandwidth.
    links = Links(5e10, 5e10, 0.0, 64, {f"g{g}": Group(g, g) for g in (2, 4, 8)})
    times = [collective_seconds(Collective(ALL_GATHER, f"g{g}", 1e6, "dp"), links) for g in (2, 4, 8)]
    assert times == sorted(times)


def test_deepep_sends_a_token_once_to_each_remote_node_it_reaches():
    # DeepSeek-V3 at EP 64 over 8 nodes: a token's 8 experts from its 4 best of 8 groups (one a node)
    # reach at most 4 nodes, 7/8 of them remote on average: 3.5 hidden states leave the node per token
    # routed, instead of 8 copies × 56/64 remote = 7. Uniform picks without the limit: 8·(1 − (7/8)^8)
    # nodes, the same 7/8 remote.
    geo = OpGeometry(seq_length=4096, ep=64, ep_nodes=8, dispatcher="deepep")
    limited = Moe(7168, 256, 8, 2048, True, "swiglu", groups=8, group_limit=4)
    assert _remote_nodes(limited, geo) == pytest.approx(4 * 7 / 8)
    free = Moe(7168, 256, 8, 2048, True, "swiglu")
    assert _remote_nodes(free, geo) == pytest.approx(8 * (1 - (7 / 8) ** 8) * 7 / 8)
    assert _remote_nodes(free, OpGeometry(seq_length=4096, ep=8, ep_nodes=1)) is None


def test_deepseek_v3_reads_its_group_limited_routing():
    run = load_run_config(CONFIGS / "deepseek-v3.yaml")
    spec = run.spec("llm")
    assert (spec.expert_groups, spec.expert_group_limit) == (8, 4)  # n_group, topk_group of its config.json


def test_ppb_estimate_json_carries_the_iteration(capsys):
    assert main(["estimate", str(CONFIGS / "llama3-8b.yaml"), "--json"]) == 0
    iteration = json.loads(capsys.readouterr().out)["iteration"]
    assert set(iteration) >= {"seconds", "tokens_per_second_per_device", "mfu", "hfu", "breakdown"}
    assert set(iteration["breakdown"]) >= {"compute", "bubble", "p2p", "dp_communication", "optimizer"}
    run = load_run_config(CONFIGS / "llama3-8b.yaml")
    assert iteration["seconds"] == pytest.approx(run_iteration(run).seconds, rel=1e-12)


def test_plan_iterations_price_the_plan_and_its_baseline_in_seconds():
    run = load_run_config(CONFIGS / "llama3-8b.yaml")
    counts = walk(run).cell_counts
    plan = {
        "input": {"stages": 4, "micro_batches": 32, "interleave": 1, "schedule": "1f1b"},
        "cells": [[{"options": {"NONE": n}} for n in row] for row in counts],
        "best_baseline": "FULL",
        "baselines": [
            {
                "option": "FULL",
                "layers_per_cell": counts,
                "cells": [[{"options": {"FULL": n}} for n in row] for row in counts],
            }
        ],
    }
    out = plan_iterations(run, plan)
    none = run_iteration(run, [[{"NONE": n} for n in row] for row in counts])
    full = run_iteration(run, [[{"FULL": n} for n in row] for row in counts])
    assert out["iteration"]["seconds"] == pytest.approx(none.seconds, rel=1e-12)
    assert out["baseline_iteration"]["option"] == "FULL"
    assert out["baseline_iteration"]["seconds"] == pytest.approx(full.seconds, rel=1e-12)
