"""Megatron-Core's Muon step (ppb_core/timing/muon.py), counted by hand from Megatron-LM d98e8a64
(emerging_optimizers.py `TensorParallelMuon`, optimizer/__init__.py's `is_qkv` tags, arguments.py's
--muon-* defaults) and Emerging-Optimizers v0.3.0 (orthogonalized_optimizer.py `step`, muon_utils.py
`newton_schulz`, `newton_schulz_step`, `newton_schulz_tp`)."""

from __future__ import annotations

import pytest
from small_models import SMALL_MLA
from test_memory_runs import DENSE, body, make_run

from ppb_core.memory import MemoryModel
from ppb_core.memory.frameworks.muon import matrix_params
from ppb_core.model.walk import walk
from ppb_core.timing.iteration import _cell_optimizer_traffic, run_iteration
from ppb_core.timing.muon import MuonMatrix, layer_matrices, newton_schulz_flops, orthogonalize_kernels, step_seconds
from ppb_core.timing.pricer import TimeModel

MOE = dict(DENSE, num_experts=8, experts_per_token=2, moe_intermediate_size=32)


def test_one_orthogonalization_by_hand():
    # F.normalize (norm, clamp_min, divide) 3, the bf16 cast and back 2, 5 steps of X·Xᵀ and two addmm 15,
    # the two scale products 2: 22
    assert orthogonalize_kernels() == 22
    assert orthogonalize_kernels(3) == 3 + 2 + 9 + 2
    # a 512 × 1536 matrix: m 512, n 1536; a step 4·512²·1536 + 2·512³ = 1,610,612,736 + 268,435,456
    assert newton_schulz_flops(512, 1536) == 5 * 1_879_048_192
    assert newton_schulz_flops(1536, 512) == newton_schulz_flops(512, 1536)  # the taller one transposed


def test_a_dense_layer_s_matrices_by_hand():
    # DENSE: h 64, 4 heads of 16, no GQA (4 query groups), SwiGLU 128. At tp 1 the QKV weight splits into
    # q 64 × 64, k 64 × 64, v 64 × 64 (4 groups a rank: three strided copies, then the cat): 3 + 3·22 + 3 + 1
    # = 73 kernels; the projection 64 × 64, fc1 256 × 64 (gate and up: one weight), fc2 64 × 128: 25 each.
    run = make_run(DENSE)
    matrices = layer_matrices(body(run).kind, tp=1, ep=1, etp=1)
    assert [m.pieces for m in matrices] == [((64, 64), (64, 64), (64, 64)), ((64, 64),), ((256, 64),), ((64, 128),)]
    assert [m.kernels() for m in matrices] == [73, 25, 25, 25]
    # at tp 2 every piece is all-gathered and concatenated first (duplicated mode, 2 launches), the QKV
    # weight's three pieces each: 73 + 6; a rank holds 2 groups, still strided
    sharded = layer_matrices(body(run).kind, tp=2, ep=1, etp=1)
    assert [m.kernels() for m in sharded] == [79, 27, 27, 27]
    # neither the embedding nor the output layer runs Muon
    assert all(not layer_matrices(layer.kind, 1, 1, 1) for layer in walk(run) if layer.node != "BODY")


def test_a_moe_layer_s_matrices_by_hand():
    # the router 8 × 64, then each of the 8 / ep = 4 local experts' fc1 (SwiGLU: 64 × 64) and fc2 (64 × 32)
    run = make_run(MOE)
    matrices = layer_matrices(body(run).kind, tp=1, ep=2, etp=1)
    router, *experts = matrices[2:]
    assert router.pieces == ((8, 64),) and not router.expert
    assert [m.pieces for m in experts] == [((64, 64),), ((64, 32),)] * 4
    assert all(m.expert for m in experts)


def test_the_step_is_the_host_s_launches_or_the_gpu_s_gemms():
    matrix = MuonMatrix(((64, 128),))  # 25 kernels; 5 steps of 3 GEMMs
    gemm_calls: list[tuple[float, float, float]] = []

    def gemm_s(m: float, n: float, k: float) -> float:
        gemm_calls.append((m, n, k))
        return 1e-6

    # host: 25 launches at 10 us = 250 us; GPU: 15 GEMMs at 1 us
    assert step_seconds([(matrix, 1.0)], gemm_s, 10e-6) == pytest.approx(250e-6)
    assert gemm_calls[:3] == [(64, 64, 128), (64, 64, 64), (64, 128, 64)]  # X·Xᵀ, A·A, B·X
    # half a matrix's share (the layer-wise distributed optimizer's): half of both
    assert step_seconds([(matrix, 0.5)], gemm_s, 10e-6) == pytest.approx(125e-6)
    # GEMMs of 1 ms each outrun the host: 15 ms
    assert step_seconds([(matrix, 1.0)], lambda m, n, k: 1e-3, 10e-6) == pytest.approx(15e-3)


def test_a_muon_run_s_optimizer_term_adds_its_launches():
    # DENSE at tp 1 on an H100 (DGX H100's 80.9 us a launch, a plain PyTorch op 0.4 of it: 32.36 us):
    # 4 body layers of 73 + 3·25 = 148 kernels, 592 launches, 19.157 ms; its 64-wide GEMMs take far less.
    # Beside them the optimizer term's HBM traffic, as for any optimizer (`_cell_optimizer_traffic`).
    muon = make_run(DENSE, training={"optimizer": "muon"})
    iteration = run_iteration(muon)
    memory = MemoryModel(muon)
    kernels = TimeModel(muon).kernels
    traffic = sum(_cell_optimizer_traffic(muon, memory, [(layer, 0, 0)]) for layer in walk(muon))
    expected = kernels.memory_s(traffic) + 592 * 0.4 * 80.9e-6
    assert iteration.breakdown["optimizer"] == pytest.approx(expected, rel=1e-9)
    # under the layer-wise distributed optimizer at dp 2 each rank steps half the matrices: 296 launches
    sharded = make_run(DENSE, parallel={"dp": 2}, training={"optimizer": "muon"})
    memory = MemoryModel(sharded)
    traffic = sum(_cell_optimizer_traffic(sharded, memory, [(layer, 0, 0)]) for layer in walk(sharded))
    expected = kernels.memory_s(traffic) + 296 * 0.4 * 80.9e-6
    assert run_iteration(sharded).breakdown["optimizer"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    "spec",
    [
        DENSE,
        MOE,
        dict(MOE, shared_experts=1, shared_expert_intermediate_size=48, shared_expert_gate=True),
        dict(SMALL_MLA, activation="swiglu", norm="rmsnorm"),
    ],
    ids=["dense", "moe", "moe-shared-gate", "mla"],
)
def test_the_matrices_hold_the_elements_the_memory_model_gives_muon(spec):
    # an independent count: memory/frameworks/muon.py `matrix_params` (a layer's parameters less its
    # vectors) against the elements of the pieces here, tp 1, ep 1 (every expert on the rank)
    run = make_run(spec, training={"optimizer": "muon"})
    layer = body(run)
    setup = MemoryModel(run).setup
    expected = matrix_params(layer.kind, setup)
    matrices = layer_matrices(layer.kind, tp=1, ep=1, etp=1)
    elements = sum(r * c for m in matrices if not m.expert for r, c in m.pieces)
    experts = sum(r * c for m in matrices if m.expert for r, c in m.pieces)
    assert (elements, experts) == (expected.non_expert, expected.expert)
