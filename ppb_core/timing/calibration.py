"""Calibration: measured per-layer times scale the time model, term by term, and are reproduced exactly.

The CSV has one row per measured (model, node, kind, option), one micro-batch on one device:

    model_name,node,kind,option,forward_ms,backward_ms
    llm,HEAD,embedding,NONE,0.21,0.35
    llm,BODY,dense,NONE,6.40,12.90
    llm,BODY,dense,FULL,6.45,19.10
    llm,TAIL,output,NONE,4.10,8.00

`node` is HEAD, BODY or TAIL; `kind` is the layer kind's name (`BodyKind.name` such as dense,
moe, dense_mla, moe_mla; "embedding" for a HEAD; "output" or "output_mtp" for a TAIL, the whole
TAIL, whose factors each part of a split TAIL takes: `pricer.calibrated_name`); `option`
is NONE, SLCT, COMM, BOTH or FULL (HEAD and TAIL: NONE only), each option meaning the switch
setting the run config gives it (`ppb_core.model.switches.option_state`). Column order is free; no
other column, no repeated row.

The model's time of a layer has three terms: the forward, the backward of the plain layer, and
what a recompute option runs again in the backward. Each measured kind gets a factor per term:
- forward: measured / modelled forward, per measured option (the forward does not depend on the
  option in the model, so measured differences between options are kept as measured); options
  not measured take the NONE row's factor, or the mean of the kind's;
- backward: measured / modelled backward of the NONE row (without one, the global factor);
- recompute: per measured option, (measured backward − calibrated plain backward) / modelled
  recompute; where the model recomputes nothing for that option, the difference is kept as an
  offset. Settings not measured (a profile's single switch, say) take the kind's pooled factor
  Σ measured increments / Σ modelled ones, else the global one. An increment below zero (a recompute
  measured faster in the backward than the plain layer) is refused: no factor of a time can be negative.
Kinds not measured take global factors: Σ measured / Σ modelled over every row of that term.

`fit_report` says which calibration a run applies, as the memory calibration's fit does: the file, its
rows, the run's kinds measured and those at the global factors, and each row's residual (the calibrated
model's time of the measured layer less the measurement: zero to rounding, by the construction above).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppb_core.errors import InputError, shown_name
from ppb_core.io import read_text
from ppb_core.model.switches import OPTIONS

COLUMNS: tuple[str, ...] = ("model_name", "node", "kind", "option", "forward_ms", "backward_ms")
NODES: tuple[str, ...] = ("HEAD", "BODY", "TAIL")


@dataclass(frozen=True)
class Measurement:
    model_name: str
    node: str
    kind: str
    option: str
    forward_ms: float
    backward_ms: float
    line: int = 0  # in the CSV, for error messages

    @property
    def key(self) -> tuple[str, str, str]:
        return self.model_name, self.node, self.kind


def _positive(value: str, source: str, where: str) -> float:
    try:
        if "_" in value:  # Python's float() reads `6_4` as 64: no CSV writer means that
            raise ValueError(value)
        number = float(value)
    except ValueError:
        raise InputError(source, where, f"not a number: {shown_name(value)}") from None
    if not math.isfinite(number) or number <= 0 or number > 1e12:
        raise InputError(source, where, f"must be a positive time in ms (at most 10^12), got {shown_name(value)}")
    return number


def parse_calibration(lines: Iterable[str], source: str = "<calibration>") -> tuple[Measurement, ...]:
    """The measurements of a calibration CSV; errors name the line and column, never echo the file."""
    reader = csv.reader(lines)
    try:
        return _measurements(reader, source)
    except csv.Error as err:
        problem = "a field over 128 KB" if "field larger" in str(err) else "not a CSV line"
        raise InputError(source, f"line {reader.line_num}", problem) from None


def _measurements(reader: Iterator[list[str]], source: str) -> tuple[Measurement, ...]:
    header = next(reader, None)
    if header is None:
        raise InputError(source, None, f"empty: expected the header {','.join(COLUMNS)}")
    header = [name.strip() for name in header]
    unknown = [(i, name) for i, name in enumerate(header, start=1) if name not in COLUMNS]
    if unknown:
        index, name = unknown[0]
        raise InputError(
            source,
            "header",
            f"column {index}, {shown_name(name)}, is not one of {', '.join(COLUMNS)} (is this a calibration CSV?)",
        )
    missing = [name for name in COLUMNS if name not in header]
    if missing:
        raise InputError(source, "header", f"missing column {missing[0]!r}")
    if len(set(header)) != len(header):
        raise InputError(source, "header", "a column appears twice")
    rows: dict[tuple[str, str, str, str], Measurement] = {}
    for number, values in enumerate(reader, start=2):
        if not values or all(not v.strip() for v in values):
            continue
        if len(values) != len(header):
            raise InputError(source, f"line {number}", f"expected {len(header)} values, got {len(values)}")
        row = {name: value.strip() for name, value in zip(header, values, strict=True)}
        node, option = row["node"].upper(), row["option"].upper()
        if node not in NODES:
            raise InputError(
                source, f"line {number}: node", f"{shown_name(row['node'])} is not one of {', '.join(NODES)}"
            )
        if option not in OPTIONS:
            raise InputError(
                source, f"line {number}: option", f"{shown_name(row['option'])} is not one of {', '.join(OPTIONS)}"
            )
        if node != "BODY" and option != "NONE":
            raise InputError(source, f"line {number}: option", f"a {node} is never recomputed: use NONE")
        for name in ("model_name", "kind"):
            if not row[name]:
                raise InputError(source, f"line {number}: {name}", "empty")
            if not shown_name(row[name]).startswith("'"):
                raise InputError(source, f"line {number}: {name}", f"{shown_name(row[name])}: expected a name")
        measured = Measurement(
            row["model_name"],
            node,
            row["kind"],
            option,
            _positive(row["forward_ms"], source, f"line {number}: forward_ms"),
            _positive(row["backward_ms"], source, f"line {number}: backward_ms"),
            number,
        )
        key = (*measured.key, option)
        if key in rows:
            raise InputError(source, f"line {number}", f"repeats line {rows[key].line} ({', '.join(key)})")
        rows[key] = measured
    if not rows:
        raise InputError(source, None, "no measurements")
    return tuple(rows.values())


def read_calibration(path: str | Path) -> tuple[Measurement, ...]:
    text = read_text(path, "is a directory, not a calibration CSV")
    return parse_calibration(text.removeprefix("\ufeff").splitlines(), str(Path(path)))  # a spreadsheet's UTF-8 mark


@dataclass(frozen=True)
class KindFactors:
    """The factors of one layer kind's terms; `times` applies them to the model's terms."""

    forward_default: float = 1.0
    backward: float = 1.0
    recompute_default: float = 1.0
    forward: Mapping[str, float] = field(default_factory=dict)
    recompute: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # option: (factor, offset ms)

    def times(
        self, option: str | None, forward_ms: float, backward_ms: float, recompute_ms: float, recomputes: bool
    ) -> tuple[float, float]:
        """Calibrated (forward, backward); *option* is the measured option the state runs, if any."""
        forward = forward_ms * self.forward.get(option, self.forward_default)
        backward = backward_ms * self.backward
        if recomputes:
            factor, offset = self.recompute.get(option, (self.recompute_default, 0.0))
            backward += recompute_ms * factor + offset
        return forward, backward


@dataclass(frozen=True)
class Calibration:
    source: str
    measurements: tuple[Measurement, ...]
    kinds: Mapping[tuple[str, str, str], KindFactors]
    default: KindFactors

    def factors(self, model_name: str, node: str, kind: str) -> KindFactors:
        return self.kinds.get((model_name, node, kind), self.default)

    def measured(self, model_name: str, node: str, kind: str) -> frozenset[str]:
        return frozenset(m.option for m in self.measurements if m.key == (model_name, node, kind))


def _ratio(numerator: float, denominator: float, fallback: float) -> float:
    return numerator / denominator if denominator > 0 else fallback


def fit_calibration(
    measurements: tuple[Measurement, ...],
    modelled: Callable[[Measurement], tuple[float, float, float]],
    source: str = "<calibration>",
) -> Calibration:
    """Factors that reproduce every measurement; *modelled* gives the model's (forward, plain backward,
    recompute) ms of a measured row."""
    terms = {m: modelled(m) for m in measurements}
    by_kind: dict[tuple[str, str, str], dict[str, Measurement]] = {}
    for m in measurements:
        by_kind.setdefault(m.key, {})[m.option] = m
    plain = [m for m in measurements if m.option == "NONE"]
    global_forward = _ratio(sum(m.forward_ms for m in measurements), sum(terms[m][0] for m in measurements), 1.0)
    global_backward = _ratio(sum(m.backward_ms for m in plain), sum(terms[m][1] for m in plain), global_forward)

    backward_of = {
        key: (rows["NONE"].backward_ms / terms[rows["NONE"]][1] if "NONE" in rows else global_backward)
        for key, rows in by_kind.items()
    }
    _check_recompute_adds(by_kind, backward_of, terms, source)
    increments = [
        (m.backward_ms - backward_of[m.key] * terms[m][1], terms[m][2])
        for m in measurements
        if m.option != "NONE" and terms[m][2] > 0
    ]
    global_recompute = _ratio(sum(i for i, _ in increments), sum(r for _, r in increments), global_forward)

    kinds: dict[tuple[str, str, str], KindFactors] = {}
    for key, rows in by_kind.items():
        forward = {option: m.forward_ms / terms[m][0] for option, m in rows.items()}
        backward = backward_of[key]
        recompute: dict[str, tuple[float, float]] = {}
        pooled = [0.0, 0.0]
        for option, m in rows.items():
            if option == "NONE":
                continue
            increment, modelled_recompute = m.backward_ms - backward * terms[m][1], terms[m][2]
            if modelled_recompute > 0:
                recompute[option] = (increment / modelled_recompute, 0.0)
                pooled[0] += increment
                pooled[1] += modelled_recompute
            else:
                recompute[option] = (1.0, increment)
        kinds[key] = KindFactors(
            forward_default=forward.get("NONE", sum(forward.values()) / len(forward)),
            backward=backward,
            recompute_default=_ratio(pooled[0], pooled[1], global_recompute),
            forward=forward,
            recompute=recompute,
        )
    default = KindFactors(forward_default=global_forward, backward=global_backward, recompute_default=global_recompute)
    return Calibration(source, measurements, kinds, default)


def _check_recompute_adds(
    by_kind: Mapping[tuple[str, str, str], Mapping[str, Measurement]],
    backward_of: Mapping[tuple[str, str, str], float],
    terms: Mapping[Measurement, tuple[float, float, float]],
    source: str,
) -> None:
    """Refuse a recompute option measured faster in the backward than the plain backward: a recompute runs the
    plain layer's backward and its reruns too, so its increment, and its factor, would be negative, and through
    the global factor every kind not measured would recompute in negative time (a FULL row 0.5 ms under its
    NONE row printed "recompute ×-0.121", session 34). Equal is allowed: a recompute whose reruns cost nothing."""
    for key, rows in by_kind.items():
        none = rows.get("NONE")
        for option, m in rows.items():
            if option == "NONE":
                continue
            what = f"{m.backward_ms:g} ms for {' '.join(key)} {option}"
            if none is not None and m.backward_ms < none.backward_ms:
                raise InputError(
                    source,
                    f"line {m.line}: backward_ms",
                    f"{what} is below line {none.line}'s NONE backward ({none.backward_ms:g} ms): a recompute runs the "
                    "plain backward and more, never less (measure both again, or check each row's option)",
                )
            plain = backward_of[key] * terms[m][1]
            if none is None and terms[m][2] > 0 and m.backward_ms < plain:
                raise InputError(
                    source,
                    f"line {m.line}: backward_ms",
                    f"{what} is below the plain backward the global factor gives it ({plain:.3f} ms, no NONE row of "
                    "the kind): its recompute would take negative time; measure the kind's NONE row too",
                )


def fit_report(
    calibration: Calibration,
    run_kinds: Sequence[tuple[str, str, str]],
    priced: Callable[[Measurement], tuple[float, float]],
) -> dict[str, Any]:
    """What `ppb estimate` and `ppb balance` say of the time calibration they apply: the file, its rows, the
    run's kinds (model, node, kind) it measures and those left at the global factors, and per row the
    calibrated (forward, backward) ms the model gives (*priced*) beside the measured ones."""
    measured = sorted({m.key for m in calibration.measurements})
    rows = []
    for m in calibration.measurements:
        forward_ms, backward_ms = priced(m)
        rows.append(
            {
                "line": m.line,
                "model_name": m.model_name,
                "node": m.node,
                "kind": m.kind,
                "option": m.option,
                "measured_forward_ms": m.forward_ms,
                "measured_backward_ms": m.backward_ms,
                "residual_forward_ms": forward_ms - m.forward_ms,
                "residual_backward_ms": backward_ms - m.backward_ms,
            }
        )
    relative = [
        row[f"residual_{term}_ms"] / row[f"measured_{term}_ms"] for row in rows for term in ("forward", "backward")
    ]
    default = calibration.default
    return {
        "file": calibration.source,
        "rows": len(rows),
        "measured_kinds": [list(key) for key in measured],
        "global_kinds": [list(key) for key in run_kinds if key not in set(measured)],
        "global_factors": {
            "forward": default.forward_default,
            "backward": default.backward,
            "recompute": default.recompute_default,
        },
        "max_residual_ms": max(abs(row[f"residual_{term}_ms"]) for row in rows for term in ("forward", "backward")),
        "rms_relative": math.sqrt(sum(e * e for e in relative) / len(relative)),
        "residuals": rows,
    }
