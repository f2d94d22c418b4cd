"""The time model: forward and backward milliseconds of every layer under every recompute option (docs/timing.md).

`TimeModel(run)` implements `ppb_core.payload.sources.TimeSource`; `flops` holds the per-op tables;
`kernels` what a GEMM, a flash-attention pass or a memory-bound op takes on a device; `comm` the
collectives; `model_flops` the FLOPs of an iteration (Megatron-LM's model FLOPs, hardware FLOPs with
recompute); `calibration` the measured-times CSV; `iteration` the whole iteration in seconds,
tokens per second, MFU and HFU (`run_iteration`); `combined` what a step of Megatron-Core's combined
1F1B saves.
"""
