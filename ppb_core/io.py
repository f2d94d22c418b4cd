"""Files in and out: JSON read with one-line errors, and writes that leave the previous file whole
when they fail (write aside, then rename)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ppb_core.errors import InputError


def read_text(path: str | Path, directory_problem: str = "is a directory, not a file") -> str:
    """A text file's content; a missing, unreadable or non-UTF-8 file is an InputError naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, None, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, None, directory_problem) from None
    except OSError as err:
        raise InputError(path, None, f"cannot read: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise InputError(path, None, f"cannot read: not UTF-8 text ({err.reason} at byte {err.start})") from None


def read_json(path: str | Path, directory_problem: str = "is a directory, not a JSON file") -> Any:
    """The parsed JSON of a file; a missing, unreadable or malformed file is an InputError naming it."""
    text = read_text(path, directory_problem)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(path, None, f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})") from None


def read_yaml(path: str | Path, directory_problem: str = "is a directory, not a YAML file") -> Any:
    """The parsed YAML of a file; a missing, unreadable or malformed file is an InputError naming it
    (with the line and column of a syntax error)."""
    text = read_text(path, directory_problem)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid"
        raise InputError(path, None, f"not valid YAML{at}: {problem}") from None


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def silenced(fd: int) -> Iterator[None]:
    """File descriptor 1 or 2 sent to /dev/null for a while: libraries that print there themselves
    (HiGHS's banner, the torch profiler's lines) must not spoil `--json` output or the terminal."""
    (sys.stdout if fd == 1 else sys.stderr).flush()
    try:
        saved = os.dup(fd)
    except OSError:  # no such descriptor (a closed stream): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)
