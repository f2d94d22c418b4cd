"""Megatron-LM's pipeline sends and receives, posted and waited for as its schedules do (ppb_core.pipeline_p2p).

Every expected timeline is worked by hand from Megatron-LM core_r0.8.0's
megatron/core/pipeline_parallel/schedules.py and p2p_communication.py (the rules in the module's doc):
a transfer starts when the sender's op has ended and the receiver has posted its receive, and lasts x.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import BODY, walk
from ppb_core.pipeline_lockstep import looped_steps
from ppb_core.pipeline_p2p import _post, simulate_p2p
from ppb_core.schedules import simulate, stage_orders
from ppb_core.timing.comm import Links
from ppb_core.timing.iteration import _data_links, chunk_sync_launches, framework_rules, p2p_seconds
from tests.test_timing_iteration import small_run


def test_1f1b_two_stages_four_micro_batches_by_hand() -> None:
    # f = 1, b = 2, x = 0.25. Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3 (one warm-up forward), stage 1
    # F0 B0 F1 B1 F2 B2 F3 B3. Megatron's 1F1B: after each op one batched call sends its output and
    # receives the next op's input and waits for both; in the warm-up the send waits alone.
    # s0 F0 [0, 1]; its send (s1 posted F0's receive from the start) [1, 1.25]; s0 F1 waits for it: [1.25, 2.25].
    # s1 F0 [1.25, 2.25], B0 [2.25, 4.25]. s0's send_forward_recv_backward after F1 meets s1's
    # send_backward_recv_forward after B0: both transfers [4.25, 4.5]. s0 B0 [4.5, 6.5]; s1 F1 [4.5, 5.5],
    # B1 [5.5, 7.5]. s0 F2 [6.5, 7.5] (stage 0 has no input); its send and B1's gradient [7.5, 7.75]:
    # s0 B1 [7.75, 9.75], s1 F2 [7.75, 8.75], B2 [8.75, 10.75]. s0 F3 [9.75, 10.75]; the transfers
    # [10.75, 11.0]: s0 B2 [11, 13], s1 F3 [11, 12], B3 [12, 14]. s0's cool-down receive is posted after B2
    # (stage 0 sends no gradient): B3's gradient [14, 14.25], s0 B3 [14.25, 16.25].
    timeline = simulate_p2p("megatron_sync", "1f1b", [[1.0, 1.0]], [[2.0, 2.0]], 4, [[0.25, 0.25]])
    assert [[(op.kind, op.micro_batch) for op in order] for order in timeline.orders] == [
        [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)],
        [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)],
    ]
    assert timeline.starts[0] == pytest.approx([0, 1.25, 4.5, 6.5, 7.75, 9.75, 11, 14.25])
    assert timeline.ends[0] == pytest.approx([1, 2.25, 6.5, 7.5, 9.75, 10.75, 13, 16.25])
    assert timeline.starts[1] == pytest.approx([1.25, 2.25, 4.5, 5.5, 7.75, 8.75, 11, 12])
    assert timeline.ends[1] == pytest.approx([2.25, 4.25, 5.5, 7.5, 8.75, 10.75, 12, 14])
    assert timeline.makespan == pytest.approx(16.25)


def test_1f1b_waits_for_the_receiver_to_post() -> None:
    # P = 2, m = 2; stage 1's backward is slow (4), x = 0.5. s0 F0 [0, 1], its send [1, 1.5], s0 F1
    # [1.5, 2.5]. s1 F0 [1.5, 2.5], B0 [2.5, 6.5]. F1's output waits in s0's send_forward_recv_backward
    # until s1 posts its receive after B0: [6.5, 7], and so does s0, whose B0 runs [7, 8]. Sent in the
    # background instead it would have reached stage 1 at 3.
    timeline = simulate_p2p("megatron_sync", "1f1b", [[1.0, 1.0]], [[1.0, 4.0]], 2, [[0.5, 0.5]])
    assert timeline.starts[0] == pytest.approx([0, 1.5, 7, 12.5])
    assert timeline.starts[1] == pytest.approx([1.5, 2.5, 7, 8])
    assert timeline.makespan == pytest.approx(13.5)
    background = simulate("1f1b", [[1.0, 1.0]], [[1.0, 4.0]], 2, [[0.5, 0.5]], blocking=False)
    assert background.starts[0][2] == pytest.approx(7.0) and background.starts[0][1] == pytest.approx(1.0)


def test_interleaved_overlap_two_stages_two_chunks_by_hand() -> None:
    # P = 2, V = 2, m = 2, every op 1, every transfer 0.5. Cells along the model: (chunk 0, stage 0),
    # (0, 1), (1, 0), (1, 1). Stage 0 warms up with all four forwards, stage 1 with two.
    # Overlapped P2P (core_r0.8.0 with --overlap-p2p-communication): a receive is posted after the stage's
    # previous op of its kind (its first backward's after the last warm-up forward); a send is waited for
    # before the stage's next op of its kind; the receives across the chunks' wrap are posted ahead.
    # s0 F(0,0) [0, 1]; send [1, 1.5]; s0 F(1,0) waits for it: [1.5, 2.5]. s1 F(0,0) [1.5, 2.5]; s1 posts
    # F(1,0)'s receive then: [2.5, 3]; s1's F(0,0) output wraps to s0: [2.5, 3]. s0 F(0,1) [3, 4], s1 F(1,0)
    # [3, 4]; its wrap [4, 4.5]; s0's F(0,1) output waits for s1 to post after F(1,0): [4, 4.5]. s0 F(1,1)
    # [4.5, 5.5], s1 F(0,1) [4.5, 5.5], B(0,1) [5.5, 6.5]; s0 F(1,1)'s output [5.5, 6]; s1 F(1,1) [6.5, 7.5],
    # B(1,1) [7.5, 8.5]. B(0,1)'s gradient: s0 posted after F(1,1): [6.5, 7]; s0 B(0,1) [7, 8]; it wraps
    # [8, 8.5]. B(1,1)'s gradient: s0 posted after B(0,1) at 8: [8.5, 9]; s0 B(1,1) [9, 10], wrap [10, 10.5].
    # s1 B(0,0) waits for B(1,1)'s send: [9, 10]; its gradient, s0 posted after B(1,1): [10, 10.5].
    # s1 B(1,0) [10.5, 11.5]; s0 B(0,0) [10.5, 11.5]; B(1,0)'s gradient [11.5, 12]: s0 B(1,0) [12, 13].
    one = [[1.0, 1.0], [1.0, 1.0]]
    timeline = simulate_p2p("megatron_overlap_r0.8", "interleaved", one, one, 2, [[0.5, 0.5], [0.5, 0.5]])
    assert [[(op.kind, op.micro_batch, op.chunk) for op in order] for order in timeline.orders] == [
        [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("B", 0, 1), ("B", 1, 1), ("B", 0, 0), ("B", 1, 0)],
        [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("B", 0, 1), ("F", 1, 1), ("B", 1, 1), ("B", 0, 0), ("B", 1, 0)],
    ]
    assert timeline.starts[0] == pytest.approx([0, 1.5, 3, 4.5, 7, 9, 10.5, 12])
    assert timeline.starts[1] == pytest.approx([1.5, 3, 4.5, 5.5, 6.5, 7.5, 9, 10.5])
    assert timeline.makespan == pytest.approx(13.0)
    # core_v0.18 (d98e8a64): a forward's send waited for before the next op, a backward's once the next
    # backward's send is posted. Stage 1's B(0,0) no longer waits for B(1,1)'s send (9): it starts when
    # B(1,1) ends, 8.5; its gradient still waits for stage 0 to post after B(1,1) at 10: [10, 10.5].
    # The forwards' sends are waited for where core_r0.8 waits too (the next op is the next forward) or
    # before ops that wait longer for their input.
    newer = simulate_p2p("megatron_overlap", "interleaved", one, one, 2, [[0.5, 0.5], [0.5, 0.5]])
    assert newer.starts[0] == pytest.approx([0, 1.5, 3, 4.5, 7, 9, 10.5, 12])
    assert newer.starts[1] == pytest.approx([1.5, 3, 4.5, 5.5, 6.5, 7.5, 8.5, 10.5])


def test_warmup_flush_prefetches_the_warm_up_and_cool_down_receives_by_hand() -> None:
    # The same P = 2, V = 2, m = 2 at core_v0.18 with --overlap-p2p-communication-warmup-flush (d98e8a64
    # `overlap_p2p_comm_warmup_flush`): stage 1 (not the first) posts its warm-up forwards' receives one
    # forward earlier (F(1,0) from the start, the first steady F(0,1) after F(0,0)), which changes nothing
    # here: stage 0's sends end after stage 1 posted them either way. Stage 0 (not the last; every forward
    # first) posts each cool-down backward's receive before the backward ahead of it: B(0,0)'s after B(0,1)
    # ends at 8, not after B(1,1) at 10. Stage 1's B(0,0) [8.5, 9.5] sends its gradient at once, [9.5, 10],
    # and stage 0's B(0,0) runs [10, 11] where it ran [10.5, 11.5]; B(1,0)'s gradient still comes at 12.
    one = [[1.0, 1.0], [1.0, 1.0]]
    flushed = simulate_p2p("megatron_overlap", "interleaved", one, one, 2, [[0.5, 0.5], [0.5, 0.5]], warmup_flush=True)
    assert flushed.starts[0] == pytest.approx([0, 1.5, 3, 4.5, 7, 9, 10, 12])
    assert flushed.starts[1] == pytest.approx([1.5, 3, 4.5, 5.5, 6.5, 7.5, 8.5, 10.5])
    order = stage_orders("interleaved", 2, 2, 2)[1]
    assert _post("megatron_overlap", "interleaved", 2, order, 1, 1, (0, 1), 0, True) is None
    assert _post("megatron_overlap", "interleaved", 2, order, 1, 2, (0, 2), 1, True) == (0, None)
    assert _post("megatron_overlap", "interleaved", 2, order, 1, 2, (0, 2), 1) == (1, None)
    run = small_run(pp=2, vpp=2, schedule="interleaved", timing={"overlap_p2p_comm_warmup_flush": True})
    assert framework_rules(run).p2p_warmup_flush and not framework_rules(small_run(pp=2)).p2p_warmup_flush


def test_megatron_rules_name_its_protocols() -> None:
    assert framework_rules(small_run(pp=2)).p2p_protocol == "megatron_sync"
    assert framework_rules(small_run(pp=2, vpp=2, schedule="interleaved")).p2p_protocol == "megatron_overlap"
    older = small_run(pp=2, vpp=2, schedule="interleaved", timing={"interleaved_send_waits": "core_r0.8"})
    assert framework_rules(older).p2p_protocol == "megatron_overlap_r0.8"
    # --no-overlap-p2p-communication (and Megatron-LM of 2022): the interleaved schedule's blocking calls; 1F1B
    # is megatron_sync either way (Megatron forces overlap_p2p_comm off without virtual stages)
    batched = small_run(pp=2, vpp=2, schedule="interleaved", timing={"overlap_p2p_comm": False})
    assert framework_rules(batched).p2p_protocol == "megatron_batched"
    assert framework_rules(small_run(pp=2, timing={"overlap_p2p_comm": False})).p2p_protocol == "megatron_sync"


def test_the_warmup_flush_needs_overlapped_p2p() -> None:
    # model_parallel_config.py `__post_init__` (d98e8a64): the flush "is only compatible with overlap_p2p_comm but
    # not batch_p2p_comm"
    with pytest.raises(InputError, match=r"timing\.overlap_p2p_comm_warmup_flush.*needs timing\.overlap_p2p_comm"):
        timing = {"overlap_p2p_comm": False, "overlap_p2p_comm_warmup_flush": True}
        small_run(pp=2, vpp=2, schedule="interleaved", timing=timing)


def test_the_batched_protocol_is_the_interleaved_schedule_s() -> None:
    with pytest.raises(ValueError, match="megatron_batched is the interleaved schedule's"):
        simulate_p2p("megatron_batched", "1f1b", [[1.0, 1.0]], [[2.0, 2.0]], 4, [[0.25, 0.25]])


@settings(max_examples=40, deadline=None)
@given(
    interleaved=st.booleans(),
    stages=st.integers(2, 4),
    groups=st.integers(1, 3),
    data=st.data(),
)
def test_the_waits_never_shorten_the_plain_schedule_and_slower_links_never_help(
    interleaved: bool, stages: int, groups: int, data
) -> None:
    chunks = 2 if interleaved else 1
    m = stages * groups
    schedule, protocol = ("interleaved", "megatron_overlap") if interleaved else ("1f1b", "megatron_sync")
    protocol = data.draw(
        st.sampled_from(
            ["megatron_overlap", "megatron_overlap_r0.10", "megatron_overlap_r0.8", "megatron_batched", "torch_looped"]
            if interleaved
            else ["megatron_sync", "torch_1f1b", "deepspeed"]
        )
    )
    cells = st.lists(st.floats(0.5, 5.0), min_size=stages * chunks, max_size=stages * chunks)
    flat_f, flat_b = data.draw(cells), data.draw(cells)
    forward = [flat_f[c * stages : (c + 1) * stages] for c in range(chunks)]
    backward = [flat_b[c * stages : (c + 1) * stages] for c in range(chunks)]
    zero = [[0.0] * stages for _ in range(chunks)]
    # Even over a free link a send waits for its receiver to post, so the waits can only add to the schedule.
    plain = simulate(schedule, forward, backward, m).makespan
    free = simulate_p2p(protocol, schedule, forward, backward, m, zero).makespan
    x = data.draw(st.floats(0.0, 2.0))
    slow = [[x] * stages for _ in range(chunks)]
    slower = [[x + 0.5] * stages for _ in range(chunks)]
    a = simulate_p2p(protocol, schedule, forward, backward, m, slow).makespan
    b = simulate_p2p(protocol, schedule, forward, backward, m, slower).makespan
    assert plain - 1e-9 <= free <= a + 1e-9 <= b + 2e-9
    if protocol == "deepspeed":  # a step's two transfers one after the other: never quicker than Megatron's pair
        assert simulate_p2p("megatron_sync", schedule, forward, backward, m, slow).makespan <= a + 1e-9


def test_interleaved_chunk_reductions_launch_rank_backwards_after_their_last() -> None:
    # P = 2, V = 2, m = 2, every op 1, free links. Stage 0: F(0,0) [0,1], F(1,0) [1,2], F(0,1) [2,3],
    # F(1,1) [3,4], B(0,1) [5,6], B(1,1) [7,8], B(0,0) [8,9], B(1,0) [9,10]; stage 1: F(0,0) [1,2],
    # F(1,0) [2,3], F(0,1) [3,4], B(0,1) [4,5], F(1,1) [5,6], B(1,1) [6,7], B(0,0) [7,8], B(1,0) [8,9].
    # Megatron core_r0.8.0 `backward_step_helper`: backward k of rank r launches the sync of the chunk whose
    # last micro-batch is backward k − r. Stage 0 (r = 0): chunk 1's last backward is k = 1 (ends 8), chunk
    # 0's k = 3 (ends 10). Stage 1 (r = 1): chunk 1 at k = 1 + 1 = 2 (ends 8); chunk 0's 3 + 1 is past the
    # last backward, launched after the cool-down: 9.
    one = [[1.0, 1.0], [1.0, 1.0]]
    timeline = simulate("interleaved", one, one, 2)
    assert timeline.ends == [[1, 2, 3, 4, 6, 8, 9, 10], [2, 3, 4, 5, 6, 7, 8, 9]]
    assert chunk_sync_launches(timeline) == [{1: 8.0, 0: 10.0}, {1: 8.0, 0: 9.0}]


def _body_transfer(**timing) -> float:
    # dp 4 × tp 2 ranks a stage: the neighbouring stage is 8 ranks on, in the next node of 8 (NIC 5e9 B/s;
    # NVLink 5e10 inside the node: tests/small_models.py ROUND_DEVICE at comm efficiency 0.5, no latency)
    run = small_run(dp=4, tp=2, pp=2, sequence_parallel=False, timing=timing)
    memory = MemoryModel(run)
    links = _data_links(run, Links.from_run(run), memory)
    body = next(layer for layer in walk(run).layers if layer.node == BODY)
    return p2p_seconds(run, links, body)


def test_deepspeed_splits_its_pipeline_sends_over_the_tensor_parallel_ranks() -> None:
    # One micro-batch's hidden state: 2048 tokens × 1024 × 2 bytes = 4,194,304 bytes.
    # Megatron-Core without sequence parallelism: every TP rank sends all of it over its NIC: 838.9 us.
    # DeepSpeed's pipe_partitioned: each sends 1/2 (419.4 us), the receiver all-gathers over its 2 TP
    # ranks in the node: 4,194,304 · 1/2 / 5e10 = 41.9 us; 461.4 us in all.
    assert _body_transfer() == pytest.approx(4_194_304 / 5e9)
    assert _body_transfer(pipe_partitioned=True) == pytest.approx(4_194_304 / 2 / 5e9 + 4_194_304 / 2 / 5e10)


def test_torch_1f1b_two_stages_by_hand() -> None:
    # torch 2.13 Schedule1F1B, P = 2, m = 2, f = 1, b = 2, x = 0.25; Megatron's op order. Stage 0 warms up
    # with F0 and F1: F1 does not wait for F0's send (fired, waited for after F1): F0 [0, 1], F1 [1, 2].
    # F0's send [1, 1.25]; stage 1 F0 [1.25, 2.25], B0 [2.25, 4.25]. F1's send is batched with B0's
    # receive on stage 0 and meets stage 1's batch of B0's send and F1's receive, posted after B0: both
    # [4.25, 4.5]. Stage 0 B0 [4.5, 6.5]; stage 1 F1 [4.5, 5.5], B1 [5.5, 7.5]. Stage 0's cool-down receive is
    # posted after B0: B1's gradient [7.5, 7.75], B1 [7.75, 9.75].
    timeline = simulate_p2p("torch_1f1b", "1f1b", [[1.0, 1.0]], [[2.0, 2.0]], 2, [[0.25, 0.25]])
    assert timeline.starts[0] == pytest.approx([0, 1, 4.5, 7.75])
    assert timeline.starts[1] == pytest.approx([1.25, 2.25, 4.5, 5.5])
    assert timeline.makespan == pytest.approx(9.75)
    # Megatron's warm-up waits for F0's send before F1 (send_forward then recv_forward, synchronous)
    megatron = simulate_p2p("megatron_sync", "1f1b", [[1.0, 1.0]], [[2.0, 2.0]], 2, [[0.25, 0.25]])
    assert megatron.starts[0][1] == pytest.approx(1.25)
    assert framework_rules(small_run(pp=2, framework="torchtitan")).p2p_protocol == "torch_1f1b"


def test_torch_looped_steps_in_lock_step_by_hand() -> None:
    # torch 2.6.0 ScheduleInterleaved1F1B, P = 2, V = 2, m = 2 (a round of n = 2), f = 1, b = 2, free links.
    # Stages along the model: rank 0 chunk 0 (0), rank 1 chunk 0 (1), rank 0 chunk 1 (2), rank 1 chunk 1 (3).
    # Rank 0: warm-up (2 − 1)·2 + 2·1 = 4 forwards, empty steps up to its first backward's step 2·2 + 2 = 6,
    # then (cool-down) an empty step before each backward. Rank 1: one empty step, 2 warm-up forwards, an empty
    # step up to step 4, F and B pairs, then the cool-down. Time steps (Fcm: chunk c, micro-batch m):
    #   rank 0: F00 F01 F10 F11 -   -   -   B10 -   B11 -   B00 -   B01
    #   rank 1: -   F00 F01 -   F10 B10 F11 B11 -   B00 -   B01
    # Each step ends when the rank and the neighbour it exchanges with have run that step's action:
    # t0 both 1; t1 2; t2 3; t3 rank 1 receives F11 (stage 2 to 3): both 4; t4 rank 1's F10 [4, 5], no
    # exchange; t5 B10 [5, 7] sent to rank 0: both 7; t6 rank 1's F11 [7, 8]; t7 rank 0 B10 [7, 9], rank 1
    # B11 [8, 10], exchanged: 10; t9 rank 0 B11 and rank 1 B00 [10, 12]; t11 [12, 14]; t13 rank 0's B01 [14, 16].
    # Without the lock step rank 1's F10 would start at 3 (its input's end) and the schedule end at 15.
    one, two, free = [[1.0, 1.0], [1.0, 1.0]], [[2.0, 2.0], [2.0, 2.0]], [[0.0, 0.0], [0.0, 0.0]]
    timeline = simulate_p2p("torch_looped", "interleaved", one, two, 2, free)
    assert [op.kind + str(op.chunk) + str(op.micro_batch) for op in timeline.orders[1]] == [
        "F00", "F01", "F10", "B10", "F11", "B11", "B00", "B01"
    ]  # fmt: skip
    assert timeline.starts[0] == pytest.approx([0, 1, 2, 3, 7, 10, 12, 14])
    assert timeline.starts[1] == pytest.approx([1, 2, 4, 5, 7, 8, 10, 12])
    assert timeline.makespan == pytest.approx(16.0)
    assert simulate("interleaved", one, two, 2).makespan == pytest.approx(15.0)
    # the table's ops, empty steps left out, are Megatron's interleaved order wherever P divides m
    for stages, chunks, m in ((2, 2, 4), (4, 2, 8), (4, 3, 12), (8, 2, 16)):
        steps = looped_steps(stages, chunks, m)
        assert [[op for op in row if op is not None] for row in steps] == stage_orders("interleaved", stages, chunks, m)
    titan = small_run(pp=2, vpp=2, schedule="interleaved", framework="torchtitan")
    assert framework_rules(titan).p2p_protocol == "torch_looped"


def test_deepspeed_two_stages_four_micro_batches_by_hand() -> None:
    # DeepSpeed 93e9307d's TrainSchedule (runtime/pipe/schedule.py), P = 2, m = 4, f = 1, b = 2, x = 0.25;
    # Megatron's op order. Each step's transfers are blocking and one after another: before a forward,
    # RecvActivation then SendGrad (of the backward before it); before a backward, SendActivation (of the
    # forward before it) then RecvGrad.
    # s0 F0 [0, 1]; act0 [1, 1.25] (stage 1 receives from the start); s0 F1 waits for it: [1.25, 2.25].
    # s1 F0 [1.25, 2.25], B0 [2.25, 4.25]. act1: s1 receives it after B0: [4.25, 4.5]; only then s1 sends
    # grad0, which s0 receives after sending act1: [4.5, 4.75]. s0 B0 [4.75, 6.75]; s1 F1 [4.75, 5.75],
    # B1 [5.75, 7.75]. s0 F2 [6.75, 7.75]; act2 [7.75, 8], grad1 [8, 8.25]: s0 B1 [8.25, 10.25], s1 F2
    # [8.25, 9.25], B2 [9.25, 11.25]. s0 F3 [10.25, 11.25]; act3 [11.25, 11.5], grad2 [11.5, 11.75]: s0 B2
    # [11.75, 13.75], s1 F3 [11.75, 12.75], B3 [12.75, 14.75]; grad3 [14.75, 15], s0 B3 [15, 17].
    # Megatron's batched pairs end at 16.25 (above): each steady step here pays two transfers, not one.
    timeline = simulate_p2p("deepspeed", "1f1b", [[1.0, 1.0]], [[2.0, 2.0]], 4, [[0.25, 0.25]])
    assert timeline.starts[0] == pytest.approx([0, 1.25, 4.75, 6.75, 8.25, 10.25, 11.75, 15])
    assert timeline.starts[1] == pytest.approx([1.25, 2.25, 4.75, 5.75, 8.25, 9.25, 11.75, 12.75])
    assert timeline.makespan == pytest.approx(17.0)
    # with free transfers the lock-step steps time as 1F1B: (m + P - 1)·(f + b)
    free = simulate_p2p("deepspeed", "1f1b", [[1.0] * 4], [[3.0] * 4], 16, [[0.0] * 4])
    assert free.makespan == pytest.approx((16 + 4 - 1) * 4.0)
    assert framework_rules(small_run(pp=2, timing={"deepspeed_pipeline": True})).p2p_protocol == "deepspeed"
    with pytest.raises(ValueError, match="1F1B schedule alone"):
        simulate_p2p("deepspeed", "interleaved", [[1.0, 1.0]] * 2, [[2.0, 2.0]] * 2, 2, [[0.25, 0.25]] * 2)


def test_first_backward_receive_is_posted_after_the_last_warm_up_forward() -> None:
    # P = 2, V = 2, m = 4: stage 0 warms up with 2·(2 − 0 − 1) + (2 − 1)·2 = 4 forwards (indices 0-3), then
    # runs F(2, chunk 0) and B(0, chunk 1) at indices 4 and 5. core_r0.8.0 posts that backward's receive in
    # the last warm-up step (k == num_warmup_microbatches − 1), after index 3, not after the steady forward.
    # Stage 0 with m = 2 runs every forward first (8 ops, warm-up = total): then after the last forward.
    order = stage_orders("interleaved", 2, 2, 4)[0]
    assert [op.kind for op in order[:6]] == ["F", "F", "F", "F", "F", "B"]
    assert _post("megatron_overlap_r0.8", "interleaved", 2, order, 0, 5, (1, 3), -1) == (3, None)
    short = stage_orders("interleaved", 2, 2, 2)[0]
    assert _post("megatron_overlap_r0.8", "interleaved", 2, short, 0, 4, (1, 3), -1) == (3, None)


def _megatron_2022_program(stages: int, chunks: int, m: int, rank: int) -> list[tuple]:
    """One rank's ops and blocking calls, step by step as Megatron-LM's 2022 interleaved schedule issues them
    (megatron/schedules.py `forward_backward_pipelining_with_interleaving` at d898a8991d, written out again
    independently of ppb_core.pipeline_p2p): ("F" | "B", chunk) ops and ("call", sends_next, sends_prev,
    receives_prev, receives_next) calls, each call's requests all waited for (p2p_communication.py
    `_communicate`)."""
    total = m * chunks
    warmup = min((stages - rank - 1) * 2 + (chunks - 1) * stages, total)

    def chunk_of(k: int, forward: bool) -> int:
        chunk = (k % (stages * chunks)) // stages
        return chunk if forward else chunks - chunk - 1

    first, last = rank == 0, rank == stages - 1
    program: list[tuple] = [] if first else [("call", 0, 0, 1, 0)]  # recv_forward before the warm-up
    for k in range(warmup):
        program.append(("F", chunk_of(k, True)))
        send = 0 if last and chunk_of(k, True) == chunks - 1 else 1
        recv_prev = 0 if (first and chunk_of(k + 1, True) == 0) or k == total - 1 else 1
        recv_next = 1 if k == warmup - 1 and not last else 0
        program.append(("call", send, 0, recv_prev, recv_next))
    for k in range(total - warmup):
        forward_k = k + warmup
        program += [("F", chunk_of(forward_k, True)), ("B", chunk_of(k, False))]
        send_next = 0 if last and chunk_of(forward_k, True) == chunks - 1 else 1
        send_prev = 0 if first and chunk_of(k, False) == 0 else 1
        recv_prev = 0 if first and chunk_of(forward_k - (stages - 1), True) == chunks - 1 else 1
        recv_next = 0 if last and chunk_of(k - (stages - 1), False) == 0 else 1
        if k == total - warmup - 1:
            recv_prev = 0
        program.append(("call", send_next, send_prev, recv_prev, recv_next))
    for k in range(total - warmup, total):
        program.append(("B", chunk_of(k, False)))
        recv_next = 0 if (last and chunk_of(k + 1, False) == chunks - 1) or k == total - 1 else 1
        program.append(("call", 0, 0 if first and chunk_of(k, False) == 0 else 1, 0, recv_next))
    return program


def _megatron_2022_starts(stages, chunks, m, forward, backward, x) -> list[list[tuple[str, int, float]]]:
    """Each rank's ops with their start times when every transfer takes *x*: the n-th send to a neighbour
    meets that neighbour's n-th receive from it (NCCL's order), starting once both calls are posted."""
    programs = [_megatron_2022_program(stages, chunks, m, r) for r in range(stages)]
    posted: dict[tuple, float] = {}  # (link, direction, n) -> the time each side posted it
    pointer, clock = [0] * stages, [0.0] * stages
    counts = [{"sn": 0, "sp": 0, "rp": 0, "rn": 0} for _ in range(stages)]
    starts: list[list[tuple[str, int, float]]] = [[] for _ in range(stages)]
    while any(pointer[r] < len(programs[r]) for r in range(stages)):
        moved = False
        for r in range(stages):
            while pointer[r] < len(programs[r]):
                item = programs[r][pointer[r]]
                if item[0] != "call":
                    times = forward if item[0] == "F" else backward
                    starts[r].append((item[0], item[1], clock[r]))
                    clock[r] += times[item[1]][r]
                    pointer[r] += 1
                    moved = True
                    continue
                _, send_next, send_prev, recv_prev, recv_next = item
                c = counts[r]
                # a transfer is (direction, its sender, its number on that link); each side posts it at its call
                wanted = []
                if send_next:
                    wanted.append(("f", r, c["sn"]))
                if send_prev:
                    wanted.append(("b", r, c["sp"]))
                if recv_prev:
                    wanted.append(("f", (r - 1) % stages, c["rp"]))
                if recv_next:
                    wanted.append(("b", (r + 1) % stages, c["rn"]))
                for key in wanted:
                    posted.setdefault((*key, r), clock[r])
                ends = []
                for key in wanted:
                    way, sender, _ = key
                    receiver = (sender + 1) % stages if way == "f" else (sender - 1) % stages
                    other = receiver if sender == r else sender
                    if (*key, other) not in posted:
                        break
                    ends.append(max(posted[(*key, r)], posted[(*key, other)]) + x)
                else:
                    clock[r] = max([clock[r], *ends])
                    c["sn"] += send_next
                    c["sp"] += send_prev
                    c["rp"] += recv_prev
                    c["rn"] += recv_next
                    pointer[r] += 1
                    moved = True
                    continue
                break
        assert moved, "the program deadlocks"
    return starts


@settings(max_examples=25, deadline=None)
@given(stages=st.integers(2, 4), chunks=st.integers(2, 3), groups=st.integers(2, 3), data=st.data())
def test_batched_protocol_agrees_with_megatron_2022_s_calls_step_by_step(stages, chunks, groups, data) -> None:
    # `megatron_batched` (ppb's graph of posts and waits, keyed by the op each transfer feeds) against a
    # step-by-step run of the 2022 schedule's own calls (above), whose receives NCCL matches to sends by order.
    # m = groups · P with groups >= 2 (Megatron asserts m % P == 0; at m = P it runs every forward first).
    m = groups * stages
    cells = st.lists(st.floats(0.5, 3.0), min_size=stages * chunks, max_size=stages * chunks)
    flat_f, flat_b = data.draw(cells), data.draw(cells)
    forward = [flat_f[c * stages : (c + 1) * stages] for c in range(chunks)]
    backward = [flat_b[c * stages : (c + 1) * stages] for c in range(chunks)]
    x = data.draw(st.floats(0.0, 1.0))
    timeline = simulate_p2p("megatron_batched", "interleaved", forward, backward, m, [[x] * stages] * chunks)
    expected = _megatron_2022_starts(stages, chunks, m, forward, backward, x)
    for stage in range(stages):
        assert [(op.kind, op.chunk) for op in timeline.orders[stage]] == [(k, c) for k, c, _ in expected[stage]]
        assert timeline.starts[stage] == pytest.approx([t for _, _, t in expected[stage]], abs=1e-9)
