"""MindFormers: the SAPP/HyperParallel conventions (hyper-parallel's `_ppb.py` and MemEst) (MindFormers at fd4deebc).

MindFormers runs MindSpore's graph mode; what it keeps is what its recompute configuration does
not recompute, which is SAPP's switch vocabulary:

* `select_recompute` names ops to recompute by pattern (mindformers/models/utils.py,
  `LayerSetting.__init__`: the default patterns are the feed-forward's `mul` and `silu`, ppb's
  `ffAct`), `recompute` whole layers per stage (`LayerSetting._check_layer_rule`), each as a count
  of layers per (interleave, stage) cell.
* `select_comm_recompute` recomputes the communication ops after the norms (default pattern
  `.*\\.norm`, set with `add_prim_attr` in `LayerSetting._set_select_recompute`): without it the
  sequence-parallel all-gather's output is kept for the backward, which is ppb's kept tp buffer
  under the `gather` switch, and COMM/BOTH drop it.
* Communication workspaces are counted in each layer's "once" part, as the SAPP payload counts
  them (the balancer's `memory_parameter`).

These are `FrameworkRules`' answers, SAPP's figures, with one exception: where the run states
MindFormers' `parallel.enable_parallel_optimizer`, static memory follows MindSpore's optimizer
parallel (docs r2.4 `optimizer_parallel.md`: "the framework saves the parameters as minimal slices";
mindspore-ai/mindspore, mindspore/ccsrc/frontend/parallel: opt_param_mgr.cc at 7fa6e756,
tensor_layout.cc at 367dc859, parameter_manager.cc at 4ac3f804; step_parallel.cc at v2.4.0, MindFormers v1.3.0's
release, as the time model reads it, `iteration.mindspore_gather_bytes`: its pipeline condition, from 74a88bb0053,
holds in every release v2.3.0-v2.6.0, gradient accumulation or not): each weight at or above
`parallel_optimizer_threshold` KB whose first dimension divides is held as a 1/N slice over the
data-parallel group (N: `optimizer_weight_shard_size`, else dp x cp), in its own dtype (`param_init_type`),
with its optimizer states, the two fp32 moments and no master copy (`moment_bytes`); the
forward gathers it and the whole weight in the compute dtype stays until the layer's backward
(freed before the optimizer step); gradients are reduce-scattered into the slice, except the
accumulation buffer of a pipeline or gradient-accumulation run, whole unless
`gradient_accumulation_shard`. Without a pipeline the gather and the gradient it reduces take the
parameter's own dtype, and the layer's forward and backward hold its whole weights once more in it
(`parameter_working_bytes`). Without the statement, `parallel.zero` keeps SAPP's ZeRO levels
(bytes as MemEst counts them: a 16-bit parameter, optimizer states with their master copy).
"""

from __future__ import annotations

from ppb_core.memory.frameworks.base import FrameworkRules
from ppb_core.memory.setup import MemorySetup
from ppb_core.memory.static import StaticBytes, static_bytes
from ppb_core.model.geometry import kv_heads_per_rank, per_rank
from ppb_core.model.kinds import BodyKind, HeadKind, LayerKind, Moe, TailKind, vocab_rows
from ppb_core.model.params import LayerParams, norm_params

# the fp32 master copy that the optimizers' default state bytes count (run.py `OPTIMIZER_STATE_BYTES`)
MASTER_COPY_BYTES = 4
# a float32 logit: the models cast the head's logits to float32 before the loss
LOGIT_BYTES = 4

# One weight as MindSpore's optimizer parallel sees it: its elements on one tensor-parallel rank, its first
# dimension whole, and whether tensor parallelism splits that first dimension.
_Weight = tuple[int, int, bool]


def _body_weights(kind: BodyKind, tp: int) -> list[_Weight] | None:
    """A dense layer's matrices as MindFormers builds them (layers.py `Linear`: the weight is (out, in),
    `transpose_b` true; llama_transformer.py `LLamaAttention` wq/wk/wv column-parallel, wo row-parallel;
    llama_layer.py `LlamaFeedForward` w1/w3 column-, w2 row-parallel, a4dfb8219). None where ppb does not
    list the matrices (multi-latent attention, MoE): all the layer's elements but its norms are taken then."""
    att, mlp = kind.attention, kind.mlp
    if att.is_mla or isinstance(mlp, Moe):
        return None
    h, d = att.hidden_size, att.head_dim
    q, kv = att.num_heads * d, att.num_kv_heads * d
    q_rank, kv_rank = per_rank(att.num_heads, tp) * d, kv_heads_per_rank(att.num_kv_heads, tp) * d
    ff, ff_rank = mlp.intermediate_size, per_rank(mlp.intermediate_size, tp)
    weights: list[_Weight] = [(q_rank * h, q, True), (kv_rank * h, kv, True), (kv_rank * h, kv, True)]
    weights.append((h * q_rank, h, False))  # wo: (hidden, q), split on its second dimension
    weights += [(ff_rank * h, ff, True)] * (mlp.matrices - 1)  # w1 (and w3 where gated)
    weights.append((h * ff_rank, h, False))  # w2
    return weights


def _sharded(weight: _Weight, setup: MemorySetup, shard: int) -> bool:
    """Whether MindSpore shards the weight (opt_param_mgr.cc `OptParamMgrImpl::SplitParam`: not under
    `parallel_optimizer_threshold` KB of the whole parameter in its dtype; tensor_layout.cc
    `TensorLayout::GenerateOptShardSliceShape`: its first dimension divides by the shard count times the
    tensor-parallel split of that dimension; the commits in the module's docstring)."""
    elements, first, tp_split = weight
    whole_bytes = elements * (setup.tp if tp_split else 1) * setup.param_bytes
    if whole_bytes < setup.optimizer_threshold_kb * 1024:
        return False
    return first % (shard * (setup.tp if tp_split else 1)) == 0


def _split(params: LayerParams, kind: LayerKind | None, setup: MemorySetup, shard: int) -> tuple[int, int]:
    """(elements MindSpore shards, elements it keeps whole) of a layer's non-expert parameters.

    Norm scales and biases stay whole (below the threshold, and set `parallel_optimizer=False` by hand:
    llama_layer.py `LlamaRMSNorm`, layers.py `Linear` bias). The embedding table is sharded only under
    `model_config.parallel_optimizer` (llama.py `LlamaModel`, `LlamaEmbedding(parallel_optimizer=
    config.parallel_optimizer)`, LlamaConfig's default False). A tied output layer is the embedding's
    weight (llama.py `LlamaForCausalLM`), shared across stages, which `SplitParam` skips."""
    if isinstance(kind, BodyKind):
        weights = _body_weights(kind, setup.tp)
        if weights is None:
            whole = 2 * norm_params(kind.norm, kind.hidden_size)
            return params.non_expert - whole, whole
        sharded = sum(w[0] for w in weights if _sharded(w, setup, shard))
        return sharded, params.non_expert - sharded
    if isinstance(kind, (HeadKind, TailKind)):
        table = vocab_rows(kind, setup.tp) * kind.hidden_size
        holds = isinstance(kind, HeadKind) or (kind.has_output and not kind.tied and not kind.mtp_layers)
        shardable = setup.embedding_optimizer_shard if isinstance(kind, HeadKind) else not kind.tied
        weight = (table, kind.vocab_size, setup.tp > 1 and not kind.vocab_replicated)
        group = _shard_group(kind, setup, shard)
        if holds and shardable and _sharded(weight, setup, group) and table <= params.non_expert:
            return table, params.non_expert - table
        return 0, params.non_expert
    return params.non_expert, 0  # vision parts: not MindFormers' LLaMA; every element taken as sharded


def _shard_group(kind: LayerKind | None, setup: MemorySetup, shard: int) -> int:
    """Ranks MindSpore shards a layer's weights over: *shard* (the data-parallel group or
    `optimizer_weight_shard_size`), and for a vocabulary table whole on every TP rank (`vocab_emb_dp`) every rank
    holding it, dp x cp x tp (operator_info.cc `OperatorInfo::CreateGroupForOptShard`: the devices
    `GetDevicesByTensorMap` finds for the weight's tensor map, a `(1, 1)` strategy splitting it over none; an
    `optimizer_weight_shard_size` cuts that group into groups of its size)."""
    replicated = isinstance(kind, (HeadKind, TailKind)) and kind.vocab_replicated
    if not replicated or setup.optimizer_shard_size:
        return shard
    return shard * setup.tp


def optimizer_shards(
    params: LayerParams, kind: LayerKind | None, setup: MemorySetup
) -> tuple[LayerParams, LayerParams]:
    """(what MindSpore's optimizer parallel shards of a layer, what it keeps whole), each as the layer's elements.

    A sharded weight is gathered in the forward and its gradient reduce-scattered (step_parallel.cc
    `ApplyParallelOptOnParam` inserts the AllGather only for a parameter with an optimizer shard group); a whole
    one's gradient is all-reduced by its mirror op (`InsertMirrorOps`), nothing gathered. Which weights: `_split`.
    A group of one rank shards nothing."""
    shard = setup.optimizer_shard_size or setup.data_group
    expert_shard = setup.optimizer_shard_size or setup.expert_data_group
    sharded, whole = _split(params, kind, setup, shard)
    if _shard_group(kind, setup, shard) <= 1:
        sharded, whole = 0, params.non_expert
    expert = params.expert if expert_shard > 1 else 0
    return LayerParams(sharded, expert), LayerParams(whole, params.expert - expert)


def moment_bytes(setup: MemorySetup) -> int:
    """Optimizer-state bytes a held element beside the parameter itself: MindFormers' optimizers keep no master
    copy, the parameter (in `param_init_type`, `param_bytes`) is what they update in place, and their moments are
    fp32 whatever that dtype (mindformers/core/optim at v1.3.0 debac6a97 and v1.4.0-beta2 a4dfb8219:
    optim.py `FP32StateAdamWeightDecay` and `FusedCastAdamWeightDecay`, module-level `clone_state` with
    `dtype=mstype.float32`; `FusedAdamWeightDecay.clone_state`, `forced_dtype=mstype.float32`; adamw.py
    `AdamW.clone_state`, float32: `adam_m` and `adam_v` only). So the optimizer's default `state_bytes`, which
    counts a 4-byte master copy beside a 16-bit parameter (run.py `OPTIMIZER_STATE_BYTES`: Adam 12 = master 4 +
    moments 8), loses that copy: Adam 8. A stated `training.optimizer_state_bytes` is taken as stated."""
    if setup.state_bytes_stated:
        return setup.state_bytes
    return max(0, setup.state_bytes - MASTER_COPY_BYTES)


def _gathered(params: LayerParams, kind: LayerKind | None, setup: MemorySetup) -> int:
    """Elements of a layer's weights MindSpore's optimizer parallel gathers whole."""
    return optimizer_shards(params, kind, setup)[0].total


class MindFormersRules(FrameworkRules):
    name = "mindformers"

    def static(self, params: LayerParams, setup: MemorySetup, kind: LayerKind | None = None) -> StaticBytes:
        """SAPP's ZeRO levels, or MindSpore's optimizer parallel where the run states it."""
        if not setup.optimizer_parallel:
            return static_bytes(params, setup)
        shard = setup.optimizer_shard_size or setup.data_group
        expert_shard = setup.optimizer_shard_size or setup.expert_data_group
        sharded, whole = _split(params, kind, setup, shard)
        held = -(-sharded // _shard_group(kind, setup, shard)) + whole + -(-params.expert // expert_shard)
        every = params.non_expert + params.expert
        # the gradient of a parameter has its dtype; MindSpore reduce-scatters it into the shard in the backward
        # (the AllGather's backward), and keeps the accumulation buffer `accu_grads` whole unless
        # gradient_accumulation_shard (parameter_manager.cc `SetClonedTensorShapeForOptimizer`)
        gradients = every if setup.accumulates and not setup.accumulation_shard else held
        # the whole weight in the compute dtype is what the layer's backward reads, held from the forward to it
        # and freed before the optimizer step: under a pipeline the AllGather's output, placed after MindFormers'
        # `Linear` cast (step_parallel.cc v2.3.0-v2.4.x, `InsertAllGatherAfterCast`; parallel_preprocessor.cc from
        # v2.5.0; step_parallel_utils.cc `FindChildCastWithFP32ToFP16`); otherwise, accumulating or not, the cast
        # of the AllGather's output, as the gather then takes the parameter itself (both return nothing when
        # `pipeline_stage_split_num() <= 1`, 74a88bb0053, in every tag v2.3.0-v2.6.0), and Cast's backward reads
        # only its input's dtype (mindspore/ccsrc/frontend/expander/bprop/grad_ops/grad_array_ops.cc, `Cast`'s
        # `SetUnusedInputs({i0, i1, i2})`), so the gathered parameter-dtype copy is not kept. The parameter is held
        # in its own dtype and is the optimizer's master (`moment_bytes`). A sliced embedding table keeps nothing:
        # MindFormers' `LlamaEmbedding.construct` looks its rows up with a Gather of the parameter itself, no cast
        # (llama_layer.py, v1.3.0 debac6a97), and Gather's backward reads only the indices and the gradient
        # (mindspore/ops/grad/grad_array_ops.cc at v2.4.0, `REG_BPROP_BUILDER("Gather").SetUnusedInputs({i0,
        # i4})`): the gathered table is freed after the lookup (its forward transient, and the whole table's
        # gradient the backward reduce-scatters, are `parameter_working_bytes`'s)
        kept = not isinstance(kind, HeadKind)
        gathered = _gathered(params, kind, setup) * setup.dtype_bytes if kept else 0
        return StaticBytes(
            parameters=held,
            gradients=gradients,
            optimizer_states=held,
            parameter_bytes=held * setup.param_bytes,
            gradient_bytes=gradients * setup.param_bytes,
            optimizer_bytes=held * moment_bytes(setup),
            held_through_step_bytes=gathered,
        )

    def loss_bytes(
        self, kind: TailKind, params: LayerParams, setup: MemorySetup, before: LayerParams | None = None
    ) -> float:
        """SAPP's counts hold no loss transient; what a whole-vocabulary head (`vocab_emb_dp`, `kinds.vocab_rows`)
        holds beyond a vocabulary-parallel one's is added to them. Its logits are whole on every TP rank: the
        model's float32 Cast reads the 16-bit logits and writes every logit (DeepseekV2ForCausalLM / LlamaForCausalLM
        `construct`: `self.cast(logits, mstype.float32)`, no strategy, so on the whole vocabulary) before
        MindSpore's redistribution slices the loss's share; its backward the slice's gradient (StridedSliceGrad:
        every logit in float32, zeros beside the share) and the Cast back to 16 bits, both alive at once, where a
        vocabulary-parallel loss writes the 16-bit gradient of its share alone. Backward, the larger: N·(V·(4 + bc)
        - V/tp·bc), N the micro-batch's tokens on a rank."""
        if not (kind.has_output and kind.vocab_replicated and setup.tp > 1):
            return 0.0
        share, whole, bc = per_rank(kind.vocab_size, setup.tp), kind.vocab_size, setup.dtype_bytes
        return setup.tokens * (whole * (LOGIT_BYTES + bc) - share * bc)

    def parameter_working_bytes(
        self,
        params: LayerParams,
        setup: MemorySetup,
        node: str,
        gathered: int,
        before: LayerParams | None,
        after: LayerParams | None,
        kind: LayerKind | None = None,
        beside: tuple[str | None, str | None] = (None, None),
    ) -> float:
        """SAPP's, and where MindSpore gathers the parameter itself (optimizer parallel without a pipeline,
        accumulating or not: step_parallel.cc v2.3.0-v2.4.x, parallel_preprocessor.cc v2.5.0-v2.6.0,
        `InsertAllGatherOp`, as `iteration.mindspore_gather_bytes` prices it) the layer's gathered weights whole in
        the parameter's dtype: in the forward the AllGather's output until MindFormers' `Linear` casts it (layers.py
        `Linear.construct`, a4dfb8219), in the backward the cast-back gradient (`Cast`'s bprop, grad_array_ops.cc)
        that the AllGather's backward reduce-scatters, or accumulating adds into the whole `accu_grads`
        (grad_comm_ops.py v2.5.0, `_MiniStepAllGather`'s bprop: `assign_add(z, dout)`); one layer's: MindSpore
        fuses a fusion id's gathers and reduce-scatters into one op each, which holds its members' at once; not
        counted."""
        base = super().parameter_working_bytes(params, setup, node, gathered, before, after, kind, beside)
        if not setup.optimizer_parallel or setup.pp > 1:
            return base
        return base + _gathered(params, kind, setup) * setup.param_bytes
