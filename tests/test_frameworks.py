"""Each framework's memory rules, worked out by hand on small shapes, with the framework source they follow.

The shapes are test_memory_runs' (DENSE: h 64, 4 heads of 16, SwiGLU 128, vocabulary 1024;
bf16, so bc = 2). Megatron-LM main at d98e8a64 with Transformer Engine main at d0067d0d;
torchtitan v0.2.2 on torch 2.13; MindFormers at fd4deebc (docs/frameworks.md).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from test_memory_activations import MLA, MOE
from test_memory_model import DUMMIES_BODY, DUMMIES_TAIL
from test_memory_runs import DENSE, body, layers, make_run, model

from ppb_core.config.run import FrameworkRelease
from ppb_core.errors import InputError
from ppb_core.estimate.run import estimate
from ppb_core.memory import run_workspace_bytes, stage_peaks
from ppb_core.memory.frameworks.megatron import drain_buffer_bytes
from ppb_core.memory.frameworks.workspaces import (
    torch_cublas_workspace_bytes,
    torch_training_workspace_bytes,
    transformer_engine_workspace_bytes,
)
from ppb_core.memory.model import run_stage_peaks
from ppb_core.model.switches import KEEP_ALL, LayerType
from ppb_core.model.walk import walk
from ppb_core.tables.estimate import stages_from_frame, stages_to_frame

NOT, SEL, FULL = LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER
MB = 2**20
SP = {"tp": 2, "sequence_parallel": True}


def _terms(memory, layer, state=NOT, switches=None) -> dict[str, float]:
    return {t.op: t.bytes for t in memory.activation_terms(layer, state, switches)}


# --- Megatron-Core -----------------------------------------------------------------------------------


def test_megatron_keeps_the_sequence_shard_and_gathers_again():
    # tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication: save_for_backward(input)
    # is the shard; the backward all-gathers it again. s 64 at tp 2 + SP: no buffer kept per micro-batch,
    # and the workspace is one whole gathered input, 64 tokens · 64 · 2 = 8192 bytes, in the working set.
    run = make_run(DENSE, parallel=SP)
    memory, layer = model(run), body(run)
    assert memory.buffers(layer, NOT).at(5) == 0
    # working: the largest gradient (gate/up, 64 tokens · 2·128/2 · 2 = 16384) + the gathered input 8192
    assert memory.working_extra_bytes(layer, NOT, None, 2, True) == 16384 + 8192
    # MindFormers keeps the all-gather's output ((t−1)/t of it: 4096, twice) unless select_comm_recompute
    mind = make_run(DENSE, parallel=SP, framework="mindformers")
    assert model(mind).buffers(body(mind), NOT).at(5) == 5 * 2 * 4096
    assert model(mind).working_extra_bytes(body(mind), NOT, None, 2, True) == 16384


def test_megatron_ring_attention_keeps_only_the_local_chunk():
    # TE AttnFuncWithCPAndKVP2P saves q, one kv chunk, out and statistics; the backward circulates the
    # key/value chunks again. cp 2, one kv head of 16, 32 tokens: a chunk C = 32·2·16·2 = 2048 bytes,
    # queries and output Q = O = 32·4·16·2 = 4096.
    spec = {**DENSE, "num_key_value_heads": 1}
    run = make_run(spec, parallel={"cp": 2})
    memory, layer = model(run), body(run)
    assert memory.buffers(layer, NOT).kept_bytes() == 0
    # the ring's workspace (frameworks/ring.py): forward cp·(C + O) = 12288, backward Q + 4·C = 12288;
    # beside the largest gradient gate/up 32·256·2 = 16384
    assert memory.working_extra_bytes(layer, NOT, None, 2, True) == 16384 + 12288


def test_megatron_holds_a_stage_s_workspaces_once():
    # ZeRO-2 over dp 2, one stage: a layer's gradient bucket is a workspace of its backward
    # (body 41088 · 4 = 164352, HEAD 65536 · 4 = 262144, TAIL 65600 · 4 = 262400). SAPP counts
    # each layer's in the stage's buffers; Megatron holds one at a time: the stage's buffers are 0 and
    # its working set is the TAIL's, its logits' gradient 64·1024·2 = 131072 + its bucket 262400, less
    # what the cross-entropy saved and its backward freed first (cross_entropy.py
    # `_VocabParallelCrossEntropy`: the fp32 softmax 64·1024·4 = 262144, the labels 64·8 = 512); the
    # HEAD's and bodies' backwards run after the TAIL's, without its 742400/4 kept of that micro-batch.
    # (The chunk's buffers are only its cached rotary frequencies, 64 · 16 · 4 = 4096.)
    run = make_run(DENSE, parallel={"dp": 2, "zero": 2}, training={"micro_batches": 4})
    (peak,) = stage_peaks(model(run), walk(run), [[1]], 80 * 2**30)
    assert peak.buffer_bytes == 4096
    assert peak.working_bytes == 131072 + 262400 - 262144 - 512
    mind = make_run(DENSE, parallel={"dp": 2, "zero": 2}, training={"micro_batches": 4}, framework="mindformers")
    (seed,) = stage_peaks(model(mind), walk(mind), [[1]], 80 * 2**30)
    assert seed.buffer_bytes == 4 * 164352 + 262144 + 262400


def test_megatron_all_to_all_staging_once_per_stage():
    # MOE at ep 2 (dp 2), s 16: each MoE layer's all-to-all send buffer is max(32 dispatched, 32
    # returned rows) · 32 · 2 = 2048. Two MoE layers on the stage: SAPP sums 2 · 2048 in the
    # stage's buffers, Megatron holds one in a working set.
    run = make_run(MOE, parallel={"dp": 2, "ep": 2}, training={"seq_length": 16})
    mind = make_run(MOE, parallel={"dp": 2, "ep": 2}, training={"seq_length": 16}, framework="mindformers")
    (peak,) = stage_peaks(model(run), walk(run), [[1]], 80 * 2**30)
    (seed,) = stage_peaks(model(mind), walk(mind), [[1]], 80 * 2**30)
    # kept per micro-batch: the remote half of the dispatched rows, 32·32·2/2 = 1024 a layer (Megatron's
    # combine keeps nothing, below); SAPP also keeps the combined rows' remote half, 1024. Megatron's
    # chunk also holds its cached rotary frequencies, 16 · 8 · 4 = 512
    assert peak.buffer_bytes == 2 * 1024 + 512
    assert seed.buffer_bytes == 2 * 2 * 1024 + 2 * 2048
    assert model(run).state_memory(body(run, "moe"), NOT).transient_bytes == 2048


def test_megatron_experts_weight_their_activations_and_the_combine_keeps_nothing():
    # experts.py TEGroupedMLP: weighted_bias_swiglu_impl(fc1 output, bias, permuted_probs); the combine's
    # unpermute takes no probabilities. MOE at s 16: no moe.combined_tokens (16·2·32·2 = 2048 in the
    # SAPP), and the 32 routed rows' probabilities, 32·2 bytes
    run = make_run(MOE, training={"seq_length": 16})
    mind = make_run(MOE, training={"seq_length": 16}, framework="mindformers")
    terms, seed = _terms(model(run), body(run, "moe")), _terms(model(mind), body(mind, "moe"))
    assert "moe.combined_tokens" not in terms and seed["moe.combined_tokens"] == 2048
    assert terms["moe.expert.probs"] == 64
    # and the permutation's reverse mapping, unfused one int64 per routed copy: 16 · 2 · 8 = 256
    assert terms["moe.row_map"] == 256
    assert sum(terms.values()) == sum(seed.values()) - 2048 + 64 + 256


def test_megatron_experts_without_a_gated_activation_keep_it_before_and_after_the_weighting():
    # experts.py TEGroupedMLP.forward `bias_act_func` (and mlp.py MLP.forward for SequentialMLP), d98e8a64:
    # a non-gated activation takes the unfused branch, `activation_func(fc1_output) * permuted_probs`;
    # the product keeps the activation's output for the probabilities' gradient and fc2 keeps the
    # product. MOE with GeLU experts at s 16: 16 tokens · top 2 = 32 rows of width 16 in bf16,
    # 32 · 16 · 2 = 1024 bytes each, one more than SwiGLU's fused weighting keeps.
    gelu = make_run({**MOE, "activation": "gelu"}, training={"seq_length": 16})
    terms = _terms(model(gelu), body(gelu, "moe"))
    assert terms["moe.expert.unweighted_activation"] == terms["moe.expert.activation_output"] == 1024
    swiglu = make_run(MOE, training={"seq_length": 16})
    assert "moe.expert.unweighted_activation" not in _terms(model(swiglu), body(swiglu, "moe"))
    # --recompute-modules moe_act checkpoints bias_act_func: both go
    selective = {"granularity": "selective", "modules": ["moe_act"]}
    gelu = make_run({**MOE, "activation": "gelu"}, training={"seq_length": 16, "recompute": selective})
    recomputed = _terms(model(gelu), body(gelu, "moe"), SEL)
    assert "moe.expert.unweighted_activation" not in recomputed and "moe.expert.activation_output" not in recomputed


def test_megatron_clamped_quick_geglu_keeps_the_cat_beside_fc1_s_output():
    # fused_bias_geglu.py `weighted_bias_quick_geglu_impl` (core_v0.17.0, 0d8e0714cd): with a clamp value the
    # two halves of fc1's output are clamped (each clamp saves a view of fc1's output: nothing new) and
    # torch.cat'ed; the fused quick-GEGLU saves the cat's output. MOE with GPT-OSS's clamped quick-GEGLU at
    # s 16: 16 tokens · top 2 = 32 rows of 2 · 16 in bf16 = 32 · 32 · 2 = 2048 bytes, fc1's output's size.
    oss = {**MOE, "activation": "quick_geglu", "activation_clamp": 7.0}
    run = make_run(oss, training={"seq_length": 16})
    terms = _terms(model(run), body(run, "moe"))
    assert terms["moe.expert.clamped_input"] == terms["moe.expert.gate_up_output"] == 2048
    # no clamp value (--activation-func-clamp-value unset): no cat, fc1's output is the activation's input
    plain = make_run({**oss, "activation_clamp": 0.0}, training={"seq_length": 16})
    assert "moe.expert.clamped_input" not in _terms(model(plain), body(plain, "moe"))
    # --recompute-modules moe_act: CheckpointWithoutOutput keeps only fc1's output; the cat goes with the output
    selective = {"granularity": "selective", "modules": ["moe_act"]}
    run = make_run(oss, training={"seq_length": 16, "recompute": selective})
    recomputed = _terms(model(run), body(run, "moe"), SEL)
    assert "moe.expert.clamped_input" not in recomputed and recomputed["moe.expert.gate_up_output"] == 2048
    # SequentialMLP (no --moe-grouped-gemm): its experts' MLPs are not priced with the clamp
    sequential = make_run(oss, training={"seq_length": 16, "moe": {"grouped_gemm": False}})
    assert "moe.expert.clamped_input" not in _terms(model(sequential), body(sequential, "moe"))


def test_megatron_deferred_output_layer_weight_gradients_are_held_to_the_flush():
    # tensor_parallel/layers.py (d98e8a64): under --defer-embedding-wgrad-compute the output layer keeps
    # its input (ColumnParallelLinear.forward, embedding_activation_buffer) and its logits' gradient
    # (LinearWithGradAccumulationAndAsyncCommunication.backward, grad_output_buffer) for the first
    # --wgrad-deferral-limit micro-batches; schedules.py finish_embedding_wgrad_compute drains them before
    # the step. DENSE at pp 2, s 64, b 1, 4 micro-batches, limit 2: at the last micro-batch 2 are held,
    # each 64 tokens · (vocabulary 1024 + h 64) · 2 bytes = 139264, 278528 in all, at the backward and the
    # loss of the TAIL's stage, not at the step; limit 0 defers all, 3 = m − 1 held at the last
    base = {"micro_batches": 4}
    plain = make_run(DENSE, parallel={"pp": 2}, training=base)
    deferred = make_run(
        DENSE, parallel={"pp": 2}, training={**base, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 2}
    )
    every = make_run(DENSE, parallel={"pp": 2}, training={**base, "defer_embedding_wgrad_compute": True})
    (p0, p1), (d0, d1), (_, e1) = (run_stage_peaks(run) for run in (plain, deferred, every))
    assert d0.moments == p0.moments
    assert {name: d1.moments[name] - p1.moments[name] for name in d1.moments} == {
        "backward": 278528,
        "loss": 278528,
        "optimizer": 0,
    }
    assert e1.moments["loss"] - p1.moments["loss"] == 3 * 139264
    # the balancer charges every stage the most any could hold: the deferred bytes too
    assert run_workspace_bytes(deferred) - run_workspace_bytes(plain) == 278528


def test_megatron_deferral_under_sp_keeps_the_flush_s_gather_buffers():
    # utils.py drain_embedding_wgrad_compute (d98e8a64): with sequence parallelism each deferred input is
    # all-gathered into the global buffers "mpu_0", "mpu_1", T·h·bc each, kept after: DENSE at tp 2, s 64, b 1:
    # 64·64·2 = 8192 each, two with 4 (or 2) deferred micro-batches, one with a limit of 1, none without SP
    def setup(limit: int, sp: bool = True):
        training = {"micro_batches": 4, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": limit}
        run = make_run(DENSE, parallel={"pp": 2, "tp": 2, "sequence_parallel": sp, "world_size": 4}, training=training)
        memory = model(run)
        return memory.setup, [layers(run)["TAIL"].kind]

    assert drain_buffer_bytes(*setup(0)) == 2 * 8192
    assert drain_buffer_bytes(*setup(2)) == 2 * 8192
    assert drain_buffer_bytes(*setup(1)) == 8192
    assert drain_buffer_bytes(*setup(0, sp=False)) == 0
    tails_setup, _ = setup(0)
    assert drain_buffer_bytes(tails_setup, [body(make_run(DENSE)).kind]) == 0  # no output layer on the stage


def test_megatron_deferral_is_refused_where_megatron_refuses_it():
    # model_parallel_config.py ModelParallelConfig.__post_init__: pipeline parallelism and gradient
    # accumulation fusion needed; the limit means nothing without the deferral
    for parallel, training, timing, field in (
        ({}, {"defer_embedding_wgrad_compute": True}, None, "training.defer_embedding_wgrad_compute"),
        (
            {"pp": 2},
            {"defer_embedding_wgrad_compute": True},
            {"gradient_accumulation_fusion": False},
            "training.defer_embedding_wgrad_compute",
        ),
        ({"pp": 2}, {"wgrad_deferral_limit": 2}, None, "training.wgrad_deferral_limit"),
    ):
        with pytest.raises(InputError) as caught:
            make_run(DENSE, parallel=parallel, training=training, timing=timing)
        assert caught.value.field == field


def test_megatron_optimizer_instances_shard_within_an_instance():
    # parallel_state.py initialize_model_parallel (d98e8a64): --num-distributed-optimizer-instances N splits
    # dp·cp into N intra-partial groups, over which the distributed optimizer shards. DENSE's body layer,
    # 41088 parameters, dp 4, zero 1: its fp32 master copy and Adam moments (12 bytes each) over 4 ranks,
    # 10272 · 12 = 123264; with 2 instances over 2, 20544 · 12 = 246528; parameters and main gradients whole
    one = make_run(DENSE, parallel={"dp": 4, "zero": 1})
    two = make_run(DENSE, parallel={"dp": 4, "zero": 1, "distributed_optimizer_instances": 2})
    static_one, static_two = (model(run).static_breakdown(body(run)) for run in (one, two))
    assert (static_one.optimizer_bytes, static_two.optimizer_bytes) == (123264, 246528)
    assert (static_two.parameter_bytes, static_two.gradient_bytes) == (41088 * 2, 41088 * 4)
    for parallel in (
        {"dp": 4, "zero": 0, "distributed_optimizer_instances": 2},
        {"dp": 4, "distributed_optimizer_instances": 3},
    ):
        with pytest.raises(InputError) as caught:
            make_run(DENSE, parallel=parallel)
        assert caught.value.field == "parallel.distributed_optimizer_instances"


def test_megatron_allgather_dispatcher_gathers_into_the_global_buffer_and_combines_in_the_probs_dtype():
    # token_dispatcher.py MoEAllGatherTokenDispatcher (d98e8a64): token_dispatch all-gathers the layer's
    # tokens over etp·ep into the never-freed global "mpu" buffer (use_global_buffer=True); token_combine
    # reduce-scatters in the probabilities' dtype, so its backward gathers the gradient in it and casts it
    # back. MOE at ep 2 (dp 2), s 16, bf16 router: 16 tokens · 2 ranks · h 32 · 2 = 2048 bytes held
    # always, and 32 · 32 · (2 + 2) = 4096 the layer's workspace, in place of the all-to-all's staging
    # (2048, test_megatron_all_to_all_staging_once_per_stage)
    training = {"seq_length": 16}
    alltoall = make_run(MOE, parallel={"dp": 2, "ep": 2}, training=training)
    allgather = make_run(MOE, parallel={"dp": 2, "ep": 2}, training=training, timing={"moe_dispatcher": "allgather"})
    assert run_workspace_bytes(allgather, model(allgather)) - run_workspace_bytes(alltoall, model(alltoall)) == 2048
    assert model(allgather).state_memory(body(allgather, "moe"), NOT).transient_bytes == 4096
    # with --moe-router-dtype fp32 the gradient is gathered in fp32: 32 · 32 · (4 + 2) = 6144
    fp32 = make_run(
        MOE,
        parallel={"dp": 2, "ep": 2},
        training={**training, "moe": {"router_dtype": "fp32"}},
        timing={"moe_dispatcher": "allgather"},
    )
    assert model(fp32).state_memory(body(fp32, "moe"), NOT).transient_bytes == 6144


def test_megatron_16_bit_gradient_buffer_makes_fp32_main_gradients_at_the_step():
    # optimizer.py Float16OptimizerWithFloat16Params / distrib_optimizer.py DistributedOptimizer
    # _copy_model_grads_to_main_grads (d98e8a64): main_param.grad = main_grad.float(), a new fp32 tensor when the
    # buffer is 16-bit, alive from the step to the next zero_grad. DENSE's body layer, 41088 parameters: at
    # zero 0, 4 · 41088 = 164352 bytes at the step only; at zero 1 over dp 4, 4 · 10272 = 41088
    for parallel, copies in (({"zero": 0}, 164352), ({"dp": 4, "zero": 1}, 41088)):
        fp32 = make_run(DENSE, parallel=parallel)
        bf16 = make_run(DENSE, parallel=parallel, training={"grad_bytes": 2})
        wide, narrow = (model(run).static_breakdown(body(run)) for run in (fp32, bf16))
        assert narrow.step_only_bytes == copies and wide.step_only_bytes == 0
        assert narrow.total == wide.total - 2 * 41088  # the buffer itself: 2 bytes a parameter, not 4
        assert narrow.step_bytes == narrow.total + copies


def test_megatron_local_softmax_in_fp32_keeps_an_fp32_output():
    # fusions/fused_softmax.py FusedScaleMaskSoftmax (d98e8a64): without the fused kernel (off, or outside
    # is_kernel_available's shapes) forward_torch_softmax upcasts under attention_softmax_in_fp32 and
    # torch.nn.Softmax keeps its fp32 output. DENSE, local, unfused, s 64, b 1, 4 heads: 64 · 4 · 64 =
    # 16384 scores, 65536 bytes in fp32; with the fusion (16 < 64 <= 4096, 64 % 4, 1 · 4 % 4 all hold) 32768
    training = {"flash_attention": False}
    timing = {"transformer_impl": "local", "attention_softmax_in_fp32": True}
    for fusion, expected in ((False, 65536), (True, 32768)):
        run = make_run(DENSE, training=training, timing={**timing, "masked_softmax_fusion": fusion})
        assert _terms(model(run), body(run))["attention.softmax_output"] == expected
    # Transformer Engine's unfused attention keeps its own kernel's 16-bit output whatever the flag
    run = make_run(DENSE, training=training, timing={"attention_softmax_in_fp32": True, "masked_softmax_fusion": False})
    assert _terms(model(run), body(run))["attention.softmax_output"] == 32768


def test_megatron_dispatcher_keeps_its_last_routing():
    # token_dispatcher.py MoEAlltoAllTokenDispatcher.dispatch_preprocess stores probs, routing_map and
    # permute's reverse mapping until the layer's next forward. MOE (4 experts, top 2) at s 16, the
    # defaults (router in bf16, unfused permute): probs 16·4·2 = 128 + the bool map 16·4 = 64 at every
    # moment; the sorted indices 16·2·8 = 256 only while none of the layer's micro-batches is in flight
    run = make_run(MOE, training={"seq_length": 16})
    static = model(run).static_breakdown(body(run, "moe"))
    assert (static.module_bytes, static.idle_bytes) == (192, 256)
    assert static.step_bytes - static.total == 256
    # --moe-router-dtype fp32 and --moe-permute-fusion: probs 16·4·4 = 256 + 64; TE's row_id_map
    # (triton/permutation.py make_row_id_map) [16, 2·4 + 1] int32 = 576, also the kept moe.row_map
    moe = {"router_dtype": "fp32", "permute_fusion": True}
    run = make_run(MOE, training={"seq_length": 16, "moe": moe})
    memory, layer = model(run), body(run, "moe")
    static = memory.static_breakdown(layer)
    assert (static.module_bytes, static.idle_bytes) == (320, 576)
    assert _terms(memory, layer)["moe.row_map"] == 576
    # the router in fp32 (router.py gating): its kept scores 16·4·4 = 256 and top-k probabilities
    # 16·2·4 = 128, not 128 and 64 in bf16
    terms = _terms(memory, layer)
    assert (terms["moe.router_scores"], terms["moe.topk_probabilities"]) == (256, 128)
    # tp 2 with SP: the dispatcher sees the layer's sequence shard, 8 tokens: half of each
    run = make_run(MOE, parallel={**SP, "dp": 2}, training={"seq_length": 16, "moe": moe})
    static = model(run).static_breakdown(body(run, "moe"))
    assert (static.module_bytes, static.idle_bytes) == (160, 288)
    # a stage whose chunk has none of its micro-batches in flight holds the mapping too: MOE on 2
    # stages, stage 1 (one MoE layer and the TAIL) at 0 in flight against 1 holds 256 more beyond its
    # last received input and gradient, 2 · 16 · 32 · 2 = 2048
    run = make_run(MOE, parallel={"pp": 2, "zero": 0}, training={"seq_length": 16, "micro_batches": 4})
    memory = model(run)
    idle, busy = (stage_peaks(memory, walk(run), [[2, n]], 80 * 2**30)[1] for n in (0, 1))
    assert idle.buffer_bytes - busy.buffer_bytes == 2048 + 256
    # DeepEP's flex dispatcher keeps other tensors, not counted (timing.moe_dispatcher deepep; ep 2, as
    # `MoEFlexTokenDispatcher` asserts TP × EP > 1)
    run = make_run(MOE, parallel={"dp": 2, "ep": 2}, training={"seq_length": 16}, timing={"moe_dispatcher": "deepep"})
    memory, layer = model(run), body(run, "moe")
    assert memory.static_breakdown(layer).module_bytes == 0 and "moe.row_map" not in _terms(memory, layer)
    # MindFormers' conventions count none; a dense layer has no dispatcher
    mind = make_run(MOE, training={"seq_length": 16}, framework="mindformers")
    assert model(mind).static_breakdown(body(mind, "moe")).module_bytes == 0
    dense = make_run(DENSE)
    assert model(dense).static_breakdown(body(dense)).module_bytes == 0


def test_megatron_mla_keeps_yarn_tables():
    # multi_latent_attention.py builds a YarnRotaryEmbedding per layer; yarn_rotary_pos_embedding.py
    # _set_cos_sin_cache registers cos and sin of 4096 (original_max_position_embeddings) × the rotary
    # dimension, cast to bf16 by Float16Module; the lru-cached forward keeps its fp32 frequencies.
    # MLA: rotary dimension 4, s 64.
    def held(training, parallel=None):
        run = make_run(MLA, parallel=parallel, training={"seq_length": 64, **training})
        return model(run).static_breakdown(body(run)).module_bytes

    # --no-rope-fusion: 2 · 4096 · 4 · 2 = 65536 + the cached frequencies 64 · 4 · 4 = 1024
    assert held({"rope_fusion": False}) == 65536 + 1024
    # rope fusion (the default): get_cached_cos_sin rebuilds the tables in bf16 at 64 rows through the
    # cached forward: 2 · 64 · 4 · 2 = 1024 + 1024
    assert held({}) == 2048
    # in fp32 the init's tables serve (4096 rows, 2 · 4096 · 4 · 4 = 131072) and forward is not called
    assert held({"dtype": "fp32"}) == 131072
    # cp 2: this rank's rows, 2 · 2048 · 4 · 2 = 32768 + 32 · 4 · 4 = 512
    assert held({"rope_fusion": False}, {"cp": 2}) == 32768 + 512
    # an MTP layer's MLA holds its own: the TAIL of one MTP layer holds one layer's tables
    run = make_run({**MLA, "mtp_layers": 1}, training={"seq_length": 64})
    assert model(run).static_breakdown(layers(run)["TAIL"]).module_bytes == 2048


def test_megatron_module_state_at_the_ci_moe_mla_shapes():
    # Megatron CI's moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed: s 4096, micro-batch 4, tp 2 with
    # SP, 32 experts top 4, rotary dimension 64, --moe-router-dtype fp32, --moe-permute-fusion,
    # --no-rope-fusion. The dispatcher's tokens: 4096 · 4 / 2 = 8192; probs 8192 · 32 · 4 = 1,048,576,
    # the map 8192 · 32 = 262,144, the row_id_map 8192 · 65 · 4 = 2,129,920: 3,440,640 a MoE layer.
    # YaRN: cos and sin 2 · 4096 · 64 · 2 = 1,048,576 + frequencies 4096 · 64 · 4 = 1,048,576.
    spec = {**MLA, "hidden_size": 1024, "num_attention_heads": 32, "qk_nope_head_dim": 128}
    spec |= {"qk_rope_head_dim": 64, "v_head_dim": 128, "q_lora_rank": 1536, "kv_lora_rank": 512}
    spec |= {"num_experts": 32, "experts_per_token": 4, "moe_intermediate_size": 1024}
    moe = {"router_dtype": "fp32", "permute_fusion": True}
    training = {"seq_length": 4096, "micro_batch_size": 4, "rope_fusion": False, "moe": moe}
    run = make_run(spec, parallel={**SP, "dp": 4, "ep": 4}, training=training)
    static = model(run).static_breakdown(body(run, "moe_mla"))
    assert static.module_bytes == 1_048_576 + 262_144 + 2_097_152
    assert static.idle_bytes == 2_129_920


def test_megatron_mtp_layer_keeps_what_a_megatron_body_layer_keeps():
    # The MTP module's transformer layer is a TransformerLayer built from the same config
    # (megatron/core/transformer/multi_token_prediction.py `MultiTokenPredictionLayer`), so its MoE
    # block keeps no combined rows and keeps its routed rows' probabilities as the decoder's do. MOE
    # at s 16 with one MTP layer: the TAIL under Megatron = SAPP's TAIL - mtp0.moe.combined_tokens
    # (16·2·32·2 = 2048) + mtp0.moe.expert.probs (32 rows · 2 bytes) + the hidden-state norm's input
    # apart from the torch.cat copy (16·32·2 = 1024)
    spec = {**MOE, "mtp_layers": 1}
    run = make_run(spec, training={"seq_length": 16})
    mind = make_run(spec, training={"seq_length": 16}, framework="mindformers")
    tail, seed_tail = layers(run)["TAIL"], layers(mind)["TAIL"]
    terms, seed = _terms(model(run), tail), _terms(model(mind), seed_tail)
    assert "mtp0.moe.combined_tokens" not in terms and seed["mtp0.moe.combined_tokens"] == 2048
    assert terms["mtp0.moe.expert.probs"] == 64 and terms["mtp0.hidden_norm_input"] == 1024
    # + the reverse mapping of its permutation, 16 · 2 int64 = 256
    assert sum(terms.values()) == sum(seed.values()) - 2048 + 64 + 1024 + 256


def test_megatron_recompute_modules_act_on_the_mtp_layer():
    # --recompute-modules builds the MTP layer's TransformerLayer with the same checkpointing
    # (transformer_layer.py `TransformerLayer.__init__` reads config.recompute_modules): moe_act drops
    # the MTP layer's expert activation output too, 32 rows · 16 · 2 = 1024; `moe` also its kept
    # dispatch buffer under EP (the remote half, 32·32·2/2 = 1024)
    spec = {**MOE, "mtp_layers": 1}

    def tail_kept(modules, parallel=None):
        recompute = {"granularity": "selective", "modules": modules}
        run = make_run(spec, parallel=parallel, training={"seq_length": 16, "recompute": recompute})
        memory, tail = model(run), layers(run)["TAIL"]
        return memory.activation_bytes(tail, LayerType.OUTPUT_LAYER), memory.buffers(tail, LayerType.OUTPUT_LAYER)

    assert tail_kept(["core_attn"])[0] - tail_kept(["core_attn", "moe_act"])[0] == 1024
    ep = {"dp": 2, "ep": 2}
    assert tail_kept(["core_attn"], ep)[1].kept_bytes() == 1024
    assert tail_kept(["moe"], ep)[1].kept_bytes() == 0


def test_megatron_full_recompute_checkpoints_the_mtp_layer():
    # multi_token_prediction.py MultiTokenPredictionLayer.forward: under --recompute-granularity full,
    # _checkpointed_forward runs _proj_and_transformer_layer (concatenation, eh_proj, the transformer
    # layer, the final norm) from the hidden state and the embedding. DENSE with one MTP layer at s 64
    # (test_tail_with_a_multi_token_prediction_module): the TAIL keeps the main loss 279040, the MTP's
    # token ids 512, its checkpoint inputs (the embedding 8192 and the hidden state 8192) and its loss
    # without the final norm's input, 279040 - 8192; not the projection input (16384) nor the layer (115712)
    spec = {**DENSE, "mtp_layers": 1}
    full = {"granularity": "full", "method": "uniform", "num_layers": 1}
    run = make_run(spec, training={"seq_length": 64, "recompute": full})
    tail = layers(run)["TAIL"]
    assert model(run).activation_bytes(tail, LayerType.OUTPUT_LAYER) == 279040 + 512 + 8192 + 8192 + 279040 - 8192


def test_megatron_modules_drop_what_megatron_checkpoints():
    # MOE (h 32, 4 heads of 8, 4 experts, top-2, expert width 16) + one shared expert of 16, s 16.
    spec = {**MOE, "shared_experts": 1}

    def dropped(modules, spec=spec, kind="moe", seq=16):
        run = make_run(
            spec, training={"seq_length": seq, "recompute": {"granularity": "selective", "modules": modules}}
        )
        memory, layer = model(run), body(run, kind)
        return memory.activation_bytes(layer, NOT) - memory.activation_bytes(layer, SEL)

    # core_attn: the flash softmax statistics, 16 tokens · 4 heads · 4 bytes
    assert dropped(["core_attn"]) == 256
    # moe_act: the experts' activation output, 32 rows · 16 · 2 (not the shared expert's)
    assert dropped(["moe_act"]) == 1024
    # shared_experts: gate/up 16·32·2 and the activation 16·16·2
    assert dropped(["shared_experts"]) == 1024 + 512
    # moe: the block from its input (moe_layer.py): router 16·4·2, top-k 16·2·2 and 16·2·8, dispatched
    # 32·32·2, gate/up 32·32·2, activation 32·16·2, the rows' probabilities 32·2, the shared expert 1536,
    # the permutation's sorted indices 32·8
    assert dropped(["moe"]) == 128 + 64 + 256 + 2048 + 2048 + 1024 + 64 + 1536 + 256
    # layernorm: only a norm that is its own module (gpt_layer_specs.py, TE spec): the MoE layer's
    # pre-MLP norm (16·32·2), not the attention's input norm, which TELayerNormColumnParallelLinear fuses
    assert dropped(["layernorm"]) == 1024
    # ... and on a dense layer nothing (both norms fused); mlp checkpoints the dense MLP from its input:
    # gate/up 64·256·2 and the activation 64·128·2
    assert dropped(["layernorm"], DENSE, None, 64) == 0
    assert dropped(["mlp"], DENSE, None, 64) == 32768 + 16384
    # MLA (s 32): the input norm is its own module there (64·32·2 = 4096); mla_up_proj drops the normed
    # latents and the up-projected heads, 9728 (test_memory_activations)
    assert dropped(["layernorm"], MLA, None, 32) == 4096
    assert dropped(["mla_up_proj"], MLA, None, 32) == 9728


def test_megatron_unfused_rope_keeps_cos_and_sin_of_each_call():
    # rope_utils.py _apply_rotary_pos_emb_bshd: cos_ and sin_ [s/cp, 1, 1, d] in bf16, built afresh for the
    # query's call and the key's, kept by t·cos_ + rotate_half(t)·sin_. DENSE (head 16) at s 64:
    # 4 · 64 · 16 · 2 = 8192, whatever the micro-batch size; at cp 2 the rows halve: 4 · 32 · 16 · 2 = 4096.
    def rotary(spec, seq, parallel=None, training=None, state=NOT):
        train = {"seq_length": seq, "rope_fusion": False, **(training or {})}
        run = make_run(spec, parallel=parallel, training=train)
        return _terms(model(run), body(run), state).get("attention.rotary_cos_sin")

    assert rotary(DENSE, 64) == 8192
    assert rotary(DENSE, 64, training={"micro_batch_size": 2}) == 8192
    assert rotary(DENSE, 64, parallel={"cp": 2}) == 4096
    # the fused kernel keeps the cached tables only (module state), no term
    run = make_run(DENSE, training={"seq_length": 64})
    assert "attention.rotary_cos_sin" not in _terms(model(run), body(run))
    # MLA (s 32): the rotary part, 4 wide: 4 · 32 · 4 · 2 = 1024, inside mla_up_proj's checkpoint
    assert rotary(MLA, 32) == 1024
    up_proj = {"recompute": {"granularity": "selective", "modules": ["mla_up_proj"]}}
    assert rotary(MLA, 32, training=up_proj, state=SEL) is None
    # a YaRN-scaled rotary (GPT-OSS's factor 32: mscale 1.3466) takes the same unfused steps under rope fusion
    # (rope_utils.py `apply_rotary_pos_emb`, core_v0.17.0): 8192 again; a factor of 1 is no scaling
    yarn = make_run({**DENSE, "rope_yarn_factor": 32.0}, training={"seq_length": 64})
    assert _terms(model(yarn), body(yarn))["attention.rotary_cos_sin"] == 8192
    flat = make_run({**DENSE, "rope_yarn_factor": 1.0}, training={"seq_length": 64})
    assert "attention.rotary_cos_sin" not in _terms(model(flat), body(flat))


def test_megatron_moe_module_rebuilds_the_tokens_its_all_to_alls_brought():
    spec = {**MOE}
    run = make_run(
        spec,
        parallel={"dp": 2, "ep": 2},
        training={"seq_length": 16, "recompute": {"granularity": "selective", "modules": ["moe"]}},
    )
    # the dispatched rows' remote half, 32·32·2/2, kept plainly; rebuilt with the block under `moe`
    memory, layer = model(run), body(run, "moe")
    assert memory.buffers(layer, NOT).kept_bytes() == 1024
    assert memory.buffers(layer, SEL).kept_bytes() == 0


def test_megatron_loss_holds_the_16_bit_logits_next_to_the_fp32_softmax():
    # cross_entropy.py: the fp32 copy becomes the softmax in place (kept, 4·64·1024 in the TAIL);
    # the bf16 logits of the output layer are alive meanwhile: 2·64·1024 = 131072; and the data loader's bool
    # causal mask, 64·64 = 4096, through the forward (pretrain_gpt.py get_batch; tests/test_dataloader_mask.py)
    run = make_run(DENSE)
    memory = model(run)
    tail = layers(run)["TAIL"]
    assert _terms(memory, tail)["output.logits_softmax"] == 4 * 64 * 1024
    assert memory.loss_bytes(tail) == 131072 + 4096
    assert memory.loss_bytes(body(run)) == 0


def test_megatron_fused_loss_backward_scatters_into_an_fp32_copy():
    # --cross-entropy-loss-fusion: fused_cross_entropy.py `calculate_gradients` runs under torch.compile
    # (megatron/core/jit.py); its index_put on a view of the saved softmax stays functional, so Inductor
    # scatters into a fresh fp32 copy and returns the bf16 gradient beside it: (4 + 2)·64·1024 = 393216
    # (the plain loss: the bf16 gradient alone, 2·64·1024 = 131072). At tp 2 the vocabulary shard is
    # 512 and T stays 64 (the output layer's input is gathered): 6·64·512 = 196608.
    fused = {"cross_entropy_fusion": True}
    run = make_run(DENSE, timing=fused)
    assert model(run).loss_bytes(layers(run)["TAIL"]) == 393216
    tp = make_run(DENSE, parallel=SP, timing=fused)
    assert model(tp).loss_bytes(layers(tp)["TAIL"]) == 196608
    # SAPP's (mindformers) rules have no loss moment of their own; the fusion is Megatron's flag, refused there
    mind = make_run(DENSE, framework="mindformers")
    assert model(mind).loss_bytes(layers(mind)["TAIL"]) == 0
    with pytest.raises(InputError) as caught:
        make_run(DENSE, timing=fused, framework="mindformers")
    assert caught.value.field == "timing.cross_entropy_fusion"


def test_megatron_fused_loss_autotunes_at_its_first_call_before_pytorch_2_6():
    # PyTorch 2.5.0 (NGC 24.10's 2.5.0a0): jit_fuser is torch.compile (megatron/core/jit.py, PyTorch >= 2.2);
    # Inductor's CachingAutotuner benchmarks calculate_gradients' last kernel (a 1-D pointwise kernel, two
    # configs) on a device clone of the fp32 softmax it writes in place (`clone_args`), inside Triton's
    # do_bench, whose L2 flush buffer is torch.empty(int(256e6 // 4), dtype=torch.int): 256,000,000 bytes.
    # DENSE at tp 1: T = 64, v = 1024: the clone 4·64·1024 = 262,144; once, in iteration 1, before the first
    # step makes Adam's moments: 8 bytes a parameter of the one stage, embedding 1024·64 = 65,536, 4 layers of
    # 41,088, the final norm 64 and the untied output layer 65,536: 295,488 parameters, 2,363,904 bytes.
    fused = make_run(DENSE, timing={"cross_entropy_fusion": True})
    old = fused.model_copy(update={"framework_release": FrameworkRelease(pytorch="2.5.0a0+e000cf0ad9")})
    (peak,) = run_stage_peaks(old)
    assert peak.first_call_bytes == 4 * 64 * 1024 + 256_000_000
    assert peak.first_step_bytes == 8 * 295_488
    assert peak.moments["first_loss"] - peak.moments["loss"] == 262_144 + 256_000_000 - 2_363_904
    assert peak.moment == "first_loss"
    # PyTorch 2.6 copies such an argument to the host where a clone would raise the peak; before 2.2 jit_fuser
    # is torch.jit.script; --deterministic-mode (torch.use_deterministic_algorithms) leaves one config, nothing
    # to tune; TE's Triton cross-entropy (--cross-entropy-fusion-impl te) compiles nothing; unstated: the newest
    for run in (
        fused.model_copy(update={"framework_release": FrameworkRelease(pytorch="2.6")}),
        fused.model_copy(update={"framework_release": FrameworkRelease(pytorch="2.1")}),
        make_run(DENSE, timing={"cross_entropy_fusion": True, "deterministic": True}).model_copy(
            update={"framework_release": FrameworkRelease(pytorch="2.5")}
        ),
        make_run(DENSE, timing={"cross_entropy_fusion": True, "cross_entropy_fusion_impl": "te"}).model_copy(
            update={"framework_release": FrameworkRelease(pytorch="2.5")}
        ),
        fused,
    ):
        (peak,) = run_stage_peaks(run)
        assert peak.first_call_bytes == 0 and "first_loss" not in peak.moments
    # the plain loss runs eagerly: nothing compiled
    plain = make_run(DENSE).model_copy(update={"framework_release": FrameworkRelease(pytorch="2.5")})
    assert "first_loss" not in run_stage_peaks(plain)[0].moments


def test_the_first_loss_holds_the_moments_where_they_exist_before_the_first_step():
    # Megatron-FSDP with --ckpt-format fsdp_dtensor and --load (training/checkpointing.py `load_checkpoint`,
    # optimizer/distrib_optimizer.py `sharded_param_state_fsdp_dtensor` → `_init_optimizer_states_with_dummy_values`,
    # febd25e3fb): one step on zero gradients makes Adam's moments before iteration 1, checkpoint or not. The run
    # above at PyTorch 2.5 then reaches its first call with them: nothing taken off, the first loss 262,144 +
    # 256,000,000 bytes over the loss (not 2,363,904 less), every later moment the same.
    fused = make_run(DENSE, timing={"cross_entropy_fusion": True})
    old = fused.model_copy(update={"framework_release": FrameworkRelease(pytorch="2.5")})
    loaded = old.model_copy(update={"training": old.training.model_copy(update={"optimizer_states_at_start": True})})
    (before,), (peak,) = run_stage_peaks(old), run_stage_peaks(loaded)
    assert peak.first_step_bytes == 0
    assert peak.moments["first_loss"] - peak.moments["loss"] == 262_144 + 256_000_000
    assert peak.moments["first_loss"] - before.moments["first_loss"] == 2_363_904
    assert {name: b for name, b in peak.moments.items() if name != "first_loss"} == {
        name: b for name, b in before.moments.items() if name != "first_loss"
    }


def test_megatron_full_recompute_methods():
    # recompute.py: uniform checkpoints groups of num_layers from the group's input; block the first
    # num_layers of each chunk. DENSE, 4 layers on one stage, one micro-batch in flight.
    uniform = make_run(DENSE, training={"recompute": {"granularity": "full", "method": "uniform", "num_layers": 2}})
    (peak,) = stage_peaks(model(uniform), walk(uniform), [[1]], 80 * 2**30)
    # activations: HEAD 512 (token ids), ⌈4/2⌉ = 2 group inputs of 8192, TAIL 279040
    assert peak.activation_bytes == 512 + 2 * 8192 + 279040
    # a backward rebuilds its group: 2 · 115712 − 8192 + the largest gradient 32768 = 256000; on the
    # loss's stage it runs after the TAIL's, whose kept 279040 the loss's and the output layer's backward
    # freed (cross_entropy.py `_VocabParallelCrossEntropy`'s saved softmax, the output layer's and the
    # final norm's saved inputs): 256000 − 279040 < 0. The TAIL's own, its logits' gradient 64·1024·2,
    # runs without the softmax 64·1024·4 and labels 64·8: below 0 too.
    memory = model(uniform)
    group = next(layer for layer in walk(uniform) if layer.node == "BODY")
    rebuilt = memory.working_extra_bytes(group, *memory.option_state(group, "FULL"), 2, on_saved=True, group=2)
    assert rebuilt == 2 * 115712 - 8192 + 32768
    assert peak.working_bytes == 0
    block = make_run(
        DENSE,
        parallel={"pp": 2},
        training={"micro_batches": 4, "recompute": {"granularity": "full", "method": "block", "num_layers": 1}},
    )
    first, last = stage_peaks(model(block), walk(block), [[1, 1]], 80 * 2**30)
    # each stage: its first layer FULL (8192), its second NONE (115712)
    assert first.activation_bytes == 512 + 8192 + 115712
    assert last.activation_bytes == 8192 + 115712 + 279040


# --- torchtitan ---------------------------------------------------------------------------------------


def _titan(**kwargs):
    return make_run(DENSE, framework="torchtitan", **kwargs)


def test_torchtitan_block_keeps_the_silu_output():
    # model.py: w2(F.silu(w1(x)) * w3(x)) keeps the SiLU output for the product (64·128·2 = 16384 more);
    # the contiguous copy of the transposed SDPA output for wo is no copy (a view of the flash output)
    run = _titan(parallel={"zero": 0})
    memory, layer = model(run), body(run)
    assert memory.activation_bytes(layer, NOT) == 115712 + 16384
    assert _terms(memory, layer)["mlp.silu_output"] == 16384
    # ffAct 0 (recompute SiLU and the product) drops both: 2 · 16384
    assert memory.activation_bytes(layer, SEL, dict(KEEP_ALL, ffAct=0)) == 132096 - 32768
    assert memory.activation_bytes(layer, FULL) == 8192


def test_torchtitan_op_policy_keeps_every_other_matmul_and_the_attention():
    # activation_checkpoint.py _apply_op_sac with llama3 parallelize.py _op_sac_save_list: the block
    # input (64·64·2), wq's output (1st mm, 64·64·2), wv's (3rd, 64·64·2), the SDPA output (64·64·2)
    # and its fp32 log-sum-exp (64·4·4), w1's output (5th, 64·128·2), w2's (7th, 64·64·2);
    # wk, wo and w3 (2nd, 4th, 6th) and every elementwise op are recomputed.
    run = _titan(parallel={"zero": 0}, training={"recompute": {"mode": "selective", "option": "op"}})
    memory, layer = model(run), body(run)
    assert _terms(memory, layer, SEL) == {
        "attention.norm_input": 8192,
        "attention.wq_output": 8192,
        "attention.wv_output": 8192,
        "attention.core_output": 8192,
        "attention.softmax_lse": 1024,
        "mlp.w1_output": 16384,
        "mlp.w2_output": 8192,
    }
    assert memory.activation_bytes(layer, SEL) == 58368


def test_torchtitan_op_policy_saves_the_expert_all_to_alls_where_its_list_holds_them():
    # deepseek_v3 (and llama4, gpt_oss) infra/parallelize.py _op_sac_save_list holds
    # _c10d_functional.all_to_all_single, which torchtitan/distributed/expert_parallel.py's dispatch and
    # combine run (all_to_all_single_autograd); qwen3's list does not. MOE (h 32, 4 experts, top 2) at
    # s 16 over ep 2 (dp 2): this rank's experts receive 16·2 = 32 rows (balanced) and send as many
    # back: 32·32·2 = 2048 each. Qwen3 (GQA with qk norms) keeps neither.
    op = {"mode": "selective", "option": "op"}

    def kept(spec):
        run = make_run(
            spec,
            parallel={"dp": 2, "ep": 2, "zero": 0},
            training={"seq_length": 16, "recompute": op},
            framework="torchtitan",
        )
        return _terms(model(run), body(run), SEL)

    mla = {"q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8}
    deepseek = kept({**MOE, **mla})
    assert deepseek["moe.dispatched_tokens"] == 2048 and deepseek["moe.combined_tokens"] == 2048
    qwen3 = kept({**MOE, "qk_norm": True})
    assert "moe.dispatched_tokens" not in qwen3 and "moe.combined_tokens" not in qwen3


def test_torchtitan_layer_selective_checkpoints_every_nth_block():
    run = _titan(parallel={"zero": 0}, training={"recompute": {"mode": "selective", "option": 2}})
    (peak,) = stage_peaks(model(run), walk(run), [[1]], 80 * 2**30)
    # _apply_layer_sac: blocks 2 and 4 of 4 (counted from 1) checkpointed: 2 · 8192 + 2 · 132096
    assert peak.activation_bytes == 512 + 2 * 8192 + 2 * 132096 + 279040


def test_torchtitan_fsdp_static_memory():
    # FSDP2 over dp 2: fp32 parameters, fp32 gradients, AdamW's two fp32 moments, no master copy:
    # a body layer's 41088 parameters, 20544 a rank, 16 bytes each
    run = _titan(parallel={"dp": 2})
    static = model(run).static_breakdown(body(run))
    assert (static.parameter_bytes, static.gradient_bytes, static.optimizer_bytes) == (20544 * 4, 20544 * 4, 20544 * 8)
    # train.py train_step zero_grads (set to None) before the forward; FSDP2's foreach_reduce forms the
    # sharded gradients in the backward: the forward holds 4 + 8 bytes a parameter, the step 4 + 4 + 8
    assert static.total == 20544 * 12 and static.step_bytes == 20544 * 16
    # gradient accumulation without PP: the later micro-batches' forwards run beside the first's gradients
    accumulated = _titan(parallel={"dp": 2}, training={"micro_batches": 2})
    static = model(accumulated).static_breakdown(body(accumulated))
    assert static.total == 20544 * 16 and static.step_bytes == static.total
    # under PP the stage also holds the gathered bf16 parameters and fp32 gradient accumulators
    # (stage.py backward_maybe_with_nosync, apply_fsdp reshard_after_forward = not pp_enabled): 41088 · 6;
    # perform_reduce_grad forms the sharded gradients after the last micro-batch: 12 bytes, not 16, in flight
    piped = _titan(parallel={"dp": 2, "pp": 2}, training={"micro_batches": 4})
    static = model(piped).static_breakdown(body(piped))
    assert static.total == 20544 * 12 + 41088 * 6
    assert static.step_bytes == 20544 * 16
    # replicate (zero 0): 41088 · 16 on every rank
    assert model(_titan(parallel={"dp": 2, "zero": 0})).static_breakdown(body(run)).total == 41088 * 16


def test_torchtitan_fsdp_backward_holds_gathered_parameters_and_reduce_scatter_inputs():
    # _fsdp_param_group.py: a block U between V (before) and W (after), all 41088 parameters:
    # computing, 2·2·P_U + 2·P_V + 4·P_W = 10·41088; reducing, (2 + 4)·P_U + 2·P_V = 8·41088
    run = _titan(parallel={"dp": 2})
    memory, found = model(run), layers(run)
    assert memory.working_extra_bytes(found["dense"], NOT, None, 2, True) == 32768 + 10 * 41088
    # one stage, the walk's neighbours: the TAIL (65600, after the last block 41088): computing
    # 4·65600 + 2·41088, reducing 6·65600 + 2·41088, its largest gradient the logits', 64·1024·2, less
    # the log-probabilities the loss's backward freed, 64·1024·4: 344704. The last block (V a block,
    # W the TAIL, whose fp32 reduce-scatter input is held): 32768 + 2·2·41088 + 2·41088 + 4·65600 = 541696,
    # but it runs after the TAIL's backward, which freed the TAIL's kept 279040 (norm input and output
    # 64·64·2 each, log-probabilities 64·1024·4, labels 64·8; train.py deletes the logits first): 262656
    assert 131072 + 6 * 65600 + 2 * 41088 - 262144 == 344704
    assert 32768 + 6 * 41088 + 4 * 65600 - 279040 == 262656
    (peak,) = stage_peaks(memory, walk(run), [[1]], 80 * 2**30)
    assert peak.working_bytes == 344704


def test_torchtitan_loss():
    # loss.py cross_entropy_loss: F.cross_entropy(pred.float()): in the backward nll_loss's and
    # log_softmax's fp32 gradients next to the kept log-probabilities, 8 · 64 · 1024; the norm and
    # output unit, not resharded after the forward (apply_fsdp), gathered: 2 · 65600
    run = _titan(parallel={"dp": 2})
    assert model(run).loss_bytes(layers(run)["TAIL"]) == 8 * 64 * 1024 + 2 * 65600
    # under PP the last stage keeps the bf16 logits for the backward (stage.py fwd_cache): + 2 · 64 · 1024
    piped = _titan(parallel={"dp": 2, "pp": 2}, training={"micro_batches": 4})
    assert model(piped).loss_bytes(layers(piped)["TAIL"]) == 10 * 64 * 1024


def test_torchtitan_compiled_blocks_keep_what_the_partitioner_saves():
    # apply_compile (torch.compile(block, fullgraph=True) after the AC wrapper), as measured by the census
    # (tests/test_census_torchtitan.py): Inductor fuses silu(w1(x)) * w3(x), the backward recomputes the
    # SiLU from w1's output: no AC keeps 115712, not + 16384 (64 tokens · 128 · 2)
    compiled = {"torch_compile": True}
    run = _titan(parallel={"zero": 0}, timing=compiled)
    memory, layer = model(run), body(run)
    assert "mlp.silu_output" not in _terms(memory, layer)
    assert memory.activation_bytes(layer, NOT) == 115712
    # per-op AC: w2's output (7th mm, MUST_SAVE) only feeds the residual add, whose backward reads
    # nothing: partitioners.py get_recomputable_banned_nodes drops it, 58368 - 64·64·2 = 50176
    op = {"recompute": {"mode": "selective", "option": "op"}}
    run = _titan(parallel={"zero": 0}, training=op, timing=compiled)
    memory, layer = model(run), body(run)
    assert "mlp.w2_output" not in _terms(memory, layer, SEL)
    assert memory.activation_bytes(layer, SEL) == 58368 - 8192
    assert memory.activation_bytes(layer, FULL) == 8192  # full AC: the block input alone, as eager


def test_torchtitan_compiled_moe_blocks_keep_their_eager_rules():
    # MoE blocks were not measured compiled: their routed experts' SiLU output stays counted
    eager = make_run(MOE, framework="torchtitan", parallel={"zero": 0})
    compiled = make_run(MOE, framework="torchtitan", parallel={"zero": 0}, timing={"torch_compile": True})
    assert _terms(model(compiled), body(compiled)) == _terms(model(eager), body(eager))
    assert "moe.expert.silu_output" in _terms(model(compiled), body(compiled))


def test_torchtitan_compiled_loss():
    # loss.py build_cross_entropy_loss compiles cross_entropy_loss when compile.components holds loss
    # (v0.2.2 default: with the blocks). Inductor's graphs (read on the CPU, tests/test_census_torchtitan.py)
    # save the bf16 logits and two fp32 per-token statistics (max and log-sum-exp): 64·1024·2 = 131072 and
    # 2·64·4 = 512 instead of the fp32 log-probabilities 64·1024·4; the backward allocates the bf16
    # gradient (64·1024·2) and one fp32 a token (64·4); the norm and output unit gathered: 2 · 65600
    run = _titan(parallel={"dp": 2}, timing={"torch_compile": True})
    tail = layers(run)["TAIL"]
    terms = _terms(model(run), tail)
    assert "output.logits_softmax" not in terms
    assert terms["output.logits"] == 131072 and terms["output.loss_statistics"] == 512
    assert model(run).loss_bytes(tail) == 2 * 64 * 1024 + 4 * 64 + 2 * 65600
    # under PP the forward cache's logits are the ones the compiled loss saves: counted once
    piped = _titan(parallel={"dp": 2, "pp": 2}, training={"micro_batches": 4}, timing={"torch_compile": True})
    assert model(piped).loss_bytes(layers(piped)["TAIL"]) == 2 * 64 * 1024 + 4 * 64
    # compile.components = ["model"] (and torchtitan 9dec370's train.py, where the loss compile is commented
    # out): the eager rule, 8 · 64 · 1024 + 2 · 65600
    blocks_only = _titan(parallel={"dp": 2}, timing={"torch_compile": True, "compile_loss": False})
    assert model(blocks_only).loss_bytes(layers(blocks_only)["TAIL"]) == 8 * 64 * 1024 + 2 * 65600
    # under TP the DTensor loss (loss_parallel) keeps its eager rule: 12 · 64 · 512
    tp = _titan(parallel={"tp": 2}, timing={"torch_compile": True})
    assert model(tp).loss_bytes(layers(tp)["TAIL"]) == 12 * 64 * 512


# --- moments and the estimate --------------------------------------------------------------------------


def test_the_loss_moment_sets_the_last_stage_when_the_vocabulary_is_large():
    # torchtitan, replicate, pp 1, a 32k vocabulary at s 64: the loss adds 8 · 64 · 32768 = 16 MiB on top
    # of what is kept; the output layer's backward holds the logits' gradient, 2 · 64 · 32768, after the
    # loss's backward freed the log-probabilities, 4 · 64 · 32768: below what is kept. A block's largest
    # gradient, 32768, forms after the TAIL's backward freed the log-probabilities: below what is kept too.
    run = make_run({**DENSE, "vocab_size": 32768}, framework="torchtitan", parallel={"zero": 0})
    (peak,) = stage_peaks(model(run), walk(run), [[1]], 80 * 2**30)
    assert peak.loss_bytes == 8 * 64 * 32768
    assert peak.working_bytes == 0
    assert peak.moment == "loss"
    assert peak.peak_bytes == peak.kept_bytes + 16 * MB
    assert peak.moments["optimizer"] == peak.static_bytes


def test_the_estimate_says_the_moment_and_the_peak_at_full():
    run = make_run(DENSE, parallel={"pp": 2}, training={"micro_batches": 4, "recompute": {"ffAct": 0}})
    data = estimate(run).to_json()
    # the last stage: the loss's backward holds the fp32 softmax (as the gradient) and its 16-bit cast,
    # + 64·1024·2 on what is kept; the blocks' backwards run after the TAIL's freed its 279040
    assert [stage["moment"] for stage in data["stages"]] == ["backward", "loss"]
    assert set(data["stages"][1]["moments"]) == {"backward", "loss", "optimizer"}
    assert "loss" not in data["stages"][0]["moments"]
    assert data["run"]["framework"] == "megatron"
    full = data["stages_at_full"]
    # at full every body layer keeps its input: stage 0 holds 2 in flight of HEAD 512 + 2 · 8192
    assert full[0]["activation_bytes"] == 2 * (512 + 2 * 8192)
    assert all(f["peak_bytes"] <= s["peak_bytes"] for f, s in zip(full, data["stages"], strict=True))
    assert math.isclose(full[0]["moments"]["backward"], full[0]["peak_bytes"])


# --- FP8 caches (DeepSeek-V3 Technical Report §3.3.3) ---------------------------------------------------


def test_fp8_caches_of_linear_inputs():
    # DENSE at s 64: the linear inputs are the normed inputs of attention and MLP, the attention output
    # and the SwiGLU output (64·64, 64·64, 64·64 and 64·128 elements), 2 bytes each in bf16; in FP8 with
    # a 4-byte scale per 128: 1.03125 bytes. 115712 − 2·(3·4096 + 8192) + 1.03125·(3·4096 + 8192)
    run = make_run(DENSE, training={"fp8_cache": "linear"})
    memory, layer = model(run), body(run)
    assert memory.activation_bytes(layer, NOT) == 115712 - 2 * 20480 + 1.03125 * 20480
    # deepseek: the attention output in E5M6 (12 bits: 1.5 bytes); the dense SwiGLU input stays bf16
    deepseek = make_run(DENSE, training={"fp8_cache": "deepseek"})
    assert model(deepseek).activation_bytes(body(deepseek), NOT) == 115712 - 2 * 20480 + 1.03125 * 16384 + 1.5 * 4096


def test_fp8_caches_of_the_experts():
    # MOE at ep 2, s 16: the 32 routed rows' inputs (32·32 elements: half kept here, half a buffer) are
    # dispatched in FP8; deepseek also caches the experts' SwiGLU input (32·2·16) in FP8. The router's
    # input (the MoE norm's output, 16·32) stays bf16.
    spec = {**MOE}
    plain = make_run(spec, parallel={"dp": 2, "ep": 2}, training={"seq_length": 16})
    fp8 = make_run(spec, parallel={"dp": 2, "ep": 2}, training={"seq_length": 16, "fp8_cache": "deepseek"})
    before, after = _terms(model(plain), body(plain, "moe")), _terms(model(fp8), body(fp8, "moe"))
    assert after["moe.dispatched_tokens"] == 512 * 1.03125 and before["moe.dispatched_tokens"] == 512 * 2
    assert after["moe.expert.gate_up_output"] == 1024 * 1.03125
    assert after["moe.norm_output"] == before["moe.norm_output"] == 16 * 32 * 2
    assert model(fp8).buffers(body(fp8, "moe"), NOT).kept_bytes() == 512 * 1.03125


# --- GEMM workspaces (ppb_core/memory/frameworks/workspaces.py) ---------------------------------


def test_gemm_workspaces_by_compute_capability():
    # PyTorch CublasHandlePool.cpp parseChosenWorkspaceSize: 4096 KiB · 8 = 33554432 on 9.x/10.x/12.x,
    # 4096 KiB · 2 + 16 KiB · 8 = 8388608 + 131072 = 8519680 before; TE gemm.py
    # get_cublas_workspace_size_bytes: 32 MiB + 1 KiB = 33555456 on 9.0 and later, 4194304 before.
    assert torch_cublas_workspace_bytes(9.0) == 33554432
    assert torch_cublas_workspace_bytes(10.0) == 33554432
    assert torch_cublas_workspace_bytes(8.0) == 8519680
    assert transformer_engine_workspace_bytes(9.0) == 33555456
    assert transformer_engine_workspace_bytes(8.0) == 4194304
    # training: the forward thread's handle and autograd's device thread's handle
    assert torch_training_workspace_bytes(8.0) == 2 * 8519680
    assert torch_training_workspace_bytes(0.0) == 0


def test_cublas_workspace_config_sets_pytorch_s_workspace():
    # CublasHandlePool.cpp parseChosenWorkspaceSize: CUBLAS_WORKSPACE_CONFIG's ":SIZE:COUNT" pairs sum
    # SIZE KiB × COUNT whatever the device. Megatron's CI sets :4096:8: on an A100 (8.0) each of the
    # two handles holds 4096·1024·8 = 33554432, not the default 8519680: with TE's 4194304,
    # 2·33554432 + 4194304 = 71303168 a stage; ":4096:2:16:8" is the pre-Hopper default again. (Each
    # with the chunk's cached rotary frequencies, 64 · 16 · 4 = 4096, and TE's dummy wgrads, DUMMIES_TAIL.)
    cases = ((":4096:8", 71303168 + 4096), (":4096:2:16:8", 2 * 8519680 + 4194304 + 4096))
    for config, expected in ((config, expected + DUMMIES_TAIL) for config, expected in cases):
        memory = {"cublas_workspace_config": config}
        run = make_run(DENSE, framework="megatron", device={"name": "a100-80gb"}, memory=memory)
        assert run_workspace_bytes(run, model(run)) == expected
    assert torch_training_workspace_bytes(8.0, 33554432) == 2 * 33554432


def test_every_stage_holds_the_workspaces_once():
    # DENSE on 2 stages. Megatron on an A100 (8.0): 2·8519680 + 4194304 = 21233664 a stage, and TE's dummy
    # wgrads (test_memory_model.py DUMMIES_*: the body stage's shapes, the TAIL's stage's with the output layer);
    # torchtitan on an H100 (9.0): 2·33554432 = 67108864; MindFormers (SAPP's payload): none.
    cases = (
        ("megatron", "a100-80gb", 21233664, (DUMMIES_BODY, DUMMIES_TAIL)),
        ("torchtitan", "h100-80gb", 67108864, (0, 0)),
        ("mindformers", "h100-80gb", 0, (0, 0)),
    )
    for framework, device, expected, dummies in cases:
        # one micro-batch on 2 stages: torch's Schedule1F1B refuses it, torchtitan's GPipe runs it
        schedule = {"schedule": "gpipe"} if framework == "torchtitan" else {}
        run = make_run(DENSE, parallel={"pp": 2, "zero": 0, **schedule}, framework=framework, device={"name": device})
        memory = model(run)
        kinds = {layer.kind for layer in walk(run)}
        assert memory.rules.workspace_bytes(memory.setup, kinds) == expected + dummies[1]
        bare = sum(memory.static_bytes(layer) for layer in walk(run))
        peaks = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=80 * 2**30)
        assert sum(peak.static_bytes for peak in peaks) == bare + 2 * expected + sum(dummies)
        assert all(peak.step_static_bytes >= expected for peak in peaks)


def test_megatron_workspaces_follow_the_stage_layers():
    # MOE (2 MoE layers, hidden 32, vocabulary 1024) on 2 stages under Megatron, generic device
    # (compute capability 9.0): each stage runs routed experts, so TE's grouped GEMM adds
    # TE_COMPUTE_STREAMS = 4 workspaces of 33555456: 2·33554432 + 5·33555456 = 234886144. And TE's dummy wgrads
    # (frameworks/dummy_wgrad.py), bf16: QKV (4 + 2·4 heads of 8 = 96) × 32 = 3072, the projection 32 × 32 = 1024,
    # the experts' fc1 (2·16) × 32 (the projection's shape: one) and fc2 32 × 16 = 512: 4608 elements, 9216 bytes
    # on stage 0; stage 1 also the output layer's 1024 × 32 = 32768: 74752 bytes.
    moe_dummies = [9216, 74752]
    run = make_run(MOE, parallel={"pp": 2, "zero": 0}, framework="megatron")
    memory = model(run)
    peaks = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=80 * 2**30)
    bare = [sum(memory.static_bytes(layer) for layer in walk(run) if layer.stage == stage) for stage in (0, 1)]
    assert [peak.static_bytes - own for peak, own in zip(peaks, bare, strict=True)] == [
        234886144 + d for d in moe_dummies
    ]
    # without --moe-grouped-gemm the experts are a SequentialMLP of TE linears (transformer_engine_spec_provider.py
    # `grouped_mlp_modules`): no grouped-GEMM workspaces, 2·33554432 + 33555456 = 100664320
    run = make_run(MOE, parallel={"pp": 2, "zero": 0}, training={"moe": {"grouped_gemm": False}}, framework="megatron")
    memory = model(run)
    peaks = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=80 * 2**30)
    assert [peak.static_bytes - own for peak, own in zip(peaks, bare, strict=True)] == [
        100664320 + d for d in moe_dummies
    ]
    # under --transformer-impl local the layers run no TE GEMM, but the router's RouterGatingLinearFunction
    # (moe/moe_utils.py) runs te_general_gemm on TE's get_workspace(): PyTorch's two + TE's one, 100664320
    run = make_run(MOE, parallel={"pp": 2, "zero": 0}, timing={"transformer_impl": "local"}, framework="megatron")
    memory = model(run)
    peaks = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=80 * 2**30)
    assert [peak.static_bytes - own for peak, own in zip(peaks, bare, strict=True)] == [
        100664320 + d for d in moe_dummies
    ]
    # DENSE at tp 2 with sequence parallelism, s 64, b 1: the output layer's all-gathered input
    # stays in Megatron's global "mpu" buffer on the TAIL's stage only: 64 tokens · h 64 · 2 bytes
    # = 8192 beyond the 100664320 of GEMM workspaces (2·33554432 + 33555456). TE's dummy wgrads at tp 2: QKV
    # (2 + 2·2 heads of 16 = 96) × 64 = 6144, the projection 64 × 32 = 2048, fc1 128 × 64 = 8192, fc2 64 × 64 =
    # 4096: 40960 bytes; with the output layer's 512 × 64 = 32768 elements, 106496 on stage 1.
    run = make_run(DENSE, parallel={"pp": 2, "tp": 2, "sequence_parallel": True, "zero": 0}, framework="megatron")
    memory = model(run)
    peaks = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=80 * 2**30)
    bare = [sum(memory.static_bytes(layer) for layer in walk(run) if layer.stage == stage) for stage in (0, 1)]
    assert [peak.static_bytes - own for peak, own in zip(peaks, bare, strict=True)] == [
        100664320 + 40960,
        100664320 + 8192 + 106496,
    ]
    # the balancer charges every stage the most any stage could hold: the TAIL's stage's, with a chunk's
    # cached rotary frequencies 64 · 16 · 4 = 4096
    assert run_workspace_bytes(run, memory) == 100664320 + 8192 + 4096 + 106496


def test_megatron_userbuffers_gemms_keep_their_own_workspaces():
    # --tp-comm-overlap (timing.overlap.tp above 0, sequence parallelism): TE's userbuffers GEMMs take
    # get_cublas_workspace(device, True, False), _NUM_MAX_UB_STREAMS = 3 workspaces of 32 MiB + 1 KiB
    # (cpp_extensions/gemm.py, d0067d0d): 3·33555456 = 100666368 more on each stage with decoder layers
    parallel = {"pp": 2, "tp": 2, "sequence_parallel": True, "zero": 0}
    plain = make_run(DENSE, parallel=parallel, framework="megatron")
    ub = make_run(DENSE, parallel=parallel, framework="megatron", timing={"overlap": {"tp": 1.0}})
    peaks = [stage_peaks(model(run), walk(run), [[2, 1]], device_bytes=80 * 2**30) for run in (plain, ub)]
    assert [b.static_bytes - a.static_bytes for a, b in zip(*peaks, strict=True)] == [100666368, 100666368]
    # without sequence parallelism Megatron-LM refuses --tp-comm-overlap (arguments.py validate_args, d98e8a64)
    no_sp = {**parallel, "sequence_parallel": False}
    with pytest.raises(InputError, match=r"timing\.overlap\.tp: is Megatron.s --tp-comm-overlap, which needs"):
        make_run(DENSE, parallel=no_sp, framework="megatron", timing={"overlap": {"tp": 1.0}})


def test_megatron_chunk_keeps_its_cached_rotary_frequencies():
    # gpt_model.py GPTModel builds one RotaryEmbedding (rope, no MLA) whose lru-cached forward keeps
    # the fp32 frequencies [s/cp, 1, 1, d] (rotary_pos_embedding.py): DENSE, head 16, s 64: 64·16·4
    # = 4096 a chunk, held with micro-batches in flight or not; cp 2: this rank's 32 rows, 2048
    run = make_run(DENSE)
    memory = model(run)
    kinds = {layer.kind for layer in walk(run)}
    assert [memory.rules.pipeline_buffer_bytes(memory.setup, kinds, 4, count) for count in (0, 1)] == [4096] * 2
    run = make_run(DENSE, parallel={"cp": 2})
    memory = model(run)
    assert memory.rules.pipeline_buffer_bytes(memory.setup, {layer.kind for layer in walk(run)}, 4, 1) == 2048
    # learned positions hold none; MLA layers hold their own YaRN tables instead (above)
    for spec in ({**DENSE, "position_embedding": "learned", "max_position_embeddings": 64}, MLA):
        run = make_run(spec)
        memory = model(run)
        assert memory.rules.pipeline_buffer_bytes(memory.setup, {layer.kind for layer in walk(run)}, 4, 1) == 0


def test_megatron_local_implementation_keeps_the_attention_score_buffer():
    # --transformer-impl local: Megatron's own DotProductAttention takes the baddbmm input
    # [b·heads/t, s, s] from the global "mpu" buffer (dot_product_attention.py), which keeps the largest
    # request (utils.py GlobalMemoryBuffer.get_tensor); no Transformer Engine GEMM runs, so no TE
    # workspace. DENSE (4 heads), s 64, b 1, unfused attention, one stage on an H100:
    # 2·33554432 + 1·4·64·64·2 = 67108864 + 32768 (each run here with its chunk's cached rotary
    # frequencies, s · 16 · 4: 4096 at s 64, and TE's dummy wgrads, which Megatron's own linears take too:
    # DUMMIES_TAIL at tp 1, 106496 at tp 2, test_megatron_workspaces_follow_the_stage_layers)
    local = {"transformer_impl": "local"}
    run = make_run(DENSE, training={"flash_attention": False}, timing=local)
    memory = model(run)
    assert run_workspace_bytes(run, memory) == 67108864 + 32768 + 4096 + DUMMIES_TAIL
    # Transformer Engine's unfused attention allocates its scores fresh: its workspace, no buffer
    run = make_run(DENSE, training={"flash_attention": False})
    assert run_workspace_bytes(run, model(run)) == 67108864 + 33555456 + 4096 + DUMMIES_TAIL
    # tp 2 with SP, b 2: the gathered inputs, 128 tokens · 64 · 2 = 16384, against the scores
    # 2 · 2 heads · 64 · 64 · 2 = 32768: the buffer holds the larger
    sp = {"tp": 2, "sequence_parallel": True, "dp": 2}
    run = make_run(DENSE, parallel=sp, training={"flash_attention": False, "micro_batch_size": 2}, timing=local)
    assert run_workspace_bytes(run, model(run)) == 67108864 + 32768 + 4096 + 106496
    # with s 32 the scores, 2 · 2 · 32 · 32 · 2 = 8192, are smaller than the gathered inputs 64 · 64 · 2
    training = {"flash_attention": False, "micro_batch_size": 2, "seq_length": 32}
    run = make_run(DENSE, parallel=sp, training=training, timing=local)
    assert run_workspace_bytes(run, model(run)) == 67108864 + 8192 + 32 * 16 * 4 + 106496


def test_megatron_chunk_keeps_its_last_received_input_and_its_gradient():
    # schedules.py forward_step: set_input_tensor(input_tensor) stores the received activation on the
    # chunk's TransformerBlock.input_tensor (transformer_block.py) until the next micro-batch's; and
    # backward_step's retain_grad() leaves its .grad on it. DENSE on 2 stages, s 64, b 1, h 64: the
    # boundary tensor is 64 · 64 · 2 = 8192. Stage 0 holds the HEAD (its first chunk receives nothing);
    # stage 1 with nothing in flight holds the input and its gradient, 2 · 8192 = 16384. Each chunk
    # also holds its cached rotary frequencies at every moment (rope_cache_bytes), 64 · 16 · 4 = 4096.
    run = make_run(DENSE, parallel={"pp": 2, "zero": 0}, training={"micro_batches": 4}, framework="megatron")
    memory = model(run)
    # in flight 2 and 1: stage 1's stored input is its in-flight one, kept by its first layer
    busy = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=80 * 2**30)
    assert [peak.buffer_bytes for peak in busy] == [4096, 4096]
    # ... and at the optimizer step (nothing in flight) stage 1 holds 16384 beyond its static memory
    assert [peak.step_static_bytes - peak.static_bytes for peak in busy] == [4096, 16384 + 4096]
    # a moment at which stage 1 has none in flight holds them too
    idle = stage_peaks(memory, walk(run), [[2, 0]], device_bytes=80 * 2**30)
    assert [peak.buffer_bytes for peak in idle] == [4096, 16384 + 4096]
    # SAPP (mindformers) counts none
    seed = make_run(DENSE, parallel={"pp": 2, "zero": 0}, training={"micro_batches": 4}, framework="mindformers")
    plain = stage_peaks(model(seed), walk(seed), [[2, 0]], device_bytes=80 * 2**30)
    assert [peak.step_static_bytes - peak.static_bytes for peak in plain] == [0, 0]


def test_torchtitan_loss_under_tensor_parallelism():
    # TP 2 turns loss_parallel on (torchtitan/train.py): per rank 64 tokens · 1024/2 = 32768 logits;
    # beyond the kept log-probabilities the fused nll/log-softmax backward of torch/distributed/tensor/
    # parallel/loss.py holds zeros, their sum with exp(x) and the product: 12 · 32768 = 393216; the
    # norm and output unit gathered over dp: (64 + 512·64) · 2 = 65664
    run = _titan(parallel={"dp": 2, "tp": 2, "sequence_parallel": True})
    assert model(run).loss_bytes(layers(run)["TAIL"]) == 12 * 32768 + 65664


def test_torchtitan_pipeline_receive_buffers():
    # DENSE on 2 stages, 4 micro-batches, in flight 2 and 1; the boundary tensor 64 tokens · 64 · 2 = 8192
    # (pipelining/stage.py: one receive buffer per micro-batch, kept). Stage 0 (the HEAD's, not the
    # last) holds 4 output-gradient buffers and the outputs of its 2 micro-batches in flight in fwd_cache
    # (forward_one_chunk, torch 2.13): 6 · 8192 = 49152; stage 1 (the TAIL's, not the first) 4 activation
    # buffers, 1 of them the in-flight input its first layer keeps already: 3 · 8192 = 24576.
    run = _titan(parallel={"pp": 2, "zero": 0}, training={"micro_batches": 4})
    memory = model(run)
    titan = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=80 * 2**30)
    plain = stage_peaks(
        model(make_run(DENSE, parallel={"pp": 2, "zero": 0}, training={"micro_batches": 4}, framework="mindformers")),
        walk(run),
        [[2, 1]],
        device_bytes=80 * 2**30,
    )
    assert [peak.buffer_bytes for peak in titan] == [49152, 24576]
    assert [peak.buffer_bytes for peak in plain] == [0, 0]
    # at the optimizer step nothing is in flight and every buffer is held: stage 0 its 4 gradient
    # buffers (32768), stage 1 its 4 activation buffers (32768), beyond its static memory
    assert [peak.step_static_bytes - peak.static_bytes for peak in titan] == [32768, 32768]
    # the balancer's charge: a chunk taken as neither first nor last, at the schedule's vector that asks
    # the most: with c in flight, (4 − c) · 8192 in, 4 · 8192 back and c outputs: 8 · 8192, + GEMM workspaces
    assert run_workspace_bytes(run, memory) == 8 * 8192 + 2 * 33554432
    # PyTorch 2.6 (before pytorch#153383) keeps every stage's 4 outputs in output_chunks to the next step:
    # stage 0 4 · 8192 more than its gradient buffers; and before 2.10's step(return_outputs=False) the last
    # stage every micro-batch's logits, 64 · 1024 · 2 = 131072 each, 3 beside the one in flight (4 at the step)
    old = run.model_copy(update={"framework_release": FrameworkRelease(pytorch="2.6")})
    peaks = stage_peaks(model(old), walk(old), [[2, 1]], device_bytes=80 * 2**30)
    assert [peak.buffer_bytes for peak in peaks] == [8 * 8192, 3 * 8192 + 3 * 131072]
    assert [peak.step_static_bytes - peak.static_bytes for peak in peaks] == [8 * 8192, 4 * 8192 + 4 * 131072]
    # PyTorch 2.8 keeps output chunks on the last stage only
    mid = run.model_copy(update={"framework_release": FrameworkRelease(pytorch="2.8")})
    peaks = stage_peaks(model(mid), walk(mid), [[2, 1]], device_bytes=80 * 2**30)
    assert [peak.buffer_bytes for peak in peaks] == [49152, 3 * 8192 + 3 * 131072]
    # PyTorch 2.13 under torchtitan 9dec370 (2024-12-26), which does not pass return_outputs=False: the same
    late = run.model_copy(update={"framework_release": FrameworkRelease(torchtitan="2024-12-26")})
    peaks = stage_peaks(model(late), walk(late), [[2, 1]], device_bytes=80 * 2**30)
    assert [peak.buffer_bytes for peak in peaks] == [49152, 3 * 8192 + 3 * 131072]


# --- the gradient reduction ----------------------------------------------------------------------------


def test_torchtitan_reduction_under_pp_unit_by_unit():
    # torch 2.13 pipelining/stage.py perform_reduce_grad → _fsdp_param_group.py post_backward per unit in
    # named_modules() pre-order (the forward order): unit i resharded (−bc·P_i), its fp32 reduce-scatter
    # input allocated (+4·P_i, _fsdp_collectives.py foreach_reduce) while its accumulator is still held;
    # units before it already freed (bc + 4)·P_j each; the step's static memory holds every unit's sharded
    # fp32 gradients (dp 2: 4·P/2), of which units after i have none yet (their reduce-scatters not run).
    # DENSE, pp 2, dp 2 (FSDP), bc = 2:
    # stage 0 = HEAD 65536, BODY 41088, BODY 41088 (sharded gradients 131072, 82176, 82176):
    #   i = 1: 6·(65536 + 2·41088) + 2·65536 − 2·82176 = 886272 + 131072 − 164352 = 852992
    #   i = 2: 6·(2·41088) + 2·41088 − 82176 = 493056;  i = 3: 6·41088 + 2·41088 = 328704  → 852992
    # stage 1 = BODY 41088, BODY 41088, TAIL 65600 (norm 64 + output 65536; sharded 82176, 82176, 131200):
    #   i = 1: 6·(2·41088 + 65600) + 2·41088 − 82176 − 131200 = 886656 + 82176 − 213376 = 755456
    #   i = 2: 6·(41088 + 65600) + 2·41088 − 131200 = 591104;  i = 3: 6·65600 + 2·65600 = 524800  → 755456
    run = _titan(parallel={"dp": 2, "pp": 2}, training={"micro_batches": 4})
    peaks = stage_peaks(model(run), walk(run), [[2, 1]], 80 * 2**30)
    assert [p.reduction_bytes for p in peaks] == [852992, 755456]
    for peak in peaks:
        step = peak.step_static_bytes
        assert peak.moments["reduction"] == step + peak.reduction_bytes
        # at bf16 the backward holds the same accumulators and gathered parameters (static under PP)
        # + a working set of at least bc·P of its largest unit: the reduction stays under it here
        assert peak.moments["reduction"] < peak.moments["backward"]
    # the estimate names the moment in --json; without PP the reduce-scatters are in the backward
    data = estimate(run).to_json()["stages"]
    assert [s["moments"]["reduction"] for s in data] == [p.moments["reduction"] for p in peaks]
    assert [s["reduction_bytes"] for s in data] == [852992, 755456]
    # and back from the stage table (a nullable column: <NA> where there is no such moment)
    assert stages_from_frame(stages_to_frame(estimate(run))) == tuple(estimate(run).stages)
    flat = _titan(parallel={"dp": 2})
    (alone,) = stage_peaks(model(flat), walk(flat), [[1]], 80 * 2**30)
    assert alone.reduction_bytes is None and "reduction" not in alone.moments


def test_the_reduction_sets_the_peak_where_it_holds_the_most():
    # A stage with nothing kept beyond its static memory: the reduction's 852992 bytes above the
    # step's static memory exceed what the backward adds (here forced to 0), so it names the moment.
    run = _titan(parallel={"dp": 2, "pp": 2}, training={"micro_batches": 4})
    first = stage_peaks(model(run), walk(run), [[2, 1]], 80 * 2**30)[0]
    idle = dataclasses.replace(first, activation_bytes=0.0, buffer_bytes=0.0, working_bytes=0.0)
    # backward = static (the held 886272 included) + 0; reduction = step + 852992, and
    # step = static − 886272 + 32768 (stage 0's 4 gradient receive buffers, test above) + 295424 (the
    # sharded fp32 gradients perform_reduce_grad forms: the embedding's 32768 and two blocks' 2·20544 a rank, ·4)
    assert idle.moments["backward"] == first.static_bytes
    assert idle.moments["reduction"] == first.static_bytes - 886272 + 32768 + 295424 + 852992
    assert idle.moment == "reduction"
    assert idle.terms() == {
        "static": idle.step_static_bytes + 852992,
        "activations": 0.0,
        "buffers": 0.0,
        "working": 0.0,
    }


def test_megatron_and_mindformers_have_no_reduction_moment():
    # Megatron: start_grad_sync reduce-scatters into local_data_view, a shard view of the same grad_data
    # (param_and_grad_buffer.py): 0 bytes added, so the reduction is the optimizer step's memory (or,
    # overlapped, the backward's). SAPP counts buckets in each layer's backward.
    for framework in ("megatron", "mindformers"):
        run = make_run(DENSE, parallel={"pp": 2, "dp": 2}, training={"micro_batches": 4}, framework=framework)
        peaks = stage_peaks(model(run), walk(run), [[2, 1]], 80 * 2**30)
        assert all(p.reduction_bytes is None and "reduction" not in p.moments for p in peaks)
