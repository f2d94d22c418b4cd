"""The run config sensor and the registering job, on a real instance and real sensor contexts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from pipelines.assets import ALL_ASSETS, run_config
from pipelines.checks import ALL_CHECKS
from pipelines.definitions import defs, resources
from pipelines.partitions import PARTITIONS_NAME, partition_changes
from pipelines.resources import RunConfigs
from pipelines.sensors import run_config_sensor
from ppb_core.config.run import config_hash

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


def test_partition_changes_compares_files_partitions_and_hashes() -> None:
    changes = partition_changes({"a": "1", "b": "2", "c": "3"}, ["a", "b", "gone"], {"a": "1", "b": "0"})
    assert changes.added == ("c",)
    assert changes.removed == ("gone",)
    assert changes.changed == ("b", "c")


@pytest.fixture
def setup(tmp_path: Path, sqlite_home):
    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", configs)
    with sqlite_home() as home, dg.instance_for_test(temp_dir=str(home)) as instance:
        yield instance, configs, tmp_path / "storage"


def tick(instance: dg.DagsterInstance, configs: Path, cursor: str | None = None) -> dg.SensorResult:
    """One evaluation, then what the daemon does with its result: partitions and observations."""
    # As a context manager, so its resources close now (see test_pipeline_schedules.evaluate).
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"run_configs": RunConfigs(config_dir=str(configs))},
        repository_def=defs.get_repository_def(),
    ) as context:
        result = run_config_sensor(context)
    for request in result.dynamic_partitions_requests:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    return result


def requested(result: dg.SensorResult) -> list[str]:
    return sorted(request.partition_key for request in result.run_requests)


def test_first_tick_adds_a_partition_and_requests_a_run_per_config(setup) -> None:
    instance, configs, _ = setup
    result = tick(instance, configs)
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == SHIPPED
    assert requested(result) == SHIPPED
    assert all(r.tags["ppb/run_config"] == r.partition_key for r in result.run_requests)
    assert {r.tags["ppb/trigger"] for r in result.run_requests} == {"new run config"}
    hashes = {key: config_hash(configs / f"{key}.yaml") for key in SHIPPED}
    assert json.loads(result.cursor) == hashes
    observed = {event.partition: event.tags["dagster/data_version"] for event in result.asset_events}
    assert observed == hashes


def test_nothing_changed_nothing_requested(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    second = tick(instance, configs, first.cursor)
    assert second.run_requests == [] and second.dynamic_partitions_requests == []
    assert second.asset_events == []


def test_a_new_file_adds_its_partition_and_requests_its_run(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    text = (configs / "llama3-8b.yaml").read_text().replace("micro_batches: 32", "micro_batches: 64")
    (configs / "llama3-8b-m64.yaml").write_text(text)
    result = tick(instance, configs, first.cursor)
    assert "llama3-8b-m64" in instance.get_dynamic_partitions(PARTITIONS_NAME)
    assert requested(result) == ["llama3-8b-m64"]


def test_a_file_gone_removes_its_partition_without_a_run(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    (configs / "mixtral-8x7b.yaml").unlink()
    result = tick(instance, configs, first.cursor)
    assert result.run_requests == []
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == [k for k in SHIPPED if k != "mixtral-8x7b"]
    assert "mixtral-8x7b" not in json.loads(result.cursor)


def test_a_changed_hash_requests_one_run(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    config = configs / "qwen2.5-7b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 16", "micro_batches: 8"))
    result = tick(instance, configs, first.cursor)
    assert requested(result) == ["qwen2.5-7b"]
    assert result.run_requests[0].tags["ppb/trigger"] == "run config changed"
    assert result.dynamic_partitions_requests == []
    assert [e.partition for e in result.asset_events] == ["qwen2.5-7b"]


def test_a_change_to_a_file_the_config_names_counts_too(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    hf = configs / "hf" / "mixtral-8x7b.json"
    data = json.loads(hf.read_text())
    data["max_position_embeddings"] += 1
    hf.write_text(json.dumps(data))
    assert requested(tick(instance, configs, first.cursor)) == ["mixtral-8x7b"]


def test_no_run_for_a_config_already_built_from_that_hash(setup) -> None:
    instance, configs, storage = setup
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["llama3-8b"])
    built = dg.materialize(
        [*ALL_ASSETS, *ALL_CHECKS],
        selection=[run_config],
        partition_key="llama3-8b",
        instance=instance,
        resources=resources(str(storage), str(configs)),
    )
    assert built.success
    result = tick(instance, configs)  # a fresh cursor, as after a reset
    assert requested(result) == [key for key in SHIPPED if key != "llama3-8b"]


def test_register_job_brings_partitions_in_line_with_the_folder(setup) -> None:
    instance, configs, _ = setup
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["old-config"])
    result = defs.resolve_job_def("register_run_configs").execute_in_process(
        instance=instance, resources={"run_configs": RunConfigs(config_dir=str(configs))}
    )
    assert result.success
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == SHIPPED
    observed = instance.fetch_observations(dg.AssetKey("run_config_file"), limit=10).records
    assert sorted(r.asset_observation.partition for r in observed) == SHIPPED
