"""Pareto dominance, the one rule: a point is beaten by another that is at most as large everywhere.

Minimizing every coordinate, point *a* beats point *b* when a ≤ b in each coordinate and a ≠ b,
or a = b and *a* comes first: of equal points the first stays. To maximize, negate the points.
Used for recompute settings (`payload.front`), withdrawn options (`payload.postprocess`), the
balancer's stage choices (`balance.choices`; its cell fronts add the tie-break's recompute rule,
`choices._kept`), a schedule's in-flight peaks
(`schedules`) and a census's working-set lines (`census.fit`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Point = Sequence[float]


def undominated(
    points: Sequence[Point], tolerance: float = 0.0, scan: Callable[[int], object] | None = None
) -> list[int]:
    """Indices of the points no other point beats, in the order they are scanned.

    *tolerance* lets a point beat another that is smaller by at most that much in a coordinate.
    The scan goes lexicographically by point (ties by index; the points must then compare as
    tuples or lists do) unless *scan* gives a key per index;
    any key under which a point comes after every point that beats it will do (the sum, say).
    """
    # sorted() is stable: equal points keep their index order.
    order = sorted(range(len(points)), key=scan or points.__getitem__)
    if not order:
        return []
    if len(points[0]) == 2 and tolerance == 0.0 and scan is None:
        # Two coordinates, scanned by the first: a point survives iff its second is below every earlier one's.
        kept, least = [], float("inf")
        for i in order:
            second = points[i][1]
            if second < least:
                kept.append(i)
                least = second
        return kept
    array = np.asarray(points, dtype=float)
    if tolerance == 0.0:
        ordered = np.asarray(order)
        return ordered[undominated_in_order(array[ordered])].tolist()
    kept_rows: list[int] = []
    for i in order:
        if not kept_rows or not (array[kept_rows] <= array[i] + tolerance).all(axis=1).any():
            kept_rows.append(i)
    return kept_rows


def undominated_in_order(array: np.ndarray, block: int = 256) -> np.ndarray:
    """Positions of the rows of *array* (already in scan order: a row's beaters come before it) that
    no earlier row beats, as whole-array comparisons a block of rows at a time.

    A row beaten by an earlier row that is itself beaten is beaten by that one's beater too (≤ is
    transitive), so comparing with every earlier row, kept or not, is the same rule as above."""
    rows = len(array)
    kept: list[np.ndarray] = []
    front = array[:0]
    for start in range(0, rows, block):
        chunk = array[start : start + block]
        alive = np.arange(len(chunk))
        if len(front):
            alive = np.flatnonzero(~(front[None, :, :] <= chunk[:, None, :]).all(axis=2).any(axis=1))
        # among the rest of the block: beaten by an earlier one ([i, j]: row j ≤ row i everywhere, j < i)
        rest = chunk[alive]
        beaten = np.tril((rest[None, :, :] <= rest[:, None, :]).all(axis=2), k=-1).any(axis=1)
        survivors = alive[~beaten]
        kept.append(start + survivors)
        front = np.concatenate([front, chunk[survivors]])
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
