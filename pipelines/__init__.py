"""Dagster glue for ppb: one asset per stage of `ppb_core.chain`, stored as Parquet per run config."""
