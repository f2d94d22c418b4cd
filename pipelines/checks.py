"""The stages' checks, evaluated by the asset itself before its table is stored.

A blocking check that fails fails its asset's step: the table is never handed to the IO manager,
so the last good Parquet stays in place, and the stages after it do not run. Each check is one
call to a `ppb_core.chain` predicate returning the problems it found; its result (passed or not,
with the problems) is recorded against the asset and partition either way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import dagster as dg

SOUND = "No negative or missing figure; at least one body; every body offers the same options."

LAYER_WALK_IS_WHOLE = dg.AssetCheckSpec(
    "layer_walk_is_whole",
    asset="layer_walk",
    blocking=True,
    description="Every sub-model walked whole (one HEAD, all body layers, one TAIL); no empty cell.",
)
LAYER_DESCRIPTIONS_ARE_SOUND = dg.AssetCheckSpec(
    "layer_descriptions_are_sound", asset="layer_descriptions", blocking=True, description=SOUND
)
COMBINED_DESCRIPTIONS_ARE_SOUND = dg.AssetCheckSpec(
    "combined_descriptions_are_sound", asset="combined_descriptions", blocking=True, description=SOUND
)
WITHDRAWN_DESCRIPTIONS_ARE_SOUND = dg.AssetCheckSpec(
    "withdrawn_descriptions_are_sound", asset="withdrawn_descriptions", blocking=True, description=SOUND
)
SCALED_RELATIVE_TO_FIRST_BODY = dg.AssetCheckSpec(
    "scaled_relative_to_first_body",
    asset="scaled_descriptions",
    blocking=True,
    description=(
        "Sound as the other description tables, and every time is the withdrawn one over the first "
        "body's forward time, which becomes 1."
    ),
)
PLAN_FITS_THE_DEVICE = dg.AssetCheckSpec(
    "plan_fits_the_device",
    asset="pipeline_plan",
    blocking=True,
    description="A plan exists, places every body layer, and every stage fits the run config's device memory.",
)
MEMORY_MODEL_AGREES_THE_PLAN_FITS = dg.AssetCheckSpec(
    "memory_model_agrees_the_plan_fits",
    asset="plan_report",
    description="The memory model, evaluating the plan layer by layer, agrees that every stage fits (a warning).",
)


# the failure's metadata key saying the run config is at fault, not the code
BAD_INPUT = "bad_input"


def verdict(spec: dg.AssetCheckSpec, problems: Sequence[str], warn: bool = False) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=spec.name,
        passed=not problems,
        severity=dg.AssetCheckSeverity.WARN if warn else dg.AssetCheckSeverity.ERROR,
        metadata={"problems": len(problems), "details": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems))},
    )


def checked(spec: dg.AssetCheckSpec, problems: Sequence[str], bad_input: bool = False) -> Iterator[dg.AssetCheckResult]:
    """The check's result; then, if it found problems, the step's failure (nothing is stored).

    *bad_input*: the problems are the run config's (no plan fits its device), so `python -m
    pipelines` exits 2 as `ppb balance` and `ppb plan` do (materialize.failure_line reads it)."""
    yield verdict(spec, problems)
    if problems:
        listed = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise dg.Failure(
            description=f"{spec.asset_key.to_user_string()} not stored, {spec.name} failed: {listed}",
            metadata={"problems": len(problems), BAD_INPUT: bad_input},
            allow_retries=False,
        )
