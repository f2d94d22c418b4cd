"""Asset checks: blocking where a wrong table must not flow on to the stages after it.

Each check is one call to a `ppb_core.chain` predicate returning the problems it found.
"""

from collections.abc import Sequence

import dagster as dg
import pandas as pd

from pipelines.assets import layer_walk
from pipelines.partitions import run_configs
from ppb_core import chain


def problems_result(problems: Sequence[str]) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"problems": len(problems), "details": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems))},
    )


@dg.asset_check(
    asset=layer_walk,
    blocking=True,
    partitions_def=run_configs,
    additional_ins={"run_config": dg.AssetIn("run_config")},
    description="Every sub-model walked whole (one HEAD, all body layers, one TAIL); no empty cell.",
)
def layer_walk_is_whole(layer_walk: pd.DataFrame, run_config: pd.DataFrame) -> dg.AssetCheckResult:
    return problems_result(chain.walk_problems(run_config, layer_walk))


ALL_CHECKS = [layer_walk_is_whole]
