"""Balancer solve times for the sizes users ask of it, why each stopped and its gap: `python bench/balance.py`.

Cases (descriptions written below; memory chosen so that it binds):

* dsv3-like: 61 layers of two body kinds (3 dense + 58 MoE, five options, DeepSeek-V3-like figures
  from ppb describe on configs/deepseek-v3.yaml with COMM and BOTH added), P=16, V=2, m=32 and 64;
* the same at m=64 with the MTP layers apart from the loss (`mtp-apart`: the TAIL split, the MTP part on
  rank 14's last virtual stage), the second solve `ppb balance` makes for a Megatron run with MTP layers;
* 128 layers, one kind, five options, P=64, V=1, m=128;
* alternating kinds: 32 layers, light and heavy taking turns (dense and MoE every other layer, kept in
  model order, so a body type per layer), three options, P=4, V=1, m=8, 800 MB; beside it the same
  16 light and 16 heavy layers grouped as two body types (another model: what model order costs);
* SAPP's example llama2_70b.json (mindspore-ai/hyper-parallel `sapp_ppb/layers/llama2_70b.json`, in
  tests/data) at P=16, m=32, V=1 and V=2, 56000 MB; at V=2 the plan SAPP
  printed (offset and recompute; its other layers given the fastest options that fit, the most
  favourable reading) is simulated beside ours.

Each case is solved twice: the closed form alone (`--closed-form`) and the default (the schedule's
critical path), each with no wall-clock limit unless `--time-limit` gives one (the solver's own
default: its work limits end it). The seconds column is wall-clock, with the process's CPU seconds
beside it. `proven at` is when the solve
first proved its plan optimal (gap ≤ 1e-6: a round of the program, or the probing of the stage
choices, `balance.probing`), before the tie-breaking among equally fast plans that follows, with
this process's CPU seconds by then beside it (on a loaded machine the wall
clock says more about the other processes); the total is the seconds column. With `--ceiling`,
each critical-path solve is followed by the least T of the program's relaxation with every path of the schedule as a row
(`bounds.every_path_bound`, over the stage choices that can beat the plan found): no set of path
rows proves more than this without branching, so a gap above it is the stage choices'
integrality. The issue's two instances are `dsv3-like P16 V2 m64` and `128 layers P64 V1`. Runs
on one core (the process is pinned to CPU 0 where the OS allows). Prints the machine, then one line per solve.

`--large` runs `ppb balance RUN --json` on the largest programs instead (the default solve, the
Megatron-Core settings beside it, the report, any solve again for memory: `balance.fitting`), each a run
config of a spec model of 1,024 layers (hidden 1,024, 16 heads, FFN 4,096, vocabulary 32,000, 2,048 tokens,
h100-80gb; the sizes ppb's limits allow, `ppb_core/limits.py`): `1024 layers P64 V8` (interleaved, m=256)
and `1024 layers P512 V1` (1F1B, m=256). Each step a person waits on (a round, a Megatron-Core setting
starting, a bound, a listing cut, a solve again) is printed as it ends with the wall-clock and CPU seconds
since the command started and since the step before: seconds per round. They take minutes; `--only` picks
one.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import os
import sys
import time
from pathlib import Path

from _measure import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppb_core.balance import BalanceInput, solve  # noqa: E402
from ppb_core.balance.baselines import baselines, best_feasible  # noqa: E402
from ppb_core.balance.bounds import every_path_bound  # noqa: E402
from ppb_core.balance.choices import Catalogue  # noqa: E402
from ppb_core.balance.outputs import plan_from_yaml  # noqa: E402
from ppb_core.balance.plan import Plan, freeze  # noqa: E402
from ppb_core.balance.program import choices_within  # noqa: E402
from ppb_core.balance.progress import Clock  # noqa: E402
from ppb_core.model.switches import OPTIONS  # noqa: E402
from ppb_core.payload.sapp import layer_set, read_layer_set  # noqa: E402
from ppb_core.units import percent_words  # noqa: E402

DSV3_LIKE = [
    {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 0.0041, "backward_time": 0.0102, "memory_parameter": 5385},
    {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": 3,
        "time": 1.0,
        "memory_parameter": 3390,
        "memory_activation": 1330,
        "memory_select_rec": 546,
        "memory_select_comm": 1100,
        "memory_both_comm_select": 420,
        "memory_recompute": 56,
        "backward_time": 2.02,
        "select_rec_time": 2.15,
        "select_comm_time": 2.10,
        "both_comm_select_time": 2.25,
        "recompute_time": 3.02,
    },
    {
        "name": "BODY_1",
        "type": "BODY",
        "nb_layer": 58,
        "time": 3.15,
        "memory_parameter": 3818,
        "memory_activation": 2228,
        "memory_select_rec": 1444,
        "memory_select_comm": 1900,
        "memory_both_comm_select": 1150,
        "memory_recompute": 56,
        "backward_time": 4.17,
        "select_rec_time": 4.30,
        "select_comm_time": 4.28,
        "both_comm_select_time": 4.42,
        "recompute_time": 7.33,
    },
    {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 6.43, "backward_time": 10.06, "memory_parameter": 21846},
]
# The same with Megatron-Core's standalone MTP (`balance.mtp_apart`): the TAIL split as `ppb describe`
# splits configs/deepseek-v3.yaml's (describe_mtp_apart: the MTP part 45.7% of the TAIL's forward and
# 49.3% of its backward, 44.5% of its memory held once and 10.1% per micro-batch in flight), on rank 14's
# last virtual stage, the loss alone on rank 15's.
MTP_PART = {"name": "MTP", "type": "TAIL", "nb_layer": 1, "time": 2.94, "backward_time": 4.96}
MTP_PART |= {"memory_parameter": 9729, "memory_activation": 2201}
OUTPUT_PART = {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 3.49, "backward_time": 5.10}
OUTPUT_PART |= {"memory_parameter": 9916}


def _mtp_apart(micro_batches: int) -> BalanceInput:
    parts = layer_set([*DSV3_LIKE[:-1], MTP_PART, OUTPUT_PART])
    apart = tuple(t for t in parts.tails if t.name == "MTP")
    output = dataclasses.replace(parts, tails=tuple(t for t in parts.tails if t.name != "MTP"))
    return BalanceInput(output, 16, micro_batches, 2, 77559.0, mtp_layers=1, mtp_cell=(1, 14), mtp_apart=apart)


LAYERS_128 = [
    {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 0.5, "memory_parameter": 4000},
    {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": 128,
        "time": 1.0,
        "memory_parameter": 1500,
        "memory_activation": 900,
        "memory_select_rec": 600,
        "memory_select_comm": 800,
        "memory_both_comm_select": 500,
        "memory_recompute": 40,
    },
    {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1.2, "memory_parameter": 5000},
]


def _alternating_kinds(grouped: bool = False) -> list[dict]:
    """32 body layers, light and heavy taking turns (a body type each, as a model whose kinds alternate is
    described), or with *grouped* the 16 light then the 16 heavy as two body types."""

    def kind(name: str, count: int, time_: float, parameter: int, activation: int, slct: int, full: int) -> dict:
        return {
            "name": name,
            "type": "BODY",
            "nb_layer": count,
            "time": time_,
            "memory_parameter": parameter,
            "memory_activation": activation,
            "memory_select_rec": slct,
            "memory_recompute": full,
        }

    light, heavy = (1.0, 20, 30, 14, 2), (2.5, 45, 50, 26, 3)
    if grouped:
        bodies = [kind("BODY_0", 16, *light), kind("BODY_1", 16, *heavy)]
    else:
        bodies = [kind(f"BODY_{i}", 1, *(light if i % 2 == 0 else heavy)) for i in range(32)]
    return [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 0.5, "memory_parameter": 60},
        *bodies,
        {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1.5, "memory_parameter": 120},
    ]


def _sapp_printed_plan(problem: BalanceInput) -> Plan:
    """SAPP's printed llama2_70b V=2 plan; the layers it does not fully recompute get, per stage,
    the options of least total backward time that fit (select_recompute was not printed)."""
    base = plan_from_yaml(
        problem, {"offset": [[0] * 14 + [1, 1], [0] * 15 + [-2]], "recompute": [[3, 1, 1, 1, 1] + [0] * 11, [0] * 16]}
    )
    counts = [[[list(cell) for cell in row] for row in body] for body in base.counts]
    others = [o for o in ("BOTH", "SLCT", "COMM", "NONE") if o in problem.options]
    for s in range(problem.stages):
        best = None
        per_cell = []
        for v in range(problem.chunks):
            full = base.cell_options(v, s)[OPTIONS.index("FULL")]
            rest = base.cell_layers(v, s) - full
            per_cell.append([(full, seq) for seq in itertools.combinations_with_replacement(others, rest)])
        for combo in itertools.product(*per_cell):
            trial = [[[list(cell) for cell in row] for row in body] for body in counts]
            for v, (full, seq) in enumerate(combo):
                cell = [0] * len(OPTIONS)
                cell[OPTIONS.index("FULL")] = full
                for option in seq:
                    cell[OPTIONS.index(option)] += 1
                trial[0][v][s] = cell
            plan = Plan(problem, freeze(trial))
            if plan.exact_stage_memory(s) <= problem.memory_mb:
                backward = sum(plan.cell_backward[v][s] for v in range(problem.chunks))
                if best is None or backward < best[0]:
                    best = (backward, trial)
        counts = best[1]
    return Plan(problem, freeze(counts))


class _ProvenAt:
    """Progress hook: the seconds at which the solve first proved its incumbent optimal (gap ≤ 1e-6),
    before the tie-breaking among equally fast plans that follows."""

    def __init__(self, exact: bool) -> None:
        self.seconds: float | None = None
        self.cpu_seconds: float | None = None  # this process's CPU time by then: a shared machine's load aside
        self.cpu_started = time.process_time()
        self.armed = not exact  # the critical path's rounds come after the start plan

    def __call__(self, progress) -> None:
        self.armed = self.armed or progress.phase == "start_plan"
        if self.armed and self.seconds is None and progress.phase in ("round", "bound", "closed_form", "done"):
            gap = progress.gap
            if gap is not None and gap <= 1e-6:
                self.seconds = progress.seconds
                self.cpu_seconds = time.process_time() - self.cpu_started


def _line(name: str, mode: str, solution, seconds: float, proven: _ProvenAt, cpu_seconds: float) -> str:
    plan = solution.plan
    simulated = f"{plan.iteration_time:.6g}" if plan else "—"
    objective = f"{solution.objective:.6g}" if solution.objective is not None else "—"
    bound = f"{solution.bound:.6g}" if solution.bound is not None else "—"
    gap = percent_words(solution.gap) if solution.gap is not None else "—"
    return (
        f"{name:<22} {mode:<12} {solution.stopped_by:<10} {seconds:7.2f}s (CPU {cpu_seconds:.2f}s)  "
        f"objective {objective:<10} "
        f"bound {bound:<10} gap {gap:<7} simulated {simulated:<10} choices {solution.choices}  "
        f"proven {'no' if proven.seconds is None else f'at {proven.seconds:.2f}s (CPU {proven.cpu_seconds:.2f}s)'}"
    )


# The spec model of `--large` (docstring): Megatron-LM's defaults for the rest (GPT, no MTP).
LARGE_RUN = """\
models:
  - name: llm
    spec: {vocab_size: 32000, hidden_size: 1024, num_layers: 1024, num_attention_heads: 16,
           intermediate_size: 4096, max_position_embeddings: 2048}
parallel: {dp: 1, tp: 1, pp: PP, vpp: VPP, cp: 1, ep: 1, schedule: SCHEDULE, world_size: PP}
training: {seq_length: 2048, micro_batch_size: 1, micro_batches: 256, dtype: bf16}
device: {name: h100-80gb}
"""
LARGE_SIZES = (("1024 layers P64 V8", 64, 8, "interleaved"), ("1024 layers P512 V1", 512, 1, "1f1b"))
# the steps `--large` prints (the others, hundreds, only update a spinner in `ppb balance`)
LARGE_STEPS = (
    "start",
    "listing",
    "closed_form",
    "start_plan",
    "bound",
    "round",
    "stopped",
    "setting_start",
    "megatron",
    "memory_refit",
    "done",
)


class _Steps:
    """Progress hook printing the steps a person waits on (`LARGE_STEPS`) with wall and CPU seconds, in all and
    since the step before (the figures in seconds: *unit_s*, as `ppb balance` shows them)."""

    def __init__(self, unit_s: float | None) -> None:
        self.unit_s = unit_s
        self.started, self.cpu_started = time.perf_counter(), time.process_time()
        self.last = (0.0, 0.0)

    def __call__(self, progress) -> None:
        if progress.phase not in LARGE_STEPS:
            return
        wall, cpu = time.perf_counter() - self.started, time.process_time() - self.cpu_started
        shown = dataclasses.replace(progress, unit_s=self.unit_s).line().split("] ", 1)[1]
        print(
            f"  {wall:8.1f} s (CPU {cpu:7.1f} s)  +{wall - self.last[0]:7.1f} s (CPU +{cpu - self.last[1]:6.1f} s)  "
            f"{shown}",
            file=sys.__stdout__,  # `large` captures the command's stdout (its JSON)
            flush=True,
        )
        self.last = (wall, cpu)


def large(only: str | None, time_limit: float | None) -> None:
    """`--large`: `ppb balance RUN --json` of each large case in this process, its progress hook printing the
    steps (`_Steps`) in place of the spinner; then the whole command's seconds and its answer."""
    import io
    import json
    import tempfile

    import ppb_core.cli.balance as balance_command
    from ppb_core.cli.main import main as ppb

    @contextlib.contextmanager
    def steps_hook(quiet: bool = False, unit_s: float | None = None):
        yield _Steps(unit_s)

    balance_command.progress_hook = steps_hook
    for name, pp, vpp, schedule in LARGE_SIZES:
        if only and only not in name:
            continue
        print(f"{name}: m=256 {schedule}", flush=True)
        with tempfile.TemporaryDirectory() as folder:
            run = Path(folder) / "run.yaml"
            run.write_text(LARGE_RUN.replace("VPP", str(vpp)).replace("PP", str(pp)).replace("SCHEDULE", schedule))
            limit = [] if time_limit is None else ["-t", str(time_limit)]
            out = io.StringIO()
            started, cpu_started = time.perf_counter(), time.process_time()
            with contextlib.redirect_stdout(out):
                ppb(["balance", str(run), "--json", *limit])
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        result = json.loads(out.getvalue())
        gap = "—" if result.get("gap") is None else percent_words(result["gap"])
        seconds = (result.get("iteration") or {}).get("seconds")
        print(
            f"{name:<22} {result.get('stopped_by', '—'):<10} {wall:8.1f} s (CPU {cpu:.1f} s)  "
            f"iteration {'—' if seconds is None else f'{seconds:.3f} s'}  gap {gap}  "
            f"memory margin {result.get('memory_margin_mb', 0)} MB",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=None, help="a wall-clock limit per solve (default: none)")
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--ceiling", action="store_true", help="also the relaxation's bound with every path as a row")
    parser.add_argument("--large", action="store_true", help="the largest programs instead, step by step (minutes)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {0})
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {machine()}; {cpus} CPUs used")
    from importlib.metadata import version

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    limit = "none" if args.time_limit is None else f"{args.time_limit:g} s"
    print(f"highspy {version('highspy')}; time limit {limit} per solve; load average {load:.2f}")
    if args.large:
        large(args.only, args.time_limit)
        return
    llama = read_layer_set(ROOT / "tests" / "data" / "llama2_70b.json")
    cases = [
        ("dsv3-like P16 V2 m32", BalanceInput(layer_set(DSV3_LIKE), 16, 32, 2, 77559.0)),
        ("dsv3-like P16 V2 m64", BalanceInput(layer_set(DSV3_LIKE), 16, 64, 2, 77559.0)),
        ("mtp-apart dsv3-like P16 V2", _mtp_apart(64)),
        ("128 layers P64 V1", BalanceInput(layer_set(LAYERS_128), 64, 128, 1, 60000.0)),
        ("alternating 32 P4 V1", BalanceInput(layer_set(_alternating_kinds()), 4, 8, 1, 800.0)),
        ("grouped 16+16 P4 V1", BalanceInput(layer_set(_alternating_kinds(grouped=True)), 4, 8, 1, 800.0)),
        ("llama2_70b P16 V1", BalanceInput(llama, 16, 32, 1, 56000.0)),
        ("llama2_70b P16 V2", BalanceInput(llama, 16, 32, 2, 56000.0)),
    ]
    for name, problem in cases:
        if args.only and args.only not in name:
            continue
        best = best_feasible(baselines(problem))
        for mode, exact in (("closed-form", False), ("critical", True)):
            proven = _ProvenAt(exact)
            started, cpu_started = time.perf_counter(), time.process_time()
            solution = solve(problem, time_limit=args.time_limit, exact=exact, progress=proven)
            cpu = time.process_time() - cpu_started
            print(_line(name, mode, solution, time.perf_counter() - started, proven, cpu), flush=True)
            if exact and args.ceiling and solution.objective is not None:
                started = time.perf_counter()
                choices = choices_within(problem, Catalogue(problem), solution.objective, closed_form=False)
                ceiling = every_path_bound(
                    problem, choices, Clock(None if args.time_limit is None else 10 * args.time_limit)
                )
                print(
                    f"{'':<22} every path as a row, choices relaxed: bound "
                    f"{'—' if ceiling is None else f'{ceiling:.6g}'} ({time.perf_counter() - started:.1f} s)"
                )
            if exact and solution.plan is not None and best is not None:
                print(
                    f"{'':<22} best uniform split ({best.option}) simulated {best.iteration_time:.6g}: "
                    f"speedup {best.iteration_time / solution.plan.iteration_time:.3f}"
                )
        if name == "llama2_70b P16 V2":
            reference = _sapp_printed_plan(problem)
            print(
                f"{'':<22} SAPP's printed plan (best reading): fits {reference.fits}, simulated "
                f"{reference.iteration_time:.6g}, closed form {reference.closed_form_time:.6g}"
            )


if __name__ == "__main__":
    main()
