"""Megatron-FSDP (`--use-megatron-fsdp`, `optim_grads_params`): the modules outside its FSDP units stay gathered.

Megatron-LM at d98e8a64. Only `TransformerLayer`, `MoETransformerLayer` and `MambaLayer` are FSDP units
(megatron/core/distributed/fsdp/mcore_fsdp_adapter.py `FullyShardedDataParallel.__init__`, the default
`fsdp_unit_modules` under any sharding strategy but `no_shard`). `MegatronFSDP._register_fsdp_hooks`
(fsdp/src/megatron_fsdp/megatron_fsdp.py) releases a unit's gathered bucket after its forward and after its
backward; a module outside the units (the embedding, the output layer, the final norm, an MTP layer's norms
and projection) gathers its own parameters in its pre-forward hook and registers no release. The gather
allocates a whole bucket beside the rank's shard (param_and_grad_buffer.py `DataParallelBuffer.fetch_bucket`
→ `allocate_bucket_storage` of `bucket_index.size`, filled by `AllGatherPipeline.async_bucket_gather`'s
all-gather of `get_shard_from_local_buffer()`), so such a module holds its shard and a whole 16-bit copy.
At the end of each iteration `finish_grad_sync` calls `synchronize_param_gather` (`overlap_param_gather` is
forced on under `optim_grads_params`, `MegatronFSDP.__init__`), whose `AllGatherPipeline.reset(
preserve_non_fsdp_units=True)` keeps the non-unit buckets (commit 378d81fbd3, 2026-05-30, which raised
deepseek_proxy_fsdp_ep2_fsdp2_ep_overlap's golden after-step memory from 414.2 to 513.0 MB): the copy is
held at every moment, the optimizer step included; before that commit (`framework_release` older than
core_v0.18.0) `reset()` released every bucket there, so the copy is held from the forward to the gradient
reduction, not at the step (`StaticBytes.held_through_step_bytes`). An MTP layer's inner `TransformerLayer`
(multi_token_prediction.py `MultiTokenPredictionLayer.mtp_model_layer`) is a unit like the decoder's.

In a module's backward (Megatron-LM febd25e3fb and d98e8a64) a unit's gathered parameters are that same whole
bucket, not the other ranks' shards beside this one's: `async_bucket_gather` all-gathers the persistent shard into
a fresh `fetch_bucket` allocation of `bucket_index.size`. Its gradients go to a whole bucket too: megatron_fsdp.py
`_grad_acc` reads `param.main_grad`, whose getter (param_and_grad_buffer.py `main_grad_getter`) calls
`fetch_bucket(dtype=grad_comm_dtype)` on the sharded main-gradient buffer, an unsharded allocation in the
gradient-communication dtype (the main gradients' where unset, `training.grad_bytes`), freed by
`GradReducePipeline`'s `free_up_grad_bucket` once its reduce-scatter has run. Every module does this, a non-unit
one too (its parameters' `register_post_accumulate_grad_hook`). Not modelled: how many more buckets are alive
where a backward starts or ends. The all-gather prefetch runs to `suggested_AG_prefetch_size` elements and the
reduce-scatter queue keeps buckets up to `suggested_RS_queue_capacity`, half and all of
`suggested_communication_unit_size` (`MegatronFSDP._init_fsdp_param_and_grad_buffer`: at least 1e9 elements
unless --suggested-communication-unit-size says otherwise). That depends on a module's place in the stage's
backward, which a layer's description does not carry; ppb keeps SAPP's *gathered* units and the layer's own
gradient bucket.

Torch FSDP2 (`--use-torch-fsdp2`) wraps the model otherwise and keeps none of this (`RunConfig.megatron_fsdp`).
"""

from __future__ import annotations

from dataclasses import replace

from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import layer_params, unsharded_gradient_bytes
from ppb_core.model.kinds import BodyKind, LayerKind, TailKind
from ppb_core.model.params import LayerParams, body_params


def non_unit_params(kind: LayerKind, setup: MemorySetup) -> LayerParams:
    """Elements (per TP/EP rank) of the layer's modules outside Megatron-FSDP's units: none of a decoder
    layer; all of the HEAD; the TAIL's but its MTP layers' inner transformer layers."""
    if isinstance(kind, BodyKind):
        return LayerParams()
    found = layer_params(kind, setup)
    if isinstance(kind, TailKind) and kind.has_mtp_modules:
        assert kind.mtp_body is not None
        units = body_params(kind.mtp_body, setup.tp, setup.ep, setup.etp)
        count = kind.mtp_layers
        found = LayerParams(found.non_expert - count * units.non_expert, found.expert - count * units.expert)
    return found


def preserved_bytes(kind: LayerKind, setup: MemorySetup) -> int:
    """The whole 16-bit copy of the non-unit modules Megatron-FSDP keeps gathered beside their shard, at
    every moment (module docstring); 0 unless Megatron-FSDP shards the parameters."""
    if not setup.megatron_fsdp or setup.shard_level < 3:
        return 0
    return non_unit_params(kind, setup).total * setup.dtype_bytes


def backward_working_bytes(params: LayerParams, kind: LayerKind, setup: MemorySetup, gathered: int) -> float:
    """What a module's backward holds of parameters and gradients under Megatron-FSDP (module docstring):
    *gathered* whole 16-bit buckets of the layer's units (its non-unit modules are gathered at every moment
    already, counted in static memory), and the whole gradient bucket of all its parameters."""
    outside = non_unit_params(kind, setup)
    units = replace(params, non_expert=params.non_expert - outside.non_expert, expert=params.expert - outside.expert)
    return gathered * units.gathered_bytes(setup.dtype_bytes) + unsharded_gradient_bytes(params, setup)
