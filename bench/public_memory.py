"""Our stage peaks against published peak-memory measurements of real training runs.

    python bench/public_memory.py

Each row is a measured peak of a named run, with the settings read from the same source, next to
ppb's peak for the stage the measurement was taken on (reserved memory set to 0: the counters
below leave the CUDA context and NCCL out). What the source does not state is an assumption,
written in the row.

Sources:
- Megatron-LM functional tests (NVIDIA/Megatron-LM at d98e8a64, tests/functional_tests/test_cases/
  <case>/model_config.yaml for the settings, golden_values_dev_dgx_<gpu>.json for the measurements,
  tests/test_utils/recipes/h100/gpt.yaml: one node of 8 GPUs). `mem-max-allocated-bytes` is
  `torch.cuda.max_memory_allocated()` logged by megatron/training/training.py `training_log`
  with `--log-memory-to-tensorboard`, on the rank that writes the logs: the last rank (the last
  pipeline stage). The value of the last logged iteration is taken (steady from the second).
  Unstated flags take Megatron's defaults (megatron/training/arguments.py): attention and hidden
  dropout 0.1, LayerNorm, GeLU MLP of 4h, biases, learned absolute positions, the vocabulary
  padded to a multiple of 128·tp, fp32 main gradients (bf16 sets `--main-grads-dtype fp32`).
- Megatron-LM's release tests (the same tree: gpt/gpt3_15b_8t_release_sm{,_gb200}, mixtral/*_release, the
  DeepSeek-V3 proxies), the same counters of real multi-node runs: H100/GB200 files of main's weekly runs, A100
  files of Megatron-Core 0.12.0's QA (`CORE_0_12_QA`). Their node count is not in the repository: each row
  takes the data-parallel size whose after-step memory matches the file's and says so; the flex dispatcher's
  buffers, which the allocator never counts (`ppb_core.memory.allocated.uncounted_bytes`), are left out.
- torchtitan benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan, runs at 9dec370):
  "Memory(GiB)" is train.py's `max_reserved_gib`, torch.cuda `reserved_bytes.all.peak`: the
  caching allocator's reserved peak, which is at least the allocated peak. Beside the allocated
  peak (a bound, not in the allocated rows' error) each is scored against ppb's reserved estimate
  (`ppb_core.memory.reserved`); its torch.compile rows compile the blocks (9dec370 leaves the loss
  eager). Likewise Trainy's H200 file in the same folder (torchtitan e7c0cae: the blocks and the
  loss compiled).

Prints each row's measured and predicted GiB and the error, then the largest absolute error of
the allocated rows; then the reserved rows against ppb's reserved estimate, pool by pool, with their
mean absolute error; then, for the Megatron rows, the memory after the optimizer step
(`mem-allocated-bytes` of the same golden values) against ppb's optimizer moment, and the first
iteration's peak (before the first step allocates Adam's moments) against ppb's peak without them;
then each MoE row's peak at balanced routing and at the most one expert-parallel rank can receive
under the run's own routing settings (`MoeTraining.routed_share_bound`), which brackets it.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ppb_core.config.run import RunConfig  # noqa: E402
from ppb_core.memory.allocated import allocated_peak_bytes, uncounted_bytes  # noqa: E402
from ppb_core.memory.model import MemoryModel, run_stage_peaks  # noqa: E402
from ppb_core.memory.reserved import ReservedPools, reserved_pools  # noqa: E402
from ppb_core.model.walk import walk  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from _measure import machine  # noqa: E402
from _public import (  # noqa: E402
    BEFORE_V022,
    GPT_SMALL,
    LLAMA3_405B,
    LLAMA31_8B,
    LLAMA31_70B,
    MEGATRON_TESTS,
    MOE_MLA_LAYOUT,
    MOE_MLA_MEMORY_SPEED,
    gpt3_7b_run,
    moe_mla_layout_run,
    moe_mla_memory_speed_run,
    run_config,
    torchtitan_llama31_8b,
    torchtitan_run,
)

# torchtitan's H100 of 96 GB, nothing reserved: the measured peaks are the allocator's own.
TITAN_H100_96GB = {"name": "h100-80gb", "memory_mb": 98304, "reserved_mb": 0}
H200 = {"name": "h200", "reserved_mb": 0}

GIB = 2**30
TORCHTITAN = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"


@dataclass(frozen=True)
class MeasuredPeak:
    name: str
    source: str  # file the measurement and its settings are read from
    raw: dict[str, Any]  # the run config
    stage: int | None  # the pipeline stage measured (None: the largest over the stages)
    measured_gib: float
    allocated: bool = True  # False: the allocator's reserved peak (a bound on the allocated peak)
    # `mem-allocated-bytes` of the same run: `torch.cuda.memory_allocated()` right after the step
    after_step_bytes: int | None = None
    # `mem-max-allocated-bytes` at the first iteration, before the optimizer's moments exist
    first_iteration_bytes: int | None = None
    assumptions: tuple[str, ...] = field(default=())
    # the run starts from trained weights (`--finetune` with `--load`), its router already trained: its routing at
    # iteration 1 is the checkpoint's, not an initialisation's
    trained_router: bool = False
    # the golden file is one launch from an initialisation (a CI case of 50 iterations): its iteration 1 is the
    # first forward and backward of the process; elsewhere the counter, never reset (no reset_peak_memory_stats in
    # megatron/ at d98e8a64), also holds a checkpoint load (--finetune, or the release runs' resumed windows)
    one_launch: bool = False


def _megatron_rows() -> list[MeasuredPeak]:
    rows = []
    # (case, tp, pp, vpp, micro-batch size, {gpu: last (mem-max-allocated-bytes, mem-allocated-bytes),
    # then the first iteration's mem-max-allocated-bytes})
    cases = (
        (
            "gpt3_7b_tp1_pp4_memory_speed", 1, 4, 8, 1,
            {"h100": (60720852992, 24808996864, 52931256320), "a100": (60489064448, 24510808064, 52700401664)},
        ),
        (
            "gpt3_7b_tp4_pp1_memory_speed", 4, 1, 1, 2,
            {"h100": (57143791616, 20663519232, 50289487872), "a100": (58188115968, 20634103808, 51333926912)},
        ),
    )  # fmt: skip
    for case, tp, pp, vpp, mbs, measured in cases:
        for gpu, (peak, after_step, first) in measured.items():
            rows.append(
                MeasuredPeak(
                    f"Megatron GPT 7B TP{tp} PP{pp} ({gpu.upper()})",
                    f"{MEGATRON_TESTS}/gpt/{case}/golden_values_dev_dgx_{gpu}.json",
                    gpt3_7b_run(tp, pp, vpp, mbs, gpu),
                    stage=pp - 1,
                    measured_gib=peak / GIB,
                    after_step_bytes=after_step,
                    first_iteration_bytes=first,
                    assumptions=(
                        "dp 2 (one node of 8 GPUs)",
                        "CUBLAS_WORKSPACE_CONFIG=:4096:8 (the case's ENV_VARS)",
                        *((_BATCHES_KEPT,) if tp == 1 and gpu == "h100" else ()),
                    ),
                )
            )
    return rows


# Measured at 6e091e1b68 (2026-05-29), when pretrain_gpt.py `get_batch` (from 5e4fc931ba) put the
# loader's batches on the GPU inside the dict RerunDataIterator saves (until bf32f4415e copies it):
# tensor-parallel rank 0 of the last stage holds the iteration's micro-batches, attention masks
# included, after the step. d98e8a64, which ppb follows, does not.
_BATCHES_KEPT = "after the step the run kept its micro-batches on the GPU (Megatron 5e4fc931ba..bf32f4415e), ppb not"


def _gpt_small(case: str, pp: int, vpp: int, zero: int) -> dict[str, Any]:
    data_parallel = 8 // pp
    # gpt3_mcore_tp1_pp2 runs --transformer-impl local; the te_ cases transformer_engine
    impl = "transformer_engine" if "_te_" in case else "local"
    return {
        "name": f"megatron-{case}",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": GPT_SMALL, "pad_vocab_multiple": 128}],
        "parallel": {
            "dp": data_parallel,
            "pp": pp,
            "vpp": vpp,
            "zero": zero,
            **({"schedule": "interleaved"} if vpp > 1 else {}),
        },
        "training": {
            "seq_length": 1024,
            "micro_batch_size": 4,
            "micro_batches": 32 // (4 * data_parallel),
            "dtype": "bf16",
            "flash_attention": False,
        },
        "device": {"name": "h100-80gb", "reserved_mb": 0},
        # the three cases run --no-gradient-accumulation-fusion (no TE dummy wgrads, frameworks/dummy_wgrad.py)
        "timing": {"transformer_impl": impl, "gradient_accumulation_fusion": False},
        "memory": {"cublas_workspace_config": ":4096:8"},  # the cases' ENV_VARS
    }


def _megatron_small_rows() -> list[MeasuredPeak]:
    # (case, pp, vpp, zero: 1 with --use-distributed-optimizer, H100 last mem-max-allocated-bytes and
    # mem-allocated-bytes, the first iteration's mem-max-allocated-bytes)
    cases = (
        ("gpt3_mcore_te_tp1_pp1_dist_optimizer_no_mmap_bin_files", 1, 1, 1, 4702430720, 581489664, 4605814272),
        ("gpt3_mcore_te_tp1_pp4_vp1", 4, 3, 0, 4161191424, 776656384, 3879479808),
        ("gpt3_mcore_tp1_pp2", 2, 1, 0, 3633177600, 948653056, 3276857344),
    )
    return [
        MeasuredPeak(
            f"Megatron {case.removeprefix('gpt3_mcore_')} (H100)",
            f"{MEGATRON_TESTS}/gpt/{case}/golden_values_dev_dgx_h100.json",
            _gpt_small(case, pp, vpp, zero),
            stage=pp - 1,
            measured_gib=peak / GIB,
            after_step_bytes=after_step,
            first_iteration_bytes=first,
            assumptions=(
                f"dp {8 // pp} (one node of 8 GPUs)",
                *((_BATCHES_KEPT,) if case == "gpt3_mcore_te_tp1_pp4_vp1" else ()),
            ),
        )
        for case, pp, vpp, zero, peak, after_step, first in cases
    ]


def _loss_fusion_run(case: str, fusion: bool) -> dict[str, Any]:
    """The 12-layer GPT at TP2 PP2 (dp 2, no distributed optimizer, no SP, TE's default attention backend),
    with or without --cross-entropy-loss-fusion; both cases run --no-gradient-accumulation-fusion."""
    return {
        "name": f"megatron-{case}",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": GPT_SMALL, "pad_vocab_multiple": 128}],
        "parallel": {"dp": 2, "tp": 2, "pp": 2, "zero": 0},
        "training": {"seq_length": 1024, "micro_batch_size": 4, "micro_batches": 4, "dtype": "bf16"},
        "device": {"name": "h100-80gb", "reserved_mb": 0},
        "timing": {
            "cross_entropy_fusion": fusion,
            "gradient_accumulation_fusion": False,
            "deterministic": not fusion,  # the unfused case runs --deterministic-mode
        },
        # the unfused case's ENV_VARS state CUBLAS_WORKSPACE_CONFIG; the fused case's take PyTorch's default
        **({} if fusion else {"memory": {"cublas_workspace_config": ":4096:8"}}),
    }


def _megatron_loss_fusion_rows() -> list[MeasuredPeak]:
    """A pair of Megatron CI cases that differ by --cross-entropy-loss-fusion (and --deterministic-mode):
    gpt3_mcore_te_tp2_pp2_resume_torch_dist and gpt3_mcore_te_tp2_pp2_cross_entropy_loss_fusion, H100
    golden values at d98e8a64 (the fused case's unchanged since ad2ab2ca12, Jan 2026, the other's since
    5fe3f06658, May 2026; both within 0.2% of their Oct 2025 values). The unfused case is the first run of
    a checkpoint-resume test: its last iteration is 100 (the save at 50 moves no peak)."""
    # (case, fusion, last mem-max-allocated-bytes, mem-allocated-bytes, the first iteration's peak)
    cases = (
        ("gpt3_mcore_te_tp2_pp2_resume_torch_dist", False, 1428171264, 517243392, 1245477376),
        ("gpt3_mcore_te_tp2_pp2_cross_entropy_loss_fusion", True, 1837640192, 514359808, 1670148096),
    )
    return [
        MeasuredPeak(
            f"Megatron {case.removeprefix('gpt3_mcore_')} (H100)",
            f"{MEGATRON_TESTS}/gpt/{case}/golden_values_dev_dgx_h100.json",
            _loss_fusion_run(case, fusion),
            stage=1,
            measured_gib=peak / GIB,
            after_step_bytes=after_step,
            first_iteration_bytes=first,
            assumptions=("dp 2 (one node of 8 GPUs)", "TE's default attention backend taken as flash"),
        )
        for case, fusion, peak, after_step, first in cases
    ]


def _megatron_moe_rows() -> list[MeasuredPeak]:
    case = MOE_MLA_MEMORY_SPEED
    raw = moe_mla_memory_speed_run()
    return [
        MeasuredPeak(
            "Megatron MoE-MLA 16L TP2 PP2 EP4 (H100)",
            f"{MEGATRON_TESTS}/moe/{case}/golden_values_dev_dgx_h100.json",
            raw,
            stage=1,
            measured_gib=60111630336 / GIB,
            after_step_bytes=6632031744,
            first_iteration_bytes=55051542528,
            one_launch=True,
            assumptions=(
                "dp 2 (one node of 8 GPUs)",
                "routing balanced (dropless_imbalance 1.0; the run's own imbalance is not published)",
                "one of three recordings of 2026-01-14 with the same flags (54.84, 55.54, 55.98 GiB: 69ba8096f0, "
                "c292652b5d, 11debfa7b4), alike to iteration 3 (53.94), after which the case went to mr-broken "
                "(ef159836f5)",
            ),
        ),
        # The same case's golden values on DGX Cloud H100: byte for byte the DGX H100 recording of f5590597c4
        # (2025-10-31: 55056003072, 57920647168, 57961472000, steps at iterations 2, 3 and 34), so the code of
        # Oct 2025 rather than the cluster; its rise after iteration 3 is 0.04 GiB where 11debfa7b4's is 2.04.
        MeasuredPeak(
            "Megatron MoE-MLA 16L TP2 PP2 EP4 (H100, DGX Cloud)",
            f"{MEGATRON_TESTS}/moe/{case}/golden_values_dev_dgxh100_dgxc.json",
            raw,
            stage=1,
            measured_gib=57961472000 / GIB,
            after_step_bytes=6637274624,
            first_iteration_bytes=55056003072,
            one_launch=True,
            assumptions=(
                "dp 2 (one node of 8 GPUs)",
                "routing balanced (dropless_imbalance 1.0; the run's own imbalance is not published)",
                "the same case and settings as the row above, the figures of its 2025-10-31 recording",
            ),
        ),
    ]


def _megatron_moe_layout_rows() -> list[MeasuredPeak]:
    """The same MoE-MLA model under selective recompute and a Megatron pipeline layout, without the combined
    1F1B schedule its values ran before (`moe_mla_layout_run`): steady from the fifth iteration on (routing
    drifts less)."""
    case = MOE_MLA_LAYOUT
    raw = moe_mla_layout_run()
    return [
        MeasuredPeak(
            "Megatron MoE-MLA layout, selective recompute (H100)",
            f"{MEGATRON_TESTS}/moe/{case}/golden_values_dev_dgx_h100.json",
            raw,
            stage=1,
            measured_gib=49211260928 / GIB,
            after_step_bytes=6025470464,
            first_iteration_bytes=45099868160,
            one_launch=True,
            assumptions=(
                "dp 2 (one node of 8 GPUs)",
                "routing balanced (the run's own imbalance is not published)",
                "golden values of c08d89bea0, its flags then (no --overlap-moe-expert-parallel-comm)",
            ),
        )
    ]


# gpt/gpt3_15b_8t_release_sm{,_gb200}/model_config.yaml (Megatron's release tests: a Nemotron-4-like 15B): 32
# layers, h 6144, 48 heads in 8 query groups, squared-ReLU MLP of 4h, LayerNorm-1P, RoPE on half the head
# (--rotary-percent 0.5), no biases, no dropout, untied embeddings, the nemotron_2_256k tokenizer (256000 entries,
# divisible by 128·tp), sequence 4096, micro-batch 4, distributed optimizer with both overlaps, SP.
NEMOTRON_15B: dict[str, Any] = {
    "vocab_size": 256000,
    "hidden_size": 6144,
    "num_layers": 32,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    # --squared-relu: megatron/core/activations.py `squared_relu`, pow(relu(x), 2) under jit_fuser, keeps two
    # 4h tensors as ReLU's pricing does (compiled: fc1's output for the backward and the square for fc2; eager:
    # relu's output, which relu and pow both save, and the square)
    "intermediate_size": 4 * 6144,
    "activation": "relu",
    "norm": "layernorm",
    "norm_bias": True,
    "tied_embeddings": False,
    "position_embedding": "rope",
    "max_position_embeddings": 4096,
    "attention_bias": False,
    "attention_output_bias": False,
    "mlp_bias": False,
    "attention_dropout": 0.0,
    "hidden_dropout": 0.0,
}


# The A100 release files (`golden_values_lts_dgx_a100.json` since f57304256e) were added as golden_values_0.12.0*.json
# by cb12e3dea4 and 4b63750ae8 ("QA on 0.12 release"): the Megatron-Core 0.12.0 release's code (core_v0.12.0 lacks
# 2659630721, `releases.CHANGES["experts_weight_probs"]`, which main held from 2025-04-09) in its dev CI image (NGC
# PyTorch 25.03, TE bee4649c15: core_v0.12.0 .gitlab/stages/01.build.yml, Dockerfile.ci.dev)
CORE_0_12_QA = {"megatron_core": "0.12", "transformer_engine": "2025-03-18", "pytorch": "2.7"}


def _release_15b_run(gpu: str, tp: int, pp: int, dp: int, release: dict[str, str]) -> dict[str, Any]:
    """The release case on *gpu*: H100 and A100 (gpt3_15b_8t_release_sm) TP8 with --no-rope-fusion; GB200
    (gpt3_15b_8t_release_sm_gb200) TP4 PP2 with 4 chunks of 8 layers, --tp-comm-overlap,
    --cross-entropy-loss-fusion (native) and the rope fusion on. The global batch is the
    --step-batch-size-schedule's first, 384: the _sm runs stop at 13000 iterations, 20B tokens, before its
    200B step."""
    gb200 = gpu == "gb200"
    return {
        "name": f"megatron-gpt3-15b-8t-release-sm-{gpu}",
        "framework": "megatron",
        "framework_release": release,
        "models": [{"name": "gpt", "spec": NEMOTRON_15B, "pad_vocab_multiple": 128}],
        "parallel": {
            "dp": dp,
            "tp": tp,
            "pp": pp,
            "sequence_parallel": True,
            "zero": 1,
            **({"vpp": 2, "schedule": "interleaved"} if pp > 1 else {}),
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": 4,
            "micro_batches": 384 // (4 * dp),
            "dtype": "bf16",
            "flash_attention": True,
            "optimizer": "adam",
            **({} if gb200 else {"rope_fusion": False}),
        },
        "device": {"name": GPU_DEVICES[gpu], "reserved_mb": 0},
        "timing": {
            "transformer_impl": "transformer_engine",
            "gradient_accumulation_fusion": True,
            "deterministic": False,
            "cross_entropy_fusion": gb200,
            "log_params_norm": True,  # --log-params-norm, --log-num-zeros-in-grad
            "log_num_zeros_in_grad": True,
            "rope_fusion": gb200,
            "overlap": {"dp": 1.0, "param_gather": 1.0, "tp": 1.0 if gb200 else 0.0},
        },
    }


GPU_DEVICES = {"h100": "h100-80gb", "a100": "a100-80gb", "gb200": "gb200"}


def _megatron_release_rows() -> list[MeasuredPeak]:
    """Megatron's release runs of the 15B (`_release_15b_run`), each golden file's last logged peak (iteration
    12715 or 13000), after-step memory and first iteration. The node count of a release run is not in the
    repository (the release recipes were a submodule, tests/functional_tests/local_recipes: a gitlink without
    .gitmodules at 3230340fcc):
    each row takes the data-parallel size whose after-step memory, the optimizer's shards over dp, matches the
    file's own, and says so; the peak, iteration 1 and the seconds are not used to choose it."""
    # (gpu, golden file, tp, pp, dp, release, last mem-max-allocated-bytes, mem-allocated-bytes, iteration 1's
    # mem-max-allocated-bytes, the dp choice)
    cases = (
        ("h100", "gpt3_15b_8t_release_sm/golden_values_dev_dgx_h100.json", 8, 1, 32,
         # 6657173fd7 (2026-03-12) measured it; its CI image's uv.lock pins transformer-engine 2.13.0
         {"megatron_core": "2026-03-12", "transformer_engine": "2.13"},
         28160194560, 13269043200, 27658764288,
         "dp 32 (256 GPUs, not published): ppb's after-step memory is -0.1% at dp 32, +5.4% at 16"),
        ("a100", "gpt3_15b_8t_release_sm/golden_values_lts_dgx_a100.json", 8, 1, 32,
         # cb12e3dea4 (2025-04-04) added it as golden_values_0.12.0_PyT25.03.json (renamed _lts_dgx_a100 by
         # 80d66ec0e4 and f57304256e): Megatron-Core 0.12.0's QA on NGC PyTorch 25.03 (PyTorch 2.7), whose CI image
         # built TE bee4649c15 (core_v0.12.0 Dockerfile.ci.dev)
         CORE_0_12_QA,
         28391712768, 12698492928, 27893811200,
         "dp 32 (256 GPUs, not published): ppb's after-step memory is -0.1% at dp 32, +5.7% at 16"),
        ("gb200", "gpt3_15b_8t_release_sm_gb200/golden_values_dev_dgx_gb200.json", 4, 2, 16,
         # a50252b6ad (2026-06-18) measured it; its uv.lock pins transformer-engine 2.16.0
         {"megatron_core": "2026-06-18", "transformer_engine": "2.16"},
         42639351808, 14700898304, 41662402560,
         "dp 16 (128 GPUs, not published): ppb's after-step memory is +0.0% at dp 16, +10.0% at 8; at dp 32 the "
         "3 micro-batches leave a group of 1 for pp 2, which Megatron refuses"),
    )  # fmt: skip
    return [
        MeasuredPeak(
            f"Megatron 15B release TP{tp} PP{pp} ({gpu.upper()}{', core 0.12.0' if 'lts' in file else ''})",
            f"{MEGATRON_TESTS}/gpt/{file}",
            _release_15b_run(gpu, tp, pp, dp, release),
            stage=pp - 1,
            measured_gib=peak / GIB,
            after_step_bytes=after_step,
            first_iteration_bytes=first,
            assumptions=(
                dp_choice,
                "global batch 384 (the step-batch schedule's first)",
                "--rotary-percent 0.5 priced as full RoPE",
            ),
        )
        for gpu, file, tp, pp, dp, release, peak, after_step, first, dp_choice in cases
    ] + [_release_15b_te_loss_row()]


def _release_15b_te_loss_row() -> MeasuredPeak:
    """The GB200 15B file as 6657173fd7 (2026-03-12) recorded it, before 168cb15d70 turned TE's fused
    cross-entropy off: its flags said --cross-entropy-fusion-impl te (and a batch ramp-up held at 384 for these
    13000 iterations, `--rampup-batch-size "[384 384 97656250]"`); its uv.lock's TE 2.13.0. dp as the June file's."""
    raw = _release_15b_run("gb200", 4, 2, 16, {"megatron_core": "2026-03-12", "transformer_engine": "2.13"})
    raw["timing"]["cross_entropy_fusion_impl"] = "te"
    return MeasuredPeak(
        "Megatron 15B release TP4 PP2 (GB200, TE loss)",
        "NVIDIA/Megatron-LM 6657173fd7 tests/functional_tests/test_cases/gpt/gpt3_15b_8t_release_sm_gb200/"
        "golden_values_dev_dgx_gb200.json",
        raw,
        stage=1,
        measured_gib=34434887680 / GIB,
        after_step_bytes=14650828800,
        first_iteration_bytes=33457934336,
        assumptions=(
            "dp 16, as the June file's (the node count is not published)",
            "global batch 384 (the ramp-up's first)",
            "--cross-entropy-fusion-impl te, as its flags said then",
        ),
    )


def _mixtral_spec(hidden: int, layers: int, heads: int, ffn: int, vocab: int) -> dict[str, Any]:
    """Megatron's release Mixtral (mixtral/*_release/model_config.yaml): SwiGLU experts of *ffn*, 8 of them,
    top 2, RMSNorm, RoPE, 8 query groups, no biases, no dropout, untied embeddings."""
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "intermediate_size": ffn,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "norm_bias": False,
        "tied_embeddings": False,
        "position_embedding": "rope",
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "attention_output_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "num_experts": 8,
        "experts_per_token": 2,
        "moe_intermediate_size": ffn,
    }


def _mixtral_release_run(
    name: str, spec: dict[str, Any], gpu: str, par: dict[str, int], global_batch: int, release: dict[str, str]
) -> dict[str, Any]:
    """A release Mixtral case: micro-batch 1 of 4096, distributed optimizer with both overlaps, SP, the alltoall
    dispatcher with grouped GEMMs and the aux-loss router, --no-rope-fusion (its default in these cases)."""
    dp = par["dp"]
    return {
        "name": name,
        "framework": "megatron",
        "framework_release": release,
        "models": [{"name": "gpt", "spec": spec, "pad_vocab_multiple": 128}],
        "parallel": {
            **par,
            "sequence_parallel": True,
            "zero": 1,
            **({"schedule": "interleaved"} if par.get("vpp", 1) > 1 else {}),
        },
        "training": {
            "seq_length": 4096,
            "micro_batch_size": 1,
            "micro_batches": global_batch // dp,
            "dtype": "bf16",
            "flash_attention": True,
            "optimizer": "adam",
            "rope_fusion": False,
            "moe": {"router": {"aux_losses": ["aux_loss"]}, "grouped_gemm": True},
        },
        "device": {"name": GPU_DEVICES[gpu], "reserved_mb": 0},
        "timing": {
            "transformer_impl": "transformer_engine",
            "gradient_accumulation_fusion": True,
            "deterministic": False,
            "log_params_norm": True,
            "log_num_zeros_in_grad": True,
            "rope_fusion": False,
            "overlap": {"dp": 1.0, "param_gather": 1.0, "tp": 0.0},
            "moe_dispatcher": "alltoall",
        },
    }


def _mixtral_release_rows() -> list[MeasuredPeak]:
    """Megatron's Mixtral release runs (mixtral/<case>/golden_values_dev_dgx_h100.json and _lts_dgx_a100.json), the
    last logged peak: of the last SLURM window where a run spans several (each resumed window restarts the
    counter). As for the 15B rows the node count is not public and each row takes the data-parallel size whose
    after-step memory matches the file's. MoE: the peak is the busiest micro-batch's routing of the window, ppb's
    at balanced routing (the aux-loss router, dropless)."""
    mixtral_8x7b_256k = _mixtral_spec(4096, 32, 32, 14336, 256000)  # nemotron_2_256k tokenizer
    mixtral_8x7b = _mixtral_spec(4096, 32, 32, 14336, 32000)  # Llama2Tokenizer: Mixtral's own 32000 entries
    mixtral_8x22b = _mixtral_spec(6144, 56, 48, 16384, 32000)
    alltoall = "mixtral_8x7b_alltoall_tp2pp4ep4_release"
    ep8 = "mixtral_8x7b_tp1pp4ep8vpp8_release"  # its flags set --tensor-model-parallel-size 2 after the name's tp1
    big = "mixtral_8x22b_tp2pp8ep8vpp1_release"
    # (label, case, gpu, spec, parallel, global batch, release, last peak, mem-allocated-bytes, iteration 1's peak,
    # after-step error at the chosen dp and at the next one; every release a file's measuring commit's, the dev
    # files' as bench/megatron_ci.py reads them: Dockerfile.ci.dev TE_COMMIT or uv.lock, NGC PyTorch)
    cases = (
        ("8x7B alltoall TP2 PP4 EP4", alltoall, "h100", mixtral_8x7b_256k,
         {"dp": 16, "tp": 2, "pp": 4, "ep": 4, "etp": 2}, 1024,
         {"megatron_core": "2025-06-27", "transformer_engine": "2025-03-18", "pytorch": "2.7"},
         25603858432, 17703634944, 23340781568, "dp 16 (128 GPUs): after-step -0.2%, dp 8 +26.6%"),
        ("8x7B alltoall TP2 PP4 EP4", alltoall, "a100", mixtral_8x7b_256k,
         {"dp": 16, "tp": 2, "pp": 4, "ep": 4, "etp": 2}, 1024, CORE_0_12_QA,
         25339500544, 17448753152, 23085549568, "dp 16 (128 GPUs): after-step +0.1%, dp 8 +27.3%"),
        ("8x7B TP2 PP4 VPP8 EP8", ep8, "h100", mixtral_8x7b,
         {"dp": 8, "tp": 2, "pp": 4, "vpp": 8, "ep": 8, "etp": 1}, 256,
         {"megatron_core": "2026-04-16", "transformer_engine": "2.14"},
         35505844224, 19743387648, 29394774016, "dp 8 (64 GPUs): after-step -0.0%, dp 16 -22.3%"),
        ("8x7B TP2 PP4 VPP8 EP8", ep8, "a100", mixtral_8x7b,
         {"dp": 8, "tp": 2, "pp": 4, "vpp": 8, "ep": 8, "etp": 1}, 256, CORE_0_12_QA,
         35900022784, 19085930496, 30055743488, "dp 8 (64 GPUs): after-step -0.3%, dp 16 -23.4%"),
        ("8x22B TP2 PP8 EP8", big, "h100", mixtral_8x22b,
         {"dp": 8, "tp": 2, "pp": 8, "ep": 8, "etp": 2}, 256,
         {"megatron_core": "2026-04-16", "transformer_engine": "2.14"},
         28533706752, 23002929152, 23002945536, "dp 8 (128 GPUs): after-step -0.0%, dp 16 -28.9%"),
        ("8x22B TP2 PP8 EP8", big, "a100", mixtral_8x22b,
         {"dp": 8, "tp": 2, "pp": 8, "ep": 8, "etp": 2}, 256, CORE_0_12_QA,
         28168466432, 22284785664, 26512646144, "dp 8 (128 GPUs): after-step -0.3%, dp 16 -30.1%"),
    )  # fmt: skip
    rows = []
    for label, case, gpu, spec, par, batch, release, peak, after_step, first, dp_choice in cases:
        lts = gpu == "a100"
        file = f"golden_values_{'lts' if lts else 'dev'}_dgx_{gpu}.json"
        rows.append(
            MeasuredPeak(
                f"Megatron Mixtral {label} ({gpu.upper()}{', core 0.12.0' if lts else ''})",
                f"{MEGATRON_TESTS}/mixtral/{case}/{file}",
                _mixtral_release_run(f"megatron-{case}-{gpu}", spec, gpu, par, batch, release),
                stage=par["pp"] - 1,
                measured_gib=peak / GIB,
                after_step_bytes=after_step,
                first_iteration_bytes=first,
                assumptions=(
                    f"{dp_choice} (the node count is not published)",
                    "routing balanced (the run's own imbalance is not published)",
                    *(("the Llama 2 tokenizer's 32000 entries",) if spec["vocab_size"] == 32000 else ()),
                    *(("--rotary-percent 0.5 priced as full RoPE",) if case == alltoall else ()),
                    *((_TRAINED_ROUTER,) if case != alltoall else ()),
                ),
                trained_router=case != alltoall,
            )
        )
    return rows


# mixtral_8x7b_tp1pp4ep8vpp8_release and mixtral_8x22b_tp2pp8ep8vpp1_release run `--finetune` with `--load` (their
# model_config.yaml at d98e8a64): lm loss 1.81 and 1.74 at iteration 1 (an untrained model's is near ln 32000 = 10.4),
# so their routers are Mixtral's trained ones from the first iteration. The logged rank, world - 1 (global_vars.py
# `_set_tensorboard_writer`), is the last of every parallel dimension, so EP rank 7 of 8: expert 7 alone
# (moe_layer.py, local_expert_indices from ep_rank · num_local_experts).
_TRAINED_ROUTER = (
    "trained weights loaded (--finetune): the logged rank's expert 7 receives what Mixtral's trained router sends it "
    "on the CI's data, which is not published"
)


# mixtral/deepseekv3_proxy_flex_*_release_sm/model_config.yaml: DeepSeek-V3's layers cut to 14 (3 dense), 64
# experts of 2048 (top 8 in 8 groups, 4 chosen; sigmoid scores with expert bias, seq aux loss, fp32 router,
# permute fusion), one shared expert, MLA, one MTP layer, the nemotron_2_256k tokenizer padded to 3232·tp,
# HybridEP (--moe-token-dispatcher-type flex, --moe-flex-dispatcher-backend hybridep), cross-entropy fusion.
DSV3_PROXY: dict[str, Any] = {
    "vocab_size": 256000,
    "hidden_size": 7168,
    "num_layers": 14,
    "num_attention_heads": 128,
    "intermediate_size": 18432,
    "activation": "swiglu",
    "norm": "rmsnorm",
    "norm_bias": False,
    "tied_embeddings": False,
    "position_embedding": "rope",
    "max_position_embeddings": 4096,
    "attention_bias": False,
    "attention_output_bias": False,
    "mlp_bias": False,
    "attention_dropout": 0.0,
    "hidden_dropout": 0.0,
    "num_experts": 64,
    "experts_per_token": 8,
    "moe_intermediate_size": 2048,
    "shared_experts": 1,
    "shared_expert_intermediate_size": 2048,
    "expert_groups": 8,
    "expert_group_limit": 4,
    "first_dense_layers": 3,
    "mla_latent_norms": True,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "mtp_layers": 1,
}


# the _sm files' measuring commit, a50252b6ad (2026-06-18; its uv.lock's transformer-engine 2.16.0)
PROXY_JUNE_2026 = {"megatron_core": "2026-06-18", "transformer_engine": "2.16"}


def _dsv3_proxy_run(
    gpu: str,
    par: dict[str, Any],
    micro_batch_size: int,
    release: dict[str, str] = PROXY_JUNE_2026,
    dispatcher: str = "hybridep",
    loss_impl: str = "native",
) -> dict[str, Any]:
    """A DeepSeek-V3 proxy release case (global batch 512, distributed optimizer with both overlaps, SP) as the
    code of *release* ran it, with the flex backend *dispatcher* and the fused cross-entropy *loss_impl*."""
    return {
        "name": f"megatron-deepseekv3-proxy-flex-{gpu}",
        "framework": "megatron",
        "framework_release": release,
        "models": [{"name": "gpt", "spec": DSV3_PROXY, "pad_vocab_multiple": 3232}],
        "parallel": {**par, "etp": 1, "sequence_parallel": True, "zero": 1},
        "training": {
            "seq_length": 4096,
            "micro_batch_size": micro_batch_size,
            "micro_batches": 512 // (micro_batch_size * par["dp"]),
            "dtype": "bf16",
            "flash_attention": True,
            "optimizer": "adam",
            "moe": {
                "router_dtype": "fp32",
                "permute_fusion": True,
                "router": {
                    "aux_losses": ["seq_aux_loss"],
                    "score_function": "sigmoid",
                    "expert_bias": True,
                    "pre_softmax": True,
                    "topk_scaling": True,
                },
                "grouped_gemm": True,
            },
        },
        "device": {"name": GPU_DEVICES[gpu], "reserved_mb": 0},
        "timing": {
            "transformer_impl": "transformer_engine",
            "gradient_accumulation_fusion": True,
            "deterministic": False,
            "cross_entropy_fusion": True,
            "cross_entropy_fusion_impl": loss_impl,
            "check_for_nan_in_grad": False,
            "log_params_norm": True,
            "log_num_zeros_in_grad": True,
            "overlap": {"dp": 1.0, "param_gather": 1.0, "tp": 0.0},
            "attention_mask_in_dataloader": False,
            "moe_dispatcher": dispatcher,
        },
    }


def _dsv3_proxy_rows() -> list[MeasuredPeak]:
    """Megatron's DeepSeek-V3 proxy release runs (the _sm files, iteration 9535): H100 TP2 PP4 EP16 (layout
    `Et*2|(tt|)*5t|tmL`, micro-batch 1) and GB200 TP2 PP2 EP8 (`Et*7|t*7mL`, micro-batch 4). dp as for the
    other release rows, from the after-step memory (without HybridEP's buffers, which the allocator does not
    count: ppb_core.memory.allocated `uncounted_bytes`): dp 8 within 0.1%, dp 16 18% below."""
    cases = (
        ("H100 TP2 PP4 EP16", "deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release_sm", "h100",
         {"dp": 8, "tp": 2, "pp": 4, "ep": 16, "layout": "Et*2|(tt|)*5t|tmL"}, 1,
         51399831552, 33393860608, 42198188032, "dp 8 (64 GPUs): after-step -0.0%, dp 16 -18.1%"),
        ("GB200 TP2 PP2 EP8", "deepseekv3_proxy_flex_tp2pp2emp16etp1cp1_gb_200_release_sm", "gb200",
         {"dp": 8, "tp": 2, "pp": 2, "ep": 8, "layout": "Et*7|t*7mL"}, 4,
         121062998016, 58583740416, 106022002688, "dp 8 (32 GPUs): after-step -0.1%, dp 16 -18.2%"),
    )  # fmt: skip
    rows = [
        MeasuredPeak(
            f"Megatron DeepSeek-V3 proxy {label}",
            f"{MEGATRON_TESTS}/mixtral/{case}/golden_values_dev_dgx_{gpu}.json",
            _dsv3_proxy_run(gpu, par, mbs),
            stage=par["pp"] - 1,
            measured_gib=peak / GIB,
            after_step_bytes=after_step,
            first_iteration_bytes=first,
            assumptions=(
                f"{dp_choice} (the node count is not published)",
                "routing balanced (the run's own imbalance is not published)",
                "--enable-experimental priced as if not given",
            ),
        )
        for label, case, gpu, par, mbs, peak, after_step, first, dp_choice in cases
    ]
    # The full-length release files (iteration 47680), recorded before 168cb15d70 (2026-06-03) turned TE's
    # cross-entropy fusion off: their flags then said --cross-entropy-fusion-impl te, and the H100 one
    # --moe-enable-deepep (the DeepEP backend; git diff be2b2cd70d d98e8a64 of its model_config.yaml).
    full = (
        ("H100 TP2 PP4 EP16, TE loss", "deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release", "h100",
         {"dp": 8, "tp": 2, "pp": 4, "ep": 16, "layout": "Et*2|(tt|)*5t|tmL"}, 1, "deepep",
         {"megatron_core": "2026-05-25", "transformer_engine": "2.15"},  # be2b2cd70d; its uv.lock's TE 2.15.0
         46128394240, 33395759104, 37005148160),
        ("GB200 TP2 PP2 EP8, TE loss", "deepseekv3_proxy_flex_tp2pp2emp16etp1cp1_gb_200_release", "gb200",
         {"dp": 8, "tp": 2, "pp": 2, "ep": 8, "layout": "Et*7|t*7mL"}, 4, "hybridep",
         {"megatron_core": "2026-04-16", "transformer_engine": "2.14"},  # f098fe8482; its uv.lock's TE 2.14.0
         100344504320, 58533773312, 85005172736),
    )  # fmt: skip
    rows += [
        MeasuredPeak(
            f"Megatron DeepSeek-V3 proxy {label}",
            f"{MEGATRON_TESTS}/mixtral/{case}/golden_values_dev_dgx_{gpu}.json",
            _dsv3_proxy_run(gpu, par, mbs, release, dispatcher, "te"),
            stage=par["pp"] - 1,
            measured_gib=peak / GIB,
            after_step_bytes=after_step,
            first_iteration_bytes=first,
            assumptions=(
                "dp 8, as its _sm twin (the node count is not published)",
                "routing balanced (the run's own imbalance is not published)",
                "--cross-entropy-fusion-impl te, as its flags said when it was recorded",
            ),
        )
        for label, case, gpu, par, mbs, dispatcher, release, peak, after_step, first in full
    ]
    return rows


# torchtitan 9dec370 (the December 2024 file's runs) compiles the blocks, not the loss: train.py leaves
# `torch.compile(loss_fn)` commented out ("compiling loss function causes CUDA errors").
COMPILED_9DEC370: dict[str, Any] = {"torch_compile": True, "compile_loss": False}
# The December 2024 runs' torch, a nightly of 2.6 (torch 1963fc8): FSDP2 kept the root gathered after its
# forward (`releases.CHANGES["fsdp2_root_reshards"]`, from PyTorch 2.8)
TORCH_DEC2024: dict[str, Any] = {"pytorch": "2.6"}


# Float8 as the December 2024 runs ran it (torchtitan 9dec370 torchtitan/float8.py `Float8Handler`, torchao eab345c):
# tensorwise dynamic scaling, the only recipe of that code
FLOAT8: dict[str, Any] = {"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"}
# 9dec370 train_configs/llama3_405b.toml [float8]: the all-gather in float8 and the scale precompute on
FLOAT8_405B: dict[str, Any] = {**FLOAT8, "fp8_fsdp_all_gather": True, "fp8_precompute_scale": True}
FLOAT8_9DEC370 = "Float8 with FSDP's bf16 all-gather (9dec370 config_manager.py's default; the file names no flag)"
FLOAT8_405B_SAID = "Float8 with FSDP's float8 all-gather and scale precompute (9dec370 train_configs/llama3_405b.toml)"
# torchao eab345c float8_linear.py `manual_float8_matmul_with_args_in_float8.forward` saves the float8 input and
# weight copies (`ctx.save_for_backward(input_fp8, weight_fp8_t)`; 2ec9bc15d, 2025-01-13, saves the bf16 ones);
# inside a checkpointed block they are recomputed in its backward and freed linear by linear
FLOAT8_CAST_COPIES = (
    "Float8Linear's float8 input and weight copies (torchao eab345c) not priced: recomputed in the block's "
    "backward, at its end only the last linear's (wq: 16 MiB at 8B, 32 MiB at 405B TP8)"
)


def _torchtitan_rows() -> list[MeasuredPeak]:
    """Tables 1 and 3: each technique's row (eager; torch.compile; torch.compile and Float8)."""
    rows = []
    for gpus, by_technique in ((8, (82.4, 77.0, 76.8)), (128, (67.0, 62.0, 61.8))):
        for technique, reserved in zip(("", " compiled", " compiled Float8"), by_technique, strict=True):
            raw = torchtitan_llama31_8b(gpus, TITAN_H100_96GB)
            raw["framework_release"] = dict(TORCH_DEC2024)
            if technique:
                raw["timing"] |= COMPILED_9DEC370
            if "Float8" in technique:
                raw["timing"] |= FLOAT8
            rows.append(
                MeasuredPeak(
                    f"torchtitan Llama 3.1 8B FSDP {gpus}{technique} (reserved)",
                    f"{TORCHTITAN}, Tables 1 and 3",
                    raw,
                    stage=0,
                    measured_gib=reserved,
                    allocated=False,
                    assumptions=(
                        *((FLOAT8_9DEC370, FLOAT8_CAST_COPIES) if "Float8" in technique else ()),
                        "9dec370's FSDP units (timing.fsdp_units root, bench/_public.py BEFORE_V022)",
                    ),
                )
            )
    return rows


def _torchtitan_scale_rows() -> list[MeasuredPeak]:
    """Tables 2, 4, 5 and 6 (torch.compile of the blocks and Float8; full checkpointing; TP with sequence
    parallelism; PP's micro-batches default to the PP degree; the largest rank). The 405B runs' Float8 is
    9dec370 train_configs/llama3_405b.toml's [float8]: enable_float8_linear, enable_fsdp_float8_all_gather and
    precompute_float8_dynamic_scale_for_fsdp all true, so FSDP gathers the blocks' linear weights at a byte
    (under PP they stay gathered through the step). The 8B and 70B tomls leave Float8 off: the tables turn it
    on (`--float8.enable_float8_linear`) and name no other flag, so the all-gather is 9dec370 config_manager.py's
    default, off (a `store_true` flag)."""
    sp = {"tp": 8, "sequence_parallel": True}
    cases = [
        (f"8B FSDP{dp} CP{cp} s{seq}", LLAMA31_8B, {"dp": dp, "cp": cp}, seq, 1, 1, gib, "Table 2")
        for dp, cp, seq, gib in ((8, 1, 32768, 83.9), (4, 2, 65536, 84.2), (2, 4, 131072, 84.0), (1, 8, 262144, 84.5))
    ]
    cases.append(("70B FSDP32 TP8", LLAMA31_70B, {"dp": 32, **sp}, 8192, 16, 1, 71.9, "Table 4"))
    for schedule, vpp, gib in (("1f1b", 1, 82.5), ("interleaved", 2, 72.7)):
        par = {"dp": 8, "pp": 8, "vpp": vpp, "schedule": schedule, **sp}
        cases.append((f"405B FSDP8 TP8 PP8 {schedule}", LLAMA3_405B, par, 8192, 32, 8, gib, "Table 5"))
    for dp, cp, seq, gib in ((8, 1, 32768, 75.3), (4, 2, 65536, 75.9), (2, 4, 131072, 77.1), (1, 8, 262144, 84.9)):
        par = {"dp": dp, "cp": cp, "pp": 8, **sp}
        cases.append((f"405B FSDP{dp} CP{cp} TP8 PP8 s{seq}", LLAMA3_405B, par, seq, 8, 8, gib, "Table 6"))
    return [
        MeasuredPeak(
            f"torchtitan {name} (reserved)",
            f"{TORCHTITAN}, {table}",
            {
                **torchtitan_run(name, spec, par, seq, batch // micro_batches, micro_batches, "full", TITAN_H100_96GB),
                # 9dec370 predates 83e694105's split units and ff0829c10's enable_gqa (`repeat_kv`: K and V
                # copied out to every query head, what the CP rows' ring gathers): BEFORE_V022
                "timing": {
                    **BEFORE_V022,
                    **COMPILED_9DEC370,
                    "fsdp_units": "root",
                    **(FLOAT8_405B if spec is LLAMA3_405B else FLOAT8),
                },
                "framework_release": dict(TORCH_DEC2024),
            },
            stage=None,
            measured_gib=gib,
            allocated=False,
            assumptions=(
                FLOAT8_405B_SAID if spec is LLAMA3_405B else FLOAT8_9DEC370,
                FLOAT8_CAST_COPIES,
                "async TP's symmetric workspace is outside the allocator: in ppb's fit, not its reserved figure",
            ),
        )
        for name, spec, par, seq, batch, micro_batches, gib, table in cases
    ]


# pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (torchtitan e7c0cae):
# "Memory(GiB)" sampled at iteration 100, taken as train.py's figure, `max_reserved_gib`.
TRAINY = "pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md"


def _torchtitan_h200_rows() -> list[MeasuredPeak]:
    """Trainy's Llama 3.1 8B on 4 and 8 nodes of 8 H200 (141 GB): llama3_8b.toml at e7c0cae (FSDP over
    all, per-op checkpointing, sequence 8192) with local batch 2, torch.compile and Float8."""
    op = {"mode": "selective", "option": "op"}
    return [
        MeasuredPeak(
            f"torchtitan 8B FSDP{8 * nodes} H200 (reserved)",
            TRAINY,
            {
                **torchtitan_run(f"trainy-8b-{nodes}", LLAMA31_8B, {"dp": 8 * nodes}, 8192, 2, 1, op, H200),
                # the file's command line: enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp
                "timing": {
                    "fsdp_units": "root",  # e7c0cae predates 83e694105's split units
                    "repeat_kv": True,  # and ff0829c10's enable_gqa (model.py `repeat_kv`)
                    "sdpa_backend": "flash",  # and 6a3a9da95's cuDNN attention first
                    "torch_compile": True,
                    "matmul_dtype": "fp8",
                    "fp8_recipe": "tensorwise",
                    "fp8_fsdp_all_gather": True,
                    "fp8_precompute_scale": True,
                },
                # the file's torch, 2.8.0a0+5228986c39 (NGC 25.05, built 2025-05-29), predates pytorch#154704
                # and #155319 (June 2025): its FSDP2 root rule is 2.7's
                "framework_release": {"pytorch": "2.7"},
            },
            stage=0,
            measured_gib=gib,
            allocated=False,
            assumptions=(
                "FSDP's float8 all-gather: the blocks' linears gathered at a byte; Float8Linear's saved inputs "
                "stay BF16 (force_recompute_fp8_weight_in_bwd's recast not modelled)",
                "e7c0cae's root unit (embedding, norm, output) kept gathered after the forward: the file's torch "
                "2.8.0a0 of 2025-05-29 predates pytorch#154704/#155319, priced as PyTorch 2.7",
                "the reserved peak taken for the file's figure",
            ),
        )
        for nodes, gib in ((4, 47.96), (8, 46.97))
    ]


# pytorch/ao's float8 training README: torchtitan's Llama 3.1 8B on 8 GPUs, FSDP over all of them, local batch
# 1 of 8192, per-op SAC (llama3_8b.toml), compiled (`--training.compile`), 100 steps. "Peak Memory (GB)" is
# benchmarks/float8/training/parse_torchtitan_logs.py's largest `memory: X GiB` of the log: train.py's
# `max_reserved_gib`, GiB despite the header.
TORCHAO_H100 = "pytorch/ao 8c81863ba torchao/float8/README.md (torch 2.7.0a0+gitb98af95, torchtitan of 2025-03-12)"
TORCHAO_B200 = (
    "pytorch/ao d8bb51f63 torchao/prototype/mx_formats/README.md (torch 2.9.0.dev20250815, torchtitan 6fc499f6)"
)
# the README's tensorwise flags (8c81863ba float8_training_benchmark.sh; d8bb51f63 llama3.sh without the last)
TENSORWISE_GATHERED: dict[str, Any] = {
    "matmul_dtype": "fp8",
    "fp8_recipe": "tensorwise",
    "fp8_fsdp_all_gather": True,
    "fp8_precompute_scale": True,
}


def _torchao_rows() -> list[MeasuredPeak]:
    """The H100 table (torchtitan of March 2025: 9dec370's root units and eager loss, fused AdamW from
    6e4988550, PyTorch 2.7 keeping the root gathered) and the B200 table (6fc499f6: split units from
    83e694105, the loss compiled with the blocks from bbb1b616e, cuDNN attention on B200 from 3b85aa31f,
    nn.RMSNorm from 3b39d7ab0). The rowwise rows are left out: ppb has no rowwise-scaled recipe."""
    op = {"mode": "selective", "option": "op"}
    rows = []
    cases = (
        ("H100", {"name": "h100-80gb", "reserved_mb": 0}, TORCHAO_H100, "2.7",
         {"torch_compile": True, "compile_loss": False},
         (("bf16", {}, 47.65), ("tensorwise", TENSORWISE_GATHERED, 47.77))),
        ("B200", {"name": "b200", "reserved_mb": 0}, TORCHAO_B200, "2.9",
         {"torch_compile": True, "fsdp_units": "split", "norm_type": "nn_rmsnorm", "sdpa_backend": "cudnn"},
         (("bf16", {}, 33.71), ("tensorwise", TENSORWISE_GATHERED, 33.38))),
    )  # fmt: skip
    for gpu, device, source, torch, timing, measured in cases:
        for label, recipe, gib in measured:
            raw = torchtitan_run(
                f"torchao-llama3-8b-{gpu.lower()}-{label}", LLAMA31_8B, {"dp": 8}, 8192, 1, 1, op, device
            )
            raw["timing"] |= timing | recipe
            raw["framework_release"] = {"pytorch": torch}
            rows.append(
                MeasuredPeak(
                    f"torchao Llama 3.1 8B FSDP8 {gpu} {label} (reserved)",
                    source,
                    raw,
                    stage=0,
                    measured_gib=gib,
                    allocated=False,
                    assumptions=(
                        "Llama 3.1 8B's shapes for the README's Llama3-8b (the same layers; llama3_8b.toml)",
                        "the largest `memory:` of 100 steps, train.py's max_reserved_gib",
                        *(("FSDP's Float8 all-gather and scale precompute on (the README's flags)",) if recipe else ()),
                    ),
                )
            )
    return rows


def measured_peaks() -> list[MeasuredPeak]:
    return [
        *_megatron_rows(),
        *_megatron_small_rows(),
        *_megatron_loss_fusion_rows(),
        *_megatron_moe_rows(),
        *_megatron_moe_layout_rows(),
        *_megatron_release_rows(),
        *_mixtral_release_rows(),
        *_dsv3_proxy_rows(),
        *_torchtitan_rows(),
        *_torchtitan_scale_rows(),
        *_torchtitan_h200_rows(),
        *_torchao_rows(),
    ]


def config(row: MeasuredPeak) -> RunConfig:
    return run_config(row.raw, row.name)


def predicted_gib(row: MeasuredPeak) -> tuple[float, str]:
    """ppb's peak of the measured stage (or the largest stage's), in GiB, and the moment that sets it; for
    an allocated measurement what the allocator counts (ppb_core.memory.allocated: under Megatron's TE CUDA
    graphs the capture, or the later iterations without the graphed activations, shown as `allocated`; never
    the flex dispatcher's buffers)."""
    run = config(row)
    memory, layer_walk = MemoryModel(run), walk(run)
    peaks = run_stage_peaks(run, memory, layer_walk)
    peak = max(peaks, key=lambda p: p.peak_bytes) if row.stage is None else peaks[row.stage]
    counted = allocated_peak_bytes(memory, layer_walk, peak) if row.allocated else None
    if counted is not None:
        return counted / GIB, "allocated" if run.timing.cuda_graph_impl == "transformer_engine" else peak.moment
    return peak.peak_bytes / GIB, peak.moment


def _uncounted_gib(run: RunConfig, stage: int) -> float:
    """What the stage's device holds beyond the allocator's counters (`uncounted_bytes`), in GiB; built only for
    the flex dispatcher's backends, whose buffers they are (the sweep prices hundreds of rows)."""
    if run.timing.moe_dispatcher not in ("hybridep", "deepep"):
        return 0.0
    return uncounted_bytes(MemoryModel(run), walk(run), stage) / GIB


def reserved_gib(row: MeasuredPeak) -> ReservedPools | None:
    """For a reserved torchtitan FSDP2 row, ppb's reserved estimate of the stage the measurement is read from:
    its caching-allocator pools stream by stream (`ppb_core.memory.reserved`), None for other rows. Where the
    figure is the largest over the ranks (`stage` None: the December 2024 file's footnote 1, "We take the maximum
    across all GPUs"), the stage whose pools reserve the most, which need not be the stage of the largest
    allocated peak."""
    run = config(row)
    if row.allocated:
        return None
    memory, layer_walk = MemoryModel(run), walk(run)
    peaks = run_stage_peaks(run, memory, layer_walk)
    if row.stage is not None:
        return reserved_pools(memory, layer_walk, peaks[row.stage])
    every = [reserved_pools(memory, layer_walk, peak) for peak in peaks]
    return max((pools for pools in every if pools is not None), key=lambda pools: pools.total_bytes, default=None)


def predicted_after_step_gib(row: MeasuredPeak) -> float:
    """ppb's memory of the measured stage at the optimizer step (its `optimizer` moment), in GiB."""
    assert row.stage is not None
    run = config(row)
    return run_stage_peaks(run)[row.stage].moments["optimizer"] / GIB - _uncounted_gib(run, row.stage)


def predicted_first_iteration_gib(row: MeasuredPeak) -> float:
    """ppb's peak of the measured stage before the first optimizer step allocates Adam's two fp32
    moments (torch.optim.Adam and Transformer Engine's FusedAdam create a parameter's state at its
    first step; Megatron's optimizers keep the fp32 master copy from their construction), in GiB. Where
    they exist before it (`training.optimizer_states_at_start`: Megatron-FSDP's fsdp_dtensor load makes
    them, ppb_core.balance.megatron_import `_states_at_load`), the steady peak's moments hold."""
    assert row.stage is not None
    run = config(row)
    memory = MemoryModel(run)
    held = [layer for layer in walk(run) if layer.stage == row.stage]
    moments = 0.0
    if not run.training.optimizer_states_at_start:
        moments = 8 * sum(memory.static_breakdown(layer).optimizer_states for layer in held)
    peak = run_stage_peaks(run, memory)[row.stage]
    # the first iteration's first-call moment (`StagePeak.first_loss`) is already without them
    before_step = [
        bytes_ - (0.0 if name == "first_loss" else moments)
        for name, bytes_ in peak.moments.items()
        if name != "optimizer"
    ]
    return max(*before_step, peak.moments["optimizer"]) / GIB - _uncounted_gib(run, row.stage)


def _at_share(row: MeasuredPeak, share: float | str) -> RunConfig:
    """The row's run with the busiest expert-parallel rank receiving *share* times its fair share
    (`bound`: the most the run's routing settings allow), where its routing is dropless."""
    raw = copy.deepcopy(row.raw)
    moe = raw["training"].setdefault("moe", {})
    if moe.get("dropless", True) and "capacity_factor" not in moe:
        moe["dropless_imbalance"] = share
    return run_config(raw, row.name)


def routing_bound(row: MeasuredPeak) -> float | None:
    """The most one expert-parallel rank can receive over its fair share under the row's own routing
    settings (`dropless_imbalance: bound`, `RunConfig.routed_share`: the capacity factor where the run
    drops tokens; dropless, only the routing itself bounds it), or None for a dense run."""
    run = config(row)
    if not any(model.spec.is_moe for model in run.models):
        return None
    return _at_share(row, "bound").routed_share


def predicted_at_share_gib(row: MeasuredPeak, share: float | str) -> float:
    """ppb's peak of the measured stage with the busiest rank receiving *share* times its fair share."""
    assert row.stage is not None
    run = _at_share(row, share)
    return run_stage_peaks(run)[row.stage].peak_bytes / GIB - _uncounted_gib(run, row.stage)


def logged_experts(row: MeasuredPeak) -> range | None:
    """The experts of the rank whose peak a Megatron row's golden value is, or None for a dense run. The metric is
    written by the tensorboard writer, which only rank world - 1 holds (megatron/training/global_vars.py
    `_set_tensorboard_writer`; training.py `training_log` writes `allocated_bytes.all.peak` unreduced, at d98e8a64 and
    at every measuring commit of these rows). Megatron's ranks are mixed-radix numbers over the parallel sizes
    (parallel_state.py `RankGenerator`, for the dense and the expert layout alike), so world - 1 is the last of
    every dimension, whatever the order: the last pipeline stage and the last expert-parallel rank, whose experts
    are the last num_experts/ep (moe_layer.py: local expert i is ep_rank · num_local_experts + i)."""
    run = config(row)
    spec = run.models[0].spec
    if not spec.is_moe:
        return None
    local = spec.num_experts // run.parallel.ep
    return range(spec.num_experts - local, spec.num_experts)


def routing_after_first_gib(row: MeasuredPeak) -> tuple[float | None, float | None] | None:
    """ppb's error at iteration 1 (before Adam's moments exist) and how much more the measured peak rose after it
    than ppb's, in GiB; None without a first-iteration value. The first needs iteration 1 to be the process's first
    forward and backward (not after a --finetune load: the counter is never reset, no reset_peak_memory_stats in
    megatron/ at d98e8a64); the second needs the last value to be of that same launch (`one_launch`; a release
    run's last window loaded a checkpoint). After the first step nothing persistent is added (the after-step
    memory of these files is flat from iteration 1), so the second is what the later iterations' transients
    gained: the routing, as the router trains."""
    if row.first_iteration_bytes is None:
        return None
    first_error = None if row.trained_router else predicted_first_iteration_gib(row) - row.first_iteration_bytes / GIB
    if not row.one_launch or first_error is None:
        return first_error, None
    predicted, _ = predicted_gib(row)
    rise = row.measured_gib - row.first_iteration_bytes / GIB
    return first_error, rise - (predicted - predicted_first_iteration_gib(row))


def main() -> int:
    print(f"machine: {machine()}")
    print(f"{'run':44s} {'stage':>5s} {'measured':>9s} {'ppb':>7s} {'error':>7s}  moment")
    errors = []
    for row in measured_peaks():
        predicted, moment = predicted_gib(row)
        error = predicted / row.measured_gib - 1
        if row.allocated:
            errors.append(abs(error))
        mark = "" if row.allocated else "  (reserved: a bound, not scored)"
        stage = "max" if row.stage is None else row.stage
        print(f"{row.name:44s} {stage:>5} {row.measured_gib:9.2f} {predicted:7.2f} {error:+7.1%}  {moment}{mark}")
        print(f"    {row.source}; {', '.join(row.assumptions)}")
    print(f"largest absolute error over {len(errors)} allocated peaks: {max(errors):.1%}")
    print()
    print("reserved rows against ppb's reserved estimate: the caching allocator's pools stream by stream")
    print("(ppb_core.memory.reserved: the compute stream's high-water mark with the eager loss's free hole, the")
    print("all-gather copy-in stream's two outputs, the reduce-scatter stream's sharded gradients):")
    print(f"{'run':44s} {'measured':>9s} {'ppb':>7s} {'error':>7s}  (allocated + hole + copy-in + gradients GiB)")
    reserved_errors = []
    for row in measured_peaks():
        pools = reserved_gib(row)
        if pools is None:
            continue
        estimate = pools.total_bytes / GIB
        error = estimate / row.measured_gib - 1
        reserved_errors.append(error)
        parts = (pools.compute_bytes - pools.loss_hole_bytes, pools.loss_hole_bytes, pools.copy_in_bytes,
                 pools.reduce_scatter_bytes)  # fmt: skip
        shown = " + ".join(f"{part / GIB:.2f}" for part in parts)
        print(f"{row.name:44s} {row.measured_gib:9.2f} {estimate:7.2f} {error:+7.1%}  ({shown})")
    mean = sum(abs(e) for e in reserved_errors) / len(reserved_errors)
    signed = sum(reserved_errors) / len(reserved_errors)
    largest = max(reserved_errors, key=abs)
    print(
        f"{len(reserved_errors)} reserved rows: mean absolute error {mean:.1%} (signed {signed:+.1%}), "
        f"largest {largest:+.1%}"
    )
    print()
    print("after the step (mem-allocated-bytes, torch.cuda.memory_allocated() after the optimizer step) against")
    print("ppb's optimizer moment of the same stage:")
    for row in measured_peaks():
        if row.after_step_bytes is None:
            continue
        measured, predicted = row.after_step_bytes / GIB, predicted_after_step_gib(row)
        print(f"{row.name:44s} {row.stage:>5} {measured:9.3f} {predicted:7.3f} {predicted / measured - 1:+7.1%}")
    print()
    print("the first iteration (mem-max-allocated-bytes at iteration 1, before the first step allocates Adam's")
    print("moments) against ppb's peak without them:")
    for row in measured_peaks():
        if row.first_iteration_bytes is None:
            continue
        measured, predicted = row.first_iteration_bytes / GIB, predicted_first_iteration_gib(row)
        print(f"{row.name:44s} {row.stage:>5} {measured:9.3f} {predicted:7.3f} {predicted / measured - 1:+7.1%}")
    print()
    print("MoE rows between balanced routing and the most one rank can receive under the run's routing settings")
    print("(the bound: the capacity factor where tokens are dropped; dropless, ep·min(k, experts/ep)/k):")
    print("The logged rank is world - 1: the last stage and the last expert-parallel rank (`logged_experts`).")
    print("'it. 1': ppb's error at iteration 1 (GiB, before Adam's moments); 'later': how much more the measured")
    print("peak rose after iteration 1 than ppb's moments, GiB (the routing as it moves); 'load' where the value")
    print("may follow a checkpoint load (--finetune, or a release run's resumed window); router: 'trained' where the")
    print("run loads trained weights, 'init' where it starts from an initialisation.")
    print(
        f"{'run':44s} {'stage':>5} {'measured':>9s} {'balanced':>9s} {'bound':>6s} {'at bound':>9s}  within"
        f"  {'experts':>7s} {'it. 1':>6s} {'later':>6s}  router"
    )
    for row in measured_peaks():
        bound = routing_bound(row) if row.allocated and row.stage is not None else None
        if bound is None:
            continue
        balanced, worst = predicted_at_share_gib(row, 1.0), predicted_at_share_gib(row, "bound")
        within = "yes" if balanced <= row.measured_gib <= worst else "no"
        experts = logged_experts(row)
        shown = "–" if experts is None else f"{experts[0]}-{experts[-1]}" if len(experts) > 1 else f"{experts[0]}"
        split = routing_after_first_gib(row)
        first, later = ("     –", "     –") if split is None else split
        first = "  load" if row.trained_router else first if isinstance(first, str) else f"{first:+6.2f}"
        later = "  load" if later is None else later if isinstance(later, str) else f"{later:+6.2f}"
        router = "trained" if row.trained_router else "init"
        print(
            f"{row.name:44s} {row.stage:>5} {row.measured_gib:9.2f} {balanced:9.2f} {bound:6.2f} {worst:9.2f}"
            f"  {within:6s}  {shown:>7s} {first} {later}  {router}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
