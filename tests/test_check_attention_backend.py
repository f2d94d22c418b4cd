"""`ppb check --plan` compares Megatron's `--attention-backend` with the run config, as `ppb import megatron`
reads it (megatron_import.py `_flash`, `_timing`): unfused and local keep the scores
(`training.flash_attention` false); auto, flash and fused not, and which TransformerEngine attention they run
on the run's device (`memory.setup.te_runs_flash`) must be the run config's `timing.te_attention_backend`'s:
flash-attn keeps the attention's output twice and allocates its backward workspace (docs/memory.md), cuDNN's
fused attention neither. On Hopper auto is cuDNN's (TE's `get_attention_backend` prefers FusedAttention from
sm90), so `fused` there is auto, and a launch script saying it (Megatron-LM's examples/llama/
train_llama3_8b_h100_fp8.sh) checks against a run config that says nothing."""

from __future__ import annotations

import pytest

from ppb_core.balance.megatron import parse_flags
from ppb_core.balance.megatron_run import check_against_run
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory.setup import te_runs_flash

SPEC = {
    "vocab_size": 4096,
    "hidden_size": 1024,
    "num_layers": 4,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "max_position_embeddings": 2048,
}

# a whole command line of the run below (it states --num-layers), without --attention-backend
WHOLE = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --ffn-hidden-size 4096 --swiglu "
    "--untie-embeddings-and-output-weights --seq-length 2048 --bf16 --use-distributed-optimizer "
    "--micro-batch-size 1 --tokenizer-type NullTokenizer --vocab-size 4096"
)


def run(device: str, backend: str = "auto", flash: bool = True, impl: str = "transformer_engine"):
    timing = {"transformer_impl": impl} | ({"te_attention_backend": backend} if backend != "auto" else {})
    return parse_run_config(
        {
            "name": "r",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": SPEC}],
            "training": {"seq_length": 2048, "flash_attention": flash},
            "device": {"name": device},
            "timing": timing,
        }
    )


def test_te_runs_flash_attn_for_flash_anywhere_from_sm80_and_for_auto_below_sm90():
    assert [te_runs_flash(b, 8.0) for b in ("auto", "flash", "fused")] == [True, True, False]
    assert [te_runs_flash(b, 9.0) for b in ("auto", "flash", "fused")] == [False, True, False]
    assert not te_runs_flash("flash", 7.5)  # flash-attn 2 needs sm80


@pytest.mark.parametrize(
    ("device", "backend", "given"),
    [
        ("h100-80gb", "auto", "fused"),  # cuDNN either way on sm90
        ("h100-80gb", "fused", "auto"),
        ("h100-80gb", "flash", "flash"),
        ("a100-80gb", "auto", "flash"),  # flash-attn either way on sm80
        ("a100-80gb", "fused", "fused"),
    ],
)
def test_a_backend_running_the_run_config_s_attention_is_accepted(device, backend, given):
    check_against_run(parse_flags(f"--attention-backend {given}"), run(device, backend), "plan")


@pytest.mark.parametrize(
    ("device", "backend", "flags", "words"),
    [
        ("h100-80gb", "auto", "--attention-backend flash", "flash (flash-attn on h100-80gb), the run config has auto"),
        ("a100-80gb", "auto", "--attention-backend fused", "fused (cuDNN's fused attention on a100-80gb)"),
        ("h100-80gb", "flash", "--attention-backend auto", "the run config has flash (timing.te_attention_backend)"),
        # a whole command line (it states --num-layers) leaving the flag out runs Megatron's default auto
        ("h100-80gb", "flash", WHOLE, "not given (Megatron-LM's default auto)"),
        ("h100-80gb", "auto", "--attention-backend unfused", "the run config has training.flash_attention: true"),
    ],
)
def test_a_backend_running_another_attention_is_refused_naming_the_flag(device, backend, flags, words):
    with pytest.raises(InputError) as caught:
        check_against_run(parse_flags(flags), run(device, backend), "plan")
    assert caught.value.field == "--attention-backend"
    assert words in caught.value.problem


def test_unfused_against_a_run_keeping_the_scores_and_the_local_spec_are_accepted():
    check_against_run(parse_flags("--attention-backend unfused"), run("h100-80gb", flash=False), "plan")
    # the local spec's attention is Megatron's own: --attention-backend is read past, as the importer reads it
    check_against_run(parse_flags("--attention-backend flash"), run("h100-80gb", impl="local"), "plan")
    check_against_run(parse_flags(f"{WHOLE} --attention-backend flash"), run("h100-80gb", "flash"), "plan")
    check_against_run(parse_flags(WHOLE), run("h100-80gb", "fused"), "plan")
    # a shorter text that does not state it compares nothing
    check_against_run(parse_flags("--recompute-granularity selective"), run("h100-80gb", "flash"), "plan")
