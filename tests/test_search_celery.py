"""The strategy search through dagster-celery's executor (`PPB_EXECUTOR=celery`): a Celery worker started
with `python -m pipelines.celery_worker` on a filesystem broker runs the shards, and the ranking is the one
the search gives without Dagster. Skipped where dagster-celery is not installed (the `cluster` extra)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

pytest.importorskip("dagster_celery")

from pipelines.assets.search import SEARCH_PARTITIONS
from pipelines.definitions import search_job
from ppb_core.search.enumerate import enumerate_strategies
from ppb_core.search.rank import search_points
from ppb_core.search.spec import load_search_spec

DATA = Path(__file__).parent / "data" / "search"
ROOT = Path(__file__).parent.parent
WORKER_START_S = 120.0


@pytest.fixture()
def celery_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    found = {name: tmp_path / name for name in ("searches", "configs", "storage", "broker")}
    for folder in found.values():
        folder.mkdir()
    raw = yaml.safe_load((DATA / "tiny-dense.yaml").read_text())
    raw["limits"].update(tp=[1, 2], pp=[1, 2], micro_batch_size=[1])
    raw["search"]["top"] = 3
    (found["searches"] / "tiny.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("PPB_SEARCH_DIR", str(found["searches"]))
    monkeypatch.setenv("PPB_CONFIG_DIR", str(found["configs"]))
    monkeypatch.setenv("PPB_STORAGE_DIR", str(found["storage"]))
    monkeypatch.setenv("PPB_EXECUTOR", "celery")
    monkeypatch.setenv("PPB_CELERY_BROKER", f"filesystem://{found['broker']}")
    monkeypatch.delenv("PPB_CELERY_BACKEND", raising=False)
    return found


@pytest.fixture()
def workers(celery_folders: dict[str, Path], tmp_path: Path) -> Iterator[list[subprocess.Popen]]:
    """Two Celery workers (one step each at a time), as deploy/README.md starts them, stopped after the test."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    logs = [tmp_path / f"worker{index}.log" for index in range(2)]
    processes = []
    try:
        for index, log in enumerate(logs):
            with log.open("wb") as out:
                command = [sys.executable, "-m", "pipelines.celery_worker", "--hostname", f"ppb-test{index}@%h"]
                processes.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path))
        deadline = time.monotonic() + WORKER_START_S
        for process, log in zip(processes, logs, strict=True):
            while b"ready." not in log.read_bytes():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.5)
        yield processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_a_search_runs_through_the_celery_executor(celery_folders, workers, sqlite_home) -> None:
    with sqlite_home() as home, dg.instance_for_test(temp_dir=str(home)) as instance:
        instance.add_dynamic_partitions(SEARCH_PARTITIONS, ["tiny"])
        job = dg.reconstructable(search_job)  # the worker imports it afresh, with the PPB_* variables
        assert job.get_definition().executor_def.name == "celery"
        result = dg.execute_job(
            job,
            instance=instance,
            tags={"dagster/partition": "tiny"},
            run_config={
                "ops": {
                    "strategy_search": {
                        "ops": {
                            "search_shards": {"config": {"shards": 2, "chain_top": 2}},
                            "rank_shards": {"config": {"shards": 2, "chain_top": 2}},
                        }
                    }
                }
            },
        )
        assert result.success
        # every step was handed to the Celery worker: dagster-celery reports each as it starts there
        handed = [
            event.step_key
            for event in result.all_events
            if event.event_type_value == "ENGINE_EVENT" and "in celery worker" in (event.message or "")
        ]
        assert sorted(handed) == [
            "strategy_search.rank_shards",
            "strategy_search.search_shard[shard_0]",
            "strategy_search.search_shard[shard_1]",
            "strategy_search.search_shards",
        ]
        # in the workers' processes, not this one
        pids = {event.pid for event in result.all_events if event.event_type_value == "STEP_START"}
        assert pids <= {process.pid for process in workers}

    spec = load_search_spec(celery_folders["searches"] / "tiny.yaml")
    expected = search_points(spec, list(enumerate_strategies(spec)), workers=1)
    table = pd.read_parquet(celery_folders["storage"] / "strategy_search" / "tiny.parquet")
    assert list(table["name"]) == [entry.strategy.label(spec) for entry in expected.ranked]
    assert list(table["iteration_s"]) == [entry.seconds for entry in expected.ranked]
    assert (celery_folders["configs"] / "tiny-top01.yaml").is_file()
