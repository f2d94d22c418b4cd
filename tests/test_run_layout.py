"""A run config in Megatron's words for the pipeline: `parallel.layout` (--pipeline-model-parallel-layout)
and `parallel.overlap_moe_expert_parallel_comm`, read with the parser `ppb check --plan` uses."""

from __future__ import annotations

import copy

import pytest

from ppb_core.config.layout import EXPANDED_CHARACTERS, LayoutError, expand
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.walk import BODY, HEAD, TAIL, walk
from ppb_core.tables.run import run_from_frame, run_to_frame

SPEC = {"vocab_size": 1024, "hidden_size": 64, "num_layers": 4, "num_attention_heads": 4, "intermediate_size": 128}
MOE = {**SPEC, "num_experts": 4, "experts_per_token": 2, "moe_intermediate_size": 32, "mtp_layers": 1}
BASE = {
    "models": [{"name": "llm", "spec": SPEC}],
    "parallel": {"pp": 2},
    "training": {"seq_length": 64, "micro_batches": 4},
    "device": {"name": "h100-80gb"},
}


def _run(spec=SPEC, **parallel):
    raw = copy.deepcopy(BASE)
    raw["models"][0]["spec"] = spec
    raw["parallel"].update(parallel)
    return parse_run_config(raw, "run.yaml")


def _error(spec=SPEC, **parallel) -> InputError:
    with pytest.raises(InputError) as caught:
        _run(spec, **parallel)
    return caught.value


def test_a_layout_places_the_layers_and_sets_the_virtual_stages():
    # "Et|t|tt|L" on 2 ranks: stage v·2 + p is rank p's virtual stage v (Megatron-Core's
    # PipelineParallelLayerLayout), so rank 0 holds "Et" and "tt", rank 1 "t" and "L": 2 virtual
    # stages each, run interleaved; the cells [chunk][stage] hold [[1, 1], [2, 0]] decoder layers.
    run = _run(layout="Et|t|tt|L")
    assert (run.parallel.vpp, run.parallel.schedule) == (2, "interleaved")
    layer_walk = walk(run)
    assert [list(row) for row in layer_walk.cell_counts] == [[1, 1], [2, 0]]
    placed = [(layer.node, layer.chunk, layer.stage) for layer in layer_walk]
    # E on rank 0's first virtual stage; L (the TAIL) on rank 1's last, which holds no decoder layer
    assert placed == [
        (HEAD, 0, 0),
        (BODY, 0, 0),
        (BODY, 0, 1),
        (BODY, 1, 0),
        (BODY, 1, 0),
        (TAIL, 1, 1),
    ]


def test_a_layout_of_one_virtual_stage_a_rank_keeps_1f1b():
    run = _run(layout="Ett|ttL")
    assert (run.parallel.vpp, run.parallel.schedule) == (1, "1f1b")
    assert [list(row) for row in walk(run).cell_counts] == [[2, 2]]


def test_layouts_megatron_refuses_are_refused_in_one_line():
    assert _error(layout="Et|t|tt|L", vpp=3).field == "parallel"  # the layout says 2 virtual stages
    error = _error(layout="Et|tt|L")  # 3 stages on 2 ranks
    assert "not a multiple of the pipeline size 2" in error.problem
    error = _error(layout="Et|t|t|L")  # 3 decoder layers, the model has 4
    assert error.field == "parallel.layout" and "3 decoder layers t, the model has 4" in error.problem
    assert "invalid layer character" in _error(layout="Et|t|tx|L").problem


def test_mtp_layers_apart_from_the_loss_walk_as_three_tail_parts():
    # Megatron accepts m in rank 0's last virtual stage and L on rank 1 (standalone MTP): stage v·2 + p
    # is rank p's virtual stage v, so 'tm' (stage 2) is rank 0's chunk 1 and 'L' (stage 3) rank 1's
    # the final norm stays with the last decoder layer (rank 0's chunk 1, 'tm'), as Megatron-Core puts it
    tails = [layer for layer in walk(_run(MOE, layout="Ett|t|tm|L")) if layer.node == TAIL]
    assert [(t.kind.part, t.chunk, t.stage) for t in tails] == [("final_norm", 1, 0), ("mtp", 1, 0), ("output", 1, 1)]
    # beside the loss in a chunk of no decoder layer: the final norm still with the last decoder layer
    tails = [layer for layer in walk(_run(MOE, layout="Ett|t|t|mL")) if layer.node == TAIL]
    assert [(t.kind.part, t.chunk, t.stage) for t in tails] == [("final_norm", 1, 0), ("mtp_output", 1, 1)]
    # beside the loss and the last decoder layer, one TAIL as before
    tails = [layer for layer in walk(_run(MOE, layout="Et|t|t|tmL")) if layer.node == TAIL]
    assert [(t.kind.part, t.chunk, t.stage) for t in tails] == [("whole", 1, 1)]
    # the balancer's descriptions keep one TAIL whatever the layout
    fused = [layer for layer in walk(_run(MOE, layout="Ett|t|tm|L"), fused_tail=True) if layer.node == TAIL]
    assert [t.kind.part for t in fused] == ["whole"]


def test_standalone_mtp_is_megatrons_only():
    raw = copy.deepcopy(BASE)
    raw["models"][0]["spec"] = MOE
    raw["parallel"]["layout"] = "Ett|t|tm|L"
    raw["framework"] = "torchtitan"
    with pytest.raises(InputError) as caught:
        parse_run_config(raw, "run.yaml")
    assert caught.value.field == "parallel.layout" and "set framework megatron" in caught.value.problem


def test_expansion_is_bounded():
    with pytest.raises(LayoutError, match="write out more than"):
        expand(f"(tt|)*{EXPANDED_CHARACTERS}")
    # the two passes count what each writes: a layout of 1024 layers on 512 ranks is fine
    assert expand("E(tt|)*511,ttL").count("t") == 1024


def test_the_combined_1f1b_schedule_is_stated_where_megatron_runs_it():
    moe = {"dp": 2, "ep": 2}
    ok = _run(MOE, layout="Et|t|tt|mL", overlap_moe_expert_parallel_comm=True, **moe)
    assert ok.parallel.overlap_moe_expert_parallel_comm
    field = "parallel.overlap_moe_expert_parallel_comm"
    # transformer_config.py: EP > 1; virtual stages when PP > 1; no full recompute, no module moe
    assert _error(MOE, overlap_moe_expert_parallel_comm=True, dp=2).field == field
    assert "virtual pipeline stages" in _error(MOE, overlap_moe_expert_parallel_comm=True, **moe).problem
    raw = copy.deepcopy(BASE)
    raw["models"][0]["spec"] = MOE
    raw["parallel"].update(layout="Et|t|tt|mL", overlap_moe_expert_parallel_comm=True, **moe)
    raw["training"]["recompute"] = "full"
    with pytest.raises(InputError, match="full recomputation") as caught:
        parse_run_config(raw, "run.yaml")
    assert caught.value.field == field
    raw["training"]["recompute"] = {"granularity": "selective", "modules": ["moe"]}
    with pytest.raises(InputError, match="module moe"):
        parse_run_config(raw, "run.yaml")
    raw["training"].pop("recompute")
    raw["framework"] = "torchtitan"
    with pytest.raises(InputError, match="framework megatron"):
        parse_run_config(raw, "run.yaml")


def test_the_layout_survives_the_chain_s_table():
    # the Dagster chain stores the run config as a table (ppb_core.tables.run): what it reads back
    # places the layers and runs the schedule the same way
    run = _run(MOE, layout="Et|t|tt|mL", overlap_moe_expert_parallel_comm=True, dp=2, ep=2)
    again = run_from_frame(run_to_frame(run))
    assert again.parallel == run.parallel
    assert walk(again).layers == walk(run).layers
