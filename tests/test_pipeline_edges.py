"""Pipeline neighbours placed edge by edge (iteration.py `pipeline_edge_local`): ranks stage-major, a
stage's tp·cp·dp ranks consecutive (Megatron-Core's RankGenerator order tp-cp-ep-dp-pp, MindSpore's
DeviceManager::Init, torchtitan's ["pp", ...] meshes), nodes of 8. Every expectation is worked by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ppb_core.memory import MemoryModel
from ppb_core.model.walk import BODY, walk
from ppb_core.timing.comm import Links
from ppb_core.timing.iteration import _data_links, p2p_seconds, pipeline_edge_local, run_iteration
from tests.test_timing_iteration import small_run

NVLINK, NIC = 5e10, 5e9  # tests/small_models.py ROUND_DEVICE: 100 and 10 GB/s at comm efficiency 0.5, no latency
HIDDEN_BYTES = 2048 * 1024 * 2  # a micro-batch's hidden state: 2048 tokens × 1024 × bf16


def _placed(tp: int, dp: int = 1, cp: int = 1, node: int = 8):
    """What `pipeline_edge_local` reads of a run: its parallel sizes and node."""
    return SimpleNamespace(parallel=SimpleNamespace(tp=tp, cp=cp, dp=dp, devices_per_node=node))


def test_four_ranks_a_stage_cross_every_second_boundary():
    # tp 4: stage s holds ranks 4s..4s+3; nodes of 8 hold stages {0, 1}, {2, 3}, ...
    run = _placed(tp=4)
    assert [pipeline_edge_local(run, s, s + 1) for s in range(7)] == [True, False, True, False, True, False, True]


def test_eight_ranks_a_stage_always_cross_and_two_cross_once_a_node():
    # span 8: every stage a node of its own; span 2: stages 4k..4k+3 share node k, so 3→4 crosses (ranks
    # 6, 7 → 8, 9) and 0→1, 1→2, 2→3 do not.
    wide = _placed(tp=4, dp=2)
    assert not any(pipeline_edge_local(wide, s, s + 1) for s in range(3))
    narrow = _placed(tp=1, dp=2)
    assert [pipeline_edge_local(narrow, s, s + 1) for s in range(7)] == [True, True, True, False, True, True, True]


def test_a_stage_straddling_two_nodes_crosses_when_one_pair_does():
    # tp 3 (span 3): stage 1 is ranks 3, 4, 5, stage 2 ranks 6, 7, 8: rank 5 → 8 leaves node 0.
    # Stage 0 → 1: ranks 0-2 → 3-5, all in node 0.
    run = _placed(tp=3)
    assert pipeline_edge_local(run, 0, 1)
    assert not pipeline_edge_local(run, 1, 2)


def test_the_interleaved_wrap_goes_back_to_the_first_stage():
    # The last stage's chunk hands on to stage 0's next chunk: with 2 stages of 4 ranks both sit in node 0
    # (ranks 4-7 → 0-3 inside); with 4 stages, ranks 12-15 → 0-3 leave node 1.
    assert pipeline_edge_local(_placed(tp=4), 1, 0)
    assert not pipeline_edge_local(_placed(tp=4), 3, 0)
    # context parallelism counts in the span: tp 2 · cp 2 is four ranks a stage, as tp 4
    assert not pipeline_edge_local(_placed(tp=2, cp=2), 1, 2)


def _seconds(run, edge):
    links = _data_links(run, Links.from_run(run), MemoryModel(run))
    body = next(layer for layer in walk(run).layers if layer.node == BODY)
    return p2p_seconds(run, links, body, edge)


def test_each_edge_is_priced_by_where_its_stages_sit():
    # tp 4 with sequence parallelism: each rank sends its 1/4 of the hidden state, 1,048,576 bytes:
    # inside the node over NVLink 20.97 us, across over the NIC 209.7 us.
    run = small_run(dp=1, tp=4, pp=4)
    assert _seconds(run, (0, 1)) == pytest.approx(HIDDEN_BYTES / 4 / NVLINK)
    assert _seconds(run, (1, 2)) == pytest.approx(HIDDEN_BYTES / 4 / NIC)
    assert _seconds(run, (2, 3)) == pytest.approx(HIDDEN_BYTES / 4 / NVLINK)


def test_a_crossing_edge_slows_the_pipeline_against_one_inside_the_node():
    # 1F1B, P = 4, m = 4, tp 4: the middle boundary (1→2) leaves the node, the outer two do not. The same
    # run on nodes of 16 keeps every boundary inside; on nodes of 4 every one crosses. The crossing edge's
    # transfers are ten times slower, so the p2p term orders: all inside < one crossing < all crossing.
    inside = run_iteration(small_run(dp=1, tp=4, pp=4, devices_per_node=16)).breakdown["p2p"]
    mixed = run_iteration(small_run(dp=1, tp=4, pp=4, devices_per_node=8)).breakdown["p2p"]
    across = run_iteration(small_run(dp=1, tp=4, pp=4, devices_per_node=4)).breakdown["p2p"]
    assert inside < mixed < across
    # at least the first forward's and the last backward's send over the crossing edge, at the NIC's rate
    assert mixed >= 2 * HIDDEN_BYTES / 4 / NIC - 1e-12
