"""What PyTorch's allocator counts under Megatron's TE CUDA graphs (ppb_core.memory.allocated): the eager
warm-up iterations (`--cuda-graph-warmup-steps`, 3 by default), the capture, and the replays whose graphed
activations live in the graphs' pool, never counted (c10/cuda/CUDACachingAllocator.cpp; Megatron-LM d98e8a64
training.py and transformer_layer.py). Hand counts on SMALL_GPT (tests/test_megatron_import.py)."""

from __future__ import annotations

import pytest
from test_megatron_import import SMALL_GPT
from test_memory_activations import MOE
from test_memory_runs import make_run

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.memory.allocated import allocated_peak_bytes, graphed_op
from ppb_core.memory.model import MemoryModel, run_stage_peaks
from ppb_core.model.walk import walk

MIB = 2**20
# SMALL_GPT (h 512, s 1024, b 4, 8 heads, TP 2 without SP): what the attention keeps a layer-micro-batch, all
# inside an `attn` graph: the fused norm's input and output 1024·4·512·2 = 4 MiB each, q, k, v and the core's
# output 1024·4·256·2 = 2 MiB each, the softmax statistics 4·4·1024·4 = 64 KiB, the bias-dropout-add's mask
# after the projection 1024·4·512 B = 2 MiB
ATTENTION = 4 * MIB + 4 * MIB + 4 * 2 * MIB + 64 * 1024 + 2 * MIB


def _run(warmup: int | None, modules: str = "attn"):
    flags = f"--cuda-graph-impl transformer_engine --cuda-graph-modules {modules}"
    if warmup is not None:
        flags += f" --cuda-graph-warmup-steps {warmup}"
    imported = import_megatron(SMALL_GPT.replace("--verify-integrity", f"--verify-integrity {flags}"), 8, "h100-80gb")
    run = run_config_of(imported, "case")
    memory, layer_walk = MemoryModel(run), walk(run)
    return run, memory, layer_walk, run_stage_peaks(run, memory, layer_walk)


def test_which_terms_a_graph_saves():
    # transformer_layer.py: attn the input norm and the attention (its bias-dropout-add too); mlp a dense
    # layer's pre-MLP norm and MLP; moe_router the pre-MLP norm, router and shared experts of an MoE layer;
    # moe_preprocess the dispatcher's permutation map; no module: the whole layer; the output layer never
    dense = next(layer.kind for layer in walk(_run(0)[0]) if layer.node == "BODY")
    moe_run = make_run({**MOE, "shared_expert_intermediate_size": 64})
    moe = next(layer.kind for layer in walk(moe_run) if layer.node == "BODY")
    assert graphed_op("attention.query", dense, ["attn"]) and not graphed_op("mlp.fc1_output", dense, ["attn"])
    assert graphed_op("mlp.fc1_output", dense, ["mlp"]) and graphed_op("mlp.fc1_output", dense, [])
    assert not graphed_op("moe.expert.fc1_output", moe, ["moe_router", "moe_preprocess"])
    assert graphed_op("moe.router_scores", moe, ["moe_router"]) and graphed_op(
        "moe.shared.fc1_output", moe, ["moe_router"]
    )
    assert graphed_op("moe.norm_input", moe, ["moe_router"]) and not graphed_op("moe.norm_input", moe, ["attn"])
    assert graphed_op("moe.row_map", moe, ["moe_router", "moe_preprocess"])
    assert not graphed_op("moe.row_map", moe, ["moe_router"])
    assert graphed_op("moe.expert.fc1_output", moe, ["moe"]) and not graphed_op("mlp.fc1_output", moe, ["mlp"])


def test_warm_up_iterations_count_everything():
    # the default 3 eager iterations, the second after Adam's moments exist: the allocator counts ppb's peak
    run, memory, layer_walk, peaks = _run(None)
    assert run.timing.cuda_graph_warmup_steps == 3
    for peak in peaks:
        assert allocated_peak_bytes(memory, layer_walk, peak) == peak.peak_bytes


def test_without_warm_up_the_capture_and_the_replays():
    # stage 1 keeps 1 micro-batch of its 6 layers (1F1B at PP 2), stage 0 2: the graphs save 6·ATTENTION
    # and 12·ATTENTION there. The capture: static memory without Adam's two fp32 moments (8 B an optimizer
    # element) + what the graphs save + a backward's working set; the replays: ppb's moments less the graphed
    # activations. The larger.
    _, memory, layer_walk, peaks = _run(0)
    for peak, layers in zip(peaks, (12, 6), strict=True):
        graphed = layers * ATTENTION
        elements = sum(memory.static_breakdown(x).optimizer_states for x in layer_walk if x.stage == peak.stage)
        capture = peak.static_bytes - 8 * elements + graphed + peak.working_bytes + peak.reserved_bytes
        later = max(peak.moments["backward"] - graphed, peak.moments.get("loss", 0.0) - graphed)
        assert allocated_peak_bytes(memory, layer_walk, peak) == pytest.approx(max(capture, later, peak.step_bytes))
    # the last stage: its loss moment, 1399.55 MiB as ppb holds it, counted 108.375 MiB lower
    assert peaks[1].moment == "loss" and 6 * ATTENTION == 108.375 * MIB
    assert allocated_peak_bytes(memory, layer_walk, peaks[1]) == peaks[1].moments["loss"] - 6 * ATTENTION


def test_one_warm_up_iteration_runs_before_the_moments_exist():
    _, memory, layer_walk, peaks = _run(1)
    peak = peaks[1]
    elements = sum(memory.static_breakdown(x).optimizer_states for x in layer_walk if x.stage == 1)
    first = peak.moments["loss"] - 8 * elements  # the eager first iteration, before its step
    later = peak.moments["loss"] - 6 * ATTENTION
    assert allocated_peak_bytes(memory, layer_walk, peak) == pytest.approx(max(first, later))


def test_no_graphs_no_allocator_view():
    run = make_run(MOE)
    memory, layer_walk = MemoryModel(run), walk(run)
    (peak,) = run_stage_peaks(run, memory, layer_walk)
    assert allocated_peak_bytes(memory, layer_walk, peak) is None
