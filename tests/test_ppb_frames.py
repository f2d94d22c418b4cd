"""PPB's tables: descriptions, profiles and fronts to DataFrames and back through Parquet, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ppb_fakes import MLA_SPEC, SPEC, CensusMemory, FakeMemory, FakePricer, layer_of, small_run

from ppb_core.model.switches import KEEP_ALL
from ppb_core.model.walk import BODY, walk
from ppb_core.payload import sapp
from ppb_core.payload.describe import describe
from ppb_core.payload.front import build_front
from ppb_core.payload.postprocess import combine, postprocess
from ppb_core.payload.profiling import measure_profile, profile_layers
from ppb_core.payload.run import describe_run
from ppb_core.tables.payload import (
    DESCRIPTION_COLUMNS,
    descriptions_from_frame,
    descriptions_to_frame,
    fronts_from_frame,
    fronts_to_frame,
    profiles_from_frame,
    profiles_to_frame,
)


def _through_parquet(frame: pd.DataFrame, tmp_path) -> pd.DataFrame:
    path = tmp_path / "table.parquet"
    frame.to_parquet(path, index=False)
    again = pd.read_parquet(path)
    pd.testing.assert_frame_equal(again, frame)
    return again


def _exact(a: list[dict], b: list[dict]) -> bool:
    """Equal values, keys in the same order, ints still ints: the JSON texts are the same."""
    return json.dumps(a) == json.dumps(b)


def _described():
    run = small_run(models=(("a", SPEC), ("b", MLA_SPEC)), recompute={"softmax": 0})
    timed = describe(run, FakeMemory(dp_mb=5), FakePricer())
    return {
        "untimed": describe(run, FakeMemory()),
        "timed": timed,
        "combined": combine(timed, [[("a", "body"), ("b", "body")]]),
        "final": describe_run(run, FakeMemory(dp_mb=5), FakePricer()),
    }


@pytest.mark.parametrize("stage", ["untimed", "timed", "combined", "final"])
def test_descriptions_come_back_exactly_through_parquet(stage, tmp_path):
    descriptions = _described()[stage]
    frame = descriptions_to_frame(descriptions)
    assert len(frame) == len(descriptions)
    assert list(frame.columns[: len(DESCRIPTION_COLUMNS)]) == list(DESCRIPTION_COLUMNS)
    assert _exact(descriptions_from_frame(_through_parquet(frame, tmp_path)), descriptions)


def test_the_table_reads_as_a_table():
    frame = descriptions_to_frame(_described()["untimed"])
    # Absent keys are nulls; counts are integers; memory in MB as numbers.
    assert frame["memory_select_comm"].isna().all() and frame["forward_time"].isna().all()
    assert str(frame["nb_layer"].dtype) == "Int64" and frame.loc[1, "nb_layer"] == 4
    assert str(frame["memory_activation"].dtype) == "Float64"


def test_descriptions_other_tools_wrote_come_back_exactly(tmp_path):
    foreign = [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 13, "memory_parameter": 9236.5},
        {
            "type": "BODY",
            "name": "BODY",
            "time": 100.0,
            "nb_layer": 96.0,
            "memory_activation": 994,
            "select_rec_coef": 0.1,
            "note": "from a profile",
            "tags": [1, 2.5, None],
            "model_name": None,
        },
        {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 113, "forward_time": None},
    ]
    again = descriptions_from_frame(_through_parquet(descriptions_to_frame(foreign), tmp_path))
    assert _exact(again, foreign)


def test_an_empty_list_is_an_empty_table(tmp_path):
    assert descriptions_from_frame(_through_parquet(descriptions_to_frame([]), tmp_path)) == []


def test_bad_descriptions_are_refused():
    with pytest.raises(ValueError, match="memory_activation"):
        descriptions_to_frame([{"type": "BODY", "memory_activation": "10"}])
    with pytest.raises(ValueError, match="nb_layer"):
        descriptions_to_frame([{"type": "BODY", "nb_layer": 1.5}])
    with pytest.raises(ValueError, match="key_order"):
        descriptions_to_frame([{"type": "BODY", "key_order": 1}])
    with pytest.raises(ValueError, match="not a descriptions table"):
        descriptions_from_frame(pd.DataFrame({"x": [1]}))


_number = st.one_of(st.integers(0, 10**12), st.floats(0, 1e13, allow_nan=False, allow_infinity=False))
_FIXED = ("model_name", "type", "name", "nb_layer")
_known = st.sampled_from([name for name in DESCRIPTION_COLUMNS if name not in _FIXED])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_description_list_comes_back_exactly(data):
    descriptions = []
    for _ in range(data.draw(st.integers(0, 4))):
        node = data.draw(st.sampled_from(["HEAD", "BODY", "TAIL"]))
        count = data.draw(st.integers(1, 100))
        desc = {"type": node, "name": node.lower(), "nb_layer": data.draw(st.sampled_from([count, float(count)]))}
        desc.update(data.draw(st.dictionaries(_known, st.one_of(_number, st.none()), max_size=8)))
        desc.update(
            data.draw(
                st.dictionaries(
                    st.sampled_from(["extra", "other"]), st.one_of(st.text(max_size=5), st.integers(), st.none())
                )
            )
        )
        order = data.draw(st.permutations(list(desc)))
        descriptions.append({key: desc[key] for key in order})
    assert _exact(descriptions_from_frame(descriptions_to_frame(descriptions)), descriptions)


# --- profiles and fronts -------------------------------------------------------------------------


def _profiles():
    run = small_run(models=(("a", SPEC), ("b", MLA_SPEC)))
    profiles = profile_layers(
        walk(run), FakeMemory(dp_mb=5), FakePricer(), many=4, counts=(2, 3), switches_of=run.switches
    )
    census = measure_profile(layer_of(BODY, "c"), CensusMemory(), FakePricer(), many=4, counts=(2, 3))
    return {**profiles, ("c", layer_of(BODY, "c").kind): census}


def test_profiles_come_back_exactly_through_parquet(tmp_path):
    profiles = _profiles()
    frame = profiles_to_frame(profiles)
    # a: plain, 8 alone (attUp at the base cost), full; b (MLA) the same; c adds the base and the policy.
    assert list(frame["role"].value_counts().sort_index().items()) == [
        ("alone", 24),
        ("full", 3),
        ("plain", 3),
        ("selective_base", 1),
        ("whole", 1),
    ]
    again = profiles_from_frame(_through_parquet(frame, tmp_path))
    assert again == profiles and list(again) == list(profiles)
    assert [list(p.alone) for p in again.values()] == [list(p.alone) for p in profiles.values()]


def test_fronts_come_back_exactly_through_parquet(tmp_path):
    fronts = {key: build_front(profile, KEEP_ALL) for key, profile in _profiles().items()}
    again = fronts_from_frame(_through_parquet(fronts_to_frame(fronts), tmp_path))
    assert again == fronts


def test_tables_of_the_wrong_kind_are_refused():
    with pytest.raises(ValueError, match="not a switch_profiles table"):
        profiles_from_frame(pd.DataFrame({"x": [1]}))
    with pytest.raises(ValueError, match="not a fronts table"):
        fronts_from_frame(pd.DataFrame({"x": [1]}))


@pytest.mark.parametrize("name", ["demo.json", "llama2_70b.json"])
def test_sapp_files_other_tools_wrote_go_through_every_step(name, tmp_path):
    # SAPP's example files (sapp_ppb/layers in mindspore-ai/hyper-parallel): untimed (demo has no
    # times beyond `time`), so withdrawal and scaling leave them as they are, and the table gives
    # them back exactly.

    path = Path(__file__).parent / "data" / name
    descriptions = sapp.read_layers_description(path)
    assert postprocess(descriptions) == descriptions
    assert _exact(
        descriptions_from_frame(_through_parquet(descriptions_to_frame(descriptions), tmp_path)), descriptions
    )
    # SAPP's fallbacks price what the file leaves out (generate_layers_list): backward 2·time, (1 + coef)·2·time.
    layers = sapp.layer_set(descriptions)
    body = layers.bodies[0]
    assert body.forward_time == body.backward_time["NONE"] / 2
