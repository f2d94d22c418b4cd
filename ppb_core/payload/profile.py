"""Switch profiles: what a layer kind costs plain, with each recompute switch alone, and fully recomputed.

Nine measurements (ten for an MLA layer, whose up-projections `attUp` acts on) price every one of
the 128 (256) switch settings by addition: a setting costs the base plus, for each switch it
recomputes, what that switch alone changes. `ppb_core.payload.front` turns a profile into the settings
worth offering; `ppb_core.payload.profiling.profile_run` measures profiles through the memory and time models.

Units: memory in bytes (as the `MemorySource` gives them), times in the `TimeSource`'s unit
(milliseconds for `ppb_core.timing`). The field names are those of hyper-parallel's
`sapp_nd/recompute/profile.py` (`Cost`, `SwitchProfile`), which the users of the recompute front
know; the tables of `ppb_core.tables.payload` carry the units.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ppb_core.model.switches import OPTIONAL, SWITCHES


def _pairwise(mine: tuple[float, ...], theirs: tuple[float, ...], sign: int) -> tuple[float, ...]:
    # Two costs of one profile state their excess at the same counts; a mismatch is a bug, not data.
    return tuple(a + sign * b for a, b in zip(mine, theirs, strict=True))


@dataclass(frozen=True)
class Cost:
    """A layer under one recompute setting, as the balancer and the front charge it.

    `memory_per_micro_batch` is charged once per micro-batch in flight (activations plus the
    buffers that grow with the micro-batches), `memory_once` once whatever their number.
    `excess[i]` is what that linear split over-charges at the profile's `counts[i]` micro-batches
    in flight. `working` and `first_working` are what the backward holds beyond what the layer
    keeps, as warm-up ends and on a stage's first layer as a backward ends; where a census
    prices the layer, `working` is stated before the census clamp and `census_kept` is what the
    layer keeps of the census's parts (see `SwitchProfile.selective`).
    """

    memory_per_micro_batch: float
    memory_once: float
    backward_time: float
    excess: tuple[float, ...] = ()
    working: float = 0.0
    first_working: float = 0.0
    census_kept: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.memory_per_micro_batch + other.memory_per_micro_batch,
            self.memory_once + other.memory_once,
            self.backward_time + other.backward_time,
            _pairwise(self.excess, other.excess, 1),
            self.working + other.working,
            self.first_working + other.first_working,
            self.census_kept + other.census_kept,
        )

    def __sub__(self, other: Cost) -> Cost:
        return Cost(
            self.memory_per_micro_batch - other.memory_per_micro_batch,
            self.memory_once - other.memory_once,
            self.backward_time - other.backward_time,
            _pairwise(self.excess, other.excess, -1),
            self.working - other.working,
            self.first_working - other.first_working,
            self.census_kept - other.census_kept,
        )

    def values(self) -> tuple[float, float, float]:
        """What the balancer weighs: memory per micro-batch, memory once, backward time."""
        return self.memory_per_micro_batch, self.memory_once, self.backward_time


@dataclass(frozen=True)
class SwitchProfile:
    """One model's layer kind: its forward time, and its cost plain, per switch alone, and full.

    `selective_base` is the layer selective with every op kept, where a census prices the layer
    (a census prices a selective layer on its own records, so settings add up from it rather
    than from the plain layer); None otherwise. `whole` holds settings measured whole (the
    census's own selective policy), which `selective` returns as measured. `census_held` is what
    the backward holds of the census's parts, for the clamp.
    """

    forward_time: float
    plain: Cost
    alone: Mapping[str, Cost]
    full: Cost
    counts: tuple[int, ...] = ()
    selective_base: Cost | None = None
    whole: Mapping[frozenset[str], Cost] = field(default_factory=dict)
    census_held: float | None = None

    @property
    def base(self) -> Cost:
        """What the settings add up from: the selective layer keeping every op, or the plain layer."""
        return self.plain if self.selective_base is None else self.selective_base

    def acting(self) -> tuple[str, ...]:
        """The switches worth setting, in SWITCHES order.

        Every switch that is not optional, and an optional one (attUp) only where the kind keeps
        something it drops, i.e. its alone cost differs from the base.
        """
        return tuple(
            name for name in SWITCHES if name not in OPTIONAL or (name in self.alone and self.alone[name] != self.base)
        )

    def selective(self, recompute: Iterable[str]) -> Cost:
        """The cost of recomputing the switches in *recompute* (and keeping the rest), by addition.

        A setting measured whole is returned as measured. Otherwise each recomputed switch adds
        what it changes alone, in SWITCHES order (so the sum does not depend on the order given).
        Where a census prices the layer the working set is clamped again: the backward's working
        set cannot drop below what it holds, `census_held`, however much the setting frees, so
        `working += max(0, census_kept - census_held)` — the one part that is not additive.
        """
        chosen = frozenset(recompute)
        unknown = chosen - set(SWITCHES)
        if unknown:
            raise ValueError(f"unknown switches {sorted(unknown)} (switches: {', '.join(SWITCHES)})")
        if chosen in self.whole:
            return self.whole[chosen]
        base = self.plain if not chosen else self.base
        cost = base
        for name in SWITCHES:
            if name in chosen:
                if name not in self.alone:
                    raise KeyError(f"the profile has no cost for {name} alone (it was measured without each switch)")
                cost = cost + (self.alone[name] - base)
        if chosen and self.census_held is not None:
            cost = dataclasses.replace(cost, working=cost.working + max(0.0, cost.census_kept - self.census_held))
        return cost


__all__ = ["Cost", "SwitchProfile"]
