"""Whether a partition's stored tables still follow from its run config and the code, and why not.

A partition is rebuilt when, for any stage asset, Dagster's own stale-status resolver (the one
behind the UI's "Stale" and "Missing" badges) reports it MISSING (never materialized for this
partition) or STALE (its code version differs from the one its latest materialization recorded,
or an upstream table, or the run config file's observed content hash, has a new data version since
it was read), or when the run config file and the files it names now hash differently from what
run_config was last read from (this last test needs no observation by the sensor).
"""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.assets.graph.base_asset_graph import BaseAssetGraph
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContext

from ppb_core import chain

CONFIG_HASH = "config_hash"  # metadata of a run_config materialization: the content hash it read


class _Loading(LoadingContext):
    """The batching context the resolver asks for; one per evaluation (it caches what it loads)."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self._instance = instance
        self._loaders: dict = {}

    @property
    def instance(self) -> dg.DagsterInstance:
        return self._instance

    @property
    def loaders(self) -> dict:
        return self._loaders


def latest_materialization(instance: dg.DagsterInstance, asset: str, key: str) -> dg.AssetMaterialization | None:
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[key]), limit=1
    )
    return found.records[0].asset_materialization if found.records else None


def built_from(materialization: dg.AssetMaterialization | None) -> str | None:
    """The config content hash a run_config materialization was read from."""
    if materialization is None or CONFIG_HASH not in materialization.metadata:
        return None
    return str(materialization.metadata[CONFIG_HASH].value)


class Staleness:
    """Stale reasons per partition, for one evaluation (a schedule tick, a test)."""

    def __init__(self, instance: dg.DagsterInstance, asset_graph: BaseAssetGraph) -> None:
        self._instance = instance
        self._resolver = CachingStaleStatusResolver(instance, asset_graph, _Loading(instance))

    def reasons(self, key: str, config_digest: str | None) -> list[str]:
        """Why partition *key* must be rebuilt (empty when it is fresh)."""
        reasons = []
        for step in chain.STAGES:
            asset = dg.AssetKey(step.name)
            status = self._resolver.get_status(asset, key)
            if status == StaleStatus.MISSING:
                reasons.append(f"{step.name} never materialized")
            elif status == StaleStatus.STALE:
                for cause in self._resolver.get_stale_causes(asset, key):
                    source = f" ({cause.dependency.asset_key.to_user_string()})" if cause.dependency else ""
                    reasons.append(f"{step.name} {cause.reason}{source}")
        read = built_from(latest_materialization(self._instance, "run_config", key))
        if read is not None and read != config_digest:
            reasons.append("run config file changed since run_config read it")
        return reasons
