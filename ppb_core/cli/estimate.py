"""`ppb estimate RUN.yaml [--json]`: per-layer memory of a run, one row per distinct kind, and each stage's peak."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from rich.markup import escape
from rich.table import Table

from ppb_core.cli.calibrations import print_memory_calibration, print_time_calibration
from ppb_core.cli.console import table_console
from ppb_core.errors import InputError, shown
from ppb_core.estimate.held_back import held_back_line, thin_headroom
from ppb_core.estimate.inputs import load_run
from ppb_core.estimate.run import Estimate, estimate
from ppb_core.memory import BUFFER_RULES, MemoryModel
from ppb_core.memory.peak import StagePeak
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import refused_split
from ppb_core.timing.iteration import BREAKDOWN_KEYS, run_iteration
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import MB


def run(args: argparse.Namespace) -> int:
    if args.buffer_rule not in BUFFER_RULES:
        raise InputError(None, "--buffer-rule", f"{shown(args.buffer_rule)} is not one of {', '.join(BUFFER_RULES)}")
    config = load_run(args.run_config)
    refused = refused_split(config)
    if refused is not None:
        raise InputError(args.run_config, "parallel.pp", refused)
    times = None if args.no_times else TimeModel(config)
    memory = MemoryModel(config, buffer_rule=args.buffer_rule)
    result = estimate(config, memory, times=times, stages=not args.no_stages)
    if times is not None:
        result = replace(result, iteration=run_iteration(config, times=times, memory=memory).to_json())
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_tables(result)
    return 0


def _mb(value: float) -> str:
    return f"{value / MB:,.1f}"


def allocated_bytes(peak: StagePeak) -> float:
    """A stage's peak as the frameworks' allocators count it and `ppb balance`/`check` print it: the run
    config's reserved memory (CUDA context, NCCL: outside the allocator) aside."""
    return peak.peak_bytes - peak.reserved_bytes


def usable_bytes(peak: StagePeak) -> float:
    """What a stage may use of the device, in the frame of `allocated_bytes`: the device less reserved_mb."""
    return peak.device_bytes - peak.reserved_bytes


def print_tables(result: Estimate) -> None:
    """The rich tables: layers (MB per device) and stages (peak against device memory)."""

    console = table_console()
    run = result.run
    par = run["parallel"]
    title = (
        f"{run['name']}: dp {par['dp']} tp {par['tp']} pp {par['pp']} vpp {par['vpp']} cp {par['cp']} "
        f"ep {par['ep']}, seq {run['training']['seq_length']} × mbs {run['training']['micro_batch_size']}, "
        f"m {run['training']['micro_batches']} ({par['schedule']})"
    )
    layers = Table(
        title=title,
        caption="MB of 2**20 bytes on one device; activations per micro-batch in flight; "
        "buffers at NONE: at one micro-batch, the part per micro-batch, the part held once",
    )
    for name, justify in (
        ("model", "left"),
        ("node", "left"),
        ("kind", "left"),
        ("count", "right"),
        ("parameters", "right"),
        ("static", "right"),
    ):
        layers.add_column(name, justify=justify)
    for option in OPTIONS:
        layers.add_column(option, justify="right")
    for name in ("buf one", "buf /mb", "buf once"):
        layers.add_column(name, justify="right")
    for row in result.layers:
        layers.add_row(
            row.model_name,
            row.node,
            row.kind,
            str(row.count),
            f"{row.parameters:,}",
            _mb(row.static_bytes),
            *(_mb(row.activation_bytes[o]) for o in OPTIONS),
            _mb(row.buffer_bytes_one),
            _mb(row.buffer_bytes_per_micro_batch),
            _mb(row.buffer_bytes_once),
        )
    console.print(layers)
    for model, source in run.get("activations", {}).items():
        if source.get("source") == "census":
            console.print(
                f"{model}: body activations from the census {source['file']} ({source['attention']} "
                f"attention, {source['dtype']}, measured at micro-batch {source['micro_batch_size']})"
            )
    timed = [row for row in result.layers if row.forward_ms is not None and row.backward_ms is not None]
    if timed:
        times = Table(
            title="Times per micro-batch on one device (ms)",
            caption="forward, then the backward under each option (recomputation included)",
        )
        for name, justify in (("model", "left"), ("node", "left"), ("kind", "left"), ("forward", "right")):
            times.add_column(name, justify=justify)
        for option in OPTIONS:
            times.add_column(f"bwd {option}", justify="right")
        for row in timed:
            times.add_row(
                row.model_name,
                row.node,
                row.kind,
                f"{row.forward_ms['NONE']:.3f}",
                *(f"{row.backward_ms[o]:.3f}" for o in OPTIONS),
            )
        console.print(times)
        print_time_calibration(console, run)
    if result.iteration is not None:
        print_iteration(console, result.iteration)
    if not result.stages:
        return
    mixed = run.get("layer_options", {})

    def said(model: str, option: str) -> str:
        counts = mixed.get(model, {})
        return " · ".join(f"{o} {n}" for o, n in counts.items()) if len(counts) > 1 else option

    options = ", ".join(f"{model} {said(model, option)}" for model, option in run.get("stage_options", {}).items())
    at_full = {peak.stage: peak for peak in result.stages_at_full}
    stages = Table(
        title=f"Stages ({run.get('framework', 'megatron')}; body layers at {options}), MB per device",
        caption="MB of 2**20 bytes; activations × micro-batches in flight per chunk; working: the largest backward's "
        "working set; loss: what the loss adds on the stage of the TAIL (the output layer); reserved: the run "
        "config's device.reserved_mb (the runtime's context and communication buffers: CUDA's and NCCL's on a GPU), "
        "outside the peak; peak: the largest moment (backward, "
        "loss, gradient reduction, optimizer step), allocated, as `ppb balance`, `ppb check` and the plan report "
        "print it (--json's peak_bytes adds reserved_bytes); at full: the peak with every body layer fully "
        "recomputed; usable: the device less reserved; fits: the peak within usable, with what torch's caching "
        "allocator reserves beyond it where ppb prices its pools (torchtitan FSDP2, below) and async TP's symmetric "
        "workspace",
    )
    for name in (
        "stage",
        "layers",
        "in flight",
        "static",
        "activations",
        "buffers",
        "working",
        "loss",
        "reserved",
        "peak",
        "moment",
        "at full",
        "usable",
        "fits",
    ):
        stages.add_column(name, justify="left" if name in ("in flight", "moment") else "right")
    for peak in result.stages:
        full = at_full.get(peak.stage)
        stages.add_row(
            str(peak.stage),
            str(peak.body_layers),
            " ".join(map(str, peak.in_flight)),
            _mb(peak.static_bytes),
            _mb(peak.activation_bytes),
            _mb(peak.buffer_bytes),
            _mb(peak.working_bytes),
            _mb(peak.loss_bytes) if peak.holds_tail else "-",
            _mb(peak.reserved_bytes),
            _mb(allocated_bytes(peak)),
            peak.moment,
            _mb(allocated_bytes(full)) if full is not None else "-",
            _mb(usable_bytes(peak)),
            "yes" if peak.fits else "[red]no[/red]",
        )
    console.print(stages)
    for pools, peak in zip(result.reserved, result.stages, strict=False):
        if pools is not None:
            console.print(
                f"stage {peak.stage}: torch's caching allocator reserves about {_mb(pools.total_bytes)} MB "
                f"(torchtitan's reserved_bytes.all.peak; the run config's reserved memory aside): the compute "
                f"stream {_mb(pools.compute_bytes)} MB (the loss's free hole {_mb(pools.loss_hole_bytes)} MB of it), "
                f"FSDP2's all-gather copy-in {_mb(pools.copy_in_bytes)} MB, "
                f"reduce-scatter {_mb(pools.reduce_scatter_bytes)} MB; fits counts the "
                f"{_mb(peak.allocator_bytes - peak.symm_workspace_bytes)} MB it reserves beyond the peak"
            )
    workspaces = [peak.symm_workspace_bytes for peak in result.stages]
    if any(workspaces):  # torchtitan's async TP (ppb_core.memory.symm_mem): fits counts it beside the pools
        shown_mb = ", ".join(dict.fromkeys(_mb(w) for w in workspaces))
        console.print(
            f"async TP's symmetric workspace: {shown_mb} MB a device (torch's get_symm_mem_workspace, outside the "
            "caching allocator; fits counts it)"
        )
    console.print(escape(held_back_line(run["device"])))
    free = ((p.stage, (usable_bytes(p) - allocated_bytes(p) - p.allocator_bytes) / MB) for p in result.stages)
    for warning in thin_headroom(run["device"], free):
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    print_memory_calibration(console, run)
    if result.stages_at_full:
        highest = max(result.stages_at_full, key=allocated_bytes)
        configured = max(result.stages, key=allocated_bytes)
        console.print(
            f"run peak: {_mb(allocated_bytes(configured))} MB allocated (stage {configured.stage}, "
            f"{configured.moment}) of {_mb(usable_bytes(configured))} MB usable (the device's "
            f"{_mb(configured.device_bytes)} MB less reserved_mb {_mb(configured.reserved_bytes)}); at full recompute: "
            f"{_mb(allocated_bytes(highest))} MB (stage {highest.stage}, {highest.moment})"
        )


def print_iteration(console, iteration: dict) -> None:
    """The iteration in seconds, tokens per second per device, MFU and HFU, and where the time goes."""

    console.print(
        f"[bold]Iteration[/bold] ({iteration['framework']}): {iteration['seconds']:,.3f} s, "
        f"{iteration['tokens_per_second_per_device']:,.0f} tokens/s per device, "
        f"MFU {100 * iteration['mfu']:.1f}%, HFU {100 * iteration['hfu']:.1f}% "
        f"({iteration['tokens']:,} tokens on {iteration['devices']:,} device{'s' if iteration['devices'] != 1 else ''})"
    )
    table = Table(caption="hidden: the share of each communication's link time spent behind compute (-: nothing sent)")
    for name in ("term", "seconds", "share"):
        table.add_column(name, justify="left" if name == "term" else "right")
    total = iteration["seconds"]
    for key in BREAKDOWN_KEYS:
        # to the table's 0.1 ms, a part below it being 0 (a PP 1 run's bubble of -1e-12 s printed "-0.0000", "-0.0%")
        value = round(iteration["breakdown"].get(key, 0.0), 4) + 0.0
        table.add_row(key.replace("_", " "), f"{value:.4f}", f"{value / total:.1%}" if total else "-")
        host = iteration.get("host_wait_seconds", 0.0)
        if key == "compute" and host > 0:  # Megatron's host launching kernels (docs/timing.md)
            table.add_row("  of it, waiting for the host", f"{host:.4f}", f"{host / total:.1%}" if total else "-")
    links = iteration.get("link_seconds", {})
    for key, share in iteration.get("hidden", {}).items():
        # a communication with no link time is "hidden" in full in the JSON (1.0): nothing to show here
        sent = links.get(key, 1.0) > 0.0
        table.add_row(f"hidden: {key.replace('_', ' ')}", "", f"{share:.0%}" if sent else "-")
    console.print(table)
