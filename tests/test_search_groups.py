"""Megatron's interleaved micro-batch groups in the search (`limits.microbatch_group`, `enumerate.microbatch_groups`).

Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py
`forward_backward_pipelining_with_interleaving` runs a group g of micro-batches per virtual stage when
P ≤ g ≤ m (else ValueError) and the last group m mod g is 0 or at least P (else RuntimeError); the
default g is P (model_parallel_config.py `__post_init__`). The accepted groups below are worked by hand
from those two rules; the ranking with groups against an exhaustive search is tests/test_search_rank.py
(`tiny-groups`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ppb_core.errors import InputError
from ppb_core.schedules import in_flight_vectors, simulate
from ppb_core.search.enumerate import (
    Refusal,
    Strategy,
    accepted_groups,
    enumerate_strategies,
    microbatch_groups,
    validate,
)
from ppb_core.search.outputs import megatron_flags
from ppb_core.search.spec import load_search_spec, parse_search_spec

DATA = Path(__file__).parent / "data" / "search"


@pytest.mark.parametrize(
    ("stages", "micro_batches", "accepted"),
    [
        # m = 10, P = 4: 10 mod 4 = 2 < 4 ✗; 5 → 0 ✓; 6 → 4 ✓; 7 → 3 ✗; 8 → 2 ✗; 9 → 1 ✗; 10 → 0 ✓
        (4, 10, [5, 6, 10]),
        # m = 5, P = 2: 2 → 1 ✗; 3 → 2 ✓; 4 → 1 ✗; 5 → 0 ✓
        (2, 5, [3, 5]),
        # m = 16, P = 4: 4 ✓, 5 → 1 ✗, 6 → 4 ✓, 7 → 2 ✗, 8 ✓, 9 → 7 ✓, 10 → 6 ✓, 11 → 5 ✓, 12 → 4 ✓,
        # 13 → 3 ✗, 14 → 2 ✗, 15 → 1 ✗, 16 ✓
        (4, 16, [4, 6, 8, 9, 10, 11, 12, 16]),
        (16, 8, []),  # m < P: none (the default is refused too)
    ],
)
def test_accepted_groups_by_megatrons_two_rules(stages: int, micro_batches: int, accepted: list[int]) -> None:
    assert accepted_groups(stages, micro_batches) == accepted


@pytest.mark.parametrize(
    ("choices", "stages", "micro_batches", "groups"),
    [
        (["least"], 4, 16, (0,)),  # P itself is accepted: Megatron's default, no flag
        (["least"], 4, 10, (5,)),
        (["all"], 2, 5, (3, 5)),
        (["all"], 4, 16, (0, 6, 8, 9, 10, 11, 12, 16)),
        ([6], 4, 16, (6,)),
        ([4, "least"], 4, 16, (0,)),  # P written out is the default
        ([7], 4, 10, (7,)),  # listed: the validator refuses it as Megatron does
        ((), 4, 10, (0,)),  # not Megatron: no group
        (["least"], 4, 0, (0,)),  # no micro-batch count (the batch refused it)
        (["least"], 16, 8, (0,)),  # none accepted: the default, which the validator refuses
        # past ppb's 65,536 micro-batches (limits.MICRO_BATCHES) the validator refuses the strategy whatever its
        # group: the default, not the groups of a billion micro-batches listed one by one (a spec's global batch of
        # 10^9 ran minutes without a line of progress until December 2026)
        (["least"], 4, 10**9 + 7, (0,)),
        (["all"], 4, 65_537, (0,)),
        (["least"], 4, 65_535, (5,)),  # 65,535 mod 4 = 3 < 4 ✗; mod 5 = 0 ✓
    ],
)
def test_microbatch_groups(choices, stages: int, micro_batches: int, groups: tuple[int, ...]) -> None:
    assert microbatch_groups(choices, stages, micro_batches) == groups


@pytest.mark.parametrize(("stages", "chunks", "micro_batches"), [(4, 2, 10), (4, 2, 16), (2, 2, 5), (4, 4, 18)])
def test_with_equal_cells_every_accepted_group_gives_one_makespan_and_larger_ones_hold_more(
    stages: int, chunks: int, micro_batches: int
) -> None:
    """Why `least` is the default: with every cell's forward 1 and backward 2, each stage runs
    3·V·m of work and the schedule's makespan is the same for every accepted group (simulated), while
    the warm-up 2(P − s − 1) + (V − 1)·g keeps more micro-batches in flight as g grows."""
    forward = [[1.0] * stages for _ in range(chunks)]
    backward = [[2.0] * stages for _ in range(chunks)]
    groups = accepted_groups(stages, micro_batches)
    spans = {simulate("interleaved", forward, backward, micro_batches, group=g).makespan for g in groups}
    assert len(spans) == 1
    held = [
        max(
            sum(vector)
            for stage in in_flight_vectors("interleaved", stages, chunks, micro_batches, g)
            for vector in stage
        )
        for g in groups
    ]
    assert held == sorted(held) and held[0] < held[-1]


def test_the_spec_lists_groups_for_megatron_only(tmp_path: Path) -> None:
    raw = yaml.safe_load((DATA / "tiny-titan.yaml").read_text())
    raw["limits"]["microbatch_group"] = ["all"]
    with pytest.raises(InputError) as err:
        parse_search_spec(raw, tmp_path / "s.yaml", DATA)
    assert err.value.field == "limits.microbatch_group"
    assert "Megatron-LM's --microbatch-group-size-per-virtual-pipeline-stage" in err.value.problem


def test_tiny_groups_strategies_carry_their_group_in_name_run_config_and_flags() -> None:
    spec = load_search_spec(DATA / "tiny-groups.yaml")
    points = [p for p in enumerate_strategies(spec) if isinstance(p, Strategy)]
    labels = {p.label(spec) for p in points}
    # tp 1, pp 2, dp 4, one sequence a micro-batch: 20 / 4 = 5 micro-batches, groups 3 and 5 (above)
    assert {"tp1-cp1-pp2v2ig3-dp4-z0-b1m5-r0", "tp1-cp1-pp2v2ig5-dp4-z0-b1m5-r0"} <= labels
    strategy = next(p for p in points if p.label(spec) == "tp1-cp1-pp2v2ig3-dp4-z0-b1m5-r0")
    run = validate(spec, strategy)
    assert not isinstance(run, Refusal)
    assert run.parallel.microbatch_group_size_per_vp_stage == 3
    flags = megatron_flags(spec, strategy, {"megatron": {}})
    assert "--microbatch-group-size-per-virtual-pipeline-stage 3" in flags


def test_a_listed_group_megatron_refuses_is_refused_with_its_line() -> None:
    spec = load_search_spec(DATA / "tiny-groups.yaml")
    spec = spec.model_copy(update={"limits": spec.limits.model_copy(update={"microbatch_group": [4]})})
    points = list(enumerate_strategies(spec))
    # pp 2, dp 4, 5 micro-batches in groups of 4: a last group of 1 < 2 stages
    strategy = next(p for p in points if isinstance(p, Strategy) and p.label(spec) == "tp1-cp1-pp2v2ig4-dp4-z0-b1m5-r0")
    refused = validate(spec, strategy)
    assert isinstance(refused, Refusal)
    assert "last group of 1" in refused.message
