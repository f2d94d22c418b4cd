"""Where the run configs are read from and where the stage tables go.

Each is a resource setting Dagster resolves when it launches a run: `dg.EnvVar("PPB_CONFIG_DIR")`
and `dg.EnvVar("PPB_STORAGE_DIR")` where those variables are set when the definitions load, the
project's `configs/` and `storage/` otherwise. A relative path is taken from the project root,
not the working directory, so `dagster dev`, the CLI and the tests agree whatever folder they
start in.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import dagster as dg
from pydantic import Field

from ppb_core.config.run import config_hash
from ppb_core.errors import InputError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR_ENV = "PPB_CONFIG_DIR"
STORAGE_DIR_ENV = "PPB_STORAGE_DIR"
# Characters Dagster refuses in partition keys.
INVALID_KEY_CHARACTERS = ("|", ",", "[", "]")


class SettingError(ValueError):
    """A PPB_* environment setting the definitions cannot use (`python -m pipelines` says it in one line)."""


def env_setting(name: str) -> str:
    """$name as a resource setting Dagster resolves at launch (`dg.EnvVar`), or "" (the default) when unset."""
    return dg.EnvVar(name) if name in os.environ else ""


def project_path(setting: str, default: str) -> Path:
    """*setting*, else *default*, relative paths taken from the project root."""
    path = Path(setting or default).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path


def storage_location(setting: str) -> str:
    """The storage root: an fsspec URL kept as it is, else a local folder (project-relative)."""
    return setting if "://" in setting else str(project_path(setting, "storage"))


class RunConfigs(dg.ConfigurableResource):
    """The run configs: each `<stem>.yaml` in the folder is one partition, keyed by its stem."""

    config_dir: str = Field(default="", description=f"folder of run configs (${CONFIG_DIR_ENV}); empty: configs/")

    def directory(self) -> Path:
        return project_path(self.config_dir, "configs")

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
        """Each run config's content hash (the file and every file it names), by key.

        A file that cannot be read at all gets a hash of what is wrong with it: its partition
        still exists, changes when the problem does, and its run says what is wrong.
        """
        return {key: file_version(path) for key, path in self.discover().items()}


def file_version(path: Path) -> str:
    """A run config's content hash, or of the reason it cannot be read."""
    try:
        return config_hash(path)
    except (InputError, OSError, UnicodeError) as err:  # gone, a folder, unreadable, not UTF-8
        return "unreadable-" + hashlib.sha256(str(err).encode()).hexdigest()


def data_version(config_digest: str, code_version: str) -> str:
    """The run_config table's data version: its file contents and the code that read them."""
    return hashlib.sha256(f"{code_version}:{config_digest}".encode()).hexdigest()[:24]
