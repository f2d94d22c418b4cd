"""Times a person reads are in seconds with the unit in the key; the descriptions' relative unit
stays in the SAPP files (and a balance of one, which has no other unit) and in `objective`."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from ppb_core.balance import BalanceInput
from ppb_core.balance.program import solve
from ppb_core.balance.progress import Progress, showing_seconds
from ppb_core.cli.main import main
from ppb_core.estimate.inputs import load_run
from ppb_core.estimate.plan import plan_stages
from ppb_core.estimate.seconds import in_seconds
from ppb_core.model.placement import model_cell_options
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.payload.sapp import layer_set, read_sapp_file
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import TimedNote

CONFIGS = Path(__file__).parent.parent / "configs"
DATA = Path(__file__).parent / "data"

# Keys that name a time in the descriptions' unit; none may be left once the unit is known.
RELATIVE = {"time", "stage_time", "simulated_time", "bound", "iteration_time", "recompute_time", "value", "optimum"}


def _keys(value: Any, path: str = "") -> set[str]:
    """Every key path of a JSON value, lists collapsed: `stages[].time_s`."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in {f"{path}.{k}", *_keys(v, f"{path}.{k}")}}
    if isinstance(value, list):
        return set().union(*(_keys(v, f"{path}[]") for v in value)) if value else set()
    return set()


def test_every_time_is_renamed_and_scaled_by_hand() -> None:
    unit = 0.004  # 4 ms: the first body layer's forward
    result = {
        "status": "optimal",
        "objective": 750.0,
        "bound": 700.0,
        "gap": 0.0,
        "simulated_time": 750.0,
        "closed_form": {"value": 800.0, "optimum": 790.0, "status": "optimal"},
        "stages": [{"stage": 0, "memory_mb": 10.0, "time": 25.0, "bubble": 0.1}],
        "stage_time": [25.0],
        "ties": {"recompute_time": 2.5, "recomputed_layers": 1},
        "megatron": {"layout": "Et|tL", "alternative": {"objective": 775.0, "slower_by": 0.0333}},
        "timeline": {"plan": {"schedule": "1f1b", "forward": [[1.0, 2.0]], "iteration": 750.0}},
        "baselines": [{"option": "NONE", "iteration_time": 1000.0}],
        "interleave_search": [{"interleave": 1, "objective": 750.0, "bound": None}],
    }
    out = in_seconds(result, unit)
    # 750 × 0.004 = 3 s; 700 × 0.004 = 2.8; 800 × 0.004 = 3.2; 790 × 0.004 = 3.16; 25 × 0.004 = 0.1;
    # 2.5 × 0.004 = 0.01; 775 × 0.004 = 3.1; 1 and 2 × 0.004 = 0.004, 0.008; 1000 × 0.004 = 4
    assert out["objective"] == 750.0 and out["objective_s"] == pytest.approx(3.0)
    assert out["bound_s"] == pytest.approx(2.8) and out["simulated_time_s"] == pytest.approx(3.0)
    assert out["closed_form"] == {"value_s": pytest.approx(3.2), "optimum_s": pytest.approx(3.16), "status": "optimal"}
    assert out["stages"] == [{"stage": 0, "memory_mb": 10.0, "time_s": pytest.approx(0.1), "bubble": 0.1}]
    assert out["stage_time_s"] == [pytest.approx(0.1)]
    assert out["ties"] == {"recompute_time_s": pytest.approx(0.01), "recomputed_layers": 1}
    assert out["megatron"]["alternative"] == {"objective_s": pytest.approx(3.1), "slower_by": 0.0333}
    assert out["timeline"]["plan"]["forward_s"] == [[pytest.approx(0.004), pytest.approx(0.008)]]
    assert out["timeline"]["plan"]["iteration_s"] == pytest.approx(3.0)
    assert out["baselines"] == [{"option": "NONE", "iteration_time_s": pytest.approx(4.0)}]
    assert out["interleave_search"] == [{"interleave": 1, "objective_s": pytest.approx(3.0), "bound_s": None}]
    assert out["time_unit_s"] == unit and out["status"] == "optimal" and out["gap"] == 0.0
    assert not {key.rsplit(".", 1)[-1] for key in _keys(out)} & RELATIVE
    assert list(out)[:3] == ["status", "objective", "objective_s"]  # each in its place


def test_a_notes_times_are_said_in_seconds_by_hand() -> None:
    """The solver's notes kept the balancer's relative unit in a run config's JSON ("bound 443.301", session 29's
    report): a note with times says them in seconds once the unit is known, and stays as solved otherwise."""
    unit = 0.004
    note = TimedNote("probing: 3166 relaxations, 4 rounds, proven, bound {}", 466.17)
    assert note == "probing: 3166 relaxations, 4 rounds, proven, bound 466.17"  # the descriptions' unit
    # 466.17 × 0.004 = 1.86468 s, said to the tenth of a millisecond
    assert note.seconds(unit) == "probing: 3166 relaxations, 4 rounds, proven, bound 1.8647 s"
    assert pickle.loads(pickle.dumps(note)).seconds(unit) == note.seconds(unit)  # a search's workers
    # the settings' note `balance.result` shows after its colon (`megatron.no_alternative`)
    why = TimedNote("Megatron-Core's settings: none faster than {}, another MTP placement's", 250.0)
    assert why.after(": ").seconds(unit) == "none faster than 1.0000 s, another MTP placement's"  # 250 × 0.004
    result = {"solver": {"notes": [note, "tie-break: recomputed layers 7"]}, "megatron": {"no_alternative": why}}
    out = in_seconds(result, unit)
    assert out["solver"]["notes"] == [note.seconds(unit), "tie-break: recomputed layers 7"]
    assert out["megatron"]["no_alternative"] == why.seconds(unit)


def shipped(name: str, folder: Path) -> Path:
    """A shipped config, copied with its config.json paths absolute. Megatron's get_batch broadcasts run in
    the data-reading cells' forwards of the iteration (docs/timing.md, `compute`) and in the HEAD's and the
    TAIL's descriptions the balancer schedules in those cells (`payload.describe.batch_loading_ms`), so the
    balancer's schedule is the iteration's compute and bubble exactly with them on, as shipped."""
    text = (CONFIGS / name).read_text().replace("config: hf/", f"config: {CONFIGS / 'hf'}/")
    assert "batch_broadcast" not in text
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def llama_plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("seconds")
    out = folder / "plan.json"
    assert main(["balance", str(shipped("llama3-8b.yaml", folder)), "-q", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def test_a_plan_from_a_run_config_is_in_seconds(llama_plan: dict[str, Any]) -> None:
    keys = _keys(llama_plan)
    names = {key.rsplit(".", 1)[-1] for key in keys}
    assert not names & RELATIVE, names & RELATIVE
    assert not {".timeline.plan.forward", ".timeline.plan.iteration", ".timeline.baseline.backward"} & keys
    assert {
        ".stages[].time_s",
        ".stage_time_s",
        ".simulated_time_s",
        ".bound_s",
        ".baselines[].iteration_time_s",
    } <= keys
    # The unit is the first body layer's forward by the time model, ms / 1e3.
    run = load_run(CONFIGS / "llama3-8b.yaml")  # the broadcasts touch no body layer's time
    times = TimeModel(run)
    first_body = next(layer for layer in walk(run) if layer.node == "BODY")
    forward_ms, backward_ms = times.layer_times(first_body, LayerType.NOT_REC_LAYER)
    unit = llama_plan["time_unit_s"]
    assert unit == pytest.approx(forward_ms / 1e3, rel=1e-12)
    assert llama_plan["objective_s"] == pytest.approx(llama_plan["objective"] * unit, rel=1e-12)
    # A middle stage of NONE layers (no head, no tail: every llama layer is alike) takes its layers'
    # forward + backward by the time model: n × (f + b) ms / 1e3.
    middle = [row for row in llama_plan["stages"][1:-1] if row["options"].get("NONE") == row["layers"]]
    assert middle
    for row in middle:
        assert row["time_s"] == pytest.approx(row["layers"] * (forward_ms + backward_ms) / 1e3, rel=1e-9)
    # The balancer's simulated iteration is the time model's compute and bubble of the same plan
    # (its own breakdown adds P2P, the DP reduction and the optimizer step on top).
    breakdown = llama_plan["iteration"]["breakdown"]
    assert llama_plan["simulated_time_s"] == pytest.approx(breakdown["compute"] + breakdown["bubble"], rel=1e-6)


def test_a_plans_notes_from_a_run_config_are_in_seconds(llama_plan: dict[str, Any]) -> None:
    # the closed form's least busiest stage, as the note says it, in seconds: no plan's busiest stage works
    # less per micro-batch than it
    notes = llama_plan["solver"]["notes"]
    (closed,) = [note for note in notes if note.startswith("closed form: ")]
    busiest_s = float(closed.rsplit("least busiest stage ", 1)[1].removesuffix(" s"))
    # (`stage_time_s`: per micro-batch); and it holds a layer's forward at least, one unit, whose seconds are
    # `time_unit_s`: in the unit itself the note said more than the busiest stage's seconds (llama3-8b: 27.2 units)
    assert llama_plan["time_unit_s"] <= busiest_s <= max(llama_plan["stage_time_s"]) * (1 + 1e-3)
    (probing,) = [note for note in notes if note.startswith("probing: ")]
    # a proven probing's bound is the plan's critical path (less its 5e-7 margin), in seconds to 4 decimals
    if ", proven, " in probing:
        assert probing.endswith(f"bound {llama_plan['objective_s']:,.4f} s")


def test_a_plan_from_a_layers_file_keeps_the_files_unit(capsys: pytest.CaptureFixture[str]) -> None:
    # demo.json's times have no unit ppb knows: the plain keys, no `_s`, no `time_unit_s`
    code = main(["balance", str(DATA / "demo.json"), "-s", "16", "-mb", "16", "-i", "2", "-t", "5", "--json", "-q"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert "time_unit_s" not in result and "stage_time" in result and "stage_time_s" not in result
    assert all("time" in row and "time_s" not in row for row in result["stages"])
    # and its notes keep the file's unit: a number, no "s"
    (closed,) = [note for note in result["solver"]["notes"] if note.startswith("closed form: ")]
    assert not closed.endswith(" s") and float(closed.rsplit(" ", 1)[1]) > 0


def test_progress_lines_give_seconds_once_the_unit_is_known() -> None:
    step = Progress("round", "", 1.25, incumbent=750.0, bound=700.0)
    assert step.line() == "[1.2 s] round: incumbent 750, bound 700, gap 6.67%"  # (750 − 700) / 750
    heard: list[str] = []
    hook = showing_seconds(lambda progress: heard.append(progress.line()), 0.004)
    assert hook is not None
    hook(step)
    assert heard == ["[1.2 s] round: incumbent 3.000 s, bound 2.800 s, gap 6.67%"]  # 750 × 0.004, 700 × 0.004
    assert showing_seconds(None, 0.004) is None
    # a step's other figures (a bound's level, the plan before the exchanges) are shown the same way
    heard.clear()
    hook(Progress("bound", "a family", 2.0, incumbent=750.0, figures=(("level", 725.0),)))
    assert heard == ["[2.0 s] bound: incumbent 3.000 s, level 2.900 s — a family"]  # 725 × 0.004


def test_a_solve_says_what_it_did_and_why_it_stopped() -> None:
    """Every step of a small solve in seconds: the exchanges counted, the rounds' path rows, and a
    last line saying why the search ended."""
    descriptions, constant = read_sapp_file(DATA / "demo.json")
    problem = BalanceInput(layer_set(descriptions, "demo.json"), 4, 8, 1, 100000.0, constant, "1f1b", "demo.json")
    heard: list[Progress] = []
    solve(problem, 60.0, progress=showing_seconds(heard.append, 0.001))
    lines = [step.line() for step in heard]
    assert all(step.unit_s == 0.001 for step in heard)
    [start_plan] = [line for line in lines if " start_plan: " in line]
    assert "stage exchange(s)" in start_plan and "before the exchanges" in start_plan and " s," in start_plan
    assert any(" round: " in line and "path rows" in line for line in lines)
    assert heard[-1].phase == "done" and lines[-1].endswith("— proven optimal")


def test_a_combined_body_sets_the_unit(tmp_path: Path) -> None:
    """The descriptions' unit is the first body the balancer sees: in configs/qwen2.5-vl-7b.yaml the
    combined body, one vision window block and one decoder layer (docs/ppb.md, "Combined bodies"),
    so its forward time is the sum of theirs. The unit was the vision block's alone, and every
    figure in seconds came out about 5 times too small (0.72 s against 3.6 s of compute and bubble)."""
    out = tmp_path / "plan.json"
    config = shipped("qwen2.5-vl-7b.yaml", tmp_path)
    assert main(["balance", str(config), "-q", "-o", str(out)]) == 0
    plan = json.loads(out.read_text())
    run = load_run(config)
    times = TimeModel(run)
    forward_ms = {
        model: times.layer_times(
            next(layer for layer in walk(run) if layer.node == "BODY" and layer.model_name == model),
            LayerType.NOT_REC_LAYER,
        )[0]
        for model in ("vit", "llm")
    }
    assert plan["time_unit_s"] == pytest.approx((forward_ms["vit"] + forward_ms["llm"]) / 1e3, rel=1e-12)
    # the schedule on the layers' times is then the time model's compute and bubble of the plan: the
    # body types keep the model's order (a full-attention block every 8th of the tower's), so each
    # sub-model's layers fall in the cells where the balancer put them (0.9% apart when the
    # descriptions merged the window blocks and put the full-attention ones after them all)
    breakdown = plan["iteration"]["breakdown"]
    assert plan["simulated_time_s"] == pytest.approx(breakdown["compute"] + breakdown["bubble"], rel=1e-9)
    # and so is every stage's forward and backward, layer by layer where the model has them
    cells = [[dict(cell["options"]) for cell in row] for row in plan["cells"]]
    evaluated = plan_stages(run, cells, model_cell_options(plan["cells"], plan["input"]["bodies"]))
    for stage, evaluation in zip(plan["stages"], evaluated, strict=True):
        assert stage["time_s"] == pytest.approx((evaluation.forward_ms + evaluation.backward_ms) / 1e3, rel=1e-9)
