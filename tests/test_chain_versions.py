"""Code versions you can predict: a stage's version changes exactly when a source it runs changes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ppb_core import chain
from ppb_core.chain.versions import CORE_DIR, read_source

STAGES = [step.name for step in chain.STAGES]


def versions(read: Callable[[Path], bytes] = read_source) -> dict[str, str]:
    return {name: chain.code_version(name, read) for name in STAGES}


def edited(*targets: Path) -> Callable[[Path], bytes]:
    """Sources as on disk, but *targets* with one more comment line (an edit that changes no behaviour)."""

    def read(path: Path) -> bytes:
        data = path.read_bytes()
        return data + b"\n# edited\n" if path in targets else data

    return read


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in before if before[name] != after[name]}


def test_versions_are_stable_and_distinct() -> None:
    first = versions()
    assert first == versions()
    assert len(set(first.values())) == len(first)


def test_a_cli_only_edit_stales_nothing() -> None:
    before = versions()
    cli = sorted((CORE_DIR / "cli").glob("*.py"))
    assert len(cli) >= 8
    assert changed(before, versions(edited(*cli))) == set()


@pytest.mark.parametrize(
    ("module", "stages"),
    [
        # The report's renderer runs in plan_report alone (its artifacts).
        ("report/render.py", {"plan_report"}),
        # MindFormers' yaml and the plan's outputs: the balancer's stage computes them, and the report
        # says the yaml keys only where they are the plan's words (`says_yaml_keys`, as `ppb balance`).
        ("balance/outputs.py", {"pipeline_plan", "plan_report"}),
        # combine, withdraw and scale: the three post-processing stages, and the two that turn the
        # balancer's relative times back into seconds (`estimate.plan` takes the time unit scaling
        # divided by, the combined body's forward). Not describing or profiling (payload/describe.py
        # does not import it).
        (
            "payload/postprocess.py",
            {"combined_descriptions", "withdrawn_descriptions", "scaled_descriptions", "pipeline_plan", "plan_report"},
        ),
        # Reading a run config: every stage that parses the run_config table; not withdrawal and
        # scaling, pure transforms of the descriptions table.
        ("config/run.py", set(STAGES) - {"withdrawn_descriptions", "scaled_descriptions"}),
        # The time model: the stages that price times (the balancer's stage prices its plan's
        # iteration in seconds, `estimate.plan.plan_iterations`), and not the memory table, the
        # walk or the post-processing.
        ("timing/pricer.py", {"layer_times", "switch_profiles", "layer_descriptions", "pipeline_plan", "plan_report"}),
    ],
)
def test_an_edit_to_a_core_module_stales_exactly_the_stages_that_run_it(module: str, stages: set[str]) -> None:
    assert changed(versions(), versions(edited(CORE_DIR / module))) == stages
