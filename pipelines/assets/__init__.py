"""Every stage asset of the chain, in chain order, plus the run config files they read."""

from pipelines.assets.config import layer_walk, run_config, run_config_file

STAGE_ASSETS = [run_config, layer_walk]
ALL_ASSETS = [run_config_file, *STAGE_ASSETS]

__all__ = ["ALL_ASSETS", "STAGE_ASSETS", "layer_walk", "run_config", "run_config_file"]
