"""The plan printed is never slower, by the iteration, than the uniform split it is compared with
(`balance/faster_uniform.py`).

Hand-made descriptions: P = 2, m = 1, 1F1B, four equal layers L (time 1: forward 1, backward 2 under
NONE, SAPP's fallbacks) and a TAIL of time 1 (forward 1, backward 2) holding 100 MB. With one
micro-batch the schedule runs every stage's forward, then every backward, end to end: 4·1 + 1 + 4·2 + 2
= 15 whatever the split, so every split with a layer on each stage ties. Memory (L: 10 MB parameters,
40 MB activation, one micro-batch in flight on each stage):
  2 | 2 (the uniform split, `baselines.uniform_layer_counts`): stage 0 2·50 = 100, stage 1 100 + 100 = 200;
  3 | 1: stage 0 150, stage 1 50 + 100 = 150 → the most headroom, so the tie-breaking takes 3 | 1.
A price with a term the schedule does not see (the busiest stage's optimizer step, say: 0.01 s a layer
on the stage holding most) makes 3 | 1 slower than 2 | 2: 15 + 0.03 against 15 + 0.02.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ppb_core.balance import BalanceInput, balance
from ppb_core.cli.balance import _uniform_replaced
from ppb_core.payload.sapp import layer_set

L = {"name": "L", "type": "BODY", "nb_layer": 4, "time": 1, "memory_parameter": 10, "memory_activation": 40}
TAIL = {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1, "memory_parameter": 100}
ROOT = Path(__file__).resolve().parent.parent


def _problem() -> BalanceInput:
    return BalanceInput(layer_set([L, TAIL]), 2, 1, 1, 1000.0)


def _most_layers(given: Mapping[str, Any], cells: Sequence[Sequence[Mapping[str, Any]]]) -> float:
    """15 (the schedule) + 0.01 per layer on the stage holding most."""
    return 15 + 0.01 * max(sum(cell["options"].values()) for row in cells for cell in row)


def _fewest_layers(given: Mapping[str, Any], cells: Sequence[Sequence[Mapping[str, Any]]]) -> float:
    """15 − 0.01 per layer on the stage holding most: the uneven split is faster."""
    return 15 - 0.01 * max(sum(cell["options"].values()) for row in cells for cell in row)


def test_without_a_price_the_tie_break_takes_the_most_headroom() -> None:
    result = balance(_problem(), time_limit=60)
    assert result["objective"] == 15
    assert [stage["layers"] for stage in result["stages"]] == [3, 1]
    assert result["stage_memory_mb"] == [150, 150]


def test_the_uniform_split_replaces_a_plan_it_beats_by_the_iteration() -> None:
    result = balance(_problem(), time_limit=60, price=_most_layers)
    assert [stage["layers"] for stage in result["stages"]] == [2, 2]
    assert result["stage_memory_mb"] == [100, 200]
    assert result["objective"] == 15 and result["gap"] == 0
    assert result["best_baseline"] == "NONE" and result["speedup"] == 1.0
    assert any("the uniform split (NONE) is faster by the iteration" in n for n in result["solver"]["notes"])


def test_the_text_says_the_uniform_split_is_the_plan_and_by_how_much() -> None:
    """`ppb balance`'s status line says "proven optimal" with the gap of the uniform split's schedule to the
    bound; the line under it says the uniform split replaced the balancer's plan: 15 + 0.02 against the
    3 | 1 plan's 15 + 0.03 (`_most_layers`)."""
    result = balance(_problem(), time_limit=60, price=_most_layers)
    assert _uniform_replaced(result) == ("NONE", 15.02, 15.03)
    assert _uniform_replaced(balance(_problem(), time_limit=60, price=_fewest_layers)) is None


def test_a_plan_faster_by_the_iteration_stays() -> None:
    result = balance(_problem(), time_limit=60, price=_fewest_layers)
    assert [stage["layers"] for stage in result["stages"]] == [3, 1]


def test_torchtitan_two_stages_one_micro_batch_is_never_slower_than_its_uniform_split(tmp_path: Path) -> None:
    """Session 19's case: Llama-3.1-8B under torchtitan, PP2 × FSDP 4, one micro-batch. Every split ties on
    the schedule; the tie-breaking's 17 | 15 (most headroom) priced 0.772 s against the uniform 16 | 16's
    0.771 s (stage 0's optimizer step holds one layer more) and printed "1.000×". GPipe: torch's Schedule1F1B
    refuses fewer micro-batches than stages (schedules.py `Schedule1F1B.__init__`), ScheduleGPipe runs one."""
    text = (ROOT / "configs/llama3.1-8b-torchtitan.yaml").read_text()
    text = text.replace(
        "parallel: {dp: 8, tp: 1, pp: 1, fsdp: true, world_size: 8}",
        "parallel: {dp: 4, pp: 2, fsdp: true, schedule: gpipe}",
    )
    text = text.replace("config: hf/", f"config: {ROOT}/configs/hf/")
    run = tmp_path / "run.yaml"
    run.write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "ppb_core.cli.main", "balance", str(run), "--json", "-q"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["input"]["stages"] == 2 and result["input"]["micro_batches"] == 1
    assert result["iteration"]["seconds"] <= result["baseline_iteration"]["seconds"]
    assert result["speedup"] >= 1.0
