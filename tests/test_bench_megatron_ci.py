"""bench/megatron_ci.py: a case's model_config.yaml handed to the reader as Megatron's CI hands it to
pretrain_gpt.py (tests/functional_tests/shell_test_utils/_run_training.sh, Megatron-LM d98e8a64)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ppb_core.balance.megatron_import import import_megatron

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("megatron_ci", BENCH / "megatron_ci.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["megatron_ci"] = module  # its dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


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
