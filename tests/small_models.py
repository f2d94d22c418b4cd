"""Small HuggingFace config.json files that several tests build, measure or price: a two-layer
Llama with grouped-query attention, quick on a CPU and on the meta device."""

from __future__ import annotations

SMALL_LLAMA = {
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}
