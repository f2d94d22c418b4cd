"""Persistent Hopper GEMMs beside a collective kernel: the CTAs that find no SM wait (by hand)."""

from __future__ import annotations

import pytest

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.comm import collective_seconds
from ppb_core.timing.kernels import Kernels, persistent_added_s
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.userbuffers import pipeline_s

SPEC = {
    "vocab_size": 32768,
    "hidden_size": 4096,
    "num_layers": 2,
    "num_attention_heads": 32,
    "intermediate_size": 16384,
    "activation": "gelu",
    "norm": "layernorm",
    "position_embedding": "rope",
    "max_position_embeddings": 4096,
}


def test_a_persistent_gemm_beside_a_collective_ends_after_min_of_both_plus_itself():
    # The late CTAs start when the collective ends (4 < 10) or the resident CTAs end (10): the GEMM ends
    # at min(comm, gemm) + gemm, the collective at comm; the wall time over the GEMM alone:
    assert persistent_added_s(10.0, 4.0) == pytest.approx(4.0)  # ends at 14: the collective not hidden at all
    assert persistent_added_s(10.0, 15.0) == pytest.approx(10.0)  # ends at 20 (the collective at 15): doubled
    assert persistent_added_s(10.0, 25.0) == pytest.approx(15.0)  # ends at 20, the collective at 25
    assert persistent_added_s(10.0, 0.0) == 0.0
    assert persistent_added_s(0.0, 3.0) == pytest.approx(3.0)  # nothing beside: all exposed


class _Chunks(Kernels):
    """A device whose pipeline chunks take 1 ms each (the chunk arithmetic is tested elsewhere)."""

    def gemm_compute_s(self, m: float, n: float, k: float, groups: int = 1) -> float:
        return 1e-3


def test_a_pipelined_reduce_scatter_beside_persistent_chunks_overlaps_nothing():
    kernels = _Chunks(
        flops_per_s=1e14,
        gemm_ceiling=0.5,
        sms=132,
        hbm_bytes_per_s=1e12,
        attention_forward=0.5,
        attention_backward=0.5,
        comm_sms=16,
        persistent_gemms=True,
    )
    # Chunks of 1 ms, reduce-scatters of 0.6 ms. Late CTAs: a chunk beside a reduce-scatter ends after
    # 0.6 + 1 = 1.6 ms. G0 0-1, RS0 1-1.6; G1 1-2.6, RS1 2.6-3.2; G2 2.6-4.2, RS2 4.2-4.8; G3 4.2-5.8,
    # RS3 5.8-6.4: 6.4 ms, the four chunks and the four reduce-scatters one after another.
    assert pipeline_s(kernels, 1, 1, 1, 0.6e-3, late_ctas=True) == pytest.approx(6.4e-3)
    # With the SMs' share (16/132): a chunk beside one is 1 + 0.6·16/132 ms; G0 ends at 1, then three such
    # steps, then the last reduce-scatter.
    share = 1e-3 + 0.6e-3 * 16 / 132
    assert pipeline_s(kernels, 1, 1, 1, 0.6e-3) == pytest.approx(1e-3 + 3 * share + 0.6e-3)


def _run(device: str, overlap_tp: float, ub_sm_margin: bool = True):
    return parse_run_config(
        {
            "name": "late",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": SPEC}],
            "parallel": {"tp": 4, "sequence_parallel": True},
            "training": {"seq_length": 4096, "flash_attention": True},
            "device": {"name": device},
            "timing": {"overlap": {"tp": overlap_tp}, "ub_sm_margin": ub_sm_margin},
        }
    )


def _beside_gemms(model: TimeModel, layer, overlap: str):
    """(collective, its partner GEMM's seconds, the op table by name) for each collective of *overlap*
    with a matmul partner and no userbuffers method."""
    by_name = {op.name: op for op in model.ops(layer)}
    found = []
    for op in by_name.values():
        for comm in (op.forward_comm, op.backward_comm):
            if comm is None or comm.overlap != overlap or comm.partner is None or comm.method is not None:
                continue
            partner = by_name[comm.partner[0]]
            if partner.category == "matmul":
                found.append((comm, model._phase_s(partner, comm.partner[1]), by_name))
    return found


@pytest.mark.parametrize("device", ["h100-80gb", "a100-80gb"])
def test_megatrons_async_input_gradient_reduction_beside_its_weight_gradient(device):
    # Without --tp-comm-overlap the input gradient's reduce-scatter (NCCL) runs beside the weight
    # gradient's GEMM (`tp_async` 1). On H100 (persistent GEMMs) the GEMM's late CTAs wait for it:
    # exposed = c − c + max(c, min(c, g) + g) − g; on A100 the GEMM loses 24 of 108 SMs while they overlap:
    # exposed = c − min(c, g) + 24/108 · min(c, g).
    run = _run(device, 0.0)
    model = TimeModel(run)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    found = _beside_gemms(model, layer, "tp_async")
    assert found
    assert DEVICE_CATALOG[device].persistent_gemms == (device == "h100-80gb")
    for comm, g, by_name in found:
        c = collective_seconds(comm, model.links)
        late = max(c, min(c, g) + g) - g
        expected = late if device == "h100-80gb" else c - min(c, g) + 24 / 108 * min(c, g)
        assert model._exposed_s(comm, by_name) == pytest.approx(expected)


def test_userbuffers_bulk_kernels_beside_gemms_launched_for_every_sm_or_for_what_they_leave():
    # --tp-comm-overlap: qkv's and fc1's backward all-gathers and reduce-scatters are userbuffers' bulk
    # kernels beside a whole GEMM. TE 1.x (`ub_sm_margin` false) launches that GEMM for all 132 SMs: its late
    # CTAs wait; TE 2.x launches it for the SMs the 16-SM kernel leaves: the SMs' share, 16/132.
    for margin in (False, True):
        run = _run("h100-80gb", 1.0, ub_sm_margin=margin)
        model = TimeModel(run)
        layer = next(layer for layer in walk(run) if layer.node == "BODY")
        found = _beside_gemms(model, layer, "tp_async") + _beside_gemms(model, layer, "tp")
        assert found
        for comm, g, by_name in found:
            c = collective_seconds(comm, model.links)
            late = max(c, min(c, g) + g) - g
            expected = c - min(c, g) + 16 / 132 * min(c, g) if margin else late
            assert model._exposed_s(comm, by_name) == pytest.approx(expected)
    # so the layer's backward is longer under TE 1.x's launch
    late = TimeModel(_run("h100-80gb", 1.0, ub_sm_margin=False))
    carved = TimeModel(_run("h100-80gb", 1.0))
    body = next(layer for layer in walk(_run("h100-80gb", 1.0)) if layer.node == "BODY")
    assert sum(p.backward_ms for p in late.op_prices(body).values()) > sum(
        p.backward_ms for p in carved.op_prices(body).values()
    )
