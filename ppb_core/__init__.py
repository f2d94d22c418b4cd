"""ppb: pipeline-balance planning for large-model training (pure core, no Dagster)."""

__version__ = "0.1.0"
