"""The terminal the `ppb` tables print to."""

from __future__ import annotations

from rich.console import Console


def table_console() -> Console:
    """The terminal's width, or 200 columns when piped or captured: no terminal to fit, every figure whole."""
    console = Console()
    return console if console.is_terminal else Console(width=200)
