"""Switch profiles: measuring them (`_ppb.py` `_profile`, its test_ppb.py cases) and pricing any setting by
addition (hyper-parallel's sapp_nd/recompute/profile.py and test_front.py cases)."""

from __future__ import annotations

from itertools import combinations

import pytest
from test_ppb_fakes import FULL, MB, MLA_SPEC, NOT, SEL, SPEC, CensusMemory, FakeMemory, FakePricer, layer_of, small_run

from ppb_core.model.switches import KEEP_ALL, SWITCHES, recomputed
from ppb_core.model.walk import BODY, walk
from ppb_core.payload.front import price_option
from ppb_core.payload.profile import Cost, SwitchProfile
from ppb_core.payload.profiling import measure_profile, profile_layers, profile_run

SEVEN = tuple(name for name in SWITCHES if name != "attUp")


def _settings(names=SEVEN):
    return [frozenset(chosen) for size in range(len(names) + 1) for chosen in combinations(names, size)]


# --- measuring (test_ppb.py's cases) ---------------------------------------------------------------


def _fake_profile(dp_mb=5, spec=SPEC, configured=None):
    # test_ppb.py: profile_in_flight 4, stages keeping 1 to 4 in flight.
    return measure_profile(
        layer_of(BODY, spec=spec),
        FakeMemory(dp_mb=dp_mb),
        FakePricer(),
        many=4,
        counts=(1, 2, 3, 4),
        configured=configured,
    )


def test_the_profile_states_the_excess_of_the_split_where_a_constant_buffer_hides_a_growing_one():
    profile = _fake_profile()
    # Buffers max(5, 2k) MB: 5 at 1, 8 at 4, so 1 MB per micro-batch and 4 once; the split
    # charges 4 + 2 = 6 at k = 2 where 5 are held, and 4 + 3 = 7 at 3 where 6 are: 1 MB over at both.
    assert profile.counts == (2, 3)
    assert profile.plain.excess == (1 * MB, 1 * MB)
    assert profile.alone["softmax"].excess == (1 * MB, 1 * MB)
    assert profile.alone["gather"].excess == (0, 0)  # 5 MB at every count: nothing grows
    assert profile.full.excess == (0, 0)
    # Plain: 8 MB kept + 1 per micro-batch; 4 once; backward 20. Full: 1 MB kept, dp 5 once, 30.
    assert profile.plain.values() == (9 * MB, 4 * MB, 20) and profile.full.values() == (1 * MB, 5 * MB, 30)
    assert profile.forward_time == 10 and profile.selective_base is None and profile.census_held is None


def _direct_memory(recompute, in_flight, dp_mb=5):
    """What the fake memory model holds for a setting (None: full) with *in_flight* micro-batches."""
    layer = layer_of(BODY)
    if recompute is None:
        state, switches = FULL, None
    elif not recompute:
        state, switches = NOT, None
    else:
        state, switches = SEL, {name: int(name not in recompute) for name in SWITCHES}
    return sum(FakeMemory(dp_mb=dp_mb).dynamic_bytes(layer, state, switches, in_flight))


@pytest.mark.parametrize("dp_mb", [0, 5])
def test_every_setting_priced_by_addition_holds_what_the_memory_model_holds(dp_mb):
    profile = _fake_profile(dp_mb)
    for recompute in [*_settings(), None]:
        option = price_option(profile, recompute)
        for in_flight in (1, 2, 3, 4):
            assert option.memory(in_flight) == _direct_memory(recompute, in_flight, dp_mb), (recompute, in_flight)


def test_attup_is_measured_only_on_a_layer_with_latent_attention():
    dense = _fake_profile()
    assert dense.alone["attUp"] == dense.plain and "attUp" not in dense.acting()
    assert dense.acting() == SEVEN
    mla = _fake_profile(spec=MLA_SPEC)
    # The fake frees 1 MB for any op but gather: attUp acts on an MLA layer.
    assert mla.alone["attUp"].memory_per_micro_batch == mla.plain.memory_per_micro_batch - MB
    assert mla.acting() == SWITCHES


def test_without_each_switch_only_plain_and_full_are_measured():
    profile = measure_profile(layer_of(BODY), FakeMemory(), FakePricer(), many=2, each_switch=False)
    assert profile.alone == {} and profile.selective([]) == profile.plain


def test_one_profile_per_model_and_kind_on_its_first_body():
    run = small_run(models=(("a", SPEC), ("b", SPEC), ("c", MLA_SPEC)))
    pricer = FakePricer()
    profiles = profile_layers(walk(run), FakeMemory(), pricer, many=2, switches_of=run.switches)
    assert [(model, kind.name) for model, kind in profiles] == [("a", "dense"), ("b", "dense"), ("c", "dense_mla")]
    first_bodies = {layer for layer, _, _ in pricer.calls}
    assert all(layer.node == BODY and layer.index == 0 for layer in first_bodies)
    again = profile_run(run, FakeMemory(), FakePricer(), most_in_flight=3, in_flight=(1, 2, 3, 5))
    assert [profile.counts for profile in again.values()] == [(2,)] * 3


def test_the_pricer_is_asked_for_each_switch_alone_and_full():
    pricer = FakePricer()
    measure_profile(layer_of(BODY), FakeMemory(), pricer, many=2)
    asked = [(state, None if switches is None else recomputed(switches)) for _, state, switches in pricer.calls]
    assert asked == [(NOT, None), *[(SEL, frozenset({name})) for name in SEVEN], (FULL, None)]


# --- pricing by addition (test_front.py's cases) ---------------------------------------------------

_PLAIN = Cost(100, 10, 50)
_ALONE = {
    "attBMM": Cost(99, 10, 55),
    "headCast": Cost(92, 10, 50.1),
    "dropout": Cost(100, 10, 50),
    "softmax": Cost(84, 10, 50.2),
    "normOp": Cost(80, 10, 50.05),
    "gather": Cost(90, 20, 53),
    "ffAct": Cost(70, 10, 50.01),
}
PROFILE = SwitchProfile(forward_time=25, plain=_PLAIN, alone=_ALONE, full=Cost(2, 20, 80))


def test_costs_add_and_subtract_field_by_field():
    a = Cost(1, 2, 3, (4, 5), 6, 7, 8)
    b = Cost(10, 20, 30, (40, 50), 60, 70, 80)
    assert a + b == Cost(11, 22, 33, (44, 55), 66, 77, 88) and b - a == Cost(9, 18, 27, (36, 45), 54, 63, 72)
    with pytest.raises(ValueError):
        a + Cost(1, 1, 1)  # excess at different counts


def test_a_setting_costs_the_plain_layer_plus_what_each_switch_changes_alone():
    # gather: (−10, +10, +3); softmax: (−16, 0, +0.2) → (74, 20, 53.2).
    assert PROFILE.selective(["gather", "softmax"]).values() == (74.0, 20.0, 53.2)
    assert PROFILE.selective(["softmax", "gather"]) == PROFILE.selective(("gather", "softmax"))
    assert PROFILE.selective([]) == _PLAIN
    with pytest.raises(ValueError):
        PROFILE.selective(["nosuch"])


def test_settings_add_up_from_the_selective_base_where_there_is_one():
    profile = SwitchProfile(
        forward_time=25,
        plain=_PLAIN,
        full=Cost(2, 20, 80),
        alone={
            **_ALONE,
            "gather": Cost(70, 20, 53, working=2, first_working=1),
            "softmax": Cost(64, 10, 50.2, working=5, first_working=3),
        },
        selective_base=Cost(80, 10, 50, working=5, first_working=3),
    )
    # 80 + (70 − 80) + (64 − 80) = 54; 10 + 10 + 0 = 20; working 5 + (2 − 5) + 0 = 2; first 3 − 2 = 1.
    cost = profile.selective({"gather", "softmax"})
    assert cost.values() == (54, 20, 53.2) and (cost.working, cost.first_working) == (2, 1)
    assert profile.selective([]) == _PLAIN  # recomputing nothing is the plain layer


def test_a_setting_measured_whole_is_returned_as_measured():
    whole = {frozenset({"softmax", "ffAct"}): Cost(1, 2, 3)}
    profile = SwitchProfile(forward_time=25, plain=_PLAIN, alone=_ALONE, full=Cost(2, 20, 80), whole=whole)
    assert profile.selective(["ffAct", "softmax"]) == Cost(1, 2, 3)


def _census_cost(kept):
    return Cost(kept, 10, 50, working=130 - 2 * kept, census_kept=kept)


def test_the_census_clamp_restores_the_working_set_a_setting_cannot_free():
    profile = SwitchProfile(
        forward_time=25,
        plain=_census_cost(40),
        full=Cost(2, 20, 80),
        alone={**_ALONE, "softmax": _census_cost(36), "ffAct": _census_cost(32), "normOp": _census_cost(25)},
        selective_base=_census_cost(40),
        census_held=30,
    )
    # softmax: working 58, kept 36 > 30 held → + 6 = 64.
    assert profile.selective({"softmax"}).working == 64
    # + ffAct: 50 + 8 + 16 = 74, kept 40 − 4 − 8 = 28 ≤ 30 → 74.
    assert profile.selective({"softmax", "ffAct"}).working == 74
    # + normOp: 74 + 30 = 104, kept 13 → 104.
    assert profile.selective({"softmax", "ffAct", "normOp"}).working == 104


# --- a census-priced layer: what addition can and cannot price -----------------------------------


def _census_profile():
    return measure_profile(layer_of(BODY), CensusMemory(), FakePricer(), many=4, counts=(2, 3))


def _direct_working(recompute, on_saved=True, gathered=2):
    switches = {name: int(name not in recompute) for name in SWITCHES}
    return CensusMemory().working_extra_bytes(layer_of(BODY), SEL, switches, gathered, on_saved)


def test_a_census_profile_adds_up_from_the_selective_layer_keeping_every_op():
    profile = _census_profile()
    assert profile.selective_base is not None and profile.census_held == 30 * MB
    assert profile.selective_base.census_kept == 40 * MB
    # HyperParallel's policy is measured whole: every op but attBMM recomputed (attUp kept).
    [policy] = profile.whole
    assert policy == {"headCast", "dropout", "softmax", "normOp", "gather", "ffAct"}
    # Kept 40 − 2 − 4 − 15 − 8 = 11 MB at one micro-batch, 2 MB buffers once.
    assert profile.selective(policy).memory_per_micro_batch == 11 * MB
    # Full recompute's backward holds all the census's parts, none already kept: 30 + 50 − 40 = 40.
    assert profile.full.working == 40 * MB and profile.full.census_kept == 0


def test_with_a_census_addition_and_the_clamp_price_every_working_set_exactly():
    profile = _census_profile()
    for recompute in _settings():
        if recompute in profile.whole:
            continue
        cost = profile.selective(recompute)
        assert cost.working == _direct_working(recompute), recompute
        assert cost.first_working == _direct_working(recompute, on_saved=False, gathered=1), recompute


def test_without_the_clamp_addition_misses_exactly_what_the_setting_cannot_free():
    clamped = _census_profile()
    unclamped = SwitchProfile(**{**clamped.__dict__, "census_held": None})
    # softmax alone keeps 36 MB of the 30 its backward holds: the working set is
    # max(0, 30 − 36) + 50 − 36 = 14 MB; addition without the clamp gives 14 − (36 − 30) = 8.
    assert clamped.selective({"softmax"}).working == _direct_working({"softmax"}) == 14 * MB
    assert unclamped.selective({"softmax"}).working == 8 * MB
    for recompute in _settings():
        if not recompute or recompute in clamped.whole:
            continue
        kept = CensusMemory().kept(SEL, {name: int(name not in recompute) for name in SWITCHES})
        gap = _direct_working(recompute) - unclamped.selective(recompute).working
        assert gap == max(0, kept - CensusMemory.HELD) * MB, recompute


def test_configured_switches_do_not_change_the_profile():
    assert _fake_profile(configured=dict(KEEP_ALL, softmax=0)) == _fake_profile()
