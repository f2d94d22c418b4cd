"""The formula path against a census for one run config: what each body kind keeps, option by option.

`python -m ppb_core.cli.compare RUN.yaml CENSUS.json [--model NAME]` prints, for each body
kind, the activation bytes one device keeps per micro-batch under each option (the formulas,
the census, their ratio) at the run's own parallel setup, the backward's working set both ways,
and the census's parts next to the formulas' terms. docs/census.md is written from its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ppb_core.config.run import RunConfig, load_run_config, parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import OPTIONS, LayerType
from ppb_core.model.walk import walk
from ppb_core.units import MB


@dataclass(frozen=True)
class KindComparison:
    model_name: str
    kind: str
    formulas: dict[str, float]  # option -> bytes per micro-batch on one device
    census: dict[str, float]
    formula_terms: dict[str, tuple[str | None, float]]  # NONE: term -> (switch, bytes)
    census_terms: dict[str, tuple[str | None, float]]
    formula_working: float  # what a fully recomputed layer's backward holds beyond the stage's count
    census_working: float


def with_census(run_path: str | Path, census_path: str | Path | None, model: str | None = None) -> RunConfig:
    """The run config at *run_path* with *census_path* named for *model* (the first model by default);
    None: the model's own census left out, its activations by the formulas."""
    run_path = Path(run_path)
    raw = yaml.safe_load(run_path.read_text(encoding="utf-8"))
    names = [entry.get("name") for entry in raw.get("models", [])]
    target = model or names[0]
    if target not in names:
        raise InputError(run_path, "models", f"no model named {target!r}")
    entry = raw["models"][names.index(target)]
    if census_path is None:
        entry.pop("census", None)
    else:
        entry["census"] = str(Path(census_path).resolve())
    return parse_run_config(raw, run_path, run_path.parent)


def compare(run_path: str | Path, census_path: str | Path, model: str | None = None) -> list[KindComparison]:
    target = model or load_run_config(run_path).model_names[0]  # the run config checked first
    # the formulas' side without the census the run config may name for the model (it printed the
    # census twice, "census/formulas 1.00", for a run config that uses one)
    formulas_run = with_census(run_path, None, target)
    census_run = with_census(run_path, census_path, target)
    formulas, census = MemoryModel(formulas_run), MemoryModel(census_run)
    rows = []
    for slot in walk(formulas_run).distinct():
        if slot.node != "BODY" or slot.model_name != target:
            continue
        rows.append(
            KindComparison(
                model_name=slot.model_name,
                kind=slot.kind.name,
                formulas=formulas.option_activation_bytes(slot),
                census=census.option_activation_bytes(slot),
                formula_terms=_terms(formulas, slot),
                census_terms=_terms(census, slot),
                formula_working=formulas.working_extra_bytes(slot, LayerType.FULL_REC_LAYER, None, 1, False),
                census_working=census.working_extra_bytes(slot, LayerType.FULL_REC_LAYER, None, 1, False),
            )
        )
    return rows


def _terms(memory: MemoryModel, slot: Any) -> dict[str, tuple[str | None, float]]:
    """What the plain layer keeps, term by term (terms of one name added up), with their switch."""
    found: dict[str, tuple[str | None, float]] = {}
    for term in memory.activation_terms(slot, LayerType.NOT_REC_LAYER):
        switch, size = found.get(term.op, (term.switch, 0.0))
        found[term.op] = (switch, size + term.bytes)
    return found


def _mb(value: float) -> str:
    return f"{value / MB:,.1f}"


def report(rows: list[KindComparison], top: int = 12) -> str:
    lines = []
    for row in rows:
        lines.append(f"{row.model_name} · {row.kind}: MB per micro-batch on one device")
        lines.append("  option   formulas    census   census/formulas")
        for option in OPTIONS:
            f, c = row.formulas[option], row.census[option]
            lines.append(f"  {option:<6} {_mb(f):>10} {_mb(c):>9}   {c / f if f else float('nan'):>8.2f}")
        lines.append(
            f"  backward working set (full recompute): formulas {_mb(row.formula_working)}, "
            f"census {_mb(row.census_working)}"
        )
        for title, terms in (("formula terms", row.formula_terms), ("census parts", row.census_terms)):
            lines.append(f"  {title} (NONE), largest first:")
            for name, (switch, size) in sorted(terms.items(), key=lambda item: -item[1][1])[:top]:
                lines.append(f"    {_mb(size):>8}  {name}{f' [{switch}]' if switch else ''}")
    return "\n".join(lines)


def summary(rows: list[KindComparison]) -> list[dict[str, Any]]:
    """The comparison as plain data (bytes), for tests and notes."""
    return [
        {
            "model": r.model_name,
            "kind": r.kind,
            "formulas": r.formulas,
            "census": r.census,
            "formula_working": r.formula_working,
            "census_working": r.census_working,
        }
        for r in rows
    ]
