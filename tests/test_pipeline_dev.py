"""`dagster dev` on a fresh instance, as a new user starts it: the UI serves the asset graph, both
sensors tick, the run configs become partitions, and no run is launched; then a run config really
changes, and the automation rebuilds that partition, and only it.

dagster dev is started in a process group of its own and stopped by that group's id.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ppb_core import chain

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["llama3-8b", "qwen2.5-7b"]
GRAPH = """{
  assetNodes { assetKey { path } groupName isPartitioned dependencyKeys { path } }
  repositoriesOrError { ... on RepositoryConnection { nodes {
    location { name } jobs { name } schedules { name }
    sensors { name sensorState { status ticks(limit: 20) { status } } }
  } } }
}"""
RUNS = """{ runsOrError { ... on Runs { results { runId status tags { key value } assetSelection { path } } } } }"""
PARTITIONS = """{ assetNodeOrError(assetKey: {path: ["run_config"]}) { ... on AssetNode { partitionKeys } } }"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def reset_sigint() -> None:
    # A process started with SIGINT ignored makes Dagster ignore SIGTERM too.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def half_a_day_away() -> str:
    """A daily cron twelve hours from now (UTC), so no nightly tick falls inside the test."""
    later = datetime.now(UTC) + timedelta(hours=12)
    return f"{later.minute} {later.hour} * * *"


class Dev:
    def __init__(self, base: str) -> None:
        self.base = base

    def query(self, text: str) -> dict[str, Any]:
        body = json.dumps({"query": text}).encode()
        req = urllib.request.Request(f"{self.base}/graphql", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=20) as answer:
            return json.loads(answer.read())["data"]

    def until(self, what: str, probe: Callable[[], Any], seconds: float) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            try:
                found = probe()
            except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError, TypeError):
                found = None
            if found:
                return found
            assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f} s"
            time.sleep(1)

    def runs(self) -> list[dict[str, Any]]:
        return self.query(RUNS)["runsOrError"]["results"]

    def sensor_ticks(self) -> dict[str, list[str]]:
        (repository,) = self.query(GRAPH)["repositoriesOrError"]["nodes"]
        return {s["name"]: [t["status"] for t in s["sensorState"]["ticks"]] for s in repository["sensors"]}


@pytest.mark.slow
def test_a_fresh_dagster_dev_launches_no_run_until_a_config_really_changes(tmp_path: Path, sqlite_home) -> None:
    dagster = shutil.which("dagster") or pytest.skip("dagster is not installed")
    with sqlite_home() as home:
        launches_no_run_until_a_config_changes(dagster, tmp_path, home)


def launches_no_run_until_a_config_changes(dagster: str, tmp_path: Path, home: Path) -> None:
    configs = tmp_path / "configs"
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    shutil.copytree(ROOT / "configs" / "hf", configs / "hf")
    for key in KEYS:
        shutil.copy(ROOT / "configs" / f"{key}.yaml", configs)
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PPB_STORAGE_DIR": str(tmp_path / "storage"),
        "PPB_CONFIG_DIR": str(configs),
        "PPB_SENSOR_INTERVAL_S": "5",  # the sensors look every 5 s, not 30: the same ticks, sooner
        # the nightly rebuild of never-built partitions twelve hours away: at the default 02:00 UTC a run near it
        # saw qwen2.5-7b built by the nightly tick too (suite at 02:00, 2026-12-07)
        "PPB_NIGHTLY_CRON": half_a_day_away(),
        "PPB_NIGHTLY_TIMEZONE": "UTC",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    port = free_port()
    log = (tmp_path / "dev.log").open("wb")
    dev_process = subprocess.Popen(
        [dagster, "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=reset_sigint,
    )
    dev = Dev(f"http://127.0.0.1:{port}")
    try:
        nodes = dev.until("the asset graph", lambda: dev.query(GRAPH)["assetNodes"], 180)
        # Both sensors tick (the run config sensor registers the partitions) and nothing runs.
        dev.until("a tick of each sensor", lambda: all(dev.sensor_ticks().values()), 180)
        partitions = dev.until("the partitions", lambda: dev.query(PARTITIONS)["assetNodeOrError"]["partitionKeys"], 60)
        assert sorted(partitions) == KEYS
        dev.until("a second tick of each sensor", lambda: all(len(t) >= 2 for t in dev.sensor_ticks().values()), 120)
        assert dev.runs() == []
        # A run config really changes: its file is observed, and its partition's chain rebuilt.
        config = configs / "llama3-8b.yaml"
        config.write_text(config.read_text().replace("micro_batches: 32", "micro_batches: 16"))
        rebuild = dev.until(
            "the rebuild of llama3-8b",
            lambda: [
                run
                for run in dev.runs()
                if {"key": "dagster/partition", "value": "llama3-8b"} in run["tags"]
                and {"run_config"} <= {"/".join(a["path"]) for a in run["assetSelection"] or []}
                and run["status"] in ("SUCCESS", "FAILURE")
            ],
            240,
        )
        assert rebuild[0]["status"] == "SUCCESS", (tmp_path / "dev.log").read_text()[-3000:]
        partitions_run = {
            tag["value"] for run in dev.runs() for tag in run["tags"] if tag["key"] == "dagster/partition"
        }
        assert partitions_run == {"llama3-8b"}  # the other config did not change
    finally:
        os.killpg(dev_process.pid, signal.SIGTERM)  # the group we started, only it
        try:
            dev_process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(dev_process.pid, signal.SIGKILL)
            dev_process.wait(timeout=10)
        log.close()

    assets = {"/".join(node["assetKey"]["path"]): node for node in nodes}
    assert set(assets) == {"run_config_file", "strategy_search", *(step.name for step in chain.STAGES)}
    for step in chain.STAGES:
        node = assets[step.name]
        assert node["groupName"] == "ppb" and node["isPartitioned"]
        assert {"/".join(d["path"]) for d in node["dependencyKeys"]} == set(step.inputs or ["run_config_file"])
