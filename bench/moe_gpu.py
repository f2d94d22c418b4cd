"""A MoE layer's GPU work as ppb prices it, op group by op group, beside the runs that bound it.

    python bench/moe_gpu.py [ROW ...]

ROW: a substring of a MoE row's name in bench/public_runs.py (default: NeMo's two Qwen3 30B-A3B rows).
For each row, one MoE layer and micro-batch at the state the iteration prices it (`configured_states`):

- its forward + backward GPU milliseconds by group: attention, dense GEMMs, the local experts' GEMMs
  with their FP8 casts, the all-to-alls (whole, before any overlap), the permutation with its sorts
  and the unpermutation, the other memory-bound ops;
- its local experts' GEMMs priced two ways: pooled, the experts' tiles sharing the SMs in waves as
  TransformerEngine's four compute streams let them (`multi_stream_cublas_gemm` puts expert i on
  stream i % 4; ppb's price), and expert by expert, one kernel after another, each with its own waves:
  what rides on the streams running concurrently (each without the kernel's fixed time, which ppb
  adds per stream either way);
- for a row with a token-dropping run of the same model and GPUs in NeMo 25.09's table (Megatron-Bridge
  docs/performance-summary.md at 5776a6d90, "25.09 NeMo Container"), ppb's GPU work for the whole
  iteration at that run's settings (its own micro-batch size and virtual stages: the H100 run's MBS 2
  and VP 24, where the 25.11 row runs its preset's 1 and 12; capacity factor 1.0, which NeMo 2's
  `MegatronTokenDropCallback` sets with padding to capacity; the host's launches free; no all-to-all
  overlap), in FP8 with
  current scaling and in BF16 (the table states no precision for these rows; NeMo's recommended
  configs at 8cfedd7203 list them in bf16), against the run's measured seconds: a bound on the GPU
  work, exact only if nothing else took time (the H100 run is not CUDA-graphed, so its host can bind).

Last, a measured split of a Qwen3 30B-A3B step's GPU time (`HYBRIDEP_H100`): Megatron-Bridge's docs
(skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md at 067f987df, "HybridEP production-shape validation", a 2026-07-25
run) give, for 16 H100 in BF16 at TP 1, PP 1, EP 16, MBS 1, GBS 1024, forced balancing, HybridEP and
TE graphs of the router and its preprocessing, with the expert-parallel overlap off: a 24.714 s step,
and from a rank-0 Nsight Systems profile a GPU-active interval union of 22.821 s, of which
communication concurrent with GEMMs or attention 9.079 ms, 0.11% of the communication time: so
communication ≈ 8.25 s and computation ≈ 14.58 s. Beside it ppb's price of that run (the recipe
`qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config`, perf_recipes/qwen/h100/qwen3_moe.py and
recipes/qwen/h100/qwen3_moe.py at 067f987df: `timing.moe_dispatcher` hybridep, a token sent once to each
rank its experts sit on and once to each remote node, HybridEP's `moe_hybridep_num_sms` 32), its GPU work
alone split the same way: the layers' all-to-alls against everything else, and again with ppb's
permutations on the communication side (the recipe leaves `moe_permute_fusion_into_hybridep` at Megatron's
default, off: HybridEP's own permute and unpermute kernels run inside `dispatch_with_permute` and
`combine_with_unpermute`, within its dispatch and combine NVTX ranges).

And a looser one on Blackwell (`GB200_STEP_S`): the same card (examples/model_verification_cards/
qwen3-30b-a3b/card.yaml at 067f987df) measures `qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config` on 8
GB200 at 6.501 s a step (MXFP8, EP 8, MBS 4, GBS 512, HybridEP, full-iteration CUDA graphs, the EP
overlap with delayed weight gradients: perf_recipes/qwen/gb200/qwen3_moe.py and common.py
`_enable_hybridep_full_iteration_mxfp8`); ppb prices those settings, but not the run's FP8 attention,
TE's op fuser, its CuTe DSL fused grouped MLP (`NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`) or the paged stash,
each of which makes the run faster than ppb's kernels: ppb's shortfall is at least what it shows.
"""

from __future__ import annotations

import copy
import sys
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import machine  # noqa: E402
from _public import run_config  # noqa: E402
from public_runs import PublicRun, config, public_runs  # noqa: E402

from ppb_core.memory import MemoryModel  # noqa: E402
from ppb_core.timing.flops import Op  # noqa: E402
from ppb_core.timing.iteration import configured_states, run_iteration  # noqa: E402
from ppb_core.timing.pricer import TimeModel  # noqa: E402

DEFAULT_ROWS = ("NeMo Qwen3 30B-A3B FP8 PP2 EP8 (16 H100)", "NeMo Qwen3 30B-A3B MXFP8 EP8 (8 B200)")
# Op groups by the op's name in the MoE layer's table (ppb_core.timing.flops `moe_ops`, attention ops).
GROUPS = (
    ("attention", ("flash_scores", "flash_context")),
    ("dense GEMMs", ("qk_proj", "v_proj", "qkv_proj", "out_proj", "router")),
    ("expert GEMMs + FP8 casts", ("experts_in", "experts_out")),
    ("all-to-alls (whole)", ("dispatch", "combine")),
    ("permute, sorts, unpermute", ("permute", "unpermute")),
)
OTHER = "other memory-bound"
SEQUENCE = 4096  # the Qwen3 runs' sequence (bench/_nemo.py `_qwen3_run`)


@dataclass(frozen=True)
class TokenDropRun:
    """A NeMo 25.09 token-dropping run of a 25.11 row's model and GPUs: its published tokens/s per GPU, and
    its micro-batch size and virtual stages where the 25.11 row's differ (None: the row's)."""

    tokens_per_s: float
    gpus: int
    global_batch: int
    micro_batch_size: int | None = None
    vp: int | None = None

    @property
    def seconds(self) -> float:
        return self.global_batch * SEQUENCE / (self.tokens_per_s * self.gpus)


# The 25.09 table's Qwen3_30B_a3B (tokendrop) rows on DGX-H100 (16 GPUs, GBS 512, MBS 2, PP 2, VP 24, EP 8;
# the 25.11 row runs its preset's MBS 1 and VP 12, bench/_nemo.py) and DGX-B200 (8 GPUs, GBS 512, MBS 1, EP 8).
TOKEN_DROP = {
    "NeMo Qwen3 30B-A3B FP8 PP2 EP8 (16 H100)": TokenDropRun(10494.0, 16, 512, micro_batch_size=2, vp=24),
    "NeMo Qwen3 30B-A3B MXFP8 EP8 (8 B200)": TokenDropRun(18066.0, 8, 512),
}


@dataclass(frozen=True)
class ProfiledStep:
    """A step's measured GPU time split into communication and computation (module docstring)."""

    step_s: float
    gpu_active_s: float
    comm_beside_compute_s: float  # communication concurrent with GEMMs or attention
    comm_beside_compute_share: float  # that over the communication time

    @property
    def comm_s(self) -> float:
        return self.comm_beside_compute_s / self.comm_beside_compute_share

    @property
    def compute_s(self) -> float:
        return self.gpu_active_s - self.comm_s + self.comm_beside_compute_s


HYBRIDEP_H100 = ProfiledStep(24.7138, 22.821, 9.079e-3, 0.0011)
# the same run with plain EP overlap on (--overlap-moe-expert-parallel-comm), its independent validation over
# iterations 41-50 (skills/nemo-mbridge-perf-moe-comm-overlap/SKILL.md at 067f987df)
HYBRIDEP_H100_OVERLAP_S = 20.9920
GB200_STEP_S = 6.50112  # the card's last_10_steps_step_time_ms_avg, 6501.120
# recipes/qwen/h100/qwen3_moe.py `moe_hybridep_num_sms = 32`, and scripts/performance/utils/overrides.py forces 32
# on every hybridep recipe (067f987df); Megatron routes it to moe_flex_dispatcher_num_sms
HYBRIDEP_RECIPE_SMS = 32


def gb200_raw(rows: dict[str, PublicRun]) -> dict:
    """The GB200 card run's config as ppb can state it (module docstring), from the B200 Qwen3 30B-A3B row:
    8 GB200, EP 8, MBS 4, 512 / (4 · 8) = 16 micro-batches, MXFP8, HybridEP on 32 SMs (`_benchmark_common`),
    the EP overlap with delayed weight gradients, full-iteration CUDA graphs (no host in the step)."""
    raw = copy.deepcopy(rows["NeMo Qwen3 30B-A3B MXFP8 EP8 (8 B200)"].raw)
    raw["name"] = "Qwen3 30B-A3B MXFP8 EP8 HybridEP (8 GB200)"
    raw["device"] = {"name": "gb200"}
    raw["parallel"]["overlap_moe_expert_parallel_comm"] = True
    raw["training"]["micro_batch_size"] = 4
    raw["training"]["micro_batches"] = 512 // (4 * 8)
    timing = raw["timing"]
    timing["delay_wgrad_compute"] = True
    timing["moe_dispatcher"] = "hybridep"
    timing["moe_flex_dispatcher_num_sms"] = HYBRIDEP_RECIPE_SMS
    timing["cuda_graph_impl"] = "full_iteration"
    timing.pop("cuda_graph_modules", None)
    return raw


def hybridep_h100_raw(rows: dict[str, PublicRun], gpu_only: bool) -> dict:
    """The profiled run's config (module docstring), from the H100 Qwen3 30B-A3B row's model and timing
    settings: 16 H100 (two DGX nodes), DP 16 = EP 16, MBS 1, 64 micro-batches, BF16, no overlap of the
    expert-parallel communication, TE graphs of the router and its preprocessing."""
    raw = copy.deepcopy(rows["NeMo Qwen3 30B-A3B FP8 PP2 EP8 (16 H100)"].raw)
    raw["name"] = "Qwen3 30B-A3B BF16 EP16 HybridEP (16 H100)"
    raw["parallel"] = {"dp": 16, "tp": 1, "pp": 1, "ep": 16, "etp": 1, "sequence_parallel": False, "zero": 1}
    raw["training"]["micro_batch_size"] = 1
    raw["training"]["micro_batches"] = 1024 // 16
    timing = raw["timing"]
    timing["matmul_dtype"] = "bf16"
    timing.pop("fp8_recipe", None)
    timing["fp8_param_gather"] = False
    timing["delay_wgrad_compute"] = False
    timing["overlap_param_gather_with_optimizer_step"] = False
    timing["moe_dispatcher"] = "hybridep"
    timing["moe_flex_dispatcher_num_sms"] = HYBRIDEP_RECIPE_SMS
    timing["cuda_graph_impl"] = "transformer_engine"
    timing["cuda_graph_modules"] = ["moe_router", "moe_preprocess"]
    if gpu_only:
        raw["device"]["host_kernel_us"] = 0.0
    return raw


def hybridep_h100_ppb(rows: dict[str, PublicRun]) -> tuple[float, float, float, float]:
    """(ppb's step with the host, its GPU work alone, that GPU work's all-to-alls, its permutations) for
    the profiled run, seconds an iteration."""
    step = run_iteration(run_config(hybridep_h100_raw(rows, False), "hybridep-h100")).seconds
    run = run_config(hybridep_h100_raw(rows, True), "hybridep-h100-gpu")
    gpu = run_iteration(run).seconds
    times = TimeModel(run)
    ms: dict[str, float] = defaultdict(float)
    for layer, state in configured_states(run, MemoryModel(run)).items():
        for timed in times.breakdown(layer, *state):
            ms[group(timed.name)] += timed.ms
    per_ms = run.training.micro_batches / 1e3
    return step, gpu, ms["all-to-alls (whole)"] * per_ms, ms["permute, sorts, unpermute"] * per_ms


def group(name: str) -> str:
    short = name.rsplit(".", 1)[-1]
    return next((label for label, names in GROUPS if short in names), OTHER)


def moe_layer(run, times: TimeModel):
    """The first MoE layer of the busiest stage and the state the iteration prices it at."""
    states = configured_states(run, MemoryModel(run))
    return next((layer, state) for layer, state in states.items() if getattr(layer.kind, "name", "") == "moe")


def layer_groups(row: PublicRun) -> dict[str, float]:
    """One MoE layer's forward + backward GPU milliseconds per micro-batch, by group."""
    run = config(row)
    times = TimeModel(run)
    layer, state = moe_layer(run, times)
    groups: dict[str, float] = defaultdict(float)
    for timed in times.breakdown(layer, *state):
        groups[group(timed.name)] += timed.ms
    return dict(groups)


def expert_gemms(row: PublicRun) -> list[tuple[str, tuple[float, float, float, int], float, float]]:
    """(op and pass, (m, n, k, experts), pooled ms, expert by expert ms) of the local experts' GEMMs: the
    forward m × k by k × n, the backward's data gradient (m × n by n × k) and weight gradient (k × m by
    m × n), each without the kernel's fixed time."""
    run = config(row)
    times = TimeModel(run)
    layer, _ = moe_layer(run, times)
    kernels = replace(times.kernels, kernel_s=0.0)
    rows = []
    for op in times.ops(layer):
        if op.gemm is None or op.gemm[3] <= 1 or op.sequential:
            continue
        m, k, n, groups, _fused = op.gemm
        for label, shape in (("forward", (m, n, k)), ("dgrad", (m, k, n)), ("wgrad", (k, n, m))):
            pooled = kernels.gemm_compute_s(*shape, groups)
            serial = groups * kernels.gemm_compute_s(*shape)
            rows.append((f"{short_name(op)} {label}", (*shape, groups), pooled * 1e3, serial * 1e3))
    return rows


def short_name(op: Op) -> str:
    return op.name.rsplit(".", 1)[-1]


def token_drop_raw(row: PublicRun, precision: str) -> dict:
    """*row*'s run config at its 25.09 token-dropping run's settings (module docstring), GPU work only."""
    raw = copy.deepcopy(row.raw)
    drop = TOKEN_DROP[row.name]
    if drop.micro_batch_size is not None:
        per_replica = raw["training"]["micro_batch_size"] * raw["training"]["micro_batches"]
        raw["training"]["micro_batch_size"] = drop.micro_batch_size
        raw["training"]["micro_batches"] = per_replica // drop.micro_batch_size
    if drop.vp is not None:
        raw["parallel"]["vpp"] = drop.vp
    raw["device"]["host_kernel_us"] = 0.0
    raw["training"]["moe"].update(capacity_factor=1.0, pad_to_capacity=True)  # MegatronTokenDropCallback's
    raw["parallel"].pop("overlap_moe_expert_parallel_comm", None)
    raw["timing"]["delay_wgrad_compute"] = False
    raw["timing"]["fp8_param_gather"] = False
    if precision == "bf16":
        raw["timing"]["matmul_dtype"] = "bf16"
        raw["timing"].pop("fp8_recipe", None)
    else:
        raw["timing"]["fp8_recipe"] = "tensorwise"
    return raw


def token_drop_seconds(row: PublicRun) -> dict[str, float]:
    """ppb's GPU work an iteration at the token-dropping run's settings, FP8 current scaling and BF16."""
    return {
        precision: run_iteration(run_config(token_drop_raw(row, precision), f"{row.name} {precision}")).seconds
        for precision in ("fp8", "bf16")
    }


def report(row: PublicRun) -> None:
    print(row.name)
    groups = layer_groups(row)
    total = sum(groups.values())
    print(f"  one MoE layer and micro-batch, forward + backward: {total:.3f} ms of GPU work")
    for label, ms in sorted(groups.items(), key=lambda item: -item[1]):
        print(f"    {label:28s} {ms:7.3f} ms {ms / total:6.1%}")
    print("  the local experts' GEMMs (without the kernel's fixed time):")
    pooled_sum = serial_sum = 0.0
    for label, (m, n, k, experts), pooled, serial in expert_gemms(row):
        pooled_sum += pooled
        serial_sum += serial
        print(
            f"    {label:22s} {experts} x {m:.0f}x{n:.0f}x{k:.0f}: pooled {pooled:.3f} ms, "
            f"expert by expert {serial:.3f} ms (x{serial / pooled:.2f})"
        )
    print(f"    all: pooled {pooled_sum:.3f} ms, expert by expert {serial_sum:.3f} ms (+{serial_sum - pooled_sum:.3f})")
    drop = TOKEN_DROP.get(row.name)
    if drop is not None:
        ours = token_drop_seconds(row)
        print(
            f"  NeMo 25.09 token-dropping run, {drop.tokens_per_s:,.0f} tokens/s per GPU: {drop.seconds:.3f} s; "
            f"ppb's GPU work at its settings {ours['fp8']:.3f} s in FP8 (x{drop.seconds / ours['fp8']:.2f}), "
            f"{ours['bf16']:.3f} s in BF16 (x{drop.seconds / ours['bf16']:.2f})"
        )
    print()


def report_profiled(rows: dict[str, PublicRun]) -> None:
    measured = HYBRIDEP_H100
    step, gpu, a2a, permutations = hybridep_h100_ppb(rows)
    print("Qwen3 30B-A3B BF16 EP16 HybridEP, 16 H100, overlap off (Megatron-Bridge docs at 067f987df):")
    print(f"  step: measured {measured.step_s:.3f} s, ppb {step:.3f} s ({step / measured.step_s - 1:+.1%})")
    print(
        f"  GPU work: measured (nsys GPU-active union) {measured.gpu_active_s:.3f} s, ppb {gpu:.3f} s "
        f"(x{measured.gpu_active_s / gpu:.2f})"
    )
    print(
        f"    communication: measured {measured.comm_s:.3f} s, ppb's all-to-alls {a2a:.3f} s "
        f"(x{measured.comm_s / a2a:.2f})"
    )
    print(
        f"    computation: measured {measured.compute_s:.3f} s, ppb {gpu - a2a:.3f} s "
        f"(x{measured.compute_s / (gpu - a2a):.2f})"
    )
    # HybridEP's own permute and unpermute run inside its dispatch and combine calls (unfused, the recipe's)
    rest = gpu - a2a - permutations
    print(
        f"    with ppb's permutations ({permutations:.3f} s) counted as communication, inside HybridEP's calls: "
        f"x{measured.comm_s / (a2a + permutations):.2f} and x{measured.compute_s / rest:.2f}"
    )
    raw = hybridep_h100_raw(rows, False)
    raw["parallel"]["overlap_moe_expert_parallel_comm"] = True
    on = run_iteration(run_config(raw, "hybridep-h100-overlap")).seconds
    print(
        f"  EP overlap on (the same skill's independent validation): measured {HYBRIDEP_H100_OVERLAP_S:.3f} s, "
        f"ppb {on:.3f} s ({on / HYBRIDEP_H100_OVERLAP_S - 1:+.1%}); off/on measured "
        f"x{measured.step_s / HYBRIDEP_H100_OVERLAP_S:.3f}, ppb x{step / on:.3f}"
    )
    print()


def main(argv: list[str]) -> int:
    print(f"machine: {machine()}")
    rows = public_runs()
    for pattern in argv or list(DEFAULT_ROWS):
        matches = [row for row in rows if pattern in row.name]
        if not matches:
            raise SystemExit(f"bench/moe_gpu.py: no row of bench/public_runs.py matches {pattern!r}")
        for row in matches:
            report(row)
    by_name = {row.name: row for row in rows}
    report_profiled(by_name)
    ours = run_iteration(run_config(gb200_raw(by_name), "gb200-card")).seconds
    print("Qwen3 30B-A3B MXFP8 EP8 HybridEP, 8 GB200, full-iteration graphs (the same card):")
    print(f"  step: measured {GB200_STEP_S:.3f} s, ppb {ours:.3f} s ({ours / GB200_STEP_S - 1:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
