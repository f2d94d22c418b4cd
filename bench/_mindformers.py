"""MindFormers' published training throughputs on Ascend 910B as run configs for bench/public_runs.py:
its Llama 3.1 8B fine-tuning row (below), and the model cards' rows at v1.4.0-beta2 (`CARD_ROWS`, after).

Source: mindspore-lab/mindformers research/llama3_1/README.md (the table "以下模型性能均由Atlas 900 A2
PoDc硬件环境下测试得出", added at 5175aff94, 2024-12-12, unchanged since): llama3_1_8b, Finetune,
alpaca, sequence 8192, 2703 tokens/s/p; its config research/llama3_1/llama3_1_8b/
finetune_llama3_1_8b.yaml at the same commit: data_parallel 8, model_parallel 1, pipeline_stage 1
("default parallel of device num = 8"), runner_config.batch_size 1, micro_batch_num 1, full
recompute (`recompute: True`), flash attention, the parallel optimizer (optimizer states sharded over
the data-parallel ranks), bf16 compute over fp16 weights (`param_init_type: "float16"`), Llama 3.1 8B's
shape. The global batch is
mindformers/trainer/base_trainer.py `_check_global_batch_size_for_auto_parallel` at that commit
(semi-auto parallel, full_batch, one stage): batch_size · data_parallel · micro_batch_interleave_num ·
gradient_accumulation_steps = 1 · 8 · 1 · 1 = 8 sequences a step. Seconds a step = 8 · 8192 tokens
over 2703 tokens/s on each of the 8 devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from _public import LLAMA31_8B, LLAMA31_70B
from _titan import LLAMA2_13B, LLAMA2_70B  # torchtitan's Llama 2 flavors: the same models (70B's FFN 28,672)

MINDFORMERS = "mindspore-lab/mindformers research/llama3_1/README.md (5175aff94)"


def mindformers_rows() -> list[dict[str, Any]]:
    """The row's fields for bench/public_runs.py's PublicRun."""
    devices, sequences, seq, tps = 8, 8, 8192, 2703.0
    raw = {
        "name": "mindformers-llama3.1-8b-finetune",
        "framework": "mindformers",
        "models": [{"name": "llm", "spec": LLAMA31_8B}],
        "parallel": {"dp": devices, "enable_parallel_optimizer": True},
        "training": {
            "seq_length": seq,
            "micro_batch_size": 1,
            "micro_batches": sequences // devices,
            "dtype": "bf16",
            "flash_attention": True,
            "recompute": "full",
        },
        "device": {"name": "ascend-910b"},
        # model_config.param_init_type float16 under compute_dtype bfloat16: the weights cast each forward;
        # context.jit_config.jit_level O1: MindSpore's graph-kernel fusion (flops.mindformers_loss_bytes)
        # model_config.rotary_dtype float32: RotaryEmbedding casts Q and K up (flops.mindformers_rope_bytes)
        "timing": {"param_dtype": "fp16", "jit_level": "O1", "rotary_dtype": "fp32"},
    }
    return [
        {
            "name": "MindFormers Llama 3.1 8B finetune (8 Ascend 910B, DP8)",
            "source": f"{MINDFORMERS}, finetune_llama3_1_8b.yaml",
            "raw": raw,
            "published": f"{tps:,.0f} tokens/s per device",
            "seconds": sequences * seq / (tps * devices),
            "assumptions": (
                "tokens/s/p as the step's tokens over its seconds and the devices",
                "Atlas 900 A2 PoDc as the catalog's ascend-910b",
                "a fine-tuning step priced as a pre-training step (same layers, full loss)",
                "MindSpore's parallel optimizer (enable_parallel_optimizer, default parallel_optimizer_config)",
            ),
        }
    ]


# ---------------------------------------------------------------------------------------------
# The model cards' training throughputs at one commit (a group of its own in bench/public_runs.py)

CARDS_COMMIT = "v1.4.0-beta2 (a4dfb8219)"
CARDS = f"mindspore-lab/mindformers {CARDS_COMMIT} model cards"
# Each README's tables say "以下模型性能均由<hardware>硬件环境下测试得出" (measured on <hardware>):
# Atlas 800T A2 (the 8-NPU Ascend 910B training server) or Atlas 900 A2 PoDc (its cluster of the same
# 910B servers); both are the catalog's ascend-910b.
ATLAS_800T_A2 = "Atlas 800T A2"
ATLAS_900_A2 = "Atlas 900 A2 PoDc"

# The models as the yaml's model_config states them (MindFormers' LlamaForCausalLM at a4dfb8219:
# RMSNorm, SwiGLU, rotary positions, no biases but `qkv_has_bias`, untied embeddings unless
# `tie_word_embeddings`; an FFN width from `multiple_of` and `ffn_dim_multiplier` is
# mindformers/models/llama/llama_layer.py `LlamaFeedForward`: 4h, times (multiplier + 0.01) if one is set,
# then int(2/3 of it), rounded up to `multiple_of`: 13B 13,653 → 13,824; 7B 10,922 → 11,008;
# 70B int(1.31 · 32,768) = 42,926 → 28,617 → 28,672).
LLAMA2_7B = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_layers": 32,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
}
LLAMA3_8B = {**LLAMA31_8B, "max_position_embeddings": 8192}
LLAMA3_70B = {**LLAMA31_70B, "max_position_embeddings": 8192}
CODELLAMA_34B = {
    "vocab_size": 32000,
    "hidden_size": 8192,
    "num_layers": 48,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "intermediate_size": 22016,  # 21,845 → 22,016
}
_QWEN15 = {"vocab_size": 151936, "attention_bias": True, "max_position_embeddings": 32768}
# Qwen2 0.5B (research/qwen2/qwen2_0_5b/finetune_qwen2_0.5b_32k.yaml): 14 heads of 64, 2 key-value heads,
# `tie_word_embeddings: True`
QWEN2_0_5B = {
    **_QWEN15,
    "hidden_size": 896,
    "num_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "tied_embeddings": True,
}
QWEN15_0_5B = {**_QWEN15, "hidden_size": 1024, "num_layers": 24, "num_attention_heads": 16, "intermediate_size": 2816}
QWEN15_1_8B = {**_QWEN15, "hidden_size": 2048, "num_layers": 24, "num_attention_heads": 16, "intermediate_size": 5504}
QWEN15_7B = {**_QWEN15, "hidden_size": 4096, "num_layers": 32, "num_attention_heads": 32, "intermediate_size": 11008}
QWEN15_72B = {
    **_QWEN15,
    "vocab_size": 152064,
    "hidden_size": 8192,
    "num_layers": 80,
    "num_attention_heads": 64,
    "intermediate_size": 24576,
}
QWEN15_14B = {
    **_QWEN15,
    "vocab_size": 152064,
    "hidden_size": 5120,
    "num_layers": 40,
    "num_attention_heads": 40,
    "intermediate_size": 13696,
}
QWEN15_32B = {
    **_QWEN15,
    "vocab_size": 152064,
    "hidden_size": 5120,
    "num_layers": 64,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "intermediate_size": 27392,
}
YI_34B = {
    "vocab_size": 64000,
    "hidden_size": 7168,
    "num_layers": 60,
    "num_attention_heads": 56,
    "num_key_value_heads": 8,
    "intermediate_size": 20480,
}
YI_6B = {
    "vocab_size": 64000,
    "hidden_size": 4096,
    "num_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "intermediate_size": 11008,
}
# GLM-4 9B as configs/glm4/finetune_glm4_9b.yaml states it (ChatGLM2Config, as ChatGLM3 6B's
# configs/glm3/finetune_glm3_6b_bf16.yaml, 28 layers, padded_vocab_size 65024): padded_vocab_size 151552,
# ffn_hidden_size 13696, 32 heads of kv_channels 128, multi_query_group_num 2, add_qkv_bias, RMSNorm,
# untied output layer. Its fused query-key-value and gate-up GEMMs (`qkv_concat`, `mlp_concat`, on by
# default in glm2_config.py) are priced as ppb's separate ones, and its rotary embedding over the
# whole head (ChatGLM rotates half of it): an assumption of the row.
GLM3_6B = {
    "vocab_size": 65024,
    "hidden_size": 4096,
    "num_layers": 28,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "intermediate_size": 13696,
    "attention_bias": True,
    "max_position_embeddings": 2048,
}
GLM4_9B = {
    "vocab_size": 151552,
    "hidden_size": 4096,
    "num_layers": 40,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "intermediate_size": 13696,
    "attention_bias": True,
    "max_position_embeddings": 8192,
}
DEEPSEEK_CODER_33B = {
    "vocab_size": 32256,
    "hidden_size": 7168,
    "num_layers": 62,
    "num_attention_heads": 56,
    "num_key_value_heads": 8,
    "intermediate_size": 19200,
}


# DeepSeek-V2 as research/deepseek2/deepseek2_236b/finetune_deepseek2_236B.yaml (a4dfb8219) states it: hidden 5120,
# 60 layers (the first dense, `first_k_dense_replace: 1`, FFN 12288), 128 heads of MLA (q_lora_rank 1536,
# kv_lora_rank 512, nope 128, rope 64, v 128), vocabulary 102400; moe_config: 160 experts of 1536, top 6 from the
# best 3 of 8 groups (`group_limited_greedy`), 2 shared experts (LlamaFeedForwardWithMoE's one MLP of
# 2 · 1536), `extend_method: "None"` (plain rotary positions)
DEEPSEEK_V2_236B = {
    "vocab_size": 102400,
    "hidden_size": 5120,
    "num_layers": 60,
    "num_attention_heads": 128,
    "intermediate_size": 12288,
    "max_position_embeddings": 163840,
    "num_experts": 160,
    "experts_per_token": 6,
    "moe_intermediate_size": 1536,
    "shared_experts": 2,
    "shared_expert_intermediate_size": 1536,
    "expert_groups": 8,
    "expert_group_limit": 3,
    "first_dense_layers": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}


@dataclass(frozen=True)
class Card:
    """One model card's training row and what its yaml at a4dfb8219 sets."""

    name: str
    hardware: str  # the README's table heading
    yaml: str  # the row's config link
    tokens_per_s_per_device: float
    spec: dict[str, Any]
    seq_length: int  # model_config.seq_length
    dp: int  # parallel_config.data_parallel
    mp: int  # parallel_config.model_parallel
    pp: int  # parallel_config.pipeline_stage
    batch_size: int  # runner_config.batch_size
    accumulation: int  # runner_config.gradient_accumulation_steps (unset: 1)
    micro_batch_num: int  # parallel_config.micro_batch_num (read with stages only)
    full_recompute: bool  # recompute_config.recompute
    dtype: str  # model_config.compute_dtype
    parallel_optimizer: bool = True  # parallel.enable_parallel_optimizer: weights and states sharded over dp
    flash_attention: bool = True  # model_config.use_flash_attention
    offset: tuple[int, ...] = ()  # model_config.offset per stage (empty: 0, layers split evenly)
    recompute_layers: tuple[int, ...] = ()  # recompute_config.recompute as a count of layers per stage
    select_layers: tuple[int, ...] = ()  # recompute_config.select_recompute, layers per stage
    select_all: bool = False  # recompute_config.select_recompute: True (every layer)
    comm_layers: tuple[int, ...] = ()  # recompute_config.select_comm_recompute, layers per stage
    fine_grain_interleave: int = 1  # model_config.fine_grain_interleave
    param_dtype: str | None = None  # model_config.param_init_type where it differs from compute_dtype
    jit_level: str | None = "O1"  # context.jit_level (None: the yaml sets none)
    # model_config.rotary_dtype (LlamaConfig's default float32); None for ChatGLM2's models, whose rotary is
    # glm2_transformer.py's own (`apply_rotary_pos_emb` over half of each head), priced generic
    rotary_dtype: str | None = "fp32"
    # model_config.softmax_compute_type where the attention is unfused (`use_flash_attention: False`) under O1:
    # `_attn` casts the scores to it for the Softmax (flops.mindformers_softmax_bytes); None elsewhere
    softmax_dtype: str | None = None
    # the model's embedding built with `parallel_optimizer=True` (research/qwen/qwen_model.py `QwenModel`'s
    # `LlamaEmbedding(..., parallel_optimizer=True)` at v1.3.0 debac6a97): its table sharded by optimizer parallel
    embedding_parallel_optimizer: bool = False
    # MoE: parallel_config.expert_parallel and moe_config.capacity_factor (MoEV2's BatchMatMul experts, padded
    # to the capacity and split over model_parallel: ppb's etp defaulting to tp); None: a dense model
    expert_parallel: int = 1
    capacity_factor: float | None = None
    seq_parallel: bool | None = None  # parallel_config.use_seq_parallel where the yaml sets it (else mp > 1)
    # parallel_config.vocab_emb_dp (the yamls with mp > 1 set it False but DeepSeek-V2's): the embedding table and
    # the output head whole on every model-parallel rank (RunConfig `parallel.vocab_emb_dp`)
    vocab_emb_dp: bool = False

    def plan(self) -> dict[str, Any] | None:
        """The yaml's per-stage layout and recompute in MindFormers' words, as `ppb check --plan` reads
        them; None where the yaml states none (the run config's even split and recompute hold)."""
        if not (self.offset or self.recompute_layers or self.select_layers or self.comm_layers):
            return None
        zeros = (0,) * self.pp
        return {
            "offset": list(self.offset or zeros),
            "recompute": list(self.recompute_layers or zeros),
            "select_recompute": list(self.select_layers) if self.select_layers else False,
            "select_comm_recompute": list(self.comm_layers) if self.comm_layers else False,
        }

    @property
    def devices(self) -> int:
        return self.dp * self.mp * self.pp

    @property
    def sequences(self) -> int:
        """A step's sequences: base_trainer.py `_check_global_batch_size_for_auto_parallel` (a4dfb8219)."""
        per_replica = self.micro_batch_num if self.pp > 1 else self.accumulation
        return self.batch_size * self.dp * per_replica


# Every row: semi-auto parallel (`parallel_mode: 1`), full_batch, `use_flash_attention: True` (ChatGLM3
# 6B: False, its attention unfused), `micro_batch_interleave_num: 1`, the parallel optimizer on
# (`enable_parallel_optimizer`: MindSpore's optimizer parallel, weights and optimizer states sharded over
# the data-parallel ranks, the yaml's `parallel_optimizer_config` MindSpore's defaults; DeepSeek Coder 33B
# off, dp 1 either way), `use_seq_parallel` wherever mp > 1, no pipeline_config (MindSpore's
# default 1F1B). A yaml's per-stage `offset`, `recompute`, `select_recompute` and `select_comm_recompute`
# are priced as `ppb check --plan` prices that yaml (`Card.plan`); `fine_grain_interleave: 2` as ppb's
# TP overlap (`card_raw`).
# The global batch is base_trainer.py `_check_global_batch_size_for_auto_parallel` at a4dfb8219: with
# one stage batch_size · dp · micro_batch_interleave_num · gradient_accumulation_steps (unset: 1,
# `_check_grad_accumulation_steps`), micro_batch_num ignored; with stages batch_size · dp ·
# micro_batch_num · micro_batch_interleave_num, gradient accumulation ignored.
# The Llama 2 7B finetune and 13B rows' tables say "float16" for yamls whose compute_dtype is
# bfloat16 (7B) or float16 (13B `finetune_llama2_13b.yaml`): the yaml's compute_dtype is taken. Yi 34B's
# README notes "全参微调需要双机32卡" (full fine-tuning needs two machines, 32 NPUs); its yaml, which the
# row links, runs dp 1 · mp 4 · pp 4 = 16: the yaml is taken.
# Left out (a setting ppb cannot state, or a model it does not have):
# - Qwen1.5 14B pretrain: `micro_batch_interleave_num: 2`; Qwen1.5 4B and GLM3 6B 32k (research/glm32k):
#   `select_recompute: True` beside `recompute: True`;
# - Qwen2 72B (32k): its 2026 tokens/s/p is more than the part can compute: 6 · 72e9 · 2026 = 875 TFLOP/s a
#   device against a 313-376 TFLOPS peak; Qwen2 57B-A14B: MoE with `fine_grain_interleave`; Qwen2 1.5B: its
#   yaml's parallel config (dp 4 · mp 2 · pp 1 = 8 devices) contradicts its own heading, "default
#   parallel of device num = 32";
# - Baichuan2 (NormHead; 13B's ALiBi), InternLM (its own attention biases and model class), GPT-2,
#   PanGu-α, CodeGeeX2, Qwen-VL, TeleChat2 (fp32 residual stream): model classes ppb's spec does not
#   state; LoRA rows (frozen weights); the MoE rows but DeepSeek-V2;
# - tables measured on "Atlas 800" (the 910A) or without a hardware line.
CARD_ROWS: tuple[Card, ...] = (
    Card(
        "Llama 2 7B pretrain",
        ATLAS_800T_A2,
        "configs/llama2/pretrain_llama2_7b_bf16.yaml",
        4160.0,
        LLAMA2_7B,
        seq_length=4096,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=8,
        micro_batch_num=1,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp16",
    ),
    Card(
        "Llama 2 7B finetune",
        ATLAS_800T_A2,
        "configs/llama2/finetune_llama2_7b.yaml",
        3484.0,
        LLAMA2_7B,
        seq_length=4096,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        jit_level=None,
        rotary_dtype="fp16",
    ),
    Card(
        "Llama 2 13B finetune bf16",
        ATLAS_800T_A2,
        "configs/llama2/finetune_llama2_13b_bf16.yaml",
        1691.0,
        LLAMA2_13B,
        seq_length=4096,
        dp=8,
        mp=1,
        pp=1,
        batch_size=4,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=True,
        dtype="bf16",
        param_dtype="fp16",
    ),
    Card(
        "Llama 2 13B finetune bf16",
        ATLAS_900_A2,
        "configs/llama2/finetune_llama2_13b_bf16.yaml",
        1945.0,
        LLAMA2_13B,
        seq_length=4096,
        dp=8,
        mp=1,
        pp=1,
        batch_size=4,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=True,
        dtype="bf16",
        param_dtype="fp16",
    ),
    Card(
        "Llama 2 13B finetune fp16",
        ATLAS_900_A2,
        "configs/llama2/finetune_llama2_13b.yaml",
        1911.0,
        LLAMA2_13B,
        seq_length=4096,
        dp=8,
        mp=1,
        pp=1,
        batch_size=4,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=True,
        dtype="fp16",
        jit_level=None,
        rotary_dtype="fp16",
    ),
    Card(
        "Llama 3 8B finetune",
        ATLAS_800T_A2,
        "research/llama3/llama3_8b/finetune_llama3_8b.yaml",
        2581.0,
        LLAMA3_8B,
        seq_length=8192,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=True,
        dtype="bf16",
        param_dtype="fp16",
    ),
    Card(
        "Qwen1.5 7B finetune",
        ATLAS_800T_A2,
        "research/qwen1_5/qwen1_5_7b/finetune_qwen1_5_7b.yaml",
        2684.0,
        QWEN15_7B,
        seq_length=4096,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=True,
        dtype="bf16",
        param_dtype="fp32",
        rotary_dtype="fp16",
    ),
    # The two 32k rows beyond −19% (this and Qwen2 0.5B below), checked against 2388c729a (their figures' commit):
    # tokens/s/p is MFLossMonitor's samples/s/p (core/callback/callback.py: global_batch_size / device_num / step
    # seconds) times the table's SeqLength, the global batch base_trainer.py's (`Card.sequences`), the yamls' settings
    # as stated here; half or more of ppb's step is CANN's flash attention at 32k, whose backward rate on the 910B
    # no public measurement states (docs/timing-validation.md, MindFormers' far card rows, session 33).
    Card(
        "Qwen1.5 7B pretrain",
        ATLAS_800T_A2,
        "research/qwen1_5/qwen1_5_7b/pretrain_qwen1_5_7b.yaml",
        1417.0,
        QWEN15_7B,
        seq_length=32768,
        dp=1,
        mp=8,
        pp=1,
        batch_size=1,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        rotary_dtype="fp16",
    ),
    Card(
        "Qwen1.5 0.5B finetune",
        ATLAS_900_A2,
        "research/qwen1_5/qwen1_5_0_5b/finetune_qwen1_5_0_5b.yaml",
        21171.0,
        QWEN15_0_5B,
        seq_length=8192,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
    ),
    Card(
        "Qwen1.5 1.8B finetune",
        ATLAS_900_A2,
        "research/qwen1_5/qwen1_5_1_8b/finetune_qwen1_5_1_8b.yaml",
        11241.0,
        QWEN15_1_8B,
        seq_length=8192,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=1,
        micro_batch_num=2,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
    ),
    Card(
        "Qwen1.5 72B pretrain",
        ATLAS_900_A2,
        "research/qwen1_5/qwen1_5_72b/pretrain_qwen1_5_72b.yaml",
        183.0,
        QWEN15_72B,
        seq_length=32768,
        dp=1,
        mp=8,
        pp=8,
        batch_size=1,
        accumulation=1,
        micro_batch_num=64,
        full_recompute=True,
        dtype="bf16",
        param_dtype="fp32",
    ),
    Card(
        "Yi 6B finetune",
        ATLAS_800T_A2,
        "research/yi/yi_6b/finetune_yi_6b.yaml",
        3324.0,
        YI_6B,
        seq_length=2048,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=2,
        micro_batch_num=1,
        full_recompute=False,
        dtype="bf16",
    ),
    Card(
        "DeepSeek Coder 33B finetune",
        ATLAS_900_A2,
        "research/deepseek/deepseek_33b/finetune_deepseek_33b.yaml",
        572.0,
        DEEPSEEK_CODER_33B,
        seq_length=4096,
        dp=1,
        mp=8,
        pp=2,
        batch_size=1,
        accumulation=1,
        micro_batch_num=128,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        parallel_optimizer=False,
    ),
    Card(
        "Llama 2 70B finetune",
        ATLAS_800T_A2,
        "configs/llama2/finetune_llama2_70b_bf16_32p.yaml",
        337.0,
        LLAMA2_70B,
        seq_length=4096,
        dp=1,
        mp=4,
        pp=8,
        batch_size=1,
        accumulation=1,
        micro_batch_num=256,
        full_recompute=False,
        dtype="bf16",
        fine_grain_interleave=2,
        select_layers=(8, 4, 4, 1, 1, 1, 1, 1),
        comm_layers=(8, 4, 4, 1, 1, 1, 1, 1),
    ),
    Card(
        "Llama 2 70B finetune",
        ATLAS_900_A2,
        "configs/llama2/finetune_llama2_70b_bf16_32p.yaml",
        404.0,
        LLAMA2_70B,
        seq_length=4096,
        dp=1,
        mp=4,
        pp=8,
        batch_size=1,
        accumulation=1,
        micro_batch_num=256,
        full_recompute=False,
        dtype="bf16",
        fine_grain_interleave=2,
        select_layers=(8, 4, 4, 1, 1, 1, 1, 1),
        comm_layers=(8, 4, 4, 1, 1, 1, 1, 1),
    ),
    Card(
        "Llama 2 70B finetune",
        ATLAS_900_A2,
        "configs/llama2/finetune_llama2_70b_bf16_64p.yaml",
        405.0,
        LLAMA2_70B,
        seq_length=4096,
        dp=2,
        mp=4,
        pp=8,
        batch_size=1,
        accumulation=1,
        micro_batch_num=256,
        full_recompute=False,
        dtype="bf16",
        fine_grain_interleave=2,
        select_layers=(10, 8, 6, 4, 2, 0, 0, 0),
    ),
    Card(
        "Llama 3 70B finetune",
        ATLAS_900_A2,
        "research/llama3/llama3_70b/finetune_llama3_70b.yaml",
        337.0,
        LLAMA3_70B,
        seq_length=8192,
        dp=1,
        mp=8,
        pp=8,
        batch_size=1,
        accumulation=1,
        micro_batch_num=256,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        fine_grain_interleave=2,
        select_layers=(10, 8, 6, 4, 2, 0, 0, 0),
        comm_layers=(10, 8, 6, 4, 2, 0, 0, 0),
    ),
    Card(
        "Llama 3.1 70B finetune",
        ATLAS_900_A2,
        "research/llama3_1/llama3_1_70b/finetune_llama3_1_70b.yaml",
        337.0,
        LLAMA31_70B,
        seq_length=8192,
        dp=1,
        mp=8,
        pp=8,
        batch_size=1,
        accumulation=1,
        micro_batch_num=256,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        fine_grain_interleave=2,
        select_layers=(10, 8, 6, 4, 2, 0, 0, 0),
        comm_layers=(10, 8, 6, 4, 2, 0, 0, 0),
    ),
    Card(
        "Qwen1.5 14B finetune",
        ATLAS_800T_A2,
        "research/qwen1_5/qwen1_5_14b/finetune_qwen1_5_14b.yaml",
        1452.0,
        QWEN15_14B,
        seq_length=4096,
        dp=1,
        mp=2,
        pp=4,
        batch_size=1,
        accumulation=1,
        micro_batch_num=128,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        fine_grain_interleave=2,
        offset=(-1, 1, 1, -1),
        rotary_dtype="fp16",
    ),
    Card(
        "Qwen1.5 32B finetune",
        ATLAS_900_A2,
        "research/qwen1_5/qwen1_5_32b/finetune_qwen1_5_32b.yaml",
        671.0,
        QWEN15_32B,
        seq_length=8192,
        dp=1,
        mp=8,
        pp=4,
        batch_size=1,
        accumulation=1,
        micro_batch_num=512,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        fine_grain_interleave=2,
        rotary_dtype="fp16",
    ),
    Card(
        "Yi 34B finetune",
        ATLAS_800T_A2,
        "research/yi/yi_34b/finetune_yi_34b.yaml",
        660.0,
        YI_34B,
        seq_length=4096,
        dp=1,
        mp=4,
        pp=4,
        batch_size=1,
        accumulation=1,
        micro_batch_num=56,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        fine_grain_interleave=2,
        offset=(-1, 1, 1, -1),
    ),
    Card(
        "CodeLlama 34B finetune",
        ATLAS_800T_A2,
        "configs/codellama/finetune_codellama_34b_32p.yaml",
        667.0,
        CODELLAMA_34B,
        seq_length=4096,
        dp=2,
        mp=4,
        pp=4,
        batch_size=1,
        accumulation=1,
        micro_batch_num=128,
        full_recompute=False,
        dtype="fp16",
        fine_grain_interleave=2,
        rotary_dtype="fp16",
    ),
    Card(
        "CodeLlama 34B finetune",
        ATLAS_900_A2,
        "configs/codellama/finetune_codellama_34b_16p.yaml",
        669.0,
        CODELLAMA_34B,
        seq_length=4096,
        dp=1,
        mp=8,
        pp=2,
        batch_size=1,
        accumulation=1,
        micro_batch_num=128,
        full_recompute=False,
        dtype="fp16",
        fine_grain_interleave=2,
        rotary_dtype="fp16",
    ),
    Card(
        "CodeLlama 34B finetune",
        ATLAS_900_A2,
        "configs/codellama/finetune_codellama_34b_32p.yaml",
        747.0,
        CODELLAMA_34B,
        seq_length=4096,
        dp=2,
        mp=4,
        pp=4,
        batch_size=1,
        accumulation=1,
        micro_batch_num=128,
        full_recompute=False,
        dtype="fp16",
        fine_grain_interleave=2,
        rotary_dtype="fp16",
    ),
    Card(
        "Qwen2 0.5B finetune",
        ATLAS_900_A2,
        "research/qwen2/qwen2_0_5b/finetune_qwen2_0.5b_32k.yaml",
        9555.0,
        QWEN2_0_5B,
        seq_length=32768,
        dp=4,
        mp=2,
        pp=1,
        batch_size=1,
        accumulation=32,
        micro_batch_num=32,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        fine_grain_interleave=2,
        select_all=True,
    ),
    Card(
        "ChatGLM3 6B finetune",
        ATLAS_800T_A2,
        "configs/glm3/finetune_glm3_6b_bf16.yaml",
        3450.0,
        GLM3_6B,
        seq_length=2048,
        dp=8,
        mp=1,
        pp=1,
        batch_size=4,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=True,
        dtype="bf16",
        flash_attention=False,
        jit_level=None,
        rotary_dtype=None,
    ),
    Card(
        "GLM-4 9B finetune",
        ATLAS_900_A2,
        "configs/glm4/finetune_glm4_9b.yaml",
        2339.0,
        GLM4_9B,
        seq_length=8192,
        dp=2,
        mp=1,
        pp=4,
        batch_size=1,
        accumulation=1,
        micro_batch_num=64,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        offset=(-1, 0, 1, 0),
        recompute_layers=(6, 3, 2, 3),
        rotary_dtype=None,
    ),
    # research/deepseek2/readme.md (Atlas 900 A2 PoDc): deepseek2-236b Finetune 36 tokens/s/p. Its yaml: dp 4 ·
    # mp 8 · pp 2, expert_parallel 4, micro_batch_num 20, use_seq_parallel False, full recompute, no flash
    # attention, compute and param_init bfloat16, O1; deepseek2_model.py routes through LlamaFeedForwardWithMoE
    # with MoEV2 (`use_gmm` unset: BatchMatMul experts padded to capacity_factor 2.0, each expert's slots rounded up
    # to a multiple of mp, RunConfig.mindformers_capacity_share: 312 against 307.2), priced as MoEV2 runs without
    # sequence parallelism (flops.mindformers_moev2: every mp rank all-to-alls the whole micro-batch's slots); its
    # unfused attention's softmax in softmax_compute_type float32 (flops.mindformers_softmax_bytes). The figure came
    # in 2388c729a with research/deepseek2/finetune_deepseek2_236B.yaml, the same settings (sink_size 2,
    # enable_graph_kernel False). Its `vocab_emb_dp: True` (the embedding and output head whole on every mp rank, the
    # logits computed whole) as RunConfig `parallel.vocab_emb_dp` prices it. Not priced: the router's fp32
    # group-limited top-k and three auxiliary losses. Not read: enable_sdrop (which copies a full expert drops).
    Card(
        "DeepSeek-V2 236B finetune",
        ATLAS_900_A2,
        "research/deepseek2/deepseek2_236b/finetune_deepseek2_236B.yaml",
        36.0,
        DEEPSEEK_V2_236B,
        seq_length=4096,
        dp=4,
        mp=8,
        pp=2,
        batch_size=1,
        accumulation=1,
        micro_batch_num=20,
        full_recompute=True,
        dtype="bf16",
        flash_attention=False,
        expert_parallel=4,
        capacity_factor=2.0,
        seq_parallel=False,
        rotary_dtype=None,  # deepseek2_model.py's own rotary for MLA's rope half, not LLaMA's cell: generic
        softmax_dtype="fp32",
        vocab_emb_dp=True,
        # research/deepseek2/deepseek2.py `DeepseekV2Model` (2388c729a; deepseek2_model.py at a4dfb8219) builds its
        # LlamaEmbedding with `parallel_optimizer=True`: the (whole, vocab_emb_dp) table sharded by optimizer parallel
        embedding_parallel_optimizer=True,
    ),
)


def card_raw(card: Card) -> dict[str, Any]:
    """The card's run config."""
    sequence_parallel = card.mp > 1 if card.seq_parallel is None else card.seq_parallel
    parallel: dict[str, Any] = {"dp": card.dp, "tp": card.mp, "pp": card.pp, "sequence_parallel": sequence_parallel}
    if card.expert_parallel > 1:
        parallel["ep"] = card.expert_parallel
    parallel["enable_parallel_optimizer"] = card.parallel_optimizer
    if card.embedding_parallel_optimizer:
        parallel["embedding_parallel_optimizer"] = True
    if card.vocab_emb_dp and card.mp > 1:
        parallel["vocab_emb_dp"] = True
    training: dict[str, Any] = {
        "seq_length": card.seq_length,
        "micro_batch_size": card.batch_size,
        "micro_batches": card.sequences // (card.dp * card.batch_size),
        "dtype": card.dtype,
        "flash_attention": card.flash_attention,
    }
    if card.capacity_factor is not None:
        training["moe"] = {"dropless": False, "capacity_factor": card.capacity_factor}
    if card.full_recompute:
        training["recompute"] = "full"
    elif card.select_layers or card.select_all:
        # what MindFormers' select_recompute recomputes in a LLaMA layer (a4dfb8219 mindformers/models/
        # utils.py `LayerSetting`, default_patterns: feed_forward.mul and feed_forward.w1.activation.silu,
        # the SwiGLU product; with flash attention nothing in the attention, llama_transformer.py): ppb's
        # ffAct. Its select_comm_recompute (default_comm_patterns `.*\.norm`: the sequence-parallel
        # all-gathers after the norms, `recompute_comm_op`) is ppb's COMM option, the `gather` switch.
        training["recompute"] = {"ffAct": 0}
    slug = card.yaml.rsplit("/", 1)[-1].removesuffix(".yaml")
    timing: dict[str, Any] = {}
    if card.param_dtype is not None:
        timing["param_dtype"] = card.param_dtype  # the weights' casts and fp32/fp16 accumulation
    if card.jit_level is not None:
        timing["jit_level"] = card.jit_level  # O1: MindSpore's graph-kernel fusion (flops.mindformers_loss_bytes)
    if card.rotary_dtype is not None:
        timing["rotary_dtype"] = card.rotary_dtype  # LLaMA's RotaryEmbedding (flops.mindformers_rope_bytes)
    if card.softmax_dtype is not None:
        timing["softmax_compute_type"] = card.softmax_dtype  # the unfused attention's casts (mindformers_softmax_bytes)
    if card.fine_grain_interleave > 1:
        # llama_interleave.py `LLamaDecodeLayerInterleave` (a4dfb8219) cuts each layer's micro-batch into
        # `fine_grain_interleave` slices along the sequence and tags their concatenations
        # (`fine_grained_interleaved_index`) so that MindSpore runs one slice's tensor-parallel collectives
        # beside another slice's compute: the forward's as MindSpore orders them (`timing.fine_grain_interleave`:
        # half of each collective beside half its GEMM, half beside the norm and add); the backward's hidden up to
        # their partner op's time (`timing.overlap.tp` 1). The first and last layers' whole halves
        # (`layer_id` 0 and L - 1 run unsliced) and the halved GEMMs' lower rate are not priced.
        timing["fine_grain_interleave"] = card.fine_grain_interleave
        timing["overlap"] = {"tp": 1.0}
    return {
        "name": f"mindformers-{slug}-{card.devices}",
        "framework": "mindformers",
        "models": [{"name": "llm", "spec": card.spec}],
        "parallel": parallel,
        "training": training,
        "device": {"name": "ascend-910b"},
        **({"timing": timing} if timing else {}),
    }


def card_row(card: Card, name: str, source: str, *assumptions: str) -> dict[str, Any]:
    """A card's row as bench/public_runs.py's PublicRun fields: *name* and *source* as its group says them, the
    assumptions every card shares, then *assumptions*."""
    tokens = card.sequences * card.seq_length
    return {
        "name": name,
        "source": source,
        "raw": card_raw(card),
        "published": f"{card.tokens_per_s_per_device:,.0f} tokens/s per device",
        "seconds": tokens / (card.tokens_per_s_per_device * card.devices),
        "plan": card.plan(),
        "assumptions": (
            "tokens/s/p as the step's tokens over its seconds and the devices",
            f"{card.hardware} as the catalog's ascend-910b",
            "a fine-tuning step priced as a pre-training step (same layers, full loss)",
            "MindSpore's parallel optimizer (enable_parallel_optimizer, the yaml's parallel_optimizer_config)",
            *assumptions,
        ),
    }


def mindformers_card_rows() -> list[dict[str, Any]]:
    """The model cards' rows as bench/public_runs.py's PublicRun fields."""
    rows = []
    for card in CARD_ROWS:
        layout = f"DP{card.dp}" + (f" TP{card.mp}" if card.mp > 1 else "") + (f" PP{card.pp}" if card.pp > 1 else "")
        name = f"MindFormers {card.name} ({card.devices} 910B, {layout}, {card.hardware})"
        rows.append(card_row(card, name, f"{CARDS}, {card.yaml}"))
    return rows


# ---------------------------------------------------------------------------------------------
# Model-card rows of another release (session 28, a group of their own in bench/public_runs.py)

# research/qwen/qwen.md at v1.3.0 (debac6a97), "以下模型性能均由Atlas 800T A2硬件环境下测试得出": Qwen (the first
# generation) 7B and 14B fine-tuning; gone from the cards by v1.4.0-beta2. Their model (research/qwen/qwen_model.py
# at v1.3.0) is `LLamaDecodeLayer` with `qkv_has_bias=True`, `QwenFeedForward` (SwiGLU, w1/w3 of
# `intermediate_size`), RMSNorm, rotary positions and an untied `lm_head`: the Qwen1.5 shapes of the same sizes
# (the yamls' hidden 4096 / 5120, 32 / 40 layers and heads, FFN 11008 / 13696, vocabulary 151936 / 152064). The
# global batch is base_trainer.py `_check_global_batch_size_for_auto_parallel` at v1.3.0, the rule `Card.sequences`
# states (full_batch, one stage, gradient_accumulation_steps unset). Priced: the two bfloat16 rows. Not priced:
# the float16 rows (finetune_qwen_7b.yaml, finetune_qwen_14b.yaml: `micro_batch_interleave_num: 4`).
CARDS_V130 = "mindspore-lab/mindformers v1.3.0 (debac6a97) model cards"
SKIPPED_V130 = (
    (
        "MindFormers v1.3.0 Qwen 7B / 14B float16 (finetune_qwen_7b.yaml 1571, finetune_qwen_14b.yaml 911 tokens/s/p)",
        "`micro_batch_interleave_num: 4`, a setting ppb cannot state",
    ),
)
V130_ROWS: tuple[Card, ...] = (
    Card(
        "Qwen 7B finetune bf16",
        ATLAS_800T_A2,
        "research/qwen/finetune_qwen_7b_bf16.yaml",
        2955.0,
        QWEN15_7B,
        seq_length=2048,
        dp=8,
        mp=1,
        pp=1,
        batch_size=2,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=False,
        dtype="bf16",
        param_dtype="fp32",
        jit_level="O2",
        rotary_dtype="fp16",
        embedding_parallel_optimizer=True,
    ),
    Card(
        "Qwen 14B finetune bf16",
        ATLAS_800T_A2,
        "research/qwen/finetune_qwen_14b_bf16.yaml",
        1106.0,
        QWEN15_14B,
        seq_length=2048,
        dp=8,
        mp=1,
        pp=1,
        batch_size=1,
        accumulation=1,
        micro_batch_num=1,
        full_recompute=True,
        dtype="bf16",
        param_dtype="fp32",
        jit_level="O2",
        rotary_dtype="fp16",
        embedding_parallel_optimizer=True,
    ),
)


def mindformers_v130_rows() -> list[dict[str, Any]]:
    """The v1.3.0 cards' rows: `mindformers_card_rows`' fields under their own source."""
    return [
        card_row(
            card,
            f"MindFormers v1.3.0 {card.name} ({card.devices} 910B, DP{card.dp}, {card.hardware})",
            f"{CARDS_V130}, {card.yaml}",
            "jit_level O2: the generic fused op counts",
        )
        for card in V130_ROWS
    ]


# ---------------------------------------------------------------------------------------------
# MindFormers' Mixtral 8x7B card (session 34, in the "MindFormers" group): a MoE at model_parallel 1

# research/mixtral/mixtral.md at bc419f8a5 (2024-09-09, "补充模型性能"; the table gone by 9cbd56466,
# 2024-09-24), "以下模型性能均由Atlas 900 A2 PoDc硬件环境下测试得出": mixtral-8x7b, Finetune,
# alpaca_data, SeqLength 4096, 1678 tokens/s/p; its config research/mixtral/finetune_mixtral-8x7b.yaml at that
# commit: data_parallel 8, model_parallel 1, expert_parallel 8, pipeline_stage 2 (16 devices; the card:
# "全参微调Atlas 800T A2芯片至少需要二机16卡"), micro_batch_num 16, use_seq_parallel False,
# runner_config.batch_size 1, full recompute (`recompute: True`), flash attention, compute and param_init float16
# (DynamicLossScaleUpdateCell), rotary_dtype float16, jit_level O2, the parallel optimizer on (threshold 64),
# model_config.offset 0; moe_config expert_num 8, num_experts_chosen 2, capacity_factor 1.1, routing_policy
# TopkRouterV2 (MoEV2 in llama_transformer.py `LLamaDecodeLayer` at that commit, `use_past` off), enable_sdrop True,
# router_dense_type float32. The model: LlamaConfig hidden 4096, 32 layers and heads, n_kv_heads 8,
# intermediate_size 14336 (each expert's SwiGLU width), vocabulary 32000. The global batch is base_trainer.py
# `_check_global_batch_size_for_auto_parallel` at bc419f8a5 with stages: 1 · 8 · 16 = 128 sequences. Priced as its
# code runs: MoEV2 at mp 1 (flops.mindformers_moev2: each rank's micro-batch dispatched into 8 experts × 1127 slots,
# ⌈2 · 4096 · 1.1 / 8⌉, all-to-all'd over the 8 data-parallel ranks by `transpose_4dim_dp1`'s redistribution,
# `dp_moe` 1), jit_level O2 (the generic fused counts). Not priced: enable_sdrop's routing order (its sort and
# OneHot over 8 experts), the router's float32 dense and aux loss; `vocab_emb_dp: True` changes nothing at mp 1.
MIXTRAL = "mindspore-lab/mindformers research/mixtral/mixtral.md (bc419f8a5)"
MIXTRAL_8X7B = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "num_experts": 8,
    "experts_per_token": 2,
    "moe_intermediate_size": 14336,
}
MIXTRAL_ROW = Card(
    "Mixtral 8x7B finetune",
    ATLAS_900_A2,
    "research/mixtral/finetune_mixtral-8x7b.yaml",
    1678.0,
    MIXTRAL_8X7B,
    seq_length=4096,
    dp=8,
    mp=1,
    pp=2,
    batch_size=1,
    accumulation=1,
    micro_batch_num=16,
    full_recompute=True,
    dtype="fp16",
    jit_level="O2",
    rotary_dtype="fp16",
    expert_parallel=8,
    capacity_factor=1.1,
    seq_parallel=False,
)


def mindformers_mixtral_rows() -> list[dict[str, Any]]:
    """The Mixtral card's row as bench/public_runs.py's PublicRun fields."""
    card = MIXTRAL_ROW
    layout = f"DP{card.dp} EP{card.expert_parallel} PP{card.pp}"
    name = f"MindFormers {card.name} ({card.devices} 910B, {layout}, {card.hardware})"
    return [card_row(card, name, f"{MIXTRAL}, {card.yaml}", "jit_level O2: the generic fused op counts")]
