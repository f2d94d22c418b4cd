"""Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`): how much shorter a steady step is
than its forward and backward run one after the other.

In the combined schedule (megatron/core/pipeline_parallel/combined_1f1b.py, d98e8a64) each steady
forward of one micro-batch runs beside a backward of another, layer by layer
(megatron/core/models/common/model_chunk_schedule_plan.py `TransformerModelChunkSchedulePlan.run`:
forward layer i beside backward layer n−1−i; layers past the shorter chunk run alone). Within a
layer pair (`TransformerLayerSchedulePlan.run`) the submodules go to two streams in this order:

    comm stream:    combine_bwd | dispatch_fwd → dispatch_bwd | combine_fwd
    compute stream: pre_dispatch_fwd | mlp_bwd → mlp_bwd_dw → mlp_fwd | pre_dispatch_bwd

and each submodule of one micro-batch waits for the one before it (`ScheduleNode`: one CUDA event a
micro-batch and chunk, waited on before a submodule and recorded after it). The pre-dispatch part is
the attention, the MLP's norm, the router, the permutation and the shared experts
(fine_grained_callables.py `submodule_pre_dispatch_forward`); the MLP part the experts; the combine
part the all-to-all with the unpermutation and the residual add after it, on the comm stream
(`submodule_combine_forward`). A dense layer is all pre-dispatch. The experts' weight gradient is
part of their backward, which the dispatch's backward waits for; under `--delay-wgrad-compute`
(`timing.delay_wgrad_compute`) it runs after their input gradient on the compute stream without
holding up the dispatch's backward, and the pre-dispatch part's weight gradients after its input
gradients (`pair_step`).

`layer_segments` cuts a priced layer (`TimeModel.breakdown`, uncalibrated) into those parts, the
all-to-alls at their link time; `step_saving` runs the two streams over a step's layer pairs and
returns (forward + backward alone) − the step, where the all-to-alls that run beside compute take
their SMs from it (`Kernels.contention`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ppb_core.model.kinds import TailKind
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import Layer
from ppb_core.timing.comm import collective_seconds
from ppb_core.timing.flops import ALL_TO_ALL, COMM
from ppb_core.timing.pricer import TimeModel


@dataclass(frozen=True)
class Segments:
    """One layer's forward and backward as the combined 1F1B cuts them, in seconds."""

    pre_forward: float  # attention, norm, router, permutation, shared experts
    dispatch_forward: float
    mlp_forward: float  # the experts
    combine_forward: float  # the all-to-all, unpermutation and residual add (comm stream)
    combine_backward: float
    mlp_backward: float  # input gradient of the experts
    mlp_backward_dw: float  # their weight gradient
    dispatch_backward: float
    pre_backward: float
    forward_alone: float  # the layer's forward and backward as priced alone
    backward_alone: float
    # the pre-dispatch part's delayed weight gradients (attention, shared experts) under
    # --delay-wgrad-compute; 0 otherwise, where they are in `pre_backward`
    pre_backward_dw: float = 0.0

    @property
    def communication(self) -> float:
        return self.dispatch_forward + self.combine_forward + self.dispatch_backward + self.combine_backward


def _part(name: str, seen_dispatch: bool, seen_combine: bool) -> str:
    if name.endswith("dispatch"):
        return "dispatch"
    if name.endswith("combine"):
        return "combine"
    if "shared" in name or not seen_dispatch:
        return "pre"
    return "combine" if seen_combine else "mlp"


def layer_segments(
    times: TimeModel,
    layer: Layer,
    state: LayerType,
    switches: dict[str, int] | None = None,
    keep: Callable[[str], bool] | None = None,
    delay_wgrad: bool = False,
) -> Segments:
    """The layer's parts (seconds): each op's forward, and its backward with what recompute reruns of it,
    in the part of the layer it belongs to; the expert all-to-alls at their link time. *keep*: only the
    ops whose names it keeps (an MTP layer out of its TAIL, `mtp_segments`). *delay_wgrad*
    (`--delay-wgrad-compute`): the pre-dispatch part's weight gradients apart (`pre_backward_dw`): its
    TE linears' (attention's, the shared experts': models/common/utils.py `_BackwardDWWrapper`), not
    the router's (`router_gating_linear`, plain PyTorch autograd)."""
    ops = {op.name: op for op in times.ops(layer) if keep is None or keep(op.name)}
    has_dispatch = any(
        name.endswith("dispatch") and op.forward_comm is not None and op.forward_comm.kind == ALL_TO_ALL
        for name, op in ops.items()
    )
    forward = dict.fromkeys(("pre", "dispatch", "mlp", "combine"), 0.0)
    backward = dict.fromkeys(("pre", "pre_dw", "dispatch", "mlp", "mlp_dw", "combine"), 0.0)
    forward_alone = backward_alone = 0.0
    seen_dispatch = seen_combine = False
    for row in times.breakdown(layer, state, switches):
        if row.name not in ops:
            continue
        op = ops[row.name]
        if has_dispatch and row.name.endswith("dispatch"):
            seen_dispatch = True
        if has_dispatch and row.name.endswith("combine"):
            seen_combine = True
        part = _part(row.name, seen_dispatch and has_dispatch, seen_combine and has_dispatch)
        seconds = row.ms / 1e3
        if row.phase == "forward":
            forward_alone += seconds
        else:
            backward_alone += seconds
        if part in ("dispatch", "combine") and op.category == COMM and row.phase != "recompute":
            collective = op.forward_comm if row.phase == "forward" else op.backward_comm
            if collective is not None:
                seconds = collective_seconds(collective, times.links)
        if row.phase == "forward":
            forward[part] += seconds
        elif part == "mlp" and op.gemm is not None and row.phase == "backward":
            dgrad = times._phase_s(op, "dgrad")
            backward["mlp"] += dgrad
            backward["mlp_dw"] += max(0.0, seconds - dgrad)
        elif delay_wgrad and part == "pre" and _delayed(row.name, op) and row.phase == "backward":
            dgrad = times._phase_s(op, "dgrad")
            backward["pre"] += dgrad
            backward["pre_dw"] += max(0.0, seconds - dgrad)
        else:
            backward[part] += seconds
    return Segments(
        forward["pre"],
        forward["dispatch"],
        forward["mlp"],
        forward["combine"],
        backward["combine"],
        backward["mlp"],
        backward["mlp_dw"],
        backward["dispatch"],
        backward["pre"],
        forward_alone,
        backward_alone,
        backward["pre_dw"],
    )


def _delayed(name: str, op) -> bool:
    """A TE linear whose weight gradient `--delay-wgrad-compute` defers: a GEMM with weights, not the router."""
    return op.gemm is not None and op.weight_elements > 0 and not name.endswith("router")


def mtp_segments(times: TimeModel, layer: Layer, state: LayerType, delay_wgrad: bool = False) -> list[Segments]:
    """Each MTP layer a TAIL part runs, cut like a decoder layer: the combined schedule builds a layer
    plan for each (model_chunk_schedule_plan.py `_build_layer_schedule_plan(model.mtp)`, after the
    decoder's), whose pre-dispatch node wraps the MTP's embedding, norms and projection around its
    layer's (common/fine_grained_callables.py `build_mtp_layer_callables`, d98e8a64). Its own final norm
    (`mtp_post_process`) and its head's output layer and loss (the chunk's post-process) are left out:
    they run alone, as the embedding and the loss do."""
    kind = layer.kind
    if not isinstance(kind, TailKind) or not kind.has_mtp_modules:
        return []
    return [
        layer_segments(
            times,
            layer,
            state,
            keep=lambda name, p=f"mtp{index}.": name.startswith(p) and not name.startswith(p + "output."),
            delay_wgrad=delay_wgrad,
        )
        for index in range(kind.mtp_layers)
    ]


@dataclass
class _Streams:
    compute: float = 0.0  # when each stream is free
    comm: float = 0.0
    forward: float = 0.0  # when the forward micro-batch's last submodule ended
    backward: float = 0.0

    def run(self, stream: str, chain: str, seconds: float) -> None:
        """A submodule of *chain*'s micro-batch on *stream*: after the stream's previous work and its
        micro-batch's previous submodule."""
        start = max(getattr(self, stream), getattr(self, chain))
        setattr(self, stream, start + seconds)
        setattr(self, chain, start + seconds)


def pair_step(streams: _Streams, f: Segments, b: Segments, delay_wgrad: bool = False) -> None:
    """One forward layer beside one backward layer, in `TransformerLayerSchedulePlan.run`'s order.

    Without `--delay-wgrad-compute` (Megatron's default) the experts' weight gradients are computed in
    `b_layer.mlp.backward` with their input gradients (TE's `backward_dw` does nothing:
    extensions/transformer_engine.py `TEGroupedLinear.backward_dw`), so the dispatch's backward waits
    for both; with it, `mlp.backward_dw()` runs them on the compute stream after the dispatch's
    backward is queued, and the pre-dispatch part's (attention's, shared experts') last, after its
    input gradients (`pre_dispatch_computation.backward_dw()`)."""
    streams.run("comm", "backward", b.combine_backward)
    streams.run("compute", "forward", f.pre_forward)
    if delay_wgrad:
        streams.run("compute", "backward", b.mlp_backward)
    else:
        streams.run("compute", "backward", b.mlp_backward + b.mlp_backward_dw)
    streams.run("comm", "forward", f.dispatch_forward)
    if delay_wgrad:
        streams.compute += b.mlp_backward_dw  # mlp_bwd_dw: the compute stream only
    streams.run("comm", "backward", b.dispatch_backward)
    streams.run("compute", "forward", f.mlp_forward)
    streams.run("comm", "forward", f.combine_forward)
    streams.run("compute", "backward", b.pre_backward)
    streams.compute += b.pre_backward_dw  # 0 without --delay-wgrad-compute


def direction_contention(
    forwards: Sequence[Segments], backwards: Sequence[Segments], dispatch: float, combine: float
) -> float:
    """The share of compute the all-to-alls take, weighted by their seconds in each direction: *dispatch*
    for the dispatch and the combine's backward (the dispatch kernel), *combine* for the combine and the
    dispatch's backward (the combine kernel; fused HybridEP's differ, `ppb_core.timing.flex.flex_sms`)."""
    pairs = min(len(forwards), len(backwards))
    dispatching = sum(f.dispatch_forward for f in forwards[:pairs]) + sum(b.combine_backward for b in backwards[:pairs])
    combining = sum(f.combine_forward for f in forwards[:pairs]) + sum(b.dispatch_backward for b in backwards[:pairs])
    if dispatching + combining <= 0:
        return dispatch
    return (dispatch * dispatching + combine * combining) / (dispatching + combining)


def step_saving(
    forwards: Sequence[Segments], backwards: Sequence[Segments], contention: float = 0.0, delay_wgrad: bool = False
) -> float:
    """Seconds a combined step saves over its forward chunk's layers (forward order) and its backward
    chunk's layers (backward order: last layer first) run one after the other: layer i of each runs
    beside layer i of the other; what one has beyond the other runs alone and saves nothing. The
    all-to-all time that runs beside compute slows it by *contention*."""
    pairs = min(len(forwards), len(backwards))
    if not pairs:
        return 0.0
    streams = _Streams()
    for f, b in zip(forwards[:pairs], backwards[:pairs], strict=True):
        pair_step(streams, f, b, delay_wgrad)
    step = max(streams.compute, streams.comm, streams.forward, streams.backward)
    alone = sum(f.forward_alone for f in forwards[:pairs]) + sum(b.backward_alone for b in backwards[:pairs])
    computing = sum(
        f.pre_forward + f.mlp_forward + b.mlp_backward + b.mlp_backward_dw + b.pre_backward + b.pre_backward_dw
        for f, b in zip(forwards[:pairs], backwards[:pairs], strict=True)
    )
    # the forward layer's all-to-alls and the backward layer's: what the comm stream ran (`pair_step`)
    communication = sum(
        f.dispatch_forward + f.combine_forward + b.combine_backward + b.dispatch_backward
        for f, b in zip(forwards[:pairs], backwards[:pairs], strict=True)
    )
    beside = max(0.0, communication - max(0.0, step - computing))
    return max(0.0, alone - step - contention * beside)
