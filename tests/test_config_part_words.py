"""Settings of one framework's part without that part are refused in one line naming the field (they would
price nothing): torchtitan's [compile] elsewhere, TransformerEngine's attention backend without TE's
attention, the userbuffers' methods and SM margin without Megatron's --tp-comm-overlap."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GPT_SPEC

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError

SPEC = SMALL_GPT_SPEC


def run(framework: str = "megatron", timing: dict | None = None, **training):
    return parse_run_config(
        {
            "name": "r",
            "framework": framework,
            "models": [{"name": "llm", "spec": SPEC}],
            "parallel": {"tp": 2, "sequence_parallel": True} if framework != "torchtitan" else {"dp": 2, "fsdp": True},
            "training": {"seq_length": 2048, "flash_attention": True, **training},
            "device": ROUND_DEVICE,
            "timing": timing or {},
        },
        "r.yaml",
    )


@pytest.mark.parametrize(
    ("framework", "timing", "training", "field", "words"),
    [
        # torchtitan's compile.enable / compile.components: Megatron's and MindFormers' pricing reads neither
        ("megatron", {"compile_loss": True}, {}, "timing.compile_loss", "this run's framework is megatron"),
        ("megatron", {"compile_loss": False}, {}, "timing.compile_loss", "torchtitan's [compile]"),
        ("mindformers", {"torch_compile": True}, {}, "timing.torch_compile", "framework is mindformers"),
        # Megatron's --attention-backend sets NVTE_FLASH_ATTN / NVTE_FUSED_ATTN: only TE's attention reads them
        (
            "megatron",
            {"transformer_impl": "local", "te_attention_backend": "flash"},
            {},
            "timing.te_attention_backend",
            "needs transformer_impl transformer_engine",
        ),
        (
            "megatron",
            {"te_attention_backend": "fused"},
            {"flash_attention": False},
            "timing.te_attention_backend",
            "training.flash_attention is false",
        ),
        # --tp-comm-overlap-cfg is read only under --tp-comm-overlap (overlap.tp > 0), with TE
        ("megatron", {"ub_sm_margin": False}, {}, "timing.ub_sm_margin", "timing.overlap.tp > 0"),
        (
            "megatron",
            {"ub_sm_margin": False, "overlap": {"tp": 1.0}, "transformer_impl": "local"},
            {},
            "timing.ub_sm_margin",
            "needs transformer_impl transformer_engine",
        ),
        (
            "megatron",
            {"tp_comm_overlap_methods": {"fc2_fprop": "ring_exchange"}},
            {},
            "timing.tp_comm_overlap_methods",
            "Megatron's --tp-comm-overlap",
        ),
        # a Megatron word under torchtitan: refused as its neighbours are
        ("torchtitan", {"te_attention_backend": "flash"}, {}, "timing.te_attention_backend", "is Megatron-LM's"),
        ("torchtitan", {"ub_sm_margin": False}, {}, "timing.ub_sm_margin", "is Megatron-LM's"),
    ],
)
def test_a_setting_without_its_part_is_one_line_naming_it(framework, timing, training, field, words):
    with pytest.raises(InputError) as caught:
        run(framework, timing, **training)
    assert caught.value.source == "r.yaml"
    assert caught.value.field == field
    assert words in caught.value.problem
    assert "\n" not in caught.value.line()


def test_the_settings_with_their_part_are_accepted():
    assert run("torchtitan", {"torch_compile": True, "compile_loss": False}).timing.compiled_loss is False
    assert run("torchtitan", {"compile_loss": True}).timing.compiled_loss  # compile.components ["loss"] alone
    assert run(timing={"te_attention_backend": "flash"}).timing.te_attention_backend == "flash"
    said = run(timing={"overlap": {"tp": 1.0}, "ub_sm_margin": False, "tp_comm_overlap_methods": {"fc2_fprop": "bulk"}})
    assert said.timing.ub_sm_margin is False
    # the defaults are every framework's (a dumped run carries them)
    for framework in ("megatron", "torchtitan", "mindformers"):
        assert run(framework, {"ub_sm_margin": True, "te_attention_backend": "auto", "torch_compile": False})


@pytest.mark.parametrize("deterministic", [{"deterministic": True}, {"te_deterministic_attention": True}])
def test_fused_attention_under_determinism_below_sm90_is_refused(deterministic):
    # TE d0067d0d utils.py `get_attention_backend`: FusedAttention (F16_arbitrary_seqlen) "Disabling
    # FusedAttention for determinism reasons" below sm90 when training; Megatron's --attention-backend fused
    # set NVTE_FLASH_ATTN=0 and NVTE_UNFUSED_ATTN=0 (language_module.py): TE has no attention left to run
    raw = {
        "name": "r",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": SPEC}],
        "training": {"seq_length": 2048},
        "device": {"name": "a100-80gb"},
        "timing": {"te_attention_backend": "fused", **deterministic},
    }
    with pytest.raises(InputError) as caught:
        parse_run_config(raw, "r.yaml")
    assert caught.value.field == "timing.te_attention_backend"
    assert "sm80" in caught.value.problem
    # Hopper keeps cuDNN's deterministic backward; flash-attn (>= 2.4.1) has one on sm80; auto picks it
    for device, backend in (("h100-80gb", "fused"), ("a100-80gb", "flash"), ("a100-80gb", "auto")):
        ok = {**raw, "device": {"name": device}, "timing": {"te_attention_backend": backend, **deterministic}}
        assert parse_run_config(ok).timing.attention_deterministic
    # sequences of 512 or fewer may run cuDNN's max-512 sub-backend, which is deterministic
    short = {**raw, "training": {"seq_length": 512}}
    assert parse_run_config({**short, "models": [{"name": "llm", "spec": {**SPEC, "max_position_embeddings": 512}}]})
