"""TransformerEngine's fused grouped MLP under Megatron's op fuser: what its kernels move and launch.

Megatron-Core's `TEGroupedMLP` under `use_transformer_engine_op_fuser` (NVIDIA/Megatron-LM d98e8a64,
megatron/core/transformer/moe/experts.py `_make_fused_ops`, `_fused_forward`) hands fc1, the scaled GLU and fc2 to
TE's op fuser as one `te.pytorch.ops.Sequential`; under MXFP8 TE replaces the three by its joint fused op
(NVIDIA/TransformerEngine 2e559f062, v2.17.0, transformer_engine/pytorch/ops/fused/grouped_mlp.py
`fuse_grouped_mlp_ops`, `_GroupedMLP_CuTeGEMMBase.fuser_forward` / `fuser_backward`), cuDNN frontend's CuTe DSL
kernels, each one persistent kernel over every local expert (`use_dynamic_sched`):

- forward: the input group-quantized once (row- and column-wise MXFP8, as TE's GroupedLinear does); fc1's
  `grouped_gemm_glu_wrapper_sm100` writes the 16-bit pre-activation it saves for the backward (`c_tensor`, the
  GEMM's own output) and, in its epilogue, the GLU times the routing probability quantized row- and column-wise
  (`d_tensor`, `d_col_tensor`): no activation kernel, no quantization of fc2's input; fc2's
  `grouped_gemm_quant_wrapper_sm100` reads that copy and writes the 16-bit output;
- backward: fc2's output gradient group-quantized; `grouped_gemm_dglu_wrapper_sm100` runs fc2's input-gradient
  GEMM with the GLU's backward and the probabilities' gradient in its epilogue, reading the saved pre-activation
  and writing fc1's output gradient already quantized both ways (`d_row_tensor`, `d_col_tensor`): no activation
  backward, no quantization of fc1's output gradient, no 16-bit fc2 input gradient; fc1's input gradient and the two
  weight gradients (`grouped_gemm_wgrad_wrapper_sm100`) one kernel each.

Weights are swizzled per call (`tex.grouped_swizzle_for_gemm` on a shallow `copy()`: their scales only, not
counted). GPT-OSS's clamp (`ScaledClampedQGeGLU`) and the experts' biases are in the kernels' epilogues too; fc2's
probability-scaled bias gradient is `compute_grouped_dbias_dscales` over the 16-bit output gradient, with a
`torch.stack` of the biases before it.
"""

from __future__ import annotations

# Kernel launches each op issues (forward, backward), counted in grouped_mlp.py at 2e559f062.
# fc1 forward: `tex.splits_to_offsets_multi`, the input's group quantization, fc1's weight swizzle, the
# probabilities' cast (`scales.detach().to(dtype)`), the GLU kernel. fc1 backward: its weight swizzle, the
# `torch.ones` probabilities of its input-gradient call, the input-gradient kernel, the weight-gradient kernel.
FC1_LAUNCHES = (5.0, 4.0)
# fc2 forward: its weight swizzle, the probabilities it scales by (`torch.ones`, or the bias scales' fp32 cast),
# the quant kernel. fc2 backward: the output gradient's group quantization, `torch.zeros_like` of the
# probabilities' gradient, its weight swizzle, the dGLU kernel, the probabilities' gradient cast
# (`grad_scales.to(dtype)`), the weight-gradient kernel.
FC2_LAUNCHES = (3.0, 6.0)
# fc2's scaled bias: forward in fc2's epilogue; backward `torch.stack` of the biases and
# `compute_grouped_dbias_dscales`
BIAS_LAUNCHES = (0.0, 2.0)
# MXFP8 writes an element once row-wise and once column-wise, a byte each (scales, 1/32 of a byte, not counted)
MXFP8_COPIES_BYTES = 2.0


def glu_epilogue_bytes(rows: float, width: float, probs_bytes: float) -> float:
    """HBM bytes fc1's GLU epilogue adds to its GEMM, forward: the GLU output quantized both ways (*rows* ×
    *width*, two bytes an element) and the routing probabilities read (one of *probs_bytes* a row)."""
    return rows * width * MXFP8_COPIES_BYTES + rows * probs_bytes


def dglu_epilogue_bytes(rows: float, width: float, probs_bytes: float, dtype_bytes: float) -> float:
    """HBM bytes the dGLU epilogue adds to fc2's input-gradient GEMM: the saved 16-bit pre-activation read
    (2·*width* a row), fc1's output gradient written quantized both ways (2·*width* elements, two bytes each),
    the probabilities read and their gradient written; less the 16-bit fc2 input gradient it never writes
    (*width* elements a row, which the GEMM's own traffic counts)."""
    pre_activation = rows * 2 * width * dtype_bytes
    quantized = rows * 2 * width * MXFP8_COPIES_BYTES
    return pre_activation + quantized + 2 * rows * probs_bytes - rows * width * dtype_bytes


def bias_gradient_bytes(rows: float, hidden: float, dtype_bytes: float, probs_bytes: float) -> float:
    """HBM bytes of `compute_grouped_dbias_dscales`: fc2's 16-bit output gradient and the probabilities read,
    their gradient written (the biases' gradient, an expert's row each, not counted)."""
    return rows * hidden * dtype_bytes + 2 * rows * probs_bytes
