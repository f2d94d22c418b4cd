"""Megatron's per-iteration bookkeeping (ppb_core/timing/reporting.py), derived by hand from
Megatron-LM's training loop (training.py `train_step`, `train`; clip_grads.py; calc_params_l2_norm)."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import walk
from ppb_core.timing.comm import Group, Links
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.reporting import (
    DATA,
    EXPERT_MODEL_PARALLEL,
    MODEL_PARALLEL,
    STATISTICS,
    WORLD,
    bookkeeping,
    pass_bytes,
    scalar_all_reduce_seconds,
    scalar_broadcast_seconds,
    weight_hash_seconds,
)


def run_with(timing: dict, framework: str = "megatron", dtype: str = "bf16", m: int = 4):
    raw = {
        "name": "small",
        "framework": framework,
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 1, "tp": 1, "pp": 1},
        "training": {"seq_length": 2048, "micro_batch_size": 1, "micro_batches": m, "dtype": dtype},
        "device": ROUND_DEVICE,
        "timing": timing,
    }
    return parse_run_config(raw)


def test_statistics_passes_by_hand():
    # 1M parameters' states held of 4M parameters held, fp32 main gradients. calc_params_l2_norm reads
    # the fp32 main copy (bf16): 4 B · 1M; count_zeros_fp32's `grad != 0` reads 4 B and writes a 1 B
    # bool, its sum reads the bool: 6 B · 1M. Without bf16 the norm reads the held parameters
    # themselves: fp16, 2 B · 4M.
    both = run_with({"log_params_norm": True, "log_num_zeros_in_grad": True})
    assert pass_bytes(1e6, 4e6, 4, "bf16", both) == pytest.approx(10e6)
    assert pass_bytes(1e6, 4e6, 4, "bf16", run_with({"log_params_norm": True})) == pytest.approx(4e6)
    assert pass_bytes(1e6, 4e6, 4, "bf16", run_with({"log_num_zeros_in_grad": True})) == pytest.approx(6e6)
    fp16 = run_with({"log_params_norm": True}, dtype="fp16")
    assert pass_bytes(1e6, 4e6, 4, "fp16", fp16) == pytest.approx(8e6)
    assert pass_bytes(1e6, 4e6, 4, "bf16", run_with({})) == 0.0


def test_scalar_all_reduces_and_syncs_by_flag():
    # Always: the grad norm over the statistics group; update_successful, grad norm and learning-rate
    # maxima over the model-parallel group; the loss over dp·cp. Syncs: those three maxima and the loss
    # scale (4), and isnan + isinf of each of the 3 micro-batches' losses (6).
    plain = bookkeeping(run_with({}), 0.0, 3, moe=False)
    assert sorted(plain.all_reduces) == sorted([STATISTICS, MODEL_PARALLEL, MODEL_PARALLEL, MODEL_PARALLEL, DATA])
    assert plain.syncs == 4 + 6
    # The zero count: its sum over the statistics group and maximum over model parallel, two .item();
    # the parameter norm: dp·cp then model parallel (experts' group too in a MoE), one .item().
    flags = {"log_params_norm": True, "log_num_zeros_in_grad": True, "check_for_nan_in_grad": False}
    logged = bookkeeping(run_with(flags), 0.0, 3, moe=True)
    extra = [STATISTICS, MODEL_PARALLEL, DATA, MODEL_PARALLEL, EXPERT_MODEL_PARALLEL]
    assert sorted(logged.all_reduces) == sorted(list(plain.all_reduces) + extra)
    assert logged.syncs == 4 + 2 + 1
    # --exit-duration-in-mins: the exit decision all-reduced over every rank and read, each iteration.
    timed = bookkeeping(run_with({"exit_duration_in_mins": 230.0}), 0.0, 3, moe=False)
    assert sorted(timed.all_reduces) == sorted([*plain.all_reduces, WORLD])
    assert timed.syncs == plain.syncs + 1


def test_scalar_all_reduce_latency_by_hand():
    links = Links(1e11, 1e10, 5e-6, 8, {}, inter_node_latency_s=5e-6)
    # 8 ranks in one node: 2·7 steps of 5 us = 70 us (a ring and NCCL's chain alike).
    assert scalar_all_reduce_seconds(Group(8, 8), links) == pytest.approx(70e-6)
    # 64 ranks, 8 per node over 8 nodes: 70 us in the node + 2·log2(8) = 6 tree steps of 5 + 5 us.
    assert scalar_all_reduce_seconds(Group(64, 64), links) == pytest.approx(130e-6)
    assert scalar_all_reduce_seconds(Group(1, 1), links) == 0.0


def test_the_bookkeeping_of_a_run_by_hand():
    # One device (no collectives; the round device has no latency): every parameter P's states held,
    # fp32 gradients: 10 B · P at 5e11 B/s; syncs 4 + 2 + 1 + 2·4 (4 micro-batches) at 5 us.
    flags = {"log_params_norm": True, "log_num_zeros_in_grad": True}
    run = run_with(flags)
    params = sum(MemoryModel(run).parameters(layer).total for layer in walk(run))
    expected = 10 * params / 5e11 + 15 * 5e-6
    assert run_iteration(run).breakdown["bookkeeping"] == pytest.approx(expected, rel=1e-9)
    # Megatron's defaults log neither: only the syncs, 4 + 8.
    assert run_iteration(run_with({})).breakdown["bookkeeping"] == pytest.approx(12 * 5e-6, rel=1e-9)
    # torchtitan has none of Megatron's statistics: its run refuses the flags (config/run.py MEGATRON_TIMING)
    # and, at the defaults, keeps no bookkeeping of Megatron's (its clip's all-reduces: no latency here)
    with pytest.raises(InputError) as caught:
        run_with(flags, framework="torchtitan")
    assert caught.value.field == "timing.log_num_zeros_in_grad"
    assert run_iteration(run_with({}, framework="torchtitan")).breakdown["bookkeeping"] == 0.0


def test_per_token_loss_divides_every_held_gradient_after_the_reduction():
    """finalize_model_grads.py `finalize_model_grads` (Megatron-LM d98e8a64): the token count broadcast
    over the pipeline (NCCL's ring, g−1 steps) and all-reduced over dp·cp, then `grad_data *= 1/n`."""
    links = Links(1e11, 1e10, 5e-6, 8, {}, inter_node_latency_s=5e-6)
    # 4 stages in one node: 3 steps of 5 us; 4 stages 8 ranks apart over 4 nodes: 3 steps, 3 between nodes
    assert scalar_broadcast_seconds(Group(4, 4), links) == pytest.approx(15e-6)
    assert scalar_broadcast_seconds(Group(4, 32), links) == pytest.approx(30e-6)
    assert scalar_broadcast_seconds(Group(1, 1), links) == 0.0
    # 1M held gradients, fp32: read and write each, 8 MB
    per_token = run_with({"calculate_per_token_loss": True})
    assert pass_bytes(0.0, 0.0, 4, "bf16", per_token, gradients_held=1e6) == pytest.approx(8e6)
    work = bookkeeping(per_token, 0.0, 3, moe=False)
    assert work.broadcasts == ("pipeline",)
    assert work.all_reduces[-1] == DATA
    # one device: every parameter P's gradient held, fp32: 8 · P bytes at 5e11 B/s beside Megatron's
    # default syncs (4 + 2 · 4 micro-batches, 5 us each); the round device has no latency
    params = sum(MemoryModel(per_token).parameters(layer).total for layer in walk(per_token))
    expected = 8 * params / 5e11 + 12 * 5e-6
    assert run_iteration(per_token).breakdown["bookkeeping"] == pytest.approx(expected, rel=1e-9)


def test_weight_hash_check_every_iteration_by_hand():
    """training.py `post_training_step_callbacks` and core/utils.py `check_param_hashes_across_dp_replicas`
    (Megatron-LM d98e8a64): at interval 1 every parameter is copied to the host as fp32 and SHA-1 hashed
    there; OpenSSL's SHA-extension rate, 1.93 cycles a byte (sha1-x86_64.pl's table), at the host's clock."""
    device = dict(ROUND_DEVICE, host_boost_ghz=2.0)

    def on(timing: dict):
        run = run_with(timing)
        return parse_run_config(dict(run.model_dump(exclude_none=True), device=device))

    # the hashed bytes: 4 B an element, here 1M elements at 2 GHz: 4e6 · 1.93 / 2e9 = 3.86 ms
    assert weight_hash_seconds(4e6, 2.0) == pytest.approx(4e6 * 1.93 / 2e9)
    # a host the catalog states no clock of: DGX A100's 3.4 GHz
    assert weight_hash_seconds(4e6, 0.0) == pytest.approx(4e6 * 1.93 / 3.4e9)
    every = bookkeeping(on({"weight_hash_interval": 1}), 0.0, 3, moe=False, parameters_held=1e6)
    plain = bookkeeping(on({}), 0.0, 3, moe=False, parameters_held=1e6)
    assert every.hashed_bytes == pytest.approx(4e6)
    # the digests' all-gather over dp·cp and the barrier over every rank; torch.equal against rank 0's
    # digests and against each of the dp = 1 ranks' (cross_check): 2 syncs more
    assert sorted(every.all_reduces) == sorted([*plain.all_reduces, DATA, WORLD])
    assert every.syncs == plain.syncs + 2
    # one in ten iterations: the typical iteration (the CI's median) runs none
    assert bookkeeping(on({"weight_hash_interval": 10}), 0.0, 3, moe=False, parameters_held=1e6) == plain
    # a whole run on one device (no latency): Megatron's default syncs 4 + 2·4 micro-batches and the check's
    # 2, at 5 us, and every parameter P hashed: 4 · P · 1.93 / 2e9
    run = on({"weight_hash_interval": 1})
    params = sum(MemoryModel(run).parameters(layer).total for layer in walk(run))
    expected = 14 * 5e-6 + 4 * params * 1.93 / 2e9
    assert run_iteration(run).breakdown["bookkeeping"] == pytest.approx(expected, rel=1e-9)


def test_weight_hash_check_under_deterministic_mode_adds_its_measured_host_work():
    """Under --deterministic-mode the check's fresh host tensors are NaN-filled (PyTorch's `empty_cpu`), and
    the check measures 0.2344 s on Megatron CI's gpt tp1_pp4_vp1 overlap_optimizer case (DGX H100, iterations
    11, 21, 31, 41 against their neighbours) for 35,737,088 elements, of which SHA-1 at 1.93 cycles a byte on
    3.8 GHz is 0.0726 s: 4.5 ns an element beyond the hashing (reporting.py `DETERMINISTIC_HASH_EXTRA_S`)."""
    device = dict(ROUND_DEVICE, host_boost_ghz=2.0)

    def on(timing: dict):
        run = run_with(timing)
        return parse_run_config(dict(run.model_dump(exclude_none=True), device=device))

    # 1M elements (4e6 bytes hashed) at 2 GHz: 3.86 ms of SHA-1, and 1e6 · 4.5 ns = 4.5 ms more
    assert weight_hash_seconds(4e6, 2.0, deterministic=True) == pytest.approx(4e6 * 1.93 / 2e9 + 1e6 * 4.5e-9)
    assert weight_hash_seconds(4e6, 2.0, deterministic=False) == pytest.approx(4e6 * 1.93 / 2e9)
    # the measured case's own figures back: 35,737,088 elements on a 3.8 GHz host, 0.2335 s against 0.2344
    assert weight_hash_seconds(4 * 35_737_088, 3.8, deterministic=True) == pytest.approx(0.2344, rel=0.005)
    # a whole run on one device (no latency) under --deterministic-mode: the default syncs 4 + 2·4
    # micro-batches and the check's 2 at 5 us, and every parameter P hashed and copied: P · (4 · 1.93 / 2e9 + 4.5e-9)
    run = on({"weight_hash_interval": 1, "deterministic": True})
    params = sum(MemoryModel(run).parameters(layer).total for layer in walk(run))
    expected = 14 * 5e-6 + params * (4 * 1.93 / 2e9 + 4.5e-9)
    assert run_iteration(run).breakdown["bookkeeping"] == pytest.approx(expected, rel=1e-9)
    # without the check, deterministic mode adds nothing to the bookkeeping
    assert not bookkeeping(on({"deterministic": True}), 0.0, 3, moe=False, parameters_held=1e6).hashed_deterministic
