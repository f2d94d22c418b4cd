"""What a training framework keeps, shards, buffers and frees: the questions the memory model asks it.

`FrameworkRules` answers them as SAPP/HyperParallel's conventions do (MindFormers, see
`mindformers.py`); `megatron.py` and `torchtitan.py` override what their code does otherwise.
Each answer is per layer kind, except the stage-level moments that `ppb_core.memory.peak` puts
together:

* what a layer keeps for its backward in each recompute state (`state`: activation terms and
  communication buffers), and which of its buffers are workspaces held once per stage rather
  than once per layer (`transients_per_stage`);
* what it holds statically (`static`: parameters, gradients, optimizer states as sharded), and
  what its modules keep from their last forward (`module_state_bytes`: buffers, dispatcher state);
* what its backward holds beyond that (`parameter_working_bytes`: gathered parameters,
  unsharded gradients, reduce-scatter buffers);
* what the loss adds at its forward and backward on the stage that holds the head (`loss_bytes`);
* what the gradient reduction holds beyond the optimizer step's static memory, where it is a
  moment of its own (`reduction_bytes`);
* which library workspaces every stage keeps once (`workspace_bytes`), and which buffers each
  pipeline chunk keeps for its sends and receives (`pipeline_buffer_bytes`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ppb_core.memory.activations import ActivationTerm, body_terms, kept, tail_terms
from ppb_core.memory.buffers import BufferTerm, state_buffers
from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import StaticBytes, gathered_parameter_bytes, static_bytes
from ppb_core.model.kinds import BodyKind, LayerKind, TailKind
from ppb_core.model.params import LayerParams
from ppb_core.model.switches import LayerType

# The unit a TAIL's memory key adds to the run's selective units when every layer is fully recomputed.
FULL_UNIT = "full"


class FrameworkRules:
    """SAPP's conventions (its balancer and MindFormers/HyperParallel), the base of every framework."""

    name = "seed"
    # Whether a layer's transient workspaces (all-to-all staging, ring buffers, gradient buckets) are
    # held once per stage (the framework frees them as the layer's pass ends) or counted in every
    # layer's "once" part, as the SAPP payload counts them.
    transients_per_stage = False

    def body_terms(
        self, kind: BodyKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], prefix: str = ""
    ) -> tuple:
        """What a body layer keeps recomputing nothing, given the formulas' terms (docs/memory.md).

        *prefix* names the layer's terms where it sits inside another (an MTP module's `mtp0.`).
        """
        return terms

    def tail_terms(self, kind: TailKind, setup: MemorySetup, modules: frozenset[str] = frozenset()) -> tuple:
        """What the TAIL keeps: the loss, and each MTP module whose transformer layer keeps what
        `body_terms` says a body layer keeps. *modules* are the run's selective units
        (`Recompute.modules`, with `FULL_UNIT` under full recompute), which a framework may apply to
        the MTP layers; SAPP applies none."""

        def body(body_kind: BodyKind, body_setup: MemorySetup, prefix: str) -> tuple:
            return self.body_terms(body_kind, body_setup, tuple(body_terms(body_kind, body_setup, prefix)), prefix)

        return tuple(tail_terms(kind, setup, body))

    def state(
        self,
        kind: LayerKind,
        setup: MemorySetup,
        state: LayerType,
        switches: Mapping[str, int] | None,
        modules: frozenset[str],
        terms: tuple[ActivationTerm, ...],
        buffers: tuple[BufferTerm, ...],
    ) -> tuple[tuple[ActivationTerm, ...], tuple[BufferTerm, ...]]:
        """The activation terms and buffers a layer keeps in *state*.

        *terms* are what the layer keeps recomputing nothing (FULL_REC: what full recompute keeps),
        *buffers* every buffer of the layer. *modules* are the framework's selective units
        (`ppb_core.config.recompute.Recompute.modules`); SAPP knows only switches.
        """
        if state is LayerType.SEL_REC_LAYER:
            terms = kept(terms, switches)
        return terms, state_buffers(buffers, state, switches)

    def offload_split(
        self, kind: LayerKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], buffers: tuple[BufferTerm, ...]
    ) -> tuple[tuple[ActivationTerm, ...], tuple[BufferTerm, ...], tuple[ActivationTerm, ...], tuple[BufferTerm, ...]]:
        """What of a layer's kept terms and buffers (one micro-batch) the framework moves to host memory
        between the forward and the backward: (kept terms, kept buffers, moved terms, moved buffers).
        SAPP moves none."""
        return terms, buffers, (), ()

    def offload_forward_bytes(self, kind: LayerKind, setup: MemorySetup, moved: tuple[ActivationTerm, ...]) -> float:
        """What a layer's forward holds beyond its kept terms of the terms *moved* to host memory before they
        go (`offload_split`). SAPP moves none."""
        return 0.0

    def static(self, params: LayerParams, setup: MemorySetup, kind: LayerKind | None = None) -> StaticBytes:
        """A layer's parameters, gradients and optimizer states (*kind*: the layer's, where a rule reads it)."""
        return static_bytes(params, setup)

    def module_state_bytes(self, kind: LayerKind, setup: MemorySetup) -> tuple[float, float]:
        """What a layer's modules keep from their last forward beyond parameters and kept activations:
        (held at every moment, held only while none of the layer's micro-batches is in flight). SAPP
        counts none."""
        return 0.0, 0.0

    def uses_neighbours(self, setup: MemorySetup) -> bool:
        """Whether `parameter_working_bytes` depends on the layers around one (else they are not asked)."""
        return False

    def parameter_working_bytes(
        self,
        params: LayerParams,
        setup: MemorySetup,
        node: str,
        gathered: int,
        before: LayerParams | None,
        after: LayerParams | None,
        kind: LayerKind | None = None,
        beside: tuple[str | None, str | None] = (None, None),
    ) -> float:
        """What a layer's backward holds of parameters and gradients beyond its static memory.

        *before* and *after* are the units that run just before and after the layer in the
        forward (None where there is none): what a framework prefetches or is still reducing;
        *beside* their nodes (HEAD / BODY / TAIL; None: not known, a body's).
        *kind* is the layer's, where a rule reads it.
        SAPP's rule: under ZeRO-3 / FSDP the other ranks' shards of *gathered* layers.
        """
        return gathered * gathered_parameter_bytes(params, setup)

    def workspace_bytes(self, setup: MemorySetup, kinds: Collection[LayerKind] = ()) -> float:
        """Workspaces a stage running layers of *kinds* keeps at every moment, once per device: the
        GEMM libraries' (`workspaces.py`) and the framework's persistent buffers. SAPP counts none."""
        return 0.0

    def stage_static_bytes(self, setup: MemorySetup, layers: Collection[tuple[LayerKind, int]]) -> float:
        """Static memory a stage holds beyond its layers' own, at every moment, from how the framework
        shares the stage's parameters out as a whole (*layers*: each kind and how many). SAPP counts none."""
        return 0.0

    def attention_workspace_bytes(self, kind: LayerKind, setup: MemorySetup) -> float:
        """A workspace a layer's attention backward takes for its kernels alone, beyond its working set
        (`stage_peaks` charges it where that backward runs). SAPP counts none."""
        return 0.0

    def attention_backward_gradient_bytes(self, kind: LayerKind, setup: MemorySetup) -> tuple[float, float] | None:
        """The gradients alive while a layer's attention backward runs, where the framework's code states
        them: (at the attention kernel, beside its workspace; after it, where the kernel's gradients are
        copied back into the layout the layer's projection takes). None: the layer's largest gradient
        stands for them (`MemoryModel.largest_gradient_bytes`), as SAPP counts."""
        return None

    def pipeline_buffer_bytes(
        self, setup: MemorySetup, kinds: Collection[LayerKind], micro_batches: int, in_flight: int
    ) -> float:
        """What a pipeline chunk of layers of *kinds* holds for its sends and receives beyond its layers'
        kept inputs, and of its own beyond its layers (the chunk's model's caches), with *in_flight* of
        its *micro_batches* in flight. SAPP counts none."""
        return 0.0

    def loss_bytes(
        self, kind: TailKind, params: LayerParams, setup: MemorySetup, before: LayerParams | None = None
    ) -> float:
        """What the loss's forward and backward hold at most beyond the tail's kept activations (*before*:
        the layer that runs just before the tail, where known)."""
        return 0.0

    def first_call_bytes(self, kind: TailKind, params: LayerParams, setup: MemorySetup) -> float:
        """What the loss's first call adds once, in the first iteration, beyond `loss_bytes` (a compiled
        loss autotuning its kernels). SAPP's has none."""
        return 0.0

    def freed_before_backward_bytes(
        self, kind: LayerKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...]
    ) -> float:
        """What of the layer's kept *terms* is freed before its own backward's working set forms (on a
        TAIL, what the loss's backward consumes before the output layer's), which its working set then
        does not stand on. SAPP frees none."""
        return 0.0

    def held_after_loss_bytes(
        self, kind: TailKind, setup: MemorySetup, terms: tuple[ActivationTerm, ...], micro_batches: int
    ) -> float | None:
        """What of a TAIL's micro-batch (kept *terms*) is still alive while the layers under it in its
        chunk run that micro-batch's backward, after the loss's and the TAIL's own; None where the stage
        holds all the TAIL keeps then. SAPP's payload counts a stage's layers as a sum: None."""
        return None

    def deferred_bytes(self, kind: TailKind, setup: MemorySetup, micro_batches: int) -> float:
        """What the stage holding the loss keeps beyond its layers through its backwards and losses, of
        micro-batches whose backward has run, freed before the optimizer step. SAPP counts none."""
        return 0.0

    def first_backward_bytes(self, params: LayerParams, setup: MemorySetup) -> float:
        """Of a layer's static memory, what its chunk's first backward of the step creates (so not there
        before it), *params* its elements per rank. None but torchtitan's FSDP2 accumulators under PP: 0."""
        return 0.0

    def reduction_bytes(
        self, setup: MemorySetup, units: Sequence[LayerParams], nodes: Sequence[str] = ()
    ) -> float | None:
        """What a stage holds at its gradient reduction beyond the optimizer step's static memory, its
        layers' parameters (*units*, in forward order, *nodes* their HEAD / BODY / TAIL) given; None where
        the reduction is no moment of its own. SAPP counts gradient buckets in each layer's backward: None."""
        return None
