"""Per-op FLOPs, HBM bytes and collectives of a layer, for one micro-batch on one device.

A layer is a tuple of `Op`s in forward order. Each op produces one tensor, named after the op.
`switch` is the recompute switch governing that tensor as the memory model counts it
(`ppb_core.memory.activations`): at 0 in a selective layer the tensor is dropped after the
forward and the op runs again in the backward. `transient` marks a tensor nothing keeps (its
consumer's backward does not need it): it is rebuilt whenever a recomputed op needs it as input.
Every other tensor is kept whatever the switches. docs/timing.md states, switch by switch, what
a recompute re-runs.

Backward FLOPs are twice the forward for matmuls (input and weight gradients); FlashAttention's
backward re-forms the scores inside its kernel, 2.5 times its forward. `layer_flops` counts one
device's matmul FLOPs; model FLOPs per iteration (Megatron-LM's count) are in `model_flops`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ppb_core.config.run import DTYPE_BYTES, RunConfig
from ppb_core.memory.frameworks.torchtitan import op_policy_saves, saves_all_to_all
from ppb_core.memory.setup import ROUTER_BYTES
from ppb_core.model.geometry import Geometry, kv_heads_per_rank, per_rank
from ppb_core.model.kinds import (
    MTP_PART,
    NORM_PART,
    OUTPUT_PART,
    BodyKind,
    EncoderBodyKind,
    HeadKind,
    LayerKind,
    Mlp,
    Moe,
    PatchEmbedKind,
    ProjectorKind,
    TailKind,
    vocab_rows,
)
from ppb_core.model.switches import LayerType
from ppb_core.timing.flex import (
    FLEX_DISPATCHERS,
    HYBRIDEP_SMS_ACROSS,
    HYBRIDEP_SMS_ONE_DOMAIN,
    flex_sms,
    hybridep_ib_rates,
    hybridep_rates,
    in_kernel_permutation,
    ranks_reached,
)
from ppb_core.timing.fp8_attention import CAST_LAUNCHES, cast_bytes
from ppb_core.timing.fused_experts import (
    BIAS_LAUNCHES,
    FC1_LAUNCHES,
    FC2_LAUNCHES,
    bias_gradient_bytes,
    dglu_epilogue_bytes,
    glu_epilogue_bytes,
)
from ppb_core.timing.kernels import EAGER_TRAFFIC
from ppb_core.timing.ring import FP32_BYTES, STEPPED, merge_bytes
from ppb_core.timing.router import RouterSetting, router_launches

MATMUL, MEMORY, COMM = "matmul", "memory", "comm"
BOOL_BYTES = 1  # a routing map's cell
STATS_BYTES = 4  # fp32 softmax statistics, router probabilities and the loss's softmax
MASK_BYTES = 1  # dropout masks
INDEX_BYTES = 8  # int64 token ids


def main_grad_passes(deepspeed_bf16_optimizer: bool) -> int:
    """Passes over the main (fp32) gradient's elements when a 16-bit weight gradient is added into it
    outside the GEMM, each micro-batch. Megatron's DDP hook (distributed_data_parallel.py
    `_make_backward_post_hook`: `param.main_grad.add_(param.grad.data)`) reads and writes it: 2.
    DeepSpeed's BF16_Optimizer (deepspeed/runtime/bf16_optimizer.py `update_hp_grads` at 93e9307d, run
    after every micro-batch's backward by pipe/engine.py `_exec_backward_pass`, the last stage's through
    `BF16_Optimizer.backward`): `hp_grad.data.add_(lp.grad.data.to(hp_grad.dtype))` first writes an fp32
    copy of the 16-bit gradient, which the add reads beside the fp32 gradient it reads and writes: 4.
    The 16-bit gradient is read once either way."""
    return 4 if deepspeed_bf16_optimizer else 2


# Collectives and the groups they run over (sizes and placement: `ppb_core.timing.comm`).
ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, ALL_TO_ALL, P2P = (
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "p2p",
)


# `Collective.method` of a collective run as one kernel over NVLink (HybridEP's routing-map all-gather).
ONE_SHOT = "one_shot"


@dataclass(frozen=True)
class Collective:
    """One collective: *payload_bytes* is the whole tensor per device (the gathered tensor of an
    all-gather or reduce-scatter, the reduced buffer, the all-to-all's local buffer, or the total
    a ring sends). *overlap* names the `Overlap` setting that hides it behind *partner*'s compute."""

    kind: str
    group: str  # tp | cp | ep | etp | tp_ep (expert TP × EP)
    payload_bytes: float
    overlap: str
    # (op name, phase): the op's forward, its whole backward, or one half of it (dgrad, wgrad).
    partner: tuple[str, str] | None = None
    # All-to-all: the bytes that leave the node, when fewer than the payload's share for remote
    # peers (a dispatcher that sends a token once per destination node); None: that share.
    inter_node_bytes: float | None = None
    # How TransformerEngine's userbuffers overlap runs it beside its partner GEMM under Megatron's
    # --tp-comm-overlap (`ppb_core.timing.userbuffers`): "ring_exchange" or "pipeline"; `ONE_SHOT`: one
    # kernel writing every peer's slice over NVLink at once (`comm.one_shot_seconds`) where the group sits in
    # one NVLink domain, a ring across; None: the generic overlap share.
    method: str | None = None
    # Ring attention (`ppb_core.timing.ring`): the payload moves as this many equal exchanges, each
    # beside one ring step of the attention core (its flash ops' time over cp), where an exchange
    # longer than its step shows; 0: beside the whole partner.
    exchanges: int = 0
    # The separate NCCL calls the framework makes for this payload (e.g. Megatron's alltoall dispatcher
    # sends the tokens and their probabilities in two all-to-alls): each pays its steps' latency and
    # is one kernel launch.
    calls: int = 1
    # SMs its kernels take from compute running beside it, where the framework sets them (the flex
    # dispatcher's backends, `ppb_core.timing.flex.flex_sms`); 0: the device's NCCL share (`Kernels.contention`).
    sms: int = 0
    # All-to-all: the backend's measured algorithm bandwidth within one NVLink domain, every row a rank receives
    # over its kernel's time (HybridEP's, `ppb_core.timing.flex.hybridep_rates`), bytes/s; 0: the links' rate.
    algorithm_bytes_per_s: float = 0.0
    # All-to-all across nodes: the backend's measured rate for a byte leaving a node (HybridEP's on H100,
    # `ppb_core.timing.flex.hybridep_ib_rates`), bytes/s; 0: the links' NIC rate.
    inter_node_bytes_per_s: float = 0.0
    # All-to-all by a flex dispatcher's own kernels (DeepEP, HybridEP, NCCL EP), not NCCL's grouped sends and
    # receives: NCCL's measured all-to-all share (`DeviceProfile.nccl_alltoall_shares`) is not theirs.
    flex_backend: bool = False


@dataclass(frozen=True)
class Op:
    name: str
    block: str  # attention | mlp | moe | embedding | output | mtp<i>…
    category: str  # matmul | memory | comm
    switch: str | None = None
    transient: bool = False
    inputs: tuple[str, ...] = ()
    flops: float = 0.0  # forward
    bytes: float = 0.0  # forward HBM traffic
    backward_flops: float = 0.0
    backward_bytes: float = 0.0
    forward_comm: Collective | None = None
    backward_comm: Collective | None = None
    # How a collective re-sent in the backward (its switch at 0) is hidden; None: as in the forward.
    recompute_comm: Collective | None = None
    # A matmul's shape, priced by `ppb_core.timing.kernels`: (rows per group, k, n, groups, fused n),
    # the forward an m×k by k×n product per group; its backward the input gradient (m×n by n×k) and
    # the weight gradient (k×m by m×n). Where the framework runs this product as n columns of one
    # wider GEMM (Megatron's fused QKV projection), *fused n* is that GEMM's width and the op costs
    # its share n / fused n of it.
    gemm: tuple[float, float, float, int, float] | None = None
    # Where the framework runs this op's columns as separate linears, each its own GEMM forward, dgrad and
    # wgrad at its own width (torchtitan's wq and wk in `qk_proj`, wv in `v_proj`, w1 and w3 in `mlp_in`:
    # model.py `Attention` and `FeedForward`, three and two `nn.Linear`s): those widths, summing to n, priced
    # each at its own waves and fixed time (`TimeModel._gemm_pass_s`); (): one GEMM (its share of the fused).
    linears: tuple[float, ...] = ()
    # A flash-attention kernel: ((sequence, head) pairs, queries per sequence, mean keys per query,
    # head size of the scores, 1 under the causal mask else 0).
    attention: tuple[float, float, float, float, float] | None = None
    # Whether that kernel applies attention dropout (its mask drawn inside the kernel; priced by
    # `Kernels.attention_dropout_cost`).
    attention_dropout: bool = False
    # That kernel's sliding window, keys a query attends to (0: none; `Kernels.attention_efficiency`).
    attention_window: int = 0
    # What the bytes count: one fused kernel. A framework running this op as several eager kernels
    # moves more (`ppb_core.timing.kernels.EAGER_TRAFFIC`): "norm", "activation" or "rope".
    fusion: str | None = None
    # PyTorch eager element-wise kernels over `torch.chunk` halves of a row (views that are not contiguous),
    # at the HBM share such kernels measure (`ppb_core.timing.kernels.STRIDED_EAGER_SHARE`), not at a fused
    # kernel's: GPT-OSS's clamp (`_glu_clamp`).
    strided: bool = False
    # The part of its (forward, backward) bytes PyTorch's eager element-wise kernels move where an operand is not
    # contiguous but the op as a whole is not `strided`: a broadcast operand (stride 0: a bias row, a column of
    # routing probabilities, rotary's cos and sin) or a `chunk` half. TensorIterator vectorizes only when every
    # operand is contiguous; otherwise it runs `launch_legacy_kernel` over an offset calculator, one element a
    # thread step (torch 2.13 aten/src/ATen/native/cuda/CUDALoops.cuh `gpu_kernel_impl` and
    # `gpu_kernel_impl_nocast`: `if (contiguous) launch_vectorized_kernel ... else launch_legacy_kernel`), the
    # path `kernels.STRIDED_EAGER_SHARE` measures: priced at that share, the rest as the op's other bytes.
    strided_bytes: tuple[float, float] = (0.0, 0.0)
    # A matmul's memory-bound passes outside its GEMM kernel, (forward, backward) HBM bytes: a bias
    # added after the product, its gradient reduced from the output gradient (`_bias_passes`).
    side_bytes: tuple[float, float] = (0.0, 0.0)
    # The kernels those passes take (forward, backward), where not one each (`ppb_core.timing.launches`).
    side_kernels: tuple[float, float] = (1.0, 1.0)
    # A matmul's weight elements on this device (0: a product of two activations, attention's BMMs):
    # what a framework accumulating its weight gradient outside the GEMM adds into the main gradient.
    weight_elements: float = 0.0
    # Whether FP8 training (`timing.matmul_dtype: fp8`) runs this GEMM in FP8. TransformerEngine's
    # modules do under its fp8_autocast; Megatron-Core's output layer is its own ColumnParallelLinear
    # (megatron/core/models/gpt/gpt_model.py at 0d8e0714cd, NeMo 25.11's Megatron-LM, and at core_v0.14.0),
    # a 16-bit matmul, and the router's gating is `router_gating_linear` in the router dtype
    # (megatron/core/transformer/moe/router.py, `TopKRouter.gating`). DeepSeek-V3 keeps "the output
    # head, MoE gating modules" in their original precision too (its report, §3.3.1).
    fp8: bool = True
    # Kernels this op runs each way where it is several PyTorch ops priced as one, counted where the op
    # is built (e.g. Megatron's allgather dispatcher, `_allgather_dispatch`); None: the generic rules of
    # `ppb_core.timing.launches`.
    launches: tuple[float, float] | None = None
    # Where the framework runs this op once per local expert, one module after another (Megatron's
    # `SequentialMLP`, `sequential_experts`): that many times, each run its own kernels at its expert's
    # rows (a GEMM's `groups` priced as that many separate GEMMs); 0: one kernel (a grouped GEMM).
    sequential: int = 0
    # Parameters beside the op's GEMM weight whose gradient Megatron's DDP hook adds into its main gradient
    # in the backward, one kernel each (`param.main_grad.add_(param.grad.data)`: distributed_data_parallel.py
    # `_make_backward_post_hook`, 2edffadb52 and d98e8a64; TE returns a bias's gradient, it never accumulates
    # it into `main_grad`), counted where the dense layers the host medians come from have none: the routed
    # experts' biases (GPT-OSS: fc1's and fc2's, one a local expert each) and the router's bias.
    grad_adds: float = 0.0
    # Host synchronizations in its forward under Megatron, after its launches (the sinkhorn router's loop
    # tests, `timing.router`; the quick-GEGLU offset's blocking copy, `_glu_clamp`); a rerun syncs again
    syncs: int = 0
    # A flash op under ring context parallelism run as the framework's cp calls, one per ring step,
    # each at its own shape (`ppb_core.timing.ring`); 0: one kernel over every key.
    ring: int = 0
    # ...whose calls are the ring's ("p2p", `ring.last_rank_steps` against `ring.first_rank_steps`, the slower
    # each step) or TransformerEngine's all-gather CP's two
    # calls a pass ("all_gather", `ring.all_gather_steps`; `ring` then holds cp)
    ring_steps: str = "p2p"
    # An unfused attention core's pass over its materialized scores (its batched products, softmax and
    # dropout): the keys a score row holds and the scores' head size, at which its HBM share is read
    # (`Kernels.score_memory_s`); 0 keys: not such a pass.
    score_keys: float = 0.0
    score_head_dim: float = 128.0
    # A GEMM whose TransformerEngine linear runs the norm that writes its input (Megatron's TE spec,
    # gpt_layer_specs.py at d98e8a64 and 0d8e0714cd: linear_qkv and a dense MLP's linear_fc1 are
    # TELayerNormColumnParallelLinear, MLA's up-projections too under qk_layernorm), which can quantize
    # the output or take its amax (`ppb_core.timing.launches.norm_fed`). An MoE layer's pre_mlp_layernorm,
    # MLA's input_layernorm (before its two down-projections) and MTP's enorm and hnorm are norm modules of
    # their own: the linear after them quantizes a 16-bit input.
    norm_input: bool = False
    # TransformerEngine's quantize kernels (TE's FP8 attention's casts, `fp8_attention_casts`): priced at their
    # measured share of HBM where the device states one for the recipe (`TimeModel._quantize_s`)
    te_quantize: bool = False
    # A GEMM whose (input, output gradient) the kernel before it wrote already quantized in its epilogue (TE's
    # fused grouped MLP, `ppb_core.timing.fused_experts`): no cast of its own for that operand (`_cast_bytes`)
    prequantized: tuple[bool, bool] = (False, False)
    # A grouped GEMM run as one persistent kernel over every group (TE's fused grouped MLP's CuTe DSL kernels):
    # none of TE's per-stream rounds of one cuBLAS GEMM an expert (`TimeModel._grouped_rounds`)
    persistent_grouped: bool = False


def expert_fp8_pads(run: RunConfig) -> int:
    """TEGroupedMLP's `Fp8Padding` calls before its grouped GEMMs under FP8 (experts.py `TEGroupedMLP.forward`,
    Megatron-LM 0d8e0714cd and core_v0.17.0: `self.quantization_padding(...)` on the permuted rows, and on
    their probabilities from `releases.CHANGES["experts_weight_probs"]`; TE module/fp8_padding.py, v2.9 and
    v2.14: one `tex.fused_multi_row_padding` kernel a call, the backward one `fused_multi_row_unpadding`;
    the output's `Fp8Unpadding` the reverse). They copy only where an expert's row count is not a multiple of
    the alignment (16, MXFP8 32): dropless routing, forced balance included (random logits, moe_utils.py
    `RandomSTE`), leaves the counts unaligned unless the dispatcher pads them: HybridEP's and NCCL EP's
    dispatch (`pad_multiple`, token_dispatcher.py `_HybridEPManager.dispatch`, 0d8e0714cd on) and DeepEP's
    permutation from `releases.CHANGES["deepep_permute_pads"]`. Megatron's --moe-router-padding-for-fp8
    (off in Megatron-Bridge's Qwen3 recipes) is not modelled, nor the allgather dispatcher's padding (its
    experts are built by `_allgather_dispatch`). 0: none."""
    if not (
        run.framework == "megatron"
        and run.timing.transformer_impl == "transformer_engine"
        and run.timing.matmul_dtype == "fp8"
        and run.training.moe.grouped_gemm
    ):
        return 0
    dispatcher = run.timing.moe_dispatcher
    if dispatcher not in ("alltoall", "deepep"):  # the flex backends pad; allgather's table builds its experts apart
        return 0
    if dispatcher == "deepep" and run.framework_release.holds("deepep_permute_pads"):
        return 0
    return 2 if run.framework_release.holds("experts_weight_probs") else 1


def mindformers_moev2(run: RunConfig) -> bool:
    """Whether a MindFormers MoE runs as MoEV2 does without sequence parallelism (mindformers/modules/transformer/
    moe.py `MoEV2.construct` and `ffn_forward`, 2388c729a, the commit of the DeepSeek-V2 card's figure, and
    `_ffn_forward` at a4dfb8219): a capacity (`use_gmm` off; MoEV3 is dropless, `etp: 1`), experts split over
    model_parallel (llama_layer.py `LlamaFeedForward.shard`, expert_num > 1: w1/w3 `(ep, mp, 1)`, w2 `(ep, 1, mp)`,
    so etp is tp), `use_seq_parallel` off. Its tokens are whole on every model-parallel rank (the norm's
    `(dp, 1, 1)`): each rank routes the micro-batch, gathers it into the (expert, capacity) slots
    (`TopkRouterV2.dispatch`) and all-to-alls that whole tensor over `expert_parallel` (the reshape to
    `(dp_moe, ep, E, n, h)` then `transpose_5dim_ep2`'s `(dp_moe, 1, ep, 1, 1)`: MindSpore's redistribution
    moves the axis the slice is split on with one AllToAll of the rank's slice under `enable_alltoall`,
    mindspore-ai/mindspore frontend/parallel/tensor_layout/redistribution_operator_infer.cc
    `InferPermuteByAxis`, stored 9eb43866); `group_wise_a2a` (MoEConfig default False, "converting part of
    intercommunication into intra communication") would slice the capacity over mp first and is not priced.
    Under `use_seq_parallel` a4dfb8219's `_ffn_forward_sq` runs instead (not read: priced as before).

    At model_parallel 1 the same code runs, whatever `use_seq_parallel` says: each rank routes its own micro-batch
    through `TopkRouterV2.dispatch` into the (expert, capacity) slots (`calculate_expert_capacity_v2`, rounded
    to a multiple of mp = 1), one AllToAll over `expert_parallel` (the data-parallel ranks `dp // ep` groups
    of them: `dp_moe`), the experts at `(ep, 1, 1)` and `TopkRouterV2.combine`'s concat, Gather and weighted
    sum back (`_ffn_forward_sq` at mp 1 makes the same single AllToAll: its `stride_slice_outer_ep_mp` moves the
    split axis, `stride_slice_allgather` gathers over mp = 1, nothing). So its local passes are MoEV2's
    (`_moev2_passes`), not the Megatron permute and unpermute that ppb priced there before session 34; the
    all-to-all's bytes (the rank's E × capacity slots) are the same either way."""
    par, moe = run.parallel, run.training.moe
    return (
        run.framework == "mindformers"
        and not moe.dropless
        and par.expert_tp == par.tp
        and (par.tp == 1 or not par.sequence_parallel)
    )


def _hybridep_rates(run: RunConfig) -> tuple[float, ...]:
    """HybridEP's measured kernel rates for a run whose expert-parallel group sits in one NVLink domain
    (`ppb_core.timing.flex.hybridep_rates`): its dispatch API's SMs, Megatron's `moe_hybridep_num_sms` (the flex
    dispatcher's SM count) else HybridEP's default in one domain; () for another dispatcher or across domains."""
    par = run.parallel
    ranks = par.expert_tp * par.ep
    if run.timing.moe_dispatcher != "hybridep" or ranks <= 1 or ranks > par.devices_per_node:
        return ()
    sms = run.timing.moe_flex_dispatcher_num_sms or HYBRIDEP_SMS_ONE_DOMAIN
    return hybridep_rates(run.device.name, ranks, sms, run.timing.moe_permute_fusion_into_hybridep)


def _hybridep_ib_rates(run: RunConfig) -> tuple[float, ...]:
    """HybridEP's measured rates for a byte leaving a node when the expert-parallel group spans nodes
    (`ppb_core.timing.flex.hybridep_ib_rates`): its SMs as `_hybridep_rates`'s, across domains HybridEP's
    default there; () for another dispatcher or within one domain."""
    par = run.parallel
    ranks = par.expert_tp * par.ep
    nodes = -(-ranks // par.devices_per_node)
    if run.timing.moe_dispatcher != "hybridep" or nodes <= 1:
        return ()
    sms = run.timing.moe_flex_dispatcher_num_sms or HYBRIDEP_SMS_ACROSS
    return hybridep_ib_rates(run.device.name, ranks, sms, run.timing.moe_permute_fusion_into_hybridep, nodes)


@dataclass(frozen=True)
class OpGeometry(Geometry):
    """What the op tables read of a run beyond the sharding geometry: how the experts' tokens
    travel, and a vision encoder's attention within images or windows (`encoder_geometry`)."""

    ep_nodes: int = 1  # nodes the expert-parallel group spans
    dispatcher: str = "alltoall"  # alltoall | allgather (Megatron's default) | deepep | hybridep | ncclep (flex)
    # MindFormers' BatchMatMul MoE (MoEV2) without sequence parallelism, its experts split over model_parallel:
    # every TP rank routes, dispatches and all-to-alls the whole micro-batch (`mindformers_moev2`)
    mindformers_moev2: bool = False
    # MindFormers' unfused attention under jit_level O1: softmax_compute_type's bytes (`mindformers_softmax_bytes`;
    # 0 unset, flash attention, or another level or framework)
    mindformers_softmax_bytes: int = 0
    flex_in_kernel: bool = False  # the flex backend permutes inside its dispatch and combine (`flex`)
    flex_sms: int = 0  # SMs the flex backend's dispatch and combine take beside compute (`flex.flex_sms`)
    # ... its combine direction's (the combine, the dispatch's backward) where they differ: fused HybridEP's
    # unpermute blocks end after their local pass (`flex.flex_sms` combine); None: `flex_sms`
    flex_combine_sms: int | None = None
    # HybridEP's measured (dispatch, combine) kernel rates within one NVLink domain (`flex.hybridep_rates`); ()
    hybridep_rates: tuple[float, ...] = ()
    # ... and across nodes, a leaving byte's (`flex.hybridep_ib_rates`); ()
    hybridep_ib_rates: tuple[float, ...] = ()
    hybridep_pad_uneven: bool = False  # --moe-hybridep-pad-uneven-dispatch-inputs: the counts' MAX all-reduce
    # HybridEP gathers the routing maps in one NVLink domain with its own one-shot kernel, else NCCL's ring
    # (`timing.hybridep_custom_allgather`, unset: true)
    hybridep_custom_allgather: bool = True
    dispatch_bytes: int = 2  # bytes per element the expert dispatch sends (FP8 dispatch: 1)
    router_bytes: int = 2  # the router's probabilities (--moe-router-dtype, else the training dtype)
    router_te_gemm: bool = True  # Megatron-Core's fp32 router through one TE GEMM (`_router_cast_passes`)
    permute_fusion: bool = False  # Megatron's --moe-permute-fusion (Transformer Engine's permute kernels)
    # A vision encoder's bidirectional attention within images or windows: (query, key) pairs per head
    # of one sample; 0 for a causal language model.
    block_pairs: float = 0.0
    framework: str = "megatron"
    transformer_impl: str = "transformer_engine"  # Megatron's --transformer-impl: transformer_engine | local
    cross_entropy_fusion: bool = False  # Megatron's --cross-entropy-loss-fusion
    cross_entropy_impl: str = "native"  # ... its --cross-entropy-fusion-impl: native | te
    jit_level: str = ""  # MindFormers' context.jit_level (`timing.jit_level`; "" unset or another framework)
    # MindFormers' rotary_dtype (`timing.rotary_dtype`): its bytes an element (0 unset), and whether it differs
    # from the compute dtype (Q and K cast to it and back)
    rotary_bytes: int = 0
    rotary_cast: bool = False
    main_grad_bytes: int = 4  # the main gradient's bytes an element (training.grad_bytes)
    main_grad_passes: int = 2  # its passes when a 16-bit gradient is added into it (`main_grad_passes`)
    rope_fusion: bool = True  # Megatron's apply_rope_fusion (off with --no-rope-fusion)
    bias_gelu_fusion: bool = True  # Megatron's bias_gelu_fusion (off with --no-bias-gelu-fusion)
    bias_dropout_fusion: bool = True  # Megatron's bias_dropout_fusion (off with --no-bias-dropout-fusion)
    torch_softmax: bool = False  # Megatron's unfused scale-mask-softmax as PyTorch ops (RunConfig.torch_masked_softmax)
    softmax_fp32: bool = False  # ... in fp32 (attention_softmax_in_fp32)
    softmax_scaled: bool = False  # ... its input scaled first (apply_query_key_layer_scaling)
    # Megatron's routed experts as a `SequentialMLP` (no --moe-grouped-gemm: training.moe.grouped_gemm false)
    sequential_experts: bool = False
    # TEGroupedMLP's FP8 padding calls before its experts (`expert_fp8_pads`): 0 none, 1 the rows, 2 the rows
    # and their probabilities; with any, the unpadding of the experts' output after them
    expert_fp8_pads: int = 0
    # Megatron's TEGroupedMLP through TE's op fuser: the fused grouped MLP (`timing.use_transformer_engine_op_fuser`,
    # `ppb_core.timing.fused_experts`)
    fused_grouped_mlp: bool = False
    # Megatron's router settings (`training.moe.router`) and the data-parallel size its global aux loss
    # reduces over (`ppb_core.timing.router`)
    router: RouterSetting = dataclasses.field(default_factory=RouterSetting)
    dp: int = 1
    # torchtitan's Float8 tensor parallelism: with tensorwise Float8 linears its TP plan is torchao's
    # Float8ColwiseParallel / Float8RowwiseParallel / PrepareFloat8ModuleInput (torchtitan v0.2.2
    # models/llama3/infra/parallelize.py `enable_float8_tensorwise_tp`; 9dec370 likewise), which cast a
    # block's sequence shard to float8 before its all-gather and the output gradient to float8 before
    # the all-gather of its backward (torchao float8/float8_tensor_parallel.py, `NoopFwToFloat8BwDynamic`
    # after the output's redistribute; eab345c, unchanged at 36027d82d): those gathers move one byte
    # an element; the reduce-scatters stay in the training dtype.
    float8_tp: bool = False
    # ... whose linears take their weights in float8 from FSDP's Float8 all-gather (`timing.fp8_fsdp_all_gather`):
    # no weight cast of their own, so no amax all-reduce for it (`_titan_amax_reductions`)
    float8_fsdp_gather: bool = False
    # Megatron's TransformerEngine linears under FP8 (`te_fp8_gather_bytes`): bytes an element of their
    # sequence-parallel all-gathers (the input's forward gather, its backward re-gather, the output
    # gradient's gather); () outside FP8 or TE, or for layers kept in 16 bits
    te_fp8_gather: tuple[float, float, float] = ()
    # ... under current (tensorwise) scaling, where each such quantizer all-reduces its amax over TP
    # (`_te_amax_reduction`)
    te_amax_reduction: bool = False
    # ... under MXFP8 with Megatron's --tp-comm-overlap, where each MXFP8 operand TE puts through a userbuffers
    # all-gather first has its scales all-gathered by NCCL (`_te_ub_scales`)
    te_mxfp8_ub: bool = False
    # ... with `timing.fp8_dot_product_attention`, the recipe whose FP8 attention casts Q, K, V and dO
    # (`fp8_attention_casts`); "" in 16 bits
    te_fp8_attention: str = ""
    # ... under delayed scaling, where a LayerNormLinear's norm writes its output in FP8 itself, a byte an
    # element (TE v2.9 extensions/normalization.cpp: FULLY_FUSED for `Float8Quantizer`; `Op.norm_input`)
    te_norm_fp8_out: bool = False
    # torchtitan without torch.compile: element-wise work as PyTorch's eager kernels (`EAGER_TRAFFIC`)
    # and autograd's sums of the input gradients of linears that share an input (`_shared_input_sums`)
    eager: bool = False
    # torchtitan before ff0829c10 (`timing.repeat_kv`): K and V copied out to every query head before SDPA
    repeat_kv: bool = False
    # torchtitan compiled with its own eager RMSNorm module (`timing.norm_type` rmsnorm): `apply_compile`
    # compiles each TransformerBlock alone, so the final norm outside them runs eager (`_outside_compile`)
    eager_final_norm: bool = False
    # torchtitan's loss under torch.compile (`TimingConfig.compiled_loss`: from bbb1b616e, 2025-04-02,
    # components/loss.py `build_cross_entropy_loss` compiles it with the blocks; v0.2.2 `compile.components`)
    compiled_loss: bool = False
    # torchtitan's context_parallel_rotate_method (`timing.cp_rotate_method`): allgather | alltoall
    cp_rotate: str = "allgather"
    # TransformerEngine's ring exchanges as one batch_isend_irecv (one NCCL launch) or a separate isend
    # and irecv (two): `cp_p2p_batched` below
    cp_p2p_batched: bool = True
    # Megatron's --tp-comm-overlap-cfg: userbuffers methods that differ from TE's defaults, by GEMM name
    ub_methods: tuple[tuple[str, str], ...] = ()

    def ub_method(self, gemm: str, default: str) -> str | None:
        """The userbuffers method of TE's *gemm* (`initialize_ub`'s *default* unless configured); None: bulk
        or external, the generic overlap (`ppb_core.timing.userbuffers`)."""
        method = dict(self.ub_methods).get(gemm, default)
        return method if method in ("ring_exchange", "pipeline") else None

    @classmethod
    def from_run(cls, run: RunConfig) -> OpGeometry:
        par, train = run.parallel, run.training
        # the flex backend's SMs (`flex_sms`), the dispatch direction's and the combine's from the same settings
        flex = (
            run.timing.moe_dispatcher,
            run.timing.moe_flex_dispatcher_num_sms,
            max(1, -(-par.expert_tp * par.ep // par.devices_per_node)),
            run.device.profile().sm_count,
            run.timing.moe_permute_fusion_into_hybridep,
        )
        return cls(
            **Geometry.run_fields(run),
            ep_nodes=max(1, -(-par.expert_tp * par.ep // par.devices_per_node)),
            dispatcher=run.timing.moe_dispatcher,
            mindformers_moev2=mindformers_moev2(run),
            mindformers_softmax_bytes=DTYPE_BYTES[run.timing.softmax_compute_type]
            if run.framework == "mindformers"
            and run.timing.jit_level == "O1"
            and run.timing.softmax_compute_type
            and not train.flash_attention
            else 0,
            framework=run.framework,
            transformer_impl=run.timing.transformer_impl,
            cross_entropy_fusion=run.timing.cross_entropy_fusion,
            cross_entropy_impl=run.timing.cross_entropy_fusion_impl,
            jit_level=run.timing.jit_level or "",
            rotary_bytes=DTYPE_BYTES[run.timing.rotary_dtype] if run.timing.rotary_dtype else 0,
            rotary_cast=run.timing.rotary_dtype not in (None, train.dtype),
            main_grad_bytes=train.grad_bytes,
            main_grad_passes=main_grad_passes(run.timing.deepspeed_bf16_optimizer),
            rope_fusion=run.rope_fused,
            router_bytes=ROUTER_BYTES.get(train.moe.router_dtype or "", train.dtype_bytes),
            router_te_gemm=run.framework_release.holds("mcore_router_te_gemm"),
            permute_fusion=train.moe.permute_fusion,
            bias_gelu_fusion=run.timing.bias_gelu_fusion,
            bias_dropout_fusion=run.timing.bias_dropout_fusion,
            torch_softmax=run.torch_masked_softmax,
            softmax_fp32=run.softmax_in_fp32,
            softmax_scaled=run.timing.apply_query_key_layer_scaling,
            sequential_experts=run.framework == "megatron" and not train.moe.grouped_gemm,
            expert_fp8_pads=expert_fp8_pads(run),
            fused_grouped_mlp=run.framework == "megatron" and run.timing.use_transformer_engine_op_fuser,
            router=RouterSetting.of(train.moe.router),
            dp=par.dp,
            float8_tp=run.framework == "torchtitan"
            and run.timing.matmul_dtype == "fp8"
            and run.timing.fp8_recipe == "tensorwise",
            float8_fsdp_gather=run.framework == "torchtitan" and run.timing.fp8_fsdp_all_gather,
            te_fp8_gather=te_fp8_gather_bytes(run.timing.fp8_recipe)
            if run.framework == "megatron"
            and run.timing.transformer_impl == "transformer_engine"
            and run.timing.matmul_dtype == "fp8"
            else (),
            te_amax_reduction=run.framework == "megatron"
            and run.timing.transformer_impl == "transformer_engine"
            and run.timing.matmul_dtype == "fp8"
            and run.timing.fp8_recipe == "tensorwise",
            te_mxfp8_ub=run.framework == "megatron"
            and run.timing.transformer_impl == "transformer_engine"
            and run.timing.matmul_dtype == "fp8"
            and run.timing.fp8_recipe == "mxfp8"
            and run.timing.overlap.tp > 0,
            te_fp8_attention=run.timing.fp8_recipe if run.timing.fp8_dot_product_attention else "",
            te_norm_fp8_out=run.framework == "megatron"
            and run.timing.transformer_impl == "transformer_engine"
            and run.timing.matmul_dtype == "fp8"
            and run.timing.fp8_recipe == "delayed",
            eager=run.framework == "torchtitan" and not run.timing.torch_compile,
            repeat_kv=run.framework == "torchtitan" and run.timing.repeat_kv,
            eager_final_norm=run.framework == "torchtitan"
            and run.timing.torch_compile
            and run.timing.norm_type == "rmsnorm",
            compiled_loss=run.framework == "torchtitan" and run.timing.compiled_loss,
            cp_rotate=run.timing.cp_rotate_method,
            # the ring's ranks: under hierarchical CP its second level's (`Parallel.cp_a2a`)
            cp_p2p_batched=cp_p2p_batched(
                run.parallel.cp // run.parallel.cp_a2a,
                run.device.profile().compute_capability,
                unbatched_cp2=run.framework_release.holds("te_cp2_p2p_unbatched"),
                batched_before_sm100=run.framework_release.holds("te_cp2_p2p_batched_before_sm100"),
            ),
            ub_methods=tuple(sorted(run.timing.tp_comm_overlap_methods.items())),
            # HybridEP never dispatches FP8 under Megatron (fused_a2a.py `init_hybrid_ep_buffer` asserts
            # `not fp8_dispatch`; HybridEPDispatch passes False), nor NCCL EP at its default bf16 wire dtype,
            # nor DeepEP: `FusedDispatch.forward` hands DeepEP's `Buffer.dispatch` the tokens as
            # `MoELayer.dispatch` gets them, the pre-MLP norm's BF16 output (no FP8 path at core_r0.16.0
            # 55ac708251 nor d98e8a64). FP8 dispatch is DeepSeek's own framework's (DeepSeek-V3 report
            # §3.3.3 "Low-Precision Communication": the activation before the up-projections and the gradient
            # before the down-projections in FP8), which ppb marks by its FP8 recipe (`fp8_cache` deepseek)
            dispatch_bytes=1
            if run.timing.moe_dispatcher == "deepep"
            and run.timing.matmul_dtype == "fp8"
            and train.fp8_cache == "deepseek"
            else train.dtype_bytes,
            hybridep_pad_uneven=run.timing.moe_hybridep_pad_uneven_dispatch_inputs,
            hybridep_custom_allgather=run.timing.hybridep_custom_allgather is not False,
            flex_in_kernel=in_kernel_permutation(
                run.timing.moe_dispatcher, run.timing.moe_permute_fusion_into_hybridep
            ),
            flex_sms=flex_sms(*flex),
            flex_combine_sms=flex_sms(*flex, combine=True),
            hybridep_rates=_hybridep_rates(run),
            hybridep_ib_rates=_hybridep_ib_rates(run),
        )

    def attention_pairs(self, window: int = 0) -> float:
        if self.block_pairs:  # every pair of each image or window, the kernel's blocks cut to them
            return self.micro_batch_size * self.block_pairs / self.cp
        return super().attention_pairs(window)


def cp_p2p_batched(
    cp: int, compute_capability: float, unbatched_cp2: bool = True, batched_before_sm100: bool = True
) -> bool:
    """Whether TransformerEngine's ring exchanges its chunks as one `batch_isend_irecv` a step (one NCCL
    launch) rather than a separate `isend` and `irecv` (two): `AttnFuncWithCPAndKVP2P` forward and
    backward, d0067d0d, `batch_p2p_comm = NVTE_BATCH_MHA_P2P_COMM or (device_compute_capability < (10, 0)
    and cp_size == 2)`, as since v2.4 (0828aa860, `batched_before_sm100`); v2.3 (ba5dc5dde,
    `unbatched_cp2`) batched only under the variable, and before it TE batched every cp 2 whatever the
    GPU (release_v1.14 and v2.2 attention.py: `... or (cp_size == 2)`), as the NeMo 25.02 and 25.04
    containers' TE ran on Blackwell (`releases.CHANGES`). The variable, off by default, is not read."""
    if not unbatched_cp2:
        return cp == 2
    return batched_before_sm100 and cp == 2 and compute_capability < 10.0


def _matmul(
    name: str,
    block: str,
    rows: float,
    k: float,
    n: float,
    bc: int,
    *,
    weights: float | None = None,
    switch: str | None = None,
    transient: bool = False,
    inputs: Sequence[str] = (),
    groups: int = 1,
    fused_n: float | None = None,
    side_bytes: tuple[float, float] = (0.0, 0.0),
    fp8: bool = True,
    norm_input: bool = False,
    linears: tuple[float, ...] = (),
) -> Op:
    """rows×k by k×n: 2·rows·k·n FLOPs, reading both operands and writing the result; the backward
    runs two such products (input and weight gradients). *groups* splits the rows over that many
    products with their own weights (a grouped GEMM over experts). *norm_input*: `Op.norm_input`;
    *linears*: `Op.linears`."""
    flops = 2 * rows * k * n
    traffic = (rows * k + (k * n if weights is None else weights) + rows * n) * bc
    return Op(
        name,
        block,
        MATMUL,
        switch,
        transient,
        tuple(inputs),
        flops,
        traffic,
        2 * flops,
        2 * traffic,
        gemm=(rows / groups, k, n, groups, fused_n or n),
        side_bytes=side_bytes,
        weight_elements=k * n * groups if weights is None else weights,
        fp8=fp8,
        norm_input=norm_input,
        linears=linears,
    )


def _separate_linears(geo: OpGeometry, *widths: float) -> tuple[float, ...]:
    """The widths of the separate linears torchtitan runs where ppb's op holds several (`Op.linears`):
    its Llama `Attention` builds wq, wk and wv as three `nn.Linear` and calls them one after another
    (`xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)`), its `FeedForward` w1 and w3 as two
    (`self.w2(F.silu(self.w1(x)) * self.w3(x))`): torchtitan/models/llama/model.py at 9dec370 (the
    December 2024 rows) and 1ea476e9f, torchtitan/models/llama3/model.py at 820504e and e7c0cae. Under
    tensor parallelism each is its own `ColwiseParallel` (parallelize_llama.py `apply_tp`), so each keeps
    its own GEMM at its per-rank width. Compiled, they stay separate `mm`s: Inductor batches linears only
    under `pre_grad_fusion_options` / `post_grad_fusion_options` (`batch_linear`), empty by default (torch
    2.6.0 and 2.13 torch/_inductor/config.py), which torchtitan does not set. (): another framework's one
    fused GEMM (Megatron's linear_qkv, linear_fc1), and torchtitan's one `wqkv` linear where the run's commit
    holds it (`OpGeometry.fused_qkv`, `_fused_qkv_split`): pass no widths for those."""
    return tuple(widths) if geo.framework == "torchtitan" else ()


def _fused_qkv_split(geo: OpGeometry, rows: float, width: float, value: bool) -> tuple[float, float]:
    """(forward, backward) bytes of torchtitan's split of its one `wqkv` output (`FusedQKVLinear.forward`,
    models/common/attention.py at 3396a4b37 and b5bcd76c6) for the *width* columns an op holds (Q and K:
    `qk_proj`; V, *value*: `v_proj`). The output, viewed as [tokens, kv heads, heads a group + 2, head dim], is
    split along the third axis and each part made contiguous (`reshape(...).contiguous()`: Q cannot be a view,
    K and V are strided ones); the split's backward is a `cat` of the three gradients into one buffer for the
    GEMM. Eager: each part a copy kernel (read, write), and the cat reads each gradient and writes its slice.
    Compiled (torch 2.13's generated code for a block of this shape with torchtitan's complex rotary, read on
    the CPU): Q's and K's copies fold into the kernel that casts them to fp32 for the rotary (it reads them
    from the wqkv output where it read wq's and wk's), and in the backward the rotary's cast back writes their
    gradients straight into the cat's slices: nothing more for Q and K. V's copy is a read and a write of V
    (the attention kernel takes a realized V), and V's gradient, the attention backward's own output, is read
    and written into its slice."""
    part_bytes = rows * width * geo.dtype_bytes
    if geo.eager:
        return 2 * part_bytes, 2 * part_bytes
    return (2 * part_bytes, 2 * part_bytes) if value else (0.0, 0.0)


def _shared_input_sums(geo: OpGeometry, rows: float, width: float, linears: int = 2) -> tuple[float, float]:
    """(forward, backward) bytes of autograd summing the input gradients of *linears* separate linears
    that read one input of *rows* × *width* (torchtitan's wq, wk, wv on the normed input; w1 and w3):
    each input gradient past the first is added to the sum (`InputBuffer::accumulate`: read two, write
    one, in the compute dtype). Counted from torchtitan's eager step (`ppb_core.census.ops`, the
    backward's `aten.add`s: three a Llama block); Megatron's fused QKV and fc1 GEMMs have one input
    gradient. Under torch.compile Inductor fuses each add into the kernel that reads the sum (the norm's
    backward, or under sequence parallelism the chunk-and-cat before the reduce-scatter, `funcol`), but
    the addends are matmul outputs, extern cuBLAS kernels' buffers no epilogue joins (Inductor's `mm`
    lowering without max-autotune, torch/_inductor/kernel/mm.py `tuned_mm`; post_grad.py's `addmm` pattern
    needs the add to take the `mm` itself, not its 3-D view, and `should_prefer_unfused_addmm` keeps an add
    whose users are pointwise), so that kernel reads every addend: each input gradient past the first is
    read once more than one summed gradient would be."""
    if geo.eager:
        return 0.0, (linears - 1) * 3 * rows * width * geo.dtype_bytes
    if geo.framework == "torchtitan":
        return 0.0, (linears - 1) * rows * width * geo.dtype_bytes
    return 0.0, 0.0


def _plus(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] + b[0], a[1] + b[1]


def _bias_passes(geo: OpGeometry, bias: bool, rows: float, n: float, added_after: bool) -> tuple[float, float]:
    """(forward, backward) bytes Megatron-LM moves for a linear's bias outside the GEMM kernel.

    A bias the linear returns for a fused element-wise op to add (`skip_bias_add`: the output
    projections' bias-dropout-add, fc1's bias-GeLU) gets its gradient from autograd's reduction of
    that op's input gradient over the tokens (`sum_to_size`: one pass reading rows × n), with
    either `--transformer-impl`. A bias the linear adds itself (the fused QKV projection) is, under
    TransformerEngine, in the GEMM's epilogue forward and backward (cuBLASLt's bias and
    bias-gradient epilogues); the local implementation
    (megatron/core/tensor_parallel/layers.py `LinearWithGradAccumulationAndAsyncCommunication`, as
    in Megatron-LM 2022's megatron/mpu/layers.py) adds it after `torch.matmul` (`output + bias`:
    read and write rows × n) and reduces its gradient with `grad_output.sum(dim=0)`."""
    if not bias or geo.framework != "megatron":
        return (0.0, 0.0)
    elements = rows * n * geo.dtype_bytes
    if not added_after:
        return (0.0, elements)
    return (2 * elements, elements) if geo.transformer_impl == "local" else (0.0, 0.0)


def _fc1_bias_passes(geo: OpGeometry, bias: bool, rows: float, n: float, gated: bool) -> tuple[float, float]:
    """fc1's bias passes (`_bias_passes`), and, where Megatron-LM does not fuse it into the GeLU, its add.

    megatron/core/transformer/mlp.py `MLP.forward` (d98e8a64): under `bias_activation_fusion` (from
    `--no-bias-gelu-fusion`'s `bias_gelu_fusion` without `--swiglu`: training/argument_utils.py) the
    bias goes into `bias_gelu_impl`, one kernel; otherwise `intermediate_parallel + bias_parallel`
    runs first as its own kernel (read and write rows × n) and `F.gelu` after it. Its backward adds
    nothing: the add passes the gradient through and the bias's reduction is the one counted either
    way. The GeLU's saved input is the sum instead of the GEMM's output: the same bytes."""
    forward, backward = _bias_passes(geo, bias, rows, n, added_after=False)
    if bias and not gated and not geo.bias_gelu_fusion and geo.framework == "megatron":
        forward += 2 * rows * n * geo.dtype_bytes
    return forward, backward


def _elementwise(
    name: str,
    block: str,
    forward_bytes: float,
    backward_bytes: float,
    *,
    switch: str | None = None,
    transient: bool = False,
    inputs: Sequence[str] = (),
) -> Op:
    """A memory-bound op, priced by the bytes it moves."""
    return Op(name, block, MEMORY, switch, transient, tuple(inputs), 0.0, forward_bytes, 0.0, backward_bytes)


def _norm(
    name: str, block: str, rows: float, width: float, bc: int, rms: bool = True, fp8_out: bool = False, **kw
) -> Op:
    """Forward reads x and writes y; backward reads x and dy and writes dx (statistics are small). An
    RMSNorm runs as several kernels in eager PyTorch (`EAGER_TRAFFIC`); a LayerNorm is one
    (`native_layer_norm`) either way. *fp8_out*: y written in FP8, a byte (`OpGeometry.te_norm_fp8_out`)."""
    op = _elementwise(name, block, rows * width * (bc + (1 if fp8_out else bc)), 3 * rows * width * bc, **kw)
    return dataclasses.replace(op, fusion="norm") if rms else op


def te_fp8_gather_bytes(recipe: str) -> tuple[float, float, float]:
    """Bytes an element TransformerEngine's sequence-parallel all-gathers move under FP8 (v2.9, unchanged
    to v2.16.1): (a column-parallel linear's input in the forward, its backward re-gather, a row-parallel
    linear's output gradient). The quantizer goes to `gather_along_first_dim`, which quantizes the shard
    and gathers the FP8 data (distributed.py `_all_gather_fp8`, `_all_gather_mxfp8`,
    `_all_gather_fp8_blockwise`; `fill_userbuffers_buffer_for_all_gather` under userbuffers). Per-tensor
    recipes (delayed, current scaling) gather row-wise data only, a byte (`supports_only_rowwise_all_gather`;
    Hopper's transpose is made after the gather: `_create_transpose`). MXFP8 and blockwise gather the
    copies asked for, each with its scales (an E8M0 byte a 32-block; an fp32 a 128-block: 1/32 a byte
    either way): the forward input row-wise only (layernorm_linear.py `_LayerNormLinear.forward`,
    `set_usage(rowwise=True, columnwise=False)` before the gather), the re-gather column-wise only (its
    backward, `set_usage(rowwise=False, columnwise=True)`), the output gradient both (linear.py
    `_Linear.backward`, `set_usage(rowwise=True, columnwise=True)`; under userbuffers MXFP8 gathers the
    column-wise copy in a second all-gather beside the dgrad GEMM: the same bytes)."""
    if recipe in ("mxfp8", "blockwise"):
        copy = 1.0 + 1.0 / 32
        return copy, copy, 2 * copy
    return 1.0, 1.0, 1.0


def _te_amax_reduction(name: str, block: str, source: str, backward: bool) -> Op:
    """The amax all-reduce of a TransformerEngine quantizer under current scaling and SP: layernorm_linear.py
    and linear.py `_customize_quantizers_float8_current_scaling` (v2.9, likewise v2.16.1) set
    `with_amax_reduction` over the TP group for a column-parallel linear's input and a row-parallel
    linear's output gradient, and quantizer.cpp `Float8CurrentScalingQuantizer::quantize_impl` all-reduces
    the fp32 amax (MAX, one NCCL call) between the amax and the cast, on the critical path (*backward*:
    the output gradient's, in the backward)."""
    comm = Collective(ALL_REDUCE, "tp", STATS_BYTES, "tp")
    if backward:
        return Op(name, block, COMM, inputs=(source,), backward_comm=comm)
    return Op(name, block, COMM, inputs=(source,), forward_comm=comm)


def _te_ub_scales(name: str, block: str, source: str, geo: OpGeometry, width: float, forward: int, backward: int) -> Op:
    """The NCCL all-gathers of MXFP8 scales that TransformerEngine runs before a userbuffers all-gather of an
    MXFP8 operand (Megatron's --tp-comm-overlap, `OpGeometry.te_mxfp8_ub`). base.py
    `fill_userbuffers_buffer_for_all_gather` (from ce0b46c4d, "MXFP8 support in Userbuffers", #1711; v2.9,
    v2.14 and d0067d0da the same) copies the operand's one MXFP8 copy into the
    userbuffers buffer but gathers its scale-inverses (an E8M0 byte a 32-block: tokens · width / 32 bytes
    gathered) with `torch.distributed.all_gather_into_tensor`, synchronous on the stream, before the GEMM that
    overlaps the data's exchange: one NCCL call each, exposed. A column-parallel linear (layernorm_linear.py
    `_LayerNormLinear`) fills it for its input's forward gather (`ub_overlap_ag_fprop`) and for the backward
    re-gather under Megatron's default bulk dgrad overlap (`ub_bulk_dgrad`, tp_comm_bulk_dgrad True at
    0d8e0714cd); a row-parallel one (linear.py `_Linear.backward`) for its output gradient's row-wise gather
    (`grad_output_preprocess` under `ub_overlap_ag`) and, as MXFP8 cannot turn row-wise scales into
    column-wise ones, again for the column-wise copy the weight gradient reads, issued on the dgrad GEMM's
    send stream beside that GEMM (`_te_ub_wgrad_scales`). *forward* / *backward*: the exposed calls."""
    payload = geo.tokens * width / 32
    forward_comm = Collective(ALL_GATHER, "tp", payload * forward, "tp", calls=forward) if forward else None
    backward_comm = Collective(ALL_GATHER, "tp", payload * backward, "tp", calls=backward) if backward else None
    return Op(name, block, COMM, inputs=(source,), forward_comm=forward_comm, backward_comm=backward_comm)


def _te_ub_wgrad_scales(name: str, block: str, producer: str, geo: OpGeometry, width: float) -> Op:
    """A row-parallel linear's second MXFP8 scale all-gather under userbuffers (`_te_ub_scales`): linear.py
    `_Linear.backward` (v2.9, v2.14) quantizes the output gradient column-wise and fills the wgrad userbuffers
    inside `torch.cuda.stream(dgrad_send_stream)`, so its NCCL call runs beside the producer's dgrad GEMM."""
    payload = geo.tokens * width / 32
    comm = Collective(ALL_GATHER, "tp", payload, "tp_async", (producer, "dgrad"))
    return Op(name, block, COMM, inputs=(producer,), backward_comm=comm)


def _titan_amax_reductions(name: str, block: str, source: str, geo: OpGeometry, linears: int) -> Op:
    """The scalar all-reduces of a sequence-parallel region's float8 casts under torchtitan's Float8 TP
    (`OpGeometry.float8_tp`), one NCCL call each over TP, on the critical path between each amax and its cast.

    torchao casts a DTensor with dynamic tensorwise scaling: `tensor_to_scale` takes `torch.max(torch.abs(x))`
    of the local shard (float8/float8_utils.py `tensor_to_amax` at eab345c, torchtitan 9dec370's pin, and
    6243040, 820504e's), which DTensor types `Partial("max")` (torch/distributed/tensor/_ops/_math_ops.py
    `LINEAR_REDUCTION_OP_MAP`: `aten.max.default: "max"`); `amax_to_scale`'s clamp and division are not
    linear, so DTensor's pointwise strategy replicates the amax first (_ops/_pointwise_ops.py: a `Partial`
    input of a non-linear op becomes `Replicate`), one all-reduce (MAX), traced into the compiled block with
    its wait. A region of *linears* column-parallel linears reading one gathered input and one row-parallel
    linear after them casts, in its forward, the shard before the all-gather (`PrepareFloat8ModuleInput`), the
    row-parallel input on its `Shard(-1)` (`Float8RowwiseParallel._prepare_input_fn`) and each linear's
    TP-sharded weight (`Float8Linear.forward`, the weight a `Shard` DTensor once FSDP2 gathers it; none
    where FSDP gathers it in float8, `float8_fsdp_gather`); in its backward each output gradient
    (`NoopFwToFloat8BwDynamic` in `Float8ColwiseParallel` / `Float8RowwiseParallel._prepare_output_fn`, on
    `Shard(-1)` and `Shard(1)`). A rerun forward (full checkpointing, and the per-op policy, whose save list
    holds `aten.max` but not the all-reduce after it) all-reduces again."""
    weights = 0 if geo.float8_fsdp_gather else linears + 1
    forward, backward = 2 + weights, linears + 1
    return Op(
        name,
        block,
        COMM,
        inputs=(source,),
        forward_comm=Collective(ALL_REDUCE, "tp", STATS_BYTES * forward, "tp", calls=forward),
        backward_comm=Collective(ALL_REDUCE, "tp", STATS_BYTES * backward, "tp", calls=backward),
    )


def _tp_entry(
    p: str,
    stem: str,
    block: str,
    geo: OpGeometry,
    width: float,
    source: str,
    consumer: str,
    switch: str | None = "gather",
    userbuffers: str | None = None,
    float8: bool = False,
    te_fp8: bool = False,
    linears: int = 1,
) -> list[Op]:
    """Entering a tensor-parallel region. Under SP the sequence shards are all-gathered (the `gather`
    switch keeps the gathered copy; at 0 the backward gathers again, behind the consumer's input
    gradient) and the input gradient is reduce-scattered; without SP the input gradient is
    all-reduced. Both backward collectives run behind the consumer's weight gradient. *userbuffers*:
    the consumer is TransformerEngine's layer GEMM of that name (qkv, fc1), whose forward all-gather
    Megatron's --tp-comm-overlap runs as a ring exchange by default (`ppb_core.timing.userbuffers`; its
    `<name>_fprop` method from --tp-comm-overlap-cfg, `OpGeometry.ub_method`). *float8*: the
    consumer is a block GEMM under torchtitan's Float8 TP (`OpGeometry.float8_tp`), the shard gathered in
    float8, the region's amax all-reduces beside it (`_titan_amax_reductions`, *linears* column-parallel
    consumers of the gathered input). *te_fp8*: the consumer is a TransformerEngine FP8 linear, which
    all-gathers the shard in FP8 (`OpGeometry.te_fp8_gather`)."""
    if geo.tp == 1:
        return []
    payload = geo.tokens * width * geo.dtype_bytes
    gathered = geo.tokens * width * (1 if float8 else geo.dtype_bytes)
    if geo.gathers and geo.framework == "megatron":
        forward, again = (
            (geo.tokens * width * b for b in geo.te_fp8_gather[:2])
            if te_fp8 and geo.te_fp8_gather
            else (payload, payload)
        )
        # Megatron-LM keeps only the shard and all-gathers it again in every backward, behind the
        # input-gradient GEMM, whatever the recompute (`LinearWithGradAccumulationAndAsyncCommunication`
        # and TransformerEngine's `ln_out_needs_gather`; ppb_core.memory.frameworks.megatron):
        # the `gather` switch has nothing to drop.
        te = userbuffers and geo.transformer_impl == "transformer_engine"
        method = geo.ub_method(f"{userbuffers}_fprop", "ring_exchange") if te else None
        amax = [_te_amax_reduction(f"{p}amax_{stem}", block, source, False)] if te_fp8 and geo.te_amax_reduction else []
        if te and te_fp8 and geo.te_mxfp8_ub:  # the input's forward gather and its bulk-dgrad re-gather
            amax.append(_te_ub_scales(f"{p}scales_{stem}", block, source, geo, width, 1, 1))
        return [
            Op(
                f"{p}gather_{stem}",
                block,
                COMM,
                inputs=(source,),
                forward_comm=Collective(ALL_GATHER, "tp", forward, "tp", (consumer, "forward"), method=method),
                backward_comm=Collective(REDUCE_SCATTER, "tp", payload, "tp_async", (consumer, "wgrad")),
            ),
            Op(
                f"{p}regather_{stem}",
                block,
                COMM,
                inputs=(source,),
                backward_comm=Collective(ALL_GATHER, "tp", again, "tp_async", (consumer, "dgrad")),
            ),
            *amax,
        ]
    if geo.gathers:
        amax = [_titan_amax_reductions(f"{p}amax_{stem}", block, source, geo, linears)] if float8 else []
        return [
            Op(
                f"{p}gather_{stem}",
                block,
                COMM,
                switch=switch,
                inputs=(source,),
                forward_comm=Collective(ALL_GATHER, "tp", gathered, "tp", (consumer, "forward")),
                backward_comm=Collective(REDUCE_SCATTER, "tp", payload, "tp_async", (consumer, "wgrad")),
                recompute_comm=Collective(ALL_GATHER, "tp", gathered, "tp_async", (consumer, "dgrad")),
            ),
            *amax,
        ]
    return [
        Op(
            f"{p}reduce_{stem}_grad",
            block,
            COMM,
            inputs=(source,),
            backward_comm=Collective(ALL_REDUCE, "tp", payload, "tp_async", (consumer, "wgrad")),
        )
    ]


def _tp_exit(
    name: str,
    block: str,
    geo: OpGeometry,
    width: float,
    producer: str,
    userbuffers: str | None = None,
    float8: bool = False,
    te_fp8: bool = False,
) -> list[Op]:
    """Leaving a tensor-parallel region: the partial sums are reduce-scattered (SP) or all-reduced; under
    SP the output gradient is all-gathered in the backward. Both sit on the critical path.
    *userbuffers*: the producer is TransformerEngine's layer GEMM of that name (proj, fc2), whose forward
    reduce-scatter Megatron's --tp-comm-overlap pipelines and whose input gradient's all-gather it
    runs as a ring exchange by default (`ppb_core.timing.userbuffers`; the `<name>_fprop` and
    `<name>_dgrad` methods from --tp-comm-overlap-cfg, `OpGeometry.ub_method`). *float8*: torchtitan's
    Float8 TP; *te_fp8*: a TransformerEngine FP8 producer (`OpGeometry.te_fp8_gather`), each gathering the
    output gradient in FP8."""
    if geo.tp == 1:
        return []
    payload = geo.tokens * width * geo.dtype_bytes
    gradient = geo.tokens * width * (1 if float8 else geo.dtype_bytes)  # under Float8 TP: float8
    if te_fp8 and geo.te_fp8_gather:
        gradient = geo.tokens * width * geo.te_fp8_gather[2]
    if geo.gathers:
        ub = userbuffers and geo.framework == "megatron" and geo.transformer_impl == "transformer_engine"
        forward = geo.ub_method(f"{userbuffers}_fprop", "pipeline") if ub else None
        backward = geo.ub_method(f"{userbuffers}_dgrad", "ring_exchange") if ub else None
        amax = te_fp8 and geo.te_amax_reduction and geo.framework == "megatron"
        return [
            Op(
                name,
                block,
                COMM,
                inputs=(producer,),
                forward_comm=Collective(REDUCE_SCATTER, "tp", payload, "tp", (producer, "forward"), method=forward),
                backward_comm=Collective(ALL_GATHER, "tp", gradient, "tp", (producer, "dgrad"), method=backward),
            ),
            *([_te_amax_reduction(f"{name}_amax", block, producer, True)] if amax else []),
            # the output gradient's row-wise gather (exposed) and its column-wise one beside the dgrad GEMM
            *(
                [
                    _te_ub_scales(f"{name}_scales", block, producer, geo, width, 0, 1),
                    _te_ub_wgrad_scales(f"{name}_wgrad_scales", block, producer, geo, width),
                ]
                if ub and te_fp8 and geo.te_mxfp8_ub
                else []
            ),
        ]
    return [
        Op(
            name,
            block,
            COMM,
            inputs=(producer,),
            forward_comm=Collective(ALL_REDUCE, "tp", payload, "tp", (producer, "forward")),
        )
    ]


def _residual(name: str, block: str, geo: OpGeometry, width: float, dropout: float, bias: bool = False) -> Op:
    """Bias, dropout (its mask always kept) and the residual add, fused, on the layer's own tokens.

    Forward: reads the branch's output and the residual, writes the sum (and the mask). Backward:
    the branch's gradient (reads the output gradient and the mask, writes), and autograd's sum of
    the two gradients that meet where the residual stream forks (the skip and the branch's norm:
    reads two, writes one). torchtitan's block adds plainly (`h = x + attention(norm(x))`, no bias
    or dropout): the add's backward hands the gradient on without a kernel, leaving the sum.

    Megatron without the fusion (`bias_dropout_fusion` off: --no-bias-dropout-fusion; GPTOSSBridge sets it
    off) runs fused_bias_dropout.py `_bias_dropout_add_func` eagerly (core_v0.17.0, 0d8e0714cd): `x + bias`
    where the branch returns a *bias* (read and write), `F.dropout` (at p 0 PyTorch's `dropout` returns its
    input: no kernel; else `native_dropout`, read and write and the mask), `residual + out` (read two, write
    one), a kernel each; backward the adds hand the gradient on (the bias's reduction is its linear's,
    `_bias_passes`), the dropout's backward where p > 0, and the fork's sum. `x + bias` broadcasts the bias row
    over the tokens: PyTorch's non-contiguous path (`Op.strided_bytes`)."""
    elements = geo.whole_tokens * width
    bc = geo.dtype_bytes
    mask = MASK_BYTES if dropout > 0 else 0
    if geo.framework == "megatron" and not geo.bias_dropout_fusion:
        added, dropped = 2 * bc if bias else 0, 2 * bc + mask if dropout > 0 else 0
        op = _elementwise(name, block, elements * (3 * bc + added + dropped), elements * (3 * bc + dropped))
        launches = (1.0 + bias + (dropout > 0), 1.0 + (dropout > 0))
        return dataclasses.replace(op, launches=launches, strided_bytes=(elements * added, 0.0))
    branch = 0 if geo.framework == "torchtitan" and not mask else 2 * bc + mask
    return _elementwise(name, block, elements * (3 * bc + mask), elements * (3 * bc + branch))


def _projections(kind: BodyKind, geo: OpGeometry, p: str, norm: str) -> tuple[list[Op], list[str], list[str]]:
    """The q, k, v projections. Returns the ops, the names of what feeds the scores (Q, K) and the
    value (V), so the attention core can name its inputs."""
    att, h, bc = kind.attention, kind.hidden_size, geo.dtype_bytes
    block = "attention"
    n, whole = geo.tokens, geo.whole_tokens
    heads = per_rank(att.num_heads, geo.tp)
    # Ulysses, and hierarchical CP's first level: Q, K, V leave through an all-to-all over heads
    ulysses = geo.cp > 1 and geo.cp_variant in ("ulysses", "hierarchical")
    a2a_group = "cp_a2a" if geo.cp_variant == "hierarchical" else "cp"
    ops: list[Op] = []
    if att.is_mla:
        # Down-projections (replicated over TP) run on the layer's own tokens; their latents are
        # normalised, then gathered under SP for the up-projections. `attUp` governs the latent
        # norms and the heads the up-projections build (Q and K with the rotary part, V).
        d_qk = att.q_head_dim
        width = (att.q_lora_rank or h) + att.kv_lora_rank + att.qk_rope_head_dim
        q_source = norm
        # without latent norms (Megatron's MLA without --qk-layernorm: gpt_layer_specs.py, plain
        # column-parallel up-projections) the up-projections read the down-projections' outputs
        if att.q_lora_rank:
            ops.append(_matmul(p + "q_down", block, whole, h, att.q_lora_rank, bc, inputs=(norm,)))
            q_source = p + "q_down"
            if att.latent_norms:
                ops.append(
                    _norm(
                        p + "q_norm",
                        block,
                        whole,
                        att.q_lora_rank,
                        bc,
                        fp8_out=geo.te_norm_fp8_out,
                        switch="attUp",
                        inputs=(q_source,),
                    )
                )
                q_source = p + "q_norm"
        ops.append(_matmul(p + "kv_down", block, whole, h, att.kv_lora_rank + att.qk_rope_head_dim, bc, inputs=(norm,)))
        kv_source, rope_key = p + "kv_down", p + "kv_down"
        if att.latent_norms:
            ops.append(
                _norm(
                    p + "kv_norm",
                    block,
                    whole,
                    att.kv_lora_rank,
                    bc,
                    fp8_out=geo.te_norm_fp8_out,
                    switch="attUp",
                    inputs=(kv_source,),
                )
            )
            kv_source = p + "kv_norm"
        up = p + "kv_up"
        entry = _tp_entry(p, "latents", block, geo, width, q_source, up, te_fp8=True)
        if entry and geo.gathers and geo.framework == "megatron":
            # Megatron-Core gathers them in three calls (multi_latent_attention.py
            # `get_query_key_value_tensors`, d98e8a64; 0d8e0714cd, NeMo 25.11's, the same): the q latent
            # inside linear_q_up_proj's and the kv latent inside linear_kv_up_proj's TE column-parallel
            # linear (each all-gathers its input under SP, reduce-scatters its input gradient and gathers
            # the input again for its weight gradient), and the key's rotary part by
            # `gather_from_sequence_parallel_region` (its backward one reduce-scatter, no second gather).
            # Under FP8 the two linears gather their quantized shards (TE v2.9 linear.py and
            # layernorm_linear.py `forward`: `gather_along_first_dim(..., quantizer=...)`, the bytes of
            # `te_fp8_gather_bytes`) and, under current scaling, each all-reduces its amax; the rotary key
            # goes through Megatron's own gather in the compute dtype.
            # Under selective `mla_up_proj` recompute the backward replays the up-projections whole
            # (multi_latent_attention.py `get_query_key_value_tensors`: `qkv_up_proj_and_rope_apply` run by
            # `CheckpointWithoutOutput`, tensor_parallel/random.py `_recompute`, at c08d89bea0 and d98e8a64), so
            # both linears gather their latent shards again; the key's rotary part was gathered before the
            # checkpoint and is not (`recompute_comm`: two calls, the latents only; `pricer.MEGATRON_REPLAYS`).
            gather, regather = entry[0], entry[1]
            latents = geo.tokens * ((att.q_lora_rank or h) + att.kv_lora_rank)
            forward, again = geo.te_fp8_gather[:2] if geo.te_fp8_gather else (bc, bc)
            entry = [
                dataclasses.replace(
                    gather,
                    forward_comm=dataclasses.replace(
                        gather.forward_comm,
                        payload_bytes=latents * forward + geo.tokens * att.qk_rope_head_dim * bc,
                        calls=3,
                    ),
                    backward_comm=dataclasses.replace(gather.backward_comm, calls=3),
                    recompute_comm=dataclasses.replace(gather.forward_comm, payload_bytes=latents * forward, calls=2),
                ),
                dataclasses.replace(
                    regather,
                    backward_comm=dataclasses.replace(regather.backward_comm, payload_bytes=latents * again, calls=2),
                ),
                *(
                    dataclasses.replace(amax, forward_comm=dataclasses.replace(amax.forward_comm, calls=2))
                    for amax in entry[2:]
                ),
            ]
        if entry:
            ops += [dataclasses.replace(entry[0], inputs=(q_source, kv_source, rope_key)), *entry[1:]]
            if geo.gathers:
                q_source = kv_source = rope_key = entry[0].name
        q_name = p + ("q_up" if att.q_lora_rank else "q_proj")
        q_in = att.q_lora_rank or h
        # under qk_layernorm (`latent_norms`) the up-projections are TELayerNormColumnParallelLinear
        # (`Op.norm_input`); linear_q_proj, without a q latent, reads the input norm's module
        normed_q = att.latent_norms and bool(att.q_lora_rank)
        ops += [
            _matmul(q_name, block, n, q_in, heads * d_qk, bc, transient=True, inputs=(q_source,), norm_input=normed_q),
            _matmul(
                up,
                block,
                n,
                att.kv_lora_rank,
                heads * (att.qk_nope_head_dim + att.value_head_dim),
                bc,
                switch=None if ulysses else "attUp",
                transient=ulysses,
                inputs=(kv_source,),
                norm_input=att.latent_norms,
            ),
            # Q and K assembled: the rotary part applied and concatenated with the no-position part.
            _elementwise(
                p + "rope",
                block,
                *_mla_rope_bytes(geo, n, heads, att.qk_nope_head_dim, att.qk_rope_head_dim, att.value_head_dim),
                switch=None if ulysses else "attUp",
                transient=ulysses,
                inputs=(q_name, up, rope_key),
            ),
        ]
        qk, v, qkv_switch = [p + "rope"], [up], "attUp"
    else:
        d = att.head_dim
        kv = kv_heads_per_rank(att.num_kv_heads, geo.tp)
        entry = _tp_entry(
            p,
            "attention",
            block,
            geo,
            h,
            norm,
            p + "qk_proj",
            userbuffers="qkv",
            float8=geo.float8_tp,
            te_fp8=True,
            linears=1 if geo.fused_qkv else 3,  # torchtitan's wq, wk, wv (model.py `Attention`) or its wqkv
        )
        ops += entry
        source = entry[0].name if geo.gathers else norm
        # The last op before the scores holds Q and K (attBMM); those before it keep nothing their
        # backward needs, except the q/k-norm's input, which the memory model counts under normOp.
        chain = ["qk_proj"] + (["qk_norm"] if att.qk_norm else []) + (["rope"] if att.rope else [])
        final = None if ulysses else chain[-1]

        def qk_state(op: str) -> dict:
            if op == "qk_proj" and att.qk_norm:
                return {"switch": "normOp"}
            return {"switch": "attBMM"} if op == final else {"transient": True}

        width = (heads + kv) * d
        qkv = (heads + 2 * kv) * d  # Megatron's linear_qkv: one GEMM for the three
        ops.append(
            _matmul(
                p + "qk_proj",
                block,
                n,
                h,
                width,
                bc,
                inputs=(source,),
                fused_n=qkv,
                norm_input=True,
                linears=() if geo.fused_qkv else _separate_linears(geo, heads * d, kv * d),
                # torchtitan's wq and wk: one sum of their input gradients (wv's below); its wqkv: the split
                side_bytes=_plus(
                    _bias_passes(geo, att.qkv_bias, n, width, added_after=True),
                    _fused_qkv_split(geo, n, width, False) if geo.fused_qkv else _shared_input_sums(geo, n, h),
                ),
                **qk_state("qk_proj"),
            )
        )
        previous = p + "qk_proj"
        if att.qk_norm:
            ops.append(_norm(p + "qk_norm", block, n, width, bc, inputs=(previous,), **qk_state("qk_norm")))
            previous = p + "qk_norm"
        if att.rope:
            unfused = _megatron_unfused_rope(geo)
            forward, backward = (UNFUSED_ROPE_FORWARD * bc, UNFUSED_ROPE_BACKWARD * bc) if unfused else (2 * bc, 2 * bc)
            complex_rope = _compiled_complex_rope(geo, att.qk_norm)
            if complex_rope:
                forward = backward = complex_rope_bytes(bc)
            rope = _elementwise(
                p + "rope",
                block,
                forward * n * width,
                backward * n * width,
                inputs=(previous,),
                **qk_state("rope"),
            )
            if unfused:
                rope = dataclasses.replace(rope, strided_bytes=(UNFUSED_ROPE_STRIDED * bc * n * width,) * 2)
            ops.append(rope if unfused or complex_rope else dataclasses.replace(rope, fusion="rope"))
            previous = p + "rope"
        ops.append(
            _matmul(
                p + "v_proj",
                block,
                n,
                h,
                kv * d,
                bc,
                inputs=(source,),
                fused_n=qkv,
                norm_input=True,
                linears=() if geo.fused_qkv else _separate_linears(geo, kv * d),
                side_bytes=_plus(
                    _bias_passes(geo, att.qkv_bias, n, kv * d, added_after=True),
                    _fused_qkv_split(geo, n, kv * d, True) if geo.fused_qkv else _shared_input_sums(geo, n, h),
                ),
                **({"transient": True} if ulysses else {"switch": "attBMM"}),
            )
        )
        qk, v, qkv_switch = [previous], [p + "v_proj"], "attBMM"
    if ulysses:
        q_width, kv_width = _core_widths(kind, geo)
        payload = n * (heads * q_width[0] + kv_width) * bc
        # TransformerEngine's `flash_attn_a2a_communicate` (d0067d0d) posts one `all_to_all_single` a tensor:
        # Q, K, V forward, dQ, dK, dV backward, each its own NCCL call
        calls = 3 if geo.framework == "megatron" and geo.transformer_impl == "transformer_engine" else 1
        ops.append(
            Op(
                p + "cp_a2a_qkv",
                block,
                COMM,
                switch=qkv_switch,
                inputs=(*qk, *v),
                forward_comm=Collective(ALL_TO_ALL, a2a_group, payload, "cp_a2a", calls=calls),
                backward_comm=Collective(ALL_TO_ALL, a2a_group, payload, "cp_a2a", calls=calls),
            )
        )
        qk = v = [p + "cp_a2a_qkv"]
    return ops, qk, v


def _core_widths(kind: BodyKind, geo: OpGeometry) -> tuple[tuple[int, int], int]:
    """((query/key width, value width) per head, keys and values per token on one device)."""
    att = kind.attention
    heads = per_rank(att.num_heads, geo.tp)
    if att.is_mla:
        return (att.q_head_dim, att.value_head_dim), heads * (att.q_head_dim + att.value_head_dim)
    return (att.head_dim, att.head_dim), 2 * kv_heads_per_rank(att.num_kv_heads, geo.tp) * att.head_dim


def _core(kind: BodyKind, geo: OpGeometry, p: str, qk: list[str], v: list[str]) -> tuple[list[Op], str]:
    """The attention core, eager or flash, with context parallelism; returns the ops and its output."""
    att, bc, block = kind.attention, geo.dtype_bytes, "attention"
    n, b, s = geo.tokens, geo.micro_batch_size, geo.seq_length
    heads = per_rank(att.num_heads, geo.tp)
    (d_qk, d_v), kv_width = _core_widths(kind, geo)
    pairs = heads * geo.attention_pairs(att.window)
    keys = b * s  # every key of the sequence reaches each query chunk
    # Per (sequence, head): ring CP computes s/cp queries against the sequence's keys on every local
    # head; Ulysses every query of heads/cp heads.
    ulysses = geo.cp > 1 and geo.cp_variant == "ulysses"
    # hierarchical: heads/cp_a2a after the all-to-all, s/cp_ring queries of each on the ring
    sequences = b * (heads / geo.cp if ulysses else heads / geo.cp_a2a)
    queries = s if ulysses else s / geo.cp_ring
    mean_keys = pairs / (sequences * queries)
    causal = 0.0 if geo.block_pairs else 1.0  # a language model's mask; a vision encoder's blocks are whole
    ops: list[Op] = []
    kv_heads = 0 if att.is_mla else kv_heads_per_rank(att.num_kv_heads, geo.tp)
    if geo.repeat_kv and 0 < kv_heads < heads:
        # torchtitan's `repeat_kv` (torchtitan/models/llama/model.py at 9dec370: unsqueeze, expand, reshape)
        # copies K and V out to every query head before SDPA: reads kv heads, writes all heads, for each;
        # its backward sums the heads' gradients back (reads all, writes kv heads). From ff0829c10
        # (2026-01-27; v0.2.2) it passes `enable_gqa=True` instead, which SDPA's kernels take as is.
        copied = 2 * n * (kv_heads + heads) * att.head_dim * bc
        ops.append(_elementwise(p + "repeat_kv", block, copied, copied, inputs=(*qk, *v)))
    if geo.flash_attention:
        # The kernel keeps O and the log-sum-exp of each row (the `softmax` switch); the backward
        # re-forms S = QKᵀ, then dV, dP, dQ, dK: 3× the score matmul and 2× the value matmul.
        scores, context = p + "flash_scores", p + "flash_context"
        if geo.te_fp8_attention:
            elements = (n * heads * d_qk + n * kv_width, n * heads * d_v)
            casts = fp8_attention_casts(p + "fp8_attention_casts", block, geo.te_fp8_attention, bc, *elements, qk + v)
            ops.append(casts)
        # after an all-to-all over heads (Ulysses over cp, hierarchical over cp_a2a) a rank's keys and values
        # carry that share of its key/value heads, one head at least (fewer key/value heads than ranks)
        split = geo.cp if ulysses else geo.cp_a2a
        kv_share = 1 / split if not kv_heads else max(kv_heads / split, 1) / kv_heads
        kv_read = keys * kv_width / 2 * kv_share
        qk_bytes = (n * heads * d_qk + kv_read) * bc + n * heads * STATS_BYTES
        v_bytes = (kv_read + n * heads * d_v) * bc
        ops += [
            Op(
                scores,
                block,
                MATMUL,
                "softmax",
                False,
                (*qk,),
                2 * pairs * d_qk,
                qk_bytes,
                6 * pairs * d_qk,
                2 * qk_bytes,
                attention=(sequences, queries, mean_keys, d_qk, causal),
                attention_dropout=kind.attention_dropout > 0,
                attention_window=att.window if att.window < s else 0,
            ),
            Op(
                context,
                block,
                MATMUL,
                None,
                False,
                (scores, *v),
                2 * pairs * d_v,
                v_bytes,
                4 * pairs * d_v,
                2 * v_bytes,
                attention=(sequences, queries, mean_keys, d_qk, causal),
                attention_dropout=kind.attention_dropout > 0,
                attention_window=att.window if att.window < s else 0,
            ),
        ]
    else:
        scores, context = p + "scores", p + "context"
        # Megatron's unfused core (megatron/core/transformer/dot_product_attention.py, as Megatron-LM
        # 2022's CoreAttention; TransformerEngine's UnfusedDotProductAttention under the TE spec,
        # `te_unfused_attention_ops`): Q, K, V are strided views of the fused QKV output (`torch.split`), so
        # their gradients are concatenated back into it (split's backward: read and write them once);
        # the context is permuted to (s, b, heads, d) with `.contiguous()` (a copy forward, MLA's too; its
        # backward is views: the gradient reaches the BMM strided, which cuBLAS takes as it is).
        megatron = geo.framework == "megatron"
        copies = megatron and not kind.attention.is_mla
        te_unfused = megatron and geo.transformer_impl == "transformer_engine" and not geo.block_pairs
        q_k_grads = 2 * n * (heads * d_qk + kv_width / 2) * bc if copies else 0.0
        v_grads = 2 * n * (kv_width / 2) * bc if copies else 0.0
        permute = 2 * n * heads * d_v * bc if megatron else 0.0
        # Both cores form the scores with `torch.baddbmm(..., beta=0.0, alpha=softmax_scale)`; autograd's
        # baddbmm backward (PyTorch tools/autograd/derivatives.yaml: `maybe_multiply(grad.bmm(...),
        # alpha)` for batch1 and batch2) scales dQ and dK in a kernel each when alpha is not 1: read
        # and write each once.
        alpha = 2 * (n + keys) * heads * d_qk * bc if megatron else 0.0
        # ALiBi (Megatron-DeepSpeed's `ParallelAttention.forward`, bigscience-workshop/Megatron-DeepSpeed
        # megatron/model/transformer.py at 9bb3dc33, the branch BLOOM ran): the scores start from the bias
        # tensor, `torch.baddbmm(alibi[:b*np, :, :sk], q, k^T, beta=1.0, alpha=1/norm_factor)`, whose input
        # broadcasts over the queries; PyTorch's CUDA baddbmm (aten/src/ATen/native/cuda/Blas.cpp
        # `baddbmm_out_cuda_impl`, 1.10-1.11) copies it into the output first (`result.copy_(self)`,
        # beta != 0) and cuBLAS's batched GEMM reads that C back (beta 1): one more write and one more
        # read of the scores (in the GEMM's own traffic), and the copy's kernel. The bias needs no gradient.
        biased = pairs * bc if att.alibi else 0.0
        mask = (p + "attention_mask",) if te_unfused else ()
        if te_unfused:  # rebuilt wherever the softmax runs again (its input)
            ops.append(te_attention_mask(mask[0], block, queries * s))
        ops.append(
            Op(
                scores,
                block,
                MATMUL,
                None,
                True,
                (*qk,),
                2 * pairs * d_qk,
                (n * heads * d_qk + keys * heads * d_qk + pairs) * bc + biased,
                4 * pairs * d_qk,
                2 * (n * heads * d_qk + keys * heads * d_qk + pairs) * bc,
                gemm=(queries, d_qk, mean_keys, round(sequences), mean_keys),
                side_bytes=(biased, q_k_grads + alpha),
                side_kernels=(1.0, (1.0 if copies else 0.0) + (2.0 if megatron else 0.0)),
                # torch.bmm in the compute dtype: FP8 training's autocast does not reach it
                fp8=False,
            )
        )
        # Scale, causal mask and softmax, fused, written in the compute dtype: read the scores, write the
        # probabilities; backward read both and write the gradient. Megatron's own causal kernel
        # (scaled_upper_triang_masked_softmax.h: a row's loads stop at the diagonal, `local_seq`; every
        # element is stored) reads only the lower triangle, half of each read; TransformerEngine's
        # (since v2.0) takes the causal mask as a full mask (`te_unfused_attention_ops`) and reads all.
        reads = 0.5 if megatron and not te_unfused and not geo.block_pairs else 1.0
        softmax = _elementwise(
            p + "softmax",
            block,
            (reads + 1) * pairs * bc,
            (2 * reads + 1) * pairs * bc,
            switch="softmax",
            inputs=(scores, *mask),
        )
        if geo.torch_softmax:
            softmax = _torch_softmax(softmax, geo, pairs)
        elif geo.mindformers_softmax_bytes:
            forward, backward = mindformers_softmax_bytes(bc, geo.mindformers_softmax_bytes)
            # the Casts are kernels of their own only where softmax_compute_type is not the compute dtype
            kernels = 3.0 if geo.mindformers_softmax_bytes != bc else 2.0
            softmax = dataclasses.replace(
                softmax, bytes=forward * pairs, backward_bytes=backward * pairs, launches=(kernels, kernels)
            )
        ops.append(softmax)
        probs = p + "softmax"
        if kind.attention_dropout > 0:
            ops += [
                # The mask is drawn from the RNG state: regenerating it writes it again.
                _elementwise(p + "dropout_mask", block, pairs * MASK_BYTES, 0.0, switch="dropout"),
                _elementwise(
                    p + "dropout_probs",
                    block,
                    pairs * (2 * bc + MASK_BYTES),
                    pairs * (2 * bc + MASK_BYTES),
                    switch="headCast",
                    inputs=(probs, p + "dropout_mask"),
                ),
            ]
            probs = p + "dropout_probs"
        ops.append(
            Op(
                context,
                block,
                MATMUL,
                None,
                False,
                (probs, *v),
                2 * pairs * d_v,
                (pairs + keys * heads * d_v + n * heads * d_v) * bc,
                4 * pairs * d_v,
                2 * (pairs + keys * heads * d_v + n * heads * d_v) * bc,
                gemm=(queries, mean_keys, d_v, round(sequences), d_v),
                side_bytes=(permute, v_grads),
                fp8=False,
            )
        )
        # the passes over the materialized scores, priced at standard attention's measured HBM share
        # where the device has it (`Kernels.score_memory_s`), read at a score row's keys
        row = mean_keys if geo.block_pairs else s
        passes = {scores, p + "softmax", p + "dropout_mask", p + "dropout_probs", context}
        ops = [dataclasses.replace(op, score_keys=row, score_head_dim=d_qk) if op.name in passes else op for op in ops]
    out = context
    ring = geo.cp > 1 and geo.cp_variant == "ring"
    if geo.cp > 1 and geo.cp_variant == "hierarchical":
        return _hierarchical(kind, geo, p, ops, qk, v)
    if geo.cp > 1 and geo.cp_variant == "all_gather":
        return _all_gather_core(kind, geo, p, ops, qk, v)
    if ring and geo.flash_attention and not geo.block_pairs and geo.framework in STEPPED:
        ops, out = _stepped_ring(kind, geo, p, ops, qk, v)
    elif ring:
        # cp-1 steps pass a chunk's keys and values around the ring behind the blocks' compute. The
        # chunks received are kept for the backward (`gather`); the backward passes their gradients
        # around, and at gather 0 the chunks once more.
        chunk = (geo.cp - 1) * n * kv_width * bc
        ops.insert(
            0,
            Op(
                p + "cp_ring",
                block,
                COMM,
                switch="gather",
                inputs=(*qk, *v),
                forward_comm=Collective(P2P, "cp", chunk, "cp_ring", (scores, "forward")),
                backward_comm=Collective(P2P, "cp", chunk, "cp_ring", (scores, "backward")),
                recompute_comm=Collective(P2P, "cp", chunk, "cp_ring", (context, "backward")),
            ),
        )
    if geo.cp > 1 and geo.cp_variant == "ulysses":
        if geo.framework == "megatron" and geo.transformer_impl == "transformer_engine" and geo.flash_attention:
            ops.append(_te_a2a_reorders(p, n * heads * d_qk, n * kv_width, n * heads * d_v, bc, context))
        payload = n * heads * d_v * bc
        ops.append(
            Op(
                p + "cp_a2a_out",
                block,
                COMM,
                inputs=(context,),
                forward_comm=Collective(ALL_TO_ALL, "cp", payload, "cp_a2a"),
                backward_comm=Collective(ALL_TO_ALL, "cp", payload, "cp_a2a"),
            )
        )
        out = p + "cp_a2a_out"
    return ops, out


def fp8_attention_casts(
    name: str, block: str, recipe: str, bc: int, qkv_elements: float, out_elements: float, inputs: Sequence[str]
) -> Op:
    """TransformerEngine's casts around its FP8 attention under *recipe* (`ppb_core.timing.fp8_attention`
    module docstring: TE v2.17.0 backends.py `FusedAttnFunc`): the forward's over Q, K, V (*qkv_elements* on
    this device) and O (*out_elements*), the backward's over dO and dQ, dK, dV, with their kernels."""
    qkv, out, d_out, d_qkv = cast_bytes(recipe, bc)
    forward = qkv * qkv_elements + out * out_elements
    backward = d_out * out_elements + d_qkv * qkv_elements
    op = _elementwise(name, block, forward, backward, switch="softmax", inputs=inputs)
    return dataclasses.replace(op, launches=CAST_LAUNCHES[recipe], te_quantize=True)


def _te_a2a_reorders(p: str, q_elements: float, kv_elements: float, out_elements: float, bc: int, context: str) -> Op:
    """TransformerEngine's copies around Megatron's `--cp-comm-type a2a` (`AttnFuncWithCPAndQKVOA2A`,
    d0067d0d context_parallel.py `flash_attn_a2a_communicate`, sbhd): before each all-to-all of Q, K, V
    (and of dO in the backward) the head-split view is moved to the front and made contiguous (a copy),
    after it `reorder_seq_chunks_for_a2a_before_attn` puts the load-balanced chunks back in sequence
    order (`torch.index_select`: a copy; its `movedim(0, 0)` and `.contiguous()` no-ops); the output
    (the dQ, dK, dV in the backward) is reordered by `reorder_seq_chunks_for_a2a_after_attn` before its
    all-to-all (`index_select`) and made contiguous after it (`movedim(...).contiguous()`). Two copies
    of every tensor crossing the all-to-alls, each read and written once: forward Q, K, V and O, backward
    dO, dQ, dK, dV; two kernels a tensor (the reorder `jit_fuser`'d into one, the other copy eager)."""
    forward = 2 * 2 * bc * (q_elements + kv_elements + out_elements)
    backward = 2 * 2 * bc * (out_elements + q_elements + kv_elements)
    op = _elementwise(p + "cp_a2a_reorder", "attention", forward, backward, switch="softmax", inputs=(context,))
    return dataclasses.replace(op, launches=(8.0, 8.0))


def _hierarchical(
    kind: BodyKind, geo: OpGeometry, p: str, ops: list[Op], qk: list[str], v: list[str]
) -> tuple[list[Op], str]:
    """Megatron's `--cp-comm-type a2a+p2p` (TEDotProductAttention passes cp_group = the hierarchical groups,
    Megatron-LM d98e8a64 extensions/transformer_engine.py): TransformerEngine's `AttnFuncWithCPAndKVP2P`
    (d0067d0d) with cp_group [a2a, p2p] first runs `flash_attn_a2a_communicate` on Q, K, V over the a2a
    group (heads split by its size a, the sequence gathered: `cp_a2a_qkv`, `_projections`), then the
    p2p ring over the second group as `_stepped_ring` prices it, with s·b/(cp/a) tokens of heads/a a rank
    (ring steps and exchanges at the ring's cp/a ranks, batched at cp/a == 2 before Blackwell), then the
    output's all-to-all back; the backward the dO all-to-all, the ring, the dQ, dK, dV all-to-alls. Around
    the all-to-alls the same copies as `--cp-comm-type a2a` (`_te_a2a_reorders`)."""
    att, bc = kind.attention, geo.dtype_bytes
    n, heads = geo.tokens, per_rank(att.num_heads, geo.tp)
    (d_qk, d_v), kv_width = _core_widths(kind, geo)
    # the ring sees a tensor-parallel-like split of the heads by a and s/(cp/a) tokens a rank
    ring_geo = dataclasses.replace(geo, tp=geo.tp * geo.cp_a2a, cp=geo.cp_ring, cp_variant="ring", cp_a2a=1)
    ops, out = _stepped_ring(kind, ring_geo, p, ops, qk, v, group="cp_p2p")
    ops.append(_te_a2a_reorders(p, n * heads * d_qk, n * kv_width, n * heads * d_v, bc, out))
    payload = n * heads * d_v * bc
    ops.append(
        Op(
            p + "cp_a2a_out",
            "attention",
            COMM,
            inputs=(out,),
            forward_comm=Collective(ALL_TO_ALL, "cp_a2a", payload, "cp_a2a"),
            backward_comm=Collective(ALL_TO_ALL, "cp_a2a", payload, "cp_a2a"),
        )
    )
    return ops, p + "cp_a2a_out"


# TransformerEngine's all-gather CP kernels besides its flash calls and collectives (`_all_gather_core`):
# forward 2 index_selects, 2 Q-half copies, 2 output-half copies, the `out` zeros (and the local V's contiguous
# copy, K's too without RoPE or a key norm); backward 2 index_selects
# of K, V, the dK, dV zeros (2), a Q, O, dO half copy each step (6), the dQ half copy (2), dK and dV added
# each step (4), 2 index_selects of dK, dV.
AG_LAUNCHES = (7.0, 18.0)


def _all_gather_core(
    kind: BodyKind, geo: OpGeometry, p: str, ops: list[Op], qk: list[str], v: list[str]
) -> tuple[list[Op], str]:
    """Megatron's `--cp-comm-type all_gather`: TransformerEngine's `AttnFuncWithCPAndKVAllGather` (d0067d0d
    context_parallel.py, sbhd, 16-bit). Forward: K and V all-gathered over the CP group (`gather_along_first_dim`,
    two NCCL calls, on the compute stream: "the all-gather is not async, and cannot be overlapped",
    transformer_config.py `cp_comm_type`), put in sequence order (`index_select` of each gathered tensor), then
    two flash calls, one per local chunk (rank r's chunks r and 2cp−1−r, s/(2cp) queries each) against the keys
    up to its end, causal bottom-right (`get_kv_seq_info_after_all_gather`; `ring.all_gather_steps`), each on its
    own stream; each call's query half made contiguous before and its output copied into the output after, the
    unused `out` zeroed. Backward: K, V gathered and reordered again (nothing gathered is saved: ctx keeps the
    local q, k, v, the output and each call's statistics), dK, dV zeroed at the gathered size, each call's Q,
    O, dO halves copied, its dQ copied into dQ and its dK, dV added into the gathered sums over its keys, the
    sums reordered (`index_select`) and reduce-scattered (`reduce_scatter_along_first_dim`, two calls). The
    keys of both calls: (2cp+1)·s/(2cp) a sequence."""
    att, bc, block, cp = kind.attention, geo.dtype_bytes, "attention", geo.cp
    n = geo.tokens
    heads = per_rank(att.num_heads, geo.tp)
    (d_qk, d_v), kv_width = _core_widths(kind, geo)
    scores, context = p + "flash_scores", p + "flash_context"
    ops = [
        dataclasses.replace(op, ring=cp, ring_steps="all_gather") if op.name in (scores, context) else op for op in ops
    ]
    gathered = cp * n * kv_width * bc  # K and V of the whole sequence
    query, out = n * heads * d_qk * bc, n * heads * d_v * bc
    call_keys = (2 * cp + 1) / (2 * cp) * geo.seq_length * geo.micro_batch_size
    # `k, v = [x.movedim(seq_dim, 0).contiguous() ...]` before the gathers: Megatron hands TE V as a view of the
    # fused QKV output (attention.py `get_query_key_value_tensors`, d98e8a64: `SplitAlongDim`/`torch.split`; MLA's
    # split of kv_up's), copied here; K too where neither RoPE nor a key norm wrote it anew
    fresh_k = att.is_mla or att.rope or att.qk_norm
    local_kv = (n * kv_width / 2 * (1 if fresh_k else 2)) * bc
    forward = 2 * local_kv + 2 * gathered + 2 * query + 2 * out + out  # K, V copies, reorders, halves, zeros
    backward = (
        2 * gathered  # K, V reordered
        + gathered  # dK, dV zeros
        + 2 * (query + 2 * out)  # Q, O, dO halves
        + 2 * query  # dQ halves
        + 3 * call_keys * kv_width * bc  # dK, dV sums: read the sum and the call's, write
        + 2 * gathered  # dK, dV reordered
    )
    copies = _elementwise(p + "cp_ag_copies", block, forward, backward, switch="softmax", inputs=(context,))
    gather = Collective(ALL_GATHER, "cp", gathered, "cp_ring", calls=2)
    scatter = Collective(REDUCE_SCATTER, "cp", gathered, "cp_ring", calls=2)
    comms = [
        Op(p + "cp_allgather_kv", block, COMM, inputs=(*qk, *v), forward_comm=gather, backward_comm=gather),
        Op(p + "cp_reduce_scatter_dkv", block, COMM, inputs=(context,), backward_comm=scatter),
    ]
    launches = (AG_LAUNCHES[0] + (1 if fresh_k else 2), AG_LAUNCHES[1])
    return [*comms, *ops, dataclasses.replace(copies, launches=launches)], context


def _stepped_ring(
    kind: BodyKind, geo: OpGeometry, p: str, ops: list[Op], qk: list[str], v: list[str], group: str = "cp"
) -> tuple[list[Op], str]:
    """Ring attention as Megatron (TransformerEngine's `AttnFuncWithCPAndKVP2P`) and torchtitan
    (PyTorch's `context_parallel`) run it (`ppb_core.timing.ring`): the flash ops as cp calls a pass,
    the merges and gradient sums beside them (`cp_merge`), and the exchanges:

    - torchtitan before ff0829c10 (`timing.repeat_kv`) passes the K and V `repeat_kv` widened to every
      query head (its model code repeats them before SDPA, 9dec370 torchtitan/models/llama/model.py);
      from it, at their key/value heads (`enable_gqa`). Its default rotation
      (`--experimental.context_parallel_rotate_method allgather`, 9dec370 config_manager.py; PyTorch's
      `_cp_options.rotate_method` default ALL_GATHER) all-gathers every rank's K, V once, issued at
      step 0 and waited for at step 1: it hides behind one step only. The backward gathers them again
      (a fresh `_AllGatherRotater`; under torch.compile the same all-gather as the forward's, merged by
      AOTAutograd's CSE) and passes the fp32 dK, dV sums to the next rank after each step
      (`_AllToAllRotater`, `permute_tensor`, always all-to-all), each waited for after the next step's
      kernel (hidden behind one step), the last right after the loop (`cp_ring_grads_last`, exposed).
      With `timing.cp_rotate_method` alltoall (`_AllToAllRotater`) each step but the last shifts its
      K, V to the next rank (`permute_tensor`), waited for at the next step: cp−1 exchanges a pass,
      each beside one step, as Megatron's; the backward shifts them again (compiled: CSE'd away too).
    - Megatron: each step sends this rank's K, V chunk to the next rank while it computes
      (`flash_attn_p2p_communicate`: one batch_isend_irecv at cp 2 before Blackwell, else an isend and an
      irecv; before TE v2.3 at every cp 2, `cp_p2p_batched`; waited at the next step): cp−1 exchanges, each
      beside one step. The backward sends K, V again with the dK, dV (16-bit) of the steps so far:
      K, V at steps 0…cp−2, dK, dV at steps 1…cp−1, cp exchanges beside one step each.
    Neither keeps more than one chunk's K, V for the backward (TE d0067d0d `AttnFuncWithCPAndKVP2P.
    forward` saves the last chunk received, `p2p_comm_buffers[-1]`, the local K, V's size, and its
    backward passes the chunks round again from it; PyTorch's backward re-gathers): the backward's
    exchange runs whatever `gather` says; a rerun forward repeats the forward's."""
    att, bc, block, cp = kind.attention, geo.dtype_bytes, "attention", geo.cp
    n = geo.tokens
    heads = per_rank(att.num_heads, geo.tp)
    (d_qk, d_v), kv_width = _core_widths(kind, geo)
    titan = geo.framework == "torchtitan"
    kv_elements = n * (heads * (d_qk + d_v) if geo.repeat_kv and not att.is_mla else kv_width)
    scores, context = p + "flash_scores", p + "flash_context"
    ops = [dataclasses.replace(op, ring=cp) if op.name in (scores, context) else op for op in ops]
    forward_bytes, backward_bytes = merge_bytes(
        geo.framework,
        cp,
        n * heads * d_v,
        n * heads * d_qk,
        kv_elements,
        compiled=titan and not geo.eager,
        sends=cp - 1 if geo.cp_rotate == "alltoall" else 1,
    )
    merge = _elementwise(p + "cp_merge", block, forward_bytes, backward_bytes, switch="softmax", inputs=(context,))
    if not titan:  # K, V cat, statistics clone, step 0's correction, two corrections a later step;
        # backward the saved chunk's copy, then dQ, dK, dV a step (TE d0067d0d AttnFuncWithCPAndKVP2P)
        merge = dataclasses.replace(merge, launches=(2.0 * cp + 1, 3.0 * cp + 1))
    ops.append(merge)
    chunk = kv_elements * bc
    if titan:
        if geo.cp_rotate == "alltoall":  # _AllToAllRotater: each step but the last shifts K, V on
            gather = Collective(P2P, "cp", (cp - 1) * chunk, "cp_ring", (scores, "forward"), exchanges=cp - 1)
        else:
            gather = Collective(ALL_GATHER, "cp", cp * chunk, "cp_ring", (scores, "forward"), exchanges=1)
        # compiled, the backward's K, V exchanges are the forward's: AOTAutograd's CSE of the joint
        # graph (min_cut_rematerialization_partition, functorch config.cse on) merges the identical
        # collectives on the same K, V, so the backward reads the forward's (saved, or exchanged again
        # with the rerun forward under recompute)
        again = dataclasses.replace(gather, partner=(scores, "backward")) if geo.eager else None
        sums = kv_elements * FP32_BYTES  # the fp32 dK, dV sums
        grads = Collective(P2P, "cp", (cp - 1) * sums, "cp_ring", (scores, "backward"), exchanges=cp - 1)
        last = Collective(P2P, "cp", sums, "cp_ring")
    else:
        gather = Collective(P2P, group, (cp - 1) * chunk, "cp_ring", (scores, "forward"), exchanges=cp - 1)
        again = Collective(P2P, group, 2 * (cp - 1) * chunk, "cp_ring", (scores, "backward"), exchanges=cp)
        grads = last = None
    kv = (*qk, *v)
    comms = [Op(p + "cp_ring", block, COMM, switch="gather", inputs=kv, forward_comm=gather, backward_comm=again)]
    if not titan:  # an exchange a step, cp−1 forward, cp backward: a batch_isend_irecv, else isend + irecv
        per = 1.0 if geo.cp_p2p_batched else 2.0
        comms[0] = dataclasses.replace(comms[0], launches=(per * (cp - 1), per * cp))
    if grads is not None:
        comms.append(Op(p + "cp_ring_grads", block, COMM, inputs=(context,), backward_comm=grads))
        comms.append(Op(p + "cp_ring_grads_last", block, COMM, inputs=(context,), backward_comm=last))
    return [*comms, *ops], p + "cp_merge"


# TransformerEngine's UnfusedDotProductAttention (transformer_engine/pytorch/attention/
# dot_product_attention/backends.py, d0067d0d; Megatron's TEDotProductAttention under --attention-backend
# unfused) builds the full mask on every forward (utils.py `get_full_mask`, since v2.1; the causal mask
# as a sliding window of (s_k, 0)): the int32 difference of two aranges (write 4 bytes an element),
# `swa_left` and `swa_right` from it (read 4, write 4 each), the two comparisons (read 4, write 1 each),
# the negation (1 + 1), the `&` (2 + 1) and `torch.logical_not` (1 + 1): 37 bytes per (query, key)
# element of one [1, 1, s_q, s_k] mask, in 10 kernels (the two aranges' too). Since v2.0 its softmax
# takes that mask, causal or not, through `scaled_masked_softmax_fwd` (softmax.py
# `forward_fused_softmax`: "Disable for now" the aligned causal kernel), reading every score.
TE_MASK_BYTES = 37
TE_MASK_KERNELS = 10


def te_attention_mask(name: str, block: str, elements: float) -> Op:
    """TransformerEngine's unfused attention mask, built each forward for *elements* (query, key) pairs."""
    op = _elementwise(name, block, TE_MASK_BYTES * elements, 0.0, transient=True)
    return dataclasses.replace(op, launches=(float(TE_MASK_KERNELS), 0.0))


def mindformers_softmax_bytes(bc: int, softmax: int) -> tuple[float, float]:
    """Bytes a score element of MindFormers' unfused attention under jit_level O1, (forward, backward): `_attn`
    (mindformers/models/llama/llama_transformer.py at a4dfb8219; research/deepseek2/deepseek2_transformer.py at
    2388c729a alike) scales the BatchMatMul's scores (Mul), adds the mask (Add), casts them to
    softmax_compute_type (Cast), runs Softmax and casts the probabilities back to the compute dtype for the next
    BatchMatMul. DVM clusters the Mul, Add and Cast (element-wise, level 0) into one kernel: read bc, write s
    (the broadcast mask not counted); Softmax is not a DVM op on Ascend (graph_kernel_expander_cloud.cc
    `expand_ops_with_level_dvm`, stored 073ad857, lists neither it nor SoftmaxGradExt at level 0): an aclnn
    kernel, read and write s; the Cast back its own kernel before the BatchMatMul: read s, write bc (none where
    s is the compute dtype). Backward: the Cast's gradient up (read bc, write s), `SoftmaxBackward` (MindSpore's
    Softmax bprop, frontend/expander/bprop grad_nn_ops.cc: one kernel reading the gradient and the output and
    writing its own, 3s), then the Cast down fused with the scale's Mul (read s, write bc). *bc* the compute
    dtype's bytes, *softmax* softmax_compute_type's: at float32 over bf16 20 and 24 bytes against the fused
    kernel's 4 and 6, in three kernels each way (two where no Cast runs)."""
    cast = softmax != bc
    forward = (bc + softmax) + 2 * softmax + ((softmax + bc) if cast else 0)
    backward = ((bc + softmax) if cast else 0) + 3 * softmax + (softmax + bc)
    return float(forward), float(backward)


def _torch_softmax(op: Op, geo: OpGeometry, pairs: float) -> Op:
    """Megatron's scale-mask-softmax as PyTorch ops (fused_softmax.py `forward_torch_softmax`,
    Megatron-LM d98e8a64), per score element: the upcast to fp32 where the softmax runs in fp32 on
    16-bit scores (read bc, write 4), the scale (`input * self.scale`, under query-key layer
    scaling: read and write), `attention_mask_func`'s in-place `masked_fill_` (read and write; its
    broadcast mask not counted), the softmax (read and write), the cast back (read 4, write bc), each
    one kernel. Backward autograd's formula for each in turn: the casts' (read, write), the softmax's
    (read the gradient and the output, write), the masked fill's (`grad.masked_fill(mask, 0)`) and
    the scale's (read, write)."""
    bc = geo.dtype_bytes
    element = 4 if geo.softmax_fp32 else bc
    upcast = geo.softmax_fp32 and bc < 4
    casts = 2 * (bc + 4) if upcast else 0
    scale = 2 * element if geo.softmax_scaled else 0
    kernels = 2 * upcast + geo.softmax_scaled + 2
    forward = casts + scale + 2 * element + 2 * element
    backward = casts + scale + 2 * element + 3 * element
    return dataclasses.replace(
        op, bytes=forward * pairs, backward_bytes=backward * pairs, launches=(float(kernels), float(kernels))
    )


def attention_ops(kind: BodyKind, geo: OpGeometry, p: str = "") -> list[Op]:
    att, h, bc = kind.attention, kind.hidden_size, geo.dtype_bytes
    block = "attention"
    rms = kind.norm.kind == "rmsnorm"
    # linear_qkv's norm, in its LayerNormLinear (MLA's input_layernorm is a module of its own: `Op.norm_input`)
    fp8_out = geo.te_norm_fp8_out and not att.is_mla
    ops = [_norm(p + "norm1", block, geo.whole_tokens, h, bc, rms, fp8_out, switch="normOp")]
    projections, qk, v = _projections(kind, geo, p, p + "norm1")
    core, out = _core(kind, geo, p, qk, v)
    heads = per_rank(att.num_heads, geo.tp)
    return [
        *ops,
        *projections,
        *core,
        _matmul(
            p + "out_proj",
            block,
            geo.tokens,
            heads * att.value_head_dim,
            h,
            bc,
            inputs=(out,),
            side_bytes=_bias_passes(geo, att.out_bias, geo.whole_tokens, h, added_after=False),
        ),
        *_tp_exit(
            p + "reduce_attention", block, geo, h, p + "out_proj", userbuffers="proj", float8=geo.float8_tp, te_fp8=True
        ),
        _residual(p + "residual_attention", block, geo, h, kind.hidden_dropout, att.out_bias),
    ]


def _activation(name: str, block: str, rows: float, width: float, gated: bool, bc: int, inputs: Sequence[str]) -> Op:
    """GeLU reads its input and writes its output; SwiGLU reads gate and up. Its output is `ffAct`'s."""
    elements = rows * width
    forward, backward = (3, 5) if gated else (2, 3)
    op = _elementwise(name, block, forward * elements * bc, backward * elements * bc, switch="ffAct", inputs=inputs)
    return dataclasses.replace(op, fusion="activation") if gated else op


def _ffn(
    p: str,
    block: str,
    geo: OpGeometry,
    rows: float,
    h: int,
    width: int,
    gated: bool,
    source: str,
    bias: bool = False,
    local_experts: int = 0,
) -> list[Op]:
    """Up (and gate) projection, activation, down projection over *rows* tokens; a grouped GEMM over
    *local_experts* experts reads every expert's weights."""
    bc, up_width = geo.dtype_bytes, width * (2 if gated else 1)
    up_weights = local_experts * h * up_width if local_experts else None
    down_weights = local_experts * width * h if local_experts else None
    groups = max(1, local_experts)
    return [
        _matmul(
            p + "_in",
            block,
            rows,
            h,
            up_width,
            bc,
            weights=up_weights,
            inputs=(source,),
            groups=groups,
            linears=_separate_linears(geo, width, width) if gated and not local_experts else (),
            # w1 and w3 (gated) read one input: autograd sums their input gradients under torchtitan
            side_bytes=_plus(
                _fc1_bias_passes(geo, bias, rows, up_width, gated),
                _shared_input_sums(geo, rows, h) if gated else (0.0, 0.0),
            ),
        ),
        _activation(p + "_act", block, rows, width, gated, bc, (p + "_in",)),
        _matmul(
            p + "_out",
            block,
            rows,
            width,
            h,
            bc,
            weights=down_weights,
            inputs=(p + "_act",),
            groups=groups,
            side_bytes=_bias_passes(geo, bias, geo.whole_tokens, h, added_after=False),
        ),
    ]


def _router_cast_passes(
    geo: OpGeometry, tokens: float, h: int, experts: int, bc: int
) -> dict[str, tuple[float, float]]:
    """The memory-bound passes Megatron-Core's router adds beside its gating GEMM under --moe-router-dtype fp32
    with a 16-bit input (`Op.side_bytes`, `Op.side_kernels`; the GEMM stays priced at 16-bit operands and rate).
    From core_v0.13.0 (0f058666a8, moe_utils.py `RouterGatingLinearFunction`, unchanged at d98e8a64) the forward
    is one TE GEMM of the 16-bit input writing fp32 logits; the backward casts the weight and the saved input to
    fp32 (`.to(ctx.router_dtype)`: read 2, write 4 bytes an element), runs both gradients' GEMMs on fp32 operands
    (TE's pure-fp32 GEMM) and casts both gradients back (read 4, write 2): 4 kernels. Before, router.py
    `TopKRouter.gating` ran `F.linear(input.to(router_dtype), weight.to(router_dtype))`: the forward casts the
    input and the weight (2 kernels) and multiplies fp32 operands; autograd's backward multiplies fp32 operands and
    casts both gradients back (2 kernels). Beyond the 16-bit GEMMs: every fp32 operand read or written 2 bytes
    more an element, each cast 6 bytes an element; per token and hidden element 16 bytes from core_v0.13.0 (2 +
    2 + 6 + 6, all in the backward), 18 before (6 + 2 forward, 2 + 2 + 6 backward). fp64 is not priced this way."""
    if geo.framework != "megatron" or geo.router_bytes != 4 or bc != 2:
        return {}
    extra = 4 - bc  # bytes an element an fp32 operand adds over the 16-bit one
    cast = bc + 4  # a cast between the two: read one, write the other
    th, te, eh = tokens * h, tokens * experts, experts * h
    # the backward's two GEMMs on fp32 operands: the output gradient read by both, the input gradient and the
    # weight gradient written, the input and the weight read
    gemms = (2 * te + 2 * th + 2 * eh) * extra
    if geo.router_te_gemm:
        # forward: the fp32 logits; backward: the casts of the weight and the input, then of both gradients
        return {"side_bytes": (te * extra, gemms + 2 * (th + eh) * cast), "side_kernels": (0.0, 4.0)}
    # forward: the casts of the input and the weight, the fp32 GEMM reading both and writing the logits;
    # backward: the two fp32 GEMMs, the casts of both gradients
    forward = (th + eh) * cast + (th + eh + te) * extra
    return {"side_bytes": (forward, gemms + (th + eh) * cast), "side_kernels": (2.0, 2.0)}


def expert_probs_bytes(geo: OpGeometry) -> int:
    """Bytes of an element of the routing probabilities the experts weight their rows by. DeepEP and HybridEP
    take and return fp32 probabilities whatever the router's dtype (token_dispatcher.py `_DeepepManager.dispatch`
    and `_HybridEPManager.dispatch`: "only supports float32 probs", `self.token_probs.float()`, 2edffadb52 and
    d98e8a64; HybridEP's `dispatch_with_permute` writes its permuted probabilities as `torch::kFloat32`, DeepEP
    branch hybrid-ep csrc/hybrid_ep/hybrid_ep.cu); Megatron's own dispatchers pass the router's."""
    return STATS_BYTES if geo.dispatcher in ("deepep", "hybridep") else geo.router_bytes


def _weighted_by_probs(op: Op, geo: OpGeometry, rows: float, width: float, gated: bool) -> Op:
    """Megatron's routed experts weight their activation by the routing probabilities (experts.py
    `TEGroupedMLP.forward`'s `bias_act_func`, mlp.py `MLP.forward` for a SequentialMLP's experts,
    d98e8a64). SwiGLU under the default `bias_swiglu_fusion` folds it into the fused kernel
    (`weighted_bias_swiglu_impl`: the probabilities read beside, nothing more counted); any other
    activation (GeLU: a routed expert cannot fuse it, TEGroupedMLP raises for it) runs it unfused:
    `intermediate * probs.unsqueeze(-1)`, then `.to(original_dtype)`, a cast where the probabilities'
    dtype (`--moe-router-dtype`) promotes the product. Forward the product (its input read, written in
    the promoted dtype) and the cast; backward the cast's gradient, the input's gradient g·p (cast
    back), the probabilities' g·x and its sum over the width. Launches beside the activation's one
    each way: 16-bit probabilities 1 forward, 3 backward; fp32 2 and 5."""
    if geo.framework != "megatron" or gated:
        return op
    elements, bc, pb = rows * width, geo.dtype_bytes, expert_probs_bytes(geo)
    wide = max(bc, pb)  # the product's dtype
    cast = pb > bc
    forward = elements * (bc + wide) + rows * pb + (elements * (wide + bc) if cast else 0.0)
    # backward: (cast g up) g·p (read g, write), (cast down), g·x (read g and x, write), sum (read, write rows)
    backward = (
        (elements * (bc + wide) if cast else 0.0)
        + elements * 2 * wide
        + (elements * (wide + bc) if cast else 0.0)
        + elements * (2 * wide + bc)
        + elements * wide
        + rows * pb
    )
    base = (1.0, 1.0)  # the activation's own kernel each way (`launches.op_launches`' default)
    extra = (2.0, 5.0) if cast else (1.0, 3.0)
    return dataclasses.replace(
        op,
        bytes=op.bytes + forward,
        backward_bytes=op.backward_bytes + backward,
        launches=(base[0] + extra[0], base[1] + extra[1]),
    )


def _norm_fed_first(ops: list[Op]) -> list[Op]:
    """*ops* with the first one's input written by the norm inside its TE linear (`Op.norm_input`)."""
    return [dataclasses.replace(ops[0], norm_input=True), *ops[1:]]


def mlp_ops(kind: BodyKind, mlp: Mlp, geo: OpGeometry, p: str = "") -> list[Op]:
    h, block = kind.hidden_size, "mlp"
    norm = p + "norm2"
    entry = _tp_entry(
        p,
        "mlp",
        block,
        geo,
        h,
        norm,
        p + "mlp_in",
        userbuffers="fc1",
        float8=geo.float8_tp,
        te_fp8=True,
        linears=2 if mlp.gated else 1,  # w1 and w3 (`FeedForward`), or one
    )
    source = entry[0].name if geo.gathers else norm
    width = per_rank(mlp.intermediate_size, geo.tp)
    return [
        _norm(
            norm,
            block,
            geo.whole_tokens,
            h,
            geo.dtype_bytes,
            kind.norm.kind == "rmsnorm",
            geo.te_norm_fp8_out,
            switch="normOp",
        ),
        *entry,
        # linear_fc1 is TELayerNormColumnParallelLinear (pre_mlp_layernorm IdentityOp: `Op.norm_input`)
        *_norm_fed_first(_ffn(p + "mlp", block, geo, geo.tokens, h, width, mlp.gated, source, mlp.bias)),
        *_tp_exit(p + "reduce_mlp", block, geo, h, p + "mlp_out", userbuffers="fc2", float8=geo.float8_tp, te_fp8=True),
        _residual(p + "residual_mlp", block, geo, h, kind.hidden_dropout, mlp.bias),
    ]


def _remote_nodes(moe: Moe, geo: OpGeometry) -> float | None:
    """Distinct remote nodes a token's k experts sit in, on average, over an EP group spanning
    `ep_nodes` nodes: k uniform picks reach nodes·(1 − (1 − 1/nodes)^k) nodes, group-limited routing
    (a token's experts from its `group_limit` best of `groups` groups) at most limit·nodes/groups
    of them; (nodes − 1)/nodes of those are remote. None within one node."""
    nodes = geo.ep_nodes
    if nodes <= 1:
        return None
    k = moe.experts_per_token
    reached = nodes * (1 - (1 - 1 / nodes) ** k)
    if moe.group_limit and moe.groups:
        reached = min(reached, moe.group_limit * max(1.0, nodes / moe.groups))
    return reached * (nodes - 1) / nodes


def _expert_outputs_cat(name: str, block: str, output_bytes: float, inputs: Sequence[str]) -> Op:
    """What Megatron's `SequentialMLP` does around its loop over more than one local expert
    (megatron/core/transformer/moe/experts.py `SequentialMLP.forward`, d98e8a64): `torch.split` of the
    tokens and probs by `tokens_per_expert` (views, no kernel), then `torch.cat` of the experts' outputs,
    one kernel reading and writing them. Backward, cat's gradient is views again and each split's
    gradient is a cat (autograd's `split_with_sizes_backward`): the tokens' gradient (read, write) and
    the probs' (one element a token against the tokens' hidden size: its bytes left out), two kernels."""
    op = _elementwise(name, block, 2 * output_bytes, 2 * output_bytes, inputs=inputs)
    return dataclasses.replace(op, launches=(1.0, 2.0))


def _router_topk(name: str, block: str, traffic: float, moe: Moe, geo: OpGeometry, inputs: tuple[str, ...]) -> Op:
    """The routing after the gating GEMM: its bytes, and Megatron's kernels and host syncs under the
    run's router settings (`ppb_core.timing.router`)."""
    counts = router_launches(
        geo.router,
        topk=moe.experts_per_token,
        group_topk=moe.group_limit if moe.groups else 0,
        fp32=geo.router_bytes >= 4,
        tp_cp=geo.tp * geo.cp,
        tp_dp_cp=geo.tp * geo.dp * geo.cp,
    )
    op = _elementwise(name, block, traffic, traffic, inputs=inputs)
    return dataclasses.replace(op, launches=(float(counts.forward), float(counts.backward)), syncs=counts.syncs)


def _glu_clamp(name: str, block: str, geo: OpGeometry, rows: float, width: int, inputs: tuple[str, ...]) -> Op:
    """GPT-OSS's clamp before its fused quick-GEGLU (`activation_func_clamp_value` 7, GPTOSSBridge).

    megatron/core/fusions/fused_bias_geglu.py `weighted_bias_quick_geglu_impl` (Megatron-LM 2edffadb52, NeMo
    26.04's; 0d8e0714cd, 25.11's, alike) runs it eagerly before the fused kernel: `input.chunk(2, -1)` (views),
    the gate half clamped above and the linear half both sides (a kernel each, reading and writing its half),
    `torch.cat` of the two (reading and writing both), then `torch.tensor(linear_offset, device=...)` (one
    host-to-device copy): 8 passes of rows × width elements, 4 launches. Backward (PyTorch's `clamp_backward`):
    the gate's `where(x <= max, grad, 0)` (a comparison writing a bool mask, a zero scalar made on the device,
    the `where`), the linear half's `where((x >= min).logical_and_(x <= max), grad, 0)` (two comparisons, the
    and, the scalar, the `where`); the cat's backward is slices; then the `chunk` (a `split`) joins its two
    halves' gradients into fc1's output gradient: autograd's `SplitBackward0` is `split_backward`, an `at::cat`
    (read both halves, write both; torch 2.13 profiled on the CPU: `aten::cat` under `SplitBackward0`): 11
    passes of bc and 8 of a byte an element, 9 launches. Rerun with the activation under `moe_act` recompute
    (`ffAct`). Every one of these kernels reads or writes a half of the row through a `chunk` view, not
    contiguous: at the share of HBM PyTorch's eager kernels reach over such halves (`strided`,
    `kernels.STRIDED_EAGER_SHARE`).

    The offset's copy synchronizes the host with the GPU (`syncs`), forward and rerun: `torch.tensor(data,
    device=...)` builds the scalar in pageable host memory and moves it with a blocking `.to(device)`
    (pytorch/pytorch torch/csrc/utils/tensor_new.cpp `internal_new_from_data`: `non_blocking=false`), whose
    host-to-device copy is `memcpy_and_sync` (aten/src/ATen/native/cuda/Copy.cu `copy_kernel_cuda`;
    c10/cuda/CUDAFunctions.h, PyTorch 2.13's header alike: `cudaMemcpyAsync` then `cudaStreamSynchronize`):
    the host waits for every kernel queued before it, the clamp's included, and launches what follows onto
    an idle GPU (`host.dispatcher_wait_s`)."""
    elements, bc = rows * width, geo.dtype_bytes
    op = _elementwise(name, block, 8 * elements * bc, elements * (11 * bc + 8), switch="ffAct", inputs=inputs)
    return dataclasses.replace(op, launches=(4.0, 9.0), syncs=1, strided=True)


def _clamped_activation(ops: list[Op], moe: Moe, geo: OpGeometry, rows: float, p: str) -> list[Op]:
    """The experts' ops with GPT-OSS's clamp between fc1 and the activation, under Megatron's TEGroupedMLP
    (`_glu_clamp`; a SequentialMLP's per-expert MLPs are not priced with it). `weighted_bias_quick_geglu_impl`
    clamps only where `activation_func_clamp_value` is set (`if clamp_value is not None`, fused_bias_geglu.py
    at core_v0.17.0 and 0d8e0714cd): GPTOSSBridge sets 7, Megatron-LM's --activation-func-clamp-value."""
    if moe.activation != "quick_geglu" or not moe.clamp or geo.framework != "megatron" or geo.sequential_experts:
        return ops
    at = next(i for i, op in enumerate(ops) if op.name == p + "experts_act")
    width = per_rank(moe.expert_intermediate_size, geo.etp)
    clamp = _glu_clamp(p + "experts_clamp", ops[at].block, geo, rows, width, ops[at].inputs)
    return [*ops[:at], clamp, dataclasses.replace(ops[at], inputs=(clamp.name,)), *ops[at + 1 :]]


def _fused_grouped_mlp(ops: list[Op], geo: OpGeometry, rows: float, width: int, p: str) -> list[Op]:
    """The routed experts' ops as TE's fused grouped MLP runs them (`ppb_core.timing.fused_experts`): fc1's GEMM
    with the GLU, the probabilities and fc2's input quantization in its epilogue, fc2's input-gradient GEMM with
    the GLU's backward and fc1's output-gradient quantization in its; the activation (and GPT-OSS's clamp) no
    kernel of its own. The epilogues' bytes join their GEMM's traffic (its HBM floor; `backward_bytes` holds both
    backward halves, each floored at half of it); each GEMM one persistent kernel over the experts."""
    probs = expert_probs_bytes(geo)
    fused: list[Op] = []
    for op in ops:
        if op.name == p + "experts_clamp":
            continue
        if op.name == p + "experts_in":
            op = dataclasses.replace(
                op,
                bytes=op.bytes + glu_epilogue_bytes(rows, width, probs),
                prequantized=(False, True),
                persistent_grouped=True,
                launches=FC1_LAUNCHES,
            )
        elif op.name == p + "experts_act":
            op = dataclasses.replace(
                op, inputs=(p + "experts_in",), bytes=0.0, backward_bytes=0.0, fusion=None, launches=(0.0, 0.0)
            )
        elif op.name == p + "experts_out":
            op = dataclasses.replace(
                op,
                backward_bytes=op.backward_bytes + dglu_epilogue_bytes(rows, width, probs, geo.dtype_bytes),
                prequantized=(True, False),
                persistent_grouped=True,
                launches=FC2_LAUNCHES,
            )
        fused.append(op)
    return fused


def _expert_output_bias(
    name: str, block: str, geo: OpGeometry, rows: float, h: int, local: int, inputs: tuple[str, ...]
) -> Op:
    """The routed experts' fc2 bias (GPT-OSS), weighted by each row's routing probability.

    fc1's bias is in its grouped GEMM (TEGroupedMLP builds linear_fc1 with skip_bias_add False: the
    GEMM's epilogue; its gradient in the backward GEMM's). fc2's is returned (skip_bias_add True) and
    added by `TEGroupedMLP._apply_bias` (megatron/core/transformer/moe/experts.py at 2edffadb52, NeMo
    26.04's Megatron-LM): per local expert `t + b * p` over its rows, `torch.cat` of them, `.to` the
    activations' dtype. b·p and the sums are in the probabilities' dtype where it is wider (the router
    dtype; fp32 under DeepEP and HybridEP, `expert_probs_bytes`). Forward: b·p written, t and it read and
    the sum written, the cat reading and writing every row, the cast where it promotes: 2 kernels an
    expert, the cat's and the cast's. Backward (PyTorch's autograd, tools/autograd/derivatives.yaml
    `mul.Tensor`: `mul_tensor_backward` multiplies the full gradient, the engine then `sum_to`s it to the
    broadcast input's shape and casts it to the input's dtype): the cast back (read, write wide), the cat's
    slices (views), the add passing the gradient to t cast to t's dtype where wider (read wide, write bc,
    each expert its kernel) and to b·p; b·p's two gradients each the product g·p or g·b written in full
    (read g, write) and summed (read), the bias's cast to its dtype where wider: 4 kernels an expert, 6
    where the sums are wider; then the two `torch.split`s' gradients joined (autograd's
    `SplitWithSizesBackward0` is `split_with_sizes_backward`, an `at::cat` of the pieces: torch 2.13, two
    `aten::cat` in this backward profiled on the CPU): t's gradient (read and write bc) and the probabilities'
    (a wide element a row each way), 2 kernels. b·p forward and the products g·p and g·b backward broadcast a
    row (b) or a column (p) over their rows: PyTorch's non-contiguous kernels (`strided_bytes`); the add,
    the cat, the casts and the sums read and write contiguous tensors. Elsewhere (no such per-expert loop)
    one add forward, its bias gradient's read back."""
    bc = geo.dtype_bytes
    if geo.fused_grouped_mlp:  # in fc2's epilogue; its gradient a kernel of its own (`ppb_core.timing.fused_experts`)
        bias = _elementwise(name, block, 0.0, bias_gradient_bytes(rows, h, bc, expert_probs_bytes(geo)), inputs=inputs)
        return dataclasses.replace(bias, launches=BIAS_LAUNCHES)
    if geo.framework != "megatron":
        return _elementwise(name, block, 2 * rows * h * bc, rows * h * bc, inputs=inputs)
    wide = max(bc, expert_probs_bytes(geo))
    cast = wide > bc
    elements = rows * h
    forward = elements * (wide + (bc + wide) + wide + 2 * wide) + (elements * (wide + bc) if cast else 0.0)
    # two products (read g, write), their two sums (read); cast: the output's gradient up, t's gradient down;
    # the splits' gradients joined: t's (read, write bc) and the probabilities' (a wide element a row each way)
    backward = elements * 3 * 2 * wide + (2 * elements * (bc + wide) if cast else 0.0)
    backward += 2 * elements * bc + 2 * rows * wide
    return dataclasses.replace(
        _elementwise(name, block, forward, backward, inputs=inputs),
        launches=(2.0 * local + 1.0 + cast, (4.0 + 2.0 * cast) * local + cast + 2.0),
        # b·p written forward; g·p and g·b each read g and write backward (broadcast operands)
        strided_bytes=(elements * wide, 2 * 2 * elements * wide),
    )


def moe_ops(kind: BodyKind, moe: Moe, geo: OpGeometry, p: str = "") -> list[Op]:
    """Router, permutation, expert dispatch (EP all-to-all, ETP all-gather), experts, combine, shared experts.

    Each TP rank routes 1/t of the tokens (as the memory model counts them); an expert's etp ranks
    all see its rows and each computes 1/etp of its width; dispatch and expert rows carry the
    routing factor (the busiest rank's imbalance, or the capacity padding).
    """
    h, bc, block = kind.hidden_size, geo.dtype_bytes, "moe"
    k, experts = moe.experts_per_token, moe.num_experts
    whole = geo.whole_tokens
    moev2 = geo.mindformers_moev2  # every TP rank sends the whole micro-batch's copies (`mindformers_moev2`)
    routed = (whole if moev2 else geo.tokens / geo.tp) * k  # token copies this rank sends out
    rows = routed * (1 if moev2 else geo.etp) * geo.routing_factor  # token copies this rank's experts compute
    norm = p + "norm2"
    ops = [
        _norm(norm, block, whole, h, bc, kind.norm.kind == "rmsnorm", switch="normOp"),
        dataclasses.replace(
            _matmul(
                p + "router",
                block,
                whole,
                h,
                experts + (1 if moe.shared_expert_gate else 0),
                bc,
                inputs=(norm,),
                fp8=False,
            ),
            grad_adds=1.0 if moe.router_bias else 0.0,  # router.py `TopKRouter`'s bias (add_bias_linear)
            **_router_cast_passes(geo, whole, h, experts + (1 if moe.shared_expert_gate else 0), bc),
        ),
        # Router logits upcast, softmax and top-k in fp32; Megatron's kernels and host syncs by its settings.
        _router_topk(p + "router_topk", block, whole * experts * (bc + 2 * STATS_BYTES), moe, geo, (p + "router",)),
    ]
    if geo.dispatcher == "allgather":
        ops += _allgather_dispatch(moe, geo, h, (norm, p + "router_topk"), p)
        return _shared_and_residual(ops, kind, moe, geo, norm, p)
    # Megatron's alltoall dispatcher sorts the tokens it receives by local expert, and back before the
    # combine (token_dispatcher.py `dispatch_postprocess` / `combine_preprocess`, d98e8a64:
    # `sort_chunks_by_idxs`, TE's `fused_sort_chunks_by_index` under --moe-permute-fusion, else split and
    # cat; with capacity padding a transposed `.contiguous()`): with more than one local expert, one more
    # read and write of the rows each side, each way (their probabilities beside them, router dtype).
    sorts = geo.framework == "megatron" and geo.dispatcher == "alltoall" and experts > geo.ep
    sort = 2 * rows * (h * bc + geo.router_bytes) if sorts else 0.0
    permute_launches, unpermute_launches = (
        alltoall_permute_launches(geo.permute_fusion, sorts)
        if geo.framework == "megatron" and geo.dispatcher == "alltoall"
        else (None, None)
    )
    flex = geo.dispatcher in FLEX_DISPATCHERS
    # the flex backends send a token once to each rank its experts sit on (`ppb_core.timing.flex`): their
    # local passes read or write those slots on one side and the expert rows on the other
    reached = ranks_reached(experts, k, geo.ep, moe.groups, moe.group_limit) if flex else 0.0
    sent = geo.tokens / geo.tp * reached if flex else routed
    # the alltoall dispatcher permutes the rank's own tokens before sending them and unpermutes them after the
    # combine (token_dispatcher.py `dispatch_preprocess` / `combine_postprocess`, d98e8a64): as many whatever the
    # routing; the flex backends' passes run where the tokens land (`MoEFlexTokenDispatcher.dispatch_postprocess`
    # permutes the received slots, `combine_preprocess` restores them): the busiest rank's share (routing factor)
    local_pass = (sent + routed) * geo.routing_factor * h * bc if flex else 2 * routed * h * bc
    # the permute direction's pass (the permute, the unpermute's backward) and the unpermute direction's
    permute_pass = unpermute_pass = local_pass
    if moev2:
        permute_pass, unpermute_pass, permute_launches, unpermute_launches = _moev2_passes(geo, whole, k, h)
    if geo.flex_in_kernel:  # inside the dispatch and combine kernels: no launch of its own
        permute_launches, unpermute_launches = (0.0, 0.0), (0.0, 0.0)
        # HybridEP's permute copies each chunk as it lands, under the transfer; its unpermute blocks run their
        # local pass before the combine sends (`ppb_core.timing.flex`); NCCL EP's kernels read the rows
        permute_pass = 0.0
        unpermute_pass = local_pass if geo.dispatcher == "hybridep" else 0.0
    routing_map_bytes = 0.0  # HybridEP's routing maps gathered over its group, bytes a rank (below)
    if geo.dispatcher == "hybridep":
        # HybridEP's metadata scan (preprocessing, forward only) and, unfused, its own permute kernel, whose
        # backward is the unpermute in `combine_with_unpermute` (csrc/hybrid_ep/hybrid_ep.cu)
        permute_launches = (1.0, 0.0) if geo.flex_in_kernel else (2.0, 1.0)
        unpermute_launches = (0.0, 0.0) if geo.flex_in_kernel else (1.0, 1.0)
        # the scan runs over every rank's routing map (hybrid_ep.cu `metadata_preprocessing`, executor.cu
        # `allgather_routing_map`, hybrid-ep 7febc6e and 94a9f8f alike: inside one NVLink domain with
        # `enable_custom_allgather` its own kernel, extension/allgather.cu `ag_nvl_kernel` on 32 SMs writing each
        # peer's buffer, `ONE_SHOT`; without it, or across domains, NCCL's `all_gather_into_tensor`, a ring.
        # HybridEPBuffer's default for it is the installed DeepEP's, Megatron passes none:
        # `timing.hybridep_custom_allgather`): one bool a token and expert of the map
        # `MoEFlexTokenDispatcher._initialize_metadata` expands over expert TP, gathered over expert TP × EP, read
        # once by the scan
        routing_map_bytes = geo.tokens / geo.tp * experts * geo.etp * BOOL_BYTES * geo.etp * geo.ep
        if geo.router_bytes != STATS_BYTES:  # HybridEP takes fp32 probabilities: `_HybridEPManager.dispatch`
            # casts them (`self.token_probs.float()`, 0d8e0714cd and core_v0.17.0), its gradient cast back
            permute_launches = (permute_launches[0] + 1.0, permute_launches[1] + 1.0)
    if geo.hybridep_pad_uneven and geo.ep * geo.etp > 1:
        # `_HybridEPManager.setup_metadata`: the layer's token count all-reduced (MAX, one int64) over expert
        # TP × EP and read on the host (`.item()`) before the dispatch: a second host synchronization
        ops.append(
            Op(
                p + "dispatch_pad",
                block,
                COMM,
                inputs=(p + "router_topk",),
                forward_comm=Collective(ALL_REDUCE, "tp_ep", 8.0, "ep"),
                syncs=1,
            )
        )
    if routing_map_bytes and geo.ep * geo.etp > 1:
        ops.append(
            Op(
                p + "dispatch_map",
                block,
                COMM,
                inputs=(p + "router_topk",),
                forward_comm=Collective(
                    ALL_GATHER,
                    "tp_ep",
                    routing_map_bytes,
                    "ep",
                    method=ONE_SHOT if geo.hybridep_custom_allgather else None,
                ),
            )
        )
    ops.append(
        dataclasses.replace(
            _elementwise(
                p + "permute",
                block,
                permute_pass + sort + routing_map_bytes,
                (permute_pass if moev2 else unpermute_pass) + sort,
                inputs=(norm, p + "router_topk"),
            ),
            launches=permute_launches,
        )
    )
    source = p + "permute"
    payload = sent * geo.routing_factor * h * bc
    dispatched = sent * geo.routing_factor * h * geo.dispatch_bytes
    # Megatron's alltoall dispatcher sends the permuted probabilities (router dtype) in an all-to-all of
    # their own after the tokens' (`token_dispatch`, d98e8a64), and with expert TP all-gathers them beside
    # the tokens (`dispatch_postprocess`); the backward sends their gradients back the same way.
    megatron_a2a = geo.framework == "megatron" and geo.dispatcher == "alltoall"
    calls = 2 if megatron_a2a else 1
    probs = routed * geo.routing_factor * geo.router_bytes if megatron_a2a else 0.0
    # DeepEP sends a token once to each destination node, NVLink forwarding it to the experts there:
    # across nodes go (tokens routed) × (remote nodes its experts sit in) hidden states.
    remote = _remote_nodes(moe, geo) if flex else None
    leaving = None if remote is None else geo.tokens / geo.tp * geo.routing_factor * remote * h
    # HybridEP's measured kernels (`flex.hybridep_rates`): its combine is the dispatch's backward, its dispatch
    # the combine's (fused_a2a.py `HybridEPDispatch.backward` calls `combine_with_unpermute`, `HybridEPCombine.
    # backward` `dispatch_with_permute`; Megatron-LM 0d8e0714cd and 2edffadb52)
    dispatch_rate, combine_rate = geo.hybridep_rates or (0.0, 0.0)
    combine_sms = geo.flex_sms if geo.flex_combine_sms is None else geo.flex_combine_sms
    dispatch_ib, combine_ib = geo.hybridep_ib_rates or (0.0, 0.0)
    if geo.ep > 1:
        ops.append(
            Op(
                p + "dispatch",
                block,
                COMM,
                inputs=(source,),
                forward_comm=Collective(
                    ALL_TO_ALL,
                    "ep",
                    dispatched + probs,
                    "ep",
                    (p + "experts_in", "forward"),
                    None if leaving is None else leaving * geo.dispatch_bytes,
                    calls=calls,
                    sms=geo.flex_sms,
                    algorithm_bytes_per_s=dispatch_rate,
                    inter_node_bytes_per_s=dispatch_ib,
                    flex_backend=flex,
                ),
                backward_comm=Collective(
                    ALL_TO_ALL,
                    "ep",
                    payload + probs,
                    "ep",
                    (p + "experts_in", "wgrad"),
                    None if leaving is None else leaving * bc,
                    calls=calls,
                    sms=combine_sms,
                    algorithm_bytes_per_s=combine_rate,
                    inter_node_bytes_per_s=combine_ib,
                    flex_backend=flex,
                ),
            )
        )
        source = p + "dispatch"
    if geo.etp > 1 and moev2:
        # the experts' column-split w1 and w3 read the whole rows on every rank: their input gradient's partial
        # sums all-reduced over model_parallel in the backward, as a dense layer's without sequence parallelism
        ops.append(
            Op(
                p + "reduce_experts_grad",
                block,
                COMM,
                inputs=(source,),
                backward_comm=Collective(ALL_REDUCE, "etp", rows * h * bc, "tp_async", (p + "experts_in", "wgrad")),
            )
        )
    elif geo.etp > 1:
        gathered = rows * h * bc + rows * geo.router_bytes * megatron_a2a
        ops.append(
            Op(
                p + "gather_experts",
                block,
                COMM,
                switch="gather",
                inputs=(source,),
                forward_comm=Collective(ALL_GATHER, "etp", gathered, "tp", calls=calls),
                backward_comm=Collective(
                    REDUCE_SCATTER, "etp", gathered, "tp_async", (p + "experts_in", "dgrad"), calls=calls
                ),
                recompute_comm=Collective(ALL_GATHER, "etp", gathered, "tp_async", calls=calls),
            )
        )
        source = p + "gather_experts"
    local = per_rank(experts, geo.ep)
    if geo.expert_fp8_pads and local:  # `expert_fp8_pads`: each pad a TE module call, copying the rows
        pad_bytes = 2 * rows * h * bc
        ops.append(_elementwise(p + "experts_pad", block, pad_bytes, pad_bytes, inputs=(source,)))
        source = p + "experts_pad"
        if geo.expert_fp8_pads > 1:
            prob_bytes = 2 * rows * STATS_BYTES
            ops.append(_elementwise(p + "experts_pad_probs", block, prob_bytes, prob_bytes, inputs=(source,)))
            source = p + "experts_pad_probs"
    ops += _ffn(
        p + "experts",
        block,
        geo,
        rows,
        h,
        per_rank(moe.expert_intermediate_size, geo.etp),
        moe.gated,
        source,
        local_experts=local,
    )
    ops[-2] = _weighted_by_probs(ops[-2], geo, rows, per_rank(moe.expert_intermediate_size, geo.etp), moe.gated)
    if moe.bias and geo.framework == "megatron" and local:
        # TEGroupedMLP's GroupedLinears hold one bias parameter an expert each (TE grouped_linear.py `bias{i}`,
        # v2.14): fc1's and fc2's gradients each added into their main gradient (`Op.grad_adds`)
        at = next(i for i, op in enumerate(ops) if op.name == p + "experts_in")
        ops[at] = dataclasses.replace(ops[at], grad_adds=2.0 * local)
    ops = _clamped_activation(ops, moe, geo, rows, p)
    if geo.fused_grouped_mlp:
        ops = _fused_grouped_mlp(ops, geo, rows, per_rank(moe.expert_intermediate_size, geo.etp), p)
    source = p + "experts_out"
    if geo.sequential_experts and local > 1:
        ops[-3:] = [dataclasses.replace(op, sequential=local) for op in ops[-3:]]
        ops.append(_expert_outputs_cat(p + "experts_cat", block, rows * h * bc, (source,)))
        source = p + "experts_cat"
    if moe.bias:
        ops.append(_expert_output_bias(p + "experts_bias", block, geo, rows, h, local, (source,)))
        source = p + "experts_bias"
    if geo.expert_fp8_pads and local:
        unpad_bytes = 2 * rows * h * bc
        ops.append(_elementwise(p + "experts_unpad", block, unpad_bytes, unpad_bytes, inputs=(source,)))
        source = p + "experts_unpad"
    if geo.etp > 1:
        # Megatron's alltoall dispatcher reduce-scatters the experts' output in the probabilities' dtype
        # (`combine_preprocess`: `hidden_states.to(self.probs.dtype)`, the result cast back, d98e8a64): in the
        # router dtype, with a cast before (rows) and after (rows / etp) each way where it differs.
        combined = rows * h * (geo.router_bytes if megatron_a2a else bc)
        ops.append(
            Op(
                p + "reduce_experts",
                block,
                COMM,
                inputs=(source,),
                # MoEV2's w2 `(dp, ep, 1, mp), (ep, 1, mp)` without an out strategy: its partial sums all-reduced
                # (MindSpore's default for a split reduction axis), the output whole on every rank
                forward_comm=Collective(ALL_REDUCE, "etp", combined, "tp")
                if moev2
                else Collective(REDUCE_SCATTER, "etp", combined, "tp"),
                backward_comm=None
                if moev2
                else Collective(ALL_GATHER, "etp", combined, "tp", (p + "experts_out", "dgrad")),
            )
        )
        source = p + "reduce_experts"
        if megatron_a2a and geo.router_bytes != bc:
            moved = (rows + rows / geo.etp) * h * (bc + geo.router_bytes)
            ops.append(
                Op(
                    p + "reduce_experts_cast",
                    block,
                    MEMORY,
                    inputs=(source,),
                    bytes=moved,
                    backward_bytes=moved,
                    launches=(2.0, 2.0),
                )
            )
            source = p + "reduce_experts_cast"
    if geo.ep > 1:
        ops.append(
            Op(
                p + "combine",
                block,
                COMM,
                inputs=(source,),
                forward_comm=Collective(
                    ALL_TO_ALL,
                    "ep",
                    payload,
                    "ep",
                    (p + "experts_out", "forward"),
                    None if leaving is None else leaving * bc,
                    sms=combine_sms,
                    algorithm_bytes_per_s=combine_rate,
                    inter_node_bytes_per_s=combine_ib,
                    flex_backend=flex,
                ),
                backward_comm=Collective(
                    ALL_TO_ALL,
                    "ep",
                    dispatched,
                    "ep",
                    (p + "experts_out", "wgrad"),
                    None if leaving is None else leaving * geo.dispatch_bytes,
                    sms=geo.flex_sms,
                    algorithm_bytes_per_s=dispatch_rate,
                    inter_node_bytes_per_s=dispatch_ib,
                    flex_backend=flex,
                ),
            )
        )
        source = p + "combine"
    # Weighted sum of each token's k expert outputs back in token order; the flex backends sum a token's
    # copies on one rank into its slot, their combine summing across ranks (`ppb_core.timing.flex`).
    back = unpermute_pass if flex or moev2 else (k + 1) * geo.tokens / geo.tp * h * bc + 2 * rows * h * bc * sorts
    back_backward = permute_pass if flex else back  # MoEV2: its own pass (`_moev2_passes`)
    ops.append(
        dataclasses.replace(
            _elementwise(
                p + "unpermute",
                block,
                back,
                back_backward,
                inputs=(source,),
            ),
            launches=unpermute_launches,
        )
    )
    return _shared_and_residual(ops, kind, moe, geo, norm, p)


def _moev2_passes(
    geo: OpGeometry, whole: float, k: int, h: int
) -> tuple[float, float, tuple[float, float], tuple[float, float]]:
    """MindFormers MoEV2's local dispatch and combine on a rank's whole micro-batch (mindformers/modules/transformer/
    moe.py `TopkRouterV2.dispatch` / `combine`, 2388c729a and a4dfb8219), bytes each way (a Gather's backward is a
    scatter-add of as many rows) and launches (forward, backward). N tokens, C = N·k·capacity slots. Dispatch: the
    zero row concatenated before the tokens (`concat_3d`: read N, write N + 1 rows) and the Gather into the
    (expert, capacity) slots (read and write C rows). Combine: the experts' output behind a zero row an expert
    (`concat`: read C, write C + E rows), the Gather of each token's k slots (read and write N·k rows) and the
    router coefficients' Mul with the ReduceSum over k: under jit_level O1 one DVM kernel (element-wise into the
    reduction after it, `dvm::FuseReduceFwd`: read N·k, write N rows), else two (the product written and read)."""
    bc = geo.dtype_bytes
    slots = whole * k * geo.routing_factor
    dispatch = (2 * whole + 2 * slots) * h * bc
    fused = geo.jit_level == "O1"
    combine = (2 * slots + 2 * whole * k + whole * k + whole + (0.0 if fused else 2 * whole * k)) * h * bc
    combine_kernels = 3.0 if fused else 4.0
    return dispatch, combine, (2.0, 2.0), (combine_kernels, combine_kernels)


# Kernel launches of Megatron's alltoall dispatcher's local steps (token_dispatcher.py
# `MoEAlltoAllTokenDispatcher`, moe_utils.py `permute` / `unpermute` / `sort_chunks_by_idxs`, d98e8a64;
# TE d0067d0d transformer_engine/pytorch/permutation.py and triton/permutation.py), (forward, backward).
# `preprocess`: the routing map's counts, their all-gather over expert TP × EP, the slices and sums, and
# the device-to-host copies of the counts and splits: 13 (14 unfused with several local experts:
# `num_global_tokens_per_local_expert` is copied too). The permutation: fused `moe_permute_with_probs`,
# the row map's three Triton passes and the permute (4), backward its unpermute (3 as counted before);
# unfused the map's transpose (1), `argsort` (4, as the allgather dispatcher's), `% num_tokens` (1), the
# probabilities' transpose and gather (2) and `index_select` (1), backward the tokens' and the
# probabilities' zero-filled index_add / index_put (2 + 2). With several local experts the rows are
# sorted by expert after the all-to-all and back before it (`sort_chunks_by_idxs`): fused each a chunk
# map and a sort (2; backward the sort, 1), unfused `torch.split` and `torch.cat` (the tokens' cat and the
# probabilities' after the dispatch, the tokens' before the combine: 1 each; backward each split's cat of
# the gradients). `unpermute`: fused one kernel each way; unfused zeros and `scatter_add_` (2), backward
# the gather (1). The sorts are counted in `unpermute` (their launches after the dispatcher's wait).
A2A_PREPROCESS = 13
A2A_PERMUTE = {True: (4, 3), False: (9, 4)}
A2A_SORTS = {True: (4, 2), False: (3, 3)}  # both sorts, tokens (and probabilities after the dispatch)
A2A_UNPERMUTE = {True: (1, 1), False: (2, 1)}


def alltoall_permute_launches(fused: bool, sorts: bool) -> tuple[tuple[float, float], tuple[float, float]]:
    """(permute, unpermute) launches (forward, backward) of Megatron's alltoall dispatcher (above)."""
    preprocess = A2A_PREPROCESS + (1 if sorts and not fused else 0)
    permute = (preprocess + A2A_PERMUTE[fused][0], A2A_PERMUTE[fused][1])
    sort = A2A_SORTS[fused] if sorts else (0, 0)
    unpermute = (A2A_UNPERMUTE[fused][0] + sort[0], A2A_UNPERMUTE[fused][1] + sort[1])
    return (float(permute[0]), float(permute[1])), (float(unpermute[0]), float(unpermute[1]))


# Kernel launches of Megatron's allgather dispatcher's local steps (token_dispatcher.py
# `MoEAllGatherTokenDispatcher.dispatch_postprocess` and `combine_preprocess`, moe_utils.py `permute` /
# `unpermute`, d98e8a64), (forward, backward). The permutation: the local experts' columns of the gathered
# map and probabilities copied out (`[:, a:b].contiguous()`, 2, only with EP: all columns are already
# contiguous), their counts (`sum`, 1) copied to the host (`.cpu()`, 1); unfused `permute` the map's
# transpose (1), `argsort` (PyTorch's radix sort: the index fill, CUB's histogram, scan and one-sweep pass
# for one-byte keys, 4), `% num_tokens` (1) and `index_select` (1), fused Transformer Engine's row map and
# permute (4: transformer_engine/pytorch/triton/permutation.py `make_row_id_map`'s three Triton passes and
# `permute_with_mask_map`, TE d0067d0d, three passes since dc97cc9e, July 2025); then the probabilities'
# and the map's transposes (2) and `masked_select` (nonzero's count, its device-to-host copy and select,
# then the gather: 4). Backward: the probabilities' (masked_scatter into zeros: 3, the slice's
# zero-filled gradient: 2; the transposed copy's gradient is a view) and the tokens' (`index_select`'s
# zero-filled index_add: 2; fused one kernel). `unpermute`: zeros and
# `scatter_add_` (2; fused 1) forward, the gather of the output gradient (1) backward.
ALLGATHER_PERMUTE_SLICES = 2
ALLGATHER_PERMUTE_COUNTS = 2
ALLGATHER_PERMUTE = {False: (7, 2), True: (4, 1)}  # (unfused, fused) permute, without the probabilities'
ALLGATHER_PROBS = (6, 5)
ALLGATHER_UNPERMUTE = {False: (2, 1), True: (1, 1)}
# With one local expert (EP = the expert count: Megatron CI's EP 8 cases) the local map and probabilities are
# [T, 1] columns, whose transposes (`.T.contiguous()` in `permute` and before `masked_select`,
# token_dispatcher.py `dispatch_postprocess` at 5fe3f06658 and d98e8a64) are [1, T] views PyTorch already
# holds contiguous (`Tensor.contiguous` returns self): no copy, no kernel, no bytes. The permute's map
# transpose (unfused only) and the probabilities' and the map's before `masked_select`.
ALLGATHER_ONE_EXPERT_VIEWS = {False: 3, True: 2}


def _allgather_dispatch(moe: Moe, geo: OpGeometry, h: int, inputs: tuple[str, ...], p: str) -> list[Op]:
    """Megatron's default token dispatcher, `MoEAllGatherTokenDispatcher` (megatron/core/transformer/moe/
    token_dispatcher.py, d98e8a64), from the routing to the routed experts' output back in token order.

    With TP or EP it all-gathers over the expert-TP × EP group (g = etp·ep ranks, `tp_ep_group`) the
    routing map (bool, under no_grad), the probabilities (`[tokens, E]` in the router's dtype) and the
    hidden states of every rank's tokens, T = (s·b/cp/tp)·g rows (`token_dispatch`,
    `gather_from_sequence_parallel_region`; backward each gradient reduce-scattered, the map none). It then
    keeps only its local experts' columns and permutes their copies, the rows its experts compute
    (`dispatch_postprocess`), runs the experts (which weight their outputs by the probabilities), puts the
    rows back into a zero-filled `[T, h]` tensor (`combine_preprocess`, `unpermute`'s scatter_add), casts it
    to the probabilities' dtype, reduce-scatters it over the group (`token_combine`, that dtype's bytes
    sent) and casts the result back. All on the compute stream: nothing hides its collectives. No ETP
    gather or reduce of its own: the group's gather already brings every expert-TP peer's tokens."""
    h_bytes, bc, pb, block = h, geo.dtype_bytes, geo.router_bytes, "moe"
    k, experts = moe.experts_per_token, moe.num_experts
    group = geo.etp * geo.ep
    gathered = geo.tokens / geo.tp * group  # T rows after the group's all-gather
    local = per_rank(experts, geo.ep)
    rows = geo.tokens / geo.tp * k * geo.etp * geo.routing_factor  # copies this rank's experts compute
    cells = gathered * local  # the local experts' columns of the gathered map
    ops: list[Op] = []
    source = inputs[0]
    if group > 1:
        ops += [
            Op(
                p + "dispatch_map",
                block,
                COMM,
                inputs=inputs,
                forward_comm=Collective(ALL_GATHER, "tp_ep", gathered * experts * BOOL_BYTES, "ep"),
            ),
            Op(
                p + "dispatch_probs",
                block,
                COMM,
                inputs=inputs,
                forward_comm=Collective(ALL_GATHER, "tp_ep", gathered * experts * pb, "ep"),
                backward_comm=Collective(REDUCE_SCATTER, "tp_ep", gathered * experts * pb, "ep"),
            ),
            Op(
                p + "dispatch",
                block,
                COMM,
                inputs=inputs,
                forward_comm=Collective(ALL_GATHER, "tp_ep", gathered * h_bytes * bc, "ep"),
                backward_comm=Collective(REDUCE_SCATTER, "tp_ep", gathered * h_bytes * bc, "ep"),
            ),
        ]
        source = p + "dispatch"
    # Forward HBM bytes: the columns' copies (map 1 + 1, probabilities pb + pb, with EP), their count (1),
    # the map's transpose (1 + 1), the argsort's one-byte keys read and int64 indices written (1 + 8), the
    # rows gathered (index_select: rows·h read + written); the probabilities' transposes (pb + pb, 1 + 1)
    # and masked_select's read of both and its rows written (no transposes with one local expert: views).
    # Backward: the tokens' gradient zero-filled (T·h) and the rows added in (read + read-modify-write:
    # 3·rows·h), the probabilities' gradient scattered into zeros (cells·pb written, the mask and the rows
    # read, the rows written) and copied into the slice's zero-filled `[T, E]` gradient (T·E·pb written,
    # cells·pb read and written).
    sliced = 2 * cells * (1 + pb) if geo.ep > 1 else 0.0
    permute_fusion = geo.permute_fusion
    column = local == 1  # the transposes are views (`ALLGATHER_ONE_EXPERT_VIEWS`)
    probs_forward = cells * ((0 if column else 2 * pb + 2) + pb + 1) + rows * pb
    map_transpose = 0 if column else 2
    slices = ALLGATHER_PERMUTE_SLICES if geo.ep > 1 else 0
    permute_launches = ALLGATHER_PERMUTE[permute_fusion]
    views = ALLGATHER_ONE_EXPERT_VIEWS[permute_fusion] if column else 0
    ops.append(
        Op(
            p + "local_permute",
            block,
            MEMORY,
            inputs=(source, *inputs[1:]),
            bytes=sliced + cells + cells * (map_transpose + 9) + 2 * rows * h_bytes * bc + probs_forward,
            backward_bytes=gathered * h_bytes * bc
            + 3 * rows * h_bytes * bc
            + cells * (3 * pb + 1)
            + 2 * rows * pb
            + gathered * experts * pb,
            launches=(
                slices + ALLGATHER_PERMUTE_COUNTS + permute_launches[0] + ALLGATHER_PROBS[0] - views,
                permute_launches[1] + ALLGATHER_PROBS[1],
            ),
        )
    )
    ops += _ffn(
        p + "experts",
        block,
        geo,
        rows,
        h,
        per_rank(moe.expert_intermediate_size, geo.etp),
        moe.gated,
        p + "local_permute",
        local_experts=local,
    )
    ops[-2] = _weighted_by_probs(ops[-2], geo, rows, per_rank(moe.expert_intermediate_size, geo.etp), moe.gated)
    if moe.bias and geo.framework == "megatron" and local:
        # TEGroupedMLP's GroupedLinears hold one bias parameter an expert each (TE grouped_linear.py `bias{i}`,
        # v2.14): fc1's and fc2's gradients each added into their main gradient (`Op.grad_adds`)
        at = next(i for i, op in enumerate(ops) if op.name == p + "experts_in")
        ops[at] = dataclasses.replace(ops[at], grad_adds=2.0 * local)
    ops = _clamped_activation(ops, moe, geo, rows, p)
    if geo.fused_grouped_mlp:
        ops = _fused_grouped_mlp(ops, geo, rows, per_rank(moe.expert_intermediate_size, geo.etp), p)
    source = p + "experts_out"
    if geo.sequential_experts and local > 1:  # SequentialMLP, as in `moe_ops`
        ops[-3:] = [dataclasses.replace(op, sequential=local) for op in ops[-3:]]
        ops.append(_expert_outputs_cat(p + "experts_cat", block, rows * h_bytes * bc, (source,)))
        source = p + "experts_cat"
    if moe.bias:
        ops.append(_expert_output_bias(p + "experts_bias", block, geo, rows, h, local, (source,)))
        source = p + "experts_bias"
    # unpermute: the [T, h] zeros written, the rows added in (read + read-modify-write); backward the
    # output gradient's rows gathered (read + write). Then, where there is a reduce-scatter and the
    # probabilities' dtype differs, the cast to it before (T·h read, written in pb) and of its result
    # back after (s·b/cp/tp rows): `token_combine` casts only with expert TP or EP.
    cast = pb != bc and group > 1
    ops.append(
        Op(
            p + "local_unpermute",
            block,
            MEMORY,
            inputs=(source,),
            bytes=gathered * h_bytes * bc + 3 * rows * h_bytes * bc + (gathered * h_bytes * (bc + pb) if cast else 0),
            backward_bytes=2 * rows * h_bytes * bc + (gathered * h_bytes * (bc + pb) if cast else 0),
            launches=(
                ALLGATHER_UNPERMUTE[permute_fusion][0] + cast,
                ALLGATHER_UNPERMUTE[permute_fusion][1] + cast,
            ),
        )
    )
    source = p + "local_unpermute"
    if group > 1:
        ops.append(
            Op(
                p + "combine",
                block,
                COMM,
                inputs=(source,),
                forward_comm=Collective(REDUCE_SCATTER, "tp_ep", gathered * h_bytes * pb, "ep"),
                backward_comm=Collective(ALL_GATHER, "tp_ep", gathered * h_bytes * pb, "ep"),
            )
        )
        source = p + "combine"
    if cast:
        moved = geo.tokens / geo.tp * h_bytes * (pb + bc)
        ops.append(_elementwise(p + "combine_cast", block, moved, moved, inputs=(source,)))
    return ops


def _shared_and_residual(ops: list[Op], kind: BodyKind, moe: Moe, geo: OpGeometry, norm: str, p: str) -> list[Op]:
    """The MoE layer's shared experts and residual add after its routed experts' ops."""
    h, block = kind.hidden_size, "moe"
    if moe.shared_experts:
        width = moe.shared_experts * per_rank(moe.shared_intermediate_size, geo.tp)
        entry = _tp_entry(p, "shared", block, geo, h, norm, p + "shared_in", te_fp8=True)
        shared_source = entry[0].name if geo.gathers else norm
        ops += [
            *entry,
            *_ffn(p + "shared", block, geo, geo.tokens, h, width, moe.gated, shared_source),
            *_tp_exit(p + "reduce_shared", block, geo, h, p + "shared_out", te_fp8=True),
        ]
    if geo.framework == "megatron":
        # MoELayer (moe_layer.py `postprocess`, d98e8a64) adds the shared experts' output to the routed
        # one (`output + shared_expert_output`: read two, write one, forward only), and the norm's output
        # feeds the router, the dispatch and the shared experts: autograd sums their input gradients,
        # one add (read two, write one) for each consumer past the first.
        elements = geo.whole_tokens * h
        shared = 1 if moe.shared_experts else 0
        sums = 1 + shared
        ops.append(
            Op(
                p + "moe_sums",
                block,
                MEMORY,
                inputs=(ops[-1].name,),
                bytes=shared * 3 * elements * geo.dtype_bytes,
                backward_bytes=sums * 3 * elements * geo.dtype_bytes,
                launches=(float(shared), float(sums)),
            )
        )
    ops.append(_residual(p + "residual_moe", block, geo, h, kind.hidden_dropout))
    return ops


def body_ops(kind: BodyKind, geo: OpGeometry, p: str = "") -> tuple[Op, ...]:
    """Every op of a transformer layer in forward order."""
    ffn = moe_ops(kind, kind.mlp, geo, p) if isinstance(kind.mlp, Moe) else mlp_ops(kind, kind.mlp, geo, p)
    return (*attention_ops(kind, geo, p), *ffn)


# Megatron's unfused rotary embedding (`--no-rope-fusion`: megatron/core/models/common/embeddings/
# rope_utils.py `_apply_rotary_pos_emb_bshd`, d98e8a64; the same steps at core_r0.8.0), one PyTorch op
# at a time, in elements of the rotated tensor read + written. Forward: t·cos (1 + 1), `_rotate_half`'s
# −x2 (½ + ½) and cat (1 + 1), ·sin (1 + 1), the sum (2 + 1), the final `torch.cat((t, t_pass))`
# (1 + 1): 12. Backward (autograd): ·sin (1 + 1), the negation (½ + ½), the halves' gradients joined
# (1 + 1), ·cos (1 + 1), the two gradients of t summed (2 + 1), the `t[..., :rot_dim]` slice's
# backward (zeros 1, then 1 + 1 copied in): 13. The fused kernel reads and writes once: 2 and 2.
UNFUSED_ROPE_FORWARD = 12
UNFUSED_ROPE_BACKWARD = 13
# Of those, the passes PyTorch runs on its non-contiguous path (`Op.strided_bytes`): t·cos and ·sin broadcast
# cos and sin ([s, 1, 1, d]) over the batch and heads (1 + 1 each), the negation reads a `chunk` half (½ + ½);
# backward their gradients alike (the grad·sin and grad·cos products, the negated half): 5 each way. The sum,
# the cats and the slice's zero-filled gradient read and write contiguous tensors.
UNFUSED_ROPE_STRIDED = 5
# MLA's interleaved rotary part adds `torch.cat((x1, x2))` of the even and odd halves (1 + 1) forward,
# and backward the two strided slices' zero-filled gradients (2 × (1 + ½ + ½)) summed (2 + 1): 14 and 20.
UNFUSED_MLA_ROPE_FORWARD = UNFUSED_ROPE_FORWARD + 2
UNFUSED_MLA_ROPE_BACKWARD = UNFUSED_ROPE_BACKWARD + 7


def _megatron_unfused_rope(geo: OpGeometry) -> bool:
    return geo.framework == "megatron" and not geo.rope_fusion


# torchtitan's rotary embedding under torch.compile. Its Llama `apply_rotary_emb` (models/llama/model.py
# at 1ea476e9f, 3faaa1a0d, 9dec370; models/llama3/model.py at e7c0cae, 820504e, v0.2.2's model/model.py)
# multiplies in complex64: `view_as_complex(x.float().reshape(..., -1, 2)) * freqs_cis`, then
# `view_as_real(...).flatten(3).type_as(x)`. Inductor generates no code for complex tensors: any op
# reading or writing one falls back to its aten kernel (torch/_inductor/lowering.py
# `unsupported_input_tensor` → "Torchinductor does not support code generation for complex operators",
# since pytorch PR #98155, April 2023; unchanged in torch 2.13; torchtitan issue #15 reports the
# warning from this rotary), and `view_as_complex` needs a realized contiguous fp32 input
# (`make_fallback(aten.view_as_complex, require_contiguous)`). So the compiled block runs the eager
# steps: an Inductor kernel upcasting Q (K) into a fresh fp32 buffer (read bc, write 4), aten's complex
# multiply (read 4, write 4; the table is small), an Inductor kernel casting the real view back (read 4,
# write bc). Backward likewise: the gradient upcast, the multiply by conj(freqs_cis), the downcast.
# Counted from torch 2.13's Inductor scheduler on the CPU (tests/test_census_ops.py). Qwen3, the one
# model of torchtitan's registry with per-head q/k norms (v0.2.2: llama3, deepseek_v3, qwen3; MLA's
# rotary is priced apart), rotates in real arithmetic (qwen3/model/model.py `apply_rotary_emb` over its
# cos|sin `rope_cache`), which Inductor fuses into one kernel: read and write Q (K) once, 2·bc.
def complex_rope_bytes(bc: int) -> float:
    """Bytes per rotated element of torchtitan's complex rotary as torch.compile runs it, each way."""
    return bc + FP32_BYTES + 2 * FP32_BYTES + FP32_BYTES + bc


def _compiled_complex_rope(geo: OpGeometry, qk_norm: bool) -> bool:
    return geo.framework == "torchtitan" and not geo.eager and not qk_norm


def _mla_rope_bytes(geo: OpGeometry, n: float, heads: int, nope: int, rope: int, value: int) -> tuple[float, float]:
    """HBM bytes (forward, backward) of assembling MLA's Q, K and V from the up-projections.

    Fused (TransformerEngine's `fused_apply_mla_rope_for_q` / `_for_kv`): Q and K read and written
    once. Unfused (Megatron's `--no-rope-fusion`, multi_latent_attention.py
    `qkv_up_proj_and_rope_apply`, d98e8a64): the rotary steps (`UNFUSED_MLA_ROPE_*`) on each head's
    query part and on the one shared key part; `torch.cat` of the no-position and rotated parts into
    Q and into K (the key part expanded to every head: read and write heads·(nope + rope) each);
    `value.contiguous()` copies V out of the key-value projection (heads·value, read and write).
    Backward: the rotary steps' gradients; the query projection's and the key-value projection's
    split views joined into one gradient each (torch.cat, read and write heads·(nope + rope) and
    heads·(nope + value)); the expanded key part's gradient summed over the heads."""
    bc = geo.dtype_bytes
    qk = nope + rope
    if not _megatron_unfused_rope(geo):
        return 2 * 2 * n * heads * qk * bc, 2 * 2 * n * heads * qk * bc
    forward = (heads + 1) * UNFUSED_MLA_ROPE_FORWARD * rope + 2 * 2 * heads * qk + 2 * heads * value
    backward = (
        (heads + 1) * UNFUSED_MLA_ROPE_BACKWARD * rope
        + 2 * heads * qk
        + 2 * heads * (nope + value)
        + (heads + 1) * rope
    )
    return n * forward * bc, n * backward * bc


def _embedding(
    p: str, block: str, geo: OpGeometry, h: int, vocab: int, positions: int, dropout: float, replicated: bool = False
) -> list[Op]:
    """Vocabulary-parallel lookup (every rank writes all tokens, zero outside its shard), summed over TP.

    The backward scatter-adds the output gradient into the gradient of the table rows. Under
    Megatron that gradient is dense: `VocabParallelEmbedding.forward` (megatron/core/tensor_parallel/
    layers.py, core_r0.8.0 and d98e8a64) runs `F.embedding` (`weight[masked_input]` in deterministic
    mode), whose backward (`embedding_dense_backward`, or `index_put_` with accumulate) fills a
    16-bit gradient of the whole local table (vocab/t rows, and the *positions* rows of a learned
    position table) with zeros before the scatter, and the embedding has no gradient-accumulation
    fusion, so DDP's backward hook (distributed_data_parallel.py `_make_backward_post_hook`:
    `param.main_grad.add_(param.grad.data)`) reads the main gradient and the 16-bit one and writes the
    main gradient, every micro-batch: bc + bc + 2·main_grad_bytes per table element (DeepSpeed's
    BF16_Optimizer 4·main_grad_bytes: `main_grad_passes`). torchtitan's
    `nn.Embedding` runs the same CUDA backward (pytorch aten/src/ATen/native/cuda/
    EmbeddingBackwardKernel.cu `embedding_backward_cuda_kernel`: `at::zeros` of the whole table in the
    gradient's dtype, then the sorted rows' fp32 partial sums scattered in; 01b9dc565e): bc per table
    element more, FSDP2 reduce-scattering that gradient itself (`ppb_core.census.ops` counts the
    table written by `embedding_dense_backward`).

    *replicated*: MindFormers' `vocab_emb_dp` (`vocab_rows`), the table whole on every TP rank: the Gather
    `((1, 1), (dp, cp))` looks each token up where it is (llama_layer.py `LlamaEmbedding.shard`, a4dfb8219 and
    2388c729a), no partial rows to sum over TP; under sequence parallelism the first layer's `(dp, mp, 1)`
    input is a slice of it (a StridedSlice, its gradient zero-padded: no collective either way)."""
    bc, n = geo.dtype_bytes, geo.tokens
    rows = n * h
    learned_positions = positions > 0
    forward = n * INDEX_BYTES + rows * 2 * bc + (2 * rows * bc if learned_positions else 0)
    backward = rows * (bc + 2 * STATS_BYTES) * (2 if learned_positions else 1)
    if geo.framework == "megatron":
        table = (per_rank(vocab, geo.tp) + positions) * h
        backward += table * (2 * bc + geo.main_grad_passes * geo.main_grad_bytes)
    elif geo.framework == "torchtitan":
        backward += (per_rank(vocab, geo.tp) + positions) * h * bc
    ops = [_elementwise(p + "lookup", block, forward, backward)]
    if geo.tp > 1 and not replicated:
        payload = rows * bc
        ops.append(
            Op(
                p + "reduce_embedding",
                block,
                COMM,
                inputs=(p + "lookup",),
                forward_comm=Collective(REDUCE_SCATTER if geo.gathers else ALL_REDUCE, "tp", payload, "tp"),
                backward_comm=Collective(ALL_GATHER, "tp", payload, "tp") if geo.gathers else None,
            )
        )
    if dropout > 0:
        elements = geo.whole_tokens * h
        ops.append(
            _elementwise(p + "dropout", block, elements * (2 * bc + MASK_BYTES), elements * (2 * bc + MASK_BYTES))
        )
    return ops


def head_ops(kind: HeadKind, geo: OpGeometry) -> tuple[Op, ...]:
    return tuple(
        _embedding(
            "embedding.",
            "embedding",
            geo,
            kind.hidden_size,
            kind.vocab_size,
            kind.learned_positions,
            kind.hidden_dropout,
            kind.vocab_replicated,
        )
    )


# PyTorch's softmax over rows of fp32 values (aten/src/ATen/native/cuda/SoftMax.cu `host_softmax`,
# `host_softmax_backward`, the last dimension): a short row runs the warp-persistent kernel
# (`dispatch_softmax_forward`, rows up to 1024 values, 2048 in torch 2.10) from registers; a longer one
# gets a block of up to 1024 threads, which caches the row only in registers (`cunn_SoftMaxForwardReg`,
# torch 2.10-2.13, while ceil(row / 1024) < 10) or in the block's default shared memory
# (`cunn_SoftMaxForwardSmem`, while the row fits `sharedMemPerBlock`, 48 KiB, beside one reduction slot a
# warp: 12,256 fp32 values, the larger bound). Past it, in the file's earlier form as in torch 2.13,
# `cunn_SoftMaxForward` reads the row from HBM three times (`ilpReduce` for the max, `ilpReduce` for the
# sum of exponentials, `WriteFpropResults` reading it again to write the output) and
# `cunn_SoftMaxBackward` reads the output gradient twice (`ilpReduce` for its sum, then
# `WriteBpropResults` with the output).
SOFTMAX_BLOCK_THREADS = 1024
SOFTMAX_SMEM_BYTES = 48 * 1024


def softmax_row_rereads(row: int) -> tuple[int, int]:
    """(forward, backward) extra HBM reads of an fp32 softmax row, in row values, beyond the one read
    per pass that op-by-op counting gives: (2, 1) past PyTorch's row caches (see above), else (0, 0).
    Llama 3's vocabulary (128,256 logits, 513 KB a row) and Llama 2's (32,000) are past them."""
    warps = SOFTMAX_BLOCK_THREADS // 32
    cached = (SOFTMAX_SMEM_BYTES - warps * STATS_BYTES) // STATS_BYTES
    return (2, 1) if row >= cached else (0, 0)


def _loss_bytes(geo: OpGeometry, vocab: int) -> tuple[int, int]:
    """Bytes the cross-entropy moves per logit (forward, backward).

    Megatron-LM (megatron/core/tensor_parallel/cross_entropy.py `VocabParallelCrossEntropy`, the same
    at core_r0.8.0 and d98e8a64) runs one PyTorch op at a time: `logits.float()` reads the 16-bit
    logits and writes an fp32 copy (bc + 4), `torch.max` reads it (4), `-= logits_max` (4 + 4),
    `torch.exp(out=)` (4 + 4), `.sum` (4), `.div_` (4 + 4): bc + 9·4; the backward's `grad_input.mul_`
    (4 + 4) and the autograd of `.float()`, back to 16 bits (4 + bc): bc + 3·4. With
    `--cross-entropy-loss-fusion` (megatron/core/fusions/fused_cross_entropy.py, `jit_fuser` functions)
    the upcast and max are one kernel (bc + 4), the shift, exponential and sum another (4 + 4), the
    division a third (4 + 4): bc + 5·4. Its backward, `calculate_gradients` (96a894ef6, as d98e8a64)
    under `jit_fuser` = `torch.compile`, mutates the saved softmax (the targets' `index_put` on a view
    of it, then `mul_`) and returns its 16-bit cast: Inductor keeps the `index_put` functional, so it
    copies the softmax into a fresh fp32 buffer (4 + 4), scatters the targets, then one kernel reads the
    copy (4), writes the 16-bit gradient (bc) and the product back over the saved softmax (4, the
    input's mutation); torch 2.13's generated code (read on the CPU; the buffers are fixed before
    device code generation): 4·4 + bc. torchtitan without TP
    (train.py's `cross_entropy(pred.flatten(0, 1).float(), ...)`, 9dec370 and v0.2.2), as counted op by
    op (`ppb_core.census.ops.count_loss`): `_to_copy` (bc + 4) and `_log_softmax` (4 + 4) forward;
    `nll_loss_backward` writes the whole fp32 gradient (4, zeros but the targets),
    `_log_softmax_backward_data` reads it and the kept output and writes (3·4), the cast back (4 + bc):
    bc + 5·4; plus the re-reads of PyTorch's softmax kernels over a *vocab*-wide fp32 row
    (`softmax_row_rereads`). Compiled (`OpGeometry.compiled_loss`), Inductor fuses the cast, the
    log-softmax and the nll into one reduction kernel each way (their generated code, torch 2.13): the
    forward reads the 16-bit logits once for the row's max and sum of exponentials together (online
    softmax, `torch._inductor.config.online_softmax`, on by default; `prepare_softmax_online`) and
    writes two fp32 statistics a token; the backward reads the logits again and writes their 16-bit
    gradient: bc and 2·bc. torchtitan under TP runs `loss_parallel` (on by default): eager, the DTensor
    handlers of torch/distributed/tensor/parallel/loss.py (torch 2.13, the same ops at 9dec370's torch) on
    the vocabulary shard: `.float()` (bc + 4), then `_log_softmax` op by op, `amax` (4), `x - x_max`
    (4 + 4), `exp` (4 + 4), `sum` (4), `shifted - logsumexp` (4 + 4): bc + 9·4; the backward
    `_nll_loss_and_log_softmax_backward` makes `zeros_like` (4), adds `exp(x)` of the kept log-probabilities
    ((4 + 4) + (4 + 4 + 4)), multiplies by the per-token gradient (4 + 4), then the cast back (4 + bc):
    9·4 + bc. Other frameworks (and torchtitan's loss_parallel compiled, not re-derived): the logits
    read, upcast and their softmax written and kept (bc + 3·4), its gradient (2·4 + bc)."""
    bc = geo.dtype_bytes
    if geo.framework == "torchtitan" and geo.tp == 1 and geo.compiled_loss:
        return bc, 2 * bc
    if geo.framework == "torchtitan" and geo.tp > 1 and not geo.compiled_loss:
        return bc + 9 * STATS_BYTES, 9 * STATS_BYTES + bc
    if geo.framework == "torchtitan" and geo.tp == 1:
        forward_again, backward_again = softmax_row_rereads(vocab)
        return bc + (3 + forward_again) * STATS_BYTES, (5 + backward_again) * STATS_BYTES + bc
    if geo.framework == "mindformers" and geo.jit_level == "O1":
        return mindformers_loss_bytes(bc)
    if geo.framework != "megatron":
        return bc + 3 * STATS_BYTES, 2 * STATS_BYTES + bc
    if geo.cross_entropy_fusion and geo.cross_entropy_impl == "te":
        return te_loss_bytes(bc)
    if geo.cross_entropy_fusion:
        return bc + 5 * STATS_BYTES, 4 * STATS_BYTES + bc
    return bc + 9 * STATS_BYTES, bc + 3 * STATS_BYTES


def mindformers_loss_bytes(dtype_bytes: int) -> tuple[int, int]:
    """Bytes a logit of MindFormers' `CrossEntropyLoss` moves (forward, backward) under MindSpore's
    jit_level O1 on Ascend, whose graph-kernel fusion (DVM) runs each cluster of fusable primitives as one
    kernel reading its outside inputs and writing its outside outputs once.

    The graph (mindformers/core/loss/loss.py `_LogSoftmax.construct`, `_NLLLoss.construct` and their
    `bprop`s, the same at 2388c729a and v1.4.0-beta2 a4dfb8219; models/llama/llama.py casts the 16-bit
    logits to float32 before it): Cast, ReduceMax, Sub, Exp, ReduceSum, Log, Sub (the log-softmax),
    OneHot (a float32 one-hot of the labels), Mul, Neg, ReduceSum; the backward Exp of the kept
    log-softmax, minus the one-hot, times the per-token gradient, and the cast back to 16 bits.
    MindSpore's DVM clusters element-wise ops, Cast and ReduceSum but not ReduceMax or OneHot
    (backend/common/graph_kernel/adapter/graph_kernel_cluster_cloud.cc `clusterable_ops_with_level_dvm`,
    mindspore-ai/mindspore at 4893827320's stored version), and fuses element-wise ops into a following
    reduction, not a reduction into the element-wise ops reading its result (split_model_ascend.cc
    `FuseReduceFwd`; stitch fusion is off on 910B, graph_kernel_flags.cc `enable_stitch_fusion`). So the
    forward is: the Cast alone (ReduceMax reads its output and feeds the Sub, which would close a cycle),
    read bc, write 4; ReduceMax reads 4; {Sub, Exp, ReduceSum} reads 4 and writes the shifted logits (4,
    read again by the log-softmax's Sub); OneHot writes 4; {Sub, Mul, Neg, ReduceSum} reads 4 + 4 and writes
    the log-softmax the backward keeps (4): bc + 8·4. The backward is one cluster, the cast back included:
    it reads the log-softmax and the one-hot (4 + 4) and writes the 16-bit gradient: 2·4 + bc."""
    return dtype_bytes + 8 * STATS_BYTES, 2 * STATS_BYTES + dtype_bytes


def te_loss_bytes(dtype_bytes: int) -> tuple[int, int]:
    """Bytes a logit of TransformerEngine's parallel cross-entropy (`--cross-entropy-fusion-impl te`)
    moves, forward and backward, as TE 2.9 to 2.17 run it (transformer_engine/pytorch/triton/
    cross_entropy.py `cross_entropy_forward` / `cross_entropy_backward`, release_v2.9 and f031cf87b,
    the TE pinned by Megatron-Bridge 5776a6d90 and 74695a06d): `online_softmax_kernel` reads the 16-bit
    logits once for a row's max, sum of exponentials and target logit (three fp32 a token);
    `cross_entropy_kernel` reads them again and writes the gradient over them in place, in their own
    dtype; the backward's `element_mul_kernel` scales it by the per-token loss gradient in place (the
    `torch.equal(grad_output, 1.0)` skip never holds: Megatron's loss is per token, not a scalar):
    3·bc forward, 2·bc backward. From TE 2.18 (01bbe3eea, 2026-07-09) the gradient is a separate
    fp32 tensor (bc + bc + 4 forward; 4 + 4 and autograd's cast back, 4 + bc, backward); no priced
    run uses it."""
    return 3 * dtype_bytes, 2 * dtype_bytes


def _replicated_logits(p: str, block: str, kind: TailKind, geo: OpGeometry) -> list[Op]:
    """The passes MindFormers' whole-vocabulary head (`vocab_emb_dp`, `vocab_rows`) adds beyond the vocabulary-parallel
    loss's own: the head writes every logit on every TP rank, the model's float32 Cast runs on them all, and
    MindSpore's redistribution to the loss's `(dp, mp)` strategy slices this rank's share
    (research/deepseek2/deepseek2.py `DeepseekV2ForCausalLM.construct` at 2388c729a, deepseek2_model.py and
    models/llama/llama.py `LlamaForCausalLM.construct` at a4dfb8219: `self.lm_head`, `self.cast(logits,
    mstype.float32)`, then `self.loss`, whose CrossEntropyLoss keeps model_parallel). The Cast has no strategy and
    so no operator of its own in semi-auto parallel (mindspore-ai/mindspore step_parallel_utils.cc
    `IsParallelCareNode`: a Cast without OperatorInfo is not a parallel-care node): it runs on the layout it is
    given, the whole vocabulary. The redistribution from that `(dp, 1)` layout to the loss's `(dp, mp)` splits an
    axis each rank holds whole, a local slice and no collective, whose backward (StridedSlice's, zero-padded) writes
    the whole vocabulary's gradient, zeros beside this rank's share, that the Cast's backward casts back: the head's
    input gradient then a partial sum over the TP ranks, as a vocabulary-split head's. MindSpore's per-rank backward
    sums such partials in its collectives' bprops (mindspore/ops/_grad_experimental/grad_comm_ops.py: AllGather's a
    ReduceScatter(SUM), AllReduce(SUM)'s an AllReduce(SUM)): under sequence parallelism the head's input gather's
    reduce-scatter, as before; without it, for a split table the lookup's forward all-reduce's bprop (one N·h
    all-reduce, priced as the head's input-gradient all-reduce, `_tp_entry`), for a whole table none: the lookup has
    no collective, and the table's own gradient reduction over dp·cp·tp sums the partial rows (`_output` drops that
    all-reduce). Bytes beyond `_loss_bytes`, which counts a Cast (bc read, 4 written) and, backward, a 16-bit
    gradient on this rank's share: forward the Cast on the other logits ((whole - share)·(bc + 4)) and the slice
    (read and write the share, 4 + 4); backward the loss's gradient in float32 (4 - bc on the share), the slice's
    gradient (read the share, write the whole in float32) and the Cast back on the whole (4 + bc)."""
    if not kind.vocab_replicated or geo.tp == 1:
        return []
    bc, n = geo.dtype_bytes, geo.tokens
    share, whole = per_rank(kind.vocab_size, geo.tp), kind.vocab_size
    forward = n * ((whole - share) * (bc + STATS_BYTES) + 2 * share * STATS_BYTES)
    backward = n * (share * (STATS_BYTES - bc) + share * STATS_BYTES + whole * STATS_BYTES + whole * (STATS_BYTES + bc))
    op = _elementwise(p + "logits_slice", block, forward, backward, inputs=(p + "logits",))
    return [dataclasses.replace(op, launches=(2.0, 2.0))]


def _output(p: str, block: str, kind: TailKind, geo: OpGeometry, source: str, with_norm: bool = True) -> list[Op]:
    """Final norm, vocabulary-parallel logits and cross-entropy (logits upcast to fp32, softmax kept),
    and the loss's three small all-reduces (max, sum of exponentials, target logit). Without
    *with_norm* the head reads *source* as it came (an MTP head on the loss chunk of a standalone
    MTP: its MTP layer's final norm ran on the MTP chunk)."""
    h, bc, n = kind.hidden_size, geo.dtype_bytes, geo.tokens
    vocab = per_rank(kind.vocab_size, geo.tp)  # the loss's share: vocabulary-parallel whatever the head
    norm = p + "final_norm"
    head_input = norm if with_norm else source
    entry = _tp_entry(p, "output", block, geo, h, head_input, p + "logits", switch=None)
    if kind.vocab_replicated and not geo.gathers:
        entry = []  # MindSpore sums the partial input gradient nowhere over tp (`_replicated_logits`)
    logits_source = entry[0].name if geo.gathers else head_input
    elements = n * vocab
    loss_forward, loss_backward = _loss_bytes(geo, vocab)
    ops = [
        *entry,
        _matmul(p + "logits", block, n, h, vocab_rows(kind, geo.tp), bc, inputs=(logits_source,), fp8=False),
        *_replicated_logits(p, block, kind, geo),
        _elementwise(p + "loss", block, elements * loss_forward, elements * loss_backward, inputs=(p + "logits",)),
    ]
    if with_norm:
        rms = kind.norm.kind == "rmsnorm"
        final = _norm(norm, block, geo.whole_tokens, h, bc, rms, inputs=(source,) if source else ())
        ops.insert(0, _outside_compile(final, geo))
    if geo.tp > 1:
        # TE's loss all-gathers every rank's three fp32 a token in one call (`dist.all_gather_into_tensor`
        # of m_d_X_y in `cross_entropy_forward`); Megatron's all-reduces them, the max, the target logit
        # and the sum of exponentials in three calls (cross_entropy.py `_VocabParallelCrossEntropy.forward`),
        # two fused (fused_cross_entropy.py: the last two `torch.cat`ed into one)
        te = geo.cross_entropy_fusion and geo.cross_entropy_impl == "te"
        stats = 3 * n * STATS_BYTES
        if te:
            comm = Collective(ALL_GATHER, "tp", stats * geo.tp, "tp")
        else:
            comm = Collective(ALL_REDUCE, "tp", stats, "tp", calls=2 if geo.cross_entropy_fusion else 3)
        ops.append(Op(p + "reduce_loss", block, COMM, inputs=(p + "loss",), forward_comm=comm))
    return ops


def _mtp_module_ops(kind: TailKind, geo: OpGeometry, index: int) -> list[Op]:
    """One MTP module up to its final norm: embed the next tokens, normalise them and the hidden state,
    project the concatenation (2h → h, column-parallel, then gathered), one transformer layer."""
    assert kind.mtp_body is not None
    h, bc = kind.hidden_size, geo.dtype_bytes
    p, block = f"mtp{index}.", f"mtp{index}"
    ops = _embedding(p + "embedding.", block, geo, h, kind.vocab_size, 0, 0.0)
    ops.append(_norm(p + "norms", block, geo.whole_tokens, 2 * h, bc))
    # eh_proj is a column-parallel linear run inside the FP8 context (multi_token_prediction.py
    # `_proj_and_transformer_layer`: `get_fp8_context` around `_concat_embeddings`, d98e8a64 and 0d8e0714cd):
    # a TE linear under FP8, its SP input gathered quantized (`te_fp8_gather_bytes`)
    entry = _tp_entry(p, "projection", block, geo, 2 * h, p + "norms", p + "projection", switch=None, te_fp8=True)
    ops += entry
    ops.append(
        _matmul(
            p + "projection",
            block,
            geo.tokens,
            2 * h,
            per_rank(h, geo.tp),
            bc,
            inputs=(entry[0].name if geo.gathers else p + "norms",),
        )
    )
    if geo.tp > 1:
        # Megatron: `gather_from_tensor_model_parallel_region` (backward: a split) then, under SP,
        # `scatter_to_sequence_parallel_region` (a split; backward: an all-gather of the sequence), in the
        # compute dtype (`_concat_embeddings`, d98e8a64): without SP no backward collective
        payload = geo.tokens * h * bc
        backward = Collective(REDUCE_SCATTER, "tp", payload, "tp")
        if geo.framework == "megatron":
            backward = Collective(ALL_GATHER, "tp", payload, "tp") if geo.gathers else None
        ops.append(
            Op(
                p + "gather_projected",
                block,
                COMM,
                inputs=(p + "projection",),
                forward_comm=Collective(ALL_GATHER, "tp", payload, "tp"),
                backward_comm=backward,
            )
        )
    ops += [dataclasses.replace(op, block=f"{block}.{op.block}") for op in body_ops(kind.mtp_body, geo, p)]
    return ops


def _outside_compile(norm: Op, geo: OpGeometry) -> Op:
    """The final RMSNorm of a compiled torchtitan run with its eager norm module: `apply_compile`
    (parallelize_llama.py at 9dec370; models/llama3/parallelize_llama.py at e7c0cae, 820504e) wraps
    each of `model.layers` in `torch.compile` and nothing else, so `model.norm` runs op by op as
    uncompiled torchtitan runs it (`EAGER_TRAFFIC`'s norm factors, as bytes of their own); torch.nn's
    RMSNorm (`nn_rmsnorm`) and the Triton norm are one kernel either way."""
    if not geo.eager_final_norm or norm.fusion != "norm":
        return norm
    forward, backward = EAGER_TRAFFIC["norm"]
    return dataclasses.replace(
        norm, bytes=norm.bytes * forward, backward_bytes=norm.backward_bytes * backward, fusion=None
    )


def tail_ops(kind: TailKind, geo: OpGeometry) -> tuple[Op, ...]:
    """The output head and loss, then each multi-token-prediction module (DeepSeek-V3): embed the next
    tokens, normalise them and the hidden state, project the concatenation (2h → h, column-parallel,
    then gathered), one transformer layer, and the shared head and loss.

    Megatron-Core's standalone MTP (`TailKind.part`): the model's final norm runs with the last decoder
    layer, the MTP chunk each module up to its own final norm (`MultiTokenPredictionLayer._postprocess`),
    the loss chunk every head's logits and loss (`process_mtp_loss`, multi_token_prediction.py, commit
    d98e8a64)."""
    h, bc = kind.hidden_size, geo.dtype_bytes
    if kind.part == NORM_PART:
        return (_norm("output.final_norm", "output", geo.whole_tokens, h, bc, kind.norm.kind == "rmsnorm"),)
    ops = _output("output.", "output", kind, geo, "", with_norm=kind.has_final_norm) if kind.has_output else []
    for index in range(kind.mtp_layers if kind.mtp_body is not None else 0):
        p, block = f"mtp{index}.", f"mtp{index}"
        if kind.part == MTP_PART:
            ops += _mtp_module_ops(kind, geo, index)
            rms = kind.norm.kind == "rmsnorm"
            ops.append(_norm(p + "output.final_norm", block, geo.whole_tokens, h, bc, rms, inputs=(p + "residual",)))
        elif kind.part == OUTPUT_PART:
            ops += _output(p + "output.", block, kind, geo, "", with_norm=False)
        else:
            ops += _mtp_module_ops(kind, geo, index)
            ops += _output(p + "output.", block, kind, geo, p + "residual")
    return tuple(ops)


@lru_cache(maxsize=4096)
def layer_ops(kind: LayerKind, geo: OpGeometry) -> tuple[Op, ...]:
    """The op table of a layer kind (memoized: identical kinds are built once)."""
    if isinstance(kind, EncoderBodyKind):
        return body_ops(kind, encoder_geometry(kind, geo))
    if isinstance(kind, BodyKind) and kind.high_precision:  # outside the fp8 context: every GEMM in 16 bits
        # and TE's all-gathers and norms too
        geo = dataclasses.replace(
            geo, te_fp8_gather=(), te_amax_reduction=False, te_norm_fp8_out=False, te_fp8_attention=""
        )
        return tuple(dataclasses.replace(op, fp8=False) for op in body_ops(kind, geo))
    if isinstance(kind, BodyKind):
        return mindformers_o1_ops(body_ops(kind, geo), geo)
    if isinstance(kind, HeadKind):
        return head_ops(kind, geo)
    if isinstance(kind, PatchEmbedKind):
        return patch_embed_ops(kind, geo)
    if isinstance(kind, ProjectorKind):
        return projector_ops(kind, geo)
    return mindformers_o1_ops(tail_ops(kind, geo), geo)


def mindformers_o1_ops(ops: tuple[Op, ...], geo: OpGeometry) -> tuple[Op, ...]:
    """MindFormers' RMSNorms and SwiGLU under MindSpore's jit_level O1 (`timing.jit_level`), as their code
    runs them.

    RMSNorm:
    mindformers/models/llama/llama_layer.py `LlamaRMSNorm._rms_norm` (v1.4.0-beta2 a4dfb8219; glm2_modules.py
    `ChatGLM2RMSNorm._rms_norm` alike) casts x to layernorm_compute_type (float32 in every model card),
    runs `P.RmsNorm` (an aclnn kernel; not a DVM op, graph_kernel_cluster_cloud.cc
    `clusterable_ops_with_level_dvm`) and casts the result back; LLaMA's first cast is `recompute()`d.
    A row element, bc the 16-bit size: forward, the cast fused into the residual add before it writes
    the fp32 copy (4), RmsNorm reads and writes fp32 (4 + 4), the cast back reads 4 and writes bc (a
    lone Cast: its reader is a GEMM or a collective): 16 + bc. Backward: the output gradient cast up
    (bc + 4), the input cast again (bc + 4), RmsNormGrad reads the two and writes fp32 (4 + 4 + 4), the
    cast down fused into the gradient add after it reads that (4) where the add would read bc:
    bc + 24. Against one fused kernel's 2·bc and 3·bc (`_norm`). Not counted: ChatGLM2RMSNorm keeps its
    fp32 input (no second cast, bc + 4 less backward); under full recompute the layer's rerun already
    casts the input again (bc + 4 counted twice).

    SwiGLU: llama_layer.py `LlamaSiLU` runs `P._inner_ops.SiLU` (an aclnn kernel; neither a DVM cluster op
    nor a DVM expander op, graph_kernel_expander_cloud.cc `expand_ops_with_level_dvm`) on the gate, then
    `LlamaFeedForward.construct` multiplies it into the up projection (one Mul kernel: its inputs come
    from a GEMM and an aclnn kernel). Forward, an element of the FFN width: SiLU reads and writes bc, the
    Mul reads 2·bc and writes bc: 5·bc. Backward: the Mul's two products fused (they share the output
    gradient) read it, the up projection and the kept SiLU output and write two gradients (5·bc);
    SiLUGrad reads its gradient and the gate and writes the gate's (3·bc): 8·bc. Against one fused
    kernel's 3·bc and 5·bc (`_activation`).

    Rotary, where the run states MindFormers' rotary_dtype (`timing.rotary_dtype`): `mindformers_rope_bytes`."""
    if geo.framework != "mindformers" or geo.jit_level != "O1":
        return ops
    bc = geo.dtype_bytes

    def priced(op: Op) -> Op:
        if op.fusion == "rope" and geo.rotary_bytes:
            elements = op.bytes / (2 * bc)  # `_projections`: 2 · rows · (heads + kv heads) · head size · bc forward
            forward, backward = mindformers_rope_bytes(bc, geo.rotary_bytes, geo.rotary_cast)
            return dataclasses.replace(op, bytes=elements * forward, backward_bytes=elements * backward)
        if op.fusion == "norm":
            elements = op.bytes / (2 * bc)  # `_norm`: 2 · rows · width · bc forward
            return dataclasses.replace(op, bytes=elements * (16 + bc), backward_bytes=elements * (24 + bc))
        if op.fusion == "activation":
            elements = op.bytes / (3 * bc)  # `_activation`, gated: 3 · rows · width · bc forward
            return dataclasses.replace(op, bytes=elements * 5 * bc, backward_bytes=elements * 8 * bc)
        return op

    return tuple(priced(op) for op in ops)


def mindformers_rope_bytes(dtype_bytes: int, rotary_bytes: int, cast: bool) -> tuple[int, int]:
    """Bytes a rotated Q or K element moves, (forward, backward), in MindFormers' LLaMA rotary embedding under
    MindSpore's jit_level O1, *rotary_bytes* the size of its rotary_dtype, *cast* whether that differs from
    the compute dtype.

    mindformers/modules/layers.py `RotaryEmbedding.construct` (v1.4.0-beta2 a4dfb8219; llama_transformer.py
    `LLamaAttention` and llama_interleave.py call it on Q and K in BNSD, `use_rope_slice` off in every card):
    Cast to rotary_dtype, x·cos + BatchMatMul(x, swap_mask)·sin, Cast back. DVM clusters the Casts, Muls
    and Add (graph_kernel_cluster_cloud.cc `clusterable_ops_with_level_dvm`, level 0) but not the
    BatchMatMul (level 1, above the Ascend default `fusion_ops_level` 0, graph_kernel_flags.cc), which splits
    them: the Cast up alone (the cluster cannot also hold the Muls, which read the BatchMatMul's output),
    read bc, write r; the BatchMatMul reads r and writes r; the Muls, Add and Cast back read x and the swap
    (2r) and write bc. Forward: 4r + bc, plus bc + r for the Cast up (MindSpore drops a Cast to the same
    dtype). Backward (autodiff of the same): the output gradient cast up and times sin and cos in one
    cluster (read bc, write 2r), the BatchMatMul's input gradient (read r, write r), the sum and Cast down
    (read 2r, write bc): 2·bc + 6r. The cos and sin tables (sequence × head size, broadcast over batch and
    heads) are not counted; nor is the BatchMatMul's compute, 2 · head size FLOPs an element each way,
    which its HBM traffic hides where the cube runs it at 41 TFLOP/s in fp32 (head 128: 256 FLOP against 8
    bytes at the 1.28 TB/s ppb prices the 910B's HBM at), an eighth of its 16-bit peak: an assumption, no
    public fp32 cube rate for the 910B (in fp16 it needs 82 of its 313 TFLOP/s). The split
    is the fewest bytes DVM's clusters allow (a Cast up fused with a Mul would write one more tensor).
    Against one fused kernel's 2·bc each way (`_projections`)."""
    r = rotary_bytes
    forward = 4 * r + dtype_bytes + (dtype_bytes + r if cast else 0)
    return forward, 2 * dtype_bytes + 6 * r


# Vision towers ------------------------------------------------------------------------------------


def encoder_geometry(kind: EncoderBodyKind, geo: OpGeometry) -> OpGeometry:
    """A vision encoder block's geometry: its own tokens per sample, whole on every context-parallel
    rank, rotary where the tower has it, and bidirectional attention within its images or windows."""
    return dataclasses.replace(geo, seq_length=kind.tokens, cp=1, cp_variant="ring", cp_a2a=1, block_pairs=kind.pairs)


def patch_embed_ops(kind: PatchEmbedKind, geo: OpGeometry) -> tuple[Op, ...]:
    """The patch embedding as the matmul it is (patches × pixels-per-patch by pixels-per-patch × h), the
    class token and positions added, CLIP's pre-norm; replicated over TP, on every patch of the sample."""
    b, bc, h = geo.micro_batch_size, geo.dtype_bytes, kind.hidden_size
    block = "patch_embed"
    ops = [_matmul("patch_embed.projection", block, b * kind.patches, kind.patch_inputs, h, bc)]
    if kind.positions or kind.class_token:
        ops.append(
            _elementwise("patch_embed.positions", block, 3 * b * kind.tokens * h * bc, 2 * b * kind.tokens * h * bc)
        )
    if kind.pre_norm is not None:
        ops.append(_norm("patch_embed.pre_norm", block, b * kind.tokens, h, bc))
    return tuple(ops)


def projector_ops(kind: ProjectorKind, geo: OpGeometry) -> tuple[Op, ...]:
    """SigLIP's post-norm and the pooling head's key/value projection where they are used; the merger's
    norm over each patch; the projector's Linear – GELU – Linear over the projected tokens (its width
    split over TP as an MLP's)."""
    b, bc, h = geo.micro_batch_size, geo.dtype_bytes, kind.hidden_size
    block = "projector"
    ops: list[Op] = []
    if kind.post_norm is not None and kind.post_norm_tokens:
        rows = b * kind.post_norm_tokens
        ops.append(_norm("projector.post_norm", block, rows, h, bc))
        if kind.pooling_head:
            ops.append(_matmul("projector.pooling_key_value", block, rows, h, 2 * h, bc))
    if kind.merge_norm is not None:
        ops.append(_norm("projector.merge_norm", block, b * kind.tokens_in, h, bc))
    if kind.projector_inputs:
        rows, width = b * kind.tokens_out, per_rank(kind.projector_hidden, geo.tp)
        ops += [
            _matmul("projector.fc1", block, rows, kind.projector_inputs, width, bc),
            _elementwise("projector.gelu", block, 2 * rows * width * bc, 3 * rows * width * bc),
            _matmul("projector.fc2", block, rows, width, kind.out_hidden, bc),
        ]
    return tuple(ops)


def recompute_set(ops: Sequence[Op], switches: Mapping[str, int]) -> tuple[Op, ...]:
    """The ops a selective layer runs again in its backward, in forward order.

    Every op whose tensor a switch at 0 drops, and every transient tensor those need as input
    (recursively). Each tensor belongs to one switch or is transient with a single consumer
    chain, so the set of a switch setting is the union of the sets of its switches alone.
    """
    by_name = {op.name: op for op in ops}
    dropped = [op.name for op in ops if op.switch is not None and not switches.get(op.switch, 1)]
    chosen: set[str] = set()
    stack = list(dropped)
    while stack:
        name = stack.pop()
        if name in chosen:
            continue
        chosen.add(name)
        for source in by_name[name].inputs:
            op = by_name.get(source)
            if op is not None and op.transient:
                stack.append(source)
    return tuple(op for op in ops if op.name in chosen)


def rerun_ops(ops: Sequence[Op], state: LayerType, switches: Mapping[str, int] | None) -> tuple[Op, ...]:
    """What the backward of a layer in *state* runs again: nothing, the selective set, or every op."""
    if state is LayerType.FULL_REC_LAYER:
        return tuple(ops)
    if state is LayerType.SEL_REC_LAYER:
        return recompute_set(ops, switches or {})
    return ()


def scaled(op: Op, share: float) -> Op:
    """*share* of a matmul op: its output columns cut to that share (FLOPs and bytes with them), still
    priced as its part of the GEMM the framework runs it in; of separate linears (`Op.linears`), the last
    ones whose widths make that share (torchtitan's op policy reruns wk of wq and wk, w3 of w1 and w3:
    `op_policy_rerun`), else each cut to the share."""
    if share >= 1.0 or op.gemm is None:
        return op
    m, k, n, groups, fused = op.gemm
    linears = op.linears
    for first in range(len(linears)):
        if math.isclose(sum(linears[first:]), n * share, rel_tol=1e-9):
            linears = linears[first:]
            break
    else:
        linears = tuple(width * share for width in linears)
    return dataclasses.replace(
        op,
        flops=op.flops * share,
        bytes=op.bytes * share,
        backward_flops=op.backward_flops * share,
        backward_bytes=op.backward_bytes * share,
        gemm=(m, k, n * share, groups, fused),
        side_bytes=(op.side_bytes[0] * share, op.side_bytes[1] * share),
        weight_elements=op.weight_elements * share,
        linears=linears,
    )


def _policy_op_parts(kind: BodyKind) -> dict[str, tuple[tuple[str, float], ...]]:
    """Each matmul torchtitan's block runs (by the memory rules' `_block_ops` name) as the ops of ppb's
    op table that hold it, and its share of each: the table holds wq with wk (`qk_proj`), w1 with w3
    (`mlp_in`, `shared_in`), the one wqkv of a commit that fuses them as the whole of `qk_proj` and
    `v_proj`, and names MLA's wq_a / wq_b / wkv_a / wkv_b `q_down`, `q_up` (`q_proj` without a query
    LoRA), `kv_down`, `kv_up`."""
    att, mlp = kind.attention, kind.mlp
    heads, kv = att.num_heads, att.num_kv_heads
    parts = {
        "attention.wq_output": (("q_proj", 1.0),) if att.is_mla else (("qk_proj", heads / (heads + kv)),),
        "attention.wk_output": (("qk_proj", kv / (heads + kv)),),
        "attention.wv_output": (("v_proj", 1.0),),
        "attention.wqkv_output": (("qk_proj", 1.0), ("v_proj", 1.0)),
        "attention.wq_a_output": (("q_down", 1.0),),
        "attention.wq_b_output": (("q_up", 1.0),),
        "attention.wkv_a_output": (("kv_down", 1.0),),
        "attention.wkv_b_output": (("kv_up", 1.0),),
        "attention.wo_output": (("out_proj", 1.0),),
        "moe.router_logits": (("router", 1.0),),
    }
    for prefix, op_in, op_out in (("mlp", "mlp_in", "mlp_out"), ("moe.shared", "shared_in", "shared_out")):
        gated = mlp.gated
        parts[f"{prefix}.w1_output"] = ((op_in, 0.5 if gated else 1.0),)
        parts[f"{prefix}.w3_output"] = ((op_in, 0.5),)
        parts[f"{prefix}.w2_output"] = ((op_out, 1.0),)
        parts[f"{prefix}.fc1_output"] = ((op_in, 1.0),)
        parts[f"{prefix}.fc2_output"] = ((op_out, 1.0),)
    return parts


def early_stop_tail(ops: Sequence[Op]) -> frozenset[str]:
    """The ops at the end of a dense block that a checkpoint with early stop never replays.

    torch.utils.checkpoint's non-reentrant recompute with `early_stop` (its default; torchtitan's
    `early_stop` option, default False from 25413d224) stops once every tensor the block's forward
    saved is back; autograd saves an op's inputs before the op runs (`VariableType`'s generated
    kernels), so the block's last matmul (w2) and what follows it, the row-parallel reduction and
    the residual add, which save nothing, do not run again. Counted: `ppb_core.census.ops.count_block`
    (full: six of the seven `aten.mm`s and 143 of the forward's 149 element-wise bytes per token and
    hidden unit; op: 143). Only for a block ending in its dense MLP's `mlp_out`; none otherwise."""
    last = max((i for i, op in enumerate(ops) if op.category == MATMUL), default=-1)
    if last < 0 or not ops[last].name.endswith("mlp_out"):
        return frozenset()
    tail = ops[last:]
    if not all(op.category == COMM or op.name.split(".")[-1].startswith("residual") for op in tail[1:]):
        return frozenset()
    return frozenset(op.name for op in tail)


def op_policy_rerun(ops: Sequence[Op], kind: BodyKind, geometry: Geometry) -> tuple[Op, ...]:
    """What torchtitan's per-op selective checkpointing runs again in a block's backward.

    torchtitan/distributed/activation_checkpoint.py (`_apply_op_sac`, its policy `wrapped_policy`,
    v0.2.2 and main alike): the wrapped block is replayed whole in the backward (`early_stop=False`;
    before 25413d224 torch's default early stop: `early_stop_tail`, applied by the pricer), and only
    the ops its policy marks MUST_SAVE are taken from the forward: the save list's
    attention kernels and reduce-scatters, the matmuls the memory rules save
    (`ppb_core.memory.frameworks.torchtitan.op_policy_saves`: every second `aten.mm` of the block
    counted in forward order, wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7 in a Llama block, wqkv 1, wo 2,
    w1 3, w3 4, w2 5 where the run's commit fuses the projections (`OpGeometry.fused_qkv`); a linear
    with a bias, `aten.addmm`, not counted, saved from 114151ad4's central list only), and the expert
    all-to-alls where the list holds `all_to_all_single` (`saves_all_to_all`: DeepSeek-V3, not Qwen3 before
    114151ad4; every model from it). Everything else runs again:
    the rest of the matmuls (an op of ppb's table cut to its recomputed share, `_policy_op_parts`),
    the routed experts (`torch._grouped_mm`, not in the list), the norms, the rotary embedding, the
    activations and products, the router's top-k and the permutations, the residual adds, and the
    tensor-parallel all-gathers and all-reduces (not in the list; the reduce-scatters are)."""
    saved_share: dict[str, float] = {}
    parts = _policy_op_parts(kind)
    for name, saved in op_policy_saves(kind, geometry).items():
        if saved:
            for op_name, share in parts[name]:
                saved_share[op_name] = saved_share.get(op_name, 0.0) + share
    keeps_all_to_all = isinstance(kind.mlp, Moe) and saves_all_to_all(kind, geometry)
    rerun: list[Op] = []
    for op in ops:
        if op.category == MATMUL:
            share = 1.0 - saved_share.get(op.name, 0.0)
            if op.attention is None and share > 1e-12:
                rerun.append(scaled(op, share))
        elif op.category == COMM:
            kind_of = op.forward_comm.kind if op.forward_comm is not None else None
            if kind_of in (ALL_GATHER, ALL_REDUCE) or (kind_of == ALL_TO_ALL and not keeps_all_to_all):
                rerun.append(op)
        else:
            rerun.append(op)
    return tuple(rerun)


# FLOP counting ------------------------------------------------------------------------------------


def layer_flops(
    ops: Sequence[Op],
    state: LayerType = LayerType.NOT_REC_LAYER,
    switches: Mapping[str, int] | None = None,
    matmul_only: bool = True,
) -> tuple[float, float]:
    """(forward, backward) FLOPs of one micro-batch on one device; the backward includes what it recomputes."""
    counted = [op for op in ops if op.category == MATMUL or not matmul_only]
    forward = sum(op.flops for op in counted)
    backward = sum(op.backward_flops for op in counted)
    rerun = {op.name for op in rerun_ops(ops, state, switches)}
    return forward, backward + sum(op.flops for op in counted if op.name in rerun)
