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

Torch FSDP2 (`--use-torch-fsdp2`) wraps the model otherwise and keeps none of this (`RunConfig.megatron_fsdp`).
"""

from __future__ import annotations

from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import layer_params
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
