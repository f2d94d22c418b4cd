"""The strategy search through Dagster: shards fanned out to processes by the multiprocess executor, the
ranking stored as Parquet, the ranked run configs written and handed to the chain as partitions."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

from pipelines.assets.search import SEARCH_PARTITIONS, SearchSpecs, _log_progress, search_spec_sensor
from pipelines.definitions import search_job
from pipelines.partitions import PARTITIONS_NAME
from ppb_core.config.run import load_run_config
from ppb_core.memory import MemoryModel
from ppb_core.search.enumerate import enumerate_strategies
from ppb_core.search.rank import OUT_OF_TIME, PRUNED, SLOWER, search_points
from ppb_core.search.spec import load_search_spec
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.pricer import TimeModel

DATA = Path(__file__).parent / "data" / "search"


@pytest.fixture()
def folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    found = {name: tmp_path / name for name in ("searches", "configs", "storage")}
    for folder in found.values():
        folder.mkdir()
    raw = yaml.safe_load((DATA / "tiny-dense.yaml").read_text())
    raw["limits"].update(tp=[1, 2], pp=[1, 2], micro_batch_size=[1])
    raw["search"]["top"] = 3
    (found["searches"] / "tiny.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("PPB_SEARCH_DIR", str(found["searches"]))
    monkeypatch.setenv("PPB_CONFIG_DIR", str(found["configs"]))
    monkeypatch.setenv("PPB_STORAGE_DIR", str(found["storage"]))
    return found


def test_a_search_runs_through_dagster_with_the_multiprocess_executor(folders, sqlite_home) -> None:
    with sqlite_home() as home, dg.instance_for_test(temp_dir=str(home)) as instance:
        instance.add_dynamic_partitions(SEARCH_PARTITIONS, ["tiny"])
        result = dg.execute_job(
            dg.reconstructable(search_job),  # each step's process imports it afresh, the PPB_* folders set
            instance=instance,
            tags={"dagster/partition": "tiny"},
            run_config={
                "execution": {"config": {"max_concurrent": 2}},
                "ops": {
                    "strategy_search": {
                        "ops": {
                            "search_shards": {"config": {"shards": 2, "chain_top": 2}},
                            "rank_shards": {"config": {"shards": 2, "chain_top": 2}},
                        }
                    }
                },
            },
        )
        assert result.success
        steps = {event.step_key for event in result.all_events if event.step_key}
        assert {"strategy_search.search_shard[shard_0]", "strategy_search.search_shard[shard_1]"} <= steps
        # each step ran in a process of its own
        pids = {
            event.pid for event in result.all_events if event.event_type_value == "STEP_START" and event.pid is not None
        }
        assert len(pids) >= 3
        chained = sorted(instance.get_dynamic_partitions(PARTITIONS_NAME))
        event = instance.get_latest_materialization_event(dg.AssetKey("strategy_search"))
        assert event is not None and event.asset_materialization is not None
        metadata = event.asset_materialization.metadata

    spec = load_search_spec(folders["searches"] / "tiny.yaml")
    expected = search_points(spec, list(enumerate_strategies(spec)), workers=1)
    table = pd.read_parquet(folders["storage"] / "strategy_search" / "tiny.parquet")
    assert list(table["name"]) == [entry.strategy.label(spec) for entry in expected.ranked]
    assert list(table["iteration_s"]) == [entry.seconds for entry in expected.ranked]
    # the shards' reasons merged, each with one instance; a refusal's is the whole search's (its least
    # strategy), while what each shard pruned or found slower depends on the shard's own ranking
    shown = metadata["rejected_examples"].value
    assert set(shown) == set(metadata["rejected"].value) and all(shown.values())
    refused = {reason for reason in expected.reasons() if reason not in (PRUNED, SLOWER, OUT_OF_TIME)}
    assert {reason: shown[reason] for reason in refused} == {r: expected.example(r) for r in refused}
    # every ranked strategy's files, and the two best as the chain's run configs and partitions
    files = folders["storage"] / "strategy_search" / "tiny"
    assert (files / "search.json").is_file()
    assert len(list(files.glob("*.plan.json"))) == 3
    assert chained == ["tiny-top01", "tiny-top02"]
    for key, entry in zip(chained, expected.ranked, strict=False):
        run = load_run_config(folders["configs"] / f"{key}.yaml")
        assert (run.parallel.tp, run.parallel.pp, run.parallel.vpp) == (
            entry.strategy.tp,
            entry.strategy.pp,
            entry.strategy.vpp,
        )
        # the chain's run config states the ranked plan: estimated as `ppb estimate` does, its ranked seconds
        assert run.parallel.layout is not None
        estimated = run_iteration(run, times=TimeModel(run), memory=MemoryModel(run))
        assert estimated.seconds == pytest.approx(entry.seconds, rel=1e-9)


def test_the_sensor_keeps_one_partition_per_spec_file(folders) -> None:
    with dg.instance_for_test() as instance:
        specs = SearchSpecs(search_dir=str(folders["searches"]))
        result = search_spec_sensor(dg.build_sensor_context(instance=instance), search_specs=specs)
        assert [request.partition_keys for request in result.dynamic_partitions_requests] == [["tiny"]]
        instance.add_dynamic_partitions(SEARCH_PARTITIONS, ["tiny", "gone"])
        result = search_spec_sensor(dg.build_sensor_context(instance=instance), search_specs=specs)
        assert [request.partition_keys for request in result.dynamic_partitions_requests] == [["gone"]]


def test_the_step_log_says_screening_in_the_cli_s_words() -> None:
    """A shard's log said "28 strategies screened" where `ppb search` says "screened 44 (28 valid)" for the same
    figures (44 points examined, 28 of them valid): the log now says the CLI's line."""
    logged: list[str] = []

    class Log:
        def info(self, text: str) -> None:
            logged.append(text)

    class Context:
        log = Log()

    progress = _log_progress(Context(), load_search_spec(DATA / "tiny-dense.yaml"), "shard 0")
    progress("screening done", {"screened": 28, "total": 44, "seconds": 1.0, "to_fill": 5, "most_balances": 28})
    assert logged == ["shard 0: screened 44 (28 valid)"]
