"""MindFormers' optimizer step as its code runs it on Ascend (`framework: mindformers`).

A MindFormers yaml names its optimizer (`optimizer.type`, the run config's `timing.optimizer_type`):

- `FP32StateAdamWeightDecay` (mindformers/core/optim/optim.py, v1.4.0-beta2 a4dfb8219) sets `use_fused_opt`
  and runs MindSpore's `P.AdamWeightDecay`, one fused kernel a parameter: the traffic ppb prices for every
  framework's fused Adam (`iteration.optimizer_traffic`).
- `AdamW` (mindformers/core/optim/adamw.py `_update_run_op`, the same code at 2388c729a, the commit whose
  model-card READMEs publish the throughputs, and at a4dfb8219) is a composite of MindSpore primitives,
  applied parameter by parameter through `hyper_map`. Graph mode compiles each primitive to its own kernel
  unless graph-kernel fusion is on, and on Ascend that is only when the context's `enable_graph_kernel` is
  set (mindspore-ai/mindspore backend/common/graph_kernel/graph_kernel_flags.cc
  `GraphKernelFlags::GetGraphKernelConfig`: `jit_level` O2 turns it on only for GPU). Every model-card
  yaml at 2388c729a sets `enable_graph_kernel: False`. So each primitive reads its inputs from HBM and
  writes its output there (`ADAMW_PASSES`). A cast to the dtype a tensor already has is removed by
  MindSpore's cast elimination and costs nothing. `F.assign` copies the value into the state or parameter
  (a read and a write). The scalar bias corrections (`op_pow`, `1 - ...`, `lr / ...`) move no tensor bytes.
"""

from __future__ import annotations

FP32_BYTES = 4

# (primitive in `_update_run_op`, full fp32 tensors read, fp32 tensors written), the casts and the
# parameter's own assign apart (`adamw_step_bytes`)
ADAMW_PASSES: tuple[tuple[str, int, int], ...] = (
    ("op_mul(param_fp32, 1 - lr * weight_decay)", 1, 1),
    ("op_mul(exp_avg, beta1)", 1, 1),
    ("op_mul(gradient_fp32, 1 - beta1)", 1, 1),
    ("+ (the new exp_avg)", 2, 1),
    ("F.assign(exp_avg, ...)", 1, 1),
    ("op_mul(exp_avg_sq, beta2)", 1, 1),
    ("addcmul(..., gradient_fp32, gradient_fp32, 1 - beta2)", 3, 1),
    ("F.assign(exp_avg_sq, ...)", 1, 1),
    ("exp_avg_sq / bias_correction2", 1, 1),
    ("op_sqrt", 1, 1),
    ("+ eps", 1, 1),
    ("exp_avg / denom", 2, 1),
    ("op_mul(..., step_size)", 1, 1),
    ("next_param - ...", 2, 1),
)


def adamw_step_bytes(param_bytes: int, grad_bytes: int) -> int:
    """HBM bytes a parameter element costs in MindFormers' composite `AdamW` step (module docstring):
    the fp32 passes of `ADAMW_PASSES`, the casts of the parameter and gradient to fp32 and of the result
    back where their dtype is not fp32 (read it, write the other), and `F.assign(parameters, ...)`
    (read and write the parameter's dtype). At fp32 parameters and gradients: 140 bytes, against the
    fused kernel's 28 (read parameter, gradient and two moments, write three)."""
    fp32 = sum((reads + writes) * FP32_BYTES for _, reads, writes in ADAMW_PASSES)
    casts = 0
    for dtype_bytes in (param_bytes, grad_bytes):  # op_cast(parameters, fp32), op_cast(grads, fp32)
        casts += 0 if dtype_bytes == FP32_BYTES else dtype_bytes + FP32_BYTES
    if param_bytes != FP32_BYTES:  # op_cast(return_param, F.dtype(parameters)), once (the return reuses it)
        casts += FP32_BYTES + param_bytes
    return fp32 + casts + 2 * param_bytes
