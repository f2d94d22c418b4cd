"""The run config sensor and the registering job, on a real instance and real sensor contexts.

The sensor keeps one partition per file and, when a file's hash changes, requests an observation
of that partition; its first tick records the hashes and requests nothing. A file it cannot read
is one partition like any other, never a failed tick.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from pipelines.definitions import definitions
from pipelines.partitions import PARTITIONS_NAME, partition_changes
from pipelines.resources import RunConfigs, file_version
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
    """One evaluation, then what the daemon does with its partition requests."""
    # As a context manager, so its resources close now, not whenever garbage collection runs.
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        resources={"run_configs": RunConfigs(config_dir=str(configs))},
        definitions=definitions(config_dir=str(configs)),
    ) as context:
        result = run_config_sensor(context)
    for request in result.dynamic_partitions_requests:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return result


def requested(result: dg.SensorResult) -> list[str]:
    return sorted(request.partition_key for request in result.run_requests)


def test_first_tick_adds_a_partition_per_config_and_requests_nothing(setup) -> None:
    instance, configs, _ = setup
    result = tick(instance, configs)
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == SHIPPED
    assert result.run_requests == []  # starting Dagster is no change
    assert json.loads(result.cursor) == {key: config_hash(configs / f"{key}.yaml") for key in SHIPPED}


def test_nothing_changed_nothing_requested(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    second = tick(instance, configs, first.cursor)
    assert second.run_requests == [] and second.dynamic_partitions_requests == []


def test_a_changed_file_requests_its_observation(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    config = configs / "qwen2.5-7b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 16", "micro_batches: 8"))
    result = tick(instance, configs, first.cursor)
    assert requested(result) == ["qwen2.5-7b"]
    (request,) = result.run_requests
    assert run_config_sensor.job_name == "observe_run_config_files"  # its one job
    assert request.tags == {"ppb/run_config": "qwen2.5-7b", "ppb/trigger": "file changed"}
    assert result.dynamic_partitions_requests == []


def test_a_new_file_adds_its_partition_and_is_observed(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    text = (configs / "llama3-8b.yaml").read_text().replace("micro_batches: 32", "micro_batches: 64")
    (configs / "llama3-8b-m64.yaml").write_text(text)
    result = tick(instance, configs, first.cursor)
    assert "llama3-8b-m64" in instance.get_dynamic_partitions(PARTITIONS_NAME)
    assert requested(result) == ["llama3-8b-m64"]
    assert result.run_requests[0].tags["ppb/trigger"] == "new file"


def test_a_file_gone_removes_its_partition_without_a_run(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    (configs / "mixtral-8x7b.yaml").unlink()
    result = tick(instance, configs, first.cursor)
    assert result.run_requests == []
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == [k for k in SHIPPED if k != "mixtral-8x7b"]
    assert "mixtral-8x7b" not in json.loads(result.cursor)


def test_a_change_to_a_file_the_config_names_counts_too(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    hf = configs / "hf" / "mixtral-8x7b.json"
    data = json.loads(hf.read_text())
    data["max_position_embeddings"] += 1
    hf.write_text(json.dumps(data))
    assert requested(tick(instance, configs, first.cursor)) == ["mixtral-8x7b"]


BAD_FILES = {
    "empty-models": b"models:\nparallel: {pp: 2}\n",
    "models-five": b"models: 5\n",
    "not-utf8": b"models:\n  - name: \xff\xfe llm\n",
    "not-yaml": b"models: [\n",
}


def test_bad_files_are_partitions_like_any_other_and_never_break_a_tick(setup) -> None:
    instance, configs, _ = setup
    first = tick(instance, configs)
    for name, data in BAD_FILES.items():
        (configs / f"{name}.yaml").write_bytes(data)
    result = tick(instance, configs, first.cursor)
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == sorted([*SHIPPED, *BAD_FILES])
    assert requested(result) == sorted(BAD_FILES)
    (configs / "not-utf8.yaml").write_bytes(BAD_FILES["not-utf8"] + b"# \xff\n")
    assert requested(tick(instance, configs, result.cursor)) == ["not-utf8"]


def test_a_file_that_cannot_be_read_is_versioned_by_its_problem(tmp_path: Path) -> None:
    folder = tmp_path / "folder.yaml"
    folder.mkdir()  # a folder where a file should be: config_hash refuses it
    assert file_version(folder).startswith("unreadable-")


def test_register_job_brings_partitions_in_line_with_the_folder(setup) -> None:
    instance, configs, _ = setup
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["old-config"])
    result = (
        definitions(config_dir=str(configs))
        .resolve_job_def("register_run_configs")
        .execute_in_process(instance=instance, resources={"run_configs": RunConfigs(config_dir=str(configs))})
    )
    assert result.success
    assert sorted(instance.get_dynamic_partitions(PARTITIONS_NAME)) == SHIPPED
