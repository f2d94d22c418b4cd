"""Megatron-Core's fine-grained activation offloading (`training.offload_modules`) and Transformer Engine's
unfused attention backward, worked out by hand on test_memory_runs' small shapes (bf16: bc = 2), with
the Megatron-LM d98e8a64 / Transformer Engine d0067d0d source each follows
(ppb_core/memory/frameworks/offload.py)."""

from __future__ import annotations

import pytest
from test_memory_activations import MLA, MOE
from test_memory_runs import DENSE, body, make_run, model

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.errors import InputError
from ppb_core.memory.model import run_stage_peaks
from ppb_core.model.switches import LayerType

NOT = LayerType.NOT_REC_LAYER
ATTENTION = ["qkv_linear", "core_attn", "attn_proj"]


def _offload(spec, modules, size=0, **training):
    return make_run(spec, training={"offload_modules": modules, "min_offloaded_tensor_size": size, **training})


def test_attention_groups_move_what_each_saves():
    # DENSE at s 64 (tp 1, flash): the Transformer Engine spec fuses the input norm into the QKV linear
    # (get_gpt_layer_with_transformer_engine_submodules), so `qkv_linear` holds its input and output,
    # 64·64·2 = 8192 bytes each; `core_attn` the query, key and value (64·4·16·2 = 8192 each) and the
    # softmax statistics (64·4·4 = 1024); `attn_proj` the core's output (8192). 16384 + 25600 + 8192 = 50176.
    run = _offload(DENSE, ATTENTION)
    memory, layer = model(run), body(run)
    held = memory.state_memory(layer, NOT)
    assert held.offloaded_bytes == 50176
    mlp = {"mlp.norm_input", "mlp.norm_output", "mlp.gate_up_output", "mlp.activation_output"}
    assert {t.op for t in held.terms} == mlp
    # the MLP stays: 8192 + 8192 + 64·256·2 + 64·128·2 = 65536
    assert held.activation_bytes == 65536
    # attn_norm and mlp_norm have no group on a dense layer: its norms are IdentityOp (transformer_layer.py
    # `_set_offload_modules`), fused into the linears
    assert model(_offload(DENSE, ["attn_norm", "mlp_norm"])).state_memory(body(run), NOT).offloaded_bytes == 0


def test_tensors_under_the_minimum_size_stay():
    # tensor_need_offloading_checker: numel() < --min-offloaded-tensor-size stays. At 1024 elements the
    # statistics (64·4 = 256 elements, 1024 bytes) stay, the rest (4096 elements each) moves: 50176 − 1024.
    run = _offload(DENSE, ATTENTION, size=1024)
    assert model(run).state_memory(body(run), NOT).offloaded_bytes == 49152


def test_expert_groups_move_the_first_gemm_input_and_the_activation_input():
    # MOE at s 16 (h 32, 4 experts top 2, expert width 16, ep 1): 32 routed rows. `mlp_norm` the MoE
    # layer's own pre-MLP norm's input, 16·32·2 = 1024; `expert_fc1` linear_fc1's input, 32·32·2 = 2048;
    # `moe_act` the SwiGLU's input 32·2·16·2 = 2048 and the probabilities 32·2 = 64 (below 1024
    # elements with the default minimum, so a minimum of 0 here). The activation's output, linear_fc2's
    # input, is saved after moe_act's group closes (experts.py TEGroupedMLP.forward): it stays.
    run = _offload(MOE, ["mlp_norm", "expert_fc1", "moe_act"], seq_length=16)
    held = model(run).state_memory(body(run, "moe"), NOT)
    assert held.offloaded_bytes == 1024 + 2048 + 2048 + 64
    assert "moe.expert.activation_output" in {t.op for t in held.terms}


def test_a_stage_holds_one_layer_s_groups_while_micro_batches_are_in_flight():
    # One stage of DENSE's 4 layers, one micro-batch: each layer moves 50176 bytes (above), and the stage
    # holds one layer's groups (the offload margin and the reload window), so the backward moment is
    # 3 · 50176 lower than without offloading; the optimizer step holds none of it.
    plain, offloaded = make_run(DENSE), _offload(DENSE, ATTENTION)
    (before,), (after,) = run_stage_peaks(plain), run_stage_peaks(offloaded)
    assert before.moments["backward"] - after.moments["backward"] == pytest.approx(3 * 50176)
    assert before.moments["optimizer"] == after.moments["optimizer"]


def test_the_unfused_softmax_saved_twice_is_copied_and_reloaded_twice():
    # TE UnfusedDotProductAttention: the fused softmax saves its output and the second bmm saves it again
    # (dropout 0 makes no copy); bulk_offload_group copies tag by tag, so the group moves it twice and
    # its backward reloads two device copies. DENSE at s 64, unfused, core_attn: q, k, v 64·4·16·2 = 8192
    # each, the probabilities 4·64·64·2 = 32768 twice: 24576 + 65536 = 90112.
    run = _offload(DENSE, ["core_attn"], flash_attention=False)
    assert model(run).state_memory(body(run), NOT).offloaded_bytes == 90112
    # arguments.py validate_args: offloading is the transformer_engine implementation's only
    with pytest.raises(InputError, match="transformer_engine"):
        make_run(DENSE, training={"offload_modules": ["core_attn"]}, timing={"transformer_impl": "local"})


@pytest.mark.parametrize(
    ("modules", "recompute", "problem"),
    [
        (["attn_proj"], {}, "attn_proj needs core_attn"),
        (["expert_fc1"], {"granularity": "selective", "modules": ["moe"]}, "cannot be offloaded while moe"),
    ],
)
def test_megatron_s_offload_assertions(modules, recompute, problem):
    # transformer_config.py TransformerConfig.__post_init__ raises on both
    with pytest.raises(InputError, match=problem):
        make_run(MOE, training={"offload_modules": modules, "recompute": recompute})


def test_offloading_is_megatron_s():
    with pytest.raises(InputError, match="set framework megatron"):
        make_run(DENSE, training={"offload_modules": ["core_attn"]}, framework="torchtitan")


BASE = "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 --bf16"


def test_the_importer_reads_the_offload_flags():
    flags = "--fine-grained-activation-offloading --offload-modules core_attn attn_proj fused_group_mlp"
    imported = import_megatron(f"{BASE} {flags} --min-offloaded-tensor-size 4096", 8, "h100-80gb")
    assert imported.raw["training"]["offload_modules"] == ["core_attn", "attn_proj"]
    assert imported.raw["training"]["min_offloaded_tensor_size"] == 4096
    assert [note.split(":")[0] for note in imported.notes] == ["--offload-modules fused_group_mlp"]
    # the module list without the switch offloads nothing (TransformerConfig reads both)
    alone = import_megatron(f"{BASE} --offload-modules core_attn", 8, "h100-80gb")
    assert "offload_modules" not in alone.raw["training"]
    switch = f"{BASE} --fine-grained-activation-offloading"
    with pytest.raises(InputError, match="--offload-modules"):
        import_megatron(switch, 8, "h100-80gb")
    with pytest.raises(InputError, match="--offload-modules"):  # Megatron-Core's attn_proj check, said by flag
        run_config_of(import_megatron(f"{switch} --offload-modules attn_proj", 8, "h100-80gb"), "x")


def test_attn_norm_is_mla_s_own_norm_and_not_under_attention_graphs():
    # transformer_layer.py _set_offload_modules: attn_norm offloads the input norm's input where the norm
    # is its own module (MLA: 64 tokens · h 64 · 2 = 8192 bytes), and not with `attn` graphed
    run = _offload(MLA, ["attn_norm"])
    assert model(run).state_memory(body(run), NOT).offloaded_bytes == 8192
    graphs = {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn"]}
    graphed = make_run(MLA, training={"offload_modules": ["attn_norm"], "min_offloaded_tensor_size": 0}, timing=graphs)
    assert model(graphed).state_memory(body(graphed), NOT).offloaded_bytes == 0


def test_the_forward_holds_one_group_until_its_commit():
    # bulk_offload_group drops a group's device tensors at its commit, so a layer's forward holds one
    # group's at a time beyond what it keeps. DENSE at s 64 with the attention groups (flash): qkv_linear
    # 16384, core_attn q, k, v 3 · 8192 + statistics 1024 = 25600, attn_proj 8192: the most 25600.
    flash = _offload(DENSE, ATTENTION)
    assert model(flash).state_memory(body(flash), NOT).offload_forward_bytes == 25600
    # unfused (TE UnfusedDotProductAttention, d0067d0d): core_attn holds q, k, v 24576, the softmax's output
    # once (its two saved references are one tensor until the copies) 32768, and the scores it was made
    # from, `matmul_result` [4 heads, 64, 64] bf16 = 32768, alive until the softmax returns: 90112
    unfused = _offload(DENSE, ["core_attn"], flash_attention=False)
    assert model(unfused).state_memory(body(unfused), NOT).offload_forward_bytes == 24576 + 32768 + 32768
    # nothing offloaded: nothing held for it
    assert model(make_run(DENSE)).state_memory(body(flash), NOT).offload_forward_bytes == 0
