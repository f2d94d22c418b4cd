"""Transformer Engine's cached dummy weight gradients under Megatron's gradient accumulation fusion, by hand.

TE `get_dummy_wgrad(shape, dtype)` (transformer_engine/pytorch/module/base.py at d0067d0d, from ba5dc5dde)
keeps one `torch.empty` per (shape, dtype) in `_dummy_wgrads` for the process's life; TE's linears
(module/linear.py, layernorm_linear.py, grouped_linear.py) and Megatron's own (tensor_parallel/layers.py
`LinearWithGradAccumulationAndAsyncCommunication.backward`, d98e8a64) hand it to autograd where the
parameter has `grad_added_to_main_grad` (Megatron's DDP sets it on every parameter) and the weight
gradient went into `main_grad` (gradient accumulation fusion, Megatron's default).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ppb_core.memory.frameworks.dummy_wgrad import dummy_wgrad_bytes, kind_shapes
from ppb_core.memory.model import MemoryModel, run_stage_peaks, run_workspace_bytes
from ppb_core.model.kinds import BodyKind
from ppb_core.model.walk import walk
from ppb_core.payload.run import describe_run

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from _public import GPT_SMALL, run_config  # noqa: E402


def _defer_case(fusion: bool = True, **parallel: object):
    # Megatron CI's gpt3_mcore_te_tp2_pp2_resume_torch_dist_defer_embedding_wgrad_compute (H100): the 12-layer
    # GPT (h 512, 8 heads, GeLU 2048, vocabulary 50,257 tied) at TP 2, PP 2, dp 2, micro-batch 4, s 1024
    raw = {
        "name": "defer",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": GPT_SMALL, "pad_vocab_multiple": 128}],
        "parallel": {"dp": 2, "tp": 2, "pp": 2, "zero": 0, **parallel},
        "training": {"seq_length": 1024, "micro_batch_size": 4, "micro_batches": 4, "dtype": "bf16"},
        "device": {"name": "h100-80gb", "reserved_mb": 0},
        "timing": {"gradient_accumulation_fusion": fusion},
    }
    return run_config(raw, "defer")


def test_the_last_stage_s_shapes_by_hand():
    # One TP rank's weights: QKV (8/2 + 2·8/2 heads of 64 = 768) × 512 = 393,216; the output projection
    # 512 × 256 = 131,072; fc1 1024 × 512 = 524,288; fc2 512 × 1024 = 524,288; the output layer (50,257 padded to
    # a multiple of 128·2: 50,432, half a rank) 25,216 × 512 = 12,910,592. 14,483,456 elements · 2 bytes =
    # 28,966,912 on the last stage. The golden values (H100, 6e091e1b68 and 5fe3f06658) hold 545,423,872 after
    # the step against 517,243,392 for the same case without the flag and with --no-gradient-accumulation-fusion:
    # 28,180,480 more.
    run = _defer_case()
    memory = MemoryModel(run)
    kinds = {layer.kind for layer in walk(run) if layer.stage == 1}
    shapes = set().union(*(kind_shapes(kind, memory.setup) for kind in kinds))
    assert shapes == {(768, 512), (512, 256), (1024, 512), (512, 1024), (25_216, 512)}
    assert dummy_wgrad_bytes(memory.setup, kinds) == 28_966_912
    # the first stage: the layers' four shapes alone (the embedding's gradient is autograd's own)
    first = {layer.kind for layer in walk(run) if layer.stage == 0}
    assert dummy_wgrad_bytes(memory.setup, first) == 2 * (393_216 + 131_072 + 524_288 + 524_288)


def test_held_at_every_moment_and_only_under_the_fusion():
    fused, plain = (run_stage_peaks(_defer_case(flag)) for flag in (True, False))
    for with_dummies, without in zip(fused, plain, strict=True):
        held = 28_966_912 if with_dummies.stage == 1 else 3_145_728
        assert with_dummies.moments["optimizer"] - without.moments["optimizer"] == held
        assert with_dummies.peak_bytes - without.peak_bytes == held
    # torch FSDP2 (--use-torch-fsdp2): no `grad_added_to_main_grad`, no placeholder
    fsdp2 = MemoryModel(_defer_case(zero=3, fsdp=True, fsdp_impl="torch_fsdp2"))
    assert not fsdp2.setup.wgrad_fusion_dummies


def test_experts_share_one_placeholder_a_shape():
    # A MoE layer's routed experts (8 over EP 2: 4 a rank, each 1024 wide, GeLU) and its one shared expert
    # (512 wide), TP 1: fc1 1024 × 512 and fc2 512 × 1024 once for the four experts, 512 × 512 and 512 × 512 for
    # the shared expert's fc1 and fc2 (one shape), QKV 1536 × 512 and the projection 512 × 512 (the same shape
    # again): 524,288 + 524,288 + 786,432 + 262,144 = 2,097,152 elements.
    spec = {**GPT_SMALL, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 1024}
    spec.update(shared_experts=1, shared_expert_intermediate_size=512)
    raw = {
        "name": "moe",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": spec, "pad_vocab_multiple": 128}],
        "parallel": {"dp": 2, "tp": 1, "pp": 1, "ep": 2, "zero": 0},
        "training": {"seq_length": 1024, "micro_batch_size": 4, "micro_batches": 4, "dtype": "bf16"},
        "device": {"name": "h100-80gb", "reserved_mb": 0},
    }
    run = run_config(raw, "moe")
    memory = MemoryModel(run)
    body = next(layer.kind for layer in walk(run) if isinstance(layer.kind, BodyKind))
    assert kind_shapes(body, memory.setup) == {(1024, 512), (512, 1024), (512, 512), (1536, 512)}
    assert dummy_wgrad_bytes(memory.setup, [body]) == 2 * 2_097_152


def test_the_output_layer_s_placeholder_is_the_tail_s_to_carry():
    # The balancer charges every stage a constant and the HEAD/TAIL once, on the stage holding them: the
    # output layer's placeholder (25,216 × 512 × 2 B = 25,821,184, above) is the TAIL's, so the constant
    # holds the layers' four shapes alone (2 · 1,572,864 = 3,145,728, above) and the TAIL's description
    # the rest; the HEAD (the embedding: autograd's own gradient) adds nothing.
    run = _defer_case()
    memory = MemoryModel(run)
    layers = walk(run).layers
    head = next(layer for layer in layers if layer.node == "HEAD")
    tail = next(layer for layer in layers if layer.node == "TAIL")
    assert memory.end_workspace_bytes(tail) == 25_821_184
    assert memory.end_workspace_bytes(head) == 0.0
    assert run_workspace_bytes(run, memory) - run_workspace_bytes(run, memory, ends=False) == 25_821_184
    # the TAIL's description carries it (MB, truncated: 24 of its 24.6)
    with_tail = next(d for d in describe_run(run) if d["type"] == "TAIL")
    plain = _defer_case(fusion=False)
    without = next(d for d in describe_run(plain) if d["type"] == "TAIL")
    assert with_tail["memory_parameter"] - without["memory_parameter"] == 24
