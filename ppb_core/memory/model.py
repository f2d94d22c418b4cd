"""`MemoryModel`: the bytes a layer takes on one device, evaluated once per distinct kind and state.

It implements `ppb_core.payload.sources.MemorySource` for the PPB builder and offers the breakdowns
behind each figure (static parts, activations op by op with their switch, buffer terms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ppb_core.config.run import RunConfig
from ppb_core.memory.activations import ActivationFormulas, ActivationTerm, encoder_setup
from ppb_core.memory.buffers import Buffers, BufferTerm, layer_buffers
from ppb_core.memory.calibration import MemoryCorrection, MemoryFit, fit_peaks, read_measured_peaks
from ppb_core.memory.census import census_pricers
from ppb_core.memory.frameworks import rules_for
from ppb_core.memory.frameworks.base import FULL_UNIT
from ppb_core.memory.frameworks.te_fp8 import proj_saves_original
from ppb_core.memory.peak import (
    StagePeak,
    _full_group,
    run_combined_steps,
    run_in_flight,
    run_in_flight_vectors,
    stage_peaks,
)
from ppb_core.memory.precision import cached_buffers, cached_terms
from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import StaticBytes, layer_params
from ppb_core.model.kinds import BodyKind, HeadKind, LayerKind, TailKind, is_head
from ppb_core.model.params import LayerParams
from ppb_core.model.switches import OPTIONS, SWITCHES, LayerType, normalized, option_state
from ppb_core.model.walk import Layer, LayerWalk, model_kinds, walk
from ppb_core.units import MB

BODY_STATES = (LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER)


class LayerLike(Protocol):
    """What the model reads of a layer: a `model.Layer`, or a `model.KindSlot` of the walk."""

    model_name: str
    kind: LayerKind


@dataclass(frozen=True)
class StateMemory:
    """A layer in one state: what it keeps at one micro-batch, and its buffers.

    Where the framework holds workspaces once per stage (`FrameworkRules.transients_per_stage`),
    `buffers` are the kept ones and `transient_bytes` the largest workspace, part of the working set;
    `forward_transient_bytes` the largest a forward alone holds (beside no backward gradient).
    """

    terms: tuple[ActivationTerm, ...]
    activation_bytes: float
    buffers: Buffers
    transient_bytes: float = 0.0
    offloaded_bytes: float = 0.0  # moved to host memory between forward and backward (`offload_split`)
    offloaded_terms: tuple[ActivationTerm, ...] = ()  # the terms moved (their gradients are the backward's)
    forward_transient_bytes: float = 0.0
    # what its forward holds of the moved terms before they leave the device (`FrameworkRules.offload_forward_bytes`)
    offload_forward_bytes: float = 0.0

    @property
    def kept_bytes(self) -> float:
        """Activations and kept buffers of one micro-batch in flight."""
        return self.activation_bytes + self.buffers.kept_bytes()


class MemoryModel:
    """Per-layer memory of a run (hyper-parallel's MemEst formulas, with the departures docs/memory.md states).

    *activations* maps a model name to the object that prices its kinds' activations (the
    census seam); a model whose run config names a `census` file is priced from it
    (`ppb_core.memory.census`), every other model uses `ActivationFormulas`. *buffer_rule* is
    "layered" or "reference" (`ppb_core.memory.buffers`).
    """

    def __init__(
        self,
        run: RunConfig,
        buffer_rule: str = "layered",
        activations: Mapping[str, ActivationFormulas] | None = None,
        correction: MemoryCorrection | None = None,
    ) -> None:
        self.run = run
        self.setup = _with_fsdp_root(run, MemorySetup.from_run(run, buffer_rule))
        self.rules = rules_for(run.framework)
        # memory.calibration: measured stage peaks fitted to per-term factors (ppb_core.memory.calibration)
        self.fit: MemoryFit | None = None
        if correction is None and run.memory.calibration is not None:
            self.fit = run_memory_fit(run)  # the measured peaks against the uncorrected stages
            correction = self.fit.correction
        self.correction = correction or MemoryCorrection()
        self._modules = run.recompute.modules  # the framework's selective units (Megatron modules, op)
        # what a TAIL's MTP layers follow: the selective units, and FULL_UNIT where every layer is
        # fully recomputed ("all", Megatron's uniform or block; not torchtitan's every N-th block)
        full = run.recompute.full in ("all", "uniform", "block")
        self._tail_units = self._modules | ({FULL_UNIT} if full else set())
        self._formulas = ActivationFormulas()
        self._pricers = {**census_pricers(run), **dict(activations or {})}
        self._configured = {name: normalized(run.switches(name)) for name in run.model_names}
        self._params: dict[LayerKind, LayerParams] = {}
        self._body_kinds: frozenset[LayerKind] | None = None
        self._static: dict[LayerKind, StaticBytes] = {}
        self._buffer_terms: dict[LayerKind, tuple] = {}
        self._states: dict[tuple, StateMemory] = {}
        self._proj_original = proj_saves_original(self.setup)  # the output projection's input kept 16-bit

    # --- what a layer is evaluated at ------------------------------------------------------

    def configured_switches(self, model_name: str) -> dict[str, int]:
        """The switches SLCT runs for *model_name*'s layers (every switch, 0 or 1)."""
        return dict(self._configured[model_name])

    def _key(self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None) -> tuple:
        """(model, kind, state, switch states, modules): what a layer's memory depends on.

        A selective setting that is the run's own (SLCT, or BOTH: it and the gathers) carries the
        framework's selective units; any other setting (a switch profile) is ppb's switches alone.
        """
        if not isinstance(layer.kind, BodyKind):
            # HEAD and TAIL have one state; a TAIL's MTP layers follow the run's selective units
            modules = self._tail_units if isinstance(layer.kind, TailKind) else frozenset()
            return (layer.model_name, layer.kind, None, None, modules)
        if state not in BODY_STATES:
            raise ValueError(f"a body layer is evaluated NOT_REC, SEL_REC or FULL_REC, not {state.name}")
        if state is not LayerType.SEL_REC_LAYER:
            return (layer.model_name, layer.kind, state, None, frozenset())
        configured = self._configured[layer.model_name]
        stated = configured if switches is None else normalized(switches)
        own = switches is None or stated in (configured, {**configured, "gather": 0})
        modules = self._modules if own else frozenset()
        return (layer.model_name, layer.kind, state, tuple(stated[name] for name in SWITCHES), modules)

    def option_state(self, layer: LayerLike, option: str) -> tuple[LayerType, dict[str, int] | None]:
        """The state and switches an option (NONE/SLCT/COMM/BOTH/FULL) evaluates *layer* at."""
        if option not in OPTIONS:
            raise ValueError(f"unknown option {option!r}; expected one of {', '.join(OPTIONS)}")
        if not isinstance(layer.kind, BodyKind):
            return (LayerType.EMBEDDING_LAYER if is_head(layer.kind) else LayerType.OUTPUT_LAYER), None
        state, switches = option_state(option, self._configured[layer.model_name])
        return state, (switches if state is LayerType.SEL_REC_LAYER else None)

    # --- static ------------------------------------------------------------------------------

    def parameters(self, layer: LayerLike) -> LayerParams:
        """Elements per tensor-/expert-parallel rank (before data-parallel sharding)."""
        kind = layer.kind
        if kind not in self._params:
            self._params[kind] = layer_params(kind, self.setup)
        return self._params[kind]

    def static_breakdown(self, layer: LayerLike) -> StaticBytes:
        """Parameters, gradients and optimizer states as the run's framework holds and shards them."""
        kind = layer.kind
        if kind not in self._static:
            static = self.rules.static(self.parameters(layer), self.setup, kind)
            module_bytes, idle_bytes = self.rules.module_state_bytes(kind, self.setup)
            if module_bytes or idle_bytes:
                static = dataclasses.replace(static, module_bytes=module_bytes, idle_bytes=idle_bytes)
            factor = self.correction.static
            if factor != 1.0:
                static = dataclasses.replace(
                    static,
                    parameter_bytes=static.parameter_bytes * factor,
                    gradient_bytes=static.gradient_bytes * factor,
                    optimizer_bytes=static.optimizer_bytes * factor,
                    held_through_step_bytes=static.held_through_step_bytes * factor,
                    module_bytes=static.module_bytes * factor,
                    idle_bytes=static.idle_bytes * factor,
                    step_only_bytes=static.step_only_bytes * factor,
                )
            self._static[kind] = static
        return self._static[kind]

    def static_bytes(self, layer: LayerLike) -> float:
        return self.static_breakdown(layer).total

    def end_workspace_bytes(self, layer: LayerLike) -> float:
        """What a HEAD or TAIL adds to the workspaces of a stage holding the run's body kinds (TE's cached
        dummy weight gradients of the output layer's shape, `dummy_wgrad.py`): its description carries it,
        so the balancer's constant charges every stage the bodies' alone (`run_workspace_bytes(ends=False)`)."""
        if isinstance(layer.kind, BodyKind):
            return 0.0
        if self._body_kinds is None:
            self._body_kinds = frozenset(
                kind for name in self.run.model_names for kind in model_kinds(self.run, name)[1]
            )
        bodies = set(self._body_kinds)
        return self.rules.workspace_bytes(self.setup, bodies | {layer.kind}) - self.rules.workspace_bytes(
            self.setup, bodies
        )

    # --- activations and buffers ---------------------------------------------------------------

    def _pricer(self, model_name: str) -> ActivationFormulas:
        return self._pricers.get(model_name, self._formulas)

    def activation_source(self, model_name: str) -> str:
        """What prices *model_name*'s body activations: "formulas", or "census:<file>"."""
        return getattr(self._pricers.get(model_name), "source", "formulas")

    def activation_sources(self) -> dict[str, Any]:
        """Per model, what prices its body activations, as the estimate's output states it."""
        return {
            name: (
                self._pricers[name].describe()
                if hasattr(self._pricers.get(name), "describe")
                else {"source": "formulas"}
            )
            for name in self.run.model_names
        }

    def state_memory(
        self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None = None
    ) -> StateMemory:
        """The layer in *state* (switches act on SEL_REC_LAYER; None: the model's configured ones)."""
        key = self._key(layer, state, switches)
        found = self._states.get(key)
        if found is not None:
            return found
        kind = layer.kind
        stated = dict(zip(SWITCHES, key[3], strict=True)) if key[3] is not None else None
        body_state = key[2] if key[2] is not None else LayerType.NOT_REC_LAYER
        pricer = self._pricer(layer.model_name)
        if kind not in self._buffer_terms:
            self._buffer_terms[kind] = layer_buffers(kind, self.setup, self.parameters(layer))
        if pricer is self._formulas and isinstance(kind, BodyKind):
            if body_state is LayerType.FULL_REC_LAYER:
                base = pricer.full_terms(kind, self.setup)
            else:
                base = self.rules.body_terms(kind, self.setup, pricer.terms(kind, self.setup))
            terms, buffer_terms = self.rules.state(
                kind, self.setup, body_state, stated, key[4], base, self._buffer_terms[kind]
            )
        else:  # a census (it recomputes by its own measurements), or the HEAD and TAIL
            if isinstance(kind, TailKind):  # priced by the formulas, its MTP layers by the framework's rules
                terms = self.rules.tail_terms(kind, self.setup, key[4])
            else:
                terms = pricer.state_terms(kind, self.setup, body_state, stated)
            _, buffer_terms = self.rules.state(
                kind, self.setup, body_state, stated, key[4], terms, self._buffer_terms[kind]
            )
        # a census measured its own dtype; a layer FP8 training leaves in 16 bits caches nothing in FP8
        cache = "none" if isinstance(kind, BodyKind) and kind.high_precision else self.setup.fp8_cache
        if pricer is self._formulas or not isinstance(kind, BodyKind):
            terms = cached_terms(terms, cache, self._proj_original)
        buffer_terms = cached_buffers(buffer_terms, cache, self.setup.dtype_bytes)
        terms, buffer_terms, moved, moved_buffers = self.rules.offload_split(
            kind, self.setup, tuple(terms), tuple(buffer_terms)
        )
        offloaded = sum(t.bytes for t in moved) + sum(b.bytes for b in moved_buffers)
        offload_forward = self.rules.offload_forward_bytes(kind, self.setup, moved) if moved else 0.0
        transient = forward_transient = 0.0
        if self.rules.transients_per_stage:
            transient = max((b.bytes for b in buffer_terms if not b.kept and not b.forward_only), default=0.0)
            forward_transient = max((b.bytes for b in buffer_terms if b.forward_only), default=0.0)
            buffer_terms = tuple(b for b in buffer_terms if b.kept)
        fix = self.correction
        if fix.buffers != 1.0:
            buffer_terms = tuple(
                BufferTerm(b.group, b.name, b.bytes * fix.buffers, b.kept, b.switch) for b in buffer_terms
            )
        buffers = Buffers(tuple(buffer_terms), self.setup.buffer_rule)
        activation = sum(t.bytes for t in terms) * fix.activations
        found = self._states[key] = StateMemory(
            tuple(terms),
            activation,
            buffers,
            transient * fix.working,
            offloaded * fix.activations,
            moved,
            forward_transient * fix.working,
            offload_forward * fix.activations,
        )
        return found

    def activation_terms(
        self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None = None
    ) -> tuple[ActivationTerm, ...]:
        """What the layer keeps at one micro-batch, op by op, each with the switch that governs it."""
        return self.state_memory(layer, state, switches).terms

    def activation_bytes(self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None = None) -> float:
        """Activations of one micro-batch in flight."""
        return self.state_memory(layer, state, switches).activation_bytes

    def buffers(self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None = None) -> Buffers:
        return self.state_memory(layer, state, switches).buffers

    def option_activation_bytes(self, layer: LayerLike) -> dict[str, float]:
        """Activations per micro-batch in flight under each option (HEAD and TAIL: the same for all)."""
        return {option: self.activation_bytes(layer, *self.option_state(layer, option)) for option in OPTIONS}

    # --- MemorySource ----------------------------------------------------------------------------

    def dynamic_bytes(
        self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None, in_flight: int
    ) -> tuple[float, float]:
        memory = self.state_memory(layer, state, switches)
        return memory.activation_bytes * in_flight, memory.buffers.at(in_flight)

    def largest_gradient_bytes(self, layer: LayerLike) -> float:
        """The gradient of the largest tensor the layer's backward handles, in the activation dtype.

        At least the gradient arriving at the layer's output (s·b·h/(cp·sp) elements).
        """
        plain = self.state_memory(layer, LayerType.NOT_REC_LAYER)
        incoming = encoder_setup(layer.kind, self.setup).whole_tokens * layer.kind.hidden_size
        largest = max((t.elements for t in (*plain.terms, *plain.offloaded_terms) if t.gradient), default=0.0)
        return max(incoming, largest) * self.setup.dtype_bytes

    def working_extra_bytes(
        self,
        layer: LayerLike,
        state: LayerType,
        switches: Mapping[str, int] | None,
        gathered: int,
        on_saved: bool,
        group: int = 1,
        neighbours: tuple[LayerLike | None, LayerLike | None] | None = None,
    ) -> float:
        """What the layer's backward holds at one micro-batch beyond what the stage counts for it.

        The activations and kept buffers recompute rebuilds (none when nothing is recomputed;
        *group* layers' worth where full recompute checkpoints that many layers as one, Megatron's
        `uniform` method), the gradient of the largest tensor, the workspaces the framework holds
        once per stage, and what the framework's backward holds of parameters and gradients
        (`FrameworkRules.parameter_working_bytes`; SAPP's: under ZeRO-3 / FSDP the gathered
        parameters of *gathered* layers). *neighbours* are the layers that run just before and after
        it in the forward (None for either: none before a HEAD or after a TAIL, a layer alike
        otherwise). With *on_saved* the stage already counts what the layer keeps; without, it
        counts none of it, so that is held on top.
        """
        memory = self.state_memory(layer, state, switches)
        parameters = self._parameter_working_bytes(layer, gathered, neighbours)
        census = self.census_terms(layer, state, switches)
        working = self.correction.working
        workspace = max(memory.transient_bytes, memory.forward_transient_bytes)
        if census is not None:  # the census measured what the backward holds (`_ppb.py` `_profile`)
            kept, held_census = census
            extra = max(0.0, held_census - kept) if on_saved else held_census
            return (extra + parameters) * working + workspace
        rebuilt = group * self.state_memory(layer, LayerType.NOT_REC_LAYER).kept_bytes - memory.kept_bytes
        backward = (rebuilt + self.largest_gradient_bytes(layer) + parameters) * working + memory.transient_bytes
        # a forward's own workspace (ring attention's, frameworks/ring.py): beside what recompute rebuilds and
        # the parameters (the backward's working set of them, a bound of the forward's), no gradient yet
        forward = (rebuilt + parameters) * working + memory.forward_transient_bytes + memory.offload_forward_bytes
        extra = max(backward, forward)
        if not on_saved:
            extra += memory.kept_bytes
        else:  # what the layer keeps but frees before this backward (the loss's, on a TAIL); the stage counts it
            freed = self.rules.freed_before_backward_bytes(layer.kind, self.setup, memory.terms)
            freed *= self.correction.activations
            extra = max(0.0, extra - freed) if freed else extra
        return extra

    def _parameter_working_bytes(
        self, layer: LayerLike, gathered: int, neighbours: tuple[LayerLike | None, LayerLike | None] | None
    ) -> float:
        """What the framework's backward holds of parameters and gradients (`parameter_working_bytes`)."""
        return self.rules.parameter_working_bytes(
            self.parameters(layer),
            self.setup,
            _node(layer),
            gathered,
            *self._neighbour_params(layer, neighbours),
            kind=layer.kind,
            beside=(None, None) if neighbours is None else tuple(None if n is None else _node(n) for n in neighbours),
        )

    def attention_backward_bytes(
        self,
        layer: LayerLike,
        state: LayerType,
        switches: Mapping[str, int] | None,
        working: float,
        gathered: int = 2,
        group: int = 1,
        neighbours: tuple[LayerLike | None, LayerLike | None] | None = None,
    ) -> float:
        """What the layer's backward holds while its attention backward runs, beyond what the stage counts
        for it (the layer's kept memory counted), *working* being its `working_extra_bytes`.

        Where the framework states the gradients alive then (`FrameworkRules.attention_backward_gradient_bytes`:
        Transformer Engine's flash-attn path), what recompute rebuilds and the parameters' working set
        beside the larger of: those at the kernel with its workspace, those after it. Elsewhere the
        layer's working set (its largest gradient) with the kernel's workspace on top.
        """
        workspace = self.attention_workspace_bytes(layer)
        gradients = self.rules.attention_backward_gradient_bytes(layer.kind, self.setup)
        if gradients is None or self.census_terms(layer, state, switches) is not None:
            return working + workspace
        memory = self.state_memory(layer, state, switches)
        rebuilt = group * self.state_memory(layer, LayerType.NOT_REC_LAYER).kept_bytes - memory.kept_bytes
        held = rebuilt + self._parameter_working_bytes(layer, gathered, neighbours)
        at_kernel, after = gradients
        scale = self.correction.working
        return max((held + at_kernel) * scale + workspace, (held + after) * scale)

    def _neighbour_params(
        self, layer: LayerLike, neighbours: tuple[LayerLike | None, LayerLike | None] | None
    ) -> tuple[LayerParams | None, LayerParams | None]:
        if neighbours is None:
            own = self.parameters(layer)
            node = _node(layer)
            return (None if node == "HEAD" else own), (None if node == "TAIL" else own)
        return tuple(None if n is None else self.parameters(n) for n in neighbours)  # type: ignore[return-value]

    def reduction_bytes(self, layers: Sequence[LayerLike]) -> float | None:
        """What a stage of *layers* (in forward order) holds at its gradient reduction beyond the
        optimizer step's static memory, or None where the framework's reduction is no moment of its
        own (`FrameworkRules.reduction_bytes`); scaled as static memory is."""
        found = self.rules.reduction_bytes(
            self.setup, [self.parameters(layer) for layer in layers], [_node(layer) for layer in layers]
        )
        return None if found is None else found * self.correction.static

    def attention_workspace_bytes(self, layer: LayerLike) -> float:
        """What the layer's attention backward takes for its kernels beyond its working set
        (`FrameworkRules.attention_workspace_bytes`), scaled as working sets are."""
        return self.rules.attention_workspace_bytes(layer.kind, self.setup) * self.correction.working

    def held_after_loss_bytes(self, layer: LayerLike, held: StateMemory) -> float | None:
        """What of the TAIL's micro-batch (*held*, its state) stays alive while the layers under it run
        their backward (`FrameworkRules.held_after_loss_bytes`), scaled as activations are; None where
        the framework frees none of it."""
        if not isinstance(layer.kind, TailKind):
            return None
        found = self.rules.held_after_loss_bytes(layer.kind, self.setup, held.terms, self.run.training.micro_batches)
        return None if found is None else found * self.correction.activations

    def loss_bytes(self, layer: LayerLike, before: LayerLike | None = None) -> float:
        """What the loss's forward and backward hold beyond the TAIL's kept activations (0 elsewhere);
        *before*: the layer that runs just before the TAIL, where known."""
        if not isinstance(layer.kind, TailKind):
            return 0.0
        previous = None if before is None else self.parameters(before)
        found = self.rules.loss_bytes(layer.kind, self.parameters(layer), self.setup, previous)
        return found * self.correction.working

    def first_call_bytes(self, layer: LayerLike) -> float:
        """What the loss's first call adds once beyond `loss_bytes` (`FrameworkRules.first_call_bytes`; 0 off the
        TAIL)."""
        if not isinstance(layer.kind, TailKind):
            return 0.0
        return self.rules.first_call_bytes(layer.kind, self.parameters(layer), self.setup) * self.correction.working

    def census_terms(
        self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None
    ) -> tuple[float, float] | None:
        """(kept, held) at one micro-batch where a census prices the body layer, else None.

        *kept* is what the layer keeps of the census's parts in *state*, *held* the most its
        backward holds (kept tensors, gradients and temporaries) on this rank.
        """
        pricer = self._pricer(layer.model_name)
        if not isinstance(layer.kind, BodyKind) or not hasattr(pricer, "held_bytes"):
            return None
        return self.activation_bytes(layer, state, switches), pricer.held_bytes(layer.kind, self.setup)

    # --- the split the descriptions use ---------------------------------------------------------

    @property
    def many(self) -> int:
        """The most micro-batches a stage keeps in flight under 1F1B, and at least 2 (`_ppb.py` `_body_memory`)."""
        return max(2, min(self.run.parallel.pp, self.run.training.micro_batches))

    def buffer_split(
        self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None = None
    ) -> tuple[float, float, float]:
        """(buffers at one micro-batch, the part per micro-batch, the part once), as `_ppb.py` `_dynamic_mem`."""
        return self.buffers(layer, state, switches).split(self.many)


def _with_fsdp_root(run: RunConfig, setup: MemorySetup) -> MemorySetup:
    """Under torchtitan's `root` FSDP2 units, the root unit's modules and the last block's parameters
    (frameworks/torchtitan.py, **FSDP2 units by version**)."""
    if setup.fsdp_units != "root" or len(run.model_names) != 1:  # torchtitan trains one model
        return setup
    head, bodies, tail = model_kinds(run, run.model_names[0])
    if not bodies:
        return setup
    params = (layer_params(head, setup), layer_params(tail, setup), layer_params(bodies[-1], setup))
    return dataclasses.replace(setup, fsdp_root=params)


def _node(layer: LayerLike) -> str:
    """HEAD, BODY or TAIL, from the layer's kind (a `KindSlot` or `Layer` says it too)."""
    if isinstance(layer.kind, HeadKind):
        return "HEAD"
    return "TAIL" if isinstance(layer.kind, TailKind) else "BODY"


# --- a run's memory, with the model built for it ------------------------------------------------


def run_working_set_bytes(
    run: RunConfig, memory: MemoryModel | None = None, layer_walk: LayerWalk | None = None
) -> float:
    """The most any one layer's backward (or the loss) holds beyond what its stage keeps, over every
    layer kind of the run and every recompute option: what a stage peak adds to its kept memory,
    whatever layers and options a plan gives it (each distinct kind evaluated once). A body's attention
    workspace (`MemoryModel.attention_workspace_bytes`) counts on top of its working set, as on a stage
    without the loss; `stage_peaks` credits the loss's stage with what is freed before it runs."""
    memory = memory if memory is not None else MemoryModel(run)
    layer_walk = layer_walk if layer_walk is not None else walk(run)
    most = 0.0
    seen: set[tuple] = set()
    group = _full_group(memory)
    for layer in layer_walk:
        key = (layer.model_name, layer.node, layer.kind)
        if key in seen:
            continue
        seen.add(key)
        most = max(most, memory.loss_bytes(layer))
        for option in OPTIONS if isinstance(layer.kind, BodyKind) else ("NONE",):
            state, switches = memory.option_state(layer, option)
            rebuilt = group if option == "FULL" else 1
            working = memory.working_extra_bytes(layer, state, switches, 2, on_saved=True, group=rebuilt)
            most = max(most, memory.attention_backward_bytes(layer, state, switches, working, group=rebuilt))
    return most


def run_workspace_bytes(
    run: RunConfig, memory: MemoryModel | None = None, layer_walk: LayerWalk | None = None, *, ends: bool = True
) -> float:
    """The most workspace any stage could hold, whatever layers a plan gives it: what the run's
    layer kinds together ask (`FrameworkRules.workspace_bytes`), and the pipeline buffers of its
    vpp chunks (`pipeline_buffer_bytes`, as if no HEAD or TAIL were among them) at the in-flight
    counts of the schedule's vector that asks the most, and what the loss's stage holds to the flush; no
    layer's description counts them. Without *ends* the kinds' workspaces are the body kinds' only:
    what a HEAD or TAIL adds its description carries (`MemoryModel.end_workspace_bytes`)."""
    memory = memory if memory is not None else MemoryModel(run)
    layer_walk = layer_walk if layer_walk is not None else walk(run)
    kinds = {layer.kind for layer in layer_walk}
    bodies = {kind for kind in kinds if isinstance(kind, BodyKind)}
    micro_batches = run.training.micro_batches
    chunk = {
        count: memory.rules.pipeline_buffer_bytes(memory.setup, bodies, micro_batches, count)
        for count in range(micro_batches + 1)
    }
    held = max(
        (
            sum(chunk[min(count, micro_batches)] for count in vector)
            for stage in run_in_flight_vectors(run)
            for vector in stage
        ),
        default=0.0,
    )
    # what the stage of the loss holds to the pipeline's flush (`FrameworkRules.deferred_bytes`)
    deferred = max(
        (
            memory.rules.deferred_bytes(kind, memory.setup, micro_batches)
            for kind in kinds
            if isinstance(kind, TailKind)
        ),
        default=0.0,
    )
    return memory.rules.workspace_bytes(memory.setup, kinds if ends else bodies) + held + deferred


def run_stage_peaks(
    run: RunConfig,
    memory: MemoryModel | None = None,
    layer_walk: LayerWalk | None = None,
    option_of: Callable[[Layer], str] | None = None,
) -> list[StagePeak]:
    """The run's stages under its schedule, on its device (memory and reserved memory from the config)."""
    memory = memory if memory is not None else MemoryModel(run)
    layer_walk = layer_walk if layer_walk is not None else walk(run)
    device = run.device
    return stage_peaks(
        memory,
        layer_walk,
        run_in_flight(run),
        device_bytes=device.profile().memory_mb * MB,
        reserved_bytes=device.reserved * MB,
        option_of=option_of,
        vectors=run_in_flight_vectors(run),
        steps=run_combined_steps(run),
    )


def run_memory_fit(run: RunConfig) -> MemoryFit:
    """The run's `memory.calibration` fitted: its measured peaks against the uncorrected stage peaks."""
    path = Path(run.base_dir) / str(run.memory.calibration)
    measured = read_measured_peaks(path, run.parallel.pp)
    peaks = run_stage_peaks(run, MemoryModel(run, correction=MemoryCorrection()))
    return fit_peaks([peak.terms() for peak in peaks], measured, run.memory.calibration or str(path))
