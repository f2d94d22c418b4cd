"""Transformer Engine's FP8 weights under Megatron (memory/frameworks/te_fp8.py; Megatron-LM d98e8a64, TE d0067d0d).

Worked by hand on test_memory_runs' DENSE (h 64, 4 heads of 16, SwiGLU 128, RMSNorm, no biases): a layer's
Transformer Engine linear weights are q, k, v, o 4·64·64 = 16384 and gate, up, down 3·64·128 = 24576, 40960
elements at tp 1 (its 41088 parameters less the two norms' 128). Without --fp8-param-gather each module keeps
the quantized copy of its weight (`_fp8_workspaces`, refreshed on each iteration's first micro-batch): rowwise
and columnwise data, a byte each on Hopper for tensorwise scaling (the transpose), a byte alone where FP8 GEMMs
run in every layout (`is_non_tn_fp8_gemm_supported`: capability 10), MXFP8 both with an E8M0 scale a 32.
"""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, layers, make_run, model

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.config.run import FrameworkRelease
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.te_fp8 import fp8_weights, weight_bytes_per_element
from ppb_core.model.params import LayerParams
from ppb_core.model.walk import walk
from ppb_core.timing.comm import Group, Links
from ppb_core.timing.flops import OpGeometry, layer_ops
from ppb_core.timing.iteration import _parameter_gather_seconds, run_iteration

LINEAR = 16384 + 24576


def _fp8(recipe: str = "tensorwise", device: str = "h100-80gb", **timing):
    return make_run(
        DENSE,
        parallel={"dp": 2, "zero": 1},
        framework="megatron",
        device={"name": device},
        timing={"matmul_dtype": "fp8", "fp8_recipe": recipe, **timing},
    )


def _module_bytes(run) -> float:
    memory = model(run)
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    return memory.static_breakdown(body).module_bytes


def test_a_layer_keeps_its_quantized_weights():
    bf16 = make_run(DENSE, parallel={"dp": 2, "zero": 1}, framework="megatron")
    assert _module_bytes(bf16) == 0
    assert fp8_weights(layers(bf16)["dense"].kind, model(bf16).setup) == LayerParams(LINEAR, 0)
    assert _module_bytes(_fp8()) == 2 * LINEAR  # H100 (9.0): data and transpose
    assert _module_bytes(_fp8("mxfp8")) == pytest.approx(2 * (1 + 1 / 32) * LINEAR)  # 84480
    assert weight_bytes_per_element("tensorwise", 10.0) == 1  # B200: the data serves both layouts
    assert weight_bytes_per_element("delayed", 12.0) == 2  # capability 12: TN only again
    # TE 1.14 (release_v1.14, NGC PyTorch 25.01's) kept the transpose on B200 too; v2.0 (819a75219) dropped it there
    assert weight_bytes_per_element("delayed", 10.0, FrameworkRelease(transformer_engine="1.14")) == 2
    assert weight_bytes_per_element("delayed", 10.0, FrameworkRelease(transformer_engine="v2.0")) == 1
    assert weight_bytes_per_element("blockwise", 9.0) == pytest.approx(2 * (1 + 4 / 16384))


def test_fp8_parameters_keep_no_copy():
    # --fp8-param-gather: the parameter is the quantized tensor, data and transpose 2 bytes on Hopper, the 16-bit
    # price: no workspace and no more parameter bytes; under MXFP8 its scales, 2/32 a byte an element more
    plain, gathered = _fp8(), _fp8(fp8_param_gather=True)
    assert _module_bytes(gathered) == 0
    body = [next(layer for layer in walk(run) if layer.node == "BODY") for run in (plain, gathered)]
    params = [
        model(run).static_breakdown(layer).parameter_bytes for run, layer in zip((plain, gathered), body, strict=True)
    ]
    assert params[0] == params[1] == 2 * 41088
    mx = _fp8("mxfp8", fp8_param_gather=True)
    layer = next(layer for layer in walk(mx) if layer.node == "BODY")
    assert model(mx).static_breakdown(layer).parameter_bytes == pytest.approx(2 * 41088 + LINEAR * 2 / 32)


def test_moe_routers_stay_16_bit():
    # a MoE layer of 4 experts of 32 (top 2): the router 64·4 is Megatron's own gating linear, not counted;
    # the experts' 4·3·64·32 = 24576 are (expert), the attention's 16384 (non-expert)
    spec = {**DENSE, "num_experts": 4, "experts_per_token": 2, "moe_intermediate_size": 32}
    run = make_run(spec, framework="megatron", timing={"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"})
    kind = next(layer.kind for layer in walk(run) if layer.node == "BODY")
    assert fp8_weights(kind, model(run).setup) == LayerParams(16384, 24576)


def test_the_first_and_last_layers_in_bf16():
    # --first-last-layers-bf16 (1 and 1, fp8_utils.py is_first_last_bf16_layer): layers 0 and 3 of 4 run outside
    # the fp8 context: their GEMMs in 16 bits, no quantized copy, no FP8 activations
    run = _fp8(fp8_bf16_layers=[1, 1])
    bodies = [layer for layer in walk(run) if layer.node == "BODY"]
    assert [layer.kind.high_precision for layer in bodies] == [True, False, False, True]
    memory = model(run)
    assert [memory.static_breakdown(layer).module_bytes for layer in bodies] == [0, 2 * LINEAR, 2 * LINEAR, 0]
    geo = OpGeometry.from_run(run)
    assert not any(op.fp8 for op in layer_ops(bodies[0].kind, geo))
    assert any(op.fp8 for op in layer_ops(bodies[1].kind, geo))


def test_the_parameter_gather_moves_fp8_parameters_at_a_byte():
    # a bucket of 1000 non-expert parameters, 600 of them FP8, over dp 2 on 100 GB/s with a 10 µs step:
    # (400·2 + 600)·(1/2) bytes / 100 GB/s + 1 step
    links = Links(100e9, 25e9, 10e-6, 8, {"dp": Group(2, 2), "edp": Group(1, 1)})
    seconds = _parameter_gather_seconds(LayerParams(1000, 0), LayerParams(600, 0), 2, links)
    assert seconds == pytest.approx((400 * 2 + 600) / 2 / 100e9 + 10e-6)


def test_the_importer_and_megatrons_checks():
    base = (
        "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64"
        " --bf16 --use-distributed-optimizer --fp8-format hybrid --fp8-recipe tensorwise"
    )
    imported = import_megatron(f"{base} --fp8-param-gather --first-last-layers-bf16", 8, "h100-80gb")
    assert imported.notes == []
    assert imported.raw["timing"]["fp8_param_gather"] is True and imported.raw["timing"]["fp8_bf16_layers"] == [1, 1]
    counts = "--first-last-layers-bf16 --num-layers-at-start-in-bf16 2 --num-layers-at-end-in-bf16 0"
    assert import_megatron(f"{base} {counts}", 8, "h100-80gb").raw["timing"]["fp8_bf16_layers"] == [2, 0]
    # delayed scaling refuses the bf16 layers (transformer_config.py __post_init__)
    delayed = import_megatron(f"{base.replace('tensorwise', 'delayed')} --first-last-layers-bf16", 8, "h100-80gb")
    with pytest.raises(InputError) as caught:
        run_config_of(delayed, "launch")
    assert caught.value.field == "--first-last-layers-bf16"
    # --fp8-param-gather needs the distributed optimizer (arguments.py validate_args)
    alone = import_megatron(f"{base.replace(' --use-distributed-optimizer', '')} --fp8-param-gather", 8, "h100-80gb")
    with pytest.raises(InputError) as caught:
        run_config_of(alone, "launch")
    assert caught.value.field == "--fp8-param-gather"


def test_mxfp8_parameters_are_gathered_in_bf16():
    # Megatron-Core maps no MXFP8Tensor into the parameter buffer: a bucket holding one gathers through the
    # gradient buffer viewed as bf16 (param_and_grad_buffer.py `_ParamAndGradBuffer.__init__`, core_v0.15.0 to
    # d98e8a64), so --fp8-param-gather moves MXFP8 weights at 2 bytes, as a run without it does; tensorwise's
    # FP8 weights go at 1 byte, less. (Gradients reduce in bf16 alike in all three.)
    def link(recipe: str, gather: bool) -> float:
        run = _fp8(recipe, device="b200", fp8_param_gather=gather)
        return run_iteration(run).link_seconds["dp_communication"]

    assert link("mxfp8", True) == pytest.approx(link("mxfp8", False), rel=1e-12)
    assert link("tensorwise", True) < link("tensorwise", False) == pytest.approx(link("mxfp8", False), rel=1e-12)
