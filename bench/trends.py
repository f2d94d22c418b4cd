"""The public runs' signed errors by feature: which settings the misses follow, device by device.

    python bench/trends.py [--table] [--within device|group|cell] [--pairs] [--terms] [--where FEATURE=VALUE ...]
        [--classes] [--overlap] [--dump|--rows FILE] [--cells FEATURE[,FEATURE] ...]
    python bench/trends.py --fp8-pairs [--rows FILE]

Each row of bench/public_runs.py is read back through its run config (`features`): framework, device,
precision (BF16, or FP8 with its recipe), model size and family, dense or MoE, the parallel sizes (TP, PP, VP,
CP, EP, DP, FSDP or ZeRO), micro-batch size, micro-batches a pipeline m and m/PP, sequence, recompute, the
pipeline's, TP's and EP's communication overlap (EP's: the combined 1F1B), CUDA graphs, GPUs and nodes, the
group (its source, which is its release), and ppb's own split of the iteration (`share_*`: bubble, p2p,
data-parallel and FSDP communication, optimizer, as a share of ppb's seconds). Its signed error is ppb's
seconds over the published ones minus one (negative: ppb is fast).

A feature separates the errors only apart from what the device (or the group: one source, one
release, one framework) already explains, so each row's error is taken against the mean of its
device's rows (`--within group`: its group's; `--within cell`: its device's in its group, the strictest): the
residual. For every feature the residuals are
printed by value (categories) or by tercile (numbers, with the Spearman rank correlation over the rows
whose device holds at least `MIN_ROWS` of them); a feature whose buckets differ by more than their
spread is one to look into with bench/decompose.py. `--table` prints every row's features and error.
`--pairs` prints every two rows of one model on one device that differ in one or two settings, their measured
ratio of GPU-seconds a token beside ppb's (`pairs`: a setting's effect with the rest of the row held). `--terms`
fits the published seconds as ppb's times one rate per device, group or cell plus one candidate term at a time
(`TERMS`: seconds an iteration, a micro-batch, a node, a doubling of the nodes, a data-parallel rank, or one of
ppb's own terms scaled): a term the runs spend that ppb leaves out or prices too cheaply, the same in every
framework, has a positive coefficient (`term_fit`). `--classes` (when pricing) also collects bench/decompose.py's
GEMM, attention and recompute-rerun seconds of each row (`CLASSES`; ~2 minutes more), which `--terms` then fits
as ppb's own terms are: the share of a kernel class ppb misses beside the rows' rate. `--overlap` (when pricing)
prices each row again with every collective beside compute taking all the device's SMs (`overlap_in_full_s`;
~3 minutes more): what ppb's overlap would cost charged in full, a term `--terms` fits as the share of it the
runs spend beyond ppb's charge (the compute a concurrent collective slows, timing-validation.md, session 33). `--where
moe=dense` keeps the rows of one value (repeatable); `--rows FILE` reads the rows an earlier run
dumped (`--dump FILE`) to skip the ~2 minutes of pricing. `--cells FEATURE[,FEATURE]` (repeatable)
prints, in place of the trends, the rows' signed errors by the cells of one feature or two crossed (`cells`:
rows, mean signed and absolute error, rows under, range), the machine line first, e.g. a group's errors by
device and model with `--where "group=NeMo archive 25.09 / 26.02 / 26.02.01 / 26.06" --cells device,model`.
`--fp8-pairs` prints the machine, then every FP8 row
beside its BF16 twin (the same model, device, parallel layout and release; `fp8_pairs`): the published FP8/BF16 time
ratio beside ppb's, what FP8 is worth in the runs and in ppb; it prices only the rows that have a twin.
Nothing here prices anything: it reads the rows and ppb's iteration as they are.
"""

from __future__ import annotations

import copy
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import machine  # noqa: E402
from decompose import RECOMPUTE_CLASS, decompose_run, layer_hosts  # noqa: E402
from public_runs import GROUPS, PublicRun, config, public_runs, row_iteration  # noqa: E402

from ppb_core.config.recompute import MegatronRecompute, TorchtitanRecompute  # noqa: E402
from ppb_core.config.run import RunConfig  # noqa: E402
from ppb_core.timing.iteration import Iteration  # noqa: E402
from ppb_core.timing.pricer import TimeModel  # noqa: E402

WITHIN = ("device", "group", "cell")  # what a residual is taken against (a cell: one device in one group)
MIN_ROWS = 5  # a device's (or group's) rows below this many leave the rank correlations out
CATEGORIES = 6  # a number with at most this many values is bucketed by value, else by tercile
SHARES = ("bubble", "p2p", "dp_communication", "fsdp_communication", "optimizer")
# bench/decompose.py's op classes whose share of ppb's seconds `--classes` collects (`class_shares`): the busiest
# stage's layers' GEMMs, flash/unfused attention cores and recompute reruns, each a micro-batch times m
CLASSES = {"gemm": "GEMMs", "attention": "attention", "rerun": RECOMPUTE_CLASS}
OVERLAP_TERM = "overlap_full_s"  # the row's `overlap_in_full_s`, collected with `--overlap`


def group_of(source: str) -> str:
    """The row's group in bench/public_runs.py (`GROUPS`; the published tables' rows: every other)."""
    return next((label for label, belongs in GROUPS.items() if belongs(source)), "published tables")


def precision(run: RunConfig) -> str:
    """bf16 (or the run's dtype), or fp8 with its scaling recipe (timing.fp8_recipe)."""
    if run.timing.matmul_dtype == "fp8":
        return f"fp8-{run.timing.fp8_recipe}"
    return run.timing.matmul_dtype or run.training.dtype


def recompute(run: RunConfig) -> str:
    """The configured recompute in one word: none, selective, full (or a layer count), switches."""
    value = run.training.recompute
    if value == "full":
        return "full"
    if isinstance(value, MegatronRecompute):
        if value.granularity == "selective":
            return "selective"
        return "full" if value.num_layers is None else f"full-{value.method}-{value.num_layers}"
    if isinstance(value, TorchtitanRecompute):
        return value.mode if value.option is None else f"{value.mode}-{value.option}"
    on = sorted(name for name, flag in value.items() if flag)
    return "+".join(on) if on else "none"


def model(spec: Any) -> str:
    """The model in a word, by its shape (a spec holds no name): family, hidden size x layers, and routed experts
    where it has any, e.g. "generic 2048x48 128e" (Qwen3 30B-A3B)."""
    shape = f"{getattr(spec, 'family', 'vision')} {spec.hidden_size}x{spec.num_layers}"
    experts = getattr(spec, "num_experts", 0)
    return f"{shape} {experts}e" if experts else shape


def sharding(run: RunConfig) -> str:
    """How the data-parallel ranks shard: fsdp (its implementation) or zero-N."""
    par = run.parallel
    if par.fsdp:
        return f"fsdp-{par.fsdp_impl or run.framework}"
    return f"zero{par.zero}"


def settings(row: PublicRun, run: RunConfig) -> dict[str, Any]:
    """The row's settings that might set its error, read from its run config alone (nothing priced)."""
    spec = next(iter(run.specs.values()))
    par, training = run.parallel, run.training
    gpus = par.dp * par.tp * par.pp * par.cp
    m = training.micro_batches
    found: dict[str, Any] = {
        "group": group_of(row.source),
        "framework": run.framework,
        "device": run.device.name or "custom",
        "cell": f"{run.device.name or 'custom'} / {group_of(row.source)}",
        "precision": precision(run),
        "family": getattr(spec, "family", "vision"),
        "model": model(spec),
        "moe": "moe" if getattr(spec, "num_experts", 0) else "dense",
        "hidden": spec.hidden_size,
        "hidden_per_tp": spec.hidden_size // par.tp,
        "layers": spec.num_layers,
        "tp": par.tp,
        "pp": par.pp,
        "vp": par.vpp,
        "cp": par.cp,
        "ep": par.ep,
        "dp": par.dp,
        "sharding": sharding(run),
        "mbs": training.micro_batch_size,
        "m": m,
        "m_per_pp": m / par.pp,
        "seq": training.seq_length,
        "tokens_per_gpu_mb": training.micro_batch_size * training.seq_length // (par.cp * par.tp),
        "recompute": recompute(run),
        "p2p_overlap": run.timing.overlap_p2p_comm if par.pp > 1 else "-",
        "tp_overlap": run.timing.overlap.tp > 0 if par.tp > 1 else "-",
        # Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm), which needs EP > 1
        "ep_overlap": par.overlap_moe_expert_parallel_comm if par.ep > 1 else "-",
        "cuda_graphs": run.timing.cuda_graph_impl,
        "dispatcher": run.timing.moe_dispatcher if getattr(spec, "num_experts", 0) else "-",
        "offload": "layers" if training.cpu_offloading_num_layers else "modules" if training.offload_modules else "-",
        "gpus": gpus,
        "nodes": math.ceil(gpus / par.devices_per_node),
        "release": run.framework_release.megatron_core or "-",
    }
    return found


def features(row: PublicRun, run: RunConfig, iteration: Iteration) -> dict[str, Any]:
    """The row's settings (`settings`) and ppb's shares of its iteration."""
    spec = next(iter(run.specs.values()))
    par, training = run.parallel, run.training
    m = training.micro_batches
    found = settings(row, run)
    for name in SHARES:
        found[f"share_{name}"] = iteration.breakdown.get(name, 0.0) / iteration.seconds
    found["share_host_wait"] = iteration.host_wait_seconds / iteration.seconds
    found["host_per_gpu"] = host_per_gpu(run, iteration)
    found["ppb_mfu"] = iteration.mfu
    # the busiest stage's work for one layer and micro-batch, forward and backward: short ones are where a
    # fixed cost a kernel, a layer or a micro-batch would show
    found["layer_mb_ms"] = 1e3 * iteration.breakdown["compute"] / (m * spec.num_layers / par.pp)
    return found


def host_per_gpu(run: RunConfig, iteration: Iteration) -> float:
    """Under Megatron, the busiest stage's layers' host launch time over their GPU work, forward and backward
    a micro-batch (bench/decompose.py `layer_hosts`); 0 elsewhere (no launch count). Below 1 ppb charges the
    host nothing (`host.host_excess_s`), so this shows how near a layer runs to its host where no wait is
    priced."""
    if run.framework != "megatron":
        return 0.0
    launch_s = TimeModel(run).launch_s()
    hosts = layer_hosts(run, iteration)
    gpu_ms = sum(count * (forward + backward) for _, count, forward, backward, _, _ in hosts)
    host_ms = sum(count * (forward + backward) * launch_s * 1e3 for _, count, _, _, forward, backward in hosts)
    return host_ms / gpu_ms if gpu_ms > 0 else 0.0


def class_shares(run: RunConfig, name: str) -> dict[str, float]:
    """`CLASSES`' shares of the run's seconds (bench/decompose.py `decompose_run`, which prices the run again:
    `--classes` only)."""
    classes, total = decompose_run(run, name)
    return {
        f"share_{key}": classes[label].seconds / total if label in classes else 0.0 for key, label in CLASSES.items()
    }


def overlap_in_full_s(row: PublicRun, run: RunConfig, seconds: float) -> float:
    """What the row's iteration adds over its *seconds* when every collective that runs beside compute takes all
    the device's SMs (the device's `comm_sms` at its `sm_count`: `Kernels.contention` 1): each second of
    collective hidden behind compute then costs the compute a full second, as if the pair ran one after the
    other. ppb charges `comm_sms / sm_count` of it; a run that spends a share β of this term beyond ppb shows β
    in `term_fit`. Collectives priced otherwise keep their price: a flex dispatcher's own SMs (`Collective.sms`),
    the persistent GEMMs' late CTAs (`kernels.persistent_added_s`), copy-engine transfers (`timing/symm_mem.py`,
    userbuffers' ring exchange)."""
    raw = copy.deepcopy(row.raw)
    device = raw["device"] if isinstance(raw["device"], dict) else {"name": raw["device"]}
    raw["device"] = device | {"comm_sms": run.device.profile().sm_count}
    return row_iteration(replace(row, raw=raw)).seconds - seconds


def collect(
    rows: Sequence[PublicRun] | None = None, classes: bool = False, overlap: bool = False
) -> list[dict[str, Any]]:
    """Every row's name, features, published and predicted seconds and signed error (with *classes*, the
    op classes' shares, `class_shares`; with *overlap*, `overlap_in_full_s` as `overlap_full_s`)."""
    found = []
    for row in rows or public_runs():
        run = config(row)
        iteration = row_iteration(row)
        found.append(
            {
                "name": row.name,
                **features(row, run, iteration),
                "published_s": row.seconds,
                "ppb_s": iteration.seconds,
                "error": iteration.seconds / row.seconds - 1,
                **(class_shares(run, row.name) if classes else {}),
                **({"overlap_full_s": overlap_in_full_s(row, run, iteration.seconds)} if overlap else {}),
            }
        )
    return found


def residuals(rows: Sequence[dict[str, Any]], within: str) -> list[float]:
    """Each row's error minus the mean error of the rows sharing its *within* feature (device or group)."""
    by: dict[Any, list[float]] = defaultdict(list)
    for row in rows:
        by[row[within]].append(row["error"])
    return [row["error"] - statistics.fmean(by[row[within]]) for row in rows]


def explained(rows: Sequence[dict[str, Any]], key: str) -> float:
    """The share of the errors' variance that the means of the rows sharing *key* account for (R² of its
    means; 0 when the errors do not vary)."""
    total = statistics.pvariance([row["error"] for row in rows])
    left = statistics.fmean(r * r for r in residuals(rows, key))
    return 1 - left / total if total else 0.0


def ranks(values: Sequence[float]) -> list[float]:
    """Average ranks (ties share the mean of their positions), 1-based."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    found = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            found[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return found


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's over the average ranks (0 when either side is constant)."""
    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else 0.0


def numeric(values: Sequence[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def shown(value: float) -> str:
    """A bucket's edge: whole above 100 (hidden sizes, micro-batches), else three digits."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def buckets(values: Sequence[Any]) -> tuple[list[str], Callable[[Any], str]]:
    """Bucket labels in order and the labelling: a category's own value (numbers of few values too), else a
    number's tercile (by rank)."""
    if not numeric(values) or len(set(values)) <= CATEGORIES:
        labels = sorted({str(v) for v in values}, key=lambda s: (len(s), s) if numeric(values) else s)
        return labels, str
    zeros = sum(1 for v in values if v == 0) >= len(values) / 4  # e.g. no bubble without a pipeline: apart
    ordered = sorted(v for v in values if v != 0 or not zeros)
    low, high = ordered[len(ordered) // 3], ordered[2 * len(ordered) // 3]
    lo, hi = shown(low), shown(high)
    labels = [*(["0"] if zeros else []), f"<{lo}", f"{lo}-{hi}", f">={hi}"]
    thirds = labels[-3:]

    def label(v: float) -> str:
        if zeros and v == 0:
            return "0"
        return thirds[0] if v < low else thirds[1] if v < high else thirds[2]

    return labels, label


def by_feature(rows: Sequence[dict[str, Any]], name: str, residual: Sequence[float]) -> list[tuple[str, int, float]]:
    """(bucket, rows, mean residual) of one feature, buckets in order."""
    labels, label = buckets([row[name] for row in rows])
    found: dict[str, list[float]] = defaultdict(list)
    for row, r in zip(rows, residual, strict=True):
        found[label(row[name])].append(r)
    return [(b, len(found[b]), statistics.fmean(found[b])) for b in labels if found[b]]


def controlled_spearman(rows: Sequence[dict[str, Any]], name: str, residual: Sequence[float], within: str) -> float:
    """The rank correlation of a numeric feature with the residual, over the rows of devices (groups) with
    at least MIN_ROWS rows."""
    count: dict[Any, int] = defaultdict(int)
    for row in rows:
        count[row[within]] += 1
    kept = [(row[name], r) for row, r in zip(rows, residual, strict=True) if count[row[within]] >= MIN_ROWS]
    return spearman([k[0] for k in kept], [k[1] for k in kept]) if kept else 0.0


def within_t(rows: Sequence[dict[str, Any]], name: str, within: str) -> float:
    """The t statistic of a numeric feature's slope in a least-squares fit of the error on it and one constant
    per *within* value (a fixed effect: each device's, group's or cell's own mean): by Frisch-Waugh-Lovell the
    slope of the errors on the feature both taken against their *within* means, its variance the residuals'
    (n − values − 1 degrees of freedom) over the feature's spread (0 when the feature does not vary within)."""
    x = residuals([{within: row[within], "error": float(row[name])} for row in rows], within)
    y = residuals(rows, within)
    sxx = sum(v * v for v in x)
    freedom = len(rows) - len({row[within] for row in rows}) - 1
    if sxx <= 0 or freedom <= 0:
        return 0.0
    slope = sum(a * b for a, b in zip(x, y, strict=True)) / sxx
    left = sum((b - slope * a) ** 2 for a, b in zip(x, y, strict=True)) / freedom
    return slope / math.sqrt(left / sxx) if left > 0 else math.copysign(math.inf, slope)


FEATURES = (
    "framework",
    "precision",
    "family",
    "model",
    "moe",
    "hidden",
    "hidden_per_tp",
    "layers",
    "tp",
    "pp",
    "vp",
    "cp",
    "ep",
    "dp",
    "sharding",
    "mbs",
    "m",
    "m_per_pp",
    "seq",
    "tokens_per_gpu_mb",
    "recompute",
    "p2p_overlap",
    "tp_overlap",
    "ep_overlap",
    "cuda_graphs",
    "dispatcher",
    "offload",
    "gpus",
    "nodes",
    "release",
    *(f"share_{name}" for name in SHARES),
    "share_host_wait",
    "host_per_gpu",
    "ppb_mfu",
    "layer_mb_ms",
)
TABLE = ("device", "framework", "precision", "moe", "hidden", "tp", "pp", "vp", "cp", "ep", "dp", "mbs", "m", "seq")


def print_table(rows: Sequence[dict[str, Any]]) -> None:
    """Every row: its features in short, ppb's bubble and DP shares and its signed error."""
    print(f"{'run':60s} " + " ".join(f"{n[:9]:>9s}" for n in TABLE) + "    bub%    dp%   error")
    for row in sorted(rows, key=lambda r: (r["device"], r["error"])):
        cells = " ".join(f"{str(row[n])[:9]:>9s}" for n in TABLE)
        print(
            f"{row['name'][:60]:60s} {cells} {row['share_bubble']:7.1%} {row['share_dp_communication']:6.1%} "
            f"{row['error']:+7.1%}"
        )


def print_trends(rows: Sequence[dict[str, Any]], within: str) -> None:
    """For every feature, the mean residual (error against the row's device or group) by bucket."""
    residual = residuals(rows, within)
    errors = [row["error"] for row in rows]
    print(
        f"{len(rows)} rows, signed error mean {statistics.fmean(errors):+.1%}, sd {statistics.pstdev(errors):.1%}; "
        "its variance the means account for: "
        + ", ".join(f"{key} {explained(rows, key):.0%}" for key in ("framework", *WITHIN))
    )
    print(f"mean signed error by {within} (the residuals below are against these):")
    for value, n, mean in by_feature(rows, within, [row["error"] for row in rows]):
        print(f"  {value:40s} {n:4d} rows  {mean:+6.1%}")
    print()
    print(
        f"{'feature':22s} rho     t   buckets: value (rows) mean residual against the row's {within} "
        f"(t: the slope's in a fit with one constant per {within})"
    )
    for name in FEATURES:
        values = [row[name] for row in rows]
        if numeric(values):
            said = f"{controlled_spearman(rows, name, residual, within):+.2f} {within_t(rows, name, within):+5.1f}"
        else:
            said = " " * 11
        cells = "  ".join(f"{b} ({n}) {mean:+.1%}" for b, n, mean in by_feature(rows, name, residual))
        print(f"{name:22s} {said}  {cells}")


def cells(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> list[tuple[tuple[str, ...], list[float]]]:
    """The rows' signed errors by the cells of the features *names* (one, or two crossed): each cell's values (as
    the table prints them) and its rows' errors, cells in order of their values."""
    found: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for row in rows:
        found[tuple(str(row[name]) for name in names)].append(row["error"])
    return sorted(found.items())


def print_cells(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """`cells` as a table: rows, mean signed and absolute error, rows under (ppb fast), range; all rows last."""
    width = max(20, *(len(" / ".join(values)) for values, _ in cells(rows, names)))
    print(f"{' / '.join(names):{width}s}  rows  signed  absolute  under    range")
    for values, errors in [*cells(rows, names), (("all",), [row["error"] for row in rows])]:
        under = sum(1 for e in errors if e < 0)
        print(
            f"{' / '.join(values):{width}s} {len(errors):5d} {statistics.fmean(errors):+7.1%} "
            f"{statistics.fmean(abs(e) for e in errors):8.1%} {under:6d}  {min(errors):+6.1%} .. {max(errors):+6.1%}"
        )


# A pair is two rows of one model (these equal) whose settings (`PAIR_SETTINGS`) differ in one or two.
PAIR_MODEL = ("framework", "device", "family", "moe", "hidden", "layers")
PAIR_SETTINGS = (
    "precision",
    "tp",
    "pp",
    "vp",
    "cp",
    "ep",
    "dp",
    "sharding",
    "mbs",
    "m",
    "seq",
    "recompute",
    "p2p_overlap",
    "tp_overlap",
    "ep_overlap",
    "cuda_graphs",
    "dispatcher",
    "offload",
    "release",
)


def gpu_seconds_a_token(row: dict[str, Any], seconds: float) -> float:
    """GPU-seconds a token: the iteration's seconds times its GPUs over its tokens (dp · m · mbs · seq)."""
    return seconds * row["gpus"] / (row["dp"] * row["m"] * row["mbs"] * row["seq"])


def pairs(rows: Sequence[dict[str, Any]], most: int = 2) -> list[tuple[list[str], dict, dict, float, float]]:
    """(settings apart, row a, row b, measured b/a, ppb's b/a) of GPU-seconds a token, for every two rows of
    one model on one device whose settings differ in at most *most*: what one setting does, measured and
    priced, with the rest of the row the same (a feature's effect apart from what else differs between rows)."""
    found = []
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if any(a[k] != b[k] for k in PAIR_MODEL):
                continue
            apart = [k for k in PAIR_SETTINGS if a[k] != b[k]]
            if not apart or len(apart) > most:
                continue
            measured = gpu_seconds_a_token(b, b["published_s"]) / gpu_seconds_a_token(a, a["published_s"])
            ours = gpu_seconds_a_token(b, b["ppb_s"]) / gpu_seconds_a_token(a, a["ppb_s"])
            found.append((apart, a, b, measured, ours))
    return sorted(found, key=lambda p: (p[0], p[1]["device"], p[1]["name"]))


def print_pairs(rows: Sequence[dict[str, Any]]) -> None:
    """Each pair: the settings apart, measured and ppb's ratio of GPU-seconds a token, ppb's over measured."""
    print(f"{'first row':52s} {'settings apart (first -> second)':52s} measured   ppb  ppb/measured")
    for apart, a, b, measured, ours in pairs(rows):
        said = ", ".join(f"{k} {a[k]}->{b[k]}" for k in apart)
        print(f"{a['name'][:52]:52s} {said[:52]:52s} {measured:8.3f} {ours:6.3f} {ours / measured - 1:+8.1%}")
    print()
    print("pairs one setting apart, by setting: ppb's ratio over the measured one (mean, spread, range)")
    for setting, gaps in pair_gaps(rows).items():
        spread = statistics.pstdev(gaps)
        print(
            f"  {setting:14s} {len(gaps):3d} pairs  mean {statistics.fmean(gaps):+6.1%}  sd {spread:5.1%}  "
            f"{min(gaps):+6.1%} .. {max(gaps):+6.1%}"
        )


def pair_gaps(rows: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """ppb's ratio over the measured one, minus one, of the pairs one setting apart, by that setting. The pairs
    apart in the release alone are the floor: the same run measured again on another container."""
    found: dict[str, list[float]] = defaultdict(list)
    for apart, _, _, measured, ours in pairs(rows, most=1):
        found[apart[0]].append(ours / measured - 1)
    return dict(sorted(found.items()))


# An FP8 row's BF16 twin: one source's table (its group), the same model, device, parallel layout and release
# (`PAIR_MODEL`, `PAIR_SETTINGS`), only the GEMMs' precision apart (`--fp8-pairs`)
TWIN_KEY = ("group", *(k for k in (*PAIR_MODEL, *PAIR_SETTINGS) if k != "precision"))


def is_fp8(found: dict[str, Any]) -> bool:
    return str(found["precision"]).startswith("fp8")


def twin_rows(rows: Sequence[PublicRun]) -> list[PublicRun]:
    """The rows that have a twin of the other precision (BF16 beside FP8 of any recipe), read from their run
    configs alone: `--fp8-pairs` prices only these."""
    keyed: dict[tuple, list[tuple[PublicRun, bool]]] = defaultdict(list)
    for row in rows:
        found = settings(row, config(row))
        if found["precision"] == "bf16" or is_fp8(found):
            keyed[tuple(found[k] for k in TWIN_KEY)].append((row, is_fp8(found)))
    kept = [group for group in keyed.values() if len({fp8 for _, fp8 in group}) == 2]
    return [row for group in kept for row, _ in group]


def fp8_pairs(rows: Sequence[dict[str, Any]]) -> list[tuple[dict, dict, float, float]]:
    """(BF16 row, FP8 row, measured FP8/BF16 seconds, ppb's FP8/BF16 seconds) of every two collected rows of one
    group one precision apart, the rest of the row the same (`pairs` with the precision alone apart; the same GPUs
    and tokens, so GPU-seconds a token are the seconds)."""
    found = []
    for apart, a, b, measured, ours in pairs(rows, most=1):
        if apart != ["precision"] or is_fp8(a) == is_fp8(b) or a["group"] != b["group"]:
            continue
        if is_fp8(a):  # BF16 first
            a, b, measured, ours = b, a, 1 / measured, 1 / ours
        if a["precision"] == "bf16":
            found.append((a, b, measured, ours))
    return sorted(found, key=lambda p: (p[0]["name"], p[1]["name"]))


def print_fp8_pairs(rows: Sequence[dict[str, Any]]) -> None:
    """Each FP8 row beside its BF16 twin: both published and ppb seconds, both errors, the measured FP8/BF16
    ratio and ppb's, ppb's over the measured one (below zero: ppb credits FP8 with more than the runs show), and
    ppb's host launch time over GPU work of the busiest stage's layers in both (`host_per_gpu`)."""
    found = fp8_pairs(rows)
    print(
        f"{'BF16 row (its FP8 twin: the same settings)':62s} {'bf16 s':>7s} {'fp8 s':>7s} {'err bf16':>8s} "
        f"{'err fp8':>8s} {'meas':>6s} {'ppb':>6s} {'ppb/meas':>8s} {'host/gpu':>9s}"
    )
    for a, b, measured, ours in found:
        print(
            f"{a['name'][:62]:62s} {a['published_s']:7.3f} {b['published_s']:7.3f} {a['error']:+8.1%} "
            f"{b['error']:+8.1%} {measured:6.3f} {ours:6.3f} {ours / measured - 1:+8.1%} "
            f"{a['host_per_gpu']:4.2f}/{b['host_per_gpu']:4.2f}"
        )
        print(f"  FP8 twin: {b['name'][:100]}")
    if not found:
        print("  no FP8 row has a BF16 twin among these rows")
        return
    gaps = [ours / measured - 1 for _, _, measured, ours in found]
    bf16_error = statistics.fmean(a["error"] for a, *_ in found)
    fp8_error = statistics.fmean(b["error"] for _, b, *_ in found)
    print(
        f"{len(found)} pairs: FP8/BF16 measured {statistics.fmean(m for *_, m, _ in found):.3f}, ppb "
        f"{statistics.fmean(o for *_, o in found):.3f}; ppb over measured mean {statistics.fmean(gaps):+.1%} "
        f"(sd {statistics.pstdev(gaps):.1%}, {min(gaps):+.1%} .. {max(gaps):+.1%}); mean error BF16 "
        f"{bf16_error:+.1%}, FP8 {fp8_error:+.1%}"
    )


# A term ppb might miss or price too cheaply (`term_fit`): its name, the unit of its coefficient, and its seconds
# for a row at a coefficient of one (a thousandth of a second for the terms counted in ms). ppb's own terms
# (`share_*` times ppb's seconds) read as the share of that term missing (+0.5: the runs spend half again as
# much; −0.5: ppb charges twice what they spend).
TERMS: tuple[tuple[str, str, Callable[[dict[str, Any]], float]], ...] = (
    ("fixed", "ms an iteration", lambda row: 1e-3),
    ("micro-batch", "ms a micro-batch", lambda row: 1e-3 * row["m"]),
    ("node", "ms a node", lambda row: 1e-3 * row["nodes"]),
    ("log2 nodes", "ms a doubling of the nodes", lambda row: 1e-3 * math.log2(row["nodes"])),
    ("dp rank", "ms a data-parallel rank", lambda row: 1e-3 * row["dp"]),
    *(
        (f"ppb's {name}", f"of ppb's {name} missing", lambda row, name=name: row[f"share_{name}"] * row["ppb_s"])
        for name in (*SHARES, "host_wait")
    ),
    *(
        (
            f"ppb's {name} (class)",
            f"of ppb's {name} missing",
            lambda row, name=name: row[f"share_{name}"] * row["ppb_s"],
        )
        for name in CLASSES
    ),
    # `--overlap`: ppb's hidden collective time charged in full less ppb's charge (`overlap_in_full_s`)
    ("ppb's overlap in full", "of the full charge missing", lambda row: row[OVERLAP_TERM]),
)


def term_fit(
    rows: Sequence[dict[str, Any]], term: Callable[[dict[str, Any]], float], within: str
) -> tuple[float, float]:
    """(coefficient, t) of one candidate term in the fit published = ppb · (1 + c_w) + coefficient · term, one rate
    c_w per *within* value (a gap proportional to ppb's seconds: a kernel rate every row of the cell shares), each
    row's miss relative to its published seconds (the fit of the relative miss, 1 − ppb/published = −error, on c_w ·
    ppb/published and the term over the published seconds). A term ppb leaves out shows as a positive
    coefficient in its units, one it overprices as a negative one. Least squares by Frisch-Waugh-Lovell: the miss
    and the term each less their projection on ppb/published within the row's *within* value, the slope of one
    on the other, its t over n − values − 1 degrees of freedom (0, 0 when the term is a multiple of ppb's
    seconds within every value)."""
    by: dict[Any, list[int]] = defaultdict(list)
    for k, row in enumerate(rows):
        by[row[within]].append(k)
    x = [row["ppb_s"] / row["published_s"] for row in rows]
    y = [-row["error"] for row in rows]
    z = [term(row) / row["published_s"] for row in rows]
    ry, rz = y[:], z[:]
    for members in by.values():
        xx = sum(x[k] * x[k] for k in members)
        by_y = sum(x[k] * y[k] for k in members) / xx
        by_z = sum(x[k] * z[k] for k in members) / xx
        for k in members:
            ry[k] -= by_y * x[k]
            rz[k] -= by_z * x[k]
    szz = sum(v * v for v in rz)
    freedom = len(rows) - len(by) - 1
    if szz <= 1e-12 * sum(v * v for v in z) or freedom <= 0:
        return 0.0, 0.0
    slope = sum(a * b for a, b in zip(rz, ry, strict=True)) / szz
    left = sum((b - slope * a) ** 2 for a, b in zip(rz, ry, strict=True)) / freedom
    return slope, slope / math.sqrt(left / szz) if left > 0 else math.copysign(math.inf, slope)


def print_terms(rows: Sequence[dict[str, Any]], within: str) -> None:
    """Each candidate term's coefficient and t beside a proportional gap per *within* value (`term_fit`)."""
    print(
        f"what ppb misses of the measured seconds: a gap proportional to ppb's seconds, one rate per {within}, "
        "plus one term at a time (+: the runs spend more of it than ppb; |t| > 2 a trend)"
    )
    for name, unit, term in TERMS:
        if name.endswith("(class)") and any(f"share_{name.split()[1]}" not in row for row in rows):
            print(f"  {name:28s} not collected (--classes with --dump, or a dump made with it)")
            continue
        if name == "ppb's overlap in full" and any(OVERLAP_TERM not in row for row in rows):
            print(f"  {name:28s} not collected (--overlap with --dump, or a dump made with it)")
            continue
        coefficient, t = term_fit(rows, term, within)
        print(f"  {name:28s} {coefficient:+9.3f} {unit:34s} t {t:+5.1f}")


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def kept(rows: list[dict[str, Any]], argv: list[str]) -> list[dict[str, Any]]:
    """The rows every `--where FEATURE=VALUE` keeps (the value as the table prints it)."""
    for k, word in enumerate(argv):
        if word == "--where":
            name, _, value = argv[k + 1].partition("=")
            rows = [row for row in rows if str(row.get(name)) == value]
    return rows


def main(argv: list[str]) -> int:
    within = option(argv, "--within") or "device"
    if within not in WITHIN:
        print(f"bench/trends.py: --within {within}: one of {', '.join(WITHIN)}", file=sys.stderr)
        return 2
    dumped = option(argv, "--rows")
    if "--fp8-pairs" in argv:
        print(f"machine: {machine()}")
    priced = twin_rows(public_runs()) if "--fp8-pairs" in argv and not dumped else None
    rows = (
        json.loads(Path(dumped).read_text())
        if dumped
        else collect(priced, classes="--classes" in argv, overlap="--overlap" in argv)
    )
    if dump := option(argv, "--dump"):
        Path(dump).write_text(json.dumps(rows, indent=1))
    rows = kept(rows, argv)
    if not rows:
        print("bench/trends.py: --where keeps no row", file=sys.stderr)
        return 2
    if tables := [argv[k + 1].split(",") for k, word in enumerate(argv) if word == "--cells"]:
        unknown = sorted({name for names in tables for name in names if name not in rows[0]})
        if unknown or any(len(names) > 2 for names in tables):
            said = f"{', '.join(unknown)}: not a feature" if unknown else "one feature or two, comma-separated"
            print(f"bench/trends.py: --cells: {said}", file=sys.stderr)
            return 2
        print(f"machine: {machine()}")
        print(f"{len(rows)} rows; error: ppb's seconds over the published ones, minus one")
        for names in tables:
            print()
            print_cells(rows, names)
        return 0
    if "--table" in argv:
        print_table(rows)
        print()
    if "--pairs" in argv:
        print_pairs(rows)
        print()
    if "--fp8-pairs" in argv:
        print_fp8_pairs(rows)
        return 0
    if "--terms" in argv:
        print_terms(rows, within)
        print()
    print_trends(rows, within)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
