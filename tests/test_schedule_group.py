"""Megatron's `--microbatch-group-size-per-virtual-pipeline-stage` (model_parallel_config.py
`microbatch_group_size_per_vp_stage`): the interleaved schedule's order, micro-batches in flight and
time with a group of g micro-batches a chunk, against a schedule worked out by hand from
megatron/core/pipeline_parallel/schedules.py (d98e8a64: `get_schedule_table`, `get_pp_rank_microbatches`,
`forward_backward_pipelining_with_interleaving`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ppb_core.balance.problem import BalanceInput
from ppb_core.cli.main import main
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import (
    check,
    in_flight_vectors,
    makespan,
    micro_batches_in_flight,
    simulate,
    stage_orders,
)

CONFIGS = Path(__file__).parent.parent / "configs"

# P = 2, V = 2, m = 5, g = 3: model_parallel_config.py's own example, "rank 0 | 0 1 2 0 1 2 3 4 3 4":
# the forward table is groups of 3 micro-batches chunk by chunk, the last group the rest (3, 4):
#   (mb, chunk) = 0,0 1,0 2,0 0,1 1,1 2,1 3,0 4,0 3,1 4,1
# backwards take the same slots with the chunk reversed, each its chunk's oldest micro-batch:
#   B1.0 B1.1 B1.2 B0.0 B0.1 B0.2 B1.3 B1.4 B0.3 B0.4
# warm-up forwards 2(P − s − 1) + (V − 1)·g: rank 0 2 + 3 = 5, rank 1 0 + 3 = 3 (the default g = P
# would give 4 and 2); then forward-backward pairs over the 10 slots, then the remaining backwards.
RANK_0 = "F0.0 F0.1 F0.2 F1.0 F1.1 F1.2 B1.0 F0.3 B1.1 F0.4 B1.2 F1.3 B0.0 F1.4 B0.1 B0.2 B1.3 B1.4 B0.3 B0.4"
RANK_1 = "F0.0 F0.1 F0.2 F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F0.3 B0.0 F0.4 B0.1 F1.3 B0.2 F1.4 B1.3 B1.4 B0.3 B0.4"


def _said(order) -> str:
    return " ".join(f"{op.kind}{op.chunk}.{op.micro_batch}" for op in order)


def test_the_order_is_megatrons_tunable_table() -> None:
    assert [_said(order) for order in stage_orders("interleaved", 2, 2, 5, group=3)] == [RANK_0, RANK_1]


def test_micro_batches_in_flight_with_a_group_of_three() -> None:
    # counting (chunk 0, chunk 1) along the orders above: rank 0 reaches (3, 3) after F1.2, then
    # B1.0 F0.3 → (4, 2), B1.1 F0.4 → (5, 1): three incomparable peaks of 6; rank 1 (3, 1) after F1.0,
    # (4, 0) after F0.3 and F0.4, (2, 2) after F1.4: peaks of 4. The earliest peak gives the counts.
    assert in_flight_vectors("interleaved", 2, 2, 5, group=3) == [[(5, 1), (4, 2), (3, 3)], [(4, 0), (3, 1), (2, 2)]]
    assert micro_batches_in_flight("interleaved", 2, 2, 5, group=3) == [[3, 3], [3, 1]]


def test_the_megatron_ci_case_holds_every_micro_batch_on_the_first_stage() -> None:
    # gpt3_mcore_te_tp1_pp4_vp1_tunable_overlap: P = 4, V = 3 (12 layers, 1 a virtual stage), m = 5
    # (40 / (4 · 2 data-parallel ranks)), g = 5: warm-up 2(3 − s) + 2·5 = 16 − 2s of 15 slots, so rank 0
    # runs every forward first (5, 5, 5); rank 1 14 warm-up forwards (5, 5, 4) and one more forward before
    # its first backward; rank 3 10 + 1: (5, 5, 1).
    counts = micro_batches_in_flight("interleaved", 4, 3, 5, group=5)
    assert [[counts[c][s] for c in range(3)] for s in range(4)] == [[5, 5, 5], [5, 5, 5], [5, 5, 3], [5, 5, 1]]


def test_unit_ops_take_22_steps_by_hand() -> None:
    # Every op one unit, the orders above; an op starts at max(its rank's previous end, its input's end):
    # rank 0 F0.0-F0.2 end 1, 2, 3; rank 1 F0.0-F0.2 end 2, 3, 4; rank 0 F1.0-F1.2 end 4, 5, 6
    # (inputs rank 1's F0 at 2, 3, 4); rank 1 F1.0 5, B1.0 6, F1.1 7, B1.1 8, F1.2 9, B1.2 10;
    # rank 0 B1.0 7, F0.3 8, B1.1 9, F0.4 10, B1.2 11; rank 1 F0.3 11, B0.0 12, F0.4 13, B0.1 14;
    # rank 0 F1.3 12, B0.0 13, F1.4 14, B0.1 15; rank 1 F1.3 15, B0.2 16, F1.4 17, B1.3 18, B1.4 19;
    # rank 0 B0.2 17, B1.3 19, B1.4 20; rank 1 B0.3 20, B0.4 21; rank 0 B0.3 21, B0.4 22.
    ones = [[1.0, 1.0], [1.0, 1.0]]
    assert makespan("interleaved", ones, ones, 5, group=3) == 22.0
    timeline = simulate("interleaved", ones, ones, 5, group=3)
    assert timeline.makespan == 22.0
    assert timeline.ends[1][-1] == 21.0


def test_the_default_group_is_pp() -> None:
    ones = [[1.0] * 4] * 2
    assert stage_orders("interleaved", 4, 2, 8, group=4) == stage_orders("interleaved", 4, 2, 8)
    assert makespan("interleaved", ones, ones, 8, group=4) == makespan("interleaved", ones, ones, 8)
    # a group without virtual stages is never read (Megatron's 1F1B has no table)
    assert stage_orders("1f1b", 4, 1, 8, group=6) == stage_orders("1f1b", 4, 1, 8)


@pytest.mark.parametrize(
    ("stages", "micro_batches", "group", "said"),
    [
        (4, 8, 3, "outside"),  # g < P: schedules.py's ValueError
        (4, 8, 9, "outside"),  # g > m
        (4, 9, 6, "last group of 3"),  # 0 < 9 mod 6 = 3 < P = 4: its RuntimeError
    ],
)
def test_groups_megatron_refuses_are_refused(stages: int, micro_batches: int, group: int, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        check("interleaved", stages, 2, micro_batches, group)


@settings(max_examples=40, deadline=None)
@given(
    stages=st.integers(2, 4),
    chunks=st.integers(2, 3),
    data=st.data(),
)
def test_larger_groups_hold_more_and_wait_less(stages: int, chunks: int, data) -> None:
    # A larger group runs more warm-up forwards ((V − 1)·g): the first stage holds at least as many
    # micro-batches at its peak. Every group runs each op once: no iteration is shorter than a stage's work.
    micro_batches = data.draw(st.integers(stages, 3 * stages))
    groups = [g for g in range(stages, micro_batches + 1) if micro_batches % g == 0 or micro_batches % g >= stages]
    ones = [[1.0] * stages for _ in range(chunks)]
    held = [
        sum(micro_batches_in_flight("interleaved", stages, chunks, micro_batches, g)[c][0] for c in range(chunks))
        for g in groups
    ]
    assert held == sorted(held)
    for g in groups:
        assert makespan("interleaved", ones, ones, micro_batches, group=g) >= 2 * chunks * micro_batches


def _qwen_with_group(tmp_path: Path, group: int) -> Path:
    """configs/qwen2.5-7b.yaml (pp 2, vpp 2, 16 micro-batches) with a micro-batch group."""
    raw = yaml.safe_load((CONFIGS / "qwen2.5-7b.yaml").read_text())
    for model in raw["models"]:
        model["config"] = str(CONFIGS / model["config"])
    raw["parallel"]["microbatch_group_size_per_vp_stage"] = group
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_printed_launch_line_carries_the_group_and_checks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = _qwen_with_group(tmp_path, 8)
    assert main(["balance", str(config), "--json", "--quiet"]) == 0
    said = json.loads(capsys.readouterr().out)["megatron"]
    words = shlex.split(said["flags"])
    assert words[words.index("--microbatch-group-size-per-virtual-pipeline-stage") + 1] == "8"
    assert main(["check", str(config), "--plan", said["flags"], "--no-optimum", "--json"]) == 0
    capsys.readouterr()
    # the same line under the run's default group (pp = 2) is another schedule: refused, naming the flag
    assert main(["check", str(_qwen_with_group(tmp_path, 2)), "--plan", said["flags"], "--no-optimum"]) == 2
    err = capsys.readouterr().err
    assert "--microbatch-group-size-per-virtual-pipeline-stage: 8, the run config has 2" in err


def test_a_balance_at_other_sizes_says_it_plans_at_the_default_group(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # qwen2.5-7b: pp 2, 16 micro-batches; at 24 the run's group of 8 is not what is planned (problem.py
    # `run_problem`: Megatron's default, pp), and the printed flags leave it out: said on stderr
    config = _qwen_with_group(tmp_path, 8)
    assert main(["balance", str(config), "-mb", "24", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "--microbatch-group-size-per-virtual-pipeline-stage" not in json.loads(captured.out)["megatron"]["flags"]
    assert "microbatch_group_size_per_vp_stage 8 is the run's at its sizes" in captured.err
    assert "default group (pp 2)" in captured.err
    assert main(["balance", str(config), "--json", "--quiet"]) == 0
    assert "note" not in capsys.readouterr().err


def test_a_stated_group_against_a_run_at_the_default_says_the_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # qwen2.5-7b states no group: Megatron's default, pp 2 (model_parallel_config.py `__post_init__`)
    raw = yaml.safe_load((CONFIGS / "qwen2.5-7b.yaml").read_text())
    for model in raw["models"]:
        model["config"] = str(CONFIGS / model["config"])
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["balance", str(config), "--json", "--quiet"]) == 0
    flags = json.loads(capsys.readouterr().out)["megatron"]["flags"]
    assert main(["check", str(config), "--plan", f"{flags} --microbatch-group-size-per-virtual-pipeline-stage 2"]) == 0
    capsys.readouterr()
    plan = f"{flags} --microbatch-group-size-per-virtual-pipeline-stage 8"
    assert main(["check", str(config), "--plan", plan, "--no-optimum"]) == 2
    assert "8, the run config has 2 (parallel.microbatch_group_size_per_vp_stage, unset: the default pp)" in (
        capsys.readouterr().err
    )


def _interleaved_run(framework: str, micro_batches: int, group: int | None = None) -> dict:
    raw = yaml.safe_load((CONFIGS / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str((CONFIGS / raw["models"][0]["config"]).resolve())
    raw["framework"] = framework
    raw["parallel"].update(pp=2, dp=16, vpp=2, schedule="interleaved")
    if framework == "torchtitan":
        # FSDP2: replicating beside PP is DDP in torchtitan v0.2.2, which refuses it (`_check_titan_replicate`)
        raw["parallel"].update(zero=3, fsdp=True, sequence_parallel=True)
        raw["training"]["recompute"] = {"mode": "selective", "option": "op"}
    if group is not None:
        raw["parallel"]["microbatch_group_size_per_vp_stage"] = group
    raw["training"]["micro_batches"] = micro_batches
    return raw


@pytest.mark.parametrize(
    ("framework", "micro_batches", "group", "said"),
    [
        # schedules.py: the default group is pp = 2, and 5 mod 2 = 1 < 2 (RuntimeError); groups of 3 leave
        # 5 mod 3 = 2 ≥ 2, accepted
        ("megatron", 5, None, "5 micro-batches in Megatron's default groups of pp 2 leave a last group of 1"),
        ("megatron", 5, 3, None),
        ("megatron", 6, None, None),
        # torch's ScheduleInterleaved1F1B: max(1, 5 // 2) = 2 rounds, 5 mod 2 = 1 (ValueError); 6 in 3 rounds
        ("torchtitan", 5, None, "torch's Interleaved1F1B runs 5 micro-batches in 2 rounds"),
        ("torchtitan", 6, None, None),
    ],
)
def test_the_interleaved_micro_batches_each_framework_refuses(
    framework: str, micro_batches: int, group: int | None, said: str | None
) -> None:
    raw = _interleaved_run(framework, micro_batches, group)
    if said is None:
        parse_run_config(raw, "run.yaml")
        return
    with pytest.raises(InputError) as err:
        parse_run_config(raw, "run.yaml")
    assert err.value.field == "training.micro_batches" and said in err.value.problem


def test_sizes_a_flag_chooses_are_held_to_the_frameworks_interleaving() -> None:
    """`ppb balance RUN.yaml -mb 6` (or `-i auto`'s V > 1) chose sizes the run config's validation never saw:
    llama3-8b at pp 4 and 6 micro-batches printed an interleaved plan Megatron-LM refuses (d98e8a64
    `forward_backward_pipelining_with_interleaving`: default group pp 4, last group 6 mod 4 = 2 < 4). The
    balancing problem refuses it; torch's Interleaved1F1B: 6 micro-batches in max(1, 6 // 4) = 1 round pass,
    10 in 2 rounds pass, 9 in 2 rounds do not."""
    layers = layer_set(
        [
            {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 1},
            {"name": "L", "type": "BODY", "nb_layer": 16, "time": 1, "memory_parameter": 1, "memory_activation": 1},
            {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1, "memory_parameter": 1},
        ]
    )
    with pytest.raises(
        InputError, match="6 micro-batches in Megatron's default groups of pp 4 leave a last group of 2"
    ):
        BalanceInput(layers, 4, 6, 2, framework="megatron")
    BalanceInput(layers, 4, 6, 2, framework="megatron", group=6)  # one group of 6: Megatron runs it
    BalanceInput(layers, 4, 8, 2, framework="megatron")
    BalanceInput(layers, 4, 6, 1, framework="megatron")  # 1F1B: no group
    BalanceInput(layers, 4, 6, 2, framework="torchtitan")
    BalanceInput(layers, 4, 10, 2, framework="torchtitan")
    with pytest.raises(InputError, match="runs 9 micro-batches in 2 rounds of pp 4"):
        BalanceInput(layers, 4, 9, 2, framework="torchtitan")


@pytest.mark.parametrize(
    ("framework", "schedule", "stages", "micro_batches", "refused"),
    [
        # torch 2.13 distributed/pipelining/schedules.py Schedule1F1B.__init__: ValueError when
        # n_microbatches < num_stages (one stage a rank: num_stages = pp); 3 < 4 refused, 4 runs
        ("torchtitan", "1f1b", 4, 3, True),
        ("torchtitan", "1f1b", 4, 4, False),
        # ScheduleGPipe has no such check; Megatron-LM's 1F1B runs min(pp - rank - 1, m) warm-up forwards
        # (schedules.py forward_backward_pipelining_without_interleaving): neither refuses 3 on 4 stages
        ("torchtitan", "gpipe", 4, 3, False),
        ("megatron", "1f1b", 4, 3, False),
    ],
)
def test_torchs_1f1b_refuses_fewer_micro_batches_than_stages(
    framework: str, schedule: str, stages: int, micro_batches: int, refused: bool
) -> None:
    raw = _interleaved_run(framework, micro_batches)
    raw["parallel"].update(pp=stages, dp=32 // stages, vpp=1, schedule=schedule)
    if not refused:
        parse_run_config(raw, "run.yaml")
        return
    with pytest.raises(InputError) as err:
        parse_run_config(raw, "run.yaml")
    assert err.value.field == "training.micro_batches"
    assert "Schedule1F1B refuses 3 micro-batches on 4 stages" in err.value.problem
