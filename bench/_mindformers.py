"""MindFormers' published Llama 3.1 8B fine-tuning throughput on Ascend, as a run config for
bench/public_runs.py.

Source: mindspore-lab/mindformers research/llama3_1/README.md (the table "以下模型性能均由Atlas 900 A2
PoDc硬件环境下测试得出", added at 5175aff94, 2024-12-12, unchanged since): llama3_1_8b, Finetune,
alpaca, sequence 8192, 2703 tokens/s/p; its config research/llama3_1/llama3_1_8b/
finetune_llama3_1_8b.yaml at the same commit: data_parallel 8, model_parallel 1, pipeline_stage 1
("default parallel of device num = 8"), runner_config.batch_size 1, micro_batch_num 1, full
recompute (`recompute: True`), flash attention, the parallel optimizer (optimizer states sharded over
the data-parallel ranks), bf16 compute, Llama 3.1 8B's shape. The global batch is
mindformers/trainer/base_trainer.py `_check_global_batch_size_for_auto_parallel` at that commit
(semi-auto parallel, full_batch, one stage): batch_size · data_parallel · micro_batch_interleave_num ·
gradient_accumulation_steps = 1 · 8 · 1 · 1 = 8 sequences a step. Seconds a step = 8 · 8192 tokens
over 2703 tokens/s on each of the 8 devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from _public import LLAMA31_8B

MINDFORMERS = "mindspore-lab/mindformers research/llama3_1/README.md (5175aff94)"


def mindformers_rows() -> list[dict[str, Any]]:
    """The row's fields for bench/public_runs.py's PublicRun."""
    devices, sequences, seq, tps = 8, 8, 8192, 2703.0
    raw = {
        "name": "mindformers-llama3.1-8b-finetune",
        "framework": "mindformers",
        "models": [{"name": "llm", "spec": LLAMA31_8B}],
        "parallel": {"dp": devices, "zero": 1},
        "training": {
            "seq_length": seq,
            "micro_batch_size": 1,
            "micro_batches": sequences // devices,
            "dtype": "bf16",
            "flash_attention": True,
            "recompute": "full",
        },
        "device": {"name": "ascend-910b"},
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
                "MindSpore's parallel optimizer as ZeRO-1",
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
# mindformers/models/llama/llama_layer.py `LlamaFeedForward`: int(2 · 4h / 3), times the multiplier,
# rounded up to `multiple_of`: 13B 13,653 → 13,824; 7B 10,922 → 11,008).
LLAMA2_7B = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_layers": 32,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
}
LLAMA2_13B = {
    "vocab_size": 32000,
    "hidden_size": 5120,
    "num_layers": 40,
    "num_attention_heads": 40,
    "intermediate_size": 13824,
}
LLAMA3_8B = {**LLAMA31_8B, "max_position_embeddings": 8192}
_QWEN15 = {"vocab_size": 151936, "attention_bias": True, "max_position_embeddings": 32768}
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
    parallel_optimizer: bool = True  # parallel.enable_parallel_optimizer: states sharded over dp (ZeRO-1)
    flash_attention: bool = True  # model_config.use_flash_attention
    offset: tuple[int, ...] = ()  # model_config.offset per stage (empty: 0, layers split evenly)
    recompute_layers: tuple[int, ...] = ()  # recompute_config.recompute as a count of layers per stage

    def plan(self) -> dict[str, Any] | None:
        """The yaml's per-stage layout and recompute in MindFormers' words, as `ppb check --plan` reads
        them; None where the yaml states neither (the run config's even split and recompute hold)."""
        if not self.offset and not self.recompute_layers:
            return None
        stages = self.pp
        return {
            "offset": list(self.offset or (0,) * stages),
            "recompute": list(self.recompute_layers or (0,) * stages),
            "select_recompute": False,
            "select_comm_recompute": False,
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
# 6B: False, its attention unfused),
# `micro_batch_interleave_num: 1`, `fine_grain_interleave` 1 or unset (its default, 1), no
# `select_recompute` / `select_comm_recompute`, the parallel optimizer on (`enable_parallel_optimizer`,
# optimizer states sharded over the data-parallel ranks: ZeRO-1), `use_seq_parallel` wherever mp > 1,
# no pipeline_config (MindSpore's default 1F1B) and `offset: 0` (layers split evenly over the stages)
# but for GLM-4 9B, whose `offset` and `recompute` are counts per stage (priced as `ppb check --plan`
# prices that yaml: `Card.plan`).
# The global batch is base_trainer.py `_check_global_batch_size_for_auto_parallel` at a4dfb8219: with
# one stage batch_size · dp · micro_batch_interleave_num · gradient_accumulation_steps (unset: 1,
# `_check_grad_accumulation_steps`), micro_batch_num ignored; with stages batch_size · dp ·
# micro_batch_num · micro_batch_interleave_num, gradient accumulation ignored.
# The Llama 2 7B finetune and 13B rows' tables say "float16" for yamls whose compute_dtype is
# bfloat16 (7B) or float16 (13B `finetune_llama2_13b.yaml`): the yaml's compute_dtype is taken.
# Left out (a setting ppb cannot state, or a model it does not have):
# - Llama 2 70B (32p/64p), Llama 3 70B, Llama 3.1 70B: `select_recompute`/`select_comm_recompute` as a
#   count of layers per stage ([8,4,4,1,...], [10,8,6,4,2,0,0,0]), not a form `training.recompute` takes,
#   and `fine_grain_interleave: 2`;
# - Qwen1.5 14B/32B finetune, Yi 34B, CodeLlama 34B (16p/32p): `fine_grain_interleave: 2` (each layer's
#   micro-batch cut in two to hide its TP collectives), which ppb does not model;
# - Qwen1.5 14B pretrain: `micro_batch_interleave_num: 2`; Qwen1.5 4B and GLM3 6B 32k (research/glm32k):
#   `select_recompute: True` beside `recompute: True`;
# - Qwen2 72B (32k): its 2026 tokens/s/p is more than the part can compute: 6 · 72e9 · 2026 = 875 TFLOP/s a
#   device against a 313-376 TFLOPS peak; Qwen2 57B-A14B: MoE with `fine_grain_interleave`; Qwen2 0.5B:
#   `fine_grain_interleave: 2` and `select_recompute: True`; Qwen2 1.5B: its yaml's parallel config
#   (dp 4 · mp 2 · pp 1 = 8 devices) contradicts its own heading, "default parallel of device num = 32";
# - Baichuan2 (NormHead; 13B's ALiBi), InternLM (its own attention biases and model class), GPT-2,
#   PanGu-α, CodeGeeX2, Qwen-VL: model classes ppb's spec does not state; LoRA rows (frozen weights);
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
    ),
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
        parallel_optimizer=False,
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
        offset=(-1, 0, 1, 0),
        recompute_layers=(6, 3, 2, 3),
    ),
)


def card_raw(card: Card) -> dict[str, Any]:
    """The card's run config."""
    parallel: dict[str, Any] = {"dp": card.dp, "tp": card.mp, "pp": card.pp, "sequence_parallel": card.mp > 1}
    parallel["zero"] = 1 if card.parallel_optimizer and card.dp > 1 else 0
    training: dict[str, Any] = {
        "seq_length": card.seq_length,
        "micro_batch_size": card.batch_size,
        "micro_batches": card.sequences // (card.dp * card.batch_size),
        "dtype": card.dtype,
        "flash_attention": card.flash_attention,
    }
    if card.full_recompute:
        training["recompute"] = "full"
    slug = card.yaml.rsplit("/", 1)[-1].removesuffix(".yaml")
    return {
        "name": f"mindformers-{slug}-{card.devices}",
        "framework": "mindformers",
        "models": [{"name": "llm", "spec": card.spec}],
        "parallel": parallel,
        "training": training,
        "device": {"name": "ascend-910b"},
    }


def mindformers_card_rows() -> list[dict[str, Any]]:
    """The model cards' rows as bench/public_runs.py's PublicRun fields."""
    rows = []
    for card in CARD_ROWS:
        layout = f"DP{card.dp}" + (f" TP{card.mp}" if card.mp > 1 else "") + (f" PP{card.pp}" if card.pp > 1 else "")
        tokens = card.sequences * card.seq_length
        rows.append(
            {
                "name": f"MindFormers {card.name} ({card.devices} 910B, {layout}, {card.hardware})",
                "source": f"{CARDS}, {card.yaml}",
                "raw": card_raw(card),
                "published": f"{card.tokens_per_s_per_device:,.0f} tokens/s per device",
                "seconds": tokens / (card.tokens_per_s_per_device * card.devices),
                "plan": card.plan(),
                "assumptions": (
                    "tokens/s/p as the step's tokens over its seconds and the devices",
                    f"{card.hardware} as the catalog's ascend-910b",
                    "a fine-tuning step priced as a pre-training step (same layers, full loss)",
                    "MindSpore's parallel optimizer as ZeRO-1",
                ),
            }
        )
    return rows
