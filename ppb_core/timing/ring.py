"""Ring attention (context parallelism) as Megatron's TransformerEngine and torchtitan's PyTorch run it.

Both shard a causal sequence of s tokens into 2·cp chunks and give rank r chunks r and 2cp−1−r
(the load-balanced "head-tail" / round-robin sharding), so each rank holds s_l = s/cp queries and
keys. A layer's attention then runs as cp flash-attention calls per pass, one per ring step, each
followed by a merge of its partial output into the running one by the log-sum-exp:

- step 0: the local queries against the local keys under the causal mask (an s_l × s_l triangle);
- a step whose keys came from an earlier rank (i ≤ rank): every local query against the first of
  the sender's two chunks, no mask (s_l × s_l/2);
- a later rank's keys (i > rank): the second local chunk's queries against both of the sender's
  chunks, no mask (s_l/2 × s_l); only that half of the output and its statistics are merged.

Every step computes s_l²/2 (query, key) pairs; together s(s+1)/(2cp), the causal triangle's share,
as ppb counts FLOPs. The last rank (r = cp−1) runs step 0 and cp−1 rectangles of s_l queries by
s_l/2 keys (`last_rank_steps`), the first rank cp−1 of s_l/2 by s_l (`first_rank_steps`): at every
later step i both shapes run, rank 0 the second (i > 0), rank cp−1 the first (i ≤ cp−1), and the ring
waits for the slower: PyTorch's forward gathers K, V once a layer (`_AllGatherRotater`), so the next
layer's gather waits for the rank whose calls took longest, rank 0's or rank cp−1's (a rank's sum is
linear in r), and its backward passes dK, dV to the next rank after every step (`dkv_rotater`,
`permute_tensor`), waited before the next step's call; TransformerEngine waits for each step's
received K, V (and in the backward dK, dV) before that step's call. So each later step costs the
slower shape's call (`ring_attention_s`; the shorter key walk reads lower on the measured curves,
`attention_rates.sequence_factor`, the shorter query side fills fewer waves). Merges are the last
rank's, whose cover every row.
Sources: PyTorch's `_templated_ring_attention` and `_templated_ring_attention_backward`
(torch/distributed/tensor/experimental/_context_parallel/_attention.py in torch 2.13;
torch/distributed/tensor/experimental/_attention.py at pytorch/pytorch 0123248a the same loop,
`_is_causal_behavior`, `_SDPAMerger`), and TransformerEngine's `AttnFuncWithCPAndKVP2P`
(transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py at d0067d0d).
"""

from __future__ import annotations

from dataclasses import dataclass

from ppb_core.timing.kernels import Kernels

FP32_BYTES = 4
# Frameworks whose ring attention ppb prices step by step (others: one kernel over all the keys).
STEPPED = ("megatron", "torchtitan")


@dataclass(frozen=True)
class RingStep:
    """`count` flash-attention calls of one shape per (sequence, head): queries, mean keys a query
    attends to, 1 under the causal mask."""

    count: int
    queries: float
    mean_keys: float
    causal: float

    def pairs(self) -> float:
        return self.count * self.queries * self.mean_keys


def last_rank_steps(cp: int, local: float) -> tuple[RingStep, ...]:
    """The last rank's cp calls for *local* = s/cp tokens a rank (module docstring)."""
    return (RingStep(1, local, (local + 1) / 2, 1.0), RingStep(cp - 1, local, local / 2, 0.0))


def first_rank_steps(cp: int, local: float) -> tuple[RingStep, ...]:
    """The first rank's cp calls: step 0's triangle, then the second local chunk's queries against both of
    the sender's chunks (`i > rank`), s_l/2 × s_l, the same pairs as the last rank's (module docstring)."""
    return (RingStep(1, local, (local + 1) / 2, 1.0), RingStep(cp - 1, local / 2, local, 0.0))


def all_gather_steps(cp: int, local: float) -> tuple[RingStep, ...]:
    """TransformerEngine's all-gather CP (`AttnFuncWithCPAndKVAllGather`, d0067d0d): rank r's two calls, one
    per local chunk of c = local/2 queries (chunks r and 2cp−1−r), each against the gathered keys up to its
    chunk's end, (r+1)·c and (2cp−r)·c, under the bottom-right causal mask (`get_kv_seq_info_after_all_gather`):
    a query attends to K − (c−1)/2 keys on average. Together c·(2cp+1)·c − c·(c−1) = s(s+1)/(2cp) pairs at
    s = 2cp·c, the causal triangle's share, on every rank. ppb prices rank 0, whose calls are the most
    unequal (a c × c triangle and every key): the shorter key walk reads lower on the measured curves."""
    chunk = local / 2
    return (
        RingStep(1, chunk, (chunk + 1) / 2, 1.0),
        RingStep(1, chunk, 2 * cp * chunk - (chunk - 1) / 2, 1.0),
    )


def ring_attention_s(
    kernels: Kernels,
    flops: float,
    traffic: float,
    backward: bool,
    attention: tuple[float, float, float, float, float],
    cp: int,
    carries_dq: bool = False,
    kind: str = "p2p",
) -> float:
    """One pass of a flash op (`Op.attention`: sequences, s/cp queries, ...) as the ring's cp calls (*kind*
    p2p: each step at the slower of the last and the first rank's shapes, the module docstring) or
    all-gather CP's two (*kind* all_gather), each at its own shape and rate; the op's FLOPs and bytes
    shared by the calls' pairs."""
    sequences, local, _, head_dim, _ = attention
    if kind == "all_gather":
        ranks = (all_gather_steps(cp, local),)
    else:
        ranks = (last_rank_steps(cp, local), first_rank_steps(cp, local))
    total = sum(step.pairs() for step in ranks[0])

    def call_s(step: RingStep) -> float:
        share = step.queries * step.mean_keys / total
        return kernels.attention_s(
            flops * share,
            traffic * share,
            backward,
            sequences,
            step.queries,
            step.mean_keys,
            head_dim,
            step.causal,
            carries_dq=carries_dq,
        )

    return sum(max(step.count * call_s(step) for step in same) for same in zip(*ranks, strict=True))


def merge_bytes(
    framework: str,
    cp: int,
    out_elements: float,
    q_elements: float,
    kv_elements: float,
    compiled: bool = False,
    sends: int = 1,
) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the last rank's merges and gradient sums beside its ring
    steps, per layer; *out_elements* the local output's, *q_elements* the local queries',
    *kv_elements* the local keys' and values' together (as the ring passes them), 16-bit I/O.

    torchtitan (PyTorch, `_cp_options.convert_to_f32` True, eager kernels): forward, each step's
    output cast to fp32 (read 2, write 4 a element); every later step merges it into the running
    output, `out - sigmoid(block_lse - lse) * (out - block_out)`: a subtraction (read 8, write 4), the
    product (read 4, write 4), the subtraction (read 8, write 4), 32 a element (the statistics' ops,
    a row's, are left out); the result cast back (read 4, write 2); each step but the last
    concatenates K and V to send them (`torch.cat`, read and write 2 an element) after
    `key.contiguous()`/`value.contiguous()` copied the transposed views once. Backward: fp32 zeros
    for dQ, dK, dV (write 4); each step adds its dQ into the fp32 sum (read 4 + 2, write 4); step 0
    adds dK, dV likewise, each later one adds its half-chunk gradient into the received fp32 dK, dV
    (`_partial_update`: half of read 6 write 4, then `torch.cat` of both halves, read 4 write 4) and
    every step concatenates dK, dV to send them (read 4, write 4); dQ and the last dK, dV cast back
    (read 4, write 2); the K, V concatenations as in the forward.

    Megatron (TransformerEngine d0067d0d `AttnFuncWithCPAndKVP2P`, 16-bit, not FP8; its corrections
    `jit_fuser`, i.e. torch.compile'd): the output stays 16-bit: `flash_attn_fwd_out_correction_init`
    scales step 0's output into it (`.to(out_init_step.dtype)`: read 2, write 2), each later step's
    `flash_attn_fwd_out_correction` adds into it in place (`out.add_`: read 2 + 2, write 2), and the
    final `out.to(fwd_nominal_dtype)` is a no-op; the fp32 statistics' clone and corrections (a row's,
    1/d of an output element) left out; K and V stacked into one buffer once (`torch.cat`: read and
    write 2). Backward: the saved chunk copied into the send buffer (`p2p_comm_buffers[0][0].copy_`,
    read and write 2); dQ into the 16-bit `dq_buffer` (`torch.empty_like(q)`): copied at step 0 (read
    2, write 2), added at each later one (read 2 + 2, write 2); dK, dV into the 16-bit buffer sent on,
    the diagonal last: half a chunk copied at step 0, half added at steps 1…cp−2, the whole chunk added
    at step cp−1 (`dk.add_`).

    torchtitan *compiled*: the ring traced into the block's Inductor graph (`compiled_titan_merge_bytes`;
    *sends*: the K, V send buffers it keeps, 1 under the all-gather rotation, cp − 1 under all-to-all)."""
    later = cp - 1
    if framework == "torchtitan" and compiled:
        return compiled_titan_merge_bytes(cp, out_elements, q_elements, kv_elements, sends)
    if framework == "torchtitan":
        forward = (
            cp * 6 * out_elements
            + later * 32 * out_elements
            + 6 * out_elements
            + 4 * kv_elements  # the contiguous() copies
            + later * 4 * kv_elements
        )
        backward = (
            4 * (q_elements + kv_elements)
            + cp * 10 * q_elements
            + 10 * kv_elements
            + later * (5 + 8) * kv_elements
            + cp * 8 * kv_elements
            + 6 * (q_elements + kv_elements)
            + 4 * kv_elements
            + later * 4 * kv_elements
        )
        return forward, backward
    forward = 4 * out_elements + later * 6 * out_elements + 4 * kv_elements
    backward = (4 + later * 6) * q_elements + (4 + 2 + (cp - 2) * 3 + 6) * kv_elements
    return forward, backward


def compiled_titan_merge_bytes(
    cp: int, out_elements: float, q_elements: float, kv_elements: float, sends: int = 1
) -> tuple[float, float]:
    """(forward, backward) HBM bytes of torchtitan's ring merges when the block is torch.compile'd.

    torchtitan compiles each block with `fullgraph=True` (9dec370 parallelize_llama.py `apply_compile`;
    v0.2.2 likewise), so the CP-patched SDPA is traced, not run eagerly: Dynamo breaks the graph nowhere
    (a break would raise), and AOTAutograd runs DTensor's dispatch of the flash op into the ring
    (`_sdpa_handler` → `_templated_ring_attention`, in late 2024's file, before its cuDNN handler, as
    at 0123248a), whose flash calls stay kernels of their own while Inductor fuses the element-wise
    work between them; each
    collective's wait is traced right behind it (`_functional_collectives._maybe_wrap_tensor`:
    `wait_tensor` when `_are_we_tracing()`). Per element, on the last rank (every later step whole
    rows, `i <= rank`):

    - forward: a later step's merge is one kernel, the running output read (fp32 4; at step 1 step 0's
      bf16 output, 2, its `.to(float32)` fused in), the step's bf16 output read (2), the fp32 result
      written (4; at the last step bf16, 2: `results()`'s cast fused in, nothing else reads it):
      10·(cp−1) − 4 an output element. K and V: their `.contiguous()` computed by their producer, the
      send buffer's `torch.cat` once (read 2, write 2; the later steps' cats are dead code, the
      all-gather rotater sending only once): 4; under the all-to-all rotation (*sends* cp − 1) every
      step but the last sends its own: 4·(cp − 1).
    - backward: dQ's fp32 zeros, its cp `+=` of each step's bf16 dQ and the closing cast are one chain,
      each link with one reader: one kernel, 2·cp + 2 a query element. dK, dV: step 0's sum computed
      straight into the fp32 send buffer (read 2, write 4); each later step's `_partial_update` and
      the two `torch.cat`s into the next send buffer: the received first half plus the step's gradient
      (read 4 + 2, write 4), its second half copied (read 4, write 4), 9 on average; the last received
      buffer cast back (read 4, write 2): 12 + 9·(cp−1). K, V's send buffers and their exchanges are the
      forward's: AOTAutograd's CSE of the joint graph merges the backward's identical ones into them.

    The statistics' work (a row's, 1/d of an element) is left out as in the eager count."""
    later = cp - 1
    forward = (10 * later - 4) * out_elements + 4 * sends * kv_elements
    backward = (2 * cp + 2) * q_elements + (12 + 9 * later) * kv_elements
    return forward, backward


def exposed_exchanges_s(seconds: float, exchanges: int, step_s: float, share: float, contention: float) -> float:
    """What *exchanges* equal exchanges taking *seconds* together leave exposed when each runs beside
    one ring step of *step_s* compute (*share* of it hideable; the hidden part slows the step by the
    SMs the collective takes, *contention*): an exchange longer than its step shows the difference."""
    if exchanges <= 0 or seconds <= 0:
        return max(0.0, seconds)
    each = seconds / exchanges
    hidden = min(share * each, step_s)
    return exchanges * (each - hidden + contention * hidden)
