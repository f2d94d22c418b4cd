"""One partition per run config, keyed by its file stem, kept in step with `configs/` by a sensor."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import dagster as dg

PARTITIONS_NAME = "run_configs"
run_configs = dg.DynamicPartitionsDefinition(name=PARTITIONS_NAME)


@dataclass(frozen=True)
class PartitionChanges:
    """How the run config files differ from the partitions and from the hashes last seen."""

    added: tuple[str, ...]  # a file with no partition yet
    removed: tuple[str, ...]  # a partition whose file is gone
    changed: tuple[str, ...]  # a file whose content hash is not the one last seen (new files too)


def partition_changes(
    hashes: Mapping[str, str], partitions: Iterable[str], last_seen: Mapping[str, str]
) -> PartitionChanges:
    """Compare the files (key → content hash) with the partitions and the hashes last seen."""
    known = set(partitions)
    return PartitionChanges(
        added=tuple(sorted(set(hashes) - known)),
        removed=tuple(sorted(known - set(hashes))),
        changed=tuple(sorted(key for key, digest in hashes.items() if last_seen.get(key) != digest)),
    )
