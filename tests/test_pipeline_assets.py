"""End to end through Dagster: every stage asset of two run configs materialized into a temporary
folder, read back and compared with the core's own tables and with `ppb plan`'s files; one asset
rerun alone from stored upstream; failed runs and failed blocking checks leave the previous
Parquet in place; the temporary file of a write killed midway is removed by the next run."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from pipelines.assets import ALL_ASSETS, STAGE_ASSETS
from pipelines.assets.config import CONFIG_HASH
from pipelines.definitions import resources
from pipelines.partitions import PARTITIONS_NAME
from pipelines.resources import data_version
from ppb_core import chain
from ppb_core.cli.main import main
from ppb_core.config.run import config_hash, load_run_config
from ppb_core.estimate.run import estimate
from ppb_core.io import host_tag
from ppb_core.payload.run import describe_run
from ppb_core.tables.payload import descriptions_from_frame
from ppb_core.tables.schema import rows_of

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
KEYS = ("llama3-8b", "qwen2.5-7b")
STAGES = [step.name for step in chain.STAGES]


@dataclass
class Built:
    instance: dg.DagsterInstance
    storage: Path
    results: dict[str, dg.ExecuteInProcessResult]


def materialize(
    instance: dg.DagsterInstance, storage: Path, configs: Path, key: str, selection=None, **kwargs
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        ALL_ASSETS,
        selection=selection or STAGE_ASSETS,
        partition_key=key,
        instance=instance,
        resources=resources(str(storage), str(configs)),
        **kwargs,
    )


def instance_in(folder: Path) -> dg.DagsterInstance:
    """An in-memory instance (an event log in SQLite on disk costs ~2 s a run here); *folder* is for
    whatever it stores on disk."""
    folder.mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.ephemeral(tempdir=str(folder))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """Both run configs, every stage, once for all the tests of this module."""
    root = tmp_path_factory.mktemp("pipeline")
    with instance_in(root / "home") as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, list(KEYS))
        results = {key: materialize(instance, root / "storage", CONFIGS, key) for key in KEYS}
        yield Built(instance, root / "storage", results)


def materializations(instance: dg.DagsterInstance, asset: str, key: str) -> list[dg.AssetMaterialization]:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=100
    ).records
    return [record.asset_materialization for record in records]


def test_every_stage_is_materialized_and_every_check_passes(built: Built) -> None:
    for key, result in built.results.items():
        assert result.success
        assert sorted(e.asset_key.path[-1] for e in result.get_asset_materialization_events()) == sorted(STAGES)
        checks = result.get_asset_check_evaluations()
        assert checks and all(check.passed for check in checks), key


@pytest.mark.parametrize("key", KEYS)
def test_stored_tables_equal_the_core_results(built: Built, key: str) -> None:
    expected = chain.run_chain(CONFIGS / f"{key}.yaml")
    for name in STAGES:
        path = built.storage / name / f"{key}.parquet"
        stored = chain.from_parquet_bytes(path.read_bytes())
        pd.testing.assert_frame_equal(rows_of(stored), rows_of(expected[name]))
        assert getattr(stored, "summary", None) == getattr(expected[name], "summary", None)
        assert path.read_bytes() == chain.stage_files(name, expected[name])[chain.PARQUET]


@pytest.mark.parametrize("key", KEYS)
def test_ppb_plan_writes_byte_identical_files(built: Built, key: str, tmp_path: Path) -> None:
    assert main(["plan", str(CONFIGS / f"{key}.yaml"), "-o", str(tmp_path)]) == 0
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    suffixes = {name: (".parquet", *chain.stage_artifact_suffixes(name)) for name in STAGES}
    assert written == sorted(Path(name) / f"{key}{suffix}" for name in STAGES for suffix in suffixes[name])
    for relative in written:
        assert (tmp_path / relative).read_bytes() == (built.storage / relative).read_bytes(), relative


def test_metadata_a_person_reads_in_the_ui(built: Built) -> None:
    key = "llama3-8b"
    # As the assets were defined (at import): recomputing could see a core file edited since.
    code_versions = {asset.key.path[-1]: asset.code_versions_by_key[asset.key] for asset in STAGE_ASSETS}
    for name in STAGES:
        (event,) = materializations(built.instance, name, key)
        meta = event.metadata
        assert meta["path"].value == str(built.storage / name / f"{key}.parquet")
        stored = pd.read_parquet(meta["path"].value)
        assert meta["dagster/row_count"].value == len(stored)
        assert [c.name for c in meta["dagster/column_schema"].schema.columns] == list(stored.columns)
        assert meta["preview"].value.startswith("| ")
        assert event.tags["dagster/code_version"] == code_versions[name]
    (run_event,) = materializations(built.instance, "run_config", key)
    digest = config_hash(CONFIGS / f"{key}.yaml")
    assert run_event.metadata[CONFIG_HASH].value == digest
    assert run_event.tags["dagster/data_version"] == data_version(digest, code_versions["run_config"])
    for name in STAGES:  # numbers a person reads are rounded
        (event,) = materializations(built.instance, name, key)
        for label, entry in event.metadata.items():
            if isinstance(entry.value, float):
                assert entry.value == round(entry.value, 4), (name, label)
        columns = event.metadata["dagster/column_schema"].schema.columns
        assert all(column.description for column in columns), name
    (plan_event,) = materializations(built.instance, "pipeline_plan", key)
    report = plan_event.metadata["report"].value  # the report's picture and summary on the plan's own page
    assert "![memory and time per stage](data:image/png;base64," in report and "tightest stage" in report
    (report_event,) = materializations(built.instance, "plan_report", key)
    assert "![memory and time per stage](data:image/png;base64," in report_event.metadata["report"].value
    plan = chain.read_stage(built.storage, "pipeline_plan", key).summary
    for event in (plan_event, report_event):  # the time model's seconds, not the solver's time unit
        assert event.metadata["iteration_s"].value == round(plan["iteration"]["seconds"], 3)
        assert event.metadata["best_uniform_iteration_s"].value == round(plan["baseline_iteration"]["seconds"], 3)
    assert plan_event.metadata["mfu"].value == round(plan["iteration"]["mfu"], 3)
    assert run_event.metadata["parallel"].value.startswith("dp 8 · tp 2 + sp · pp 4")
    (walk_event,) = materializations(built.instance, "layer_walk", key)
    # 32 body layers on 4 stages of one chunk: 8 per cell; plus the HEAD and the TAIL.
    assert walk_event.metadata["layers"].value == 34
    assert walk_event.metadata["body_layers"].value == 32
    assert "| 0 | 8 | 8 | 8 | 8 |" in walk_event.metadata["body_layers_per_cell"].value
    run = load_run_config(CONFIGS / f"{key}.yaml")
    peaks = estimate(run).stages
    (memory_event,) = materializations(built.instance, "layer_memory", key)
    assert memory_event.metadata["peak_stage_memory_mb"].value == round(max(p.peak_bytes for p in peaks) / 2**20, 1)
    assert memory_event.metadata["device_memory_mb"].value == round(peaks[0].device_bytes / 2**20, 1)
    assert memory_event.metadata["every_stage_fits"].value is all(p.fits for p in peaks)
    assert memory_event.metadata["stage_peaks"].value.count("\n") == 1 + len(peaks)  # header, rule, a row each
    (withdrawn_event,) = materializations(built.instance, "withdrawn_descriptions", key)
    kept = chain.offered_options(next(d for d in describe_run(run) if d["type"] == "BODY"))
    assert withdrawn_event.metadata["options"].value == ", ".join(kept)
    assert withdrawn_event.metadata["options_kept"].value == len(kept)
    (scaled_event,) = materializations(built.instance, "scaled_descriptions", key)
    unscaled = descriptions_from_frame(pd.read_parquet(built.storage / "layer_descriptions" / f"{key}.parquet"))
    first_body = next(d for d in unscaled if d["type"] == "BODY")
    assert scaled_event.metadata["time_unit_ms"].value == round(first_body["forward_time"], 4)
    assert scaled_event.metadata["file.json"].value == str(built.storage / "scaled_descriptions" / f"{key}.json")


def test_the_solve_shows_its_progress_in_the_run_log(built: Built) -> None:
    result = built.results["llama3-8b"]
    lines = [
        entry.user_message
        for entry in built.instance.all_logs(result.run_id)
        if entry.step_key == "pipeline_plan" and entry.dagster_event is None
    ]
    # The balancer's own steps, one line each, from its start to its end (ppb_core.balance.progress).
    phases = [line.split("]", 1)[1].split(":")[0].split(" — ")[0].strip() for line in lines if line.startswith("[")]
    assert phases[0] == "start" and phases[-1] == "done", lines
    assert any("incumbent" in line for line in lines)


@pytest.mark.parametrize("target", ["withdrawn_descriptions", STAGES[-1]])
def test_one_asset_rerun_alone_reads_stored_upstream_and_writes_the_same_bytes(built: Built, target: str) -> None:
    key = "qwen2.5-7b"
    before = {name: (built.storage / name / f"{key}.parquet").read_bytes() for name in STAGES}
    upstream_runs = {name: len(materializations(built.instance, name, key)) for name in STAGES}
    result = materialize(built.instance, built.storage, CONFIGS, key, selection=[target])
    assert result.success
    assert [e.asset_key.path[-1] for e in result.get_asset_materialization_events()] == [target]
    for name in STAGES:
        assert (built.storage / name / f"{key}.parquet").read_bytes() == before[name], name
        assert len(materializations(built.instance, name, key)) == upstream_runs[name] + (name == target)


@pytest.fixture(scope="module")
def small_built(tmp_path_factory: pytest.TempPathFactory):
    """One run config built once, in folders of their own that the tests below may break."""
    root = tmp_path_factory.mktemp("small")
    configs = root / "configs"
    shutil.copytree(CONFIGS, configs)
    storage = root / "storage"
    with instance_in(root / "home") as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, ["llama3-8b"])
        assert materialize(instance, storage, configs, "llama3-8b").success
        yield instance, storage, configs


@pytest.fixture
def small(small_built):
    """`small_built`, its run config put back as shipped after each test."""
    instance, storage, configs = small_built
    yield instance, storage, configs
    shutil.copy(CONFIGS / "llama3-8b.yaml", configs / "llama3-8b.yaml")


def stored_files(storage: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(storage.rglob("*")) if path.is_file()}


def test_a_failing_asset_leaves_the_previous_parquet_in_place(small) -> None:
    instance, storage, configs = small
    before = stored_files(storage)
    config = configs / "llama3-8b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 32", "micro_batches: -1"))
    result = materialize(instance, storage, configs, "llama3-8b", raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "run_config"
    reported = failure.step_failure_data.user_failure_data
    assert "training.micro_batches" in reported.description
    assert reported.metadata["field"].value == "training.micro_batches"
    assert stored_files(storage) == before  # nothing replaced, no temporary file left behind


def test_a_write_that_fails_midway_leaves_the_previous_parquet_in_place(small, monkeypatch) -> None:
    instance, storage, configs = small
    before = stored_files(storage)
    config = configs / "llama3-8b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 32", "micro_batches: 16"))

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("ppb_core.io.os.fsync", disk_full)
    result = materialize(instance, storage, configs, "llama3-8b", raise_on_error=False)
    assert not result.success
    assert stored_files(storage) == before
    monkeypatch.undo()
    # The same run with the disk back writes the new table (16 micro-batches now).
    assert materialize(instance, storage, configs, "llama3-8b").success
    assert stored_files(storage) != before
    assert '"micro_batches": 16' in pd.read_parquet(storage / "run_config" / "llama3-8b.parquet")["config_json"][0]


# A run killed (SIGKILL) after its table is written aside, before the rename: what a power cut or
# the OOM killer leaves. Only the last step is ours; the rest is the run as Dagster makes it.
KILLED_WRITE = """
import os, signal, sys
import dagster as dg
import ppb_core.io
from pipelines.assets import ALL_ASSETS
from pipelines.definitions import resources
from pipelines.partitions import PARTITIONS_NAME

write_aside = ppb_core.io._write_aside


def written_then_killed(path, data):
    write_aside(path, data)
    os.kill(os.getpid(), signal.SIGKILL)


ppb_core.io._write_aside = written_then_killed
storage, configs = sys.argv[1:]
with dg.DagsterInstance.ephemeral() as instance:
    instance.add_dynamic_partitions(PARTITIONS_NAME, ["llama3-8b"])
    dg.materialize(ALL_ASSETS, selection=["run_config"], partition_key="llama3-8b", instance=instance,
                   resources=resources(storage, configs))
"""


def test_the_temporary_of_a_killed_write_is_removed_by_the_next_run(small) -> None:
    instance, storage, configs = small
    before = stored_files(storage)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITE, str(storage), str(configs)], env=env, stderr=subprocess.PIPE, text=True
    ) as killed:
        stderr = killed.communicate()[1]
    assert killed.returncode == -signal.SIGKILL, stderr[-2000:]
    (left,) = set(stored_files(storage)) - set(before)
    assert left.parent == storage / "run_config" and left.name.startswith(
        f".llama3-8b.parquet.{killed.pid}@{host_tag()}."
    )
    assert left.suffix == ".tmp" and stored_files(storage)[left]  # the table written aside, never renamed
    result = materialize(instance, storage, configs, "llama3-8b", selection=["run_config"])
    assert result.success
    assert not left.exists()
    assert set(stored_files(storage)) == set(before)  # nothing else left behind


def test_a_failing_blocking_check_keeps_the_last_good_table_and_stops_the_stages_after_it(small, monkeypatch) -> None:
    instance, storage, configs = small
    before = stored_files(storage)
    config = configs / "llama3-8b.yaml"
    config.write_text(config.read_text().replace("micro_batches: 32", "micro_batches: 16"))

    def always_wrong(frame: pd.DataFrame) -> list[str]:
        return ["a problem the check must stop on"]

    monkeypatch.setattr(chain, "description_problems", always_wrong)
    result = materialize(instance, storage, configs, "llama3-8b", raise_on_error=False)
    assert not result.success
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks["layer_descriptions_are_sound"] is False
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert failure.step_key == "layer_descriptions"
    assert failure.step_failure_data.user_failure_data.description == (
        "layer_descriptions not stored, layer_descriptions_are_sound failed: a problem the check must stop on"
    )
    done = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    later = {"layer_descriptions", "combined_descriptions", "withdrawn_descriptions", "scaled_descriptions"}
    assert "run_config" in done and not done & later
    for name in later:  # the checked table and those after it are the last good run's
        path = storage / name / "llama3-8b.parquet"
        assert path.read_bytes() == before[path]


def test_a_plan_that_cannot_fit_stops_the_report(small) -> None:
    instance, storage, configs = small
    before = stored_files(storage)
    config = configs / "llama3-8b.yaml"
    # 80 GB less 76 GB reserved: too little for any plan of Llama-3-8B on 4 stages.
    config.write_text(config.read_text().replace("reserved_mb: 4000", "reserved_mb: 76000"))
    result = materialize(instance, storage, configs, "llama3-8b", raise_on_error=False)
    assert not result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert not checks["plan_fits_the_device"].passed
    details = checks["plan_fits_the_device"].metadata["details"].value
    assert "no plan fits in 5,559 MB per device" in details and "the least-memory plan needs" in details
    done = {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}
    assert not done & {"pipeline_plan", "plan_report"}
    for name, suffixes in (("pipeline_plan", (".parquet", ".json")), ("plan_report", (".parquet", ".png", ".md"))):
        for suffix in suffixes:  # the last plan that fitted, and its report, stay
            path = storage / name / f"llama3-8b{suffix}"
            assert path.read_bytes() == before[path]
