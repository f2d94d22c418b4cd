"""The Megatron-LM lines a person reads and pastes, the same in `ppb balance`, `ppb check` and the report.

What comes first after `Megatron-LM:` runs as it stands: the plan's own flags when Megatron-Core can
say the plan, else the fastest plan it can say (layout and recompute flags), with its cost. A plan's
layout without its recompute is printed only marked as not runnable alone: pasted alone it runs
every layer without recompute, which need not fit (DeepSeek-V3's plan ran out by 126,846 MB on
stage 0 that way, `ppb check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def megatron_lines(said: Mapping[str, Any]) -> list[str]:
    """The lines for one balance result's `megatron` section (`outputs.megatron`, `result.report`)."""
    lines: list[str] = []
    alternative = said.get("alternative")
    if said.get("flags_of") == "alternative" and alternative:
        lines.append(f"Megatron-LM: {said['flags']}")
        lines.append(
            f"  (the fastest plan Megatron-LM can say: {alternative['setting']}, "
            # by the balancer's objective, the layers' schedule: the iterations priced beside it (`ppb balance`'s
            # "Megatron-LM's flags above" line) differ by more; until session 34 the measure went unsaid
            f"{alternative['slower_by']:.2%} slower than the plan above by the layers' schedule)"
        )
    elif said.get("flags"):
        lines.append(f"Megatron-LM: {said['flags']}")
        if said.get("first_last"):
            lines.append(f"  or, instead of the layout: {said['first_last']}")
    if said.get("layout_only"):
        why = f"; no plan Megatron-LM can say beside it: {said['no_alternative']}" if said.get("no_alternative") else ""
        lines.append(
            f"  the plan's own layout, NOT runnable alone (it leaves out the plan's recompute): "
            f"{said['layout_only']}{why}"
        )
    if said.get("replaces_note") and (said.get("flags") or said.get("layout_only")):
        lines.append(f"  ({said['replaces_note']})")
    if said.get("note"):
        lines.append(f"  ({said['note']})")
    return lines
