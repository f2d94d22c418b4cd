"""How a solve tells the outside world what it is doing, and what bounds its work.

The solver calls a `ProgressHook` with a `Progress` at every step it finishes: the best plan's
value so far (incumbent), the best proven lower bound and the gap between them. Front ends
decide how to show it: the CLI draws it with rich on a terminal, the Dagster asset routes
`Progress.line()` to its log. Seconds are reported for people only; no decision depends on them.

`WorkLimits` are the deterministic limits that end a solve (HiGHS branch-and-bound nodes, local
moves, rounds of the lazy path loop): the same input gives the same plan on any machine and load.
`Clock` is the wall-clock safety bound (`-t`), none unless asked for; when it is what stops a solve,
the solve says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from ppb_core.units import percent_words


@dataclass(frozen=True)
class Progress:
    """One step of a solve. Times in the descriptions' unit, which is `unit_s` seconds when known
    (`showing_seconds`); `seconds` since the solve started."""

    # start | listing | listing_work | closed_form | exchange | start_plan | probing | bound | round | tie_break
    # | round_search | megatron | setting_start | torchtitan | least_memory | least_memory_search | done
    # | memory_refit (`fitting`: the plan over the memory model by some MB, solved again)
    phase: str
    message: str
    seconds: float
    incumbent: float | None = None
    bound: float | None = None
    unit_s: float | None = None
    # more named times in the descriptions' unit (a bound's level, a setting's plan), shown like the incumbent
    figures: tuple[tuple[str, float], ...] = ()

    @property
    def gap(self) -> float | None:
        if self.incumbent is None or self.bound is None or self.incumbent <= 0:
            return None
        return max(0.0, (self.incumbent - self.bound) / self.incumbent)

    def line(self) -> str:
        """One log line: `[12.3 s] round: incumbent 3.271 s, bound 3.104 s, gap 5.11% — ...`, the
        figures in seconds when `unit_s` is known, else in the descriptions' unit."""

        def value(figure: float) -> str:
            return f"{figure:.6g}" if self.unit_s is None else f"{figure * self.unit_s:,.3f} s"

        figures = []
        if self.incumbent is not None:
            figures.append(f"incumbent {value(self.incumbent)}")
        if self.bound is not None:
            figures.append(f"bound {value(self.bound)}")
        if self.gap is not None:
            figures.append(f"gap {percent_words(self.gap)}")
        figures += [f"{name} {value(figure)}" for name, figure in self.figures]
        text = f"[{self.seconds:.1f} s] {self.phase}"
        if figures:
            text += ": " + ", ".join(figures)
        return f"{text} — {self.message}" if self.message else text


ProgressHook = Callable[[Progress], None]


def showing_seconds(hook: ProgressHook | None, unit_s: float | None) -> ProgressHook | None:
    """*hook* hearing each step with its descriptions' unit, *unit_s* seconds, so it shows seconds."""
    if hook is None or unit_s is None:
        return hook
    show = hook
    return lambda progress: show(replace(progress, unit_s=unit_s))


def log_lines(write: Callable[[str], None]) -> ProgressHook:
    """A hook that writes each step as one line (e.g. `context.log.info` in a Dagster asset)."""
    return lambda progress: write(progress.line())


@dataclass(frozen=True)
class WorkLimits:
    """What ends a solve deterministically.

    Branch-and-bound work is counted in nodes × size^1.5, size the program's columns and rows (a
    node's LP and its strong branching grow about so), so one budget stops small and large
    programs after similar effort.
    """

    node_work: int = 12_000_000  # the lazy-path rounds of one solve, all together
    first_round_share: int = 16  # the first round gets this fraction of it; a round agreeing with its T doubles
    rounds: int = 40
    check_work: int = 2_000_000  # each feasibility check of a bisection (cut short counts as feasible)
    tie_work: int = 2_000_000  # each lexicographic tie-breaking criterion
    closed_nodes: int = 100_000  # the closed form's program (it is solved to optimality in far fewer)
    local_moves: int = 400  # improving moves of the local search that starts the program
    # schedule ops the local search may run (plans evaluated × 2·m·V·P ops each)
    local_work: int = 20_000_000
    # schedule ops the stage exchanges after the listing may run (`local.exchange`)
    exchange_work: int = 200_000_000
    seed_work: int = 4_000_000  # schedule ops run to find seed paths under random weightings
    # schedule ops the nudged path family may run (`bounds.nudged_family`, at V = 1: the schedule once per stage,
    # 2·m·P ops each), else only the drain family's row is added: at P=512, m=256 it is 134 million, the first bound
    # after over seven minutes of wall clock (load 10); the 128 layers at P=64, m=128: 1 million
    family_work: int = 50_000_000
    # array elements the listing of stage choices may grow (numpy, ~1e8 a second), per catalogue
    listing_work: int = 300_000_000
    # stage choices listed in all, at most, else the listing counts as cut: a program over more is too
    # large to search (32 alternating layers, a body type each, at P=4, V=2: 70,108 for the closed form,
    # whose first bisection step's program ran minutes); the instances list at most 1,000
    stage_choices: int = 20_000
    # nonzeros a program searched by branch and bound may have (its rows and path rows), else it is not searched
    # (nor tie-broken): its root runs HiGHS's implied-bound probing over every fractional choice, with no limit
    # checked inside (HighsImplications::separateImpliedBounds, ERGO-Code/HiGHS 73cac48). Measured (1,024 layers):
    # P=512's closed form, 530,947 nonzeros, proven at its root in 2.7 CPU s; its critical path program, 983,674
    # (1,149 path rows), and P=64 V=8's cell program, 2,263,850, each ran its first round's root over 20 minutes.
    # The issue's instances' programs have under 100,000 (llama2_70b.json at P=16, V=2: 95,586)
    program_nonzeros: int = 750_000
    # the program over cell choices (when the stage listing is cut) lists at most this many cell
    # choices, else it is not built: its nodes grow slow past that (27,687 choices: 20 nodes, ~45 s)
    cell_choices: int = 30_000
    # schedule ops the probing of stage choices may run (`probing.probe`: one run of the schedule per
    # relaxation solved, 2·m·V·P ops each) before the program runs
    probe_work: int = 30_000_000

    def scaled(self, share: float) -> WorkLimits:
        """These limits with every budget of work (`WORK_BUDGETS`) times *share*, each at least 1:
        searches that together may spend what one search spends (the Megatron-Core alternatives
        beside a plan, each balance of a strategy search). Rounds and the closed form's nodes stay."""
        return replace(self, **{name: max(1, int(getattr(self, name) * share)) for name in WORK_BUDGETS})

    @staticmethod
    def nodes(work: int, size: int) -> int:
        """Nodes a budget of *work* buys in a program of *size* columns and rows."""
        return max(20, int(work / max(1, size) ** 1.5))


# the limits that are a budget of work, which `WorkLimits.scaled` shares out
WORK_BUDGETS = (
    "node_work",
    "check_work",
    "tie_work",
    "local_moves",
    "local_work",
    "exchange_work",
    "seed_work",
    "listing_work",
    "probe_work",
)


class Clock:
    """The wall-clock safety bound: seconds left, and whether it has run out. None (the default of every
    command) is no bound at all: the work limits alone end a solve, so its plan is the same on any
    machine and load. A bound given is a last resort; a solve it stops says so (`stopped_by:
    "time_limit"`, and the commands print a warning)."""

    def __init__(self, seconds: float | None = None) -> None:
        self.started = time.perf_counter()
        self.seconds = math.inf if seconds is None else seconds

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def remaining(self) -> float:
        return self.seconds - self.elapsed

    @property
    def out(self) -> bool:
        return self.remaining <= 0


class Reporter:
    """Sends `Progress` to a hook (if any), stamping the seconds."""

    def __init__(self, hook: ProgressHook | None, clock: Clock) -> None:
        self.hook = hook
        self.clock = clock

    def __call__(
        self,
        phase: str,
        message: str = "",
        incumbent: float | None = None,
        bound: float | None = None,
        figures: tuple[tuple[str, float], ...] = (),
    ) -> None:
        if self.hook is not None:
            self.hook(Progress(phase, message, self.clock.elapsed, incumbent, bound, figures=figures))

    def within(self, part: str) -> Reporter:
        """This reporter with each message led by *part* (which part of a solve of several: a torchtitan
        setting), so a line says whose figures it shows."""
        if self.hook is None:
            return self
        hook = self.hook
        return Reporter(lambda p: hook(replace(p, message=f"{part}: {p.message}" if p.message else part)), self.clock)
