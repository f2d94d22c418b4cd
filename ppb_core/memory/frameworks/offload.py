"""Megatron-Core's fine-grained activation offloading (`--fine-grained-activation-offloading
--offload-modules ...`, `training.offload_modules`), as Megatron-LM d98e8a64 runs it.

* **What leaves the device.** Each listed module's forward runs inside an offload group
  (megatron/core/pipeline_parallel/fine_grained_activation_offload.py,
  `FineGrainedActivationOffloadingInterface`): `PipelineOffloadManager`'s `saved_tensors_hooks` capture
  every tensor autograd saves inside it (`on_save_for_backward` → `ChunkOffloadHandler.tensor_push`),
  and at the group's commit (`group_offload` → `bulk_offload` → `bulk_offload_group`) each captured
  tensor of at least `--min-offloaded-tensor-size` elements (1024·1024 by default,
  `tensor_need_offloading_checker`: `numel() < min_offloaded_tensor_size` stays) is copied to pinned
  host memory on the D2H stream and the saved reference becomes the host copy; the inputs named in
  `forced_released_tensors` are freed (`untyped_storage().resize_(0)`). Smaller tensors stay.
* **Which of ppb's terms each group captures** (`OFFLOADED`, the call sites at d98e8a64):
  `attn_norm` the input norm's input where the norm is its own module (transformer_layer.py
  `_run_input_layernorm`; `_set_offload_modules` skips an `IdentityOp` norm, which the Transformer
  Engine spec fuses into the QKV linear except under MLA: `megatron.module_drops`'s rule);
  `qkv_linear` what `Attention.get_query_key_value_tensors` saves (attention.py): the fused norm's
  input and output, the QK norms' input, MLA's latents, their norms and its rotary tables;
  `core_attn` what the attention core saves (the query, key and value, the scores' softmax, its
  statistics and dropout, and flash-attn's own output where TE runs it: megatron.py
  `flash2_output_terms`); `attn_proj` the output projection's input, the core's output (freed
  by `forced_released_tensors=[core_attn_out]`; `core_attn` alone leaves it referenced by the
  projection); `mlp_norm` the pre-MLP norm's input where it is its own module (MoE layers);
  `expert_fc1` the experts' first GEMM's input, every routed row the rank computes
  (moe/experts.py `TEGroupedMLP.forward`, `linear_fc1`, and its remote rows, `BufferTerm`s here);
  `moe_act` the activation's input and what the unfused weighting saves inside `bias_act_func` (the
  second GEMM runs after the group closes: its input stays). Shared experts, the router, the
  dispatcher's maps, residuals and the loss are in no group.
* **CUDA graphs** (transformer_layer.py `_set_offload_modules`): with `attn` graphed, `attn_norm` is
  not offloaded; in an MoE layer with `attn` or `moe_router` graphed, `mlp_norm` is not either.
* **What stays on the device** (`resident_bytes`): after the first iteration, `post_warmup_callback`
  keeps, for each module name, the last group of the first backward chunk on the device (the
  offload margin, as many groups as names), and `should_bulk_offload` keeps a chunk's last group of a
  name when that chunk's backward runs next; in the backward each group's start reloads the next one
  (`on_group_start_backward` → `bulk_reload`, one group ahead), freed as its backward ends. So a
  stage holds about one layer's offloaded groups while micro-batches are in flight: the largest of
  its layers', once. The first iteration offloads every group (`is_warmup`), holding less.
* **What a forward holds of it** (`forward_held_bytes`): a group's tensors are on the device from their
  making to the group's commit, one group at a time, and in `core_attn` under TE's unfused attention the
  scores the softmax reads too: the forward's working set, beside the next backward's reloaded layer.
* Not modelled: `--activation-offload-fraction` and `--delta-offload-bytes-across-pp-ranks` (which keep
  later groups on the device), `fused_group_mlp` (needs the op fuser). The reloads' PCIe time is the
  time model's (`ppb_core.timing.offload`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ppb_core.memory.activations import ActivationTerm, routed_rows
from ppb_core.memory.buffers import BufferTerm
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import BodyKind, Moe, TailKind

# ppb's term names (without an MTP prefix) each group captures, whatever the attention
_CORE = ("attention.query", "attention.key", "attention.value", "attention.softmax_output",
         "attention.softmax_lse", "attention.dropout_mask", "attention.dropout_output",
         "attention.probabilities", "attention.flash_output", "attention.flash_padding")  # fmt: skip
_QKV_MLA = ("attention.norm_output", "attention.q_latent", "attention.q_latent_norm", "attention.kv_latent",
            "attention.kv_latent_norm", "attention.rotary_cos_sin")  # fmt: skip
_QKV_FUSED = ("attention.norm_input", "attention.norm_output", "attention.qk_norm_input")
OFFLOADED = {
    "attn_norm": ("attention.norm_input",),  # MLA: its own norm module
    "core_attn": _CORE,
    "attn_proj": ("attention.core_output",),
    "mlp_norm": ("moe.norm_input",),  # MoE layers: their own norm module
    "expert_fc1": ("moe.dispatched_tokens",),
    "moe_act": (
        "moe.expert.gate_up_output",
        "moe.expert.fc1_output",
        "moe.expert.unweighted_activation",
        "moe.expert.probs",
    ),
}
# the remote and expert-TP-gathered rows of the experts' first GEMM's input (buffers.py), offloaded with it
_FC1_BUFFERS = ("moe.dispatched_tokens_remote", "moe.expert_gathered_tokens")


def active_modules(kind: BodyKind, setup: MemorySetup) -> frozenset[str]:
    """The offload groups a layer of *kind* runs (module docstring): a norm group only where the norm is
    its own module, and as CUDA graphs allow."""
    modules = set(setup.offload_modules)
    graphed = setup.cuda_graph_modules
    moe = isinstance(kind.mlp, Moe)
    if not kind.attention.is_mla or (graphed is not None and "attn" in graphed):
        modules.discard("attn_norm")
    if not moe or (graphed is not None and ("attn" in graphed or "moe_router" in graphed)):
        modules.discard("mlp_norm")
    if not moe:
        modules -= {"expert_fc1", "moe_act"}
    return frozenset(modules)


def _ops(kind: BodyKind, modules: frozenset[str]) -> frozenset[str]:
    ops = {op for module in modules & OFFLOADED.keys() for op in OFFLOADED[module]}
    if "qkv_linear" in modules:
        ops |= set(_QKV_MLA if kind.attention.is_mla else _QKV_FUSED)
    return frozenset(ops)


def _whole_elements(term: ActivationTerm, kind: BodyKind, setup: MemorySetup) -> float:
    """Elements of the tensor a term is part of: the experts' first input is every routed row the
    rank computes (ppb keeps the local share as the term, the rest as buffers)."""
    if term.op.endswith("moe.dispatched_tokens") and isinstance(kind.mlp, Moe):
        return routed_rows(kind.mlp, setup) * kind.hidden_size
    return term.elements


def _layers(kind: BodyKind | TailKind) -> Iterable[tuple[str, BodyKind]]:
    """(name prefix, body kind) of each transformer layer a layer kind runs: a body layer, or a TAIL's
    MTP layers (`mtp0.`, …: each a `TransformerLayer` of the same config)."""
    if isinstance(kind, BodyKind):
        yield "", kind
    elif isinstance(kind, TailKind) and kind.has_mtp_modules and kind.mtp_body is not None:
        for index in range(kind.mtp_layers):
            yield f"mtp{index}.", kind.mtp_body


def offload_split(
    kind: BodyKind | TailKind,
    setup: MemorySetup,
    terms: tuple[ActivationTerm, ...],
    buffers: tuple[BufferTerm, ...],
) -> tuple[tuple[ActivationTerm, ...], tuple[BufferTerm, ...], tuple[ActivationTerm, ...], tuple[BufferTerm, ...]]:
    """(terms kept on the device, buffers kept on it, terms offloaded, buffers offloaded) of one
    micro-batch of a layer."""
    gone: set[str] = set()
    gone_buffers: set[str] = set()
    for prefix, body in _layers(kind):
        modules = active_modules(body, setup)
        if not modules:
            continue
        ops = _ops(body, modules)
        for term in terms:
            ours = term.op.startswith(prefix) and term.op[len(prefix) :] in ops
            if ours and _whole_elements(term, body, setup) >= setup.min_offloaded_elements:
                gone.add(term.op)
        fc1 = "expert_fc1" in modules and isinstance(body.mlp, Moe)
        if fc1 and routed_rows(body.mlp, setup) * body.hidden_size >= setup.min_offloaded_elements:
            names = {prefix + name for name in _FC1_BUFFERS}
            gone_buffers |= {buffer.name for buffer in buffers if buffer.kept and buffer.name in names}
    if not gone and not gone_buffers:
        return terms, buffers, (), ()
    moved = tuple(t for t in terms if t.op in gone)
    return (
        tuple(t for t in terms if t.op not in gone),
        tuple(b for b in buffers if b.name not in gone_buffers),
        (*moved, *_second_copies(moved, kind, setup)),
        tuple(b for b in buffers if b.name in gone_buffers),
    )


def forward_held_bytes(kind: BodyKind | TailKind, setup: MemorySetup, moved: tuple[ActivationTerm, ...]) -> float:
    """The most a layer's forward holds of what it offloads (one micro-batch): each group's tensors from their
    making to the group's commit, one group at a time (`bulk_offload_group` drops the device tensors there;
    the allocator counts them free at once), and in `core_attn` under Transformer Engine's unfused attention
    the scores beside the softmax's output (`UnfusedDotProductAttention.forward`, d0067d0d: `matmul_result`,
    `[b·heads, s, s]` in the query's dtype, freed once `scale_mask_softmax` has returned). A second reference to
    one tensor (`_second_copies`) is one storage in the forward."""
    best = 0.0
    for prefix, body in _layers(kind):
        for module in active_modules(body, setup):
            names = {prefix + op for op in _ops(body, frozenset({module}))}
            group = [t for t in moved if t.op in names]
            held = sum(t.bytes for t in group)
            unfused = not setup.flash_attention and setup.transformer_impl == "transformer_engine"
            if module == "core_attn" and unfused:
                softmax = f"{prefix}attention.softmax_output"
                held += sum(t.elements * setup.dtype_bytes for t in group if t.op == softmax)
            best = max(best, held)
    return best


def _second_copies(
    moved: tuple[ActivationTerm, ...], kind: BodyKind | TailKind, setup: MemorySetup
) -> tuple[ActivationTerm, ...]:
    """A tensor autograd saves twice in one group is copied to the host twice and reloaded as two device
    tensors (`bulk_offload_group` and `bulk_reload_group` go tag by tag; `_set_duplicate_storage_info`
    only reports it). Transformer Engine's unfused attention (attention/dot_product_attention/
    backends.py `UnfusedDotProductAttention.forward`, d0067d0d) saves its softmax's output in the fused
    softmax (softmax.py `_scaled_masked_softmax_setup_context`) and again as the second batched matmul's
    input where no dropout copies it (dropout 0 returns its input): reloaded, both are on the device
    through that matmul's backward, beside the probabilities' gradient (the softmax's backward then
    overwrites that gradient in place, TE 2.11 to 2.16; docs/frameworks.md)."""
    if setup.flash_attention or setup.transformer_impl != "transformer_engine":
        return ()
    found = [
        replace(term, op=f"{term.op}.second_copy")
        for prefix, body in _layers(kind)
        if body.attention_dropout == 0
        for term in moved
        if term.op == f"{prefix}attention.softmax_output"
    ]
    return tuple(found)
