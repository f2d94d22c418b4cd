"""A stored table's columns as Dagster shows them, from the table's schema in `ppb_core.tables`."""

from __future__ import annotations

import dagster as dg
import pandas as pd

from ppb_core.tables.schema import Schema


def column_schema(schema: Schema, frame: pd.DataFrame | None = None) -> dg.TableSchema:
    """The table's columns as Dagster shows them: name, type, and the schema's words (with the unit)."""
    names = list(frame.columns) if frame is not None else schema.names
    dtypes = dict(frame.dtypes.items()) if frame is not None else schema.dtypes
    columns = []
    for name in names:
        description, unit = schema.describe(str(name))
        columns.append(
            dg.TableColumn(str(name), str(dtypes[name]), description=f"{description} [{unit}]" if unit else description)
        )
    return dg.TableSchema(columns=columns)
