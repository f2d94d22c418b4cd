"""Fixtures shared across test modules."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest


@contextmanager
def _sqlite_home() -> Iterator[Path]:
    """A folder for an instance's SQLite files: on tmpfs where there is one, since every event
    commits with an fsync (a full chain run takes 2 s there, 4 to 9 s on this disk)."""
    shm = Path("/dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="ppb-test-", dir=shm if shm.is_dir() else None))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def sqlite_home() -> Callable[[], AbstractContextManager[Path]]:
    """`with sqlite_home() as folder:` a Dagster instance's home, removed afterwards."""
    return _sqlite_home
