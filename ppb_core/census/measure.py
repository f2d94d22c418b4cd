"""The torch side of the census: build one layer of each kind with `transformers`, run it, record what it keeps.

Everything that imports torch or transformers lives here, and imports them only when called.

One measurement of a layer at one shape (micro-batch size × sequence length) runs its forward
twice on the CPU, in the config's dtype, in training mode:

1. **Recorded.** A `TorchDispatchMode` logs every aten op (what it read, allocated and wrote,
   inside which modules, with which parameter) while `saved_tensors_hooks` log every tensor
   autograd saves. Storages are told apart by address, and all of them are held until the
   forward ends so no address is reused. The result is a `LayerGraph` for
   `ppb_core.census.attribution`: unique storages, parameters and what the model hands every
   layer (rotary cos/sin, the mask) excluded, the layer's input counted once.
2. **Allocated.** The same forward, then the backward of the layer's input
   (`torch.autograd.grad`, so no weight gradient is formed: frameworks accumulate those into
   their gradient buffers), under the profiler's memory events: what stays allocated when the
   forward ends (a check on the recorded census), and the most the backward holds at once
   (the working set), counting the layer's input and the output's gradient it is handed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ppb_core.census.attribution import EXTERNAL, INPUT, OP, PARAM, LayerGraph, OpRecord, StorageRecord
from ppb_core.census.fit import KindMeasurement, assemble_kind
from ppb_core.census.record import Census
from ppb_core.config.hf import spec_from_hf
from ppb_core.errors import InputError
from ppb_core.io import silenced
from ppb_core.model.kinds import body_kind, kind_to_dict

TORCH_MISSING = "ppb census needs PyTorch and transformers: pip install 'ppb[torch]'"

# Architectures whose decoder layers the census builds (gpt2's block has another calling convention).
CENSUS_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v3",
)
# The config field that holds the routed expert count, per architecture.
EXPERT_FIELDS: dict[str, str] = {
    "mixtral": "num_local_experts",
    "qwen2_moe": "num_experts",
    "qwen3_moe": "num_experts",
    "deepseek_v3": "n_routed_experts",
}
DTYPES: dict[str, str] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
ATTENTIONS: tuple[str, ...] = ("eager", "sdpa")
EXPERT_IMPLEMENTATIONS: tuple[str, ...] = ("eager", "grouped_mm", "batched_mm")


def require_torch() -> Any:
    """torch, or an InputError saying how to install it."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise InputError(None, None, TORCH_MISSING) from None
    return torch


@dataclass(frozen=True)
class Shape:
    """One micro-batch: *batch* sequences of *seq* tokens."""

    batch: int
    seq: int

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


@dataclass(frozen=True)
class LayerSetup:
    """How to build one layer kind: the HF config (as a dict), which layer, and how to run it."""

    raw: Mapping[str, Any]
    layer_index: int
    attention: str = "sdpa"
    dtype: str = "bf16"
    experts: int | None = None  # routed experts to build, where fewer than the model's
    experts_implementation: str = "grouped_mm"
    tp: int = 1  # build the layer one tensor-parallel rank runs: heads and FFN widths / tp
    seed: int = 0


@dataclass(frozen=True)
class Working:
    """What one forward and backward hold, tensor by tensor (unique storages, parameters excluded), bytes.

    *trace* is what the backward holds after each of its ops (named in *trace_ops*), the
    layer's input and the output's gradient included; its largest value is *held_bytes*.
    """

    kept_bytes: int  # saved for the backward when the forward ends, the layer's input excluded
    held_bytes: int  # the most the backward holds at once: what is still kept, the gradients and
    # temporaries it made, the layer's input and the output's gradient it is handed
    trace: tuple[int, ...] = ()
    trace_ops: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measured:
    shape: Shape
    experts: int | None
    tp: int
    graph: LayerGraph | None
    working: Working | None
    input_bytes: int


def _modeling(model_type: str) -> Any:
    return importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")


def _class(module: Any, suffix: str) -> Any:
    names = sorted(name for name in dir(module) if name.endswith(suffix) and not name.startswith("_"))
    if not names:
        raise InputError(None, "model_type", f"transformers has no {suffix} for {module.__name__}")
    return getattr(module, min(names, key=len))


def hf_config(setup: LayerSetup) -> Any:
    """The transformers config of *setup*, with the attention and expert implementations set."""
    from transformers import AutoConfig

    raw = dict(setup.raw)
    model_type = raw.get("model_type")
    if model_type not in CENSUS_MODEL_TYPES:
        raise InputError(None, "model_type", f"{model_type!r}: the census builds {', '.join(CENSUS_MODEL_TYPES)}")
    raw.pop("architectures", None)
    raw.pop("transformers_version", None)
    if setup.experts is not None:
        raw[EXPERT_FIELDS[model_type]] = setup.experts
    if setup.tp > 1:
        raw.update(_tp_rank_widths(raw, setup.tp))
    config = AutoConfig.for_model(**raw)
    config._attn_implementation = setup.attention
    config._experts_implementation = setup.experts_implementation
    config.use_cache = False
    return config


def _tp_rank_widths(raw: Mapping[str, Any], tp: int) -> dict[str, Any]:
    """The widths one tensor-parallel rank runs: heads and FFN widths divided by *tp*, the hidden size whole."""
    hidden = raw["hidden_size"]
    heads = raw["num_attention_heads"]
    changed: dict[str, Any] = {"num_attention_heads": heads // tp}
    if raw.get("model_type") != "deepseek_v3" and not raw.get("head_dim"):
        changed["head_dim"] = hidden // heads
    kv = raw.get("num_key_value_heads") or heads
    changed["num_key_value_heads"] = max(1, kv // tp)
    for name in ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"):
        if raw.get(name):
            changed[name] = raw[name] // tp
    return changed


def _init_parameters(torch: Any, layer: Any, seed: int) -> None:
    """Matrices drawn from N(0, 0.02²) with a fixed seed (routers included, so routing spreads), vectors as built."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in layer.parameters():
            if param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype).mul_(0.02))


def build_layer(setup: LayerSetup) -> tuple[Any, Any, Any]:
    """(layer, rotary embedding, config) of *setup*, in its dtype, in training mode, on the CPU."""
    torch = require_torch()
    config = hf_config(setup)
    modeling = _modeling(config.model_type)
    dtype = getattr(torch, DTYPES[setup.dtype])
    # Built in the dtype as a loaded model is: what the modeling code pins to fp32 (DeepSeek's
    # router) stays fp32.
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        layer = _class(modeling, "DecoderLayer")(config, setup.layer_index)
    finally:
        torch.set_default_dtype(before)
    _init_parameters(torch, layer, setup.seed)
    layer.train()
    rotary = _class(modeling, "RotaryEmbedding")(config)
    return layer, rotary, config


@dataclass
class LayerInputs:
    """What the model hands the layer: hidden states, and what it computes once for all layers."""

    hidden: Any
    kwargs: dict[str, Any]

    def external(self) -> list[Any]:
        found = []
        for value in self.kwargs.values():
            if isinstance(value, tuple):
                found.extend(value)
            elif value is not None:
                found.append(value)
        return found


def _inputs(torch: Any, layer: Any, rotary: Any, config: Any, shape: Shape, dtype: Any, seed: int) -> LayerInputs:
    from transformers.masking_utils import create_causal_mask

    generator = torch.Generator().manual_seed(seed + 1)
    hidden = torch.randn(shape.batch, shape.seq, config.hidden_size, generator=generator, dtype=torch.float32)
    hidden = hidden.to(dtype).requires_grad_(True)
    position_ids = torch.arange(shape.seq).unsqueeze(0)
    with torch.no_grad():
        cos, sin = rotary(hidden, position_ids)
        mask = create_causal_mask(
            config=config, inputs_embeds=hidden.detach(), attention_mask=None, cache=None, position_ids=position_ids
        )
    return LayerInputs(
        hidden, {"attention_mask": mask, "position_ids": position_ids, "position_embeddings": (cos, sin)}
    )


def _forward(layer: Any, inputs: LayerInputs) -> Any:
    out = layer(inputs.hidden, **inputs.kwargs)
    return out[0] if isinstance(out, tuple) else out


def _storage(tensor: Any) -> Any:
    return tensor.untyped_storage()


class _Graph:
    """Collects a `LayerGraph` while the layer runs; holds every storage it sees so none is reused."""

    def __init__(self, layer: Any, inputs: LayerInputs) -> None:
        self.ops: list[OpRecord] = []
        self.storages: dict[int, StorageRecord] = {}
        self.saved: dict[int, list[int]] = {}
        self.sid_of_ptr: dict[int, int] = {}
        self.hold: list[Any] = []
        self.stack: list[tuple[str, str]] = []
        self.param_of_ptr: dict[int, str] = {}
        self.made: set[int] = set()  # storages an op of the layer allocated
        for name, param in layer.named_parameters():
            self.param_of_ptr[_storage(param).data_ptr()] = name
            self.register(param, PARAM)
        for buffer in layer.buffers():
            self.register(buffer, EXTERNAL)
        for tensor in inputs.external():
            self.register(tensor, EXTERNAL)
        self.input_sid = self.register(inputs.hidden, INPUT)

    def register(self, tensor: Any, origin: str) -> int:
        storage = _storage(tensor)
        ptr = storage.data_ptr()
        if ptr in self.sid_of_ptr:
            return self.sid_of_ptr[ptr]
        sid = len(self.storages)
        self.sid_of_ptr[ptr] = sid
        self.storages[sid] = StorageRecord(
            sid, storage.nbytes(), origin, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)
        )
        self.hold.append(storage)
        return sid

    def known(self, tensor: Any) -> int | None:
        storage = _storage(tensor)
        if storage.nbytes() == 0:
            return None
        return self.sid_of_ptr.get(storage.data_ptr())

    def graph(self) -> LayerGraph:
        return LayerGraph(self.ops, self.storages, self.saved, self.input_sid)


def _tensors(torch: Any, value: Any) -> Iterator[Any]:
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves(value):
        if isinstance(leaf, torch.Tensor):
            yield leaf


def _written(torch: Any, func: Any, args: tuple, kwargs: dict) -> Iterator[Any]:
    """The tensors *func* writes in place (its schema's mutable arguments)."""
    for position, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[position] if position < len(args) else kwargs.get(argument.name)
        yield from _tensors(torch, value)


def _matmul_flops(name: str, args: tuple[Any, ...]) -> float:
    shapes = [tuple(a.shape) for a in args if hasattr(a, "shape") and len(a.shape) >= 2]
    if name in ("mm", "addmm") and len(shapes) >= 2:
        (m, k), (_, n) = shapes[-2], shapes[-1]
        return 2.0 * m * k * n
    if name in ("bmm", "baddbmm") and len(shapes) >= 2:
        (b, m, k), (_, _, n) = shapes[-2][-3:], shapes[-1][-3:]
        return 2.0 * b * m * k * n
    return 0.0


def _recorder(graph: _Graph) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.overloadpacket.__name__
            inputs: list[int] = []
            param = None
            for tensor in _tensors(torch, (args, kwargs)):
                sid = graph.known(tensor)
                if sid is None:
                    if _storage(tensor).nbytes() == 0:
                        continue
                    sid = graph.register(tensor, EXTERNAL)
                if graph.storages[sid].origin == PARAM and param is None:
                    param = graph.param_of_ptr.get(_storage(tensor).data_ptr())
                if sid not in inputs:
                    inputs.append(sid)
            # What an op makes from parameters and constants alone (a cast of a weight, a mask built
            # from the sequence length) is not an activation: it does not grow with the tokens.
            made_of_activations = any(graph.storages[sid].origin in (OP, INPUT) for sid in inputs)
            written: list[int] = []
            for tensor in _written(torch, func, args, kwargs):
                sid = graph.known(tensor)
                if sid is not None and sid not in written:
                    written.append(sid)
                    if made_of_activations and graph.storages[sid].origin == EXTERNAL and sid in graph.made:
                        graph.storages[sid] = dataclasses.replace(graph.storages[sid], origin=OP)
            created: list[int] = []
            for tensor in _tensors(torch, out):
                if _storage(tensor).nbytes() == 0 or graph.known(tensor) is not None:
                    continue
                created.append(graph.register(tensor, OP if made_of_activations else EXTERNAL))
                graph.made.add(created[-1])
            graph.ops.append(
                OpRecord(
                    index=len(graph.ops),
                    func=name,
                    modules=tuple(graph.stack),
                    inputs=tuple(inputs),
                    created=tuple(created),
                    written=tuple(written),
                    param=param,
                    flops=_matmul_flops(name, args) if param is not None else 0.0,
                )
            )
            return out

    return Recorder()


@contextlib.contextmanager
def _module_stack(layer: Any, stack: list[tuple[str, str]]) -> Iterator[None]:
    handles = []

    def enter(path: str, cls: str) -> Any:
        def hook(module: Any, args: Any) -> None:
            stack.append((path, cls))

        return hook

    def leave(module: Any, args: Any, output: Any) -> None:
        stack.pop()

    for path, module in layer.named_modules():
        handles.append(module.register_forward_pre_hook(enter(path, type(module).__name__)))
        handles.append(module.register_forward_hook(leave, always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class _Saved:
    """What a pack hook hands autograd: autograd drops it when the node that saved it goes."""

    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


def record_forward(layer: Any, rotary: Any, config: Any, shape: Shape, dtype: str, seed: int = 0) -> LayerGraph:
    """The graph of one forward of *layer* at *shape*: ops, storages, and what autograd keeps.

    A tensor saved by a branch of the graph nobody differentiates through (the router's group
    scores, once their indices are taken) is dropped with the branch when the forward ends, so
    only what is still saved then counts.
    """
    torch = require_torch()
    return record_inputs(layer, _inputs(torch, layer, rotary, config, shape, getattr(torch, DTYPES[dtype]), seed))


def record_inputs(layer: Any, inputs: LayerInputs) -> LayerGraph:
    """The graph of one forward of *layer* on *inputs* (`record_forward` for any block and its own inputs)."""
    torch = require_torch()
    collected = _Graph(layer, inputs)
    holders: dict[int, list[Any]] = {}

    def pack(tensor: Any) -> Any:
        holder = _Saved(tensor)
        if _storage(tensor).nbytes():
            sid = collected.known(tensor)
            if sid is None:
                sid = collected.register(tensor, OP)
            collected.saved.setdefault(sid, []).append(len(collected.ops) - 1)
            holders.setdefault(sid, []).append(weakref.ref(holder))
        return holder

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, _unpack)
    with _module_stack(layer, collected.stack), hooks, _recorder(collected):
        output = _forward(layer, inputs)
    for sid, refs in holders.items():
        if all(ref() is None for ref in refs):
            del collected.saved[sid]
    del output
    graph = collected.graph()
    collected.hold.clear()
    return graph


def _unpack(holder: Any) -> Any:
    return holder.tensor


class _Live:
    """Bytes of the storages being tracked that are still alive, and the most there were at once."""

    def __init__(self) -> None:
        self.bytes = 0
        self.most = 0
        self.refs: dict[int, Any] = {}

    def track(self, storage: Any) -> None:
        ptr, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or ptr in self.refs:
            return
        self.bytes += size
        self.most = max(self.most, self.bytes)
        self.refs[ptr] = weakref.ref(storage, lambda _, ptr=ptr, size=size: self._freed(ptr, size))

    def _freed(self, ptr: int, size: int) -> None:
        self.bytes -= size
        self.refs.pop(ptr, None)


class _Trace:
    """Whether the backward runs yet, and what it holds after each op."""

    def __init__(self) -> None:
        self.backward = False
        self.ops: list[str] = []
        self.held: list[int] = []


def _tracker(live: _Live, fixed: set[int], activations: dict[int, bool], trace: _Trace) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Tracker(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            made = any(activations.get(_storage(t).data_ptr(), False) for t in _tensors(torch, (args, kwargs)))
            if made:
                for tensor in _written(torch, func, args, kwargs):
                    if _storage(tensor).data_ptr() not in fixed:
                        activations[_storage(tensor).data_ptr()] = True
            for tensor in _tensors(torch, out):
                storage = _storage(tensor)
                ptr = storage.data_ptr()
                if ptr in fixed or ptr in live.refs:
                    continue
                activations[ptr] = made
                if trace.backward:
                    live.track(storage)
            if trace.backward:
                trace.ops.append(func.overloadpacket.__name__)
                trace.held.append(live.bytes)
            return out

    return Tracker()


def working_set(layer: Any, rotary: Any, config: Any, shape: Shape, dtype: str, seed: int = 0) -> Working:
    """What one forward keeps and the most the backward of the layer's input holds, tensor by tensor.

    The backward runs as `torch.autograd.grad` of the input, so it forms no weight gradient
    (frameworks accumulate those into their gradient buffers, which are not activations).
    """
    torch = require_torch()
    return working_set_inputs(layer, _inputs(torch, layer, rotary, config, shape, getattr(torch, DTYPES[dtype]), seed))


def working_set_inputs(layer: Any, inputs: LayerInputs) -> Working:
    """`working_set` of *layer* on *inputs* (any block and its own inputs)."""
    torch = require_torch()
    hidden = inputs.hidden
    fixed = {_storage(t).data_ptr() for t in (*layer.parameters(), *layer.buffers(), *inputs.external(), hidden)}
    activations: dict[int, bool] = {_storage(hidden).data_ptr(): True}
    live = _Live()
    trace = _Trace()

    def pack(tensor: Any) -> Any:
        storage = _storage(tensor)
        if storage.data_ptr() not in fixed and activations.get(storage.data_ptr(), False):
            live.track(storage)
        return _Saved(tensor)

    with torch.autograd.graph.saved_tensors_hooks(pack, _unpack), _tracker(live, fixed, activations, trace):
        output = _forward(layer, inputs)
    kept = live.bytes
    output_grad = torch.ones_like(output)
    live.most = live.bytes
    trace.backward = True
    with _tracker(live, fixed | {_storage(output).data_ptr(), _storage(output_grad).data_ptr()}, activations, trace):
        (input_grad,) = torch.autograd.grad(output, hidden, output_grad)
    handed = _storage(hidden).nbytes() + _storage(output_grad).nbytes()
    del input_grad, output
    return Working(
        kept_bytes=kept,
        held_bytes=live.most + handed,
        trace=(kept + handed, *(held + handed for held in trace.held)),
        trace_ops=("start", *trace.ops),
    )


def _allocations(prof: Any) -> list[tuple[int, int]]:
    """(time ns, bytes; negative when freed) of every CPU allocation event the profiler saw."""
    from torch._C._profiler import _EventType

    events: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            events.append((node.start_time_ns, int(node.typed[1].alloc_size)))
        stack.extend(node.children)
    events.sort(key=lambda event: event[0])
    return events


def _ranges(prof: Any, names: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.name in names:
            found[node.name] = (node.start_time_ns, node.end_time_ns)
        stack.extend(node.children)
    return found


def allocator_kept_bytes(layer: Any, rotary: Any, config: Any, shape: Shape, dtype: str, seed: int = 0) -> int:
    """What the CPU allocator still holds when one forward ends, the output excluded: a check on the census."""
    torch = require_torch()
    from torch.profiler import ProfilerActivity, profile, record_function

    inputs = _inputs(torch, layer, rotary, config, shape, getattr(torch, DTYPES[dtype]), seed)
    with (
        silenced(2),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        record_function("ppb.census.forward"),
    ):
        output = _forward(layer, inputs)
    output_bytes = _storage(output).nbytes()
    del output
    end = _ranges(prof, ("ppb.census.forward",))["ppb.census.forward"][1]
    return sum(size for time_ns, size in _allocations(prof) if time_ns <= end) - output_bytes


def measure(setup: LayerSetup, shapes: list[Shape], graphs: bool = True, working: bool = True) -> list[Measured]:
    """Build the layer of *setup* once and measure it at each of *shapes*."""
    torch = require_torch()
    torch.manual_seed(setup.seed)
    layer, rotary, config = build_layer(setup)
    results = []
    for shape in shapes:
        graph = record_forward(layer, rotary, config, shape, setup.dtype, setup.seed) if graphs else None
        held = working_set(layer, rotary, config, shape, setup.dtype, setup.seed) if working else None
        input_bytes = shape.tokens * config.hidden_size * getattr(torch, DTYPES[setup.dtype]).itemsize
        results.append(Measured(shape, setup.experts, setup.tp, graph, held, input_bytes))
    return results


# ---------------------------------------------------------------------------------------------
# A census of every body kind of a model.


def valid_expert_count(raw: Mapping[str, Any], experts: int) -> bool:
    """Whether routing works with *experts* routed experts: top-k fits, and DeepSeek's groups do."""
    top_k = int(raw.get("num_experts_per_tok") or 1)
    if experts < max(top_k, 2):
        return False
    if raw.get("model_type") == "deepseek_v3":
        groups = int(raw.get("n_group") or 1)
        kept_groups = int(raw.get("topk_group") or 1)
        if experts % groups or experts // groups < 2 or kept_groups * (experts // groups) < top_k:
            return False
    return True


def expert_counts(raw: Mapping[str, Any], cap: int) -> tuple[int, ...]:
    """The routed expert counts to build: the model's if at most *cap*, else the two smallest valid
    counts, a count and its double, from which the census scales to the model's."""
    model = int(raw.get(EXPERT_FIELDS.get(str(raw.get("model_type")), ""), 0) or 0)
    if model <= cap:
        return (model,)
    small = next(
        (n for n in range(2, model + 1) if valid_expert_count(raw, n) and valid_expert_count(raw, 2 * n)), None
    )
    if small is None or 2 * small >= model:
        return (model,)
    return (small, 2 * small)


def _splittable(raw: Mapping[str, Any], tp: int) -> bool:
    """Whether one tensor-parallel rank's share of the layer divides evenly by *tp*."""
    heads = int(raw["num_attention_heads"])
    kv = int(raw.get("num_key_value_heads") or heads)
    names = ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size")
    widths = [raw.get(name) for name in names]
    # A rank left one key/value head shared by several query heads broadcasts it where a rank with
    # more copies it (HF's repeat_kv), so its share would not be the layer's divided by tp.
    shared_single = kv // tp == 1 and heads != kv
    return not heads % tp and not kv % tp and not shared_single and all(not w or not int(w) % tp for w in widths)


def census_dtype(raw: dict[str, Any], dtype: str | None = None) -> str:
    """The dtype a census measures in: *dtype* as given, else the config's `torch_dtype`, else bf16."""
    return dtype or {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(
        str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"), "bf16"
    )


def census(
    raw: Mapping[str, Any],
    *,
    attention: str = "sdpa",
    shapes: Sequence[Shape] = (Shape(1, 128), Shape(1, 256), Shape(1, 512)),
    dtype: str | None = None,
    experts: Sequence[int] | None = None,
    experts_cap: int = 16,
    experts_implementation: str = "grouped_mm",
    split_working: bool = True,
    dropout: float | None = None,
    source: str = "",
    seed: int = 0,
    progress: Any = None,
) -> Census:
    """Measure every distinct body kind of the model *raw* (a HuggingFace config.json, parsed).

    *shapes* need two sequence lengths at least. *dropout* replaces the model's rates (a run
    config's `training.dropout`), in the layers built and in the kinds recorded. MoE kinds with more routed experts than
    *experts_cap* are built with fewer (*experts*, or a count and its double) and the census
    scales them to the model's: the router's tensors grow with the experts, the experts' own
    with the tokens times top-k alone.
    """
    torch = require_torch()
    import transformers

    if attention not in ATTENTIONS:
        raise InputError(source or None, "attention", f"{attention!r} is not one of {', '.join(ATTENTIONS)}")
    if len({shape.seq for shape in shapes}) < 2:
        raise InputError(
            source or None,
            "seq",
            "measure at two sequence lengths at least, to fit the term that grows with the sequence",
        )
    if dropout is not None:
        raw = {**raw, "attention_dropout": dropout}
    spec = spec_from_hf(raw, source or "config.json")
    if raw.get("model_type") not in CENSUS_MODEL_TYPES:
        raise InputError(
            source or None,
            "model_type",
            f"{raw.get('model_type')!r}: the census builds {', '.join(CENSUS_MODEL_TYPES)}",
        )
    dtype = census_dtype(raw, dtype)
    first_index: dict[Any, int] = {}
    for index in range(spec.num_layers):
        first_index.setdefault(body_kind(spec, index, dropout), index)
    kinds = []
    for kind, index in first_index.items():
        counts: tuple[int, ...] = (0,)
        scaling = None
        if kind.is_moe:
            counts = tuple(experts) if experts else expert_counts(raw, experts_cap)
            model = kind.mlp.num_experts  # type: ignore[union-attr]
            bad = [n for n in counts if not valid_expert_count(raw, n)]
            if bad:
                raise InputError(source or None, "experts", f"cannot route with {bad[0]} experts")
            scaling = {
                "model": model,
                "measured": list(counts),
                "scaling": "exact"
                if counts == (model,)
                else "router bytes per token grow linearly with the routed experts (fitted at the counts "
                "measured); the experts' own with the tokens times top-k alone",
            }
        built = [None if n == 0 or n == kind.mlp.num_experts else n for n in counts]  # type: ignore[union-attr]
        measurements: list[KindMeasurement] = []
        for position, n in enumerate(built):
            setup = LayerSetup(raw, index, attention, dtype, n, experts_implementation, 1, seed)
            chosen = list(shapes) if position == 0 else list(shapes[:1])
            if progress:
                built_as = f"{n or counts[0]} routed experts" if kind.is_moe else "dense"
                progress(
                    f"{kind.name}: layer {index}, {built_as}, shapes " + ", ".join(f"{s.batch}x{s.seq}" for s in chosen)
                )
            for m in measure(setup, chosen):
                measurements.append(_kind_measurement(m, counts[position]))
        if split_working and _splittable(raw, 2):
            setup = LayerSetup(raw, index, attention, dtype, built[0], experts_implementation, 2, seed)
            if progress:
                progress(f"{kind.name}: one tensor-parallel rank's share (tp 2)")
            for m in measure(setup, list(shapes[:2]), graphs=False):
                measurements.append(_kind_measurement(m, counts[0]))
        kinds.append(assemble_kind(kind.name, kind_to_dict(kind), index, measurements, scaling))
    return Census(
        kinds=tuple(kinds),
        model_type=str(raw["model_type"]),
        attention=attention,
        dtype=dtype,
        micro_batch_size=shapes[0].batch,
        source=source,
        experts_implementation=experts_implementation,
        shapes=tuple((s.batch, s.seq) for s in shapes),
        versions={"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__},
    )


def _kind_measurement(m: Measured, experts: int) -> Any:
    return KindMeasurement(
        batch=m.shape.batch,
        seq=m.shape.seq,
        experts=experts,
        tp=m.tp,
        graph=m.graph,
        kept_bytes=m.working.kept_bytes if m.working else None,
        held_bytes=m.working.held_bytes if m.working else None,
        trace=m.working.trace if m.working else (),
        trace_ops=m.working.trace_ops if m.working else (),
    )
