"""MindFormers' v1.3.0 Qwen cards (bench/_mindformers.py `V130_ROWS`): the figures in seconds, the yamls' settings."""

from __future__ import annotations

import pytest
from bench_modules import load_bench

from ppb_core.memory.model import MemoryModel
from ppb_core.model.kinds import HeadKind
from ppb_core.model.walk import walk


@pytest.fixture(scope="module")
def rows():
    public = load_bench("public_runs")
    found = [row for row in public.public_runs() if row.source.startswith(public.CARDS_V130)]
    return {row.name: (row, public.config(row)) for row in found}


def test_v130_qwen_rows_count_the_global_batch_as_the_trainer_does(rows):
    assert len(rows) == 2
    # finetune_qwen_7b_bf16.yaml: batch_size 2 · data_parallel 8 (full_batch, one stage, no accumulation) = 16
    # sequences of 2048 = 32,768 tokens, at 2955 tokens/s on each of 8 devices (23,640): 1.38613 s
    row, run = rows["MindFormers v1.3.0 Qwen 7B finetune bf16 (8 910B, DP8, Atlas 800T A2)"]
    assert row.seconds == pytest.approx(1.38613, rel=1e-5)
    assert (run.training.micro_batch_size, run.training.micro_batches, run.parallel.dp) == (2, 1, 8)
    # finetune_qwen_14b_bf16.yaml: 1 · 8 = 8 sequences, 16,384 tokens at 1106 · 8 = 8,848 tokens/s: 1.85172 s;
    # `recompute: True` (whole layers)
    row, run = rows["MindFormers v1.3.0 Qwen 14B finetune bf16 (8 910B, DP8, Atlas 800T A2)"]
    assert row.seconds == pytest.approx(1.85172, rel=1e-5)
    assert run.training.micro_batch_size == 1
    # Qwen's c_attn carries a bias (qwen_model.py at v1.3.0: `qkv_has_bias=True`), its lm_head untied
    spec = row.raw["models"][0]["spec"]
    assert spec["attention_bias"] is True
    assert not spec.get("tied_embeddings", False)


def test_v130_qwen_embedding_is_sliced_by_the_parallel_optimizer(rows):
    """qwen_model.py at v1.3.0 (debac6a97) builds `QwenModel.wte` as `LlamaEmbedding(..., parallel_optimizer=True)`,
    so MindSpore's optimizer parallel slices the table over data_parallel 8 like any other weight: 14B's
    152064 x 5120 = 778,567,680 elements, 778,567,680 / 8 = 97,320,960 held (152064 rows divide by 8)."""
    _, run = rows["MindFormers v1.3.0 Qwen 14B finetune bf16 (8 910B, DP8, Atlas 800T A2)"]
    assert run.parallel.embedding_parallel_optimizer is True
    memory = MemoryModel(run)
    head = next(layer for layer in walk(run).layers if isinstance(layer.kind, HeadKind))
    assert memory.static_breakdown(head).parameters == 152064 * 5120 // 8 == 97_320_960


def test_v130_qwen_rows_fit_the_910b_they_trained_on(rows):
    """Both cards trained on 64 GB 910Bs (the yamls' `max_device_memory: 59GB`); with the embedding sliced the 14B
    row's stage peak is under the device (it held 73,237 MiB with the table whole: 778,567,680 elements at 2 + 4 +
    12 bytes, 13,365 MiB, where its 1/8 slice holds 1,671)."""
    assert load_bench("public_runs").over_device([row for row, _ in rows.values()]) == []
