"""The census record and file: KindActivations, a rank's bytes, and the JSON format (no torch)."""

from __future__ import annotations

import json

import pytest

from ppb_core.census.record import (
    CENSUS_FORMAT,
    CENSUS_VERSION,
    Census,
    Kept,
    KindCensus,
    PerToken,
    RankSplit,
    Setting,
    WorkingLine,
    kept_bytes,
    read_census,
)
from ppb_core.errors import InputError


def _kind() -> KindCensus:
    """normOp and ffAct act: whole 504 → 100 under normOp; split 1200 + 2·seq → 600 under ffAct."""
    plain = Kept(saved=PerToken(504.0), saved_tp=PerToken(1200.0, 2.0))
    settings = {
        frozenset(): Setting(frozenset(), plain),
        frozenset({"normOp"}): Setting(frozenset({"normOp"}), Kept(PerToken(100.0), PerToken(1200.0, 2.0))),
        frozenset({"ffAct"}): Setting(frozenset({"ffAct"}), Kept(PerToken(504.0), PerToken(600.0))),
        frozenset({"normOp", "ffAct"}): Setting(
            frozenset({"normOp", "ffAct"}),
            Kept(PerToken(100.0), PerToken(600.0)),
            attention_mm_share=0.0,
            ffn_mm_share=0.25,
        ),
    }
    return KindCensus(
        name="dense",
        kind={"type": "BodyKind", "name": "dense"},
        layer_index=0,
        acting=("normOp", "ffAct"),
        settings=settings,
        full=Kept(saved=PerToken(100.0)),
        # Two points of the backward: one holds 800 whole + 1500 split, the other 300 + 1000 + 1·seq split.
        working=(WorkingLine(PerToken(800.0), PerToken(1500.0)), WorkingLine(PerToken(300.0), PerToken(1000.0, 1.0))),
    )


def test_kind_activations_at_a_sequence_length() -> None:
    record = _kind().activations(1000)
    assert record.seq_length == 1000
    assert (record.saved, record.saved_tp) == (504.0, 3200.0)  # 1200 + 2·1000
    # At seq 1000 the first point holds 800 + 1500 = 2300 and the second 300 + 1000 + 1000 = 2300:
    # a tie keeps the first.
    assert (record.working, record.working_tp) == (800.0, 1500.0)
    # At seq 2000 the second holds 3300 and is the working set.
    later = _kind().activations(2000)
    assert (later.working, later.working_tp) == (300.0, 3000.0)
    # HyperParallel's policy recomputes normOp and ffAct (and others this kind has none of).
    assert (record.selective, record.selective_tp) == (100.0, 600.0)
    assert record.selective_ffn_mm == 0.25
    # What each switch alone frees: normOp 504 − 100 whole; ffAct 3200 − 600 split.
    assert record.ops == {"normOp": 404.0, "ffAct": 0.0}
    assert record.ops_tp == {"normOp": 0.0, "ffAct": 2600.0}


def test_switch_settings_and_full_recompute() -> None:
    kind = _kind()
    # Switches that do not act (softmax here) do not change the setting; unstated ones keep.
    assert kind.kept({"softmax": 0, "ffAct": 0}) == kind.settings[frozenset({"ffAct"})].kept
    assert kind.kept(None) == kind.settings[frozenset()].kept
    assert kind.kept(None, full=True).saved == PerToken(100.0)


def test_the_working_set_is_the_fullest_point_for_the_rank() -> None:
    kind = _kind()
    # tp 2 at seq 1000: first 800 + 1500/2 = 1550; second 300 + 2000/2 = 1300.
    assert kind.held_bytes(10, 1000, RankSplit(tp=2)) == 10 * 1550
    # tp 1 at seq 4000: first 2300; second 300 + 5000 = 5300.
    assert kind.held_bytes(10, 4000) == 10 * 5300


def test_a_ranks_bytes() -> None:
    kept = _kind().kept(None)
    # 4096 tokens at seq 1000 on tp 2 with SP: 504/2 + 3200/2 = 1852 bytes a token.
    assert kept_bytes(kept, 4096, 1000, RankSplit(tp=2, sp=2)) == 4096 * 1852
    # Without SP the whole part is kept whole: 504 + 1600.
    assert kept_bytes(kept, 4096, 1000, RankSplit(tp=2, sp=1)) == 4096 * 2104
    # Routed parts: the TP group's share of the tokens, imbalance 1.5; of the hidden side the
    # rank keeps the 1/ep that stayed (the memory model counts the rest as EP buffers):
    # 1.5·(1000/4 + 2000)/2 = 1687.5 bytes a token at ep 4; 1.5·(1000 + 2000)/2 = 2250 at ep 1.
    routed = Kept(routed=PerToken(1000.0), routed_tp=PerToken(2000.0))
    assert kept_bytes(routed, 10, 64, RankSplit(tp=2, sp=2, ep=4, routed_factor=1.5)) == 10 * 1687.5
    assert kept_bytes(routed, 10, 64, RankSplit(tp=2, sp=2, ep=1, routed_factor=1.5)) == 10 * 2250
    # Router bytes grow with the experts: 8 bytes a token per expert at 256 experts.
    router = Kept(saved=PerToken(100.0, 0.0, 8.0))
    assert kept_bytes(router, 1, 64, RankSplit(), experts=256) == 100 + 8 * 256


def _census() -> Census:
    return Census(
        kinds=(_kind(),),
        model_type="llama",
        attention="eager",
        dtype="bf16",
        micro_batch_size=1,
        source="hf/x.json",
        shapes=((1, 64), (1, 128)),
        versions={"torch": "2.13.0"},
    )


def test_json_round_trip(tmp_path) -> None:
    path = tmp_path / "census.json"
    path.write_text(_census().to_json())
    back = read_census(path)
    assert back == _census()
    data = json.loads(path.read_text())
    assert data["format"] == CENSUS_FORMAT and data["version"] == CENSUS_VERSION
    # Settings in order of size, each named by the switches it recomputes in SWITCHES order.
    assert [s["recompute"] for s in data["kinds"][0]["settings"]] == [[], ["normOp"], ["ffAct"], ["normOp", "ffAct"]]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d.update(version=99), "version"),
        (lambda d: d.update(kinds=[]), "kinds"),
        (lambda d: d["kinds"][0]["settings"].pop(), "kinds.0.settings"),
        (lambda d: d["kinds"][0].update(acting=["nope"]), "kinds.0.acting"),
        (lambda d: d["kinds"][0]["full"]["saved"].update(base="x"), "kinds.0.full.saved.base"),
        (lambda d: d["kinds"][0]["working"][0].update(extra=1.0), "kinds.0.working.0"),
        (lambda d: d["kinds"][0].pop("working"), "kinds.0.working"),
    ],
)
def test_bad_files_name_the_field(tmp_path, change, field) -> None:
    data = _census().to_dict()
    change(data)
    path = tmp_path / "census.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        read_census(path)
    assert err.value.source == str(path)
    assert err.value.field == field
    assert "\n" not in err.value.line()


def test_unreadable_files(tmp_path) -> None:
    with pytest.raises(InputError, match="file not found"):
        read_census(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InputError, match="not valid JSON"):
        read_census(bad)
