"""Code versions of the stages: a digest of the core sources each stage runs."""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
from pathlib import Path

from ppb_core.chain.stages import stage


@functools.cache
def _core_imports(module: str) -> frozenset[str]:
    """The ppb_core modules *module* imports anywhere in its source (functions included)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return frozenset()
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("ppb_core"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ppb_core"):
            found.add(node.module)
            # `from ppb_core.memory import static` may name a submodule rather than a function.
            found.update(f"{node.module}.{a.name}" for a in node.names if _exists(f"{node.module}.{a.name}"))
    return frozenset(found)


@functools.cache
def _own_source() -> bytes:
    return Path(__file__).with_name("stages.py").read_bytes()


@functools.cache
def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def core_closure(modules: tuple[str, ...]) -> list[str]:
    """*modules* and every ppb_core module they import, directly or not, sorted."""
    seen: set[str] = set()
    pending = list(modules)
    while pending:
        module = pending.pop()
        if module in seen or not _exists(module):
            continue
        seen.add(module)
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:  # a package: its __init__ and parts
            pending.extend(
                f"{module}.{p.stem}"
                for p in Path(next(iter(spec.submodule_search_locations))).glob("*.py")
                if p.stem != "__init__"
            )
        pending.extend(_core_imports(module) - seen)
    return sorted(seen)


def code_version(name: str) -> str:
    """A digest of the stage's name, this module (the stage functions and the table helpers they
    share) and every core module the stage rests on.

    Editing any of them gives the stage a new code version, which is how Dagster tells which
    stored tables are stale; formatting-only edits count too (rerunning costs little).
    """
    step = stage(name)
    digest = hashlib.sha256(name.encode())
    digest.update(_own_source())
    for module in core_closure(step.core_modules):
        origin = importlib.util.find_spec(module).origin
        digest.update(module.encode())
        digest.update(Path(origin).read_bytes())
    return digest.hexdigest()[:16]
