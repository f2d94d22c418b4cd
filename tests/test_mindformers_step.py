"""MindFormers' composite AdamW step (ppb_core/timing/mindformers_step.py): its bytes counted by hand from
mindformers/core/optim/adamw.py `_update_run_op` (2388c729a and v1.4.0-beta2 a4dfb8219, the same code),
each MindSpore primitive one kernel reading its inputs and writing its output."""

from __future__ import annotations

import pytest

from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import walk
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.mindformers_step import adamw_step_bytes
from tests.test_timing_iteration import small_run


def test_adamw_bytes_by_hand():
    # fp32 parameter p, gradient g, moments m and v (4 bytes an element); tensors read + written:
    # p·(1 − lr·wd) 1+1; m·β1 1+1; g·(1 − β1) 1+1; the sum 2+1; assign m 1+1; v·β2 1+1;
    # addcmul(v·β2, g, g) 3+1; assign v 1+1; v / bc2 1+1; sqrt 1+1; + eps 1+1; m / denom 2+1;
    # · step_size 1+1; p − update 2+1; assign p 1+1: 35 tensors · 4 = 140 bytes (casts to fp32 removed).
    assert adamw_step_bytes(4, 4) == 140
    # bf16 parameter and gradient: the two casts up (2 + 4 each), the cast back (4 + 2), the parameter's
    # assign at 2 bytes (2 + 2 instead of 8): 140 − 8 + 6 + 6 + 6 + 4 = 154.
    assert adamw_step_bytes(2, 2) == 154


def test_a_mindformers_run_steps_adamw_by_its_passes():
    # One device holds every parameter's states (dp 1, one stage). The fused step (FP32StateAdamWeightDecay):
    # gradient 4 + states 2·12 + 16-bit parameter 2 = 30 bytes, + 4 the norm's read + 4 the zeroing = 38;
    # the composite AdamW at bf16 parameters 154 + 4 + 4 = 162, at fp32 (param_dtype) 140 + 8 = 148;
    # at 5e11 B/s (the test device's element-wise rate, as test_timing_iteration's optimizer test).
    fused = small_run(dp=1, pp=1, framework="mindformers")
    params = sum(MemoryModel(fused).parameters(layer).total for layer in walk(fused))
    assert run_iteration(fused).breakdown["optimizer"] == pytest.approx(38 * params / 5e11, rel=1e-9)
    adamw = small_run(dp=1, pp=1, framework="mindformers", timing={"optimizer_type": "AdamW"})
    assert run_iteration(adamw).breakdown["optimizer"] == pytest.approx(162 * params / 5e11, rel=1e-9)
    fp32 = small_run(dp=1, pp=1, framework="mindformers", timing={"optimizer_type": "AdamW", "param_dtype": "fp32"})
    assert run_iteration(fp32).breakdown["optimizer"] == pytest.approx(148 * params / 5e11, rel=1e-9)


def test_optimizer_type_is_mindformers_only():
    with pytest.raises(InputError, match="optimizer_type"):
        small_run(timing={"optimizer_type": "AdamW"})
    with pytest.raises(InputError, match="optimizer_type"):
        small_run(framework="mindformers", timing={"optimizer_type": "Adam"})
