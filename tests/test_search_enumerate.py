"""The strategy grid: every point counted by hand, every refusal's reason checked by hand."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from ppb_core.errors import InputError
from ppb_core.search.enumerate import Refusal, Strategy, enumerate_strategies, reason_family, schedule_pairs, validate
from ppb_core.search.spec import parse_search_spec

DATA = Path(__file__).parent / "data" / "search"


def tiny(**limits):
    raw = yaml.safe_load((DATA / "tiny-dense.yaml").read_text())
    raw["limits"].update(limits)
    return parse_search_spec(raw, DATA / "tiny-dense.yaml", DATA)


def verdicts(spec) -> tuple[list[Strategy], Counter]:
    valid, refused = [], Counter()
    for point in enumerate_strategies(spec):
        checked = point if isinstance(point, Refusal) else validate(spec, point)
        if isinstance(checked, Refusal):
            refused[checked.reason] += 1
        else:
            valid.append(point)
    return valid, refused


def test_the_tiny_grid_by_hand() -> None:
    # (tp, pp) with tp·pp dividing 8: tp 1 and 2 with pp 1, 2, 4; tp 4 with pp 1, 2 (4·4 = 16 does not
    # divide 8, no whole dp: not a strategy). Schedule pairs: pp 1 runs 1F1B alone; pp 2 and 4 run
    # 1F1B at vpp 1 and interleaved at vpp 2. So 5 + 5 + 3 = 13 layouts, × 2 micro-batch sizes × 2 ZeRO
    # stages = 52 points, less the ZeRO 1 twin where no data-parallel rank is left to shard over (dp 1: tp 2
    # pp 4 and tp 4 pp 2, two schedules each, × 2 micro-batch sizes = 8): 44.
    spec = tiny()
    points = list(enumerate_strategies(spec))
    assert len(points) == 44
    valid, refused = verdicts(spec)
    # tp 4 does not divide the 6 heads: its 3 layouts × 2 micro-batch sizes, × 2 ZeRO stages at pp 1 (dp 2)
    # and × 1 at pp 2 (dp 1: ZeRO 0 alone): 4 + 8 / 2 = 8 points.
    assert refused["models.0.num_attention_heads: N heads are not divisible by tp N"] == 8
    # pp 4 with vpp 2 makes 8 cells for 6 layers: tp 1 and 2, one layout each, × 2 micro-batch sizes, × 2 ZeRO
    # stages at tp 1 (dp 2) and × 1 at tp 2 (dp 1): 4 + 2 = 6 points.
    assert refused["parallel.pp: N layers are fewer than pp·vpp = N pipeline cells"] == 6
    # 24 sequences over dp·mbs: only dp 8 (tp 1, pp 1) with mbs 2 = 16 fails, × 2 ZeRO stages = 2.
    assert (
        refused["training.global_batch: N sequences do not split into dp·micro_batch_size = N·N whole micro-batches"]
        == 2
    )
    assert len(valid) == 44 - 8 - 6 - 2 == 28
    assert sum(refused.values()) == 16


def test_a_strategy_the_global_batch_refuses_is_named_by_what_was_tried() -> None:
    # dp 8 (tp 1, pp 1) with micro-batch size 2: 24 / (8·2) = 1.5 micro-batches, no whole count, so the name
    # says the size tried and no count (it said m0 before: a count of none)
    spec = tiny()
    refused = [p for p in enumerate_strategies(spec) if isinstance(p, Refusal) and p.reason.startswith("training.")]
    assert [p.strategy.label(spec) for p in refused] == ["tp1-cp1-pp1-dp8-z0-b2-r0", "tp1-cp1-pp1-dp8-z1-b2-r0"]
    assert refused[0].message == "24 sequences do not split into dp·micro_batch_size = 8·2 whole micro-batches"
    # a strategy with its count keeps it: 24 / (8·1) = 3
    kept = next(p for p in enumerate_strategies(spec) if isinstance(p, Strategy) and p.dp == 8 and p.zero == 0)
    assert kept.label(spec) == "tp1-cp1-pp1-dp8-z0-b1m3-r0"


def test_a_refusal_keeps_the_validators_own_line() -> None:
    spec = tiny()
    point = next(
        p for p in enumerate_strategies(spec) if isinstance(p, Strategy) and p.tp == 4 and p.pp == 1 and p.zero == 1
    )
    refusal = validate(spec, point)
    assert isinstance(refusal, Refusal)
    assert refusal.message == "6 heads are not divisible by tp 4"


def test_each_point_is_a_valid_run_config_with_the_stated_sizes() -> None:
    spec = tiny()
    valid, _ = verdicts(spec)
    for strategy in valid:
        run = validate(spec, strategy)
        par, train = run.parallel, run.training
        assert par.dp * par.tp * par.pp * par.cp == spec.devices
        assert par.dp * train.micro_batch_size * train.micro_batches == spec.global_batch
        assert par.sequence_parallel == (par.tp > 1)
        assert (par.schedule == "interleaved") == (par.vpp > 1)


def test_schedule_pairs() -> None:
    assert schedule_pairs(("1f1b", "interleaved", "dualpipev", "gpipe"), (1, 2, 3), 4) == [
        ("1f1b", 1),
        ("interleaved", 2),
        ("interleaved", 3),
        ("dualpipev", 2),
        ("gpipe", 1),
    ]
    assert schedule_pairs(("interleaved",), (2,), 1) == [("1f1b", 1)]


def test_reason_family_writes_numbers_as_n() -> None:
    assert reason_family("parallel.cp", "12 is not divisible by cp 5") == "parallel.cp: N is not divisible by cp N"
    assert reason_family(None, "ratio 0.75 of 3") == "ratio N of N"
    # a number inside a name is the name's: torch's Schedule1F1B, not ScheduleNFNB; numbers after a sign stay N
    said = "torch's Schedule1F1B refuses 1 micro-batches on 2 stages"
    assert reason_family("training.micro_batches", said).endswith("Schedule1F1B refuses N micro-batches on N stages")
    assert reason_family(None, "dp·micro_batch_size = 512·1, fp8") == "dp·micro_batch_size = N·N, fp8"


def test_moe_grid_takes_ep_from_the_experts() -> None:
    raw = yaml.safe_load((DATA / "tiny-dense.yaml").read_text())
    raw["models"][0]["spec"].update(num_experts=4, experts_per_token=2, moe_intermediate_size=512)
    raw["limits"].update(tp=[1], pp=[2], vpp=[1], zero=[1], micro_batch_size=[1])
    spec = parse_search_spec(raw, "moe.yaml", DATA)
    points = [p for p in enumerate_strategies(spec) if isinstance(p, Strategy)]
    # ep: the powers of 2 dividing 4 experts (1, 2, 4), etp 1 by default
    assert sorted(p.ep for p in points) == [1, 2, 4]
    assert all(p.etp == 1 and "etp" in p.parallel(spec) for p in points)


def test_the_default_ep_grid_holds_only_expert_groups_the_devices_hold() -> None:
    # 16 routed experts on the tiny spec's 8 devices, tp 1, pp 1 or 2, one schedule (1F1B), ZeRO 1, mbs 1:
    # the powers of 2 dividing 16 experts are 1, 2, 4, 8, 16; 16 cannot divide 8 devices, so the default grid is
    # 1, 2, 4, 8. An expert group lies within a stage's dp·cp·tp ranks (run.py `ParallelConfig`): pp 1 holds 8
    # (ep 1, 2, 4, 8: 4 points), pp 2 holds 4 (ep 1, 2, 4: 3 points; ep 8 is no point). 7 enumerated, none
    # refused for its expert group (before: ep 16 at both pp and ep 8 at pp 2, 3 more, each refused
    # "ep·etp does not divide dp·cp·tp").
    raw = yaml.safe_load((DATA / "tiny-dense.yaml").read_text())
    raw["models"][0]["spec"].update(num_experts=16, experts_per_token=2, moe_intermediate_size=512)
    raw["limits"].update(tp=[1], pp=[1, 2], vpp=[1], zero=[1], micro_batch_size=[1])
    spec = parse_search_spec(raw, "moe.yaml", DATA)
    points = list(enumerate_strategies(spec))
    assert sorted((p.pp, p.ep) for p in points) == [(1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4)]
    _, refused = verdicts(spec)
    assert not [reason for reason in refused if "ep·etp" in reason]
    # a listed ep too: 8 at pp 2 is no point, whatever the list says
    raw["limits"]["ep"] = [8]
    assert [(p.pp, p.ep) for p in enumerate_strategies(parse_search_spec(raw, "moe.yaml", DATA))] == [(1, 8)]


def test_all_gather_cp_is_searched_beside_the_ring() -> None:
    # cp 2 beside 1 with both variants: cp 1 runs one variant, cp 2 each; the cp 2 points under all_gather
    # are labelled cp2ag and validate as the ring's do (framework megatron; 4096 tokens in 2·cp chunks).
    spec = tiny(tp=[1], pp=[1], cp=[1, 2], vpp=[1], micro_batch_size=[1], zero=[1], cp_variant=["ring", "all_gather"])
    points = [p for p in enumerate_strategies(spec) if isinstance(p, Strategy)]
    labels = sorted(p.label(spec).split("-")[1] for p in points)
    assert labels == ["cp1", "cp2", "cp2ag"]
    valid, refused = verdicts(spec)
    assert len(valid) == 3 and not refused


def test_a_spec_s_tp_comm_overlap_holds_where_sequence_parallelism_runs() -> None:
    # Megatron-LM refuses --tp-comm-overlap without sequence parallelism (arguments.py validate_args) and turns
    # sequence parallelism off at tp 1; Megatron-Bridge's CommOverlapConfig drops the overlap there. So a spec's
    # timing.overlap.tp is written into its tp 2 strategies with sequence parallelism, and left out of the tp 1
    # ones and those without, which stay valid: the refusal counts equal the grid without the overlap.
    raw = yaml.safe_load((DATA / "tiny-dense.yaml").read_text())
    raw["limits"].update(tp=[1, 2], sequence_parallel=[True, False])
    raw["timing"] = {"overlap": {"tp": 1.0, "dp": 0.5}, "ub_sm_margin": False}
    spec = parse_search_spec(raw, DATA / "tiny-dense.yaml", DATA)
    valid, refused = verdicts(spec)
    plain = dict(raw, timing={"overlap": {"dp": 0.5}})
    valid_plain, refused_plain = verdicts(parse_search_spec(plain, DATA / "tiny-dense.yaml", DATA))
    assert (valid, refused) == (valid_plain, refused_plain)
    runs = {point.label(spec): validate(spec, point) for point in valid}
    for label, run in runs.items():
        userbuffers = "sp" in label.split("-")[0]
        assert run.timing.overlap.tp == (1.0 if userbuffers else 0.0), label
        assert run.timing.ub_sm_margin is (not userbuffers), label
        assert run.timing.overlap.dp == 0.5
    assert {"sp" in label.split("-")[0] for label in runs} == {True, False}


def test_the_combined_1f1b_is_a_dimension_where_megatron_core_takes_it() -> None:
    # tiny-moe-overlap: tp 1, pp 1 or 2, vpp 1 or 2, ep 2 or 8. Megatron-Core asserts ep > 1 and, with pp > 1,
    # virtual stages for --overlap-moe-expert-parallel-comm (transformer_config.py __post_init__, d98e8a64), so
    # the combined 1F1B is offered at pp 1 (1F1B) and pp 2 interleaved, not pp 2 1F1B: pp 1, 2 ep × 2 = 4 points;
    # pp 2: ep 8 at pp 2 (dp 4) does not divide dp·cp·tp = 4, so it is not a point (no whole expert group);
    # 1F1B ep 2 × 1 + interleaved ep 2 × 2 = 3; 7 in all, every one valid.
    raw = yaml.safe_load((DATA / "tiny-moe-overlap.yaml").read_text())
    spec = parse_search_spec(raw, DATA / "tiny-moe-overlap.yaml", DATA)
    assert spec.ep_overlap_choices == (False, True)
    assert len(list(enumerate_strategies(spec))) == 7
    valid, refused = verdicts(spec)
    assert len(valid) == 7 and sum(refused.values()) == 0
    combined = sorted(point.label(spec) for point in valid if point.ep_overlap)
    assert combined == [
        "tp1-cp1-pp1-dp8-ep2ov-z1-b1m2-r0",
        "tp1-cp1-pp1-dp8-ep8ov-z1-b1m2-r0",
        "tp1-cp1-pp2v2i-dp4-ep2ov-z1-b1m4-r0",
    ]
    # --delay-wgrad-compute is the combined 1F1B's (Megatron-Core asserts it): a spec's holds where it runs
    raw["timing"] = {"delay_wgrad_compute": True}
    spec = parse_search_spec(raw, DATA / "tiny-moe-overlap.yaml", DATA)
    valid, refused = verdicts(spec)
    assert len(valid) == 7
    for point in valid:
        run = validate(spec, point)
        assert run.parallel.overlap_moe_expert_parallel_comm is point.ep_overlap
        assert run.timing.delay_wgrad_compute is point.ep_overlap
    # listed off alone, or not listed (the default, off): pp 1 ep 2, 8; pp 2 1F1B ep 2; interleaved ep 2: 4
    raw.pop("timing")
    for listed in ([False], None):
        raw["limits"]["ep_overlap"] = listed
        raw["limits"] = {key: value for key, value in raw["limits"].items() if value is not None}
        assert len(list(enumerate_strategies(parse_search_spec(raw, DATA / "tiny-moe-overlap.yaml", DATA)))) == 4
    assert tiny().ep_overlap_choices == (False,)


def test_a_number_with_thousands_separators_is_one_n_in_a_reason_family() -> None:
    # the schedule-cell limit's line (ppb_core/limits.py) writes its counts with separators: 262,144 and
    # 1,048,576 cells are one family (they were "N,N" and "N,N,N": two lines of the rejection table)
    line = "stages·chunks·micro-batches = {} schedule cells: {} is over ppb's limit of 131,072 (ppb_core/limits.py)"
    small = reason_family("training.micro_batches", line.format("32·8·1024", "262,144"))
    large = reason_family("training.micro_batches", line.format("32·8·4096", "1,048,576"))
    assert small == large
    assert small.endswith("N schedule cells: N is over ppb's limit of N (ppb_core/limits.py)")
    # a list's commas stay: "tp [1, 2]" is two numbers, not one; a name's digits stay whole (its last ones were
    # taken for a number: "needs a bf1N or fp1N model")
    assert reason_family(None, "zero [1, 2] contradicts") == "zero [N, N] contradicts"
    assert (
        reason_family(None, "needs a bf16 or fp16 model, TE v2.4, 2.5 s") == "needs a bf16 or fp16 model, TE v2.4, N s"
    )


def test_limits_that_leave_pipelining_or_the_whole_grid_empty_are_one_line() -> None:
    # interleaved takes vpp ≥ 2 (schedule_pairs): with vpp [1] alone every pp 2 and 4 point was dropped without a word
    # and the ranking held pp 1 only; dualpipev takes vpp 2, so vpp [4] left a grid of none, whose table said "each
    # one of the grid is counted below" over an empty table (December 2026)
    for limits, words in (
        ({"schedules": ["interleaved"], "vpp": [1]}, "1 runs none of the schedules interleaved"),
        ({"schedules": ["dualpipev"], "vpp": [4], "pp": [2, 4]}, "4 runs none of the schedules dualpipev"),
    ):
        with pytest.raises(InputError) as caught:
            list(enumerate_strategies(tiny(**limits)))
        assert caught.value.field == "limits.vpp" and words in caught.value.problem
    # tp 4 · pp 4 = 16 does not divide the tiny spec's 8 devices: no layout at all
    with pytest.raises(InputError) as caught:
        list(enumerate_strategies(tiny(tp=[4], pp=[4])))
    assert caught.value.field == "limits" and "no tp·cp·pp of the limits divides the 8 devices" in caught.value.problem


def test_a_torchtitan_grid_holds_no_tp_its_key_value_heads_cannot_split() -> None:
    """tiny-titan with 8 heads (2 key/value heads) and tp 1, 2, 4 on nodes of 4: tp 2 splits both (4 heads,
    1 key/value head a rank); tp 4 splits the heads (2 a rank) but not the 2 key/value heads, which
    Megatron-Core replicates (attention.py, num_query_groups < world_size) and torchtitan does not
    (torchtitan/models/common/decoder.py, b5bcd76c6: "tensor_parallel_degree (4) must divide n_kv_heads (2)").
    Before session 27 the tp 4 points were valid strategies and could rank."""
    raw = yaml.safe_load((DATA / "tiny-titan.yaml").read_text())
    raw["models"][0]["spec"]["num_attention_heads"] = 8
    raw["limits"].update(tp=[1, 2, 4], pp=[1], vpp=[1])
    valid, refused = verdicts(parse_search_spec(raw, DATA / "tiny-titan.yaml", DATA))
    assert {s.tp for s in valid} == {1, 2}
    said = "torchtitan shards N key/value heads over tp N and replicates none: tp must divide them"
    assert refused[f"models.0.num_key_value_heads: {said}"] > 0
    raw["framework"] = "megatron"  # Megatron-Core runs the tp 4 points
    raw["limits"]["fsdp"] = [False]
    valid, _ = verdicts(parse_search_spec(raw, DATA / "tiny-titan.yaml", DATA))
    assert 4 in {s.tp for s in valid}


def test_torchtitan_s_replicate_beside_tp_or_pp_is_one_reason() -> None:
    """torchtitan v0.2.2 replicates by DDP alone, refused beside TP or PP (run.py `_check_titan_replicate`); its
    line named the sizes set, so the search's table of reasons gave "beside pp N", "beside tp N" and "beside tp N,
    pp N" a row each. By hand on tiny-titan (8 devices, replicate or FSDP, pp 2 running 1F1B, GPipe and interleaved):
    replicate over dp > 1 beside tp or pp is tp 1 pp 2 dp 4 (3 schedules), tp 2 pp 1 dp 4 (1) and tp 2 pp 2 dp 2
    (3): 7 points, one reason."""
    path = DATA / "tiny-titan.yaml"
    _, refused = verdicts(parse_search_spec(yaml.safe_load(path.read_text()), path, DATA))
    replicate = {reason: count for reason, count in refused.items() if reason.startswith("parallel.zero: replicate")}
    assert list(replicate.values()) == [7]
    assert "beside tensor or pipeline parallelism (tp N, pp N)" in next(iter(replicate))
