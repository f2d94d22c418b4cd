"""What a run holds back for the runtime, said: `ppb estimate` and `ppb check` print it under the stages.

The device's `reserved_mb` is what a stage's fit leaves out for the CUDA context, NCCL's buffers and the like
(`ppb_core.config.runtime_reserve`). Held back as `auto`, it is that derivation and the line says its parts;
stated, the number wins and the line gives the derivation beside it; unset, nothing is held back. Where a
stage's free memory is below what the runtime takes beyond what is held back, a warning names the stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def held_back_line(device: Mapping[str, Any]) -> str:
    """One line: what the run holds back and why (*device*: the estimate summary's `device`)."""
    reserve = device["runtime_reserve"]
    parts = ", ".join(f"{p['name']} {p['mb']:,.0f} MB ({p['why']})" for p in reserve["parts"]) or "nothing"
    held, source = device["reserved_mb"], device["reserved_from"]
    if source == "auto":
        return f"held back {held:,} MB for the runtime (device.reserved_mb auto): {parts}"
    said = "device.reserved_mb" if source == "stated" else "device.reserved_mb unset"
    return (
        f"held back {held:,} MB ({said}); the runtime takes about {reserve['total_mb']:,} MB outside the "
        f"allocator on this layout (device.reserved_mb: auto holds that back): {parts}"
    )


def thin_headroom(device: Mapping[str, Any], free_mb: Iterable[tuple[int, float]]) -> list[str]:
    """A warning per stage whose free memory (usable less its peak and allocator reserve) is below what the
    runtime takes beyond what is held back; none where reserved_mb is auto or covers it."""
    short = device["runtime_reserve"]["total_mb"] - device["reserved_mb"]
    if short <= 0:
        return []
    return [
        f"stage {stage} leaves {free:,.0f} MB free, less than the {short:,} MB the runtime takes beyond "
        f"device.reserved_mb {device['reserved_mb']:,} (CUDA context, NCCL's buffers): it may not fit as run"
        for stage, free in free_mb
        if 0 <= free < short
    ]
