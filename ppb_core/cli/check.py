"""`ppb check RUN.yaml --plan PLAN`: a plan you already have, checked before you launch it (what PLAN may
be and what is checked: the command's description in `cli.arguments`)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from rich.markup import escape
from rich.table import Table

from ppb_core.balance.fitting import fitting_placement
from ppb_core.balance.megatron import selective_modules
from ppb_core.balance.megatron_run import vocabulary_note
from ppb_core.balance.megatron_text import megatron_lines
from ppb_core.balance.mtp_apart import standalone_problem
from ppb_core.balance.outputs import YAML_KEYS, cells, says_yaml_keys
from ppb_core.balance.plan import Plan
from ppb_core.balance.plan_recompute import plan_flags, run_for_plan
from ppb_core.balance.problem import run_problem
from ppb_core.balance.result import balance
from ppb_core.balance.stopped import ended_words
from ppb_core.balance.torchtitan_plan import add_torchtitan, torchtitan_lines
from ppb_core.balance.user_plan import read_plan
from ppb_core.cli.console import progress_hook, table_console, warn_if_clock_stopped
from ppb_core.errors import InputError
from ppb_core.estimate.check import check_plan
from ppb_core.estimate.held_back import held_back_line, thin_headroom
from ppb_core.estimate.inputs import load_run
from ppb_core.estimate.plan import iteration_price, plan_overrun_mb, time_unit_s
from ppb_core.estimate.run import device_summary
from ppb_core.payload.run import describe_run
from ppb_core.units import counted

EXIT_DOES_NOT_FIT = 1


def check(args: argparse.Namespace) -> dict[str, Any]:
    """The check as JSON."""
    if args.time_limit is not None and not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise InputError(None, "--time-limit", f"must be a positive number of seconds, got {args.time_limit}")
    run, recompute = run_for_plan(load_run(args.run), args.plan)
    # the plan read over every option (one the balancer would never choose is still the user's)
    every_option = run_problem(run, describe_run(run, withdrawing=False), runnable=False)
    modules = selective_modules(run)
    plan, form, mtp_cell = read_plan(every_option, args.plan, modules, run)
    bodies = every_option.describe()["bodies"]
    unit_s = time_unit_s(run, every_option.describe())
    evaluated = check_plan(run, cells(plan), bodies, mtp_cell)
    out: dict[str, Any] = {
        "run": str(args.run),
        "plan": args.plan,
        "form": form,
        **evaluated.to_json(),
        # the plan's recompute, priced in place of the run config's (None: the run config's holds)
        "plan_recompute": recompute,
        "notes": _notes(args.plan, form),
        "balancer": _balancer_figures(plan, unit_s, mtp_cell),
        # what the device holds back for the runtime, and the stages whose free memory is below what the
        # runtime takes beyond it (`estimate.held_back`)
        "device": device_summary(run),
    }
    out["held_back"] = held_back_line(out["device"])
    out["headroom_warnings"] = thin_headroom(out["device"], ((s.stage, s.free_mb) for s in evaluated.stages))
    over = evaluated.overflowing
    if over:
        worst = min(over, key=lambda stage: stage.free_mb)
        out["message"] = (
            f"stage {worst.stage} runs out of memory by {-worst.free_mb:,.0f} MB at its {worst.moment} "
            f"({worst.peak_mb:,.0f} of {worst.device_mb:,.0f} MB usable"
            + (f", and {worst.allocator_mb:,.0f} the allocator reserves beyond it" if worst.allocator_mb else "")
            + ")"
            + (f"; {counted(len(over) - 1, 'other stage')} too" if len(over) > 1 else "")
        )
    if not args.no_optimum:
        problem = run_problem(run, describe_run(run))
        overrun = plan_overrun_mb(run)  # the optimum as this check prices it fits (`balance.fitting`)
        with progress_hook(args.quiet, unit_s) as hook:
            result = fitting_placement(
                problem,
                standalone_problem(run, problem),
                lambda placed, **cuts: balance(
                    placed,
                    args.time_limit,
                    progress=hook,
                    modules=modules,
                    price=iteration_price(run),
                    overrun=overrun,
                    **cuts,
                ),
                overrun,
                hook,
            )
        warn_if_clock_stopped("ppb check", result, args.time_limit)
        add_torchtitan(result, run)  # a torchtitan run's job TOML lines for the optimum
        if result["status"] != "infeasible" and "cells" in result:
            apart = result["input"].get("mtp_cell")
            at = None if apart is None else (int(apart[0]), int(apart[1]))
            optimum = check_plan(run, result["cells"], result["input"]["bodies"], at)
            out["optimum"] = {
                "iteration_s": optimum.iteration_s,
                "fits": optimum.fits,
                "peak_mb": max(stage.peak_mb for stage in optimum.stages),
                "status": result["status"],
                "stopped_by": result.get("stopped_by"),
                # the balancer's plan is the one checked: the same layers of each body type under each option in
                # every cell, the MTP layers where they are (the flags beside it would change nothing)
                "same_as_yours": _layers(result["cells"]) == _layers(cells(plan)) and at == mtp_cell,
                # whether the offset and recompute lists are the plan's words (a MindFormers run, or a Megatron
                # plan Megatron-LM cannot say), as `ppb balance` prints them
                "yaml_keys_said": says_yaml_keys(run.framework, result["megatron"]),
                "gap": result["gap"],
                "speedup": evaluated.iteration_s / optimum.iteration_s if optimum.iteration_s > 0 else None,
                "offset": result["offset"],
                "recompute": result["recompute"],
                "select_recompute": result["select_recompute"],
                "select_comm_recompute": result["select_comm_recompute"],
                "megatron": result["megatron"].get("flags"),
                "megatron_flags_of": result["megatron"].get("flags_of"),
                # a torchtitan run's plan is said in its job TOML lines, a MindFormers run's in its yaml's
                # offset and recompute lists above, not as Megatron-LM flags
                "megatron_lines": [] if run.framework != "megatron" else megatron_lines(result["megatron"]),
                **(
                    {"torchtitan": result["torchtitan"], "torchtitan_lines": torchtitan_lines(result["torchtitan"])}
                    if "torchtitan" in result
                    else {}
                ),
            }
            said = result["megatron"]
            alternative = said.get("alternative") or {}
            if run.framework == "megatron" and said.get("flags_of") == "alternative" and alternative.get("cells"):
                # the plan's recompute is not Megatron-Core's to say: what the flags printed run, checked the same
                apart = alternative.get("mtp_cell")
                at = None if apart is None else (int(apart[0]), int(apart[1]))
                runnable = check_plan(run, alternative["cells"], result["input"]["bodies"], at)
                out["optimum"]["megatron_iteration_s"] = runnable.iteration_s
                out["optimum"]["megatron_speedup"] = (
                    evaluated.iteration_s / runnable.iteration_s if runnable.iteration_s > 0 else None
                )
                out["optimum"]["megatron_peak_mb"] = max(stage.peak_mb for stage in runnable.stages)
        else:
            out["optimum"] = {
                "status": result["status"],
                "stopped_by": result.get("stopped_by"),
                "message": result.get("message"),
            }
    return out


def _layers(grid: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """A plan's cells ([chunk][stage]) as the layers of each body type under each option."""
    return [[cell["layers"] for cell in row] for row in grid]


def _notes(plan: str, form: str) -> list[str]:
    """What the user wrote that the check priced otherwise than they may think, or did not compare."""
    found = plan_flags(plan) if form == "megatron" else None
    if found is None:
        return []
    flags = found[0]
    notes = []
    ignored = flags.ignored_recompute_flags
    if ignored:
        notes.append(
            f"{', '.join(ignored)} without effect: Megatron-LM applies them only under "
            + (
                "--recompute-granularity"
                if "--recompute-method" in ignored or "--recompute-num-layers" in ignored
                else "--recompute-granularity selective"
            )
            + ", and this plan is priced as it runs"
        )
    unread = vocabulary_note(flags)
    if unread is not None:
        notes.append(unread)
    return notes


def _balancer_figures(plan: Plan, unit_s: float, mtp_cell: tuple[int, int] | None) -> dict[str, Any]:
    """The plan as the balancer's descriptions price it; for MTP layers apart from the loss elsewhere
    than the balancer places them (rank P - 2's last virtual stage, `balance.mtp_apart`), the one
    line saying why not."""
    if mtp_cell is not None and plan.problem.mtp_cell != mtp_cell:
        chunk, stage = mtp_cell
        return {
            "unpriced": f"the balancer's descriptions price the MTP layers with the loss or apart on the "
            f"last stage but one, not apart in chunk {chunk} of stage {stage}: no balancer figures for this plan"
        }
    return {
        "simulated_time_s": plan.iteration_time * unit_s,  # the schedule on the descriptions' times
        "stage_memory_mb": plan.stage_memory_mb,
        "fits": plan.fits,
    }


def run(args: argparse.Namespace) -> int:
    out = check(args)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        render(out)
    return 0 if out["fits"] else EXIT_DOES_NOT_FIT


def render(out: dict[str, Any]) -> None:

    console = table_console()
    # `ppb balance -o plan.json` is read by its MindFormers keys (form "mindformers") whatever the run's
    # framework: said as what it is
    form = "ppb balance" if out["form"] == "mindformers" and out["plan"].lower().endswith(".json") else out["form"]
    console.print(f"[bold]ppb check[/bold] {escape(out['run'])}: {form} plan {escape(out['plan'])}")
    # peaks allocated, as `ppb estimate`, `ppb balance` and the plan report print them; the device less its
    # reserved_mb (CUDA context, NCCL) in the same frame (`estimate.check.StageCheck`)
    table = Table(title="stages (memory model: peak allocated; usable: the device less device.reserved_mb)")
    # torchtitan FSDP2's stages are charged what the caching allocator reserves beyond their peak (`StageCheck`)
    allocator = any(row.get("allocator_mb") for row in out["stages"])
    names = ("stage", "layers", "options", "peak MB", *(("allocator MB",) if allocator else ()), "usable MB")
    for name in (*names, "free MB", "moment", "fits"):
        table.add_column(name, justify="left" if name in ("options", "moment") else "right")
    for row in out["stages"]:
        table.add_row(
            str(row["stage"]),
            str(row["layers"]),
            " ".join(f"{k}:{v}" for k, v in row["options"].items()),
            f"{row['peak_mb']:,.0f}",
            *((f"{row['allocator_mb']:,.0f}",) if allocator else ()),
            f"{row['device_mb']:,.0f}",
            f"{row['free_mb']:,.0f}",
            row["moment"],
            "yes" if row["fits"] else "[bold red]NO[/bold red]",
        )
    if out.get("plan_recompute"):
        # in the run config's words (`modules [core_attn, mlp]`), not Python's list (`modules ['core_attn']`)
        words = ", ".join(
            f"{key} [{', '.join(map(str, value))}]" if isinstance(value, list | tuple) else f"{key} {value}"
            for key, value in out["plan_recompute"].items()
        )
        console.print(f"recompute priced as the plan says ({escape(words)}), in place of the run config's")
    for note in out.get("notes", []):
        console.print(f"note: {escape(note)}")
    console.print(table)
    console.print(escape(out["held_back"]))
    for warning in out["headroom_warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    workspaces = [row.get("symm_workspace_mb", 0.0) for row in out["stages"]]
    if any(workspaces):  # torchtitan's async TP (ppb_core.memory.symm_mem), within "allocator MB"
        shown_mb = ", ".join(dict.fromkeys(f"{mb:,.0f}" for mb in workspaces))
        console.print(f"async TP's symmetric workspace: {shown_mb} MB a device (in allocator MB)")
    it = out["iteration"]  # the whole time model: schedule, P2P, data-parallel reduction, optimizer
    console.print(
        f"iteration {it['seconds']:,.3f} s, {it['tokens_per_second_per_device']:,.0f} tokens/s per device, "
        f"MFU {100 * it['mfu']:.1f}%, HFU {100 * it['hfu']:.1f}% (the schedule on the layers' times, "
        "P2P, data-parallel reduction, optimizer: docs/timing.md)"
    )
    if "unpriced" in out["balancer"]:
        console.print(escape(out["balancer"]["unpriced"]))
    if out.get("message"):
        console.print(f"[bold red]{escape(out['message'])}[/bold red]")
    else:
        console.print("every stage fits")
    optimum = out.get("optimum")
    if optimum and "iteration_s" in optimum:
        # beside a plan that does not fit, a speedup over it means nothing: the fitting plan's time stands alone
        versus = f"{optimum['speedup']:.3f}× yours" if not out.get("message") else "yours does not fit"
        # said as `ppb balance` says it: why the solve ended (the status "time_limit" only says no proof), and
        # the MindFormers yaml keys only where they are the plan's words (a Megatron run has its flags below)
        stopped = ended_words(optimum)
        keys = "; " + ", ".join(f"{key} {optimum[key]}" for key in YAML_KEYS) if optimum["yaml_keys_said"] else ""
        # given in the run's own words (Megatron flags, torchtitan lines, a MindFormers yaml), the balancer's plan
        # that is the same one is said so: the gpt3 175B example's even split printed its own layout and first/last
        # counts to paste (session 33); a plan JSON or another form still gets the lines to launch it with
        own = out["form"] in ("megatron", "torchtitan") or (form == "mindformers" and optimum["yaml_keys_said"])
        if optimum.get("same_as_yours") and own and not out.get("message"):
            console.print(f"the balancer's plan ({stopped}) is yours: the same split and recompute, nothing to change")
            return
        console.print(
            f"the balancer's plan ({stopped}): iteration {optimum['iteration_s']:,.3f} s, "
            f"{versus}, peak {optimum['peak_mb']:,.0f} MB{keys}",
            soft_wrap=True,
        )
        lines = [*optimum.get("megatron_lines", []), *optimum.get("torchtitan_lines", [])]
        if "megatron_iteration_s" in optimum:  # beside the flags it prices: the first line and its "(the fastest ...)"
            versus = f"{optimum['megatron_speedup']:.3f}× yours" if not out.get("message") else "yours does not fit"
            lines.insert(
                2,
                f"  these flags run: iteration {optimum['megatron_iteration_s']:,.3f} s, {versus}, "
                f"peak {optimum['megatron_peak_mb']:,.0f} MB",
            )
        for line in lines:
            console.print("  " + escape(line), soft_wrap=True)
    elif optimum:
        # no plan: the proof that none fits says why, or the limit that ended the search before one (the bare
        # status "time_limit" said neither, whichever limit it was)
        said = optimum.get("message") or "no plan found"
        if optimum["status"] != "infeasible":
            limit = "time limit" if optimum.get("stopped_by") == "time_limit" else "work limits"
            said += f": the {limit} stopped the search first"
        console.print(f"the balancer's plan: none, {escape(said)}")
