"""Megatron's `CheckpointWithoutOutput` copying recomputed outputs back before f54403492e (core_v0.17.0)."""

from __future__ import annotations

import pytest
from small_models import MLA_H1024, selective_raw

from ppb_core.config.run import FrameworkRelease, parse_run_config
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.checkpoint_copies import storage_copies
from ppb_core.timing.pricer import TimeModel

# A small MLA + MoE layer: h 1024, 8 heads of query/key 64 + 32 = 96 and value 64; 8 experts, top 2, FFN 256
# (SwiGLU: fc1 writes 512 a row, the activation 256).
MLA_MOE = {**MLA_H1024, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 256}
MODULES = ["layernorm", "mla_up_proj", "moe_act"]


def _run(release: str | None, modules: list[str] = MODULES):
    run = parse_run_config(selective_raw(MLA_MOE, modules))
    if release is None:
        return run
    return run.model_copy(update={"framework_release": FrameworkRelease(megatron_core=release)})


def _body(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


def test_restored_outputs_by_module():
    # One micro-batch of 1024 tokens, TP 1, bf16, every output restored once (random.py `_recompute` at
    # c08d89bea0: `untyped_storage().copy_`, read and write):
    # layernorm: MLA's input norm and the MoE layer's pre-MLP norm, 1024 · 1024 · 2 = 2,097,152 bytes each;
    # mla_up_proj: query, key and value, 1024 · 8 · (96 + 96 + 64) · 2 = 4,194,304;
    # moe_act: 1024 tokens · top 2 = 2048 routed rows · 256 · 2 = 1,048,576.
    # Together 9,437,184 bytes, read and written 18,874,368, in 2 + 3 + 1 = 6 copies.
    run = _run("core_v0.16.0")
    model = TimeModel(run)
    layer = _body(run)
    rerun = [op.name for op in model._rerun(layer, LayerType.SEL_REC_LAYER, None)]
    ops = {op.name: op for op in model.ops(layer)}
    assert storage_copies(layer.kind, rerun, ops, model._geometry, MODULES) == (18_874_368, 6)
    # each module alone: its own outputs
    assert storage_copies(layer.kind, rerun, ops, model._geometry, ["layernorm"]) == (2 * 4_194_304, 2)
    assert storage_copies(layer.kind, rerun, ops, model._geometry, ["mla_up_proj"]) == (2 * 4_194_304, 3)
    assert storage_copies(layer.kind, rerun, ops, model._geometry, ["moe_act"]) == (2 * 1_048_576, 1)
    # normal checkpointing (core_attn, mlp, moe, shared_experts) keeps no output to restore
    assert storage_copies(layer.kind, rerun, ops, model._geometry, ["core_attn", "moe"]) == (0.0, 0)


def test_the_copies_stop_at_core_v0_17():
    # f54403492e (2026-03-11, first in core_v0.17.0) shares the recomputed storage: the recompute part of the
    # layer's backward is the copies' 18,874,368 bytes at the achieved HBM rate and 6 kernels' fixed time longer
    # before it, the same at and after it (and unstated: the newest code)
    before, after, newest = (_run(release) for release in ("core_v0.16.0", "core_v0.17.0", None))
    parts = [TimeModel(run).parts(_body(run), LayerType.SEL_REC_LAYER) for run in (before, after, newest)]
    kernels = TimeModel(before).kernels
    extra = (kernels.memory_s(18_874_368) + 6 * kernels.elementwise_kernel_s) * 1e3
    assert parts[0].recompute_ms - parts[1].recompute_ms == pytest.approx(extra)
    assert parts[1].recompute_ms == parts[2].recompute_ms
    assert (parts[0].forward_ms, parts[0].backward_ms) == (parts[1].forward_ms, parts[1].backward_ms)
    # full recompute reruns whole layers with normal checkpointing: no copies
    full = [TimeModel(run).parts(_body(run), LayerType.FULL_REC_LAYER) for run in (before, after)]
    assert full[0].recompute_ms == full[1].recompute_ms


def test_the_copies_are_launched_from_python():
    # `_recompute` issues each copy from Python, a plain PyTorch op: PLAIN_OP_SHARE (0.4) of a launch where the
    # host time is measured (DGX H100's 80.9 µs), 6 · 0.4 = 2.4 launches more in the backward before core_v0.17
    before, after = _run("core_v0.16.0"), _run("core_v0.17.0")
    models = [TimeModel(run) for run in (before, after)]
    layer = _body(before)
    assert [model._rerun_launches(layer, LayerType.SEL_REC_LAYER, None) for model in models] == [
        pytest.approx(2.4),
        0.0,
    ]
    waits = [model.host(layer, LayerType.SEL_REC_LAYER) for model in models]
    assert waits[0].launch_backward - waits[1].launch_backward == pytest.approx(2.4 * 80.9e-6)
    assert waits[0].launch_forward == waits[1].launch_forward
