"""The search equals an exhaustive search: on small grids, every valid strategy balanced and timed, no bound used."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from itertools import product
from pathlib import Path

import pytest

from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import run_problem
from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config
from ppb_core.estimate.plan import plan_iterations
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.run import describe_run
from ppb_core.search.enumerate import Refusal, Strategy, enumerate_strategies, validate
from ppb_core.search.outputs import _megatron_note, megatron_flags, write_ranking
from ppb_core.search.rank import (
    BALANCER_CLOCK_STOPPED,
    BALANCER_NO_PLAN,
    NO_RELAXED_PLAN,
    NO_ROOM,
    NO_STAGE_ROOM,
    NO_WHOLE_PLAN,
    PRUNED,
    SearchResult,
    evaluate,
    exhaustive,
    merge,
    search,
    search_points,
    shard,
)
from ppb_core.search.screen import FigureCache, fits_somewhere, run_forms
from ppb_core.search.spec import load_search_spec
from ppb_core.units import mb_words

DATA = Path(__file__).parent / "data" / "search"
SPECS = ("tiny-dense", "tiny-moe", "tiny-tight", "tiny-titan", "tiny-mtp", "tiny-groups", "tiny-moe-overlap")


@pytest.fixture(scope="module")
def results() -> dict[str, tuple[SearchResult, SearchResult]]:
    """Each small spec searched (two workers) and searched exhaustively."""
    found = {}
    for name in SPECS:
        spec = load_search_spec(DATA / f"{name}.yaml")
        found[name] = (search(spec, workers=2), exhaustive(spec))
    return found


@pytest.mark.parametrize("name", SPECS)
def test_the_ranking_is_the_exhaustive_ranking(results, name: str) -> None:
    searched, everything = results[name]
    assert [(e.strategy, e.seconds) for e in searched.ranked] == [(e.strategy, e.seconds) for e in everything.ranked]
    assert len(searched.ranked) == searched.spec.search.top


@pytest.mark.parametrize("name", SPECS)
def test_the_search_balances_fewer_and_every_bound_is_below_its_time(results, name: str) -> None:
    searched, everything = results[name]
    assert searched.counts["balanced"] < everything.counts["balanced"]
    for entry in searched.ranked:
        assert 0 < entry.bound_s <= entry.seconds


@pytest.mark.parametrize("name", SPECS)
def test_counts_add_up(results, name: str) -> None:
    searched, everything = results[name]
    counts = searched.counts
    assert counts["enumerated"] == everything.counts["enumerated"]
    assert counts["valid"] == everything.counts["valid"] == counts["screened"]
    grid_refusals = sum(n for reason, n in searched.rejected.items() if not reason.startswith(("memory", "bound")))
    assert counts["enumerated"] == counts["valid"] + grid_refusals
    # every valid strategy ends once: balanced (ranked, or refused by the balancer), refused for memory
    # by a screen or a relaxed program, or left waiting when the search stopped (pruned)
    refused_early = sum(
        searched.rejected.get(reason, 0) for reason in (NO_ROOM, NO_STAGE_ROOM, NO_RELAXED_PLAN, NO_WHOLE_PLAN)
    )
    assert counts["valid"] == counts["balanced"] + refused_early + counts["pruned"] + counts["unexamined"]
    assert counts["unexamined"] == 0 and searched.to_json(details=True)["proven"] == len(searched.ranked)
    assert counts["pruned"] == searched.rejected.get(PRUNED, 0)


def test_the_quick_memory_verdict_refuses_only_what_the_balancer_cannot_fit() -> None:
    spec = load_search_spec(DATA / "tiny-tight.yaml")
    cache = FigureCache()
    verdicts = Counter()
    for point in enumerate_strategies(spec):
        if isinstance(point, Refusal):
            continue
        run = validate(spec, point)
        if not fits_somewhere(run_forms(point), cache.of(point, run)):
            result = evaluate(spec, point, run)
            assert isinstance(result, Refusal) and result.reason == BALANCER_NO_PLAN
            verdicts["refused"] += 1
    assert verdicts["refused"] >= 1


def test_shards_merge_to_the_whole_ranking(results) -> None:
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    points = list(enumerate_strategies(spec))
    parts = shard(points, 3)
    assert sorted(map(repr, (p for part in parts for p in part))) == sorted(map(repr, points))
    merged = merge(spec, [search_points(spec, part, workers=1) for part in parts])
    searched, _ = results["tiny-dense"]
    assert [(e.strategy, e.seconds) for e in merged.ranked] == [(e.strategy, e.seconds) for e in searched.ranked]
    assert merged.counts["enumerated"] == len(points)


def test_json_has_the_contracts_keys(results) -> None:
    searched, _ = results["tiny-moe"]
    data = json.loads(json.dumps(searched.to_json()))
    assert set(data) == {"ranked", "rejected", "counts"}
    assert set(data["counts"]) == {"enumerated", "valid", "screened", "balanced"}
    entry = data["ranked"][0]
    assert set(entry) == {
        *("parallel", "training", "tokens_per_second_per_device", "iteration_seconds", "mfu", "peak_memory_mb"),
        "plan",
    }
    details = searched.to_json(details=True)
    assert set(details["ranked"][0]) > set(entry) and details["counts"]["pruned"] == searched.counts["pruned"]
    assert entry["plan"]["status"] in ("optimal", "time_limit")
    assert entry["parallel"]["ep"] >= 1 and "etp" in entry["parallel"]
    assert entry["training"]["micro_batches"] * entry["training"]["micro_batch_size"] * entry["parallel"]["dp"] == 16
    # tokens/s per device is the global batch's tokens over the iteration and the devices
    tokens = 16 * 2048
    assert entry["tokens_per_second_per_device"] == pytest.approx(tokens / entry["iteration_seconds"] / 8)


@pytest.mark.parametrize("name", ("tiny-dense", "tiny-titan"))
def test_each_plan_carries_its_iteration_as_ppb_balance_prices_it(results, name: str) -> None:
    """A ranked plan's JSON has `iteration` and `baseline_iteration`, as `ppb balance RUN.yaml`'s has
    (docs/search.md): the ranking's seconds, and what balance's own path prices from the plan's cells."""
    searched, _ = results[name]
    for entry in searched.ranked:
        plan = entry.plan
        assert plan["iteration"]["seconds"] == entry.seconds
        assert plan["baseline_iteration"]["seconds"] == entry.uniform_seconds
        assert plan["baseline_iteration"]["option"] == plan["best_baseline"]
        again = plan_iterations(validate(searched.spec, entry.strategy), plan)  # `ppb balance`'s pricing
        assert again["iteration"]["seconds"] == pytest.approx(entry.seconds, rel=1e-12)
        assert again["baseline_iteration"]["seconds"] == pytest.approx(entry.uniform_seconds, rel=1e-12)


def test_the_ranking_written_out_reads_back(results, tmp_path: Path) -> None:
    searched, _ = results["tiny-dense"]
    written = write_ranking(searched, tmp_path)
    assert (tmp_path / "search.json") in written
    for place, entry in enumerate(searched.ranked, start=1):
        stem = f"{place:02d}-{entry.strategy.label(searched.spec)}"
        run = load_run_config(tmp_path / f"{stem}.yaml")
        assert run.parallel.model_dump(mode="json") == {
            **run.parallel.model_dump(mode="json"),
            **entry.strategy.parallel(searched.spec),
        }
        assert json.loads((tmp_path / f"{stem}.plan.json").read_text())["status"] == entry.plan["status"]
        flags = (tmp_path / f"{stem}.megatron.txt").read_text()
        assert f"--tensor-model-parallel-size {entry.strategy.tp}" in flags
        assert not (tmp_path / f"{stem}.mindformers.yaml").exists()  # a Megatron-LM search's: its flags alone


def test_megatron_flags_of_a_strategy() -> None:
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    strategy = Strategy(2, 1, 2, 2, 2, "interleaved", 4, 1, True, "ring", 1, False, 1, 8, 0)
    said = {"layout": "Et|t|t|tL", "recompute": [], "flags": "--pipeline-model-parallel-layout 'Et|t|t|tL'"}
    flags = megatron_flags(spec, strategy, {"megatron": said})
    assert flags == [
        "--tensor-model-parallel-size 2",
        "--pipeline-model-parallel-size 2",
        "--context-parallel-size 1",
        "--expert-model-parallel-size 4",
        "--expert-tensor-parallel-size 1",
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--micro-batch-size 1",
        "--global-batch-size 16",  # 1 · 8 · 2
        "--seq-length 2048",
        "--pipeline-model-parallel-layout 'Et|t|t|tL'",  # `megatron.flags`, as `ppb balance` prints it
    ]


def test_a_dualpipev_strategy_has_no_megatron_schedule_flag() -> None:
    # Megatron-LM has no DualPipeV (d98e8a64: no schedule of that name); the balancer's note says so and gives
    # no layout (`balance.outputs.not_megatrons`). The flags carried --num-virtual-stages-per-pipeline-rank 2,
    # which launches the interleaved schedule instead (and, without a layout, is refused where the layers do
    # not fill pp·vpp chunks evenly: DeepSeek-V3's 61 on PP8 V2). The sizes and batch stay; no schedule flag.
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    strategy = Strategy(1, 1, 2, 4, 2, "dualpipev", 4, 1, False, "ring", 1, False, 1, 4, 0)
    flags = megatron_flags(spec, strategy, {"megatron": {"note": "Megatron-LM does not run DualPipeV"}})
    assert not any("virtual" in flag or "layout" in flag for flag in flags)
    assert "--pipeline-model-parallel-size 2" in flags and "--global-batch-size 16" in flags  # 1 · 4 · 4
    interleaved = Strategy(1, 1, 2, 4, 2, "interleaved", 4, 1, False, "ring", 1, False, 1, 4, 0)
    assert "--num-virtual-stages-per-pipeline-rank 2" in megatron_flags(spec, interleaved, {"megatron": {}})


def test_megatron_flags_say_the_context_parallelism_and_the_combined_1f1b_priced() -> None:
    # Megatron-LM's default --cp-comm-type is p2p, the ring (arguments.py, d98e8a64): a Ulysses strategy's flags
    # say a2a and an all-gather one's all_gather, or the pasted flags run the ring; a combined 1F1B strategy's
    # say --overlap-moe-expert-parallel-comm, with --delay-wgrad-compute where the spec sets it
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    for variant, said in (("ring", None), ("ulysses", "a2a"), ("all_gather", "all_gather")):
        strategy = Strategy(1, 2, 1, 4, 1, "1f1b", 2, 1, False, variant, 1, False, 1, 4, 0)
        flags = [flag for flag in megatron_flags(spec, strategy, {"megatron": {}}) if "cp-comm-type" in flag]
        assert flags == ([f"--cp-comm-type {said}"] if said else [])
    combined = Strategy(1, 1, 1, 8, 1, "1f1b", 8, 1, False, "ring", 1, False, 1, 2, 0, ep_overlap=True)
    assert "--overlap-moe-expert-parallel-comm" in megatron_flags(spec, combined, {"megatron": {}})
    delayed = spec.model_copy(update={"timing": spec.timing.model_copy(update={"delay_wgrad_compute": True})})
    flags = megatron_flags(delayed, combined, {"megatron": {}})
    assert flags.index("--delay-wgrad-compute") == flags.index("--overlap-moe-expert-parallel-comm") + 1


def test_the_combined_1f1b_strategy_written_checks_to_its_ranked_time(results, tmp_path: Path, capsys) -> None:
    # tiny-moe-overlap ranks a combined 1F1B strategy first (its all-to-alls cross nodes); what is written for it
    # is pasted as it stands: `ppb check` reads its flags beside its run config and prices the ranked seconds
    searched, _ = results["tiny-moe-overlap"]
    first = searched.ranked[0]
    assert first.strategy.ep_overlap
    write_ranking(replace(searched, ranked=[first]), tmp_path)
    stem = tmp_path / f"01-{first.strategy.label(searched.spec)}"
    assert "--overlap-moe-expert-parallel-comm" in stem.with_suffix(".megatron.txt").read_text()
    capsys.readouterr()
    code = main(["check", str(stem.with_suffix(".yaml")), "--plan", str(stem.with_suffix(".megatron.txt")), "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["iteration_s"] == pytest.approx(first.seconds, rel=1e-9)


def _least_memory_of_every_plan(run) -> float:
    """The least peak of any plan of a one-stage, one-chunk problem: every split of each body type's layers
    over the options, each plan's memory summed exactly (`Plan.exact_stage_memory`), no program."""
    problem = run_problem(run, describe_run(run))
    assert problem.stages == problem.chunks == 1
    options = len(problem.options)
    per_body = [
        [split for split in product(range(b.nb_layer + 1), repeat=options) if sum(split) == b.nb_layer]
        for b in problem.layers.bodies
    ]
    least = math.inf
    for splits in product(*per_body):
        counts = empty_counts(problem)
        for body, split in enumerate(splits):
            for option, n in zip(problem.options, split, strict=True):
                counts[body][0][0][OPTIONS.index(option)] = n
        least = min(least, float(Plan(problem, freeze(counts)).exact_stage_memory(0)))
    return least


def test_a_balance_its_limits_stop_before_any_plan_is_not_said_to_be_memory() -> None:
    # the balancer's limits ending a balance with no plan ("no plan found in 0.0 s", status time_limit) prove
    # nothing about memory, so it is its own reason (it was "memory: the balancer finds no plan that fits")
    spec = load_search_spec(DATA / "tiny-tight.yaml")
    strategy = Strategy(1, 1, 1, 8, 1, "1f1b", 1, 1, False, "ring", 0, False, 1, 2, 0)
    clocked = spec.model_copy(update={"search": spec.search.model_copy(update={"balance_time_limit_s": 1e-9})})
    stopped = evaluate(clocked, strategy)
    # the clock stopped it, so its reason names the clock's knob (it named search.balance_work)
    assert isinstance(stopped, Refusal) and stopped.reason == BALANCER_CLOCK_STOPPED
    assert stopped.message.startswith("no plan found in")
    # Starved of work instead, the stage listing is cut before any plan, and the program over cell choices
    # (which its work share does not starve: 6 layers, one cell) proves that none fits: a memory verdict, and
    # a true one, the least peak of all 7 plans (6 layers under NONE or FULL; every layer FULL)
    starved = spec.model_copy(update={"search": spec.search.model_copy(update={"balance_work": 1e-9})})
    proven = evaluate(starved, strategy)
    assert isinstance(proven, Refusal) and proven.reason == BALANCER_NO_PLAN
    run = validate(spec, strategy)
    assert not isinstance(run, Refusal)
    least = _least_memory_of_every_plan(run)
    assert least > run_problem(run, describe_run(run)).memory_mb
    assert proven.message.endswith(f"the least-memory plan needs {mb_words(least)}")
    ranked = evaluate(spec, strategy)  # the spec's own work limits: the same verdict
    assert isinstance(ranked, Refusal) and ranked.reason == BALANCER_NO_PLAN


def test_no_room_is_a_reason_the_tight_search_gives(results) -> None:
    searched, everything = results["tiny-tight"]
    assert searched.rejected[NO_ROOM] + searched.rejected.get(BALANCER_NO_PLAN, 0) >= 1
    assert everything.rejected[BALANCER_NO_PLAN] >= 1


def test_a_balance_budget_repeats_and_its_proven_places_are_exhaustive(results) -> None:
    """With a balance budget the search stops early, deterministically: two runs agree; the places it says
    are proven are the exhaustive ranking's; the proven gap bounds every strategy it left unexamined."""
    full, everything = results["tiny-dense"]
    spec = full.spec
    budget = max(1, full.counts["balanced"] // 2)
    limited = spec.model_copy(update={"search": spec.search.model_copy(update={"balance_budget": budget})})
    first, second = search(limited, workers=2), search(limited, workers=1)
    assert first.counts["balanced"] == budget
    assert [(e.strategy, e.seconds) for e in first.ranked] == [(e.strategy, e.seconds) for e in second.ranked]
    assert first.counts == second.counts and first.proven == second.proven
    exhaustive_ranking = [(e.strategy, e.seconds) for e in everything.ranked]
    proven = [(e.strategy, e.seconds) for e in first.ranked[: first.proven]]
    assert proven == exhaustive_ranking[: first.proven]
    if first.unexamined_bound_s is not None:
        # every strategy is balanced (no faster than our first), pruned (slower than the ranking's last) or left
        # with a bound (no faster than the least bound left): the best of all is no faster than either
        least = min(first.ranked[0].seconds, first.unexamined_bound_s)
        assert everything.ranked[0].seconds >= least * (1 - 1e-9)
        assert first.proven_gap is not None and 0.0 <= first.proven_gap < 1.0


def test_one_balance_serves_strategies_with_the_same_problem() -> None:
    """ZeRO-1 over a single data-parallel rank shards nothing, so tp2 pp4 dp1 under ZeRO-0 and ZeRO-1 pose the
    same balancing problem: the second reuses the first's balance (nothing added to `solved`), and its plan and
    time are what its own balance gives. (The grid keeps only the ZeRO-0 one, `enumerate._shards`; the twin is
    built here.)"""
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    grid = {p.label(spec): p for p in enumerate_strategies(spec) if not isinstance(p, Refusal)}
    zero0 = grid["tp2sp-cp1-pp4-dp1-z0-b1m24-r0"]
    assert "tp2sp-cp1-pp4-dp1-z1-b1m24-r0" not in grid
    zero1 = replace(zero0, zero=1)
    solved: dict[str, dict] = {}
    evaluate(spec, zero0, solved=solved)
    assert len(solved) == 1
    reused = evaluate(spec, zero1, solved=solved)
    assert len(solved) == 1
    own = evaluate(spec, zero1)
    assert not isinstance(reused, Refusal) and not isinstance(own, Refusal)
    assert reused.plan == own.plan
    assert reused.seconds == own.seconds
    # a different problem is balanced and added
    evaluate(spec, grid["tp2sp-cp1-pp2-dp2-z1-b1m12-r0"], solved=solved)
    assert len(solved) == 2


@pytest.mark.parametrize(
    ("zero", "fsdp", "said"),
    [
        (0, False, []),
        (1, False, ["--use-distributed-optimizer"]),
        # the distributed optimizer keeps the fp32 gradient buffer whole (ZeRO-1): ZeRO-2, ranked with its
        # gradients sharded, was written as --use-distributed-optimizer, a run holding them whole
        # Megatron-FSDP asserts --ckpt-format fsdp_dtensor (arguments.py validate_args, d98e8a64)
        (
            2,
            False,
            ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads", "--ckpt-format fsdp_dtensor"],
        ),
        (
            3,
            False,
            [
                "--use-megatron-fsdp",
                "--data-parallel-sharding-strategy optim_grads_params",
                "--ckpt-format fsdp_dtensor",
            ],
        ),
        (
            3,
            True,
            [
                "--use-megatron-fsdp",
                "--data-parallel-sharding-strategy optim_grads_params",
                "--ckpt-format fsdp_dtensor",
            ],
        ),
    ],
)
def test_megatron_flags_shard_what_the_strategy_shards(zero: int, fsdp: bool, said: list[str]) -> None:
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    strategy = Strategy(2, 1, 2, 2, 2, "interleaved", 4, 1, True, "ring", zero, fsdp, 1, 8, 0)
    flags = megatron_flags(
        spec, strategy, {"megatron": {"layout": "Et|t|t|tL", "flags": "--pipeline-model-parallel-layout 'Et|t|t|tL'"}}
    )
    sharding = [flag for flag in flags if "fsdp" in flag or "optimizer" in flag or "sharding" in flag]
    assert sharding == said


def test_megatron_flags_of_a_plan_megatron_cannot_say_are_the_alternatives_whole() -> None:
    """A plan mixing options per stage is not Megatron's to say: the written flags are the fastest plan it
    can say (layout and recompute, as `ppb balance` prints them first), with comment lines saying so."""
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    strategy = Strategy(2, 1, 2, 2, 2, "interleaved", 4, 1, True, "ring", 1, False, 1, 8, 0)
    alternative = (
        "--pipeline-model-parallel-layout 'Et|t|t|tL' "
        "--recompute-granularity full --recompute-method block --recompute-num-layers 1"
    )
    plan = {
        "megatron": {
            "layout": "Ett|t|t|L",
            "recompute": None,
            "note": "the plan uses NONE, FULL on different layers",
            "flags": alternative,
            "flags_of": "alternative",
            "layout_only": "--pipeline-model-parallel-layout 'Ett|t|t|L'",
            "alternative": {"setting": "full, block 1", "flags": alternative, "slower_by": 0.125},
        }
    }
    flags = megatron_flags(spec, strategy, plan)
    assert flags[-1] == alternative and not any("Ett|t|t|L" in flag for flag in flags)
    note = _megatron_note(plan)
    # two comment lines: the plan's note, then whose flags these are and their cost (0.125 → 12.50%)
    assert note.count("\n") == 2 and all(line.startswith("# ") for line in note.splitlines())
    assert "12.50% slower" in note and "not runnable as priced" in note


def test_a_plan_megatron_cannot_say_with_no_alternative_writes_no_layout() -> None:
    """No plan Megatron-Core can say beside it: the flags are the sizes and the batch, never the plan's layout
    alone (it runs every layer with no recompute, not the plan priced); the comment lines say so."""
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    strategy = Strategy(2, 1, 2, 2, 1, "1f1b", 4, 1, True, "ring", 1, False, 1, 8, 0)
    plan = {
        "megatron": {
            "layout": "Ett|t|t|L",
            "recompute": None,
            "note": "the plan uses NONE, FULL on different layers",
            "flags": None,
            "layout_only": "--pipeline-model-parallel-layout 'Ett|t|t|L'",
            "no_alternative": "no plan fits under one setting for every layer",
        }
    }
    flags = megatron_flags(spec, strategy, plan)
    assert flags[-1] == "--seq-length 2048" and not any("layout" in flag for flag in flags)
    note = _megatron_note(plan)
    assert note.count("\n") == 2 and "no plan fits under one setting" in note and "not runnable as priced" in note


def test_a_plan_replaced_by_an_equally_fast_megatron_plan_says_so() -> None:
    spec = load_search_spec(DATA / "tiny-moe.yaml")
    strategy = Strategy(2, 1, 2, 2, 1, "1f1b", 4, 1, True, "ring", 1, False, 1, 8, 0)
    flags = (
        "--pipeline-model-parallel-layout 'Et|t|t|tL' "
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    )
    plan = {"megatron": {"layout": "Et|t|t|tL", "flags": flags, "flags_of": "plan", "alternative": {"setting": "full"}}}
    assert megatron_flags(spec, strategy, plan)[-1] == flags
    assert _megatron_note(plan) == (
        "# the ranked plan mixes what Megatron-Core takes one setting for; these flags are an equally fast plan it "
        "can say (full)\n"
    )


def test_the_search_weighs_the_mtp_layers_apart_as_ppb_balance_does(results) -> None:
    """tiny-mtp: each strategy with PP ≥ 2 balanced with the MTP layers beside the loss and apart; at PP 4
    apart is faster (the vocabulary makes the MTP part and the two heads' loss heavy, as
    tests/test_balance_mtp_apart.py's small run), and its plan and bound are those of `ppb balance`."""
    searched, everything = results["tiny-mtp"]
    places = {entry.strategy.pp: entry.mtp for entry in everything.ranked}
    assert places[1] is None and places[4] == "apart"
    entry = next(e for e in searched.ranked if e.strategy.pp == 4)
    rows = {row["mtp"]: row for row in entry.plan["mtp_placement"]}
    assert rows["apart"]["chosen"] and rows["apart"]["objective_s"] < rows["with_loss"]["objective_s"]
    assert entry.plan["input"]["mtp_cell"] == [0, 2]  # rank P − 2's last (only) chunk
    assert 0 < entry.bound_s <= entry.seconds
    assert searched.to_json(details=True)["ranked"][searched.ranked.index(entry)]["mtp"] == "apart"
