"""The bytes an element tests/test_eager_rate.py derives by hand for Liger-Kernel's eager modules, counted
by ppb's aten-op counter (`ppb_core.census.ops`) on the meta device: an independent check."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_eager_rate import (  # noqa: E402
    ADD_RMSNORM_BACKWARD,
    ADD_RMSNORM_FORWARD,
    RELU2_BACKWARD,
    RELU2_FORWARD,
    RMSNORM_BACKWARD,
    RMSNORM_FORWARD,
)

from ppb_core.census.ops import Census, OpCounter  # noqa: E402

ROWS, HIDDEN = 64, 256


def _count(fn, inputs, grads) -> tuple[float, float]:
    """Bytes an element of *fn*'s forward and of autograd's backward from *grads(outputs)*."""
    census = Census()
    counter = OpCounter(census)
    with counter:
        outs = fn(*inputs)
        counter.phase = "backward"
        torch.autograd.backward(outs, grads(outs))
    forward, backward = (census.elementwise_bytes(p) / (ROWS * HIDDEN) for p in ("forward", "backward"))
    return forward, backward


def _leaf(dtype):
    return torch.empty(ROWS, HIDDEN, dtype=dtype, device="meta", requires_grad=True)


WEIGHT = torch.nn.Parameter(torch.ones(HIDDEN, device="meta"))  # nn.Parameter(torch.ones(H)): fp32


def test_llama_rmsnorm_with_an_fp32_weight_and_a_bf16_output_gradient():
    def llama_rmsnorm(x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return WEIGHT * h.to(x.dtype)

    x = _leaf(torch.bfloat16)
    forward, backward = _count(llama_rmsnorm, [x], lambda out: torch.empty_like(x))  # dy = randn_like(x)
    assert (round(forward), round(backward)) == (RMSNORM_FORWARD, RMSNORM_BACKWARD)


def test_relu_squared():
    x = _leaf(torch.bfloat16)
    forward, backward = _count(lambda t: torch.square(torch.relu(t)), [x], torch.empty_like)
    assert (round(forward), round(backward)) == (RELU2_FORWARD, RELU2_BACKWARD)


def test_add_rmsnorm_with_both_outputs_gradients():
    def add_rmsnorm(x, r):
        h = x + r
        n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return WEIGHT * n, h

    x, r = _leaf(torch.float32), _leaf(torch.float32)
    forward, backward = _count(add_rmsnorm, [x, r], lambda outs: [torch.empty_like(o) for o in outs])
    assert (round(forward), round(backward)) == (ADD_RMSNORM_FORWARD, ADD_RMSNORM_BACKWARD)
