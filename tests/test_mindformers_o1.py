"""MindFormers under MindSpore's jit_level O1 (`timing.jit_level`): the cross-entropy
(ppb_core/timing/flops.py `mindformers_loss_bytes`, mindformers/core/loss/loss.py `_LogSoftmax`, `_NLLLoss`
and their bprops at v1.4.0-beta2 a4dfb8219) and the RMSNorms and SwiGLU (`mindformers_o1_ops`, llama_layer.py
`LlamaRMSNorm._rms_norm`, `LlamaSiLU`) and the rotary embedding (`mindformers_rope_bytes`, modules/layers.py
`RotaryEmbedding.construct`), their kernels counted by hand as MindSpore's DVM graph-kernel fusion groups them."""

from __future__ import annotations

import pytest

from ppb_core.errors import InputError
from ppb_core.model.walk import walk
from ppb_core.timing.flops import OpGeometry, layer_ops
from tests.test_timing_iteration import small_run


def _ops(run, node):
    layer = next(layer for layer in walk(run) if layer.node == node)
    return layer_ops(layer.kind, OpGeometry.from_run(run))


def _loss(run):
    return next(op for op in _ops(run, "TAIL") if op.name == "output.loss")


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


def test_o1_norms_by_hand():
    # A row element of SMALL_GQA's h 1024 over 2048 tokens, bf16 (2 bytes), layernorm_compute_type float32.
    # Forward: the cast up fused into the residual add writes fp32 (4); RmsNorm reads and writes fp32 (4 + 4);
    # the cast back reads 4 and writes 2: 18. Backward: the output gradient cast up (2 + 4), the input cast
    # again (`self.cast.recompute()`, 2 + 4), RmsNormGrad reads both and writes fp32 (4 + 4 + 4), the cast
    # down fused into the gradient add reads 4 (the add's own 2 already counted there): 6 + 6 + 12 + 4 - 2 = 26.
    # One fused kernel (unset): read x, write y, 2 + 2 = 4; read x and dy, write dx, 6.
    elements = 2048 * 1024
    o1 = small_run(dp=1, pp=1, framework="mindformers", timing={"jit_level": "O1"})
    plain = small_run(dp=1, pp=1, framework="mindformers")
    for node in ("BODY", "TAIL"):  # the layer's two norms, the final norm
        norms = [op for op in _ops(o1, node) if op.fusion == "norm"]
        assert len(norms) == (2 if node == "BODY" else 1)
        assert all((op.bytes, op.backward_bytes) == (18 * elements, 26 * elements) for op in norms)
        fused = [op for op in _ops(plain, node) if op.fusion == "norm"]
        assert all((op.bytes, op.backward_bytes) == (4 * elements, 6 * elements) for op in fused)


def test_o1_swiglu_by_hand():
    # An element of SMALL_GQA's FFN width 2816 over 2048 tokens, bf16 (2 bytes). Forward: the aclnn SiLU reads
    # and writes the gate (2 + 2), the Mul reads it and the up projection and writes the product (2 + 2 + 2):
    # 10. Backward: the two products fused read the output gradient, the up projection and the kept SiLU
    # output and write two gradients (3 · 2 + 2 · 2), SiLUGrad reads its gradient and the gate and writes the
    # gate's (2 + 2 + 2): 16. One fused kernel (unset): read gate and up, write 2 + 2 + 2 = 6; backward 10.
    elements = 2048 * 2816
    (o1,) = [
        op
        for op in _ops(small_run(dp=1, pp=1, framework="mindformers", timing={"jit_level": "O1"}), "BODY")
        if op.fusion == "activation"
    ]
    assert (o1.bytes, o1.backward_bytes) == (10 * elements, 16 * elements)
    (fused,) = [op for op in _ops(small_run(dp=1, pp=1, framework="mindformers"), "BODY") if op.fusion == "activation"]
    assert (fused.bytes, fused.backward_bytes) == (6 * elements, 10 * elements)


def _rope(run):
    (rope,) = [op for op in _ops(run, "BODY") if op.fusion == "rope"]
    return rope.bytes, rope.backward_bytes


def test_o1_rotary_by_hand():
    # A rotated element of SMALL_GQA's Q and K, (16 + 4) heads of 64 over 2048 tokens. RotaryEmbedding at
    # rotary_dtype float32 (4 bytes) over bf16 (2): forward, the Cast up alone (read 2, write 4), the swap
    # BatchMatMul (read 4, write 4), the Muls, Add and Cast back in one DVM cluster (read x and the swap,
    # 4 + 4, write 2): 6 + 8 + 10 = 24. Backward: the gradient cast up and times sin and cos (read 2, write
    # 4 + 4), the BatchMatMul's input gradient (read 4, write 4), the sum and the Cast down (read 4 + 4,
    # write 2): 10 + 8 + 10 = 28.
    elements = 2048 * (16 + 4) * 64
    fp32 = small_run(dp=1, pp=1, framework="mindformers", timing={"jit_level": "O1", "rotary_dtype": "fp32"})
    assert _rope(fp32) == (24 * elements, 28 * elements)
    # float16 over bf16: a Cast still (another dtype), 2 bytes: (2 + 2) + (2 + 2) + (2 + 2 + 2) = 14 forward;
    # (2 + 2 + 2) + (2 + 2) + (2 + 2 + 2) = 16 backward
    fp16 = small_run(dp=1, pp=1, framework="mindformers", timing={"jit_level": "O1", "rotary_dtype": "fp16"})
    assert _rope(fp16) == (14 * elements, 16 * elements)
    # float16 over float16 compute: MindSpore drops both Casts: BatchMatMul (2 + 2), cluster (2 + 2 + 2): 10;
    # the backward's clusters keep their reads and writes, 16
    same = small_run(
        dp=1, pp=1, framework="mindformers", dtype="fp16", timing={"jit_level": "O1", "rotary_dtype": "fp16"}
    )
    assert _rope(same) == (10 * elements, 16 * elements)
    # unset, or at O0: one fused kernel, read and write each element, 2 + 2 each way
    generic = (4 * elements, 4 * elements)
    assert _rope(small_run(dp=1, pp=1, framework="mindformers", timing={"jit_level": "O1"})) == generic
    assert _rope(small_run(dp=1, pp=1, framework="mindformers", timing={"rotary_dtype": "fp32"})) == generic


def test_rotary_dtype_is_mindformers_only():
    with pytest.raises(InputError, match="rotary_dtype"):
        small_run(timing={"rotary_dtype": "fp32"})


def test_jit_level_is_mindformers_only():
    with pytest.raises(InputError, match="jit_level"):
        small_run(timing={"jit_level": "O1"})
    with pytest.raises(InputError, match="jit_level"):
        small_run(framework="mindformers", timing={"jit_level": "O3"})
