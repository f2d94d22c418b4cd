"""bench/megatron_ci.py: a case's model_config.yaml handed to the reader as Megatron's CI hands it to
pretrain_gpt.py (tests/functional_tests/shell_test_utils/_run_training.sh, Megatron-LM d98e8a64)."""

from __future__ import annotations

import pytest
from bench_modules import load_bench

from ppb_core.balance.megatron_import import import_megatron


@pytest.fixture(scope="module")
def bench():
    return load_bench("megatron_ci")


def test_the_ci_s_yaml_becomes_the_launch_it_runs(bench):
    # _run_training.sh: `true` is the bare flag, a `[...]` value its words, a value with `(`, `|` or a
    # space one quoted word; ENV_VARS are the environment (exported before the launch)
    config = {
        "ENV_VARS": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_ALGO": "Ring"},
        "MODEL_ARGS": {
            "--num-layers": 4,
            "--hidden-size": 64,
            "--num-attention-heads": 4,
            "--seq-length": 128,
            "--max-position-embeddings": 128,
            "--bf16": True,
            "--recompute-modules": "[core_attn, mlp]",
            "--recompute-granularity": "selective",
            "--pipeline-model-parallel-size": 2,
            "--pipeline-model-parallel-layout": "Et|(tt|)*1tL",
            "--data-path": "${DATA_PATH}/text",
        },
    }
    text = bench.launch_text(config)
    assert text.splitlines()[0] == "export CUBLAS_WORKSPACE_CONFIG=:4096:8"
    imported = import_megatron(text, 8, "h100-80gb")
    assert imported.raw["memory"] == {"cublas_workspace_config": ":4096:8"}
    assert imported.raw["training"]["recompute"] == {"granularity": "selective", "modules": ["core_attn", "mlp"]}
    assert imported.raw["parallel"]["layout"] == "Et|(tt|)*1tL"
    assert imported.notes == []


def test_the_golden_values_median_leaves_iteration_one_out(bench):
    # bench/public_runs.py's convention: the median of the logged windows without iteration 1
    # (iteration 3's "nan" is not a value): the median of 1.0, 3.0 and 2.0
    assert bench.seconds_of({"values": {"1": 9.0, "2": 1.0, "3": "nan", "4": 3.0, "5": 2.0}}) == 2.0
    assert bench.seconds_of({"values": {"1": 9.0}}) is None
