"""Flash-attn 2 under Transformer Engine on sm80 keeps the attention's output twice, by hand.

TE's `FlashAttention.forward` (transformer_engine/pytorch/attention/dot_product_attention/backends.py at
d0067d0d; attention.py at v1.12 and v2.2 alike) hands flash-attn bshd q, k, v and returns
`output.view(b, s, -1).transpose(0, 1)` made `.contiguous()`: a fresh sbhd copy, which the output
projection saves as its input. flash-attn's `FlashAttnFunc.forward` (Dao-AILab/flash-attention
flash_attn/flash_attn_interface.py at 00530025, every FA2 function alike) saves its own bshd `out_padded`
beside q, k, v and the log-sum-exp. cuDNN's `FusedAttention` (sm90 on) returns a view of the sbhd output it
saved: one copy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.config.run import load_run_config
from ppb_core.memory.activations import body_terms
from ppb_core.memory.frameworks.megatron import MegatronRules, flash2_output_terms
from ppb_core.memory.model import MemoryModel, run_stage_peaks
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.walk import walk

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from _public import gpt3_7b_run, run_config  # noqa: E402

MIB = 2**20


def _run(tp: int, pp: int, vpp: int, mbs: int, gpu: str):
    return run_config(gpt3_7b_run(tp, pp, vpp, mbs, gpu), f"7b-{gpu}")


def test_the_second_copy_is_one_output_of_the_layer_on_sm80_only():
    # Megatron CI's 7B at TP 4, micro-batch 2, s 8192: 32/4 = 8 heads of 4096/32 = 128 a rank:
    # 2 · 8192 · 8 · 128 · 2 bytes = 33,554,432 (32 MiB), switched with the softmax statistics
    run = _run(4, 1, 1, 2, "a100")
    memory = MemoryModel(run)
    setup = memory.setup
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    (term,) = flash2_output_terms(body.kind, setup)
    assert term.bytes == 33_554_432
    assert term.switch == "softmax"
    rules = MegatronRules()
    terms = tuple(body_terms(body.kind, setup))
    with_copy = rules.body_terms(body.kind, setup, terms)
    on_h100 = rules.body_terms(body.kind, MemorySetup(**{**setup.__dict__, "compute_capability": 9.0}), terms)
    assert sum(t.bytes for t in with_copy) - sum(t.bytes for t in on_h100) == 33_554_432
    # none on Hopper (cuDNN), Blackwell, without flash attention, under --transformer-impl local, under Ulysses CP
    for changed in (
        {"compute_capability": 9.0},
        {"compute_capability": 10.0},
        {"flash_attention": False},
        {"transformer_impl": "local"},
        {"cp": 2, "cp_variant": "ulysses"},
    ):
        assert flash2_output_terms(body.kind, MemorySetup(**{**setup.__dict__, **changed})) == ()
    # ring CP 2: AttnFuncWithCPAndKVP2P saves its bshd output and TE copies it to sbhd; this rank's 8192/2 queries:
    # 2 · 4096 · 8 · 128 · 2 = 16,777,216
    raw = gpt3_7b_run(4, 1, 1, 2, "a100")
    raw["parallel"] = {**raw["parallel"], "cp": 2, "dp": 1}
    raw["training"] = {**raw["training"], "micro_batches": 4}
    ring_setup = MemoryModel(run_config(raw, "7b-a100-cp2")).setup
    assert ring_setup.cp == 2 and ring_setup.cp_variant == "ring"
    (term,) = flash2_output_terms(body.kind, ring_setup)
    assert term.bytes == 16_777_216


def test_every_layer_in_flight_keeps_it():
    # TP 4 PP 1, one micro-batch in flight at the loss: 32 layers · 32 MiB = 1024 MiB more activations on A100
    # than on H100 (the body's other terms and the TAIL's do not depend on the device)
    a100, h100 = (run_stage_peaks(_run(4, 1, 1, 2, gpu))[0] for gpu in ("a100", "h100"))
    assert a100.in_flight == h100.in_flight == (1,)
    assert a100.activation_bytes - h100.activation_bytes == pytest.approx(1024 * MIB)
    # TP 2 PP 2 at micro-batch 2 (8 / (2 · dp 2) = 2 micro-batches): the last stage's 16 layers at the loss with one
    # micro-batch in flight keep 16 · (2 · 8192 · 16 heads · 128 · 2 bytes = 64 MiB) = 1024 MiB more on A100
    a100, h100 = (run_stage_peaks(_run(2, 2, 1, 2, gpu))[1] for gpu in ("a100", "h100"))
    assert a100.in_flight == h100.in_flight == (1,) and a100.body_layers == 16
    assert a100.activation_bytes - h100.activation_bytes == pytest.approx(16 * 64 * MIB)


def test_one_sequence_a_micro_batch_keeps_one_output():
    # micro-batch 1: flash-attn's bshd output [1, s, h·d] viewed and transposed to [s, 1, h·d] is contiguous (PyTorch
    # skips size-1 dimensions), so TE's `.contiguous()` returns it and the output projection saves that tensor.
    # Megatron CI's 7B at TP 1 PP 4 (micro-batch 1): A100 and H100 keep the same activations; its golden values
    # (46fdcd5b7e, A100 49.081 / 56.335 GiB; 194b2be238, H100 49.108 / 56.362) lie 0.03 GiB apart.
    a100, h100 = (run_stage_peaks(_run(1, 4, 8, 1, gpu))[3] for gpu in ("a100", "h100"))
    assert a100.in_flight == h100.in_flight == (4, 4, 4, 4, 4, 4, 4, 1)
    assert a100.activation_bytes == h100.activation_bytes
    run = _run(1, 4, 8, 1, "a100")
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    setup = MemoryModel(run).setup
    assert setup.te_flash and flash2_output_terms(body.kind, setup) == ()
    # at micro-batch 2 the same layer keeps the copy: 2 · 8192 · 32 · 128 · 2 bytes = 128 MiB
    (term,) = flash2_output_terms(body.kind, MemorySetup(**{**setup.__dict__, "micro_batch_size": 2}))
    assert term.bytes == 128 * MIB
    # under hierarchical CP the ring saved its own output and returns the all-to-all's: two tensors at micro-batch 1
    # too (this rank's 8192 / 4 queries: 2048 · 32 · 128 · 2 = 16 MiB)
    hierarchical = MemorySetup(**{**setup.__dict__, "cp": 4, "cp_variant": "hierarchical", "cp_a2a": 2})
    (term,) = flash2_output_terms(body.kind, hierarchical)
    assert term.bytes == 16 * MIB


def test_megatron_s_attention_backend_flag_picks_te_s_attention():
    # language_module.py `_set_attention_backend` (d98e8a64): --attention-backend flash sets NVTE_FLASH_ATTN=1,
    # NVTE_FUSED_ATTN=0, fused the reverse; auto leaves TE's choice (flash-attn below sm90, cuDNN from sm90)
    base = (
        "pretrain_gpt.py --num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
        "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 --bf16 "
        "--vocab-size 50304 --tokenizer-type NullTokenizer"
    )
    for flags, gpu, backend, flash in (
        ("", "h100-80gb", "auto", False),
        ("", "a100-80gb", "auto", True),
        ("--attention-backend flash", "h100-80gb", "flash", True),
        ("--attention-backend fused", "a100-80gb", "fused", False),
        ("--attention-backend auto", "h100-80gb", "auto", False),
    ):
        run = run_config_of(import_megatron(f"{base} {flags}", 8, gpu), "launch")
        assert run.timing.te_attention_backend == backend
        assert MemoryModel(run).setup.te_flash is flash


def test_on_hopper_the_flash_backend_keeps_two_outputs_and_takes_flash_attn_s_workspace():
    # The 7B at TP 4 on H100 under --attention-backend flash: the second output, 32 MiB a layer as on A100; the
    # deterministic backward is flash-attn 2's, not cuDNN's dS: softmax_d 2·8·8192·4 = 524,288 and ⌈132/16⌉ = 9
    # dQ accumulators of 2·8192·8·128·4 = 67,108,864, with dk/dv expanded (GQA, 2 KV heads a rank)
    # 2·(2·8192·8·128·2) = 67,108,864; auto (cuDNN) keeps one output and takes 16 · 8192² · 2 = 2 GiB
    raw = gpt3_7b_run(4, 1, 1, 2, "h100")
    raw["timing"] = {**raw["timing"], "te_attention_backend": "flash"}
    flash = MemoryModel(run_config(raw, "7b-h100-flash"))
    auto = MemoryModel(_run(4, 1, 1, 2, "h100"))
    body = next(layer for layer in walk(auto.run) if layer.node == "BODY")
    assert flash.setup.te_flash and not auto.setup.te_flash
    (term,) = flash2_output_terms(body.kind, flash.setup)
    assert term.bytes == 33_554_432
    assert flash2_output_terms(body.kind, auto.setup) == ()
    assert flash.attention_workspace_bytes(body) == 524_288 + 9 * 67_108_864 + 67_108_864
    assert auto.attention_workspace_bytes(body) == 2 * 2**30


def test_the_core_attn_offload_group_takes_flash_attn_s_own_output():
    # fine_grained_activation_offload.py (d98e8a64): the `core_attn` group captures what the attention core saves,
    # flash-attn's bshd output among it (32 MiB a layer for the 7B at TP 4 on A100, over the 1024·1024-element
    # minimum: 2·8192·8·128 = 16,777,216 elements)
    raw = gpt3_7b_run(4, 1, 1, 2, "a100")
    raw["training"] = {**raw["training"], "offload_modules": ["core_attn"]}
    memory = MemoryModel(run_config(raw, "7b-a100-offload"))
    body = next(layer for layer in walk(memory.run) if layer.node == "BODY")
    held = memory.state_memory(body, *memory.option_state(body, "NONE"))
    assert "attention.flash_output" not in {t.op for t in held.terms}
    # query 32 MiB, key and value 8 MiB each (2 KV heads a rank), the flash output 32 MiB; the statistics,
    # 2·8·8192 = 131,072 elements, stay under the minimum (`tensor_need_offloading_checker`)
    assert held.offloaded_bytes == pytest.approx((32 + 8 + 8 + 32) * MIB)


def test_mla_under_flash_keeps_the_padded_output_and_v_s_zeros():
    # DeepSeek-V3 (configs/deepseek-v3.yaml: 128 heads, qk 128 + 64 = 192, v 128, TP 1, s 4096, mbs 1) with
    # `--attention-backend flash` on H100. TE d0067d0d: get_attention_backend (utils.py:926-951) keeps flash-attn
    # 2 for the padded dimension max(192, 128) = 192 (% 8 == 0, <= 256); DotProductAttention.forward
    # (dot_product_attention.py:2177-2188) pads v with `_pad_qkv_head_dim` (:250-260, F.pad to 192); FlashAttention.
    # forward (backends.py:940-943) makes the bshd copies flash-attn saves, and its output is 192 wide;
    # `_trim_output` (:263-267, called at :2226-2227) slices TE's sbhd copy to 128 and reshape copies it.
    # flash-attn's output: 4096 · 128 · 192 · 2 bytes = 201,326,592;
    # v's zeros: 4096 · 128 · (192 − 128) · 2 = 67,108,864
    raw = load_run_config(Path(__file__).resolve().parent.parent / "configs" / "deepseek-v3.yaml")
    run = raw.model_copy(update={"timing": raw.timing.model_copy(update={"te_attention_backend": "flash"})})
    setup = MemoryModel(run).setup
    assert setup.te_flash
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    assert body.kind.attention.is_mla
    output, padding = flash2_output_terms(body.kind, setup)
    assert (output.op, output.bytes, output.switch) == ("attention.flash_output", 201_326_592, "softmax")
    assert (padding.op, padding.bytes, padding.switch) == ("attention.flash_padding", 67_108_864, "softmax")
    # under auto on H100 cuDNN runs MLA (`hd_hd_hd` layout) and keeps one output, no padding
    assert flash2_output_terms(body.kind, MemorySetup(**{**setup.__dict__, "te_attention_backend": "auto"})) == ()
