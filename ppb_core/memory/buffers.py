"""Communication buffers of a layer as a function of the micro-batches in flight.

Two sorts of buffer, each tagged with the parallel group it serves (dp, tp, cp, ep):

* *kept* buffers are what a collective produced and the backward still needs: the
  all-gathered sequence-parallel inputs (tp), the key/value chunks a ring brought in (cp), the
  tokens the expert all-to-alls brought in from other ranks (ep). One set per micro-batch in
  flight. The `gather` switch drops the tp and cp ones (the backward gathers again), which is
  what COMM recomputes; a fully recomputed layer keeps none of them.
* *transient* buffers are workspaces used while a pass runs: a gradient bucket waiting for its
  reduce-scatter (ZeRO-2/3), a ring's double buffer, the send buffer of an all-to-all. They do
  not grow with the micro-batches in flight.

`buffer_bytes` combines them (rule "layered", the default): the largest transient buffer
(a layer's workspaces serve different phases of its passes) plus every kept buffer once per
micro-batch in flight. Rule "reference" is hyper-parallel MemEst's `max(dp, tp, cp) + ep` (`comm_expr`,
sapp_nd/memory_estimation/evaluators/comm.py) over the
groups' totals, kept for comparison; its max of a constant and a growing term is what the
profiles' `excess` measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ppb_core.memory.activations import encoder_setup, routed_rows, stashed_rows
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, HeadKind, LayerKind, Moe, PatchEmbedKind, ProjectorKind, TailKind
from ppb_core.model.params import LayerParams
from ppb_core.model.switches import LayerType

GROUPS: tuple[str, ...] = ("dp", "tp", "cp", "ep")


@dataclass(frozen=True)
class BufferTerm:
    group: str  # dp | tp | cp | ep
    name: str
    bytes: float  # per micro-batch in flight when kept, else once
    kept: bool  # kept for the backward (grows with micro-batches in flight) or transient
    switch: str | None = None  # the switch whose 0 drops it
    forward_only: bool = False  # a transient of the forward alone (held beside no backward gradient)


def _gathered(setup: MemorySetup, width: float) -> float:
    """What an all-gathered sequence-parallel input adds beyond the local shard the layer keeps."""
    return setup.tokens * width * setup.dtype_bytes * (setup.tp - 1) / setup.tp


def attention_buffers(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[BufferTerm]:
    att, bc = kind.attention, setup.dtype_bytes
    terms: list[BufferTerm] = []
    if setup.gathers:
        if att.is_mla:  # down-projections run on the shard; the latents are gathered for the up-projections
            width = (att.q_lora_rank or kind.hidden_size) + att.kv_lora_rank + att.qk_rope_head_dim
        else:
            width = kind.hidden_size
        terms.append(BufferTerm("tp", f"{prefix}attention.gathered_input", _gathered(setup, width), True, "gather"))
    if setup.cp > 1:
        heads = per_rank(att.num_heads, setup.tp)
        if att.is_mla:
            q_width, kv_width = heads * att.q_head_dim, heads * (att.q_head_dim + att.value_head_dim)
        else:
            q_width, kv_width = heads * att.head_dim, 2 * kv_heads_per_rank(att.num_kv_heads, setup.tp) * att.head_dim
        chunk = setup.tokens * kv_width * bc  # keys and values of one sequence chunk
        if setup.cp_variant in ("ring", "hierarchical"):  # hierarchical: the ring over its second level
            terms += [
                BufferTerm("cp", f"{prefix}attention.ring_received_kv", (setup.cp_ring - 1) * chunk, True, "gather"),
                BufferTerm("cp", f"{prefix}attention.ring_double_buffer", 2 * chunk, False),
            ]
        if setup.cp_variant == "all_gather":  # every rank's keys and values, gathered for the layer's attention
            terms.append(BufferTerm("cp", f"{prefix}attention.all_gather_kv", setup.cp * chunk, False))
        if setup.cp_variant in ("ulysses", "hierarchical"):
            # Ulysses (and hierarchical's first level): queries, keys and values leave through an all-to-all over heads
            terms.append(
                BufferTerm("cp", f"{prefix}attention.all_to_all_staging", setup.tokens * q_width * bc + chunk, False)
            )
    return terms


def ffn_buffers(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[BufferTerm]:
    h, bc = kind.hidden_size, setup.dtype_bytes
    terms: list[BufferTerm] = []
    moe = kind.mlp if isinstance(kind.mlp, Moe) else None
    if setup.gathers and (moe is None or moe.shared_experts):
        name = "mlp" if moe is None else "moe.shared"
        terms.append(BufferTerm("tp", f"{prefix}{name}.gathered_input", _gathered(setup, h), True, "gather"))
    if moe is None:
        return terms
    rows = routed_rows(moe, setup)  # after the expert-tensor-parallel all-gather
    dispatched = rows / setup.etp  # what this rank's dispatch brought in
    kept = stashed_rows(moe, setup) / setup.etp  # its saved share (the paged stash's rows where it holds it)
    if setup.ep > 1:
        remote = (setup.ep - 1) / setup.ep
        returned = setup.whole_tokens * moe.experts_per_token
        terms += [
            BufferTerm("ep", f"{prefix}moe.dispatched_tokens_remote", kept * h * bc * remote, True),
            BufferTerm("ep", f"{prefix}moe.combined_tokens_remote", returned * h * bc * remote, True),
            BufferTerm("ep", f"{prefix}moe.all_to_all_staging", max(dispatched, returned) * h * bc, False),
        ]
    if setup.etp > 1:
        terms.append(
            BufferTerm("tp", f"{prefix}moe.expert_gathered_tokens", (rows - dispatched) * h * bc, True, "gather")
        )
    return terms


def gradient_bucket(params: LayerParams, setup: MemorySetup) -> list[BufferTerm]:
    """ZeRO-2/3 reduce-scatter a layer's whole gradients from a bucket; ZeRO-0/1 reduce in place."""
    if setup.shard_level < 2 or setup.data_group * setup.expert_data_group == 1:
        return []
    return [BufferTerm("dp", "dp.gradient_bucket", (params.non_expert + params.expert) * setup.grad_bytes, False)]


def body_buffers(kind: BodyKind, setup: MemorySetup, prefix: str = "") -> list[BufferTerm]:
    return attention_buffers(kind, setup, prefix) + ffn_buffers(kind, setup, prefix)


def head_buffers(kind: HeadKind, setup: MemorySetup) -> list[BufferTerm]:
    """The embedding's output is reduce-scattered (SP) or all-reduced (TP): nothing gathered is kept."""
    return []


def tail_buffers(kind: TailKind, setup: MemorySetup) -> list[BufferTerm]:
    """The output head's gathered input (never recomputed); each MTP module's projection input, layer and head.
    A standalone MTP's parts (`TailKind.part`): the projections and layers on the MTP chunk, the heads
    on the loss chunk."""
    h = kind.hidden_size
    terms: list[BufferTerm] = []
    if setup.gathers and kind.has_output:
        terms.append(BufferTerm("tp", "output.gathered_input", _gathered(setup, h), True))
    if kind.mtp_body is not None:
        for index in range(kind.mtp_layers):
            name = f"mtp{index}"
            if setup.gathers and kind.has_mtp_modules:
                terms.append(BufferTerm("tp", f"{name}.projection_gathered_input", _gathered(setup, 2 * h), True))
            if setup.gathers and kind.has_output:
                terms.append(BufferTerm("tp", f"{name}.output.gathered_input", _gathered(setup, h), True))
            if kind.has_mtp_modules:
                terms += [
                    BufferTerm(b.group, b.name, b.bytes, b.kept)  # an MTP layer is never recomputed
                    for b in body_buffers(kind.mtp_body, setup, prefix=f"{name}.")
                ]
    return terms


def layer_buffers(kind: LayerKind, setup: MemorySetup, params: LayerParams) -> tuple[BufferTerm, ...]:
    """Every buffer of the layer when it recomputes nothing."""
    if isinstance(kind, BodyKind):
        own = body_buffers(kind, encoder_setup(kind, setup))
    elif isinstance(kind, HeadKind):
        own = head_buffers(kind, setup)
    elif isinstance(kind, PatchEmbedKind | ProjectorKind):
        own = []  # a vision tower's ends run replicated (patch embedding) or as a small MLP: nothing gathered kept
    else:
        own = tail_buffers(kind, setup)
    return tuple(gradient_bucket(params, setup) + own)


def state_buffers(
    terms: Iterable[BufferTerm], state: LayerType, switches: Mapping[str, int] | None
) -> tuple[BufferTerm, ...]:
    """The buffers of a layer in *state*: full recompute keeps none across passes; switches act on SEL."""
    if state is LayerType.FULL_REC_LAYER:
        return tuple(t for t in terms if not t.kept)
    if state is LayerType.SEL_REC_LAYER and switches is not None:
        return tuple(t for t in terms if t.switch is None or switches.get(t.switch, 1))
    return tuple(terms)


@dataclass(frozen=True)
class Buffers:
    """A layer's buffers in one state, combined for any count of micro-batches in flight."""

    terms: tuple[BufferTerm, ...]
    rule: str = "layered"

    def kept_bytes(self, group: str | None = None) -> float:
        return sum(t.bytes for t in self.terms if t.kept and group in (None, t.group))

    def transient_bytes(self, group: str | None = None) -> float:
        """The largest transient workspace (of *group*, or of any)."""
        return max((t.bytes for t in self.terms if not t.kept and group in (None, t.group)), default=0.0)

    def at(self, in_flight: int) -> float:
        """Bytes of buffers with *in_flight* micro-batches in flight."""
        if self.rule == "reference":
            group = {g: in_flight * self.kept_bytes(g) + self.transient_bytes(g) for g in GROUPS}
            return max(group["dp"], group["tp"], group["cp"]) + group["ep"]
        return self.transient_bytes() + in_flight * self.kept_bytes()

    def split(self, many: int) -> tuple[float, float, float]:
        """(one, per micro-batch, once): `_ppb.py` `_dynamic_mem`'s linear split, exact at 1 and at *many* in flight."""
        one, more = self.at(1), self.at(many)
        per_micro_batch = (more - one) / (many - 1)
        return one, per_micro_batch, one - per_micro_batch
