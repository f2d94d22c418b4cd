"""What Megatron-LM's training loop does every iteration besides forward, backward and the step:
the statistics its flags switch on, the scalar all-reduces and the host syncs of its bookkeeping.

Read from Megatron-LM at the commits of the CI golden values (adc69dba2d, Oct 2025; 6e091e1b68,
May 2026), megatron/training/training.py `train_step` and the loop in `train`, pretrain_gpt.py
`loss_func`, megatron/core/optimizer/clip_grads.py and megatron/training/utils
(`calc_params_l2_norm`, `reduce_max_stat_across_model_parallel_group`,
`logical_and_across_model_parallel_group`):

- `--log-params-norm` (`timing.log_params_norm`): `calc_params_l2_norm` runs
  `multi_tensor_l2norm` over the fp32 main copy of the parameters whose optimizer states the
  device holds (`param.main_param`, sharded under the distributed optimizer; without bf16 the
  parameters themselves, every one the device holds), all-reduces the square over dp·cp and then
  over the model-parallel group (tp·pp; experts' group once more when it differs), `.item()`.
- `--log-num-zeros-in-grad` (`timing.log_num_zeros_in_grad`): `count_zeros_fp32` runs
  `grad.numel() - torch.count_nonzero(grad)` per held main gradient (`!= 0` reads the gradient and
  writes a bool, the sum reads the bool), all-reduces the count over the gradient-statistics group
  (every rank of the distributed optimizer's instance; model parallel otherwise), `.item()`; then
  `train_step` takes its maximum over the model-parallel group (all-reduce, `.item()`).
- Always: the gradient norm's all-reduce over the same statistics group (its passes are in the
  optimizer term); `train_step`'s `logical_and_across_model_parallel_group(update_successful)` and
  `reduce_max_stat_across_model_parallel_group(grad_norm)`, `training_log`'s maximum of the
  learning rate (three model-parallel all-reduces, each followed by `.item()`); the last stage's
  loss all-reduce over dp·cp; `optimizer.get_loss_scale().item()` in the loop.
- `--exit-duration-in-mins` (`timing.exit_duration_in_mins`): `checkpoint_and_decide_exit`
  all-reduces the exit decision over every rank (MAX) and reads it, `.item()`, every iteration.
- `--check-for-nan-in-loss-and-grad` (Megatron's default; `timing.check_for_nan_in_grad`):
  `loss_func` validates every micro-batch's loss with `torch.isnan` and `torch.isinf` through the
  rerun state machine, which reads each result on the host: two syncs per micro-batch.
- `--calculate-per-token-loss` (`timing.calculate_per_token_loss`; Megatron-LM d98e8a64,
  megatron/core/distributed/finalize_model_grads.py `finalize_model_grads`): after the gradient
  reduction the token count is broadcast from the last stage over the pipeline group and
  all-reduced over dp·cp, and every held main gradient is multiplied by its inverse
  (`scale_gradients`: `grad_data *= scaling`, the whole buffer under DDP, the shard under Megatron
  FSDP), reading and writing each; DDP's own 1/(dp·cp) pass before the reduction is then skipped
  (`timing.iteration.grad_pass_bytes`). No host sync.

- `--check-weight-hash-across-dp-replicas-interval N` (`timing.weight_hash_interval`; Megatron-LM
  d98e8a64, training.py `post_training_step_callbacks`, inside the interval timer, after each
  iteration a multiple of N): megatron/core/utils.py `check_param_hashes_across_dp_replicas` copies
  every parameter the rank holds to the host (`param.data.to("cpu").float()`: 4 B an element) and
  hashes it with `hashlib.sha1` on the CPU, one thread; stacks the 20-byte digests, all-gathers them over
  the data-parallel group (the experts' over their data-parallel group), compares them
  (`torch.equal`, one host sync per rank's copy and one against rank 0's), then a barrier over every
  rank. At N = 1 every iteration pays it (`weight_hash_seconds`); above, the typical iteration runs
  none (the CI's seconds are a median). Under `--deterministic-mode` the host tensors the copy and the
  cast make are NaN-filled first (PyTorch's native `empty_cpu`, TensorFactories.cpp: the fill under
  deterministic algorithms with `fill_uninitialized_memory`, its default): that path's work beside the
  hashing, measured in Megatron CI's own golden values, is priced per element
  (`DETERMINISTIC_HASH_EXTRA_S`). Without it, the copies (2 B an element over PCIe) and the CPU's
  bf16-to-fp32 cast are not counted.

A scalar broadcast runs NCCL's ring (its only broadcast algorithm): g−1 steps, those between nodes
paying the inter-node latency too (`scalar_broadcast_seconds`).
A scalar all-reduce costs its latency (`scalar_all_reduce_seconds`): inside a node 2(g−1) steps, a
ring's and NCCL's intra-node chain alike (the CI cases set `NCCL_ALGO=Ring`, all on one node); across
nodes NCCL's double binary tree adds 2·⌈log2 nodes⌉ steps, each with the inter-node latency too
(NVIDIA developer blog "Massively Scale Your Deep Learning Training with NCCL 2.4", Feb 2019: trees
for latency that grows logarithmically with the node count; NCCL's tuner picks them for small data).
A host sync drains the GPU's queue; the GPU then waits at least the launch of the next kernel,
`timing.host_launch_us` (5 µs, the low end of the 5–20 µs "launch time on the CPU side" of the
Holistic Trace Analysis docs, docs/source/features/cuda_kernel_launch_stats.rst).
The Python work between a sync and the next launch is not counted: no public measurement of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ppb_core.config.run import RunConfig
from ppb_core.timing.comm import Group, Links

# OpenSSL's SHA-1 on x86-64 with the SHA extensions (Python's hashlib runs OpenSSL's), CPU cycles a byte:
# openssl/openssl crypto/sha/asm/sha1-x86_64.pl at 3efe51a4, its performance table, "Ryzen ... 1.93 (SHAEXT)"
# (Goldmont's SHAEXT 1.70). Ryzen's is Zen's core (DGX A100's EPYC 7742 is Zen 2); the table has no figure
# for Sapphire Rapids' SHA extensions (DGX H100): taken alike.
SHA1_CYCLES_PER_BYTE = 1.93
HASHED_BYTES = 4  # `param.data.to("cpu").float()`: each element hashed as fp32
# The check's host work per parameter element beyond SHA-1 under --deterministic-mode (the blocking copy into a
# NaN-filled pageable tensor, the cast into another, their allocation), measured: Megatron CI's
# gpt3_mcore_te_tp1_pp4_vp1_dist_optimizer_overlap_grad_reduce_param_gather_overlap_optimizer (golden_values_dev_
# dgx_h100.json, values of 5fe3f06658 as Megatron-LM d98e8a64 keeps them, one per iteration) checks every tenth
# iteration (`--check-weight-hash-across-dp-replicas-interval 10`, run after the iteration's log: it lands in the
# next one's time). Iterations 11, 21, 31, 41 take 0.36187, 0.37168, 0.37218, 0.36437 s against their neighbours'
# means 0.129015, 0.131375, 0.13857, 0.133715 s: the check 0.234356 s (mean of 0.232855, 0.240305, 0.23361,
# 0.230655). Its busiest rank (stage 0 of pp 4, vp 3: the 50,304 x 512 word and 1,024 x 512 position embeddings,
# 3 layers of 3,152,384 with their biases) holds 35,737,088 elements; SHA-1 of them as fp32 at 1.93 cycles a byte
# on the DGX H100's 3.8 GHz takes 0.072602 s; the rest, 0.161754 s, is 4.53 ns an element: 4.5 to two digits.
# Held-out, the same commit's gpt3_moe_mcore_te_ep8_resume_torch_dist_muon (every iteration) measures 0.377 s over
# its distributed-Muon twin, which runs no check. Megatron CI's hybrid cases (not priced: a Mamba model), which
# check without --deterministic-mode, measure about 2.7-3.0 ns an element in all (DGX A100 and DGX H100 alike,
# 0.414 and 0.411 s for the tp1_pp4 case): SHA-1 and ~0.8 ns, left unpriced there.
DETERMINISTIC_HASH_EXTRA_S = 4.5e-9
# A host whose clock the catalog does not state (`DeviceProfile.host_boost_ghz` 0): DGX A100's 3.4 GHz, the
# slowest of the hosts it states.
UNKNOWN_HOST_BOOST_GHZ = 3.4
BOOL_BYTES = 1  # count_nonzero's `grad != 0` writes one bool per element, its sum reads it back
MAIN_PARAM_BYTES = 4  # bf16 runs: the norm reads the fp32 main copy

# The groups of the scalar all-reduces (`Links.groups` names; `with_statistics_groups` adds them).
MODEL_PARALLEL, STATISTICS, DATA, EXPERT_MODEL_PARALLEL, WORLD = "mp", "stats", "dp", "emp", "world"
PIPELINE = "pipeline"


@dataclass(frozen=True)
class Bookkeeping:
    """One iteration's extra work on the slowest device: HBM bytes of the flag-switched passes, the
    scalar all-reduces by group, and the host syncs."""

    pass_bytes: float
    all_reduces: tuple[str, ...]
    syncs: int
    broadcasts: tuple[str, ...] = ()
    hashed_bytes: float = 0.0  # what the weight-hash check hashes on the host (`weight_hash_seconds`)
    hashed_deterministic: bool = False  # the check's host tensors NaN-filled (--deterministic-mode)


def pass_bytes(
    states_held: float,
    parameters_held: float,
    grad_bytes: int,
    dtype: str,
    run: RunConfig,
    gradients_held: float = 0.0,
) -> float:
    """HBM bytes of the statistics passes *run*'s flags switch on, for a device holding the optimizer
    states of *states_held* parameters, *parameters_held* parameters and *gradients_held* gradients:
    the parameter norm reads each fp32 main parameter (bf16) or each held parameter in its own dtype;
    the zero count reads each held main gradient (*grad_bytes*) and writes and reads one bool per
    element; per-token loss's scaling reads and writes each held gradient."""
    timing = run.timing
    total = 0.0
    if timing.calculate_per_token_loss:
        total += 2 * gradients_held * grad_bytes
    if timing.log_params_norm:
        if dtype == "bf16":
            total += states_held * MAIN_PARAM_BYTES
        else:
            total += parameters_held * run.training.dtype_bytes
    if timing.log_num_zeros_in_grad:
        total += states_held * (grad_bytes + 2 * BOOL_BYTES)
    return total


def bookkeeping(
    run: RunConfig, pass_traffic: float, last_stage_micro_batches: int, moe: bool, parameters_held: float = 0.0
) -> Bookkeeping:
    """Megatron's per-iteration statistics and syncs on the device that has the most of them (a last
    stage, which also holds the loss): its scalar all-reduces and `.item()` calls, as listed above.
    *parameters_held*: the elements of the rank that holds the most, which the weight-hash check
    hashes (every rank waits for it at the check's barrier)."""
    timing = run.timing
    reduces = [STATISTICS, MODEL_PARALLEL, MODEL_PARALLEL, MODEL_PARALLEL, DATA]  # grad norm, 3 maxima, loss
    syncs = 4  # update_successful, grad norm and learning-rate maxima, loss scale
    if timing.log_num_zeros_in_grad:
        reduces += [STATISTICS, MODEL_PARALLEL]
        syncs += 2  # the count's .item(), its model-parallel maximum's
    if timing.log_params_norm:
        reduces += [DATA, MODEL_PARALLEL] + ([EXPERT_MODEL_PARALLEL] if moe else [])
        syncs += 1
    if timing.exit_duration_in_mins is not None:
        reduces.append(WORLD)
        syncs += 1
    if timing.check_for_nan_in_grad:
        syncs += 2 * last_stage_micro_batches  # isnan and isinf of every micro-batch's loss
    hashed = 0.0
    if timing.weight_hash_interval == 1:  # every iteration: `check_param_hashes_across_dp_replicas`
        hashed = parameters_held * HASHED_BYTES
        reduces += [DATA, WORLD]  # the digests' all-gather (a few bytes: its latency), the barrier
        syncs += 1 + run.parallel.dp  # torch.equal against rank 0's, then against each rank's (cross_check)
        if moe:  # the experts' digests: their all-gather over the experts' data-parallel group, compared again
            par = run.parallel
            expert_dp = par.dp * par.cp * par.tp // (par.ep * par.expert_tp)
            reduces.append(DATA)
            syncs += 1 + expert_dp
    broadcasts: tuple[str, ...] = ()
    if timing.calculate_per_token_loss:  # the token count: over the pipeline, then over dp·cp
        broadcasts = (PIPELINE,)
        reduces.append(DATA)
    return Bookkeeping(pass_traffic, tuple(reduces), syncs, broadcasts, hashed, bool(hashed) and timing.deterministic)


def with_statistics_groups(run: RunConfig, links: Links, distributed_optimizer: bool) -> Links:
    """*links* with the groups of Megatron's scalar all-reduces: model parallel (tp·pp ranks, across
    the pipeline), the gradient statistics group (every rank with the distributed optimizer, else the
    model-parallel group), experts' model-parallel group (etp·ep·pp), every rank."""
    par = run.parallel
    world = par.tp * par.cp * par.dp * par.pp
    across = world if par.pp > 1 else par.tp
    model_parallel = Group(par.tp * par.pp, across)
    statistics = Group(world, world) if distributed_optimizer else model_parallel
    expert = Group(par.expert_tp * par.ep * par.pp, world if par.pp > 1 else par.expert_tp * par.ep)
    groups = dict(links.groups) | {
        MODEL_PARALLEL: model_parallel,
        STATISTICS: statistics,
        EXPERT_MODEL_PARALLEL: expert,
        WORLD: Group(world, world),
        PIPELINE: Group(par.pp, world if par.pp > 1 else 1),
    }
    return replace(links, groups=groups)


def scalar_all_reduce_seconds(group: Group, links: Links) -> float:
    """A few bytes all-reduced over *group*: latency only, 2(local−1) steps inside the node and
    2·⌈log2 nodes⌉ across nodes (NCCL's tree), the latter paying the inter-node latency as well."""
    if group.size <= 1:
        return 0.0
    return 2 * (links.in_node(group) - 1) * links.latency_s + scalar_across_nodes_seconds(group, links)


def scalar_across_nodes_seconds(group: Group, links: Links) -> float:
    """The part of a scalar all-reduce over *group* between its nodes: 2·⌈log2 nodes⌉ steps of NCCL's tree,
    each paying the inter-node latency as well (0 inside one node)."""
    nodes = math.ceil(group.size / links.in_node(group))
    across = 2 * math.ceil(math.log2(nodes)) if nodes > 1 else 0
    return across * (links.latency_s + links.inter_node_latency_s)


def scalar_broadcast_seconds(group: Group, links: Links) -> float:
    """A few bytes broadcast over *group* on NCCL's ring: g−1 steps, the nodes−1 between nodes paying
    the inter-node latency as well."""
    if group.size <= 1:
        return 0.0
    nodes = math.ceil(group.size / links.in_node(group))
    return (group.size - 1) * links.latency_s + (nodes - 1) * links.inter_node_latency_s


def weight_hash_seconds(hashed_bytes: float, host_boost_ghz: float, deterministic: bool = False) -> float:
    """The CPU's time to SHA-1 *hashed_bytes* on one thread at *host_boost_ghz* (0: the catalog's slowest
    stated host, `UNKNOWN_HOST_BOOST_GHZ`), at OpenSSL's `SHA1_CYCLES_PER_BYTE`; under *deterministic*
    (--deterministic-mode) the measured rest of the check's host work a parameter element
    (`DETERMINISTIC_HASH_EXTRA_S`, the same on DGX A100's and DGX H100's hosts in the CI's hybrid cases)."""
    ghz = host_boost_ghz or UNKNOWN_HOST_BOOST_GHZ
    extra = hashed_bytes / HASHED_BYTES * DETERMINISTIC_HASH_EXTRA_S if deterministic else 0.0
    return hashed_bytes * SHA1_CYCLES_PER_BYTE / (ghz * 1e9) + extra


def bookkeeping_seconds(
    work: Bookkeeping, links: Links, hbm_bytes_per_s: float, host_launch_us: float, host_boost_ghz: float = 0.0
) -> float:
    """The passes at the HBM rate, each scalar collective's latency, one launch per host sync, the
    weight-hash check's hashing on the host (*host_boost_ghz*): serial, the queue drained before each."""
    reduces = sum(scalar_all_reduce_seconds(links.groups[group], links) for group in work.all_reduces)
    reduces += sum(scalar_broadcast_seconds(links.groups[group], links) for group in work.broadcasts)
    hashing = (
        weight_hash_seconds(work.hashed_bytes, host_boost_ghz, work.hashed_deterministic) if work.hashed_bytes else 0.0
    )
    return work.pass_bytes / hbm_bytes_per_s + reduces + work.syncs * host_launch_us * 1e-6 + hashing
