"""The run config file, its resolved table, and the layer walk."""

import warnings

import dagster as dg
import pandas as pd

from pipelines.assets.common import GROUP, markdown_table, rounded, stage_asset, table_metadata
from pipelines.automation import CONFIG_FILE
from pipelines.checks import LAYER_WALK_IS_WHOLE, checked
from pipelines.partitions import run_configs
from pipelines.resources import RunConfigs, data_version, file_version
from ppb_core import chain
from ppb_core.errors import InputError
from ppb_core.tables.run import run_from_frame

CONFIG_HASH = "config_hash"  # metadata: the content hash an observation or a materialization read


# The YAML files themselves, outside Dagster's control: an observation of a partition records its
# file's content hash (with the files it names) as the data version, and run_config goes stale.
# `multi_observable_source_asset` is beta in Dagster 1.13; it is the one that takes ObserveResult
# for a partitioned asset (`observable_source_asset` wants DataVersionsByPartition).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.BetaWarning)

    @dg.multi_observable_source_asset(
        specs=[
            dg.AssetSpec(
                CONFIG_FILE,
                partitions_def=run_configs,
                group_name=GROUP,
                kinds={"yaml"},
                description=(
                    "A run config under configs/ and the files it names (HuggingFace config.json, census, "
                    "calibration). Its data version is their content hash; the sensor observes a file "
                    "whenever that changes."
                ),
            )
        ],
        name="observe_run_config_file",
    )
    def run_config_file(context: dg.AssetExecutionContext, run_configs: RunConfigs) -> dg.ObserveResult:
        path = run_configs.path(context.partition_key)
        digest = file_version(path) if path.is_file() else "gone"
        return dg.ObserveResult(
            asset_key=CONFIG_FILE,
            data_version=dg.DataVersion(digest),
            metadata={"file": dg.MetadataValue.path(str(path)), CONFIG_HASH: digest},
        )


@stage_asset("run_config", deps=[run_config_file])
def run_config(context: dg.AssetExecutionContext, run_configs: RunConfigs) -> dg.Output[pd.DataFrame]:
    path = run_configs.path(context.partition_key)
    try:
        if not path.is_file():
            raise InputError(path, None, "file not found: the run config of this partition is gone")
        digest = file_version(path)  # before reading: a change in between is seen as stale, not missed
        frame = chain.run_config(path)
    except InputError as err:  # bad input: one line in the UI, and no retry can mend it
        raise dg.Failure(
            description=err.line(),
            metadata={"file": str(err.source), "field": err.field or "", "problem": err.problem},
            allow_retries=False,
        ) from err
    run = run_from_frame(frame)
    par, train, device = run.parallel, run.training, run.device
    metadata = table_metadata(
        frame.drop(columns="config_json"),
        {
            CONFIG_HASH: digest,
            "file": dg.MetadataValue.path(str(path)),
            "models": ", ".join(f"{m}: {run.spec(m).num_layers} layers" for m in run.model_names),
            "parallel": (
                f"dp {par.dp} · tp {par.tp}{' + sp' if par.sequence_parallel else ''} · pp {par.pp} · "
                f"vpp {par.vpp} · cp {par.cp} · ep {par.ep} · zero {par.shard_level} · {par.schedule}"
            ),
            "micro_batches": train.micro_batches,
            "device": device.name or "custom",
            "device_usable_mb": rounded(device.usable_mb, 1),
        },
    )
    # The table's data version: the files it was read from and the code that read them, so the
    # stages after it go stale exactly when either changes. Output's data_version is beta in 1.13.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        version = dg.DataVersion(data_version(digest, chain.code_version("run_config")))
        return dg.Output(frame, data_version=version, metadata=metadata)


@stage_asset("layer_walk", check_specs=[LAYER_WALK_IS_WHOLE])
def layer_walk(run_config: pd.DataFrame):
    frame = chain.layer_walk(run_config)
    yield from checked(LAYER_WALK_IS_WHOLE, chain.walk_problems(run_config, frame))
    par = run_from_frame(run_config).parallel
    body = frame[frame["node"] == "BODY"]
    cells = body.pivot_table(index="chunk", columns="stage", values="index", aggfunc="count", fill_value=0)
    cells.columns = [f"stage {s}" for s in cells.columns]
    yield dg.Output(
        frame,
        metadata=table_metadata(
            frame.drop(columns="kind_json"),
            {
                "layers": len(frame),
                "body_layers": len(body),
                "distinct_kinds": int(frame["kind_json"].nunique()),
                "stages": par.pp,
                "chunks": par.vpp,
                "body_layers_per_cell": dg.MetadataValue.md(markdown_table(cells.reset_index(names="chunk"))),
            },
        ),
    )
