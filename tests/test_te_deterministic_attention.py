"""TransformerEngine's deterministic attention follows what TE reads: NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 or
PyTorch's deterministic algorithms (dot_product_attention.py `__init__`, TE v1.12 to d0067d0d), which Megatron's
--deterministic-mode turns on; the NaN fill stays with the flag (`torch.use_deterministic_algorithms`)."""

from __future__ import annotations

import pytest

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.workspaces import flash2_backward_workspace_bytes
from ppb_core.memory.setup import MemorySetup
from ppb_core.timing.pricer import TimeModel

# tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp2_pp2_cp2/model_config.yaml (d98e8a64), its ENV_VARS
# exported first as the CI's _run_training.sh does; logging, data and checkpoint flags left out
CP2 = """
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NVTE_ALLOW_NONDETERMINISTIC_ALGO={env}
pretrain_gpt.py --num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 4 \\
  --global-batch-size 32 --seq-length 1024 --max-position-embeddings 1024 --train-iters 100 \\
  --transformer-impl transformer_engine --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \\
  --context-parallel-size 2 --bf16 {flags}
"""


def imported_timing(env: str, flags: str = "") -> dict:
    return import_megatron(CP2.format(env=env, flags=flags), 8, "a100-80gb").raw["timing"]


def test_the_import_reads_the_env_var_te_reads() -> None:
    # the CI's CP2 case sets NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 without --deterministic-mode: TE runs its
    # deterministic attention, PyTorch's deterministic algorithms stay off
    timing = imported_timing("0")
    assert timing["te_deterministic_attention"] is True and timing["deterministic"] is False
    assert imported_timing("1")["te_deterministic_attention"] is False  # TE: int("1") != 0
    # under --deterministic-mode Megatron sets it itself (determinism.py `apply_determinism_env`): the flag decides
    both = imported_timing("0", "--deterministic-mode")
    assert "te_deterministic_attention" not in both and both["deterministic"] is True
    script = CP2.format(env="0", flags="").replace("export NVTE_ALLOW_NONDETERMINISTIC_ALGO=0", "")
    unset = import_megatron(script, 8, "a100-80gb")
    assert "te_deterministic_attention" not in unset.raw["timing"]


@pytest.mark.parametrize(
    ("env", "flags", "said"),
    [
        ("1", "--deterministic-mode", "'1' under --deterministic-mode: Megatron-LM accepts only 0"),
        ("yes", "", "'yes' is not an integer (TransformerEngine reads int())"),
    ],
)
def test_a_value_megatron_or_te_refuses_is_one_line(env: str, flags: str, said: str) -> None:
    with pytest.raises(InputError) as err:
        imported_timing(env, flags)
    assert err.value.field == "NVTE_ALLOW_NONDETERMINISTIC_ALGO" and said in str(err.value)
    assert "\n" not in str(err.value)


def small(framework: str = "megatron", device: str = "a100-80gb", **timing) -> dict:
    return {
        "name": "g",
        "framework": framework,
        "models": [
            {
                "name": "llm",
                "spec": {
                    "vocab_size": 4096,
                    "hidden_size": 1024,
                    "num_layers": 2,
                    "num_attention_heads": 16,
                    "intermediate_size": 4096,
                    "max_position_embeddings": 2048,
                },
            }
        ],
        "training": {"seq_length": 2048, "flash_attention": True},
        "device": {"name": device},
        "timing": timing,
    }


def test_the_run_config_refuses_it_outside_megatron_and_against_deterministic_mode() -> None:
    with pytest.raises(InputError) as err:
        parse_run_config(small("torchtitan", te_deterministic_attention=True))
    assert err.value.field == "timing.te_deterministic_attention"
    with pytest.raises(InputError) as err:
        parse_run_config(small(deterministic=True, te_deterministic_attention=False))
    assert "contradicts deterministic true" in str(err.value)


@pytest.mark.parametrize(
    ("timing", "expected"),
    [
        ({}, False),
        ({"te_deterministic_attention": True}, True),
        ({"deterministic": True}, True),  # Megatron sets the env var; TE also reads torch's flag
        ({"te_deterministic_attention": True, "transformer_impl": "local"}, False),  # no TE attention runs
        ({"te_deterministic_attention": False}, False),
    ],
)
def test_which_runs_take_te_s_deterministic_attention(timing: dict, expected: bool) -> None:
    assert parse_run_config(small(**timing)).timing.attention_deterministic is expected


def test_the_env_var_alone_switches_the_attention_but_not_the_nan_fill() -> None:
    a100, h100 = DEVICE_CATALOG["a100-80gb"], DEVICE_CATALOG["h100-80gb"]
    # A100 (sm80): flash-attn 2 either way (TE prefers FusedAttention from sm90 only), its backward the
    # deterministic one (`deterministic=True` passed to flash-attn); no NaN fill without the flag
    model = TimeModel(parse_run_config(small(te_deterministic_attention=True)))
    assert model.kernels.deterministic_backward and not model._nan_fill
    assert model.kernels.attention_backward == a100.flash2_backward_efficiency
    plain = TimeModel(parse_run_config(small()))
    assert not plain.kernels.deterministic_backward
    # H100 (sm90): TE keeps cuDNN attention and asks it for the deterministic algorithm (dP workspace)
    hopper = TimeModel(parse_run_config(small(device="h100-80gb", te_deterministic_attention=True)))
    assert hopper.kernels.dp_workspace and not hopper._nan_fill
    assert hopper.kernels.attention_backward == h100.attention_backward_efficiency
    # --deterministic-mode: both
    flag = TimeModel(parse_run_config(small(deterministic=True)))
    assert flag.kernels.deterministic_backward and flag._nan_fill


def test_the_env_var_alone_sizes_flash_attention_2_s_deterministic_workspace() -> None:
    # A100's 108 SMs over b·heads = 1 · 16 pairs: ⌈108/16⌉ = 7 fp32 dQ slices of 2048 rows × 64 wide,
    # plus softmax_d: 16 · 2048 · 4 · (1 + 7 · 64) = 58,851,328 bytes (1 + 64 = 65 per row when not deterministic)
    setup = MemorySetup.from_run(parse_run_config(small(te_deterministic_attention=True)))
    assert setup.deterministic
    assert flash2_backward_workspace_bytes(1, 16, 2048, 64, 108, setup.deterministic) == 16 * 2048 * 4 * (1 + 7 * 64)
    assert not MemorySetup.from_run(parse_run_config(small())).deterministic


def test_the_ci_cp2_case_imports_as_a_run_config() -> None:
    run = run_config_of(import_megatron(CP2.format(env="0", flags=""), 8, "a100-80gb"), "cp2")
    assert run.timing.attention_deterministic and not run.timing.deterministic
