"""The terminal the `ppb` tables print to."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.markup import escape

from ppb_core.balance.progress import Progress, ProgressHook, showing_seconds


def table_console() -> Console:
    """The terminal's width, or 200 columns when piped or captured: no terminal to fit, every figure whole."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


@contextlib.contextmanager
def progress_hook(quiet: bool = False, unit_s: float | None = None) -> Iterator[ProgressHook | None]:
    """A balancer progress hook drawing the latest step on the terminal's stderr (rich), or None when
    stderr is not a terminal or *quiet*: piped output stays the plan alone. With *unit_s* (the
    descriptions' time unit in seconds) the figures are seconds."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield None
        return
    with console.status("balancing…") as status:

        def show(progress: Progress) -> None:
            status.update(escape(progress.line()))
            if progress.phase in PRINTED_PHASES:
                console.print(escape(progress.line()))

        yield showing_seconds(show, unit_s)


# Steps worth a line of their own; the others only update the spinner's line.
PRINTED_PHASES = ("start", "listing", "closed_form", "start_plan", "bound", "round", "stopped", "megatron", "done")


@contextlib.contextmanager
def chain_progress(quiet: bool) -> Iterator[tuple[Callable[[str], None] | None, ProgressHook | None]]:
    """For `ppb plan` on a terminal: a line as each stage of the chain starts and the balancer's steps
    (in seconds: `chain.pipeline_plan` gives them the run's unit), under one spinner on stderr; (None,
    None) when piped or *quiet*."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield None, None
        return
    started = time.perf_counter()
    with console.status("planning…") as status:

        def starting(name: str) -> None:
            line = f"[{time.perf_counter() - started:.1f} s] {name}"
            status.update(escape(line + "…"))
            console.print(escape(line))

        def show(progress: Progress) -> None:
            line = "  balance " + progress.line()
            status.update(escape(line))
            if progress.phase in PRINTED_PHASES:
                console.print(escape(line))

        yield starting, show
