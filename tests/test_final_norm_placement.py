"""With MTP layers Megatron-Core builds the model's final norm in the chunk of the last decoder layer
(transformer_block.py `TransformerBlock.has_final_layernorm_in_this_stage`, Megatron-LM d98e8a64), also
when the MTP layers run beside the loss (`mL`) in a chunk of no decoder layer.

DeepSeek-V3 (configs/deepseek-v3.yaml, h 7168, vocabulary 129,280, tp 1, one MTP layer) on
'Et*3|(tt|)*29,|mL': the last decoder layer in rank 13's chunk 1, `mL` alone in rank 15's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ppb_core.config.layout import cell_layers, parse_layout, standalone_mtp_cell
from ppb_core.estimate.inputs import load_run
from ppb_core.memory import MemoryModel
from ppb_core.model.placement import placed_walk
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import TAIL, walk
from ppb_core.timing.flops import OpGeometry, layer_ops

CONFIGS = Path(__file__).parent.parent / "configs"
BESIDE = "Et*3|(tt|)*29,|mL"
H, TABLE, T = 7168, 129_280 * 7168, 4096
# One MoE layer at tp 1, ep 64 (tests/test_standalone_mtp.py's hand count): 232,996,864 non-expert
# parameters, 4 routed experts 176,160,768.
MOE_NON_EXPERT, MOE_EXPERT = 232_996_864, 176_160_768


@pytest.fixture(scope="module")
def run():
    return load_run(CONFIGS / "deepseek-v3.yaml")


def _tails(layers):
    return [layer for layer in layers if layer.node == TAIL]


def _beside(run):
    layout = parse_layout(BESIDE, 16)
    assert standalone_mtp_cell(layout) is None  # `m` with `L`: the fused TAIL
    return placed_walk(run, cell_layers(layout))


def test_the_final_norm_goes_with_the_last_decoder_layer(run):
    """Rank 13's chunk 1 holds the last decoder layer ('(tt|)*29' fills model stages 1-29); the rest of
    the TAIL (kind `output_mtp`) stays in rank 15's chunk 1. Its parameters: the output layer and the
    MTP chunk's embedding copy 2·926,679,040, enorm, hnorm and the MTP final norm 3·7168 = 21,504,
    eh_proj 2·7168·7168 = 102,760,448, one MoE layer -> non-expert 1,853,358,080 + 21,504 +
    102,760,448 + 232,996,864 = 2,189,136,896, experts 176,160,768; the final norm 7168."""
    memory = MemoryModel(run)
    norm, rest = _tails(_beside(run))
    assert (norm.kind.part, norm.chunk, norm.stage) == ("final_norm", 1, 13)
    assert (rest.kind.name, rest.kind.part, rest.chunk, rest.stage) == ("output_mtp", "mtp_output", 1, 15)
    assert memory.parameters(norm).total == H
    assert (memory.parameters(rest).non_expert, memory.parameters(rest).expert) == (2_189_136_896, MOE_EXPERT)


def test_the_norm_keeps_its_input_and_runs_beside_the_last_decoder_layer(run):
    """The norm keeps its input, T·h·2 = 58,720,256 bytes, on rank 13; rank 15's `mL` chunk keeps the
    rest (no `output.norm_input` term) and runs no final norm; the two keep and run exactly what the
    fused TAIL does."""
    memory = MemoryModel(run)
    norm, rest = _tails(_beside(run))
    (whole,) = _tails(walk(run))
    kept = {layer: memory.activation_bytes(layer, LayerType.OUTPUT_LAYER, None) for layer in (norm, rest, whole)}
    assert kept[norm] == 58_720_256
    assert kept[norm] + kept[rest] == kept[whole]
    geo = OpGeometry.from_run(run)
    assert [op.name for op in layer_ops(norm.kind, geo)] == ["output.final_norm"]
    assert "output.final_norm" not in [op.name for op in layer_ops(rest.kind, geo)]
    parts = layer_ops(norm.kind, geo) + layer_ops(rest.kind, geo)
    assert sorted(op.name for op in parts) == sorted(op.name for op in layer_ops(whole.kind, geo))
    assert sum(op.flops for op in parts) == sum(op.flops for op in layer_ops(whole.kind, geo))


def test_a_tail_beside_decoder_layers_stays_whole_and_the_balancer_keeps_one_tail(run):
    """The configured split (uniform, interleaved) puts the TAIL with the last decoder layer: one TAIL,
    as before; the balancer's descriptions walk one TAIL whatever the layout (`fused_tail`)."""
    assert [t.kind.part for t in _tails(walk(run))] == ["whole"]
    with_layout = run.model_copy(update={"parallel": run.parallel.model_copy(update={"layout": BESIDE})})
    assert [t.kind.part for t in _tails(walk(with_layout))] == ["final_norm", "mtp_output"]
    assert [t.kind.part for t in _tails(walk(with_layout, fused_tail=True))] == ["whole"]


def test_other_frameworks_keep_the_norm_with_the_loss(run):
    """MindFormers and torchtitan are not Megatron: their TAIL stays whole."""
    other = run.model_copy(update={"framework": "mindformers"})
    assert [t.kind.part for t in _tails(placed_walk(other, cell_layers(parse_layout(BESIDE, 16))))] == ["whole"]
