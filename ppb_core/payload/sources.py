"""What the PPB builder asks of a memory model and a time model, so either can be swapped or faked.

`ppb_core.memory.MemoryModel` and `ppb_core.timing.pricer.TimeModel` implement these for a run config;
tests implement them with fakes whose figures can be worked out by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ppb_core.model.switches import LayerType
from ppb_core.model.walk import Layer


class MemorySource(Protocol):
    """Bytes on one device for one layer of the walk.

    *state* is NOT_REC_LAYER, SEL_REC_LAYER or FULL_REC_LAYER for a body layer, and
    EMBEDDING_LAYER or OUTPUT_LAYER for a HEAD or TAIL. *switches* (1 keep, 0 recompute) act
    only on SEL_REC_LAYER; None means the layer's own configured switches.
    """

    def static_bytes(self, layer: Layer) -> float:
        """Parameters, gradients and optimizer states the device holds for the layer."""
        ...

    def end_workspace_bytes(self, layer: Layer) -> float:
        """What a HEAD or TAIL adds to the workspaces of a stage holding the run's body layers (0 for a body)."""
        ...

    def dynamic_bytes(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None, in_flight: int
    ) -> tuple[float, float]:
        """(activations of *in_flight* micro-batches, communication buffers with that many in flight)."""
        ...

    def working_extra_bytes(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None, gathered: int, on_saved: bool
    ) -> float:
        """What the layer's backward holds at one micro-batch beyond what the layer keeps.

        *gathered* is how many layers' parameters FSDP holds gathered (2 as warm-up ends, 1 on a
        stage's first layer as a backward ends); *on_saved* says the stage already counts what
        the layer keeps for this backward.
        """
        ...

    def census_terms(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None
    ) -> tuple[float, float] | None:
        """(kept, held) bytes at one micro-batch where a census's per-op records price the layer, else None."""
        ...


class TimeSource(Protocol):
    def layer_times(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None = None
    ) -> tuple[float, float]:
        """(forward_ms, backward_ms) of one micro-batch through the layer on one device."""
        ...
