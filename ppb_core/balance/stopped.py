"""Why a solve ended, in words: one vocabulary for every command that says it (the progress's `done`
and setting lines, `ppb balance`'s status line, `ppb check`'s balancer line, `ppb plan`'s report).

Until session 34 `program` and `result` each held a dict of these words, and the two said the work and
time limits differently."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ppb_core.units import percent_words

# a solve's `stopped_by` in words; the status "time_limit" says only that the proof was not reached
STOPPED = {
    "optimal": "proven optimal",
    "work_limit": "stopped at its work limits (the same plan on every run)",
    "time_limit": "stopped by the time limit: the best plan found so far (another run may differ)",
    "infeasible": "no plan fits",
    "cutoff": "proven no faster than a setting before it",
}

# `program.solve`: stopped_by time_limit with status optimal, a proven objective whose choice among equally
# fast plans the clock cut: still proven, only which of those plans is given may differ from run to run
CUT_TIE_BREAK = "proven optimal; the time limit cut the choice among equally fast plans (another run may give another)"


def stopped_words(stopped_by: str, status: str = "", time_limit_s: float | None = None) -> str:
    """Why the solve ended (*time_limit_s*: the limit that stopped it, said where known)."""
    if stopped_by == "time_limit" and status == "optimal":
        return CUT_TIE_BREAK
    said = STOPPED.get(stopped_by, stopped_by)
    if stopped_by == "time_limit" and time_limit_s is not None:
        said = said.replace("the time limit", f"the time limit of {time_limit_s:g} s", 1)
    return said


def ended_words(result: Mapping[str, Any]) -> str:
    """Why a result's solve ended and, unless proven optimal, its gap (`ppb check`'s and `ppb plan`'s words)."""
    said = stopped_words(result.get("stopped_by", ""), result.get("status", ""))
    gap = result.get("gap")
    return said if result.get("status") == "optimal" or gap is None else f"{said}, gap {percent_words(gap)}"
