"""The Dagster webserver on 127.0.0.1, loading workspace.yaml, answers a GraphQL query for the asset
graph with every asset; it is started in a process group of its own and stopped by that group's id."""

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
from pathlib import Path

import pytest

from ppb_core import chain

ROOT = Path(__file__).resolve().parents[1]
QUERY = """{
  assetNodes { assetKey { path } groupName isPartitioned dependencyKeys { path } }
  repositoriesOrError { ... on RepositoryConnection { nodes {
    location { name } jobs { name } sensors { name } schedules { name cronSchedule }
  } } }
}"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request(url: str, body: bytes | None = None) -> bytes:
    headers = {"Content-Type": "application/json"} if body else {}
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=10) as answer:
        return answer.read()


def reset_sigint() -> None:
    # A process started with SIGINT ignored makes Dagster ignore SIGTERM too (dagster.md G8).
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_webserver_serves_the_asset_graph(tmp_path: Path) -> None:
    webserver = shutil.which("dagster-webserver") or pytest.skip("dagster-webserver is not installed")
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PPB_STORAGE_DIR": str(tmp_path / "storage"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    port = free_port()
    log = (tmp_path / "webserver.log").open("wb")
    server = subprocess.Popen(
        [webserver, "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=reset_sigint,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "webserver.log").read_text()[-2000:]
            try:
                info = json.loads(request(f"{base}/server_info"))
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert time.monotonic() < deadline, "the webserver did not answer within 120 s"
                time.sleep(0.5)
        assert info["dagster_version"]
        # The code location loads in the background; ask until its assets are there.
        while True:
            answer = json.loads(request(f"{base}/graphql", json.dumps({"query": QUERY}).encode()))
            nodes = answer["data"]["assetNodes"]
            if nodes or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the group we started, only it
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()

    assets = {"/".join(node["assetKey"]["path"]): node for node in nodes}
    stages = [step.name for step in chain.STAGES]
    assert set(assets) == {"run_config_file", *stages}
    for step in chain.STAGES:
        node = assets[step.name]
        assert node["groupName"] == "ppb" and node["isPartitioned"]
        assert {"/".join(d["path"]) for d in node["dependencyKeys"]} == set(step.inputs or ["run_config_file"])
    (repository,) = answer["data"]["repositoriesOrError"]["nodes"]
    assert repository["location"]["name"] == "ppb"
    assert {"ppb_chain", "register_run_configs"} <= {job["name"] for job in repository["jobs"]}
    assert repository["sensors"] == [{"name": "run_config_sensor"}]
    assert repository["schedules"] == [{"name": "nightly_reestimate", "cronSchedule": "0 2 * * *"}]
