"""The word-embedding gradient all-reduce Megatron runs after the pipeline (finalize_model_grads.py
`_allreduce_word_embedding_grads`, Megatron-LM d98e8a64) between the ranks pretrain_gpt.py
`get_embedding_ranks` names: the first stage, the last when tied, and every stage that builds MTP
layers (multi_token_prediction.py `get_mtp_ranks`), tied or not.

Expected seconds follow the ring all-reduce in docs/timing.md (2·P·(g−1)/g bytes over the ring's
bandwidth, 2(g−1) steps of latency) with the h100-80gb catalog entry's links: NVLink 450 GB/s at
0.8, a NIC 50 GB/s at 0.94, 5 µs a step, 5 µs more leaving the node.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.estimate.inputs import load_run
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import walk
from ppb_core.timing.comm import Links
from ppb_core.timing.iteration import _data_links, _embedding_sync, embedding_sync_bytes, embedding_sync_stages
from tests.small_models import SMALL_GQA

CONFIGS = Path(__file__).parent.parent / "configs"
NVLINK, NIC, STEP = 450e9 * 0.8, 50e9 * 0.94, 5e-6


def _seconds(run) -> float:
    memory = MemoryModel(run)
    return _embedding_sync(run, memory, _data_links(run, Links.from_run(run), memory), walk(run).layers)


def _small(tied: bool, layout: str, framework: str = "megatron"):
    spec = dict(copy.deepcopy(SMALL_GQA), mtp_layers=1, tied_embeddings=tied)
    return parse_run_config(
        {
            "name": "x",
            "framework": framework,
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"pp": 4, "layout": layout} if layout else {"pp": 4},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "micro_batches": 8},
            "device": {"name": "h100-80gb"},
        }
    )


def test_deepseek_v3_fused_and_standalone_mtp():
    """DeepSeek-V3 (untied, one MTP layer) at tp 1: P = 129,280 · 7168 · 4 B (fp32 main_grad) =
    3,706,716,160 B between two ranks 128·k apart, on different nodes: one NIC (47 GB/s), 2 steps
    of 10 µs -> 2·P·(1/2)/47e9 + 2e-5 = 0.078886301 s. Fused (`mL` on the last stage): stages 0 and
    15; Megatron's layout 'Et*3|(tt|)*29,m|L': the MTP chunk on rank 14, the same seconds."""
    run = load_run(CONFIGS / "deepseek-v3.yaml")
    memory = MemoryModel(run)
    assert embedding_sync_bytes(run, memory, "llm") == 3_706_716_160
    expected = 3_706_716_160 / 47e9 + 2e-5
    assert embedding_sync_stages(run, walk(run).layers, "llm") == [0, 15]
    assert _seconds(run) == pytest.approx(expected, rel=1e-12)
    standalone = run.model_copy(update={"parallel": run.parallel.model_copy(update={"layout": "Et*3|(tt|)*29,m|L"})})
    assert embedding_sync_stages(standalone, walk(standalone).layers, "llm") == [0, 14]
    assert _seconds(standalone) == pytest.approx(expected, rel=1e-12)


def test_tied_with_a_standalone_mtp_reduces_over_three_stages():
    """h 1024, vocabulary 4096, tp 1: P = 4096·1024·4 = 16,777,216 B. Layout 'Et|t|ttm|L' on pp 4
    (dp 1, tp 1): the MTP layer on stage 2, the loss on stage 3; four ranks in one node (NVLink).
    Tied: stages 0, 2, 3 -> 2·P·(2/3)/360e9 + 4·5e-6; untied: stages 0, 2 -> P/360e9 + 2·5e-6;
    the fused 'Et|t|tt|mL', tied or not: stages 0 and 3, as the untied one."""
    payload = 16_777_216
    tied = _small(True, "Et|t|ttm|L")
    assert embedding_sync_stages(tied, walk(tied).layers, "llm") == [0, 2, 3]
    assert _seconds(tied) == pytest.approx(2 * payload * 2 / 3 / NVLINK + 4 * STEP, rel=1e-12)
    untied = _small(False, "Et|t|ttm|L")
    assert embedding_sync_stages(untied, walk(untied).layers, "llm") == [0, 2]
    assert _seconds(untied) == pytest.approx(payload / NVLINK + 2 * STEP, rel=1e-12)
    for fused in (_small(True, "Et|t|tt|mL"), _small(False, "Et|t|tt|mL"), _small(False, "")):
        assert embedding_sync_stages(fused, walk(fused).layers, "llm") == [0, 3]
        assert _seconds(fused) == pytest.approx(payload / NVLINK + 2 * STEP, rel=1e-12)


def test_only_megatron_syncs_an_untied_mtp_embedding():
    """Megatron's rule (`get_embedding_ranks`); another framework keeps the tied pair alone."""
    run = _small(False, "", framework="torchtitan")
    assert embedding_sync_stages(run, walk(run).layers, "llm") == [0]
    assert _seconds(run) == 0.0
