"""Code versions of the stages: one digest of the core sources each stage runs.

A stage's sources are the chain code it runs (its function, its artifacts' renderer, and the
helpers of `ppb_core.chain.stages` they call, each by its own source) and every other `ppb_core`
module they reach: the modules of the objects they name and, transitively, every module those
import (read from the sources, top-level imports, with the packages Python loads on the way).
Nothing a stage does not import counts: an edit to the `ppb` command, to another stage's
function or to a module no stage reaches leaves every version as it was. Editing a module a
stage reaches, even only its formatting, gives the stage a new version (a rerun costs little).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ppb_core
from ppb_core.chain import stages
from ppb_core.chain.stages import stage

ROOT_PACKAGE = "ppb_core"
CORE_DIR = Path(ppb_core.__file__).resolve().parent


def module_path(module: str) -> Path | None:
    """The source file of a `ppb_core` module or package (None if there is none)."""
    parts = module.split(".")[1:]
    base = CORE_DIR.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def read_source(path: Path) -> bytes:
    return path.read_bytes()


@functools.cache
def _imports(module: str, source: bytes) -> frozenset[str]:
    """The `ppb_core` modules *module*'s top-level statements import (submodules named in a
    `from package import name` included)."""
    found: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == ROOT_PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level or base.split(".")[0] != ROOT_PACKAGE:
                continue  # ppb_core imports absolutely (ruff's isort keeps it so)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if module_path(f"{base}.{a.name}") is not None)
    return frozenset(found)


def _with_packages(module: str) -> Iterator[str]:
    """The module and every package Python loads to import it."""
    parts = module.split(".")
    for end in range(1, len(parts) + 1):
        yield ".".join(parts[:end])


def core_closure(modules: set[str], read: Callable[[Path], bytes] = read_source) -> list[str]:
    """*modules* and every `ppb_core` module they load, directly or not, sorted."""
    seen: set[str] = set()
    pending = [m for module in modules for m in _with_packages(module)]
    while pending:
        module = pending.pop()
        path = module_path(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        for imported in _imports(module, read(path)):
            pending.extend(m for m in _with_packages(imported) if m not in seen)
    return sorted(seen)


def _chain_code(func: Callable[..., Any]) -> tuple[list[Callable[..., Any]], set[str], list[str]]:
    """The functions of `chain.stages` *func* runs (itself first), the other core modules whose
    objects they name, and the values of the plain constants of `chain.stages` they read."""
    functions: list[Callable[..., Any]] = []
    modules: set[str] = set()
    constants: list[str] = []
    pending = [func]
    while pending:
        current = pending.pop()
        if current in functions:
            continue
        functions.append(current)
        for name in sorted(_names(current.__code__)):
            value = current.__globals__.get(name)
            if value is None:
                continue
            owner = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "") or ""
            if owner == stages.__name__:
                if isinstance(value, types.FunctionType):
                    pending.append(value)
                elif not isinstance(value, type):
                    constants.append(f"{name}={value!r}")
            elif owner.split(".")[0] == ROOT_PACKAGE:
                modules.add(owner)
    return functions, modules, constants


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def stage_sources(name: str, read: Callable[[Path], bytes] = read_source) -> list[tuple[str, bytes]]:
    """What a stage's code version digests: (label, source) pairs in a fixed order."""
    step = stage(name)
    functions, modules, constants = _chain_code(step.func)
    if step.artifacts is not None and step.artifacts.__module__ != stages.__name__:
        modules.add(step.artifacts.__module__)
    elif step.artifacts is not None:
        more, more_modules, more_constants = _chain_code(step.artifacts)
        functions += [f for f in more if f not in functions]
        modules |= more_modules
        constants += more_constants
    sources = [(f"{f.__module__}.{f.__qualname__}", inspect.getsource(f).encode()) for f in functions]
    sources.append(("constants", "\n".join(sorted(set(constants))).encode()))
    for module in core_closure(modules - {stages.__name__}, read):
        path = module_path(module)
        assert path is not None
        sources.append((module, read(path)))
    return sources


def code_version(name: str, read: Callable[[Path], bytes] = read_source) -> str:
    """The stage's code version: a digest of its name and of every source it runs (see above)."""
    digest = hashlib.sha256(name.encode())
    for label, source in stage_sources(name, read):
        digest.update(label.encode() + b"\0" + source + b"\0")
    return digest.hexdigest()[:16]
