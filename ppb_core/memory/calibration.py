"""Memory calibration: the measured per-stage peaks of one run fitted to per-term corrections.

A run config's `memory.calibration` names a file of what each pipeline stage really held at its
peak in one real or dry run of that same run config: `torch.cuda.max_memory_allocated()` on each
pipeline rank, or the per-stage peaks of a MindFormers dry run. CSV with a `stage` column and one
of `peak_bytes`, `peak_mb` (MB of 2**20 bytes) or `peak_gib`:

    stage,peak_mb
    0,61234
    1,58010

or JSON, `{"stages": [{"stage": 0, "peak_mb": 61234}, ...]}` (or the list alone), with the same
fields. A stage left out is not fitted; each stage at most once. MindFormers' dry-run reports are
read too (`ppb_core.memory.dryrun`): the `grep -rn 'peak memory usage'` lines of its stage logs, or
its pipeline-balance tool's `memory_usage` YAML block.

The model's peak of a stage is a sum of terms at the moment that sets it: static memory,
activations, kept buffers, and the moment's working memory (a backward's working set, or what the
loss adds). The fit finds one factor per term so that a few measured stages cannot let a small term
absorb what the others leave (a first version scaled a 4 MB buffers term ×837 to close a 1% gap):

- Only a term whose share of the measured stages' modelled peaks (Σ_s term / Σ_s peak) is at least
  `MIN_SHARE` (5%) is fitted; a smaller one stays at 1 and the fit says so in a warning, because a
  1% error of the whole is then indistinguishable from a ×2 error of that term.
- The pull toward 1 is in bytes of the whole peak, the same for every term:
  `f = argmin Σ_s (Σ_t f_t·term_{s,t} − measured_s)² + Σ_t (λ·‖peak‖·(f_t − 1))²`, λ = 0.1,
  ‖peak‖ the norm of the modelled peaks over the measured stages. Moving a factor by δ costs as much
  as a misfit of 10% of the peak by δ whatever the term's size, so a term moves only as far as the
  bytes it explains repay.
- Factors are bounded to [`LOW`, `HIGH`] = [0.5, 2]: a term off by more than ×2 is a wrong model,
  not a calibration; a factor at a bound is named in a warning. The bounded problem is solved
  exactly: each term free or at either bound (3**k cases, k ≤ 4), the feasible case of least cost.
- When the fitted terms outnumber what the stages can separate (rank of the stages × terms matrix
  below the number of fitted terms), a warning says the split among them is set by the pull.

The device's `reserved_mb` is not compared (an allocator's peak does not count it). The residual
of each stage (calibrated − measured) is what the fit leaves; `MemoryModel` applies the factors to
every figure it gives, so the estimate, the payload and the balancer all see the calibrated memory.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ppb_core import limits
from ppb_core.errors import InputError, shown_name
from ppb_core.io import parse_json, read_text
from ppb_core.memory.dryrun import dryrun_log_rows, is_dryrun_log, is_sapp_memory_usage, sapp_memory_usage_rows
from ppb_core.units import GIB, MB, counted

TERMS: tuple[str, ...] = ("static", "activations", "buffers", "working")
UNITS: dict[str, float] = {"peak_bytes": 1.0, "peak_mb": MB, "peak_gib": GIB}
PULL = 0.1  # λ: the pull toward 1, in units of the whole modelled peak (module docstring)
MIN_SHARE = 0.05  # a term below this share of the measured stages' modelled peaks is not fitted
LOW, HIGH = 0.5, 2.0  # the bounds of a factor


@dataclass(frozen=True)
class MeasuredPeak:
    stage: int
    peak_bytes: float


@dataclass(frozen=True)
class MemoryCorrection:
    """One factor per term of the memory model (1 each: as modelled)."""

    static: float = 1.0
    activations: float = 1.0
    buffers: float = 1.0
    working: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {term: getattr(self, term) for term in TERMS}


@dataclass(frozen=True)
class MemoryFit:
    """The fitted correction, and per measured stage the measured, modelled and calibrated peaks."""

    source: str
    correction: MemoryCorrection
    stages: tuple[int, ...]
    measured_bytes: tuple[float, ...]
    modelled_bytes: tuple[float, ...]
    calibrated_bytes: tuple[float, ...]
    warnings: tuple[str, ...] = ()

    @property
    def residual_bytes(self) -> tuple[float, ...]:
        return tuple(c - m for c, m in zip(self.calibrated_bytes, self.measured_bytes, strict=True))

    @property
    def rms_relative(self) -> float:
        """The root mean square of the calibrated peaks' relative errors."""
        errors = [r / m for r, m in zip(self.residual_bytes, self.measured_bytes, strict=True)]
        return math.sqrt(sum(e * e for e in errors) / len(errors))

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "factors": self.correction.as_dict(),
            "rms_relative": self.rms_relative,
            "warnings": list(self.warnings),
            "stages": [
                {
                    "stage": stage,
                    "measured_bytes": measured,
                    "modelled_bytes": modelled,
                    "calibrated_bytes": calibrated,
                    "residual_bytes": calibrated - measured,
                }
                for stage, measured, modelled, calibrated in zip(
                    self.stages, self.measured_bytes, self.modelled_bytes, self.calibrated_bytes, strict=True
                )
            ],
        }


def _peak(row: Mapping[str, Any], source: str, where: str) -> MeasuredPeak:
    given = [name for name in UNITS if row.get(name) not in (None, "")]
    if len(given) != 1:
        raise InputError(source, where, f"give exactly one of {', '.join(UNITS)}")
    raw_stage, raw_peak = row.get("stage"), row[given[0]]
    try:  # Python's int() and float() read `1_1` as 11: no CSV writer means that
        stage = int(_digits(raw_stage))
    except ValueError:
        raise InputError(source, f"{where}: stage", f"not a stage number: {shown_name(raw_stage)}") from None
    try:
        value = float(_digits(raw_peak))
    except ValueError:
        raise InputError(source, f"{where}: {given[0]}", f"not a number: {shown_name(raw_peak)}") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(source, f"{where}: {given[0]}", f"must be a positive size, got {shown_name(raw_peak)}")
    measured_mb = value * (UNITS[given[0]] / MB)
    if measured_mb > limits.DEVICE_MEMORY_MB:  # 1e300 GiB: infinite bytes, NaN factors in --json
        said = limits.over(measured_mb, limits.DEVICE_MEMORY_MB, "MB a device")
        raise InputError(source, f"{where}: {given[0]}", said)
    return MeasuredPeak(stage, value * UNITS[given[0]])


def _digits(value: object) -> str:
    text = str(value).strip()
    if "_" in text:
        raise ValueError(text)
    return text


def parse_measured_peaks(text: str, source: str, stages: int) -> tuple[MeasuredPeak, ...]:
    """The measured peaks of a CSV or JSON text, checked against a run of *stages* stages."""
    rows: list[tuple[str, Mapping[str, Any]]] = []
    if is_dryrun_log(text):
        rows = list(dryrun_log_rows(text, source))
    elif is_sapp_memory_usage(text):
        rows = list(sapp_memory_usage_rows(text, source, stages))
    elif text.lstrip().startswith(("{", "[")):
        data = parse_json(text, source)
        listed = data.get("stages") if isinstance(data, dict) else data
        if not isinstance(listed, list) or not all(isinstance(item, dict) for item in listed):
            raise InputError(source, "stages", "expected a list of {stage, peak_...} objects")
        rows = [(f"stages.{i}", item) for i, item in enumerate(listed)]
    else:
        reader = csv.DictReader(text.splitlines())
        try:
            header = [name.strip() for name in reader.fieldnames or []]
            unknown = [name for name in header if name not in ("stage", *UNITS)]
            if unknown or "stage" not in header:
                problem = f"unknown column {shown_name(unknown[0])}" if unknown else "no stage column"
                raise InputError(source, "header", f"{problem} (columns: stage and one of {', '.join(UNITS)})")
            for number, row in enumerate(reader, start=2):
                if None in row:  # more cells than columns (DictReader's restkey)
                    raise InputError(source, f"line {number}", f"more than {len(header)} values")
                cleaned = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
                if any(cleaned.values()):
                    rows.append((f"line {number}", cleaned))
        except csv.Error as err:
            problem = "a field over 128 KB" if "field larger" in str(err) else "not a CSV line"
            raise InputError(source, f"line {reader.line_num}", problem) from None
    peaks: dict[int, MeasuredPeak] = {}
    for where, row in rows:
        peak = _peak(row, source, where)
        if not 0 <= peak.stage < stages:
            raise InputError(source, f"{where}: stage", f"{peak.stage} is not a stage of this run (0 to {stages - 1})")
        if peak.stage in peaks:
            raise InputError(source, f"{where}: stage", f"stage {peak.stage} is measured twice")
        peaks[peak.stage] = peak
    if not peaks:
        raise InputError(source, None, "no measured stage")
    return tuple(sorted(peaks.values(), key=lambda p: p.stage))


def read_measured_peaks(path: str | Path, stages: int) -> tuple[MeasuredPeak, ...]:
    text = read_text(path, "is a directory, not a file of measured peaks")
    return parse_measured_peaks(text.removeprefix("\ufeff"), str(path), stages)  # a spreadsheet's UTF-8 mark


def _cost(a: np.ndarray, b: np.ndarray, pull: float, factors: np.ndarray) -> float:
    return float(np.sum((a @ factors - b) ** 2) + pull * pull * np.sum((factors - 1.0) ** 2))


def _solve(matrix: Sequence[Sequence[float]], target: Sequence[float], pull: float) -> list[float]:
    """The bounded, pulled least squares of the module docstring over the columns given.

    Exact: for each way of holding every factor free, at LOW or at HIGH, the free ones solve the
    normal equations; the case whose factors lie in the bounds at the least cost wins. *pull* is
    λ·‖peak‖ in bytes.
    """
    a = np.asarray(matrix, dtype=float)
    b = np.asarray(target, dtype=float)
    k = a.shape[1]
    best: tuple[float, np.ndarray] | None = None
    for case in itertools.product((None, LOW, HIGH), repeat=k):
        factors = np.array([1.0 if c is None else c for c in case])
        free = np.array([c is None for c in case])
        if free.any():
            af, ah = a[:, free], a[:, ~free]
            lhs = af.T @ af + pull * pull * np.eye(int(free.sum()))
            rhs = af.T @ (b - ah @ factors[~free]) + pull * pull
            factors[free] = np.linalg.solve(lhs, rhs)
            if (factors[free] < LOW - 1e-12).any() or (factors[free] > HIGH + 1e-12).any():
                continue
        cost = _cost(a, b, pull, factors)
        if best is None or cost < best[0] - 1e-9 * abs(cost):
            best = (cost, factors)
    assert best is not None  # the all-bound cases are always feasible
    return [float(f) for f in best[1]]


def fit_peaks(
    terms: Sequence[Mapping[str, float]], measured: Iterable[MeasuredPeak], source: str = "<measured>"
) -> MemoryFit:
    """Fit the factors to *measured* peaks, *terms* giving each stage's modelled terms (TERMS, bytes)."""
    peaks = tuple(measured)
    rows = [[terms[p.stage][t] for t in TERMS] for p in peaks]
    total = sum(sum(row) for row in rows)
    shares = [sum(row[i] for row in rows) / total if total > 0 else 0.0 for i in range(len(TERMS))]
    fitted = [i for i, share in enumerate(shares) if share >= MIN_SHARE]
    warnings = [
        f"{TERMS[i]}: {100 * shares[i]:.1f}% of the modelled peak, too small to identify; kept at ×1"
        for i, share in enumerate(shares)
        if 0 < share < MIN_SHARE
    ]
    factors = [1.0] * len(TERMS)
    if fitted:
        # the terms not fitted stay at 1: their bytes move to the target side
        target = [
            p.peak_bytes - sum(row[i] for i in range(len(TERMS)) if i not in fitted)
            for p, row in zip(peaks, rows, strict=True)
        ]
        columns = [[row[i] for i in fitted] for row in rows]
        pull = PULL * math.sqrt(sum(sum(row) ** 2 for row in rows))  # λ·‖peak‖ over the measured stages
        for i, f in zip(fitted, _solve(columns, target, pull), strict=True):
            factors[i] = f
        rank = int(np.linalg.matrix_rank(np.asarray(columns) / np.asarray(columns).max(axis=0), tol=1e-6))
        if rank < len(fitted):
            names = ", ".join(TERMS[i] for i in fitted)
            warnings.append(
                f"{counted(len(peaks), 'measured stage')} {'separates' if len(peaks) == 1 else 'separate'} "
                f"{rank} of the {len(fitted)} fitted terms ({names}): "
                "their split is set by the pull toward ×1, not by the measurement"
            )
        warnings += [
            f"{TERMS[i]}: ×{factors[i]:g} is at a bound of [{LOW:g}, {HIGH:g}]; this term's model is off, not its scale"
            for i in fitted
            if factors[i] in (LOW, HIGH)
        ]
    correction = MemoryCorrection(*factors)
    return MemoryFit(
        source=source,
        correction=correction,
        stages=tuple(p.stage for p in peaks),
        measured_bytes=tuple(p.peak_bytes for p in peaks),
        modelled_bytes=tuple(sum(row) for row in rows),
        calibrated_bytes=tuple(sum(f * v for f, v in zip(factors, row, strict=True)) for row in rows),
        warnings=tuple(warnings),
    )
