"""The census of a torchtitan-style Llama block under torchtitan's activation checkpointing, on the CPU.

torchtitan's model code is plain PyTorch (torchtitan v0.2.2, torchtitan/models/llama3/model/
model.py), so its block runs on the CPU. This module builds one of our own with the same op
sequence: `nn.Linear` projections without biases, rotary embeddings as complex products with a
shared `freqs_cis`, `F.scaled_dot_product_attention(..., is_causal=True, enable_gqa=...)`, the
output transposed to a contiguous copy for `wo`, and `w2(F.silu(w1(x)) * w3(x))`. It is then
wrapped as torchtitan/distributed/activation_checkpoint.py wraps a block:

* `none`: as built;
* `full`: `checkpoint_wrapper` (non-reentrant checkpoint);
* `op`: `checkpoint_wrapper` with `create_selective_checkpoint_contexts` and our implementation of
  torchtitan's per-op policy (`_apply_op_sac`): save the outputs of the ops of llama3's
  `_op_sac_save_list` except every second `aten.mm` of the block, recompute the rest.

Two stand-ins make the CPU run what a GPU runs, and are the only departures: the CPU's SDPA kernel
(`aten._scaled_dot_product_flash_attention_for_cpu`, the flash algorithm, keeping the output and
the fp32 log-sum-exp as the CUDA flash kernel does) takes the save list's place of the CUDA one;
and the norm is an autograd function that keeps what CUDA's `aten._fused_rms_norm` keeps for its
backward (its input and the fp32 reciprocal RMS, derivatives.yaml), where the CPU's rms_norm
decomposes into fp32 elementwise ops that a GPU does not run.

`measure_block(dims, tokens, ac)` runs one forward and reports the bytes the block keeps for its
backward (`LiveBytes`: every storage made inside that is still alive, the output aside, and the
block's input, counted as the formulas count it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from ppb_core.census.live import LiveBytes

CHECKPOINTING: tuple[str, ...] = ("none", "op", "full")
# A run config's training.dtype as torch names it.
TORCH_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# llama3/infra/parallelize.py _op_sac_save_list (v0.2.2), as far as these ops exist in the CPU
# build, with the CPU flash kernel standing for the CUDA one.
SAVE_LIST: frozenset[Any] = frozenset(
    op
    for op in (
        torch.ops.aten.mm.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_cudnn_attention.default,
        torch.ops.aten._scaled_dot_product_attention_math.default,
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        torch.ops.aten.max.default,
    )
)


@dataclass(frozen=True)
class BlockDims:
    """A Llama block's sizes: hidden, query heads, key/value heads, feed-forward width."""

    hidden: int
    heads: int
    kv_heads: int
    ffn: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class _FusedRMSNorm(torch.autograd.Function):
    """RMSNorm keeping what CUDA's fused kernel keeps: the input and the fp32 reciprocal RMS."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        with torch.no_grad():
            rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
            out = (x.float() * rstd).to(x.dtype) * weight
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd
        grad_normed = grad.float() * weight.float()
        mean = (grad_normed * normed).mean(-1, keepdim=True)
        grad_x = (grad_normed - normed * mean) * rstd
        grad_weight = (grad.float() * normed).sum(dim=tuple(range(grad.dim() - 1)))
        return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FusedRMSNorm.apply(x, self.weight, self.eps)


def rotary_table(dims: BlockDims, seq: int, theta: float = 500000.0) -> torch.Tensor:
    """The complex rotary table the model computes once and hands every block."""
    freqs = 1.0 / (theta ** (torch.arange(0, dims.head_dim, 2)[: dims.head_dim // 2].float() / dims.head_dim))
    angles = torch.outer(torch.arange(seq).float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def _rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rotated = torch.view_as_real(pairs * table.view(1, x.shape[1], 1, -1)).flatten(3)
    return rotated.type_as(x)


class Block(nn.Module):
    """A torchtitan-style Llama TransformerBlock (the op sequence of model.py's, our own code)."""

    def __init__(self, dims: BlockDims) -> None:
        super().__init__()
        self.dims = dims
        h, d = dims.hidden, dims.head_dim
        self.attention_norm = RMSNorm(h)
        self.wq = nn.Linear(h, dims.heads * d, bias=False)
        self.wk = nn.Linear(h, dims.kv_heads * d, bias=False)
        self.wv = nn.Linear(h, dims.kv_heads * d, bias=False)
        self.wo = nn.Linear(dims.heads * d, h, bias=False)
        self.ffn_norm = RMSNorm(h)
        self.w1 = nn.Linear(h, dims.ffn, bias=False)
        self.w2 = nn.Linear(dims.ffn, h, bias=False)
        self.w3 = nn.Linear(h, dims.ffn, bias=False)

    def _attention(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        d = self.dims.head_dim
        q = self.wq(x).view(batch, seq, -1, d)
        k = self.wk(x).view(batch, seq, -1, d)
        v = self.wv(x).view(batch, seq, -1, d)
        q, k = _rotate(q, table), _rotate(k, table)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=True,
            enable_gqa=self.dims.heads > self.dims.kv_heads,
        )
        return self.wo(out.transpose(1, 2).contiguous().view(batch, seq, -1))

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        h = x + self._attention(self.attention_norm(x), table)
        normed = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(normed)) * self.w3(normed))


def _op_policy() -> Any:
    """torchtitan's per-op policy (`_apply_op_sac`): a fresh count of the block's matmuls per pass."""
    counts = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            counts[mode] += 1
        if func in SAVE_LIST and not (func == torch.ops.aten.mm.default and counts[mode] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def wrapped(block: Block, ac: str, early_stop: bool = True) -> nn.Module:
    """The block as activation_checkpoint.py wraps it for *ac* (none, op or full). *early_stop*: the
    recompute stops once every tensor the forward saved is back (torch.utils.checkpoint's default,
    which torchtitan kept until it passed its own `early_stop`, default False: 25413d224, 2025-08-29)."""
    if ac == "none":
        return block
    if ac == "full":
        return checkpoint_wrapper(block, preserve_rng_state=True, early_stop=early_stop)
    if ac == "op":
        return checkpoint_wrapper(
            block, context_fn=functools.partial(_op_policy), preserve_rng_state=True, early_stop=early_stop
        )
    raise ValueError(f"checkpointing is one of {', '.join(CHECKPOINTING)}, not {ac!r}")


@dataclass(frozen=True)
class BlockMeasurement:
    dims: BlockDims
    tokens: int
    ac: str
    kept_bytes: int  # what the block keeps for its backward, its input included, its output not
    input_bytes: int


def measure_block(
    dims: BlockDims, tokens: int, ac: str, dtype: torch.dtype = torch.bfloat16, compiled: bool = False
) -> BlockMeasurement:
    """One forward of the block on *tokens* tokens (one sequence) under *ac*: what it keeps.

    *compiled* compiles the wrapped block as torchtitan's `apply_compile` does (`torch.compile(block,
    fullgraph=True)` after the checkpoint wrapper; Inductor on the CPU): what it keeps is then what
    AOTAutograd's partitioner saves for the compiled backward (`saved_activation_bytes`), the
    storages Inductor allocates being out of a dispatch mode's sight. Runs a backward afterwards (so
    the graph the forward built can run), and checks nothing else.
    """
    torch.manual_seed(0)
    block = Block(dims).to(dtype)
    module = wrapped(block, ac)
    table = rotary_table(dims, tokens)
    x = torch.randn(1, tokens, dims.hidden, dtype=dtype, requires_grad=True)
    input_bytes = x.untyped_storage().nbytes()
    if compiled:
        out = torch.compile(module, fullgraph=True)(x, table)
        # the block's input is among the saved tensors (the backward reads it)
        kept = saved_activation_bytes(out, [*block.parameters(), table])
    else:
        with LiveBytes() as live:
            out = module(x, table)
        kept = live.now - out.untyped_storage().nbytes() + input_bytes
    out.backward(torch.ones_like(out))
    return BlockMeasurement(dims, tokens, ac, kept, input_bytes)


def saved_activation_bytes(out: torch.Tensor, besides: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages the autograd graph behind *out* saves for its backward, those of
    *besides* (parameters, constant tables) left out."""
    skip = {t.untyped_storage().data_ptr() for t in besides}
    sizes: dict[int, int] = {}
    seen: set[Any] = set()
    stack = [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for tensor in getattr(node, "saved_tensors", None) or ():
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in skip:
                sizes[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        stack.extend(next_node for next_node, _ in node.next_functions)
    return sum(sizes.values())


# --- MoE blocks: torchtitan's DeepSeek-V3 (MLA) and Qwen3 (GQA with qk norms) ----------------------


@dataclass(frozen=True)
class MoeBlockDims:
    """A torchtitan MoE block's sizes. MLA (DeepSeek-V3) when `kv_lora` > 0, with a query LoRA when
    `q_lora` > 0; else GQA with per-head qk norms (Qwen3) of `kv_heads` heads of `head_dim`. The CPU's
    flash kernel wants one head width for queries, keys and values: MLA's `v` = `nope` + `rope`."""

    hidden: int
    heads: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    q_lora: int = 0
    kv_lora: int = 0
    nope: int = 0
    rope: int = 0
    v: int = 0


def _table(width: int, seq: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, width, 2)[: width // 2].float() / width))
    return torch.polar(torch.ones(seq, width // 2), torch.outer(torch.arange(seq).float(), freqs))


class MoeBlock(nn.Module):
    """A torchtitan MoE TransformerBlock: the op sequence of deepseek_v3/model/model.py's `Attention`
    or qwen3/model/model.py's, and moe/moe.py's `MoE` (sigmoid router in fp32, top-k, the tokens
    sorted by expert, scored before the experts, `torch._grouped_mm` experts, a shared `FeedForward`,
    the outputs unsorted and summed), in our own code."""

    def __init__(self, dims: MoeBlockDims) -> None:
        super().__init__()
        self.dims = dims
        h, d = dims.hidden, dims
        self.attention_norm, self.ffn_norm = RMSNorm(h), RMSNorm(h)
        if d.kv_lora:
            width = d.nope + d.rope
            if d.q_lora:
                self.wq_a = nn.Linear(h, d.q_lora, bias=False)
                self.q_norm = RMSNorm(d.q_lora)
                self.wq_b = nn.Linear(d.q_lora, d.heads * width, bias=False)
            else:
                self.wq = nn.Linear(h, d.heads * width, bias=False)
            self.wkv_a = nn.Linear(h, d.kv_lora + d.rope, bias=False)
            self.kv_norm = RMSNorm(d.kv_lora)
            self.wkv_b = nn.Linear(d.kv_lora, d.heads * (d.nope + d.v), bias=False)
            self.wo = nn.Linear(d.heads * d.v, h, bias=False)
        else:
            self.wq = nn.Linear(h, d.heads * d.head_dim, bias=False)
            self.wk = nn.Linear(h, d.kv_heads * d.head_dim, bias=False)
            self.wv = nn.Linear(h, d.kv_heads * d.head_dim, bias=False)
            self.q_norm, self.k_norm = RMSNorm(d.head_dim), RMSNorm(d.head_dim)
            self.wo = nn.Linear(d.heads * d.head_dim, h, bias=False)
        self.gate = nn.Linear(h, d.experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(d.experts, d.expert_ffn, h) * 0.02)
        self.w2 = nn.Parameter(torch.randn(d.experts, h, d.expert_ffn) * 0.02)
        self.w3 = nn.Parameter(torch.randn(d.experts, d.expert_ffn, h) * 0.02)
        if d.shared_ffn:
            self.s1 = nn.Linear(h, d.shared_ffn, bias=False)
            self.s2 = nn.Linear(d.shared_ffn, h, bias=False)
            self.s3 = nn.Linear(h, d.shared_ffn, bias=False)

    def _mla(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        d = self.dims
        q = self.wq_b(self.q_norm(self.wq_a(x))) if d.q_lora else self.wq(x)
        q_nope, q_pe = torch.split(q.view(batch, seq, -1, d.nope + d.rope), [d.nope, d.rope], dim=-1)
        table = _table(d.rope, seq)
        q = torch.cat([q_nope, _rotate(q_pe, table)], dim=-1)
        kv, k_pe = torch.split(self.wkv_a(x), [d.kv_lora, d.rope], dim=-1)
        k_pe = _rotate(k_pe.unsqueeze(2), table)
        kv = self.wkv_b(self.kv_norm(kv)).view(batch, seq, -1, d.nope + d.v)
        k_nope, v = torch.split(kv, [d.nope, d.v], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, -1, d.heads, -1)], dim=-1)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(batch, seq, -1))

    def _gqa(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        d = self.dims.head_dim
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        q, k = self.q_norm(q.view(batch, seq, -1, d)), self.k_norm(k.view(batch, seq, -1, d))
        table = _table(d, seq)
        q, k = _rotate(q, table), _rotate(k, table)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.view(batch, seq, -1, d).transpose(1, 2),
            is_causal=True,
            enable_gqa=self.dims.heads > self.dims.kv_heads,
        )
        return self.wo(out.transpose(1, 2).contiguous().view(batch, seq, -1))

    def _moe(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, h = x.shape
        d = self.dims
        x = x.view(-1, h)
        scores = torch.sigmoid(self.gate(x).to(torch.float32))
        _, chosen = torch.topk(scores, k=d.top_k, dim=-1, sorted=False)
        top = scores.gather(dim=1, index=chosen)
        top = top / (top.sum(dim=-1, keepdim=True) + 1e-20)
        counts = torch.bincount(chosen.view(-1), minlength=d.experts)
        order = torch.argsort(chosen.view(-1), stable=True)
        routed = x[order // d.top_k]
        routed = (routed.to(torch.float32) * top.view(-1)[order].reshape(-1, 1)).to(x.dtype)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        hidden = F.silu(torch._grouped_mm(routed, self.w1.transpose(-2, -1), offs=offsets))
        hidden = hidden * torch._grouped_mm(routed, self.w3.transpose(-2, -1), offs=offsets)
        routed_out = torch._grouped_mm(hidden, self.w2.transpose(-2, -1), offs=offsets)
        shared = self.s2(F.silu(self.s1(x)) * self.s3(x)) if d.shared_ffn else None
        unsorted = torch.zeros((batch * seq * d.top_k, h), dtype=routed_out.dtype)
        unsorted[order] = routed_out
        out = unsorted.reshape(-1, d.top_k, h).sum(dim=1)
        return (out if shared is None else shared + out).view(batch, seq, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attend = self._mla if self.dims.kv_lora else self._gqa
        h = x + attend(self.attention_norm(x))
        return h + self._moe(self.ffn_norm(h))


def measure_moe_block(dims: MoeBlockDims, tokens: int, ac: str, dtype: torch.dtype = torch.bfloat16) -> int:
    """What the MoE block keeps for its backward after one forward on *tokens* tokens under *ac*, its
    input included, its output not. No backward runs: the CPU's `_grouped_mm` has none."""
    if ac == "full":
        raise ValueError("the MoE census measures none and op")
    torch.manual_seed(0)
    block = MoeBlock(dims).to(dtype)
    module = block if ac == "none" else wrapped(block, ac)  # type: ignore[arg-type]
    x = torch.randn(1, tokens, dims.hidden, dtype=dtype, requires_grad=True)
    with LiveBytes() as live:
        out = module(x)
    return live.now - out.untyped_storage().nbytes() + x.untyped_storage().nbytes()
