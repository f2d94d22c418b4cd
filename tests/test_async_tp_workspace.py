"""torchtitan's async TP holds torch's symmetric-memory workspace beside the caching allocator's pools, and a fit
counts it (`ppb_core.memory.symm_mem`).

torch/distributed/_symmetric_memory/__init__.py (torch 2.6.0 and 2.13 alike): `get_symm_mem_workspace` grows one
workspace per TP group to the largest request; `_pipelined_produce_and_all2all` (the fused matmul-reduce-scatter)
asks `out_chunks[0].numel() * out_chunks[0].element_size() * 2`, two output chunks of tokens/tp rows × hidden;
`_pipelined_multi_all_gather_and_consume` (the fused all-gather-matmul) asks the shard's bytes, tokens/tp × hidden.
"""

from __future__ import annotations

import dataclasses

from test_memory_runs import DENSE, make_run, model

from ppb_core.balance.allocator_pools import allocator_pools
from ppb_core.estimate.check import StageCheck
from ppb_core.estimate.run import peak_from_json, stage_json
from ppb_core.memory import run_stage_peaks
from ppb_core.memory.symm_mem import workspace_bytes
from ppb_core.model.walk import walk
from ppb_core.payload.describe import describe
from ppb_core.payload.sapp import layer_set

SP4 = {"dp": 2, "tp": 4, "sequence_parallel": True}


def _titan(tp_overlap: float, parallel=SP4, batch: int = 2, framework: str = "torchtitan", spec=DENSE, seq: int = 64):
    micro_batches = parallel.get("pp", 1)  # torch's Schedule1F1B needs at least one a stage
    return make_run(
        spec,
        framework=framework,
        parallel=parallel,
        training={"seq_length": seq, "micro_batch_size": batch, "micro_batches": micro_batches},
        timing={"overlap": {"tp": tp_overlap}},
    )


def test_the_fit_adds_the_reduce_scatters_two_chunks():
    asynchronous, vanilla = run_stage_peaks(_titan(1.0))[0], run_stage_peaks(_titan(0.0))[0]
    # seq 64 × batch 2 / tp 4 = 32 rows a rank; the output projection's reduce-scatter asks two chunks of
    # 32 rows × 64 hidden × 2 bytes (bf16): 2 · 32 · 64 · 2 = 8,192 bytes, above the all-gathers' 4,096
    assert asynchronous.symm_workspace_bytes == 8192
    assert asynchronous.allocator_bytes == vanilla.allocator_bytes + 8192
    assert asynchronous.fit_bytes == vanilla.fit_bytes + 8192
    # outside the caching allocator: neither the allocated peak nor the reserved pools move
    assert asynchronous.peak_bytes == vanilla.peak_bytes
    assert vanilla.symm_workspace_bytes == 0
    assert not dataclasses.replace(asynchronous, device_bytes=vanilla.fit_bytes).fits


def test_the_workspace_follows_the_stage_layers_and_context_parallelism():
    run = _titan(1.0)
    memory, layers = model(run), list(walk(run))
    # the TAIL's output layer gathers a shard: 32 rows · 64 · 2 = 4,096; the HEAD's embedding scatters a lookup,
    # which micro-pipelining leaves plain: nothing
    assert workspace_bytes(memory, [layer for layer in layers if layer.node == "TAIL"]) == 4096
    assert workspace_bytes(memory, [layer for layer in layers if layer.node == "HEAD"]) == 0
    # CP 2 halves each rank's sequence: 64 · 2 / 2 / 4 = 16 rows, 2 · 16 · 64 · 2 = 4,096
    cp = _titan(1.0, parallel={**SP4, "cp": 2})
    assert run_stage_peaks(cp)[0].symm_workspace_bytes == 4096
    # under PP each stage holds blocks: both charged the blocks' 8,192
    assert [p.symm_workspace_bytes for p in run_stage_peaks(_titan(1.0, parallel={**SP4, "pp": 2}))] == [8192, 8192]


def test_table_4_70b_shape():
    # torchtitan's Table 4 (Llama 3.1 70B, local batch 16, TP 8, sequence 8192): 16 · 8192 / 8 = 16,384 rows a
    # rank, 2 · 16,384 · 8,192 hidden · 2 bytes = 536,870,912 bytes (two blocks suffice: every block asks the same)
    wide = {**DENSE, "hidden_size": 8192, "num_attention_heads": 64, "intermediate_size": 256, "num_layers": 2}
    run = _titan(1.0, parallel={"dp": 2, "tp": 8, "sequence_parallel": True}, batch=16, spec=wide, seq=8192)
    assert workspace_bytes(model(run), walk(run)) == 2 * 16384 * 8192 * 2 == 536870912


def test_only_torchtitan_async_tp_holds_one():
    # Megatron's comm-GEMM overlap is TransformerEngine's userbuffers (priced elsewhere); without sequence
    # parallelism TP all-reduces, which micro-pipelining does not fuse
    assert run_stage_peaks(_titan(1.0, framework="megatron"))[0].symm_workspace_bytes == 0
    assert run_stage_peaks(_titan(1.0, parallel={"dp": 2, "tp": 4}))[0].symm_workspace_bytes == 0


def test_json_and_check_carry_it():
    peak = run_stage_peaks(_titan(1.0))[0]
    data = stage_json(peak)
    assert data["symm_workspace_bytes"] == 8192
    assert peak_from_json(data).symm_workspace_bytes == 8192
    # `ppb check`'s stage: the workspace within its allocator MB, and named apart
    stage = StageCheck(0, 4, {"NONE": 4}, 100.0, 150.0, "loss", {"loss": 100.0}, (1,), 60.0, symm_workspace_mb=8.0)
    assert stage.to_json()["symm_workspace_mb"] == 8.0 and stage.free_mb == 150.0 - 100.0 - 60.0


def _constant_mb(run) -> float:
    memory = model(run)
    return allocator_pools(run, layer_set(describe(run, memory), run.source), memory)[1]


def test_the_balancer_adds_it_to_the_constant():
    # a block's 8,192 bytes (above) rounded up to whole MB: 1 MB more in the constant, with FSDP2's pools (dp 2)
    # or without them (dp 1, no pools priced: the workspace alone)
    assert _constant_mb(_titan(1.0)) == _constant_mb(_titan(0.0)) + 1
    alone = {"tp": 4, "sequence_parallel": True}
    assert _constant_mb(_titan(0.0, parallel=alone)) == 0.0
    assert _constant_mb(_titan(1.0, parallel=alone)) == 1.0
