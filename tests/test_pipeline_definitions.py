"""The code location loads; every chain stage is an asset described, grouped, versioned, columned and
automated by the chain; settings are Dagster environment variables; folders resolve against the
project; the IO manager works on local and fsspec storage."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml
from upath import UPath

from pipelines.assets import STAGE_ASSETS
from pipelines.assets.plan import SOLVER_POOL
from pipelines.definitions import defs, executor, resources
from pipelines.executors import celery_app_args, search_executor
from pipelines.io_managers import PandasParquetIOManager, replace_file
from pipelines.partitions import PARTITIONS_NAME
from pipelines.resources import PROJECT_ROOT, RunConfigs, env_setting, storage_location
from ppb_core import chain

ROOT = Path(__file__).resolve().parents[1]


def test_definitions_load_and_resolve() -> None:
    dg.Definitions.validate_loadable(defs)
    assert defs.resolve_job_def("register_run_configs")
    observe = defs.resolve_job_def("observe_run_config_files")
    assert observe.partitions_def is not None and observe.partitions_def.name == PARTITIONS_NAME
    assert defs.executor is dg.in_process_executor
    sensors = {sensor.name: sensor for sensor in defs.sensors}
    assert set(sensors) == {"run_config_sensor", "ppb_automation", "search_spec_sensor"}
    assert all(sensor.default_status == dg.DefaultSensorStatus.RUNNING for sensor in sensors.values())
    assert not defs.schedules  # the nightly re-estimation is an automation condition (pipelines/automation.py)


def test_every_stage_is_one_asset_described_versioned_columned_and_automated_by_the_chain() -> None:
    graph = defs.resolve_asset_graph()
    assert [a.key.path[-1] for a in STAGE_ASSETS] == [step.name for step in chain.STAGES]
    for step in chain.STAGES:
        node = graph.get(dg.AssetKey(step.name))
        assert node.code_version == chain.code_version(step.name)
        assert node.description.startswith(step.description)
        assert node.group_name == "ppb"
        assert node.partitions_def.name == PARTITIONS_NAME
        assert "parquet" in node.kinds
        assert {key.path[-1] for key in node.parent_keys} == set(step.inputs or ["run_config_file"])
        assert node.automation_condition is not None
        columns = node.metadata["dagster/column_schema"].columns
        assert [c.name for c in columns] == step.schema.names
        assert all(c.description for c in columns), step.name
    assert graph.get(dg.AssetKey("run_config_file")).is_observable
    assert graph.get(dg.AssetKey("pipeline_plan")).pools == {SOLVER_POOL}


def test_checks_are_blocking_and_stop_their_own_asset() -> None:
    advisory = {"memory_model_agrees_the_plan_fits"}  # a warning on the last asset: nothing after it to stop
    specs = [spec for asset in STAGE_ASSETS for spec in asset.check_specs]
    assert {spec.asset_key.path[-1] for spec in specs} == {
        "layer_walk",
        "layer_descriptions",
        "combined_descriptions",
        "withdrawn_descriptions",
        "scaled_descriptions",
        "pipeline_plan",
        "plan_report",
    }
    for spec in specs:
        assert spec.blocking == (spec.name not in advisory), spec.name


def test_settings_are_dagster_environment_variables(monkeypatch) -> None:
    monkeypatch.delenv("PPB_CONFIG_DIR", raising=False)
    assert env_setting("PPB_CONFIG_DIR") == ""  # unset: the project's folder
    monkeypatch.setenv("PPB_CONFIG_DIR", "/srv/configs")
    setting = env_setting("PPB_CONFIG_DIR")
    assert isinstance(setting, dg.EnvVar) and setting.env_var_name == "PPB_CONFIG_DIR"

    # Resolved when Dagster launches the run, as the UI shows it: the variable's value then.
    @dg.asset
    def folder(run_configs: RunConfigs) -> str:
        return str(run_configs.directory())

    monkeypatch.setenv("PPB_CONFIG_DIR", "/srv/later")
    result = dg.materialize([folder], resources={"run_configs": RunConfigs(config_dir=setting)})
    assert result.output_for_node("folder") == "/srv/later"


def test_folders_resolve_against_the_project_not_the_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PPB_CONFIG_DIR", raising=False)
    monkeypatch.delenv("PPB_STORAGE_DIR", raising=False)
    assert PROJECT_ROOT == ROOT
    assert RunConfigs().directory() == ROOT / "configs"
    assert RunConfigs(config_dir="configs").directory() == ROOT / "configs"
    assert storage_location("") == str(ROOT / "storage")
    assert storage_location("data/tables") == str(ROOT / "data" / "tables")
    assert storage_location(str(tmp_path / "elsewhere")) == str(tmp_path / "elsewhere")
    assert storage_location("s3://bucket/ppb") == "s3://bucket/ppb"  # fsspec URLs are kept as they are
    assert RunConfigs(config_dir=str(tmp_path)).directory() == tmp_path


def test_discover_keys_each_yaml_by_its_stem(tmp_path) -> None:
    for name in ("qwen2.5-7b.yaml", "a,b.yaml", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "hf").mkdir()
    assert list(RunConfigs(config_dir=str(tmp_path)).discover()) == ["qwen2.5-7b"]  # "," is no partition key


def test_resources_default_to_the_project_folders() -> None:
    bound = resources()
    # the chain's, and the search's: its specs, its shards between steps, its ranking table
    assert set(bound) == {"io_manager", "run_configs", "search_specs", "search_shards_io", "search_ranking_io"}


@pytest.mark.parametrize("base", ["local", "memory"])
def test_io_manager_writes_aside_then_renames_and_reads_back(tmp_path, base) -> None:
    root = UPath(tmp_path) if base == "local" else UPath("memory://ppb-test") / tmp_path.name
    manager = PandasParquetIOManager(base_path=root)
    frame = pd.DataFrame({"name": ["a", "b"], "bytes": [1, 2]})
    context = dg.build_output_context(asset_key=dg.AssetKey("layer_walk"), partition_key="qwen2.5-7b")
    manager.handle_output(context, frame)
    path = root / "layer_walk" / "qwen2.5-7b.parquet"
    assert path.read_bytes() == chain.to_parquet_bytes(frame, chain.stage("layer_walk").schema)
    assert [p.name for p in path.parent.iterdir()] == ["qwen2.5-7b.parquet"]  # nothing left aside
    loaded = manager.load_input(dg.build_input_context(asset_key=dg.AssetKey("layer_walk"), partition_key="qwen2.5-7b"))
    pd.testing.assert_frame_equal(loaded, frame)
    replace_file(path, b"second")
    assert path.read_bytes() == b"second"


def test_instance_configs_limit_the_solver_pool_and_runs_per_partition() -> None:
    local = yaml.safe_load((ROOT / "dagster_home" / "dagster.yaml").read_text())
    assert local["telemetry"] == {"enabled": False}
    assert local["concurrency"]["pools"]["default_limit"] == 1  # one solve at a time on one machine
    deploy = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())
    assert set(deploy["storage"]) == {"postgres"}
    assert deploy["telemetry"] == {"enabled": False}
    (limit,) = deploy["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limit == {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    assert deploy["concurrency"]["pools"]["default_limit"] >= 1


def test_the_local_instance_config_loads(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_bytes((ROOT / "dagster_home" / "dagster.yaml").read_bytes())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        assert instance.get_runs() == []


def test_executor_is_chosen_by_environment(monkeypatch) -> None:
    monkeypatch.delenv("PPB_EXECUTOR", raising=False)
    assert executor() is dg.in_process_executor
    monkeypatch.setenv("PPB_EXECUTOR", "multiprocess")
    assert executor() is dg.multiprocess_executor
    monkeypatch.setenv("PPB_EXECUTOR", "threads")
    with pytest.raises(ValueError, match="PPB_EXECUTOR"):
        executor()


def test_the_search_runs_its_shards_side_by_side_unless_celery_is_asked_for(monkeypatch) -> None:
    monkeypatch.delenv("PPB_EXECUTOR", raising=False)
    assert search_executor() is dg.multiprocess_executor
    monkeypatch.setenv("PPB_EXECUTOR", "in_process")  # the chain's choice; the shards still get processes
    assert search_executor() is dg.multiprocess_executor
    monkeypatch.setenv("PPB_EXECUTOR", "celery")
    monkeypatch.delenv("PPB_CELERY_BROKER", raising=False)
    with pytest.raises(ValueError, match="needs \\$PPB_CELERY_BROKER"):
        search_executor()


def test_a_filesystem_broker_is_one_queue_folder_with_results_beside_it(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PPB_CELERY_BROKER", f"filesystem://{tmp_path}/celery")
    monkeypatch.delenv("PPB_CELERY_BACKEND", raising=False)
    queue = tmp_path / "celery" / "queue"
    assert celery_app_args() == {
        "broker": "filesystem://",
        "backend": f"file://{tmp_path}/celery/results",
        "config_source": {
            "broker_transport_options": {
                "data_folder_in": str(queue),
                "data_folder_out": str(queue),
                "control_folder": f"{tmp_path}/celery/control",
            }
        },
    }
    assert queue.is_dir() and (tmp_path / "celery" / "results").is_dir()
    monkeypatch.setenv("PPB_CELERY_BROKER", "redis://broker:6379/0")
    assert celery_app_args() == {"broker": "redis://broker:6379/0", "backend": "rpc://", "config_source": {}}
    monkeypatch.setenv("PPB_CELERY_BACKEND", "redis://broker:6379/1")
    assert celery_app_args()["backend"] == "redis://broker:6379/1"


def test_the_documented_materialize_selection_shares_the_run_config_partitions() -> None:
    """`dagster asset materialize --partition KEY` needs every selected asset on one partitions
    definition: the docs' `--select '*'` also took `strategy_search` (partitioned by search spec) and
    the command failed ("There is no PartitionsDefinition shared by all the provided assets")."""
    graph = defs.resolve_asset_graph()
    for doc in ("pipeline.md", "vision.md"):
        selections = re.findall(
            r"dagster asset materialize .*--select '([^']+)' --partition", (ROOT / "docs" / doc).read_text()
        )
        assert selections, doc
        for selection in selections:
            keys = dg.AssetSelection.from_string(selection).resolve(graph)
            names = {graph.get(key).partitions_def.name for key in keys}
            assert names == {PARTITIONS_NAME}, (doc, selection, names)
            assert {key.to_user_string() for key in keys} >= {step.name for step in chain.STAGES}, (doc, selection)
