"""Megatron-Core's Muon step (`--optimizer muon`, `training.optimizer: muon`): the Newton-Schulz
orthogonalization of every matrix parameter, kernel by kernel, as Megatron-LM d98e8a64 runs it.

Megatron routes each 2-D parameter that is no embedding or output table to `TensorParallelMuon`
(megatron/core/optimizer/emerging_optimizers.py; `ppb_core.memory.frameworks.muon` for which ones),
an `OrthogonalizedOptimizer` of the emerging-optimizers package (NVIDIA-NeMo/Emerging-Optimizers v0.3.0,
b309e2f0, the version Megatron's uv.lock pins). Its `step` (orthogonalized_optimizer.py) runs, per
matrix, one parameter after another in Python:

- the weight decay in place (mixin.py `_apply_weight_decay_inplace`: `p.add_(p, ...)`, 1 kernel), the
  momentum `lerp_` (1; Megatron's `--muon-nesterov` is off by default: no second lerp), the update
  `p.add_` (1): `STEP_KERNELS`;
- `orthogonalize`: muon_utils.py `newton_schulz` on the momentum: `F.normalize` over the matrix (norm,
  clamp_min, divide: 3), the cast to bf16 (`--muon-fp32-matmul-prec medium`, Megatron's default: BF16
  I/O), per step `newton_schulz_step`'s `X @ X.mT` and two `torch.addmm` (3 GEMMs), the cast back to
  fp32, then emerging_optimizers.py's `orth_grad * scale_factor * extra_scale_factor` (2):
  `orthogonalize_kernels`, 5 steps by default (`--muon-num-ns-steps`, quintic coefficients);
- the attention's fused QKV weight (`is_qkv`, `linear_qkv.weight`, optimizer/__init__.py; `--muon-split-qkv`
  on by default; not MLA's) is split into query, key and value, each orthogonalized apart
  (`TensorParallelMuon.orthogonalize`): the three `reshape`s of the strided slices copy where a rank
  holds more than one query group, and the results are concatenated (1);
- under tensor parallelism (`--muon-tp-mode duplicated`, the default) `newton_schulz_tp` all-gathers
  the shard over its TP group and concatenates it (2 launches) before orthogonalizing the whole matrix
  on every rank; counted where the weight's TP group has more than one rank.

Each matrix m × n (m ≤ n, `newton_schulz` transposes the taller ones) costs 4·m²·n + 2·m³ FLOPs a
step in those GEMMs (`newton_schulz_flops`). The launches are PyTorch ops from Python: ppb's
Megatron host prices them at `launches.PLAIN_OP_SHARE` of a launch. The element-wise passes' HBM
traffic stands in the optimizer term's per-element traffic (`timing.iteration`), not here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, LayerKind, Moe, TailKind

NS_STEPS = 5  # arguments.py --muon-num-ns-steps default
STEP_KERNELS = 3  # weight decay, momentum lerp_, the update p.add_
NORMALIZE_KERNELS = 3  # F.normalize: norm, clamp_min, divide
CAST_KERNELS = 2  # to bf16 before the steps, back to fp32 after
STEP_GEMMS = 3  # X @ X.mT, addmm(A, A, A), addmm(X, B, X)
SCALE_KERNELS = 2  # orth_grad * scale_factor * extra_scale_factor
TP_GATHER_KERNELS = 2  # newton_schulz_tp's all_gather and cat (duplicated mode, TP > 1)
QKV_CAT = 1  # torch.cat of the orthogonalized query, key and value


def orthogonalize_kernels(steps: int = NS_STEPS) -> int:
    """Kernels of one `newton_schulz` call with its scaling: 3 + 2 + 3·steps + 2 (22 at 5 steps)."""
    return NORMALIZE_KERNELS + CAST_KERNELS + STEP_GEMMS * steps + SCALE_KERNELS


def newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> float:
    """FLOPs of `newton_schulz` on a rows × cols matrix: m = the smaller side, n the larger; a step
    is A = X·Xᵀ (2m²n), B = bA + c·A·A (2m³), X = aX + B·X (2m²n)."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m**3)


@dataclass(frozen=True)
class MuonMatrix:
    """One parameter Muon steps on a rank: its orthogonalized pieces (rows, cols) and the kernels beyond
    them (the QKV split's copies and cat, the TP gathers)."""

    pieces: tuple[tuple[int, int], ...]
    extra_kernels: int = 0
    expert: bool = False  # a routed expert's: sharded over the expert-data-parallel group

    def kernels(self, steps: int = NS_STEPS) -> int:
        return STEP_KERNELS + len(self.pieces) * orthogonalize_kernels(steps) + self.extra_kernels

    def flops(self, steps: int = NS_STEPS) -> float:
        return sum(newton_schulz_flops(r, c, steps) for r, c in self.pieces)


def _plain(rows: int, cols: int, sharded: bool, expert: bool = False) -> MuonMatrix:
    """A matrix orthogonalized whole: gathered first where its TP group has more than one rank."""
    return MuonMatrix(((rows, cols),), TP_GATHER_KERNELS if sharded else 0, expert)


def body_matrices(kind: BodyKind, tp: int, ep: int, etp: int) -> list[MuonMatrix]:
    """The Muon matrices of one decoder layer on a TP/EP rank (shapes of the whole matrix each rank
    orthogonalizes: duplicated mode gathers a TP shard back to it)."""
    att, h = kind.attention, kind.hidden_size
    out: list[MuonMatrix] = []
    shard = tp > 1
    if att.is_mla:
        heads = att.num_heads
        qk = att.qk_nope_head_dim + att.qk_rope_head_dim
        if att.q_lora_rank:
            out += [_plain(att.q_lora_rank, h, False), _plain(heads * qk, att.q_lora_rank, shard)]
        else:
            out.append(_plain(heads * qk, h, shard))
        out.append(_plain(att.kv_lora_rank + att.qk_rope_head_dim, h, False))
        out.append(_plain(heads * (att.qk_nope_head_dim + att.v_head_dim), att.kv_lora_rank, shard))
        out.append(_plain(h, heads * att.v_head_dim, shard))
    else:
        d, groups = att.head_dim, att.num_kv_heads
        # the rank's shard is split into its query groups' q, k and v (strided slices: copied where it
        # holds more than one group), each gathered over TP to the whole q, k or v and orthogonalized
        copies = 3 if kv_heads_per_rank(groups, tp) > 1 else 0
        pieces = ((att.num_heads * d, h), (groups * d, h), (groups * d, h))
        gathers = len(pieces) * TP_GATHER_KERNELS if shard else 0
        out.append(MuonMatrix(pieces, copies + QKV_CAT + gathers))
        out.append(_plain(h, att.num_heads * d, shard))
    mlp = kind.mlp
    if isinstance(mlp, Moe):
        out.append(_plain(mlp.num_experts, h, False))  # the router
        width = mlp.expert_intermediate_size
        fc1 = (2 if mlp.gated else 1) * width
        for _ in range(per_rank(mlp.num_experts, ep)):
            out += [_plain(fc1, h, etp > 1, True), _plain(h, width, etp > 1, True)]
        if mlp.shared_experts:
            shared = mlp.shared_experts * mlp.shared_intermediate_size
            out += [_plain((2 if mlp.gated else 1) * shared, h, shard), _plain(h, shared, shard)]
            if mlp.shared_expert_gate:
                out.append(_plain(1, h, False))
    else:
        width = mlp.intermediate_size
        out += [_plain((2 if mlp.gated else 1) * width, h, shard), _plain(h, width, shard)]
    return out


def layer_matrices(kind: LayerKind, tp: int, ep: int, etp: int) -> list[MuonMatrix]:
    """A layer kind's Muon matrices on one rank: a decoder layer's, each MTP module's projection
    (2h → h) and layer; none of a HEAD's, a TAIL's tables and norms (`memory.frameworks.muon`)."""
    if isinstance(kind, BodyKind):
        return body_matrices(kind, tp, ep, etp)
    if isinstance(kind, TailKind) and kind.has_mtp_modules and kind.mtp_body is not None:
        h = kind.hidden_size
        one = [_plain(h, 2 * h, tp > 1), *body_matrices(kind.mtp_body, tp, ep, etp)]
        return one * kind.mtp_layers
    return []


def gemm_seconds(matrix: MuonMatrix, gemm_s, steps: int = NS_STEPS) -> float:
    """The GPU's seconds of a matrix's Newton-Schulz GEMMs, each priced by *gemm_s(m, n, k)*
    (`Kernels.gemm_s`): per step X·Xᵀ (m × m over n), A·A (m × m over m), B·X (m × n over m)."""
    total = 0.0
    for rows, cols in matrix.pieces:
        m, n = min(rows, cols), max(rows, cols)
        total += steps * (gemm_s(m, m, n) + gemm_s(m, m, m) + gemm_s(m, n, m))
    return total


def step_seconds(matrices: list[tuple[MuonMatrix, float]], gemm_s, plain_launch_s: float) -> float:
    """Muon's part of an optimizer step over *matrices* (each with the share of it the rank steps: 1,
    or under the layer-wise distributed optimizer its share of whole matrices): the host launching
    every kernel at *plain_launch_s* or the GPU's GEMMs, whichever is longer (no sync between them)."""
    host = sum(share * matrix.kernels() for matrix, share in matrices) * plain_launch_s
    device = sum(share * gemm_seconds(matrix, gemm_s) for matrix, share in matrices)
    return max(host, device)
