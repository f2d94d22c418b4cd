"""Published A100 runs of Megatron-LM's 2021 era, as run configs for bench/public_runs.py (a group of their own).

Sources:
- Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  SC '21), Table 1, also the image images/cases_april2021.png of NVIDIA/Megatron-LM's README at 50a4b5fa02
  (2021-04-08, "Release fixes"): GPT models of 1.7B-1T on Selene (DGX A100 80GB, 8 HDR InfiniBand adapters a
  node), vocabulary 51,200, sequence 2048, batch and model-parallel size per row, achieved TFLOP/s per GPU by
  the paper's eq. 3, 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (activation recomputation counted). The heads per
  row are in the January 2021 image (images/cases_jan2021.png at 152aab304d), the same models.
  The code of that commit sets what the table does not: megatron/arguments.py defaults `--DDP-impl local`
  (the gradients all-reduced after the last micro-batch, not overlapped) and no distributed optimizer (2021);
  its examples/pretrain_gpt3_175B.sh runs `--fp16 --checkpoint-activations --micro-batch-size 1` (every
  layer recomputed, `--checkpoint-num-layers` 1 by default), GPT: learned positions, tied embeddings,
  LayerNorm, GeLU MLP of 4h, biases, dropout 0.1, its own modules (no TransformerEngine then) and its fused
  scale-mask-softmax (no flash attention then).
  Priced: the four rows of one pipeline stage (model-parallel size 1, 2, 4, 8 is their TP). Not priced: the
  six pipelined rows (`NARAYANAN_SKIPPED`).
- Smith et al. 2022 ("Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B", arXiv 2201.11990,
  §2.4): MT-NLG 530B (105 layers, h 20480, 128 heads, sequence 2048) with global batch 1920 on 280, 350
  and 420 DGX A100 at TP 8 and PP 35: "the iteration time of 60.1, 50.2, and 44.4 seconds" (126, 121 and
  113 TFLOP/s per GPU by eq. 3: 1.69e19 FLOPs an iteration), Megatron-DeepSpeed with DeepSpeed's pipeline
  engine and ZeRO-powered data parallelism, activation checkpointing, mixed precision.
"""

from __future__ import annotations

from typing import Any

NARAYANAN = "Narayanan et al. 2021, Table 1 (Megatron-LM README images/cases_april2021.png at 50a4b5fa02)"
MTNLG = "Smith et al. 2022 (MT-NLG 530B), §2.4"
PAPERS = (NARAYANAN, MTNLG)

# Megatron-LM's 2021/2022 GEMMs on A100: CUTLASS 2.2's measured 235.1 TFLOP/s (3456×4096×8192) through our
# GEMM model (tests/test_timing_korthikanti.py), the Ampere-era ceiling the Korthikanti rows take; the
# catalog's 0.869 is 2025's MAMF
AMPERE_2022_GEMM_CEILING = 0.781

# (name, hidden, heads, layers, model-parallel size, GPUs, batch, TFLOP/s per GPU): the April 2021 image's rows
_ROWS = (
    ("1.7B", 2304, 24, 24, 1, 32, 512, 137),
    ("3.6B", 3072, 32, 30, 2, 64, 512, 138),
    ("7.5B", 4096, 32, 36, 4, 128, 512, 142),
    ("18B", 6144, 48, 40, 8, 256, 1024, 135),
)

NARAYANAN_SKIPPED = (
    (
        "Narayanan Table 1 39B, 76B, 145B, 310B, 530B, 1T (model-parallel 16-512: TP 8 and PP 2-64)",
        "pipelined with the interleaved schedule (§5.1), its model chunks a stage not stated (Megatron-LM at "
        "50a4b5fa02 takes any `--num-layers-per-virtual-pipeline-stage` dividing a stage's layers)",
    ),
    (
        "Narayanan's January 2021 image (cases_jan2021.png at 152aab304d): 3.6B-1T at 3-10% less",
        "the same models and GPUs on the code of January 2021; the April table supersedes it",
    ),
)


def eq3_flops(h: int, layers: int, s: int, vocab: int, batch: int) -> float:
    """Narayanan et al. 2021 eq. 3: an iteration's FLOPs with activation recomputation."""
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))


def _gpt2021(h: int, heads: int, layers: int) -> dict[str, Any]:
    """Megatron-LM's GPT of 2021 (pretrain_gpt.py at 50a4b5fa02): the README's vocabulary and sequence."""
    return {
        "vocab_size": 51200,
        "hidden_size": h,
        "num_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 4 * h,
        "activation": "gelu",
        "norm": "layernorm",
        "norm_bias": True,
        "tied_embeddings": True,
        "position_embedding": "learned",
        "max_position_embeddings": 2048,
        "attention_bias": True,
        "attention_output_bias": True,
        "mlp_bias": True,
        "attention_dropout": 0.1,
        "hidden_dropout": 0.1,
    }


def _narayanan_rows() -> list[dict[str, Any]]:
    rows = []
    for name, h, heads, layers, tp, gpus, batch, tflops in _ROWS:
        dp = gpus // tp
        raw = {
            "name": f"narayanan-{name}",
            "framework": "megatron",
            "models": [{"name": "gpt", "spec": _gpt2021(h, heads, layers)}],
            "parallel": {"dp": dp, "tp": tp, "pp": 1, "zero": 0},
            "training": {
                "seq_length": 2048,
                "micro_batch_size": 1,
                "micro_batches": batch // dp,
                "dtype": "fp16",
                # without --accumulate-allreduce-grads-in-fp32 (off by default, unset in the example), LocalDDP
                # (megatron/model/distributed.py at 50a4b5fa02, `allreduce_gradients`) all-reduces the fp16
                # `param.grad`s themselves, coalesced: 2-byte gradients
                "grad_bytes": 2,
                "flash_attention": False,
                "recompute": "full",
            },
            "device": {"name": "a100-80gb", "matmul_efficiency": AMPERE_2022_GEMM_CEILING},
            # --DDP-impl local: the all-reduce after the backward of the last micro-batch, nothing to hide it
            "timing": {"transformer_impl": "local", "overlap": {"dp": 0.0}},
        }
        rows.append(
            {
                "name": f"Narayanan GPT {name} ({gpus} A100, TP{tp} DP{dp})",
                "source": NARAYANAN,
                "raw": raw,
                "published": f"{tflops} TFLOP/s per GPU",
                "seconds": eq3_flops(h, layers, 2048, 51200, batch) / (gpus * tflops * 1e12),
                "assumptions": (
                    "micro-batch size 1 (examples/pretrain_gpt3_175B.sh at 50a4b5fa02; Table 1 does not state it)",
                    "model-parallel size as TP, one stage",
                    "Ampere-era GEMM ceiling (CUTLASS 2.2's measured rate)",
                ),
            }
        )
    return rows


# MT-NLG 530B: (DGX A100 nodes, published seconds)
_MTNLG = ((280, 60.1), (350, 50.2), (420, 44.4))


def _mtnlg_rows() -> list[dict[str, Any]]:
    rows = []
    for nodes, seconds in _MTNLG:
        gpus = 8 * nodes
        dp = gpus // (8 * 35)
        raw = {
            "name": f"mt-nlg-530b-{nodes}",
            "framework": "megatron",
            "models": [{"name": "gpt", "spec": _gpt2021(20480, 128, 105)}],
            "parallel": {"dp": dp, "tp": 8, "pp": 35, "zero": 1},
            "training": {
                "seq_length": 2048,
                "micro_batch_size": 1,
                "micro_batches": 1920 // dp,
                "dtype": "fp16",
                # DeepSpeed's fp16 engine (v0.5.0 of 2021-08, runtime/engine.py `buffered_allreduce_fallback` and
                # `allreduce_bucket`, `fp32_allreduce` off by default; ZeRO-1's `reduce_gradients` likewise) reduces
                # the half-precision modules' own `param.grad`s: 2-byte gradients
                "grad_bytes": 2,
                "flash_attention": False,
                "recompute": "full",
            },
            "device": {"name": "a100-80gb", "matmul_efficiency": AMPERE_2022_GEMM_CEILING},
            # Megatron-DeepSpeed of 2021 as bench/_bigscience.py prices it (the same engine a year on): Megatron's
            # own modules, no fused weight-gradient accumulation, DeepSpeed's pipeline engine reducing the
            # gradients after the last micro-batch, its partitioned sends and blocking TrainSchedule steps
            "timing": {
                "transformer_impl": "local",
                "gradient_accumulation_fusion": False,
                "overlap": {"tp_async": 0.0, "dp": 0.0, "param_gather": 0.0},
                "pipe_partitioned": True,
                "deepspeed_pipeline": True,
            },
        }
        rows.append(
            {
                "name": f"MT-NLG 530B ({gpus} A100, TP8 PP35 DP{dp})",
                "source": MTNLG,
                "raw": raw,
                "published": f"{seconds} s an iteration",
                "seconds": seconds,
                "assumptions": (
                    "micro-batch size 1 (not stated)",
                    "fp16 with ZeRO-1 over the data-parallel ranks (the paper: mixed precision, ZeRO data parallel)",
                    "DeepSpeed of 2021 (v0.5.0) for the engine's gradient reduction",
                    "the layers evenly over 35 stages (3 a stage), embedding first and output last",
                    "Megatron-DeepSpeed priced as bench/_bigscience.py prices it",
                    "A100 80GB (Selene)",
                ),
            }
        )
    return rows


def paper_rows() -> list[dict[str, Any]]:
    """The rows' fields for bench/public_runs.py's PublicRun."""
    return [*_narayanan_rows(), *_mtnlg_rows()]
