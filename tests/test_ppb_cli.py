"""`ppb describe` and `ppb profile`: outputs, and bad input as one line, exit 2, nothing written; the
flags' defaults and vocabulary agree with the core's."""

from __future__ import annotations

import json
import os
import signal
import time
from functools import partial
from pathlib import Path

import pytest
import yaml
from test_ppb_fakes import SPEC, FakeMemory, FakePricer

import ppb_core.cli.describe as describe_cli
import ppb_core.cli.main as cli_main
import ppb_core.cli.profile as profile_cli
from ppb_core import chain
from ppb_core.cli.arguments import TIME_LIMIT_S
from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config
from ppb_core.memory import BUFFER_RULES
from ppb_core.payload import run as ppb_run
from ppb_core.payload import sapp
from ppb_core.payload.profiling import profile_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fakes(monkeypatch):
    """The CLI's memory and time models replaced by the hand-checkable fakes."""
    monkeypatch.setattr(describe_cli, "describe_run", partial(_describe_with_fakes))
    monkeypatch.setattr(profile_cli, "profile_run", partial(profile_run, memory=FakeMemory(5), times=FakePricer()))


def _describe_with_fakes(run, timed=True):
    return ppb_run.describe_run(run, FakeMemory(5), FakePricer() if timed else None, timed=timed)


@pytest.fixture
def run_yaml(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "llm", "spec": SPEC}],
                "parallel": {"pp": 2},
                "training": {"seq_length": 256, "micro_batches": 4, "recompute": {"softmax": 0}},
                "device": {"name": "h100-80gb"},
            }
        )
    )
    return path


def test_describe_writes_the_sapp_file(fakes, run_yaml, tmp_path):
    out = tmp_path / "layers.json"
    assert cli_main.main(["describe", str(run_yaml), "-o", str(out)]) == 0
    written = sapp.read_layers_description(out)
    assert [d["name"] for d in written] == ["HEAD", "BODY_0", "TAIL"]
    assert written[1]["forward_time"] == 1.0 and written[1]["nb_layer"] == 4
    assert set(json.loads(out.read_text())) == {"layers_description"}


def test_describe_prints_without_an_output_and_can_leave_times_out(fakes, run_yaml, capsys):
    assert cli_main.main(["describe", str(run_yaml), "--no-times"]) == 0
    printed = json.loads(capsys.readouterr().out)["layers_description"]
    assert "forward_time" not in printed[1] and "memory_select_comm" not in printed[1] and printed[1]["time"] == 1


def test_profile_prints_costs_and_the_front(fakes, run_yaml, capsys):
    assert cli_main.main(["profile", str(run_yaml), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [profile] = report["profiles"]
    # pp 2, 4 micro-batches, 1F1B: stages keep 2 and 1 in flight; the buffers split at 2.
    assert report["many"] == 2 and profile["counts"] == [] and profile["kind"] == "dense"
    assert [cost["role"] for cost in profile["costs"]] == ["plain", *["alone"] * 8, "full"]
    assert profile["front"][0]["recompute"] == [] and profile["front"][-1]["recompute"] is None
    assert cli_main.main(["profile", str(run_yaml)]) == 0
    text = capsys.readouterr().out
    assert "switch costs" in text and "front" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["describe", "missing.yaml", "-o", "{out}"], "missing.yaml: file not found"),
        (["profile", "missing.yaml"], "missing.yaml: file not found"),
        (["describe", "{bad}", "-o", "{out}"], "training.micro_batches"),
        (["profile", "{run}", "--most-in-flight", "0"], "--most-in-flight"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(fakes, run_yaml, tmp_path, capsys, argv, message):
    bad = tmp_path / "bad.yaml"
    raw = yaml.safe_load(run_yaml.read_text())
    raw["training"]["micro_batches"] = 0
    bad.write_text(yaml.safe_dump(raw))
    out = tmp_path / "layers.json"
    argv = [arg.format(out=out, bad=bad, run=run_yaml) for arg in argv]
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppb: error:") and message in err and "\n" not in err
    assert not out.exists()


def test_a_schedule_that_cannot_run_is_refused_in_one_line(tmp_path, capsys):
    # Interleaved over 4 stages with 3 micro-batches cannot run (Megatron-LM needs m >= pp).
    path = tmp_path / "short.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "llm", "spec": {**SPEC, "num_layers": 8}}],
                "parallel": {"pp": 4, "vpp": 2, "schedule": "interleaved"},
                "training": {"seq_length": 256, "micro_batches": 3},
                "device": {"name": "h100-80gb"},
            }
        )
    )
    for command in ("estimate", "profile", "describe", "balance"):
        assert cli_main.main([command, str(path), "--json"] if command != "describe" else [command, str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.strip() == (
            f"ppb: error: {path}: training.micro_batches: the interleaved schedule needs "
            "at least as many micro-batches as stages (3 < 4)"
        )


def test_describe_and_profile_a_shipped_config_with_our_models(tmp_path, capsys):
    config = ROOT / "configs" / "llama3-8b.yaml"
    out = tmp_path / "layers.json"
    assert cli_main.main(["describe", str(config), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["layers_description"] == ppb_run.describe_run(load_run_config(config))
    layers = sapp.read_layer_set(out)
    assert layers.nb_body_layers == 32 and layers.bodies[0].forward_time == 1.0
    assert cli_main.main(["profile", str(config), "--json"]) == 0
    [profile] = json.loads(capsys.readouterr().out)["profiles"]
    # 1F1B over 4 stages with 32 micro-batches keeps 4, 3, 2 and 1 in flight: split at 4, excess at 2 and 3.
    assert profile["counts"] == [2, 3] and len(profile["costs"]) == 1 + 8 + 1
    names = {name for option in profile["front"] for name in option["names"]}
    assert {"NONE", "FULL"} <= names


def test_the_help_states_the_balancers_time_limit_and_the_cores_vocabulary(capsys) -> None:
    # the flags' default is the chain's: no wall-clock limit, the work limits end the search
    assert TIME_LIMIT_S is None and chain.PLAN_TIME_LIMIT_S is None
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "default: none" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "layered (default) or reference" in " ".join(capsys.readouterr().out.split())
    assert BUFFER_RULES == ("layered", "reference")
    # `ppb --help` says what ppb does and its exit statuses (it showed the entry module's docstring, "`ppb` entry
    # point: each sub-command's work loaded when it runs")
    with pytest.raises(SystemExit):
        main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "entry point" not in said and "Plan pipeline-parallel training" in said
    assert "exit status 2" in said and "exit status 1" in said
    # every form `ppb check --plan` reads (a torchtitan run's job TOML or Python config was said nowhere in its help,
    # session 33), and what `ppb estimate` prints besides memory (times, the iteration)
    assert "torchtitan job lines" in said and "torchtitan job (TOML or Python config)" in said
    assert "the iteration" in said
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "job TOML (.toml) or Python config (.py)" in said and "9810191bb the Python config" in said


@pytest.mark.parametrize(
    ("argv", "field", "allowed"),
    [
        (["estimate", "configs/llama3-8b.yaml", "--buffer-rule", "fancy"], "--buffer-rule", "layered, reference"),
        (["plan", "configs/llama3-8b.yaml", "--until", "nowhere"], "--until", "run_config, layer_walk"),
        (["balance", "configs/llama3-8b.yaml", "--schedule", "zigzag"], "--schedule", "1f1b, interleaved"),
    ],
)
def test_a_word_outside_the_cores_vocabulary_is_one_line(capsys, argv, field, allowed) -> None:
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ppb: error: ") and field in line and allowed in line


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["plan", "configs/llama3-8b.yaml"], "-o/--out"),
        (["describe", "configs/llama3-8b.yaml"], "-o/--output"),
        (["balance", "configs/llama3-8b.yaml"], "-o/--out"),
        (["search", "searches/llama3-8b-64.yaml"], "-o/--out"),
        (["import", "megatron", "--num-layers 2", "--device", "h100-80gb"], "-o/--output"),
        (["census", "configs/hf/llama3-8b.json"], "--out/-o"),
    ],
)
def test_an_empty_output_path_is_refused_before_any_work(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-o "$OUT"` with OUT unset: `ppb plan -o ''` wrote its eleven tables into the working folder (Path('')
    is '.'), `ppb balance -o ''` and `ppb describe -o ''` wrote nothing and said nothing."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main([*(str(ROOT / a) if a.startswith(("configs/", "searches/")) else a for a in argv), "-o", ""])
    assert exited.value.code == 2
    assert f"argument {flag}: is empty: give a file or folder name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_is_one_line_and_the_shells_status(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Ctrl-C in any command printed Python's traceback (and, in `ppb search`, one per worker process): now one
    line and 130, the shell's 128 + SIGINT (session 27)."""

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(profile_cli, "run", interrupted)
    assert cli_main.main(["profile", "configs/llama3-8b.yaml"]) == 130
    assert capsys.readouterr().err == "ppb: interrupted\n"


def test_sigterm_is_one_line_and_128_plus_15_and_what_the_command_started_ends(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`kill PID` of `ppb search` run in the background (SIGINT ignored, as a shell's `&` starts it) ended ppb at
    once and left its forkserver and three balancing processes running on (session 29). SIGTERM is now raised where the
    command is: `search` ends its processes as on Ctrl-C (`_Workers.close`, abandoned), then one line and 143."""

    def killed(args: object) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this returns
        return 0

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(profile_cli, "run", killed)
    assert cli_main.main(["profile", "configs/llama3-8b.yaml"]) == 143
    assert capsys.readouterr().err == "ppb: terminated\n"
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler back


def test_import_mindformers_says_where_a_mindformers_yaml_goes(tmp_path, capsys):
    """`ppb import mindformers` was argparse's "invalid choice" alone, though ppb prices MindFormers runs and
    reads their yaml: the line says how (one line, exit 2, nothing written)."""
    out = tmp_path / "run.yaml"
    with pytest.raises(SystemExit) as exited:  # argparse's exit, status 2 (`arguments.OneLineParser`)
        main(["import", "mindformers", "train.yaml", "--device", "ascend-910b", "-o", str(out)])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not out.exists()
    (line,) = captured.err.strip().splitlines()
    assert "mindformers has no import: write the run config (framework: mindformers" in line
    assert "ppb check RUN.yaml --plan YOUR.yaml" in line


def test_the_estimate_json_keys_are_where_its_help_says(capsys) -> None:
    """`ppb estimate --help` sent readers to the README for the JSON's keys (the README has none; docs/memory.md
    states them) and that block left `iteration` out until session 34. Every top-level key a torchtitan FSDP2
    run prints (it has them all: `allocator_reserved` too) and every key of its `iteration` is in the block."""
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "docs/memory.md states its keys" in " ".join(capsys.readouterr().out.split())
    docs = (ROOT / "docs" / "memory.md").read_text()
    block = docs.split("`--json` prints\n`Estimate.to_json()`:", 1)[1].split("```", 2)[1]
    config = ROOT / "configs" / "llama3.1-8b-torchtitan.yaml"
    assert main(["estimate", str(config), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    missing = [key for key in [*printed, *printed["iteration"]] if f'"{key}"' not in block]
    assert missing == [], missing
