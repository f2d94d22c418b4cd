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
ATTENTION = frozenset({"_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward"})
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
    """model.py `TransformerBlock` at 9dec370 (our code, its op sequence)."""

    def __init__(self, dims: BlockDims) -> None:
        super().__init__()
        self.dims = dims
        h, d = dims.hidden, dims.head_dim
        self.attention_norm, self.ffn_norm = EagerRMSNorm(h), EagerRMSNorm(h)
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
        k, v = repeat_kv(k, times), repeat_kv(v, times)
        out = flash_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        h = x + self.wo(out.transpose(1, 2).contiguous().view(batch, seq, -1))
        normed = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(normed)) * self.w3(normed))


def _table(dims: BlockDims, seq: int) -> torch.Tensor:
    return torch.empty(seq, dims.head_dim // 2, dtype=torch.complex64, device="meta")


def _run(fn: Callable[[OpCounter], None]) -> Census:
    census = Census()
    counter = OpCounter(census)
    with counter:
        fn(counter)
    return census


def count_block(dims: BlockDims, batch: int, seq: int, ac: str = "none", early_stop: bool = True) -> Census:
    """One block's forward and backward on *batch* × *seq* tokens under torchtitan's *ac* (none, op,
    full: `ppb_core.census.torchtitan.wrapped`, *early_stop* as there), bf16 as FSDP2's param_dtype
    computes it."""
    with torch.device("meta"):
        block = TitanBlock(dims).to(torch.bfloat16)
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
