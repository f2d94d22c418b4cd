"""TransformerEngine's grouped GEMM as Megatron runs it on Hopper: one cuBLAS GEMM per local expert over
four compute streams (TE d0067d0d common/gemm/cublaslt_gemm.cu `nvte_multi_stream_cublas_gemm`)."""

from __future__ import annotations

import pytest
from test_memory_runs import make_run
from test_moe_dispatchers import SPEC

from ppb_core.config.run import parse_run_config
from ppb_core.model.walk import walk
from ppb_core.timing.pricer import TE_COMPUTE_STREAMS, TimeModel


def _experts_in(ep: int, impl: str = "transformer_engine") -> tuple[float, float, float]:
    run = make_run(
        SPEC,
        parallel={"tp": 1, "dp": 8, "ep": ep},
        training={"seq_length": 4096},
        device={"name": "h100-80gb"},
    )
    raw = run.model_dump(mode="json", exclude_none=True)
    raw["timing"] = {**raw.get("timing", {}), "transformer_impl": impl}
    run = parse_run_config(raw)
    model = TimeModel(run)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    op = next(op for op in model.ops(layer) if op.name == "experts_in")
    m, k, _, groups, fused = op.gemm
    kernels = model.kernels
    pooled = kernels.gemm_compute_s(m, fused, k, groups, run.training.dtype_bytes)
    return model._phase_s(op, "forward"), pooled, kernels.kernel_s


def test_a_stream_s_gemms_each_pay_the_kernel_s_fixed_time():
    assert TE_COMPUTE_STREAMS == 4
    # 8 experts over EP 1: 8 local GEMMs on 4 streams, two a stream: one fixed time (5.3 us) more than
    # the pooled waves' one (the forward is compute-bound at these shapes)
    seconds, pooled, fixed = _experts_in(1)
    assert fixed == pytest.approx(5.3e-6)
    assert seconds - pooled == pytest.approx(fixed, rel=1e-9)
    # EP 2: 4 local experts, one a stream: the pooled waves' one only
    seconds, pooled, _ = _experts_in(2)
    assert seconds == pytest.approx(pooled, rel=1e-12)
