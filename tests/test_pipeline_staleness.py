"""After a change to one core function, Dagster finds exactly the assets that depend on it stale.

A copy of the project materializes one partition into a fresh instance; then a function of the
copy's core (`withdraw`, in payload/postprocess.py) changes, and Dagster's own stale status, asked
through its public GraphQL API (`dagster-graphql`, what the UI asks), marks the stages whose code
runs it, and no other; rebuilt, those stages are fresh again and no other stage turns stale.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ppb_core import chain

ROOT = Path(__file__).resolve().parents[1]
KEY = "llama3-8b"
STAGES = [step.name for step in chain.STAGES]
BUILD = """
import sys
import dagster as dg
from pipelines.assets import ALL_ASSETS
from pipelines.definitions import defs
key, selection = sys.argv[1], sys.argv[2].split(",")
with dg.DagsterInstance.get() as instance:
    instance.add_dynamic_partitions("run_configs", [key])
    observe = defs.resolve_job_def("observe_run_config_files")
    assert observe.execute_in_process(instance=instance, partition_key=key).success
    built = dg.materialize(
        ALL_ASSETS, selection=selection, partition_key=key, instance=instance, resources=defs.resources
    )
    assert built.success
"""
QUERY = f'{{ assetNodes {{ assetKey {{ path }} staleStatus(partition: "{KEY}") }} }}'


def build(project: Path, env: dict[str, str], selection: list[str]) -> None:
    """Materialize *selection* of the partition with the copy's code, in the copy's instance."""
    command = [sys.executable, "-c", BUILD, KEY, ",".join(selection)]
    subprocess.run(command, cwd=project, env=env, check=True, timeout=600, capture_output=True)


def stale_status(project: Path, env: dict[str, str]) -> dict[str, str]:
    graphql = shutil.which("dagster-graphql") or pytest.skip("dagster-graphql is not installed")
    out = project.parent / "answer.json"
    subprocess.run(
        [graphql, "-m", "pipelines.definitions", "-a", "defs", "-t", QUERY, "-o", str(out)],
        cwd=project,
        env=env,
        capture_output=True,
        timeout=300,
        check=True,
    )
    data = json.loads(out.read_text())["data"]
    return {node["assetKey"]["path"][-1]: node["staleStatus"] for node in data["assetNodes"]}


@pytest.mark.slow
def test_a_changed_core_function_stales_exactly_the_assets_that_depend_on_it(tmp_path: Path, sqlite_home) -> None:
    with sqlite_home() as home:
        stales_exactly_the_dependent_assets(tmp_path, home)


def stales_exactly_the_dependent_assets(tmp_path: Path, home: Path) -> None:
    project, configs = tmp_path / "project", tmp_path / "configs"
    for package in ("ppb_core", "pipelines"):
        shutil.copytree(ROOT / package, project / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    shutil.copytree(ROOT / "configs" / "hf", configs / "hf")
    shutil.copy(ROOT / "configs" / f"{KEY}.yaml", configs)
    env = {
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "DAGSTER_HOME": str(home),
        "PPB_STORAGE_DIR": str(tmp_path / "storage"),
        "PPB_CONFIG_DIR": str(configs),
        "PYTHONPATH": str(project),
    }
    build(project, env, STAGES)
    # the strategy search's asset is partitioned by search specs, of which this project has none
    unbuilt = {"strategy_search": "MISSING"}
    assert stale_status(project, env) == {"run_config_file": "FRESH", **dict.fromkeys(STAGES, "FRESH"), **unbuilt}

    source = project / "ppb_core" / "payload" / "postprocess.py"
    text = source.read_text()
    anchor = '    bodies = [desc for desc in result if desc["type"] == BODY]\n    if not bodies or any('
    assert text.count(anchor) == 1
    source.write_text(
        text.replace(
            anchor,
            "    bodies = [desc for desc in result if desc['type'] == BODY]  # changed\n    if not bodies or any(",
        )
    )

    # postprocess.py runs in combine, withdraw and scale, and in the balancer's and the report's
    # stages, which take the scaled descriptions' time unit from it (`estimate.plan`): those five have
    # new code. Nothing upstream of them, nor the memory and time tables, nor the profiles.
    changed = ["combined_descriptions", "withdrawn_descriptions", "scaled_descriptions"]
    readers = ["pipeline_plan", "plan_report"]
    expected = {name: "STALE" if name in changed + readers else "FRESH" for name in STAGES}
    assert stale_status(project, env) == {"run_config_file": "FRESH", **expected, **unbuilt}
    # The three post-processing stages rebuilt with the new code are fresh again; the balancer and
    # the report stay stale (new code, and new data versions upstream), and nothing else turns stale.
    build(project, env, changed)
    expected = {name: "STALE" if name in readers else "FRESH" for name in STAGES}
    assert stale_status(project, env) == {"run_config_file": "FRESH", **expected, **unbuilt}
