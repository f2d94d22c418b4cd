"""The precision activations are cached in: FP8 caches of linear layers' inputs (`training.fp8_cache`).

A linear layer keeps its input for the weight gradient. With FP8 GEMMs that input is kept
quantized: Transformer Engine's FP8 linears save the FP8 copy they multiplied
(transformer_engine/pytorch/module/layernorm_linear.py and linear.py save `ln_out` /
`inputmat` quantized), and DeepSeek-V3 caches "the activations in FP8 format for the backward
pass of the Linear operator" (DeepSeek-V3 Technical Report, arXiv:2412.19437, §3.3.3 "Low-Precision
Activation"), with fine-grained 1×128 tile scales (§3.3.2).

* `none`: every activation in the training dtype.
* `linear`: the inputs of the linear layers in FP8 with a 4-byte scale per 128 elements: the
  attention's projection inputs (the normed input, MLA's normed latents), the output
  projection's input, the feed-forward down-projections' inputs (the activation outputs), the
  routed experts' inputs (dispatched in FP8: §3.3.3 "Low-Precision Communication"). The router
  reads the MoE norm's output in high precision (§3.3.2 keeps "MoE gating modules" in their
  original precision), so that output stays 16-bit.
* `deepseek`: `linear` and DeepSeek-V3's two special cases (§3.3.3): the inputs of the SwiGLU in
  MoE (the routed and shared experts' up-projection outputs) cached in FP8 too, and the input of
  the linear after attention in a customized E5M6 format (12 bits).

Megatron-Core from core_v0.15.0 (781e765818, attention.py `Attention.__init__`) with Transformer Engine from v2.6
(07afda985, module/linear.py `save_original_input`) sets the attention's output projection to save its original
16-bit input under every FP8 recipe but delayed scaling: the fused core attention already saves that output for
its own backward, so the projection shares it rather than keeping a quantized copy (`proj_original`: the
attention's core output stays in the training dtype under `linear`).

What the combine returns is retained in BF16 (§3.3.3: "the forward and backward combine
components"), and the head and embedding stay in their original precision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ppb_core.memory.activations import ActivationTerm
from ppb_core.memory.buffers import BufferTerm

FP8_CACHES: tuple[str, ...] = ("none", "linear", "deepseek")
FP8_BYTES = 1 + 4 / 128  # an E4M3 element and its share of a 1×128 tile's fp32 scale
E5M6_BYTES = 12 / 8

# Term names (after a module prefix such as "mtp0.") of the linear inputs `linear` caches in FP8.
_LINEAR_INPUTS = frozenset(
    {
        "attention.norm_output",
        "attention.q_latent_norm",
        "attention.kv_latent_norm",
        "attention.core_output",
        "mlp.norm_output",
        "mlp.activation_output",
        "moe.dispatched_tokens",
        "moe.expert.activation_output",
        "moe.shared.activation_output",
    }
)
_SWIGLU_INPUTS = frozenset({"moe.expert.gate_up_output", "moe.shared.gate_up_output"})
_BUFFERS = frozenset({"moe.dispatched_tokens_remote", "moe.expert_gathered_tokens"})


def _name(op: str) -> str:
    return op.split(".", 1)[1] if op.startswith("mtp") else op


def cached_bytes(op: str, mode: str, proj_original: bool = False) -> float | None:
    """Bytes per element a term is cached in under *mode* (None: the training dtype); *proj_original*: the
    output projection saves its original input (module doc)."""
    if mode == "none":
        return None
    name = _name(op)
    if proj_original and mode == "linear" and name == "attention.core_output":
        return None
    if mode == "deepseek" and name == "attention.core_output":
        return E5M6_BYTES
    if name in _LINEAR_INPUTS or (mode == "deepseek" and name in _SWIGLU_INPUTS):
        return FP8_BYTES
    return None


def cached_terms(terms: Iterable[ActivationTerm], mode: str, proj_original: bool = False) -> tuple[ActivationTerm, ...]:
    """*terms* with the linear inputs *mode* caches in FP8 at their cached width."""
    out = []
    for term in terms:
        width = cached_bytes(term.op, mode, proj_original)
        out.append(term if width is None else replace(term, element_bytes=width))
    return tuple(out)


def cached_buffers(buffers: Iterable[BufferTerm], mode: str, dtype_bytes: int) -> tuple[BufferTerm, ...]:
    """The tokens the experts' dispatch brought in, kept as the experts' FP8 input under *mode*."""
    if mode == "none":
        return tuple(buffers)
    out = []
    for buffer in buffers:
        if buffer.kept and _name(buffer.name) in _BUFFERS:
            buffer = replace(buffer, bytes=buffer.bytes * FP8_BYTES / dtype_bytes)
        out.append(buffer)
    return tuple(out)
