"""Megatron-Core's standalone MTP priced: DeepSeek-V3 on Megatron-LM's own layout 'Et*3|(tt|)*29,m|L'
(docs/user-guide/features/pipeline_parallel_layout.md, commit d98e8a64), the MTP layer on rank 14's
last virtual stage, the loss on rank 15's.

What each rank holds follows Megatron-Core at d98e8a64: gpt_model.py `GPTModel.__init__` builds the
embedding where `pre_process or mtp_process` (the MTP chunk holds its own copy) and the output layer
where `post_process`; `_postprocess` runs the MTP block on its chunk and returns the hidden states,
and `process_mtp_loss` on the loss chunk computes every head's logits and loss;
multi_token_prediction.py `MultiTokenPredictionBlock.forward` concatenates the hidden state and the
MTP layer's output, (1 + mtp)·h per token sent on; with MTP layers the model's final norm sits with
the last decoder layer (transformer_block.py `has_final_layernorm_in_this_stage`); a chunk of no
decoder layer clones what it received (`TransformerBlock.forward`).

DeepSeek-V3 (configs/hf/deepseek-v3.json): h 7168, vocabulary 129,280, MLA with q_lora_rank 1536,
kv_lora_rank 512, 128 heads of qk 128 + 64 (rope) and v 128; 256 routed experts of width 2048 and
one shared, at ep 64 (configs/deepseek-v3.yaml: tp 1, seq 4096, micro-batch 1, bf16).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppb_core.cli.main import main
from ppb_core.config.layout import cell_layers, parse_layout, standalone_mtp_cell, validate_layout
from ppb_core.estimate.inputs import load_run
from ppb_core.estimate.plan import stage_models
from ppb_core.memory import MemoryModel
from ppb_core.model.placement import placed_walk
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import TAIL, walk
from ppb_core.payload.describe import describe
from ppb_core.timing.flops import OpGeometry, layer_ops
from ppb_core.timing.iteration import p2p_bytes

CONFIGS = Path(__file__).parent.parent / "configs"
MEGATRONS = "Et*3|(tt|)*29,m|L"
BESIDE = "Et*3|(tt|)*29,|mL"  # the same decoder layers, the MTP layer beside the loss

H, VOCAB, T = 7168, 129_280, 4096
# One MoE layer on one device at tp 1, ep 64 (hand count from the config):
#   MLA: q_a 7168·1536 = 11,010,048; q_a norm 1536; q_b 1536·128·192 = 37,748,736;
#        kv_a 7168·(512 + 64) = 4,128,768; kv_a norm 512; kv_b 512·128·(128 + 128) = 16,777,216;
#        o 128·128·7168 = 117,440,512  -> 187,107,328
#   two norms 2·7168 = 14,336; router 7168·256 = 1,835,008; shared expert 3·7168·2048 = 44,040,192
#   -> non-expert 232,996,864; routed 256/64 = 4 experts · 3·7168·2048 = 176,160,768
MOE_NON_EXPERT, MOE_EXPERT = 232_996_864, 176_160_768
TABLE = VOCAB * H  # 926,679,040


@pytest.fixture(scope="module")
def run():
    return load_run(CONFIGS / "deepseek-v3.yaml")


@pytest.fixture(scope="module")
def placed(run):
    layout = parse_layout(MEGATRONS, 16)
    validate_layout(layout, 61, 1)  # Megatron-Core's rules accept it
    assert standalone_mtp_cell(layout) == (1, 14)  # rank 14's last virtual stage
    return placed_walk(run, cell_layers(layout), standalone_mtp_cell(layout))


def _tails(layers):
    return [layer for layer in layers if layer.node == TAIL]


def test_the_tail_splits_into_the_final_norm_the_mtp_chunk_and_the_loss_chunk(placed):
    """The last decoder layer is in model stage 29 ('(tt|)*29' fills stages 1-29), rank 13's chunk 1."""
    norm, mtp, output = _tails(placed)
    assert (norm.kind.part, norm.chunk, norm.stage) == ("final_norm", 1, 13)
    assert (mtp.kind.part, mtp.chunk, mtp.stage) == ("mtp", 1, 14)
    assert (output.kind.part, output.chunk, output.stage) == ("output", 1, 15)


def test_stage_parameters_against_a_hand_count(run, placed):
    """Rank 14: two MoE layers ('tt') and the MTP chunk: its embedding copy 926,679,040, enorm, hnorm and
    its final norm 3·7168 = 21,504, eh_proj 2·7168·7168 = 102,760,448 and one MoE layer
    -> non-expert 926,679,040 + 21,504 + 102,760,448 + 232,996,864 = 1,262,457,856, experts 176,160,768.
    Rank 15: two MoE layers and the loss chunk: the output layer 926,679,040. Rank 13: four MoE layers
    and the final norm, 7168."""
    memory = MemoryModel(run)
    norm, mtp, output = _tails(placed)
    assert (memory.parameters(mtp).non_expert, memory.parameters(mtp).expert) == (1_262_457_856, MOE_EXPERT)
    assert (memory.parameters(output).non_expert, memory.parameters(output).expert) == (TABLE, 0)
    assert memory.parameters(norm).total == H
    per_stage = [0] * 16
    for layer in placed:
        per_stage[layer.stage] += memory.parameters(layer).total
    moe_layer = MOE_NON_EXPERT + MOE_EXPERT  # 409,157,632
    assert per_stage[14] == 2 * moe_layer + 1_262_457_856 + MOE_EXPERT  # 2,256,933,888
    assert per_stage[15] == 2 * moe_layer + TABLE  # 1,744,994,304
    assert per_stage[13] == 4 * moe_layer + H  # 1,636,637,696
    # the fused TAIL (the balancer's) holds exactly the three parts
    (whole,) = _tails(walk(run))
    assert memory.parameters(whole).total == sum(memory.parameters(part).total for part in (norm, mtp, output))


def test_activations_of_the_loss_chunk_by_hand(run, placed):
    """The loss chunk keeps, per micro-batch (T = 4096 tokens): the heads' output-layer inputs (the two
    chunks of its empty block's clone), 2·T·h·2 = 117,440,512 bytes; both heads' fp32 softmax 2·T·V·4 =
    4,236,247,040; both heads' int64 labels 2·T·8 = 65,536 -> 4,353,753,088. The final norm keeps its
    input, T·h·2 = 58,720,256, beside the last decoder layer. The three parts keep the fused TAIL's
    terms, nothing twice."""
    memory = MemoryModel(run)
    norm, mtp, output = _tails(placed)
    (whole,) = _tails(walk(run))
    kept = {layer: memory.activation_bytes(layer, LayerType.OUTPUT_LAYER, None) for layer in (norm, mtp, output, whole)}
    assert kept[output] == 4_353_753_088
    assert kept[norm] == 58_720_256
    assert kept[norm] + kept[mtp] + kept[output] == kept[whole]


def test_a_chunk_of_no_decoder_layer_keeps_what_it_received(run, placed):
    """Its empty block clones its input (`TransformerBlock.forward`), which its layers keep; the received
    tensor stays for its gradient: per micro-batch in flight T·h·2 = 58,720,256 bytes on the MTP chunk,
    (1 + 1)·T·h·2 = 117,440,512 on the loss chunk; with none in flight the last one received and its
    gradient, twice that. A chunk with decoder layers keeps no more than they do."""
    memory = MemoryModel(run)
    rules, setup = memory.rules, memory.setup
    _, mtp, output = _tails(placed)
    body = next(layer for layer in placed if layer.stage == 14 and layer.chunk == 0)
    assert rules.pipeline_buffer_bytes(setup, {mtp.kind}, 128, 3) == 3 * 58_720_256
    assert rules.pipeline_buffer_bytes(setup, {output.kind}, 128, 3) == 3 * 117_440_512
    assert rules.pipeline_buffer_bytes(setup, {output.kind}, 128, 0) == 2 * 117_440_512
    with_bodies = rules.pipeline_buffer_bytes(setup, {body.kind, mtp.kind}, 128, 3)
    assert with_bodies == rules.pipeline_buffer_bytes(setup, {body.kind}, 128, 3)


def test_the_ops_split_between_the_chunks(run, placed):
    """The loss chunk runs both heads' logits, 2·T·h·V = 7,591,354,695,680 forward FLOPs each; the MTP
    chunk the projection 2·T·(2h)·h = 841,813,590,016 and no logits; the final norm alone beside the
    last decoder layer. Every op of the fused TAIL runs in exactly one of them."""
    geo = OpGeometry.from_run(run)
    norm, mtp, output = _tails(placed)
    (whole,) = _tails(walk(run))
    ops = {layer.kind.part: layer_ops(layer.kind, geo) for layer in (norm, mtp, output, whole)}
    assert [op.name for op in ops["final_norm"]] == ["output.final_norm"]
    logits = {op.name: op.flops for op in ops["output"] if op.name.endswith("logits")}
    assert logits == {"output.logits": 7_591_354_695_680, "mtp0.output.logits": 7_591_354_695_680}
    assert not any(op.name.endswith("logits") for op in ops["mtp"])
    assert {op.name: op.flops for op in ops["mtp"]}["mtp0.projection"] == 841_813_590_016
    parts = ops["final_norm"] + ops["mtp"] + ops["output"]
    assert sorted(op.name for op in parts) == sorted(op.name for op in ops["whole"])
    assert sum(op.flops for op in parts) == sum(op.flops for op in ops["whole"])


def test_p2p_bytes_out_of_the_mtp_chunk(run, placed):
    """A decoder chunk sends T·h·2 = 58,720,256 bytes a micro-batch; the MTP chunk (1 + 1)·T·h·2 =
    117,440,512 (the hidden state and the MTP layer's, concatenated)."""
    _, mtp, _ = _tails(placed)
    last_body = [layer for layer in placed if layer.stage == 13 and layer.chunk == 1][-1]
    assert p2p_bytes(run, last_body) == 58_720_256
    assert p2p_bytes(run, mtp) == 117_440_512


def test_megatrons_layout_checked_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    """`ppb check` prices the layout Megatron-LM ships for DeepSeek-V3: 5 + 13·4 + 2 + 2 = 61 decoder
    layers per stage, every stage's peak; the balancer's figures with its TAIL split the same way
    (`balance.mtp_apart`). Stages 0-13 hold the same layers as with the MTP layer beside the loss and peak the same
    (the final norm with the last decoder layer in both); stage 14 gains the MTP chunk, stage 15 loses it."""
    figures = {}
    for layout in (MEGATRONS, BESIDE):
        code = main(
            [
                "check",
                str(CONFIGS / "deepseek-v3.yaml"),
                "--plan",
                f"--pipeline-model-parallel-layout '{layout}'",
                "--no-optimum",
                "--json",
            ]
        )
        out = json.loads(capsys.readouterr().out)
        assert code == 1 and not out["fits"]  # stage 0 runs out of memory, unrecomputed
        assert [stage["layers"] for stage in out["stages"]] == [5, *[4] * 13, 2, 2]
        figures[layout] = out
    apart, beside = figures[MEGATRONS], figures[BESIDE]
    # the balancer prices `m` on rank P - 2 apart (balance.mtp_apart): its MTP part on stage 14
    assert "simulated_time_s" in apart["balancer"] and "simulated_time_s" in beside["balancer"]
    mb = [out["balancer"]["stage_memory_mb"] for out in (apart, beside)]
    assert mb[0][:14] == mb[1][:14] and mb[0][14] > mb[1][14] and mb[0][15] < mb[1][15]
    peaks = [[stage["peak_mb"] for stage in out["stages"]] for out in (apart, beside)]
    assert peaks[0][:13] == pytest.approx(peaks[1][:13])
    # the final norm beside the last decoder layer in both (tests/test_final_norm_placement.py)
    assert peaks[0][13] == pytest.approx(peaks[1][13])
    assert peaks[0][14] > peaks[1][14] and peaks[0][15] < peaks[1][15]
    step = [out["stages"][13]["moments_mb"]["optimizer"] for out in (apart, beside)]
    assert step[0] == pytest.approx(step[1])
    assert apart["iteration_s"] > 0


def test_the_balancers_descriptions_keep_one_tail(run, tmp_path: Path) -> None:
    """A run config with the layout walks three TAIL parts; the balancer's descriptions still one TAIL."""
    text = (CONFIGS / "deepseek-v3.yaml").read_text()
    text = text.replace("config: hf/deepseek-v3.json", f"config: {CONFIGS / 'hf' / 'deepseek-v3.json'}")
    text = text.replace("pp: 16, vpp: 2,", "pp: 16,").replace("layout: 'Et|(tt|)*29,t|tmL'", f"layout: '{MEGATRONS}'")
    path = tmp_path / "ds.yaml"
    path.write_text(text)
    with_layout = load_run(path)
    assert [layer.kind.part for layer in _tails(walk(with_layout))] == ["final_norm", "mtp", "output"]
    memory = MemoryModel(with_layout)
    descriptions = describe(with_layout, memory)
    assert len([d for d in descriptions if d["type"] == "TAIL"]) == 1


def test_standalone_mtp_flags_for_another_framework_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """torchtitan runs no standalone MTP: its rules would price the MTP and loss chunks unfounded."""
    text = (CONFIGS / "deepseek-v3.yaml").read_text()
    text = text.replace("config: hf/deepseek-v3.json", f"config: {CONFIGS / 'hf' / 'deepseek-v3.json'}")
    text = text.replace("zero: 1, ", "").replace("parallel: {", "parallel: {fsdp: true, ")
    path = tmp_path / "ds-torchtitan.yaml"
    path.write_text("framework: torchtitan\n" + text)
    flags = f"--pipeline-model-parallel-layout '{MEGATRONS}'"
    code = main(["check", str(path), "--plan", flags, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "MTP layers m apart from the loss L are Megatron-Core's; the run's framework is torchtitan" in err


def test_the_report_names_the_parts_of_the_tail_each_stage_holds(placed):
    """`Et*3|(tt|)*29,m|L` on pp 16: stage 13 holds the last decoder layers (and the final norm, chunk 1), stage
    14 the MTP layer alone (chunk 1) beside its chunk 0's two layers, stage 15 the loss (chunk 1) beside its two.
    The report's models column said "+ TAIL" on all three until session 34, as if each held the loss."""
    said = stage_models(placed)
    assert said[13:] == ["llm 4 + norm", "llm 2 + MTP", "llm 2 + TAIL"]
    assert said[0] == "llm HEAD + 5"  # E and 3 layers (chunk 0), 2 (chunk 1)
