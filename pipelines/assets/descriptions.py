"""The PPB stages: switch profiles, then layer descriptions combined, withdrawn and scaled."""

import dagster as dg
import pandas as pd

from pipelines.assets.common import rounded, stage_asset, table_metadata
from pipelines.checks import (
    COMBINED_DESCRIPTIONS_ARE_SOUND,
    LAYER_DESCRIPTIONS_ARE_SOUND,
    SCALED_RELATIVE_TO_FIRST_BODY,
    WITHDRAWN_DESCRIPTIONS_ARE_SOUND,
    checked,
)
from ppb_core import chain
from ppb_core.tables.payload import descriptions_from_frame


def description_figures(frame: pd.DataFrame) -> dict[str, object]:
    """What a person checks first in a description table: how many, which options the bodies offer."""
    descriptions = descriptions_from_frame(frame)
    bodies = [d for d in descriptions if d["type"] == "BODY"]
    return {
        "descriptions": len(descriptions),
        "bodies": len(bodies),
        "body_layers": sum(d["nb_layer"] for d in bodies),
        "options": ", ".join(chain.offered_options(bodies[0])) if bodies else "",
    }


def described(frame: pd.DataFrame, figures: dict[str, object] | None = None) -> dg.Output[pd.DataFrame]:
    shown = frame.drop(columns=["key_order", "integer_keys"]).dropna(axis="columns", how="all")
    return dg.Output(frame, metadata=table_metadata(shown, {**description_figures(frame), **(figures or {})}))


@stage_asset("switch_profiles")
def switch_profiles(run_config: pd.DataFrame, layer_walk: pd.DataFrame) -> dg.Output[pd.DataFrame]:
    frame = chain.switch_profiles(run_config, layer_walk)
    alone = frame[frame["role"] == "alone"]
    return dg.Output(
        frame,
        metadata=table_metadata(
            frame.drop(columns=["kind_json"]),
            {
                "profiles": int(frame[["model_name", "kind_json"]].drop_duplicates().shape[0]),
                "switches_measured_alone": len(alone),
            },
        ),
    )


@stage_asset("layer_descriptions", check_specs=[LAYER_DESCRIPTIONS_ARE_SOUND])
def layer_descriptions(run_config: pd.DataFrame, layer_walk: pd.DataFrame):
    frame = chain.layer_descriptions(run_config, layer_walk)
    yield from checked(LAYER_DESCRIPTIONS_ARE_SOUND, chain.description_problems(frame))
    yield described(frame)


@stage_asset("combined_descriptions", check_specs=[COMBINED_DESCRIPTIONS_ARE_SOUND])
def combined_descriptions(run_config: pd.DataFrame, layer_descriptions: pd.DataFrame):
    frame = chain.combined_descriptions(run_config, layer_descriptions)
    yield from checked(COMBINED_DESCRIPTIONS_ARE_SOUND, chain.description_problems(frame))
    yield described(frame)


@stage_asset("withdrawn_descriptions", check_specs=[WITHDRAWN_DESCRIPTIONS_ARE_SOUND])
def withdrawn_descriptions(combined_descriptions: pd.DataFrame):
    frame = chain.withdrawn_descriptions(combined_descriptions)
    yield from checked(WITHDRAWN_DESCRIPTIONS_ARE_SOUND, chain.description_problems(frame))
    before = description_figures(combined_descriptions)["options"].split(", ")
    kept = description_figures(frame)["options"].split(", ")
    yield described(frame, {"options_kept": len(kept), "withdrawn": ", ".join(o for o in before if o not in kept)})


@stage_asset("scaled_descriptions", kinds={"pandas", "parquet", "json"}, check_specs=[SCALED_RELATIVE_TO_FIRST_BODY])
def scaled_descriptions(withdrawn_descriptions: pd.DataFrame):
    frame = chain.scaled_descriptions(withdrawn_descriptions)
    yield from checked(
        SCALED_RELATIVE_TO_FIRST_BODY,
        chain.description_problems(frame) + chain.scaling_problems(withdrawn_descriptions, frame),
    )
    bodies = descriptions_from_frame(withdrawn_descriptions)
    unit = next((d["forward_time"] for d in bodies if d["type"] == "BODY" and d.get("forward_time")), None)
    yield described(frame, {"time_unit_ms": rounded(unit, 4) if unit else 0.0})
