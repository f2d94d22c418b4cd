"""The nightly schedule: one run per stale partition, none for fresh ones, on a real instance."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from pipelines.assets import ALL_ASSETS, STAGE_ASSETS, run_config
from pipelines.checks import ALL_CHECKS
from pipelines.definitions import defs, resources
from pipelines.freshness import Staleness
from pipelines.partitions import PARTITIONS_NAME
from pipelines.resources import RunConfigs
from pipelines.schedules import NIGHTLY_CRON, nightly_reestimate
from ppb_core import chain
from ppb_core.config.run import config_hash

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["llama3-8b"]  # built in the base instance; tests register others to leave them unbuilt
NIGHT = datetime(2026, 12, 3, 2, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, sqlite_home) -> Path:
    """One partition registered and built: an instance folder each test copies."""
    root = tmp_path_factory.mktemp("schedule-base")
    shutil.copytree(ROOT / "configs", root / "configs")
    with sqlite_home() as home, dg.instance_for_test(temp_dir=str(home)) as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, KEYS)
        for key in KEYS:
            build(instance, root / "configs", root / "storage", key)
        instance.dispose()
        shutil.copytree(home, root / "home")
    return root


@pytest.fixture
def setup(base: Path, tmp_path: Path, sqlite_home):
    """A copy of the base instance (its SQLite files), configs and tables, for one test to change."""
    for folder in ("configs", "storage"):
        shutil.copytree(base / folder, tmp_path / folder)
    with sqlite_home() as home:
        shutil.copytree(base / "home", home, dirs_exist_ok=True)
        with dg.instance_for_test(temp_dir=str(home)) as instance:
            yield instance, tmp_path / "configs", tmp_path / "storage"


def build(instance: dg.DagsterInstance, configs: Path, storage: Path, key: str, selection=None) -> None:
    result = dg.materialize(
        [*ALL_ASSETS, *ALL_CHECKS],
        selection=selection or STAGE_ASSETS,
        partition_key=key,
        instance=instance,
        resources=resources(str(storage), str(configs)),
    )
    assert result.success


def evaluate(instance: dg.DagsterInstance, configs: Path, repository_def=None) -> list[dg.RunRequest] | dg.SkipReason:
    # As a context manager: its resources and logger close now, not whenever garbage collection
    # gets to them (late closing resets Dagster's context variables to a dead instance's storage).
    with dg.build_schedule_context(
        instance=instance,
        scheduled_execution_time=NIGHT,
        resources={"run_configs": RunConfigs(config_dir=str(configs))},
        repository_def=repository_def or defs.get_repository_def(),
    ) as context:
        return nightly_reestimate(context)


def test_runs_nightly_at_two_by_default() -> None:
    assert NIGHTLY_CRON == "0 2 * * *"
    assert nightly_reestimate.cron_schedule == "0 2 * * *"
    assert nightly_reestimate.execution_timezone == "UTC"
    assert nightly_reestimate.job_name == "ppb_chain"


def test_one_request_for_the_partition_never_built_none_for_the_fresh_ones(setup) -> None:
    instance, configs, _ = setup
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["mixtral-8x7b"])
    requests = evaluate(instance, configs)
    assert [r.partition_key for r in requests] == ["mixtral-8x7b"]
    (request,) = requests
    assert request.tags["ppb/run_config"] == "mixtral-8x7b" and request.tags["ppb/trigger"] == "nightly"
    assert request.tags["ppb/stale"] == "run_config never materialized"
    assert request.run_key == "nightly:2026-12-03:mixtral-8x7b"


def test_nothing_requested_when_every_partition_is_fresh(setup) -> None:
    instance, configs, _ = setup
    skipped = evaluate(instance, configs)
    assert isinstance(skipped, dg.SkipReason)


def test_a_config_edited_since_its_build_is_requested(setup) -> None:
    instance, configs, _ = setup
    config = configs / "llama3-8b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 32", "micro_batches: 48"))
    (request,) = evaluate(instance, configs)
    assert request.partition_key == "llama3-8b"
    assert request.tags["ppb/stale"] == "run config file changed since run_config read it"


def test_a_stage_rerun_alone_makes_its_downstream_stale(setup) -> None:
    instance, configs, storage = setup
    config = configs / "llama3-8b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 32", "micro_batches: 16"))
    build(instance, configs, storage, "llama3-8b", selection=[run_config])  # a new run_config table
    staleness = Staleness(instance, defs.resolve_asset_graph())
    reasons = staleness.reasons("llama3-8b", config_hash(config))
    assert reasons == [f"{name} has a new dependency data version (run_config)" for name in chain_downstream()]
    assert [r.partition_key for r in evaluate(instance, configs)] == ["llama3-8b"]


def chain_downstream() -> list[str]:
    return [step.name for step in chain.STAGES if "run_config" in step.inputs]


def test_a_new_code_version_makes_a_built_partition_stale(setup) -> None:
    instance, configs, _ = setup
    last = STAGE_ASSETS[-1]
    changed = last.map_asset_specs(lambda spec: spec.replace_attributes(code_version="edited"))
    assets = [a for a in ALL_ASSETS if a is not last] + [changed]
    repository = dg.Definitions(
        assets=assets, asset_checks=ALL_CHECKS, jobs=defs.jobs, schedules=[nightly_reestimate], resources=resources()
    ).get_repository_def()
    requests = evaluate(instance, configs, repository)
    assert [r.partition_key for r in requests] == KEYS
    name = chain.STAGES[-1].name
    assert all(r.tags["ppb/stale"] == f"{name} has a new code version" for r in requests)
