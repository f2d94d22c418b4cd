"""Megatron's fine-grained offloading in the schedule (ppb_core/host_copies.py): each stage's one FIFO
device-to-host stream, and each backward waiting for its forward's copies and its first reload
(fine_grained_activation_offload.py at 4e85d74ae9: `bulk_offload_group` on `_d2h_stream`,
`bulk_reload_group` waiting for the group's offload event; `post_warmup_callback` keeping the first
backward chunk's last layer). Every timeline below is worked by hand."""

from __future__ import annotations

import pytest

from ppb_core.host_copies import HostCopies, HostLayer
from ppb_core.pipeline_p2p import simulate_p2p
from ppb_core.schedules import simulate


def test_one_stage_waits_for_its_copies_and_first_reloads():
    # pp 1, 2 micro-batches, one cell of 2 layers: forward 1 s, backward 2 s, copies 10 s each way, no wait
    # in the cell's time. Order F0 B0 F1 B1.
    # F0 [0, 2]: layer 1's copy [1, 11]; layer 2 is the kept one (B0 is the stage's first backward): none.
    # B0: layer 2 (kept) runs first (2 s), layer 1's reload waits for its copy (11) and takes 10 s: layer 1's
    #     backward at 21, so B0 starts at 21 - 2 = 19: [19, 23].
    # F1 [23, 25]: copies [24, 34] and [34, 44].
    # B1: layer 2's reload waits for 44 and takes 10 s: [54, 58].
    layer = HostLayer(forward_s=1.0, backward_s=2.0, copy_s=10.0)
    host = HostCopies([[[layer, layer]]])
    timeline = simulate("1f1b", [[2.0]], [[4.0]], 2, host=host)
    assert timeline.starts[0] == [0.0, 19.0, 23.0, 54.0]
    assert timeline.makespan == 58.0
    # without copies: 2 + 4 + 2 + 4
    assert simulate("1f1b", [[2.0]], [[4.0]], 2).makespan == 12.0


def test_a_reload_wait_already_in_the_cell_is_not_counted_twice():
    # as above, with the cell's backward holding each layer's reload wait of 3 s (timing/offload.py):
    # layer backward 5 s, cell 10 s. B0: layer 1's compute starts at 21 = start + 5 (layer 2) + 3 (its
    # wait): start 13, [13, 23]; F1 [23, 25] as before; B1: layer 2's compute at 54 = start + 3: [51, 61].
    layer = HostLayer(forward_s=1.0, backward_s=5.0, copy_s=10.0, wait_s=3.0)
    timeline = simulate("1f1b", [[2.0]], [[10.0]], 2, host=HostCopies([[[layer, layer]]]))
    assert timeline.starts[0] == [0.0, 13.0, 23.0, 51.0]
    assert timeline.makespan == 61.0


def test_two_stages_in_simulate_and_simulate_p2p():
    # pp 2, 2 micro-batches, a layer a cell: forward 1, backward 1, copies 5 s. Stage 0 runs F0 F1 B0 B1,
    # stage 1 F0 B0 F1 B1; each stage's first backward (micro-batch 0) keeps its only layer: no copy, no wait.
    # stage 0: F0 [0, 1], F1 [1, 2] (copy [2, 7]); stage 1: F0 [1, 2], B0 [2, 3], F1 [3, 4] (copy [4, 9]),
    # B1: reload after 9, 5 s: [14, 15]; stage 0: B0 [3, 4], B1 after stage 1's (15; its reload ends at 12): [15, 16].
    layer = HostLayer(forward_s=1.0, backward_s=1.0, copy_s=5.0)
    host = HostCopies([[[layer], [layer]]])
    ones = [[1.0, 1.0]]
    timeline = simulate("1f1b", ones, ones, 2, host=host)
    assert timeline.starts == [[0.0, 1.0, 3.0, 15.0], [1.0, 2.0, 3.0, 14.0]]
    assert timeline.makespan == 16.0
    assert simulate("1f1b", ones, ones, 2).makespan == 6.0
    # Megatron's synchronous p2p with transfers of no time runs the same ops at the same times
    p2p = simulate_p2p("megatron_sync", "1f1b", ones, ones, 2, [[0.0, 0.0]], host=host)
    assert p2p.starts == timeline.starts
    assert p2p.makespan == pytest.approx(16.0)


def test_no_copies_leave_the_timeline_alone():
    # a host of zero copies changes nothing (the iteration passes None then, `HostCopies.any`)
    idle = HostCopies([[[HostLayer(1.0, 1.0, 0.0)], [HostLayer(1.0, 1.0, 0.0)]]])
    assert not idle.any()
    ones = [[1.0, 1.0]]
    assert simulate("1f1b", ones, ones, 4, host=idle).starts == simulate("1f1b", ones, ones, 4).starts


def test_the_kept_layer_is_in_the_first_backward_that_copies():
    # post_warmup_callback keeps each group name's last group in the first backward chunk that has it: a
    # chunk that copies nothing (the CI's loss-only chunk) passes the margin on. One stage, 2 chunks, 2
    # micro-batches (interleaved, g 1): F(0,0) F(1,0) B(1,0) F(0,1) B(0,0) F(1,1) B(1,1) B(0,1); chunk 0 a layer
    # copying 5 s (forward 1, backward 1), chunk 1 a layer copying nothing.
    # F(0,0) [0, 1] keeps its layer (B(0,0) is the first backward that copies): no copy; F(1,0) [1, 2];
    # B(1,0) [2, 3]; F(0,1) [3, 4], copy [4, 9]; B(0,0) [4, 5]; F(1,1) [5, 6]; B(1,1) [6, 7];
    # B(0,1) after its forward's copy and its reload: 9 + 5 = 14, [14, 15].
    copying, idle = HostLayer(1.0, 1.0, 5.0), HostLayer(1.0, 1.0, 0.0)
    host = HostCopies([[[copying]], [[idle]]])
    timeline = simulate("interleaved", [[1.0], [1.0]], [[1.0], [1.0]], 2, host=host)
    assert [(op.kind, op.chunk, op.micro_batch) for op in timeline.orders[0]] == [
        ("F", 0, 0), ("F", 1, 0), ("B", 1, 0), ("F", 0, 1), ("B", 0, 0), ("F", 1, 1), ("B", 1, 1), ("B", 0, 1)
    ]  # fmt: skip
    assert timeline.starts[0] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 14.0]
    assert timeline.makespan == 15.0
