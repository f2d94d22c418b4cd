"""cuDNN's deterministic attention backward on Hopper and sm100: its dS workspace in the stage peaks, by hand.

TransformerEngine (release_v2.16) runs its cuDNN backward with the deterministic algorithm on sm90
under NVTE_ALLOW_NONDETERMINISTIC_ALGO=0, and release 2.18 on sm100 too from cuDNN 9.18.1
(fused_attn.cpp `nvte_get_fused_attn_backend`); cudnn-frontend v1.22.0 (`CompositeSDPABackwardNode`)
then takes the dP-workspace path, b·h·⌈s_q/64⌉64·⌈s_kv/64⌉64·2 bytes, which TE allocates from
PyTorch's caching allocator (`fused_attn_bwd`, `allocateSpace`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ppb_core.memory.frameworks.megatron import MegatronRules
from ppb_core.memory.frameworks.workspaces import cudnn_dp_workspace_bytes, flash2_backward_workspace_bytes
from ppb_core.memory.model import MemoryModel, run_stage_peaks, run_working_set_bytes
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.walk import walk
from ppb_core.schedules import backward_vectors

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from _public import gpt3_7b_run, run_config  # noqa: E402

GIB = 2**30


def _run(tp: int, pp: int, vpp: int, mbs: int, gpu: str = "h100", deterministic: bool = True):
    raw = gpt3_7b_run(tp, pp, vpp, mbs, gpu)
    raw["timing"] = {**raw["timing"], "deterministic": deterministic}
    return run_config(raw, f"7b-{gpu}")


def test_the_workspace_pads_queries_and_keys_to_64():
    # 32 heads of 8192 (a multiple of 64): 32 · 8192² · 2 = 4 GiB; 100 → 128 each: 2 · 128² · 2 = 65,536
    assert cudnn_dp_workspace_bytes(32, 8192, 8192) == 4 * GIB
    assert cudnn_dp_workspace_bytes(2, 100, 100) == 65_536


def test_megatron_holds_it_only_for_te_s_deterministic_cudnn_backward_on_hopper_and_sm100():
    rules = MegatronRules()
    run = _run(4, 1, 1, 2)
    memory = MemoryModel(run)
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    # TP 4: 32/4 = 8 heads, micro-batch 2: 16 · 8192² · 2 = 2 GiB
    assert memory.attention_workspace_bytes(body) == 2 * GIB
    setup = memory.setup
    assert rules.attention_workspace_bytes(body.kind, setup) == 2 * GIB
    # without the flag cuDNN's plain backward; Megatron's own attention (--transformer-impl local) no cuDNN;
    # sm120 has no deterministic fused backend (TE 2.18)
    for changed in (
        {"deterministic": False},
        {"transformer_impl": "local"},
        {"compute_capability": 12.0},
    ):
        assert rules.attention_workspace_bytes(body.kind, MemorySetup(**{**setup.__dict__, **changed})) == 0
    # sm100 (GB200, B200): the same path and size (TE 2.18 keeps cuDNN there from 9.18.1)
    assert (
        rules.attention_workspace_bytes(body.kind, MemorySetup(**{**setup.__dict__, "compute_capability": 10.0}))
        == 2 * GIB
    )
    # ring CP 2: each step's call is 4096 queries against 4096 keys: 16 · 4096² · 2 = 0.5 GiB;
    # Ulysses CP 2: 8 of the 16 (sequence, head) pairs, all 8192: 8 · 8192² · 2 = 1 GiB
    ring = MemorySetup(**{**setup.__dict__, "cp": 2})
    ulysses = MemorySetup(**{**setup.__dict__, "cp": 2, "cp_variant": "ulysses"})
    assert rules.attention_workspace_bytes(body.kind, ring) == GIB / 2
    assert rules.attention_workspace_bytes(body.kind, ulysses) == GIB
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    assert memory.attention_workspace_bytes(tail) == 0


def test_on_sm80_flash_attn_2_s_backward_takes_its_fp32_accumulators():
    # TE on sm80 runs flash-attn 2 (utils.py get_attention_backend: FusedAttention preferred from sm90 only,
    # cuDNN's deterministic backward dropped below sm90); its mha_bwd (flash_api.cpp) allocates softmax_d, fp32
    # [b, heads, s_q rounded to 128], and dq_accum, fp32 [b, s_q rounded, heads, d rounded to 32], nsplits =
    # ⌈SMs/(b·heads)⌉ of it when deterministic. The 7B at TP 4, micro-batch 2: 8 heads of 128, s 8192; with
    # 132 SMs (the H100 setup's) nsplits = ⌈132/16⌉ = 9: 2·8·8192·4 = 524,288 + 9·(2·8192·8·128·4 = 67,108,864)
    # = 603,979,776; not deterministic: one accumulator, 524,288 + 67,108,864. Its 2 key/value heads a rank (GQA
    # 32/8 over TP 4) add dk_expanded and dv_expanded, 2·(2·8192·8·128·2) = 67,108,864, either way
    rules = MegatronRules()
    run = _run(4, 1, 1, 2)
    setup = MemoryModel(run).setup
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    ampere = MemorySetup(**{**setup.__dict__, "compute_capability": 8.0})
    assert setup.sm_count == 132
    assert rules.attention_workspace_bytes(body.kind, ampere) == 524_288 + 9 * 67_108_864 + 67_108_864
    plain = MemorySetup(**{**ampere.__dict__, "deterministic": False})
    assert rules.attention_workspace_bytes(body.kind, plain) == 524_288 + 67_108_864 + 67_108_864
    assert flash2_backward_workspace_bytes(1, 1, 100, 200, 108, True) == 128 * 4 * (1 + 108 * 256)


def test_backward_vectors_follow_the_schedule():
    # Megatron's interleaved 1F1B, P 4, V 2, m 8, the last stage: F0.0-3, F1.0, then B1.0 at (4, 1),
    # chunk 1's backwards alternate with its forwards at (4, 1); F0.4 then B0.0 at (5, 0).
    assert backward_vectors("interleaved", 4, 2, 8)[3] == [((5, 0), 0), ((4, 1), 1)]
    # 1F1B, P 2, m 3: stage 0 runs F F B F B B: its backwards start at (2,) and (1,): (2,) is maximal
    assert backward_vectors("1f1b", 2, 1, 3) == [[((2,), 0)], [((1,), 0)]]


def test_a_stage_without_the_loss_holds_the_workspace_on_its_backward():
    # Megatron CI's 7B, TP 1 PP 4, 8 chunks of 1 layer: 32 heads · 8192² · 2 = 4 GiB while one layer's
    # attention backward runs, on top of that layer's working set at the stage's peak vector.
    plain, det = (run_stage_peaks(_run(1, 4, 8, 1, deterministic=flag)) for flag in (False, True))
    for stage in (0, 1, 2):
        assert det[stage].kept_bytes == pytest.approx(plain[stage].kept_bytes)
        assert det[stage].working_bytes == pytest.approx(plain[stage].working_bytes + 4 * GIB)
        assert det[stage].moment == "backward"
    # A100 (sm80): TE runs flash-attn 2, whose deterministic backward takes nsplits = ⌈108 SMs / 32 heads⌉ = 4
    # fp32 dQ accumulators of 8192·32·128·4 = 134,217,728 bytes where the plain one takes one: 3 more
    a100 = run_stage_peaks(_run(1, 4, 8, 1, gpu="a100"))
    a100_plain = run_stage_peaks(_run(1, 4, 8, 1, gpu="a100", deterministic=False))
    for det_peak, plain_peak in zip(a100, a100_plain, strict=True):
        if det_peak.moment == "backward":
            assert det_peak.working_bytes - plain_peak.working_bytes == pytest.approx(3 * 134_217_728)


def test_on_the_loss_s_stage_the_tail_is_freed_before_the_workspace():
    # The last stage's first backward is chunk 7's (the TAIL's) at (4, …, 4, 1): the loss's backward
    # frees the TAIL's kept 4.13 GiB (the fp32 softmax of 8192 × 131,200 logits, 4.0 GiB, the final
    # norm's input and output) before layer 31's attention backward takes 4 GiB, so that moment,
    # kept − 4.13 + 0.25 (the layer's working set) + 4, stays under the loss's kept + 2.0. Chunks 0-6
    # run their backwards with chunk 7 empty. The peak is the loss's, as without the flag: the
    # measured 56.55 GiB (bench/public_memory.py) against ppb's 56.11 says no 4 GiB rides on it.
    run = _run(1, 4, 8, 1)
    memory = MemoryModel(run)
    plain = run_stage_peaks(_run(1, 4, 8, 1, deterministic=False))[3]
    det = run_stage_peaks(run, memory)[3]
    assert det.moments == pytest.approx(plain.moments)
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    tail_kept = memory.state_memory(tail, *memory.option_state(tail, "NONE")).activation_bytes
    assert tail_kept / GIB == pytest.approx(4.129, abs=1e-3)
    body = next(layer for layer in walk(run) if layer.node == "BODY" and layer.stage == 3)
    state, switches = memory.option_state(body, "NONE")
    body_working = memory.working_extra_bytes(body, state, switches, 2, on_saved=True)
    at_workspace = det.kept_bytes - tail_kept + body_working + 4 * GIB
    assert at_workspace < det.moments["loss"]
    # the balancer charges every stage the run's largest working set: without the flag the loss's
    # (2.0 GiB), with it a body's at full recompute (the most any option rebuilds) + 4 GiB,
    # conservative on the loss's stage
    full_working = memory.working_extra_bytes(body, *memory.option_state(body, "FULL"), 2, on_saved=True)
    assert run_working_set_bytes(run, memory) == pytest.approx(full_working + 4 * GIB)
    assert run_working_set_bytes(_run(1, 4, 8, 1, deterministic=False)) == pytest.approx(memory.loss_bytes(tail))
