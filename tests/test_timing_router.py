"""Megatron's MoE router kernels by setting (`ppb_core.timing.router`), each count by hand from
megatron/core/transformer/moe/router.py and moe_utils.py at NVIDIA/Megatron-LM d98e8a64."""

from __future__ import annotations

import pytest
from test_memory_activations import MOE
from test_memory_runs import make_run

from ppb_core.config.run import MoeRouter
from ppb_core.model.walk import BODY, walk
from ppb_core.timing.flops import Op
from ppb_core.timing.host import dispatcher_wait_s
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.router import SINKHORN_ITERATIONS, RouterSetting, router_launches


def _counts(tp_cp: int = 2, tp_dp_cp: int = 8, fp32: bool = False, topk: int = 2, group_topk: int = 0, **router):
    setting = RouterSetting.of(MoeRouter(**router))
    counts = router_launches(setting, topk=topk, group_topk=group_topk, fp32=fp32, tp_cp=tp_cp, tp_dp_cp=tp_dp_cp)
    return counts.forward, counts.backward, counts.syncs


def test_sinkhorn_top1_by_hand():
    # the 8experts2parallel CI cases: sinkhorn, top-1, bf16 logits. Cast 1, exp 1, ones 2, 3 iterations × 14
    # (moe_utils.py `sinkhorn`: d0's multiply, sum, add and `float / tensor`, which torch/_tensor.py
    # `__rdiv__` runs as reciprocal then multiply: 5; d1's 5; the error's subtract, abs, mean: 3; the
    # compare: 1), final products 2, top-k 1 (k = 1: no sort), sigmoid 1, map 4, scores' product 1:
    # 1+1+2+42+2+1+1+4+1 = 55; backward the product's and the sigmoid's gradients: 2; a host sync each
    # iteration: 3
    assert _counts(topk=1, sinkhorn=True) == (55, 2, 3)


def test_softmax_top2_with_the_aux_loss_by_hand():
    # the etp1_ep4 CI cases: softmax after the top-k, top-2, aux_loss, bf16 logits, TP 2.
    # top-k 2 (select, sort) + softmax 1 + cast back 1 + dense outputs 6 = 10; backward softmax 1 + top-k 2 +
    # cast 1 + the dense probabilities' gather 1 = 5.
    # aux scores: softmax 1 + top-k 2 + map 4 = 7, backward softmax 1 + the sum into the logits' 1 = 2;
    # aux_loss: map sum 1 + TP all-reduce 1 + loss 4 + record 3 = 9, backward autoscaler 2 + loss 2 = 4.
    assert _counts(aux_losses=["aux_loss"]) == (10 + 7 + 9, 5 + 2 + 4, 0)
    # one TP×CP rank: no all-reduce
    assert _counts(tp_cp=1, aux_losses=["aux_loss"]) == (25, 11, 0)


def test_the_moe_mla_router_by_hand():
    # moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_*: sigmoid, expert bias, 4 groups choosing 2, top-4, scaling, fp32
    # logits, seq_aux_loss, TP 2. Group top-k: top-2 in each group (2) + sum 1 + group top-2 unsorted 1 +
    # mask 6 + top-4 (2) = 12; sigmoid 1 + bias add 1 + 12 + gather 1 + normalisation 3 + scaling 1 = 19,
    # + dense outputs 6 = 25; backward sigmoid 1 + gather's 2 + normalisation 4 + scaling 1 + gather 1 = 9.
    # aux scores: sigmoid 1 + normalisation 3 + top-4 2 + map 4 = 10, backward 1 + 4 + 1 = 6; seq_aux_loss:
    # 1 + 1 + 4 + 3 + divide 1 = 10, backward 2 + 2 + 1 = 5; expert-bias tally 2 (forward).
    router = {"score_function": "sigmoid", "aux_losses": ["seq_aux_loss"], "expert_bias": True, "topk_scaling": True}
    assert _counts(fp32=True, topk=4, group_topk=2, **router) == (25 + 10 + 10 + 2, 9 + 6 + 5, 0)


def test_the_fused_router_by_hand():
    # moe/gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_scoped_cudagraph: --moe-router-fusion, sigmoid, expert bias,
    # global_aux_loss, fp32, TP 4 DP 1. Fused top-k 1/1; fused aux scores 1/1 + the sum into the logits' 1;
    # global loss: map sum 1 + all-reduce over TP·DP·CP (4) 1 + fused loss 1 + record 3 + running sums 3 = 9,
    # backward 2 + 1 = 3; expert-bias tally 2.
    router = {"score_function": "sigmoid", "aux_losses": ["global_aux_loss"], "expert_bias": True, "fusion": True}
    assert _counts(tp_cp=4, tp_dp_cp=4, fp32=True, **router) == (1 + 1 + 9 + 2, 1 + 2 + 3, 0)


def test_forced_load_balancing_adds_the_random_logits():
    # RandomSTE: logits.clone().normal_() forward (2), the gradient passed through (0)
    plain, forced = _counts(), _counts(force_balance=True)
    assert (forced[0] - plain[0], forced[1] - plain[1]) == (2, 0)


def test_the_z_loss_adds_its_kernels():
    # logsumexp 9 + square + mean + coefficient 3 + record 3 = 15 forward, 10 backward (module docstring)
    plain, with_z = _counts(), _counts(z_loss=True)
    assert (with_z[0] - plain[0], with_z[1] - plain[1]) == (15, 10)


def test_sinkhorn_takes_no_aux_loss():
    with pytest.raises(ValueError):
        MoeRouter(sinkhorn=True, aux_losses=["aux_loss"])


def test_sinkhorn_stops_at_the_third_iteration_at_the_initial_router_scale():
    # moe_utils.py `sinkhorn` (tol 1e-4), written out here, on logits of the initial router: weight std
    # 0.02 (--init-method-std) against the unit-variance norm output of hidden 512: std 0.02·√512 = 0.45.
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)

    def iterations(logits) -> int:
        cost = torch.exp(logits)
        d0, d1 = torch.ones(cost.size(0)), torch.ones(cost.size(1))
        previous, error, count = d1, 1e9, 0
        while error > 1e-4:
            d0 = 1 / d0.size(0) / (torch.sum(d1 * cost, 1) + 1e-8)
            d1 = 1 / d1.size(0) / (torch.sum(d0.unsqueeze(1) * cost, 0) + 1e-8)
            error, previous, count = torch.mean(torch.abs(previous - d1)), d1, count + 1
        return count

    for tokens, experts in ((1024, 4), (2048, 8), (4096, 8)):
        logits = torch.randn(tokens, experts, generator=generator) * 0.02 * 512**0.5
        assert iterations(logits) == SINKHORN_ITERATIONS


def test_the_router_s_sync_ends_the_wrap_and_the_host_resumes_from_an_idle_gpu():
    ops = [
        Op("moe.norm2", "moe", "memory"),
        Op("moe.router_topk", "moe", "memory", syncs=3),
        Op("moe.permute", "moe", "memory"),
        Op("moe.dispatch", "moe", "comm"),
        Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.unpermute", "moe", "memory"),
    ]
    forward = {"moe.norm2": 1.0, "moe.router_topk": 1.0, "moe.permute": 2.0, "moe.dispatch": 1.0,
               "moe.experts_in": 2.0, "moe.unpermute": 1.0}  # fmt: skip
    # Dropless alltoall, 1.5 a launch: after the dispatcher's sync the permutation (2) is queued; the host
    # launches dispatch, the two GEMMs, unpermute, then the next layer's norm and router at 1.5, 3, ..., 9
    # against the GPU reaching them at 2, 3, 4, 5, 6, 7: the GPU waits 9 − 7 = 2. The router's sync stops
    # the host there; it resumes with the permutation (launched at 1.5 on an idle GPU): 1.5 more.
    assert dispatcher_wait_s(ops, forward, 1.5, dropless=True, wrap=True) == pytest.approx(2.0 + 1.5)
    # a router without a sync: the wrap runs on through the permutation, launched at 10.5 against 8: 2.5
    plain = [Op(op.name, op.block, op.category, gemm=op.gemm) for op in ops]
    assert dispatcher_wait_s(plain, forward, 1.5, dropless=True, wrap=True) == pytest.approx(2.5)


def test_a_sinkhorn_router_run_prices_its_launches():
    # the routing op carries the router's kernels and syncs as the run config sets them
    run = make_run(MOE, parallel={"dp": 2, "ep": 2}, framework="megatron")
    moe = run.training.moe.model_copy(update={"router": MoeRouter(sinkhorn=True)})
    sinkhorn = run.model_copy(update={"training": run.training.model_copy(update={"moe": moe})})
    seconds = []
    for config, syncs in ((run, 0), (sinkhorn, SINKHORN_ITERATIONS)):
        times = TimeModel(config)
        layer = next(layer for layer in walk(config) if layer.node == BODY)
        op = next(op for op in times.ops(layer) if op.name.endswith("router_topk"))
        assert op.syncs == syncs
        seconds.append(run_iteration(config).seconds)
    assert seconds[1] > seconds[0]  # more kernels and a host wait at the router's sync


def test_deepep_s_dispatch_waits_for_its_counts_from_an_idle_gpu():
    ops = [
        Op("moe.norm2", "moe", "memory"),
        Op("moe.router_topk", "moe", "memory"),
        Op("moe.permute", "moe", "memory"),
        Op("moe.dispatch", "moe", "comm"),
        Op("moe.experts_in", "moe", "matmul", gemm=(8, 4, 4, 2, 4)),
        Op("moe.unpermute", "moe", "memory"),
    ]
    forward = {"moe.norm2": 1.0, "moe.router_topk": 1.0, "moe.permute": 2.0, "moe.dispatch": 1.0,
               "moe.experts_in": 2.0, "moe.unpermute": 1.0}  # fmt: skip
    # DeepEP (fused_a2a.py FusedDispatch: the CPU spins until notify_dispatch wrote the counts): nothing
    # queued when the host resumes at the dispatch, and Megatron permutes the received rows after it
    # (`MoEFlexTokenDispatcher.dispatch_postprocess`). Launches at 1.5, 3, ..., 10.5 (dispatch, permutation,
    # the two GEMMs, unpermute, the next layer's norm and router; its permutation follows its own wait) against
    # the GPU reaching them at 0, 1, 3, 4, 5, 6, 7 (the dispatch's 1, the permutation's 2, ...): the last waits
    # 10.5 − 7 = 3.5, the most of any.
    assert dispatcher_wait_s(ops, forward, 1.5, dropless=True, wrap=True, dispatcher="deepep") == pytest.approx(3.5)
