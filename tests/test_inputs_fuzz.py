"""The fuzzer over run configs, HuggingFace config.json files, SAPP layers.json files, calibration CSVs,
torchtitan job TOMLs (`ppb import torchtitan`), Megatron-LM launch scripts (`ppb import megatron`), search
specs (`ppb search`), and Megatron-LM launch scripts and MindFormers plans (`ppb check --plan`): whatever the
file, `ppb` succeeds with strict JSON or refuses in one line with exit status 2, writes nothing, raises nothing
else, and finishes (tests/fuzz_inputs.py holds the strategies and the property).

Few examples and derandomized here, so the suite stays quick and repeatable; `python bench/inputs.py
--examples N` runs the same property on fresh random examples.
"""

from __future__ import annotations

import fuzz_inputs as fuzz
import pytest
from hypothesis import HealthCheck, given, settings

SUITE = settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow], database=None
)


@SUITE
@given(fuzz.run_configs())
def test_any_run_config(data: bytes) -> None:
    fuzz.run_config_command(data)


@SUITE
@given(fuzz.hf_configs())
def test_any_hf_config(data: bytes) -> None:
    fuzz.hf_command(data)


@settings(SUITE, max_examples=25)
@given(fuzz.layer_files(), fuzz.balance_flags())
def test_any_layers_json(data: bytes, flags: list[str]) -> None:
    fuzz.layers_command(data, flags)


@settings(SUITE, max_examples=30)
@given(fuzz.launch_scripts())
def test_any_launch_script(data: bytes) -> None:
    fuzz.plan_command(data)


@settings(SUITE, max_examples=30)
@given(fuzz.mindformers_plans())
def test_any_mindformers_plan(data: bytes) -> None:
    fuzz.mindformers_command(data)


@settings(SUITE, max_examples=30)
@given(fuzz.calibration_files())
def test_any_calibration_file(file: tuple[str, bytes]) -> None:
    fuzz.calibration_command(*file)


@settings(SUITE, max_examples=30)
@given(fuzz.job_tomls())
def test_any_job_toml(data: bytes) -> None:
    fuzz.import_toml_command(data)


@settings(SUITE, max_examples=20)
@given(fuzz.launch_scripts())
def test_any_launch_script_imported(data: bytes) -> None:
    fuzz.import_megatron_command(data)


@settings(SUITE, max_examples=15)
@given(fuzz.search_specs())
def test_any_search_spec(data: bytes) -> None:
    fuzz.search_command(data)


@pytest.mark.parametrize("name", sorted(fuzz.FOUND))
def test_found_failures_stay_fixed(name: str) -> None:
    """The inputs on which the property failed, replayed (fuzz_inputs.FOUND)."""
    command, *arguments = fuzz.FOUND[name]
    assert command(*arguments) in (0, 2)
