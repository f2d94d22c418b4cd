"""`choices._option_front` (one body type's (backward, activation) front over option mixes) against the
exhaustive listing: every way of giving `count` layers the allowed options, reduced by the definition
of dominance written out here (no point at most as large in both and smaller in one)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ppb_core.balance.choices import _option_front, _option_fronts
from ppb_core.model.switches import OPTIONS


def _exhaustive(count: int, options: tuple[int, ...], backward: list[float], activation: list[float]) -> list:
    """(B, A) of every undominated mix, sorted, with the mixes giving each: B and A summed option by option
    in `options` order, as the balancer sums them."""
    points: dict[tuple[float, float], list[tuple[int, ...]]] = {}
    for split in itertools.product(range(count + 1), repeat=len(options)):
        if sum(split) != count:
            continue
        b = a = 0.0
        counts = [0] * len(OPTIONS)
        for k, n in zip(options, split, strict=True):
            b += n * backward[k]
            a += n * activation[k]
            counts[k] = n
        points.setdefault((b, a), []).append(tuple(counts))
    kept = [p for p in points if not any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in points)]
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


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(0, 7),
    options=st.lists(st.integers(0, len(OPTIONS) - 1), min_size=0, max_size=len(OPTIONS), unique=True).map(
        lambda xs: tuple(sorted(xs))
    ),
    backward=st.lists(values, min_size=len(OPTIONS), max_size=len(OPTIONS)),
    activation=st.lists(values, min_size=len(OPTIONS), max_size=len(OPTIONS)),
)
def test_the_front_is_the_exhaustive_one(
    count: int, options: tuple[int, ...], backward: list[float], activation: list[float]
) -> None:
    """Same points, in order of backward time; each point's mix is one of the mixes that give it; and the same
    front again out of a pass over more layers (what the catalogue keeps)."""
    front = _option_front(count, options, backward, activation)
    assert _option_fronts(count + 3, options, backward, activation)[count] == front
    expected = _exhaustive(count, options, backward, activation)
    assert [(b, a) for b, a, _ in front] == [point for point, _ in expected]
    for (_, _, counts), (_, mixes) in zip(front, expected, strict=True):
        assert counts in mixes
