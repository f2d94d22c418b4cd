"""MindFormers' cross-entropy under MindSpore's jit_level O1 (ppb_core/timing/flops.py
`mindformers_loss_bytes`): its kernels counted by hand from mindformers/core/loss/loss.py (`_LogSoftmax`,
`_NLLLoss` and their bprops, v1.4.0-beta2 a4dfb8219) as MindSpore's DVM graph-kernel fusion groups them."""

from __future__ import annotations

import pytest

from ppb_core.errors import InputError
from ppb_core.model.walk import walk
from ppb_core.timing.flops import OpGeometry, layer_ops
from tests.test_timing_iteration import small_run


def _loss(run):
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    return next(op for op in layer_ops(tail.kind, OpGeometry.from_run(run)) if op.name == "output.loss")


def test_o1_loss_kernels_by_hand():
    # One micro-batch of 2048 tokens (micro_batch_size 1, seq 2048) over SMALL_GQA's 4096 logits, bf16 (2 bytes).
    # Forward, a kernel each: the cast of the bf16 logits to fp32 (read 2, write 4); ReduceMax (read 4);
    # Sub, Exp, ReduceSum fused (read 4, write the shifted logits 4); OneHot (write 4); Sub, Mul, Neg,
    # ReduceSum fused (read the shifted logits and the one-hot, 4 + 4, write the kept log-softmax 4):
    # 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 = 34 a logit. Backward, one fused kernel: Exp of the log-softmax,
    # minus the one-hot, times the token's gradient, cast to bf16 (read 4 + 4, write 2): 10 a logit.
    logits = 2048 * 4096
    fused = _loss(small_run(dp=1, pp=1, framework="mindformers", timing={"jit_level": "O1"}))
    assert (fused.bytes, fused.backward_bytes) == (34 * logits, 10 * logits)
    # unset, O0 and O2: the generic count (logits read, fp32 softmax written and kept: 2 + 12; its gradient 8 + 2)
    for level in (None, "O0", "O2"):
        timing = {} if level is None else {"jit_level": level}
        plain = _loss(small_run(dp=1, pp=1, framework="mindformers", timing=timing))
        assert (plain.bytes, plain.backward_bytes) == (14 * logits, 10 * logits)


def test_jit_level_is_mindformers_only():
    with pytest.raises(InputError, match="jit_level"):
        small_run(timing={"jit_level": "O1"})
    with pytest.raises(InputError, match="jit_level"):
        small_run(framework="mindformers", timing={"jit_level": "O3"})
