"""A calibration row for the TAIL (`output_mtp`) applies to every part of a split TAIL: Megatron's
standalone MTP (final_norm, mtp, output_heads) and the final norm apart from `mL` (final_norm,
output_mtp). The row measures the whole TAIL on one device; each part takes its factors, so the
parts, which partition the TAIL's ops, add up to the measurement."""

from __future__ import annotations

import copy

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import TAIL, walk
from ppb_core.timing.calibration import parse_calibration
from ppb_core.timing.pricer import TimeModel
from tests.small_models import SMALL_GQA

# SMALL_GQA with one MTP layer, four layers on pp 2 with two virtual stages (stage v·2 + p on rank p)
SPEC = {**SMALL_GQA, "mtp_layers": 1}
# measured on one device, one micro-batch: the whole TAIL 30 ms forward, 70 ms backward; a decoder
# layer too, so that the global factors (kinds not measured) differ from the TAIL's
CSV = [
    "model_name,node,kind,option,forward_ms,backward_ms",
    "llm,TAIL,output_mtp,NONE,30,70",
    "llm,BODY,dense,NONE,1,9",
]


def _run(layout: str):
    return parse_run_config(
        {
            "name": "x",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": copy.deepcopy(SPEC)}],
            "parallel": {"pp": 2, "layout": layout},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "micro_batches": 4},
            "device": {"name": "h100-80gb"},
        }
    )


@pytest.mark.parametrize(
    ("layout", "parts"),
    [
        ("Et|t|ttm|L", ["final_norm", "mtp", "output"]),  # standalone MTP
        ("Et|t|tt|mL", ["final_norm", "mtp_output"]),  # the final norm with the last decoder layer
        ("Et|t|t|tmL", ["whole"]),  # one TAIL
    ],
)
def test_the_tail_row_calibrates_every_part(layout, parts):
    """The parts' calibrated forwards add up to the measured 30 ms and their backwards to 70 ms."""
    run = _run(layout)
    times = TimeModel(run, parse_calibration(CSV))
    tails = [layer for layer in walk(run) if layer.node == TAIL]
    assert [layer.kind.part for layer in tails] == parts
    pairs = [times.layer_times(layer, LayerType.OUTPUT_LAYER) for layer in tails]
    assert sum(f for f, _ in pairs) == pytest.approx(30.0, rel=1e-9)
    assert sum(b for _, b in pairs) == pytest.approx(70.0, rel=1e-9)


def test_a_row_naming_a_part_is_refused_in_one_line():
    run = _run("Et|t|ttm|L")
    with pytest.raises(InputError) as caught:
        TimeModel(
            run, parse_calibration(["model_name,node,kind,option,forward_ms,backward_ms", "llm,TAIL,mtp,NONE,3,7"])
        )
    err = caught.value
    assert err.field == "line 2: kind"
    assert "no TAIL kind 'mtp' (kinds: output_mtp)" in err.problem and "its parts take its factors" in err.problem
