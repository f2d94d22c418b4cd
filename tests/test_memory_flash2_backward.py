"""What a layer's attention backward holds on Transformer Engine's flash-attn path, by hand.

Read at TE d0067d0d, flash-attn 0251105a and Megatron-LM d98e8a64:
* TE `FlashAttention.forward` (attention/dot_product_attention/backends.py) hands flash-attn bshd
  `x.transpose(0, 1).contiguous()` copies of q, k, v (or `_PrepareQKVForFA`'s one [3, b, s, h, d] copy) and
  returns `output.view(b, s, -1).transpose(0, 1).contiguous()`: in the backward the output projection's
  dgrad, sbhd, reaches flash-attn through views (last dimension contiguous, so `maybe_contiguous` copies
  nothing).
* flash-attn `FlashAttnFunc.backward` (flash_attn/flash_attn_interface.py) allocates `dq, dk, dv =
  torch.empty_like(q), ...` in bshd; `mha_bwd` (csrc/flash_attn/flash_api.cpp) its `softmax_d` and
  `dq_accum` workspace (`workspaces.flash2_backward_workspace_bytes`). The dgrad is freed when the node
  returns.
* The gradients then reach Megatron's `SplitAlongDim` (attention.py `get_query_key_value_tensors`, TE
  utils.py `SplitAlongDim.backward`) as separate tensors, so it `torch.cat`s them into a fresh sbhd dQKV
  (`_PrepareQKVForFA.backward`'s `fa_prepare_bwd` makes the same copy where it ran).
* Beside them all, the gradient that arrived at the layer, `[s·b/(cp·sp), h]`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ppb_core.config.run import load_run_config
from ppb_core.memory.frameworks.megatron import MegatronRules
from ppb_core.memory.model import MemoryModel
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.walk import walk

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from _public import gpt3_7b_run, run_config  # noqa: E402

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _body(run):
    memory = MemoryModel(run)
    return memory, next(layer for layer in walk(run) if layer.node == "BODY")


def test_the_gradients_at_the_kernel_and_after_it():
    # Megatron CI's 7B at TP 4 (no SP), micro-batch 2, s 8192 on A100: T = 16,384 tokens; 32/4 = 8 query heads
    # and 8/4 = 2 key/value heads of 128 a rank; h 4096.
    # arriving gradient 16,384 · 4096 · 2 = 134,217,728; the projection's dgrad and dq each 16,384 · 8 · 128 · 2
    # = 33,554,432; dk + dv 2 · 16,384 · 2 · 128 · 2 = 16,777,216.
    # At the kernel: 134,217,728 + 2 · 33,554,432 + 16,777,216 = 218,103,808.
    # After it (dq, dk, dv and their sbhd cat): 134,217,728 + 2 · (33,554,432 + 16,777,216) = 234,881,024.
    memory, body = _body(run_config(gpt3_7b_run(4, 1, 1, 2, "a100"), "7b-a100"))
    assert memory.setup.te_flash and not memory.setup.sequence_parallel
    assert memory.rules.attention_backward_gradient_bytes(body.kind, memory.setup) == (218_103_808, 234_881_024)


def test_the_moment_takes_the_kernel_s_workspace_in_place_of_the_largest_gradient():
    # The same layer, deterministic (the CI's): workspace softmax_d 2·8·8192·4 = 524,288, nsplits = ⌈108 SMs /
    # (2·8)⌉ = 7 fp32 dq_accum of 2·8192·8·128·4 = 67,108,864, dk/dv_expanded 2·(2·8192·8·128·2) = 67,108,864:
    # 537,395,200. Nothing recomputed, no FSDP: at the kernel 218,103,808 + 537,395,200 = 755,499,008, more than
    # after it (234,881,024) and than the old charge, the largest gradient (the arriving one, 134,217,728) + the
    # workspace = 671,612,928.
    memory, body = _body(run_config(gpt3_7b_run(4, 1, 1, 2, "a100"), "7b-a100"))
    state, switches = memory.option_state(body, "NONE")
    working = memory.working_extra_bytes(body, state, switches, 2, on_saved=True)
    assert working == 134_217_728
    assert memory.attention_workspace_bytes(body) == 537_395_200
    assert memory.attention_backward_bytes(body, state, switches, working) == 755_499_008


def test_no_gradients_stated_off_the_flash_path():
    # cuDNN's FusedAttention (H100 under auto), ring CP (ring.py's workspaces), the local implementation: the old
    # charge, the largest gradient with the workspace on top
    memory, body = _body(run_config(gpt3_7b_run(4, 1, 1, 2, "a100"), "7b-a100"))
    setup = memory.setup
    rules = MegatronRules()
    for changed in (
        {"compute_capability": 9.0},
        {"cp": 2, "cp_variant": "ring"},
        {"transformer_impl": "local"},
        {"flash_attention": False},
    ):
        assert rules.attention_backward_gradient_bytes(body.kind, MemorySetup(**{**setup.__dict__, **changed})) is None
    h100, h100_body = _body(run_config(gpt3_7b_run(4, 1, 1, 2, "h100"), "7b-h100"))
    state, switches = h100.option_state(h100_body, "NONE")
    working = h100.working_extra_bytes(h100_body, state, switches, 2, on_saved=True)
    workspace = h100.attention_workspace_bytes(h100_body)
    assert h100.attention_backward_bytes(h100_body, state, switches, working) == working + workspace


def test_mla_at_the_padded_width():
    # DeepSeek-V3 (configs/deepseek-v3.yaml: 128 heads, q/k 192 and v 128 wide, tp 1, s 4096, micro-batch 1,
    # h 7168) under --attention-backend flash: `_pad_qkv_head_dim` pads v to 192, so q, k, v, their gradients
    # and the output's are 4096 · 128 · 192 · 2 = 201,326,592 each; the arriving gradient 4096 · 7168 · 2 =
    # 58,720,256. At the kernel 58,720,256 + 4 · 201,326,592 = 864,026,624; after it not stated (MLA's
    # up-projections take the gradients apart): 0.
    run = load_run_config(CONFIGS / "deepseek-v3.yaml")
    run = run.model_copy(update={"timing": run.timing.model_copy(update={"te_attention_backend": "flash"})})
    memory, body = _body(run)
    assert memory.setup.te_flash
    assert memory.rules.attention_backward_gradient_bytes(body.kind, memory.setup) == (864_026_624, 0.0)
