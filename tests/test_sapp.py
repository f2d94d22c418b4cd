"""SAPP description files: reading, validation, writing, and the balancer's fallbacks (sapp_ppb/utils/layer.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppb_core.cli.main import main
from ppb_core.errors import InputError
from ppb_core.model.switches import MEMORY_KEY, TIME_KEY
from ppb_core.payload.sapp import layer_set, read_layer_set, read_layers_description, write_layers_description

DATA = Path(__file__).parent / "data"


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(document))
    return path


def _body(**extra: object) -> dict:
    return {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": 4,
        "time": 10,
        "memory_parameter": 5,
        "memory_activation": 8,
        **extra,
    }


def test_stated_times_win_over_fallbacks(tmp_path: Path) -> None:
    # hyper-parallel's test_layer_description.py: the fallbacks would be 2·10 = 20, 1.04·20 = 20.8, 1.5·20 = 30.
    body = _body(
        forward_time=10,
        backward_time=24,
        select_rec_time=26,
        recompute_time=37,
        memory_select_rec=6,
        memory_recompute=1,
    )
    records = read_layer_set(_write(tmp_path, {"layers_description": [body]}))
    (record,) = records.bodies
    assert record.forward_time == 10
    assert dict(record.backward_time) == {"NONE": 24, "SLCT": 26, "FULL": 37}
    assert records.options == ("NONE", "SLCT", "FULL")


def test_fallback_backward_times_use_coefficients() -> None:
    # time 10: backward base 2·10 = 20; SLCT (1 + .04)·20 = 20.8, COMM 1.125·20 = 22.5,
    # BOTH 1.165·20 = 23.3, FULL with its own coef .25: 1.25·20 = 25.
    body = _body(
        memory_select_rec=7, memory_select_comm=6, memory_both_comm_select=5, memory_recompute=1, recompute_coef=0.25
    )
    (record,) = layer_set([body]).bodies
    assert record.forward_time == 10  # forward = time when absent
    assert record.backward_time["NONE"] == pytest.approx(20)
    assert record.backward_time["SLCT"] == pytest.approx(20.8)
    assert record.backward_time["COMM"] == pytest.approx(22.5)
    assert record.backward_time["BOTH"] == pytest.approx(23.3)
    assert record.backward_time["FULL"] == pytest.approx(25)


def test_zero_stated_time_falls_back() -> None:
    (record,) = layer_set([_body(backward_time=0)]).bodies
    assert record.backward_time["NONE"] == 20


def test_option_considered_iff_memory_key_present() -> None:
    # demo.json has no memory_recompute: FULL is not considered; a null key is absent too.
    records = layer_set([_body(memory_select_rec=7, memory_select_comm=None, recompute_time=99)])
    assert records.options == ("NONE", "SLCT")


def test_every_body_must_share_the_first_bodys_options() -> None:
    with pytest.raises(InputError, match=r"layers_description\[1\].*SLCT"):
        layer_set([_body(memory_select_rec=7), _body(name="BODY_1")], "f.json")


def test_head_and_tail_run_none() -> None:
    head = {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 13, "memory_parameter": 9236}
    tail = {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 113, "memory_parameter": 5794, "backward_time": 200}
    records = layer_set([head, _body(memory_recompute=1), tail])
    assert records.head_forward() == 13 and records.head_backward() == 26  # 2·13
    assert records.tail_forward() == 113 and records.tail_backward() == 200  # stated
    assert records.head_memory_mb(7) == 9236  # no activation key: parameters only
    assert records.options == ("NONE", "FULL")


def test_llama2_70b_example_reads() -> None:
    records = read_layer_set(DATA / "llama2_70b.json")
    assert [b.nb_layer for b in records.bodies] == [96]
    assert records.options == ("NONE", "SLCT", "BOTH", "FULL")
    assert records.bodies[0].memory_mb == {"NONE": 994, "SLCT": 739, "BOTH": 403, "FULL": 32}


def test_demo_example_has_no_full() -> None:
    records = read_layer_set(DATA / "demo.json")
    assert records.options == ("NONE", "SLCT", "COMM", "BOTH")


def test_round_trip_keeps_key_order_and_unknown_keys(tmp_path: Path) -> None:
    entries = [
        {"type": "BODY", "name": "BODY_0", "nb_layer": 2, "time": 1.5, "vendor_note": "x", "memory_activation": 3}
    ]
    path = tmp_path / "out" / "layers.json"
    write_layers_description(path, entries)
    assert list(json.loads(path.read_text())) == ["layers_description"]
    back = read_layers_description(path)
    assert back == entries and list(back[0]) == list(entries[0])


def test_other_top_level_keys_are_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path, {"name": "x", "pre_defined_layer": {"E": 0}, "layers_description": [_body()]})
    assert read_layers_description(path)[0]["name"] == "BODY_0"


@pytest.mark.parametrize(
    ("entry", "field", "problem"),
    [
        ({"type": "BODY", "nb_layer": 1, "time": 1}, "layers_description[0].name", "required"),
        (_body(type="MIDDLE"), "layers_description[0].type", "HEAD, BODY, TAIL"),
        (_body(nb_layer=2.5), "layers_description[0].nb_layer", "positive integer"),
        (_body(nb_layer=0), "layers_description[0].nb_layer", "positive integer"),
        (_body(time="1"), "layers_description[0].time", "finite number"),
        (_body(memory_select_rec=True), "layers_description[0].memory_select_rec", "finite number"),
        (_body(memory_select_rec=-3), "layers_description[0].memory_select_rec", "negative"),
        ({**_body(), "recompute_time ": 3}, "layers_description[0].'recompute_time '", "whitespace"),
    ],
)
def test_bad_entries_name_the_field(tmp_path: Path, entry: dict, field: str, problem: str) -> None:
    path = _write(tmp_path, {"layers_description": [entry]})
    with pytest.raises(InputError) as caught:
        read_layers_description(path)
    assert caught.value.source == str(path)
    assert caught.value.field == field
    assert problem in caught.value.problem


def test_index_in_field_points_at_the_bad_entry(tmp_path: Path) -> None:
    entries = [_body(name=f"B{i}") for i in range(3)] + [_body(name="B3", memory_select_rec="lots")]
    with pytest.raises(InputError) as caught:
        read_layers_description(_write(tmp_path, {"layers_description": entries}))
    assert caught.value.field == "layers_description[3].memory_select_rec"


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ("{", None, "not valid JSON"),
        ("[]", None, "JSON object"),
        ("{}", "layers_description", "missing"),
        ('{"layers_description": {}}', "layers_description", "list"),
        ('{"layers_description": []}', "layers_description", "empty"),
        (
            '{"layers_description": [{"name": "H", "type": "HEAD", "nb_layer": 1, "time": 1}]}',
            "layers_description",
            "no BODY",
        ),
    ],
)
def test_bad_files(tmp_path: Path, text: str, field: str | None, problem: str) -> None:
    path = tmp_path / "layers.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_layers_description(path)
    assert caught.value.field == field and problem in caught.value.problem


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        read_layers_description(tmp_path / "absent.json")


def test_write_validates_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "layers.json"
    with pytest.raises(InputError):
        write_layers_description(path, [_body(time=-1)])
    assert not path.exists()


def test_time_and_memory_keys_carry_no_whitespace() -> None:
    for key in (*MEMORY_KEY.values(), *TIME_KEY.values()):
        assert key == key.strip()


def test_every_sub_model_has_its_own_head_and_tail_named_alike(tmp_path: Path) -> None:
    # `_ppb.py` add_to_ppb_list: two HEADs of different sub-models are both named "HEAD"; body names stay unique
    head = {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 7}
    tail = {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 2, "memory_parameter": 9}
    entries = [head, _body(name="BODY_0"), tail, head, _body(name="BODY_1"), tail]
    layers = read_layer_set(_write(tmp_path, {"layers_description": entries}))
    assert (len(layers.heads), len(layers.bodies), len(layers.tails)) == (2, 2, 2)
    with pytest.raises(InputError) as caught:
        read_layers_description(_write(tmp_path, {"layers_description": [*entries, _body(name="BODY_1")]}))
    assert caught.value.field == "layers_description[6].name"
    assert "'BODY_1' is used by an earlier BODY" in caught.value.problem


def test_a_two_model_run_describes_and_balances(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:

    run = tmp_path / "run.yaml"
    run.write_text(
        "models:\n"
        "  - {name: vit, spec: {vocab_size: 1024, hidden_size: 256, num_layers: 4, num_attention_heads: 4,"
        " num_key_value_heads: 4, intermediate_size: 1024}}\n"
        "  - {name: llm, spec: {vocab_size: 4096, hidden_size: 512, num_layers: 8, num_attention_heads: 8,"
        " num_key_value_heads: 2, intermediate_size: 1536}}\n"
        "parallel: {pp: 2}\ntraining: {seq_length: 512, micro_batches: 4}\ndevice: {name: h100-80gb}\n"
    )
    out = tmp_path / "layers.json"
    assert main(["describe", str(run), "-o", str(out)]) == 0
    entries = read_layers_description(out)
    assert [(e["name"], e["model_name"]) for e in entries] == [
        ("HEAD", "vit"),
        ("BODY_0", "vit"),
        ("TAIL", "vit"),
        ("HEAD", "llm"),
        ("BODY_1", "llm"),
        ("TAIL", "llm"),
    ]
    capsys.readouterr()
    assert main(["balance", str(run), "--json", "--closed-form"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["status"] == "optimal"
    assert sum(stage["layers"] for stage in plan["stages"]) == 12
