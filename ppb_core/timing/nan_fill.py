"""What PyTorch's deterministic mode writes before each op TransformerEngine runs: a NaN fill of its outputs.

Megatron-LM's `--deterministic-mode` calls `torch.use_deterministic_algorithms(True)`
(megatron/training/determinism.py `apply_determinism_to_args`, NVIDIA/Megatron-LM d98e8a64; arguments.py
before it). With it, and `torch.utils.deterministic.fill_uninitialized_memory` on (its default since
PyTorch 2.1), ATen's `empty_cuda` and `empty_strided_cuda` (pytorch/pytorch
aten/src/ATen/native/cuda/TensorFactories.cu), the kernels behind `at::empty` and `torch.empty`,
fill every new tensor with NaN (`fill_empty_deterministic_`): one more
write of its bytes before the kernel that produces it. Operators' own outputs (structured kernels,
`at::detail::empty_cuda`) skip it; TransformerEngine's extensions allocate theirs through `at::empty`
(NVIDIA/TransformerEngine d0067d0d, transformer_engine/pytorch/csrc: quantizer.cpp `create_tensor`,
the unquantized GEMM output; extensions/gemm.cpp; extensions/normalization.cpp, `dx`;
extensions/attention.cpp, `dQ`, `dK`, `dV`; extensions/apply_rope.cpp). Counted here, per op of
ppb's table under Megatron with TransformerEngine:

- a linear layer's GEMM (an op with weights; not the router's, which Megatron runs in PyTorch, nor
  the logits', Megatron's own ColumnParallelLinear): its output forward; its input gradient and,
  without gradient-accumulation fusion, its 16-bit weight gradient backward (fused, the GEMM
  accumulates into the existing fp32 main gradient: nothing new);
- a norm (TE's LayerNorm/RMSNorm, in LayerNormLinear or TENorm): its output forward, its input
  gradient backward (a norm op's bytes are x and y forward, x, dy and dx backward: `flops._norm`);
- flash attention (dense MHA/GQA; TE's cuDNN kernel on Hopper, flash-attn 2 below it, whose
  csrc/flash_attn/flash_api.cpp allocates `out`, `softmax_lse`, `dq`, `dk`, `dv` with
  `torch::empty` / `torch::empty_like` alike): the output O and the fp32 softmax statistics
  forward, dQ, dK and dV backward, the sizes of the QKV projection's output and the output
  projection's input;
- rotary embedding (Megatron's default rope fusion, TE's fused kernel): Q and K, forward and backward;
- with *dp_workspace* (cuDNN's deterministic backward on Hopper and sm100, `kernels.dp_workspace_bytes`): the
  backward's workspace, b·h·s_q·s_kv·2 bytes that TE's `fused_attn_bwd` allocates with `at::empty`
  (a uint8 tensor, filled with 0xFF), on the score op, whose backward carries dQ.

- TransformerEngine's unfused attention (the TE spec's, `flops.te_attention_mask`): its score buffer,
  b·h·s_q·s_k in the compute dtype, forward (Megatron's own core reuses a global buffer).
Not counted: Megatron's TorchScript-fused bias-GeLU and bias-dropout-add (which allocator their
fuser's outputs go through is not established), MLA's
attention (its Q, K, V come from other ops), SP's gather buffers, and whatever PyTorch's own ops
allocate through `torch.empty`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ppb_core.timing.flops import Op
from ppb_core.timing.kernels import dp_workspace_bytes

FP32 = 4


def deterministic_fill_bytes(
    ops: Sequence[Op], dtype_bytes: int, wgrad_fused: bool, dp_workspace: bool = False
) -> dict[str, tuple[float, float]]:
    """{op name: (forward, backward) bytes the NaN fill writes} for a layer's ops (module docstring)."""
    by_name = {op.name: op for op in ops}
    fills: dict[str, tuple[float, float]] = {}
    for op in ops:
        last = op.name.rsplit(".", 1)[-1]
        if op.gemm is not None and op.weight_elements and "router" not in last and last != "logits":
            m, k, n, groups, fused = op.gemm
            dgrad = m * k * groups * dtype_bytes * n / fused
            wgrad = 0.0 if wgrad_fused else k * n * groups * dtype_bytes
            fills[op.name] = (m * n * groups * dtype_bytes, dgrad + wgrad)
        elif last == "flash_scores" and dp_workspace and op.attention is not None:
            sequences, queries, mean_keys, _, causal = op.attention
            fills[op.name] = (0.0, dp_workspace_bytes(sequences, queries, mean_keys, causal))
        elif last == "scores" and op.name[: len(op.name) - len(last)] + "attention_mask" in by_name:
            # TransformerEngine's unfused core allocates the scores with `torch.empty` (backends.py
            # `UnfusedDotProductAttention._forward`, `matmul_result`): its bytes of the op's forward traffic
            m, _, n, groups, _ = op.gemm  # type: ignore[misc]
            fills[op.name] = (m * n * groups * dtype_bytes, 0.0)
        elif op.category == "memory" and "norm" in last:
            fills[op.name] = (op.bytes / 2, op.backward_bytes / 3)
        elif last in ("flash_context", "rope"):
            prefix = op.name[: len(op.name) - len(last)]
            qk, v, out = (by_name.get(prefix + name) for name in ("qk_proj", "v_proj", "out_proj"))
            if qk is None or v is None or out is None or None in (qk.gemm, v.gemm, out.gemm):
                continue
            q_k = _output_bytes(qk, dtype_bytes)
            if last == "rope":
                fills[op.name] = (q_k, q_k)
            elif op.attention is not None:
                m, k, _, groups, _ = out.gemm  # type: ignore[misc]
                pairs, queries = op.attention[0], op.attention[1]
                fills[op.name] = (
                    m * k * groups * dtype_bytes + pairs * queries * FP32,
                    q_k + _output_bytes(v, dtype_bytes),
                )
    return fills


def _output_bytes(op: Op, dtype_bytes: int) -> float:
    """A GEMM op's own output: m × n × groups."""
    m, _, n, groups, _ = op.gemm  # type: ignore[misc]
    return m * n * groups * dtype_bytes
