"""What Megatron-Core's fine-grained activation offloading (`training.offload_modules`) costs in time:
the backward's waits for its host-to-device reloads, as Megatron-LM runs them (megatron/core/
pipeline_parallel/fine_grained_activation_offload.py; the same schedule at 4e85d74ae9, which measured
Megatron CI's offloading cases, and at d98e8a64).

* **Forward: nothing waits.** At a group's commit (`on_group_commit_forward`) the D2H stream waits for
  the compute stream and copies the group's saved tensors into pinned host buffers from a pool
  (`OffloadTensorPool`, pinned once in the first iteration and reused after `reset`); the compute stream
  never waits on the D2H stream (`record_stream` only defers the device memory's reuse). The copies of
  an iteration move as many bytes as its reloads, over the link's other direction.
* **Backward: one layer ahead.** Each group's backward ends in `on_group_start_backward`: the H2D stream
  waits for the compute stream, then reloads one group (`bulk_reload`, the latest offloaded one not yet
  reloaded; once a chunk has none, the next backward chunk's last layer, `pre_reload_last_layer`), and
  each group's backward begins by waiting for its own reload (`on_group_commit_backward`). The first
  backward chunk keeps its last layer's groups on the device (`post_warmup_callback`'s margin), so each
  reload is issued one layer before its group's backward runs, and every later chunk inherits that lead
  from the chunk before. A layer's reloads thus run behind one layer's backward on their own stream:
  the compute waits only for what they take beyond it, max(0, reload − backward) (`reload_wait_s`).
  Under the combined 1F1B schedule another micro-batch's forward of the layer runs in the same step, so
  the window holds both.
* Not priced: the offload hooks' host work (a Python call per saved tensor and per copy) and the first
  iteration's pinned allocations (`cudaHostAlloc`, once); the layers whose groups stay on the device
  (the margin and a chunk's last layer when its backward comes next, `should_bulk_offload`: one layer
  of the rank's micro-batches), priced as reloaded.
"""

from __future__ import annotations

from collections.abc import Sequence


def reload_seconds(offloaded_bytes: float, host_link_gbs: float) -> float:
    """Seconds the H2D stream takes to bring a layer's offloaded tensors back (0: the link not priced)."""
    if offloaded_bytes <= 0 or host_link_gbs <= 0:
        return 0.0
    return offloaded_bytes / (host_link_gbs * 1e9)


def reload_wait_s(offloaded_bytes: float, host_link_gbs: float, window_s: float) -> float:
    """The compute stream's wait for a layer's reloads: what they take beyond the *window_s* of compute
    they run behind (the layer's backward; with the combined 1F1B, its forward too)."""
    return max(0.0, reload_seconds(offloaded_bytes, host_link_gbs) - window_s)


def cpu_offload_waits(
    forward_s: Sequence[float], backward_s: Sequence[float], copy_s: Sequence[float], offloaded_layers: int
) -> tuple[float, float]:
    """(forward, backward) seconds a micro-batch's compute waits under Transformer Engine's CPU offloading of
    the first *offloaded_layers* decoder layers (`--cpu-offloading-num-layers`; memory/frameworks/te_offload.py,
    TE cpu_offload.py v2.10 on, d0067d0d `DefaultOffloadSynchronizer`), the layers' times in forward order
    and each offloaded layer's copy one way. Every copy is done before the last layer's forward (it waits
    for the last offloaded layer's), so the loss between the passes changes nothing.

    One offload stream carries both directions, copies in the order queued. Forward: layer i's copies
    start once its forward has ended and the stream is free; before layer L − N + i's forward the compute
    waits for them (`release_activation_forward_gpu_memory`). Backward: before layer L − 1 − N + i's backward
    layer i's reload is queued behind the compute so far (`start_reload`: `wait_stream`), and layer i's
    backward waits for it (`pop_tensor`). Not priced: the hooks' host work per saved tensor, the first
    iteration's pinned allocations."""
    layers, n = len(forward_s), offloaded_layers
    if n <= 0 or not any(copy_s[:n]):
        return 0.0, 0.0
    t = stream = forward_wait = backward_wait = 0.0
    copied: list[float] = []
    for j in range(layers):
        if j >= layers - n:  # layer j − (L − N) released: its copies must be done
            ready = copied[j - (layers - n)]
            forward_wait += max(0.0, ready - t)
            t = max(t, ready)
        t += forward_s[j]
        if j < n:
            stream = max(stream, t) + copy_s[j]
            copied.append(stream)
    reloaded: dict[int, float] = {}
    for j in range(layers - 1, -1, -1):
        i = j - (layers - 1 - n)
        if 0 <= i < n:  # queued before layer j's backward, behind the compute so far
            stream = max(stream, t) + copy_s[i]
            reloaded[i] = stream
        if j in reloaded:
            backward_wait += max(0.0, reloaded[j] - t)
            t = max(t, reloaded[j])
        t += backward_s[j]
    return forward_wait, backward_wait
