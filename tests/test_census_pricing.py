"""A run config naming a census: the memory model prices that model's body layers from it (no torch).

The census here is written by hand, so every figure below is worked out from its numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from small_models import SMALL_LLAMA

from ppb_core.census.record import Census, Kept, KindCensus, Part, PerToken, Setting, WorkingLine
from ppb_core.config.hf import spec_from_hf
from ppb_core.config.run import load_run_config
from ppb_core.errors import InputError
from ppb_core.estimate.census import compare, report
from ppb_core.estimate.run import estimate
from ppb_core.memory import MemoryModel
from ppb_core.model.kinds import body_kind, kind_to_dict
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.tables.estimate import estimate_from_frame, estimate_to_frame

SMALL = SMALL_LLAMA
SEQ = 1024  # one micro-batch of one sequence: 1024 tokens


def _census(kind: dict, dtype: str = "bf16") -> Census:
    """normOp frees 3000 whole bytes a token and keeps the residual (512); ffAct frees 1376 split."""
    settings = {
        frozenset(): Kept(PerToken(3512.0), PerToken(3376.0, 8.0)),
        frozenset({"normOp"}): Kept(PerToken(1024.0), PerToken(3376.0, 8.0)),
        frozenset({"ffAct"}): Kept(PerToken(3512.0), PerToken(2000.0, 8.0)),
        frozenset({"normOp", "ffAct"}): Kept(PerToken(1024.0), PerToken(2000.0, 8.0)),
    }
    census = KindCensus(
        name="dense",
        kind=kind,
        layer_index=0,
        acting=("normOp", "ffAct"),
        settings={r: Setting(r, kept) for r, kept in settings.items()},
        full=Kept(saved=PerToken(512.0)),
        working=(WorkingLine(PerToken(5000.0), PerToken(6000.0, 16.0)),),
        parts=(
            Part("input", None, "saved", PerToken(512.0)),
            Part("input_layernorm:_to_copy", "normOp", "saved", PerToken(3000.0)),
            Part("mlp.act_fn:silu", "ffAct", "saved_tp", PerToken(1376.0)),
            Part("mlp.gate_proj:mm", None, "saved_tp", PerToken(2000.0, 8.0)),
        ),
    )
    return Census(kinds=(census,), model_type="llama", attention="sdpa", dtype=dtype, micro_batch_size=1)


def _run(tmp_path: Path, census: Census | None, **training) -> Path:
    (tmp_path / "hf").mkdir(exist_ok=True)
    (tmp_path / "hf" / "small.json").write_text(json.dumps(SMALL))
    model = {"name": "llm", "config": "hf/small.json"}
    if census is not None:
        (tmp_path / "census").mkdir(exist_ok=True)
        (tmp_path / "census" / "small.json").write_text(census.to_json())
        model["census"] = "census/small.json"
    raw = {
        "models": [model],
        "parallel": {"dp": 1, "tp": 2, "pp": 1, "sequence_parallel": True},
        "training": {
            "seq_length": SEQ,
            "micro_batch_size": 1,
            "micro_batches": 4,
            "dtype": "bf16",
            "recompute": {"ffAct": 0},
            **training,
        },
        "device": {"name": "h100-80gb"},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _kind() -> dict:
    return kind_to_dict(body_kind(spec_from_hf(SMALL), 0))


def _body(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


def test_options_are_priced_from_the_census(tmp_path) -> None:
    run = load_run_config(_run(tmp_path, _census(_kind())))
    memory = MemoryModel(run)
    body = _body(run)
    # tp 2 with SP, 1024 tokens, seq 1024: whole bytes halve (SP), split bytes halve (TP).
    # NONE: 3512/2 + (3376 + 8·1024)/2 = 1756 + 5784 = 7540 a token.
    # SLCT (ffAct 0): 1756 + (2000 + 8192)/2 = 6852.  FULL: the input, 512/2.
    assert memory.option_activation_bytes(body) == {
        "NONE": 1024 * 7540,
        "SLCT": 1024 * 6852,
        "COMM": 1024 * 7540,
        "BOTH": 1024 * 6852,
        "FULL": 1024 * 256,
    }
    # Recomputing the norm keeps the residual it is rebuilt from: the parts left (input, silu,
    # gate) and 512/2 a token of recompute inputs.
    terms = {t.op: t.bytes for t in memory.activation_terms(body, LayerType.SEL_REC_LAYER, {"normOp": 0})}
    assert terms == {
        "census.input": 1024 * 256,
        "census.mlp.act_fn:silu": 1024 * 688,
        "census.mlp.gate_proj:mm": 1024 * (2000 + 8192) / 2,
        "census.recompute_inputs": 1024 * 256,
    }
    assert memory.activation_source("llm") == "census:census/small.json"


def test_census_terms_and_working_sets(tmp_path) -> None:
    run = load_run_config(_run(tmp_path, _census(_kind())))
    memory = MemoryModel(run)
    body = _body(run)
    # Held: 5000/2 + (6000 + 16·1024)/2 = 2500 + 11192 = 13692 a token.
    kept, held = memory.census_terms(body, LayerType.NOT_REC_LAYER, None)
    assert (kept, held) == (1024 * 7540, 1024 * 13692)
    # As warm-up ends the stage counts what the layer keeps: the backward adds held − kept, and
    # Megatron-Core (the default framework) all-gathers a column-parallel linear's input again for
    # its weight gradient (tensor_parallel/layers.py): the whole gathered input, 1024 tokens · 256 ·
    # 2 bytes = 1024·512, a workspace the census (one rank's layer, no collective) does not see.
    gathered = 1024 * 256 * 2
    assert memory.working_extra_bytes(body, LayerType.NOT_REC_LAYER, None, 2, True) == 1024 * (13692 - 7540) + gathered
    # A fully recomputed layer's backward holds it all on top of the input the stage counts.
    assert memory.working_extra_bytes(body, LayerType.FULL_REC_LAYER, None, 1, False) == 1024 * 13692 + gathered
    # HEAD and TAIL stay with the formulas.
    head = next(layer for layer in walk(run) if layer.node == "HEAD")
    assert memory.census_terms(head, LayerType.EMBEDDING_LAYER, None) is None


def test_the_estimate_says_what_priced_the_activations(tmp_path) -> None:
    with_census = estimate(load_run_config(_run(tmp_path, _census(_kind()))), stages=False)
    (tmp_path / "formulas").mkdir()
    formulas = estimate(load_run_config(_run(tmp_path / "formulas", None)), stages=False)
    data = with_census.to_json()
    assert data["run"]["activations"]["llm"]["source"] == "census"
    assert data["run"]["activations"]["llm"]["file"] == "census/small.json"
    assert formulas.to_json()["run"]["activations"] == {"llm": {"source": "formulas"}}
    rows = {row["node"]: row for row in data["layers"]}
    assert rows["BODY"]["activations"] == "census:census/small.json"
    assert rows["HEAD"]["activations"] == rows["TAIL"]["activations"] == "formulas"
    # HEAD and TAIL are the formulas' figures either way.
    by_node = {row.node: row for row in formulas.layers}
    assert rows["TAIL"]["activation_bytes"] == by_node["TAIL"].to_json()["activation_bytes"]
    # The tables keep it.
    back = estimate_from_frame(estimate_to_frame(with_census))
    assert [row.activations for row in back.layers] == [row.activations for row in with_census.layers]


def test_a_census_of_another_kind_or_dtype_is_refused(tmp_path) -> None:
    other = dict(_kind(), mlp={**_kind()["mlp"], "intermediate_size": 512})
    run = load_run_config(_run(tmp_path, _census(other)))
    with pytest.raises(InputError) as err:
        MemoryModel(run).option_activation_bytes(_body(run))
    assert err.value.source == "census/small.json" and err.value.field == "kinds"
    assert "'dense'" in err.value.problem
    run = load_run_config(_run(tmp_path, _census(_kind(), dtype="fp16")))
    with pytest.raises(InputError, match="measured in fp16; the run trains in bf16"):
        MemoryModel(run)


def test_a_bad_census_file_names_the_file(tmp_path) -> None:
    path = _run(tmp_path, _census(_kind()))
    (tmp_path / "census" / "small.json").write_text(json.dumps({"format": "ppb-census", "version": 7}))
    with pytest.raises(InputError) as err:
        MemoryModel(load_run_config(path))
    assert err.value.source.endswith("census/small.json") and err.value.field == "version"


def test_the_comparison_puts_formulas_and_census_side_by_side(tmp_path) -> None:

    (tmp_path / "formulas").mkdir()
    run_path = _run(tmp_path / "formulas", None)
    census_path = tmp_path / "small-census.json"
    census_path.write_text(_census(_kind()).to_json())
    (row,) = compare(run_path, census_path)
    run = load_run_config(run_path)
    assert row.formulas == MemoryModel(run).option_activation_bytes(_body(run))
    # The census side is the hand census priced as above (NONE 7540, FULL 256 bytes a token).
    assert row.census["NONE"] == 1024 * 7540 and row.census["FULL"] == 1024 * 256
    assert row.census_working == 1024 * 13692 + 1024 * 256 * 2  # and the gathered input (above)
    assert "census.input_layernorm:_to_copy [normOp]" in report([row])


def test_the_comparison_of_a_run_config_with_a_census_still_shows_the_formulas(tmp_path) -> None:
    """A run config that names a census for the model (as docs/census.md shows) gave the census on
    both sides, census/formulas 1.00: the formulas' side is the run without it."""
    census_path = tmp_path / "small-census.json"
    census_path.write_text(_census(_kind()).to_json())
    (row,) = compare(_run(tmp_path, _census(_kind())), census_path)
    (tmp_path / "formulas").mkdir()
    formulas_only = load_run_config(_run(tmp_path / "formulas", None))
    assert row.formulas == MemoryModel(formulas_only).option_activation_bytes(_body(formulas_only))
    assert row.formulas != row.census
