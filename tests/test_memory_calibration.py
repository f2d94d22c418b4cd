"""Memory calibration: measured per-stage peaks read, fitted to per-term factors, applied, and the residual shown."""

from __future__ import annotations

import json

import pytest
import yaml
from test_memory_runs import DENSE

from ppb_core.config.run import load_run_config
from ppb_core.errors import InputError
from ppb_core.estimate.run import estimate
from ppb_core.memory import MemoryModel, run_stage_peaks
from ppb_core.memory.calibration import MemoryCorrection, fit_peaks, parse_measured_peaks
from ppb_core.memory.model import run_memory_fit

MB = 2**20


def test_the_fit_by_hand():
    # Two stages, one term each: static 10 and 12 measured; activations 20 and 30 measured.
    # λ = 0.1 pulls toward 1 with weight (λ·‖term‖)²: 1 for static, 4 for activations.
    # static: min (10 f − 12)² + (f − 1)² → f = (10·12 + 1)/(10² + 1) = 121/101
    # activations: min (20 f − 30)² + 4 (f − 1)² → f = (20·30 + 4)/(20² + 4) = 604/404
    terms = [
        {"static": 10.0, "activations": 0.0, "buffers": 0.0, "working": 0.0},
        {"static": 0.0, "activations": 20.0, "buffers": 0.0, "working": 0.0},
    ]
    measured = parse_measured_peaks("stage,peak_bytes\n0,12\n1,30\n", "m.csv", 2)
    fit = fit_peaks(terms, measured)
    assert fit.correction.static == pytest.approx(121 / 101)
    assert fit.correction.activations == pytest.approx(604 / 404)
    # buffers and working are 0 on every stage: nothing to fit, they stay as modelled
    assert (fit.correction.buffers, fit.correction.working) == (1.0, 1.0)
    assert fit.residual_bytes == pytest.approx((10 * 121 / 101 - 12, 20 * 604 / 404 - 30))


def _run(tmp_path, measured_text: str | None, suffix: str = "csv"):
    raw = {
        "models": [{"name": "m", "spec": DENSE}],
        "parallel": {"pp": 2},
        "training": {"seq_length": 64, "micro_batches": 4},
        "device": {"name": "h100-80gb", "reserved_mb": 100},
    }
    if measured_text is not None:
        (tmp_path / f"peaks.{suffix}").write_text(measured_text)
        raw["memory"] = {"calibration": f"peaks.{suffix}"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    return load_run_config(tmp_path / "run.yaml")


def test_peaks_measured_as_modelled_leave_the_model_as_it_is(tmp_path):
    # measured = the model's peaks less the reserved memory (an allocator does not count it): every
    # factor stays 1 (the fit's both terms are 0 there) and the residual is 0
    plain = run_stage_peaks(_run(tmp_path, None))
    rows = "\n".join(f"{p.stage},{p.peak_bytes - p.reserved_bytes}" for p in plain)
    run = _run(tmp_path, f"stage,peak_bytes\n{rows}\n")
    memory = MemoryModel(run)
    assert memory.fit is not None
    # (to 1e-9: a term of a few KiB beside ~100 MB ones, Megatron's chunk rotary cache, conditions the
    # least squares less well than exact zeros did)
    assert tuple(memory.fit.correction.as_dict().values()) == pytest.approx((1, 1, 1, 1), rel=1e-9)
    assert memory.fit.residual_bytes == pytest.approx((0.0, 0.0), abs=1e-3)
    assert [p.peak_bytes for p in run_stage_peaks(run, memory)] == pytest.approx([p.peak_bytes for p in plain])
    assert MemoryModel(_run(tmp_path, None)).correction == MemoryCorrection()


def test_a_measurement_tightens_the_model_and_the_estimate_shows_the_residual(tmp_path):
    plain = run_stage_peaks(_run(tmp_path, None))
    # the run held 30% more activations than modelled on both stages
    measured = [p.static_bytes + 1.3 * p.activation_bytes + p.buffer_bytes + p.working_bytes for p in plain]
    text = json.dumps({"stages": [{"stage": s, "peak_mb": m / MB} for s, m in enumerate(measured)]})
    run = _run(tmp_path, text, "json")
    fit = run_memory_fit(run)
    before = [abs(p.peak_bytes - p.reserved_bytes - m) for p, m in zip(plain, measured, strict=True)]
    after = [abs(r) for r in fit.residual_bytes]
    assert all(a < b / 5 for a, b in zip(after, before, strict=True))
    # two stages cannot tell the terms apart: the excess is shared among them, each factor above 1
    assert min(fit.correction.static, fit.correction.activations, fit.correction.working) > 1
    data = estimate(run).to_json()
    shown = data["run"]["memory_calibration"]
    assert shown["file"] == "peaks.json" and [s["stage"] for s in shown["stages"]] == [0, 1]
    assert shown["stages"][0]["residual_bytes"] == pytest.approx(fit.residual_bytes[0])
    # the estimate's stages are the calibrated ones
    calibrated = run_stage_peaks(run)
    assert [s["peak_bytes"] for s in data["stages"]] == pytest.approx([p.peak_bytes for p in calibrated])


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("stage,peak_mb\n0,10\n0,11\n", "line 3: stage", "measured twice"),
        ("stage,peak_mb\n5,10\n", "line 2: stage", "not a stage of this run"),
        ("stage,peak_mb\n0,-3\n", "line 2: peak_mb", "positive"),
        ("stage,peak_mb,peak_bytes\n0,1,2\n", "line 2", "exactly one of"),
        ("stage,memory\n0,1\n", "header", "unknown column 'memory'"),
        ("stage,peak_mb\n", None, "no measured stage"),
        ('{"stages": 3}', "stages", "expected a list"),
        ('[{"stage": "x", "peak_gib": 1}]', "stages.0: stage", "not a stage number"),
    ],
)
def test_bad_measurements_name_the_field(text, field, words):
    with pytest.raises(InputError) as caught:
        parse_measured_peaks(text, "peaks", 2)
    assert caught.value.field == field and words in caught.value.problem, caught.value.line()


def test_the_run_config_names_a_file_that_exists(tmp_path):
    (tmp_path / "run.yaml").write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "m", "spec": DENSE}],
                "training": {"seq_length": 64},
                "device": {"name": "h100-80gb"},
                "memory": {"calibration": "nowhere.csv"},
            }
        )
    )
    with pytest.raises(InputError) as caught:
        load_run_config(tmp_path / "run.yaml")
    assert caught.value.field == "memory.calibration" and "not found" in caught.value.problem
