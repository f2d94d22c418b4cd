"""MindFormers' `parallel_config.vocab_emb_dp` (RunConfig `parallel.vocab_emb_dp`): the embedding table and the output
head whole on every model-parallel rank, the loss still vocabulary-parallel.

From the code (mindformers a4dfb8219 and 2388c729a): llama_layer.py `LlamaEmbedding.shard` takes the Gather
`((1, 1), (dp, cp))` under vocab_emb_dp, else `((mp·cp, 1), (dp, 1))` (rows split, partial lookups summed over mp);
llama.py `LlamaForCausalLM` and research/deepseek2 `DeepseekV2ForCausalLM` shard the lm_head MatMul
`((dp·cp, 1), (1, 1))` under it, else `((dp·cp, 1), (mp, 1))`, and build CrossEntropyLoss with model_parallel mp
either way; the logits are cast to float32 (`self.cast`, no strategy: no operator of its own in semi-auto parallel)
before the loss. MindSpore's optimizer parallel shards a weight over every rank holding the same slice
(operator_info.cc `CreateGroupForOptShard`): dp·cp·mp for a `(1, 1)` weight.

Hand numbers: vocabulary V = 32000, h = 512, N = s·b = 1024 tokens, tp 4 (share V/4 = 8000), dp 2, bf16 (2 bytes).
"""

from __future__ import annotations

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.mindformers import MindFormersRules, optimizer_shards
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.params import head_params, tail_params
from ppb_core.model.walk import model_kinds
from ppb_core.timing.flops import ALL_REDUCE, OpGeometry, layer_ops

V, H, N, TP, DP, BC = 32000, 512, 1024, 4, 2, 2
SPEC = {"vocab_size": V, "hidden_size": H, "num_layers": 2, "num_attention_heads": 8, "intermediate_size": 1024}


def _run(vocab_emb_dp: bool, framework: str = "mindformers", **parallel):
    raw = {
        "name": "x",
        "framework": framework,
        "models": [{"name": "llm", "spec": SPEC}],
        "parallel": {"dp": DP, "tp": TP, "vocab_emb_dp": vocab_emb_dp, **parallel},
        "training": {"seq_length": N, "micro_batch_size": 1, "dtype": "bf16"},
        "device": {"name": "ascend-910b"},
    }
    if framework == "mindformers":
        raw["timing"] = {"jit_level": "O1"}
    return parse_run_config(raw)


def _ops(run, which: int) -> dict:
    kind = model_kinds(run, "llm")[which]
    return {op.name: op for op in layer_ops(kind, OpGeometry.from_run(run))}


def test_only_mindformers_states_it():
    with pytest.raises(InputError, match=r"parallel\.vocab_emb_dp.*MindFormers'"):
        _run(True, framework="megatron")
    assert _run(True).parallel.vocab_emb_dp
    assert not _run(False).parallel.vocab_emb_dp  # ppb's default: vocabulary-parallel (MindFormers' own is true)


def test_tables_are_whole_on_every_tp_rank():
    """HEAD and TAIL hold V·h = 16,384,000 elements each, against V/4·h = 4,096,000 vocabulary-parallel."""
    for flag, rows in ((True, V), (False, V // TP)):
        head, _, tail = model_kinds(_run(flag), "llm")
        assert head_params(head, TP).non_expert == rows * H
        # the tail: the head's table and the final RMSNorm's h scale
        assert tail_params(tail, TP).non_expert == rows * H + H
    assert V * H == 16_384_000


def test_head_computes_every_logit_and_the_loss_keeps_its_share():
    """The logits GEMM over the whole vocabulary: 2·N·h·V = 2·1024·512·32000 = 33,554,432,000 FLOPs forward (4× the
    vocabulary-parallel 8,388,608,000); the loss over this rank's V/4 as before. The head's input gradient is a partial
    sum over mp either way (MindSpore's per-rank backward); split, the lookup's forward all-reduce's bprop sums it,
    priced as the head's input-gradient all-reduce over tp (N·h·2 = 1,048,576 bytes); whole, nothing over tp sums it
    (the lookup has no collective; the table's gradient reduction does); under SP the input's gather and its
    reduce-scatter stay."""
    whole, split = _ops(_run(True), 2), _ops(_run(False), 2)
    assert whole["output.logits"].flops == 2 * N * H * V == 33_554_432_000
    assert split["output.logits"].flops == 2 * N * H * (V // TP) == 8_388_608_000
    assert whole["output.logits"].gemm[2] == V
    assert whole["output.loss"].bytes == split["output.loss"].bytes
    assert whole["output.loss"].backward_bytes == split["output.loss"].backward_bytes
    reduce = split["output.reduce_output_grad"].backward_comm
    assert reduce.kind == ALL_REDUCE and reduce.payload_bytes == N * H * BC == 1_048_576
    assert "output.reduce_output_grad" not in whole
    assert "output.gather_output" in _ops(_run(True, sequence_parallel=True), 2)
    assert "output.logits_slice" not in split


def test_whole_logits_cast_and_slice_bytes():
    """Beyond the loss's own counts (a Cast of this rank's share, bc read and 4 written): forward the Cast on the
    other 24,000 logits a token, (V - V/4)·(2 + 4) = 144,000 B, and the slice of the share, 8000·(4 + 4) = 64,000 B:
    208,000 B a token, 212,992,000 B over N; backward the share's gradient in float32 (8000·(4 - 2) = 16,000), the
    slice's gradient reading the share and writing the whole in float32 (8000·4 + 32000·4 = 160,000) and the Cast
    back (32000·(4 + 2) = 192,000): 368,000 B a token, 376,832,000 B over N."""
    op = _ops(_run(True), 2)["output.logits_slice"]
    assert op.bytes == N * 208_000 == 212_992_000
    assert op.backward_bytes == N * 368_000 == 376_832_000


def test_lookup_needs_no_tp_collective():
    """Vocabulary-parallel, each rank's partial rows are all-reduced over tp (N·h·2 B); whole, nothing."""
    assert "embedding.reduce_embedding" in _ops(_run(False), 0)
    assert _ops(_run(False), 0)["embedding.reduce_embedding"].forward_comm.payload_bytes == N * H * BC
    assert "embedding.reduce_embedding" not in _ops(_run(True), 0)
    assert "embedding.reduce_embedding" not in _ops(_run(True, sequence_parallel=True), 0)


def _optimizer_parallel(vocab_emb_dp: bool, dp: int = DP, **config):
    run = _run(vocab_emb_dp, dp=dp, enable_parallel_optimizer=True, **config)
    setup = MemorySetup.from_run(run)
    return run, setup


def test_optimizer_parallel_shards_a_whole_table_over_dp_times_tp():
    """The output head (untied; threshold 64 KB far below its 32 MB) sharded over every rank holding it: dp·tp = 8,
    V·h / 8 = 2,048,000 elements held; vocabulary-parallel over dp 2: (V/4)·h / 2 = 2,048,000 as well; the final
    norm's 512 stay whole. The gathered weight is the whole table (16,384,000) against its share (4,096,000)."""
    for flag, gathered in ((True, V * H), (False, V // TP * H)):
        run, setup = _optimizer_parallel(flag)
        tail = model_kinds(run, "llm")[2]
        params = tail_params(tail, TP)
        sharded, whole = optimizer_shards(params, tail, setup)
        assert (sharded.non_expert, whole.non_expert) == (gathered, H)
        static = MindFormersRules().static(params, setup, tail)
        assert static.parameters == 2_048_000 + H


def test_a_whole_table_is_sharded_over_tp_at_dp_1():
    """dp 1: nothing to shard a vocabulary-parallel head over; a whole one over its 4 tp ranks: 4,096,000 held."""
    run, setup = _optimizer_parallel(True, dp=1)
    tail = model_kinds(run, "llm")[2]
    params = tail_params(tail, TP)
    assert optimizer_shards(params, tail, setup)[0].non_expert == V * H
    assert MindFormersRules().static(params, setup, tail).parameters == V * H // 4 + H
    run, setup = _optimizer_parallel(False, dp=1)
    tail = model_kinds(run, "llm")[2]
    assert optimizer_shards(tail_params(tail, TP), tail, setup)[0].non_expert == 0


def test_a_stated_shard_size_groups_the_whole_table_by_it():
    """optimizer_weight_shard_size 2 cuts the dp·tp = 8 holders into groups of 2: V·h / 2 = 8,192,000 held."""
    run, setup = _optimizer_parallel(True, parallel_optimizer_config={"optimizer_weight_shard_size": 2})
    tail = model_kinds(run, "llm")[2]
    assert MindFormersRules().static(tail_params(tail, TP), setup, tail).parameters == V * H // 2 + H


def test_the_whole_logits_loss_transient_beyond_sapps_counts():
    """Backward, the slice's float32 gradient of every logit and its 16-bit cast alive at once, against the 16-bit
    gradient of the share a vocabulary-parallel loss writes: N·(V·(4 + 2) - V/4·2) = 1024·(192,000 - 16,000) =
    180,224,000 bytes; nothing for the vocabulary-parallel head (SAPP's counts hold no loss transient)."""
    for flag, expected in ((True, 180_224_000), (False, 0.0)):
        run = _run(flag)
        tail = model_kinds(run, "llm")[2]
        setup = MemorySetup.from_run(run)
        assert MindFormersRules().loss_bytes(tail, tail_params(tail, TP), setup) == expected
