"""What ppb prices of torchtitan's eager step beyond its op-by-op factors, by hand: autograd's sums of
shared-input gradients, FSDP2's copy kernels, and the checkpoint's early stop (the aten-op counts
behind them: tests/test_census_ops.py, which needs torch)."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.iteration import fsdp2_copy_seconds
from ppb_core.timing.pricer import TimeModel

TOKENS = 2048


def _run(framework="torchtitan", compile_=False, recompute=None, norm_type="rmsnorm", **spec):
    return parse_run_config(
        {
            "framework": framework,
            "models": [{"name": "llm", "spec": {**SMALL_GQA, **spec}}],
            "parallel": {"dp": 2, "zero": 3, **({"fsdp": True} if framework == "torchtitan" else {})},
            "training": {"seq_length": TOKENS, "micro_batch_size": 1, "recompute": recompute or {}},
            "device": ROUND_DEVICE,
            "timing": {"torch_compile": compile_, "norm_type": norm_type} if framework == "torchtitan" else {},
        }
    )


def _body(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


@pytest.mark.parametrize(
    ("framework", "compile_", "passes"), [("torchtitan", False, 3), ("torchtitan", True, 1), ("megatron", False, 0)]
)
def test_the_input_gradients_of_linears_sharing_an_input_are_summed_under_torchtitan(framework, compile_, passes):
    run = _run(framework, compile_)
    ops = {op.name: op for op in TimeModel(run).ops(_body(run))}
    # for wq+wk (on qk_proj), for wv (v_proj), for w1+w3 (mlp_in), a gradient of 2048 tokens × h 1024 in bf16
    # added: eager one add (read two, write one: 3 passes); compiled the add fused into the kernel after it,
    # which still reads the extra addend (1 pass); none under Megatron's fused QKV and fc1 GEMMs
    gradient = TOKENS * 1024 * 2
    for name in ("qk_proj", "v_proj", "mlp_in"):
        assert ops[name].side_bytes == (0.0, passes * gradient)


def test_fsdp2_copies_by_hand():
    run = _run()
    kernels = TimeModel(run).kernels
    params = MemoryModel(run).parameters(_body(run))
    parameters = params.total
    # SMALL_GQA's block: wq and wo 1024², wk and wv 1024·256, w1, w3, w2 1024·2816, two norms 1024
    assert parameters == 2 * 1024**2 + 2 * 1024 * 256 + 3 * 1024 * 2816 + 2 * 1024
    hbm = 1000e9 * 0.5  # ROUND_DEVICE: 1000 GB/s at memory_efficiency 0.5
    # copy-out: read the gathered bf16 buffer and write the parameters, 2 + 2 bytes a parameter;
    # reduce-scatter copy-in: read the bf16 gradients, write the fp32 reduce-scatter input, 2 + 4
    out, reduce_in = fsdp2_copy_seconds(run, params, kernels)
    assert out == pytest.approx(4 * parameters / hbm)
    assert reduce_in == pytest.approx(6 * parameters / hbm)
    assert fsdp2_copy_seconds(_run("megatron"), params, kernels) == (0.0, 0.0)


@pytest.mark.parametrize("recompute", [{"mode": "full"}, {"mode": "selective", "option": "op"}])
def test_early_stop_does_not_replay_the_block_s_last_matmul_and_residual(recompute):
    stopped, whole = (_run(recompute={**recompute, "early_stop": stop}) for stop in (True, False))
    layer = _body(stopped)
    state = LayerType.FULL_REC_LAYER if recompute["mode"] == "full" else LayerType.SEL_REC_LAYER
    model = TimeModel(stopped)
    prices = model.op_prices(layer)
    # the per-op policy saves w2's output (the 7th aten.mm), so only the residual add is spared there
    spared = ("mlp_out", "residual_mlp") if recompute["mode"] == "full" else ("residual_mlp",)
    difference = sum(prices[name].recompute_ms for name in spared)
    assert TimeModel(whole).parts(layer, state).recompute_ms - model.parts(layer, state).recompute_ms == (
        pytest.approx(difference)
    )


def test_fused_rmsnorm_prices_the_triton_kernel_s_bytes():
    """torchtitan's `norm_type = "fused_rmsnorm"` (norms.py at 1ea476e9f): one kernel each way, reading
    x and writing y (2 + 2 an element) forward, reading x and dy and writing dx (2 + 2 + 2) backward;
    eager `rmsnorm` moves 36 and 92 (`EAGER_TRAFFIC`). The rotary embedding stays eager either way."""
    hbm = 1000e9 * 0.5
    elements = TOKENS * 1024
    fused, eager = (_run(norm_type=norm) for norm in ("fused_rmsnorm", "rmsnorm"))
    for run, forward, backward in ((fused, 4, 6), (eager, 36, 92)):
        prices = TimeModel(run).op_prices(_body(run))
        assert prices["norm1"].forward_ms == pytest.approx(forward * elements / hbm * 1e3)
        assert prices["norm1"].backward_ms == pytest.approx(backward * elements / hbm * 1e3)
        # q and k: 2048 tokens × (16 + 4) heads of 64, 20 bytes an element each way
        assert prices["rope"].forward_ms == pytest.approx(20 * TOKENS * 20 * 64 / hbm * 1e3)


def _default_titan(timing: dict | None = None):
    """A torchtitan run with only *timing* set: v0.2.2's kernels unless it says otherwise."""
    return parse_run_config(
        {
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
            "parallel": {"dp": 2, "zero": 3, "fsdp": True},
            "training": {"seq_length": TOKENS, "micro_batch_size": 1},
            "device": {"name": "h100-80gb"},
            "timing": timing or {},
        }
    )


def test_a_torchtitan_run_prices_v0_2_2_s_kernels_by_default():
    """v0.2.2 (73a0e697): nn.RMSNorm, PyTorch's fused kernel (4 and 6 bytes an element); SDPA with
    enable_gqa (ff0829c10: no repeat_kv op) under its cuDNN-first priority (6a3a9da95), priced at the
    device's cuDNN rates (H100: 0.602 and 0.522 of peak; FlashAttention-2 as PyTorch SDPA runs it, flash-attn 2's
    0.374 and 0.326 with the forward at SDPA's 0.938 of it, pytorch/benchmark #2443: 0.374 · 0.938 = 0.3508)."""
    new, old = _default_titan(), _default_titan({"norm_type": "rmsnorm", "repeat_kv": True, "sdpa_backend": "flash"})
    new_model, old_model = TimeModel(new), TimeModel(old)
    new_prices, old_prices = new_model.op_prices(_body(new)), old_model.op_prices(_body(old))
    assert "repeat_kv" not in new_prices and "repeat_kv" in old_prices
    # the fused kernel's 4 and 6 bytes an element at the fused rate; eager 36 and 92 at the eager one
    elements, fused_rate, eager_rate = (
        TOKENS * 1024,
        new_model.kernels.hbm_bytes_per_s,
        old_model.kernels.eager_hbm_bytes_per_s,
    )
    assert new_prices["norm1"].forward_ms == pytest.approx(4 * elements / fused_rate * 1e3)
    assert new_prices["norm1"].backward_ms == pytest.approx(6 * elements / fused_rate * 1e3)
    assert old_prices["norm1"].forward_ms == pytest.approx(36 * elements / eager_rate * 1e3)
    assert old_prices["norm1"].backward_ms == pytest.approx(92 * elements / eager_rate * 1e3)
    assert (new_model.kernels.attention_forward, new_model.kernels.attention_backward) == (0.602, 0.522)
    assert old_model.kernels.attention_forward == pytest.approx(0.3508, abs=1e-4)
    assert old_model.kernels.attention_backward == 0.326
    # PyTorch refuses cuDNN attention under deterministic algorithms (sdp_utils.cpp check_cudnn_deterministic)
    deterministic = TimeModel(_default_titan({"deterministic": True})).kernels
    assert deterministic.attention_forward == pytest.approx(0.3508, abs=1e-4)


@pytest.mark.parametrize(
    ("field", "value"), [("norm_type", "fused"), ("sdpa_backend", "efficient"), ("repeat_kv", "sometimes")]
)
def test_a_bad_torchtitan_kernel_setting_is_one_line(field, value):
    with pytest.raises(InputError) as caught:
        _default_titan({field: value})
    message = str(caught.value)
    assert "\n" not in message and f"timing.{field}" in message


def test_torchtitan_s_kernel_settings_are_refused_under_another_framework():
    raw = {
        "framework": "megatron",
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2},
        "training": {"seq_length": TOKENS, "micro_batch_size": 1},
        "device": {"name": "h100-80gb"},
        "timing": {"repeat_kv": True},
    }
    with pytest.raises(InputError) as caught:
        parse_run_config(raw, "run.yaml")
    message = str(caught.value)
    assert "\n" not in message and "run.yaml" in message and "timing.repeat_kv" in message and "megatron" in message


@pytest.mark.parametrize(("compile_", "forward", "fusion"), [(False, 4, "rope"), (True, 20, None)])
def test_torchtitan_s_complex_rotary_keeps_its_eager_bytes_under_torch_compile(compile_, forward, fusion):
    run = _run(compile_=compile_)
    rope = {op.name: op for op in TimeModel(run).ops(_body(run))}["rope"]
    # Q and K of 2048 tokens × (16 + 4 heads) × 64: eager, the fused 2 + 2 bytes an element times
    # EAGER_TRAFFIC's 5; compiled, Inductor's upcast (2 + 4), aten's complex multiply (4 + 4) and
    # Inductor's downcast (4 + 2) as bytes of their own (tests/test_census_ops.py counts them)
    elements = TOKENS * (16 + 4) * 64
    assert (rope.bytes, rope.backward_bytes) == (forward * elements, forward * elements)
    assert rope.fusion == fusion


def test_qwen3_s_real_rotary_compiles_to_one_kernel():
    # torchtitan's Qwen3 (the registry's one model with per-head q/k norms) rotates with its cos|sin cache
    # in real arithmetic: compiled, one fused kernel reading and writing Q and K once (2 + 2 bytes)
    run = _run(compile_=True, qk_norm=True)
    rope = {op.name: op for op in TimeModel(run).ops(_body(run))}["rope"]
    elements = TOKENS * (16 + 4) * 64
    assert (rope.bytes, rope.backward_bytes) == (4 * elements, 4 * elements)


@pytest.mark.parametrize(
    ("compile_", "norm_type", "forward", "backward", "fusion"),
    [(True, "rmsnorm", 36, 92, None), (True, "nn_rmsnorm", 4, 6, "norm"), (False, "rmsnorm", 4, 6, "norm")],
)
def test_the_final_norm_stays_eager_outside_the_compiled_blocks(compile_, norm_type, forward, backward, fusion):
    # apply_compile compiles each TransformerBlock alone: torchtitan's own RMSNorm module before the output
    # runs op by op, 36 and 92 bytes an element (EAGER_TRAFFIC's 9 × 4 and 15.3 × 6, kernels.py) as its
    # own bytes; torch.nn.RMSNorm is one kernel either way; uncompiled, the eager factor applies at pricing
    run = _run(compile_=compile_, norm_type=norm_type)
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    norm = {op.name: op for op in TimeModel(run).ops(tail)}["output.final_norm"]
    elements = TOKENS * 1024
    assert (norm.bytes, norm.backward_bytes, norm.fusion) == (forward * elements, backward * elements, fusion)
