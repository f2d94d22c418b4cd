"""How one device holds its share of a layer: one micro-batch's shape and the parallel split.

The memory formulas (`ppb_core.memory.setup.MemorySetup`, which adds what only memory reads) and
the op tables of the time model (`ppb_core.timing.flops`) read the same record, so a sharding
rule (how many tokens a device's ops see, which heads a TP rank holds) is written once, here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ppb_core.config.run import RunConfig

CP_VARIANTS: tuple[str, ...] = ("ring", "ulysses", "all_gather", "hierarchical")


def per_rank(size: int, ranks: int) -> int:
    """A dimension split over ranks, padded up where it does not divide."""
    return -(-size // ranks)


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """Key/value heads one TP rank holds: an even share, or one replicated head when there are
    fewer heads than ranks (Megatron-LM's `num_query_groups` < tp case, e.g. GQA with 8 groups at
    tp 16: each group's head is copied to tp/8 ranks)."""
    return max(1, num_kv_heads // tp) if num_kv_heads >= tp else 1


def _cp_variant(variant: str, cp: int, a2a: int) -> dict[str, Any]:
    """The CP variant a run's attention runs: TransformerEngine d0067d0d `attn_forward_func_with_cp` runs
    a2a+p2p with a one-rank all-to-all group as p2p, with a one-rank ring as a2a."""
    if variant != "hierarchical":
        return {"cp_variant": variant}
    if a2a <= 1:
        return {"cp_variant": "ring"}
    if a2a >= cp:
        return {"cp_variant": "ulysses"}
    return {"cp_variant": variant, "cp_a2a": a2a}


@dataclass(frozen=True)
class Geometry:
    """One micro-batch (sequence length, batch size, element width) and one device's split of it."""

    seq_length: int
    micro_batch_size: int = 1
    dtype_bytes: int = 2  # parameters and activations
    tp: int = 1
    sequence_parallel: bool = False
    cp: int = 1
    cp_variant: str = "ring"  # "ring" | "ulysses" | "all_gather" | "hierarchical"
    # hierarchical CP (Megatron's a2a+p2p): the all-to-all's ranks; the ring runs over cp / cp_a2a
    cp_a2a: int = 1
    ep: int = 1
    etp: int = 1
    flash_attention: bool = True
    # the busiest expert-parallel rank's routed tokens over the fair share (`RunConfig.routed_share`)
    routing_factor: float = 1.0
    # torchtitan's GQA attention projects Q, K and V with one `wqkv` linear (`FusedQKVLinear`, its main from
    # 3396a4b37: `framework_release.torchtitan`, releases `torchtitan_fused_qkv`); False: wq, wk, wv apart
    fused_qkv: bool = False
    # torchtitan's per-op checkpointing saves by one central list from 114151ad4 (activation_checkpoint.py
    # `_get_save_ops`: torch's compute-intensive ops, addmm among them, and all_to_all_single for every model;
    # releases `torchtitan_op_sac_only`); False: each model's own `_op_sac_save_list` (v0.2.2)
    central_save_list: bool = False

    def __post_init__(self) -> None:
        if self.cp_variant not in CP_VARIANTS:
            raise ValueError(f"cp_variant must be one of {', '.join(CP_VARIANTS)}, got {self.cp_variant!r}")
        if self.cp_variant == "hierarchical" and (self.cp_a2a < 2 or self.cp % self.cp_a2a or self.cp == self.cp_a2a):
            raise ValueError(f"hierarchical CP needs 1 < cp_a2a < cp dividing it, got {self.cp_a2a} of {self.cp}")

    @staticmethod
    def run_fields(run: RunConfig) -> dict[str, Any]:
        """The geometry's fields as a run config sets them."""
        par, train = run.parallel, run.training
        return {
            "seq_length": train.seq_length,
            "micro_batch_size": train.micro_batch_size,
            "dtype_bytes": train.dtype_bytes,
            "tp": par.tp,
            "sequence_parallel": par.sequence_parallel,
            "cp": par.cp,
            **_cp_variant(par.cp_variant, par.cp, par.cp_a2a),
            "ep": par.ep,
            "etp": par.expert_tp,
            "flash_attention": train.flash_attention,
            "routing_factor": run.routed_share,
            "fused_qkv": run.framework == "torchtitan" and run.framework_release.holds("torchtitan_fused_qkv"),
            "central_save_list": run.framework == "torchtitan"
            and run.framework_release.holds("torchtitan_op_sac_only"),
        }

    @classmethod
    def from_run(cls, run: RunConfig) -> Geometry:
        return cls(**Geometry.run_fields(run))

    def whole_model(self) -> Geometry:
        """One device holding the whole layer (no TP, CP, EP), ideal routing: what FLOP counts count."""
        return dataclasses.replace(
            self, tp=1, sequence_parallel=False, cp=1, cp_variant="ring", cp_a2a=1, ep=1, etp=1, routing_factor=1.0
        )

    @property
    def sp(self) -> int:
        """The split of what TP leaves whole: t under sequence parallelism, else 1."""
        return self.tp if self.sequence_parallel and self.tp > 1 else 1

    @property
    def gathers(self) -> bool:
        """Whether column-parallel linears all-gather their sequence-parallel inputs."""
        return self.sp > 1

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch in a device's sequence chunk: s·b/cp."""
        return self.seq_length * self.micro_batch_size / self.cp

    @property
    def whole_tokens(self) -> float:
        """Tokens of the ops TP leaves whole (norms, residual, dropout masks): s·b/(cp·sp)."""
        return self.tokens / self.sp

    @property
    def cp_ring(self) -> int:
        """The ranks a ring passes K, V around: cp, or the second level of hierarchical CP."""
        return self.cp // self.cp_a2a

    def attention_pairs(self, window: int = 0) -> float:
        """(query, key) pairs per head one device computes: the whole square without flash (the mask
        is applied afterwards), the causal triangle with flash (masked blocks are skipped), split
        over the context-parallel ranks (ring: s/cp queries against every key; Ulysses: every
        query of heads/cp, counted here per local head).

        With a sliding *window* of w keys (a query at position i attends to keys i - w + 1 to i; HF's
        sliding_window, Megatron-Core's window_size (w - 1, 0)) flash computes the band: i + 1 keys for
        the first w queries, w each after, s·w - w·(w - 1)/2 pairs for s ≥ w."""
        s, b = self.seq_length, self.micro_batch_size
        if not self.flash_attention:
            return b * s * s / self.cp
        if window and window < s:
            return b * (s * window - window * (window - 1) / 2) / self.cp
        return b * s * (s + 1) / 2 / self.cp
