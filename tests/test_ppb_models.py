"""PPB on the shipped run configs with our memory and time models: their figures, round trips, additive profiles."""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import MEMORY_KEY, OPTIONS, SWITCHES, TIME_KEY, LayerType
from ppb_core.model.walk import BODY, walk
from ppb_core.payload import sapp
from ppb_core.payload.describe import add_to_list, batch_loading_ms, describe, describe_layer, mb
from ppb_core.payload.front import price_option
from ppb_core.payload.profiling import measure_profile
from ppb_core.payload.run import describe_run
from ppb_core.tables.payload import descriptions_from_frame, descriptions_to_frame
from ppb_core.timing.pricer import TimeModel

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))
MB = 2**20


@pytest.fixture(scope="session")
def shipped():
    """Each shipped run config with its memory model, shared by the tests of this module."""
    runs = {}
    for name in CONFIGS:
        run = load_run_config(ROOT / "configs" / f"{name}.yaml")
        runs[name] = (run, MemoryModel(run))
    return runs


@pytest.fixture(scope="session")
def time_models(shipped):
    return {name: TimeModel(run) for name, (run, _) in shipped.items()}


def _expected_memory(memory: MemoryModel, layer, timed: bool) -> dict[str, int]:
    """The memory keys of a description, from the memory model's split and activations (`_ppb.py` `_body_memory`)."""
    static = memory.static_bytes(layer)
    if layer.node != BODY:
        state, switches = memory.option_state(layer, "NONE")
        ones, _, _ = memory.buffers(layer, state, switches).split(memory.many)
        # and what the end adds to a stage of bodies' workspaces (the output layer's TE dummy weight gradient)
        added = mb(memory.end_workspace_bytes(layer))
        return {"memory_parameter": mb(static) + mb(memory.activation_bytes(layer, state, switches) + ones) + added}
    options = OPTIONS if timed else ("NONE", "SLCT", "FULL")
    activations = memory.option_activation_bytes(layer)
    splits = {option: memory.buffer_split(layer, *memory.option_state(layer, option)) for option in options}
    expected = {"memory_parameter": mb(static) + mb(max(once for _, _, once in splits.values()))}
    for option in options:
        expected[MEMORY_KEY[option]] = mb(activations[option]) + mb(splits[option][1])
    return expected


@pytest.mark.parametrize("timed", [False, True], ids=["untimed", "timed"])
@pytest.mark.parametrize("name", CONFIGS)
def test_memory_keys_are_the_memory_models_figures_in_whole_mb(shipped, time_models, name, timed):
    run, memory = shipped[name]
    pricer = time_models[name] if timed else None
    for slot in walk(run).distinct():
        layer = next(
            layer
            for layer in walk(run)
            if (layer.model_name, layer.node, layer.kind) == (slot.model_name, slot.node, slot.kind)
        )
        desc = describe_layer(layer, memory, pricer, many=memory.many, configured=run.switches(layer.model_name))
        figures = {key: value for key, value in desc.items() if key.startswith("memory")}
        assert figures == _expected_memory(memory, layer, timed), (name, slot.node, slot.kind.name)


@pytest.mark.parametrize("name", CONFIGS)
def test_each_distinct_kind_measured_once_equals_every_layer_described(shipped, time_models, name):
    run, memory = shipped[name]
    times = time_models[name]
    every: list[dict] = []
    layers = list(walk(run))
    # Megatron's get_batch broadcasts ride on the cells that read the batch (the HEAD's and the TAIL's),
    # given to each of those layers as `describe` gives them
    loading = batch_loading_ms(run, layers, times)
    for layer in layers:
        desc = describe_layer(
            layer,
            memory,
            times,
            many=memory.many,
            configured=run.switches(layer.model_name),
            loading_ms=loading.get(layer, 0.0),
        )
        add_to_list(every, desc)
    described = describe(run, memory, times)
    assert described == every
    assert sum(d["nb_layer"] for d in described if d["type"] == BODY) == run.total_body_layers


@pytest.mark.parametrize("timed", [False, True], ids=["untimed", "timed"])
@pytest.mark.parametrize("name", CONFIGS)
def test_descriptions_come_back_exactly_through_parquet_and_sapp_json(shipped, time_models, name, timed, tmp_path):
    run, memory = shipped[name]
    if name == "qwen2.5-vl-7b" and not timed:
        # Untimed, the tower's window and full-attention blocks keep the same memory and merge into
        # one 32-layer description, which cannot pair one for one with the decoder's 28 layers.
        with pytest.raises(InputError, match="vit BODY_0 has 32 and llm BODY_1 has 28 layers: 4 would be lost"):
            describe_run(run, memory, timed=False)
        return
    descriptions = describe_run(run, memory, time_models[name], timed=timed)
    frame = descriptions_to_frame(descriptions)
    frame.to_parquet(tmp_path / "descriptions.parquet", index=False)
    stored = pd.read_parquet(tmp_path / "descriptions.parquet")
    pd.testing.assert_frame_equal(stored, frame)
    assert json.dumps(descriptions_from_frame(stored)) == json.dumps(descriptions)
    sapp.write_layers_description(tmp_path / "layers.json", descriptions)
    assert json.dumps(sapp.read_layers_description(tmp_path / "layers.json")) == json.dumps(descriptions)


# --- profiles priced by addition against the memory model itself ----------------------------------


def _settings(names):
    return [frozenset(chosen) for size in range(len(names) + 1) for chosen in combinations(names, size)]


def _profiled_kinds():
    """(config, kind name): a dense and a MoE layer (128 settings), DeepSeek's two MLA kinds (256)."""
    return [
        ("llama3-8b", "dense"),
        ("qwen2.5-7b", "dense"),
        ("mixtral-8x7b", "moe"),
        ("deepseek-v3", "dense_mla"),
        ("deepseek-v3", "moe_mla"),
    ]


def _state(recompute):
    if recompute is None:
        return LayerType.FULL_REC_LAYER, None
    if not recompute:
        return LayerType.NOT_REC_LAYER, None
    return LayerType.SEL_REC_LAYER, {name: int(name not in recompute) for name in SWITCHES}


@pytest.fixture(scope="session")
def reference_rule_run():
    """Llama-3-8B at ZeRO-2 over 8 stages, buffers combined by MemEst's max(dp, tp, cp) + ep (evaluators/comm.py).

    The constant 416 MB gradient bucket hides the growing 64 MB-per-micro-batch gathers up to 6
    in flight; the split between 1 and many = 8 over-charges in between: the profiles' excess.
    """
    raw = yaml.safe_load((ROOT / "configs" / "llama3-8b.yaml").read_text())
    raw["parallel"].update(zero=2, pp=8, dp=4)
    raw["framework"] = "mindformers"  # SAPP's conventions: the gathers kept, the bucket a layer's own
    run = parse_run_config(raw, ROOT / "configs" / "llama3-8b.yaml", ROOT / "configs")
    return run, MemoryModel(run, buffer_rule="reference")


def _check_additive(run, memory, times, layer, rel=0.0):
    """Every setting's price against the memory and time models.

    Memory to the byte where *rel* is 0. Backward times to 1e-12: the time model re-runs, per
    setting, the union of what each switch alone re-runs (disjoint sets), so the sum is exact but
    for the order of floating-point additions.
    """
    many = memory.many
    counts = range(1, many + 1)
    profile = measure_profile(layer, memory, times, many=many, counts=counts, configured=run.switches(layer.model_name))
    assert (profile.forward_time, profile.plain.backward_time) == times.layer_times(layer, LayerType.NOT_REC_LAYER)
    settings = [*_settings(profile.acting()), None]
    for recompute in settings:
        option = price_option(profile, recompute)
        state, switches = _state(recompute)
        for in_flight in counts:
            held = sum(memory.dynamic_bytes(layer, state, switches, in_flight))
            assert option.memory(in_flight) == pytest.approx(held, rel=rel, abs=0), (recompute, in_flight)
        backward = times.layer_times(layer, state, switches)[1]
        assert option.backward_time == pytest.approx(backward, rel=1e-12, abs=0), recompute
        if recompute is not None:
            assert option.working_extra == memory.working_extra_bytes(layer, state, switches, 2, True), recompute
            assert option.first_working_extra == memory.working_extra_bytes(layer, state, switches, 1, False)
    return profile, settings


@pytest.mark.parametrize(("name", "kind_name"), _profiled_kinds())
def test_every_switch_setting_priced_by_addition_is_what_the_models_give(shipped, time_models, name, kind_name):
    # Memory exactly, at every count from 1 to many = max(2, min(pp, m)) in flight: 4 for Llama, 16 for DeepSeek.
    run, memory = shipped[name]
    layer = next(layer for layer in walk(run) if layer.node == BODY and layer.kind.name == kind_name)
    profile, settings = _check_additive(run, memory, time_models[name], layer)
    assert len(profile.acting()) == (8 if kind_name.endswith("mla") else 7)
    assert len(settings) == 2 ** len(profile.acting()) + 1  # 129, or 257 with attUp


def test_the_excess_corrects_the_split_where_a_constant_buffer_hides_a_growing_one(reference_rule_run):
    run, memory = reference_rule_run
    layer = next(layer for layer in walk(run) if layer.node == BODY)
    # The split divides by many − 1 = 7: the sums may differ from the model in the last bit.
    profile, _ = _check_additive(run, memory, TimeModel(run), layer, rel=1e-15)
    # Buffers max(416.03125, 64k) MB: the split runs from 416.03125 at 1 to 512 at 8, i.e.
    # 13.709... per micro-batch; at k = 2..6 the bucket alone is held, so the split over-charges
    # (k − 1)·(512 − 416.03125)/7 MB, and at 7 it charges 498.29 where 448 are held.
    per_micro_batch = (512 - 416.03125) / 7
    expected = [(count - 1) * per_micro_batch * MB for count in range(2, 7)]
    expected.append((416.03125 + 6 * per_micro_batch - 448) * MB)
    assert profile.counts == (2, 3, 4, 5, 6, 7)
    assert profile.plain.excess == pytest.approx(expected, rel=1e-12)
    assert profile.alone["gather"].excess == (0,) * 6  # without the gathers, the bucket alone: constant


@pytest.mark.parametrize("name", CONFIGS)
def test_time_keys_are_the_time_models_figures_until_scaled(shipped, time_models, name):
    run, memory = shipped[name]
    times = time_models[name]
    for slot in walk(run).distinct():
        layer = next(
            layer
            for layer in walk(run)
            if (layer.model_name, layer.node, layer.kind) == (slot.model_name, slot.node, slot.kind)
        )
        desc = describe_layer(layer, memory, times, many=memory.many, configured=run.switches(layer.model_name))
        priced = times.option_times(layer)
        assert desc["forward_time"] == desc["time"] == priced["NONE"][0]
        options = OPTIONS if layer.node == BODY else ("NONE",)
        assert {TIME_KEY[o]: desc[TIME_KEY[o]] for o in options} == {TIME_KEY[o]: priced[o][1] for o in options}


@pytest.mark.parametrize("name", CONFIGS)
def test_the_balancer_reads_the_final_descriptions(shipped, time_models, name, tmp_path):
    run, memory = shipped[name]
    final = describe_run(run, memory, time_models[name])
    sapp.write_layers_description(tmp_path / "layers.json", final)
    layers = sapp.read_layer_set(tmp_path / "layers.json")
    # A combined body's layer is one layer of each of its sub-models.
    walked = sum(body.nb_layer * max(1, len(body.models)) for body in layers.bodies)
    assert layers.bodies[0].forward_time == 1.0 and walked == run.total_body_layers
    assert {"NONE", "FULL"} <= set(layers.options)
