"""What the memory formulas read of a run: the sharding geometry, and what only memory needs.

Formulas take a `MemorySetup` rather than a `RunConfig` so that tests can state a setup by hand
and the memo of a `MemoryModel` can key on plain values. The shape of a micro-batch and one
device's split (`ppb_core.model.geometry.Geometry`) are shared with the time model; this adds
the data-parallel and pipeline degrees, the byte widths of gradients and optimizer states, the
ZeRO level and the buffer rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ppb_core.config.run import DTYPE_BYTES, FrameworkRelease, RunConfig
from ppb_core.model.geometry import Geometry
from ppb_core.model.params import LayerParams

# How the buffers of one layer add up (docs/memory.md, "Communication buffers"):
# "layered": transient workspaces are used one at a time, tensors kept for the backward add up;
# "reference": hyper-parallel's MemEst expression max(dp, tp, cp) + ep over whole groups
# (`comm_expr`, sapp_nd/memory_estimation/evaluators/comm.py).
BUFFER_RULES: tuple[str, ...] = ("layered", "reference")
# --moe-router-dtype's bytes per element
ROUTER_BYTES = {"fp32": 4, "fp64": 8}


@dataclass(frozen=True)
class MemorySetup(Geometry):
    grad_bytes: int = 4
    state_bytes: int = 12  # optimizer states per parameter (fp32 master copy and moments)
    state_bytes_stated: bool = False  # the run config states them (training.optimizer_state_bytes)
    dp: int = 1
    pp: int = 1
    shard_level: int = 1  # ZeRO: 1 optimizer states, 2 and gradients, 3 (or FSDP) and parameters
    megatron_fsdp: bool = False  # Megatron-FSDP shards (frameworks/megatron_fsdp.py), not torch FSDP2
    buffer_rule: str = "layered"
    fp8_cache: str = "none"  # none | linear | deepseek (ppb_core.memory.precision)
    compute_capability: float = 0.0  # the device's (CUDA); 0: not a CUDA GPU, or not stated
    sm_count: int = 0  # the device's streaming multiprocessors (0: not stated)
    framework: str = "mindformers"  # whose rules apply (ppb_core.memory.frameworks); the formulas alone here
    combined_1f1b: bool = False  # Megatron's --overlap-moe-expert-parallel-comm (ppb_core.memory.combined)
    router_bytes: int = 0  # the router's probabilities (--moe-router-dtype); 0: dtype_bytes
    permute_fusion: bool = False  # Megatron's --moe-permute-fusion (Transformer Engine's row map)
    moe_grouped_gemm: bool = True  # Megatron's --moe-grouped-gemm (TEGroupedMLP; else SequentialMLP)
    rope_fusion: bool = True  # Megatron's rope fusion (--no-rope-fusion turns it off)
    transformer_impl: str = "transformer_engine"  # Megatron's --transformer-impl: transformer_engine | local
    moe_dispatcher: str = "alltoall"  # Megatron's token dispatcher: alltoall | allgather | deepep | hybridep | ncclep
    devices_per_node: int = 8  # the NVLink domain (parallel.devices_per_node): frameworks/flex_buffers.py
    flex_num_sms: int = 0  # Megatron's --moe-flex-dispatcher-num-sms (0: unset): DeepEP's buffer channels
    cublas_workspace_bytes: int = 0  # per cuBLAS handle as CUBLAS_WORKSPACE_CONFIG sets it; 0: PyTorch's default
    # Megatron's --moe-paged-stash: its device buffer's factor over the balanced rows (moe_paged_stash_buffer_size_
    # factor_cuda); 0: no stash (`ppb_core.memory.activations.stashed_rows`)
    paged_stash_factor: float = 0.0
    cross_entropy_fusion: bool = False  # Megatron's --cross-entropy-loss-fusion (timing.cross_entropy_fusion)
    cross_entropy_impl: str = "native"  # its --cross-entropy-fusion-impl: native (jit_fuser functions) | te
    # Megatron's --deterministic-mode: torch.use_deterministic_algorithms(True) (training/arguments.py)
    torch_deterministic: bool = False
    # Megatron's Transformer Engine layers in FP8 (timing.matmul_dtype fp8): the recipe, "" otherwise
    fp8_recipe: str = ""
    fp8_param_gather: bool = False  # Megatron's --fp8-param-gather (frameworks/te_fp8.py)
    # Megatron's --tp-comm-overlap: TE's userbuffers GEMMs (sequence parallelism, timing.overlap.tp above 0)
    userbuffers: bool = False
    layer_wise_param_layout: bool = True  # Megatron's layer-wise optimizer's layout (frameworks/layer_wise.py)
    dataloader_mask: bool = False  # Megatron's data loader builds the causal mask (timing.attention_mask_in_dataloader)
    defer_embedding_wgrad: bool = False  # Megatron's --defer-embedding-wgrad-compute
    # Megatron's gradient accumulation fusion under its DDP or Megatron-FSDP: TE's cached dummy wgrads
    # (frameworks/dummy_wgrad.py)
    wgrad_fusion_dummies: bool = False
    # the Megatron-Core, Transformer Engine and PyTorch releases run (framework_release): rules that changed since
    # are priced as that code held them (ppb_core.config.releases)
    release: FrameworkRelease = field(default_factory=FrameworkRelease)
    optimizer_instances: int = 1  # Megatron's --num-distributed-optimizer-instances
    masked_softmax_fusion: bool = True  # Megatron's masked-softmax fusion (--no-masked-softmax-fusion: off)
    softmax_in_fp32: bool = False  # Megatron's --attention-softmax-in-fp32
    wgrad_deferral_limit: int = 0  # Megatron's --wgrad-deferral-limit (0: every micro-batch deferred)
    micro_batches: int = 1  # training.micro_batches (how many the deferral holds, `drain_buffers`)
    # TransformerEngine's deterministic attention: NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 or --deterministic-mode
    # (`TimingOptions.attention_deterministic`)
    deterministic: bool = False
    te_attention_backend: str = "auto"  # Megatron's --attention-backend: auto | flash | fused (`te_flash`)
    # Megatron's fine-grained activation offloading (training.offload_modules, frameworks/offload.py)
    optimizer: str = "adam"  # training.optimizer (Megatron's Muon keeps one moment a matrix element)
    offload_modules: tuple[str, ...] = ()
    min_offloaded_elements: int = 1024 * 1024  # --min-offloaded-tensor-size
    # Megatron's --cpu-offloading-num-layers: TE's CPU offloading of the first N decoder layers (te_offload.py)
    cpu_offload_layers: int = 0
    cuda_graph_modules: tuple[str, ...] | None = None  # Megatron's graphed scopes (None: no CUDA graphs)
    compiled_blocks: bool = False  # torchtitan's blocks under torch.compile (timing.torch_compile)
    compiled_loss: bool = False  # torchtitan's loss under torch.compile (timing.compiled_loss)
    fp8_fsdp_all_gather: bool = (
        False  # torchtitan's FSDP gathers Float8 linear weights in float8 (timing.fp8_fsdp_all_gather)
    )
    # torchtitan copies K and V out to every query head before SDPA (timing.repeat_kv; model.py `repeat_kv`
    # until ff0829c10): what its context-parallel ring gathers and exchanges (frameworks/ring.py)
    repeat_kv: bool = False
    # MindSpore's optimizer parallel (framework mindformers, parallel.enable_parallel_optimizer true;
    # frameworks/mindformers.py): the weights' shard group (0: the data-parallel group), the size under which
    # a weight stays whole (KB, of `param_bytes` per element), whether accumulated gradients are sharded,
    # whether the embedding table is, and whether gradients accumulate over micro-batches at all
    optimizer_parallel: bool = False
    optimizer_shard_size: int = 0
    optimizer_threshold_kb: int = 64
    accumulation_shard: bool = False
    embedding_optimizer_shard: bool = False
    accumulates: bool = False
    param_bytes: int = 4  # the parameters' own dtype (MindFormers' param_init_type, timing.param_dtype)
    fsdp_units: str = "split"  # torchtitan's FSDP2 units by version (timing.fsdp_units, frameworks/torchtitan.py)
    # under `root` units, set by MemoryModel: the embedding's and the final norm with the output layer's
    # parameters (the root unit) and the last block's (not resharded after the forward)
    fsdp_root: tuple[LayerParams, LayerParams, LayerParams] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.buffer_rule not in BUFFER_RULES:
            raise ValueError(f"buffer_rule must be one of {BUFFER_RULES}, got {self.buffer_rule!r}")

    @classmethod
    def from_run(cls, run: RunConfig, buffer_rule: str = "layered") -> MemorySetup:
        par, train = run.parallel, run.training
        return cls(
            **Geometry.run_fields(run),
            grad_bytes=train.grad_bytes,
            state_bytes=train.state_bytes,
            state_bytes_stated=train.optimizer_state_bytes is not None,
            dp=par.dp,
            pp=par.pp,
            shard_level=run.shard_level,
            megatron_fsdp=run.megatron_fsdp,
            buffer_rule=buffer_rule,
            fp8_cache=train.fp8_cache,
            compute_capability=run.device.profile().compute_capability,
            sm_count=run.device.profile().sm_count,
            framework=run.framework,
            combined_1f1b=par.overlap_moe_expert_parallel_comm,
            router_bytes=ROUTER_BYTES.get(train.moe.router_dtype or "", 0),
            permute_fusion=train.moe.permute_fusion,
            moe_grouped_gemm=train.moe.grouped_gemm,
            rope_fusion=train.rope_fusion and not run.yarn_unfused_rope,  # the unfused steps keep cos and sin
            transformer_impl=run.timing.transformer_impl,
            moe_dispatcher=run.timing.moe_dispatcher,
            devices_per_node=par.devices_per_node,
            flex_num_sms=run.timing.moe_flex_dispatcher_num_sms or 0,
            cublas_workspace_bytes=run.memory.cublas_workspace_bytes,
            paged_stash_factor=(
                run.timing.moe_paged_stash_buffer_size_factor_cuda if run.timing.moe_paged_stash else 0.0
            ),
            cross_entropy_fusion=run.timing.cross_entropy_fusion,
            cross_entropy_impl=run.timing.cross_entropy_fusion_impl,
            torch_deterministic=run.timing.deterministic,
            dataloader_mask=run.framework == "megatron" and run.timing.attention_mask_in_dataloader,
            fp8_recipe=run.timing.fp8_recipe if _te_fp8(run) else "",
            fp8_param_gather=run.timing.fp8_param_gather,
            userbuffers=run.framework == "megatron"
            and run.parallel.sequence_parallel
            and run.parallel.tp > 1
            and run.timing.overlap.tp > 0,
            layer_wise_param_layout=train.layer_wise_param_layout,
            defer_embedding_wgrad=train.defer_embedding_wgrad_compute,
            wgrad_fusion_dummies=run.framework == "megatron"
            and run.timing.gradient_accumulation_fusion
            and (run.shard_level < 3 or run.megatron_fsdp),
            release=run.framework_release,
            optimizer_instances=par.distributed_optimizer_instances,
            masked_softmax_fusion=run.timing.masked_softmax_fusion,
            softmax_in_fp32=run.softmax_in_fp32,
            wgrad_deferral_limit=train.wgrad_deferral_limit,
            micro_batches=train.micro_batches,
            deterministic=run.timing.attention_deterministic,
            te_attention_backend=run.te_attention_backend_run if run.framework == "megatron" else "auto",
            optimizer=train.optimizer,
            offload_modules=tuple(train.offload_modules),
            min_offloaded_elements=train.min_offloaded_tensor_size,
            cpu_offload_layers=train.cpu_offloading_num_layers,
            cuda_graph_modules=None if run.timing.cuda_graph_impl == "none" else tuple(run.timing.cuda_graph_modules),
            compiled_blocks=run.timing.torch_compile,
            compiled_loss=run.timing.compiled_loss,
            fp8_fsdp_all_gather=run.timing.fp8_fsdp_all_gather,
            repeat_kv=run.framework == "torchtitan" and run.timing.repeat_kv,
            fsdp_units=run.timing.fsdp_units if run.framework == "torchtitan" else "split",
            **_optimizer_parallel(run),
        )

    @property
    def te_flash(self) -> bool:
        """Whether the attention runs TransformerEngine's FlashAttention (flash-attn) rather than cuDNN's
        FusedAttention: `--attention-backend flash` on any CUDA GPU, or auto below sm90, where TE's
        `get_attention_backend` keeps FlashAttention when both qualify and drops cuDNN's for a deterministic
        backward (transformer_engine/pytorch/attention/dot_product_attention/utils.py, d0067d0d; Megatron's
        language_module.py `_set_attention_backend` sets NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0 under flash,
        d98e8a64)."""
        if self.transformer_impl != "transformer_engine" or not self.flash_attention:
            return False
        return te_flash_attention(self.compute_capability, self.te_attention_backend)

    @property
    def router_element_bytes(self) -> int:
        """Bytes of one router logit or probability: --moe-router-dtype's, else the training dtype's."""
        return self.router_bytes or self.dtype_bytes

    @property
    def data_group(self) -> int:
        """Ranks that hold the same non-expert parameters: ZeRO shards over dp·cp."""
        return self.dp * self.cp

    @property
    def expert_data_group(self) -> int:
        """Ranks that hold the same expert parameters: dp·cp·tp/(ep·etp)."""
        return self.dp * self.cp * self.tp // (self.ep * self.etp)


def te_flash_attention(compute_capability: float, backend: str) -> bool:
    """Whether TransformerEngine's fused attention core runs its FlashAttention (flash-attn) rather than cuDNN's
    FusedAttention, by Megatron's --attention-backend (*backend*) and the GPU: flash-attn runs from sm80 on
    ("Disabling FlashAttention 2 for compute capability < sm80"); `flash` sets NVTE_FLASH_ATTN=1,
    NVTE_FUSED_ATTN=0 (Megatron language_module.py `_set_attention_backend`, d98e8a64); `auto` leaves TE's
    `get_attention_backend` to choose, which keeps FlashAttention when both qualify below sm90 and gives
    FusedAttention the preference from sm90 on ("Select FusedAttention for performance",
    transformer_engine/pytorch/attention/dot_product_attention/utils.py, d0067d0d)."""
    if compute_capability < 8.0:
        return False
    return backend == "flash" or (backend == "auto" and compute_capability < 9.0)


def _te_fp8(run: RunConfig) -> bool:
    """Whether Megatron's Transformer Engine layers train in FP8 (frameworks/te_fp8.py)."""
    timing = run.timing
    return (
        run.framework == "megatron" and timing.matmul_dtype == "fp8" and timing.transformer_impl == "transformer_engine"
    )


def _optimizer_parallel(run: RunConfig) -> dict[str, object]:
    """MindSpore's optimizer-parallel settings as the memory rules read them (frameworks/mindformers.py)."""
    if not run.optimizer_parallel:
        return {}
    par, train = run.parallel, run.training
    config = par.parallel_optimizer_config
    size = config.optimizer_weight_shard_size if config is not None else -1
    return {
        "optimizer_parallel": True,
        "optimizer_shard_size": 0 if size == -1 else size,
        "optimizer_threshold_kb": config.parallel_optimizer_threshold if config is not None else 64,
        "accumulation_shard": config is not None and config.gradient_accumulation_shard,
        "embedding_optimizer_shard": par.embedding_parallel_optimizer,
        # MFPipelineWithLossScaleCell (pp > 1) and gradient accumulation keep `accu_grads`
        # (mindformers/wrapper/wrapper.py, a4dfb8219: `self.weights.clone(prefix="accu_grads")`)
        "accumulates": par.pp > 1 or train.micro_batches > 1,
        "param_bytes": DTYPE_BYTES[run.timing.param_dtype or train.dtype],
    }
