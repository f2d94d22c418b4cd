"""Calibration from measured layer times: the CSV format, its errors, and exact reproduction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ppb_core.cli.calibrations import time_line
from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config, parse_run_config, resolved_raw
from ppb_core.errors import InputError
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.calibration import parse_calibration
from ppb_core.timing.pricer import TimeModel

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
HEADER = "model_name,node,kind,option,forward_ms,backward_ms"


@pytest.fixture(scope="module")
def llama():
    return load_run_config(CONFIGS / "llama3-8b.yaml")


@pytest.fixture(scope="module")
def deepseek():
    return load_run_config(CONFIGS / "deepseek-v3.yaml")


def layer_of(run, node, kind=None):
    return next(layer for layer in walk(run) if layer.node == node and (kind is None or layer.kind.name == kind))


def write(tmp_path, *rows, name="measured.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join((HEADER, *rows)) + "\n", encoding="utf-8")
    return path


MEASURED = (
    "llm,HEAD,embedding,NONE,0.3,0.5",
    "llm,BODY,dense,NONE,5.0,9.5",
    "llm,BODY,dense,SLCT,5.1,10.25",
    "llm,BODY,dense,COMM,5.05,9.8",  # gather 0: the re-sent gathers, hidden but for the SMs they take
    "llm,BODY,dense,FULL,5.2,15.0",
    "llm,TAIL,output,NONE,12.0,20.0",
)


def test_the_calibrated_model_reproduces_every_measured_point(tmp_path, llama):
    model = TimeModel(llama, calibration=write(tmp_path, *MEASURED))
    times = {node: model.option_times(layer_of(llama, node)) for node in ("HEAD", "BODY", "TAIL")}
    for row in MEASURED:
        _, node, _, option, forward, backward = row.split(",")
        assert times[node][option] == pytest.approx((float(forward), float(backward)), rel=1e-12), row


def test_unmeasured_options_of_a_measured_kind_scale_term_by_term(tmp_path, llama):
    model = TimeModel(llama, calibration=write(tmp_path, *MEASURED))
    raw = TimeModel(llama)
    layer = layer_of(llama, "BODY")
    parts = raw.parts(layer, LayerType.SEL_REC_LAYER, {"softmax": 0, "ffAct": 0, "gather": 0})  # BOTH's setting
    none = raw.parts(layer, LayerType.NOT_REC_LAYER)
    slct = raw.parts(layer, LayerType.SEL_REC_LAYER)
    full = raw.parts(layer, LayerType.FULL_REC_LAYER)
    comm = raw.parts(layer, LayerType.SEL_REC_LAYER, {"gather": 0})
    backward = 9.5 / none.backward_ms
    # Pooled recompute factor of the kind: measured increments over modelled ones, options with any.
    # COMM has none: Megatron gathers the shard again in every backward, so its increment is an offset.
    assert comm.recompute_ms == 0
    pooled = ((10.25 - 9.5) + (15.0 - 9.5)) / (slct.recompute_ms + full.recompute_ms)
    forward, total = model.option_times(layer)["BOTH"]
    assert forward == pytest.approx(parts.forward_ms * 5.0 / none.forward_ms, rel=1e-12)
    assert total == pytest.approx(parts.backward_ms * backward + parts.recompute_ms * pooled, rel=1e-12)
    # A single switch (as a profile prices it) takes the same pooled factor.
    alone = raw.parts(layer, LayerType.SEL_REC_LAYER, {"normOp": 0})
    assert model.layer_times(layer, LayerType.SEL_REC_LAYER, {"normOp": 0})[1] == pytest.approx(
        alone.backward_ms * backward + alone.recompute_ms * pooled, rel=1e-12
    )


def test_kinds_not_measured_take_the_global_factors(tmp_path, deepseek):
    # Only the MoE layer is measured: the dense MLA layers, head and tail scale by Σ measured / Σ modelled.
    model = TimeModel(
        deepseek, calibration=write(tmp_path, "llm,BODY,moe_mla,NONE,40.0,60.0", "llm,BODY,moe_mla,FULL,41.0,95.0")
    )
    raw = TimeModel(deepseek)
    moe, dense = layer_of(deepseek, "BODY", "moe_mla"), layer_of(deepseek, "BODY", "dense_mla")
    moe_none, moe_full = raw.parts(moe, LayerType.NOT_REC_LAYER), raw.parts(moe, LayerType.FULL_REC_LAYER)
    forward_factor = (40.0 + 41.0) / (moe_none.forward_ms + moe_full.forward_ms)
    backward_factor = 60.0 / moe_none.backward_ms
    recompute_factor = (95.0 - 60.0) / moe_full.recompute_ms
    dense_full = raw.parts(dense, LayerType.FULL_REC_LAYER)
    assert model.layer_times(dense, LayerType.FULL_REC_LAYER) == pytest.approx(
        (
            dense_full.forward_ms * forward_factor,
            dense_full.backward_ms * backward_factor + dense_full.recompute_ms * recompute_factor,
        ),
        rel=1e-12,
    )
    tail = layer_of(deepseek, "TAIL")
    tail_raw = raw.layer_times(tail, LayerType.OUTPUT_LAYER)
    assert model.layer_times(tail, LayerType.OUTPUT_LAYER) == pytest.approx(
        (tail_raw[0] * forward_factor, tail_raw[1] * backward_factor), rel=1e-12
    )


def test_the_run_config_names_its_calibration(tmp_path):
    write(tmp_path, *MEASURED, name="llama.csv")
    raw = yaml.safe_load((CONFIGS / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / "hf" / "llama3-8b.json")
    raw["timing"] = {"calibration": "llama.csv", "overlap": {"tp_async": 0.5}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    run = load_run_config(tmp_path / "run.yaml")
    assert run.timing.overlap.tp_async == 0.5
    model = TimeModel(run)
    assert model.option_times(layer_of(run, "BODY"))["FULL"] == pytest.approx((5.2, 15.0), rel=1e-12)
    # Stored resolved (the run_config asset), the path stands alone.
    assert Path(resolved_raw(run)["timing"]["calibration"]) == (tmp_path / "llama.csv").resolve()
    raw["timing"]["calibration"] = "missing.csv"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match=r"timing\.calibration.*not found"):
        load_run_config(tmp_path / "run.yaml")


@pytest.mark.parametrize(
    "rows,field,problem",
    [
        (("llm,BODY,dense,NONE,1,2,3",), "line 2", "expected 6 values"),
        (("llm,LAYER,dense,NONE,1,2",), "line 2: node", "not one of HEAD, BODY, TAIL"),
        (("llm,BODY,dense,SOME,1,2",), "line 2: option", "not one of NONE"),
        (("llm,TAIL,output,FULL,1,2",), "line 2: option", "never recomputed"),
        (("llm,BODY,dense,NONE,0,2",), "line 2: forward_ms", "positive"),
        (("llm,BODY,dense,NONE,1,x",), "line 2: backward_ms", "not a number"),
        (("llm,BODY,dense,NONE,1,nan",), "line 2: backward_ms", "positive"),
        (("llm,BODY,dense,NONE,1,2", "llm,BODY,dense,NONE,1,3"), "line 3", "repeats line 2"),
        ((), None, "no measurements"),
    ],
)
def test_bad_rows_name_their_line_and_field(rows, field, problem):
    with pytest.raises(InputError) as err:
        parse_calibration([HEADER, *rows], "m.csv")
    assert err.value.source == "m.csv" and err.value.field == field and problem in err.value.problem


@pytest.mark.parametrize(
    "header,problem",
    [
        ("model_name,node,kind,option,forward_ms", "missing column 'backward_ms'"),
        ("model_name,node,kind,option,forward_ms,backward_ms,notes", "column 7, 'notes', is not one of"),
    ],
)
def test_the_header_is_checked(header, problem):
    with pytest.raises(InputError, match=problem):
        parse_calibration([header, "llm,BODY,dense,NONE,1,2"], "m.csv")


def test_columns_come_in_any_order():
    rows = parse_calibration(["backward_ms,forward_ms,option,kind,node,model_name", "2,1,none,dense,body,llm"])
    assert (rows[0].node, rows[0].option, rows[0].forward_ms, rows[0].backward_ms) == ("BODY", "NONE", 1.0, 2.0)


def test_rows_that_match_nothing_in_the_run_are_errors(tmp_path, llama):
    with pytest.raises(InputError, match=r"line 2: model_name.*no model 'vit'"):
        TimeModel(llama, calibration=write(tmp_path, "vit,BODY,dense,NONE,1,2"))
    with pytest.raises(InputError, match=r"line 2: kind.*no BODY kind 'moe' \(kinds: dense\)"):
        TimeModel(llama, calibration=write(tmp_path, "llm,BODY,moe,NONE,1,2"))
    with pytest.raises(InputError, match="file not found"):
        TimeModel(llama, calibration=tmp_path / "absent.csv")


def test_options_running_the_same_switches_must_agree(tmp_path, llama):
    # With gather 0 configured, SLCT and BOTH run the same switches.
    raw = resolved_raw(llama)
    raw["training"]["recompute"] = {**raw["training"]["recompute"], "gather": 0}
    same = parse_run_config(raw)
    rows = ("llm,BODY,dense,NONE,5,9", "llm,BODY,dense,SLCT,5,10", "llm,BODY,dense,BOTH,5,11")
    with pytest.raises(InputError, match=r"line 4.*BOTH runs the same switches as SLCT"):
        TimeModel(same, calibration=write(tmp_path, *rows))
    agreeing = TimeModel(same, calibration=write(tmp_path, *rows[:2], "llm,BODY,dense,BOTH,5,10"))
    assert agreeing.option_times(layer_of(same, "BODY"))["BOTH"] == pytest.approx((5.0, 10.0), rel=1e-12)


def _calibrated_run(tmp_path: Path, *rows: str) -> Path:
    """llama3-8b.yaml with `timing.calibration` naming *rows*."""
    write(tmp_path, *rows, name="llama.csv")
    raw = yaml.safe_load((CONFIGS / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / "hf" / "llama3-8b.json")
    raw["timing"] = {"calibration": "llama.csv"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path / "run.yaml"


def test_estimate_and_balance_say_which_time_calibration_they_applied(tmp_path, capsys):
    """As the memory calibration's "memory calibrated by" line does: the file, its rows, the kinds, the residual."""
    run = _calibrated_run(tmp_path, *MEASURED)
    csv = tmp_path / "llama.csv"
    assert main(["estimate", str(run), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["run"]["time_calibration"]
    assert said["file"] == str(csv) and said["rows"] == 6
    # the run's kinds: the embedding HEAD, the dense BODY, the output TAIL; every one measured
    assert said["measured_kinds"] == [["llm", "BODY", "dense"], ["llm", "HEAD", "embedding"], ["llm", "TAIL", "output"]]
    assert said["global_kinds"] == []
    assert said["max_residual_ms"] < 1e-9  # the fit reproduces every measured point (`fit_calibration`)
    line = (
        f"time calibrated by {csv}: 6 rows over 3 kinds (llm BODY dense, llm HEAD embedding, llm TAIL output); "
        "every kind of the run measured; residual per row at most 0.000 ms (rms 0.00%)"
    )
    assert main(["estimate", str(run)]) == 0
    assert line in capsys.readouterr().out
    assert main(["balance", str(run), "-q"]) == 0
    assert line in capsys.readouterr().out
    assert main(["balance", str(run), "-q", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_calibration"]["rows"] == 6


def test_the_kinds_a_calibration_leaves_out_are_named_with_the_global_factors(tmp_path, deepseek):
    model = TimeModel(
        deepseek, calibration=write(tmp_path, "llm,BODY,moe_mla,NONE,40.0,60.0", "llm,BODY,moe_mla,FULL,41.0,95.0")
    )
    said = model.calibration_json()
    raw = TimeModel(deepseek)
    moe = layer_of(deepseek, "BODY", "moe_mla")
    none, full = raw.parts(moe, LayerType.NOT_REC_LAYER), raw.parts(moe, LayerType.FULL_REC_LAYER)
    # global factors (calibration.py): Σ measured / Σ modelled per term over the rows that have it
    assert said["global_factors"] == pytest.approx(
        {
            "forward": (40.0 + 41.0) / (none.forward_ms + full.forward_ms),
            "backward": 60.0 / none.backward_ms,
            "recompute": (95.0 - 60.0) / full.recompute_ms,
        },
        rel=1e-12,
    )
    assert said["measured_kinds"] == [["llm", "BODY", "moe_mla"]]
    # DeepSeek-V3's other kinds: the first three dense MLA layers, the embedding, the TAIL with its MTP layer
    assert said["global_kinds"] == [
        ["llm", "BODY", "dense_mla"],
        ["llm", "HEAD", "embedding"],
        ["llm", "TAIL", "output_mtp"],
    ]
    assert said["rows"] == 2 and said["max_residual_ms"] < 1e-9
    assert "at the global factors (forward ×" in time_line(said)


def test_a_recompute_measured_faster_than_the_plain_backward_is_refused(tmp_path, llama):
    """A FULL backward of 7.5 ms under the NONE row's 8.0 ms gave the kind a recompute factor of
    (7.5 − 8.0) / modelled recompute < 0, and through the global factor every kind not measured recomputed in
    negative time (`ppb estimate` printed "recompute ×-0.121"). Refused in one line naming the file, both rows."""
    path = write(tmp_path, "llm,BODY,dense,NONE,4.0,8.0", "llm,BODY,dense,FULL,4.1,7.5", name="bad.csv")
    with pytest.raises(InputError) as err:
        TimeModel(llama, calibration=path)
    assert err.value.line() == (
        f"{path}: line 3: backward_ms: 7.5 ms for llm BODY dense FULL is below line 2's NONE backward (8 ms): a "
        "recompute runs the plain backward and more, never less (measure both again, or check each row's option)"
    )
    # equal is a recompute that costs nothing: a factor of 0, accepted, and reproduced
    equal = TimeModel(llama, calibration=write(tmp_path, "llm,BODY,dense,NONE,4.0,8.0", "llm,BODY,dense,FULL,4.1,8.0"))
    assert equal.option_times(layer_of(llama, "BODY"))["FULL"] == pytest.approx((4.1, 8.0), rel=1e-12)
    # without a NONE row the plain backward is the global factor's: the TAIL's 20.0 / modelled; a FULL row under it
    # would recompute in negative time, so the kind's NONE row is asked for
    tail = TimeModel(llama).layer_times(layer_of(llama, "TAIL"), LayerType.OUTPUT_LAYER)[1]
    plain = TimeModel(llama).parts(layer_of(llama, "BODY"), LayerType.NOT_REC_LAYER).backward_ms * 20.0 / tail
    rows = ("llm,TAIL,output,NONE,12.0,20.0", f"llm,BODY,dense,FULL,5.0,{plain * 0.9:.4f}")
    with pytest.raises(InputError, match=r"line 3: backward_ms: .* below the plain backward the global factor"):
        TimeModel(llama, calibration=write(tmp_path, *rows))
