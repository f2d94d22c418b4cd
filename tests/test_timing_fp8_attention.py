"""TransformerEngine's FP8 attention (`timing.fp8_dot_product_attention`) against NVIDIA's cuDNN measurements of its
FP8 kernels beside its BF16 ones, and the casts TE v2.17.0 adds around them.

NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training (fb682ce): results/llama3.1/gb200/llama3.1_20260424_100750.csv
and gb300/llama3.1_20260424_100757.csv (cuDNN 9.22, 64 query and 8 KV heads of 128, batch 2); df73764:
results/h200_919_only_cudnn/llama3.1_20260227_034703.csv (cuDNN 9.19.1, H200, milliseconds a call).
"""

from __future__ import annotations

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.walk import model_kinds
from ppb_core.timing.flops import OpGeometry, layer_ops
from ppb_core.timing.fp8_attention import fp8_attention_factor
from ppb_core.timing.pricer import TimeModel

# Qwen3 30B-A3B's attention (32 query and 4 key-value heads of 128) in a one-layer dense model
_SPEC = {
    "vocab_size": 1000,
    "hidden_size": 2048,
    "num_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 768,
}


def _raw(device: str = "gb200", recipe: str = "mxfp8", **timing) -> dict:
    return {
        "name": "fp8-attention",
        "models": [{"name": "llm", "spec": _SPEC}],
        "training": {"seq_length": 4096, "micro_batch_size": 4, "flash_attention": True},
        "device": {"name": device},
        "timing": {"matmul_dtype": "fp8", "fp8_recipe": recipe, "fp8_dot_product_attention": True, **timing},
    }


def _model(device: str = "gb200", recipe: str = "mxfp8", **timing) -> TimeModel:
    return TimeModel(parse_run_config(_raw(device, recipe, **timing)))


def test_the_factor_is_the_measured_fp8_over_bf16_rate_at_the_pass_s_length():
    # GB200 at 4k causal (a query walks (4096 + 1)/2 keys: the triangle's side 4096): MXFP8 forward 1685 against
    # BF16's 1408 TFLOP/s, backward 1054 against 1148 (slower); per-tensor FP8 1805 and 1178
    walk = 4097 / 2
    assert fp8_attention_factor("sm100", "mxfp8", False, True, walk) == pytest.approx(1685 / 1408)
    assert fp8_attention_factor("sm100", "mxfp8", True, True, walk) == pytest.approx(1054 / 1148)
    assert fp8_attention_factor("sm100", "fp8", True, True, walk) == pytest.approx(1178 / 1148)
    # GB300 without the mask at 8k keys: FP8 3160 against 2017 forward
    assert fp8_attention_factor("sm103", "fp8", False, False, 8192) == pytest.approx(3160 / 2017)
    # H200, milliseconds: at 16k causal the FP8 backward takes 29.422 against BF16's 19.002 (slower), the forward
    # 4.357 against 6.531
    assert fp8_attention_factor("sm90", "fp8", True, True, 16385 / 2) == pytest.approx(19.002 / 29.422)
    assert fp8_attention_factor("sm90", "fp8", False, True, 16385 / 2) == pytest.approx(6.531 / 4.357)
    # between measured lengths linear in log2: 2^11.5 keys without the mask on GB200's FP8 forward, halfway
    # between 1881/1433 and 2093/1599
    middle = (1881 / 1433 + 2093 / 1599) / 2
    assert fp8_attention_factor("sm100", "fp8", False, False, 2**11.5) == pytest.approx(middle)
    # a window of 128 reads the gpt_oss run at its queries: GB200 FP8 backward at 4k 49 against BF16's 182
    assert fp8_attention_factor("sm100", "fp8", True, True, 128.0, 128, 4096) == pytest.approx(49 / 182)


def test_a_pass_runs_at_its_bf16_rate_times_the_factor():
    fp8 = _model().kernels
    raw = _raw()
    raw["timing"]["fp8_dot_product_attention"] = False
    bf16 = TimeModel(parse_run_config(raw)).kernels
    # MBS 4 · 32 heads = 128 (sequence, head) pairs at 4096 queries, causal
    for backward, ratio in ((False, 1685 / 1408), (True, 1054 / 1148)):
        got = fp8.attention_efficiency(backward, 128, 4096, 4097 / 2, 128, 1.0)
        assert got == pytest.approx(ratio * bf16.attention_efficiency(backward, 128, 4096, 4097 / 2, 128, 1.0))


def _casts(recipe: str):
    run = parse_run_config(_raw("gb200" if recipe != "delayed" else "h100-80gb", recipe))
    _, bodies, _ = model_kinds(run, "llm")
    ops = {op.name: op for op in layer_ops(bodies[0], OpGeometry.from_run(run))}
    return ops["fp8_attention_casts"]


def test_the_casts_te_adds_under_each_recipe():
    # 4 · 4096 = 16,384 tokens; Q 32 · 128 = 4096 and K, V 2 · 4 · 128 = 1024 elements a token: 83,886,080 of Q, K,
    # V and 67,108,864 of O (and of dO), BF16 (2 bytes)
    qkv, out = 16384 * 5120, 16384 * 4096
    # MXFP8 (utils.py `mxfp8_quantize_fast_path`): each read once, written row- and column-wise (2 + 2 bytes); dO
    # alike; O, dQ, dK, dV stay BF16. 3 quantizations and 4 batched scale kernels, dO's 1 and 4
    mx = _casts("mxfp8")
    assert (mx.bytes, mx.backward_bytes, mx.launches) == (4 * qkv, 4 * out, (7.0, 5.0))
    assert mx.te_quantize and mx.switch == "softmax"
    # delayed (H100): Q, K, V concatenated (2 + 2) and cast (2 + 1), O dequantized (1 + 2); dO cast (2 + 1), dQKV's
    # FP8 data concatenated (1 + 1) and dequantized (1 + 2)
    delayed = _casts("delayed")
    assert delayed.bytes == 7 * qkv + 3 * out
    assert delayed.backward_bytes == 3 * out + 5 * qkv
    # current scaling: the concatenation (4), the amax read (2), the cast (3); dO's amax and cast (2 + 3)
    current = _casts("tensorwise")
    assert (current.bytes, current.backward_bytes) == (9 * qkv, 5 * out)


def test_fp8_attention_makes_the_iteration_what_its_parts_say():
    # one layer's forward and backward with the setting against without it: the flash passes at the factor and the
    # casts' bytes at TE's measured quantize share of HBM (`_quantize_s`)
    on = _model()
    raw = _raw()
    raw["timing"]["fp8_dot_product_attention"] = False
    off = TimeModel(parse_run_config(raw))
    _, bodies, _ = model_kinds(on.run, "llm")
    on_ops = {op.name: op for op in layer_ops(bodies[0], on._geometry)}
    off_ops = {op.name: op for op in layer_ops(bodies[0], off._geometry)}
    assert set(on_ops) - set(off_ops) == {"fp8_attention_casts"}
    casts = on_ops["fp8_attention_casts"]
    assert on._phase_s(casts, "forward") == pytest.approx(casts.bytes / on._quantize_bytes_per_s)
    scores = on_ops["flash_scores"]
    ratio = on._phase_s(scores, "forward") / off._phase_s(off_ops["flash_scores"], "forward")
    assert ratio == pytest.approx(1408 / 1685)


@pytest.mark.parametrize(
    ("device", "recipe", "timing", "said"),
    [
        ("gb200", "blockwise", {}, "no FP8 attention under the blockwise recipe"),
        ("h100-80gb", "mxfp8", {}, "from sm100 only"),
        ("h100-80gb", "tensorwise", {}, "from sm100 only"),
        ("gb200", "mxfp8", {"cudnn_release": "9.20.0.48"}, "from cuDNN 9.21"),
        ("gb200", "tensorwise", {"cudnn_release": "9.13.1.26"}, "from cuDNN 9.14"),
        ("gb200", "mxfp8", {"matmul_dtype": "bf16"}, "needs matmul_dtype fp8"),
        ("gb200", "mxfp8", {"te_attention_backend": "flash"}, "cuDNN's fused attention only"),
        ("a100-80gb", "delayed", {}, "no FP8 attention measured"),
    ],
)
def test_what_te_runs_no_fp8_attention_for_is_refused(device, recipe, timing, said):
    with pytest.raises(InputError) as refused:
        parse_run_config(_raw(device, recipe, **timing))
    assert "timing.fp8_dot_product_attention" in str(refused.value) and said in str(refused.value)
    assert "\n" not in str(refused.value)


def test_layers_kept_in_bf16_keep_bf16_attention():
    # --first-last-layers-bf16: the first and last layers outside the FP8 context, no FP8 attention there
    spec = {**_SPEC, "num_layers": 3}
    raw = _raw(fp8_bf16_layers=[1, 1])
    raw["models"][0]["spec"] = spec
    model = TimeModel(parse_run_config(raw))
    _, bodies, _ = model_kinds(model.run, "llm")
    names = [{op.name for op in layer_ops(kind, model._geometry)} for kind in bodies]
    assert ["fp8_attention_casts" in found for found in names] == [False, True, False]
