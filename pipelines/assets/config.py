"""The run config file, its resolved table, and the layer walk."""

import dagster as dg
import pandas as pd

from pipelines.assets.common import GROUP, markdown_table, stage_asset, table_metadata
from pipelines.freshness import CONFIG_HASH
from pipelines.partitions import run_configs
from pipelines.resources import RunConfigs, data_version
from ppb_core import chain
from ppb_core.config.run import config_hash
from ppb_core.errors import InputError
from ppb_core.tables.run import run_from_frame

# The YAML file itself, outside Dagster's control: the sensor records its content hash as the
# file's data version, so the UI marks run_config stale as soon as the file changes.
run_config_file = dg.AssetSpec(
    "run_config_file",
    partitions_def=run_configs,
    group_name=GROUP,
    description="A run config under configs/ (and the HuggingFace config.json files it names).",
    kinds={"yaml"},
)


@stage_asset("run_config", kinds={"python", "pandas", "parquet"}, deps=[run_config_file])
def run_config(context: dg.AssetExecutionContext, run_configs: RunConfigs) -> dg.Output[pd.DataFrame]:
    path = run_configs.path(context.partition_key)
    try:
        if not path.is_file():
            raise InputError(path, None, "file not found: the run config of this partition is gone")
        digest = config_hash(path)  # before reading: a change in between is seen as stale, not missed
        frame = chain.run_config(path)
    except InputError as err:  # bad input: one line in the UI, and no retry can mend it
        raise dg.Failure(
            description=err.line(),
            metadata={"file": str(err.source), "field": err.field or "", "problem": err.problem},
            allow_retries=False,
        ) from err
    run = run_from_frame(frame)
    par, train, device = run.parallel, run.training, run.device
    return dg.Output(
        frame,
        data_version=dg.DataVersion(data_version(digest, chain.code_version("run_config"))),
        metadata=table_metadata(
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
                "device_usable_mb": float(device.usable_mb),
            },
        ),
    )


@stage_asset("layer_walk", kinds={"python", "pandas", "parquet"})
def layer_walk(run_config: pd.DataFrame) -> dg.Output[pd.DataFrame]:
    frame = chain.layer_walk(run_config)
    par = run_from_frame(run_config).parallel
    body = frame[frame["node"] == "BODY"]
    cells = body.pivot_table(index="chunk", columns="stage", values="index", aggfunc="count", fill_value=0)
    cells.columns = [f"stage {s}" for s in cells.columns]
    return dg.Output(
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
