"""The lines `ppb estimate` and `ppb balance` print to say which calibrations they applied: the memory
calibration's fit (`memory.calibration`) and the time calibration's (`timing.calibration.fit_report`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import MB, counted


def applied(run: RunConfig) -> dict[str, Any]:
    """The calibrations a run config applies, as `ppb estimate --json`'s `run` gives them
    (`memory_calibration`, `time_calibration`); empty without any."""
    out: dict[str, Any] = {}
    if run.memory.calibration is not None:
        fit = MemoryModel(run).fit
        if fit is not None:
            out["memory_calibration"] = fit.to_json()
    if run.timing.calibration is not None:
        out["time_calibration"] = TimeModel(run).calibration_json()
    return out


def memory_line(fit: dict[str, Any]) -> str:
    """The memory calibration: its file, the factors and each stage's residual."""
    factors = ", ".join(f"{term} ×{factor:.3f}" for term, factor in fit["factors"].items())
    residuals = ", ".join(f"{stage['stage']}: {stage['residual_bytes'] / MB:+,.0f}" for stage in fit["stages"])
    return (
        f"memory calibrated by {fit['file']}: {factors}; residual per stage (MB) {residuals}; "
        f"rms {100 * fit['rms_relative']:.2f}%"
    )


def time_line(fit: dict[str, Any]) -> str:
    """The time calibration: its file, rows and the kinds they measure, the kinds left at the global factors,
    and the largest residual of a measured row."""
    measured = ", ".join(" ".join(key) for key in fit["measured_kinds"])
    left = fit["global_kinds"]
    factors = fit["global_factors"]
    at_global = (
        f"; {', '.join(' '.join(key) for key in left)} at the global factors (forward ×{factors['forward']:.3f}, "
        f"backward ×{factors['backward']:.3f}, recompute ×{factors['recompute']:.3f})"
        if left
        else "; every kind of the run measured"
    )
    return (
        f"time calibrated by {fit['file']}: {counted(fit['rows'], 'row')} over "
        f"{counted(len(fit['measured_kinds']), 'kind')} ({measured}){at_global}; residual per row at most "
        f"{fit['max_residual_ms']:.3f} ms (rms {100 * fit['rms_relative']:.2f}%)"
    )


def print_memory_calibration(console: Console, run: dict[str, Any]) -> None:
    """The memory calibration's line of a run summary (`estimate`'s `run`), its warnings after it."""
    fit = run.get("memory_calibration")
    if fit:
        console.print(escape(memory_line(fit)), soft_wrap=True)
        for warning in fit.get("warnings", []):
            console.print(f"[yellow]memory calibration warning:[/yellow] {escape(warning)}")


def print_time_calibration(console: Console, run: dict[str, Any]) -> None:
    """The time calibration's line of a run summary, when it has one."""
    if run.get("time_calibration"):
        console.print(escape(time_line(run["time_calibration"])), soft_wrap=True)
