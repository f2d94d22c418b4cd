"""Combination, dominance withdrawal and scaling (`_ppb.py`'s ppb_combine_bodies, ppb_withdraw_dominated and
ppb_scale_times in mindspore-ai/hyper-parallel, and the cases of its test_ppb.py), and their order."""

from __future__ import annotations

import copy
import json

import pytest
from test_ppb_fakes import SPEC, FakeMemory, FakePricer, layer_of, small_run

from ppb_core.balance import BalanceInput
from ppb_core.balance.program import solve
from ppb_core.errors import InputError
from ppb_core.model.switches import KEEP_ALL, MEMORY_KEY, OPTIONS, TIME_KEY
from ppb_core.model.walk import BODY, HEAD, TAIL
from ppb_core.payload import sapp
from ppb_core.payload.combines import combined_parts
from ppb_core.payload.describe import add_to_list, describe, describe_layer
from ppb_core.payload.postprocess import beaten, combine, postprocess, scale, withdraw
from ppb_core.payload.run import describe_run

SOFTMAX = dict(KEEP_ALL, softmax=0)


def _listed(*bodies, timed=True, ends=False):
    """Descriptions of body layers of models named in *bodies* as (model, dp MB, configured)."""
    listed: list[dict] = []
    pricer = FakePricer() if timed else None
    for model, dp_mb, configured in bodies:
        memory = FakeMemory(dp_mb=dp_mb)
        if ends:
            add_to_list(listed, describe_layer(layer_of(HEAD, model), memory, pricer, many=2, configured=configured))
        add_to_list(listed, describe_layer(layer_of(BODY, model), memory, pricer, many=2, configured=configured))
        if ends:
            add_to_list(listed, describe_layer(layer_of(TAIL, model), memory, pricer, many=2, configured=configured))
    return listed


def _options(desc):
    return {option for option in OPTIONS if MEMORY_KEY[option] in desc}


# --- withdrawal ----------------------------------------------------------------------------------


def test_withdrawal_with_every_op_kept_leaves_none_comm_full():
    # Nothing configured: SLCT is NONE (10, 20) and loses the tie; BOTH is COMM (8, 23), same.
    [body] = withdraw(_listed(("a", 0, KEEP_ALL)))
    assert _options(body) == {"NONE", "COMM", "FULL"}
    assert TIME_KEY["SLCT"] not in body and TIME_KEY["BOTH"] not in body


def test_withdrawal_with_softmax_recomputed_and_constant_buffers_leaves_none_slct_full():
    # dp 5: NONE (8, 20), SLCT (7, 21), COMM (8, 23) beaten by NONE, BOTH (7, 24) beaten by SLCT.
    [body] = withdraw(_listed(("a", 5, SOFTMAX)))
    assert _options(body) == {"NONE", "SLCT", "FULL"}


def test_an_option_stays_while_any_body_is_better_off_with_it():
    # Model b (dp 0): COMM (8, 23) and BOTH (7, 24) beat nothing's memory there, so all five stay.
    bodies = withdraw(_listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX)))
    assert [_options(body) for body in bodies] == [set(OPTIONS), set(OPTIONS)]


def test_untimed_descriptions_are_not_withdrawn_from():
    listed = _listed(("a", 5, SOFTMAX), timed=False)
    assert withdraw(listed) == listed


def test_a_tie_goes_to_the_option_first_in_order():
    desc = {"type": BODY, "memory_activation": 5, "backward_time": 2, "memory_select_rec": 5, "select_rec_time": 2}
    assert beaten(desc, "SLCT") and not beaten(desc, "NONE")


# --- scaling -------------------------------------------------------------------------------------


def test_scaling_divides_every_time_by_the_first_body_forward_time():
    listed = _listed(("a", 0, SOFTMAX), ends=True)
    head, body, tail = scale(listed)
    # Body forward 10: body (10, 20, FULL 30) → (1, 2, 3); head forward 1 → 0.1; tail backward 6 → 0.6.
    assert (body["forward_time"], body["time"], body["backward_time"], body["recompute_time"]) == (1.0, 1.0, 2.0, 3.0)
    assert head["forward_time"] == 0.1 and head["time"] == 0.1 and tail["backward_time"] == pytest.approx(0.6)
    for before, after in zip(listed, (head, body, tail), strict=True):
        assert {k: v for k, v in before.items() if "memory" in k} == {k: v for k, v in after.items() if "memory" in k}


def test_untimed_descriptions_are_not_scaled():
    listed = _listed(("a", 0, SOFTMAX), timed=False, ends=True)
    assert [d["time"] for d in scale(listed)] == [1, 1, 1]


# --- combination ---------------------------------------------------------------------------------


def test_combined_bodies_sum_every_memory_and_time():
    listed = _listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX))
    assert [d["name"] for d in listed] == ["BODY_0", "BODY_1"]
    [combined] = combine(listed, [[("a", "body"), ("b", "body")]])
    first, second = listed
    for key in first:
        if key.startswith("memory") or key.endswith("_time"):
            assert combined[key] == first[key] + second[key], key
    assert combined["time"] == combined["forward_time"] == 20
    assert combined["model_name"] == "combined_a_b" and combined["name"] == "COMBINED_BODY_0_BODY_1"
    assert combined["nb_layer"] == 1


def test_a_combined_body_takes_the_place_of_its_first_part():
    listed = _listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX), ends=True)
    names = [d["name"] for d in combine(listed, [[("b", "body"), ("a", "body")]])]
    # a's body was at index 1, b's at 4: the combined one goes to index 1.
    assert names == ["HEAD", "COMBINED_BODY_1_BODY_0", "TAIL", "HEAD", "TAIL"]
    # No group changes nothing. (`_ppb.py` inserts an empty body for a group naming nothing listed;
    # ppb refuses it: test_a_part_that_names_nothing_is_refused.)
    assert combine(listed, []) == listed


def _counted(desc, n):
    return dict(desc, nb_layer=n)


def test_a_combined_body_stands_for_one_layer_of_each_part_and_keeps_their_count():
    """Two 32-layer bodies are 32 combined layers, each one layer of each (`_ppb.py` made them one layer)."""
    first, second = _listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX))
    [combined] = combine([_counted(first, 32), _counted(second, 32)], [[("a", "body"), ("b", "body")]])
    assert combined["nb_layer"] == 32
    assert combined["combines"] == "a BODY_0 + b BODY_1"
    # Memory and times are one layer of each: 8 + 8 MB plain (dp 5 and 0 at one micro-batch, fakes).
    assert combined["memory_activation"] == first["memory_activation"] + second["memory_activation"]


def test_a_combination_that_would_lose_layers_is_refused_in_one_line():
    first, second = _listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX))
    with pytest.raises(InputError) as caught:
        combine([_counted(first, 32), _counted(second, 28)], [[("a", "body"), ("b", "body")]], "run.yaml")
    line = caught.value.line()
    assert "\n" not in line and line.startswith("run.yaml: ppb.combined: ")
    # Pairing one layer of each, 28 pairs leave 4 of a's 32 layers out.
    assert "a BODY_0 has 32 and b BODY_1 has 28 layers: 4 would be lost" in line


def test_a_part_that_names_nothing_is_refused():
    listed = _listed(("a", 5, SOFTMAX), ends=True)
    with pytest.raises(InputError, match="nothing to combine as zz body"):
        combine(listed, [[("zz", "body")]], "run.yaml")
    with pytest.raises(InputError, match="named twice"):
        combine(listed, [[("a", "body"), ("a", "body")]], "run.yaml")


def test_combined_parts_read_back_what_a_combined_body_stands_for():
    first, second = _listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX))
    [combined] = combine([first, second], [[("a", "body"), ("b", "body")]])
    assert combined_parts(combined) == [("a", "BODY_0"), ("b", "BODY_1")]
    assert combined_parts(first) == [("a", "BODY_0")]


# --- the pipeline --------------------------------------------------------------------------------


def test_withdrawal_sees_the_bodies_the_balancer_will_see():
    listed = _listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX))
    # Apart, b is better off with COMM and BOTH, so all five stay (above). Combined, the sums are
    # NONE (18, 40), SLCT (16, 42), COMM (16, 46) and BOTH (14, 48), FULL (2, 60): COMM is beaten by SLCT.
    [body] = postprocess(listed, [[("a", "body"), ("b", "body")]])
    assert _options(body) == {"NONE", "SLCT", "BOTH", "FULL"}
    # And times are scaled by the combined forward time, 20.
    assert body["forward_time"] == 1.0 and body["backward_time"] == 2.0 and body["both_comm_select_time"] == 48 / 20
    assert [_options(d) for d in combine(withdraw(listed), [[("a", "body"), ("b", "body")]])] == [set(OPTIONS)]


def test_each_step_leaves_its_input_as_it_was():
    listed = _listed(("a", 5, SOFTMAX), ("b", 0, SOFTMAX), ends=True)
    before = copy.deepcopy(listed)
    combine(listed, [[("a", "body"), ("b", "body")]])
    withdraw(listed)
    scale(listed)
    postprocess(listed, [[("a", "body"), ("b", "body")]])
    assert listed == before


def test_describe_run_combines_from_the_run_config():
    run = small_run(models=(("a", SPEC), ("b", SPEC)), combined=[[["a", "body"], ["b", "body"]]])
    described = describe_run(run, FakeMemory(), FakePricer())
    # Both models' bodies merge within their model (4 layers each), then the two are one body of 4 layers.
    assert [d["name"] for d in described] == ["HEAD", "COMBINED_BODY_0_BODY_1", "TAIL", "HEAD", "TAIL"]
    assert described[1]["nb_layer"] == 4
    assert describe_run(run, FakeMemory(), timed=False)[1]["time"] == 1


# --- the balancer reads what PPB writes ------------------------------------------------------------


def test_the_balancer_reads_every_option_and_time_back(tmp_path):
    described = describe_run(small_run(recompute={"softmax": 0}), FakeMemory(), FakePricer())
    path = tmp_path / "unit.json"
    sapp.write_layers_description(path, described)
    assert all(key == key.strip() for desc in json.loads(path.read_text())["layers_description"] for key in desc)
    layers = sapp.read_layer_set(path)
    [body] = [d for d in described if d["type"] == BODY]
    [record] = layers.bodies
    assert layers.options == OPTIONS
    assert record.forward_time == body["forward_time"]
    assert record.memory_mb == {option: body[MEMORY_KEY[option]] for option in OPTIONS}
    assert record.backward_time == {option: body[TIME_KEY[option]] for option in OPTIONS}
    assert sapp.read_layers_description(path) == described


def test_describe_run_without_times_gives_what_the_untimed_builder_gives():
    run = small_run(recompute={"softmax": 0})
    assert describe_run(run, FakeMemory(), timed=False) == describe(run, FakeMemory())


def _kind(name: str, memory: int, time: float) -> dict:
    """A hand-made body description: NONE and FULL, every number stated."""
    return {
        "type": BODY,
        "memory_parameter": 10,
        "memory_activation": memory,
        "memory_recompute": 1,
        "time": time,
        "forward_time": time,
        "backward_time": 2 * time,
        "recompute_time": 3 * time,
        "model_name": name,
    }


def test_bodies_stay_in_model_order_through_combination_and_the_plan():
    """A tower of 8 blocks, window (w) and full attention (F) as Qwen2.5-VL interleaves them
    (w w w F w w w F), before a 6-layer language model whose layers pair with the 6 window blocks.
    The descriptions, the combined bodies and the balancer's plan keep the tower's order: along
    the pipeline, a cell's tower layers are the model's next ones. Merged with the earlier equal
    description (SAPP's builder), the 6 window blocks were one body type and both F blocks came
    after all of them: on the last stage, where the model does not have them."""
    window, full, decoder = _kind("vit", 5, 1.0), _kind("vit", 9, 2.0), _kind("llm", 7, 3.0)
    listed: list[dict] = []
    add_to_list(listed, {"type": HEAD, "model_name": "vit", "memory_parameter": 1, "time": 0.1})
    for block in "wwwFwwwF":
        add_to_list(listed, window if block == "w" else full)
    for _ in range(6):
        add_to_list(listed, decoder)
    add_to_list(listed, {"type": TAIL, "model_name": "llm", "memory_parameter": 1, "time": 0.1})
    assert [(d["name"], d["nb_layer"]) for d in listed] == [
        ("HEAD", 1),
        ("BODY_0", 3),
        ("BODY_1", 1),
        ("BODY_2", 3),
        ("BODY_3", 1),
        ("BODY_4", 6),
        ("TAIL", 1),
    ]
    combined = combine(listed, [[("vit", "body"), ("llm", "body")]])
    assert [(d["name"], d["nb_layer"], d.get("combines")) for d in combined] == [
        ("HEAD", 1, None),
        ("COMBINED_BODY_0_BODY_4", 3, "vit BODY_0 + llm BODY_4"),
        ("BODY_1", 1, None),
        ("COMBINED_BODY_2_BODY_4", 3, "vit BODY_2 + llm BODY_4"),
        ("BODY_3", 1, None),
        ("TAIL", 1, None),
    ]
    # one window block and one decoder layer each: forward 1 + 3, activation 5 + 7
    assert combined[1]["forward_time"] == 4.0 and combined[1]["memory_activation"] == 12
    problem = BalanceInput(sapp.layer_set(combined), 4, 8, 1, 1e6)
    solution = solve(problem, 60.0)
    assert solution.plan is not None
    tower = "wFwF"  # the tower block each body type of the balancer stands for
    along = "".join(
        tower[body] * solution.plan.body_layers(body, 0, s)
        for s in range(problem.stages)
        for body in range(len(problem.layers.bodies))
    )
    assert along == "wwwFwwwF"
