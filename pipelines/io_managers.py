"""Stage tables as Parquet, one file per asset and partition, replaced atomically.

`<base>/<asset>/<partition>.parquet`, the same layout and bytes `ppb plan` writes (both go
through `ppb_core.chain`), plus the artifacts a stage renders next to its table (the SAPP JSON,
the report's image and summary). Every file is written aside and renamed into place, so a run
that fails leaves the previous files whole; the temporaries a killed run left behind are removed
when the next run sets the IO manager up.
"""

from __future__ import annotations

import uuid

import dagster as dg
from pydantic import Field
from upath import UPath

from pipelines.columns import column_schema
from pipelines.resources import STORAGE_DIR_ENV, storage_location
from ppb_core import chain
from ppb_core.io import atomic_write_bytes, remove_stale_temporaries
from ppb_core.tables.schema import Stored, rows_of

LOCAL_PROTOCOLS = ("", "file", "local")


def replace_file(path: UPath, data: bytes) -> None:
    """Write *data* beside *path*, then rename it over *path*; never a half-written *path*."""
    if path.protocol in LOCAL_PROTOCOLS:
        atomic_write_bytes(path.path, data)
        return
    aside = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")  # object stores: best effort
    try:
        aside.write_bytes(data)
        aside.fs.mv(aside.path, path.path)
    finally:
        if aside.exists():
            aside.unlink()


class PandasParquetIOManager(dg.UPathIOManager):
    extension = chain.PARQUET

    def dump_to_path(self, context: dg.OutputContext, obj: Stored, path: UPath) -> None:
        # Render everything before writing anything, so a failing render leaves all files as they were.
        files = chain.stage_files(self._stage(context), obj)
        for suffix, data in files.items():
            replace_file(self._sibling(path, suffix), data)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> Stored:
        return chain.from_parquet_bytes(path.read_bytes(), source=str(path))

    def get_metadata(self, context: dg.OutputContext, obj: Stored) -> dict[str, dg.RawMetadataValue]:
        frame = rows_of(obj)
        metadata: dict[str, dg.RawMetadataValue] = {
            "dagster/row_count": len(frame),
            "dagster/column_schema": column_schema(chain.stage(self._stage(context)).schema, frame),
        }
        for suffix in chain.stage_artifact_suffixes(self._stage(context)):
            metadata[f"file{suffix}"] = dg.MetadataValue.path(str(self._sibling(self._output_path(context), suffix)))
        return metadata

    def _output_path(self, context: dg.OutputContext) -> UPath:
        if context.has_asset_partitions:
            return next(iter(self._get_paths_for_partitions(context).values()))
        return self._get_path(context)

    @staticmethod
    def _stage(context: dg.OutputContext) -> str:
        return context.asset_key.path[-1]

    @staticmethod
    def _sibling(path: UPath, suffix: str) -> UPath:
        return path.with_name(path.name.removesuffix(chain.PARQUET) + suffix)


class ParquetIOManager(dg.ConfigurableIOManagerFactory):
    """Parquet files under a base folder (or fsspec URL), one per asset and partition."""

    base_dir: str = Field(default="", description=f"where the tables go (${STORAGE_DIR_ENV}); empty: storage/")

    def create_io_manager(self, context: dg.InitResourceContext) -> PandasParquetIOManager:
        base = UPath(storage_location(self.base_dir))
        if base.protocol in LOCAL_PROTOCOLS:
            # A killed write leaves its `.NAME.PID.X.tmp` beside the table; its process is gone now.
            for removed in remove_stale_temporaries(base.path):
                if context.log is not None:
                    context.log.info(f"removed {removed}, a temporary file a killed write left behind")
        return PandasParquetIOManager(base_path=base)
