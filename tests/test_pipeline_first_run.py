"""The README's quick start as a new user runs it: `python -m pipelines llama3-8b` builds the run
config through Dagster and ends with a short summary, no log noise; without DAGSTER_HOME, or with
a flag it does not know, one line."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest

from pipelines.materialize import last_line, main, partition_of
from ppb_core.cli.main import main as ppb_main

ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path: Path, *args: str, home: bool = True, configs: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "PPB_CONFIG_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["PPB_STORAGE_DIR"] = str(tmp_path / "storage")
    if home:
        env["DAGSTER_HOME"] = str(tmp_path / "home")  # created if missing
    if configs is not None:
        env["PPB_CONFIG_DIR"] = str(configs)
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


def test_without_dagster_home_one_line_says_what_to_do(tmp_path: Path) -> None:
    done = run(tmp_path, "llama3-8b", home=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "python -m pipelines: error: DAGSTER_HOME is not set: Dagster keeps its runs there "
        "(export DAGSTER_HOME=$PWD/dagster_home)"
    ]
    assert not (tmp_path / "storage").exists()


def test_a_bad_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["llama3-8b", "--time-limt", "5"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m pipelines: error: unrecognized arguments: --time-limt 5 (see python -m pipelines --help)"
    ]


@pytest.mark.slow
def test_the_quick_start_ends_with_a_summary_and_nothing_else(tmp_path: Path) -> None:
    done = run(tmp_path, "llama3-8b")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0].startswith("llama3-8b: 11 tables in ") and "(Dagster run " in lines[0]
    report = pd.read_parquet(tmp_path / "storage" / "plan_report" / "llama3-8b.parquet")
    # One line per stage, as the memory model evaluates the plan (GiB of 2**30 bytes: MB / 1024).
    for stage, line in zip(report.itertuples(), lines[1:5], strict=True):
        used = stage.peak_mb / 1024  # the stage's largest moment
        assert line == f"  stage {stage.stage}: fits, {used:,.1f} of {stage.device_mb / 1024:,.1f} GiB"
    assert lines[5].startswith("  plan: ") and " an iteration, " in lines[5]
    assert "faster than the best uniform split" in lines[5]
    assert lines[6] == f"  report: {tmp_path / 'storage' / 'plan_report' / 'llama3-8b.md'}"
    assert len(lines) == 7
    assert (tmp_path / "home" / "history").is_dir()  # the run is in the instance, for `dagster dev` to show
    # A DAGSTER_HOME that did not exist is made with the project's instance settings.
    assert (tmp_path / "home" / "dagster.yaml").read_bytes() == (ROOT / "dagster_home" / "dagster.yaml").read_bytes()


def test_a_bad_run_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "bad.yaml").write_text("models: 5\n")
    done = run(tmp_path, "bad", configs=configs)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("python -m pipelines: error: bad: run_config: ") and "models" in line


@pytest.mark.slow
def test_on_a_terminal_the_solve_shows_its_steps(tmp_path: Path) -> None:
    """Long work shows progress: on a terminal the balancer's steps come before the summary (a
    DeepSeek-V3 run was silent for minutes); -q, or output that is not a terminal, keeps the summary alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "PPB_CONFIG_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.update(PPB_STORAGE_DIR=str(tmp_path / "storage"), DAGSTER_HOME=str(tmp_path / "home"))
    master, terminal = pty.openpty()
    heard: list[bytes] = []

    def listen() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal's last writer closed it
                return
            if not chunk:
                return
            heard.append(chunk)

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    done = subprocess.run(
        [sys.executable, "-m", "pipelines", "llama3-8b"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=terminal,
        text=True,
        timeout=600,
    )
    os.close(terminal)
    reader.join(timeout=30)
    os.close(master)
    steps = b"".join(heard).decode(errors="replace")
    assert done.returncode == 0
    assert "pipeline_plan - [" in steps and "done: incumbent" in steps, steps[-2000:]
    assert done.stdout.startswith("llama3-8b: 11 tables in ")


def test_an_unknown_run_config_is_one_line_and_makes_no_instance(tmp_path: Path) -> None:
    """Found before DAGSTER_HOME is made: nothing written."""
    configs = tmp_path / "configs"
    configs.mkdir()
    done = run(tmp_path, "llama3-9b", configs=configs)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"python -m pipelines: error: {configs / 'llama3-9b.yaml'}: no such run config: give a file stem"
    )
    assert not (tmp_path / "home").exists() and not (tmp_path / "storage").exists()


@pytest.mark.parametrize(
    ("storage", "said"),
    [
        ("afile", "is a file, not an output folder"),
        ("afile/tables", "afile is a file, not a folder"),
        ("nope://bucket/tables", "no filesystem for nope://"),
    ],
)
def test_a_storage_that_cannot_be_used_is_one_line_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], storage: str, said: str
) -> None:
    """$PPB_STORAGE_DIR a file (or under one) failed the run's first stage with an OSError (exit 1, its
    traceback's lines); a URL of no filesystem, with "the run failed"."""
    (tmp_path / "afile").write_text("")
    setting = storage if "://" in storage else str(tmp_path / storage)
    monkeypatch.setenv("PPB_STORAGE_DIR", setting)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PPB_CONFIG_DIR", raising=False)
    assert main(["llama3-8b"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"python -m pipelines: error: $PPB_STORAGE_DIR={setting!r}: ") and said in line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["afile"]  # no instance, no tables


def test_a_run_config_outside_the_folder_says_how_to_build_it(tmp_path: Path) -> None:
    """A user's own run config elsewhere (`python -m pipelines ~/runs/l70b.yaml`) was "no such run config" with the
    shipped names listed; it exists, so the line says the folder it must be in and PPB_CONFIG_DIR."""
    configs = tmp_path / "configs"
    configs.mkdir()
    mine = tmp_path / "elsewhere" / "mine.yaml"
    mine.parent.mkdir()
    mine.write_text("models: []\n")
    done = run(tmp_path, str(mine), configs=configs)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"python -m pipelines: error: {mine}: not under {configs}, the run configs' folder: copy it there, or set "
        "PPB_CONFIG_DIR to its folder"
    ]
    assert not (tmp_path / "home").exists() and not (tmp_path / "storage").exists()


def test_a_run_config_named_by_its_path_is_its_partition(tmp_path: Path) -> None:
    """`python -m pipelines configs/x.yaml`, as `ppb` takes it, names partition x (it was looked up
    as configs/configs/x.yaml.yaml); a yaml outside the folder is no partition."""
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "x.yaml").write_text("")
    found = {"x": configs / "x.yaml"}
    assert partition_of(str(configs / "x.yaml"), found) == "x"
    assert partition_of("x", found) == "x"
    assert partition_of(str(tmp_path / "x.yaml"), found) == str(tmp_path / "x.yaml")


@pytest.mark.parametrize("limit", ["0", "-5", "nan"])
def test_a_time_limit_of_no_time_is_one_line_before_any_run(capsys: pytest.CaptureFixture[str], limit: str) -> None:
    """`-t 0` started a Dagster run that failed in pipeline_plan with pydantic's docs link as its line."""
    assert main(["llama3-8b", "-t", limit]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m pipelines: error: --time-limit: must be a positive number of seconds, got ")


def test_the_failure_line_is_what_the_error_says_not_pydantics_link() -> None:
    message = (
        "1 validation error for PlanConfig\ntime_limit_s\n  Input should be greater than 0 [type=greater_than]\n"
        "    For further information visit https://errors.pydantic.dev/2.13/v/greater_than\n"
    )
    assert last_line(message) == "Input should be greater than 0 [type=greater_than]"
    assert last_line("\n \n") == "failed"


def test_a_run_config_no_plan_fits_exits_2_as_ppb_does(tmp_path: Path) -> None:
    """No plan fits the device: the run config's fault, exit 2 with one line, as `ppb balance` and
    `ppb plan` say it (it exited 1, as for a failure of the code)."""
    configs = tmp_path / "configs"
    configs.mkdir()
    text = (ROOT / "configs" / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {ROOT / 'configs' / 'hf' / 'llama3-8b.json'}")
    # 80 GB less 76 GB reserved: too little for any plan of Llama-3-8B on 4 stages
    (configs / "small.yaml").write_text(text.replace("reserved_mb: 4000", "reserved_mb: 76000"))
    done = run(tmp_path, "small", "-q", configs=configs)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("python -m pipelines: error: small: pipeline_plan: ") and "least-memory plan needs" in line
    assert ppb_main(["balance", str(configs / "small.yaml"), "-q"]) == 2


def test_ppb_plan_says_no_plan_fits_as_ppb_balance_says_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """README: `memory: no plan fits in 5,559 MB per device: ...` from `ppb balance` and `ppb plan` alike;
    `ppb plan` said it under `plan: no plan to report: ...`. 81,559 MB less 76,000 reserved: 5,559 MB."""
    text = (ROOT / "configs" / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {ROOT / 'configs' / 'hf' / 'llama3-8b.json'}")
    small = tmp_path / "small.yaml"
    small.write_text(text.replace("reserved_mb: 4000", "reserved_mb: 76000"))
    said = "memory: no plan fits in 5,559 MB per device: the least-memory plan needs 10,135 MB"
    assert ppb_main(["balance", str(small), "-q"]) == 2
    assert f"{small}: {said}" in capsys.readouterr().err
    assert ppb_main(["plan", str(small), "-o", str(tmp_path / "out"), "-q"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{small}: {said}" in line and not (tmp_path / "out").exists()
