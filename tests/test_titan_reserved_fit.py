"""A torchtitan FSDP2 stage fits by what the caching allocator reserves, not by its allocated peak alone.

PyTorch's CUDACachingAllocator reuses a freed block only on the stream that allocated it, and torchtitan never
calls `empty_cache`, so the run goes out of memory when the reserved bytes reach the device
(`ppb_core.memory.reserved`, `ppb_core.balance.allocator_pools`). Hand counts on DENSE (tests/test_memory_runs.py):
HEAD 65536 parameters (1024·64), each of the 4 blocks 41088, TAIL 65600 (norm 64 + output 65536); seq 64, one
sequence; bf16 gathers (2 bytes), fp32 sharded gradients (4 bytes).
"""

from __future__ import annotations

import dataclasses

from test_memory_runs import DENSE, make_run, model

from ppb_core.balance.allocator_pools import allocator_pools
from ppb_core.estimate.check import StageCheck
from ppb_core.memory import run_stage_peaks
from ppb_core.memory.reserved import copy_in_bound_bytes, copy_in_bytes
from ppb_core.model.walk import walk
from ppb_core.payload.describe import describe
from ppb_core.payload.sapp import layer_set

# DENSE with 1024 features and a 4096 MLP: a block holds q,k,v,o 4·1024² = 4,194,304, two norms 2048 and
# gate, up, down 3·1024·4096 = 12,582,912 parameters, 16,779,264 in all; HEAD 1024·1024 = 1,048,576; TAIL
# 1024 + 1,048,576 = 1,049,600
WIDE = {**DENSE, "hidden_size": 1024, "intermediate_size": 4096}


def _titan(spec=DENSE, **kwargs):
    return make_run(spec, framework="torchtitan", **kwargs)


def test_the_copy_in_bound_takes_any_two_units():
    run = _titan(parallel={"dp": 2})
    memory, layers = model(run), list(walk(run))
    bodies = [layer for layer in layers if layer.node == "BODY"]
    # two blocks: 2·41088 + 2·41088·1.5 (the second's output and its half shard copy at dp 2) = 205,440
    assert copy_in_bound_bytes(memory, bodies) == 205440
    # with the TAIL: a block's output beside the TAIL's 2·65600 and its shard copy, 82,176 + 196,800 = 278,976,
    # as the stage's consecutive pair (last block, TAIL) holds it
    tail = [layer for layer in layers if layer.node == "TAIL"]
    assert copy_in_bound_bytes(memory, bodies + tail) == 278976 == copy_in_bytes(memory, layers)
    # with the HEAD too the bound pairs HEAD and TAIL, which no stage runs one after the other:
    # 2·65536 + 196,800 = 327,872, above the stage's own 278,976
    assert copy_in_bound_bytes(memory, layers) == 327872


def test_a_stage_fits_with_what_the_pools_reserve_beyond_its_peak():
    run = _titan(parallel={"dp": 2})
    peak = run_stage_peaks(run)[0]
    assert peak.moment == "loss"
    # at the loss the compute pool is the allocated peak and the eager loss's free bf16 logits 2·64·1024 =
    # 131,072; the copy-in pool 278,976 (above); the reduce-scatter pool every sharded fp32 gradient,
    # (65536 + 4·41088 + 65600) / 2 · 4 = 590,976: 1,001,024 reserved beyond the allocated peak
    assert peak.allocator_bytes == 131072 + 278976 + 590976 == 1001024
    assert peak.fit_bytes == peak.peak_bytes + 1001024
    assert dataclasses.replace(peak, device_bytes=peak.peak_bytes + 1001024).fits
    assert not dataclasses.replace(peak, device_bytes=peak.peak_bytes + 1001023).fits
    # Megatron's and MindFormers' stages fit by the allocated peak: nothing is charged beyond it
    for framework in ("megatron", "mindformers"):
        other = run_stage_peaks(make_run(DENSE, framework=framework, parallel={"dp": 2}))[0]
        assert other.allocator_bytes == 0 and other.fit_bytes == other.peak_bytes
    # without FSDP2 sharding (one rank) torchtitan has no pools priced either
    assert run_stage_peaks(_titan())[0].allocator_bytes == 0


def test_check_fits_by_the_peak_and_the_allocator():
    stage = StageCheck(0, 4, {"NONE": 4}, 100.0, 150.0, "loss", {"loss": 100.0}, (1,), allocator_mb=60.0)
    # 100 + 60 = 160 MB against 150: 10 MB over, where the peak alone left 50
    assert not stage.fits and stage.free_mb == -10.0
    assert dataclasses.replace(stage, allocator_mb=50.0).fits
    assert stage.to_json()["allocator_mb"] == 60.0


def _charges(run) -> tuple[list[float], float]:
    memory = model(run)
    layers = layer_set(describe(run, memory), run.source)
    charged, constant_mb = allocator_pools(run, layers, memory)
    before = [r.memory_parameter_mb for r in (*layers.heads, *layers.bodies, *layers.tails)]
    after = [r.memory_parameter_mb for r in (*charged.heads, *charged.bodies, *charged.tails)]
    return [a - b for a, b in zip(after, before, strict=True)], constant_mb


def test_the_balancer_charges_the_pools():
    # PP 2, dp 2: the sharded fp32 gradients of a block 16,779,264 / 2 · 4 = 33,558,528 bytes, 32.004 MB (MB of
    # 2²⁰), charged 33 whole MB; the HEAD's 1,048,576 · 2 = 2,097,152, 2 MB; the TAIL's 1,049,600 · 2 =
    # 2,099,200, 3 MB (under PP the pipeline keeps the logits: no loss hole). The constant: two blocks' copy-in,
    # 2·16,779,264 · (1 + 1.5) = 83,896,320 bytes, 80.01 MB, charged 81; neither end's unit is larger
    pp = _titan(WIDE, parallel={"dp": 2, "pp": 2}, training={"micro_batches": 4})
    assert _charges(pp) == ([2, 33, 3], 81.0)
    # no PP, one micro-batch: the same gradients, and on the TAIL the eager loss's free bf16 logits 2·64·1024 =
    # 131,072: 2,099,200 + 131,072 = 2,230,272, 2.13 MB, 3
    assert _charges(_titan(WIDE, parallel={"dp": 2})) == ([2, 33, 3], 81.0)
    # gradient accumulation without PP keeps the gradients from the first micro-batch's backward through the
    # forwards after it: the static memory already holds them, and only the loss hole (1 MB) is added
    assert _charges(_titan(WIDE, parallel={"dp": 2}, training={"micro_batches": 2})) == ([0, 0, 1], 81.0)
    # Megatron's problem is left as it is
    assert _charges(make_run(WIDE, framework="megatron", parallel={"dp": 2, "pp": 2})) == ([0, 0, 0], 0.0)
