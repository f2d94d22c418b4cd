"""`ppb balance`: the JSON contract, SAPP's defaults for a layers.json, bad input as one line."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest

from ppb_core.balance.stopped import stopped_words
from ppb_core.cli.balance import _no_plan
from ppb_core.cli.main import main

DATA = Path(__file__).parent / "data"
CONFIGS = Path(__file__).parent.parent / "configs"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["balance", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_contract(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "plan.json"
    # demo.json (96 layers, no FULL) fits 56000 MB from 16 stages on; 5 s for the program
    code, out, _ = _run(
        capsys, str(DATA / "demo.json"), "-s", "16", "-mb", "16", "-i", "2", "-t", "5", "--json", "-o", str(out_file)
    )
    assert code == 0
    result = json.loads(out)
    assert json.loads(out_file.read_text()) == result
    for key in (
        "objective",
        "status",
        "gap",
        "bound",
        "offset",
        "recompute",
        "select_recompute",
        "select_comm_recompute",
        "cells",
        "stages",
        "stage_memory_mb",
        "stage_time",
        "megatron",
        "baselines",
        "speedup",
        "simulated_time",
        "closed_form",
    ):
        assert key in result, key
    assert result["status"] in ("optimal", "time_limit")
    assert result["input"] == {
        "source": str(DATA / "demo.json"),
        "stages": 16,
        "micro_batches": 16,
        "interleave": 2,
        "schedule": "interleaved",
        "memory_mb": 56000.0,
        "constant_memory_mb": 0.0,
        "options": ["NONE", "SLCT", "COMM", "BOTH"],
        "bodies": [{"name": "DecodeLayer", "nb_layer": 96}],
        # a SAPP file is MindFormers' own: its rules by default (every cell holds a layer)
        "framework": "mindformers",
        "mtp_layers": 0,
    }
    # [chunk][stage] lists with interleave; every stage within the device
    assert len(result["offset"]) == 2 and len(result["offset"][0]) == 16
    assert max(result["stage_memory_mb"]) <= 56000
    assert sum(row["layers"] for row in result["stages"]) == 96


def test_sapp_defaults_for_a_layers_file(capsys: pytest.CaptureFixture[str]) -> None:
    # SAPP's defaults (4 stages, 4 micro-batches, V = 1, 56000 MB) cannot hold demo.json's 96 layers
    code, out, err = _run(capsys, str(DATA / "demo.json"), "--json", "-t", "30")
    result = json.loads(out)
    assert code == 2 and "the least-memory plan needs 82,238 MB" in err
    assert (
        result["input"]["stages"],
        result["input"]["micro_batches"],
        result["input"]["interleave"],
        result["input"]["memory_mb"],
    ) == (4, 4, 1, 56000.0)


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(DATA / "demo.json"), "-s", "16", "-mb", "16", "-t", "30")
    assert code == 0
    assert "offset:" in out and "select_comm_recompute:" in out and "uniform split" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.json"], "missing.json: file not found"),
        ([str(DATA / "demo.json"), "-s", "0"], "--stages: must be positive"),
        ([str(DATA / "demo.json"), "-i", "two"], "--interleave: must be a positive integer"),
        # 99 stages: 97 cells hold neither the head nor the tail, and 96 layers cannot fill them
        ([str(DATA / "demo.json"), "-s", "99"], "cannot fill"),
        ([str(DATA / "demo.json"), "-s", "4", "-mb", "2", "-i", "2"], "at least as many micro-batches as stages"),
        ([str(DATA / "demo.json"), "--constant-memory", "-5"], "must not be negative"),
        ([str(DATA / "demo.json"), "--work", "0"], "--work: must be positive and finite, got 0"),
        ([str(DATA / "demo.json"), "--work", "1e9"], "--work: "),
        # the layout writes an "m" per MTP layer: 10^8 of them ran past a minute (December 2026); ppb's limit of
        # layers, 1,024, bounds them
        ([str(DATA / "demo.json"), "--mtp-layers", "100000000"], "over ppb's limit of 1,024 layers"),
        # a run config's descriptions hold its models' MTP layers (configs/llama3-8b.yaml: none), no other count
        (
            [str(DATA.parent.parent / "configs" / "llama3-8b.yaml"), "--mtp-layers", "2"],
            "--mtp-layers: 2 MTP layers, but the run config's models hold 0",
        ),
    ],
)
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    out_file = tmp_path / "plan.json"
    code, _, err = _run(capsys, *argv, "-o", str(out_file))
    assert code == 2
    assert err.count("\n") == 1 and message in err
    assert not out_file.exists()


def test_memory_too_small_names_what_the_least_plan_needs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "plan.json"
    # demo.json on 16 stages, 16 micro-batches: the least-memory plan needs 36255 MB (as the
    # count-based program of an earlier version also found).
    code, out, err = _run(
        capsys,
        str(DATA / "demo.json"),
        "-s",
        "16",
        "-mb",
        "16",
        "-mem",
        "20000",
        "--json",
        "-t",
        "30",
        "-q",
        "-o",
        str(out_file),
    )
    assert code == 2
    # -q: a piped run's progress lines (one every 5 s) would otherwise join the error on a loaded machine
    assert "no plan fits in 20,000 MB per device: the least-memory plan needs 36,255 MB" in err
    assert err.count("\n") == 1
    assert json.loads(out)["status"] == "infeasible"
    assert not out_file.exists()


def test_a_search_stopped_before_any_plan_is_refused_naming_what_to_raise(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # demo.json at V = 7 and 95,000 MB: no even split fits (the leanest uniform split, BOTH, needs 104,685 MB)
    # and the least plan needs 92,070, so a plan fits but none is known before the search; a clock of 1 µs
    # stops it at once. It exited 0 and wrote a plan file without a plan.
    out_file = tmp_path / "plan.json"
    argv = [str(DATA / "demo.json"), "-i", "7", "-mem", "95000", "-t", "1e-6", "-q", "--json"]
    code, out, err = _run(capsys, *argv, "-o", str(out_file))
    assert code == 2
    assert err.count("\n") == 1
    assert "--time-limit: no plan found in" in err and "raise it" in err
    result = json.loads(out)
    assert result["status"] == "time_limit" and "cells" not in result
    assert not out_file.exists()
    # stopped by the work limits instead, the line names --work
    flag, words = _no_plan(
        {"message": "no plan found in 8.0 s", "stopped_by": "work_limit"}, Namespace(work=1.0, time_limit=None)
    )
    assert flag == "--work" and words.endswith("the work limits (--work 1) stopped the search first; raise --work")


def test_a_proven_objective_whose_tie_break_the_clock_cut_is_said_proven() -> None:
    """`ppb balance -t 60 configs/deepseek-v3-report.yaml` printed "status optimal ... gap 0 ...: stopped by the
    time limit: the best plan found so far": the objective was proven, only the tie-break was cut."""
    cut = stopped_words("time_limit", "optimal")
    assert cut.startswith("proven optimal; the time limit cut the choice among equally fast plans")
    assert stopped_words("time_limit", "time_limit").startswith("stopped by the time limit")
    assert stopped_words("optimal", "optimal") == "proven optimal"


def test_a_cell_of_no_layer_is_said_beside_the_mindformers_yaml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Megatron-Core runs a virtual stage of the loss alone (`BalanceInput.reserved_cells`); MindFormers places
    layers only. Two stages, two light layers (time 1) and a TAIL of time 10: under the megatron rules both
    layers go to stage 0 (its forward and backward 3 + 6 against the TAIL's 10 + 20 alone on stage 1), the
    offset [1, -1] leaves stage 1 no layer, and the text says so."""
    layers = {
        "layers_description": [
            {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 1},
            {"name": "L", "type": "BODY", "nb_layer": 2, "time": 1, "memory_parameter": 1, "memory_activation": 1},
            {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 10, "memory_parameter": 1},
        ]
    }
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(layers))
    code, out, _ = _run(capsys, str(path), "-s", "2", "-mb", "4", "--framework", "megatron")
    assert code == 0
    assert "offset: [1, -1]" in out
    assert "(cell (chunk 0, stage 1) holds no layer, as Megatron-Core runs it; MindFormers places" in out
    code, out, _ = _run(capsys, str(path), "-s", "2", "-mb", "4")  # MindFormers' rules: a layer in every cell
    assert code == 0 and "offset: [0, 0]" in out and "holds no layer" not in out


def test_other_stages_say_the_devices_the_plan_is_priced_on(capsys: pytest.CaptureFixture[str]) -> None:
    """configs/llama3-8b.yaml is dp 8 · tp 2 · pp 4 = 64 H100s; `-s 2` keeps dp and tp (`sized_like`): the
    plan's iteration and tokens per device are those of 8 · 2 · 2 = 32 devices, which stderr says."""
    code, _, err = _run(capsys, str(DATA.parent.parent / "configs" / "llama3-8b.yaml"), "-s", "2", "-q")
    assert code == 0
    assert "note: -s 2: priced at dp 8 · tp 2 · cp 1 · pp 2 = 32 devices, the run config's 64 at pp 4" in err


def test_a_run_configs_stages_say_the_peak_ppb_check_prices_for_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """configs/llama3-8b.yaml: the balancer's own charge of stage 3 (the loss's) was 13,830 MB, its TAIL's and 6
    bodies' terms each truncated to whole MB (SAPP's rule), where `ppb check` prices the printed layout's loss
    moment at 13,833.2 MB (static 7,428.1 + activations 5,335.1 + buffers 4 + the loss's 1,066); stage 0 was
    charged 26,901 MB, the loss's 1,066 MB working set on a stage of bodies whose backward holds 288 at most,
    where check gives 26,139. Now each stage says check's peak and moment, whatever the balancer charged."""
    code, out, _ = _run(capsys, str(CONFIGS / "llama3-8b.yaml"), "-q", "--json")
    assert code == 0
    balanced = json.loads(out)
    flags = balanced["megatron"]["flags"]
    assert main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", flags, "-q", "--json", "--no-optimum"]) == 0
    checked = json.loads(capsys.readouterr().out)
    for mine, theirs in zip(balanced["stages"], checked["stages"], strict=True):
        assert mine["peak_mb"] == pytest.approx(theirs["peak_mb"], abs=1e-6)
        assert mine["moment"] == theirs["moment"]
    assert balanced["stages"][-1]["moment"] == "loss"
    assert round(balanced["stages"][-1]["peak_mb"]) == 13_833
    code, out, _ = _run(capsys, str(CONFIGS / "llama3-8b.yaml"), "-q")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("│     3 │"))
    assert "13,833" in row and "loss" in row


def test_a_mindformers_run_config_s_plan_is_said_in_its_yaml_not_as_megatron_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """MindFormers takes `offset` and the recompute lists, not `--pipeline-model-parallel-layout`: a
    `framework: mindformers` run printed a Megatron-LM line a MindFormers user cannot use (sessions 26, 27)."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    run = tmp_path / "mindformers.yaml"
    run.write_text("framework: mindformers\n" + text)
    code, out, _ = _run(capsys, str(run), "-q")
    assert code == 0 and "offset: [" in out
    assert "Megatron-LM" not in out and "--recompute" not in out
    plan = tmp_path / "plan.yaml"
    plan.write_text("offset: [0, 0, 0, 0]\n")
    assert main(["check", str(run), "--plan", str(plan), "-q"]) in (0, 1)
    out = capsys.readouterr().out
    assert "the balancer's plan" in out and "Megatron-LM" not in out
    # its optimum in the yaml's words, the only ones a MindFormers user has
    assert "; offset [" in out and "select_comm_recompute [" in out


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("llama3-8b.yaml", "Megatron-LM: --pipeline-model-parallel-layout"),
        ("llama3.1-8b-torchtitan.yaml", "torchtitan job TOML"),
    ],
)
def test_a_megatron_or_torchtitan_run_config_s_plan_prints_no_mindformers_yaml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, config: str, said: str
) -> None:
    """A run config's plan is said in its framework's words: the MindFormers / HyperParallel yaml block (offset
    and the recompute lists) is noise to a Megatron-LM or torchtitan user (found in user QA); its JSON keeps them."""
    code, out, _ = _run(capsys, str(CONFIGS / config), "-q")
    assert code == 0 and said in out
    assert "MindFormers" not in out and "offset:" not in out and "select_recompute" not in out
    code, out, _ = _run(capsys, str(CONFIGS / config), "-q", "--json")
    assert code == 0 and "offset" in json.loads(out)
    # `ppb check`'s optimum the same (session 33: it printed "offset [0, 1, 1, -2], recompute [0, 0, 0, 0], ..."
    # beside the Megatron-LM flags and the torchtitan lines); its JSON keeps them
    plan = tmp_path / "plan.toml"
    plan.write_text('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n')
    given = str(plan) if "torchtitan" in config else "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'"
    assert main(["check", str(CONFIGS / config), "--plan", given, "-q"]) == 0
    out = capsys.readouterr().out
    assert "the balancer's plan (proven optimal): iteration " in out and said in out
    assert "offset [" not in out and "select_recompute" not in out
    assert main(["check", str(CONFIGS / config), "--plan", given, "-q", "--json"]) == 0
    optimum = json.loads(capsys.readouterr().out)["optimum"]
    assert "offset" in optimum and optimum["yaml_keys_said"] is False


def test_a_uniform_split_fits_by_the_peak_beside_it_and_the_gain_is_over_one_that_fits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """configs/llama3-8b.yaml on 30,500 MB devices, 4,000 reserved: 26,500 MB usable. Every layer under NONE split
    8|8|8|8 (`--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'`, no recompute flags) is what `ppb check` prices
    at 26,139 MB on stage 0 (its backward), so it fits by 361 MB; the balancer's own charge of that stage is 26,901
    MB (the loss's 1,066 MB working set on a stage of bodies, see the test above), over. The uniform-split table
    said `NONE  no  26,139` beside the 26,500, and stated the gain over SLCT (4.493 s) though NONE is faster.
    The plan is held to check's peak (`balance.fitting`); so is each split now: NONE fits, and it is the best."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    text = text.replace(
        "device: {name: h100-80gb, reserved_mb: 4000}", "device: {name: h100-80gb, memory_mb: 30500, reserved_mb: 4000}"
    )
    run = tmp_path / "tight.yaml"
    run.write_text(text)
    layout = "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'"
    assert main(["check", str(run), "--plan", layout, "-q", "--json", "--no-optimum"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["fits"] and round(max(stage["peak_mb"] for stage in checked["stages"])) == 26_139
    code, out, _ = _run(capsys, str(run), "-q", "--json")
    assert code == 0
    balanced = json.loads(out)
    assert balanced["input"]["memory_mb"] == 26_500
    none = next(row for row in balanced["baselines"] if row["option"] == "NONE")
    assert none["peak_memory_mb"] > 26_500  # the balancer's charge, over
    assert none["peak_mb"] == pytest.approx(max(stage["peak_mb"] for stage in checked["stages"]), abs=1e-6)
    for row in balanced["baselines"]:  # the verdict is the peak's beside it
        assert row["feasible"] is (row["peak_mb"] <= 26_500), row["option"]
    assert balanced["best_baseline"] == "NONE"
    assert balanced["baseline_iteration"]["seconds"] == pytest.approx(checked["iteration_s"], rel=1e-9)
    code, out, _ = _run(capsys, str(run), "-q")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("│   NONE │"))
    assert row.split("│")[2].strip() == "yes" and "26,139" in row
    assert "over the best uniform split" in out and "(NONE)" in out


@pytest.mark.parametrize("flags", [["-i", "2"], ["-s", "2"]])
def test_other_sizes_than_a_stated_layouts_plan_as_the_run_without_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str]
) -> None:
    """A layout places the run's layers at its own sizes; the balancer finds its own split whatever it says. With
    `-i 2` (or `-s 2`) configs/llama3-8b.yaml laid out 'Et*8|t*8|t*8|t*8L' (its even split, 4 stages of 1 chunk)
    stopped after the solve on `cell_counts: expected 2 chunks of 4 stages` (the plan priced with the layout's
    sizes); now it plans as the run config without the layout does at the same flags."""
    text = (CONFIGS / "llama3-8b.yaml").read_text().replace("hf/", f"{CONFIGS}/hf/")
    laid = tmp_path / "laid.yaml"
    laid.write_text(text.replace("schedule: 1f1b,", "schedule: 1f1b, layout: 'Et*8|t*8|t*8|t*8L',"))
    plain = tmp_path / "plain.yaml"
    plain.write_text(text)
    code, out, err = _run(capsys, str(laid), *flags, "--json", "-q")
    assert code == 0, err
    code, same, _ = _run(capsys, str(plain), *flags, "--json", "-q")
    assert code == 0
    ours, theirs = json.loads(out), json.loads(same)
    assert ours["cells"] == theirs["cells"] and ours["iteration"] == theirs["iteration"]
    assert [row["peak_mb"] for row in ours["stages"]] == [row["peak_mb"] for row in theirs["stages"]]


def test_a_schedule_the_chunks_change_is_said_and_gpipe_over_chunks_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Megatron-LM runs 1F1B interleaved at V > 1 and plain 1F1B at V = 1 (`schedules.canonical`): `--schedule
    1f1b` on configs/qwen2.5-7b.yaml (vpp 2) planned the interleaved schedule without a word. GPipe over 2 chunks a
    stage the run config refuses (`vpp 2 needs schedule interleaved`), and `ppb balance` solved it."""
    config = str(CONFIGS / "qwen2.5-7b.yaml")
    code, out, err = _run(capsys, config, "--schedule", "1f1b", "--json", "-q")
    assert code == 0 and json.loads(out)["input"]["schedule"] == "interleaved"
    assert "note: --schedule 1f1b at V=2 (parallel.vpp) runs interleaved; -i 1 for one chunk a stage" in err
    code, out, err = _run(capsys, config, "-i", "1", "--schedule", "interleaved", "--json", "-q")
    assert code == 0 and json.loads(out)["input"]["schedule"] == "1f1b"
    assert "note: --schedule interleaved at V=1 (-i) runs 1f1b; -i 2 or more to interleave chunks" in err
    out_file = tmp_path / "plan.json"
    code, out, err = _run(capsys, config, "--schedule", "gpipe", "-o", str(out_file))
    assert code == 2 and not out_file.exists() and out == ""
    assert err.strip() == (
        f"ppb: error: {config}: --schedule: gpipe runs one chunk a stage, V=2 here (parallel.vpp): a run config runs "
        "its chunks interleaved"
    )
    # the schedule said is the one that runs: no note
    code, _, err = _run(capsys, config, "--schedule", "interleaved", "--json", "-q")
    assert code == 0 and "note" not in err
