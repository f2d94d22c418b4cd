"""torchtitan's Llama block measured on the CPU under its activation checkpointing, against the framework module.

The census (ppb_core.census.torchtitan) runs a torchtitan-style block wrapped as torchtitan v0.2.2
wraps it (none, full, the per-op policy) and measures what it keeps for its backward; the memory
model's torchtitan rules (ppb_core.memory.frameworks.torchtitan) must give the same within 2%.
The rules leave out the norms' fp32 statistics (4 bytes a token and norm): the only difference.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import loss as loss_parallel

from ppb_core.census.live import LiveBytes
from ppb_core.census.torchtitan import BlockDims, measure_block
from ppb_core.config.run import parse_run_config
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import walk

RECOMPUTE = {"none": {"mode": "none"}, "op": {"mode": "selective", "option": "op"}, "full": {"mode": "full"}}
SHAPES = [(BlockDims(128, 2, 1, 352), 64), (BlockDims(192, 3, 3, 512), 96), (BlockDims(128, 4, 1, 256), 80)]


def _predicted(dims: BlockDims, tokens: int, ac: str) -> float:
    run = parse_run_config(
        {
            "framework": "torchtitan",
            "models": [
                {
                    "name": "llm",
                    "spec": {
                        "vocab_size": 1024,
                        "hidden_size": dims.hidden,
                        "num_layers": 2,
                        "num_attention_heads": dims.heads,
                        "num_key_value_heads": dims.kv_heads,
                        "intermediate_size": dims.ffn,
                    },
                }
            ],
            "parallel": {"zero": 0},
            "training": {"seq_length": tokens, "recompute": RECOMPUTE[ac]},
            "device": {"name": "h100-80gb"},
        },
        "titan.yaml",
    )
    memory = MemoryModel(run)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    option = {"none": "NONE", "op": "SLCT", "full": "FULL"}[ac]
    return memory.activation_bytes(layer, *memory.option_state(layer, option))


@pytest.mark.parametrize("ac", ["none", "op", "full"])
@pytest.mark.parametrize(("dims", "tokens"), SHAPES, ids=[f"h{d.hidden}-a{d.heads}-kv{d.kv_heads}" for d, _ in SHAPES])
def test_the_framework_module_predicts_the_measured_block(dims, tokens, ac):
    measured = measure_block(dims, tokens, ac)
    predicted = _predicted(dims, tokens, ac)
    assert predicted == pytest.approx(measured.kept_bytes, rel=0.02), (predicted, measured.kept_bytes)
    # and the difference is the norms' statistics where the block keeps them (none: two norms of 4
    # bytes a token; op recomputes the norms; full keeps the input alone)
    statistics = {"none": 2 * 4 * tokens, "op": 0, "full": 0}[ac]
    assert measured.kept_bytes - predicted == statistics


def test_op_policy_saves_every_other_matmul_as_measured():
    # h 256, 4 heads of 64, 2 kv heads, width 704, 128 tokens, by hand (bf16): the input 256·2, wq's
    # output 256·2, wv's 128·2, the SDPA output 256·2 and log-sum-exp 4·4, w1's 704·2, w2's 256·2 a token
    dims = BlockDims(256, 4, 2, 704)
    assert measure_block(dims, 128, "op").kept_bytes == 128 * (512 + 512 + 256 + 512 + 16 + 1408 + 512)


def test_torchtitan_cross_entropy_measured_on_the_cpu():
    """The loss rule against torch itself: live bytes while cross_entropy(pred.float()) runs."""
    tokens, vocab = 256, 1000
    pred = torch.randn(1, tokens, vocab, dtype=torch.bfloat16).requires_grad_()
    labels = torch.randint(0, vocab, (1, tokens))
    logits = tokens * vocab
    with LiveBytes() as live:  # counts what is made inside: the bf16 logits were made before
        loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum")
    assert live.now == pytest.approx(4 * logits, rel=0.01)  # what outlives the forward: the fp32 log-probabilities
    assert live.peak == pytest.approx(8 * logits, rel=0.01)  # the fp32 copy next to them: 6 with the logits
    del pred  # torchtitan/train.py: del pred before loss.backward()
    with LiveBytes() as live:
        loss.backward()
    # beyond the kept log-probabilities: nll_loss's gradient and log_softmax's, 8 bytes a logit
    assert live.peak == pytest.approx(8 * logits, rel=0.01)


def test_torchtitan_loss_parallel_measured_on_the_cpu():
    """Under TP, loss_parallel's own log-softmax and fused nll/log-softmax backward (torch/distributed/
    tensor/parallel/loss.py), the functions its handlers run on the vocabulary shard, on a 1-rank mesh."""
    tokens, vocab = 256, 1000
    logits = tokens * vocab
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        copy = torch.randn(tokens, vocab)  # pred.float(), made before
        with LiveBytes() as live:
            log_probs = loss_parallel._log_softmax(copy, 1, False, mesh, 0)
        assert live.now == pytest.approx(4 * logits, rel=0.01)  # kept: the fp32 log-probabilities
        # shifted and exp(shifted) at once: with the copy and the bf16 logits, 2 + 4 + 8 = 14 a logit
        assert live.peak == pytest.approx(8 * logits, rel=0.01)
        target = torch.randint(0, vocab, (tokens,))
        with LiveBytes() as live:
            loss_parallel._nll_loss_and_log_softmax_backward(
                torch.tensor(1.0), log_probs, target, None, 2, -100, torch.tensor(float(tokens)),
                torch.Size([tokens, vocab]), 1, mesh, 0,
            )  # fmt: skip
        # beyond the kept log-probabilities: zeros, their sum with exp(x), the product: 12 a logit
        assert live.peak == pytest.approx(12 * logits, rel=0.01)
    finally:
        dist.destroy_process_group()
