"""`ppb search SEARCH.yaml [--json] [-o DIR]`: the best parallel layouts for a model on N devices, balanced and ranked.

The search spec names the model(s), the device and how many, the global batch and the sequence
length, the framework and optional limits (docs/search.md). Every strategy of the grid is checked
by the run-config validator, screened with the memory model and a proven bound on its iteration,
and the promising ones are balanced and timed; strategies are dropped only where a bound proves
they cannot enter the ranking. `-o DIR` writes the ranked strategies as run configs with their plans
and, in the search's framework's words, its Megatron-LM flags, MindFormers settings or torchtitan
job-TOML lines.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ppb_core import limits
from ppb_core.balance.torchtitan_plan import torchtitan_lines
from ppb_core.cli.console import table_console
from ppb_core.errors import InputError
from ppb_core.io import check_output
from ppb_core.search.outputs import megatron_text, mindformers_text, result_json, torchtitan_said, write_ranking
from ppb_core.search.rank import BALANCER_FAILED, BALANCER_TIMEOUT, Ranked, SearchResult, screened_words, search
from ppb_core.search.spec import SearchOptions, SearchSpec, load_search_spec
from ppb_core.units import counted, percent_words


def run(args: argparse.Namespace) -> int:
    spec = load_search_spec(args.spec)
    for name, most, what in (("workers", limits.WORKERS, "processes"), ("top", limits.RANKED, "strategies")):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise InputError(args.spec, f"--{name}", f"must be a positive integer, got {value}")
        if value is not None and value > most:
            raise InputError(args.spec, f"--{name}", limits.over(value, most, what))
    if args.out:
        check_output(args.out, folder=True)
    if args.top is not None:
        spec = spec.model_copy(update={"search": spec.search.model_copy(update={"top": args.top})})
    with _Progress(spec, quiet=args.quiet) as progress:
        result = search(spec, args.workers, progress)
    if args.out:
        written = write_ranking(result, args.out)
        if not args.json:
            print(f"wrote {counted(len(written), 'file')} to {args.out}", file=sys.stderr)
    if args.json:
        json.dump(result_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render(result)
    return 0


class _Progress:
    """Strategies screened, then balanced with the best so far, on stderr (stdout stays the result): a live
    bar on a terminal, else one plain line per step (screening done, each wave balanced) so that a search
    piped or logged still shows where it is."""

    def __init__(self, spec: SearchSpec, quiet: bool = False) -> None:
        self.spec = spec
        self.quiet = quiet
        self.console = Console(stderr=True)
        self.live = self.console.is_terminal and not quiet
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            _LeftColumn(),
            console=self.console,
            transient=True,
        )
        self.screen = None
        self.balance = None
        self.started = time.perf_counter()
        self.balancing = self.started  # when screening ended

    def __enter__(self) -> _Progress:
        if self.live:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live:
            self.progress.__exit__(*exc)
        if not self.quiet and exc[0] is None:
            # the search's wall clock is read here (and in the table's last line), never in its JSON
            self._line("done")

    def _line(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.started:.1f} s] {text}", file=sys.stderr, flush=True)

    def __call__(self, event: str, figures: dict[str, Any]) -> None:
        if self.quiet:
            return
        if not self.live:
            if event == "enumerated":
                self._line(f"screening {counted(figures['enumerated'], 'strategy', 'strategies')}")
            elif event == "screened" and figures.get("examined", 0) < figures["total"]:
                # each part of the grid screened (the part's strategies share a schedule shape), so a large
                # grid's minutes of screening show where they are; the last part is "screening done"'s line
                self._line(f"screened {figures['examined']:,} of {figures['total']:,} ({figures['screened']:,} valid)")
            elif event == "screening done":
                self.balancing = time.perf_counter()
                self._line(f"{screened_words(figures)}; balancing the most promising{self._ahead(figures)}")
            elif event == "balanced":
                self._line(self._balanced(figures, *self._ahead_s(figures)))
            return
        if event == "screening done":
            self.balancing = time.perf_counter()
            self.console.print(
                f"{screened_words(figures)}; balancing{self._ahead(figures)}", markup=False, highlight=False
            )
        elif event == "enumerated":
            self.screen = self.progress.add_task("screening", total=figures["enumerated"])
        elif event == "screened" and self.screen is not None:
            # the points screened or refused, out of all enumerated (the valid ones alone never reach the total
            # where the validator refuses some)
            self.progress.update(self.screen, completed=figures["examined"])
        elif event == "balanced":
            if self.balance is None:
                self.balance = self.progress.add_task("balancing", total=None)
            ahead, left_s = self._ahead_s(figures)
            self.progress.update(
                self.balance,
                completed=figures["balanced"],
                # the most balances there can be: the bar's end moves in as the bounds prune
                total=figures["balanced"] + ahead if ahead else None,
                description=self._balanced(figures, ahead, left_s),
                left_s=left_s,
            )

    def _ahead(self, figures: dict[str, Any]) -> str:
        """The balances ahead, before the first one: a `top: 1000` search on a large grid balances for hours,
        which a user should read before waiting (session 27's finding)."""
        top = self.spec.search.top
        said = f": {figures['to_fill']:,} balances to fill the top {top:,}"
        if figures["most_balances"] > figures["to_fill"]:
            said += f", then more until the bounds prune the rest (at most {figures['most_balances']:,})"
        return said

    def _ahead_s(self, figures: dict[str, Any]) -> tuple[int, float | None]:
        """The balances ahead (those to fill the top, else the most the bounds leave: `contenders`) and, at the
        pace so far (wall clock since screening, bounding included), the seconds they take, within the spec's
        time budget: an estimate, never in the JSON. None before a first balance."""
        ahead = figures.get("to_fill", 0) or figures.get("contenders", 0)
        if not figures["balanced"]:
            return ahead, None
        now = time.perf_counter()
        left_s = ahead * (now - self.balancing) / figures["balanced"]
        budget_s = self.spec.search.time_budget_s
        if budget_s is not None:  # the search stops at its budget, counted from its start
            left_s = min(left_s, max(0.0, budget_s - (now - self.started)))
        return ahead, left_s

    def _balanced(self, figures: dict[str, Any], ahead: int, left_s: float | None) -> str:
        text = f"balanced {figures['balanced']:,} (bounded {figures['relaxed']:,}, waiting {figures['waiting']:,})"
        best = figures.get("best")
        if best is not None:
            text += f", best {best.strategy.label(self.spec)}: {best.seconds:,.3f} s"
        if not ahead or left_s is None:
            return text
        if figures.get("to_fill", 0):
            return text + f"; {ahead:,} more to fill the top {self.spec.search.top:,}, about {duration(left_s)} more"
        # the top is filled: what is left is the strategies the ranking does not yet beat, at most
        return text + (
            f"; top {self.spec.search.top:,} filled, at most {ahead:,} more to balance until the bounds prune the "
            f"rest, at most about {duration(left_s)} more"
        )


class _LeftColumn(ProgressColumn):
    """The time left beside the time elapsed: the search's own estimate where it gives one (balancing, `left_s`:
    its pace times the balances ahead), else rich's from the task's speed (screening)."""

    def render(self, task: Task) -> Text:
        left_s = task.fields.get("left_s", task.time_remaining)
        said = "-" if left_s is None else f"~{duration(left_s)}"
        return Text(f"{said} left", style="progress.remaining")


def duration(seconds: float) -> str:
    """A wait in a person's units: `40 s`, `12 min`, `3.2 h`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _were(count: int, word: str) -> str:
    """`1 balance was`, `2 balances were`."""
    return f"{counted(count, word)} {'was' if count == 1 else 'were'}"


MTP_WORDS = {"apart": "apart (rank P − 2)", "with_loss": "with the loss"}


def _gib(mb: float) -> str:
    return f"{mb / 1024:.1f}"


def render(result: SearchResult) -> None:
    """The ranking, the refusals by reason, and the counts, as rich tables."""
    console = table_console()
    spec = result.spec
    console.print(
        f"[bold]ppb search[/bold] {spec.source}: {', '.join(spec.specs)} on {spec.devices} × "
        f"{spec.device.name or 'device'}, {spec.global_batch} sequences of {spec.seq_length} tokens, "
        f"{spec.framework}"
    )
    if not result.ranked:  # no empty table titled "the 0 fastest strategies" (until December 2026)
        console.print("no strategy is ranked: each one of the grid is counted below by its reason")
    fastest = "the fastest strategy" if len(result.ranked) == 1 else f"the {len(result.ranked)} fastest strategies"
    table = Table(title=f"{fastest}, each balanced")
    # the MTP layers' place, where the balancer weighed two (`balance.mtp_apart`)
    mtp = any(entry.mtp for entry in result.ranked)
    for name in (
        "#",
        "strategy",
        "tokens/s per device",
        "iteration s",
        "MFU %",
        "peak GiB",
        "headroom GiB",
        "gain over uniform",
        "bound s",
        *(["MTP layers"] if mtp else []),
        "behind #1 (where)",
    ):
        table.add_column(name, justify="left" if name in ("strategy", "MTP layers", "behind #1 (where)") else "right")
    for place, entry in enumerate(result.ranked, start=1):
        table.add_row(
            str(place),
            entry.strategy.label(spec),
            f"{entry.tokens_per_second_per_device:,.0f}",
            f"{entry.seconds:,.3f}",
            f"{100 * entry.mfu:.1f}",
            _gib(entry.peak_memory_mb),
            _gib(entry.headroom_mb),
            "—" if entry.gain is None else f"{entry.gain:.3f}×",
            f"{entry.bound_s:.3f}",
            *([MTP_WORDS.get(entry.mtp or "", "with the loss (one place)")] if mtp else []),
            "—" if place == 1 else behind(result.ranked[0], entry),
        )
    if result.ranked:
        console.print(table)
    said = dualpipev_line(spec, result.ranked)
    if said:
        console.print(said, markup=False, highlight=False)
    if mtp:
        console.print(
            "MTP layers: each strategy with PP ≥ 2 (not DualPipeV) balanced with them beside the loss and apart on "
            "rank P − 2's last virtual stage (Megatron-Core's standalone MTP, as `ppb balance` tries), the faster kept"
        )
    if result.proven is not None and result.proven < len(result.ranked):
        console.print(proven_line(result.proven, result.unexamined_bound_s, result.proven_gap))
    if result.clock_stopped:
        console.print("the wall-clock safety net (search.time_budget_s) stopped the search: another run may differ")
    if result.counts.get("clock_stopped"):
        console.print(
            f"{_were(result.counts['clock_stopped'], 'balance')} stopped by the wall-clock safety net "
            "(search.balance_time_limit_s), not by the work limits: those plans depend on the machine"
        )
    timed_out = result.rejected.get(BALANCER_TIMEOUT, 0)
    if timed_out:
        console.print(
            f"{counted(timed_out, 'strategy', 'strategies')} gave no answer within "
            f"{spec.search.evaluation_timeout_s:g} s (the opt-in "
            "wall-clock search.evaluation_timeout_s): the ranking is exact among the others and depends on the "
            "machine (drop the timeout to include them)"
        )
    failed = result.rejected.get(BALANCER_FAILED, 0)
    if failed:
        console.print(
            f"{counted(failed, 'balancing process', 'balancing processes')} ended without an answer: the ranking is "
            "exact among the other strategies"
        )
    if result.reasons():
        refused = Table(title="strategies not ranked, by reason (numbers as N; one instance each)")
        refused.add_column("count", justify="right")
        refused.add_column("reason")
        refused.add_column("for instance")
        for reason, count in result.reasons().items():
            refused.add_row(str(count), reason, result.example(reason))
        console.print(refused)
    counts = result.counts
    console.print(
        ", ".join(f"{name.replace('_', ' ')} {counts.get(name, 0):,}" for name in counts) + f"; {result.seconds:.1f} s"
    )
    console.print(limits_line(spec.search), markup=False, highlight=False)
    if result.ranked and len(result.ranked[0].stage_peaks_mb) > 1:
        first = result.ranked[0]
        console.print(f"#1 {first.strategy.label(spec)}: {stage_peaks_line(first)}", markup=False, highlight=False)
    _torchtitan(console, spec, result)
    _launch(console, spec, result)


# `run_iteration`'s breakdown terms (they add up to the iteration's seconds) in a user's words
BREAKDOWN_WORDS = {
    "compute": "compute",
    "bubble": "bubble",
    "fsdp_communication": "FSDP comm",
    "p2p": "p2p",
    "dp_communication": "DP comm",
    "optimizer": "optimizer",
    "bookkeeping": "bookkeeping",
}


# seconds apart, relative to the first's, under which two ranked iterations are a tie: float sums' noise
TIE_RELATIVE = 1e-9


def behind(first: Ranked, entry: Ranked, terms: int = 2) -> str:
    """Why *entry* loses to the first: its seconds over the first's, and the (at most *terms*) parts of
    `run_iteration`'s breakdown that grew most, each as its growth (`+0.160 s: bubble +0.120, DP comm +0.030`);
    "tie" where the two take the same seconds. Under a second the growth is said in milliseconds to three
    significant figures (`+0.412 ms: p2p +0.400`): three decimals of a second said "+0.000 s" behind a
    sub-second #1 (torchtitan Llama-3.1-8B, 0.98 s) until session 34. Parts grown by under a hundredth of
    the whole growth are left out."""
    delta = entry.seconds - first.seconds
    if abs(delta) <= TIE_RELATIVE * abs(first.seconds):
        return "tie"
    grown = sorted(
        ((entry.breakdown.get(key, 0.0) - first.breakdown.get(key, 0.0), key) for key in BREAKDOWN_WORDS),
        key=lambda pair: (-pair[0], list(BREAKDOWN_WORDS).index(pair[1])),
    )
    in_ms = abs(delta) < 1.0
    named = [(part, key) for part, key in grown[:terms] if part > 0 and part >= 0.01 * abs(delta)]
    parts = [f"{BREAKDOWN_WORDS[key]} +{_figures(part * 1e3) if in_ms else f'{part:.3f}'}" for part, key in named]
    head = f"+{_figures(delta * 1e3)} ms" if in_ms else f"+{delta:,.3f} s"
    return head + (f": {', '.join(parts)}" if parts else "")


def _figures(value: float, digits: int = 3) -> str:
    """*value* to *digits* significant figures, without an exponent (`160`, `12.3`, `0.412`, `0.000412`)."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def _launch(console: Console, spec: SearchSpec, result: SearchResult) -> None:
    """How to launch the first ranked strategy, in its framework's words: Megatron-LM's flags or MindFormers'
    yaml sections, as `-o DIR` writes them (`NN-<name>.megatron.txt`, `.mindformers.yaml`); torchtitan's
    job-TOML lines are `_torchtitan`'s. Until session 27 only a torchtitan search printed them."""
    if not result.ranked or spec.framework == "torchtitan":
        return
    entry = result.ranked[0]
    if spec.framework == "megatron":
        text, what = megatron_text(spec, entry), "Megatron-LM flags"
    else:
        text, what = mindformers_text(spec, entry), "MindFormers yaml"
    console.print(f"#1 {entry.strategy.label(spec)} as {what}:", markup=False, highlight=False)
    for line in text.splitlines():  # flags and yaml, not rich markup
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _torchtitan(console: Console, spec: SearchSpec, result: SearchResult) -> None:
    """The torchtitan job-TOML lines of the first ranked plan, as `ppb balance` prints them (every plan's:
    `-o DIR`'s `NN-<name>.torchtitan.toml`; at PP 1 its `[activation_checkpoint]` alone); nothing for another
    framework."""
    if spec.framework != "torchtitan":
        return
    for place, entry in enumerate(result.ranked, start=1):
        said = torchtitan_said(spec, entry)
        if said is None:
            continue
        console.print(f"#{place} {entry.strategy.label(spec)}:", markup=False, highlight=False)
        for line in torchtitan_lines(said):  # `[parallelism]` is TOML, not rich markup
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        return


def dualpipev_line(spec: SearchSpec, ranked: list[Ranked]) -> str | None:
    """Under Megatron-LM, that a ranked DualPipeV strategy is not one it runs (None when none is ranked):
    `limits.schedules: [.., dualpipev]` prices DeepSeek's schedule under Megatron's rules, and its flags
    file has a note and no schedule (Megatron-LM d98e8a64 has no DualPipeV)."""
    if spec.framework != "megatron" or not any(entry.strategy.schedule == "dualpipev" for entry in ranked):
        return None
    return (
        "DualPipeV (`v2d` in a name): DeepSeek's schedule priced under Megatron-LM's rules; Megatron-LM does not "
        "run it (torchtitan does), so such a strategy has no Megatron-LM schedule flags"
    )


def stage_peaks_line(entry: Ranked) -> str:
    """Each pipeline stage's peak of a ranked plan and the room a stage has: where memory is tight."""
    peaks = " | ".join(_gib(mb) for mb in entry.stage_peaks_mb)
    return f"peak GiB by pipeline stage {peaks} (of {_gib(entry.memory_mb)} GiB a stage may use)"


def limits_line(options: SearchOptions) -> str:
    """The limits bounding the search's work, in one line: what a user widens when the ranking stops short."""
    budget = "none" if options.balance_budget is None else f"{options.balance_budget:,}"
    clocks = {
        "balance_time_limit_s": options.balance_time_limit_s,
        "evaluation_timeout_s": options.evaluation_timeout_s,
        "time_budget_s": options.time_budget_s,
    }
    said = [f"{name} {value:g}" for name, value in clocks.items() if value is not None]
    return (
        f"limits (search.*): top {options.top}, balance_work {options.balance_work:g} of the balancer's work "
        f"limits each, balance_budget {budget}, wave {options.wave}; "
        + (f"wall clock: {', '.join(said)}" if said else "no wall clock")
    )


def proven_line(proven: int, unexamined_bound_s: float, gap: float | None) -> str:
    """What a budgeted ranking proves: its first *proven* places (none, one or several), the rest the
    fastest found, with the least bound of the strategies left unexamined."""
    if proven == 0:
        said = "no place is proven; every place is"
    elif proven == 1:
        said = "place 1 is proven; past it,"
    else:
        said = f"places 1 to {proven} are proven; past them,"
    return (
        f"{said} the fastest found within the search's budget (the strategies left unexamined are bounded at "
        f"{unexamined_bound_s:,.3f} s or more"
        + ("" if gap is None else f": none can be more than {percent_words(gap)} faster than the first")
        + ")"
    )
