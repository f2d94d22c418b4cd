"""`MemoryModel`: the bytes a layer takes on one device, evaluated once per distinct kind and state.

It implements `ppb_core.payload.sources.MemorySource` for the PPB builder and offers the breakdowns
behind each figure (static parts, activations op by op with their switch, buffer terms).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ppb_core.config.run import RunConfig
from ppb_core.memory.activations import ActivationFormulas, ActivationTerm, encoder_setup
from ppb_core.memory.buffers import Buffers, layer_buffers, state_buffers
from ppb_core.memory.census import census_pricers
from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import StaticBytes, gathered_parameter_bytes, layer_params, static_bytes
from ppb_core.model.kinds import BodyKind, LayerKind, is_head
from ppb_core.model.params import LayerParams
from ppb_core.model.switches import OPTIONS, SWITCHES, LayerType, normalized, option_state

BODY_STATES = (LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER)


class LayerLike(Protocol):
    """What the model reads of a layer: a `model.Layer`, or a `model.KindSlot` of the walk."""

    model_name: str
    kind: LayerKind


@dataclass(frozen=True)
class StateMemory:
    """A layer in one state: what it keeps at one micro-batch, and its buffers."""

    terms: tuple[ActivationTerm, ...]
    activation_bytes: float
    buffers: Buffers

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
    ) -> None:
        self.run = run
        self.setup = MemorySetup.from_run(run, buffer_rule)
        self._formulas = ActivationFormulas()
        self._pricers = {**census_pricers(run), **dict(activations or {})}
        self._configured = {name: normalized(run.switches(name)) for name in run.model_names}
        self._params: dict[LayerKind, LayerParams] = {}
        self._static: dict[LayerKind, StaticBytes] = {}
        self._buffer_terms: dict[LayerKind, tuple] = {}
        self._states: dict[tuple, StateMemory] = {}

    # --- what a layer is evaluated at ------------------------------------------------------

    def configured_switches(self, model_name: str) -> dict[str, int]:
        """The switches SLCT runs for *model_name*'s layers (every switch, 0 or 1)."""
        return dict(self._configured[model_name])

    def _key(self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None) -> tuple:
        if not isinstance(layer.kind, BodyKind):
            return (layer.model_name, layer.kind, None, None)  # HEAD and TAIL have one state
        if state not in BODY_STATES:
            raise ValueError(f"a body layer is evaluated NOT_REC, SEL_REC or FULL_REC, not {state.name}")
        if state is not LayerType.SEL_REC_LAYER:
            return (layer.model_name, layer.kind, state, None)
        stated = self._configured[layer.model_name] if switches is None else normalized(switches)
        return (layer.model_name, layer.kind, state, tuple(stated[name] for name in SWITCHES))

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
        kind = layer.kind
        if kind not in self._static:
            self._static[kind] = static_bytes(self.parameters(layer), self.setup)
        return self._static[kind]

    def static_bytes(self, layer: LayerLike) -> float:
        return self.static_breakdown(layer).total

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
        terms = self._pricer(layer.model_name).state_terms(kind, self.setup, body_state, stated)
        if kind not in self._buffer_terms:
            self._buffer_terms[kind] = layer_buffers(kind, self.setup, self.parameters(layer))
        buffers = Buffers(state_buffers(self._buffer_terms[kind], body_state, stated), self.setup.buffer_rule)
        found = self._states[key] = StateMemory(terms, sum(t.bytes for t in terms), buffers)
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
        largest = max((t.elements for t in plain.terms if t.gradient), default=0.0)
        return max(incoming, largest) * self.setup.dtype_bytes

    def working_extra_bytes(
        self, layer: LayerLike, state: LayerType, switches: Mapping[str, int] | None, gathered: int, on_saved: bool
    ) -> float:
        """What the layer's backward holds at one micro-batch beyond what the stage counts for it.

        The activations and kept buffers recompute rebuilds (none when nothing is recomputed),
        the gradient of the largest tensor, and under ZeRO-3 / FSDP the gathered parameters of
        *gathered* layers. With *on_saved* the stage already counts what the layer keeps; without,
        it counts none of it, so that is held on top.
        """
        census = self.census_terms(layer, state, switches)
        if census is not None:  # the census measured what the backward holds (`_ppb.py` `_profile`)
            kept, held_census = census
            extra = max(0.0, held_census - kept) if on_saved else held_census
            return extra + gathered * gathered_parameter_bytes(self.parameters(layer), self.setup)
        memory = self.state_memory(layer, state, switches)
        held = self.state_memory(layer, LayerType.NOT_REC_LAYER).kept_bytes
        extra = held - memory.kept_bytes
        extra += self.largest_gradient_bytes(layer)
        extra += gathered * gathered_parameter_bytes(self.parameters(layer), self.setup)
        if not on_saved:
            extra += memory.kept_bytes
        return extra

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
