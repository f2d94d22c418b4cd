"""Where the run configs are read from and where the stage tables go, resolved against the project.

A relative path is taken from the project root, not the working directory, so `dagster dev`, the
CLI and the tests agree whatever folder they start in. An empty setting falls back to an
environment variable, then to the project's default folder.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import dagster as dg
from pydantic import Field

from ppb_core.config.run import config_hash

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR_ENV = "PPB_CONFIG_DIR"
STORAGE_DIR_ENV = "PPB_STORAGE_DIR"
# Characters Dagster refuses in partition keys.
INVALID_KEY_CHARACTERS = ("|", ",", "[", "]")


def project_path(setting: str, env: str, default: str) -> Path:
    """*setting*, else $env, else *default*; relative paths taken from the project root."""
    path = Path(setting or os.environ.get(env) or default).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path


def storage_location(setting: str) -> str:
    """The storage root as a string: a local folder (project-relative) or an fsspec URL kept as is."""
    chosen = setting or os.environ.get(STORAGE_DIR_ENV) or ""
    if "://" in chosen:
        return chosen
    return str(project_path(chosen, STORAGE_DIR_ENV, "storage"))


class RunConfigs(dg.ConfigurableResource):
    """The run configs: each `<stem>.yaml` in the folder is one partition, keyed by its stem."""

    config_dir: str = Field(
        default="", description=f"folder of run configs; empty: ${CONFIG_DIR_ENV}, else <project>/configs"
    )

    def directory(self) -> Path:
        return project_path(self.config_dir, CONFIG_DIR_ENV, "configs")

    def path(self, key: str) -> Path:
        """The run config file of a partition (it may have gone since the partition was added)."""
        return self.directory() / f"{key}.yaml"

    def discover(self) -> dict[str, Path]:
        """Every run config file with a usable partition key, by key, sorted."""
        return {
            path.stem: path
            for path in sorted(self.directory().glob("*.yaml"))
            if path.is_file() and not any(c in path.stem for c in INVALID_KEY_CHARACTERS)
        }

    def hashes(self) -> dict[str, str]:
        """Each run config's content hash (the file and every file it names), by key."""
        return {key: config_hash(path) for key, path in self.discover().items()}


def data_version(config_digest: str, code_version: str) -> str:
    """The run_config table's data version: its file contents and the code that read them."""
    return hashlib.sha256(f"{code_version}:{config_digest}".encode()).hexdigest()[:24]
