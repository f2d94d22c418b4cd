"""`choices._option_front` (one body type's (backward, activation) front over option mixes) against the
exhaustive listing: every way of giving `count` layers the allowed options, reduced by the definition
of dominance written out here (`_exhaustive`: at most as large in both and no worse for the tie-break)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ppb_core.balance.choices import _option_front, _option_fronts, _ranked_fronts, tie_unit, tie_units
from ppb_core.model.switches import OPTIONS


def _exhaustive(count: int, options: tuple[int, ...], backward: list[float], activation: list[float]) -> list:
    """(B, A, recomputed layers, options used) of every mix no other beats, sorted, with the mixes giving
    each: B and A summed option by option in `options` order, as the balancer sums them. Mix q beats p
    when q ≤ p in B and A and q is no worse for the tie-break (`balance/tiebreak.py`): smaller B, or
    fewer layers off NONE (OPTIONS[0]), or as many and only options p uses (issue 13)."""
    points: dict[tuple[float, float, int, tuple[int, ...]], list[tuple[int, ...]]] = {}
    for split in itertools.product(range(count + 1), repeat=len(options)):
        if sum(split) != count:
            continue
        b, a = 0 * backward[0], 0.0  # a Fraction when the times are (exact sums)
        counts = [0] * len(OPTIONS)
        for k, n in zip(options, split, strict=True):
            b += n * backward[k]
            a += n * activation[k]
            counts[k] = n
        used = tuple(k for k, n in enumerate(counts) if n)
        points.setdefault((b, a, count - counts[0], used), []).append(tuple(counts))

    def beats(q: tuple, p: tuple) -> bool:
        no_worse = q[0] < p[0] or q[2] < p[2] or (q[2] == p[2] and set(q[3]) <= set(p[3]))
        return q != p and q[0] <= p[0] and q[1] <= p[1] and no_worse

    kept = [p for p in points if not any(beats(q, p) for q in points)]
    return sorted((p, points[p]) for p in kept)


def test_two_options_by_hand() -> None:
    """NONE (b 1, a 4) and FULL (b 2, a 1) for 2 layers: (2, 8), (3, 5), (4, 2), all three undominated."""
    backward = [1.0, 0.0, 0.0, 0.0, 2.0]
    activation = [4.0, 0.0, 0.0, 0.0, 1.0]
    front = _option_front(2, (0, 4), backward, activation)
    assert front == [(2.0, 8.0, (2, 0, 0, 0, 0)), (3.0, 5.0, (1, 0, 0, 0, 1)), (4.0, 2.0, (0, 0, 0, 0, 2))]


def test_a_dominated_option_is_never_mixed_in() -> None:
    """SLCT (b 1.5, a 5) is beaten by NONE (b 1, a 4): 3 layers give only NONE/FULL mixes (4 points)."""
    backward = [1.0, 1.5, 0.0, 0.0, 2.0]
    activation = [4.0, 5.0, 0.0, 0.0, 1.0]
    front = _option_front(3, (0, 1, 4), backward, activation)
    assert [counts for _, _, counts in front] == [
        (3, 0, 0, 0, 0),
        (2, 0, 0, 0, 1),
        (1, 0, 0, 0, 2),
        (0, 0, 0, 0, 3),
    ]


values = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 0.1, 0.3, 0.7])
# activations whose float sums are exact (the front compares memory as summed; the backward's inexact sums
# are what tie units are for)
dyadic = st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0])


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(0, 7),
    options=st.lists(st.integers(0, len(OPTIONS) - 1), min_size=0, max_size=len(OPTIONS), unique=True).map(
        lambda xs: tuple(sorted(xs))
    ),
    backward=st.lists(values, min_size=len(OPTIONS), max_size=len(OPTIONS)),
    activation=st.lists(dyadic, min_size=len(OPTIONS), max_size=len(OPTIONS)),
)
# found by hypothesis: compared in raw float sums, 5·0.1 + 2·0.1 < 7·0.1 kept a needless COMM mix
@example(count=7, options=(0, 1, 4), backward=[0.1, 0.1, 0, 0, 0.5], activation=[0.25, 0.25, 0, 0, 0])
def test_the_front_is_the_exhaustive_one(
    count: int, options: tuple[int, ...], backward: list[float], activation: list[float]
) -> None:
    """Same points, in order of backward time; each point's mix is one of the mixes that give it; and the same
    front again out of a pass over more layers (what the catalogue keeps)."""
    front = _option_front(count, options, backward, activation)
    assert _option_fronts(count + 3, options, backward, activation)[count] == front
    # the backward as dominance compares it (docs/balance.md): whole tie units (1e-12 of the largest time),
    # summed exactly; in floats 5·0.1 + 2·0.1 ≠ 7·0.1, and 0.1 + 0.5 and 2·0.3 differ in the 17th digit
    exact = [Fraction(round(b / tie_unit([backward]))) for b in backward]
    expected = _exhaustive(count, options, exact, activation)  # type: ignore[arg-type]
    described = [
        (sum(n * exact[k] for k, n in enumerate(c)), a, sum(c) - c[0], tuple(k for k, n in enumerate(c) if n))
        for _, a, c in front
    ]
    assert sorted(described) == [point for point, _ in expected]
    assert [point[0] for point in described] == sorted(point[0] for point in described)
    mixes = dict(expected)
    for point, (b, _, counts) in zip(described, front, strict=True):
        assert counts in mixes[point]
        assert b == pytest.approx(sum(n * backward[k] for k, n in enumerate(counts)), rel=1e-12)


def _snapped(backward: list[float]) -> list[float]:
    """docs/balance.md: a backward faster than NONE's (OPTIONS[0]) by at most 1e-6 (relative) counts as NONE's."""
    return [backward[0] if b < backward[0] <= b * (1 + 1e-6) else b for b in backward]


# no two mixes of these tie in exact sums unless in tie units too (1 + 1e-7 with 1 - 1e-7 would not, rounded)
near = st.sampled_from([1.0, 1.0 - 1e-7, 1.0 - 9e-7, 1.0 - 1e-5, 0.5, 2.0, 1.0 + 1e-3])


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(0, 5),
    options=st.lists(st.integers(0, len(OPTIONS) - 1), min_size=1, max_size=len(OPTIONS), unique=True).map(
        lambda xs: tuple(sorted(xs))
    ),
    backward=st.lists(near, min_size=len(OPTIONS), max_size=len(OPTIONS)),
    activation=st.lists(values, min_size=len(OPTIONS), max_size=len(OPTIONS)),
)
def test_near_ties_are_ties_in_the_front(
    count: int, options: tuple[int, ...], backward: list[float], activation: list[float]
) -> None:
    """With tie units (`choices.tie_units`) the front is the exhaustive one of the snapped times: the
    same (snapped B, A, recomputed, options used) points, each point's true B that of one of its mixes."""
    rank = tie_units([backward], 0)[0]
    front = _ranked_fronts(count, options, backward, activation, rank, 0)[count]
    snapped = [Fraction(b) for b in _snapped(backward)]  # exact sums: in floats 2·x + 2·y ≠ 2·x + y + y'
    expected = _exhaustive(count, options, snapped, activation)  # type: ignore[arg-type]
    described = sorted(
        (sum(n * snapped[k] for k, n in enumerate(c)), a, sum(c) - c[0], tuple(k for k, n in enumerate(c) if n))
        for _, a, c, _ in front
    )
    assert described == [point for point, _ in expected]
    for b, _, counts, _ in front:
        assert b == pytest.approx(sum(n * backward[k] for k, n in enumerate(counts)), rel=1e-12)
