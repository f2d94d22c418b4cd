"""Where a published run's predicted seconds go, op class by op class, beside public per-kernel rates.

    python bench/decompose.py [ROW ...]
    python bench/decompose.py --alone ROW ...
    python bench/decompose.py --side ROW ...
    PPB_MEGATRON_LM=DIR python bench/decompose.py --ci FAMILY/CASE@GPU ...

ROW: a substring of a row's name in bench/public_runs.py, its 177B strong-scaling points included
(`strong_scaling_runs`: "strong scaling (96" is the steady state of 576 micro-batches a pipeline;
default: the Megatron GPT 1.7B TP1 PP1 row and Megatron CI's GPT 7B TP4 PP1 H100 row). Each layer at
the state the iteration prices it at (its configured recompute: what it reruns is the class
`recompute (reruns)`); a pipelined row's layer classes are its busiest stage's (the iteration's
`compute` term), the schedule's idle time `bubble`.

For each row: the measured seconds, ours, and ours split into
- GEMMs (every matmul op: its kernels, plus what ppb prices beside them: bias-gradient reductions,
  Megatron's main-gradient accumulation under --no-gradient-accumulation-fusion, and under
  --deterministic-mode PyTorch's NaN fill of TransformerEngine's outputs, as for attention and norms);
- attention (the flash kernels, forward and backward);
- memory-bound ops by kind: norms, activation (bias-GeLU, SwiGLU), residual adds with their bias and
  dropout, rotary embedding, the loss (cross-entropy over the vocabulary), the embedding lookup;
- exposed layer collectives (TP all-reduces, reduce-scatters, all-gathers);
- under Megatron's fine-grained activation offloading, the backwards' waits for their reloads beyond the
  compute they run behind (`ppb_core.timing.offload.reload_wait_s`, which the iteration adds to each layer);
- the iteration's other terms, each its own class: the busiest stage's get_batch broadcasts (and what combined
  1F1B steps save, negative), bubble, p2p, FSDP and data-parallel communication, optimizer, bookkeeping;
each with its achieved rate (TFLOP/s of its FLOPs, or TB/s of its HBM bytes) and its share. The
public per-kernel rates on H100 SXM they compare with are printed under the table (`REFERENCES`).
Then the measured minus ours, and what one class alone would have to take to close it (its seconds
times that factor).

With `--ci`, Megatron CI cases instead, each `family/case@gpu` priced as bench/megatron_ci.py prices it
(its model_config.yaml at d98e8a64 through `ppb import megatron`, its golden values' median seconds),
and under Megatron each layer kind of the busiest stage beside its classes: its GPU work forward and
backward, and the host's launches (what the backward reruns included) in launches of the device's
`host_kernel_us` and in milliseconds, e.g. the EP 8 allgather case's MoE layer, 36.8 / 59.0 launches
on DGX H100 against 0.62 / 0.83 ms of GPU work.

With `--alone ROW ...`, for each matching row the factor that the GEMMs alone, or attention alone, would
need to give the measured seconds: each class with its reruns (the busiest stage's seconds at their
ops' kinds, `kernel_seconds`), and under a pipeline the compute and its bubble scaled together (the
schedule's idle time is the other stages' compute); a factor that is about the same over many rows points
at that class's rate, one that varies from row to row does not (docs/timing-validation.md, torchtitan, session 25).

With `--side ROW ...`, the matching rows side by side, one column each (in the order matched): each
class's seconds, ppb's, the measured and their difference, then between each column and the next what
each grew by per unit of cp (`growth_per_cp`; per row when cp is the same): for rows that differ in cp
alone with the tokens a rank keeps, e.g. torchtitan's Table 2, each class's growth per added ring step
beside the measured growth (docs/timing-validation.md, torchtitan, session 30).

Last, Megatron CI's two GPT 7B cases run on H100 and on A100 (golden values of one commit): the
measured minus ours in seconds on each GPU. A gap that scales with a GPU's speed (a kernel class
running slower than ours) is larger on the A100; a gap of the same seconds on both is time that
does not depend on the GPU's rates. Beside them, the same harness's 12-layer, hidden-512 case with
the 7B TP4 case's parallel and optimizer flags (gpt/gpt3_mcore_te_tp4_pp1_dist_optimizer_overlap_
grad_reduce_param_gather, values of the same commit): a model whose GPU work ppb puts at a few tens
of milliseconds, so its measured seconds are what Megatron's host spends launching its kernels: one of
the cases the catalog's `host_kernel_us` is the median of (bench/host_derive.py; on DGX GB200 the only one).
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import machine  # noqa: E402
from _public import GPT_SMALL, gpt3_7b_run, run_config  # noqa: E402
from public_runs import (  # noqa: E402
    GOLDEN_7B,
    GOLDEN_7B_H100_WITH_A100,
    GoldenTimes,
    PublicRun,
    config,
    public_runs,
    strong_scaling_runs,
)

from ppb_core.config.run import RunConfig  # noqa: E402
from ppb_core.memory import MemoryModel  # noqa: E402
from ppb_core.timing.flops import COMM, Op  # noqa: E402
from ppb_core.timing.iteration import Iteration, configured_states, framework_rules, run_iteration  # noqa: E402
from ppb_core.timing.offload import reload_wait_s  # noqa: E402
from ppb_core.timing.pricer import TimeModel  # noqa: E402

DEFAULT_ROWS = ("Megatron GPT 1.7B", "Megatron CI GPT 7B TP4 PP1 (H100)")
# Memory-bound ops by kind, matched on the op's name (ppb_core.timing.flops op tables).
MEMORY_KINDS = (
    ("norm", ("norm",)),
    ("activation", ("_act",)),
    ("residual, bias, dropout", ("residual", "dropout")),
    ("rotary", ("rope",)),
    ("loss", ("loss",)),
    ("embedding", ("embedding.lookup",)),
)
# The GPU waiting for Megatron's host to launch a layer's kernels (`ppb_core.timing.host`).
HOST_CLASS = "host (GPU waits for launches)"
# What a layer's recompute reruns in its backward (the pricer's `recompute` pass), whatever the op.
RECOMPUTE_CLASS = "recompute (reruns)"
# A backward's wait for its fine-grained offloaded activations' reloads beyond the compute they run
# behind (`ppb_core.timing.offload.reload_wait_s`, which the iteration adds to each layer's backward).
RELOAD_CLASS = "offload reloads (waits)"
# The busiest stage's `compute` beside its layers (`Iteration.compute_parts`): Megatron's get_batch
# broadcasts over TP (`ppb_core.timing.batch`), delayed scaling's amax all-reduces a model chunk and the host's
# launches of them (`ppb_core.timing.fp8_amax`) and, negative, what combined 1F1B steps save.
COMPUTE_PARTS = {
    "batch_broadcast": "get_batch broadcasts",
    "amax_reduction": "FP8 amax reductions",
    "amax_host": "FP8 amax reductions (host launches)",
    "combined_saving": "combined 1F1B steps (saved)",
}

# Public per-kernel rates on an H100 SXM (BF16) for each class.
REFERENCES = (
    (
        "GEMMs",
        "cuBLAS in short loops (XLA's measured sm_90 table, tensorflow third_party/xla/xla/service/gpu/model/"
        "matmul_interpolator_data.h at 372d578b): 2048^3 632, 2x4096x4096x2048 763 TFLOP/s; MAMF 794.5 "
        "(ml-engineering); a 600 W H200 NVL, same die, ~600 at a 4096/16384 layer's shapes (TransformerEngine "
        "docs/examples/gemm_profiling); that layer's GEMMs back to back on an H100 SXM ~655 (TE's getting-started "
        "BF16 and FP8 rows, a97674070: ppb's layer_gemm_share 0.847 of its tiles at MAMF)",
    ),
    (
        "attention",
        "cuDNN, head size 128 (FlashAttention-3 paper, Shah et al. 2024, Fig. 5-6): causal forward 518 (4k) / "
        "529 (8k), backward without the mask 499 / 518 TFLOP/s; at 8k causal 566 forward, 470 backward "
        "(Dao-AILab/flash-attention PR #1893)",
    ),
    (
        "attention, FlashAttention-2",
        "flash-attn 2, head size 128, 16k tokens (the same figures): forward 370, causal 335, backward 322 "
        "TFLOP/s; PyTorch SDPA's flash backend (torchtitan's kernel until cuDNN came first) forward 336 against "
        "flash-attn 2's 358 on one H100 (pytorch/benchmark PR #2443), causal 32k forward 346 / backward 317 on "
        "an H200 locked at 1980 MHz (NVIDIA/cudnn-frontend benchmark_results.csv at de355c7)",
    ),
    ("memory-bound", "HBM3 3.35 TB/s (datasheet); ppb takes 0.8 of it (memory_efficiency, an assumption)"),
)


@dataclass
class Share:
    """One class's seconds over the iteration, with the FLOPs and HBM bytes of its ops."""

    seconds: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0


def op_class(op: Op) -> str:
    """The class an op of ppb's table belongs to."""
    if op.category == COMM:
        return "layer collectives (exposed)"
    if op.gemm is not None:
        return "GEMMs"
    if op.attention is not None:
        return "attention"
    for kind, names in MEMORY_KINDS:
        if any(name in op.name for name in names):
            return f"memory-bound: {kind}"
    return "memory-bound: other"


def decompose(row: PublicRun) -> tuple[dict[str, Share], float]:
    """ppb's seconds of *row* by class (adding up to its iteration), and the iteration's seconds
    (`decompose_run` of its run config)."""
    return decompose_run(config(row), row.name)


def decompose_run(run: RunConfig, name: str) -> tuple[dict[str, Share], float]:
    """ppb's seconds of *run* (called *name*) by class (adding up to its iteration), and the iteration's
    seconds. The classes of the layers are the busiest pipeline stage's (`Iteration.busiest_stage`), as
    the iteration's `compute` term counts them, beside that stage's get_batch broadcasts and, negative,
    what its combined 1F1B steps save (`Iteration.compute_parts`); every other term of the iteration's
    breakdown (the schedule's idle time `bubble`, p2p, communication, optimizer, ...) is its own class.
    Each layer at the state the iteration prices it at (`configured_states`); its recompute's reruns
    are one class (`RECOMPUTE_CLASS`)."""
    iteration = run_iteration(run)
    times = TimeModel(run)
    memory = MemoryModel(run)
    combined = framework_rules(run).combined_1f1b
    m = run.training.micro_batches
    classes: dict[str, Share] = defaultdict(Share)
    for layer, state in configured_states(run, memory).items():
        if layer.stage != iteration.busiest_stage:
            continue
        host = times.host(layer, *state)
        if host.forward + host.backward > 0:
            classes[HOST_CLASS].seconds += (host.forward + host.backward) * m
        offloaded = memory.state_memory(layer, *state).offloaded_bytes
        if offloaded > 0:  # as `run_iteration` prices it: the window is the backward (and forward if combined)
            forward_ms, backward_ms = times.layer_times(layer, *state)
            window = (backward_ms + (forward_ms if combined else 0.0)) / 1e3
            classes[RELOAD_CLASS].seconds += reload_wait_s(offloaded, times.device.host_link_gbs, window) * m
        ops = {op.name: op for op in times.ops(layer)}
        for timed in times.breakdown(layer, *state):
            share = classes[RECOMPUTE_CLASS if timed.phase == "recompute" else op_class(ops[timed.name])]
            share.seconds += timed.ms / 1e3 * m
            share.flops += timed.flops * m
            share.bytes += timed.bytes * m
    layers = sum(share.seconds for share in classes.values())
    parts = iteration.compute_parts
    assert abs(layers - parts["layers"]) <= 1e-9 * iteration.seconds, (name, layers, parts["layers"])
    assert abs(sum(parts.values()) - iteration.breakdown["compute"]) <= 1e-9 * iteration.seconds, name
    for part, name in COMPUTE_PARTS.items():
        if abs(parts[part]) > 1e-12:
            classes[name].seconds += parts[part]
    for term, seconds in iteration.breakdown.items():
        if term != "compute" and abs(seconds) > 1e-12:
            classes[term].seconds += seconds
    total = sum(share.seconds for share in classes.values())
    assert abs(total - iteration.seconds) <= 1e-9 * iteration.seconds, (name, total, iteration.seconds)
    return dict(classes), iteration.seconds


def rate(share: Share) -> str:
    if share.flops and share.seconds:
        return f"{share.flops / share.seconds / 1e12:6.0f} TFLOP/s"
    if share.bytes and share.seconds:
        return f"{share.bytes / share.seconds / 1e12:6.2f} TB/s"
    return ""


def kernel_seconds(run: RunConfig) -> tuple[float, float]:
    """(GEMMs, attention) seconds of *run*'s busiest stage an iteration, each with its reruns (the
    recompute class split by its ops' kinds)."""
    iteration = run_iteration(run)
    times = TimeModel(run)
    m = run.training.micro_batches
    gemms = attention = 0.0
    for layer, state in configured_states(run, MemoryModel(run)).items():
        if layer.stage != iteration.busiest_stage:
            continue
        ops = {op.name: op for op in times.ops(layer)}
        for timed in times.breakdown(layer, *state):
            op = ops.get(timed.name)  # None: a row of no op (the restore copies), memory-bound
            if op is None or op.category == COMM:
                continue
            if op.gemm is not None:
                gemms += timed.ms / 1e3 * m
            elif op.attention is not None:
                attention += timed.ms / 1e3 * m
    return gemms, attention


def alone_factors(run: RunConfig, measured: float) -> tuple[float, float, float]:
    """(measured minus ppb seconds, the factor the GEMMs alone would need, attention's) for *run*
    (module docstring, `--alone`): 1 + gap / (class seconds · (compute + bubble) / compute); infinite
    for a class the run does not have (attention without flash kernels)."""
    iteration = run_iteration(run)
    gap = measured - iteration.seconds
    compute = iteration.breakdown["compute"]
    scale = (compute + iteration.breakdown.get("bubble", 0.0)) / compute
    factors = [1 + gap / (seconds * scale) if seconds > 0 else math.inf for seconds in kernel_seconds(run)]
    return gap, *factors


def report_alone(rows: list[PublicRun]) -> None:
    """Print each row's `alone_factors`."""
    print(f"  {'row':72s} {'error':>7s} {'gap s':>8s} {'GEMMs x':>8s} {'attention x':>11s}")
    for row in rows:
        run = config(row)
        gap, gemms, attention = alone_factors(run, row.seconds)
        error = -gap / row.seconds
        print(f"  {row.name[:72]:72s} {error:+7.1%} {gap:8.3f} {gemms:8.2f} {attention:11.2f}")
    print()


def growth_per_cp(
    columns: list[tuple[int, dict[str, float], float, float]],
) -> list[dict[str, float]]:
    """For consecutive (cp, seconds by class, ppb's seconds, measured seconds) columns, what each class,
    "ppb" and "measured" grew by from one column to the next, over the cp they grew by (over 1 when
    the two share a cp); a class missing from a column counts 0 there."""
    steps = []
    for (cp_a, parts_a, ppb_a, measured_a), (cp_b, parts_b, ppb_b, measured_b) in pairwise(columns):
        unit = cp_b - cp_a if cp_b != cp_a else 1
        grown = {name: (parts_b.get(name, 0.0) - parts_a.get(name, 0.0)) / unit for name in {*parts_a, *parts_b}}
        grown["ppb"] = (ppb_b - ppb_a) / unit
        grown["measured"] = (measured_b - measured_a) / unit
        steps.append(grown)
    return steps


def report_side(rows: list[PublicRun]) -> None:
    """Print *rows* side by side (module docstring, `--side`)."""
    columns = []
    for row in rows:
        run = config(row)
        classes, seconds = decompose_run(run, row.name)
        columns.append(
            (run.parallel.cp, {name: share.seconds for name, share in classes.items()}, seconds, row.seconds)
        )
    names = sorted(
        {name for _, parts, _, _ in columns for name in parts}, key=lambda name: -columns[-1][1].get(name, 0)
    )
    for i, row in enumerate(rows):
        print(f"  [{i}] {row.name}")
    print(f"  {'seconds':38s}" + "".join(f"{f'[{i}]':>9s}" for i in range(len(rows))), end="")
    print("".join(f"{f'[{i}]->[{i + 1}]':>11s}" for i in range(len(rows) - 1)), " (growth per unit of cp)")
    steps = growth_per_cp(columns)
    lines = [(name, [parts.get(name, 0.0) for _, parts, _, _ in columns]) for name in names]
    lines += [("ppb", [c[2] for c in columns]), ("measured", [c[3] for c in columns])]
    for name, values in lines:
        # a class absent from both columns of a step (one only some rows have, e.g. FP8's amax
        # reductions) grew by nothing there
        growth = "".join(f"{step.get(name, 0.0):11.3f}" for step in steps)
        print(f"  {name[:38]:38s}" + "".join(f"{value:9.3f}" for value in values) + growth)
    gaps = [c[3] - c[2] for c in columns]
    print(f"  {'measured minus ppb':38s}" + "".join(f"{gap:9.3f}" for gap in gaps))
    print()


def report(row: PublicRun) -> None:
    report_run(config(row), row.name, row.seconds)


def layer_hosts(
    run: RunConfig, iteration: Iteration | None = None
) -> list[tuple[str, int, float, float, float, float]]:
    """Under Megatron, each distinct layer of the busiest stage: (kind, how many, GPU forward and
    backward ms a micro-batch, the host's launches forward and backward in launches of
    `TimeModel.launch_s`, what the backward reruns included: `HostWaits.launch_forward` /
    `launch_backward`). *iteration*: the run's, where the caller priced it already."""
    iteration = iteration or run_iteration(run)
    times = TimeModel(run)
    launch_s = times.launch_s()
    found: dict[str, list] = {}
    for layer, state in configured_states(run, MemoryModel(run)).items():
        if layer.stage != iteration.busiest_stage:
            continue
        parts, host = times.parts(layer, *state), times.host(layer, *state)
        entry = found.setdefault(
            layer.kind.name,
            [
                0,
                parts.forward_ms,
                parts.total_backward_ms,
                host.launch_forward / launch_s,
                host.launch_backward / launch_s,
            ],
        )
        entry[0] += 1
    return [(kind, *values) for kind, values in found.items()]


def report_run(run: RunConfig, name: str, measured: float) -> None:
    """Print *run*'s classes (`decompose_run`) against its *measured* seconds."""
    classes, seconds = decompose_run(run, name)
    gap = measured - seconds
    print(f"{name}: measured {measured:.3f} s, ppb {seconds:.3f} s ({seconds / measured - 1:+.1%})")
    print(f"  {'class':36s} {'seconds':>8s} {'share':>6s} {'rate':>16s} {'x to close':>10s}")
    for name, share in sorted(classes.items(), key=lambda item: -item[1].seconds):
        # the factor this class alone would need to take the measured seconds (its rate divided by it)
        factor = f"x{(share.seconds + gap) / share.seconds:.2f}" if share.seconds > 0 and gap > 0 else ""
        print(f"  {name:36s} {share.seconds:8.4f} {share.seconds / seconds:6.1%} {rate(share):>16s} {factor:>10s}")
    print(f"  {'measured minus ppb':36s} {gap:8.4f} {gap / seconds:6.1%}")
    if run.framework == "megatron":
        launch_us = TimeModel(run).launch_s() * 1e6
        print(f"  layers of the busiest stage, a micro-batch (host {launch_us:.1f} us a launch):")
        for kind, count, forward_ms, backward_ms, launches_forward, launches_backward in layer_hosts(run):
            print(
                f"    {kind:12s} x{count:<3d} GPU {forward_ms:7.3f} / {backward_ms:7.3f} ms, launches "
                f"{launches_forward:6.1f} / {launches_backward:6.1f} ({launches_forward * launch_us / 1e3:7.3f} / "
                f"{launches_backward * launch_us / 1e3:7.3f} ms)"
            )
    print()


# gpt/gpt3_mcore_te_tp4_pp1_dist_optimizer_overlap_grad_reduce_param_gather/model_config.yaml at
# adc69dba2d: 12 layers, hidden 512, 8 heads, sequence 1024, micro-batch 4, global batch 32, TP 4, DP 2,
# distributed optimizer, --overlap-grad-reduce --overlap-param-gather, --deterministic-mode,
# --no-gradient-accumulation-fusion, --attention-backend unfused, the GPT-2 vocabulary (50257, padded
# to 128·tp), Megatron's defaults otherwise (learned positions, tied embeddings, LayerNorm, GeLU,
# biases, dropout 0.1); --log-interval 1, --log-params-norm, --log-num-zeros-in-grad as the 7B cases.
_SMALL_TP4 = "gpt/gpt3_mcore_te_tp4_pp1_dist_optimizer_overlap_grad_reduce_param_gather"
SMALL_TP4_GOLDEN = {
    "h100": GoldenTimes(
        f"{_SMALL_TP4}/golden_values_dev_dgx_h100.json", "adc69dba2d", "2-50",
        (0.26175, 0.24794, 0.24501, 0.24845, 0.2486, 0.24727, 0.24913, 0.25845, 0.25285, 0.24913, 0.24699,
         0.2473, 0.25154, 0.24973, 0.24744, 0.24812, 0.25005, 0.24688, 0.2449, 0.24547, 0.24699, 0.24408,
         0.24933, 0.24233, 0.2452, 0.24682, 0.24269, 0.24203, 0.2418, 0.25702, 0.24123, 0.24439, 0.24088,
         0.24457, 0.24197, 0.24309, 0.24278, 0.24374, 0.2478, 0.2422, 0.24357, 0.24957, 0.24752, 0.24273,
         0.24413, 0.24327, 0.24256, 0.24524, 0.24667),
    ),
    "a100": GoldenTimes(
        f"{_SMALL_TP4}/golden_values_dev_dgx_a100.json", "adc69dba2d", "5-50",
        (0.40308, 0.40585, 0.40679, 0.40532, 0.40582, 0.40467, 0.40915, 0.40822, 0.40852, 0.40432),
    ),
    # DGX GB200 (two 4-GPU trays of an NVL72 rack, one NVLink domain: tests/test_utils/recipes/gb200/
    # gpt.yaml), values set by 93ebf8d72f (2026-08-19); the model flags unchanged at d98e8a64. Iteration 2
    # (6.04 s) and 41-47 (0.54-2.19 s) are the run's stalls; the median holds 0.309.
    "gb200": GoldenTimes(
        f"{_SMALL_TP4}/golden_values_dev_dgx_gb200.json", "93ebf8d72f", "2-50",
        (6.04321, 0.34208, 0.302, 0.30312, 0.30227, 0.30196, 0.3057, 0.30558, 0.30899, 0.31083, 0.30792,
         0.30764, 0.30685, 0.30575, 0.30715, 0.30759, 0.30822, 0.31104, 0.30948, 0.30856, 0.31013, 0.31365,
         0.30796, 0.30845, 0.30861, 0.31111, 0.31017, 0.30932, 0.30995, 0.30863, 0.30778, 0.31052, 0.30812,
         0.30872, 0.3084, 0.30897, 0.30975, 0.31057, 0.309, 0.58135, 0.30758, 0.30793, 0.54104, 0.8862,
         1.39773, 2.19087, 0.30966, 0.36344, 0.31364),
    ),
}  # fmt: skip
# the catalog's device of each system
SMALL_TP4_DEVICE = {"h100": "h100-80gb", "a100": "a100-80gb", "gb200": "gb200"}


def small_tp4_run(gpu: str, host_kernel_us: float | None = None) -> dict:
    """The 12-layer TP4 case's run config on one node of 8 *gpu*s (*host_kernel_us*: the host's time per
    launch, the catalog's when None, 0 for the GPU's work alone)."""
    device: dict = {"name": SMALL_TP4_DEVICE[gpu], "reserved_mb": 0}
    if host_kernel_us is not None:
        device["host_kernel_us"] = host_kernel_us
    return {
        "name": f"megatron-ci-small-tp4-{gpu}",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": GPT_SMALL, "pad_vocab_multiple": 128}],
        "parallel": {"dp": 2, "tp": 4, "pp": 1, "zero": 1},
        "training": {
            "seq_length": 1024,
            "micro_batch_size": 4,
            "micro_batches": 4,
            "dtype": "bf16",
            "flash_attention": False,
        },
        "device": device,
        "timing": {"gradient_accumulation_fusion": False, "deterministic": True},
    }


def small_case() -> list[tuple[str, float, float, float]]:
    """(GPU, measured seconds, ppb's GPU work alone, ppb's with the host's launches) of the 12-layer TP4
    case, values of adc69dba2d: one of the cases the catalog's `host_kernel_us` is the median of."""
    return [
        (
            gpu,
            golden.median_s,
            run_iteration(run_config(small_tp4_run(gpu, 0.0), f"small-{gpu}")).seconds,
            run_iteration(run_config(small_tp4_run(gpu), f"small-{gpu}")).seconds,
        )
        for gpu, golden in SMALL_TP4_GOLDEN.items()
    ]


def pair_gaps() -> list[tuple[str, float, float]]:
    """(case, H100 measured minus ppb, A100 measured minus ppb) in seconds, values of one commit."""
    gaps = []
    for tp, pp, vpp, mbs in ((1, 4, 8, 1), (4, 1, 1, 2)):
        measured = {"h100": GOLDEN_7B_H100_WITH_A100[tp].median_s, "a100": GOLDEN_7B[tp, "a100"].median_s}
        ours = {
            gpu: run_iteration(run_config(gpt3_7b_run(tp, pp, vpp, mbs, gpu), f"7b-{gpu}")).seconds for gpu in measured
        }
        gaps.append((f"GPT 7B TP{tp} PP{pp}", measured["h100"] - ours["h100"], measured["a100"] - ours["a100"]))
    return gaps


def ci_case(spec: str) -> tuple[RunConfig, str, float]:
    """A Megatron CI case as bench/megatron_ci.py prices it, from *spec* `family/case@gpu` (gpu h100,
    a100 or gb200; PPB_MEGATRON_LM names the Megatron-LM repository): its run config, name and measured
    seconds (the median of its golden values' iteration times without iteration 1)."""
    import megatron_ci

    from ppb_core.balance.megatron_import import import_megatron, run_config_of

    where, _, gpu = spec.partition("@")
    if not megatron_ci.MIRROR or gpu not in megatron_ci.GPUS or where.count("/") != 1:
        raise SystemExit(f"bench/decompose.py: --ci {spec!r}: family/case@h100|a100|gb200 with PPB_MEGATRON_LM set")
    path = f"{megatron_ci.CASES}/{where}"
    text = megatron_ci.repository_file(f"{path}/model_config.yaml")
    golden = f"{path}/golden_values_dev_dgx_{gpu}.json"
    if text is None or megatron_ci.repository_file(golden) is None:
        raise SystemExit(f"bench/decompose.py: --ci {spec!r}: no {path}/model_config.yaml or {golden}")
    values = megatron_ci.Golden.read(golden)
    # the flags that measured the values (`megatron_ci.measured_config`), at the releases that ran them
    launch = megatron_ci.launch_text(megatron_ci.measured_config(path, values))
    imported = import_megatron(
        launch,
        megatron_ci.NODE_GPUS,
        megatron_ci.GPUS[gpu],
        where,
        read_file=megatron_ci.repository_file,
        release=values.release,
    )
    seconds = values.seconds
    if seconds is None:
        raise SystemExit(f"bench/decompose.py: --ci {spec!r}: {golden} logs no iteration-time")
    return run_config_of(imported, where), f"{where} ({gpu.upper()})", seconds


def main(argv: list[str]) -> int:
    print(f"machine: {machine()}")
    if argv[:1] == ["--ci"]:  # Megatron CI cases, as bench/megatron_ci.py prices them
        for spec in argv[1:]:
            report_run(*ci_case(spec))
        return 0
    alone = argv[:1] == ["--alone"]
    side = argv[:1] == ["--side"]
    wanted = (argv[1:] if alone or side else argv) or list(DEFAULT_ROWS)
    rows = public_runs() + strong_scaling_runs()
    if side:  # the matching rows' classes side by side, with their growth per unit of cp
        matches = [row for pattern in wanted for row in rows if pattern in row.name]
        if not matches:
            raise SystemExit(f"bench/decompose.py: no row of bench/public_runs.py matches {wanted!r}")
        report_side(matches)
        return 0
    if alone:  # each matching row's one-class factors
        matches = [row for row in rows if any(pattern in row.name for pattern in wanted)]
        if not matches:
            raise SystemExit(f"bench/decompose.py: no row of bench/public_runs.py matches {wanted!r}")
        report_alone(matches)
        return 0
    for pattern in wanted:
        matches = [row for row in rows if pattern in row.name]
        if not matches:
            raise SystemExit(f"bench/decompose.py: no row of bench/public_runs.py matches {pattern!r}")
        for row in matches:
            report(row)
    print("public per-kernel rates on H100 SXM:")
    for name, text in REFERENCES:
        print(f"  {name}: {text}")
    print()
    print("Megatron CI, identical configs on both GPUs (values of adc69dba2d): measured minus ppb, seconds")
    for case, h100, a100 in pair_gaps():
        print(f"  {case:20s} H100 {h100:+.3f} s   A100 {a100:+.3f} s")
    print(f"the same harness's 12-layer hidden-512 TP4 PP1 case ({_SMALL_TP4}), same commit")
    print("(one of the cases the catalog's host_kernel_us is the median of, bench/host_derive.py):")
    for gpu, measured, gpu_only, ours in small_case():
        print(
            f"  {gpu.upper()}: measured {measured:.3f} s, ppb's GPU work {gpu_only:.3f} s "
            f"(measured minus it {measured - gpu_only:+.3f} s), with the host's launches {ours:.3f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
