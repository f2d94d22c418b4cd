"""The `ppb` command: every stage of the chain without Dagster."""
