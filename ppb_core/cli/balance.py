"""`ppb balance (RUN.yaml | layers.json)`: split the layers over the pipeline and choose their recompute.

Where the sizes come from, and what stops a solve, is the command's help (`cli.arguments`). From a
run config every time is given in seconds (`estimate.seconds.plan_in_seconds`); from a layers.json
in the file's own unit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ppb_core import limits
from ppb_core.balance.fitting import fitting_placement
from ppb_core.balance.megatron import selective_modules
from ppb_core.balance.megatron_text import megatron_lines
from ppb_core.balance.mtp_apart import standalone_problem
from ppb_core.balance.outputs import interleave_keys, says_yaml_keys
from ppb_core.balance.problem import BalanceInput, run_problem
from ppb_core.balance.progress import WorkLimits
from ppb_core.balance.result import MAX_INTERLEAVE, balance
from ppb_core.balance.stopped import stopped_words
from ppb_core.balance.torchtitan_plan import add_torchtitan, torchtitan_lines
from ppb_core.balance.torchtitan_settings import op_policy
from ppb_core.balance.torchtitan_settings import runnable as torchtitan_runnable
from ppb_core.cli.calibrations import applied as applied_calibrations
from ppb_core.cli.calibrations import print_memory_calibration, print_time_calibration
from ppb_core.cli.console import progress_hook, table_console, warn_if_clock_stopped
from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError, shown
from ppb_core.estimate.held_back import held_back_line, thin_headroom
from ppb_core.estimate.inputs import load_run
from ppb_core.estimate.plan import iteration_price, plan_overrun_mb, speedup_words, time_unit_s, with_stage_peaks
from ppb_core.estimate.run import device_summary
from ppb_core.estimate.seconds import plan_in_seconds
from ppb_core.io import atomic_write_text, check_output
from ppb_core.payload.run import describe_run
from ppb_core.payload.sapp import layer_set, read_sapp_file
from ppb_core.schedules import SCHEDULES
from ppb_core.units import counted, percent_words

# SAPP's own defaults (`run_pipeline_balance.py`) but its 90 s time limit: ppb's search ends on work limits
SAPP_DEFAULTS = {"stages": 4, "micro_batches": 4, "interleave": 1, "memory": 56000.0}


def _positive(value: Any, name: str, source: str, limit: float = math.inf, what: str = "") -> None:
    """A flag's number: finite, positive, within its limit (`ppb_core.limits`)."""
    if value is None:
        return
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InputError(source, name, f"must be positive and finite, got {shown(value)}")
    if value > limit:
        raise InputError(source, name, limits.over(value, limit, what))


def _check_sizes(stages: int, chunks: int, micro_batches: int, args: argparse.Namespace, source: str) -> None:
    """The pipeline's sizes, as the flags or the run config give them, within ppb's limits before any work."""
    given = [
        flag
        for flag, name in (("-s", "stages"), ("-i", "interleave"), ("-mb", "micro_batches"))
        if getattr(args, name) is not None
    ]
    field = "/".join(given) if given else "training.micro_batches"
    limits.check_schedule(stages, chunks, micro_batches, source, field)


def problem_from_args(args: argparse.Namespace) -> tuple[Any, bool, Any]:
    """The balancing problem the arguments describe, whether to search the interleave, and the run
    config (None for a layers.json)."""
    source = str(args.source)
    path = Path(source)
    _positive(args.stages, "--stages", source, limits.STAGES, "pipeline stages")
    _positive(args.micro_batches, "--micro-batches", source, limits.MICRO_BATCHES, "micro-batches")
    _positive(args.memory, "--memory", source, limits.DEVICE_MEMORY_MB, "MB")
    _positive(args.time_limit, "--time-limit", source)
    _positive(args.work, "--work", source, limits.BALANCE_WORK, "times the work limits")
    if args.constant_memory is not None:
        if not math.isfinite(args.constant_memory):
            raise InputError(source, "--constant-memory", f"must be a finite number of MB, got {args.constant_memory}")
        if args.constant_memory < 0:
            raise InputError(source, "--constant-memory", f"must not be negative, got {args.constant_memory}")
        if args.constant_memory > limits.DEVICE_MEMORY_MB:
            raise InputError(
                source, "--constant-memory", limits.over(args.constant_memory, limits.DEVICE_MEMORY_MB, "MB")
            )
    if args.mtp_layers is not None and args.mtp_layers < 0:
        raise InputError(source, "--mtp-layers", f"must not be negative, got {args.mtp_layers}")
    if args.mtp_layers is not None and args.mtp_layers > limits.LAYERS:  # the plan's layout writes one "m" each
        raise InputError(source, "--mtp-layers", limits.over(args.mtp_layers, limits.LAYERS, "layers"))
    if args.schedule is not None and args.schedule not in SCHEDULES:
        raise InputError(source, "--schedule", f"{shown(args.schedule)} is not one of {', '.join(SCHEDULES)}")
    interleave_text = args.interleave
    search = interleave_text == "auto"
    interleave = None
    if interleave_text is not None and not search:
        try:
            interleave = int(interleave_text)
        except ValueError:
            raise InputError(
                source, "--interleave", f"must be a positive integer or 'auto', got {shown(interleave_text)}"
            ) from None
        _positive(interleave, "--interleave", source, limits.CHUNKS, "chunks per stage")
    from_run = path.suffix.lower() in (".yaml", ".yml")
    if args.out and not from_run:
        check_output(args.out, inputs=(path,))
    if from_run:
        run = load_run(path)
        if args.out:  # nor over a file the run config names
            check_output(args.out, inputs=(path, *run.files_read()))
        par = run.parallel
        _check_sizes(
            args.stages or par.pp,
            MAX_INTERLEAVE if search else interleave or par.vpp,
            args.micro_batches or run.training.micro_batches,
            args,
            source,
        )
        schedule = args.schedule
        if search and (schedule or run.parallel.schedule) == "interleaved":
            schedule = "1f1b"  # each V runs its own: 1F1B at V = 1, interleaved above
        problem = run_problem(
            run,
            describe_run(run),
            stages=args.stages,
            micro_batches=args.micro_batches,
            chunks=interleave,
            memory_mb=args.memory,
            schedule=schedule,
            constant_memory_mb=args.constant_memory,
        )
        if args.stages is not None and args.stages != par.pp:  # `estimate.plan.sized_like`: dp, tp, cp kept
            devices = par.dp * par.tp * par.cp * args.stages
            said = (
                f"-s {args.stages}: priced at dp {par.dp} · tp {par.tp} · cp {par.cp} · pp {args.stages} = "
                f"{devices:,} devices, the run config's {par.dp * par.tp * par.cp * par.pp:,} at pp {par.pp}"
            )
            print(f"ppb balance {source}: note: {said}", file=sys.stderr)
        group = par.microbatch_group_size_per_vp_stage
        if group is not None and problem.group is None:  # `run_problem`: another size runs Megatron's default
            said = (
                f"parallel.microbatch_group_size_per_vp_stage {group} is the run's at its sizes; these plan at "
                f"Megatron's default group (pp {problem.stages})"
            )
            print(f"ppb balance {source}: note: {said}", file=sys.stderr)
        if args.mtp_layers is not None and args.mtp_layers != problem.mtp_layers:
            # the descriptions are the run config's: its TAIL holds its models' MTP layers, no other count
            raise InputError(
                source,
                "--mtp-layers",
                f"{args.mtp_layers} MTP layers, but the run config's models hold {problem.mtp_layers} (their "
                "mtp_layers); the flag says a layers.json's",
            )
        if args.framework is not None:
            problem = dataclasses.replace(
                problem,
                framework=args.framework or problem.framework,
            )
    else:
        run = None
        schedule = args.schedule or "1f1b"
        if search and schedule == "interleaved":
            schedule = "1f1b"
        _check_sizes(
            args.stages or SAPP_DEFAULTS["stages"],
            MAX_INTERLEAVE if search else interleave or SAPP_DEFAULTS["interleave"],
            args.micro_batches or SAPP_DEFAULTS["micro_batches"],
            args,
            source,
        )
        descriptions, stage_const_mem = read_sapp_file(path)
        problem = BalanceInput(
            layer_set(descriptions, source),
            args.stages or SAPP_DEFAULTS["stages"],
            args.micro_batches or SAPP_DEFAULTS["micro_batches"],
            interleave or SAPP_DEFAULTS["interleave"],
            float(args.memory or SAPP_DEFAULTS["memory"]),
            float(stage_const_mem if args.constant_memory is None else args.constant_memory),
            schedule,
            source,
            args.framework or "mindformers",
            args.mtp_layers or 0,
        )
    if problem.framework == "torchtitan":  # what torchtitan cannot run is not offered (`torchtitan_settings`)
        op = run is not None and op_policy(run.training.recompute)
        problem = dataclasses.replace(problem, layers=torchtitan_runnable(problem.layers, op))
    if args.schedule is not None and not search:
        _schedule_against_chunks(args, problem, run is not None)
    return problem, search, run


def _schedule_against_chunks(args: argparse.Namespace, problem: BalanceInput, from_run: bool) -> None:
    """A `--schedule` the chunks change, said: 1F1B at V > 1 runs interleaved and interleaved at V = 1 plain 1F1B
    (`schedules.canonical`, as Megatron-LM runs them), where `--schedule 1f1b` on a run config of 2 chunks went
    interleaved without a word; GPipe over several chunks a run config refuses (`ParallelConfig`), so here too."""
    said, runs, chunks = args.schedule.lower(), problem.schedule_name, problem.chunks
    source = "-i" if args.interleave is not None else ("parallel.vpp" if from_run else "-i's default")
    if said == "gpipe" and chunks > 1 and from_run:
        raise InputError(
            problem.source,
            "--schedule",
            f"gpipe runs one chunk a stage, V={chunks} here ({source}): a run config runs its chunks interleaved",
        )
    if runs != said:
        other = "-i 1 for one chunk a stage" if chunks > 1 else "-i 2 or more to interleave chunks"
        print(
            f"ppb balance {problem.source}: note: --schedule {said} at V={chunks} ({source}) runs {runs}; {other}",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    problem, search, run_config = problem_from_args(args)
    time_limit = args.time_limit
    unit_s = time_unit_s(run_config, problem.describe()) if run_config is not None else None
    # a Megatron run with MTP layers: also the MTP layers apart from the loss, the faster kept
    apart = standalone_problem(run_config, problem) if run_config is not None else None
    work = None if args.work == 1 else WorkLimits().scaled(args.work)
    # the plan fits as `ppb check` prices it (`balance.fitting`), unless the user set the constant; the uniform
    # splits are judged by the same (`baselines.Baseline.feasible`)
    overrun = plan_overrun_mb(run_config) if run_config is not None and args.constant_memory is None else None
    started = time.perf_counter()
    with progress_hook(args.quiet, unit_s) as hook:
        result = fitting_placement(
            problem,
            apart,
            lambda placed, **cuts: balance(
                placed,
                time_limit,
                exact=not args.closed_form,
                search_interleave=search,
                progress=hook,
                modules=selective_modules(run_config),
                # the best uniform split replaces a plan it beats by the iteration (`faster_uniform`)
                price=iteration_price(run_config) if run_config is not None else None,
                overrun=overrun,
                limits=work,
                **cuts,
            ),
            overrun,
            hook,
        )
    solve_s = time.perf_counter() - started  # wall clock: the text summary's, never the JSON's (not repeatable)
    if result.get("cells"):  # with no plan the refusal below says what stopped it
        warn_if_clock_stopped("ppb balance", result, time_limit)
    if run_config is not None:
        add_torchtitan(result, run_config)  # a torchtitan run's job TOML lines
        result = plan_in_seconds(run_config, result)  # every time in seconds, the plan's iteration priced
        result = with_stage_peaks(run_config, result)  # each stage's peak as `ppb check` prices the plan
        result.update(applied_calibrations(run_config))  # which measured files priced the plan, and their fit
    text = json.dumps(result, indent=2)
    if result["status"] == "infeasible":
        # the JSON still says why; no plan file, and the one-line error and exit status of bad input
        if args.json:
            print(text)
        raise InputError(problem.source, "memory", result.get("message", "no plan fits"))
    if not result.get("cells"):
        # the limits ended the search before any plan, and nothing proves none fits: no plan file, the
        # one-line error and exit status of bad input, naming what to raise
        if args.json:
            print(text)
        raise InputError(problem.source, *_no_plan(result, args))
    if args.out:
        atomic_write_text(args.out, text + "\n")
    if args.json:
        print(text)
    else:
        # a run config's peaks are allocated, the device's reserved memory aside (`estimate.plan._peak_mb`):
        # the memory they are held to is said in the same frame
        memory_from = ""
        if run_config is not None:
            memory_from = "--memory" if args.memory is not None else "the device less device.reserved_mb"
        render(result, solve_s, memory_from)
        if run_config is not None and args.memory is None:
            _say_held_back(run_config, result)
    return 0


def _say_held_back(run: RunConfig, result: dict[str, Any]) -> None:
    """What the device holds back for the runtime, and the plan's stages whose free memory is below what the
    runtime takes beyond it (`estimate.held_back`), as `ppb estimate` and `ppb check` say them."""
    device = device_summary(run)
    console = table_console()
    console.print(escape(held_back_line(device)))
    usable = run.device.usable_mb
    free = (
        (row["stage"], usable - row["peak_mb"] - row.get("allocator_mb", 0.0))
        for row in result.get("stages", [])
        if "peak_mb" in row
    )
    for warning in thin_headroom(device, free):
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")


def _no_plan(result: dict[str, Any], args: argparse.Namespace) -> tuple[str, str]:
    """(flag, words) for a solve that ended before any plan, proving none fits or not: the flag to raise."""
    found = result.get("message", "no plan found")
    if result.get("stopped_by") == "time_limit":
        return "--time-limit", f"{found}: the time limit ({args.time_limit:g} s) stopped the search first; raise it"
    return "--work", f"{found}: the work limits (--work {args.work:g}) stopped the search first; raise --work"


FILE_UNIT = ", in the file's time unit"


_UNIFORM_NOTE = re.compile(
    r"the uniform split \((\w+)\) is faster by the iteration: (\S+) s against the plan's (\S+) s"
)


def _dotted(keys: dict[str, Any], at: str = "") -> list[tuple[str, Any]]:
    """Nested yaml keys as (dotted path, value) lines: `model.model_config.pp_interleave_num: 2`."""
    lines: list[tuple[str, Any]] = []
    for key, value in keys.items():
        path = f"{at}.{key}" if at else key
        lines += _dotted(value, path) if isinstance(value, dict) else [(path, json.dumps(value))]
    return lines


def _uniform_replaced(result: dict[str, Any]) -> tuple[str, float, float] | None:
    """(option, its iteration s, the balancer's plan's s) where the best uniform split replaced the plan
    (`faster_uniform.prefer_uniform`'s solver note), else None."""
    for note in (result.get("solver") or {}).get("notes", []):
        found = _UNIFORM_NOTE.match(note)
        if found:
            return found[1], float(found[2]), float(found[3])
    return None


def _number(value: float | None, digits: int = 6) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _percent(fraction: float | None) -> str:
    return "—" if fraction is None else percent_words(fraction)


def _print_yaml(console: Console, result: dict[str, Any], given: dict[str, Any]) -> None:
    """The plan as MindFormers / HyperParallel yaml keys (`balance.outputs`: SAPP's yaml_from_internal lists)."""
    console.print("To put in the MindFormers / HyperParallel yaml:")
    for key in ("offset", "recompute", "select_recompute", "select_comm_recompute"):
        console.print(f"  {key}: {result[key]}")
    if given.get("schedule") == "dualpipev":
        # MindSpore's `pipeline_config.pipeline_scheduler` (a05ce588 `set_pipeline_config`: 1f1b, gpipe, seqpipe,
        # seqvpp, seqsmartvpp) has no DualPipeV, and MindFormers' `LayerSetting` (fd4deebc) places chunk 1 in stage
        # order, not DualPipeV's V: the interleave keys would run these counts as interleaved 1F1B, with the
        # model's last layers on another stage than the plan priced. Until session 34 they were printed.
        console.print(
            "  (MindFormers runs no DualPipeV: MindSpore's pipeline_scheduler has no such schedule and MindFormers "
            "places chunk 1 in stage order; the lists are the cells' layers as DualPipeV holds them, chunk 1 "
            "stage 0 the model's last)"
        )
    else:
        for key, value in _dotted(interleave_keys(given["interleave"])):
            console.print(escape(f"  {key}: {value}"))
    empty = [
        f"(chunk {v}, stage {s})"
        for v, row in enumerate(result.get("cells") or [])
        for s, cell in enumerate(row)
        if not sum(cell["options"].values())
    ]
    # `BalanceInput.reserved_cells`: Megatron-Core runs a virtual stage of E or L alone (with MTP layers,
    # which MindFormers counts as layers, the cells say less: no note)
    if empty and not given.get("mtp_layers"):
        console.print(
            f"  (cell {', '.join(empty)} holds no layer, as Megatron-Core runs it; MindFormers places layers "
            "only, and needs one in every cell)"
        )


def render(result: dict[str, Any], solve_s: float, memory_from: str = "") -> None:
    """The plan as rich tables: a summary (with the *solve_s* wall-clock seconds the solve took), the
    stages, the yaml to paste, Megatron-LM flags, torchtitan TOML lines, baselines. *memory_from* says where
    a run config's memory comes from (the frame of every peak printed: allocated, reserved_mb aside)."""

    console = table_console()
    given = result["input"]
    console.print(
        f"[bold]ppb balance[/bold] {escape(str(given['source']))}: P={given['stages']} m={given['micro_batches']} "
        f"V={given['interleave']} {given['schedule']} memory {given['memory_mb']:,g} MB"
        + (f" usable ({memory_from})" if memory_from else "")
        + (
            f", {given['constant_memory_mb']:,g} MB of it held by every stage besides its layers"
            if given["constant_memory_mb"]
            else ""
        )
        + (
            # `balance.fitting`: what the descriptions' whole-MB truncation left out of a stage filled to the last MB
            f" ({result['memory_margin_mb']:,g} MB of that so the plan fits as `ppb check` prices it)"
            if result.get("memory_margin_mb")
            else ""
        )
        + (f", the {given['framework']} rules" if given.get("framework") else "")
    )
    if result.get("overrun_mb"):  # `balance.fitting`: still over after its rounds
        console.print(
            f"[yellow]warning:[/yellow] the plan's fullest stage is {result['overrun_mb']:,.1f} MB over the memory "
            "as `ppb check` prices it"
        )
    print_memory_calibration(console, result)
    print_time_calibration(console, result)
    # From a run config every time is in seconds under a `_s` key (`plan_in_seconds`); from a
    # layers.json the times stay in the file's own unit, under the plain keys.
    in_s = "time_unit_s" in result
    suffix = "_s" if in_s else ""

    def time_of(entry: dict[str, Any], key: str) -> float | None:
        return entry.get(key + suffix)

    def timed(value: float | None, scale: float = 1e3) -> str:
        return _number(value) if not in_s or value is None else f"{value * scale:,.3f}"

    def seconds(value: float | None) -> str:
        return _number(value) if not in_s or value is None else f"{value:,.3f} s"

    objective = result["objective_s"] if in_s else result["objective"]
    console.print(
        f"status [bold]{result['status']}[/bold]  objective {seconds(objective)} "
        f"({result['objective_kind'].replace('_', ' ')}{'' if in_s else FILE_UNIT})  "
        f"bound {seconds(time_of(result, 'bound'))}  gap {_percent(result['gap'])}  in {solve_s:.2f} s: "
        f"{stopped_words(result['stopped_by'], result['status'])}"
    )
    if result.get("message"):
        console.print(escape(result["message"]))
    replaced = _uniform_replaced(result)
    if replaced is not None:  # `balance.faster_uniform`: the status line's proof and gap are the schedule's
        option, theirs, ours = replaced
        console.print(
            f"the uniform split ({option}) is the plan: faster by the iteration than the balancer's own "
            f"({theirs:,.3f} s against {ours:,.3f} s); the bound and gap above are the layers' schedule's"
        )

    time_name = "time ms" if in_s else "time"
    if "stages" in result:
        # from a run config each stage's peak as `ppb check` prices the plan (`with_stage_peaks`), the moment
        # that sets it beside; from a layers.json the balancer's own MB, all there is
        peaks = all("peak_mb" in row for row in result["stages"])
        table = Table(title="stages")
        columns = ("stage", "layers", "per chunk", "options", "peak MB" if peaks else "memory MB")
        for name in (*columns, *(("moment",) if peaks else ()), time_name, "bubble"):
            table.add_column(name, justify="right" if name not in ("options", "per chunk", "moment") else "left")
        for row in result["stages"]:
            options = " ".join(f"{k}:{v}" for k, v in row["options"].items() if v)
            table.add_row(
                str(row["stage"]),
                str(row["layers"]),
                str(row["layers_per_chunk"]),
                options,
                f"{row['peak_mb'] if peaks else row['memory_mb']:,.0f}",
                *((row["moment"],) if peaks else ()),
                timed(time_of(row, "time")),
                f"{row['bubble']:.1%}",
            )
        console.print(table)
        # a run config's plan is said in its framework's words only: a MindFormers run's in the yaml lines, a
        # Megatron run's as Megatron-LM flags, a torchtitan run's in its job TOML lines; a layers.json's, whoever
        # wrote it, in them all (the JSON and `-o` keep every form)
        if not in_s or says_yaml_keys(given.get("framework"), result["megatron"]):
            _print_yaml(console, result, given)
        others = given.get("framework") == "torchtitan" or (in_s and given.get("framework") == "mindformers")
        for line in [] if others else megatron_lines(result["megatron"]):
            console.print(escape(line), soft_wrap=True)
        for line in torchtitan_lines(result.get("torchtitan") or {}):
            console.print(escape(line), soft_wrap=True)
        ties = result.get("ties")
        if ties:
            # the room the memory model leaves on the fullest stage where it priced them, else the balancer's;
            # what the caching allocator reserves beyond the peak (torchtitan FSDP2's pools) is not room, as
            # `ppb check` counts it (its free MB; until session 34 this line left it in)
            fullest = max(row["peak_mb"] + row.get("allocator_mb", 0.0) for row in result["stages"]) if peaks else None
            free = ties["headroom_mb"] if fullest is None else given["memory_mb"] - fullest
            console.print(
                f"among equally fast plans: recompute time {seconds(time_of(ties, 'recompute_time'))}, "
                f"{counted(ties['recomputed_layers'], 'layer')} recomputed, "
                f"{counted(ties['stages_mixing_options'], 'stage')} mixing options, "
                f"{free:,.0f} MB free on the fullest stage"
            )
        closed = result["closed_form"]
        unit = " s of layers" if in_s else ""
        # a search cut short before the closed form's own program ran has no optimum of it: said, not "—"
        optimum = time_of(closed, "optimum")
        its = f"its optimum {seconds(optimum)}" if optimum is not None else "its own optimum not solved for"
        console.print(
            f"simulated iteration {timed(time_of(result, 'simulated_time'), 1)}{unit}; closed form "
            f"{seconds(time_of(closed, 'value'))} ({its})"
        )
    # `fits` says what the MB beside it says: the memory model's peak where the plan is held to it (a run config,
    # `balance.fitting`; `with_stage_peaks` gave the peak), else the balancer's own charge (a layers.json, or the
    # constant the user set), the best split chosen by the same (`baselines.Baseline.feasible`)
    by_peak = all(row.get("feasible_by") == "peak" and "peak_mb" in row for row in result["baselines"])
    table = Table(title="uniform split, one option for every layer")
    for name in ("option", "fits", "peak MB" if by_peak else "memory MB", "layers s" if in_s else "iteration"):
        table.add_column(name, justify="right")
    for row in result["baselines"]:
        table.add_row(
            row["option"],
            "yes" if row["feasible"] else "no",
            f"{row['peak_mb'] if by_peak else row['peak_memory_mb']:,.0f}",
            timed(time_of(row, "iteration_time"), 1),
        )
    console.print(table)
    if result.get("speedup"):
        console.print(f"speedup over the best uniform split: {speedup_words(result)}")
    labels = (("iteration", "plan"), ("megatron_iteration", "Megatron-LM's flags above (the plan it can say)"))
    for key, label in (*labels, ("baseline_iteration", "best uniform split")):
        if key in result:
            it = result[key]
            option = f" ({it['option']})" if "option" in it else ""
            console.print(
                f"{label}{option}: iteration {it['seconds']:,.3f} s, {it['tokens_per_second_per_device']:,.0f} "
                f"tokens/s per device, MFU {100 * it['mfu']:.1f}%, HFU {100 * it['hfu']:.1f}%"
            )
    if result.get("mtp_placement_gap"):
        console.print(
            f"over both MTP placements: bound {seconds(time_of(result, 'mtp_placement_bound'))}, "
            f"gap {percent_words(result['mtp_placement_gap'])} (a placement's solve ended unproven)"
        )
    for entry in result.get("mtp_placement", []):
        console.print(
            f"  MTP {'apart from the loss' if entry['mtp'] == 'apart' else 'with the loss'}: {entry['status']} "
            f"{seconds(time_of(entry, 'objective'))}{' (chosen)' if entry['chosen'] else ''}, layout {entry['layout']}"
        )
    for entry in result.get("interleave_search", []):
        console.print(
            f"  V={entry['interleave']}: {entry['status']} {seconds(time_of(entry, 'objective'))}"
            f"{' — ' + entry['message'] if entry.get('message') else ''}"
        )
