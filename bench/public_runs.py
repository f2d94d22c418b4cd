"""Our iteration time against published measurements of large public training runs.

    python bench/public_runs.py [--classes]

Each row is a published throughput (per-GPU TFLOP/s or tokens per second per GPU) of a named run,
turned into the iteration's seconds with the FLOP formula its authors used (transcribed here
independently of ppb's code), then compared with `run_iteration` on the same model, parallel
layout and device. What the source does not state is an assumption, written in the row.

Sources:
- Megatron-LM README, "Performance benchmarking" model table (images/model_table.png,
  NVIDIA/Megatron-LM, Megatron-Core r0.8.0, H100 80GB, bf16): GPT models of 1.7B-462B,
  vocabulary 131,072, sequence 4,096, `--overlap-grad-reduce --overlap-param-gather
  --tp-comm-overlap`; throughput is Megatron's per-GPU TFLOP/s, whose formula at
  core_r0.8.0 (training.py, num_floating_point_operations) is
  12·B·s·L·h²·((1 + g/a + s/h)·(q/h) + (f/h)·k·(3/2 if SwiGLU) + V/(2Lh)).
- torchtitan benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan): Llama 3.1 8B, FSDP
  on 8 and 128 H100 (96 GB HBM2e, 2.4 TB/s, 500 W), local batch 2, sequence 8192 (the 8B
  recipe's), selective (per-op) activation checkpointing, without torch.compile or Float8:
  tokens per second per GPU. GEMMs at the rate TransformerEngine measured on a 600 W H200 NVL.
- Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
  Table 5, also in Megatron-LM's README of May 2022 (commit 2e90a342f5): MFU of GPT 22B, 175B,
  530B and 1T on A100 with sequence parallelism and selective recompute, data-parallel size one;
  model configurations from the paper's Table 3 (TP 8; PP 1, 8, 35, 64; batch = GPUs / 8 · ... as
  listed below), the pipelines interleaved as its §6 ran them (3, 3 and 2 model chunks a stage), on
  Megatron-LM of 2022 (blocking pipeline sends); sequence 2048, vocabulary 51200; FLOPs by the paper's eq. 7.
- DeepSeek-V3 technical report: 180K H800 GPU hours per trillion tokens (1,543 tokens/s per GPU)
  on 2048 H800, PP 16 with DualPipe, EP 64 over 8 nodes, ZeRO-1 data parallelism, no TP, FP8
  GEMMs, sequence 4096, batch 15360 sequences at the end of its ramp, RMSNorm and MLA
  up-projections recomputed.
- Llama 3 herd of models (Dubey et al. 2024), Table 4: Llama 3 405B on 8,192 and 16,384 H100,
  TP 8, CP 1, PP 16, DP 64 / 128, sequence 8192, 16M tokens a batch: 430 / 400 TFLOP/s per GPU;
  interleaved with one layer a model chunk (§3.3.2: V = 8), FSDP sharding optimizer states and gradients
  but not the parameters between forward and backward (§3.3.2: ZeRO-2). Meta's own framework; counted here
  with Megatron-LM's formula (GQA, SwiGLU).
- Megatron-LM's functional tests (NVIDIA/Megatron-LM at d98e8a64, tests/functional_tests/test_cases/
  <case>): runs whose every flag is in the case's model_config.yaml, on one node of 8 GPUs
  (tests/test_utils/recipes/h100/*.yaml), each iteration's seconds in golden_values_dev_dgx_<gpu>.json
  as `iteration-time`: megatron/training/training.py `training_log`, the `interval-time` timer
  (wall clock, barrier) over the log interval divided by its iterations. Published seconds = the
  median of the logged windows that leave out iteration 1 (its compile and warm-up); the commit
  that set the values is in the row (`git log` on the golden file). The run configs are those of
  bench/public_memory.py (bench/_public.py). The 12-layer cases of hidden 512-1024 (gpt3_mcore_*,
  bert, t5, hybrid) are left out: their iterations of 0.1-0.5 s are the host launching kernels, one
  of them measures the host's time a launch (`host_kernel_us`, bench/decompose.py) and
  bench/host_cases.py checks others against it; so are the release cases (gpt3_15b_8t_release, mixtral_*,
  deepseekv3_proxy_*), whose recipes (node count) are not in the repository at d98e8a64.
- NVIDIA's NeMo performance summary, 25.11 container (NVIDIA-NeMo/Megatron-Bridge
  docs/performance-summary.md at 5776a6d90): Llama 3 8B / 70B / 405B and Qwen3 30B-A3B / 235B-A22B
  pre-training on DGX H100 (FP8 current scaling) and DGX B200 (FP8, MXFP8), tokens/s per GPU; the
  parallel sizes from the table, every other flag from the release's recipes (Megatron-Bridge
  v0.2.0): bench/_nemo.py. And its 26.04 table (the 26.04.01 revision, docs/performance-summary.md at
  21d102f5e, recipes v0.4.2): Llama 3 70B / 3.1 405B, Qwen3 30B-A3B / 235B-A22B and DeepSeek-V3 on H100, B200
  and GB200 where ppb prices the preset (no NVFP4, CPU offloading, Mamba, Muon), a group of its own; its DGX-GB300
  and DGX-B300 rows, and 25.11's DGX-GB300 ones (the catalog's gb300 and b300), another (`nemo_ultra_rows`).
  The archived 25.09, 26.02, 26.02.01 and 26.06 tables (docs/performance-summary-archive.md at 067f987df) with each
  container's recipes (v0.1.0rc3, v0.3.0, v0.3.1, v0.5.0) and releases: bench/_nemo_releases.py, a group of their own.
- NeMo's 24.07 performance summary (NeMo 1: NVIDIA/NeMo docs/source/performance/performance_summary.md at
  8e3d65dcfe): FP8 pre-training of GPT-3 5B/20B/175B, Llama 2 7B/13B/70B and Llama 3 8B/70B on DGX H100, with the
  24.07 launcher's settings (NeMo-Framework-Launcher tag 24.07): bench/_nemo_2407.py, a group of its own.
- NeMo 2's 25.02 (DGX B200, H100), 25.04 and 25.07 (DGX GB200) tables (docs.nvidia.com NeMo Framework user
  guide) with each release's NeMo recipes (v2.2.0, v2.3.0, v2.4.0): bench/_nemo2.py, a group of its own.
- torchtitan's other benchmark rows (pytorch/torchtitan benchmarks/, bench/_titan.py): the December
  2024 file's compiled and Float8 rows (Tables 1-6: FSDP, 2D, 3D and 4D Llama 3.1 8B/70B/405B), the
  June 2025 async-TP file, and Trainy's H200 file; tokens/s per GPU as torchtitan's train.py counts it.
  And its docs/performance.md of 2024 (Llama 3 8B/70B and Llama 2 13B/70B on 64 A100; Llama 3.1 405B
  on 128 H100), a group of its own.
- BLOOM 176B (BigScience tr11, Megatron-DeepSpeed, 384 A100 80GB): the logged seconds of one iteration
  at the end of its first epoch, settings from its launch script (bench/_bigscience.py).
- MindFormers' Llama 3.1 8B fine-tuning throughput on 8 Ascend 910B (research/llama3_1/README.md and
  its config, bench/_mindformers.py), and its Mixtral 8x7B card's on 16 (research/mixtral/mixtral.md at bc419f8a5,
  a MoE at model_parallel 1; session 34).
- MindFormers' model cards at v1.4.0-beta2 (a4dfb8219): every training tokens/s/p on Atlas 800T A2 or
  Atlas 900 A2 PoDc (Ascend 910B) whose yaml at that commit states a setting ppb can price; the rows
  left out and why are in bench/_mindformers.py. A group of their own.
- Narayanan et al. 2021 Table 1 (GPT 1.7B-1T on A100, the settings of its examples/sc21 scripts) and MT-NLG
  530B's iteration seconds (bench/_papers.py); MindFormers v1.3.0's Qwen cards (bench/_mindformers.py
  `V130_ROWS`). Groups of their own (session 28).
- NVIDIA/dgxc-benchmarking's NeMo 1 recipes (tags v24.11.1, v25.02.02): Llama 3.1 8B/70B/405B and GPT-3 175B step
  seconds on H100, BF16 and FP8, with each tag's yaml and launch overrides (bench/_dgxc.py), a group of its own; and
  its NeMo 2 recipes (v25.04.02: Llama 3.1 8B/70B/405B on H100; v25.05.05: 405B and DeepSeek-V3 on GB200 and
  H100), another.

Prints each row's published and predicted seconds and the error, then the mean absolute error of
each group of rows and of all; then the H100-vs-A100 pairs of identical configs; with --classes, for
each Megatron CI row, each H100 row of the README's table and its 177B 96-GPU strong-scaling point, how
many times longer one op class alone (GEMMs, attention, memory-bound, communication) would have to take
to match it: where the gap can sit.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # also when a test loads this file by its path

from _bigscience import BLOOM, bloom_row  # noqa: E402
from _bridge_cards import (  # noqa: E402
    BRIDGE_CARDS,
    BRIDGE_VERIFICATION,
    SKIPPED_BRIDGE,
    SKIPPED_CARDS,
    bridge_card_rows,
    bridge_verification_rows,
)
from _dgxc import DGXC, DGXC_NEMO2, SKIPPED_DGXC, deepseek_dgxc_rows, dgxc_rows, nemo2_dgxc_rows  # noqa: E402
from _measure import machine  # noqa: E402
from _mindformers import (  # noqa: E402
    CARDS,
    CARDS_V130,
    MINDFORMERS,
    MIXTRAL,
    SKIPPED_V130,
    mindformers_card_rows,
    mindformers_mixtral_rows,
    mindformers_rows,
    mindformers_v130_rows,
)
from _moe_recipes import MOE_RECIPES, SKIPPED_RECIPES, moe_recipe_rows  # noqa: E402
from _nemo import (  # noqa: E402
    NEMO,
    NEMO_2511_GPT_OSS,
    NEMO_2511_ULTRA,
    NEMO_2604,
    NEMO_2604_GPT_OSS,
    NEMO_2604_ULTRA,
    ULTRA_SKIPPED,
    nemo_2604_rows,
    nemo_gpt_oss_rows,
    nemo_rows,
    nemo_ultra_rows,
)
from _nemo2 import NEMO2, SKIPPED_NEMO2, nemo2_rows  # noqa: E402
from _nemo_2407 import NEMO_2407, SKIPPED_2407, nemo_2407_rows  # noqa: E402
from _nemo_releases import ARCHIVE, SKIPPED, nemo_release_rows  # noqa: E402
from _papers import MTNLG, NARAYANAN, NARAYANAN_SKIPPED, paper_rows  # noqa: E402
from _public import (  # noqa: E402
    LLAMA3_405B,
    MEGATRON_TESTS,
    MOE_MLA_LAYOUT,
    MOE_MLA_MEMORY_SPEED,
    gpt3_7b_run,
    moe_mla_layout_run,
    moe_mla_memory_speed_run,
    run_config,
    torchtitan_llama31_8b,
)
from _titan import DOCS_SOURCES, TITAN_SOURCES, titan_docs_rows, titan_rows  # noqa: E402

from ppb_core.balance.outputs import cells  # noqa: E402
from ppb_core.balance.problem import run_problem  # noqa: E402
from ppb_core.balance.user_plan import from_mindformers  # noqa: E402
from ppb_core.config.devices import DEVICE_CATALOG  # noqa: E402
from ppb_core.config.run import RunConfig  # noqa: E402
from ppb_core.estimate.check import check_plan  # noqa: E402
from ppb_core.memory.model import run_stage_peaks  # noqa: E402
from ppb_core.payload.run import describe_run  # noqa: E402
from ppb_core.timing.iteration import Iteration, run_iteration  # noqa: E402

MIB = 2**20
MEGATRON_TABLE = "Megatron-LM README model table (Megatron-Core r0.8.0, H100)"
TORCHTITAN = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
LLAMA3 = "Llama 3 paper (Dubey et al. 2024), Table 4"
KORTHIKANTI = "Korthikanti et al. 2022, Table 5 (Megatron-LM README, May 2022)"
DEEPSEEK = "DeepSeek-V3 technical report (2024), §1 and §3"


@dataclass(frozen=True)
class PublicRun:
    name: str
    source: str
    raw: dict[str, Any]  # the run config
    published: str  # what the source states
    seconds: float  # the iteration it implies
    assumptions: tuple[str, ...] = field(default=())
    # the run's layout and recompute in MindFormers' words (`offset`, `recompute`, `select_recompute`,
    # `select_comm_recompute` per stage), priced as `ppb check --plan` prices such a yaml; None: as configured
    plan: dict[str, Any] | None = None


def _gpt(h: int, heads: int, layers: int) -> dict[str, Any]:
    """Megatron's GPT benchmark model: LayerNorm, GeLU MLP of 4h, MHA, biases, untied embeddings."""
    return {
        "vocab_size": 131072,
        "hidden_size": h,
        "num_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": 4 * h,
        "activation": "gelu",
        "norm": "layernorm",
        "norm_bias": True,
        "position_embedding": "rope",
        "max_position_embeddings": 4096,
        "attention_bias": True,
        "attention_output_bias": True,
        "mlp_bias": True,
    }


def megatron_r08_flops(h: int, heads: int, layers: int, vocab: int, s: int, batch: int) -> float:
    """Megatron-Core r0.8.0's num_floating_point_operations for an MHA GeLU GPT (f = 4h, q = h, g = a)."""
    return 12 * batch * s * layers * h * h * ((1 + 1 + s / h) * 1 + 4 + vocab / (2 * layers * h))


# (name, hidden, heads, layers, tp, pp, dp, batch, per-GPU TFLOP/s)
_MEGATRON_ROWS = (
    ("1.7B", 2048, 16, 24, 1, 1, 48, 192, 408.8),
    ("7.1B", 4096, 32, 30, 2, 1, 48, 192, 465.9),
    ("16B", 6144, 48, 32, 4, 1, 48, 192, 489.1),
    ("32B", 7168, 56, 48, 8, 1, 48, 192, 459.6),
    ("70B", 8192, 64, 84, 8, 2, 48, 384, 419.7),
    ("119B", 10240, 80, 92, 8, 4, 48, 768, 420.5),
    ("177B", 12288, 96, 96, 8, 6, 48, 1152, 432.8),
    ("314B", 16384, 128, 96, 8, 8, 48, 1536, 474.4),
    ("462B", 18432, 144, 112, 8, 16, 48, 3072, 459.9),
)


def megatron_schedule(layers: int, pp: int) -> dict[str, Any]:
    """The pipelined rows' schedule: Megatron's interleaved 1F1B with one layer per virtual stage.

    The table does not state it; its own figures rule plain 1F1B out. The README's strong-scaling
    figure runs the same 177B model on 96 GPUs at 47% MFU with batch 1152: 576 micro-batches a
    pipeline, no bubble to speak of, so 47% is its steady rate. The table's 177B row (2304 GPUs,
    PP 6, DP 48: 24 micro-batches of one sequence) reaches 44%; plain 1F1B idles (p−1)/(m+p−1) =
    5/29 of it, capping it at 39% (and lower with larger micro-batches). So the runs interleaved.
    Megatron-LM core_r0.8.0 sets the chunks by `--num-layers-per-virtual-pipeline-stage`, which must
    divide the layers of a stage (arguments.py); the 119B and 462B rows have 23 and 7 layers a stage,
    primes, so interleaving them means one layer per virtual stage: taken for every pipelined row.
    The README's strong scaling of the 177B model (`strong_scaling`) agrees: from 96 to 2304 and 4608
    GPUs it kept 0.931 and 0.894 of its MFU; ppb keeps 0.936 and 0.875 with 16 chunks (one layer each),
    0.927 and 0.859 with 8, 0.900 and 0.813 with 4, 0.846 and 0.726 with 2, 0.769 and 0.616 in plain 1F1B;
    and with micro-batches of one sequence rather than two (0.912 and 0.834), as examples/gpt3 runs."""
    if pp == 1:
        return {}
    return {"schedule": "interleaved", "vpp": layers // pp}


def _megatron_runs() -> list[PublicRun]:
    runs = []
    for name, h, heads, layers, tp, pp, dp, batch, tflops in _MEGATRON_ROWS:
        seconds = megatron_r08_flops(h, heads, layers, 131072, 4096, batch) / (tp * pp * dp * tflops * 1e12)
        schedule = megatron_schedule(layers, pp)
        raw = {
            "name": f"megatron-gpt-{name}",
            "framework": "megatron",
            "models": [{"name": "gpt", "spec": _gpt(h, heads, layers)}],
            "parallel": {"dp": dp, "tp": tp, "pp": pp, "sequence_parallel": tp > 1, "zero": 1, **schedule},
            "training": {
                "seq_length": 4096,
                "micro_batch_size": 1,
                "micro_batches": batch // dp,
                "dtype": "bf16",
                "flash_attention": True,
            },
            "device": {"name": "h100-80gb"},
            # the table's release, r0.8.0: its overlapped interleaved schedule's sends and receives; its
            # TransformerEngine 1.x's userbuffers GEMMs launched for every SM (initialize_ub set_sm_margin 0; r0.8.0
            # is of August 2024, TE 2.0, which sets the margin, of February 2025); --tp-comm-overlap at TP > 1 only,
            # where sequence parallelism runs (Megatron-LM's validate_args refuses it without; TP 1 has no TP
            # collectives to overlap)
            "timing": {
                "overlap": {"tp": 1.0 if tp > 1 else 0.0, "dp": 1.0, "param_gather": 1.0},
                "interleaved_send_waits": "core_r0.8",
                **({"ub_sm_margin": False} if tp > 1 else {}),
            },
        }
        runs.append(
            PublicRun(
                f"Megatron GPT {name} ({tp * pp * dp} H100, TP{tp} PP{pp} DP{dp})",
                MEGATRON_TABLE,
                raw,
                f"{tflops} TFLOP/s per GPU",
                seconds,
                (
                    "micro-batch size 1",
                    "interleaved, one layer per virtual stage" if schedule else "one stage",
                    "rotary positions",
                    "no recompute",
                    "the loss unfused (Megatron's default)",
                ),
            )
        )
    return runs


# torchtitan's H100: 96 GB HBM2e at 2.4 TB/s, 500 W; "the actual peak TFLOPs number is between SXM
# and NVL": the midpoint of SXM's 989 and NVL's 835 dense BF16 TFLOPS taken.
# Its GEMMs run at a power-limited Hopper's rate, not at the 700 W SXM's MAMF. The nearest public
# measurement: TransformerEngine's GEMM profiling example on an H200 NVL (600 W, 132 SMs, 835.5 dense
# BF16 TFLOPS; docs/examples/gemm_profiling/gemm_profiling.rst, "Worked Example: 5B Model on H200",
# commit 1609c890e) times the BF16 forward GEMMs of a 4096/16384 layer at M = 15,872 in 10.653 ms,
# ~600 TFLOP/s; our GEMM model reproduces it with a tile ceiling of 0.732 of 835.5 (with the 5.3 us kernel time)
# (tests/test_timing_public_runs.py). At 500 W the H100 reaches at most that: its ceiling over the
# 912 taken here is the same TFLOP/s.
# The same example's pre-quantized FP8 current-scaling GEMMs (raw kernels, no casts: 5.577 / 5.661 /
# 5.547 ms forward / input / weight gradients, ~1,140 TFLOP/s) come out within 3% at the catalog's
# H100 FP8 fraction (0.709) of the NVL's FP8 peak (tests/test_timing_public_runs.py): torchtitan's
# Float8 rows run their FP8 GEMMs at that TFLOP/s too, not at the 700 W SXM's.
H200_NVL_PEAK_TFLOPS = 835.5
H200_NVL_GEMM_CEILING = 0.732
H200_NVL_FP8_CEILING = 0.709
TITAN_H100 = {
    "name": "h100-80gb",
    "memory_mb": 98304,
    "hbm_bandwidth_gbs": 2400.0,
    "peak_tflops": 912.0,
    "matmul_efficiency": round(H200_NVL_GEMM_CEILING * H200_NVL_PEAK_TFLOPS / 912.0, 4),
    "fp8_matmul_efficiency": round(H200_NVL_FP8_CEILING * H200_NVL_PEAK_TFLOPS / 912.0, 4),
    # that ceiling is already a back-to-back GEMM loop's (TE's, 100 iterations): not the SXM's share of MAMF
    "layer_gemm_share": 1.0,
    "fp8_layer_gemm_share": 1.0,
}


def _torchtitan_runs() -> list[PublicRun]:
    runs = []
    for gpus, tps in ((8, 5762), (128, 5605)):
        tokens = 2 * 8192 * gpus
        raw = torchtitan_llama31_8b(gpus, TITAN_H100)
        runs.append(
            PublicRun(
                f"torchtitan Llama 3.1 8B FSDP ({gpus} H100)",
                TORCHTITAN,
                raw,
                f"{tps} tokens/s per GPU",
                tokens / (tps * gpus),
                (
                    "peak midway between H100 SXM and NVL",
                    "GEMMs at a 600 W H200 NVL's measured rate",
                    "per-op checkpointing as torchtitan's op policy replays it",
                ),
            )
        )
    return runs


def megatron_flops_gqa_swiglu(h: int, heads: int, kv: int, layers: int, ffn: int, vocab: int, s: int, batch: int):
    """Megatron-LM's current num_floating_point_operations for a dense GQA SwiGLU model (d = h/heads)."""
    d = h // heads
    per_token = layers * (6 * (h * (heads * d + 2 * kv * d) + heads * d * h) + 6 * h * ffn * 3) + 6 * h * vocab
    return batch * s * per_token + batch * s * s * layers * 6 * heads * d


def _llama3_runs() -> list[PublicRun]:
    runs = []
    for gpus, dp, tflops in ((8192, 64, 430.0), (16384, 128, 400.0)):
        batch = 16 * 1024 * 1024 // 8192  # 16M tokens of 8192
        flops = megatron_flops_gqa_swiglu(16384, 128, 8, 126, 53248, 128256, 8192, batch)
        raw = {
            "name": f"llama3-405b-{gpus}",
            "framework": "megatron",
            # Meta's own stack, not Megatron-LM: the vocabulary of 128,256 unpadded (a multiple of TP 8)
            "models": [{"name": "llm", "spec": LLAMA3_405B, "pad_vocab_multiple": 1}],
            # The paper's §3.3.2 places the layers: "we reduce one Transformer layer each from the first and the
            # last stages, respectively. This means that the first model chunk on the first stage has only the
            # embedding, and the last model chunk on the last stage has only output projection and loss
            # calculation": a chunk held one layer, so 126 + 2 = 128 layer places over 16 ranks make V = 8
            # chunks a rank, the first holding the embedding alone and the last the output and loss alone
            # (Megatron-Core's --pipeline-model-parallel-layout written out). Its 8,192- and 16,384-GPU rows
            # agree: per-GPU throughput 400/430 = 0.930 of the smaller run's, ppb 0.937 at V = 8 against
            # 0.898 at V = 4 and 0.834 at V = 2, the row's assumption until 2026-12-06 (at main 91a5b6d).
            "parallel": {
                "dp": dp,
                "tp": 8,
                "pp": 16,
                "layout": "E|(t|)*126L",
                "schedule": "interleaved",
                "sequence_parallel": True,
                # §3.3.2: "Our use of FSDP for Llama 3 shards optimizer states and gradients, but for model shards
                # we do not reshard after forward computation" (PyTorch FSDP's SHARD_GRAD_OP, ZeRO-2), and its
                # "Numerical stability": FP32 gradient accumulation over the micro-batches and FP32 reduce-scatters
                # (the sharded fp32 gradient each micro-batch's reduce-scatter adds to): 2-byte parameters whole,
                # 4-byte gradients and 12-byte Adam states over DP, one layer's fp32 gradients unsharded in the
                # backward (ppb's zero 2; until session 27 ZeRO-1, which kept every gradient whole)
                "zero": 2,
            },
            "training": {
                "seq_length": 8192,
                "micro_batch_size": 1,
                "micro_batches": batch // dp,
                "dtype": "bf16",
                "flash_attention": True,
            },
            "device": {"name": "h100-80gb"},
            # the loss of Meta's own framework is not public: taken fused, as Megatron's fastest
            "timing": {"cross_entropy_fusion": True},
        }
        runs.append(
            PublicRun(
                f"Llama 3 405B ({gpus} H100, TP8 PP16 DP{dp})",
                LLAMA3,
                raw,
                f"{tflops:.0f} TFLOP/s per GPU",
                flops / (gpus * tflops * 1e12),
                (
                    "Megatron-LM's FLOP count",
                    "interleaved, 8 chunks of one layer (§3.3.2), the first and last the embedding and the loss alone",
                    "FSDP sharding optimizer states and gradients, parameters whole from the forward (§3.3.2): ZeRO-2",
                    "micro-batch size 1",
                    "TP overlap off",
                    "the loss fused",
                ),
            )
        )
    return runs


# (name, hidden, heads, layers, pp, model chunks a stage, GPUs, batch, MFU). The chunks: §6 of the paper ran the
# interleaved schedule with three model chunks a device for the 175B and 530B models and two for the 1T one
# (https://ar5iv.labs.arxiv.org/html/2205.05198); 105 / 35 = 3 and 128 / 64 = 2 layers a stage, so one layer a
# chunk there, four for 175B (12 a stage). Its 175B first-stage memory of 12.35 GiB (SP + selective) holds
# p·L/p layers × (1 + (p − 1)/(p·v)) at v = 3 (tests/test_memory_korthikanti.py); without interleaving it is 9.56.
_KORTHIKANTI_ROWS = (
    ("22B", 6144, 64, 48, 1, 1, 8, 4, 0.415),
    ("175B", 12288, 96, 96, 8, 3, 64, 64, 0.514),
    ("530B", 20480, 128, 105, 35, 3, 280, 280, 0.560),
    ("1T", 25600, 160, 128, 64, 2, 512, 512, 0.563),
)


def korthikanti_eq7(h: int, layers: int, s: int, vocab: int, batch: int) -> float:
    """Korthikanti et al. eq. 7: 72·B·s·L·h²·(1 + s/(6h) + V/(12hL))."""
    return 72 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (12 * h * layers))


def _korthikanti_runs() -> list[PublicRun]:
    runs = []
    for name, h, heads, layers, pp, chunks, gpus, batch, mfu in _KORTHIKANTI_ROWS:
        schedule = {"schedule": "interleaved", "vpp": chunks} if chunks > 1 else {}
        spec = {**_gpt(h, heads, layers), "vocab_size": 51200, "max_position_embeddings": 2048}
        spec.update(position_embedding="learned", attention_dropout=0.1, hidden_dropout=0.1, tied_embeddings=True)
        raw = {
            "name": f"korthikanti-{name}",
            "framework": "megatron",
            "models": [{"name": "gpt", "spec": spec}],
            "parallel": {"dp": 1, "tp": 8, "pp": pp, "sequence_parallel": True, "zero": 0, **schedule},
            "training": {
                "seq_length": 2048,
                "micro_batch_size": 4 if pp == 1 else 1,
                "micro_batches": 1 if pp == 1 else batch,
                "dtype": "fp16",
                "flash_attention": False,
                # the paper's "present work": selective recompute of the attention core, with SP
                "recompute": {"granularity": "selective", "modules": ["core_attn"]},
            },
            # the Ampere-era GEMM ceiling: CUTLASS 2.2's measured 235.1 TFLOP/s (3456×4096×8192) through
            # our GEMM model (tests/test_timing_korthikanti.py); the catalog's 0.869 is 2025's MAMF
            "device": {"name": "a100-80gb", "matmul_efficiency": 0.781},
            # Megatron-LM of 2022: its own modules (no TransformerEngine yet), and its interleaved schedule's
            # blocking sends and receives, one call a step (megatron/schedules.py at d898a8991d, the
            # sequence_parallel merge; --overlap-p2p-communication came later)
            "timing": {"transformer_impl": "local", **({"overlap_p2p_comm": False} if chunks > 1 else {})},
        }
        seconds = korthikanti_eq7(h, layers, 2048, 51200, batch) / (gpus * 312e12 * mfu)
        runs.append(
            PublicRun(
                f"Korthikanti GPT {name} ({gpus} A100, TP8 PP{pp})",
                KORTHIKANTI,
                raw,
                f"MFU {100 * mfu:.1f}%",
                seconds,
                (
                    f"interleaved, {chunks} model chunks a stage (§6)" if chunks > 1 else "one stage",
                    "micro-batch size 1 (22B: the batch of 4 at once)",
                ),
            )
        )
    return runs


# DeepSeek's FP8 GEMM kernels on H800 (deepseek-ai/DeepGEMM README at its first commits, Feb 2025: the
# DeepSeek-V3 shapes, M = 4096 dense and 4 x 8192 / 8 x 4096 grouped): their TFLOP/s fall with k at fixed
# M and N (1358 at K = 16384, 1025 at 2048, 590 at 512), a fixed cost per output tile. Our GEMM model
# reproduces the ten shapes within 7% with a tile ceiling of 0.75 of the FP8 peak and 4.2 us a tile
# (tests/test_timing_public_runs.py).
DEEPGEMM_CEILING = 0.75
DEEPGEMM_TILE_US = 4.2


def _deepseek_runs() -> list[PublicRun]:
    tps = 1e12 / (180_000 * 3600)
    batch, gpus = 15360, 2048
    raw = {
        "name": "deepseek-v3",
        "framework": "megatron",
        "models": [{"name": "llm", "config": "hf/deepseek-v3.json"}],
        "parallel": {"dp": 128, "tp": 1, "pp": 16, "vpp": 2, "ep": 64, "etp": 1, "zero": 1, "schedule": "dualpipev"},
        "training": {
            "seq_length": 4096,
            "micro_batch_size": 1,
            "micro_batches": batch // 128,
            "dtype": "bf16",
            "optimizer": "adamw",
            # §3.3.3: AdamW's moments in BF16 ("Low-Precision Optimizer States"), the linear inputs cached in FP8,
            # the MoE SwiGLU's inputs in FP8 and the attention output in E5M6 ("Low-Precision Activation")
            "optimizer_state_bytes": 8,
            "fp8_cache": "deepseek",
            "flash_attention": True,
            "recompute": {"normOp": 0, "attUp": 0},
        },
        # DeepSeek's own FP8 GEMMs (fine-grained scaling; released as DeepGEMM): their measured H800
        # rates on these very shapes (DeepGEMM README, Feb 2025) through our GEMM model
        "device": {"name": "h800", "fp8_matmul_efficiency": DEEPGEMM_CEILING, "fp8_tile_overhead_us": DEEPGEMM_TILE_US},
        # the loss of DeepSeek's own framework is not public: taken fused, as Megatron's fastest
        "timing": {"matmul_dtype": "fp8", "moe_dispatcher": "deepep", "cross_entropy_fusion": True},
    }
    return [
        PublicRun(
            "DeepSeek-V3 671B (2048 H800, PP16 EP64 DP128)",
            DEEPSEEK,
            raw,
            f"{tps:,.0f} tokens/s per GPU",
            batch * 4096 / (tps * gpus),
            (
                "DualPipeV for DualPipe",
                "micro-batch size 1",
                "every GEMM in FP8 at DeepGEMM's measured rates",
                "the final batch size",
                "DeepEP dispatch",
                "the loss fused",
                "the SwiGLU output kept (§3.3.3 recomputes it from its FP8 input)",
            ),
        )
    ]


# Megatron-LM's functional tests: `iteration-time` golden values ---------------------------------

MEGATRON_CI = "Megatron-LM functional tests"


@dataclass(frozen=True)
class GoldenTimes:
    """A case's logged `iteration-time` values on one GPU, from the commit that set them."""

    path: str  # the golden file under tests/functional_tests/test_cases
    commit: str  # the commit that set its values (git log -1 on the file)
    iterations: str  # the logged windows kept (those without iteration 1)
    values: tuple[float, ...]  # seconds

    @property
    def median_s(self) -> float:
        return statistics.median(self.values)


_7B_TP1 = "gpt/gpt3_7b_tp1_pp4_memory_speed"
_7B_TP4 = "gpt/gpt3_7b_tp4_pp1_memory_speed"
# 7B cases: --log-interval 2 (H100, values at even iterations: the mean of that iteration and the
# one before) and 5 (A100 at adc69dba2d, values at 10 and 20), 25 iterations.
GOLDEN_7B = {
    (1, "h100"): GoldenTimes(
        f"{_7B_TP1}/golden_values_dev_dgx_h100.json", "6e091e1b68 (2026-05-29, TE 2.16)", "4-24",
        (1.16377, 1.14861, 1.14912, 1.15017, 1.14909, 1.14967, 1.15077, 1.15255, 1.1501, 1.15138, 1.15105),
    ),
    (1, "a100"): GoldenTimes(
        f"{_7B_TP1}/golden_values_dev_dgx_a100.json", "adc69dba2d (2025-10-21) or before", "10, 20",
        (2.9368, 2.94791),
    ),
    (4, "h100"): GoldenTimes(
        f"{_7B_TP4}/golden_values_dev_dgx_h100.json", "6e091e1b68 (2026-05-29, TE 2.16)", "4-24",
        (1.12221, 1.11139, 1.11368, 1.11791, 1.11551, 1.11592, 1.11576, 1.11374, 1.11451, 1.1149, 1.11493),
    ),
    (4, "a100"): GoldenTimes(
        f"{_7B_TP4}/golden_values_dev_dgx_a100.json", "adc69dba2d (2025-10-21) or before", "10, 20",
        (2.57769, 2.596),
    ),
}  # fmt: skip
# The H100 values of the same commit as the A100 ones, for the pairs: the same release of Megatron
# and its container on both GPUs (the rows above keep the newest H100 values).
GOLDEN_7B_H100_WITH_A100 = {
    1: GoldenTimes(f"{_7B_TP1}/golden_values_dev_dgx_h100.json", "adc69dba2d", "10, 20", (1.21699, 1.20992)),
    4: GoldenTimes(f"{_7B_TP4}/golden_values_dev_dgx_h100.json", "adc69dba2d", "10, 20", (1.12041, 1.1186)),
}
# MoE-MLA cases: --log-interval 1 (memory_speed, 50 iterations) and 5 (the layout case, recorded at c08d89bea0,
# moved by adc69dba2d).
GOLDEN_MOE = {
    MOE_MLA_MEMORY_SPEED: GoldenTimes(
        f"moe/{MOE_MLA_MEMORY_SPEED}/golden_values_dev_dgx_h100.json", "11debfa7b4 (2026-01-14)", "2-50",
        (1.25873, 1.16322, 1.29653, 1.29631, 1.11998, 1.35727, 1.09252, 1.11578, 1.02138, 1.01615, 1.01222,
         1.02281, 1.02294, 1.02492, 1.01859, 1.03891, 1.03349, 1.02727, 1.02559, 1.02143, 1.02847, 1.02845,
         1.01891, 1.02716, 1.0234, 1.02648, 1.0165, 1.02468, 1.02451, 1.0298, 1.02899, 1.01515, 1.02615,
         1.02426, 1.02583, 1.0171, 1.01354, 1.03472, 1.02918, 1.03913, 1.03355, 1.02441, 1.03591, 1.02675,
         1.04457, 1.05738, 1.02657, 1.0303, 1.02663),
    ),
    MOE_MLA_LAYOUT: GoldenTimes(
        f"moe/{MOE_MLA_LAYOUT}/golden_values_dev_dgx_h100.json", "c08d89bea0 (2025-08-17)", "5-50",
        (2.06295, 1.09336, 1.10509, 1.08631, 1.08991, 1.10548, 1.10049, 1.11219, 1.09542, 1.09805),
    ),
}  # fmt: skip
# What the 7B cases set that ppb does not model (their model_config.yaml).
_7B_UNMODELLED = ("--deterministic-mode: PyTorch's NaN fill counted on TransformerEngine's outputs only",)
_MOE_UNMODELLED = ("routing balanced", "NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 not modelled")


def _ci_row(name: str, golden: GoldenTimes, raw: dict[str, Any], assumptions: tuple[str, ...]) -> PublicRun:
    return PublicRun(
        name,
        f"{MEGATRON_TESTS}/{golden.path}, values of {golden.commit}",
        raw,
        f"median {golden.median_s:.3f} s, it. {golden.iterations}",
        golden.median_s,
        ("one node of 8 GPUs", *assumptions),
    )


def _megatron_ci_runs() -> list[PublicRun]:
    # (tp, pp, virtual stages, micro-batch size) of gpt3_7b_tp1_pp4 and gpt3_7b_tp4_pp1
    cases = ((1, 4, 8, 1), (4, 1, 1, 2))
    runs = [
        _ci_row(
            f"Megatron CI GPT 7B TP{tp} PP{pp} ({gpu.upper()})",
            GOLDEN_7B[tp, gpu],
            gpt3_7b_run(tp, pp, vpp, mbs, gpu),
            _7B_UNMODELLED,
        )
        for gpu in ("h100", "a100")
        for tp, pp, vpp, mbs in cases
    ]
    runs.append(
        _ci_row(
            "Megatron CI MoE-MLA 16L TP2 PP2 EP4 (H100)",
            GOLDEN_MOE[MOE_MLA_MEMORY_SPEED],
            moe_mla_memory_speed_run(),
            (*_MOE_UNMODELLED, "the recipe lists the case under mr-broken"),
        )
    )
    runs.append(
        _ci_row(
            "Megatron CI MoE-MLA layout, selective recompute (H100)",
            GOLDEN_MOE[MOE_MLA_LAYOUT],
            moe_mla_layout_run(),
            _MOE_UNMODELLED,
        )
    )
    return runs


# NeMo 25.11 and 26.04 ran Megatron-Core at 0d8e0714cd (2025-11-17) and d7288711ba (2026-04-09), the
# 3rdparty/Megatron-LM submodule of Megatron-Bridge v0.2.0 and v0.4.0 (v0.4.2's, 2edffadb52, likewise): after
# 4295be1a6c's tunable schedule and before 260cba7133's wait at once for a forward's send, so core_r0.10's
# waits (ppb_core.pipeline_p2p).
NEMO_SEND_WAITS = "core_r0.10"


def _nemo_runs() -> list[PublicRun]:
    """NeMo's 25.11 and 26.04 performance summaries (bench/_nemo.py: the tables, the releases' recipes)."""
    runs = []
    for row in (*nemo_rows(), *nemo_2604_rows(), *nemo_gpt_oss_rows(), *nemo_ultra_rows()):
        raw = {**row["raw"], "timing": {**row["raw"]["timing"], "interleaved_send_waits": NEMO_SEND_WAITS}}
        runs.append(PublicRun(**{**row, "raw": raw}))
    return runs


def _nemo_release_runs() -> list[PublicRun]:
    """NeMo's archived 25.09 to 26.06 tables (bench/_nemo_releases.py); their pipeline sends wait as
    each container's Megatron-Core does (`framework_release`)."""
    return [PublicRun(**row) for row in nemo_release_rows()]


def _bridge_card_runs() -> list[PublicRun]:
    """Megatron-Bridge's own measured runs of its recipes (bench/_bridge_cards.py)."""
    return [PublicRun(**row) for row in (*bridge_card_rows(), *bridge_verification_rows())]


def _moe_recipe_runs() -> list[PublicRun]:
    """Megatron-LM's own MoE recipes and their measured throughput (bench/_moe_recipes.py)."""
    return [PublicRun(**row) for row in moe_recipe_rows()]


def _nemo_2407_runs() -> list[PublicRun]:
    """NeMo's 24.07 H100 table with the 24.07 launcher's settings (bench/_nemo_2407.py)."""
    return [PublicRun(**row) for row in nemo_2407_rows()]


def _nemo2_runs() -> list[PublicRun]:
    """NeMo 2's 25.02, 25.04 and 25.07 tables with each release's recipes (bench/_nemo2.py)."""
    return [PublicRun(**row) for row in nemo2_rows()]


def _titan_runs() -> list[PublicRun]:
    """torchtitan's other published benchmark rows (bench/_titan.py), on its 500 W H100 (and Trainy's H200)."""
    return [PublicRun(**row) for row in (*titan_rows(TITAN_H100), *titan_docs_rows(TITAN_H100))]


def _bloom_runs() -> list[PublicRun]:
    """BLOOM 176B's logged iteration (bench/_bigscience.py)."""
    return [PublicRun(**bloom_row())]


def _paper_runs() -> list[PublicRun]:
    """Megatron-LM's 2021 weak-scaling table and MT-NLG 530B (bench/_papers.py)."""
    return [PublicRun(**row) for row in paper_rows()]


def _mindformers_runs() -> list[PublicRun]:
    """MindFormers' published Ascend throughputs: Llama 3.1 8B's and Mixtral 8x7B's (bench/_mindformers.py)."""
    return [PublicRun(**row) for row in (*mindformers_rows(), *mindformers_mixtral_rows())]


def _mindformers_card_runs() -> list[PublicRun]:
    """MindFormers' model cards' Ascend training throughputs at one commit (bench/_mindformers.py)."""
    return [PublicRun(**row) for row in mindformers_card_rows()]


def _mindformers_v130_runs() -> list[PublicRun]:
    """MindFormers' v1.3.0 Qwen cards (bench/_mindformers.py `V130_ROWS`)."""
    return [PublicRun(**row) for row in mindformers_v130_rows()]


def _dgxc_runs() -> list[PublicRun]:
    """NVIDIA/dgxc-benchmarking's NeMo 1 and NeMo 2 recipes' step times (bench/_dgxc.py)."""
    return [PublicRun(**row) for row in (*dgxc_rows(), *nemo2_dgxc_rows(), *deepseek_dgxc_rows())]


def public_runs() -> list[PublicRun]:
    return [
        *_megatron_runs(),
        *_torchtitan_runs(),
        *_llama3_runs(),
        *_korthikanti_runs(),
        *_deepseek_runs(),
        *_megatron_ci_runs(),
        *_nemo_runs(),
        *_nemo_release_runs(),
        *_bridge_card_runs(),
        *_moe_recipe_runs(),
        *_nemo_2407_runs(),
        *_nemo2_runs(),
        *_titan_runs(),
        *_bloom_runs(),
        *_mindformers_runs(),
        *_mindformers_card_runs(),
        *_paper_runs(),
        *_mindformers_v130_runs(),
        *_dgxc_runs(),
    ]


def config(row: PublicRun) -> RunConfig:
    return run_config(row.raw, row.name)


def evaluate(rows: list[PublicRun] | None = None) -> list[tuple[PublicRun, float]]:
    """(row, predicted seconds) for every public run."""
    return [(row, row_seconds(row)) for row in rows or public_runs()]


def row_seconds(row: PublicRun) -> float:
    """The row's predicted seconds (`row_iteration`)."""
    return row_iteration(row).seconds


def row_iteration(row: PublicRun) -> Iteration:
    """The row's predicted iteration: its run as configured, or under its MindFormers plan as `ppb check
    --plan` reads one (`balance.user_plan.from_mindformers` over every option, `estimate.check.check_plan`)."""
    run = config(row)
    if row.plan is None:
        return run_iteration(run)
    problem = run_problem(run, describe_run(run, withdrawing=False), runnable=False)
    plan = from_mindformers(problem, row.plan, row.source, run)
    return check_plan(run, cells(plan), problem.describe()["bodies"], None).iteration


@dataclass(frozen=True)
class RowPeak:
    """A row's largest stage peak against its device, in MiB (reserved memory as the run config sets it)."""

    name: str
    stage: int
    moment: str
    peak_mib: float
    device_mib: float

    @property
    def fits(self) -> bool:
        return self.peak_mib <= self.device_mib


def row_peak(row: PublicRun) -> RowPeak:
    """ppb's largest stage peak of the row's run: as configured, or under its MindFormers plan as `ppb check
    --plan` reads one (`row_seconds`). These runs trained, so each peak must fit the device's memory."""
    run = config(row)
    if row.plan is None:
        # what the fit verdict counts: a torchtitan FSDP2 stage's peak with what the caching allocator reserves
        # beyond it (`StagePeak.fit_bytes`), the allocated peak elsewhere
        peak = max(run_stage_peaks(run), key=lambda p: p.fit_bytes)
        return RowPeak(row.name, peak.stage, peak.moment, peak.fit_bytes / MIB, peak.device_bytes / MIB)
    problem = run_problem(run, describe_run(run, withdrawing=False), runnable=False)
    plan = from_mindformers(problem, row.plan, row.source, run)
    checked = check_plan(run, cells(plan), problem.describe()["bodies"], None)
    stage = max(checked.stages, key=lambda s: s.peak_mb + s.allocator_mb)  # MB: 2**20 bytes (ppb_core.units)
    return RowPeak(row.name, stage.stage, stage.moment, stage.peak_mb + stage.allocator_mb, stage.device_mb)


def over_device(rows: list[PublicRun] | None = None) -> list[RowPeak]:
    """The rows whose ppb peak exceeds their device's memory: runs that trained, so ppb over-counts them."""
    return [peak for peak in map(row_peak, rows or public_runs()) if not peak.fits]


def with_micro_batch(row: PublicRun, size: int) -> RunConfig:
    """The row's run with another micro-batch size (the same global batch)."""
    raw = {**row.raw, "training": dict(row.raw["training"])}
    per_replica = raw["training"]["micro_batch_size"] * raw["training"]["micro_batches"]
    raw["training"].update(micro_batch_size=size, micro_batches=per_replica // size)
    return run_config(raw, row.name)


# Each group's rows by their source (the published tables: every row no other group takes).
GROUPS = {
    "Megatron CI": lambda source: source.startswith(MEGATRON_TESTS),
    "NeMo 25.11 performance-summary": lambda source: source == NEMO,
    "NeMo 26.04 performance-summary": lambda source: source == NEMO_2604,
    "NeMo GPT-OSS 120B (25.11, 26.04)": lambda source: source in (NEMO_2511_GPT_OSS, NEMO_2604_GPT_OSS),
    "NeMo GB300 / B300 (25.11, 26.04)": lambda source: source in (NEMO_2511_ULTRA, NEMO_2604_ULTRA),
    "NeMo archive 25.09 / 26.02 / 26.02.01 / 26.06": lambda source: source.startswith(ARCHIVE),
    "Megatron-Bridge cards": lambda source: source in (BRIDGE_CARDS, BRIDGE_VERIFICATION),
    "Megatron-LM MoE recipes": lambda source: source == MOE_RECIPES,
    "NeMo 24.07 H100": lambda source: source == NEMO_2407,
    "NeMo 2 25.02 / 25.04 / 25.07": lambda source: source.startswith(NEMO2),
    "other torchtitan benchmark": lambda source: source.startswith(TITAN_SOURCES),
    "torchtitan docs/performance.md (2024)": lambda source: source.startswith(DOCS_SOURCES),
    "BLOOM": lambda source: source.startswith(BLOOM),
    "MindFormers": lambda source: source.startswith((MINDFORMERS, MIXTRAL)),
    "MindFormers model-card": lambda source: source.startswith(CARDS),
    "Narayanan 2021 Table 1, SC21 scripts": lambda source: source == NARAYANAN,
    "MT-NLG 530B, micro-batch unstated": lambda source: source == MTNLG,
    "MindFormers v1.3.0 Qwen cards": lambda source: source.startswith(CARDS_V130),
    "dgxc-benchmarking NeMo 1 recipes (24.05-24.12)": lambda source: (
        source.startswith(DGXC) and not source.startswith(DGXC_NEMO2)
    ),
    "dgxc-benchmarking NeMo 2 recipes (25.02.01, 25.04.01)": lambda source: source.startswith(DGXC_NEMO2),
}


def groups(results: list[tuple[PublicRun, float]]) -> dict[str, list[tuple[PublicRun, float]]]:
    """The results by group, the published tables' rows first."""
    found = {label: [r for r in results if belongs(r[0].source)] for label, belongs in GROUPS.items()}
    taken = [r for rows in found.values() for r in rows]
    return {"published tables'": [r for r in results if r not in taken], **found}


def mean_error(results: list[tuple[PublicRun, float]]) -> float:
    return sum(abs(predicted / row.seconds - 1) for row, predicted in results) / len(results)


def h100_over_a100() -> list[tuple[str, float, float]]:
    """(case, measured H100/A100 seconds, ppb's) for the 7B cases: identical configs, values of one commit."""
    pairs = []
    for tp, pp, vpp, mbs in ((1, 4, 8, 1), (4, 1, 1, 2)):
        measured = GOLDEN_7B_H100_WITH_A100[tp].median_s / GOLDEN_7B[tp, "a100"].median_s
        h100, a100 = (
            run_iteration(run_config(gpt3_7b_run(tp, pp, vpp, mbs, gpu), f"7b-{gpu}")).seconds
            for gpu in ("h100", "a100")
        )
        pairs.append((f"GPT 7B TP{tp} PP{pp}", measured, h100 / a100))
    return pairs


# Megatron-LM README (core_r0.8.0, "Training Speed and Scalability"): "We also strong scaled the standard
# GPT-3 model [the table's 177B] from 96 H100 GPUs to 4608 GPUs, using the same batch size of 1152
# sequences throughout. Communication becomes more exposed at larger scale, leading to a reduction in MFU
# from 47% to 42%." The table's row is the 2304-GPU point (432.8 TFLOP/s, 44%). The README states the
# GPU counts and MFU only: TP 8 and PP 6 are taken from the table's row at every point (DP 2 and 96).
STRONG_SCALING = ((2, 0.47), (48, 432.8 / 989.0), (96, 0.42))  # (DP, published MFU of 989 TFLOP/s)


def strong_scaling_runs() -> list[PublicRun]:
    """The 177B strong-scaling points as rows: seconds from the published MFU (of 989 TFLOP/s) and the
    table's FLOP count, TP 8 and PP 6 as in the table's row, DP 2, 48 and 96 (`STRONG_SCALING`)."""
    row = next(r for r in _megatron_runs() if r.name.startswith("Megatron GPT 177B"))
    flops = megatron_r08_flops(12288, 96, 96, 131072, 4096, 1152)
    runs = []
    for dp, mfu in STRONG_SCALING:
        raw = {**row.raw, "name": f"{row.raw['name']}-dp{dp}", "parallel": {**row.raw["parallel"], "dp": dp}}
        raw["training"] = {**row.raw["training"], "micro_batches": 1152 // dp}
        gpus = 8 * 6 * dp
        runs.append(
            PublicRun(
                f"Megatron GPT 177B strong scaling ({gpus} H100, TP8 PP6 DP{dp})",
                MEGATRON_TABLE,
                raw,
                f"MFU {mfu:.1%}",
                flops / (gpus * mfu * 989e12),
                (*row.assumptions, "TP 8 and PP 6 at every point, as in the table's row"),
            )
        )
    return runs


def strong_scaling() -> list[tuple[int, float, float, float]]:
    """(GPUs, published MFU, ppb's MFU by the table's FLOP count, ppb's seconds) for the 177B model.

    Its first point has 576 micro-batches a pipeline: almost no bubble, so it shows the steady state's
    rate apart from the schedule; the ratios between points show the schedule and data parallelism alone."""
    flops = megatron_r08_flops(12288, 96, 96, 131072, 4096, 1152)
    found = []
    for (dp, mfu), row in zip(STRONG_SCALING, strong_scaling_runs(), strict=True):
        seconds = run_iteration(config(row)).seconds
        gpus = 8 * 6 * dp
        found.append((gpus, mfu, flops / gpus / seconds / 989e12, seconds))
    return found


# The device fields that set each op class's rate (a diagnostic scales them; nothing is fitted).
OP_CLASSES = {
    "GEMMs": ("matmul_efficiency",),
    "attention": (
        "attention_forward_efficiency",
        "attention_backward_efficiency",
        "flash2_forward_efficiency",
        "flash2_backward_efficiency",
    ),
    "memory-bound": ("memory_efficiency", "eager_memory_efficiency"),
    "communication": ("comm_efficiency", "nic_efficiency"),
}


def _slowed(raw: dict[str, Any], op_class: str, factor: float) -> float:
    """The run's seconds with one op class's rates divided by *factor*."""
    device = dict(raw["device"])
    profile = DEVICE_CATALOG[device["name"]]
    for name in OP_CLASSES[op_class]:
        value = device.get(name, getattr(profile, name))
        if value:  # 0: unset (a NIC at comm_efficiency)
            device[name] = value / factor
    return run_iteration(run_config({**raw, "device": device}, raw["name"])).seconds


def class_factor(raw: dict[str, Any], target_s: float, op_class: str) -> float | None:
    """How many times longer one op class alone must take for the run to last *target_s* (bisection
    between 1 and 5; None when even 5 is not enough or ppb is already slower)."""
    low, high = 1.0, 5.0
    if _slowed(raw, op_class, low) >= target_s or _slowed(raw, op_class, high) < target_s:
        return None
    for _ in range(20):
        middle = (low + high) / 2
        low, high = (middle, high) if _slowed(raw, op_class, middle) < target_s else (low, middle)
    return (low + high) / 2


def print_class_factors() -> None:
    """Each Megatron CI row, each H100 row of the README's table and its 96-GPU strong-scaling point (the
    steady state): the factor one op class alone would need to match the measurement."""
    print("one op class alone, times longer, to match (a diagnostic: rates divided, nothing adopted):")
    print(f"{'run':56s} " + " ".join(f"{name:>13s}" for name in OP_CLASSES))
    readme = [row for row in _megatron_runs() if row.name.startswith("Megatron GPT")]
    for row in [*_megatron_ci_runs(), *readme, strong_scaling_runs()[0]]:
        factors = [class_factor(row.raw, row.seconds, name) for name in OP_CLASSES]
        cells = " ".join(f"{'-' if f is None else f'x{f:.2f}':>13s}" for f in factors)
        print(f"{row.name:56s} {cells}")
    # the pairs: the H100 run against ppb's A100 time times the measured H100/A100 ratio
    for tp, pp, vpp, mbs in ((1, 4, 8, 1), (4, 1, 1, 2)):
        measured = GOLDEN_7B_H100_WITH_A100[tp].median_s / GOLDEN_7B[tp, "a100"].median_s
        a100 = run_iteration(run_config(gpt3_7b_run(tp, pp, vpp, mbs, "a100"), "7b-a100")).seconds
        h100 = gpt3_7b_run(tp, pp, vpp, mbs, "h100")
        factors = [class_factor(h100, measured * a100, name) for name in OP_CLASSES]
        cells = " ".join(f"{'-' if f is None else f'x{f:.2f}':>13s}" for f in factors)
        print(f"{f'GPT 7B TP{tp} PP{pp}: H100 against the pair':56s} {cells}")


def main() -> int:
    print(f"machine: {machine()}")
    results = evaluate()
    print(f"{'run':56s} {'published':>26s} {'seconds':>8s} {'ours':>8s} {'error':>7s} {'mbs 2':>7s}")
    for row, predicted in results:
        error = predicted / row.seconds - 1
        other = (
            ""
            if row.source != MEGATRON_TABLE
            else f"{run_iteration(with_micro_batch(row, 2)).seconds / row.seconds - 1:+7.1%}"
        )
        print(f"{row.name:56s} {row.published:>26s} {row.seconds:8.3f} {predicted:8.3f} {error:+7.1%} {other:>7s}")
    for label, rows in groups(results).items():
        print(f"mean absolute error over the {len(rows)} {label} runs: {mean_error(rows):.1%}")
    print(f"mean absolute error over all {len(results)} runs: {mean_error(results):.1%}")
    over = over_device([row for row, _ in results])
    print(f"runs whose ppb peak exceeds the device (they trained): {len(over)} of {len(results)}")
    for peak in over:
        print(
            f"  over the device: {peak.name}: stage {peak.stage} {peak.moment} {peak.peak_mib:,.0f} MiB "
            f"> {peak.device_mib:,.0f} MiB ({peak.peak_mib / peak.device_mib - 1:+.1%})"
        )
    for label, reason in ULTRA_SKIPPED:  # bench/_nemo.py: the GB300/B300 rows not priced
        print(f"not priced: NeMo {label}: {reason}")
    for label, reason in (*SKIPPED, *SKIPPED_2407, *SKIPPED_NEMO2):  # bench/_nemo_releases.py, bench/_nemo_2407.py
        print(f"not priced: NeMo {label}: {reason}")
    # bench/_papers.py, bench/_mindformers.py, bench/_bridge_cards.py, bench/_moe_recipes.py, bench/_dgxc.py
    for label, reason in (
        *NARAYANAN_SKIPPED,
        *SKIPPED_V130,
        *SKIPPED_BRIDGE,
        *SKIPPED_CARDS,
        *SKIPPED_RECIPES,
        *SKIPPED_DGXC,
    ):
        print(f"not priced: {label}: {reason}")
    print(
        "mbs 2: the Megatron rows with micro-batches of 2 sequences (the table does not state the size; "
        "Megatron-LM's examples/gpt3 script uses 1)"
    )
    print()
    print("H100 over A100 seconds, identical configs, golden values of one commit (adc69dba2d):")
    for case, measured, ours in h100_over_a100():
        print(f"  {case:20s} measured {measured:.3f}  ppb {ours:.3f}  ({ours / measured - 1:+.1%})")
    print()
    print("Megatron GPT 177B strong scaling, batch 1152 (README core_r0.8.0; TP 8, PP 6 assumed at every point):")
    points = strong_scaling()
    for gpus, published, ours, seconds in points:
        print(
            f"  {gpus:5d} H100  MFU published {published:.1%}  ppb {ours:.1%} ({seconds:.3f} s)  "
            f"over the {points[0][0]}-GPU point: published {published / points[0][1]:.3f}  "
            f"ppb {ours / points[0][2]:.3f}"
        )
    if "--classes" in sys.argv[1:]:
        print()
        print_class_factors()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
