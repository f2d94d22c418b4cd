"""torchtitan's FSDP2 under PP makes a chunk's fp32 gradient accumulators in that chunk's first backward.

FSDP2's `FSDPParamGroup.post_backward` (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py) calls
`FSDPParam.to_accumulated_grad_if_needed` when the pipeline turns the gradient sync off (stage.py
`backward_maybe_with_nosync`): the fp32 copy of the unit's bf16 gradients exists from the first micro-batch's
backward, not from the forward. Hand counts on DENSE (tests/test_memory_runs.py) with FSDP over 2 and PP 2:
stage 0 holds the HEAD (1024·64 = 65,536 parameters) and two blocks (41,088 each), so its accumulators are
(65,536 + 2·41,088)·4 = 590,848 bytes. Stage 0's 1F1B order at 2 micro-batches is F0 F1 B0 B1: two micro-batches
are held before B0 makes them, one after.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_memory_runs import DENSE, make_run, model

from ppb_core.memory import run_stage_peaks
from ppb_core.memory.frameworks.torchtitan import TorchtitanRules
from ppb_core.model.walk import walk

STAGE0_ACCUMULATORS = (65536 + 2 * 41088) * 4  # 590,848


def _run(seq: int, schedule: str = "1f1b"):
    return make_run(
        DENSE,
        framework="torchtitan",
        parallel={"dp": 2, "pp": 2, "schedule": schedule},
        training={"seq_length": seq, "micro_batches": 2},
    )


def _before(run, monkeypatch):
    """The stage peaks with the accumulators charged from the first forward (the rule switched off)."""
    with monkeypatch.context() as patched:
        patched.setattr(TorchtitanRules, "first_backward_bytes", lambda self, params, setup: 0.0)
        return run_stage_peaks(run, model(run))


def test_stage_0_holds_the_head_and_two_blocks():
    run = _run(64)
    nodes = [layer.node for layer in walk(run) if layer.stage == 0]
    assert nodes == ["HEAD", "BODY", "BODY"]
    memory = model(run)
    assert sum(memory.parameters(layer).total for layer in walk(run) if layer.stage == 0) == 65536 + 2 * 41088
    assert memory.rules.first_backward_bytes(memory.parameters(next(iter(walk(run)))), memory.setup) == 65536 * 4


def test_long_sequences_peak_before_the_first_backward_without_the_accumulators(monkeypatch):
    # at s 8192 one micro-batch's activations outweigh 590,848 bytes, so the peak stays at two micro-batches held
    # (as B0 starts), now without the accumulators it has not made yet
    run = _run(8192)
    before, after = _before(run, monkeypatch)[0], run_stage_peaks(run)[0]
    assert before.in_flight == after.in_flight == (2,)
    assert before.static_bytes - after.static_bytes == pytest.approx(STAGE0_ACCUMULATORS, abs=1e-6)
    assert before.kept_bytes - after.kept_bytes == pytest.approx(STAGE0_ACCUMULATORS, abs=1e-6)


def test_short_sequences_peak_after_the_first_backward_with_them(monkeypatch):
    # at s 64 one micro-batch's activations are below 590,848 bytes: the peak is after B0, one micro-batch held
    # and every accumulator made, the static memory whole
    run = _run(64)
    before, after = _before(run, monkeypatch)[0], run_stage_peaks(run)[0]
    one = before.activation_bytes / 2  # the two micro-batches the earlier rule held, one each
    assert one < STAGE0_ACCUMULATORS
    assert (before.in_flight, after.in_flight) == ((2,), (1,))
    assert after.static_bytes == pytest.approx(before.static_bytes, abs=1e-6)
    assert after.activation_bytes == pytest.approx(one, rel=1e-12)


def test_the_last_stage_and_megatron_are_unchanged(monkeypatch):
    # the last stage runs F0 B0 F1 B1: its most held (one) is reached after B0 too, so nothing moves
    run = _run(8192)
    before, after = _before(run, monkeypatch)[1], run_stage_peaks(run)[1]
    assert dataclasses.asdict(before) == dataclasses.asdict(after)
    megatron = make_run(DENSE, parallel={"pp": 2}, training={"seq_length": 8192, "micro_batches": 2})
    memory = model(megatron)
    made = [memory.rules.first_backward_bytes(memory.parameters(layer), memory.setup) for layer in walk(megatron)]
    assert made == [0.0] * len(made)
