"""The docs stand alone: every link between the repository's files resolves inside it, and nothing
in it cites the notes a planning session kept outside the repository (they ship with no release)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from ppb_core.config.run import Parallel, TimingOptions

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("bench", "configs", "deploy", "docs", "pipelines", "ppb_core", "tests")
TEXT = {".md", ".py", ".yaml", ".yml", ".toml", ".json", ".txt"}
# Files of the planning notes, never part of the repository: a citation of one resolves nowhere.
OUTSIDE = ("reference.md", "overview.md", "targets.md", "../shared", "/work/")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def repository_files(suffixes: set[str]) -> list[Path]:
    found = [p for p in ROOT.glob("*") if p.is_file() and p.suffix in suffixes]
    for folder in FOLDERS:
        found += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in suffixes]
    return sorted(p for p in found if "__pycache__" not in p.parts)


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for doc in repository_files({".md"}):
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if ":" in target:  # https://..., mailto:, data: (a public source or inline)
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_nothing_cites_the_planning_notes_outside_the_repository() -> None:
    found = []
    for path in repository_files(TEXT):
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{path.relative_to(ROOT)}: {name}" for name in OUTSIDE if name in text]
    assert found == []


def test_docs_timing_shows_every_timing_field_with_its_default() -> None:
    """docs/timing.md's run-config example names every `timing` field (TimingOptions), each line
    saying its default: a field added without a line there is found by no reader."""
    text = (ROOT / "docs" / "timing.md").read_text(encoding="utf-8")
    block = text[text.index("device: {name: a100-80gb") : text.index("## Calibration")]
    lines = {line.split(":")[0].strip(): line for line in block.splitlines() if line.startswith("  ")}
    missing = [name for name in TimingOptions.model_fields if name not in lines]
    assert missing == []
    unsaid = [name for name in TimingOptions.model_fields if name != "overlap" and "default" not in lines[name]]
    assert unsaid == []


def test_the_docs_yaml_examples_parallel_and_timing_sections_validate() -> None:
    """Every ```yaml example in docs/ whose `parallel` or `timing` section is a mapping validates as that
    section (`Parallel`, `TimingOptions`): an example a reader copies is one the run config takes."""
    sections = {"parallel": Parallel, "timing": TimingOptions}
    found = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for block in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            line = text[: block.start()].count("\n") + 1
            for document in yaml.safe_load_all(block.group(1)):
                for name, model in sections.items():
                    given = document.get(name) if isinstance(document, dict) else None
                    if not isinstance(given, dict):
                        continue
                    try:
                        model.model_validate(given)
                    except ValidationError as err:
                        found.append(f"{path.name}:{line} {name}: {err.errors()[0]['msg']}")
    assert found == []
