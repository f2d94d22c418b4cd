"""The time model and the memory model read the switches alike: a switch that frees memory reruns
something in the backward, and one that frees nothing reruns nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import SWITCHES, LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.flops import recompute_set
from ppb_core.timing.pricer import TimeModel

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

DENSE = {
    "vocab_size": 1024,
    "hidden_size": 512,
    "num_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 1024,
    "attention_dropout": 0.1,
    "hidden_dropout": 0.1,
}
MLA = {
    **DENSE,
    "num_key_value_heads": 8,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
}
MOE = {**DENSE, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 256, "shared_experts": 1}
GPT = {
    **DENSE,
    "num_key_value_heads": 8,
    "activation": "gelu",
    "norm": "layernorm",
    "position_embedding": "learned",
    "max_position_embeddings": 256,
}


def synthetic(spec, flash, **parallel):
    return parse_run_config(
        {
            "name": "s",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": 8, **parallel},
            "training": {"seq_length": 256, "flash_attention": flash},
            "device": {"name": "h100-80gb"},
        }
    )


CASES = {
    "gpt-eager-sp": lambda: synthetic(GPT, False, tp=2, sequence_parallel=True),
    "dense-eager-tp": lambda: synthetic({**DENSE, "qk_norm": True}, False, tp=2),
    "dense-flash-ring": lambda: synthetic(DENSE, True, tp=2, sequence_parallel=True, cp=2),
    "dense-flash-ulysses": lambda: synthetic(DENSE, True, cp=2, cp_variant="ulysses"),
    "mla-eager-sp": lambda: synthetic(MLA, False, tp=2, sequence_parallel=True),
    "moe-etp-sp": lambda: synthetic(MOE, True, tp=2, sequence_parallel=True, ep=2, etp=2),
    **{
        name: (lambda name=name: load_run_config(CONFIGS / f"{name}.yaml"))
        for name in ("llama3-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3")
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_switch_frees_memory_exactly_when_it_reruns_something(case):
    # Under SAPP's (MindFormers') conventions, where the gathers' outputs are kept unless `gather`
    # recomputes them. Megatron-Core keeps no gathered input and all-gathers again in every backward
    # (docs/frameworks.md): there `gather` frees nothing, and the time model's re-gather is not a recompute.
    run = CASES[case]().model_copy(update={"framework": "mindformers"})
    memory, times = MemoryModel(run), TimeModel(run)
    seen = set()
    for layer in walk(run):
        if layer.node != "BODY" or layer.kind in seen:
            continue
        seen.add(layer.kind)
        kept = memory.state_memory(layer, LayerType.NOT_REC_LAYER).kept_bytes
        for switch in SWITCHES:
            freed = kept - memory.state_memory(layer, LayerType.SEL_REC_LAYER, {switch: 0}).kept_bytes
            rerun = recompute_set(times.ops(layer), {switch: 0})
            assert (freed > 0) == bool(rerun), (layer.kind.name, switch, freed, [op.name for op in rerun])
