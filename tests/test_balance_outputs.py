"""What users paste: MindFormers yaml both ways (sapp_ppb/utils/recompute.py), Megatron-LM flags, the stage table."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppb_core.balance.outputs import cell_from_yaml, megatron, plan_from_yaml, stage_rows, to_yaml, yaml_from_cell
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.errors import InputError
from ppb_core.model.switches import CELL_RANK, OPTIONS
from ppb_core.payload.sapp import layer_set

MEMORY = {
    "NONE": "memory_activation",
    "SLCT": "memory_select_rec",
    "COMM": "memory_select_comm",
    "BOTH": "memory_both_comm_select",
    "FULL": "memory_recompute",
}


def _body(name: str, count: int, **extra: float) -> dict:
    return {
        "name": name,
        "type": "BODY",
        "nb_layer": count,
        "time": 1,
        "memory_parameter": 1,
        **{key: 1 for key in MEMORY.values()},
        **extra,
    }


def _problem(counts: list[int], stages: int, chunks: int, head: bool = True, tail: bool = True) -> BalanceInput:
    descriptions = []
    if head:
        descriptions.append({"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 1})
    descriptions += [_body(f"BODY_{i}", n) for i, n in enumerate(counts)]
    if tail:
        descriptions.append({"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1, "memory_parameter": 1})
    return BalanceInput(layer_set(descriptions), stages, stages * 2, chunks, 1e9)


def test_reference_cell_example() -> None:
    # sapp_ppb/utils/recompute.py: x = (NONE 2, SLCT 1, COMM 0, BOTH 1, FULL 1), nass 4 → offset 5 − 4 = 1,
    # recompute FULL = 1, select_recompute SLCT + BOTH + FULL = 3, select_comm_recompute COMM + BOTH + FULL = 2.
    assert yaml_from_cell((2, 1, 0, 1, 1), 4) == {
        "offset": 1,
        "recompute": 1,
        "select_recompute": 3,
        "select_comm_recompute": 2,
    }
    # and back: FULL 1, BOTH max(min(3 − 1, 2 − 1), 0) = 1, SLCT 3 − 1 − 1 = 1, COMM 2 − 1 − 1 = 0,
    # NONE 1 + 4 − 3 = 2.
    assert cell_from_yaml(1, 1, 3, 2, 4) == (2, 1, 0, 1, 1)


def _plan_with_counts(problem: BalanceInput, per_cell: list[list[int]]) -> Plan:
    counts = empty_counts(problem)
    for v, row in enumerate(per_cell):
        for s, n in enumerate(row):
            counts[0][v][s][OPTIONS.index("NONE")] = n
    return Plan(problem, freeze(counts))


@pytest.mark.parametrize(
    ("layers", "offsets"), [([6, 6, 5, 5], [1, 1, 0, 0]), ([5, 6, 6], [0, 1, 1]), ([5, 5, 5, 5], [0, 0, 0, 0])]
)
def test_offsets_match_dense_tuner(layers: list[int], offsets: list[int]) -> None:
    # hyper-parallel's dense_tuner/pipeline_balancer.py: offset = count − Σcounts // P,
    # e.g. [6,6,5,5]: 22 // 4 = 5 → [1,1,0,0].
    problem = _problem([sum(layers)], len(layers), 1)
    assert to_yaml(_plan_with_counts(problem, [layers]))["offset"] == offsets


def test_interleaved_yaml_is_per_chunk() -> None:
    problem = _problem([9], 2, 2)
    plan = _plan_with_counts(problem, [[2, 2], [2, 3]])
    # nass = 9 // 4 = 2
    assert to_yaml(plan) == {
        "offset": [[0, 0], [0, 1]],
        "recompute": [[0, 0], [0, 0]],
        "select_recompute": [[0, 0], [0, 0]],
        "select_comm_recompute": [[0, 0], [0, 0]],
    }


def test_true_means_every_layer_of_the_cell() -> None:
    problem = _problem([6], 3, 1)
    plan = plan_from_yaml(problem, {"offset": [0, 1, -1], "recompute": True, "select_recompute": False})
    assert [plan.cell_options(0, s) for s in range(3)] == [(0, 0, 0, 0, 2), (0, 0, 0, 0, 3), (0, 0, 0, 0, 1)]


def test_yaml_that_places_too_few_layers_is_refused() -> None:
    # 6 layers over 3 cells: nass 2, offsets summing to -1 leave 5 in the cells; MindFormers'
    # LayerSetting._check_inputs wants them to sum to 6 mod 3 = 0
    with pytest.raises(
        InputError, match="sums to -1: the cells hold 5 layers, the model 6; MindFormers needs 6 mod 3 cells = 0"
    ):
        plan_from_yaml(_problem([6], 3, 1), {"offset": [0, 0, -1]})


def test_one_offset_list_under_interleave_is_every_chunks() -> None:
    # MindFormers (models/utils.py LayerSetting, fd4deebc1) broadcasts an offset of P entries to
    # (pp_interleave_num, pp): 8 layers over 2 stages × 2 chunks, nass 8 // 4 = 2, offset [1, -1]
    # sums to 8 mod 4 = 0 and gives [[3, 1], [3, 1]] = 8 layers
    problem = _problem([8], 2, 2)
    plan = plan_from_yaml(problem, {"offset": [1, -1]})
    assert plan.counts == plan_from_yaml(problem, {"offset": [[1, -1], [1, -1]]}).counts
    assert [[sum(plan.cell_options(v, s)) for s in range(2)] for v in range(2)] == [[3, 1], [3, 1]]
    # `_check_inputs` sums the offset as given: 10 layers, [1, 0] sums to 1, not 10 mod 4 = 2 (broadcast,
    # it would have filled the 10 layers: 2·4 + 2·1; MindFormers refuses it all the same)
    with pytest.raises(InputError, match="sums to 1; MindFormers needs 10 layers mod 4 cells = 2"):
        plan_from_yaml(_problem([10], 2, 2), {"offset": [1, 0]})


def test_one_recompute_list_under_interleave_goes_a_layer_a_chunk_in_turn() -> None:
    # LayerSetting._alloc_recompute_layer: stage s's count handed out one layer to chunk 0, one to chunk 1,
    # ... while a chunk has layers left. Cells [[3, 1], [3, 1]] (offset [1, -1], nass 2): recompute
    # [5, 1] gives stage 0: chunk 0, chunk 1, chunk 0, chunk 1, chunk 0 → 3 and 2; stage 1: chunk 0 one
    # → [[3, 1], [2, 0]]
    problem = _problem([8], 2, 2)
    plan = plan_from_yaml(problem, {"offset": [1, -1], "recompute": [5, 1]})
    full = OPTIONS.index("FULL")
    assert [[plan.cell_options(v, s)[full] for s in range(2)] for v in range(2)] == [[3, 1], [2, 0]]
    # True: every layer of the stage; over the stage's layers (6 in stage 0): refused, naming the entry
    every = plan_from_yaml(problem, {"offset": [1, -1], "recompute": [True, 0]})
    assert [[every.cell_options(v, s)[full] for s in range(2)] for v in range(2)] == [[3, 0], [3, 0]]
    with pytest.raises(InputError, match=r"recompute\[0\]: 7 layers; stage 0 has 6 over its chunks"):
        plan_from_yaml(problem, {"offset": [1, -1], "recompute": [7, 0]})


def test_a_bool_offset_is_refused_naming_its_entry() -> None:
    with pytest.raises(InputError, match=r"offset\[0\]\[1\]: must be an integer, got True"):
        plan_from_yaml(_problem([8], 2, 2), {"offset": [[0, True], [0, 0]]})
    with pytest.raises(InputError, match=r"offset\[1\]: must be an integer, got True"):
        plan_from_yaml(_problem([8], 2, 2), {"offset": [0, True]})


@st.composite
def plans(draw):
    """A random valid plan: layers dealt to cells, each cell's options in yaml order along its layers."""
    stages = draw(st.integers(1, 4))
    chunks = draw(st.integers(1, 3))
    cells = stages * chunks
    kinds = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 6)) for _ in range(kinds)]
    if sum(sizes) < cells:
        sizes[-1] += cells - sum(sizes)
    problem = _problem(sizes, stages, chunks, head=draw(st.booleans()), tail=draw(st.booleans()))
    per_cell = [1 if cell not in problem.reserved_cells else 0 for cell in problem.cells]
    for _ in range(sum(sizes) - sum(per_cell)):
        per_cell[draw(st.integers(0, cells - 1))] += 1
    types = [t for t, n in enumerate(sizes) for _ in range(n)]
    counts = empty_counts(problem)
    start = 0
    for (v, s), n in zip(problem.cells, per_cell, strict=True):
        selective = draw(st.sampled_from(["SLCT", "COMM"]))
        ranked = ["FULL", "BOTH", selective, "NONE"]
        sequence = sorted(draw(st.lists(st.sampled_from(ranked), min_size=n, max_size=n)), key=lambda o: CELL_RANK[o])
        for body, option in zip(types[start : start + n], sequence, strict=True):
            counts[body][v][s][OPTIONS.index(option)] += 1
        start += n
    return Plan(problem, freeze(counts))


@settings(max_examples=200, deadline=None)
@given(plans())
def test_yaml_round_trip(plan: Plan) -> None:
    assert not plan.problems()
    assert plan_from_yaml(plan.problem, to_yaml(plan)).counts == plan.counts


def test_megatron_layout_and_flags() -> None:
    problem = _problem([6], 2, 2)
    # model order (chunk 0: stages 0, 1; chunk 1: stages 0, 1); head in the first, tail in the last
    plan = _plan_with_counts(problem, [[1, 2], [2, 1]])
    out = megatron(plan)
    assert out["layout"] == "Et|tt|tt|tL"
    # quoted for a shell: the | would otherwise be pipes
    assert out["flags"] == "--pipeline-model-parallel-layout 'Et|tt|tt|tL'"
    assert out["recompute"] == [] and out["recompute_expressible"]
    counts = [[[list(cell) for cell in row] for row in body] for body in plan.counts]
    for v, s in itertools.product(range(2), range(2)):  # the first layer of every virtual stage fully recomputed
        counts[0][v][s][OPTIONS.index("NONE")] -= 1
        counts[0][v][s][OPTIONS.index("FULL")] += 1
    block = megatron(Plan(problem, freeze(counts)))
    assert block["recompute"] == [
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "block",
        "--recompute-num-layers",
        "1",
    ]
    counts[0][0][1][OPTIONS.index("NONE")] -= 1
    counts[0][0][1][OPTIONS.index("SLCT")] += 1
    assert megatron(Plan(problem, freeze(counts)))["recompute_expressible"] is False


def test_first_and_last_stage_counts_when_the_middle_is_even() -> None:
    problem = _problem([14], 4, 1)
    out = megatron(_plan_with_counts(problem, [[2, 4, 4, 4]]))
    assert out["first_last"] == "--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 4"


def test_no_first_and_last_counts_for_a_stage_of_no_layer() -> None:
    """Megatron-Core refuses `--decoder-last-pipeline-num-layers 0` (transformer_config.py `__post_init__` at
    d98e8a64: "num_layers_in_last_pipeline_stage must be larger than 0"); a plan of 1, 2, 2, 0 layers (the
    loss alone on the last stage) printed it as the layout's alternative (session 27). The layout says it alone."""
    problem = _problem([5], 4, 1)
    out = megatron(_plan_with_counts(problem, [[1, 2, 2, 0]]))
    assert out["layout"].endswith("|L") and "first_last" not in out


def test_mtp_layers_count_in_the_yaml() -> None:
    # 6 body layers and one MTP layer on P = 2, V = 1: MindFormers' LayerSetting counts 7 layers, so
    # nass = 7 // 2 = 3; cells hold 3 and 3 body layers, the last also the MTP layer: offsets 0, 1.
    problem = BalanceInput(_problem([6], 2, 1).layers, 2, 4, 1, 1e9, framework="mindformers", mtp_layers=1)
    plan = _plan_with_counts(problem, [[3, 3]])
    assert to_yaml(plan)["offset"] == [0, 1]
    assert plan_from_yaml(problem, to_yaml(plan)).counts == plan.counts


def test_mindformers_needs_a_layer_in_every_cell() -> None:
    layers = _problem([6], 2, 1).layers
    # Megatron-Core runs a virtual stage holding only the embedding; MindFormers places layers only
    assert BalanceInput(layers, 2, 4, 1, 1e9, framework="megatron").reserved_cells == {(0, 0), (0, 1)}
    assert BalanceInput(layers, 2, 4, 1, 1e9, framework="mindformers").reserved_cells == set()
    # ... unless the last cell holds MTP layers, which MindFormers counts as layers
    assert BalanceInput(layers, 2, 4, 1, 1e9, framework="mindformers", mtp_layers=1).reserved_cells == {(0, 1)}


def test_stage_rows_by_hand() -> None:
    descriptions = [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 100},
        {
            "name": "BODY_0",
            "type": "BODY",
            "nb_layer": 3,
            "time": 10,
            "memory_parameter": 5,
            "memory_activation": 4,
            "memory_recompute": 1,
            "recompute_time": 30,
        },
    ]
    problem = BalanceInput(layer_set(descriptions), 2, 4, 1, 1e6)
    counts = empty_counts(problem)
    counts[0][0][0][OPTIONS.index("FULL")] = 1
    counts[0][0][1][OPTIONS.index("NONE")] = 2
    rows = stage_rows(Plan(problem, freeze(counts)))
    # stage 0 holds 2 micro-batches (1F1B, P − s = 2): 100 (head) + 5 + 2·1 = 107 MB;
    # time: head 1 + 2 (its backward, 2·time) + one FULL layer 10 + 30 = 43.
    assert rows[0]["memory_mb"] == 107 and rows[0]["time"] == 43 and rows[0]["options"] == {"NONE": 0, "FULL": 1}
    # stage 1 holds 1 micro-batch: 2·5 + 2·4 = 18 MB; time 2·(10 + 20) = 60.
    assert rows[1]["memory_mb"] == 18 and rows[1]["time"] == 60 and rows[1]["layers"] == 2
