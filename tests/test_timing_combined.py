"""The combined 1F1B's time (Megatron-Core's --overlap-moe-expert-parallel-comm): a layer pair on two
streams (model_chunk_schedule_plan.py `TransformerLayerSchedulePlan.run`, d98e8a64) and the schedule
with one more warm-up forward whose steady pairs run as one step (combined_1f1b.py)."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE
from test_memory_activations import MOE
from test_memory_runs import make_run

from ppb_core.model.switches import LayerType
from ppb_core.model.walk import BODY, walk
from ppb_core.schedules import combined_pairs, simulate
from ppb_core.timing.combined import Segments, direction_contention, layer_segments, step_saving
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.pricer import TimeModel

# forward: pre-dispatch 2, dispatch 1, experts 3, combine 1 (7); backward: combine 1, experts' input
# gradient 4 and weight gradient 2, dispatch 1, pre-dispatch 4 (12)
F = Segments(2, 1, 3, 1, 0, 0, 0, 0, 0, forward_alone=7, backward_alone=0)
B = Segments(0, 0, 0, 0, 1, 4, 2, 1, 4, forward_alone=0, backward_alone=12)
DENSE = Segments(5, 0, 0, 0, 0, 0, 0, 0, 9, forward_alone=5, backward_alone=9)


def test_a_layer_pair_on_two_streams_by_hand():
    # comm: combine_bwd [0, 1]; compute: pre_dispatch_fwd [0, 2]; mlp_bwd waits for both: [2, 6];
    # dispatch_fwd after pre_dispatch_fwd: [2, 3]; mlp_bwd_dw [6, 8]; dispatch_bwd after mlp_bwd: [6, 7];
    # mlp_fwd after the weight gradient: [8, 11]; combine_fwd [11, 12]; pre_dispatch_bwd [11, 15].
    # The step takes 15 against 7 + 12 = 19 alone: the four all-to-alls (4) hidden.
    assert step_saving([F], [B]) == pytest.approx(4.0)
    # All 4 of them ran beside compute (the streams' 15 of compute fill the step): a tenth of the SMs
    # taken, 0.4 back.
    assert step_saving([F], [B], contention=0.1) == pytest.approx(3.6)
    # A dense layer has only its pre-dispatch part: nothing to hide.
    assert step_saving([DENSE], [DENSE]) == pytest.approx(0.0)
    # Two forward layers beside one backward layer: one pair, the second forward layer alone.
    assert step_saving([F, F], [B]) == pytest.approx(4.0)
    assert step_saving([], [B]) == 0.0


def test_a_layers_own_other_half_does_not_count_beside_compute():
    # real layers carry both halves: the pair runs the forward layer's two all-to-alls and the backward
    # layer's two (`pair_step`), 4 beside compute, not the 8 both layers' segments hold: 4 − 0.1·4
    both = Segments(2, 1, 3, 1, 1, 4, 2, 1, 4, forward_alone=7, backward_alone=12)
    assert step_saving([both], [both], contention=0.1) == pytest.approx(3.6)


def test_each_direction_takes_its_own_share():
    # F's dispatch 1 and B's combine backward 1 run the dispatch kernel; F's combine 1 and B's dispatch
    # backward 1 the combine kernel: (1.0·2 + 0.25·2) / 4
    assert direction_contention([F], [B], 1.0, 0.25) == pytest.approx(0.625)
    assert direction_contention([DENSE], [DENSE], 0.3, 0.1) == pytest.approx(0.3)  # no all-to-all: the first


def test_delayed_weight_gradients_leave_the_dispatch_s_backward_by_hand():
    """model_chunk_schedule_plan.py `TransformerLayerSchedulePlan.run` (d98e8a64): without
    --delay-wgrad-compute the experts' weight gradient is part of `mlp.backward`, which the dispatch's
    backward waits for; with it, `mlp.backward_dw()` runs on the compute stream beside it."""
    # B with a dispatch backward of 5 (backward alone 16; the pair alone 7 + 16 = 23).
    long = Segments(0, 0, 0, 0, 1, 4, 2, 5, 4, forward_alone=0, backward_alone=16)
    # Delayed: combine_bwd [0, 1]; pre_fwd [0, 2]; mlp_bwd [2, 6]; dispatch_fwd [2, 3]; mlp_bwd_dw
    # [6, 8]; dispatch_bwd after mlp_bwd [6, 11]; mlp_fwd [8, 11]; combine_fwd [11, 12]; pre_bwd after
    # dispatch_bwd [11, 15]: step 15, saving 8.
    assert step_saving([F], [long], delay_wgrad=True) == pytest.approx(8.0)
    # Megatron's default: mlp_bwd with its weight gradient [2, 8]; dispatch_bwd [8, 13]; mlp_fwd [8, 11];
    # combine_fwd after dispatch_bwd on the comm stream [13, 14]; pre_bwd [13, 17]: step 17, saving 6.
    assert step_saving([F], [long]) == pytest.approx(6.0)
    # The pre-dispatch part's delayed weight gradient runs last, on the compute stream: 1.5 of pre_bwd's 4
    # moved after it, the step still 15 ([11, 13.5] then [13.5, 15]).
    split = Segments(0, 0, 0, 0, 1, 4, 2, 5, 2.5, forward_alone=0, backward_alone=16, pre_backward_dw=1.5)
    assert step_saving([F], [split], delay_wgrad=True) == pytest.approx(8.0)


def test_the_schedule_runs_its_steady_pairs_as_steps_by_hand():
    # No pipelining, m = 3: F0, then (F1, B0), (F2, B1), then B2 (combined_1f1b.py
    # `combined_1f1b_schedule_for_no_pipelining`). Forward 1, backward 2, each step saving 0.5:
    # 3·1 + 3·2 − 2·0.5 = 8.
    assert combined_pairs("1f1b", 1, 1, 3) == [[(0, 0), (0, 0)]]
    timeline = simulate("1f1b", [[1.0]], [[2.0]], 3, combined=[[[0.5]]])
    assert timeline.makespan == pytest.approx(8.0)
    # One micro-batch: its forward and backward run alone.
    assert combined_pairs("1f1b", 1, 1, 1) == [[]]
    assert simulate("1f1b", [[1.0]], [[2.0]], 1, combined=[[[0.5]]]).makespan == pytest.approx(3.0)


def test_a_combined_run_saves_its_steps_overlap():
    parallel = {"dp": 2, "ep": 2}
    training = {"micro_batches": 3, "micro_batch_size": 1}
    spec = {**MOE, "num_layers": 2}
    plain = make_run(spec, parallel=parallel, training=training, device=ROUND_DEVICE, framework="megatron")
    combined = make_run(
        spec,
        parallel={**parallel, "overlap_moe_expert_parallel_comm": True},
        training=training,
        device=ROUND_DEVICE,
        framework="megatron",
    )
    # no host waits first (`ppb_core.timing.host`): the steps save their overlap alone
    costly = (plain, combined)
    plain, combined = (
        run.model_copy(update={"timing": run.timing.model_copy(update={"host_launch_us": 0.0})}) for run in costly
    )
    times = TimeModel(combined)
    bodies = [layer for layer in walk(combined) if layer.node == BODY]
    segments = [layer_segments(times, layer, LayerType.NOT_REC_LAYER) for layer in bodies]
    # the layers' all-to-alls are their link time; alone, the segments add up to the priced layer
    for layer, part in zip(bodies, segments, strict=True):
        forward_ms, backward_ms = times.layer_times(layer, LayerType.NOT_REC_LAYER)
        assert part.forward_alone * 1e3 == pytest.approx(forward_ms)
        assert part.backward_alone * 1e3 == pytest.approx(backward_ms)
        assert part.dispatch_forward > 0 and part.combine_backward > 0
    saving = step_saving(segments, segments[::-1], times.kernels.contention)
    assert saving > 0
    # --delay-wgrad-compute parts the pre-dispatch weight gradients out of its backward, nothing lost
    for layer, part in zip(bodies, segments, strict=True):
        delayed = layer_segments(times, layer, LayerType.NOT_REC_LAYER, delay_wgrad=True)
        assert delayed.pre_backward_dw > 0
        assert delayed.pre_backward + delayed.pre_backward_dw == pytest.approx(part.pre_backward)
    # one stage, m = 3: two steps, each saving that much of the busiest stage's work
    assert run_iteration(plain).breakdown["compute"] - run_iteration(combined).breakdown["compute"] == pytest.approx(
        2 * saving
    )
    # with the host's launches costing (5 us each: these tiny layers' 79 forward and 57 backward launches
    # take far longer than their GPU work), one host thread launches both layers of a step: the paired
    # layers take the host's time whatever the streams overlap, so the combined run saves nothing
    host_bound = run_iteration(costly[0]).breakdown["compute"] - run_iteration(costly[1]).breakdown["compute"]
    assert host_bound == pytest.approx(0.0, abs=1e-12)
