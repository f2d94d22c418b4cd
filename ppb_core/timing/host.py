"""The host on the critical path: where the GPU waits for the CPU to launch its kernels.

The host normally runs ahead of the GPU, so a kernel's launch costs nothing, unless a pass's kernels
take the GPU less time than the host takes to launch them (`host_excess_s`: Megatron's small layers;
launches counted by `ppb_core.timing.launches`). It also falls behind after it waits for the device:
Megatron-Core's alltoall token dispatcher (megatron/core/transformer/moe/token_dispatcher.py
`MoEAlltoAllTokenDispatcher`, d98e8a64) copies the routing's counts to the host
(`_maybe_dtoh_and_synchronize` at `cuda_dtoh_point`, "before_permutation_1": `tokens_per_expert`,
the all-to-all's `input_splits` / `output_splits` moved to the CPU on a side stream) and, dropless,
waits for that copy (`d2h_event.synchronize()`) just before the expert all-to-all
(`cuda_sync_point` "before_ep_alltoall" with EP or TP, "before_finish" without), since the
all-to-all's split sizes must be known on the host; with a capacity factor the output size is
synchronized before the permutation already ("before_permutation_1"). When the host resumes the
GPU holds only what was launched between the copy and the wait (the permutation), then waits for
each next kernel's launch until the host is ahead again (`dispatcher_wait_s`, up to the next
layer's synchronization).

Megatron's default allgather dispatcher (`MoEAllGatherTokenDispatcher.dispatch_postprocess`, same
commit) synchronizes twice, whatever the routing: after its all-gathers it copies its local experts'
token counts to the host (`tokens_per_expert = local_map.sum(dim=0).long().cpu()`, a blocking copy:
`num_out_tokens` must be a host integer) before the permutation, and the probabilities' boolean
`masked_select` after it waits again for the selected count (a nonzero's device-to-host copy). The
GPU holds nothing when the host resumes from either: the permutation's launches are all exposed
but its own kernels, and the experts' launches start from an idle GPU.

DeepEP's dispatch (Megatron's flex dispatcher, fused_a2a.py `FusedDispatch.forward`, d98e8a64: "the
CPU will wait for GPU's signal to arrive") synchronizes inside the dispatch call: DeepEP's
`Buffer::intranode_dispatch` / `internode_dispatch` (deepseek-ai/DeepEP dd758ca, csrc/legacy/buffer.hpp)
launch `notify_dispatch` behind the previous work and spin on host-mapped counters until it has written
the received token counts ("Synchronize total received tokens and tokens per expert"; Megatron passes no
`num_worst_tokens`, the one way around it). The GPU has drained when the host resumes; the dispatch's
and everything after it wait for their launches from an idle GPU. Its backward reuses the handle's
counts (cached mode): no wait. HybridEP and NCCL EP, the flex dispatcher's other backends, do the same
dropless (`ppb_core.timing.flex`): HybridEP's `dispatch_with_permute` with no `num_permuted_tokens` reads
the permuted row count on the host (fused_a2a.py `hybrid_ep_dispatch`: "causes a D2H synchronization"),
NCCL EP's eager mode sizes its receive buffer from the received count.

The sinkhorn router synchronizes too (router.py `sinkhorn_load_balancing`, moe_utils.py `sinkhorn`:
its `while error > tol` loop reads a GPU tensor each iteration, `ppb_core.timing.router`): the host
waits there for the GPU, then launches the rest of the routing and the dispatch from an idle GPU. So does
GPT-OSS's quick-GEGLU between fc1 and its fused kernel (fused_bias_geglu.py `weighted_bias_quick_geglu_impl`,
Megatron-LM 2edffadb52 and 0d8e0714cd: `torch.tensor(linear_offset, device=...)`, a blocking host-to-device
copy, PyTorch's `memcpy_and_sync`: `flops._glu_clamp`), in the forward and again where `moe_act` reruns it
in the backward (`rerun_sync_wait_s`).

Each launch costs the host `DeviceProfile.host_kernel_us` where measured (DGX H100 and H200 80.9 µs,
DGX A100 112.3: the median over Megatron CI's host-bound dense cases, bench/host_derive.py; a plain
PyTorch op 0.4 of that, `launches.PLAIN_OP_SHARE`), else
`timing.host_launch_us`: Holistic Trace Analysis
(facebookresearch/HolisticTraceAnalysis, docs/source/features/cuda_kernel_launch_stats.rst) finds the
CPU side of a kernel launch "usually between 5-20 microseconds"; the default takes its lower bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ppb_core.timing.flex import FLEX_DISPATCHERS
from ppb_core.timing.flops import Op


def kernels(op: Op) -> int:
    """Kernel launches of an op's forward: a grouped GEMM one per group, anything else one."""
    return op.gemm[3] if op.gemm is not None else 1


def launch_wait_s(queued_s: float, after: Sequence[tuple[float, float]], launch_s: float) -> float:
    """Seconds the GPU waits for the host after a host-device synchronization: *queued_s* of work were
    launched before it, then the ops *after* it, each (kernels, seconds), launch by launch, the k-th
    kernel launched k·launch_s after the wait ends. The GPU then ends at max over k of (k·launch_s +
    the kernels from k on) instead of *queued_s* + all of them: the wait is the most any launch comes
    after the GPU would have reached it. A fractional count (a fused GEMM's share) launches its share."""
    wait = 0.0
    ready = queued_s  # when the GPU would reach the next kernel, the host not in the way
    launched = 0.0
    for count, seconds in after:
        if count <= 0:  # GPU work with no launch of its own (a CUDA graph's, `ppb_core.timing.graphs`)
            ready += seconds
            continue
        whole = int(count)
        steps = [1.0] * whole + ([count - whole] if count > whole else [])
        for step in steps:
            launched += step
            wait = max(wait, launched * launch_s - ready)
            ready += seconds * step / count
    return wait


def host_excess_s(device_s: float, launches: float, launch_s: float) -> float:
    """What a pass without a synchronization takes beyond its GPU work when the host launches its
    kernels more slowly than the GPU runs them: launches × launch_s − device_s, at least 0."""
    return max(0.0, launches * launch_s - device_s)


def dispatcher_wait_s(
    ops: Sequence[Op],
    forward_s: Mapping[str, float],
    launch_s: float,
    dropless: bool,
    launches: Mapping[str, float] | None = None,
    wrap: bool = False,
    dispatcher: str = "alltoall",
    copy_after_permute: bool = False,
) -> float:
    """The GPU's wait for the host after a MoE layer's synchronizations (`dispatcher_waits`), in total."""
    waits = dispatcher_waits(ops, forward_s, launch_s, dropless, launches, wrap, dispatcher, copy_after_permute)
    return sum(wait for wait, _ in waits)


def dispatcher_waits(
    ops: Sequence[Op],
    forward_s: Mapping[str, float],
    launch_s: float,
    dropless: bool,
    launches: Mapping[str, float] | None = None,
    wrap: bool = False,
    dispatcher: str = "alltoall",
    copy_after_permute: bool = False,
) -> list[tuple[float, bool]]:
    """The GPU's wait for the host after the alltoall dispatcher's synchronization in a MoE layer's
    forward (0 for a layer without one): dropless, the permutation runs while the host resumes and
    the kernels from the all-to-all on follow; with a capacity factor the wait comes before the
    permutation. *launches*: each op's forward launches (`ppb_core.timing.launches`; default
    `kernels`). *wrap*: the host goes on to the next layer of the same kind up to its own
    synchronization (the segment between two), not only to this layer's end. An op on the way that
    synchronizes (`Op.syncs`: the sinkhorn router, GPT-OSS's clamp) ends a piece: the host resumes after
    it from an idle GPU up to the next synchronization. *dispatcher* allgather: synchronized before the
    permutation and again at its end; deepep, hybridep, ncclep (flex): at the dispatch, from an idle GPU
    (module docstring). *copy_after_permute*: the alltoall dispatcher copies the counts to the host after
    the permutation (`cuda_dtoh_point` "before_ep_alltoall", a TE graph holding `moe_preprocess`): dropless,
    the wait then outlasts the permutation too and the GPU holds nothing when the host resumes.

    Each piece's wait, and whether it follows a synchronization inside the layer's experts (an `Op.syncs` op
    after the dispatcher's: GPT-OSS's clamp), which a combined 1F1B step does not hide (`HostWaits`)."""
    names = [op.name for op in ops]
    permute = next(
        (i for i, name in enumerate(names) if name.endswith("permute") and not name.endswith("unpermute")), None
    )
    if permute is None:
        return []
    allgather = dispatcher == "allgather"
    start = permute + 1 if dropless and not allgather else permute
    # dropless, the permutation launched between the copy and the wait runs while the host resumes; copied
    # after it, it has run before the wait ends (and the wrapped next layer's counts before its wait)
    overlapped = dropless and not allgather and not copy_after_permute
    queued = forward_s[names[permute]] if overlapped else 0.0
    if dispatcher in FLEX_DISPATCHERS:  # the host waits inside the dispatch for its counts: nothing queued after
        dispatch = next((i for i, name in enumerate(names) if name.rsplit(".", 1)[-1] == "dispatch"), None)
        if dispatch is None:
            return []
        if permute < dispatch:
            # the flex dispatcher permutes the received rows after the dispatch (token_dispatcher.py
            # `MoEFlexTokenDispatcher.dispatch_postprocess`, cf39a4ddcf and d98e8a64: DeepEP's
            # `get_permuted_hidden_states_by_experts`, Megatron's multihot map and TE's permute; HybridEP's permute
            # kernel inside `dispatch_with_permute`, after its count's copy): its launches follow the wait
            ops = [*ops[:permute], *ops[permute + 1 : dispatch + 1], ops[permute], *ops[dispatch + 1 :]]
            dispatch -= 1
        start, queued, permute = dispatch, 0.0, -1
    own = len(ops) - start  # the layer's ops from the dispatcher's synchronization on
    segment = [(op, forward_s[op.name]) for op in ops[start:]]
    if wrap:
        # the next layer's ops up to its synchronization; dropless, its permutation is launched here but
        # runs while the host waits there (that wait's queued work), so none of its seconds count here
        segment += [
            (op, 0.0 if overlapped and i == permute else forward_s[op.name]) for i, op in enumerate(ops[:start])
        ]

    def count(op: Op) -> float:
        return launches[op.name] if launches is not None else kernels(op)

    # an op that synchronizes after its launches (`Op.syncs`: sinkhorn's loop, the quick-GEGLU's offset copy)
    # ends a piece: the host waits there and resumes from an idle GPU
    pieces: list[list[tuple[float, float]]] = [[]]
    in_experts = [False]
    for i, (op, seconds) in enumerate(segment):
        pieces[-1].append((count(op), seconds))
        if op.syncs:
            pieces.append([])
            in_experts.append(i < own)
    if allgather and pieces[0]:  # the permutation's own piece, then from an idle GPU again
        pieces[:1] = [pieces[0][:1], pieces[0][1:]]
        in_experts[:1] = [False, False]
        queued = 0.0
    return [
        (launch_wait_s(queued if i == 0 else 0.0, piece, launch_s), after)
        for i, (piece, after) in enumerate(zip(pieces, in_experts, strict=True))
    ]


def rerun_sync_wait_s(
    ops: Sequence[Op],
    rerun: Sequence[str],
    forward_s: Mapping[str, float],
    backward_s: Mapping[str, float],
    launches: Mapping[str, tuple[float, float]],
    launch_s: float,
) -> float:
    """The GPU's wait for the host after a rerun op that synchronizes (`Op.syncs`; a rerun dispatch:
    `rerun_dispatch_wait_s`), e.g. the quick-GEGLU offset's copy when `moe_act` reruns the clamp.
    Megatron reruns a `CheckpointWithoutOutput` function from a hook on its consumer's gradient function
    (tensor_parallel/random.py `discard_output_and_register_recompute`, 2edffadb52): when the backward reaches
    the op after the checkpointed ones. The host then waits for the backward queued so far and launches onto
    an idle GPU the rest of the rerun (forward launches and seconds), the backward of that op and of every op
    before it in the layer, then the previous layer's backward up to its own rerun (the ops after that op, in
    reverse), launch by launch (`launch_wait_s`). 0 without such an op."""
    names = [op.name for op in ops]
    again = set(rerun)
    synced = next((i for i, op in enumerate(ops) if op.syncs and op.name in again), None)
    if synced is None or names[synced].endswith("permute"):
        return 0.0
    consumer = next((i for i in range(synced + 1, len(ops)) if names[i] not in again), len(ops))
    rest = [(launches[name][0], forward_s[name]) for name in names[synced + 1 : consumer]]
    backward = [(launches[name][1], backward_s.get(name, 0.0)) for name in reversed(names[: consumer + 1])]
    previous = [(launches[name][1], backward_s.get(name, 0.0)) for name in reversed(names[consumer + 1 :])]
    return launch_wait_s(0.0, rest + backward + previous, launch_s)


def rerun_dispatch_wait_s(
    ops: Sequence[Op],
    rerun: Sequence[str],
    forward_s: Mapping[str, float],
    backward_s: Mapping[str, float],
    launches: Mapping[str, tuple[float, float]],
    launch_s: float,
    dispatcher: str,
    dropless: bool,
    copy_after_permute: bool = False,
) -> float:
    """The GPU's wait for the host after a rerun dispatch's synchronizations (0 without one): Megatron's
    checkpoint replays the layer's checkpointed forward in the backward (tensor_parallel/random.py
    `CheckpointFunction.backward`, d98e8a64: the forward's Python called again, then `torch.autograd.backward`
    on its outputs), so the dispatcher synchronizes again (`dispatcher_waits`) and the host then launches, from
    there: the rest of the rerun (forward launches and seconds), the backward of every op of the layer (those
    outside the checkpoint follow its backward: autograd reaches them after), then the previous layer's rerun up
    to its own synchronization. The forward's wait is not the rerun's: it is set against the next layer's
    forward, which the backward does not run (a slower op there would shorten the backward)."""
    again = set(rerun)
    replayed = [op for op in ops if op.name in again]
    # the backward's ops as ops of their own (no synchronization, no dispatcher name), last op first
    reverse = [dataclasses.replace(op, name=f"{op.name} backward", syncs=0) for op in reversed(ops)]
    seconds = {
        **{op.name: forward_s[op.name] for op in replayed},
        **{f"{op.name} backward": backward_s.get(op.name, 0.0) for op in ops},
    }
    counts = {
        **{op.name: launches[op.name][0] for op in replayed},
        **{f"{op.name} backward": launches[op.name][1] for op in ops},
    }
    # `dispatcher_waits` wraps what precedes the synchronization (the previous layer's, rerun) after the rest
    waits = dispatcher_waits(
        replayed + reverse, seconds, launch_s, dropless, counts, True, dispatcher, copy_after_permute
    )
    return sum(wait for wait, _ in waits)


@dataclass(frozen=True)
class HostWaits:
    """A layer's seconds with the host on its critical path (`layer_host_waits`): what its forward and its
    backward take beyond the GPU's work, the dispatcher's part of the forward's (what a combined 1F1B step
    hides, the backward layer's experts queued on the compute stream; not what follows a synchronization
    inside the experts, which drains that stream: GPT-OSS's clamp), and the host's time to launch the
    forward's and the backward's kernels (with what the backward reruns)."""

    forward: float = 0.0
    backward: float = 0.0
    dispatcher: float = 0.0
    launch_forward: float = 0.0
    launch_backward: float = 0.0


def layer_host_waits(
    ops: Sequence[Op],
    forward_s: Mapping[str, float],
    launches: Mapping[str, tuple[float, float]],
    rerun: Sequence[str],
    device_s: tuple[float, float, float],
    launch_s: float,
    dispatcher: str | None,
    dropless: bool,
    copy_after_permute: bool = False,
    backward_s: Mapping[str, float] | None = None,
    rerun_launches: float = 0.0,
) -> HostWaits:
    """A layer's waits for the host. The forward and the plain backward each take at least their
    launches (*launches*: each op's forward and backward, `ppb_core.timing.launches`) × *launch_s*
    against their GPU work (*device_s*: forward, plain backward, recompute); after a Megatron token
    dispatcher's synchronization (*dispatcher*: alltoall, allgather or deepep; None: a layer without
    one) the forward's wait is instead the launches from there to the next layer's, launch by launch.
    What the backward reruns first (*rerun*) counts as GPU work of the backward and its launches as the
    backward's (the host issues them again); a rerun dispatch waits again, from its synchronization over
    the backward's own launches (`rerun_dispatch_wait_s`). Both count in the host's time of the backward
    (`launch_backward`, what a combined step cannot beat). *copy_after_permute*: `dispatcher_wait_s`'s. A
    rerun op that synchronizes (`Op.syncs`, not a dispatch) waits too (`rerun_sync_wait_s`); both with each
    op's backward seconds *backward_s*. *rerun_launches*: what the rerun launches beyond its ops' forward
    counts (a collective re-sent in fewer calls, `Op.recompute_comm`; `CheckpointWithoutOutput`'s restore
    copies, `checkpoint_copies`)."""
    wait = hidden = 0.0
    if dispatcher:
        forward_launches = {name: count[0] for name, count in launches.items()}
        waits = dispatcher_waits(
            ops,
            forward_s,
            launch_s,
            dropless,
            forward_launches,
            wrap=True,
            dispatcher=dispatcher,
            copy_after_permute=copy_after_permute,
        )
        wait = sum(piece for piece, _ in waits)
        hidden = sum(piece for piece, after_experts in waits if not after_experts)
    launched_forward = sum(count[0] for count in launches.values())
    launched_backward = sum(count[1] for count in launches.values())
    launched_again = sum(launches.get(name, (1.0, 0.0))[0] for name in rerun) + rerun_launches
    forward = wait if wait else host_excess_s(device_s[0], launched_forward, launch_s)
    # The backward reruns its checkpointed ops first (Megatron's tensor_parallel.random
    # `CheckpointFunction.backward` / `CheckpointWithoutOutput.recompute`, d98e8a64: the forward's Python
    # called again), so the host launches them again beside the backward's own kernels: the pass takes at
    # least both launch counts, against the GPU work of both. A rerun dispatch synchronizes again and
    # the GPU idles after it until the host is ahead (`again`, over the rerun's rest and the backward's
    # launches: `rerun_dispatch_wait_s`): the host's launches, the rerun's all of them, are then set against
    # the GPU's work and that idle time, so a rerun dispatch never costs less than a rerun that stops short
    # of it.
    if dispatcher and any(name.endswith("permute") and not name.endswith("unpermute") for name in rerun):
        # a rerun dispatch's pieces end at every synchronizing op it replays too (`dispatcher_waits`)
        again = rerun_dispatch_wait_s(
            ops, rerun, forward_s, backward_s or {}, launches, launch_s, dispatcher, dropless, copy_after_permute
        )
    else:
        again = rerun_sync_wait_s(ops, rerun, forward_s, backward_s or {}, launches, launch_s)
    backward = again + host_excess_s(device_s[1] + device_s[2] + again, launched_backward + launched_again, launch_s)
    return HostWaits(
        forward, backward, hidden, launched_forward * launch_s, (launched_backward + launched_again) * launch_s
    )
