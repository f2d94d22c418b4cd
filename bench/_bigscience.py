"""BLOOM 176B's training run (BigScience tr11, Megatron-DeepSpeed on 384 A100 80GB), as a run config
for bench/public_runs.py.

Source: bigscience-workshop/bigscience, train/tr11-176B-ml/README.md (read at 9e64ede) for the
measurement: the log line of iteration 85,376, the end of the first epoch (2022-06-28), "elapsed time
per iteration (s): 104.70 | ... | global batch size: 2048 | ... | samples per second: 19.561 |
TFLOPs: 149.77" (Megatron's `training_log`, wall clock over the log interval of one iteration); and
train/tr11-176B-ml/tr11-176B-ml.slurm at ed196cd (2022-06-19, the script that ran then) for the
settings: 48 nodes of 8, TP 4, PP 12 (DP 8), micro-batch 2, global batch 2048, sequence 2048, 70
layers of hidden 14336 with 112 heads, vocabulary padded to 250,880, `--embed-layernorm`,
`--position-embedding-type alibi`, `--checkpoint-activations` with DeepSpeed's activation
checkpointing, bf16 with DeepSpeed's BF16_Optimizer (its own ZeRO-1, "ZERO_STAGE=0 # important"),
`--pp-partition-method 'type:transformer|embedding'` (the README: rank 0 the embedding and 5 blocks,
ranks 1-10 six, rank 11 five and the tied output embedding), Megatron's default dropout (0.1, the
README's "Dropout" section), GeLU MLP of 4h, LayerNorm, biases, tied embeddings. Hardware (README):
A100 80GB, 8 a node, "4 OmniPath links" a node (Omni-Path 100 Gb/s each: 50 GB/s a node, 6.25 GB/s a
GPU), PyTorch 1.11, CUDA 11.5.

The README's TFLOP/s is the log's own count (Megatron-DeepSpeed PR #251, the README's math/README.md
"Calculate TFLOPs": Narayanan et al. 2021 eq. 3, activation recomputation counted),
96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); the row takes the logged seconds themselves.
"""

from __future__ import annotations

from typing import Any

BLOOM = "BigScience BLOOM 176B (bigscience-workshop/bigscience train/tr11-176B-ml, 2022)"

BLOOM_176B = {
    "vocab_size": 250880,  # --pad-vocab-size-to 250880 (250,680 tokens)
    "hidden_size": 14336,
    "num_layers": 70,
    "num_attention_heads": 112,
    "intermediate_size": 4 * 14336,
    "activation": "gelu",
    "norm": "layernorm",
    "norm_bias": True,
    "tied_embeddings": True,
    "position_embedding": "alibi",  # --position-embedding-type alibi: a bias on the scores, no position table
    "max_position_embeddings": 2048,
    "attention_bias": True,
    "attention_output_bias": True,
    "mlp_bias": True,
    "attention_dropout": 0.1,
    "hidden_dropout": 0.1,
}

# Measured: iteration 85,376's log line; its samples per second, 2048 / 104.70 = 19.561, agree.
BLOOM_SECONDS = 104.70
BLOOM_LOGGED_TFLOPS = 149.77


def bloom_flops(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021 eq. 3, the count the run logged: recomputation included."""
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def bloom_row() -> dict[str, Any]:
    """The row's fields for bench/public_runs.py's PublicRun."""
    raw = {
        "name": "bloom-176b",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": BLOOM_176B}],
        "parallel": {"dp": 8, "tp": 4, "pp": 12, "zero": 1, "layout": "Et*5|" + "t*6|" * 10 + "t*5L"},
        "training": {
            "seq_length": 2048,
            "micro_batch_size": 2,
            "micro_batches": 2048 // (2 * 8),
            "dtype": "bf16",
            "flash_attention": False,  # 2022: Megatron's fused scale-mask-softmax, no flash kernels
            "recompute": "full",
        },
        # Jean Zay's A100 nodes: 4 Omni-Path links of 100 Gb/s a node of 8 GPUs
        "device": {"name": "a100-80gb", "inter_node_bandwidth_gbs": 4 * 12.5 / 8},
        "timing": {
            "transformer_impl": "local",  # Megatron-LM's own modules (Megatron-DeepSpeed, 2022)
            # Megatron-DeepSpeed's linears (megatron/mpu/layers.py `ColumnParallelLinear.forward` and
            # `RowParallelLinear.forward` on the run's ds_ckpt_reshape branch, unchanged from a3ef7783 of
            # 2022-05-18 to 9bb3dc33 of 2022-06-28) are `F.linear` after `copy_to_tensor_model_parallel_region`:
            # autograd writes a 16-bit weight gradient (no fused accumulation), and the input gradient's
            # all-reduce (`_CopyToModelParallelRegion.backward`) runs once the linear's backward has computed
            # both gradients, with nothing left to hide it (no async all-reduce)
            "gradient_accumulation_fusion": False,
            # DeepSpeed's pipeline engine reduces the gradients after the last micro-batch and its
            # BF16_Optimizer gathers the updated parameters after the step: neither overlapped
            "overlap": {"tp_async": 0.0, "dp": 0.0, "param_gather": 0.0},
            # DeepSpeed's BF16_Optimizer (ZERO_STAGE=0 with bf16 in the ds_config; DeepSpeed 93e9307d, the
            # commit the run rolled back to, chronicles.md 2022-05): every micro-batch's bf16 gradients cast
            # to fp32 and added into its fp32 gradients (`update_hp_grads`), the README's "accumulates grads
            # in fp32"
            "deepspeed_bf16_optimizer": True,
            # its pipeline sends split over the TP ranks and all-gathered on arrival: DeepSpeed's
            # pipe_partitioned and grad_partitioned, on by default (the run's ds_config has no
            # "pipeline" section; runtime/pipe/engine.py `PartitionedTensor` over the slice group)
            "pipe_partitioned": True,
            # its TrainSchedule's steps (runtime/pipe/schedule.py at 93e9307d): each step's receive and send
            # to one neighbour blocking, one after the other (p2p.py `dist.send`/`dist.recv`), not batched
            "deepspeed_pipeline": True,
        },
    }
    return {
        "name": "BLOOM 176B (384 A100, TP4 PP12 DP8)",
        "source": f"{BLOOM}, README.md log line of iteration 85376",
        "raw": raw,
        "published": f"{BLOOM_SECONDS} s an iteration",
        "seconds": BLOOM_SECONDS,
        "assumptions": (
            "Megatron-DeepSpeed priced as Megatron-LM's own modules",
            "DeepSpeed's TrainSchedule: Megatron's 1F1B op order, its blocking sends and receives one after another",
            "the embedding LayerNorm (--embed-layernorm, the first stage's) not priced",
            "HGX A100 NVLink inside a node (the README: 'NVLink 4 inter-gpu connects')",
            "CUDA_LAUNCH_BLOCKING=1 (the script's) not modelled",
        ),
    }
