"""Published A100 runs of Megatron-LM's 2021 era, as run configs for bench/public_runs.py (a group of their own).

Sources:
- Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  SC '21), Table 1, also the image images/cases_april2021.png of NVIDIA/Megatron-LM's README at 50a4b5fa02
  (2021-04-08, "Release fixes"): GPT models of 1.7B-1T on Selene (DGX A100 80GB, 8 HDR InfiniBand adapters a
  node), vocabulary 51,200, sequence 2048, batch and model-parallel size per row, achieved TFLOP/s per GPU by
  the paper's eq. 3, 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (activation recomputation counted).
  The run settings: the paper's own scripts, examples/sc21/run_table_1.sh and CONFIG.sh at de7dc40f88
  (2021-08-10, "scripts for sc21"; README: "scripts that were used to produce the results"), per row TP, PP,
  micro-batch, global batch, heads, `--DDP-impl` (torch for the one-stage rows, local for the pipelined) and
  `--num-layers-per-virtual-pipeline-stage` (76B 5, 145B 5, 310B 3, 530B 1: 3, 2, 2 and 3 model chunks a
  stage; 39B and 1T plain 1F1B), every row `--checkpoint-activations --fp16 --loss-scale 8192`, its nodes of 8
  the table's GPUs. The code of that commit sets the rest: megatron/arguments.py `--checkpoint-num-layers` 1
  (every layer recomputed), no `--accumulate-allreduce-grads-in-fp32` (the fp16 gradients reduced themselves),
  the scatter/gather of pipeline sends on by default (`--no-scatter-gather-tensors-in-pipeline` turns it off),
  schedules.py: PyTorch DDP's `no_sync` on every micro-batch but the last, the interleaved schedule's sends and
  receives one blocking call a step (`send_forward_backward_recv_forward_backward`). GPT: learned positions,
  tied embeddings, LayerNorm, GeLU MLP of 4h, biases, dropout 0.1, Megatron's own modules and fused
  scale-mask-softmax (no TransformerEngine or flash attention then); the container nvcr.io pytorch:20.12 (SRUN.sh).
- Smith et al. 2022 ("Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B", arXiv 2201.11990,
  §2.4): MT-NLG 530B (105 layers, h 20480, 128 heads, sequence 2048) with global batch 1920 on 280, 350
  and 420 DGX A100 at TP 8 and PP 35: "the iteration time of 60.1, 50.2, and 44.4 seconds" (126, 121 and
  113 TFLOP/s per GPU by eq. 3: 1.69e19 FLOPs an iteration), Megatron-DeepSpeed with DeepSpeed's pipeline
  engine and ZeRO-powered data parallelism, activation checkpointing, mixed precision.
"""

from __future__ import annotations

from typing import Any

from _public import gpt_spec

NARAYANAN = "Narayanan et al. 2021, Table 1 (Megatron-LM README images/cases_april2021.png at 50a4b5fa02)"
MTNLG = "Smith et al. 2022 (MT-NLG 530B), §2.4"

# Megatron-LM's 2021/2022 GEMMs on A100: CUTLASS 2.2's measured 235.1 TFLOP/s (3456×4096×8192) through our
# GEMM model (tests/test_timing_korthikanti.py), the Ampere-era ceiling the Korthikanti rows take; the
# catalog's 0.869 is 2025's MAMF
AMPERE_2022_GEMM_CEILING = 0.781

# (name, hidden, heads, layers, TP, PP, micro-batch, batch, DDP, layers a virtual stage (0: none), nodes of 8,
# TFLOP/s per GPU): run_table_1.sh's cases at de7dc40f88 and the April 2021 image's figures
_ROWS = (
    ("1.7B", 2304, 24, 24, 1, 1, 16, 512, "torch", 0, 4, 137),
    ("3.6B", 3072, 32, 30, 2, 1, 16, 512, "torch", 0, 8, 138),
    ("7.5B", 4096, 32, 36, 4, 1, 16, 512, "torch", 0, 16, 142),
    ("18B", 6144, 48, 40, 8, 1, 8, 1024, "torch", 0, 32, 135),
    ("39B", 8192, 64, 48, 8, 2, 4, 1536, "local", 0, 64, 138),
    ("76B", 10240, 80, 60, 8, 4, 2, 1792, "local", 5, 128, 140),
    ("145B", 12288, 96, 80, 8, 8, 2, 2304, "local", 5, 192, 148),
    ("310B", 16384, 128, 96, 8, 16, 1, 2160, "local", 3, 240, 155),
    ("530B", 20480, 128, 105, 8, 35, 1, 2520, "local", 1, 315, 163),
    ("1T", 25600, 160, 128, 8, 64, 1, 3072, "local", 0, 384, 163),
)

NARAYANAN_SKIPPED = (
    (
        "Narayanan's January 2021 image (cases_jan2021.png at 152aab304d): 3.6B-1T at 3-10% less",
        "the same models and GPUs on the code of January 2021, whose run scripts are not published; the April "
        "table (the paper's) supersedes it",
    ),
)


def eq3_flops(h: int, layers: int, s: int, vocab: int, batch: int) -> float:
    """Narayanan et al. 2021 eq. 3: an iteration's FLOPs with activation recomputation."""
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))


def _gpt2021(h: int, heads: int, layers: int) -> dict[str, Any]:
    """Megatron-LM's GPT of 2021 (pretrain_gpt.py at 50a4b5fa02): the README's vocabulary and sequence."""
    return gpt_spec(h, heads, layers, vocab_size=51200)


def _narayanan_rows() -> list[dict[str, Any]]:
    rows = []
    for name, h, heads, layers, tp, pp, mbs, batch, ddp, per_chunk, nodes, tflops in _ROWS:
        gpus = 8 * nodes
        dp = gpus // (tp * pp)
        chunks = layers // pp // per_chunk if per_chunk else 1
        schedule = {"schedule": "interleaved", "vpp": chunks} if chunks > 1 else {}
        timing: dict[str, Any] = {
            "transformer_impl": "local",
            # --DDP-impl torch: PyTorch DDP's bucketed all-reduce behind the last micro-batch's backward (no_sync
            # before it); local: LocalDDP's all-reduce after the backward, nothing to hide it
            "overlap": {"dp": 1.0 if ddp == "torch" else 0.0},
        }
        if pp > 1:
            timing["pipe_partitioned"] = True  # the scatter/gather of pipeline sends, on by default
        if chunks > 1:
            timing["overlap_p2p_comm"] = False  # the interleaved schedule's blocking calls, one a step
        raw = {
            "name": f"narayanan-{name}",
            "framework": "megatron",
            "models": [{"name": "gpt", "spec": _gpt2021(h, heads, layers)}],
            "parallel": {"dp": dp, "tp": tp, "pp": pp, "zero": 0, **schedule},
            "training": {
                "seq_length": 2048,
                "micro_batch_size": mbs,
                "micro_batches": batch // (dp * mbs),
                "dtype": "fp16",
                # without --accumulate-allreduce-grads-in-fp32 both DDPs reduce the fp16 `param.grad`s themselves
                # (megatron/model/distributed.py `allreduce_gradients`; torch DDP on the fp16 module): 2 bytes
                "grad_bytes": 2,
                "flash_attention": False,
                "recompute": "full",
            },
            "device": {"name": "a100-80gb", "matmul_efficiency": AMPERE_2022_GEMM_CEILING},
            "timing": timing,
        }
        layout = f"TP{tp}" + (f" PP{pp}" if pp > 1 else "") + f" DP{dp}"
        rows.append(
            {
                "name": f"Narayanan GPT {name} ({gpus} A100, {layout})",
                "source": NARAYANAN,
                "raw": raw,
                "published": f"{tflops} TFLOP/s per GPU",
                "seconds": eq3_flops(h, layers, 2048, 51200, batch) / (gpus * tflops * 1e12),
                "assumptions": (
                    "the settings of examples/sc21/run_table_1.sh (de7dc40f88), the paper's own scripts",
                    f"interleaved, {chunks} model chunks a stage" if chunks > 1 else "no virtual stages",
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
