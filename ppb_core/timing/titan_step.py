"""torchtitan's step outside the layers as its code runs it: FSDP2's units and the optimizer step.

**FSDP2 units** (`timing.fsdp_units`). Which modules torchtitan wraps with `fully_shard` decides which
parameters each all-gather and reduce-scatter carries and when it runs:

- `split` (from 83e694105, 2025-07-28, "Improve reshard_after_forward logic"; v0.2.2
  models/llama3/infra/parallelize.py `apply_fsdp`): `tok_embeddings`, every block, and
  `[norm, output]` are units of their own; the root holds no parameters. Without pipeline
  parallelism every block and the embedding reshard after the forward; `[norm, output]` does not
  (only under the "always" policy), so it is not gathered again at the start of the backward.
- `root` (1ea476e9f to 820504e and e7c0cae: `parallelisms/parallelize_llama.py` and, from 2025,
  `models/llama3/parallelize_llama.py` `apply_fsdp`): every block is a unit, the last one not
  resharded after the forward (`reshard_after_forward = int(layer_id) < len(model.layers) - 1`,
  "FSDP would prefetch it immediately"); then `fully_shard(model, reshard_after_forward=not
  pp_enabled)` makes the root a unit of what is left: the embedding, the final norm and the output
  layer. FSDP2 (torch.distributed.fsdp._fully_shard `FSDPState._pre_forward`, `_pre_backward`,
  `_root_post_backward_final_callback`) gathers the root before the model's forward (before its
  first block's gather), gathers it again when the backward reaches the logits (resharded after the
  forward unless pipelined), and reduce-scatters its gradients only when the whole backward is done
  (its post-backward runs on the gradient of the model's input, after the embedding's backward), the
  final callback waiting for it. So the output layer's gradients wait for the embedding's, and
  nothing hides the root's collectives.

`fsdp2_units` turns a cell's per-layer collectives into what runs where: the root's gather on the
cell's first layer, its gather again on the last (the backward's first), its reduce-scatter on the
first (the backward's last).

**Optimizer step** (`timing.optimizer_implementation`) over the local shards, all fp32 (FSDP2
keeps the sharded parameter in fp32 and reduce-scatters gradients into fp32, `MixedPrecisionPolicy(
reduce_dtype=float32)`), bytes per element a device holds:

- gradient clipping (torchtitan utils.py `clip_grad_norm_`, `training.max_norm` 1.0 by default):
  `torch.nn.utils.get_total_norm` (`torch._foreach_norm`, a read of every gradient) then
  `clip_grads_with_norm_` multiplies every gradient by the clamped coefficient whatever its value
  (`torch._foreach_mul_`, a read and a write; torch/nn/utils/clip_grad.py, no branch "to avoid a
  CPU <=> device synchronization"): 3 g.
- `foreach` (torchtitan passes `foreach=True` until 6e4988550, 2025-02-24, "use Fused AdamW as
  default"): torch/optim/adam.py `_multi_tensor_adam` with decoupled weight decay (torch 2.13; the
  same calls in torch 2.5's adamw.py `_multi_tensor_adamw`) on the non-capturable path runs eight
  element-wise passes: `_foreach_mul_(params)` 2p, `_foreach_lerp_(exp_avgs, grads)` 2m + g,
  `_foreach_mul_(exp_avg_sqs)` 2m, `_foreach_addcmul_(exp_avg_sqs, grads, grads)` 2m + g (the
  gradient read once: both operands are the same tensor), `_foreach_sqrt(exp_avg_sqs)` into a new
  list 2m, `_foreach_div_` 2m and `_foreach_add_(eps)` 2m on it, `_foreach_addcdiv_(params,
  exp_avgs, sqrt)` 2p + 2m: 4p + 14m + 2g = 80 bytes at fp32 (Adam, whose decay is not
  decoupled, makes a new gradient list instead of scaling the parameters: 84). `for-loop` runs the
  same arithmetic tensor by tensor (`_single_tensor_adam`): the same bytes.
- `fused` (the default since 6e4988550; v0.2.2 `optimizer.implementation`): `torch._fused_adamw_`
  reads the parameter, gradient and both moments and writes the parameter and moments once:
  2p + g + 4m = 28 bytes.
- `optimizer.zero_grad()` sets the gradients to None (`set_to_none=True`): no kernel. FSDP2 frees
  the unsharded gradients once reduce-scattered, so there is no buffer to zero.
**Gradients under a pipeline** (`pipelined_grad_bytes`). torch.distributed.pipelining's stage
(stage.py `backward_maybe_with_nosync`, since 2024) runs every micro-batch's backward with
`set_requires_gradient_sync(False)` and reduces only after the last one. FSDP2 then keeps each
unsharded gradient in the reduce dtype (fp32, torchtitan's `mixed_precision_reduce`) itself, on the
compute stream in `FSDPParamGroup.post_backward` (torch/distributed/_composable/fsdp/_fsdp_param.py
of late 2024, the same in torch 2.13's fsdp/_fully_shard/_fsdp_param.py): the first micro-batch's
bf16 gradient cast into a new fp32 accumulator (`to_accumulated_grad_if_needed`: read bc, write g),
each later one added into it (`accumulate_unsharded_grad_if_needed`, `+=`: read g and bc, write g);
the reduce-scatter's copy-in (`foreach_reduce`) then reads that fp32 accumulator (g + g an element
where the unpipelined step reads the bf16 gradient, bc + g). Nothing of this where the gradient is
already in the reduce dtype (autograd accumulates it in place instead, not priced).

**When a pipelined stage reduce-scatters** (`post_backward_reduce_end`). The stage's autograd runs
every micro-batch's backward, the last one too, with gradient sync off; only once that backward has
returned does `backward_maybe_with_nosync` (torch/distributed/pipelining/stage.py in torch 2.6.0, the
release cut 2024-12-12 from main, eleven days before the 2024-12 benchmark's torch 1963fc8; torch 2.13's
`perform_reduce_grad`, a REDUCE_GRAD action after the stage's last backward, likewise) turn sync on and
call `FSDPParamGroup.post_backward` for every unit of the stage's model chunk, one after the other: the
copy-ins and reduce-scatters of the whole chunk queue behind its last backward, none of them beside
it. A rank's chunks (looped schedules) queue on one communicator, in the order their last backwards
end. The step cannot pass the last rank's queue: the clip reads every gradient, and the next step's
first all-gather queues behind it on the same communicator; so the iteration's tail past the schedule
is the latest queue's end past the schedule's (under 1F1B the first stage's whole queue).

The clip's total norm is a DTensor `_NormPartial` over the parameters' mesh: made `Replicate` for
the coefficient (`max_norm / (total_norm + 1e-6)`, a non-linear op), one scalar all-reduce per mesh
dimension (torch/distributed/tensor/_redistribute.py reduces a `Partial` dimension by dimension:
FSDP's data-parallel ranks, then TP's); under PP torchtitan also all-reduces it over the stages
(utils.py `clip_grad_norm_`: `total_norm.full_tensor()`, then `dist.all_reduce(total_norm,
group=pp_mesh.get_group())`). Each at its latency (`clip_norm_seconds`, timing.reporting's
`scalar_all_reduce_seconds`), in the `bookkeeping` term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ppb_core.config.run import RunConfig
from ppb_core.model.walk import BODY, HEAD, TAIL
from ppb_core.timing.comm import Group, Links
from ppb_core.timing.reporting import scalar_all_reduce_seconds

FSDP_UNITS: tuple[str, ...] = ("split", "root")
OPTIMIZER_IMPLEMENTATIONS: tuple[str, ...] = ("fused", "foreach", "for-loop")
FP32_BYTES = 4


@dataclass(frozen=True)
class UnitCollectives:
    """A cell's FSDP2 collectives per layer in forward order (seconds on the link)."""

    forward: tuple[float, ...]  # all-gathers before each layer's forward
    backward: tuple[float, ...]  # all-gathers again before each layer's backward
    reduces: tuple[float, ...]  # reduce-scatters once each layer's backward is done
    regathered: tuple[bool, ...]  # the layer's parameters gathered again (its copy-out rerun)


def fsdp2_units(
    nodes: Sequence[str],
    last_block: Sequence[bool],
    gathers: Sequence[float],
    reduces: Sequence[float],
    units: str,
    reshard: bool,
) -> UnitCollectives:
    """One cell's collectives under torchtitan's `units` (module docstring): *nodes* HEAD / BODY /
    TAIL in forward order, *last_block* marks the model's last block, *gathers* and *reduces* each
    layer's own all-gather and reduce-scatter seconds, *reshard* the blocks' reshard_after_forward."""
    if units not in FSDP_UNITS:
        raise ValueError(f"unknown FSDP units {units!r}")
    count = len(nodes)
    forward, backward, reducing = list(gathers), [0.0] * count, list(reduces)
    regathered = [False] * count
    for index, node in enumerate(nodes):
        if node == BODY:
            regathered[index] = reshard and not (units == "root" and last_block[index])
        elif units == "split":
            regathered[index] = reshard and node == HEAD  # [norm, output]: not resharded
    if units == "root":
        roots = [index for index, node in enumerate(nodes) if node in (HEAD, TAIL)]
        if roots:
            gather = sum(gathers[index] for index in roots)
            reduce = sum(reduces[index] for index in roots)
            for index in roots:
                forward[index] = reducing[index] = 0.0
                regathered[index] = reshard
            forward[0] += gather  # before the cell's first forward
            reducing[0] += reduce  # after the cell's last backward
            if reshard:
                backward[-1] += gather  # when the backward reaches the logits
    for index in range(count):
        if regathered[index] and not (units == "root" and nodes[index] in (HEAD, TAIL)):
            backward[index] += gathers[index]
    return UnitCollectives(tuple(forward), tuple(backward), tuple(reducing), tuple(regathered))


def optimizer_bytes_per_element(implementation: str, grad_bytes: int = FP32_BYTES, decoupled: bool = True) -> int:
    """HBM bytes per held element of torchtitan's AdamW (*decoupled* weight decay) or Adam step with
    its gradient clipping (module docstring): parameters and moments in fp32, gradients of
    *grad_bytes*. Adam (torchtitan passes weight_decay 0.1 to both) adds the decay to a new gradient
    list (`_foreach_add(grads, params)`: read g and p, write g) where AdamW scales the parameters
    in place (`_foreach_mul_(params)`: 2p); the fused kernel does either inside its one pass."""
    p = m = FP32_BYTES
    g = grad_bytes
    clip = 3 * g
    if implementation == "fused":
        return clip + 2 * p + g + 4 * m
    if implementation in ("foreach", "for-loop"):
        decay = 2 * p if decoupled else 2 * g + p
        return clip + decay + 2 * p + 14 * m + 2 * g
    raise ValueError(f"unknown optimizer implementation {implementation!r}")


def clip_norm_seconds(run: RunConfig, links: Links, data_group: int) -> float:
    """The all-reduces of torchtitan's total gradient norm (module docstring): over the *data_group*
    FSDP ranks, the TP ranks and, under PP, the stages; latency only."""
    par = run.parallel
    span = par.tp * par.cp * par.dp
    groups = (Group(data_group, span), Group(par.tp, par.tp), Group(par.pp, span * par.pp))
    return sum(scalar_all_reduce_seconds(group, links) for group in groups)


def pipelined_grad_bytes(micro_batches: int, param_bytes: int, reduce_bytes: int) -> tuple[float, int]:
    """(HBM bytes per unsharded parameter element a micro-batch's backward adds on average, the
    reduce-scatter copy-in's bytes per element) under torchtitan's pipeline (module docstring): the
    first micro-batch's cast (bc + g), each later one's add (g + bc + g), and the copy-in from the fp32
    accumulator (2g); none where *param_bytes* already is the reduce dtype (the copy-in then bc + g)."""
    if param_bytes == reduce_bytes:
        return 0.0, param_bytes + reduce_bytes
    cast = param_bytes + reduce_bytes
    add = 2 * reduce_bytes + param_bytes
    return (cast + add * (micro_batches - 1)) / micro_batches, 2 * reduce_bytes


def post_backward_reduce_end(chunks: Sequence[tuple[float, float]]) -> float:
    """When one rank's reduce-scatters are done under a pipeline (module docstring): *chunks* holds, per
    model chunk on the rank, (end of its last micro-batch's backward, seconds of its copy-ins and
    reduce-scatters); each chunk's queue starts at its end or after the previous chunk's queue."""
    clock = 0.0
    for end, seconds in sorted(chunks):
        clock = max(clock, end) + seconds
    return clock
