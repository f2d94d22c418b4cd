"""Megatron's --moe-shared-expert-overlap: which shared-expert ops run beside which expert all-to-all.

With the flag, `SharedExpertMLP` runs on a side stream of its own (megatron/core/transformer/moe/
shared_experts.py `SharedExpertMLP.pre_forward_comm`, `linear_fc1_forward_and_act`, `linear_fc2_forward`,
`post_forward_comm`, `get_output`; NVIDIA/Megatron-LM d98e8a64), and the token dispatcher launches its steps
around the expert all-to-alls (token_dispatcher.py, same commit):

- `MoEAlltoAllTokenDispatcher.token_dispatch`: the side stream waits for the compute stream, the tokens'
  all-to-all is launched, then the shared experts' FC1 and activation (after `pre_forward_comm`'s SP
  all-gather, launched from `dispatch_preprocess`), then the probabilities' all-to-all;
  `token_combine`: the side stream waits again, the combine's all-to-all is launched, then FC2 and
  `post_forward_comm`'s SP reduce-scatter; `combine_postprocess` waits for the side stream (`get_output`).
- `MoEFlexTokenDispatcher.token_dispatch` / `token_combine` + `combine_postprocess`: the same pairs, FC1
  after the fused dispatch is launched, FC2 after the fused combine.
- The backward: autograd runs each op's backward on its forward's stream; the comments and the
  `set_tensor_grad_fn_sequence_sr` calls order the launches "probs A2A -> tokens A2A -> shared experts fc1"
  (the FC1 side after the dispatch's backward all-to-all, `_BackwardStreamWait`), and FC2's backward beside
  the combine's backward all-to-all.

So FC1's side (the SP entry gather and its backward collectives, FC1, the activation) runs beside the
dispatch's all-to-all each way, FC2's side (FC2, the SP exit reduce-scatter and its backward gather) beside
the combine's. The allgather dispatcher refuses the flag (transformer_config.py `__post_init__`: "only works
with alltoall or flex token dispatcher"). Under the flag the shared experts' TP collectives take no
userbuffers (`SharedExpertMLP.__init__` clears `ub_overlap_*`), as ppb's shared-expert entry and exit never
priced them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ppb_core.timing.flops import Op

# The all-to-all op each side of the shared experts runs beside, by the op's last name part.
DISPATCH, COMBINE = "dispatch", "combine"
# FC2's side: the second linear and the SP exit after it (`_tp_exit`'s ops are named after `reduce_shared`).
FC2_SIDE = ("shared_out", "reduce_shared")


def _split(name: str) -> tuple[str, str]:
    """An op's (prefix, last part): an MTP layer's ops carry their module's prefix."""
    head, _, last = name.rpartition(".")
    return (head + "." if head else ""), last


def beside(ops: Sequence[Op]) -> dict[str, tuple[str, ...]]:
    """{all-to-all op: the shared-expert ops its side stream runs beside it} of one layer's ops (empty
    without shared experts or without expert parallelism: no all-to-all to hide behind)."""
    pairs: dict[str, list[str]] = {}
    names = {op.name for op in ops}
    for op in ops:
        prefix, last = _split(op.name)
        if "shared" not in last:
            continue
        side = COMBINE if last.startswith(FC2_SIDE) else DISPATCH
        if prefix + side in names:
            pairs.setdefault(prefix + side, []).append(op.name)
    return {name: tuple(side) for name, side in pairs.items()}
