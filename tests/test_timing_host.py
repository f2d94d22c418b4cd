"""The GPU's wait for the host after Megatron's alltoall dispatcher synchronizes with the device
(token_dispatcher.py `_maybe_dtoh_and_synchronize`, d98e8a64), launch by launch."""

from __future__ import annotations

import pytest
from test_memory_activations import MOE
from test_memory_runs import make_run

from ppb_core.timing.flops import COMM, Op
from ppb_core.timing.host import (
    dispatcher_wait_s,
    dispatcher_waits,
    kernels,
    launch_wait_s,
    layer_host_waits,
    rerun_sync_wait_s,
)
from ppb_core.timing.iteration import run_iteration

# A MoE layer's ops around Megatron's token dispatcher and their forward seconds, by hand.
DISPATCH_OPS = [
    Op("moe.router_topk", "moe", "memory"),
    Op("moe.permute", "moe", "memory"),
    Op("moe.dispatch", "moe", COMM),
    Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
    Op("moe.unpermute", "moe", "memory"),
]
DISPATCH_FORWARD_S = {"moe.router_topk": 1.0, "moe.permute": 2.0, "moe.dispatch": 1.0, "moe.experts_in": 2.0,
                      "moe.unpermute": 1.0}  # fmt: skip


def test_launch_wait_by_hand():
    # Nothing queued, three 10 us kernels, 5 us a launch: the first waits 5 us for its launch; the
    # second is launched at 10, when the GPU reaches it (5 + 10 = 15 > 10); the third at 15 < 25.
    assert launch_wait_s(0.0, [(1, 10e-6)] * 3, 5e-6) == pytest.approx(5e-6)
    # 2 queued, then one op of four kernels taking 4 (1 each), 1.5 a launch: kernel k is launched at
    # 1.5k and reached at 2 + (k − 1): 1.5 < 2, 3 = 3, 4.5 > 4 by 0.5, 6 > 5 by 1: the GPU waits 1.
    assert launch_wait_s(2.0, [(4, 4.0)], 1.5) == pytest.approx(1.0)
    # launched faster than the GPU runs them: no wait
    assert launch_wait_s(0.0, [(1, 10e-6)] * 3, 0.0) == 0.0


def test_the_dispatcher_s_wait_follows_its_synchronization_point():
    ops = DISPATCH_OPS
    assert [kernels(op) for op in ops] == [1, 1, 1, 2, 1]  # a grouped GEMM launches one GEMM a group
    forward = dict(DISPATCH_FORWARD_S)
    # Dropless: the wait comes before the all-to-all, the permutation (2) still to run. Launches at
    # 1.5, 3, 4.5, 6 (dispatch, the two GEMMs, unpermute) against the GPU reaching them at 2, 3, 4, 5:
    # the GPU waits 1.
    assert dispatcher_wait_s(ops, forward, 1.5, dropless=True) == pytest.approx(1.0)
    # A capacity factor: the wait comes before the permutation, nothing queued: launches at 1.5 ... 7.5
    # against 0, 2, 3, 4, 5: the GPU waits 7.5 − 5 = 2.5.
    assert dispatcher_wait_s(ops, forward, 1.5, dropless=False) == pytest.approx(2.5)
    # A dense layer has no dispatcher
    assert dispatcher_wait_s(ops[2:], forward, 1.5, dropless=True) == 0.0


def test_a_count_copy_after_the_permutation_leaves_nothing_queued():
    # TE graphs holding moe_preprocess move the copy to "before_ep_alltoall" (token_dispatcher.py,
    # 0d8e0714cd): dropless, the wait then outlasts the permutation too. The same launches at 1.5, 3, 4.5,
    # 6 against the GPU reaching them at 0, 1, 2, 3 (dispatch 1, the GEMMs 1 each): the GPU waits 6 − 3 = 3,
    # the permutation's 2 no longer covering the host's first launches (1 before).
    ops, forward = DISPATCH_OPS, dict(DISPATCH_FORWARD_S)
    assert dispatcher_wait_s(ops, forward, 1.5, dropless=True, copy_after_permute=True) == pytest.approx(3.0)
    # Wrapped to the next layer's copy: its router (1 launch, 1 s) and permutation (1, 2 s) follow: launches
    # at 1.5 … 9 against 0, 1, 2, 3, 4 (unpermute 1), 5 (router): 9 − 5 = 4; with the copy before the
    # permutation, 2 queued and the next permutation's 2 left to its own wait: 9 − 7 = 2.
    assert dispatcher_wait_s(ops, forward, 1.5, True, wrap=True, copy_after_permute=True) == pytest.approx(4.0)
    assert dispatcher_wait_s(ops, forward, 1.5, True, wrap=True) == pytest.approx(2.0)
    # with a capacity factor the copy is synchronized before the permutation either way
    assert dispatcher_wait_s(ops, forward, 1.5, False, copy_after_permute=True) == pytest.approx(2.5)


def test_the_host_s_launches_cost_only_where_the_gpu_waits():
    # MOE's tiny layers (h 32, s 64): their kernels take less than a launch, so the host is on the
    # critical path after every synchronization; a free launch costs nothing.
    def run(launch_us):
        return make_run(MOE, parallel={"dp": 2, "ep": 2}, framework="megatron").model_copy(
            update={"timing": make_run(MOE).timing.model_copy(update={"host_launch_us": launch_us})}
        )

    slow, free = run_iteration(run(20.0)), run_iteration(run(0.0))
    assert slow.seconds > free.seconds
    torchtitan = make_run(MOE, parallel={"dp": 2, "ep": 2}, framework="torchtitan")
    assert run_iteration(torchtitan).seconds == pytest.approx(
        run_iteration(
            torchtitan.model_copy(update={"timing": torchtitan.timing.model_copy(update={"host_launch_us": 0.0})})
        ).seconds
    )


def test_the_backward_launches_what_it_reruns_again():
    # Megatron's CheckpointFunction.backward (tensor_parallel/random.py, d98e8a64) calls the forward's
    # Python again before the backward's kernels: the host launches both. A dense layer of two ops,
    # launches (forward, backward) norm (1, 3) and mlp_in (2, 4); GPU seconds forward 2, backward 3, the
    # rerun norm 0.5; 1 a launch, no dispatcher.
    ops = [Op("norm", "dense", "memory"), Op("mlp_in", "dense", "matmul", gemm=(8, 4, 4))]
    launches = {"norm": (1.0, 3.0), "mlp_in": (2.0, 4.0)}
    forward_s = {"norm": 0.5, "mlp_in": 1.5}
    waits = layer_host_waits(ops, forward_s, launches, ["norm"], (2.0, 3.0, 0.5), 1.0, None, True)
    # forward: 3 launches against 2 of GPU work: 1 over; backward: 7 own + 1 rerun = 8 launches against
    # 3 + 0.5 of GPU work: 4.5 over (without the rerun's launch, 7 − 3.5 = 3.5)
    assert waits.forward == pytest.approx(1.0)
    assert waits.backward == pytest.approx(4.5)
    assert waits.launch_backward == pytest.approx(8.0)
    # nothing rerun: 7 − 3 = 4
    plain = layer_host_waits(ops, forward_s, launches, [], (2.0, 3.0, 0.0), 1.0, None, True)
    assert plain.backward == pytest.approx(4.0)
    # a GPU-bound backward (GPU 10) stays the GPU's: no wait, rerun or not
    assert layer_host_waits(ops, forward_s, launches, ["norm"], (2.0, 10.0, 0.5), 1.0, None, True).backward == 0.0


def test_a_rerun_dispatch_still_launches_both_counts():
    # Full recompute reruns the dispatch: CheckpointFunction.backward calls the MoE layer's forward again,
    # whose dispatcher synchronizes again. The host still issues the rerun's launches and then the
    # backward's, one after another. MoE ops router (1, 2), permute (1, 2), dispatch (1, 2), experts (2, 4):
    # 5 forward, 10 backward launches, 1 s each; GPU forward 4 s (1 each), backward 8 s (2 each), the rerun
    # 4 s; dropless alltoall. Forward wait (host.py `dispatcher_wait_s`): the permutation's 1 s queued, then
    # the dispatch (1 kernel, 1 s), the experts (2 kernels of 0.5 s), wrapped to the router (1 s) and the
    # permutation (run in the next wait: 0 s), launched at 1, 2, 3, 4, 5: the GPU reaches them at 1, 2, 2.5,
    # 3.5, 5: it waits 0.5 + 0.5 = 1. The rerun's wait (`rerun_dispatch_wait_s`): the permutation's 1 queued,
    # the dispatch and the experts again (1, 2, 2.5 reached), then the backward's experts (4 of 0.5 s), dispatch,
    # permutation and router (2 of 1 s each), then the previous layer's router and permutation again: launch k
    # at k against 1, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, ..., 11, 12: 3 from the 8th launch on. The backward:
    # that 3, and the 15 launches (10 own + 5 rerun) against 8 + 4 + 3 of GPU work and wait: nothing more.
    ops = [
        Op("moe.router", "moe", "memory"),
        Op("moe.permute", "moe", "memory"),
        Op("moe.dispatch", "moe", COMM),
        Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
    ]
    launches = {"moe.router": (1.0, 2.0), "moe.permute": (1.0, 2.0), "moe.dispatch": (1.0, 2.0),
                "moe.experts_in": (2.0, 4.0)}  # fmt: skip
    forward_s = {"moe.router": 1.0, "moe.permute": 1.0, "moe.dispatch": 1.0, "moe.experts_in": 1.0}
    backward_s = {name: 2.0 for name in forward_s}
    rerun = list(launches)
    waits = layer_host_waits(
        ops, forward_s, launches, rerun, (4.0, 8.0, 4.0), 1.0, "alltoall", True, backward_s=backward_s
    )
    assert waits.dispatcher == pytest.approx(1.0)
    assert waits.backward == pytest.approx(15.0 - 12.0)
    assert waits.launch_backward == pytest.approx(15.0)


def test_a_rerun_dispatch_launches_the_whole_rerun_again():
    # Full recompute of a MoE layer reruns its dispatch: the host launches every forward op again and
    # waits at the dispatcher's synchronization as the forward did. The dispatcher test's layer with a
    # capacity factor, 1.5 a launch; forward launches (1, 1, 1, 2, 1), backward the same (6).
    ops = DISPATCH_OPS
    forward = dict(DISPATCH_FORWARD_S)
    launches = {"moe.router_topk": (1.0, 1.0), "moe.permute": (1.0, 1.0), "moe.dispatch": (1.0, 1.0),
                "moe.experts_in": (2.0, 2.0), "moe.unpermute": (1.0, 1.0)}  # fmt: skip
    names = list(forward)
    # backward seconds (2 in all): the router's 0, 0.5 each other op
    backward = {"moe.router_topk": 0.0, "moe.permute": 0.5, "moe.dispatch": 0.5, "moe.experts_in": 0.5,
                "moe.unpermute": 0.5}  # fmt: skip
    # forward's wait, wrapped into the next layer's router: kernels reached at 0, 2, 3, 4, 5, 6 (permute
    # 2, dispatch 1, the GEMMs 1 each, unpermute 1, router 1), launched at 1.5 ... 9: the GPU waits 3
    full = layer_host_waits(ops, forward, launches, names, (7.0, 2.0, 7.0), 1.5, "alltoall", False, backward_s=backward)
    assert full.dispatcher == pytest.approx(3.0)
    # the rerun's wait (`rerun_dispatch_wait_s`): from the permutation again, its 5 launches (reached at 0, 2,
    # 3, 4, 5), then the backward's unpermutation, GEMMs (0.25 each), dispatch, permutation, router (reached at
    # 6, 6.5, 6.75, 7, 7.5, 8), then the previous layer's router (8): the 12th launch at 18 against 8: 10.
    # The 6 own + 6 rerun launches (18) against GPU 2 + 7 and those 10: nothing more, the backward waits 10
    assert full.backward == pytest.approx(10.0)
    # rerunning the router alone (no dispatch): 7 launches (10.5) against 2 + 1: 7.5 over, so the
    # backward takes 2 + 1 + 7.5 = 10.5 against full recompute's 2 + 7 + 10 = 19
    router = layer_host_waits(
        ops, forward, launches, names[:1], (7.0, 2.0, 1.0), 1.5, "alltoall", False, backward_s=backward
    )
    assert router.backward == pytest.approx(7.5)
    assert 2.0 + 1.0 + router.backward <= 2.0 + 7.0 + full.backward


def test_an_op_that_synchronizes_restarts_the_wait_from_an_idle_gpu():
    # GPT-OSS's clamp ends with the quick-GEGLU offset's blocking copy (fused_bias_geglu.py
    # `weighted_bias_quick_geglu_impl`, 2edffadb52: `torch.tensor(linear_offset, device=...)`, PyTorch's
    # `memcpy_and_sync`). Dropless, 1.5 a launch, the permutation's 2 queued: the dispatch and the two GEMMs and
    # the clamp launched at 1.5, 3, 4.5, 6 against the GPU reaching them at 2, 3, 4, 5: 1; then from an idle GPU
    # the activation and the unpermutation at 1.5, 3 against 0, 1: 2. Together 3; without the sync one run of
    # launches at 1.5 … 9 against 2 … 7: 2.
    def ops(syncs):
        return [
            *DISPATCH_OPS[:4],
            Op("moe.experts_clamp", "moe", "memory", syncs=syncs),
            Op("moe.experts_act", "moe", "memory"),
            DISPATCH_OPS[4],
        ]

    forward = {**DISPATCH_FORWARD_S, "moe.experts_clamp": 1.0, "moe.experts_act": 1.0}
    assert dispatcher_wait_s(ops(1), forward, 1.5, dropless=True) == pytest.approx(3.0)
    assert dispatcher_wait_s(ops(0), forward, 1.5, dropless=True) == pytest.approx(2.0)
    # the piece after the clamp follows a sync inside the experts: a combined 1F1B step does not hide it (the
    # backward layer's experts no longer queued), so the layer's dispatcher part is the first piece's 1 only
    waits = dispatcher_waits(ops(1), forward, 1.5, dropless=True)
    assert [(pytest.approx(wait), after) for wait, after in waits] == [(1.0, False), (2.0, True)]
    # in a layer (wrapped to the next layer's router and permutation, the latter's 2 s left to its own wait): the
    # second piece's launches at 1.5, 3, 4.5, 6 against 0, 1, 2, 3: 3; the forward waits 1 + 3 = 4
    launches = {op.name: (float(kernels(op)), 0.0) for op in ops(1)}
    host = layer_host_waits(ops(1), forward, launches, [], (10.0, 0.0, 0.0), 1.5, "alltoall", True)
    assert (host.forward, host.dispatcher) == (pytest.approx(4.0), pytest.approx(1.0))


def test_a_rerun_that_synchronizes_waits_in_the_backward():
    # `moe_act` reruns the clamp and the activation from a hook on fc2's gradient function (tensor_parallel/
    # random.py `discard_output_and_register_recompute`): the clamp's copy waits for the backward queued so far,
    # then the host launches, 1.5 a launch, onto an idle GPU: the activation again (1 launch, 1 s), fc2's
    # backward (2, 6 s), the activation's (1, 2), the clamp's (2, 2), fc1's (4, 8), then the previous layer's
    # combine (1, 1). Launch k at 1.5k against the GPU reaching it at 0, 1, 4, 7, 9, 10, ...: 1.5, 2, 0.5, then
    # ahead: the GPU waits 2.
    ops = [
        Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.experts_clamp", "moe", "memory", syncs=1),
        Op("moe.experts_act", "moe", "memory"),
        Op("moe.experts_out", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.combine", "moe", COMM),
    ]
    launches = {"moe.experts_in": (2.0, 4.0), "moe.experts_clamp": (1.0, 2.0), "moe.experts_act": (1.0, 1.0),
                "moe.experts_out": (2.0, 2.0), "moe.combine": (1.0, 1.0)}  # fmt: skip
    forward = {"moe.experts_in": 2.0, "moe.experts_clamp": 1.0, "moe.experts_act": 1.0, "moe.experts_out": 2.0,
               "moe.combine": 1.0}  # fmt: skip
    backward = {"moe.experts_in": 8.0, "moe.experts_clamp": 2.0, "moe.experts_act": 2.0, "moe.experts_out": 6.0,
                "moe.combine": 1.0}  # fmt: skip
    rerun = ["moe.experts_clamp", "moe.experts_act"]
    assert rerun_sync_wait_s(ops, rerun, forward, backward, launches, 1.5) == pytest.approx(2.0)
    # the activation alone rerun (no clamp) does not synchronize
    assert rerun_sync_wait_s(ops, rerun[1:], forward, backward, launches, 1.5) == 0.0
    # the layer's backward: that wait, then the GPU's 18 s of backward and 2 of rerun, with it, against the
    # host's 12 launches (18 s): no excess beyond it
    waits = layer_host_waits(ops, forward, launches, rerun, (7.0, 18.0, 2.0), 1.5, None, True, backward_s=backward)
    assert waits.backward == pytest.approx(2.0)


def test_a_rerun_dispatch_waits_over_the_backward_not_the_next_layer():
    # Megatron's `moe` module reruns the router, the allgather dispatcher and the experts, not the attention
    # (CheckpointFunction.backward, d98e8a64). 1 a launch. Forward launches and seconds: attention (1, a), router
    # (1, 0.5), the map's gather (1, 0.5), permutation (1, 0.5), experts (2, 1), unpermutation (1, 0.5); backward:
    # attention (2, 2), router (1, 0.5), gather (0, 0), permutation (1, 0.5), experts (2, 2), unpermutation (1, 0.5).
    # The rerun's wait: the permutation alone from an idle GPU (launched at 1, reached at 0: 1), then from idle
    # again the experts, unpermutation, the backward's unpermutation, experts, permutation, router, attention, the
    # previous layer's router and gather: launch k at k against 0, .5, 1, 1.5, 2, 3, 4, 4.5, 5, 6, 7, 7.5: the
    # 12th waits 12 − 7.5 = 4.5. Together 5.5; the 13 launches (7 own, 6 rerun) against 5.5 + 3 of GPU work and
    # that 5.5: nothing more. The attention's forward seconds a are not in it.
    ops = [
        Op("attention.qkv", "attention", "matmul", gemm=(8, 4, 4)),
        Op("moe.router", "moe", "memory"),
        Op("moe.dispatch_map", "moe", COMM),
        Op("moe.permute", "moe", "memory"),
        Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.unpermute", "moe", "memory"),
    ]
    launches = {"attention.qkv": (1.0, 2.0), "moe.router": (1.0, 1.0), "moe.dispatch_map": (1.0, 0.0),
                "moe.permute": (1.0, 1.0), "moe.experts_in": (2.0, 2.0), "moe.unpermute": (1.0, 1.0)}  # fmt: skip
    backward = {"attention.qkv": 2.0, "moe.router": 0.5, "moe.dispatch_map": 0.0, "moe.permute": 0.5,
                "moe.experts_in": 2.0, "moe.unpermute": 0.5}  # fmt: skip
    rerun = [op.name for op in ops[1:]]
    for attention_s in (0.5, 2.0):
        forward = {"attention.qkv": attention_s, "moe.router": 0.5, "moe.dispatch_map": 0.5, "moe.permute": 0.5,
                   "moe.experts_in": 1.0, "moe.unpermute": 0.5}  # fmt: skip
        device = (sum(forward.values()), 5.5, 3.0)
        waits = layer_host_waits(ops, forward, launches, rerun, device, 1.0, "allgather", True, backward_s=backward)
        assert waits.backward == pytest.approx(5.5)
    # the forward's own wait does depend on it (wrapped over the next layer's attention): at a = 2 the second
    # piece's launches at 1 … 6 against 0, .5, 1, 1.5, 3.5, 4: 2.5 (at a = 0.5: 6 − 2.5 = 3.5), and 1 before it
    assert waits.forward == pytest.approx(1.0 + 2.5)
