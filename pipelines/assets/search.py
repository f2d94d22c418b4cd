"""`strategy_search`: the ranked parallel strategies of one search spec, the grid fanned out in shards.

One partition per search spec (`searches/<key>.yaml`, `PPB_SEARCH_DIR`), kept in step with the folder
by `search_spec_sensor`. The asset is a graph: `search_shards` deals the grid into shards of
strategies that share layer times (dynamic outputs), `search_shard` searches one shard alone
(`ppb_core.search.rank.search_points`: screen, bound, balance the promising ones), and
`rank_shards` merges the shards' rankings (exact: each holds every strategy of its shard that can
be in the overall ranking), stores the table as Parquet, writes every ranked strategy's run config,
plan and framework settings under `<storage>/strategy_search/<key>/`, and hands the ranked run
configs to the chain: each is written to the run-config folder as `<key>-top<NN>.yaml` and added
as a `run_configs` partition. The shards run side by side under the multiprocess executor (the
`search_strategies` job), or on other machines under dagster-celery's executor (`PPB_EXECUTOR=celery`,
`pipelines.executors`, deploy/README.md).
"""

import json
import pickle
from pathlib import Path

import dagster as dg
from pydantic import Field
from upath import UPath

from pipelines.assets.common import markdown_table
from pipelines.automation import SENSOR_INTERVAL_S
from pipelines.columns import column_schema
from pipelines.executors import search_executor
from pipelines.partitions import PARTITIONS_NAME
from pipelines.resources import INVALID_KEY_CHARACTERS, RunConfigs, project_path, storage_location
from ppb_core import chain
from ppb_core.errors import InputError
from ppb_core.search.enumerate import enumerate_strategies
from ppb_core.search.outputs import write_ranking, write_run_configs
from ppb_core.search.rank import Ranked, SearchResult, merge, screened_words, search_points, shard
from ppb_core.search.spec import SearchSpec, load_search_spec
from ppb_core.tables.schema import Summarized
from ppb_core.tables.search import STRATEGY_SEARCH, ranking_to_frame
from ppb_core.units import counted

SEARCH_DIR_ENV = "PPB_SEARCH_DIR"
SEARCH_PARTITIONS = "search_specs"
GROUP = "search"
search_specs = dg.DynamicPartitionsDefinition(name=SEARCH_PARTITIONS)


class SearchSpecs(dg.ConfigurableResource):
    """The search specs: each `<stem>.yaml` in the folder is one partition, keyed by its stem."""

    search_dir: str = Field(default="", description=f"folder of search specs (${SEARCH_DIR_ENV}); empty: searches/")
    files_dir: str = Field(default="", description="where ranked run configs and plans go; empty: <storage>")

    def directory(self) -> Path:
        return project_path(self.search_dir, "searches")

    def files(self, key: str) -> Path:
        """Where a search's ranked run configs, plans and framework settings are written."""
        return Path(storage_location(self.files_dir)) / "strategy_search" / key

    def load(self, key: str) -> SearchSpec:
        """The partition's spec; bad input fails the step with the spec's one line, no retry."""
        try:
            return load_search_spec(self.directory() / f"{key}.yaml")
        except InputError as err:
            raise dg.Failure(description=err.line(), allow_retries=False) from err

    def spec_keys(self) -> list[str]:
        return sorted(
            path.stem
            for path in self.directory().glob("*.yaml")
            if path.is_file() and not any(c in path.stem for c in INVALID_KEY_CHARACTERS)
        )


class SearchRunConfig(dg.Config):
    shards: int = Field(4, description="how many shards the grid is dealt into (one step each)")
    chain_top: int = Field(3, description="how many of the ranked strategies go on to the chain as run configs")


class RankingParquet(dg.UPathIOManager):
    """The ranking table, one Parquet file per search spec: `<storage>/strategy_search/<key>.parquet`."""

    extension = chain.PARQUET

    def dump_to_path(self, context: dg.OutputContext, obj: Summarized, path: UPath) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(chain.to_parquet_bytes(obj, STRATEGY_SEARCH))

    def load_from_path(self, context: dg.InputContext, path: UPath) -> Summarized:
        return chain.from_parquet_bytes(path.read_bytes())


class RankingStorage(dg.ConfigurableIOManagerFactory):
    base_dir: str = Field(default="", description="empty: the stage tables' storage folder")

    def create_io_manager(self, context: dg.InitResourceContext) -> RankingParquet:
        return RankingParquet(base_path=UPath(storage_location(self.base_dir)))


class ShardPickles(dg.UPathIOManager):
    """The shards and their results between steps (they cross processes): pickles under
    `<storage>/search_shards/`, keyed by run and step."""

    extension = ".pickle"

    def dump_to_path(self, context: dg.OutputContext, obj: object, path: UPath) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))

    def load_from_path(self, context: dg.InputContext, path: UPath) -> object:
        return pickle.loads(path.read_bytes())


class ShardStorage(dg.ConfigurableIOManagerFactory):
    base_dir: str = Field(default="", description="empty: the stage tables' storage folder")

    def create_io_manager(self, context: dg.InitResourceContext) -> ShardPickles:
        return ShardPickles(base_path=UPath(storage_location(self.base_dir)) / "search_shards")


def _log_progress(context: dg.OpExecutionContext, spec: SearchSpec, shard_name: str):
    """Strategies screened, balanced, and the best so far, in the step's log."""

    def progress(event: str, figures: dict) -> None:
        if event == "screening done":  # in `ppb search`'s words: the points examined, the valid ones
            context.log.info(f"{shard_name}: {screened_words(figures)}")
        elif event == "balanced":
            best: Ranked | None = figures.get("best")
            context.log.info(
                f"{shard_name}: {figures['balanced']} balanced, {figures['relaxed']} bounded, "
                f"{figures['waiting']} waiting"
                + (f"; best {best.strategy.label(spec)} {best.seconds:.3f} s" if best else "")
                + (
                    f"; {figures['to_fill']:,} more to fill the top {spec.search.top:,}"
                    if figures.get("to_fill")
                    else ""
                )
            )

    return progress


@dg.op(out=dg.DynamicOut(io_manager_key="search_shards_io"), description="The grid dealt into shards.")
def search_shards(context: dg.OpExecutionContext, config: SearchRunConfig, search_specs: SearchSpecs):
    spec = search_specs.load(context.partition_key)
    points = list(enumerate_strategies(spec))
    parts = shard(points, max(1, config.shards))
    context.log.info(f"{spec.name}: {counted(len(points), 'strategy', 'strategies')} in {counted(len(parts), 'shard')}")
    for index, part in enumerate(parts):
        yield dg.DynamicOutput(part, mapping_key=f"shard_{index}")


@dg.op(out=dg.Out(io_manager_key="search_shards_io"), description="One shard searched: screened, bounded, balanced.")
def search_shard(context: dg.OpExecutionContext, search_specs: SearchSpecs, points: list) -> SearchResult:
    spec = search_specs.load(context.partition_key)
    name = context.get_mapping_key() or "shard"
    result = search_points(spec, points, workers=1, progress=_log_progress(context, spec, name))
    context.log.info(f"{name}: {result.counts}; {result.seconds:.1f} s")
    return result


@dg.op(
    out=dg.Out(io_manager_key="search_ranking_io"),
    description="The shards' rankings merged; run configs and plans written; the best handed to the chain.",
)
def rank_shards(
    context: dg.OpExecutionContext,
    config: SearchRunConfig,
    search_specs: SearchSpecs,
    run_configs: RunConfigs,
    results: list[SearchResult],
) -> dg.Output[Summarized]:
    spec = search_specs.load(context.partition_key)
    merged = merge(spec, results)
    folder = search_specs.files(context.partition_key)
    written = write_ranking(merged, folder)
    chained = write_run_configs(merged, run_configs.directory(), f"{context.partition_key}-top", config.chain_top)
    keys = [path.stem for path in chained]
    known = set(context.instance.get_dynamic_partitions(PARTITIONS_NAME))
    if [key for key in keys if key not in known]:
        context.instance.add_dynamic_partitions(PARTITIONS_NAME, [key for key in keys if key not in known])
    table = ranking_to_frame(merged)
    best = merged.ranked[0] if merged.ranked else None
    return dg.Output(
        table,
        metadata={
            "preview": dg.MetadataValue.md(markdown_table(table.frame.drop(columns=["plan_json", "recompute_json"]))),
            "counts": dg.MetadataValue.json(merged.counts),
            "rejected": dg.MetadataValue.json(merged.reasons()),
            "rejected_examples": dg.MetadataValue.json({reason: merged.example(reason) for reason in merged.reasons()}),
            "best": best.strategy.label(spec) if best else "none",
            "best_tokens_per_second_per_device": float(best.tokens_per_second_per_device) if best else 0.0,
            "best_iteration_s": float(best.seconds) if best else 0.0,
            "files": dg.MetadataValue.path(str(folder)),
            "files_written": len(written),
            "chain_partitions": dg.MetadataValue.json(keys),
        },
    )


@dg.graph_asset(
    partitions_def=search_specs,
    group_name=GROUP,
    kinds={"python", "pandas", "parquet"},
    description=f"The fastest parallel strategies of a search spec, each balanced (docs/search.md).\n\n"
    f"{STRATEGY_SEARCH.description}",
    metadata={"dagster/column_schema": column_schema(STRATEGY_SEARCH)},
)
def strategy_search():
    results = search_shards().map(search_shard)
    return rank_shards(results.collect())


def strategy_search_job():
    """The search job, its executor as `PPB_EXECUTOR` says when called (`pipelines.executors`)."""
    return dg.define_asset_job(
        "search_strategies",
        selection=[strategy_search],
        executor_def=search_executor(),
        description="A search spec's strategies, the shards side by side in processes of their own "
        "(or on Celery workers: PPB_EXECUTOR=celery).",
    )


@dg.sensor(
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="One partition per search spec file (searches/*.yaml).",
)
def search_spec_sensor(context: dg.SensorEvaluationContext, search_specs: SearchSpecs) -> dg.SensorResult:
    files = set(search_specs.spec_keys())
    known = set(context.instance.get_dynamic_partitions(SEARCH_PARTITIONS))
    requests = []
    if files - known:
        requests.append(search_specs_partitions_request(sorted(files - known), add=True))
    if known - files:
        requests.append(search_specs_partitions_request(sorted(known - files), add=False))
    return dg.SensorResult(dynamic_partitions_requests=requests, cursor=json.dumps(sorted(files)))


def search_specs_partitions_request(keys: list[str], add: bool):
    return search_specs.build_add_request(keys) if add else search_specs.build_delete_request(keys)


def search_resources(search_dir: str = "", storage_dir: str = "") -> dict[str, object]:
    """The resources the search asset needs beside the chain's: the specs, the shards' pickles between
    steps (they cross processes) and the ranking's Parquet, both under the storage folder."""
    return {
        "search_specs": SearchSpecs(search_dir=search_dir, files_dir=storage_dir),
        "search_shards_io": ShardStorage(base_dir=storage_dir),
        "search_ranking_io": RankingStorage(base_dir=storage_dir),
    }
