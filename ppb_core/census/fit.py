"""Bytes per token from measurements at a few shapes: a constant, a term that grows with the sequence, and more.

A layer keeps, per token of a micro-batch, a fixed number of bytes for most tensors, plus bytes
that grow with the sequence length for the few that hold a score per pair of tokens (eager
attention's scores and probabilities). So a measurement of B bytes at T = b·s tokens is

    B = T · (base + per_seq · s [+ per_expert · E]) [+ T · (base_tp + per_seq_tp · s) / t]

with E the routed experts built (where a MoE kind is measured at more than one count) and t the
tensor-parallel split of the layer measured (where the working set is split by measuring a
rank's share). The coefficients are fitted by least squares on the relative error of each
measurement; the fit reports its largest relative residual (0 when the measurements determine
the coefficients exactly).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from ppb_core.census.attribution import (
    BUCKETS,
    LayerGraph,
    attribute,
    bucket_bytes,
    kept_storages,
    part_bytes,
    recompute_shares,
)
from ppb_core.census.record import Kept, KindCensus, Part, PerToken, RankSplit, Setting, WorkingLine
from ppb_core.dominance import undominated
from ppb_core.model.switches import SWITCHES

# Each term's feature for one measurement.
TERMS: dict[str, str] = {
    "base": "tokens",
    "per_seq": "tokens · seq",
    "per_expert": "tokens · experts",
    "base_tp": "tokens / tp",
    "per_seq_tp": "tokens · seq / tp",
}


@dataclass(frozen=True)
class Point:
    """One measurement: *value* bytes for a micro-batch of *batch* sequences of *seq* tokens."""

    batch: int
    seq: int
    value: float
    experts: int = 0
    tp: int = 1

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def feature(self, term: str) -> float:
        tokens = float(self.tokens)
        return {
            "base": tokens,
            "per_seq": tokens * self.seq,
            "per_expert": tokens * self.experts,
            "base_tp": tokens / self.tp,
            "per_seq_tp": tokens * self.seq / self.tp,
        }[term]


@dataclass(frozen=True)
class Fit:
    coefficients: dict[str, float]
    max_relative_residual: float

    def predict(self, point: Point) -> float:
        return sum(value * point.feature(term) for term, value in self.coefficients.items())


class FitError(ValueError):
    """The measurements cannot determine the terms asked for."""


def fit(points: Sequence[Point], terms: Sequence[str]) -> Fit:
    """Least-squares coefficients of *terms*, weighting each point by its own size.

    Every term must be determined by the points (distinct sequence lengths for `per_seq`,
    distinct expert counts for `per_expert`, distinct splits for the `_tp` terms).
    """
    unknown = [term for term in terms if term not in TERMS]
    if unknown:
        raise ValueError(f"unknown fit terms {unknown}")
    if not points:
        raise FitError("no measurements to fit")
    matrix = np.array([[point.feature(term) for term in terms] for point in points], dtype=float)
    values = np.array([point.value for point in points], dtype=float)
    # Relative least squares: each row divided by its measured value (zero rows left as they are).
    weights = np.array([1.0 / value if value else 1.0 for value in values])
    weighted = matrix * weights[:, None]
    # Columns scaled to one, so that tokens and tokens·seq weigh alike in the rank and the solve.
    scales = np.abs(weighted).max(axis=0)
    scales[scales == 0] = 1.0
    scaled = weighted / scales
    if np.linalg.matrix_rank(scaled, tol=1e-9) < len(terms):
        raise FitError(f"{len(points)} measurements do not determine the terms {', '.join(terms)}")
    solution, *_ = np.linalg.lstsq(scaled, values * weights, rcond=None)
    coefficients = {term: float(value / scale) for term, value, scale in zip(terms, solution, scales, strict=True)}
    result = Fit(coefficients, 0.0)
    residual = max(
        (abs(result.predict(point) - point.value) / point.value for point in points if point.value), default=0.0
    )
    return Fit(coefficients, float(residual))


# ---------------------------------------------------------------------------------------------
# A kind's census from its measurements.


@dataclass(frozen=True)
class KindMeasurement:
    """What one measurement of a layer contributes: its graph (kept sets), and its working set."""

    batch: int
    seq: int
    experts: int
    tp: int
    graph: LayerGraph | None
    kept_bytes: int | None  # tensor by tensor, the input excluded (from the working-set run)
    held_bytes: int | None
    trace: tuple[int, ...] = ()  # what the backward holds after each op
    trace_ops: tuple[str, ...] = ()


def _subsets(names: Sequence[str]) -> list[frozenset[str]]:
    return [frozenset(combo) for size in range(len(names) + 1) for combo in combinations(names, size)]


def _per_token(result: Fit) -> PerToken:
    c = result.coefficients
    return PerToken(c.get("base", 0.0), c.get("per_seq", 0.0), c.get("per_expert", 0.0))


def assemble_kind(
    name: str,
    kind: Mapping[str, Any],
    layer_index: int,
    measurements: Sequence[KindMeasurement],
    experts: Mapping[str, Any] | None = None,
) -> KindCensus:
    """Fit every kept set, part and the working set of one kind's measurements into its census.

    Measurements with a graph (at tp 1) price the kept sets; all of them with a working set
    price it, those at tp 2 splitting it into what TP leaves whole and what it splits (without
    any, it is split as the plain layer's kept bytes are).
    """
    graphed = [m for m in measurements if m.graph is not None and m.tp == 1]
    if not graphed:
        raise FitError(f"{name}: no measurement of the layer's graph")
    scaled = len({m.experts for m in graphed}) > 1
    terms = ["base", "per_seq", *(["per_expert"] if scaled else [])]
    attributions = [attribute(m.graph) for m in graphed]  # type: ignore[arg-type]
    acting = tuple(name for name in SWITCHES if any(name in a.acting() for a in attributions))
    residuals: list[float] = []

    def fitted(values: Sequence[float]) -> PerToken:
        points = [Point(m.batch, m.seq, value, m.experts) for m, value in zip(graphed, values, strict=True)]
        if not any(values):
            return PerToken()
        result = fit(points, terms)
        residuals.append(result.max_relative_residual)
        return _per_token(result)

    def kept_of(recompute: frozenset[str] | None) -> tuple[Kept, list[float]]:
        per_bucket: dict[str, list[float]] = {bucket: [] for bucket in BUCKETS}
        totals: list[float] = []
        for m, a in zip(graphed, attributions, strict=True):
            sids = kept_storages(m.graph, a, recompute)  # type: ignore[arg-type]
            by_bucket = bucket_bytes(m.graph, a, sids)  # type: ignore[arg-type]
            for bucket in BUCKETS:
                per_bucket[bucket].append(by_bucket[bucket])
            totals.append(sum(by_bucket.values()))
        return Kept(*(fitted(per_bucket[bucket]) for bucket in BUCKETS)), totals

    settings: dict[frozenset[str], Setting] = {}
    plain_totals: list[float] = []
    for recompute in _subsets(acting):
        kept, totals = kept_of(recompute)
        if not recompute:
            plain_totals = totals
        shares = recompute_shares(graphed[0].graph, attributions[0], recompute)  # type: ignore[arg-type]
        settings[recompute] = Setting(recompute, kept, *shares)
    full, _ = kept_of(None)
    kept_residual = max(residuals, default=0.0)

    part_values: dict[tuple[str, str | None, str], list[float]] = {}
    for index, (m, a) in enumerate(zip(graphed, attributions, strict=True)):
        for key, size in part_bytes(m.graph, a, kept_storages(m.graph, a, ())).items():  # type: ignore[arg-type]
            part_values.setdefault(key, [0.0] * len(graphed))[index] = size
    parts = tuple(
        Part(part, switch, bucket, fitted(values))
        for (part, switch, bucket), values in sorted(part_values.items(), key=lambda kv: -max(kv[1]))
    )

    working, working_fit = _working(measurements, settings[frozenset()].kept, scaled)
    first = graphed[0]
    input_per_token = first.graph.storages[first.graph.input_sid].nbytes / (first.batch * first.seq)  # type: ignore[union-attr]
    checks = _tp_checks(measurements, settings[frozenset()].kept, input_per_token)
    return KindCensus(
        name=name,
        kind=dict(kind),
        layer_index=layer_index,
        acting=acting,
        settings=settings,
        full=full,
        working=working,
        parts=parts,
        experts=dict(experts) if experts else None,
        fit={
            "terms": terms,
            "kept_max_relative_residual": kept_residual,
            **working_fit,
            **checks,
            "points": [
                {
                    "batch": m.batch,
                    "seq": m.seq,
                    "experts": m.experts,
                    "tp": m.tp,
                    **({"kept_bytes": total} if m.tp == 1 and m.graph is not None else {}),
                    **({"held_bytes": m.held_bytes} if m.held_bytes is not None else {}),
                }
                for m, total in zip(measurements, _totals_for(measurements, graphed, plain_totals), strict=True)
            ],
        },
    )


def _totals_for(
    measurements: Sequence[KindMeasurement], graphed: Sequence[KindMeasurement], totals: Sequence[float]
) -> list[float | None]:
    table = {id(m): total for m, total in zip(graphed, totals, strict=True)}
    return [table.get(id(m)) for m in measurements]


def _working(
    measurements: Sequence[KindMeasurement], plain: Kept, scaled: bool
) -> tuple[tuple[WorkingLine, ...], dict[str, Any]]:
    """The working set: what the backward holds at each point of its run, per token, fitted point by point.

    The backward runs the same ops at every shape, so what it holds after its j-th op is, like
    what the layer keeps, bytes per token plus bytes per token per position; the working set at
    another shape is the largest of these lines there (which point holds the most moves: the MLP's
    at short sequences, eager attention's at long ones). Points held at tp 2 split each line into
    what TP leaves whole and what it splits. Where the runs' ops differ (a MoE layer built with
    another expert count, a rank whose shape changes the ops), the peak alone is fitted.
    """
    held = [m for m in measurements if m.held_bytes is not None]
    if not held:
        return (), {"working": "not measured"}
    base_experts = held[0].experts  # the first measurement is at the first expert count built
    main = [m for m in held if m.tp == 1 and m.graph is not None and m.experts == base_experts]
    aligned = [m for m in held if m.experts == base_experts and m.trace_ops and m.trace_ops == held[0].trace_ops]
    same_run = main and all(m in aligned for m in main)
    split = same_run and len({m.tp for m in aligned}) > 1
    info: dict[str, Any] = {}
    if same_run:
        points = [m for m in aligned if split or m.tp == 1]
        terms = ["base", "per_seq", *(["base_tp", "per_seq_tp"] if split else [])]
        lines, residual = _trace_lines(points, terms)
        info["working_fit"] = f"{len(points[0].trace)} points of the backward, {len(lines)} can hold the most"
    else:
        points = [m for m in held if m.experts == base_experts]
        split = len({m.tp for m in points}) > 1
        terms = ["base", "per_seq", *(["base_tp", "per_seq_tp"] if split else [])]
        result = fit([Point(m.batch, m.seq, float(m.held_bytes or 0), m.experts, m.tp) for m in points], terms)
        lines, residual = [_line(result.coefficients)], result.max_relative_residual
        info["working_fit"] = "the peak alone (the backward's ops differ between the runs)"
    info["working_max_relative_residual"] = residual
    if split:
        info["working_split"] = "measured at tp 1 and 2"
    else:
        # Without a rank's share measured, the backward is split as the plain layer's kept bytes are.
        seq = (main or held)[0].seq
        layer_tp = plain.saved_tp.at(seq) + plain.routed_tp.at(seq)
        total = layer_tp + plain.saved.at(seq) + plain.routed.at(seq)
        share = layer_tp / total if total else 0.0
        lines = [WorkingLine(_scaled(line.whole, 1 - share), _scaled(line.whole, share)) for line in lines]
        info["working_split"] = f"as the plain layer's kept bytes ({share:.3f} split by TP)"
    if scaled:
        lines = _expert_term(lines, held, base_experts)
    return tuple(lines), info


def _line(coefficients: Mapping[str, float]) -> WorkingLine:
    return WorkingLine(
        PerToken(coefficients.get("base", 0.0), coefficients.get("per_seq", 0.0)),
        PerToken(coefficients.get("base_tp", 0.0), coefficients.get("per_seq_tp", 0.0)),
    )


def _scaled(value: PerToken, share: float) -> PerToken:
    return PerToken(value.base * share, value.per_seq * share, value.per_expert * share)


def _trace_lines(points: Sequence[KindMeasurement], terms: Sequence[str]) -> tuple[list[WorkingLine], float]:
    """One line per point of the backward; those no other line holds at least as much as at every shape."""
    lines: list[tuple[float, ...]] = []
    residual = 0.0
    for j in range(len(points[0].trace)):
        result = fit([Point(m.batch, m.seq, float(m.trace[j]), m.experts, m.tp) for m in points], terms)
        residual = max(residual, result.max_relative_residual)
        lines.append(tuple(result.coefficients.get(term, 0.0) for term in ("base", "per_seq", "base_tp", "per_seq_tp")))
    # A line is dropped where another is at least as large in every coefficient (so at every
    # sequence length and split); ties keep the first.
    unique = sorted(set(lines))
    kept = undominated(
        [[-v for v in line] for line in unique], tolerance=1e-9, scan=lambda i: (-sum(unique[i]), unique[i])
    )
    front = [unique[i] for i in kept]
    return [WorkingLine(PerToken(a, c), PerToken(a_tp, c_tp)) for a, c, a_tp, c_tp in front], residual


def _expert_term(lines: list[WorkingLine], held: Sequence[KindMeasurement], base_experts: int) -> list[WorkingLine]:
    """The working set's growth with the routed experts, from the peak at a second expert count."""
    others = [m for m in held if m.experts != base_experts and m.tp == 1]
    if not others:
        return lines
    m = others[0]
    split = RankSplit()
    at_base = max(line.at(m.seq, split) for line in lines) * m.batch * m.seq
    per_expert = (float(m.held_bytes or 0) - at_base) / (m.batch * m.seq * (m.experts - base_experts))
    return [
        WorkingLine(PerToken(line.whole.base - per_expert * base_experts, line.whole.per_seq, per_expert), line.tp)
        for line in lines
    ]


def _tp_checks(measurements: Sequence[KindMeasurement], plain: Kept, input_per_token: float) -> dict[str, Any]:
    """A rank's share measured at tp 2 against the attribution's: whole + split / tp, the input left out."""
    points = []
    for m in measurements:
        if m.tp == 1 or m.kept_bytes is None:
            continue
        at = {name: plain.bucket(name).at(m.seq, m.experts) for name in BUCKETS}
        whole = at["saved"] + at["routed"] - input_per_token
        attributed = m.batch * m.seq * (whole + (at["saved_tp"] + at["routed_tp"]) / m.tp)
        points.append(
            {"batch": m.batch, "seq": m.seq, "tp": m.tp, "kept_bytes": m.kept_bytes, "attributed_bytes": attributed}
        )
    return {"tp_split_points": points} if points else {}
