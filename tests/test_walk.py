"""The layer walk: uniform splits, cell order per schedule, HEAD/TAIL placement, distinct kinds."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.walk import BODY, HEAD, TAIL, torchtitan_split, uniform_split, walk
from ppb_core.schedules import cell_order
from ppb_core.tables.walk import walk_from_frame, walk_to_frame

ROOT = Path(__file__).resolve().parents[1]

SPEC = {"vocab_size": 32000, "hidden_size": 512, "num_layers": 10, "num_attention_heads": 8, "intermediate_size": 1024}
BASE = {
    "models": [{"name": "llm", "spec": SPEC}],
    "parallel": {"pp": 4},
    "training": {"seq_length": 1024, "micro_batches": 8},
    "device": {"name": "a100-80gb"},
}


def _run(**parallel):
    raw = copy.deepcopy(BASE)
    raw["parallel"].update(parallel)
    return parse_run_config(raw, "walk.yaml")


def test_uniform_split_puts_the_remainder_on_the_middle_cells_earliest_first():
    # 30 layers over 4 stages, no end cells: 7 each, 2 left over for the first two stages.
    assert uniform_split(30, 4, 1) == [[8, 8, 7, 7]]
    # the head's and tail's cells get theirs last: the 2 go to stages 1 and 2
    assert uniform_split(30, 4, 1, ends=frozenset({(0, 0), (0, 3)})) == [[7, 8, 8, 7]]
    # and when the middle cells are served, the end cells in pipeline order: 3 left over on 4 stages
    assert uniform_split(31, 4, 1, ends=frozenset({(0, 0), (0, 3)})) == [[8, 8, 8, 7]]
    # DeepSeek-V3: 61 layers over 16·2 cells: 1 each, 29 over; the 30 cells holding neither head
    # (0, 0) nor tail (1, 15) take one each in pipeline order, (0, 1)..(0, 15) then (1, 0)..(1, 13)
    split = uniform_split(61, 16, 2, "interleaved", frozenset({(0, 0), (1, 15)}))
    assert split == [[1] + [2] * 15, [2] * 14 + [1, 1]]


def test_a_run_without_layout_is_walked_as_the_balancer_splits_its_baselines() -> None:
    """`ppb estimate` and the balancer's uniform baselines price one split (issue 13: DeepSeek-V3's
    estimate put 4 MoE layers beside the TAIL, 54.53 s at SLCT against the baseline's 46.17 s)."""
    run = load_run_config(ROOT / "configs" / "deepseek-v3.yaml")
    # its layout states this split for Megatron-LM (session 28): the run without it is walked the same
    run = run.model_copy(update={"parallel": run.parallel.model_copy(update={"layout": None})})
    counts = [[0] * run.parallel.pp for _ in range(run.parallel.vpp)]
    for layer in walk(run):
        if layer.node == BODY:
            counts[layer.chunk][layer.stage] += 1
    assert counts == [[1] + [2] * 15, [2] * 14 + [1, 1]]  # as derived above


def test_torchtitan_splits_as_generate_llm_fqn_per_model_part():
    """torchtitan v0.2.2 pipeline_parallel.py `generate_llm_fqn_per_model_part`, input and output
    weights 1: (layers + 2) // stages each, the first (layers + 2) % stages one more, the first stage
    less its embedding, the last less its norm and output."""
    # Llama-3.1-8B over 4 stages: 34 // 4 = 8, 34 % 4 = 2: 9, 9, 8, 8, less one at each end
    assert torchtitan_split(32, 4) == [8, 9, 8, 7]
    # Llama 3 405B over 8: 128 // 8 = 16 even: 15, 16 × 6, 15 (ppb's even split gives the same)
    assert torchtitan_split(126, 8) == [15] + [16] * 6 + [15]
    assert torchtitan_split(4, 2) == [2, 2]  # 6 // 2 = 3 each, less one at each end
    assert torchtitan_split(7, 1) == [7]  # one stage holds everything
    # 2 layers over 4 stages: 1 each, the ends left with their embedding or output alone: not placed
    assert torchtitan_split(2, 4) is None
    assert torchtitan_split(1, 4) is None  # 3 weighted layers for 4 stages: torchtitan refuses it
    # cells in pipeline order: 32 layers over 2 ranks × 2 virtual stages (interleaved, stage v·P + p)
    assert uniform_split(32, 2, 2, "interleaved", framework="torchtitan") == [[8, 9], [8, 7]]
    # where torchtitan's rule leaves an end empty, ppb's even split
    assert uniform_split(2, 4, 1, framework="torchtitan") == uniform_split(2, 4, 1) == [[1, 1, 0, 0]]


def test_a_torchtitan_run_without_layout_is_walked_as_ppb_import_torchtitan_writes_it(tmp_path: Path) -> None:
    """A hand-written torchtitan run and the run `ppb import torchtitan` writes for the same job
    (whose layout states torchtitan's split) put the same layers on each stage."""
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = 8192\nlocal_batch_size = 4\n'
        "[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_microbatch_size = 1\n"
    )
    imported = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(toml), "--device", "h100-80gb", "--gpus", "8", "-o", str(imported)]) == 0
    run = load_run_config(imported)
    assert run.parallel.layout is not None and run.framework == "torchtitan"
    raw = yaml.safe_load(imported.read_text())
    del raw["parallel"]["layout"]
    by_hand = parse_run_config(raw, "hand.yaml")

    def per_stage(r) -> list[int]:
        return [sum(1 for x in walk(r) if x.node == BODY and x.stage == s) for s in range(4)]

    assert per_stage(by_hand) == per_stage(run) == [8, 9, 8, 7]


def test_cell_order_of_dualpipev_comes_back():
    assert cell_order("interleaved", 2, 2) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert cell_order("dualpipev", 2, 2) == [(0, 0), (0, 1), (1, 1), (1, 0)]


def test_walk_places_head_first_and_tail_last_and_counts_kinds():
    layer_walk = walk(_run())
    nodes = [layer.node for layer in layer_walk]
    assert nodes[0] == HEAD and nodes[-1] == TAIL and nodes.count(BODY) == 10
    assert (layer_walk.layers[0].chunk, layer_walk.layers[0].stage) == (0, 0)
    assert (layer_walk.layers[-1].chunk, layer_walk.layers[-1].stage) == (0, 3)
    # 10 over 4 stages: 2 each, the 2 over to the stages holding neither head nor tail: 2, 3, 3, 2.
    assert [len([x for x in layer_walk.in_cell(0, s) if x.node == BODY]) for s in range(4)] == [2, 3, 3, 2]
    slots = layer_walk.distinct()
    assert [(s.node, s.count) for s in slots] == [(HEAD, 1), (BODY, 10), (TAIL, 1)]


def test_two_sub_models_fill_the_pipeline_in_order():
    raw = copy.deepcopy(BASE)
    vit = {
        **SPEC,
        "num_layers": 6,
        "activation": "gelu",
        "norm": "layernorm",
        "norm_bias": True,
        "position_embedding": "learned",
        "max_position_embeddings": 1024,
    }
    raw["models"] = [{"name": "vit", "spec": vit}, {"name": "llm", "spec": SPEC}]
    layer_walk = walk(parse_run_config(raw, "mm.yaml"))
    order = [(layer.model_name, layer.node) for layer in layer_walk]
    assert order[0] == ("vit", HEAD) and order[7] == ("vit", TAIL) and order[8] == ("llm", HEAD)
    # 16 layers over 4 stages, 4 each: the vit's tail sits with its last layer on stage 1, and
    # the llm's head with its first layer, also on stage 1.
    assert layer_walk.layers[7].stage == 1 and layer_walk.layers[8].stage == 1
    kinds = {(s.model_name, s.node): s.kind.name for s in layer_walk.distinct()}
    assert len(kinds) == 6


def test_explicit_cell_counts_and_their_errors():
    run = _run()
    layer_walk = walk(run, [[1, 2, 3, 4]])
    assert layer_walk.cell_counts == ((1, 2, 3, 4),)
    with pytest.raises(InputError, match="add up to 10"):
        walk(run, [[1, 1, 1, 1]])
    with pytest.raises(InputError, match="expected 1 chunks of 4 stages"):
        walk(run, [[5, 5]])


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen2.5-7b"])
def test_walk_round_trips_through_parquet(tmp_path, name):
    layer_walk = walk(load_run_config(ROOT / "configs" / f"{name}.yaml"))
    path = tmp_path / "walk.parquet"
    walk_to_frame(layer_walk).to_parquet(path)
    again = walk_from_frame(pd.read_parquet(path), layer_walk.stages, layer_walk.chunks)
    assert again == layer_walk
    # Identical layers share one kind object after the round trip too.
    bodies = [layer.kind for layer in again if layer.node == BODY]
    assert len({id(kind) for kind in bodies}) == len(set(bodies))
