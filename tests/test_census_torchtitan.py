"""torchtitan's Llama block measured on the CPU under its activation checkpointing, against the framework module.

The census (ppb_core.census.torchtitan) runs a torchtitan-style block wrapped as torchtitan v0.2.2
wraps it (none, full, the per-op policy) and measures what it keeps for its backward; the memory
model's torchtitan rules (ppb_core.memory.frameworks.torchtitan) must give the same within 2%.
The rules leave out the norms' fp32 statistics (4 bytes a token and norm): the only difference.
"""

from __future__ import annotations

import weakref
from typing import Any

import pytest

pytest.importorskip("torch")

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import loss as loss_parallel

from ppb_core.census.live import LiveBytes
from ppb_core.census.torchtitan import (
    BlockDims,
    MoeBlockDims,
    measure_block,
    measure_moe_block,
    saved_activation_bytes,
)
from ppb_core.config.run import parse_run_config
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import walk

RECOMPUTE = {"none": {"mode": "none"}, "op": {"mode": "selective", "option": "op"}, "full": {"mode": "full"}}
SHAPES = [(BlockDims(128, 2, 1, 352), 64), (BlockDims(192, 3, 3, 512), 96), (BlockDims(128, 4, 1, 256), 80)]


def _predicted(dims: BlockDims, tokens: int, ac: str, compiled: bool = False) -> float:
    run = parse_run_config(
        {
            "framework": "torchtitan",
            "timing": {"torch_compile": compiled},
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


@pytest.mark.parametrize("ac", ["none", "op", "full"])
def test_the_framework_module_predicts_the_compiled_block(ac):
    """torchtitan's apply_compile: the wrapped block under torch.compile (Inductor on the CPU), what the
    partitioner saves for the compiled backward against the rules with timing.torch_compile."""
    dims, tokens = SHAPES[0]
    measured = measure_block(dims, tokens, ac, compiled=True)
    predicted = _predicted(dims, tokens, ac, compiled=True)
    # the only differences: the norms' fp32 rstd (none, as eager), and under full the CPU generator's
    # state the compiled checkpoint saves (preserve_rng_state; a GPU's philox seed and offset are 16 bytes)
    extra = {"none": 2 * 4 * tokens, "op": 0, "full": torch.get_rng_state().numel()}[ac]
    assert measured.kept_bytes - predicted == extra, (predicted, measured.kept_bytes)


def test_the_compiled_op_policy_drops_the_unread_matmul_output_as_measured():
    # the same block as below, compiled: w2's output (256·2 a token) is saved eagerly, not compiled;
    # the rest as eager: 128 · (512 + 512 + 256 + 512 + 16 + 1408)
    dims = BlockDims(256, 4, 2, 704)
    assert measure_block(dims, 128, "op", compiled=True).kept_bytes == 128 * (512 + 512 + 256 + 512 + 16 + 1408)


def test_op_policy_saves_every_other_matmul_as_measured():
    # h 256, 4 heads of 64, 2 kv heads, width 704, 128 tokens, by hand (bf16): the input 256·2, wq's
    # output 256·2, wv's 128·2, the SDPA output 256·2 and log-sum-exp 4·4, w1's 704·2, w2's 256·2 a token
    dims = BlockDims(256, 4, 2, 704)
    assert measure_block(dims, 128, "op").kept_bytes == 128 * (512 + 512 + 256 + 512 + 16 + 1408 + 512)


# torchtitan's MoE blocks (v0.2.2): DeepSeek-V3's MLA with and without a query LoRA, both with a
# shared expert, and Qwen3's GQA with qk norms and no shared expert; 4 experts, top 2, sigmoid router.
MOE_BLOCKS = {
    "mla-q-lora": MoeBlockDims(64, 4, 4, 2, 32, shared_ffn=48, q_lora=32, kv_lora=16, nope=8, rope=8, v=16),
    "mla": MoeBlockDims(64, 4, 4, 2, 32, shared_ffn=48, kv_lora=16, nope=8, rope=8, v=16),
    "gqa-qk-norm": MoeBlockDims(64, 4, 4, 2, 32, kv_heads=2, head_dim=16),
}


def _moe_spec(dims: MoeBlockDims) -> dict:
    spec = {
        "vocab_size": 1024,
        "hidden_size": dims.hidden,
        "num_layers": 2,
        "num_attention_heads": dims.heads,
        "intermediate_size": 4 * dims.hidden,
        "num_experts": dims.experts,
        "experts_per_token": dims.top_k,
        "moe_intermediate_size": dims.expert_ffn,
    }
    if dims.shared_ffn:
        spec |= {"shared_experts": 1, "shared_expert_intermediate_size": dims.shared_ffn}
    if dims.kv_lora:
        spec |= {
            "q_lora_rank": dims.q_lora,
            "kv_lora_rank": dims.kv_lora,
            "qk_nope_head_dim": dims.nope,
            "qk_rope_head_dim": dims.rope,
            "v_head_dim": dims.v,
        }
    else:
        spec |= {"num_key_value_heads": dims.kv_heads, "head_dim": dims.head_dim, "qk_norm": True}
    return spec


@pytest.mark.parametrize("name", list(MOE_BLOCKS))
def test_the_op_policy_of_moe_blocks_as_measured(name):
    dims, tokens = MOE_BLOCKS[name], 32
    run = parse_run_config(
        {
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": _moe_spec(dims)}],
            "parallel": {"zero": 0},
            "training": {"seq_length": tokens, "recompute": RECOMPUTE["op"]},
            "device": {"name": "h100-80gb"},
        },
        "titan.yaml",
    )
    memory = MemoryModel(run)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    predicted = memory.activation_bytes(layer, *memory.option_state(layer, "SLCT"))
    assert predicted == measure_moe_block(dims, tokens, "op")
    # by hand, 32 tokens, bf16; the block's input 32·64·2 = 4096, the attention kernel's output 32·4·16·2
    # = 4096 and fp32 log-sum-exp 32·4·4 = 512, then the odd matmuls of the forward order
    # (deepseek_v3/model/model.py, moe/moe.py; the experts' _grouped_mm is no aten.mm):
    # - MLA with LoRA: wq_a 1 (32·32·2), wq_b 2, wkv_a 3 (32·24·2), wkv_b 4, wo 5 (32·64·2), gate 6,
    #   shared w1 7 (32·48·2), w3 8, w2 9 (32·64·2)
    # - MLA: wq 1 (32·4·16·2), wkv_a 2, wkv_b 3 (32·4·24·2), wo 4, gate 5 (32·4·2), w1 6, w3 7 (32·48·2), w2 8
    # - GQA with qk norms (qwen3): wq 1 (32·64·2), wk 2, wv 3 (32·32·2), wo 4, gate 5 (32·4·2)
    by_hand = {
        "mla-q-lora": 2048 + 1536 + 4096 + 3072 + 4096,
        "mla": 4096 + 6144 + 256 + 3072,
        "gqa-qk-norm": 4096 + 2048 + 256,
    }
    assert predicted == 4096 + 4096 + 512 + by_hand[name]


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


def test_torchtitan_compiled_cross_entropy_measured_on_the_cpu():
    """The compiled loss (loss.py build_cross_entropy_loss with compile): what the compiled forward saves,
    and the gradient its backward returns."""
    tokens, vocab = 256, 1000
    pred = torch.randn(1, tokens, vocab, dtype=torch.bfloat16).requires_grad_()
    logits = pred * 1  # the output layer's bf16 logits, not a leaf
    labels = torch.randint(0, vocab, (1, tokens))

    def cross_entropy_loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum")

    loss = torch.compile(cross_entropy_loss)(logits, labels)
    # saved: the bf16 logits themselves, the labels (8 a token) and two fp32 statistics a token
    assert saved_activation_bytes(loss, []) == 2 * tokens * vocab + 8 * tokens + 2 * 4 * tokens
    grads = torch.autograd.grad(loss, logits)
    assert grads[0].dtype == torch.bfloat16  # the cast's backward fused: a bf16 gradient, 2 a logit


def _output_and_loss() -> tuple[torch.nn.Linear, torch.Tensor, torch.Tensor, Any]:
    output = torch.nn.Linear(64, 1000, bias=False).to(torch.bfloat16)
    x = torch.randn(1, 128, 64, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 1000, (1, 128))

    def cross_entropy_loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum")

    return output, x, labels, cross_entropy_loss


def test_the_compiled_loss_frees_the_logits_before_the_output_layer_s_backward():
    """torchtitan's `del pred; loss.backward()` with the compiled loss: when the output layer's weight
    gradient forms, the logits the compiled loss saved are gone (TorchtitanRules.freed_before_backward_bytes)."""
    output, x, labels, cross_entropy_loss = _output_and_loss()
    pred = output(x)
    alive = weakref.ref(pred)
    loss = torch.compile(cross_entropy_loss)(pred, labels)
    del pred
    assert alive() is not None  # saved by the compiled forward
    seen: list[bool] = []
    output.weight.register_hook(lambda grad: seen.append(alive() is not None))
    loss.backward()
    assert seen == [False]


def test_the_eager_loss_frees_the_log_probabilities_before_the_output_layer_s_backward():
    """The same, eager: at the output layer's weight gradient less is alive than the fp32 log-probabilities
    alone (4 · 128 · 1000 bytes): the bf16 logits' gradient (2 · 128 · 1000) and the weight's (2 · 64000)."""
    output, x, labels, cross_entropy_loss = _output_and_loss()
    seen: list[int] = []
    with LiveBytes() as live:
        pred = output(x)
        loss = cross_entropy_loss(pred, labels)
        del pred
        output.weight.register_hook(lambda grad: seen.append(live.now))
        loss.backward()
    assert len(seen) == 1 and seen[0] < 4 * 128 * 1000, seen
    assert seen[0] <= 2 * 128 * 1000 + 2 * 64000 + 2 * 128 * 64, seen


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
