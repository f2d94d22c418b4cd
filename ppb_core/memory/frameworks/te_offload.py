"""Transformer Engine's CPU offloading as Megatron-LM runs it (`--cpu-offloading-num-layers N`,
`training.cpu_offloading_num_layers`): what stays on the device.

Megatron-LM d98e8a64 (megatron/core/transformer/transformer_block.py `TransformerBlock.__init__` and
`forward`; extensions/transformer_engine.py `get_cpu_offload_context`) enters TE's offload context around
each decoder layer's forward (`with self.offload_context`) and marks each layer's end with the
context's synchronization function (`group_prefetch_offload_commit_async`), with `num_layers` N and
`model_layers` the decoder's layer count L; `--cpu-offloading-num-layers` > 0 sets `cpu_offloading`
(arguments.py), activations on, weights off, double buffering off (those three have no flag). The MTP
block runs under a null context (multi_token_prediction.py), so its layers keep everything.

TE's default path (transformer_engine/pytorch/cpu_offload.py from v2.10, c52576053 "Activation offloading
refactor", to d0067d0d; `NVTE_CPU_OFFLOAD_V1=1` selects the older handler, not modelled):
`DefaultOffloadSynchronizer` offloads layers 0 … N−1. Every tensor a layer saves is copied to pinned host
memory (`OffloadableLayerState.push_tensor` / `start_offload`) unless it has fewer than 256·1024 elements,
is a parameter or is marked not to be (TE's modules mark their weights: `mark_not_offload`), or is not
contiguous. Layer i's copies are queued on the one offload stream as layer i + 1's forward starts
(`fwd_step`); its device memory is released only at layer L − N + i's forward start, where the compute
stream waits for those copies (`finish_offload_map`, `release_activation_forward_gpu_memory`); its reload
starts before layer L − 1 − N + i's backward (`start_reload_map`, `start_reload`, on that same stream,
after the compute queued so far), and the backward waits for each reloaded tensor (`pop_tensor`). So at
any moment the device holds a window of L − N consecutive layers whole, the offloaded layers below it
only their small tensors and nothing above it (TE's docstring: "(num_layers - num_offloaded_layers) * T"):
`held_bytes` is the most such a window holds, one micro-batch in flight (Megatron refuses pipelining with
it). The time is `ppb_core.timing.offload.cpu_offload_waits`. Not modelled: what ppb keeps as a layer's
buffers rather than its activation terms (an MoE layer's remote dispatched rows) stays counted on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ppb_core.memory.model import StateMemory

# OffloadableLayerState._check_if_offload: "Only offload tensors with at least 256k elements"
MIN_ELEMENTS = 256 * 1024


def offloaded_bytes(held: StateMemory) -> float:
    """What TE copies of a layer's saved tensors: its activation terms of at least `MIN_ELEMENTS` elements
    (the model's activation correction applied, as to `activation_bytes`)."""
    raw = sum(t.bytes for t in held.terms)
    moved = sum(t.bytes for t in held.terms if t.elements >= MIN_ELEMENTS)
    return moved * held.activation_bytes / raw if raw > 0 else 0.0


def held_bytes(kept: Sequence[float], moved: Sequence[float], offloaded_layers: int) -> float:
    """The most the decoder's layers keep at once under TE's offloading of the first *offloaded_layers*:
    each layer *kept* in full, of which *moved* leaves the device (module doc). After layer j's forward
    (and again before its backward) the device holds layers j − L + N + 1 … j whole and the offloaded ones
    below only what stays."""
    layers, n = len(kept), offloaded_layers
    if n <= 0:
        return sum(kept)
    best = 0.0
    for j in range(max(layers - n - 1, 0), layers):
        below = max(j - layers + n + 1, 0)  # the layers released before this window
        best = max(best, sum(kept[: j + 1]) - sum(moved[:below]))
    return best
