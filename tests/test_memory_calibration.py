"""Memory calibration: measured per-stage peaks read, fitted to per-term factors, applied, and the residual shown."""

from __future__ import annotations

import json

import pytest
import yaml
from test_memory_runs import DENSE

from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config
from ppb_core.errors import InputError
from ppb_core.estimate.run import estimate
from ppb_core.memory import MemoryModel, run_stage_peaks
from ppb_core.memory.calibration import MemoryCorrection, fit_peaks, parse_measured_peaks
from ppb_core.memory.model import run_memory_fit

MB = 2**20


def test_the_fit_by_hand():
    # Two stages, one term each: static 10 and 12 measured; activations 20 and 30 measured.
    # The pull toward 1 is λ·‖peak‖ for every term: ‖(10, 20)‖² = 500, (0.1)²·500 = 5.
    # static: min (10 f − 12)² + 5 (f − 1)² → f = (10·12 + 5)/(10² + 5) = 125/105
    # activations: min (20 f − 30)² + 5 (f − 1)² → f = (20·30 + 5)/(20² + 5) = 605/405
    terms = [
        {"static": 10.0, "activations": 0.0, "buffers": 0.0, "working": 0.0},
        {"static": 0.0, "activations": 20.0, "buffers": 0.0, "working": 0.0},
    ]
    measured = parse_measured_peaks("stage,peak_bytes\n0,12\n1,30\n", "m.csv", 2)
    fit = fit_peaks(terms, measured)
    assert fit.correction.static == pytest.approx(125 / 105)
    assert fit.correction.activations == pytest.approx(605 / 405)
    # buffers and working are 0 on every stage: nothing to fit, they stay as modelled
    assert (fit.correction.buffers, fit.correction.working) == (1.0, 1.0)
    assert fit.residual_bytes == pytest.approx((10 * 125 / 105 - 12, 20 * 605 / 405 - 30))
    assert fit.warnings == ()


def test_a_tiny_term_cannot_absorb_the_residual():
    # The audit's case: a 0.1-byte buffers term beside a 100-byte peak, and a 10% gap. Unguarded, the
    # old fit scaled such a term by hundreds. Its share 0.1/100.1 < 5%: kept at 1, with a warning;
    # its bytes move to the target: 110.1 − 0.1 = 110 for static (90) and working (10).
    # p² = (0.1·100.1)² = 100.2001; normal equations
    #   (90² + p²) s + 90·10 w = 90·110 + p²
    #   90·10 s + (10² + p²) w = 10·110 + p²
    # Cramer: det = (8100 + p²)(100 + p²) − 900²
    terms = [{"static": 90.0, "activations": 0.0, "buffers": 0.1, "working": 10.0}]
    fit = fit_peaks(terms, parse_measured_peaks("stage,peak_bytes\n0,110.1\n", "m.csv", 1))
    p2 = (0.1 * 100.1) ** 2
    det = (8100 + p2) * (100 + p2) - 900**2
    s = ((9900 + p2) * (100 + p2) - 900 * (1100 + p2)) / det
    w = ((8100 + p2) * (1100 + p2) - 900 * (9900 + p2)) / det
    assert fit.correction.buffers == 1.0
    assert (fit.correction.static, fit.correction.working) == pytest.approx((s, w))
    assert fit.correction.activations == 1.0  # 0 everywhere: nothing to fit, no warning
    assert fit.warnings[0] == "buffers: 0.1% of the modelled peak, too small to identify; kept at ×1"
    # one stage cannot separate static from working: said so
    assert fit.warnings[1].startswith("1 measured stage separates 1 of the 2 fitted terms (static, working)")
    assert len(fit.warnings) == 2


def test_factors_are_bounded_and_a_bound_is_named():
    # static 50 + activations 50, measured 400: p² = (0.1·100)² = 100. Free, by symmetry f = g:
    # 50 (100 f − 400) + 100 (f − 1) = 0 → f = 20100/5100 ≈ 3.94 > 2, out of bounds. One at 2, the other
    # free: 50 (50 g + 100 − 400) + 100 (g − 1) = 0 → g = 15100/2600 ≈ 5.8 > 2, out. So both at 2:
    # calibrated 200, residual −200.
    terms = [{"static": 50.0, "activations": 50.0, "buffers": 0.0, "working": 0.0}]
    fit = fit_peaks(terms, parse_measured_peaks("stage,peak_bytes\n0,400\n", "m.csv", 1))
    assert (fit.correction.static, fit.correction.activations) == (2.0, 2.0)
    assert fit.residual_bytes == pytest.approx((-200.0,))
    assert [w for w in fit.warnings if "at a bound" in w] == [
        "static: ×2 is at a bound of [0.5, 2]; this term's model is off, not its scale",
        "activations: ×2 is at a bound of [0.5, 2]; this term's model is off, not its scale",
    ]


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


def test_a_measurement_tightens_the_model_and_the_estimate_shows_the_residual(tmp_path, capsys):
    plain = run_stage_peaks(_run(tmp_path, None))
    # the run held 4% more static memory and 30% more activations than modelled on both stages; this
    # toy model's activations are ~0.5% of its peak, so only static is fitted (activations, buffers and
    # working are kept at 1 with a warning each), its target the measured peak less the terms kept:
    # f = (Σ S·(1.04 S + 0.3 A) + p²)/(Σ S² + p²), p² = (0.1·‖peak‖)² (the module's pulled least squares)
    # (the working term at each stage's moment: the last stage's is the loss's, `StagePeak.terms`)
    measured = [1.04 * p.static_bytes + 1.3 * p.activation_bytes + p.buffer_bytes + p.terms()["working"] for p in plain]
    text = json.dumps({"stages": [{"stage": s, "peak_mb": m / MB} for s, m in enumerate(measured)]})
    run = _run(tmp_path, text, "json")
    fit = run_memory_fit(run)
    before = [abs(p.peak_bytes - p.reserved_bytes - m) for p, m in zip(plain, measured, strict=True)]
    after = [abs(r) for r in fit.residual_bytes]
    assert all(a < b / 5 for a, b in zip(after, before, strict=True))
    p2 = 0.01 * sum((p.peak_bytes - p.reserved_bytes) ** 2 for p in plain)
    num = sum(p.static_bytes * (1.04 * p.static_bytes + 0.3 * p.activation_bytes) for p in plain) + p2
    assert fit.correction.static == pytest.approx(num / (sum(p.static_bytes**2 for p in plain) + p2))
    assert (fit.correction.activations, fit.correction.working, fit.correction.buffers) == (1.0, 1.0, 1.0)
    # (buffers: Megatron's per-chunk rotary cache, a few KiB, also under 5%)
    assert [w.split(":")[0] for w in fit.warnings] == ["activations", "buffers", "working"]
    assert main(["estimate", str(tmp_path / "run.yaml")]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "memory calibration warning: activations:" in printed and "too small to identify" in printed
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
