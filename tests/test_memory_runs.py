"""Run configs for the memory tests, stated inline (no files), with every size chosen by hand.

Other memory and estimate tests import these helpers; the one test here pins the hand count they use.
"""

from __future__ import annotations

from typing import Any

from ppb_core.config.run import RunConfig, parse_run_config
from ppb_core.memory import MemoryModel
from ppb_core.model.walk import BODY, HEAD, TAIL, Layer, walk


def make_run(
    spec: dict[str, Any],
    parallel: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    device: dict[str, Any] | None = None,
    name: str = "m",
    framework: str | None = None,
    timing: dict[str, Any] | None = None,
    memory: dict[str, Any] | None = None,
) -> RunConfig:
    raw = {
        "name": "memory-test",
        "models": [{"name": name, "spec": spec}],
        "parallel": parallel or {},
        "training": {"seq_length": 64, **(training or {})},
        "device": device or {"name": "h100-80gb"},
    }
    if framework is not None:
        raw["framework"] = framework
    if timing is not None:
        raw["timing"] = timing
    if memory is not None:
        raw["memory"] = memory
    return parse_run_config(raw, "memory-test.yaml")


def layers(run: RunConfig) -> dict[str, Layer]:
    """The first HEAD, the first BODY of each kind (by kind name) and the TAIL of the run's walk."""
    found: dict[str, Layer] = {}
    for layer in walk(run):
        key = layer.node if layer.node in (HEAD, TAIL) else layer.kind.name
        found.setdefault(key, layer)
    return found


def body(run: RunConfig, kind_name: str | None = None) -> Layer:
    for layer in walk(run):
        if layer.node == BODY and (kind_name is None or layer.kind.name == kind_name):
            return layer
    raise LookupError(kind_name)


def model(run: RunConfig, **kwargs: Any) -> MemoryModel:
    return MemoryModel(run, **kwargs)


# A small dense model: h 64, 4 heads of 16, SwiGLU 128, RMSNorm, no biases, untied.
DENSE: dict[str, Any] = {
    "vocab_size": 1024,
    "hidden_size": 64,
    "num_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "activation": "swiglu",
    "norm": "rmsnorm",
}
# Parameters of one DENSE body layer at tp 1: q,k,v,o 4·64·64 = 16384; two norms 2·64 = 128;
# gate, up, down 3·64·128 = 24576; 41088 in all.
DENSE_BODY_PARAMS = 16384 + 128 + 24576


def test_dense_helper_counts_by_hand():
    """The hand count the static tests build on: DENSE's body layer holds 41088 parameters."""
    run = make_run(DENSE)
    assert model(run).parameters(body(run)).total == DENSE_BODY_PARAMS == 41088
