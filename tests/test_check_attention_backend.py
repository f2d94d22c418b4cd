"""`ppb check --plan` compares Megatron's `--attention-backend` with the run config, as `ppb import megatron`
reads it (megatron_import.py `_flash`, `_timing`; Megatron-LM's default auto, d98e8a64): unfused and local keep
the scores (`training.flash_attention` false), auto, flash and fused not (`_check_attention_backend`), and
which of them against `timing.te_attention_backend` (`_check_memory_switches`; tests/test_check_launch_scripts.py
checks that on Megatron-LM's own scripts)."""

from __future__ import annotations

import pytest
from small_models import SMALL_GPT_SPEC

from ppb_core.balance.megatron import parse_flags
from ppb_core.balance.megatron_run import check_against_run
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError

SPEC = SMALL_GPT_SPEC
# a whole command line of the run below (it states --num-layers), without --attention-backend
WHOLE = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --ffn-hidden-size 4096 --swiglu "
    "--untie-embeddings-and-output-weights --seq-length 2048 --bf16 --use-distributed-optimizer "
    "--micro-batch-size 1 --tokenizer-type NullTokenizer --vocab-size 4096"
)


def run(flash: bool = True, impl: str = "transformer_engine", backend: str = "auto"):
    timing = {"transformer_impl": impl} | ({"te_attention_backend": backend} if backend != "auto" else {})
    return parse_run_config(
        {
            "name": "r",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": SPEC}],
            "training": {"seq_length": 2048, "flash_attention": flash},
            "device": {"name": "h100-80gb"},
            "timing": timing,
        }
    )


@pytest.mark.parametrize(
    ("flags", "flash", "words"),
    [
        ("--attention-backend unfused", True, "unfused, the run config has training.flash_attention: true"),
        ("--attention-backend local", True, "local, the run config has training.flash_attention: true"),
        ("--attention-backend fused", False, "fused, the run config has training.flash_attention: false"),
        # a whole command line leaving the flag out runs Megatron's default auto, a fused kernel
        (WHOLE, False, "not given (Megatron-LM's default auto), the run config has training.flash_attention: false"),
    ],
)
def test_a_backend_keeping_other_scores_than_the_run_config_is_refused_naming_the_flag(flags, flash, words):
    with pytest.raises(InputError) as caught:
        check_against_run(parse_flags(flags), run(flash), "plan")
    assert caught.value.field == "--attention-backend"
    assert words in caught.value.problem


def test_a_backend_keeping_the_run_config_s_scores_is_accepted():
    check_against_run(parse_flags("--attention-backend unfused"), run(False), "plan")
    check_against_run(parse_flags("--attention-backend local"), run(False), "plan")
    check_against_run(parse_flags(f"{WHOLE} --attention-backend flash"), run(backend="flash"), "plan")
    check_against_run(parse_flags(WHOLE), run(), "plan")
    # the local spec's attention is Megatron's own: the importer reads --attention-backend past there
    check_against_run(parse_flags("--attention-backend unfused"), run(impl="local"), "plan")
    # a shorter text that does not state it compares nothing
    check_against_run(parse_flags("--recompute-granularity selective"), run(False), "plan")
