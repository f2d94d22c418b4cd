"""What torchtitan's eager Llama step runs, aten op by aten op: launches and the bytes each reads and writes.

ppb prices torchtitan's element-wise work from its op table (`ppb_core.timing.flops`, the eager
factors `ppb_core.timing.kernels.EAGER_TRAFFIC`). This module counts it instead: it runs the model
code of torchtitan's published December 2024 H100 runs (pytorch/torchtitan 9dec370,
torchtitan/models/llama/model.py and models/norms.py `RMSNorm`, train.py's loss) on the meta
device (no memory, no compute: real Llama-3.1-8B shapes) under a `TorchDispatchMode` that records
every aten op of the forward and of the backward (autograd's formulas and, under activation
checkpointing, what the checkpoint replays).

Per op: one launch and the bytes of its tensor inputs and outputs, except ops that only make a view
(their schema's outputs alias an input: `view`, `transpose`, `expand`, `view_as_complex`, ...) or
an uninitialised buffer (`empty`), which launch nothing. An input that is a broadcast view reads
its storage once. The meta device mirrors CUDA where it matters here: the flash-attention kernel
(`aten._scaled_dot_product_flash_attention`, what SDPA picks on an H100 in bf16; called directly,
since SDPA on the meta device takes its math path) returns its output in (batch, seq, heads, dim)
memory order, so the `transpose(1, 2).contiguous()` before `wo` copies nothing, as on the GPU.
What a CUDA kernel does inside one aten op is not seen (e.g. the zero-fill inside
`embedding_dense_backward`): it counts as that op's inputs and outputs.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ppb_core.census.torchtitan import BlockDims, wrapped

MATMULS = frozenset({"mm", "bmm", "addmm"})
ATTENTION = frozenset(
    {
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_cudnn_attention_backward",
    }
)
NO_KERNEL = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "_unsafe_view"})
# Ops that read one row (or element) of a source argument per output row, not the whole source: the
# embedding's lookup reads the looked-up rows of its table, the loss's gather one logit a row; and
# nll_loss_backward takes `self` for its shape only (it writes the whole gradient, zeros but the targets).
GATHERS = {"embedding": "weight", "nll_loss_forward": "self", "nll_loss_backward": "self"}
PHASES = ("forward", "backward")


@dataclass
class OpCount:
    """One aten op's total over a phase: calls (each one kernel launch), bytes read and written."""

    launches: int = 0
    read_bytes: int = 0
    written_bytes: int = 0
    flops: int = 0  # a matmul's 2·m·k·n (per batch for bmm)

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.written_bytes


@dataclass
class Census:
    """Every aten op of a step's phases: `ops[phase][name]`."""

    ops: dict[str, dict[str, OpCount]] = field(
        default_factory=lambda: {phase: defaultdict(OpCount) for phase in PHASES}
    )

    def elementwise_bytes(self, phase: str) -> int:
        """Bytes of what is neither a matmul nor the attention kernel: the memory-bound ops."""
        return sum(c.bytes for name, c in self.ops[phase].items() if name not in MATMULS | ATTENTION)

    def launches(self, phase: str) -> int:
        return sum(c.launches for c in self.ops[phase].values())

    def count(self, phase: str, name: str) -> OpCount:
        return self.ops[phase].get(name, OpCount())


def _tensor_bytes(tensor: torch.Tensor) -> int:
    """What reading *tensor* moves: its elements, or its storage when a broadcast view repeats it."""
    elements = tensor.numel() * tensor.element_size()
    return min(elements, tensor.untyped_storage().nbytes())


def _is_view(func: Any) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


class OpCounter(TorchDispatchMode):
    """Counts each aten op of the phase it is told (`phase`) into a `Census`."""

    def __init__(self, census: Census) -> None:
        super().__init__()
        self.census = census
        self.phase = "forward"

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if _is_view(func) or name in NO_KERNEL or name == "detach":
            return out
        schema = func._schema.arguments
        written_args = {a.name for a in schema if a.alias_info is not None and a.alias_info.is_write}
        read = written = 0
        seen: set[int] = set()
        for argument, value in [
            *zip(schema, args, strict=False),
            *((a, kwargs[a.name]) for a in schema if a.name in kwargs),
        ]:
            for tensor in (t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)):
                if id(tensor) in seen:
                    continue
                seen.add(id(tensor))
                if argument.name in written_args:
                    written += _tensor_bytes(tensor)
                    if name not in ("copy_", "fill_", "zero_"):
                        read += _tensor_bytes(tensor)
                elif GATHERS.get(name) != argument.name:
                    read += _tensor_bytes(tensor)
        if name == "embedding":
            read += sum(t.numel() * t.element_size() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        if not written_args:
            written = sum(t.numel() * t.element_size() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        count = self.census.ops[self.phase][name]
        if name in MATMULS:
            first, second = args[-2], args[-1]
            count.flops += 2 * first.numel() * second.shape[-1]
        count.launches += 1
        count.read_bytes += read
        count.written_bytes += written
        return out


# torchtitan 9dec370's Llama, on the meta device ---------------------------------------------------


class EagerRMSNorm(nn.Module):
    """torchtitan/models/norms.py `RMSNorm` at 9dec370 (norm_type "rmsnorm"): upcast, normalise, cast
    back, scale by the weight, one PyTorch op at a time."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float()
        normed = normed * torch.rsqrt(normed.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """model.py `apply_rotary_emb` for one tensor: complex product in fp32, cast back."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * table.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)


def repeat_kv(x: torch.Tensor, times: int) -> torch.Tensor:
    """model.py `repeat_kv`: each key/value head copied out to its query heads."""
    batch, seq, heads, dim = x.shape
    if times == 1:
        return x
    return x[:, :, :, None, :].expand(batch, seq, heads, times, dim).reshape(batch, seq, heads * times, dim)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What `F.scaled_dot_product_attention(q, k, v, is_causal=True)` runs on an H100 in bf16."""
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, is_causal=True)[0]


class TitanBlock(nn.Module):
    """model.py `TransformerBlock` at 9dec370 or v0.2.2 (our code, its op sequence): *version* picks the
    norm and how K and V reach SDPA."""

    def __init__(self, dims: BlockDims, version: str = "9dec370") -> None:
        super().__init__()
        self.dims = dims
        self.v022 = version == "v0.2.2"
        h, d = dims.hidden, dims.head_dim
        norm = NativeRMSNorm if self.v022 else EagerRMSNorm
        self.attention_norm, self.ffn_norm = norm(h), norm(h)
        self.wq = nn.Linear(h, dims.heads * d, bias=False)
        self.wk = nn.Linear(h, dims.kv_heads * d, bias=False)
        self.wv = nn.Linear(h, dims.kv_heads * d, bias=False)
        self.wo = nn.Linear(dims.heads * d, h, bias=False)
        self.w1 = nn.Linear(h, dims.ffn, bias=False)
        self.w2 = nn.Linear(dims.ffn, h, bias=False)
        self.w3 = nn.Linear(h, dims.ffn, bias=False)

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        d, times = self.dims.head_dim, self.dims.heads // self.dims.kv_heads
        normed = self.attention_norm(x)
        q = self.wq(normed).view(batch, seq, -1, d)
        k = self.wk(normed).view(batch, seq, -1, d)
        v = self.wv(normed).view(batch, seq, -1, d)
        q, k = rotate(q, table), rotate(k, table)
        if self.v022:
            out = cudnn_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        else:
            k, v = repeat_kv(k, times), repeat_kv(v, times)
            out = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        h = x + self.wo(out.transpose(1, 2).contiguous().view(batch, seq, -1))
        normed = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(normed)) * self.w3(normed))


# torchtitan v0.2.2's Llama (73a0e697 models/llama3/model/model.py), on the meta device -----------------
# Two changes since 9dec370 reach the block's kernels: torch.nn.RMSNorm (3b39d7ab0), which on CUDA
# dispatches to PyTorch's fused kernel (native/layer_norm.cpp `rms_norm_symint` → `_fused_rms_norm`,
# pytorch#153666; torch 2.13), and SDPA with `enable_gqa=True` (ff0829c10): K and V stay at their heads,
# and ScaledDotProductAttentionWrapper (models/attention.py) puts cuDNN attention first, which takes
# GQA (pytorch sdp_utils.cpp `can_use_cudnn_attention`). The meta device has no `_fused_rms_norm`
# kernel (it decomposes into the eager ops), so the two CUDA kernels are stood in for by ops with its
# schema (aten::_fused_rms_norm and _fused_rms_norm_backward): what each reads and writes is counted
# from their tensors as for any op.


@torch.library.custom_op("ppb_census::fused_rms_norm", mutates_args=())
def _fused_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """aten::_fused_rms_norm's outputs: the normalised, scaled rows and each row's fp32 rstd."""
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x.float() * rstd).type_as(x) * weight, rstd


@_fused_rms_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


@torch.library.custom_op("ppb_census::fused_rms_norm_backward", mutates_args=())
def _fused_rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """aten::_fused_rms_norm_backward: reads the output gradient, the input, rstd and the weight; writes
    the input's and the weight's gradients."""
    normed = x.float() * rstd
    dnormed = grad.float() * weight.float()
    dx = rstd * (dnormed - normed * (dnormed * normed).mean(-1, keepdim=True))
    return dx.type_as(x), (grad.float() * normed).flatten(0, -2).sum(0).type_as(weight)


@_fused_rms_norm_backward.register_fake
def _(
    grad: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _norm_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, weight, _ = inputs
    ctx.save_for_backward(x, output[1], weight)
    ctx.set_materialize_grads(False)  # rstd gets no gradient: no zero tensor made for it


def _norm_backward(ctx: Any, grad: torch.Tensor, _rstd_grad: Any) -> tuple:
    x, rstd, weight = ctx.saved_tensors
    dx, dweight = _fused_rms_norm_backward(grad, x, rstd, weight)
    return dx, dweight, None


_fused_rms_norm.register_autograd(_norm_backward, setup_context=_norm_setup)


class NativeRMSNorm(nn.Module):
    """torch.nn.RMSNorm as CUDA runs it in torch 2.13: one fused kernel each way."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _fused_rms_norm(x, self.weight, self.eps)[0]


def cudnn_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """What v0.2.2's `F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)` runs on an
    H100 in bf16 under its backend priority: cuDNN attention, K and V at their own heads."""
    return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, True)[0]


VERSIONS = ("9dec370", "v0.2.2")


def _table(dims: BlockDims, seq: int) -> torch.Tensor:
    return torch.empty(seq, dims.head_dim // 2, dtype=torch.complex64, device="meta")


def _run(fn: Callable[[OpCounter], None]) -> Census:
    census = Census()
    counter = OpCounter(census)
    with counter:
        fn(counter)
    return census


def count_block(
    dims: BlockDims, batch: int, seq: int, ac: str = "none", early_stop: bool = True, version: str = "9dec370"
) -> Census:
    """One block's forward and backward on *batch* × *seq* tokens under torchtitan's *ac* (none, op,
    full: `ppb_core.census.torchtitan.wrapped`, *early_stop* as there), bf16 as FSDP2's param_dtype
    computes it, with torchtitan *version*'s model code (`VERSIONS`)."""
    with torch.device("meta"):
        block = TitanBlock(dims, version).to(torch.bfloat16)
    module = wrapped(block, ac, early_stop)  # type: ignore[arg-type]
    x = torch.empty(batch, seq, dims.hidden, dtype=torch.bfloat16, device="meta", requires_grad=True)
    grad = torch.empty(batch, seq, dims.hidden, dtype=torch.bfloat16, device="meta")
    table = _table(dims, seq)

    def step(counter: OpCounter) -> None:
        out = module(x, table)
        counter.phase = "backward"
        out.backward(grad)

    return _run(step)


def count_part(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor) -> Census:
    """One function's forward and backward alone (inputs requiring gradients where floating)."""
    grads: list[torch.Tensor] = []

    def step(counter: OpCounter) -> None:
        out = fn(*inputs)
        counter.phase = "backward"
        grads.append(torch.empty_like(out))
        out.backward(grads[0])

    return _run(step)


def count_loss(tokens: int, vocab: int) -> Census:
    """train.py's loss at 9dec370: `cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`
    on bf16 logits."""
    pred = torch.empty(1, tokens, vocab, dtype=torch.bfloat16, device="meta", requires_grad=True)
    labels = torch.zeros(1, tokens, dtype=torch.long, device="meta")

    def step(counter: OpCounter) -> None:
        loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
        counter.phase = "backward"
        loss.backward(torch.ones((), device="meta"))

    return _run(step)


def count_embedding(tokens: int, vocab: int, hidden: int) -> Census:
    """model.py's `tok_embeddings` (nn.Embedding, bf16 under FSDP2's param_dtype): lookup and backward."""
    with torch.device("meta"):
        table = nn.Embedding(vocab, hidden).to(torch.bfloat16)
    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
    return count_part(functools.partial(table), ids)
