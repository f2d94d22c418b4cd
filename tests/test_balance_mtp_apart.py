"""The balancer weighs Megatron-Core's standalone MTP (`m` on rank P − 2's last virtual stage, `L` alone
on rank P − 1's, DeepSeek-V3's own `...,m|L`) against the MTP layers with the loss, and keeps the
faster plan (`balance.mtp_apart`).

Small instances: 3 stages, 1F1B, m = 4, four body layers (forward 1, backward 2: work 3 each, one
option), no HEAD; the TAIL is an MTP part and an output part. The expected optima are worked out by
hand under the closed form (Σ_s S_s + (m − 1)·max_s S_s, S_s a stage's forward + backward, docs/balance.md),
and checked under the critical path against an exhaustive search over every split of both placements,
each simulated by `schedules.simulate`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest
from check_runs import CONFIGS

from ppb_core.balance.mtp_apart import _bound_over, faster_placement, standalone_problem
from ppb_core.balance.problem import BalanceInput, run_problem
from ppb_core.balance.result import balance
from ppb_core.cli.main import main
from ppb_core.config.layout import parse_layout, standalone_mtp_cell, validate_layout
from ppb_core.estimate.inputs import load_run
from ppb_core.payload.describe import MTP_APART_NAME
from ppb_core.payload.run import describe_run
from ppb_core.payload.sapp import layer_set
from ppb_core.schedules import simulate

STAGES, MICRO_BATCHES, LAYERS = 3, 4, 4


def _tail(name: str, forward: float, held_mb: float = 1) -> dict:
    # backward twice the forward (SAPP's fallback when not stated); MB held once, nothing per micro-batch
    return {"name": name, "type": "TAIL", "nb_layer": 1, "time": forward, "memory_parameter": held_mb}


def _problems(
    mtp_forward: float, output_forward: float, part_mb: float = 1, memory_mb: float = 1000.0
) -> tuple[BalanceInput, BalanceInput]:
    """(the MTP layers with the loss, one TAIL; the MTP part apart on stage 1, the loss alone on stage 2).
    Each part holds *part_mb*, the one TAIL both."""
    body = {"name": "BODY_0", "type": "BODY", "nb_layer": LAYERS, "time": 1.0, "backward_time": 2.0}
    body |= {"memory_parameter": 1, "memory_activation": 1}
    fused = BalanceInput(
        layer_set([body, _tail("TAIL", mtp_forward + output_forward, 2 * part_mb)]),
        STAGES,
        MICRO_BATCHES,
        memory_mb=memory_mb,
        framework="megatron",
        mtp_layers=1,
    )
    parts = layer_set([body, _tail(MTP_APART_NAME, mtp_forward, part_mb), _tail("TAIL", output_forward, part_mb)])
    apart_records = tuple(t for t in parts.tails if t.name == MTP_APART_NAME)
    output = dataclasses.replace(parts, tails=tuple(t for t in parts.tails if t.name != MTP_APART_NAME))
    apart = dataclasses.replace(fused, layers=output, mtp_cell=(0, 1), mtp_apart=apart_records)
    return fused, apart


def _chosen(fused: BalanceInput, apart: BalanceInput, exact: bool) -> dict:
    return faster_placement(fused, apart, lambda placed, **cuts: balance(placed, exact=exact, **cuts))


def _exhaustive(mtp_forward: float, output_forward: float) -> tuple[float, float]:
    """(least critical path with the MTP layers with the loss, least with them apart), every split simulated."""
    best = {False: math.inf, True: math.inf}
    for apart in (False, True):
        for split in itertools.product(range(LAYERS + 1), repeat=STAGES):
            if sum(split) != LAYERS or split[0] < 1:
                continue
            if not apart and split[1] < 1:  # stage 1 holds neither end: it needs a layer
                continue
            if apart and split[2]:  # no decoder layer after the MTP layers
                continue
            forward = [float(n) for n in split]
            if apart:
                forward[1] += mtp_forward
                forward[2] += output_forward
            else:
                forward[2] += mtp_forward + output_forward
            backward = [2 * f for f in forward]
            best[apart] = min(best[apart], simulate("1f1b", [forward], [backward], MICRO_BATCHES).makespan)
    return best[False], best[True]


def test_a_heavy_mtp_layer_runs_apart_closed_form_by_hand() -> None:
    # MTP part and output part each forward 2, backward 4 (work 6). Σ_s S_s = 4·3 + 12 = 24 either way.
    # With the loss: S = (3·k0, 3·k1, 3·k2 + 12), k0, k1 ≥ 1: the last stage at least 12 (k2 = 0):
    #   T = 24 + 3·12 = 60, splits (2, 2, 0) or (1, 3, 0), (3, 1, 0).
    # Apart: S = (3·k0, 3·k1 + 6, 6), k2 = 0: (3, 1) gives (9, 9, 6): T = 24 + 3·9 = 51.
    fused, apart = _problems(2.0, 2.0)
    result = _chosen(fused, apart, exact=False)
    rows = {row["mtp"]: row for row in result["mtp_placement"]}
    assert rows["with_loss"]["objective"] == pytest.approx(60.0)
    assert rows["apart"]["objective"] == pytest.approx(51.0) and rows["apart"]["chosen"]
    assert result["objective"] == pytest.approx(51.0)
    assert [[sum(cell["options"].values()) for cell in row] for row in result["cells"]] == [[3, 1, 0]]
    assert result["megatron"]["layout"] == "Et*3|tm|L"
    assert result["input"]["mtp_cell"] == [0, 1]


def test_a_light_mtp_layer_stays_with_the_loss_closed_form_by_hand() -> None:
    # MTP and output parts each forward 0.1, backward 0.2 (work 0.3). Σ_s S_s = 12.6 either way.
    # With the loss: (1, 2, 1) gives S = (3, 6, 3.6): T = 12.6 + 3·6 = 30.6 (no split has max below 6:
    #   four layers of 3 on three stages put two on one of them).
    # Apart: S = (3·k0, 3·k1 + 0.3, 0.3), k0 + k1 = 4: (2, 2) gives max 6.3, T = 12.6 + 3·6.3 = 31.5.
    fused, apart = _problems(0.1, 0.1)
    result = _chosen(fused, apart, exact=False)
    rows = {row["mtp"]: row for row in result["mtp_placement"]}
    assert rows["with_loss"]["chosen"] and result["objective"] == pytest.approx(30.6)
    assert "mtp_cell" not in result["input"]
    assert result["megatron"]["layout"].endswith("mL")


def test_when_nothing_fits_with_the_loss_the_mtp_layers_run_apart() -> None:
    # 100 MB per device; a body layer holds 1 MB and 1 MB per micro-batch in flight; the MTP part and the
    # output part 60 MB each. With the loss stage 2 holds 120 MB whatever its layers: no plan fits.
    # Apart, stage 2 holds 60 MB and stage 1 60 + its layers (k·1 + k·2 at 1F1B's 2 micro-batches in
    # flight on stage 1 of 3): (3, 1, 0) puts 63 MB there; the closed form gives 24 + 3·9 = 51 as in the
    # heavy instance above.
    fused, apart = _problems(2.0, 2.0, part_mb=60, memory_mb=100.0)
    result = _chosen(fused, apart, exact=False)
    rows = {row["mtp"]: row for row in result["mtp_placement"]}
    assert rows["with_loss"]["status"] == "infeasible" and rows["apart"]["chosen"]
    assert result["objective"] == pytest.approx(51.0) and result["input"]["mtp_cell"] == [0, 1]
    assert result["mtp_placement_gap"] == 0.0


@pytest.mark.parametrize("mtp_forward, output_forward", [(2.0, 2.0), (0.1, 0.1), (3.0, 0.5), (0.5, 1.5)])
def test_the_faster_placement_equals_an_exhaustive_search(mtp_forward: float, output_forward: float) -> None:
    fused, apart = _problems(mtp_forward, output_forward)
    with_loss, standalone = _exhaustive(mtp_forward, output_forward)
    result = _chosen(fused, apart, exact=True)
    assert result["objective"] == pytest.approx(min(with_loss, standalone), rel=1e-9)
    assert ("mtp_cell" in result["input"]) == (standalone < with_loss)


def test_deepseek_v3_standalone_problem_splits_the_tail() -> None:
    run = load_run(CONFIGS / "deepseek-v3.yaml")
    fused = run_problem(run, describe_run(run))
    apart = standalone_problem(run, fused)
    assert apart is not None and apart.mtp_cell == (1, 14)  # P = 16, V = 2: rank 14's last virtual stage
    assert apart.closed_cells == {(1, 15)} and apart.reserved_cells == {(0, 0), (1, 14), (1, 15)}
    # at one micro-batch in flight the parts hold what the one TAIL holds, within a MB per part truncated
    whole = fused.layers.tail_memory_mb(1)
    parts = apart.layers.tail_memory_mb(1) + apart.head_stage_memory_mb(14, (0, 1))  # stage 14: the MTP part
    assert whole - 3 <= parts <= whole


def test_a_model_without_mtp_layers_is_solved_once() -> None:
    run = load_run(CONFIGS / "llama3-8b.yaml")
    assert standalone_problem(run, run_problem(run, describe_run(run))) is None


def test_the_answer_is_proven_over_both_placements_only_when_each_is() -> None:
    # with the loss proven at 100 (bound 100); apart stopped by its work limits at 101 with bound 97:
    # no plan is proven below 97, so the chosen 100 is within (100 - 97) / 100 = 3% of the optimum
    chosen = {"objective": 100.0}
    rows = [{"status": "optimal", "bound": 100.0}, {"status": "work_limit", "bound": 97.0}]
    assert _bound_over(rows, 100.0, chosen) == (97.0, pytest.approx(0.03))
    # apart proven no faster than the first plan (cut off): proven over both
    rows[1] = {"status": "no_faster", "bound": 97.0}
    assert _bound_over(rows, 100.0, chosen) == (100.0, 0.0)
    # no plan fits apart: nothing there to be faster
    rows[1] = {"status": "infeasible", "bound": None}
    assert _bound_over(rows, 100.0, chosen) == (100.0, 0.0)


def test_the_printed_layout_is_one_megatron_core_takes_and_ppb_check_reads_back() -> None:
    # the heavy instance's plan, 'Et*3|tm|L': Megatron-Core's rules (config.layout) accept it, and the
    # MTP layer is read back apart from the loss in the cell the balancer placed it (chunk 0, stage 1)
    fused, apart = _problems(2.0, 2.0)
    layout = _chosen(fused, apart, exact=False)["megatron"]["layout"]
    parsed = parse_layout(layout, STAGES)
    validate_layout(parsed, LAYERS, 1)
    assert standalone_mtp_cell(parsed) == (0, 1) == apart.mtp_cell


SMALL_MTP = """name: small-mtp
framework: megatron
models:
  - name: llm
    spec: {vocab_size: 65536, hidden_size: 1024, num_layers: 8, num_attention_heads: 16, num_key_value_heads: 4,
           intermediate_size: 2816, max_position_embeddings: 4096, mtp_layers: 1}
parallel: {pp: 4}
training: {seq_length: 4096, micro_batch_size: 1, micro_batches: 8}
device: {name: h100-80gb}
"""


def test_a_small_mtp_run_prints_standalone_flags_ppb_check_fits(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """A run whose vocabulary makes the MTP part (an embedding copy, a layer) and the loss (two heads'
    logits) heavy: the balancer puts `m` on rank 2 and `L` alone on rank 3. The flags it prints are
    read by `ppb check` as they stand and fit; the check's time model (the TAIL split priced layer by
    layer, another path than the descriptions) gives the same iteration and finds it faster than the
    plan with the MTP layer beside the loss; its balancer figures are the plan's own."""
    config = tmp_path / "small-mtp.yaml"
    config.write_text(SMALL_MTP)
    assert main(["balance", str(config), "--json", "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {row["mtp"]: row for row in result["mtp_placement"]}
    assert rows["apart"]["chosen"] and result["megatron"]["flags_of"] == "plan"
    flags = result["megatron"]["flags"]
    assert flags.endswith("m|L'")

    def check(plan: str) -> dict:
        code = main(["check", str(config), "--plan", plan, "--no-optimum", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["fits"]
        return out

    apart = check(flags)
    assert apart["iteration_s"] == pytest.approx(result["iteration"]["seconds"], rel=1e-12)
    assert apart["balancer"]["simulated_time_s"] == pytest.approx(result["objective_s"], rel=1e-12)
    # the other placement's layout without recompute: as fast as that plan or faster (recompute only adds)
    beside = check(f"--pipeline-model-parallel-layout '{rows['with_loss']['layout']}'")
    assert apart["iteration_s"] < beside["iteration_s"]


def test_a_plan_json_placing_the_mtp_layers_where_the_run_cannot_is_refused(tmp_path, capsys) -> None:
    config = tmp_path / "small-mtp.yaml"
    config.write_text(SMALL_MTP)
    plan = tmp_path / "plan.json"
    assert main(["balance", str(config), "--quiet", "-o", str(plan)]) == 0
    capsys.readouterr()
    written = json.loads(plan.read_text())
    assert written["input"]["mtp_cell"] == [0, 2]  # rank 2 of 4: read back and checked as it was written
    assert main(["check", str(config), "--plan", str(plan), "--no-optimum", "--json"]) == 0
    capsys.readouterr()
    written["input"]["mtp_cell"] = [0, 1]
    plan.write_text(json.dumps(written))
    assert main(["check", str(config), "--plan", str(plan), "--no-optimum"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "input.mtp_cell" in err[0] and "plan.json" in err[0]
