"""The recompute front: settings nothing beats, their names and prices (hyper-parallel's sapp_nd/recompute/front.py
and its test_front.py cases)."""

from __future__ import annotations

from itertools import combinations

from test_profile import _ALONE, _PLAIN, PROFILE

from ppb_core.model.switches import KEEP_ALL, SWITCHES
from ppb_core.payload.front import LayerOption, build_front, candidates, option_names, price_option
from ppb_core.payload.profile import Cost, SwitchProfile


def test_the_front_starts_plain_ends_full_and_ascends_in_backward_time():
    front = build_front(PROFILE)
    assert front[0].recompute == frozenset()
    assert any(option.recompute is None for option in front)
    times = [option.backward_time for option in front]
    assert times == sorted(times) and front[-1].recompute is None  # full is the slowest here (80)


def test_nothing_on_the_front_recomputes_what_frees_nothing():
    # dropout alone costs what the plain layer does: any setting with it ties the one without,
    # which comes first.
    assert all("dropout" not in option.recompute for option in build_front(PROFILE) if option.recompute is not None)


def test_the_front_is_what_no_setting_beats():
    # An independent check by exhaustive comparison of the 128 settings and full.
    front = build_front(PROFILE)
    # Subsets smallest first in SWITCHES order, then full: the order that settles ties.
    names = [name for name in SWITCHES if name in _ALONE]
    settings = [frozenset(c) for size in range(8) for c in combinations(names, size)]
    priced = [price_option(PROFILE, s) for s in settings] + [price_option(PROFILE, None)]

    def key(option):
        return option.memory_per_micro_batch, option.memory_once, option.backward_time

    kept = {option.recompute for option in front}
    for i, option in enumerate(priced):
        beaten = any(
            all(a <= b for a, b in zip(key(other), key(option), strict=True)) and (key(other) != key(option) or j < i)
            for j, other in enumerate(priced)
            if j != i
        )
        assert (option.recompute in kept) == (not beaten or option.recompute in (frozenset(), None)), option.recompute
    assert candidates(PROFILE) == [*settings, None]


def test_the_balancer_options_are_named_by_the_configured_switches():
    profile = SwitchProfile(
        forward_time=25,
        plain=_PLAIN,
        full=Cost(2, 20, 80),
        alone={name: (Cost(40, 10, 51) if name == "gather" else Cost(100, 10, 51)) for name in _ALONE},
    )
    configured = {"ffAct": 0}
    settings = (frozenset(), frozenset({"ffAct"}), frozenset({"gather"}), frozenset({"ffAct", "gather"}), None)
    named = {recompute: price_option(profile, recompute, configured).names for recompute in settings}
    assert named == {
        frozenset(): ("NONE",),
        frozenset({"ffAct"}): ("SLCT",),
        frozenset({"gather"}): ("COMM",),
        frozenset({"ffAct", "gather"}): ("BOTH",),
        None: ("FULL",),
    }
    front = build_front(profile, configured)
    assert {option.name for option in front} >= {"NONE", "COMM", "FULL"}
    # Nothing configured: SLCT is NONE and BOTH is COMM; without the configured switches neither is named.
    assert option_names(frozenset(), KEEP_ALL) == ("NONE", "SLCT")
    assert option_names(frozenset({"gather"}), KEEP_ALL) == ("COMM", "BOTH")
    assert option_names(frozenset({"ffAct"})) == ()


def test_a_setting_that_needs_less_at_a_stage_count_stays_on_the_front():
    same = Cost(100, 10, 50, (0,))
    alone = {name: same for name in _ALONE}
    alone["ffAct"] = Cost(70, 10, 50.01, (0,))
    alone["normOp"] = Cost(70, 10, 50.05, (20,))
    profile = SwitchProfile(forward_time=25, plain=same, alone=alone, full=Cost(2, 20, 80, (0,)), counts=(2,))
    ffact, normop = price_option(profile, {"ffAct"}), price_option(profile, {"normOp"})
    # 2·70 + 10 = 150 for ffAct; normOp over-charges 20 at 2 in flight: 130.
    assert (ffact.memory(2), normop.memory(2)) == (150, 130)
    assert normop.excess == ((2, 20),) and ffact.excess == ()
    fronts = {option.recompute for option in build_front(profile)}
    assert {frozenset({"ffAct"}), frozenset({"normOp"})} <= fronts
    # Without the count, normOp (70, 10, 50.05) is beaten by ffAct (70, 10, 50.01).
    flat = SwitchProfile(
        forward_time=25,
        plain=Cost(100, 10, 50),
        full=Cost(2, 20, 80),
        alone={name: Cost(c.memory_per_micro_batch, c.memory_once, c.backward_time) for name, c in alone.items()},
    )
    fronts = {option.recompute for option in build_front(flat)}
    assert frozenset({"ffAct"}) in fronts and frozenset({"normOp"}) not in fronts


def test_a_layer_option_states_its_switches_and_its_memory_at_any_count():
    option = price_option(PROFILE, {"ffAct"})
    assert option.switches == dict(KEEP_ALL, ffAct=0)
    assert price_option(PROFILE, None).switches is None
    # ffAct: 70 per micro-batch, 10 once: 3 in flight hold 220.
    assert option.memory(3) == 220 and option.forward_time == 25 and option.backward_time == 50.01
    assert LayerOption(frozenset(), 1, 2, 3, 4, excess=((3, 1.5),)).memory(3) == 3 + 2 - 1.5
    assert set(option.switches) == set(SWITCHES)
