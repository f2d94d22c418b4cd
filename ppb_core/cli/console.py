"""The terminal the `ppb` tables print to."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape

from ppb_core.balance.progress import Progress, ProgressHook


def table_console() -> Console:
    """The terminal's width, or 200 columns when piped or captured: no terminal to fit, every figure whole."""
    console = Console()
    return console if console.is_terminal else Console(width=200)


@contextlib.contextmanager
def progress_hook(quiet: bool = False) -> Iterator[ProgressHook | None]:
    """A balancer progress hook drawing the latest step on the terminal's stderr (rich), or None when
    stderr is not a terminal or *quiet*: piped output stays the plan alone."""
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield None
        return
    with console.status("balancing…") as status:

        def show(progress: Progress) -> None:
            status.update(escape(progress.line()))
            if progress.phase in ("closed_form", "start_plan", "done"):
                console.print(escape(progress.line()))

        yield show
