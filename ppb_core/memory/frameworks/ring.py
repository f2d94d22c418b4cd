"""What ring attention (context parallelism) holds during a layer's attention, framework by framework.

SAPP's convention (`ppb_core.memory.buffers`) keeps the cp − 1 key/value chunks a ring brought in for
the backward and a double buffer as the workspace. Neither framework below keeps a received chunk
past the forward; both hold more than a double buffer while the attention runs. With Q, O the local
queries' and output's bytes and C the local keys' and values' bytes (T = s·b/cp tokens, 16-bit), on
the last context-parallel rank (r = cp − 1, whose every step after the first covers all its queries,
as `ppb_core.timing.ring` prices it), beyond what the layer keeps for its backward and what a
non-CP flash backward holds (dQ, dK, dV: Q + C):

* **Megatron-Core: TransformerEngine's `AttnFuncWithCPAndKVP2P`** (transformer_engine/pytorch/
  attention/dot_product_attention/context_parallel.py at d0067d0d, 16-bit, not FP8).
  - Kept: `ctx.save_for_backward` holds q, `kv = p2p_comm_buffers[-1]` (the last chunk received, in
    place of the local K, V, which the FlashAttention module's contiguous copies held and which are
    freed after the forward: backends.py `FlashAttention.forward`), the output and the merged
    softmax statistics: as without CP, nothing more.
  - Forward: `p2p_comm_buffers` keeps every step's K, V buffer (the local `torch.cat` and cp − 1
    received, `torch.empty_like` each step) and `out_per_step` every step's output until the
    correction loop ends (`flash_attn_fwd_out_correction_init`/`_correction` are `jit_fuser`
    functions, no fp32 temporaries): `cp·(C + O)`.
  - Backward: `dq_buffer = torch.empty_like(q)` and two `(2, *kv.shape)` buffers for K, V and dK, dV
    (`p2p_comm_buffers`, double-buffered), next to one step's dQ, dK, dV: `Q + 4·C` beyond a
    non-CP backward (16-bit sums: `dq.add_`, `dk.add_`).
* **torchtitan: PyTorch's `context_parallel`** (torch 2.13, torch/distributed/tensor/experimental/
  _context_parallel/_attention.py; torchtitan v0.2.2 at 73a0e697 `create_context_parallel_ctx` with
  its default `context_parallel_rotate_method = "allgather"`; `_cp_options.convert_to_f32` True).
  K and V reach the ring as the model computes them: v0.2.2 passes `enable_gqa` to SDPA (torchtitan/
  models/attention.py `ScaledDotProductAttentionWrapper`), which flash runs without widening them.
  Before ff0829c10 (`timing.repeat_kv`) the model widened them to every query head first (9dec370
  torchtitan/models/llama/model.py `Attention.forward`: `keys = repeat_kv(xk, self.n_rep)`, the same for
  the values, then `F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)`), so everything the ring
  gathers, concatenates and exchanges below is of the widened K, V: C there is the query heads' keys and
  values (`ring_bytes(..., widened=True)`), while the non-CP backward's dK, dV the ring's replace stay
  what the layer's formulas count.
  - Kept: the SDPA autograd node saves the local q, k, v, the merged output and log-sum-exp; the
    gathered K, V are not saved (`_templated_ring_attention_backward` gathers again): as without CP.
  - Forward (`_templated_ring_attention`): `_AllGatherRotater` holds every rank's K, V (`cp·C`) to the
    end; `_SDPAMerger` keeps the running output in fp32 and merges each later step as
    `out - sigmoid(block_lse - lse) * (out - block_out)`, eagerly: at the last subtraction the running
    output (2·O), the step's output (O) and its fp32 copy (2·O), the product (2·O) and the result
    (2·O) are alive: `cp·C + 9·O`, less the output the layer then keeps: `cp·C + 8·O`.
  - Backward (`_templated_ring_attention_backward`): dQ summed in fp32 (`torch.zeros_like(...,
    dtype=float32)`: 2·Q), the step's dQ (Q); a fresh all-gather of K, V (`cp·C`) and the `torch.cat`
    of the chunk to send (C); dK, dV in fp32 passed on by `_AllToAllRotater` (`permute_tensor`): at
    its exchange the chunk received, the updated dK, dV (`_partial_update`'s `torch.cat`), their
    concatenation to send and the collective's output, 2·C each (8·C); the step's dK, dV, half a
    chunk on the last rank (C/2): `2·Q + (cp + 8.5)·C` beyond a non-CP backward.

Both are workspaces of one layer's attention at a time (`transient`), charged at the backward moment's
kept memory: the backward's with the rest of that layer's backward working set, the forward's
(`forward_only`) with what recompute rebuilds and the framework's parameter working set, not the
backward's gradients (`MemoryModel.working_extra_bytes`). The forward's falls at the last forward
before the first backward, with at most that layer's later activations fewer than the moment
charges; under full recompute it runs again inside the backward. torchtitan's merges are counted
as eager PyTorch runs them; under `torch.compile` Inductor may fuse them (not measured): a bound there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ppb_core.memory.activations import encoder_setup
from ppb_core.memory.buffers import BufferTerm
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, LayerKind, TailKind

RING_NAMES = ("attention.ring_received_kv", "attention.ring_double_buffer")
# torchtitan's backward, in units of C: the fp32 dK, dV exchange (four fp32 chunks, 8), the K, V `torch.cat`
# to send (1), the step's half-chunk dK, dV (0.5), less a non-CP backward's dK, dV (1); its forward, in units
# of O: the merge's 9 less the kept output.
TORCH_BACKWARD_KV_UNITS = 8 + 1 + 0.5 - 1
TORCH_BACKWARD_Q_UNITS = 2  # the fp32 dQ sum (the step's dQ replaces a non-CP backward's)
TORCH_FORWARD_OUT_UNITS = 9 - 1
TE_BACKWARD_KV_UNITS = 4  # two (2, C) buffers: K, V and dK, dV, each double-buffered


def ring_bytes(kind: BodyKind, setup: MemorySetup, widened: bool = False) -> tuple[float, float, float]:
    """(Q, O, C): the local queries', output's and keys-and-values' bytes of one micro-batch; *widened*, C of
    K and V copied out to every query head (torchtitan's `repeat_kv`, module docstring)."""
    att, tokens, bc = kind.attention, setup.tokens, setup.dtype_bytes
    heads = per_rank(att.num_heads, setup.tp)
    if att.is_mla:
        query, kv = heads * att.q_head_dim, heads * (att.q_head_dim + att.value_head_dim)
    else:
        kv_heads = heads if widened else kv_heads_per_rank(att.num_kv_heads, setup.tp)
        query, kv = heads * att.head_dim, 2 * kv_heads * att.head_dim
    return tokens * query * bc, tokens * heads * att.value_head_dim * bc, tokens * kv * bc


def te_ring_terms(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[BufferTerm]:
    """TransformerEngine's P2P ring (module docstring): the forward's and the backward's workspaces."""
    query, out, kv = ring_bytes(kind, setup)
    # under hierarchical CP the ring runs over cp_ring ranks on heads/cp_a2a of s·b/cp_ring tokens: Q, O, C the same
    return [
        BufferTerm("cp", f"{prefix}attention.ring_forward_steps", setup.cp_ring * (kv + out), False, forward_only=True),
        BufferTerm("cp", f"{prefix}attention.ring_backward_buffers", query + TE_BACKWARD_KV_UNITS * kv, False),
    ]


def torch_ring_terms(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[BufferTerm]:
    """PyTorch's all-gather ring with fp32 merges (module docstring): the forward's and the backward's. Under
    `repeat_kv` the ring's own K, V buffers are the widened ones; the non-CP dK, dV it replaces (the 1 taken
    off `TORCH_BACKWARD_KV_UNITS`) stay the layer's own."""
    query, out, kv = ring_bytes(kind, setup)
    ring_kv = ring_bytes(kind, setup, widened=setup.repeat_kv)[2]
    forward = setup.cp * ring_kv + TORCH_FORWARD_OUT_UNITS * out
    backward = TORCH_BACKWARD_Q_UNITS * query + (setup.cp + TORCH_BACKWARD_KV_UNITS + 1) * ring_kv - kv
    return [
        BufferTerm("cp", f"{prefix}attention.ring_forward_merge", forward, False, forward_only=True),
        BufferTerm("cp", f"{prefix}attention.ring_backward_sums", backward, False),
    ]


def te_all_gather_terms(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[BufferTerm]:
    """TransformerEngine's all-gather CP (`AttnFuncWithCPAndKVAllGather`, d0067d0d, sbhd, 16-bit), Megatron's
    `--cp-comm-type all_gather`; Q, O, C as in the module docstring. Kept: ctx saves the local q, k, v, the
    output and each call's statistics: as without CP, nothing gathered.
    Forward: both gathers' outputs (cp·C together), then each `index_select` into sequence order (cp·C/2 for
    K, then for V, the gathered one freed after it): 1.5·cp·C; during the two calls the reordered K, V (cp·C),
    the last query half (Q/2), both calls' outputs (O) and the unused `out` zeros (O), beside the returned
    output the layer keeps: cp·C + max(cp·C/2, Q/2 + 2·O).
    Backward, at the reorder of the dK sums after the calls (every tensor the function bound still alive): the
    gathered K, V again (cp·C), the zeroed dK, dV sums (cp·C), both calls' dK, dV (`dk_per_step`: their keys,
    (2cp+1)·s/(2cp), (cp + 1/2)·C), the reordered dK (cp·C/2), dQ (Q), both calls' dQ (Q), the last Q, O,
    dO halves (Q/2 + O): (3.5·cp + 0.5)·C + 2.5·Q + O, less a non-CP backward's dQ, dK, dV (Q + C)."""
    query, out, kv = ring_bytes(kind, setup)
    cp = setup.cp
    forward = cp * kv + max(cp * kv / 2, query / 2 + 2 * out)
    backward = (3.5 * cp - 0.5) * kv + 1.5 * query + out
    return [
        BufferTerm("cp", f"{prefix}attention.all_gather_forward", forward, False, forward_only=True),
        BufferTerm("cp", f"{prefix}attention.all_gather_backward", backward, False),
    ]


RingTerms = Callable[[BodyKind, MemorySetup, str], list[BufferTerm]]
AG_NAME = "attention.all_gather_kv"


def _body_of(kind: LayerKind, prefix: str) -> BodyKind | None:
    """The body whose attention a buffer named with *prefix* belongs to: the layer, or a TAIL's MTP layer."""
    if isinstance(kind, BodyKind) and not prefix:
        return kind
    if isinstance(kind, TailKind) and prefix:
        return kind.mtp_body
    return None


def framework_ring(
    buffers: Sequence[BufferTerm], kind: LayerKind, setup: MemorySetup, terms: RingTerms
) -> tuple[BufferTerm, ...]:
    """*buffers* with SAPP's ring terms replaced by the framework's (*terms*), layer by layer."""
    if setup.cp <= 1 or setup.cp_variant not in ("ring", "hierarchical", "all_gather"):
        return tuple(buffers)
    out: list[BufferTerm] = []
    for buffer in buffers:
        if setup.cp_variant == "all_gather" and buffer.name.endswith(AG_NAME):  # TE's only (framework megatron)
            prefix = buffer.name[: -len(AG_NAME)]
            body = _body_of(kind, prefix)
            out += [buffer] if body is None else te_all_gather_terms(body, encoder_setup(body, setup), prefix)
            continue
        name = next((n for n in RING_NAMES if buffer.name.endswith(n)), None)
        if name is None:
            out.append(buffer)
            continue
        prefix = buffer.name[: -len(name)]
        body = _body_of(kind, prefix)
        if body is None:  # not a layer this module can size: SAPP's term stays
            out.append(buffer)
        elif name == RING_NAMES[1]:  # one set of the framework's terms per attention
            out += terms(body, encoder_setup(body, setup), prefix)
    return tuple(out)


__all__ = ["framework_ring", "ring_bytes", "te_all_gather_terms", "te_ring_terms", "torch_ring_terms"]
