"""Fakes of the memory and time models whose figures can be worked out by hand (as in hyper-parallel's
test_ppb.py).

The PPB tests import these (`from test_ppb_fakes import ...`); the tests here pin the fakes
themselves to the figures test_ppb.py states, so a PPB test that fails points at PPB, not at its fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.model.switches import SWITCHES, LayerType, normalized
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, walk

MB = 2**20
NOT, SEL, FULL = LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER
EMB, OUT = LayerType.EMBEDDING_LAYER, LayerType.OUTPUT_LAYER
NON_GATHER = tuple(name for name in SWITCHES if name != "gather")


class FakeMemory:
    """test_ppb.py's `_Memory`, on our protocol.

    FULL keeps 1 MB per micro-batch and holds dp MB of buffers. Otherwise a layer keeps
    (8 − freed) MB per micro-batch, freed being the ops other than gather a selective layer
    recomputes, and holds max(dp, gathered) of buffers, gathered being 2 MB per micro-batch
    unless a selective layer recomputes the gathers. Static: 4 MB. Working sets: none.
    """

    def __init__(self, dp_mb: float = 0, static_mb: float = 4) -> None:
        self.dp = dp_mb * MB
        self.static = static_mb * MB
        self.calls: list[tuple[Layer, LayerType, dict[str, int] | None, int]] = []

    def static_bytes(self, layer: Layer) -> float:
        return self.static

    def end_workspace_bytes(self, layer: Layer) -> float:
        return 0.0

    def dynamic_bytes(
        self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None, in_flight: int
    ) -> tuple[float, float]:
        self.calls.append((layer, state, None if switches is None else dict(switches), in_flight))
        if state is FULL:
            return 1 * MB * in_flight, self.dp
        selective = state is SEL
        stated = normalized(switches)
        freed = sum(1 for name in NON_GATHER if selective and not stated[name])
        gathered = 0 if selective and not stated["gather"] else 2 * MB * in_flight
        return (8 - freed) * MB * in_flight, max(self.dp, gathered)

    def working_extra_bytes(self, layer, state, switches, gathered, on_saved) -> float:
        return 0.0

    def census_terms(self, layer, state, switches):
        return None


class FakePricer:
    """test_ppb.py's `_Pricer`: (forward, backward) EMB (1, 2), OUT (3, 6), NOT (10, 20), FULL (10, 30);
    SEL (10, 20 + 1 per op recomputed other than gather + 3 if gather is recomputed)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Layer, LayerType, dict[str, int] | None]] = []

    def layer_times(self, layer: Layer, state: LayerType, switches: Mapping[str, int] | None = None):
        self.calls.append((layer, state, None if switches is None else dict(switches)))
        if state is EMB:
            return 1, 2
        if state is OUT:
            return 3, 6
        if state is FULL:
            return 10, 30
        if state is SEL:
            stated = normalized(switches)
            return 10, 20 + sum(1 for name in NON_GATHER if not stated[name]) + (3 if not stated["gather"] else 0)
        return 10, 20


class CensusMemory:
    """A memory model with a census: what it keeps and what its backward holds, per switch.

    Kept (MB at one micro-batch): 40 plain, less what each recomputed op frees (softmax 4, ffAct
    8, normOp 15, headCast 2, attBMM 3; dropout, gather and attUp nothing). The backward holds
    30 MB of the census's parts whatever the setting. Its working set as warm-up ends is what it
    holds beyond what is kept, max(0, 30 − kept), plus the 50 − kept it rebuilds, so it is not
    linear in kept: the clamp at 0 is what the census clamp of sapp_nd/recompute/profile.py restores.
    Buffers: 2 MB once.
    """

    FREES: ClassVar[dict[str, int]] = {"softmax": 4, "ffAct": 8, "normOp": 15, "headCast": 2, "attBMM": 3}
    HELD = 30

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def kept(self, state: LayerType, switches: Mapping[str, int] | None) -> float:
        if state is FULL:
            return 0
        stated = normalized(switches)
        freed = sum(mb for name, mb in self.FREES.items() if state is SEL and not stated[name])
        return 40 - freed

    def static_bytes(self, layer: Layer) -> float:
        return 4 * MB

    def end_workspace_bytes(self, layer: Layer) -> float:
        return 0.0

    def dynamic_bytes(self, layer, state, switches, in_flight):
        self.calls.append((state, None if switches is None else dict(switches), in_flight))
        activation = (self.kept(state, switches) if state is not FULL else 1) * MB * in_flight
        return activation, 2 * MB

    def working_extra_bytes(self, layer, state, switches, gathered, on_saved):
        kept = self.kept(state, switches)
        if not on_saved:
            return (self.HELD + 50 - kept) * MB
        return (max(0, self.HELD - kept) + 50 - kept) * MB

    def census_terms(self, layer, state, switches):
        if state is FULL:
            return None
        return self.kept(state, switches) * MB, self.HELD * MB


SPEC = {
    "vocab_size": 1024,
    "hidden_size": 256,
    "num_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
}
MLA_SPEC = {
    **SPEC,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
}


def small_run(models=(("a", SPEC),), recompute=None, pp=2, micro_batches=4, combined=None):
    """A run config of small models, for the real layer records the fakes are asked about."""
    raw = {
        "models": [{"name": name, "spec": spec} for name, spec in models],
        "parallel": {"pp": pp},
        "training": {"seq_length": 256, "micro_batches": micro_batches, "recompute": recompute or {}},
        "device": {"name": "h100-80gb"},
    }
    if combined is not None:
        raw["ppb"] = {"combined": combined}
    return parse_run_config(raw, "fake.yaml")


def layer_of(node: str = BODY, model: str = "a", spec=SPEC) -> Layer:
    run = small_run(models=((model, spec),))
    return next(layer for layer in walk(run) if layer.node == node)


# --- the fakes themselves ------------------------------------------------------------------------


def test_fake_memory_follows_its_definition():
    body = layer_of()
    memory = FakeMemory(dp_mb=5)
    # Plain at 3 in flight: 8 MB·3 = 24 MB kept; buffers max(5, 2·3) = 6 MB.
    assert memory.dynamic_bytes(body, NOT, None, 3) == (24 * MB, 6 * MB)
    # Selective, softmax and gather recomputed, at 2: (8 − 1)·2 = 14 MB; buffers max(5, 0) = 5 MB.
    setting = dict(normalized(None), softmax=0, gather=0)
    assert memory.dynamic_bytes(body, SEL, setting, 2) == (14 * MB, 5 * MB)
    # Full at 4: 1·4 MB kept, dp held.
    assert memory.dynamic_bytes(body, FULL, None, 4) == (4 * MB, 5 * MB)


def test_fake_pricer_follows_its_definition():
    body = layer_of()
    pricer = FakePricer()
    assert pricer.layer_times(body, SEL, dict(normalized(None), softmax=0, gather=0)) == (10, 24)  # 20 + 1 + 3
    assert [pricer.layer_times(body, state) for state in (EMB, OUT, NOT, FULL)] == [(1, 2), (3, 6), (10, 20), (10, 30)]


@pytest.mark.parametrize("node", [HEAD, TAIL, BODY])
def test_small_run_has_heads_bodies_and_tails(node):
    assert layer_of(node).node == node
