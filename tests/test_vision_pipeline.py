"""The multimodal example through Dagster: every asset of the `qwen2.5-vl-7b` partition (a vision tower
feeding a language model, their bodies combined) materialized into a temporary folder, each check
passing, the stored tables equal to the core's, and the report saying which stages hold which
sub-model."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd
import pytest

from pipelines.assets import ALL_ASSETS, STAGE_ASSETS
from pipelines.definitions import resources
from pipelines.partitions import PARTITIONS_NAME
from ppb_core import chain
from ppb_core.tables.schema import rows_of

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
KEY = "qwen2.5-vl-7b"


@pytest.fixture(scope="module")
def materialized(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("vision-pipeline")
    with dg.DagsterInstance.ephemeral(tempdir=str(root / "home")) as instance:
        instance.add_dynamic_partitions(PARTITIONS_NAME, [KEY])
        result = dg.materialize(
            ALL_ASSETS,
            selection=STAGE_ASSETS,
            partition_key=KEY,
            instance=instance,
            resources=resources(str(root / "storage"), str(CONFIGS)),
        )
        yield result, root / "storage"


def test_every_asset_of_the_multimodal_partition_and_every_check(materialized) -> None:
    result, _ = materialized
    assert result.success
    names = sorted(event.asset_key.path[-1] for event in result.get_asset_materialization_events())
    assert names == sorted(step.name for step in chain.STAGES)
    checks = result.get_asset_check_evaluations()
    assert checks and all(check.passed for check in checks)


def test_the_stored_tables_are_the_cores(materialized) -> None:
    _, storage = materialized
    expected = chain.run_chain(CONFIGS / f"{KEY}.yaml")
    for name, frame in expected.items():
        stored = chain.from_parquet_bytes((storage / name / f"{KEY}.parquet").read_bytes())
        pd.testing.assert_frame_equal(rows_of(stored), rows_of(frame))


def test_the_report_says_which_stages_hold_which_sub_model(materialized) -> None:
    _, storage = materialized
    report = pd.read_parquet(storage / "plan_report" / f"{KEY}.parquet")
    text = (storage / "plan_report" / f"{KEY}.md").read_text()
    assert "| models |" in text
    for value in report["models"]:
        assert f"| {value} |" in text
    assert report["models"].iloc[0].startswith("vit HEAD + ")
    assert report["models"].iloc[-1].endswith("+ TAIL") and "llm" in report["models"].iloc[-1]
    assert (storage / "plan_report" / f"{KEY}.png").read_bytes().startswith(b"\x89PNG")
