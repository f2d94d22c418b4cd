"""The terminal the `ppb` tables print to."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from rich.console import Console
from rich.markup import escape

from ppb_core.balance.progress import Progress, ProgressHook, showing_seconds


def table_console() -> Console:
    """The terminal's width, or 200 columns when piped or captured: no terminal to fit, every figure whole."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


@contextlib.contextmanager
def progress_hook(quiet: bool = False, unit_s: float | None = None) -> Iterator[ProgressHook | None]:
    """A balancer progress hook drawing the latest step on the terminal's stderr (rich); when stderr
    is not a terminal (CI logs, pipes), plain lines at most every `PIPED_EVERY_S` (`PlainLines`);
    None when *quiet*. stdout stays the plan alone. With *unit_s* (the descriptions' time unit in
    seconds) the figures are seconds."""
    console = Console(stderr=True)
    if quiet:
        yield None
        return
    if not console.is_terminal:
        lines = PlainLines()
        yield showing_seconds(
            since(time.perf_counter(), lambda progress: lines(progress.line(), progress.phase == "done")), unit_s
        )
        return
    with console.status("balancing…") as status:

        def show(progress: Progress) -> None:
            status.update(escape(progress.line()))
            if progress.phase in PRINTED_PHASES:
                console.print(escape(progress.line()))

        yield showing_seconds(since(time.perf_counter(), show), unit_s)


def since(started: float, hook: ProgressHook) -> ProgressHook:
    """*hook* hearing each step's time from *started* (the command's clock), not from its own solve's start: a
    command solving twice (MTP with the loss and apart, `balance.mtp_apart`; `-i auto`'s chunk counts) printed
    `[14.0 s] done` and then `[6.3 s] probing`, its clock going back (DeepSeek-V3, session 33)."""
    return lambda progress: hook(replace(progress, seconds=time.perf_counter() - started))


def clock_stopped(result: dict) -> bool:
    """Whether the wall-clock limit (`-t`) ended a solve of this balance result, or a V it searched."""
    searched = result.get("interleave_search") or []
    return result.get("stopped_by") == "time_limit" or any(r.get("stopped_by") == "time_limit" for r in searched)


def warn_if_clock_stopped(command: str, result: dict, time_limit: float | None) -> None:
    """One line on stderr, even with -q: a plan the wall clock cut short is not the repeatable one."""
    if clock_stopped(result):
        print(
            f"{command}: warning: the wall-clock limit (-t {time_limit:g} s) stopped the search: this plan "
            "depends on the machine and its load; without -t the search ends on its work limits, the same "
            "plan on every run",
            file=sys.stderr,
        )


# Steps worth a line of their own; the others only update the spinner's line.
PRINTED_PHASES = (
    "start",
    "listing",
    "closed_form",
    "start_plan",
    "bound",
    "round",
    "stopped",
    "megatron",
    "torchtitan",
    "least_memory",
    "memory_refit",
    "done",
)


@contextlib.contextmanager
def chain_progress(quiet: bool) -> Iterator[tuple[Callable[[str], None] | None, ProgressHook | None]]:
    """For `ppb plan` on a terminal: a line as each stage of the chain starts and the balancer's steps
    (in seconds: `chain.pipeline_plan` gives them the run's unit), under one spinner on stderr; when
    stderr is not a terminal, the same as plain lines at most every `PIPED_EVERY_S` (`PlainLines`);
    (None, None) when *quiet*."""
    console = Console(stderr=True)
    if quiet:
        yield None, None
        return
    if not console.is_terminal:
        lines = PlainLines()
        yield (
            lambda name: lines(f"[{lines.now() - lines.started:.1f} s] {name}"),
            lambda progress: lines("  balance " + progress.line(), progress.phase == "done"),
        )
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


# Piped progress: at most one line per this many seconds, so a CI log shows a long solve going
# without one line per step (a solve has hundreds); a command done sooner prints none.
PIPED_EVERY_S = 5.0


class PlainLines:
    """Progress as plain lines on stderr when it is not a terminal: a line when `PIPED_EVERY_S`
    have passed since the last one (or the start), the latest step; the end of a solve (*last*)
    whenever a line came before it, so a log that showed a solve going says why it stopped."""

    def __init__(
        self, now: Callable[[], float] = time.perf_counter, write: Callable[[str], None] | None = None
    ) -> None:
        self.now = now
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self.started = now()
        self.last = self.started
        self.printed = False

    def __call__(self, line: str, last: bool = False) -> None:
        moment = self.now()
        if moment - self.last >= PIPED_EVERY_S or (last and self.printed):
            self.write(line)
            self.last = moment
            self.printed = True
