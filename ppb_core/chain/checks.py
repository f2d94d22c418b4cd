"""What must hold of a stage's table before later stages read it (the blocking checks' rules)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from ppb_core.chain.stages import no_plan_words
from ppb_core.model.switches import MEMORY_KEY, OPTIONS
from ppb_core.tables.payload import descriptions_from_frame
from ppb_core.tables.report import stage_memory_mb
from ppb_core.tables.run import run_from_frame
from ppb_core.tables.schema import Summarized


def walk_problems(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> list[str]:
    """Each sub-model walked whole (one HEAD, its body layers, one TAIL: three parts where the run's
    layout runs the MTP layers apart from the loss, `walk`) and no empty cell."""
    run = run_from_frame(run_config)
    problems = []
    tails = 3 if run.layout_mtp_cell() is not None else 1
    for model in run.model_names:
        rows = layer_walk[layer_walk["model_name"] == model]
        for node, expected in (("HEAD", 1), ("BODY", run.spec(model).num_layers), ("TAIL", tails)):
            found = int((rows["node"] == node).sum())
            if found != expected:
                problems.append(f"{model}: {found} {node} layers, expected {expected}")
    body = layer_walk[layer_walk["node"] == "BODY"]
    for chunk in range(run.parallel.vpp):
        for stage_index in range(run.parallel.pp):
            if not ((body["chunk"] == chunk) & (body["stage"] == stage_index)).any():
                problems.append(f"chunk {chunk}, stage {stage_index} holds no body layer")
    return problems


def offered_options(description: Mapping[str, object]) -> tuple[str, ...]:
    """The recompute options a BODY description offers the balancer: those whose memory key it has."""
    return tuple(option for option in OPTIONS if MEMORY_KEY[option] in description)


def _is_time(key: str) -> bool:
    return key == "time" or key.endswith("_time")


def description_problems(frame: pd.DataFrame) -> list[str]:
    """No negative or missing figure, at least one body, and every body offering the same options.

    The balancer takes the options it considers from the first body; a body offering others
    would be planned with options it does not have.
    """
    descriptions = descriptions_from_frame(frame)
    problems = []
    for desc in descriptions:
        for key, value in desc.items():
            if (key.startswith("memory") or _is_time(key)) and not (isinstance(value, int | float) and value >= 0):
                problems.append(f"{desc.get('name')}: {key} is {value!r}, not a non-negative number")
        if not (isinstance(desc.get("nb_layer"), int) and desc["nb_layer"] >= 1):
            problems.append(f"{desc.get('name')}: nb_layer is {desc.get('nb_layer')!r}")
    bodies = [desc for desc in descriptions if desc.get("type") == "BODY"]
    if not bodies:
        problems.append("no BODY description")
    offered = {desc["name"]: offered_options(desc) for desc in bodies}
    if len(set(offered.values())) > 1:
        listed = "; ".join(f"{name} {'/'.join(options)}" for name, options in offered.items())
        problems.append(f"bodies offer different options: {listed}")
    return problems


def scaling_problems(withdrawn: pd.DataFrame, scaled: pd.DataFrame, rel: float = 1e-12) -> list[str]:
    """Every time of the scaled descriptions is the withdrawn one over the first body's forward time."""
    before, after = descriptions_from_frame(withdrawn), descriptions_from_frame(scaled)
    unit = next((d["forward_time"] for d in before if d["type"] == "BODY" and d.get("forward_time")), None)
    if unit is None:
        return ["no body has a forward time to scale by"]
    problems = []
    if len(before) != len(after):
        problems.append(f"{len(after)} scaled descriptions for {len(before)}")
    for old, new in zip(before, after, strict=False):
        if [k for k in old if not _is_time(k)] != [k for k in new if not _is_time(k)]:
            problems.append(f"{new.get('name')}: keys differ from the withdrawn description")
        for key, value in old.items():
            if not _is_time(key) or value is None:
                continue
            expected = value / unit
            if not abs(new.get(key, float("nan")) - expected) <= rel * abs(expected):
                problems.append(f"{new.get('name')}: {key} is {new.get(key)}, expected {value} / {unit}")
    first = next(d for d in after if d["type"] == "BODY" and d.get("forward_time"))
    if first["forward_time"] != 1.0:
        problems.append(f"the first body's forward time is {first['forward_time']}, not 1")
    return problems


def plan_problems(run_config: pd.DataFrame, pipeline_plan: Summarized) -> list[str]:
    """A plan exists, places every body layer, and each stage's predicted memory fits the device.

    The device memory is the run config's own (less reserved_mb), not the one the plan states.
    """
    run = run_from_frame(run_config)
    plan, rows = pipeline_plan.summary, pipeline_plan.frame
    if rows.empty:
        return [f"no plan: {no_plan_words(plan)}"]
    problems = []
    limit = float(run.device.usable_mb)
    for row in rows.itertuples(index=False):
        if row.memory_mb > limit:
            problems.append(f"stage {row.stage} needs {row.memory_mb:,.0f} MB, the device has {limit:,.0f}")
    placed = int(rows["layers"].sum())
    described = sum(int(body["nb_layer"]) for body in plan["input"]["bodies"])
    if placed != described:
        problems.append(f"{placed} body layers placed, {described} described")
    return problems


def report_problems(plan_report: Summarized) -> list[str]:
    """Stages the memory model, evaluating the plan layer by layer, finds over the device's memory."""
    rows = plan_report.frame
    return [
        f"stage {stage}: {need:,.0f} MB by the memory model, the device has {limit:,.0f}"
        for stage, need, limit in zip(rows["stage"], stage_memory_mb(rows), rows["device_mb"], strict=True)
        if need > limit
    ]
