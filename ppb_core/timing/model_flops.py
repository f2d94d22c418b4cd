"""FLOPs of one training iteration: model FLOPs as Megatron-LM counts them, hardware FLOPs with recompute.

`model_flops_per_iteration(run)` is Megatron-LM's `num_floating_point_operations(args, batch_size)`
(megatron/training/training.py, `transformer_flops`, at commit d98e8a64ddf3 of NVIDIA/Megatron-LM,
2026-08-22), transcribed onto ppb's model spec, for one global batch of
micro_batch_size · micro_batches · dp sequences of seq_length tokens (BSHD, no packing). So an MFU
computed from it is the MFU Megatron-LM logs. Its rules, per token (3 passes: forward, the
input-gradient and the weight-gradient GEMMs; 2 FLOPs per multiply-add):

- attention, MHA/GQA: 6·h·(q + k + v) + 6·q·h with q = heads·kv_channels, k = v = kv_heads·kv_channels;
  core (QKᵀ and AV, the causal mask halving the square): 6·q per token pair, s² pairs per sequence;
- attention, MLA: 6·[q_lora·(h + heads·(d_nope + d_rope) + 1) (or h·heads·(d_nope + d_rope) without
  a q latent) + kv_lora·(h + heads·(d_nope + d_v) + 1) + h·d_rope + heads·d_v·h]; core
  6·(heads·(d_nope + d_rope)/2 + heads·d_v/2) per pair;
- MLP: 6·h·ffn·(3 if SwiGLU else 2) for each dense layer; MoE layers 6·h·(moe_ffn·top_k + shared
  width)·(3 or 2) (no router, no imbalance, no biases); a gated activation other than SwiGLU (GPT-OSS's
  quick-GEGLU) at 2, as `args.swiglu` is off for it;
- sliding-window layers (GPT-OSS) as full causal ones: the count has no window (at d98e8a64, at the NeMo
  25.11 pin 0d8e0714cd and 26.04's 2edffadb52; Megatron-Bridge's own flop_utils.py at v0.2.0 and v0.4.0
  likewise), so NeMo's published GPT-OSS 120B Model TFLOP/s over tokens/s, 27.2 GFLOP a token at 4,096 and
  30.8 at 8,192 (docs/performance-summary.md at 5776a6d90 and 74695a06d), is this count;
- MTP (DeepSeek-V3): each module counts as one more layer like the last, plus 6·(3h + 2h²) for its
  norms and projection; logits 6·h·padded_vocab·(1 + MTP modules).

Norms, rotary embeddings, softmax and the loss are not counted, as Megatron does not count them.
A run of several sub-models sums each sub-model's count.

`hardware_flops_per_iteration(run, option_of)` adds what the backward runs again: each
recomputed layer's rerun matmuls from the op tables (`ppb_core.timing.flops`) at the whole
model's size (TP, CP, EP undone, ideal routing), the attention core as its kernel computes it
(the causal triangle with flash, the whole square eager). HFU is hardware FLOPs over peak.
"""

from __future__ import annotations

from collections.abc import Callable

from ppb_core.config.run import RunConfig
from ppb_core.config.spec import ModelSpec, VisionSpec
from ppb_core.memory.frameworks.torchtitan import op_policy_supported
from ppb_core.model.kinds import vision_kinds
from ppb_core.model.switches import LayerType, normalized, option_state
from ppb_core.model.walk import model_kinds
from ppb_core.timing.flops import MATMUL, OpGeometry, early_stop_tail, layer_flops, layer_ops, op_policy_rerun

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"


def global_batch_sequences(run: RunConfig) -> int:
    """Sequences per iteration: micro_batch_size · micro_batches · dp."""
    return run.training.micro_batch_size * run.training.micro_batches * run.parallel.dp


def _megatron_flops(spec: ModelSpec, padded_vocab: int, sequences: int, seq_length: int) -> float:
    """`transformer_flops()` of Megatron-LM's `num_floating_point_operations` for one model spec."""
    h = spec.hidden_size
    tokens = sequences * seq_length
    squared = sequences * seq_length * seq_length  # Σ L_i² over the batch (BSHD)
    # ffn_expansion_factor `3 if args.swiglu else 2`: SwiGLU stacks h→2·ffn and ffn→h. GPT-OSS's gated
    # quick-GEGLU is not --swiglu (Megatron-LM's --quick-geglu; Megatron-Bridge flop_utils.py at v0.4.0, 0fbfe7d3e,
    # `gated_linear_multiplier` 3/2 only where `activation_func == F.silu`): its gate is left uncounted, 2
    expansion = 3 if spec.activation == "swiglu" else 2
    moe_pattern = [spec.layer_is_moe(i) for i in range(spec.num_layers)]
    moe_layers = sum(moe_pattern)
    dense_layers = spec.num_layers - moe_layers
    mtp = spec.mtp_layers
    if mtp:  # each MTP module adds one layer like the last
        if moe_pattern[-1]:
            moe_layers += mtp
        else:
            dense_layers += mtp
    layers = spec.num_layers + mtp
    heads = spec.num_attention_heads
    if spec.is_mla:
        d_nope, d_rope, d_v = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
        if spec.q_lora_rank:
            q_term = spec.q_lora_rank * (h + heads * (d_nope + d_rope) + 1)
        else:
            q_term = h * heads * (d_nope + d_rope)
        attention = 6 * (q_term + spec.kv_lora_rank * (h + heads * (d_nope + d_v) + 1) + h * d_rope + heads * d_v * h)
        core = 6 * (heads * (d_nope + d_rope) / 2 + heads * d_v / 2)
    else:
        query = spec.attention_head_dim * heads
        key = value = spec.attention_head_dim * spec.kv_heads
        attention = 6 * (h * (query + key + value) + query * h)
        core = 6 * query / 2 * 2
    if spec.is_moe:
        moe_ffn = spec.moe_intermediate_size or 0
        shared = spec.shared_experts * (spec.shared_expert_intermediate_size or moe_ffn)
        routed = moe_ffn * spec.experts_per_token
    else:
        shared = routed = 0
    mlp = 6 * h * (spec.intermediate_size * expansion * dense_layers + (routed + shared) * expansion * moe_layers)
    mtp_extra = 6 * mtp * (3 * h + 2 * h * h)
    logits = 6 * h * padded_vocab * (mtp + 1)
    return tokens * (mlp + attention * layers + mtp_extra + logits) + squared * core * layers


def _vision_flops(run: RunConfig, name: str, sequences: int) -> float:
    """A vision tower's model FLOPs in the same convention (3 passes of every matmul, 2 FLOPs a multiply-add):
    the patch embedding, each block's projections and MLP per token, its attention core per (query,
    key) pair of its images or windows (bidirectional: no causal halving), and the projector per
    projected token. Megatron-LM counts no vision tower; this is its `transformer_flops` rule
    applied to the tower's own tokens and pairs."""
    spec = run.spec(name)
    assert isinstance(spec, VisionSpec)
    head, bodies, tail = vision_kinds(spec, run.vision(name))
    h = spec.hidden_size
    total = 6 * head.patches * head.patch_inputs * h
    expansion = 3 if spec.gated else 2
    for kind in bodies:
        total += kind.tokens * 6 * (4 * h * h + expansion * h * spec.intermediate_size)
        total += kind.pairs * 12 * h  # QKᵀ and AV over every pair, all heads
    if tail.projector_inputs:
        projector = tail.projector_inputs * tail.projector_hidden + tail.projector_hidden * tail.out_hidden
        total += 6 * tail.tokens_out * projector
    return sequences * total


def model_flops_per_iteration(run: RunConfig) -> float:
    """Model FLOPs of one iteration, exactly Megatron-LM's `num_floating_point_operations` (see the module),
    plus a vision tower's in the same convention."""
    sequences = global_batch_sequences(run)
    return sum(
        _vision_flops(run, name, sequences)
        if isinstance(run.spec(name), VisionSpec)
        else _megatron_flops(run.spec(name), run.vocab_size(name), sequences, run.training.seq_length)
        for name in run.model_names
    )


OptionOf = Callable[[str, int], str]  # (model name, body layer index) -> NONE/SLCT/COMM/BOTH/FULL


def recompute_flops_per_iteration(run: RunConfig, option_of: OptionOf | str | None = None) -> float:
    """Matmul FLOPs the backward runs again in one iteration, every device together.

    *option_of* gives each body layer's option (a callable of model name and layer index, one
    option for every layer, or None for NONE). Counted on the op tables at the whole model's size.
    """
    if option_of is None:
        return 0.0
    choose = (lambda _model, _index: option_of) if isinstance(option_of, str) else option_of
    total = 0.0
    for model_name in run.model_names:
        geo = OpGeometry.from_run(run).whole_model()
        configured = normalized(run.switches(model_name))
        cache: dict[tuple, float] = {}
        for index, kind in enumerate(model_kinds(run, model_name)[1]):
            option = choose(model_name, index)
            if option == "NONE":
                continue
            key = (kind, option)
            if key not in cache:
                state, switches = option_state(option, configured)
                ops = layer_ops(kind, geo)
                # torchtitan's per-op policy on the run's own selective setting, as the pricer reruns it
                op_policy = (
                    state is LayerType.SEL_REC_LAYER
                    and "op" in run.recompute.modules
                    and op_policy_supported(kind)
                    and switches in (configured, {**configured, "gather": 0})
                )
                # torchtitan's checkpoint with early stop does not replay the block's last matmul (`early_stop_tail`)
                stops = run.framework == "torchtitan" and run.recompute.early_stop
                tail = early_stop_tail(ops) if stops and (op_policy or state is LayerType.FULL_REC_LAYER) else ()
                if op_policy:
                    rerun = op_policy_rerun(ops, kind, geo)  # type: ignore[arg-type]
                    cache[key] = sum(op.flops for op in rerun if op.category == MATMUL and op.name not in tail)
                else:
                    cache[key] = layer_flops(ops, state, switches)[1] - layer_flops(ops, LayerType.NOT_REC_LAYER)[1]
                    cache[key] -= sum(op.flops for op in ops if op.category == MATMUL and op.name in tail)
            total += cache[key]
    return total * global_batch_sequences(run) / run.training.micro_batch_size


def hardware_flops_per_iteration(run: RunConfig, option_of: OptionOf | str | None = None) -> float:
    """Model FLOPs plus what recompute runs again (HFU's numerator)."""
    return model_flops_per_iteration(run) + recompute_flops_per_iteration(run, option_of)


def devices(run: RunConfig) -> int:
    par = run.parallel
    return par.dp * par.tp * par.pp * par.cp


def utilization(run: RunConfig, flops: float, seconds: float) -> float:
    """FLOPs over what every device's dense peak (at the run's dtype) could do in *seconds*."""
    return flops / (devices(run) * run.device.profile().peak_flops(run.training.dtype) * seconds)


def model_flops_utilization(run: RunConfig, iteration_ms: float) -> float:
    """MFU of an iteration of *iteration_ms*: Megatron-LM's model FLOPs over every device's peak."""
    return utilization(run, model_flops_per_iteration(run), iteration_ms / 1e3)
