"""The kernels Megatron's MoE router launches after its gating GEMM, by setting, and its host syncs.

Megatron-Core's `TopKRouter.routing` (megatron/core/transformer/moe/router.py, moe_utils.py,
NVIDIA/Megatron-LM d98e8a64) runs as eager PyTorch ops, one kernel each, in training (grad enabled):

- z-loss (`--moe-z-loss-coeff` given; `apply_z_loss`, moe_utils `z_loss_func`): `torch.logsumexp`
  (PyTorch's: amax, abs, ==inf, masked_fill, subtract, exp, sum, log, add: 9), square, mean, the
  coefficient's product (12) and the metrics tracker's record (moe_logging.py `record`: the value over
  its coefficient, `values[layer] += v`'s add and copy back: 3); backward `MoEAuxLossAutoScaler`'s
  `ones_like` and scale (2), the coefficient, mean, square (2) and logsumexp (subtract, exp, multiply)
  gradients and the sum into the logits' gradient: 10;
- top-k with the score function (`topk_routing_with_score_function`): `torch.topk` one kernel, one more
  to sort its k > 1 values (sorted while grad is enabled); softmax one (before or after the top-k,
  `--moe-router-pre-softmax`); sigmoid (sqrtsoftplus: softplus and sqrt) after the cast to fp32 where the
  logits are not (`--moe-router-dtype`), with the expert bias its add and the gather of the unbiased
  scores, and for k > 1 the normalisation (sum, add, divide: 3); the group-limited top-k
  (`group_limited_topk`: the group top-k and its sum, the group top-k, the mask's zeros, scatter,
  expanded copy, bool cast, not, masked fill, then the top-k: 9 + sorts); the scaling factor's
  multiply; the cast back to the logits' dtype where they are not fp32; the dense probabilities
  (zeros, scatter) and routing map (zeros, int cast, scatter, bool cast): 6. Backward: the gathers'
  and top-k's gradients (zeros and scatter: 2), the probabilities' gather (1), the casts, the scale,
  the normalisation's (4), the score function's (1);
- Transformer Engine's fused router (`--moe-router-fusion`, TE transformer_engine/pytorch/router.py
  d0067d0d: `fused_topk_with_score_function_fwd/_bwd`, `fused_score_for_moe_aux_loss_fwd/_bwd`,
  `fused_moe_aux_loss_fwd/_bwd`): one kernel each way for the top-k, the aux-loss scores and each loss;
- aux losses (`compute_routing_scores_for_aux_loss` once: the scores again (softmax 1; sigmoid with its
  normalisation 4), top-k and the routing map (4)); then per loss type
  (`_apply_aux_loss`, `_apply_seq_aux_loss`, `_apply_global_aux_loss`): the map's sum over tokens, its
  all-reduce over TP×CP (TP×DP×CP for the global loss: a collective where the group has more than one
  rank), `switch_load_balancing_loss_func` (sum, multiply, sum, scale: 4), the sequence loss's divide
  by the batch, the global loss's running sums (add, step add, divide: 3), the record (3); backward
  `MoEAuxLossAutoScaler` (2) and the loss's gradient (2, the sequence loss's divide 1 more), the
  scores' gradient (softmax 1; sigmoid 5) and the sum into the logits' gradient (1);
- `--moe-router-force-load-balancing` (router.py `forward`, moe_utils.py `RandomSTE`): the logits'
  clone and `normal_` before the routing (2, none backward: the gradient passes through);
- the expert bias's token tally (`_apply_expert_bias`: the map's sum and the add: 2, forward only);
- sinkhorn (`--moe-router-load-balancing-type sinkhorn`: `sinkhorn_load_balancing`, moe_utils
  `sinkhorn`, the same at the golden-value commit adc69dba2d): the cast to fp32, exp, two `ones`, per
  iteration of its `while error > tol` loop 14 kernels (d0 = `(1 / n) * 1 / (torch.sum(d1 * cost, 1)
  + eps)`: multiply, sum, add, then a Python float over a tensor, which PyTorch runs as
  `Tensor.__rtruediv__` = `self.reciprocal() * other` (torch/_tensor.py `__rdiv__`): reciprocal and
  multiply, 5; d1 the same, 5; the error: subtract, abs, mean; the compare) and a host synchronization
  (`error > tol` is a GPU tensor the `while` reads: `Tensor.__bool__` copies it to the host), the
  final two products, the top-k, the activation (sigmoid for k = 1, else softmax and the cast back),
  the map (4) and the scores' product; backward the product's and the activation's gradients (2, with
  softmax's cast 3).

The loop runs `SINKHORN_ITERATIONS` times: Megatron's sinkhorn on logits of the router's initial
scale (weight std `--init-method-std` 0.02 against the unit-variance norm output: logit std
0.02·√h, 0.45 at h 512) stops at the third iteration for 1,024-4,096 tokens and 4-8 experts
(tests/test_timing_router.py runs it).

Under `--deterministic-mode` the dense probabilities and map come from `index_put_` instead of
`scatter` (PyTorch's sort path): counted as the scatter path's kernels (not read further).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ppb_core.config.run import MoeRouter

SINKHORN_ITERATIONS = 3
# PyTorch's logsumexp (9), square, mean, the coefficient (3); the tracker's record (3).
Z_LOSS = (12 + 3, 10)
RECORD = 3  # moe_logging.py `record`: divide, add into the layer's slot, copy back
DENSE_OUTPUTS = 6  # zeros + scatter (probabilities); zeros, int cast, scatter, bool cast (routing map)
ROUTING_MAP = 4  # the aux-loss map: zeros, int cast, scatter, bool cast
SWITCH_LOSS = 4  # switch_load_balancing_loss_func: sum over tokens, multiply, sum, scale
EXPERT_BIAS = 2  # the routing map's sum and the add into local_tokens_per_expert
SINKHORN_STEP = 14  # one loop iteration's kernels (module docstring)
FORCE_BALANCE = 2  # --moe-router-force-load-balancing: the logits' clone and normal_ (RandomSTE.forward)


@dataclass(frozen=True)
class RouterSetting:
    """A run's `training.moe.router` (`MoeRouter`), hashable for the op tables' geometry."""

    score_function: str = "softmax"
    aux_losses: tuple[str, ...] = ()
    sinkhorn: bool = False
    z_loss: bool = False
    expert_bias: bool = False
    fusion: bool = False
    pre_softmax: bool = False
    topk_scaling: bool = False
    force_balance: bool = False

    @classmethod
    def of(cls, router: MoeRouter) -> RouterSetting:
        values = {field.name: getattr(router, field.name) for field in fields(cls)}
        return cls(**{**values, "aux_losses": tuple(router.aux_losses)})


@dataclass(frozen=True)
class RouterLaunches:
    """The routing's (after the gating GEMM) kernels forward and backward, and the host syncs forward."""

    forward: int
    backward: int
    syncs: int = 0


def _topk(k: int, sorted_: bool = True) -> int:
    """torch.topk: the selection kernel, and a sort of the k values when sorted and k > 1."""
    return 1 + (1 if sorted_ and k > 1 else 0)


def _select(router: RouterSetting, k: int, groups: bool, group_k: int, fp32: bool) -> tuple[int, int]:
    """`topk_routing_with_score_function` unfused: (forward, backward) kernels."""
    if groups:  # group_limited_topk: group top-k + sum, group top-k, mask (6 ops), masked top-k
        per_group = max(1, k // max(1, group_k))
        pick = _topk(per_group) + 1 + _topk(group_k, sorted_=False) + 6 + _topk(k)
    else:
        pick = _topk(k)
    forward = backward = 0
    if router.score_function == "softmax":
        forward += 1 + pick
        backward += 1 + 2  # softmax's gradient; the top-k's (zeros, scatter)
    else:
        forward += (0 if fp32 else 1) + (1 if router.score_function == "sigmoid" else 2)
        backward += (0 if fp32 else 1) + (1 if router.score_function == "sigmoid" else 2)
        if router.expert_bias:  # scores + bias for the choice, then the unbiased scores gathered
            forward += 1 + pick + 1
        else:
            forward += pick
        backward += 2  # the gather's or the top-k's gradient (zeros, scatter_add)
        if k > 1:  # probs / (sum + 1e-20)
            forward += 3
            backward += 4
    if router.topk_scaling:
        forward, backward = forward + 1, backward + 1
    if not fp32:  # probs.type_as(logits)
        forward, backward = forward + 1, backward + 1
    return forward + DENSE_OUTPUTS, backward + 1  # the dense probabilities' gradient: a gather


def _aux(router: RouterSetting, k: int, fp32: bool, tp_cp: int, tp_dp_cp: int) -> tuple[int, int]:
    """The auxiliary losses: their shared scores and map, then each loss type."""
    if not router.aux_losses:
        return 0, 0
    sigmoid = router.score_function != "softmax"
    if router.fusion:
        forward, backward = 1, 1
    else:
        score = 1 if router.score_function != "sqrtsoftplus" else 2
        forward = (0 if fp32 or not sigmoid else 1) + score + (3 if sigmoid else 0) + _topk(k) + ROUTING_MAP
        backward = score + (4 if sigmoid else 0) + (0 if fp32 or not sigmoid else 1)
    backward += 1  # the aux scores' gradient summed into the logits'
    for loss in router.aux_losses:
        group = tp_dp_cp if loss == "global_aux_loss" else tp_cp
        forward += 1 + (1 if group > 1 else 0) + (1 if router.fusion else SWITCH_LOSS) + RECORD
        backward += 2 + (1 if router.fusion else 2)
        if loss == "seq_aux_loss":
            forward, backward = forward + 1, backward + 1
        if loss == "global_aux_loss":
            forward += 3
    return forward, backward


def router_launches(
    router: RouterSetting, *, topk: int, group_topk: int, fp32: bool, tp_cp: int, tp_dp_cp: int
) -> RouterLaunches:
    """The routing's kernels under *router*'s settings (module docstring): *topk* experts a token,
    *group_topk* groups (0: no group limit), *fp32* logits (--moe-router-dtype fp32), the aux
    losses' reduction groups' sizes."""
    forward = backward = 0
    if router.force_balance:  # moe_utils.py RandomSTE: logits.clone().normal_(), the gradient passed through
        forward += FORCE_BALANCE
    if router.z_loss:
        forward, backward = forward + Z_LOSS[0], backward + Z_LOSS[1]
    if router.sinkhorn:
        softmax = topk > 1
        forward += (0 if fp32 else 1) + 1 + 2 + SINKHORN_ITERATIONS * SINKHORN_STEP + 2
        forward += _topk(topk) + 1 + (1 if softmax and not fp32 else 0) + ROUTING_MAP + 1
        backward += 2 + (1 if softmax and not fp32 else 0)
        return RouterLaunches(forward, backward, SINKHORN_ITERATIONS)
    if router.fusion:
        forward, backward = forward + 1, backward + 1
    else:
        select = _select(router, topk, group_topk > 0, group_topk, fp32)
        forward, backward = forward + select[0], backward + select[1]
    aux = _aux(router, topk, fp32, tp_cp, tp_dp_cp)
    forward, backward = forward + aux[0], backward + aux[1]
    if router.expert_bias:
        forward += EXPERT_BIAS
    return RouterLaunches(forward, backward)
