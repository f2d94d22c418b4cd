"""The recompute front: of every switch setting of a layer kind, those no other setting beats.

A setting beats another when it needs no more memory per micro-batch, no more memory once, no
more backward time, no more memory at any count of micro-batches in flight the stages keep, and
no bigger backward working set; a knapsack over the stages then only needs the front. The
balancer's option names (NONE, SLCT, COMM, BOTH, FULL) label the settings that are one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

from ppb_core.dominance import undominated
from ppb_core.model.switches import SWITCHES, recomputed
from ppb_core.payload.profile import Cost, SwitchProfile


@dataclass(frozen=True)
class LayerOption:
    """One recompute setting of a layer kind, priced.

    `recompute` is the set of switches recomputed, or None for full recompute. `excess` holds
    `(count, amount)` for each count of micro-batches in flight at which the linear split
    over-charges (zeros left out). Units as the profile's (bytes and the time source's unit).
    """

    recompute: frozenset[str] | None
    memory_per_micro_batch: float
    memory_once: float
    forward_time: float
    backward_time: float
    names: tuple[str, ...] = ()
    excess: tuple[tuple[int, float], ...] = ()
    working_extra: float = 0.0
    first_working_extra: float = 0.0

    def excess_at(self, in_flight: int) -> float:
        return next((amount for count, amount in self.excess if count == in_flight), 0.0)

    def memory(self, in_flight: int) -> float:
        """Memory with *in_flight* micro-batches in flight: the linear split, less its excess there."""
        return in_flight * self.memory_per_micro_batch + self.memory_once - self.excess_at(in_flight)

    @property
    def switches(self) -> dict[str, int] | None:
        """The setting as switches (1 keep, 0 recompute); None for full recompute."""
        if self.recompute is None:
            return None
        return {name: int(name not in self.recompute) for name in SWITCHES}

    @property
    def name(self) -> str:
        """The balancer's name for the setting, or the switches it recomputes."""
        if self.names:
            return self.names[0]
        return "+".join(name for name in SWITCHES if name in (self.recompute or ()))


def option_names(recompute: frozenset[str] | None, configured: Mapping[str, object] | None = None) -> tuple[str, ...]:
    """The balancer's options a setting is, given the configured selective switches.

    FULL is full recompute; NONE recomputes nothing; SLCT recomputes the configured set; COMM the
    tensor-parallel gathers alone; BOTH the configured set and the gathers. A setting may be
    several at once (with nothing configured, NONE is SLCT too). Without *configured*, only NONE,
    COMM and FULL can be named.
    """
    if recompute is None:
        return ("FULL",)
    selective = recomputed(configured) if configured is not None else None
    names = []
    if not recompute:
        names.append("NONE")
    if selective is not None and recompute == selective:
        names.append("SLCT")
    if recompute == frozenset({"gather"}):
        names.append("COMM")
    if selective is not None and recompute == selective | {"gather"}:
        names.append("BOTH")
    return tuple(names)


def _cost(profile: SwitchProfile, recompute: frozenset[str] | None) -> Cost:
    return profile.full if recompute is None else profile.selective(recompute)


def price_option(
    profile: SwitchProfile, recompute: Iterable[str] | None, configured: Mapping[str, object] | None = None
) -> LayerOption:
    """A setting (switch names recomputed, or None for full) priced from the profile."""
    chosen = None if recompute is None else frozenset(recompute)
    cost = _cost(profile, chosen)
    excess = tuple((count, amount) for count, amount in zip(profile.counts, cost.excess, strict=True) if amount != 0)
    return LayerOption(
        recompute=chosen,
        memory_per_micro_batch=cost.memory_per_micro_batch,
        memory_once=cost.memory_once,
        forward_time=profile.forward_time,
        backward_time=cost.backward_time,
        names=option_names(chosen, configured),
        excess=excess,
        working_extra=cost.working,
        first_working_extra=cost.first_working,
    )


def candidates(profile: SwitchProfile) -> list[frozenset[str] | None]:
    """Every subset of the acting switches, smallest first, then full recompute."""
    acting = profile.acting()
    subsets: list[frozenset[str] | None] = [
        frozenset(chosen) for size in range(len(acting) + 1) for chosen in combinations(acting, size)
    ]
    return [*subsets, None]


def build_front(profile: SwitchProfile, configured: Mapping[str, object] | None = None) -> list[LayerOption]:
    """The settings no other beats, plain and full always among them, by backward time.

    Settings are compared on memory per micro-batch, memory once and backward time, the memory
    at each of the profile's counts, and the backward's working sets (what the layer keeps of a
    census's parts included; full recompute keeps the plain layer's). Of two that tie, the one
    first in `candidates` order stays. Sorted by backward time, then by memory per micro-batch,
    most first.
    """
    settings = candidates(profile)
    options = [price_option(profile, chosen, configured) for chosen in settings]
    keys = []
    for chosen, option in zip(settings, options, strict=True):
        cost = _cost(profile, chosen)
        kept = profile.plain.census_kept if chosen is None else cost.census_kept
        keys.append(
            (
                *cost.values(),
                *(option.memory(count) for count in profile.counts),
                kept + cost.working,
                kept + cost.first_working,
            )
        )

    front = set(undominated(keys))
    last = len(settings) - 1
    kept_options = [option for index, option in enumerate(options) if index in (0, last) or index in front]
    return sorted(kept_options, key=lambda option: (option.backward_time, -option.memory_per_micro_batch))


__all__ = ["LayerOption", "build_front", "candidates", "option_names", "price_option"]
