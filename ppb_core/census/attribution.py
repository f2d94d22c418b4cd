"""Who made each kept tensor: the op and recompute switch (`SWITCHES`) it belongs to, and its tensor-parallel side.

A measurement (`ppb_core.census.measure`) records one forward of a layer as a graph of ops over
storages: what each op read, allocated and wrote in place, inside which modules, and which
storages autograd saved. This module reads that graph, torch-free:

* **Switches.** Each op gets the switch whose 0 recomputes it: ops inside a norm module are
  `normOp`; in an MLP or expert block, the ops between an up-projection and the
  down-projection (the activation and its gating product) are `ffAct`; in an attention block,
  the ops that build the attention core's queries, keys and values (rotary, GQA copies, MLA key
  assembly) and the core kernels themselves are `attBMM`, the scores up to the softmax and the
  softmax are `softmax`, the casts of the probabilities `headCast` and their dropout
  `dropout`; MLA's up-projections (`q_b_proj`, `kv_b_proj`) are `attUp`. Projections, the
  router, token dispatch, residual adds and the attention output are kept under every switch.
* **Sides.** A storage is on the TP side (every tensor-parallel rank keeps 1/t of it) when it
  is made from a column-parallel projection's output before a row-parallel projection reduces
  it (heads, the FFN's intermediate width); otherwise it is on the whole side (the hidden
  width, which sequence parallelism splits instead).
* **Kept sets.** Recomputing a set of switches drops every saved storage those ops wrote, and
  keeps every input the recomputed ops need that nothing recomputed rebuilds (the residual
  stream before a recomputed norm, the projection outputs before recomputed rotary). The layer's
  input is always kept once; full recompute keeps only it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ppb_core.model.switches import SWITCHES

# Leaf module (or parameter) names of the projections a tensor-parallel layer splits by columns
# (output features: heads, FFN width) and by rows (input features, reduced after).
COLUMN_PARALLEL: frozenset[str] = frozenset(
    {
        "q_proj",
        "k_proj",
        "v_proj",
        "qkv_proj",
        "q_b_proj",
        "kv_b_proj",
        "gate_proj",
        "up_proj",
        "gate_up_proj",
        "c_attn",
        "c_fc",
        "w1",
        "w3",
        "qkv",  # vision towers: Qwen's fused projection, CLIP's and SigLIP's fc1
        "fc1",
    }
)
ROW_PARALLEL: frozenset[str] = frozenset({"o_proj", "down_proj", "c_proj", "w2", "dense", "proj", "out_proj", "fc2"})
# MLA's up-projections: the heads attUp rebuilds from the latents.
UP_PROJECTIONS: frozenset[str] = frozenset({"q_b_proj", "kv_b_proj"})

MATMULS: frozenset[str] = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_grouped_mm"})
SOFTMAXES: frozenset[str] = frozenset({"_softmax", "softmax", "_safe_softmax"})
DROPOUTS: frozenset[str] = frozenset({"native_dropout", "dropout", "bernoulli", "bernoulli_"})

# Where a kept storage is priced (`ppb_core.memory.census`): `saved` TP leaves whole (sequence parallelism
# splits it), `saved_tp` TP splits; `routed*` the same for the routed experts, whose tokens
# per rank follow the expert layout rather than the layer's.
BUCKETS: tuple[str, ...] = ("saved", "saved_tp", "routed", "routed_tp")

INPUT, PARAM, EXTERNAL, OP = "input", "param", "external", "op"


@dataclass(frozen=True)
class OpRecord:
    """One aten op of the forward, in program order."""

    index: int
    func: str  # the aten overload's name: "mm", "_softmax", "copy_", ...
    modules: tuple[tuple[str, str], ...]  # (path within the layer, class name), outermost first
    inputs: tuple[int, ...] = ()  # storages it reads
    created: tuple[int, ...] = ()  # storages it allocates
    written: tuple[int, ...] = ()  # storages it writes in place
    param: str | None = None  # the parameter a matmul multiplies by, dotted name within the layer
    flops: float = 0.0

    @property
    def is_matmul(self) -> bool:
        return self.func in MATMULS

    @property
    def is_param_matmul(self) -> bool:
        return self.is_matmul and self.param is not None

    @property
    def outputs(self) -> tuple[int, ...]:
        return self.created + self.written


@dataclass(frozen=True)
class StorageRecord:
    sid: int
    nbytes: int
    origin: str  # INPUT | PARAM | EXTERNAL | OP
    dtype: str = ""
    shape: tuple[int, ...] = ()


@dataclass
class LayerGraph:
    """One forward of one layer: its ops, the storages they touched and which of them autograd saved."""

    ops: list[OpRecord]
    storages: dict[int, StorageRecord]
    saved: dict[int, list[int]]  # storage id -> the ops that saved it
    input_sid: int

    def writers(self) -> dict[int, list[int]]:
        """Every storage made in the layer, with the ops that allocated or wrote it."""
        table: dict[int, list[int]] = {}
        for op in self.ops:
            for sid in op.outputs:
                table.setdefault(sid, []).append(op.index)
        return table


@dataclass(frozen=True)
class Role:
    """What an op is to the recompute switches and to tensor parallelism."""

    switch: str | None
    routed: bool  # inside the routed experts


@dataclass
class Attribution:
    roles: dict[int, Role]  # op index -> role
    sides: dict[int, str]  # storage id -> "tp" | "whole"
    buckets: dict[int, str]  # storage id -> one of BUCKETS
    parts: dict[int, tuple[str, str | None]] = field(default_factory=dict)  # storage -> (part, switch)

    def acting(self) -> tuple[str, ...]:
        """The switches some op of the layer answers to, in `SWITCHES` order."""
        named = {role.switch for role in self.roles.values() if role.switch}
        return tuple(name for name in SWITCHES if name in named)


def _leaf(param: str) -> str:
    """`self_attn.q_proj.weight` -> `q_proj`; `mlp.experts.gate_up_proj` -> `gate_up_proj`."""
    parts = param.split(".")
    if len(parts) >= 2 and parts[-1] in ("weight", "bias"):
        return parts[-2]
    return parts[-1]


def _is_norm(cls: str) -> bool:
    return "Norm" in cls and ("RMS" in cls or "Layer" in cls)


def _block(op: OpRecord) -> tuple[str, str] | None:
    """The innermost attention, MLP, expert or router module the op runs in, as (kind, path)."""
    for path, cls in reversed(op.modules):
        if cls.endswith("Attention"):
            return "attention", path
        if "Router" in cls:
            return "router", path
        if cls.endswith("Experts"):
            return "experts", path
        if cls.endswith(("MLP", "Mlp", "Expert")):  # Qwen2-VL's vision MLP is VisionMlp
            return "mlp", path
    return None


def _in_norm(op: OpRecord) -> bool:
    return any(_is_norm(cls) for _, cls in op.modules)


def _routed(op: OpRecord) -> bool:
    return any(cls.endswith("Experts") for _, cls in op.modules)


def _attention_roles(ops: list[OpRecord], writers: Mapping[int, list[int]], own: set[int]) -> dict[int, str | None]:
    """Switches of one attention block's *own* ops (neither projections nor norms)."""
    roles: dict[int, str | None] = {}
    scores: set[int] = set()  # storages made from QKᵀ
    probs: set[int] = set()  # storages made from the softmax's output
    core_inputs: set[int] = set()
    for op in ops:
        if op.index not in own:
            continue
        reads = set(op.inputs)
        if "scaled_dot_product" in op.func or "flash_attention" in op.func:
            roles[op.index] = "attBMM"
            core_inputs |= reads
        elif op.is_matmul:
            if reads & scores:  # probabilities times values
                roles[op.index] = "attBMM"
                core_inputs |= reads - scores - probs
            else:  # queries times keys
                roles[op.index] = "softmax"
                core_inputs |= reads
                scores.update(op.outputs)
        elif reads & probs:
            roles[op.index] = "dropout" if op.func in DROPOUTS else "headCast"
            scores.update(op.outputs)
            probs.update(op.outputs)
        elif reads & scores:
            roles[op.index] = "softmax"
            scores.update(op.outputs)
            if op.func in SOFTMAXES:
                probs.update(op.outputs)
    # What builds the core's queries, keys and values (rotary, GQA copies, MLA's key assembly).
    inputs = {op.index: op.inputs for op in ops if op.index in own}
    starts = [sid for sid in core_inputs if sid not in scores]
    for index in _upstream(starts, writers, inputs, stop=set(roles)):
        roles[index] = "attBMM"
    for index in inputs:
        roles.setdefault(index, None)
    return roles


def _upstream(
    starts: list[int], writers: Mapping[int, list[int]], inputs: Mapping[int, Sequence[int]], stop: set[int]
) -> set[int]:
    """The ops among *inputs* that the storages *starts* are made from, directly or through other
    such ops, walking back from writer to inputs; ops in *stop* are neither taken nor passed."""
    reached: set[int] = set()
    stack = list(starts)
    seen: set[int] = set()
    while stack:
        sid = stack.pop()
        if sid in seen:
            continue
        seen.add(sid)
        for index in writers.get(sid, ()):
            if index in inputs and index not in stop and index not in reached:
                reached.add(index)
                stack.extend(inputs[index])
    return reached


def _ffn_roles(ops: list[OpRecord], writers: Mapping[int, list[int]], own: set[int]) -> dict[int, str | None]:
    """ffAct for the *own* ops between an up-projection's output and the down-projection's input."""
    after_up: set[int] = set()
    below: set[int] = set()
    inputs = {op.index: op.inputs for op in ops if op.index in own}
    for op in ops:
        if op.is_param_matmul:
            if _leaf(op.param or "") in COLUMN_PARALLEL:
                after_up.update(op.outputs)
        elif op.index in own and set(op.inputs) & after_up:
            below.add(op.index)
            after_up.update(op.outputs)
    starts = [sid for op in ops if op.is_param_matmul and _leaf(op.param or "") in ROW_PARALLEL for sid in op.inputs]
    feeding = _upstream(starts, writers, inputs, stop=set())
    return {index: ("ffAct" if index in below and index in feeding else None) for index in inputs}


def attribute(graph: LayerGraph) -> Attribution:
    """Roles of every op, and the side and bucket of every storage the layer made."""
    writers = graph.writers()
    by_index = {op.index: op for op in graph.ops}
    switch: dict[int, str | None] = {}
    blocks: dict[tuple[str, str], list[OpRecord]] = {}
    own: set[int] = set()  # ops a block's rules decide
    for op in graph.ops:
        block = _block(op)
        if block is not None and block[0] != "router":
            blocks.setdefault(block, []).append(op)
        if _in_norm(op):
            switch[op.index] = "normOp"
        elif op.is_param_matmul:
            switch[op.index] = "attUp" if _leaf(op.param or "") in UP_PROJECTIONS else None
        elif block is None or block[0] == "router":
            switch[op.index] = None
        else:
            own.add(op.index)
    for (kind, _), ops in blocks.items():
        decided = _attention_roles(ops, writers, own) if kind == "attention" else _ffn_roles(ops, writers, own)
        switch.update({index: role for index, role in decided.items() if index in own})
    roles = {op.index: Role(switch.get(op.index), _routed(op)) for op in graph.ops}

    sides: dict[int, str] = {graph.input_sid: "whole"}
    for op in graph.ops:
        if op.is_param_matmul:
            side = "tp" if _leaf(op.param or "") in COLUMN_PARALLEL else "whole"
        else:
            side = "tp" if any(sides.get(sid) == "tp" for sid in op.inputs) else "whole"
        for sid in op.created:
            sides[sid] = side
        for sid in op.written:
            if side == "tp" or sid not in sides:
                sides[sid] = side
    buckets: dict[int, str] = {}
    parts: dict[int, tuple[str, str | None]] = {}
    for sid, indices in writers.items():
        first = by_index[indices[0]]
        routed = any(roles[index].routed for index in indices)
        tp = sides.get(sid) == "tp"
        buckets[sid] = ("routed" if routed else "saved") + ("_tp" if tp else "")
        path = next((p for p, _ in reversed(first.modules) if p), "") or "layer"
        named = next((roles[index].switch for index in indices if roles[index].switch), None)
        parts[sid] = (f"{path}:{first.func}", named)
    buckets[graph.input_sid] = "saved"
    parts[graph.input_sid] = ("input", None)
    return Attribution(roles, sides, buckets, parts)


def kept_storages(graph: LayerGraph, attribution: Attribution, recompute: Iterable[str] | None) -> set[int]:
    """The storages the layer keeps for its backward when *recompute* names the switches at 0.

    None is full recompute: the layer's input alone.
    """
    if recompute is None:
        return {graph.input_sid}
    names = set(recompute)
    rerun = [op for op in graph.ops if attribution.roles[op.index].switch in names]
    rebuilt = {sid for op in rerun for sid in op.outputs}
    kept = {sid for sid in graph.saved if sid not in rebuilt}
    for op in rerun:
        kept.update(sid for sid in op.inputs if sid not in rebuilt)
    kept.add(graph.input_sid)
    return {sid for sid in kept if graph.storages[sid].origin in (OP, INPUT)}


def bucket_bytes(graph: LayerGraph, attribution: Attribution, sids: Iterable[int]) -> dict[str, int]:
    """Bytes of *sids* per bucket."""
    totals = dict.fromkeys(BUCKETS, 0)
    for sid in sids:
        totals[attribution.buckets[sid]] += graph.storages[sid].nbytes
    return totals


PartKey = tuple[str, str | None, str]  # (part, switch, bucket)


def part_bytes(graph: LayerGraph, attribution: Attribution, sids: Iterable[int]) -> dict[PartKey, int]:
    """Bytes of *sids* per (part, switch, bucket): which module and op made what the layer keeps."""
    totals: dict[PartKey, int] = {}
    for sid in sids:
        part, switch = attribution.parts[sid]
        key = (part, switch, attribution.buckets[sid])
        totals[key] = totals.get(key, 0) + graph.storages[sid].nbytes
    return totals


def recompute_shares(graph: LayerGraph, attribution: Attribution, recompute: Iterable[str]) -> tuple[float, float]:
    """The shares of the attention and the FFN projections' FLOPs a selective setting reruns.

    Projections are rerun only where a switch covers them (attUp on MLA's up-projections).
    """
    names = set(recompute)
    totals = {"attention": 0.0, "ffn": 0.0}
    rerun = {"attention": 0.0, "ffn": 0.0}
    for op in graph.ops:
        if not op.is_param_matmul:
            continue
        block = _block(op)
        family = "attention" if block is not None and block[0] == "attention" else "ffn"
        totals[family] += op.flops
        if attribution.roles[op.index].switch in names:
            rerun[family] += op.flops
    return (
        rerun["attention"] / totals["attention"] if totals["attention"] else 0.0,
        rerun["ffn"] / totals["ffn"] if totals["ffn"] else 0.0,
    )
