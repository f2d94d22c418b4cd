"""A ranked plan in a run config's own fields, so `ppb estimate` on the written config prices the plan.

A run config fixes a split with `parallel.layout` (Megatron-Core's `--pipeline-model-parallel-layout`,
`ppb_core.config.layout`: the layers of one language model per virtual stage) and the recompute with one
run-wide `training.recompute` (`ppb_core.config.recompute`). So a plan goes into a run config when:

* its split is of one language model (a layout places nothing else: `config.run._check_layout`);
* its options are one run-wide setting: NONE everywhere (nothing recomputed), SLCT everywhere (the
  strategy's own selective setting, which is what the balancer's SLCT was priced with), FULL everywhere
  (`full`), or, in Megatron's words, FULL on the first N layers of every virtual stage and NONE on the
  rest (`--recompute-method block`, megatron/core/transformer/transformer_block.py `_checkpointed_forward`;
  the rule `ppb_core.balance.megatron.setting_of` reads), or in torchtitan's words FULL on every N-th
  block of a rank (`selective_ac_option = N`, the setting a torchtitan run's plan is solved under,
  `ppb_core.balance.torchtitan_settings`).

Anything else (options mixed per stage, the gathers re-sent, two models) is not a run config's to say:
the plan then goes beside it as MindFormers yaml (offset and per-stage recompute lists), which
`ppb check RUN.yaml --plan PLAN` prices as ranked, and the run config's comment says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ppb_core.balance.megatron import setting_of
from ppb_core.config.layout import format_layout
from ppb_core.config.recompute import resolve
from ppb_core.config.run import Training
from ppb_core.config.spec import VisionSpec
from ppb_core.search.enumerate import Strategy
from ppb_core.search.spec import SearchSpec

# "nothing recomputed" in each framework's words: ppb's switch dict with no switch at 0 for Megatron
# and MindFormers (Megatron-Core has no granularity "none"), torchtitan's `mode: none`.
NO_RECOMPUTE: dict[str, Any] = {"megatron": {}, "torchtitan": {"mode": "none"}, "mindformers": {}}
FULL_RECOMPUTE: dict[str, Any] = {
    "megatron": {"granularity": "full", "method": "uniform", "num_layers": 1},
    "torchtitan": {"mode": "full"},
    "mindformers": "full",
}


@dataclass(frozen=True)
class PlanFields:
    """What a run config states of a plan: its layout and recompute (None: not sayable), and why not."""

    layout: str | None
    recompute: Any
    unsaid: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unsaid


def cell_options(plan: dict[str, Any]) -> list[list[dict[str, int]]]:
    """[chunk][stage] option → body layers, as the plan's `cells` hold them."""
    return [[{o: int(n) for o, n in cell["options"].items() if n} for cell in row] for row in plan["cells"]]


def plan_layout(spec: SearchSpec, plan: dict[str, Any]) -> str | None:
    """The plan's split as Megatron-Core's layout: virtual stage v·pp + p is rank p's chunk v (layout.py),
    `E` in the first, the MTP layers and `L` in the last, or the MTP layers in the cell the plan runs them
    apart in (`input.mtp_cell`); None when the run is not one language model."""
    models = list(spec.specs.values())
    if len(models) != 1 or isinstance(models[0], VisionSpec):
        return None
    options = cell_options(plan)
    stages = [sum(cell.values()) * "t" for row in options for cell in row]
    stages[0] = "E" + stages[0]
    apart = plan.get("input", {}).get("mtp_cell")  # the MTP layers apart from the loss (`balance.mtp_apart`)
    if apart is not None:  # Megatron-Core's standalone MTP: `m` ends virtual stage chunk·pp + stage
        stages[int(apart[0]) * len(options[0]) + int(apart[1])] += "m" * models[0].mtp_layers
        stages[-1] += "L"
    else:
        stages[-1] += "m" * models[0].mtp_layers + "L"
    return format_layout(stages)


def plan_recompute(spec: SearchSpec, strategy: Strategy, plan: dict[str, Any]) -> Any:
    """The plan's options as one `training.recompute` value in the framework's words; None when they
    are not one run-wide setting."""
    options = [cell for row in cell_options(plan) for cell in row]  # model order is chunk by chunk
    used = {option for cell in options for option in cell}
    setting = spec.recompute_settings[strategy.recompute]
    if used <= {"NONE"}:
        return NO_RECOMPUTE[spec.framework]
    if used == {"FULL"}:
        return FULL_RECOMPUTE[spec.framework]
    if used == {"SLCT"}:
        resolved = resolve_setting(spec, setting)
        return setting if resolved.full is None and resolved.selective else None
    every = plan.get("recompute_setting") or {}
    if used == {"FULL", "NONE"} and spec.framework == "torchtitan" and every.get("name") == "every":
        # torchtitan's `selective_ac_option = N`, the setting the plan was solved under (torchtitan_settings)
        return {"mode": "selective", "option": every["num_layers"]}
    if used == {"FULL", "NONE"} and spec.framework == "megatron":
        block = setting_of(options, selective=False)
        if block is not None and block.name == "block":
            return {"granularity": "full", "method": "block", "num_layers": block.num_layers}
    return None


def resolve_setting(spec: SearchSpec, setting: Any) -> Any:
    """A recompute setting as the search writes it, resolved (`config.recompute.resolve`) as a run config's."""
    return resolve(Training(seq_length=spec.seq_length, recompute=setting).recompute)


def plan_fields(spec: SearchSpec, strategy: Strategy, plan: dict[str, Any]) -> PlanFields:
    layout = plan_layout(spec, plan)
    recompute = plan_recompute(spec, strategy, plan)
    unsaid = []
    if layout is None:
        unsaid.append("the split (a run config's layout places the layers of one language model)")
    if recompute is None:
        used = sorted({option for row in cell_options(plan) for cell in row for option in cell})
        unsaid.append(f"the recompute ({', '.join(used)} on different layers; a run config's is one run-wide setting)")
    return PlanFields(layout, recompute, unsaid)


def apply_plan(raw: dict[str, Any], fields: PlanFields) -> dict[str, Any]:
    """The strategy's run config (plain data) with what it can state of the plan."""
    raw = {**raw, "parallel": dict(raw["parallel"]), "training": dict(raw["training"])}
    if fields.layout is not None:
        raw["parallel"]["layout"] = fields.layout
    if fields.recompute is not None:
        raw["training"]["recompute"] = fields.recompute
    return raw


def comment(label: str, entry_figures: Sequence[str], fields: PlanFields, config_file: str, plan_file: str) -> str:
    """The run config's opening comment: which plan it states, and where the rest of it is."""
    lines = [f"# {label}: the balanced plan ranked at {', '.join(entry_figures)}."]
    if fields.complete:
        lines.append("# parallel.layout and training.recompute state it: `ppb estimate` on this file prices it.")
    else:
        lines.append(f"# Not stated here: {'; '.join(fields.unsaid)}.")
        lines.append(f"# The whole plan is in {plan_file}: `ppb check {config_file} --plan {plan_file}` prices it.")
    return "\n".join(lines) + "\n"
