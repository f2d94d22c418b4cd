"""torchtitan's one `wqkv` linear, priced only for a run whose commit holds it (`framework_release.torchtitan`).

torchtitan 3396a4b37 (2026-06-24, "Enable Fused qkv by default") builds Llama 3's, Qwen3's and gpt-oss's
attention with `FusedQKVLinear` (models/common/attention.py, from ad7a86533): one linear of (heads + 2·kv)·d
columns, its output split into contiguous Q, K, V copies. No tagged release holds it (v0.2.2, 2026-02-20, is
the newest tag); ppb's torchtitan defaults follow v0.2.2, so an unstated release runs wq, wk, wv apart as the
published runs did (9dec370, 820504e, e7c0cae; models/llama3/model.py `Attention`).

Worked by hand on ROUND_DEVICE (tests/small_models.py): 100 TFLOP/s at matmul efficiency 0.5 over 64 SMs,
0.78125 TFLOP/s an SM for a 128×128 tile; HBM 1000 GB/s at memory efficiency 0.5, 500 GB/s; no kernel time.
SMALL_GQA: h 1024, 16 heads of 64, 4 KV heads: wqkv (16 + 8)·64 = 1536 columns; 2048 tokens a micro-batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.releases import CHANGES, parse_release
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.torchtitan import op_policy_saves, op_policy_terms
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.geometry import Geometry
from ppb_core.model.walk import walk
from ppb_core.search.enumerate import Refusal, enumerate_strategies
from ppb_core.search.spec import parse_search_spec
from ppb_core.timing.flops import op_policy_rerun
from ppb_core.timing.pricer import TimeModel

SM_FLOPS = 100e12 * 0.5 / 64
WAVE = 2 * 128 * 128 * 1024 / SM_FLOPS  # one wave of 128×128 tiles at inner 1024: 42.95 us
HBM = 500e9
FUSED = "2026-06-24"  # 3396a4b37's date: a commit of torchtitan's main from then on


def _raw(release: dict | None = None, framework: str = "torchtitan", compiled: bool = True) -> dict:
    titan = framework == "torchtitan"
    return {
        "name": "r",
        "framework": framework,
        **({"framework_release": release} if release is not None else {}),
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, **({"zero": 3, "fsdp": True} if titan else {})},
        "training": {"seq_length": 2048, "micro_batch_size": 1, "recompute": {"mode": "selective", "option": "op"}}
        if titan
        else {"seq_length": 2048, "micro_batch_size": 1},
        "device": ROUND_DEVICE,
        "timing": {"torch_compile": compiled} if titan else {},
    }


def _model(release: str | None, compiled: bool = True) -> TimeModel:
    return TimeModel(parse_run_config(_raw({"torchtitan": release} if release else None, compiled=compiled)))


def _ops(model: TimeModel) -> tuple[object, dict]:
    body = next(layer for layer in walk(model.run) if layer.node == "BODY")
    return body, {op.name: op for op in model.ops(body)}


@pytest.mark.parametrize(
    ("value", "holds"),
    [("v0.2.2", False), ("0.2", False), ("v0.1.0", False), ("2024-12-26", False), ("2026-06-23", False), (FUSED, True)],
)
def test_only_a_commit_from_3396a4b37_on_fuses_the_projections(value, holds):
    change = CHANGES["torchtitan_fused_qkv"]
    assert (change.library, change.commit, change.date) == ("torchtitan", "3396a4b37", "2026-06-24")
    assert parse_release("torchtitan", value).holds(change) is holds
    assert Geometry.from_run(parse_run_config(_raw({"torchtitan": value}))).fused_qkv is holds


def test_unstated_torchtitan_is_v0_2_2_whose_linears_are_apart():
    run = parse_run_config(_raw())
    assert not run.framework_release.holds("torchtitan_fused_qkv")
    assert not Geometry.from_run(run).fused_qkv


@pytest.mark.parametrize(
    ("release", "framework", "said"),
    [
        ({"torchtitan": "v0.9"}, "torchtitan", "no torchtitan release"),
        ({"torchtitan": "3396a4b37"}, "torchtitan", "the date of the commit"),
        ({"torchtitan": FUSED}, "megatron", "is torchtitan's; this run's framework is megatron"),
    ],
)
def test_a_bad_or_misplaced_torchtitan_release_is_one_line(release, framework, said):
    with pytest.raises(InputError) as caught:
        parse_run_config(_raw(release, framework), "run.yaml")
    line = str(caught.value)
    assert line.startswith("run.yaml: framework_release.torchtitan: ") and said in line and "\n" not in line


def test_the_fused_projection_is_one_gemm_each_op_pays_its_share_of():
    _, apart = _ops(_model(None))
    assert apart["qk_proj"].linears == (1024, 256) and apart["v_proj"].linears == (256,)
    model = _model(FUSED)
    _, ops = _ops(model)
    assert ops["qk_proj"].linears == ops["v_proj"].linears == ()
    assert ops["qk_proj"].gemm[2:] == (1280, 1, 1536) and ops["v_proj"].gemm[2:] == (256, 1, 1536)
    assert ops["mlp_in"].linears == (2816, 2816)  # w1 and w3 stay apart on main (`FeedForward`)
    # one GEMM of 1536 columns: 16·12 = 192 tiles of 128×128 on 64 SMs, 3 full waves, split by columns.
    # Compiled, the rotary's kernels read Q and K from the wqkv output (nothing more) and V is copied:
    # 2048·256 bf16 read and written, 2,097,152 B at 500 GB/s = 4.19 us on v_proj.
    assert model._phase_s(ops["qk_proj"], "forward") == pytest.approx(3 * WAVE * 1280 / 1536, rel=1e-9)
    assert model._phase_s(ops["v_proj"], "forward") == pytest.approx(
        3 * WAVE * 256 / 1536 + 2 * 2048 * 256 * 2 / HBM, rel=1e-9
    )


def test_the_split_s_bytes_by_hand():
    # compiled (torch 2.13's generated code, complex rotary): Q's and K's copies fold into the rotary's
    # kernels, nothing more on qk_proj; V copied (read, write: 2048·256·2·2 = 2,097,152 B) forward, and its
    # gradient read and written into the cat's slice backward, on v_proj. No input-gradient sums: one linear
    # has one input gradient (wq, wk, wv apart added two, 2048·1024·2 B each, compiled).
    _, apart = _ops(_model(None))
    assert apart["qk_proj"].side_bytes == apart["v_proj"].side_bytes == (0.0, 2048 * 1024 * 2)
    _, ops = _ops(_model(FUSED))
    assert ops["qk_proj"].side_bytes == (0.0, 0.0)
    assert ops["v_proj"].side_bytes == (2_097_152, 2_097_152)
    # eager: each part its own copy (read, write), the cat reads each gradient and writes its slice
    _, eager = _ops(_model(FUSED, compiled=False))
    assert eager["qk_proj"].side_bytes == (2 * 5_242_880, 2 * 5_242_880)
    assert eager["v_proj"].side_bytes == (2_097_152, 2_097_152)


def test_the_op_policy_counts_one_mm_for_the_projection():
    # _apply_op_sac saves every odd aten.mm in forward order: apart wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7
    # (wq, wv, w1, w2 saved); fused wqkv 1, wo 2, w1 3, w3 4, w2 5 (wqkv, w1, w2 saved)
    model = _model(FUSED)
    body, _ = _ops(model)
    saves = op_policy_saves(body.kind, model._geometry)
    assert saves == {
        "attention.wqkv_output": True,
        "attention.wo_output": False,
        "mlp.w1_output": True,
        "mlp.w3_output": False,
        "mlp.w2_output": True,
    }
    rerun = {op.name: op for op in op_policy_rerun(model.ops(body), body.kind, model._geometry)}
    # nothing of the projection runs again (apart, wk's 256 columns did); wo and w3 do
    assert "qk_proj" not in rerun and "v_proj" not in rerun
    assert "out_proj" in rerun and rerun["mlp_in"].linears == (2816,)
    apart = _model(None)
    body, _ = _ops(apart)
    assert {op.name: op for op in op_policy_rerun(apart.ops(body), body.kind, apart._geometry)}["qk_proj"].linears == (
        256,
    )


def test_the_op_policy_keeps_the_whole_wqkv_output():
    # saved: the block's input, wqkv's output (2048 tokens · 1536), the SDPA's output (2048 · 1024) and fp32
    # log-sum-exp (2048 · 16), w1's (2048 · 2816) and w2's (2048 · 1024); apart: wq's (1024) and wv's (256)
    # where wqkv's 1536 stands
    kept = {}
    for release in (None, FUSED):
        run = parse_run_config(_raw({"torchtitan": release} if release else None))
        body = next(layer for layer in walk(run) if layer.node == "BODY")
        terms = op_policy_terms(body.kind, MemorySetup.from_run(run))
        kept[release] = {term.op: term.elements for term in terms}
    assert kept[FUSED]["attention.wqkv_output"] == 2048 * 1536
    assert "attention.wq_output" not in kept[FUSED] and "attention.wk_output" not in kept[FUSED]
    assert kept[None]["attention.wq_output"] + kept[None]["attention.wv_output"] == 2048 * 1280
    assert sum(kept[FUSED].values()) - sum(kept[None].values()) == 2048 * 256


def test_a_search_s_torchtitan_commit_reaches_every_strategy():
    # a search spec's framework_release holds for every strategy's run config, as Megatron's releases do
    data = Path(__file__).parent / "data" / "search"
    raw = yaml.safe_load((data / "tiny-titan.yaml").read_text()) | {"framework_release": {"torchtitan": FUSED}}
    spec = parse_search_spec(raw, data / "tiny-titan.yaml", data)
    strategies = [s for s in enumerate_strategies(spec) if not isinstance(s, Refusal)]
    assert strategies
    for strategy in strategies[:3]:
        run = parse_run_config(strategy.run_raw(spec), "s.yaml")
        assert run.framework_release.torchtitan == FUSED and Geometry.from_run(run).fused_qkv
    megatron = dict(raw, framework="megatron")
    with pytest.raises(InputError) as caught:
        parse_search_spec(megatron, "s.yaml", data)
    assert str(caught.value).startswith("s.yaml: framework_release.torchtitan: is torchtitan's")


def test_eager_float8_casts_the_input_once_for_the_one_wqkv():
    # eager, wq, wk and wv each cast the whole input (`Float8Linear.forward` a module each: 5 B an element,
    # amax read 2, cast read 2 and write 1; qk_proj's two casts 10, v_proj's 5); one wqkv linear casts it
    # once, qk_proj and v_proj paying 1280/1536 and 256/1536 of it, as compiled CSE shares it
    float8 = {"torch_compile": False, "matmul_dtype": "fp8", "fp8_recipe": "tensorwise"}
    casts = {}
    for release in (None, FUSED):
        raw = _raw({"torchtitan": release} if release else None) | {"timing": float8}
        model = TimeModel(parse_run_config(raw))
        _, ops = _ops(model)
        casts[release] = [model._cast_bytes(ops[name], gradient=False) for name in ("qk_proj", "v_proj", "mlp_in")]
    assert casts[None] == [10, 5, 10]
    assert casts[FUSED] == pytest.approx([5 * 1280 / 1536, 5 * 256 / 1536, 10])
