"""torchtitan's Float8 with FSDP2's float8 all-gather: the step that precomputes the weights' scales.

With `quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp` (and the float8 all-gather)
torchtitan calls torchao's `precompute_float8_dynamic_scale_for_fsdp` on each model part after the
optimizer step (torchtitan v0.2.2 73a0e697 components/quantization/float8.py
`Float8LinearConverter.post_optimizer_hook`). torchao (float8/fsdp_utils.py, 36027d82d) takes the
inf-norm of every Float8Linear's local fp32 weight shard in one `torch._foreach_norm` (a read of the
shards) and stacks them into one fp32 tensor whose `clamp` runs one all-reduce over the weights'
mesh; the scales then follow on a few elements. The all-gathers of the next step cast with these
scales (`WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`). Not priced: without the
precompute each pre-all-gather takes its weight's amax and all-reduces it (`reduce_amax=True`) on
its own, a small all-reduce per weight and gather.
"""

from __future__ import annotations

from collections.abc import Iterable

from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import BodyKind, LayerKind
from ppb_core.model.params import float8_gathered_weights
from ppb_core.timing.comm import Links, collective_seconds
from ppb_core.timing.flops import ALL_REDUCE, Collective
from ppb_core.timing.kernels import Kernels

FP32_BYTES = 4


def precompute_scale_seconds(kinds: Iterable[LayerKind], setup: MemorySetup, links: Links, kernels: Kernels) -> float:
    """Seconds of one model part's scale precompute over its layers of *kinds* (module docstring):
    the read of its Float8 weights' fp32 shards, then one all-reduce of an fp32 amax a weight."""
    elements = tensors = 0
    for kind in kinds:
        if isinstance(kind, BodyKind):
            found, count = float8_gathered_weights(kind, setup.tp)
            elements, tensors = elements + found, tensors + count
    if not tensors:
        return 0.0
    shard = -(-elements // setup.data_group)
    reduce = collective_seconds(Collective(ALL_REDUCE, "dp", FP32_BYTES * tensors, "dp"), links)
    return kernels.memory_s(FP32_BYTES * shard) + reduce
