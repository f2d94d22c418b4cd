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
