"""`ppb balance` of a torchtitan run prints torchtitan v0.2.2's TOML lines for the plan's split
(`ppb_core.balance.torchtitan_plan`), and `ppb import torchtitan` reads them back to that split."""

from __future__ import annotations

import itertools
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from framework_rules import torchtitan_problems

from ppb_core.balance import probing, program
from ppb_core.balance.choices import Catalogue, ListingBudget
from ppb_core.balance.local import reoptioned
from ppb_core.balance.megatron import Setting
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.program import solve
from ppb_core.balance.progress import Clock, Progress, Reporter, WorkLimits
from ppb_core.balance.torchtitan_import import import_torchtitan
from ppb_core.balance.torchtitan_plan import (
    LAYERS_PER_STAGE_OUT,
    activation_checkpoint,
    module_fqns,
    torchtitan,
    torchtitan_lines,
)
from ppb_core.balance.torchtitan_settings import EveryNth, runnable, settings
from ppb_core.chain.stages import run_chain
from ppb_core.cli.main import main
from ppb_core.config.recompute import TorchtitanRecompute, resolve
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set
from ppb_core.report.render import report_files

# The rest of a job TOML: Llama-3.1-8B (32 layers), TP 2, 8 GPUs (dp_shard 1 × tp 2 × pp 4, or pp 2 × dp 2).
REST = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 8
seq_len = 8192
"""


def test_module_names_per_stage_are_torchtitans() -> None:
    # generate_llm_fqn_per_model_part's names: tok_embeddings first, layers.N counted on, norm and output last
    assert module_fqns([2, 0, 1]) == [["tok_embeddings", "layers.0", "layers.1"], [], ["layers.2", "norm", "output"]]


def test_one_setting_for_every_block_or_none_said() -> None:
    op = TorchtitanRecompute(mode="selective", option="op")
    assert activation_checkpoint({"NONE"}, None) == ({"mode": "none"}, None)
    assert activation_checkpoint({"FULL"}, op) == ({"mode": "full"}, None)
    assert activation_checkpoint({"SLCT"}, op) == ({"mode": "selective", "selective_ac_option": "op"}, None)
    ac, why = activation_checkpoint({"SLCT"}, {"attBMM": 0})  # ppb's switch set: not torchtitan's op policy
    assert ac is None and "torchtitan's words" in (why or "")
    ac, why = activation_checkpoint({"NONE", "FULL"}, op)
    assert ac is None and "FULL, NONE on different layers" in (why or "")
    # the setting the balancer solved under says it: selective_ac_option is a string in job_config.py
    every = {"name": "every", "num_layers": 3}
    assert activation_checkpoint({"NONE", "FULL"}, None, every) == (
        {"mode": "selective", "selective_ac_option": "3"},
        None,
    )


def test_every_nth_block_is_torchtitans_layer_sac() -> None:
    # torchtitan/distributed/activation_checkpoint.py `_apply_layer_sac` (v0.2.2, 73a0e697): the counter is
    # incremented first, then `_layer_sac_count % ac_freq == 0` wraps the block: with N = 3 over 8 blocks
    # the counts 3 and 6 are wrapped, the 3rd and 6th blocks (positions 2 and 5): 8 // 3 = 2 FULL, 6 NONE
    assert EveryNth("every", 3).along(8) == ["NONE", "NONE", "FULL", "NONE", "NONE", "FULL", "NONE", "NONE"]
    assert EveryNth("every", 3).cell_options(8) == {"FULL": 2, "NONE": 6}
    assert EveryNth("every", 9).cell_options(8) == {"FULL": 0, "NONE": 8}
    # the importer's reading of the same words (config.recompute, counted from the rank's first block)
    assert resolve(TorchtitanRecompute(mode="selective", option=3)).chunk_options(8) == EveryNth("every", 3).along(8)
    # the settings: none, the op policy, every N-th for 2 ≤ N ≤ the most layers a rank holds, full last
    names = [(s.name, s.num_layers) for s in settings(("NONE", "SLCT", "FULL"), 4)]
    assert names == [("none", 0), ("selective", 0), ("every", 2), ("every", 3), ("every", 4), ("full", 0)]
    assert [s.name for s in settings(("NONE", "FULL"), 1)] == ["none", "full"]


def test_every_nth_counts_a_ranks_blocks_across_its_chunks() -> None:
    # 16 blocks, PP 2 × 2 chunks, loop style (pipeline_module_split `_get_stage_indices`: rank 0 builds
    # stages 0 and 2, rank 1 stages 1 and 3, in that order) with the split 5 | 3 | 4 | 4 in model order:
    # rank 0 holds layers 0-4 (chunk 0) and 8-11 (chunk 1), rank 1 layers 5-7 and 12-15. `apply_ac` runs
    # on each model part in turn and `_layer_sac_count` is never reset, so with N = 3:
    #   rank 0 counts 1-5 on layers 0-4 and 6-9 on layers 8-11: counts 3, 6, 9 → layers 2, 8, 11
    #   rank 1 counts 1-3 on layers 5-7 and 4-7 on layers 12-15: counts 3, 6 → layers 7, 14
    every = EveryNth("every", 3)
    assert every.along(5) == ["NONE", "NONE", "FULL", "NONE", "NONE"]  # rank 0, chunk 0
    assert every.along(4, before=5) == ["FULL", "NONE", "NONE", "FULL"]  # rank 0, chunk 1: counts 6 and 9
    assert every.along(3) == ["NONE", "NONE", "FULL"]  # rank 1, chunk 0
    assert every.along(4, before=3) == ["NONE", "NONE", "FULL", "NONE"]  # rank 1, chunk 1: count 6
    assert every.cell_options(4, before=5) == {"FULL": 2, "NONE": 2}  # where counting afresh would give 1
    # the run config's reading of the same words counts the same way (config.recompute, `first`)
    rule = resolve(TorchtitanRecompute(mode="selective", option=3))
    assert rule.chunk_options(4, first=5) == every.along(4, before=5)
    assert rule.chunk_options(4, first=3) == every.along(4, before=3)
    # the balancer's options for that split: [chunk][stage] FULL counts 1, 1 / 2, 1
    problem = BalanceInput(layer_set([_body("BODY_0", 16)]), 2, 4, 2, 1000.0, schedule="interleaved")
    split = {(0, 0): 5, (0, 1): 3, (1, 0): 4, (1, 1): 4}
    counts = empty_counts(problem)
    for (v, s), n in split.items():
        counts[0][v][s][OPTIONS.index("NONE")] = n
    given = reoptioned(problem, freeze(counts), program._reoption(every))
    full = OPTIONS.index("FULL")
    assert [[given[0][v][s][full] for s in range(2)] for v in range(2)] == [[1, 1], [2, 1]]
    # torchtitan v0.2.2's settings: every N-th offered up to the most blocks a rank can hold (16 − 2 cells
    # of the other rank = 14), with several chunks a rank too
    names = [s.num_layers for s in settings(("NONE", "FULL"), program._rank_cap(problem)) if s.name == "every"]
    assert names == list(range(2, 15))


def _counted(split: dict[tuple[int, int], int], stages: int, chunks: int, n: int) -> dict[tuple[int, int], int]:
    """FULL blocks per cell as torchtitan v0.2.2 wraps them (written from activation_checkpoint.py
    `_apply_layer_sac`, independently of ppb): per rank one counter over its chunks in order; n = 0 none,
    n = 1 every block."""
    full = {}
    for s in range(stages):
        count = 0
        for v in range(chunks):
            wrapped = 0
            for _ in range(split[(v, s)]):
                count += 1
                wrapped += n > 0 and count % n == 0
            full[(v, s)] = wrapped
    return full


def test_with_two_chunks_a_rank_the_plan_is_the_best_of_every_split_under_torchtitans_settings() -> None:
    # 8 blocks over PP 2 × 2 chunks (interleaved, m = 4) in 95 MB: every split of the blocks over the four
    # cells under every setting torchtitan takes (none, every N-th for N = 2..8, full), each cell's FULL
    # blocks where a rank's count puts them (`_counted`), priced by the schedule torch runs in lock step
    # (`Plan.iteration_time`, tests/test_balance_lockstep.py): the fastest that fits is every 3rd at
    # 2 | 2 | 2 | 2, 62.0: each rank counts 1-2 | 3-4, so chunk 1 holds one FULL block on each rank
    # (backward 2 + 3 = 5, chunk 0's 4; 62 by hand in tests/test_balance_lockstep.py). Rank 0's peak, before
    # its B10 and F03 (3 and 4 chunk-0 micro-batches of 20 MB in flight, 2 and 1 of chunk 1's 11 MB): 82, 91 MB;
    # all NONE there holds 4·20 + 20 = 100 MB. Counting afresh in every cell puts no FULL block in a cell
    # of 2 under every 3rd, which does not fit: its fastest is NONE at 1 | 2 | 3 | 2, 63.0.
    layers = runnable(layer_set([_body("BODY_0", 8)]), op=False)
    problem = BalanceInput(layers, 2, 4, 2, 95.0, schedule="interleaved", framework="torchtitan")
    full, none = OPTIONS.index("FULL"), OPTIONS.index("NONE")

    def fastest(afresh: bool) -> tuple[float, int, tuple[int, ...]]:
        found: tuple[float, int, tuple[int, ...]] | None = None
        for cut in itertools.combinations(range(1, 8), 3):
            parts = tuple(b - a for a, b in zip((0, *cut), (*cut, 8), strict=True))
            split = dict(zip(problem.cells, parts, strict=True))
            for n in (0, *range(2, 9), 1):
                if afresh:  # each cell its own count: the wrong reading
                    wrapped = {cell: _counted({(0, 0): k}, 1, 1, n)[(0, 0)] for cell, k in split.items()}
                else:
                    wrapped = _counted(split, 2, 2, n)
                counts = empty_counts(problem)
                for (v, s), k in wrapped.items():
                    counts[0][v][s][full], counts[0][v][s][none] = k, split[(v, s)] - k
                plan = Plan(problem, freeze(counts))
                if plan.fits and not plan.problems() and (found is None or plan.iteration_time < found[0] - 1e-9):
                    found = (plan.iteration_time, n, parts)
        assert found is not None
        return found

    assert fastest(afresh=False) == (pytest.approx(62.0), 3, (2, 2, 2, 2))
    assert fastest(afresh=True) == (pytest.approx(63.0), 0, (1, 2, 3, 2))
    solution = solve(problem)
    assert solution.status == "optimal" and solution.objective == pytest.approx(62.0)
    assert solution.setting == EveryNth("every", 3)
    plan = solution.plan
    assert plan is not None
    split = {cell: plan.cell_layers(*cell) for cell in problem.cells}
    assert {cell: plan.cell_options(*cell)[full] for cell in problem.cells} == _counted(split, 2, 2, 3)


@pytest.mark.parametrize("memory", [95.0, 1000.0])
def test_every_nth_across_chunks_is_not_searched_when_no_none_plan_could_lose(
    memory: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each FULL block's backward (3) is above NONE's (2), so no every N-th plan beats the fastest all-NONE
    # plan with memory unbounded (`_none_floor`: the schedule's makespan grows with its ops' times). In
    # 1000 MB the none setting fits at that floor: the every N-th settings are not searched, and the plan is
    # what searching them gives. In 95 MB none is held up by memory and they are searched (every 3rd, 62.0).
    layers = runnable(layer_set([_body("BODY_0", 8)]), op=False)
    problem = BalanceInput(layers, 2, 4, 2, memory, schedule="interleaved", framework="torchtitan")
    pruned = solve(problem)
    monkeypatch.setattr(program, "_none_floor", lambda *args: 0.0)
    searched = solve(problem)
    assert pruned.objective == pytest.approx(searched.objective)
    assert pruned.setting == searched.setting and pruned.plan is not None and searched.plan is not None
    assert pruned.plan.counts == searched.plan.counts
    skipped = any("not searched" in note and "`_none_floor`" in note for note in pruned.notes)
    assert skipped == (memory == 1000.0)
    assert pruned.setting == (Setting("none") if memory == 1000.0 else EveryNth("every", 3))


def test_a_torchtitan_solve_says_which_setting_it_is_at() -> None:
    """A torchtitan balance tries up to 30 settings (Llama-3.1-8B PP 2 × 4 chunks at 55000 MB: 46 CPU s) and
    printed their results as `megatron:` lines, its solves' steps with no word of whose they were: each
    setting now starts with a step naming it (k of n), its solve's steps say it, its result is `torchtitan:`."""
    layers = runnable(layer_set([_body("BODY_0", 8)]), op=False)
    problem = BalanceInput(layers, 2, 4, 2, 95.0, schedule="interleaved", framework="torchtitan")
    steps: list[Progress] = []
    solution = solve(problem, progress=steps.append)
    assert solution.setting == EveryNth("every", 3)
    started = [step.message for step in steps if step.phase == "setting_start"]
    # none, full and every N-th for N = 2.. (8 blocks over 2 ranks: a rank's count up to 8): numbered in order
    total = len(started)
    assert total >= 3 and all(f" of {total}, " in text for text in started)
    assert [int(text.split(" of ")[0].rsplit(" ", 1)[1]) for text in started] == list(range(1, total + 1))
    assert started[0] == f"torchtitan setting 1 of {total}, no recompute"
    assert "megatron" not in {step.phase for step in steps}
    assert any(step.message.startswith("every 3rd block") for step in steps if step.phase == "torchtitan")
    # between one setting's start and the next, its solve's steps carry its name
    at = ""
    for step in steps:
        if step.phase == "setting_start":
            at = step.message
        elif at and step.phase not in ("torchtitan", "done"):
            assert step.message.startswith(at + ":"), (at, step)


def test_a_megatron_solve_says_which_setting_it_is_at() -> None:
    """The same for Megatron-Core's settings, solved beside a plan mixing options: each named as it starts."""
    layers = runnable(layer_set([_body("BODY_0", 8)]), op=False)
    problem = BalanceInput(layers, 2, 4, 2, 70.0, schedule="interleaved", framework="megatron")  # 4 settings tried
    steps: list[Progress] = []
    solve(problem, progress=steps.append)
    started = [step.message for step in steps if step.phase == "setting_start"]
    assert started and started[0].startswith(f"Megatron-Core setting 1 of {len(started)}, ")
    at = ""
    for step in steps:
        if step.phase == "setting_start":
            at = step.message
        elif at and step.phase not in ("megatron", "done"):
            assert step.message.startswith(at + ":"), (at, step)


def test_a_probing_says_how_far_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probing solved thousands of relaxations (5,292 in 13 CPU s for one setting) with no step told: it now
    tells its count against its work limit and the stage choices left, every `TELL_EVERY` relaxations (each
    one here). Nothing depends on it: the plan is the same."""
    layers = runnable(layer_set([_body("BODY_0", 8)]), op=False)
    problem = BalanceInput(layers, 2, 4, 2, 95.0, schedule="interleaved", framework="torchtitan")
    quiet = solve(problem)
    monkeypatch.setattr(probing, "TELL_EVERY", 1)
    steps: list[Progress] = []
    told = solve(problem, progress=steps.append)
    assert told.plan is not None and quiet.plan is not None and told.plan.counts == quiet.plan.counts
    said = [step.message.rsplit(": ", 1)[1] for step in steps if step.phase == "probing"]
    assert said
    pattern = re.compile(
        r"([\d,]+) of at most ([\d,]+) relaxations, round (\d+), ([\d,]+) of ([\d,]+) stage choices left"
    )
    for text in said:
        found = pattern.fullmatch(text)
        assert found, text
        solved, most, _, left, listed = (int(group.replace(",", "")) for group in found.groups())
        assert 1 <= solved <= most and 0 <= left <= listed


def test_every_nth_is_not_searched_where_n_blocks_on_a_rank_lose_to_the_best_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # forward 1 + NONE backward 2 a block, FULL 1 more: a rank holding N blocks under every N-th runs at
    # least m·(3N + 1) = 4·(3N + 1) for its m = 4 micro-batches, 64 at N = 5, 76 at N = 6
    layers = runnable(layer_set([_body("BODY_0", 16)]), op=False)
    problem = BalanceInput(layers, 2, 4, 2, 1000.0, schedule="interleaved", framework="torchtitan")
    assert program._rank_layers_floor(problem, 5) == pytest.approx(64.0)
    assert program._rank_layers_floor(problem, 6) == pytest.approx(76.0)
    # a split of the 16 blocks over the 2 ranks with each rank's m·(3L + ⌊L/N⌋) below 106 (no head or tail):
    # every 2nd, 3·7 + 3 = 24 fits (96) and 3·8 + 4 = 28 does not (112), 7 + 7 < 16 blocks: none; every
    # 3rd, 3·8 + 2 = 26 (104) fits, 8 + 8: some
    assert not program._every_nth_split(problem, 2, 106.0)
    assert program._every_nth_split(problem, 3, 106.0)
    # so a plan faster than the best one so far holds fewer than N blocks on each rank, recomputes none, and is
    # the none setting's: the same plan whether those settings are solved or not
    pruned = solve(problem)
    monkeypatch.setattr(program, "_rank_layers_floor", lambda *args: 0.0)
    monkeypatch.setattr(program, "_none_floor", lambda *args: 0.0)
    searched = solve(problem)
    assert pruned.plan is not None and searched.plan is not None
    assert pruned.objective == pytest.approx(searched.objective) and pruned.setting == searched.setting
    assert pruned.plan.counts == searched.plan.counts
    # the none setting's plan, 4 blocks a cell (f 4, b 8), takes 112 under torch's lock step: twice the
    # 56 of f 2, b 4 worked by hand in tests/test_balance_lockstep.py (96 of work and the fill). N = 10
    # (4·31 = 124) and above lose at once; N = 9 (4·28 = 112) only ties, and 2..9 are left to `_none_floor`
    # (112, the none plan fitting in 1000 MB); `_every_nth_split` prunes none at 112 (every 2nd: 8 + 8 blocks
    # at 4·28 = 112, within the tie tolerance of the bar)
    said = [note for note in pruned.notes if "recomputes no block" in note]
    assert len(said) == 1 and " 10..14 (5) " in said[0], pruned.notes
    assert any("2..9 (8) not searched, none faster than 112" in note for note in pruned.notes), pruned.notes


@pytest.mark.parametrize("every", [2, 3, 4])
def test_the_cell_program_pairs_a_ranks_chunks_under_every_nth(every: int) -> None:
    # The stage listing cut at once (`stage_choices` 1), the program over cell choices solves the setting
    # (`cell_model.CellModel._rank_counts`): its plan must be the best of every split with each cell's
    # FULL blocks where the rank's count puts them (`_counted`), 8 blocks on PP 2 × 2 chunks in 100 MB,
    # timed in torch's lock step: every 2nd 65.0, every 3rd and 4th 62.0 (every 3rd's 2 | 2 | 2 | 2 worked by
    # hand in tests/test_balance_lockstep.py). Without the rows pairing a cell with its rank's earlier chunks
    # it took each cell's assignment at any count (under the op graph, before session 27: 61.0 and 54.0
    # claimed against 63.0 and 59.0).
    layers = runnable(layer_set([_body("BODY_0", 8)]), op=False)
    problem = BalanceInput(layers, 2, 4, 2, 100.0, schedule="interleaved", framework="torchtitan")
    setting = EveryNth("every", every)
    full, none = OPTIONS.index("FULL"), OPTIONS.index("NONE")
    best = math.inf
    for cut in itertools.combinations(range(1, 8), 3):
        parts = tuple(b - a for a, b in zip((0, *cut), (*cut, 8), strict=True))
        split = dict(zip(problem.cells, parts, strict=True))
        counts = empty_counts(problem)
        for (v, s), k in _counted(split, 2, 2, every).items():
            counts[0][v][s][full], counts[0][v][s][none] = k, split[(v, s)] - k
        plan = Plan(problem, freeze(counts))
        if plan.fits and not plan.problems():
            best = min(best, plan.iteration_time)
    assert best == pytest.approx({2: 65.0, 3: 62.0, 4: 62.0}[every])
    clock = Clock(None)
    catalogue = Catalogue(problem, setting, ListingBudget(10**9, clock))
    limits = WorkLimits(stage_choices=1)
    found = program._solve(problem, catalogue, True, limits, clock, Reporter(None, clock), True, setting)
    assert "stage listing stopped by the work limit" in found.notes
    assert any(note.startswith("cell program:") and note.endswith("optimal") for note in found.notes)
    assert found.objective == pytest.approx(best)
    assert found.plan is not None
    split = {cell: found.plan.cell_layers(*cell) for cell in problem.cells}
    assert {cell: found.plan.cell_options(*cell)[full] for cell in problem.cells} == _counted(split, 2, 2, every)


def _body(name: str, count: int) -> dict[str, Any]:
    # per layer: forward 1, backward NONE 2 / SLCT 2.05 / COMM 2.1 / BOTH 2.2 / FULL 3; MB per micro-batch in
    # flight NONE 10, SLCT 7, COMM 6, BOTH 5, FULL 1
    return {
        "name": name,
        "type": "BODY",
        "nb_layer": count,
        "time": 1,
        "memory_parameter": 0,
        "memory_activation": 10,
        "memory_select_rec": 7,
        "memory_select_comm": 6,
        "memory_both_comm_select": 5,
        "memory_recompute": 1,
        "backward_time": 2,
        "select_rec_time": 2.05,
        "select_comm_time": 2.1,
        "both_comm_select_time": 2.2,
        "recompute_time": 3,
    }


def test_the_balancer_picks_only_what_torchtitan_runs() -> None:
    layers = layer_set([_body("BODY_0", 6)])
    assert runnable(layers, op=False).options == ("NONE", "FULL")
    assert runnable(layers, op=True).options == ("NONE", "SLCT", "FULL")
    # one stage, 1F1B, m = 2: one micro-batch in flight, the iteration 2·(F + B) of the stage's 6 layers,
    # memory Σ MB of the layers' options, 45 MB:
    #   none 6·10 = 60 no; every 2nd: 3 FULL + 3 NONE = 33, 2·(6 + 3·3 + 3·2) = 42; every 3rd: 2 FULL + 4 NONE
    #   = 42, 2·(6 + 2·3 + 4·2) = 40; every 4th to 6th: 1 FULL + 5 NONE = 51 no; full 6, 2·(6 + 18) = 48.
    # Free of torchtitan's rules, 1 NONE + 5 SLCT (ppb's switch set, 45 MB: 15 MB saved at 0.05 per 3 MB, the
    # cheapest saving) would take 2·(6 + 2 + 5·2.05) = 36.5.
    free = solve(BalanceInput(layers, 1, 2, memory_mb=45.0))
    assert free.objective == pytest.approx(36.5)
    problem = BalanceInput(runnable(layers, op=False), 1, 2, memory_mb=45.0, framework="torchtitan")
    solution = solve(problem)
    assert solution.status == "optimal" and solution.objective == pytest.approx(40.0)
    assert solution.setting == EveryNth("every", 3)
    assert solution.plan is not None and solution.plan.cell_options(0, 0)[OPTIONS.index("FULL")] == 2


def test_every_nth_places_full_by_position_across_body_types() -> None:
    # 2 dense then 4 MoE blocks in one cell, every 2nd block full (blocks 2, 4, 6): dense 1 NONE + 1 FULL,
    # MoE 2 NONE + 2 FULL (Megatron's block method would put the cell's first layers full instead).
    # Memory 45 MB: none 60 no, every 2nd 33, every 3rd 42 but every 3rd takes 2·(6 + 2·3 + 4·2) = 40
    # against every 2nd's 42, so 34 MB leaves every 2nd and full (48) only.
    layers = layer_set([_body("BODY_0", 2), _body("BODY_1", 4)])
    problem = BalanceInput(layers, 1, 2, memory_mb=34.0, framework="torchtitan")
    solution = solve(problem)
    assert solution.setting == EveryNth("every", 2) and solution.objective == pytest.approx(42.0)
    assert solution.plan is not None and not solution.plan.problems()
    full, none = OPTIONS.index("FULL"), OPTIONS.index("NONE")
    dense, moe = (solution.plan.counts[b][0][0] for b in range(2))
    assert (dense[none], dense[full], moe[none], moe[full]) == (1, 1, 2, 2)


def _result(grid: list[list[dict[str, int]]], schedule: str, framework: str = "torchtitan") -> dict[str, Any]:
    given = {
        "stages": len(grid[0]),
        "interleave": len(grid),
        "schedule": schedule,
        "framework": framework,
        "micro_batches": 4,
    }
    return {"input": given, "cells": [[{"options": options} for options in row] for row in grid]}


def test_a_mixed_plan_gives_the_split_only_and_stage_order_is_chunk_by_chunk() -> None:
    # [chunk][stage]: P = 2, V = 2; torchtitan's loop style puts stage rank + chunk·P on each rank, so
    # the parts in order are (0,0) 2 layers, (0,1) 1, (1,0) 1, (1,1) 2 → layers 0-1 | 2 | 3 | 4-5
    grid = [[{"FULL": 2}, {"NONE": 1}], [{"NONE": 1}, {"NONE": 2}]]
    said = torchtitan(_result(grid, "interleaved"), TorchtitanRecompute(mode="full"))
    assert said is not None and said["activation_checkpoint"] is None and "not expressible" in said["note"]
    assert said["lines"] == [
        "[parallelism]",
        "pipeline_parallel_degree = 2",
        'pipeline_parallel_schedule = "Interleaved1F1B"',
        'module_fqns_per_model_part = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2"], ["layers.3"], '
        '["layers.4", "layers.5", "norm", "output"]]',
        LAYERS_PER_STAGE_OUT,
    ]
    # with the run's batch, b = 2 on dp 4 at m = 4: micro-batch 2, local 2·4 = 8, global 8·4 = 32 (train.py
    # `Trainer.__init__`: one gradient-accumulation step; pipeline_llm: 8 / 2 = 4 micro-batches)
    batched = torchtitan(_result(grid, "interleaved"), TorchtitanRecompute(mode="full"), (2, 4))
    assert batched is not None and batched["lines"] == [
        *said["lines"][:3],
        "pipeline_parallel_microbatch_size = 2",
        *said["lines"][3:5],
        "# the batch the plan was priced at: merge these keys into your own [training] table",
        "[training]",
        "local_batch_size = 8",
        "global_batch_size = 32",
    ]
    assert batched["batch"] == {"pipeline_parallel_microbatch_size": 2, "local_batch_size": 8, "global_batch_size": 32}
    # pasted below a job's own [training] unmerged, the file is refused, not read with either batch
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(REST + "\n".join(batched["lines"]))
    assert torchtitan(_result(grid, "interleaved", "megatron"), None) is None
    # PP 1: no split to say, only the plan's [activation_checkpoint] (a NONE plan under a config that
    # checkpoints would otherwise run the config's own policy)
    unsplit = torchtitan(_result([[{"NONE": 6}]], "1f1b"), None)
    assert unsplit is not None and unsplit["lines"] == ["[activation_checkpoint]", 'mode = "none"']
    assert unsplit["module_fqns_per_model_part"] is None and unsplit["recompute_expressible"]
    assert torchtitan(_result([[{"FULL": 6}]], "1f1b"), None)["lines"] == FULL_AC.splitlines()  # type: ignore[index]
    mixed = torchtitan(_result([[{"FULL": 2, "NONE": 4}]], "1f1b"), None)
    assert mixed is not None and mixed["lines"] is None and "not expressible" in mixed["note"]
    assert torchtitan(_result(grid, "dualpipev"), None)["lines"] is None  # type: ignore[index]
    assert torchtitan(_result(grid, "gpipe"), None)["lines"] is None  # type: ignore[index]


FULL_AC = '[activation_checkpoint]\nmode = "full"\n'
OP_AC = '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n'


def _balance(
    tmp_path: Path, parallelism: str, memory: str, capsys: pytest.CaptureFixture[str], ac: str = FULL_AC
) -> dict[str, Any]:
    job = tmp_path / "job.toml"
    job.write_text(REST + parallelism + ac)
    run = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(run)]) == 0
    capsys.readouterr()
    assert main(["balance", str(run), "--json", *(["--memory", memory] if memory else [])]) == 0
    return json.loads(capsys.readouterr().out)


PP4 = "[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 2\npipeline_parallel_degree = 4\n"
PP2V2 = (
    "[parallelism]\ndata_parallel_shard_degree = 2\ntensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
    'pipeline_parallel_schedule = "Interleaved1F1B"\npipeline_parallel_layers_per_stage = 9\n'
)


# the device's memory, or less (MB): at 30000 only full recompute fits, at 36000 every 2nd block full (every
# 3rd from torchtitan's eager loss_parallel, priced in session 20, until session 21's H100 GEMM share made
# every recomputed GEMM dearer: the split shifted), or
# with the run's op policy offered every block under it; PP 2 × 2 chunks: at 43000 full, at 46000 every 2nd
# block of a rank, at 51000 every 3rd (counted across a rank's two chunks; every 5th at uneven chunks, 1 | 9 |
# 15 | 7, until session 27 timed the plans in torch's lock step: that plan is slower there than uniform FULL;
# 45000, 50000 and 55000 until session 28, when the FSDP2 sharded gradients, formed in the backward after
# train.py's zero_grad, left the forward's static memory: 43000, 46000 and 51000 then; session 32 charges each
# FSDP2 stage what the caching allocator reserves beyond its allocated peak, 4.6-4.8 GB a stage here (its
# sharded gradients 3.8 GB and the copy-in pool's 0.8-1.0 GB: `memory.reserved`), so every 2nd block at 51000
# (stage 1: 42,640 MB allocated + 4,789 reserved beyond it) and every 3rd at 56000 (45,394 + 4,789) now)
@pytest.mark.parametrize(
    ("parallelism", "memory", "ac", "recompute"),
    [
        (PP4, "", FULL_AC, {"mode": "none"}),
        (PP4, "30000", FULL_AC, {"mode": "full"}),
        (PP4, "36000", FULL_AC, {"mode": "selective", "option": 2}),
        (PP4, "36000", OP_AC, {"mode": "selective", "option": "op"}),
        (PP2V2, "", FULL_AC, {"mode": "none"}),
        (PP2V2, "43000", FULL_AC, {"mode": "full"}),
        (PP2V2, "51000", FULL_AC, {"mode": "selective", "option": 2}),
        (PP2V2, "56000", FULL_AC, {"mode": "selective", "option": 3}),
    ],
)
def test_the_printed_lines_import_back_to_the_plan(
    tmp_path: Path, parallelism: str, memory: str, ac: str, recompute: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _balance(tmp_path, parallelism, memory, capsys, ac)
    said = result["torchtitan"]
    # the plan's split from its stage table, in model order (chunk by chunk), as a layout
    rows = result["stages"]
    chunks = len(rows[0]["layers_per_chunk"])
    counts = [row["layers_per_chunk"][v] for v in range(chunks) for row in rows]
    split = "|".join(
        ("E" if i == 0 else "") + "t" * n + ("L" if i == len(counts) - 1 else "") for i, n in enumerate(counts)
    )
    dp = (
        "data_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n"
        if chunks == 1
        else ("data_parallel_shard_degree = 2\ntensor_parallel_degree = 2\n")
    )
    # a torchtitan run's plan is one of torchtitan's settings: never COMM or BOTH, always said whole
    used = {o for row in rows for o, n in row["options"].items() if n}
    assert used <= {"NONE", "SLCT", "FULL"} and said["recompute_expressible"]
    assert "SLCT" not in used or ac == OP_AC  # SLCT only as the run's op policy
    toml = _merged(said["lines"], dp)
    job = tmp_path / "back.toml"
    job.write_text(toml)
    back = tmp_path / "back.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(back)]) == 0
    raw = import_torchtitan(toml, 8, "h100-80gb").raw
    assert raw["parallel"]["layout"] == split
    assert raw["parallel"]["pp"] == len(rows) and raw["parallel"]["vpp"] == chunks
    assert raw["training"]["recompute"] == recompute
    # the batch priced: REST's local 8 at the default micro-batch 1 is 8 micro-batches of 1
    assert (raw["training"]["micro_batch_size"], raw["training"]["micro_batches"]) == (1, 8)
    assert said["batch"]["local_batch_size"] == 8 and result["input"]["micro_batches"] == 8
    # what the imported job runs per rank (config.recompute counts a rank's blocks across its chunks) is
    # the plan's options, cell by cell
    recompute = resolve(TorchtitanRecompute(**raw["training"]["recompute"]))
    for stage, row in enumerate(rows):
        first = 0
        for chunk, layers in enumerate(row["layers_per_chunk"]):
            wanted = sum(option == "FULL" for option in recompute.chunk_options(layers, first))
            assert result["cells"][chunk][stage]["options"].get("FULL", 0) == wanted
            first += layers
    # and `ppb estimate` of the imported job prices the plan's iteration
    capsys.readouterr()
    assert main(["estimate", str(back), "--json"]) == 0
    estimated = json.loads(capsys.readouterr().out)
    assert estimated["iteration"]["seconds"] == pytest.approx(result["iteration"]["seconds"], rel=1e-9)


def test_more_memory_never_balances_to_a_slower_iteration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # PP 2 × 2 chunks: every plan that fits in 46000 MB fits in 51000, so the plan there is no slower (50000
    # and 55000 until session 28: at 55000 no plan recomputes now, the baseline's own). Before
    # session 27 the balancer timed its plans by the op graph while the iteration priced torch's lock step
    # (`ppb_core.pipeline_lockstep`): at 55000 its optimum (every 5th, 1 | 9 | 15 | 7) priced 2.743 s, worse
    # than uniform FULL's 2.710 s, which replaced it, while the 50000 MB plan priced 2.580 s
    at = {memory: _balance(tmp_path, PP2V2, memory, capsys) for memory in ("46000", "51000")}
    seconds = {memory: result["iteration"]["seconds"] for memory, result in at.items()}
    assert seconds["51000"] <= seconds["46000"]
    for result in at.values():
        assert result["iteration"]["seconds"] < result["baseline_iteration"]["seconds"]
        assert not any("is faster by the iteration" in note for note in result["solver"]["notes"])


def test_a_plan_not_torchtitans_is_printed_as_its_split_only() -> None:
    said = {"lines": ["[parallelism]", "pipeline_parallel_degree = 2"], "recompute_expressible": False, "note": "why"}
    assert torchtitan_lines(said) == [
        "torchtitan job TOML, the plan's split only, NOT runnable alone (it leaves out the plan's recompute):",
        "  [parallelism]",
        "  pipeline_parallel_degree = 2",
        "  (why)",
    ]


def _tight_run(tmp_path: Path) -> Path:
    """Llama-3.1-8B TP 2 × PP 4 from the job TOML, on an H100 with 36,000 MB usable: its plan is every
    2nd block full (`ppb balance --memory 36000` above, docs/balance.md)."""
    job = tmp_path / "job.toml"
    job.write_text(REST + PP4 + '[activation_checkpoint]\nmode = "full"\n')
    run = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(run)]) == 0
    text = run.read_text().replace(  # the import's `reserved_mb: auto` replaced by 36,000 MB usable, as stated
        "device:\n  name: h100-80gb\n  reserved_mb: auto",
        "device:\n  name: h100-80gb\n  memory_mb: 36000\n  reserved_mb: 0",
    )
    assert text != run.read_text()
    run.write_text(text)
    return run


def _merged(lines: list[str], dp: str) -> str:
    """REST and the printed lines as one job TOML, the lines' `[training]` keys merged into REST's
    `[training]` as their comment says (theirs replacing REST's), *dp* added to `[parallelism]`."""
    head, _, training = "\n".join(lines).partition("[training]\n")
    rest = REST
    for line in training.splitlines():
        key = line.split(" = ")[0]
        rest = "".join(kept for kept in rest.splitlines(keepends=True) if not kept.startswith(key + " = "))
    rest = rest.replace("[training]\n", "[training]\n" + training + ("\n" if training else ""), 1)
    return rest + head.replace("[parallelism]\n", "[parallelism]\n" + dp, 1) + "\n"


def _imported_layout(lines: list[str], dp: str = "data_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n") -> Any:
    return import_torchtitan(_merged(lines, dp), 8, "h100-80gb").raw


def test_check_and_the_report_give_the_optimums_torchtitan_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _tight_run(tmp_path)
    capsys.readouterr()
    plan = tmp_path / "plan.json"
    assert main(["balance", str(run), "--json", "-o", str(plan)]) == 0
    balanced = json.loads(capsys.readouterr().out)
    lines = balanced["torchtitan"]["lines"]
    assert 'selective_ac_option = "2"' in lines
    # `ppb check` of that plan: its optimum is the same plan, with the same lines, printed as balance prints them
    assert main(["check", str(run), "--plan", str(plan), "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)["optimum"]
    assert checked["torchtitan"]["lines"] == lines
    assert checked["torchtitan_lines"] == ["torchtitan job TOML:", *(f"  {line}" for line in lines)]
    assert main(["check", str(run), "--plan", str(plan)]) == 0
    text = capsys.readouterr().out
    assert "torchtitan job TOML:" in text and 'selective_ac_option = "2"' in text
    # a torchtitan run's plan in its own lines only: no Megatron-LM layout beside it (check and balance printed one)
    assert checked["megatron_lines"] == [] and "Megatron-LM" not in text
    assert main(["balance", str(run), "-q"]) == 0
    text = capsys.readouterr().out
    assert "torchtitan job TOML:" in text and "Megatron-LM" not in text
    # the chain's report: the same lines as a TOML block, which `ppb import torchtitan` reads back to the split
    # (the chain's tables price the run as the file does: tests/test_config.py, the unstated overlap shares)
    tables = run_chain(run, until="plan_report")
    markdown = report_files(tables["plan_report"])[".md"].decode()
    assert "Megatron-LM" not in markdown  # the report printed `--pipeline-model-parallel-layout` too
    block = markdown.split("```toml\n", 1)[1].split("```", 1)[0]
    said = [line.strip() for line in block.splitlines() if line.strip()]
    assert said == lines
    rows = balanced["stages"]
    split = "|".join(
        ("E" if i == 0 else "") + "t" * row["layers"] + ("L" if i == len(rows) - 1 else "")
        for i, row in enumerate(rows)
    )
    raw = _imported_layout(said)
    assert raw["parallel"]["layout"] == split and raw["training"]["recompute"] == {"mode": "selective", "option": 2}


def test_check_reads_the_printed_lines_back_to_the_plan_and_refuses_another_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PP 2 × 2 chunks at 50000 MB: every 2nd block of a rank full, counted across its two chunks
    # (apply_ac's counter), so the cells' FULL counts depend on the chunk before (5 | 11 on rank 0)
    result = _balance(tmp_path, PP2V2, "50000", capsys)
    lines = result["torchtitan"]["lines"]
    assert 'selective_ac_option = "2"' in lines and "local_batch_size = 8" in lines  # REST's b 1 × m 8
    run, plan = tmp_path / "run.yaml", tmp_path / "plan.toml"
    plan.write_text("\n".join(lines) + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--json", "--no-optimum"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["form"] == "torchtitan"
    assert [row["options"] for row in checked["stages"]] == [row["options"] for row in result["stages"]]
    assert checked["iteration_s"] == pytest.approx(result["iteration"]["seconds"], rel=1e-9)
    # the whole job TOML, the printed keys merged into its own tables, reads the same
    dp = "data_parallel_shard_degree = 2\ntensor_parallel_degree = 2\n"
    plan.write_text(_merged(lines, dp))
    assert main(["check", str(run), "--plan", str(plan), "--json", "--no-optimum"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_s"] == checked["iteration_s"]
    # a batch other than the run's (b 1, m 8, dp 2: local 8, global 16) is refused in one line
    plan.write_text("\n".join(lines).replace("local_batch_size = 8", "local_batch_size = 16") + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{plan}: training.local_batch_size: 16; the run config prices 8" in err


def test_at_pp_1_the_plans_activation_checkpoint_is_printed_and_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # configs/llama3.1-8b-torchtitan.yaml checkpoints with torchtitan's op policy at PP 1; on an 80 GB H100
    # the plan recomputes nothing, which only [activation_checkpoint] mode = "none" says (no split to print)
    run = Path(__file__).parent.parent / "configs" / "llama3.1-8b-torchtitan.yaml"
    assert main(["balance", str(run), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    lines = result["torchtitan"]["lines"]
    assert lines == ["[activation_checkpoint]", 'mode = "none"']
    plan = tmp_path / "plan.toml"
    plan.write_text("\n".join(lines) + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--json", "--no-optimum"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert [row["options"] for row in checked["stages"]] == [{"NONE": 32}]
    assert [{o: n for o, n in row["options"].items() if n} for row in result["stages"]] == [{"NONE": 32}]
    assert checked["iteration_s"] == pytest.approx(result["iteration"]["seconds"], rel=1e-9)


def test_the_room_balance_says_is_the_room_check_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torchtitan FSDP2 stages are charged what the caching allocator reserves beyond their allocated peak
    (docs/memory.md). `ppb balance` said "10,837 MB free on the fullest stage" for the shipped config's plan (the
    usable 77,559 MB less the 66,722 MB peak) where `ppb check` of its printed lines said 3,461 MB free (the
    allocator's 7,376 MB less too): until session 34 balance's line left the allocator's pools in the room."""
    run = Path(__file__).parent.parent / "configs" / "llama3.1-8b-torchtitan.yaml"
    assert main(["balance", str(run), "-q"]) == 0
    said = re.search(r"([\d,]+) MB free on the fullest stage", capsys.readouterr().out)
    assert said is not None
    plan = tmp_path / "plan.toml"
    plan.write_text('[activation_checkpoint]\nmode = "none"\n')
    assert main(["check", str(run), "--plan", str(plan), "--json", "--no-optimum"]) == 0
    (stage,) = json.loads(capsys.readouterr().out)["stages"]
    assert stage["allocator_mb"] > 0
    assert int(said[1].replace(",", "")) == round(stage["free_mb"])


def test_check_refuses_a_toml_schedule_other_than_the_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the run prices Megatron-style interleaving over 2 chunks; torchtitan runs the TOML's schedule
    # (pipeline_parallel.py `pipeline_llm`), 1F1B when the key is unstated (job_config.py's default)
    result = _balance(tmp_path, PP2V2, "50000", capsys)
    lines = result["torchtitan"]["lines"]
    assert 'pipeline_parallel_schedule = "Interleaved1F1B"' in lines
    run, plan = tmp_path / "run.yaml", tmp_path / "plan.toml"
    looped = "\n".join(lines).replace('"Interleaved1F1B"', '"LoopedBFS"')  # priced as interleaved, as import does
    plan.write_text(looped + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 0
    capsys.readouterr()
    plan.write_text("\n".join(lines).replace('"Interleaved1F1B"', '"GPipe"') + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{plan}: parallelism.pipeline_parallel_schedule: GPipe runs gpipe; the run config prices interleaved" in err
    plan.write_text("\n".join(line for line in lines if not line.startswith("pipeline_parallel_schedule")) + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 2
    assert "1F1B (torchtitan's default, unstated) runs 1f1b" in capsys.readouterr().err
    # torch's get_schedule_class matches names case-insensitively: "interleaved1f1b" is Interleaved1F1B
    plan.write_text("\n".join(lines).replace('"Interleaved1F1B"', '"interleaved1f1b"') + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 0
    capsys.readouterr()
    plan.write_text("\n".join(lines).replace('"Interleaved1F1B"', "[1]") + "\n")  # was a TypeError
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "parallelism.pipeline_parallel_schedule: a list of 1 item is not a string" in err


def test_check_refuses_a_toml_number_that_is_no_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # JobConfig's pipeline_parallel_degree and local_batch_size are ints: "2", 2.0 or true are none. Before,
    # "2" was said as "2; the run has 2" and 2.0 passed as 2
    result = _balance(tmp_path, PP2V2, "50000", capsys)
    lines = "\n".join(result["torchtitan"]["lines"])
    run, plan = tmp_path / "run.yaml", tmp_path / "plan.toml"
    assert "pipeline_parallel_degree = 2" in lines and "local_batch_size = " in lines
    for bad, key in (
        (
            lines.replace("pipeline_parallel_degree = 2", 'pipeline_parallel_degree = "2"'),
            "parallelism.pipeline_parallel_degree",
        ),
        (
            lines.replace("pipeline_parallel_degree = 2", "pipeline_parallel_degree = 2.0"),
            "parallelism.pipeline_parallel_degree",
        ),
        (lines.replace("local_batch_size = ", "local_batch_size = true #"), "training.local_batch_size"),
    ):
        plan.write_text(bad + "\n")
        assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{plan}: {key}: " in err and "is not an integer" in err


def test_check_refuses_the_op_policy_for_a_run_that_does_not_state_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ppb's SLCT is the run config's own selective switches: torchtitan's op policy is priced only when
    # the run says {mode: selective, option: op} (this run's job TOML says mode full)
    result = _balance(tmp_path, PP4, "", capsys)
    lines = [line for line in result["torchtitan"]["lines"] if not line.startswith("mode = ")]
    plan = tmp_path / "plan.toml"
    plan.write_text("\n".join(lines).replace("[activation_checkpoint]", OP_AC.rstrip("\n")) + "\n")
    assert main(["check", str(tmp_path / "run.yaml"), "--plan", str(plan), "--no-optimum", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{plan}: activation_checkpoint.selective_ac_option: op: the run config" in err


def test_check_reads_the_split_torchtitan_cuts_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A whole job TOML that names no modules: torchtitan v0.2.2 pipeline_parallel.py `pipeline_llm` cuts the 32
    # layers itself, 9 a stage with the embedding and output counted as a layer each: ⌈34 / 9⌉ = 4 stages of
    # 34 = 9 + 9 + 8 + 8, less one on the first and last: 8 | 9 | 8 | 7 (`generate_llm_fqn_per_model_part`).
    # `ppb import torchtitan` read that split; `ppb check --plan` refused the same file ("module_fqns_per_model_part:
    # is missing"). It now prices the split the import read: the same as the module names of 8 | 9 | 8 | 7.
    job = tmp_path / "job.toml"
    job.write_text(REST + PP2V2 + FULL_AC)
    run = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(run)]) == 0
    assert import_torchtitan(job.read_text(), 8, "h100-80gb").raw["parallel"]["layout"] == (
        "E" + "t" * 8 + "|" + "t" * 9 + "|" + "t" * 8 + "|" + "t" * 7 + "L"
    )
    capsys.readouterr()
    assert main(["check", str(run), "--plan", str(job), "--no-optimum", "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert [row["layers"] for row in whole["stages"]] == [8 + 8, 9 + 7]
    named = tmp_path / "named.toml"
    fqns = module_fqns([8, 9, 8, 7])
    named.write_text(REST + PP2V2 + f"module_fqns_per_model_part = {json.dumps(fqns)}\n" + FULL_AC)
    assert main(["check", str(run), "--plan", str(named), "--no-optimum", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["iteration_s"] == whole["iteration_s"]
    assert [row["peak_mb"] for row in said["stages"]] == [row["peak_mb"] for row in whole["stages"]]


def test_the_lines_say_to_leave_the_jobs_layers_per_stage_out(tmp_path: Path, capsys) -> None:
    """An imported job's `pipeline_parallel_layers_per_stage = 9` (PP2V2: ceil((32 + 2) / 9) = 4 stages, two a
    rank) beside the plan's 1F1B lines of `ppb balance -i 1` is refused by torchtitan v0.2.2 (pipeline_parallel.py
    `pipeline_llm`: "Single stage schedule requires exactly 1 stage per rank", checked before it reads
    module_fqns_per_model_part); without it the parts run. The lines now say to leave it out."""
    job = tmp_path / "job.toml"
    job.write_text(REST + PP2V2 + FULL_AC)
    run = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(run)]) == 0
    capsys.readouterr()
    assert main(["balance", str(run), "--json", "-q", "-i", "1", "--memory", "51000"]) == 0
    lines = json.loads(capsys.readouterr().out)["torchtitan"]["lines"]
    assert LAYERS_PER_STAGE_OUT in lines and LAYERS_PER_STAGE_OUT.startswith(
        "# leave pipeline_parallel_layers_per_stage"
    )
    printed = tomllib.loads("\n".join(lines))["parallelism"]
    rules = {
        "degree": printed["pipeline_parallel_degree"],
        "schedule": printed["pipeline_parallel_schedule"],
        "num_layers": 32,
        "micro_batches": 8,
    }
    assert rules["schedule"] == "1F1B"
    assert torchtitan_problems(printed["module_fqns_per_model_part"], **rules, layers_per_stage=9)
    assert torchtitan_problems(printed["module_fqns_per_model_part"], **rules) == []
