"""The code location loads; every chain stage is an asset described, grouped and versioned by the
chain; folders resolve against the project; the IO manager works on local and fsspec storage."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
from upath import UPath

from pipelines.assets import STAGE_ASSETS
from pipelines.checks import ALL_CHECKS
from pipelines.definitions import defs, resources
from pipelines.io_managers import PandasParquetIOManager, replace_file
from pipelines.partitions import PARTITIONS_NAME
from pipelines.resources import PROJECT_ROOT, RunConfigs, storage_location
from ppb_core import chain

ROOT = Path(__file__).resolve().parents[1]


def test_definitions_load_and_resolve() -> None:
    dg.Definitions.validate_loadable(defs)
    job = defs.resolve_job_def("ppb_chain")
    assert job.partitions_def is not None and job.partitions_def.name == PARTITIONS_NAME
    assert defs.resolve_job_def("register_run_configs")
    assert defs.executor is dg.in_process_executor


def test_every_stage_is_one_asset_described_and_versioned_by_the_chain() -> None:
    graph = defs.resolve_asset_graph()
    assert [a.key.path[-1] for a in STAGE_ASSETS] == [step.name for step in chain.STAGES]
    for step in chain.STAGES:
        node = graph.get(dg.AssetKey(step.name))
        assert node.code_version == chain.code_version(step.name)
        assert node.description == step.description
        assert node.group_name == "ppb"
        assert node.partitions_def.name == PARTITIONS_NAME
        assert "parquet" in node.kinds
        assert {key.path[-1] for key in node.parent_keys} == set(step.inputs or ["run_config_file"])
    assert graph.get(dg.AssetKey("run_config_file")).is_external


def test_checks_are_blocking_and_partitioned() -> None:
    advisory = {"memory_model_agrees_the_plan_fits"}  # a warning on the last asset: nothing after it to stop
    for check in ALL_CHECKS:
        for spec in check.check_specs:
            assert spec.blocking == (spec.name not in advisory), spec.name
            assert spec.partitions_def is not None and spec.partitions_def.name == PARTITIONS_NAME


def test_folders_resolve_against_the_project_not_the_working_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PPB_CONFIG_DIR", raising=False)
    monkeypatch.delenv("PPB_STORAGE_DIR", raising=False)
    assert PROJECT_ROOT == ROOT
    assert RunConfigs().directory() == ROOT / "configs"
    assert RunConfigs(config_dir="configs").directory() == ROOT / "configs"
    assert storage_location("") == str(ROOT / "storage")
    assert storage_location("data/tables") == str(ROOT / "data" / "tables")
    monkeypatch.setenv("PPB_STORAGE_DIR", str(tmp_path / "elsewhere"))
    assert storage_location("") == str(tmp_path / "elsewhere")
    assert storage_location("s3://bucket/ppb") == "s3://bucket/ppb"  # fsspec URLs are kept as they are
    monkeypatch.setenv("PPB_CONFIG_DIR", str(tmp_path))
    assert RunConfigs().directory() == tmp_path


def test_discover_keys_each_yaml_by_its_stem(tmp_path) -> None:
    for name in ("qwen2.5-7b.yaml", "a,b.yaml", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "hf").mkdir()
    assert list(RunConfigs(config_dir=str(tmp_path)).discover()) == ["qwen2.5-7b"]  # "," is no partition key


def test_resources_default_to_the_project_folders() -> None:
    bound = resources()
    assert set(bound) == {"io_manager", "run_configs"}


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


def test_deploy_instance_config_passes_dagsters_own_validation(monkeypatch) -> None:
    from dagster._core.instance.config import dagster_instance_config

    for name in ("DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_HOST", "DAGSTER_PG_DB"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("DAGSTER_COMPUTE_LOG_DIR", "/tmp")
    config, _ = dagster_instance_config(str(ROOT / "deploy"))
    assert set(config["storage"]) == {"postgres"}
    assert config["telemetry"] == {"enabled": False}
    (limit,) = config["concurrency"]["runs"]["tag_concurrency_limits"]
    assert limit == {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1}
    local, _ = dagster_instance_config(str(ROOT / "dagster_home"))
    assert local == {"telemetry": {"enabled": False}}  # SQLite storage: the default


def test_executor_is_chosen_by_environment(monkeypatch) -> None:
    from pipelines.definitions import executor

    monkeypatch.delenv("PPB_EXECUTOR", raising=False)
    assert executor() is dg.in_process_executor
    monkeypatch.setenv("PPB_EXECUTOR", "multiprocess")
    assert executor() is dg.multiprocess_executor
    monkeypatch.setenv("PPB_EXECUTOR", "threads")
    with pytest.raises(ValueError, match="PPB_EXECUTOR"):
        executor()
