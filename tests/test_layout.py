"""The layout holds: one-way dependencies (import-linter's contracts in pyproject.toml), Dagster's
public API only, and no import hidden inside a function but an optional dependency's."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for folder in ("ppb_core", "pipelines", "tests", "bench") for p in (ROOT / folder).rglob("*.py"))
# What may be imported inside a function: a dependency some installs lack (the torch extra).
# The benchmarks may also import inside functions: they time imports themselves.
OPTIONAL = ("torch", "transformers", "dagster_celery")  # the torch and cluster extras


def test_import_linter_contracts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_no_private_dagster_module_is_imported() -> None:
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.startswith("dagster._")]
    assert found == []


def test_no_import_inside_a_function_but_an_optional_dependency() -> None:
    found = []
    for path in SOURCES:
        if path.parent.name == "bench":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    modules = [a.name for a in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    modules = [inner.module or ""]
                else:
                    continue
                found += [
                    f"{path.relative_to(ROOT)}:{inner.lineno} {m}" for m in modules if m.split(".")[0] not in OPTIONAL
                ]
    assert found == []
