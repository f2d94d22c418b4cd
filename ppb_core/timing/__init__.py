"""The time model: forward and backward milliseconds of every layer under every recompute option (docs/timing.md).

`TimeModel(run)` implements `ppb_core.payload.sources.TimeSource`; `flops` holds the per-op tables and the
FLOP counts (model FLOPs per iteration, hardware FLOPs with recompute); `comm` the collectives;
`calibration` the measured-times CSV.
"""

from ppb_core.model.geometry import Geometry
from ppb_core.timing.calibration import COLUMNS as CALIBRATION_COLUMNS
from ppb_core.timing.calibration import Calibration, KindFactors, Measurement, parse_calibration, read_calibration
from ppb_core.timing.flops import (
    Op,
    hardware_flops_per_iteration,
    layer_flops,
    layer_ops,
    model_flops_per_iteration,
    model_flops_utilization,
    recompute_set,
)
from ppb_core.timing.pricer import LayerParts, OpPrice, OpTime, TimeModel

__all__ = [
    "CALIBRATION_COLUMNS",
    "Calibration",
    "Geometry",
    "KindFactors",
    "LayerParts",
    "Measurement",
    "Op",
    "OpPrice",
    "OpTime",
    "TimeModel",
    "hardware_flops_per_iteration",
    "layer_flops",
    "layer_ops",
    "model_flops_per_iteration",
    "model_flops_utilization",
    "parse_calibration",
    "read_calibration",
    "recompute_set",
]
