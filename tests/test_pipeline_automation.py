"""Declarative Automation, evaluated as the automation sensor evaluates it, on a real instance.

Starting is no change: nothing is requested. A changed file, once observed, has its partition's
chain requested, and nothing else. At the nightly tick, the partitions never built are requested
whole, and of the built ones only the stages whose code changed, with what follows them.
"""

from __future__ import annotations

import datetime
import functools
import shutil
from pathlib import Path
from unittest import mock

import dagster as dg
import pytest

from pipelines.assets import ALL_ASSETS
from pipelines.automation import NIGHTLY_CRON, NIGHTLY_TIMEZONE
from pipelines.definitions import definitions
from pipelines.partitions import PARTITIONS_NAME
from ppb_core import chain

ROOT = Path(__file__).resolve().parents[1]
STAGES = [step.name for step in chain.STAGES]
KEYS = ["llama3-8b", "qwen2.5-7b"]


def at(day: int, hour: int, minute: int = 0) -> datetime.datetime:
    return datetime.datetime(2031, 3, day, hour, minute, tzinfo=datetime.UTC)


class Automation:
    """The automation sensor's evaluations, one tick at a time, on one instance and clock."""

    def __init__(self, instance: dg.DagsterInstance, defs: dg.Definitions) -> None:
        self.instance, self.defs, self.cursor = instance, defs, None

    def tick(self, when: datetime.datetime, defs: dg.Definitions | None = None) -> dict[str, list[str]]:
        # The sensor reads the partition keys once a tick (its instance queryer caches them); the
        # tester asks the instance again for every condition node it writes to the cursor, a
        # thousand SQLite queries a tick. The keys cannot change within a tick: read them once.
        with mock.patch.object(
            self.instance, "get_dynamic_partitions", functools.cache(self.instance.get_dynamic_partitions)
        ):
            result = dg.evaluate_automation_conditions(
                defs=defs or self.defs, instance=self.instance, cursor=self.cursor, evaluation_time=when
            )
        self.cursor = result.cursor
        return {
            r.key.path[-1]: sorted(r.true_subset.get_internal_value().get_partition_keys())
            for r in result.results
            if r.true_subset.size
        }


@pytest.fixture
def setup(tmp_path: Path, sqlite_home):
    configs = tmp_path / "configs"
    configs.mkdir()
    shutil.copytree(ROOT / "configs" / "hf", configs / "hf")
    for key in KEYS:
        shutil.copy(ROOT / "configs" / f"{key}.yaml", configs)
    defs = definitions(str(tmp_path / "storage"), str(configs))
    with sqlite_home() as home, dg.instance_for_test(temp_dir=str(home)) as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, KEYS)
        yield instance, configs, defs


def test_the_nightly_tick_is_at_two_utc_by_default() -> None:
    assert (NIGHTLY_CRON, NIGHTLY_TIMEZONE) == ("0 2 * * *", "UTC")


def test_a_fresh_instance_requests_nothing_until_a_file_changes(setup) -> None:
    instance, configs, defs = setup
    automation = Automation(instance, defs)
    assert automation.tick(at(1, 10)) == {}
    assert automation.tick(at(1, 10, 1)) == {}
    # A file changes; the sensor has it observed (a run of the observation job for its partition).
    config = configs / "llama3-8b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 32", "micro_batches: 16"))
    observe = defs.resolve_job_def("observe_run_config_files")
    assert observe.execute_in_process(instance=instance, partition_key="llama3-8b").success
    (observation,) = instance.fetch_observations(dg.AssetKey("run_config_file"), limit=5).records
    assert observation.partition_key == "llama3-8b" and observation.asset_observation.data_version
    # The whole chain of that partition, in one tick, and nothing of the other.
    assert automation.tick(at(1, 10, 2)) == {name: ["llama3-8b"] for name in STAGES}
    dg.materialize(ALL_ASSETS, selection=STAGES, partition_key="llama3-8b", instance=instance, resources=defs.resources)
    assert automation.tick(at(1, 10, 3)) == {}
    # Observed again, unchanged: nothing.
    assert observe.execute_in_process(instance=instance, partition_key="llama3-8b").success
    assert automation.tick(at(1, 10, 4)) == {}


def test_at_night_the_missing_partitions_and_the_stages_with_new_code(setup) -> None:
    instance, _, defs = setup
    dg.materialize(ALL_ASSETS, selection=STAGES, partition_key="llama3-8b", instance=instance, resources=defs.resources)
    automation = Automation(instance, defs)
    assert automation.tick(at(1, 12)) == {}
    # New code for the balancer: the code location reloads with pipeline_plan's new version.
    edited = [
        asset.map_asset_specs(lambda spec: spec.replace_attributes(code_version="edited"))
        if asset.key.path[-1] == "pipeline_plan"
        else asset
        for asset in ALL_ASSETS
    ]
    new_code = dg.Definitions(assets=edited, jobs=defs.jobs, sensors=defs.sensors, resources=defs.resources)
    assert automation.tick(at(1, 13), new_code) == {}  # not before the night
    assert automation.tick(at(2, 1, 59), new_code) == {}
    night = automation.tick(at(2, 2, 1), new_code)
    # qwen2.5-7b was never built: all of it. llama3-8b: the balancer's stage and the report after it.
    assert night == {name: sorted({"qwen2.5-7b", *(["llama3-8b"] if name in STAGES[-2:] else [])}) for name in STAGES}
    assert automation.tick(at(2, 2, 5), new_code) == {}  # requested once
