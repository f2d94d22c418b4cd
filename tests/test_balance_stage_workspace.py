"""A stage is charged the workspaces of the layer kinds it runs (`balance/stage_workspace.py`), by hand.

Transformer Engine keeps one dummy weight gradient per (weight shape, dtype) a process hands back under
Megatron's gradient accumulation fusion (transformer_engine/pytorch/module/base.py at d0067d0d,
`get_dummy_wgrad`: the module-level `_dummy_wgrads` dict keyed by `(*shape, dtype)`, never emptied). One
process runs one pipeline rank, all its virtual stages: a rank holds the shapes of the layers it runs,
not every shape of the model. DeepSeek-V3's 3 dense layers run their dense MLP (intermediate 18,432) on
the ranks that hold them only.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import yaml

from ppb_core.balance.choices import Catalogue
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput, run_problem
from ppb_core.balance.stage_workspace import StageWorkspace
from ppb_core.estimate.inputs import load_run
from ppb_core.memory.model import run_stage_peaks
from ppb_core.model.kinds import BodyKind, Moe
from ppb_core.model.switches import OPTIONS
from ppb_core.model.walk import walk
from ppb_core.payload.run import describe_run
from ppb_core.payload.sapp import layer_set

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
MB = 1024 * 1024
# DeepSeek-V3's dense MLP on one rank (TP 1, configs/hf/deepseek-v3.json): fc1 (gated) 2·18,432 × 7,168 and
# fc2 7,168 × 18,432, bf16: (264,241,152 + 132,120,576) · 2 B = 792,723,456 B = 756 MB exactly.
DENSE_MLP_BYTES = 792_723_456


def test_deepseek_v3_stages_without_dense_layers_are_not_charged_their_shapes() -> None:
    run = load_run(CONFIGS / "deepseek-v3.yaml")
    problem = run_problem(run, describe_run(run))
    dense, moe = (problem.body_mask([b]) for b in range(2))  # BODY_0: the 3 dense layers, BODY_1: the MoE ones
    assert DENSE_MLP_BYTES / MB == 756
    # a rank of MoE layers only (stage 1 carries no end): the constant's dense MLP shapes come off
    assert problem.relief_row(1)[moe] == 756
    assert problem.relief_row(1)[dense | moe] == 0  # a rank of both kinds holds every body shape
    # the TAIL's rank (15): its description carries the output layer's and the MTP projection's shapes in whole
    # MB, (129,280 · 7,168 + 7,168 · 14,336) · 2 B = 2,058,878,976 B = 1,963.5 MB truncated to 1,963: 0.5 MB
    # short, which the relief gives back, 756 − 0.5 = 755.5 truncated to 755
    assert problem.relief_row(15)[moe] == 755
    assert problem.relief_row(15)[dense | moe] == 0


def _fusion_off(tmp_path: Path) -> Path:
    raw = yaml.safe_load((CONFIGS / "deepseek-v3.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / raw["models"][0]["config"])
    raw["timing"] = {"gradient_accumulation_fusion": False}
    path = tmp_path / "dsv3-no-fusion.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_ppb_estimate_charges_the_dense_shapes_on_the_ranks_running_dense_layers(tmp_path: Path) -> None:
    # Without gradient accumulation fusion TE hands back no placeholder; with it a rank holds one per shape it
    # runs. A rank with a dense layer holds the dense MLP's two shapes beside what a rank of MoE layers holds.
    fused, plain = load_run(CONFIGS / "deepseek-v3.yaml"), load_run(_fusion_off(tmp_path))
    held = [
        a.moments["optimizer"] - b.moments["optimizer"]
        for a, b in zip(run_stage_peaks(fused), run_stage_peaks(plain), strict=True)
    ]
    dense_ranks = {
        layer.stage for layer in walk(fused) if isinstance(layer.kind, BodyKind) and not isinstance(layer.kind.mlp, Moe)
    }
    ends = {layer.stage for layer in walk(fused) if layer.node != "BODY"}
    with_dense = [held[s] for s in dense_ranks - ends]
    without = [held[s] for s in set(range(len(held))) - dense_ranks - ends]
    assert with_dense and without
    assert {h - without[0] for h in with_dense} == {DENSE_MLP_BYTES}
    assert len(set(without)) == 1


def _two_kinds() -> list[dict]:
    # A: 1 layer, B: 2 layers; parameters 10 MB each, 20 MB of activations a micro-batch (NONE), 5 (FULL)
    return [
        {
            "name": f"BODY_{i}",
            "type": "BODY",
            "nb_layer": n,
            "time": 1.0,
            "memory_parameter": 10,
            "memory_activation": 20,
            "memory_recompute": 5,
            "backward_time": 2.0,
            "recompute_time": 3.0,
        }
        for i, n in enumerate([1, 2])
    ]


def test_a_plan_s_stage_memory_takes_the_relief_of_the_kinds_it_holds() -> None:
    # P = 2, m = 2, 1F1B: stage 0 holds 2 micro-batches in flight, stage 1 one. A constant of 100 MB and a relief
    # of 30 MB for a stage of A alone, 40 for B alone, 0 for both (and 50 for neither).
    workspace = StageWorkspace((0, 1), ((frozenset(), (50.0, 30.0, 40.0, 0.0)),))
    problem = BalanceInput(layer_set(_two_kinds()), 2, 2, 1, 1000.0, 100.0, workspace=workspace)
    counts = empty_counts(problem)
    none = OPTIONS.index("NONE")
    counts[0][0][0][none] = 1  # stage 0: A
    counts[1][0][1][none] = 2  # stage 1: B B
    plan = Plan(problem, freeze(counts))
    # stage 0: 100 − 30 + 10 + 2 · 20 = 120; stage 1: 100 − 40 + 2 · 10 + 1 · 2 · 20 = 120
    assert plan.exact_stage_memory(0) == Fraction(120) and plan.exact_stage_memory(1) == Fraction(120)
    mixed = empty_counts(problem)
    mixed[0][0][0][none] = 1
    mixed[1][0][0][none] = 1  # stage 0: A B, stage 1: B
    mixed[1][0][1][none] = 1
    other = Plan(problem, freeze(mixed))
    # stage 0: 100 − 0 + 2 · 10 + 2 · 2 · 20 = 200; stage 1: 100 − 40 + 10 + 20 = 90
    assert other.stage_memory_mb == [200.0, 90.0]
    catalogue = Catalogue(problem)
    a, ab = catalogue.cell_choices((0,), (1,))[0], catalogue.cell_choices((0, 1), (1, 1))
    assert catalogue.stage_memory(0, [a]) == 120.0
    assert min(catalogue.stage_memory(0, [c]) for c in ab) == 100 + 20 + 2 * 2 * 5  # both FULL: 140
    # at 130 MB the split A | B B fits (120, 120) and A B | B does not under NONE on stage 0
    tight = BalanceInput(layer_set(_two_kinds()), 2, 2, 1, 130.0, 100.0, workspace=workspace)
    assert Plan(tight, freeze(counts)).fits and not Plan(tight, freeze(mixed)).fits
