"""A run config's payload end to end: each layer described, then combined, withdrawn and scaled.

What `ppb describe` writes and the chain's `scaled_descriptions` holds, in one call. Apart from
`describe` and `postprocess` so that neither depends on the other.
"""

from __future__ import annotations

from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel
from ppb_core.payload.describe import describe, describe_mtp_apart
from ppb_core.payload.postprocess import postprocess
from ppb_core.payload.sources import MemorySource, TimeSource
from ppb_core.timing.pricer import TimeModel


def describe_run(
    run: RunConfig,
    memory: MemorySource | None = None,
    times: TimeSource | None = None,
    *,
    timed: bool = True,
    withdrawing: bool = True,
    mtp_apart: bool = False,
) -> list[dict[str, Any]]:
    """The descriptions the balancer reads for a run: described, combined, withdrawn, scaled.

    *memory* defaults to `ppb_core.memory.MemoryModel(run)`, and with *timed*, *times* to
    `ppb_core.timing.pricer.TimeModel(run)`; `timed=False` gives the untimed descriptions (NONE, SLCT
    and FULL only, `time` 1); `withdrawing=False` keeps the selective options no body is better off
    with (a user's plan may use them).
    """
    if memory is None:
        memory = MemoryModel(run)
    if not timed:
        times = None
    elif times is None:
        times = TimeModel(run)
    described = (describe_mtp_apart if mtp_apart else describe)(run, memory, times)
    return postprocess(described, run.ppb.combined, run.source, withdrawing=withdrawing)
