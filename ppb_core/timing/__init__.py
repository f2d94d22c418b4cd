"""The time model: forward and backward milliseconds of every layer under every recompute option (docs/timing.md).

`TimeModel(run)` implements `ppb_core.payload.sources.TimeSource`; `flops` holds the per-op tables;
`kernels` what a GEMM, a flash-attention pass or a memory-bound op takes on a device; `comm` the
collectives; `model_flops` the FLOPs of an iteration (Megatron-LM's model FLOPs, hardware FLOPs with
recompute); `calibration` the measured-times CSV; `iteration` the whole iteration in seconds,
tokens per second, MFU and HFU (`run_iteration`).
"""

from ppb_core.timing.calibration import COLUMNS as CALIBRATION_COLUMNS
from ppb_core.timing.calibration import Calibration, KindFactors, Measurement, parse_calibration, read_calibration
from ppb_core.timing.flops import Op, OpGeometry, layer_flops, layer_ops, recompute_set
from ppb_core.timing.iteration import Iteration, run_iteration
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.model_flops import (
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    model_flops_utilization,
    recompute_flops_per_iteration,
)
from ppb_core.timing.pricer import LayerParts, OpPrice, OpTime, TimeModel

__all__ = [
    "CALIBRATION_COLUMNS",
    "Calibration",
    "Iteration",
    "Kernels",
    "KindFactors",
    "LayerParts",
    "Measurement",
    "Op",
    "OpGeometry",
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
    "recompute_flops_per_iteration",
    "recompute_set",
    "run_iteration",
]
