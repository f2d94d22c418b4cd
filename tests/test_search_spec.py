"""The search spec: what it accepts, and bad input as one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ppb_core.errors import InputError
from ppb_core.search.spec import load_search_spec, parse_search_spec

DATA = Path(__file__).parent / "data" / "search"
ROOT = Path(__file__).parent.parent


def tiny() -> dict:
    return yaml.safe_load((DATA / "tiny-dense.yaml").read_text())


def test_the_tiny_spec_loads_with_its_batch_and_defaults() -> None:
    spec = parse_search_spec(tiny(), DATA / "tiny-dense.yaml", DATA)
    assert spec.name == "tiny-dense"
    assert spec.global_batch == 24
    assert spec.seq_length == 4096
    assert spec.specs["llm"].num_layers == 6
    # megatron's default recompute setting: its selective recompute (core_attn)
    assert spec.recompute_settings == [{"granularity": "selective"}]
    assert spec.fixed_training == {"seq_length": 4096, "dtype": "bf16", "optimizer": "adam"}


def test_global_batch_in_tokens_is_sequences_of_seq_length() -> None:
    raw = tiny()
    raw["training"] = {"seq_length": 4096, "global_batch_tokens": 4096 * 24}
    assert parse_search_spec(raw, "s.yaml", DATA).global_batch == 24


def test_every_shipped_search_loads() -> None:
    for path in sorted((ROOT / "searches").glob("*.yaml")):
        spec = load_search_spec(path)
        assert spec.devices >= 1 and spec.specs


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda raw: raw.update(extra=1), "extra", "unknown field"),
        (lambda raw: raw["training"].update(micro_batches=4), "training.micro_batches", "chosen by the search"),
        (lambda raw: raw["training"].update(recompute="full"), "training.recompute", "chosen by the search"),
        (lambda raw: raw["training"].update(global_batch_tokens=8), "training", "exactly one of"),
        (lambda raw: raw["training"].pop("global_batch"), "training", "exactly one of"),
        (lambda raw: raw["training"].update(global_batch=0), "training.global_batch", "positive integer"),
        (lambda raw: raw["training"].update(dtype="fp8"), "training.dtype", "bf16"),
        (lambda raw: raw["training"].update(seq_lenght=8), "training.seq_lenght", "unknown field"),
        (lambda raw: raw.update(devices=0), "devices", "greater than 0"),
        (lambda raw: raw["limits"].update(tp=[]), "limits.tp", "at least 1"),
        (lambda raw: raw["limits"].update(schedules=["zigzag"]), "limits.schedules.0", "1f1b"),
        (lambda raw: raw["limits"].update(recompute=[{"mode": "full"}]), "limits.recompute.0", "torchtitan's words"),
        (lambda raw: raw.update(framework="jax"), "framework", "megatron"),
        (lambda raw: raw["device"].update(reserved_mb=9000), "device.memory_mb", "no memory left"),
        (lambda raw: raw["search"].update(top=0), "search.top", "greater than 0"),
    ],
)
def test_bad_specs_are_one_line_naming_the_field(change, field: str, words: str) -> None:
    raw = tiny()
    change(raw)
    with pytest.raises(InputError) as caught:
        parse_search_spec(raw, "bad.yaml", DATA)
    assert caught.value.source == "bad.yaml"
    assert caught.value.field == field
    assert words in caught.value.problem
    assert "\n" not in caught.value.line()


def test_global_batch_tokens_must_be_whole_sequences() -> None:
    raw = tiny()
    raw["training"] = {"seq_length": 4096, "global_batch_tokens": 4096 * 24 + 1}
    with pytest.raises(InputError, match=r"training\.global_batch_tokens: .* not a whole number"):
        parse_search_spec(raw, "bad.yaml", DATA)


def test_a_missing_model_file_names_it(tmp_path: Path) -> None:
    raw = tiny()
    raw["models"] = [{"name": "llm", "config": "nowhere.json"}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match=r"nowhere\.json"):
        load_search_spec(path)


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("devices: [1,\n")
    with pytest.raises(InputError, match="not valid YAML at line"):
        load_search_spec(path)
