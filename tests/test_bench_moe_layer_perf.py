"""bench/moe_layer_perf.py: Megatron CI's MoE-layer performance cases as ppb states them, by hand from the test's
files (NVIDIA/Megatron-LM tests/functional_tests/test_cases/common/moe_perf/, cf39a4ddcf, unchanged at d98e8a64)."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("moe_layer_perf")


# test_cases.py PERFORMANCE_CASES, in its order: (name, proxy, token_dispatcher / moe_flex_dispatcher_backend,
# fp8 "e4m3" with fp8_recipe "blockwise" or none)
FILE_CASES = (
    ("mixtral_a2a_tp1ep8_fp8", "mixtral", "alltoall", True),
    ("mixtral_deepep_tp1ep8_fp8", "mixtral", "deepep", True),
    ("mixtral_hybridep_tp1ep8_fp8", "mixtral", "hybridep", True),
    ("deepseek_a2a_tp1ep8_fp8", "deepseek", "alltoall", True),
    ("deepseek_hybridep_tp1ep8_fp8", "deepseek", "hybridep", True),
    ("deepseek_deepep_tp1ep8_fp8", "deepseek", "deepep", True),
    ("mixtral_a2a_tp1ep8_bf16", "mixtral", "alltoall", False),
    ("mixtral_deepep_tp1ep8_bf16", "mixtral", "deepep", False),
    ("mixtral_hybridep_tp1ep8_bf16", "mixtral", "hybridep", False),
    ("deepseek_a2a_tp1ep8_bf16", "deepseek", "alltoall", False),
    ("deepseek_deepep_tp1ep8_bf16", "deepseek", "deepep", False),
    ("deepseek_hybridep_tp1ep8_bf16", "deepseek", "hybridep", False),
)


def test_the_case_table_is_the_files(bench):
    ours = {case.name: (case.name, case.proxy, case.dispatcher, case.fp8) for case in bench.CASES}
    assert sorted(ours.values()) == sorted(FILE_CASES)
    # MoEPerformanceCase defaults every case keeps: moe_permute_fusion, moe_router_fusion,
    # moe_router_force_load_balancing True
    assert all(case.permute_fusion and case.router_fusion and case.force_balance for case in bench.CASES)
    # baseline.json holds exactly these twelve
    assert set(bench.MEASURED) == set(ours)


def test_the_proxies_are_the_files(bench):
    # MIXTRAL_PROXY: hidden 4096, moe_ffn_hidden_size 14336, 8 experts, top 2, softmax (the default), no groups,
    # no expert bias; DEEPSEEK_PROXY: hidden 7168, 2048, 32 experts, top 8, 8 groups, group top-k 4, sigmoid,
    # expert bias. Both seq_length 4096, micro_batch_size 1, moe_router_dtype fp32.
    mixtral, deepseek = bench.PROXIES["mixtral"], bench.PROXIES["deepseek"]
    assert (mixtral.hidden_size, mixtral.moe_ffn_hidden_size, mixtral.num_experts, mixtral.router_topk) == (
        4096,
        14336,
        8,
        2,
    )
    assert (mixtral.score_function, mixtral.num_groups, mixtral.group_topk, mixtral.expert_bias) == (
        "softmax",
        None,
        None,
        False,
    )
    assert (deepseek.hidden_size, deepseek.moe_ffn_hidden_size, deepseek.num_experts, deepseek.router_topk) == (
        7168,
        2048,
        32,
        8,
    )
    assert (deepseek.score_function, deepseek.num_groups, deepseek.group_topk, deepseek.expert_bias) == (
        "sigmoid",
        8,
        4,
        True,
    )
    assert (bench.SEQ_LENGTH, bench.MICRO_BATCH_SIZE, bench.EP, bench.TP) == (4096, 1, 8, 1)


def test_each_run_config_holds_what_the_test_builds(bench):
    # __main__.py `_build_transformer_config`: no gated_linear_unit / activation_func (TransformerConfig defaults:
    # GeLU, one up-projection); moe_router_load_balancing_type "aux_loss" at coefficient 1.0 for both proxies; the
    # DeepSeek proxy's shared expert not passed; FP8 as hybrid blockwise; 8 GPUs, EP 8, TP 1.
    for case in bench.CASES:
        run = bench.case_run(case)
        spec = run.specs[case.proxy]
        assert spec.activation == "gelu"
        assert spec.shared_experts == 0
        moe = run.training.moe
        assert moe.router.aux_losses == ["aux_loss"]
        assert moe.router.fusion and moe.router.force_balance and moe.permute_fusion
        assert moe.router_dtype == "fp32"
        assert (run.parallel.dp, run.parallel.tp, run.parallel.ep) == (8, 1, 8)
        assert run.timing.moe_dispatcher == case.dispatcher
        assert (run.timing.matmul_dtype == "fp8") == case.fp8
        if case.fp8:
            assert run.timing.fp8_recipe == "blockwise"
        assert run.device.name == "h100-80gb"


def test_the_measured_figures_are_baseline_json(bench):
    # baseline.json: mixtral_a2a_tp1ep8_bf16 forward 4.32688798904419 ms, backward 7.684332823753357, max allocated
    # 2890180198.4 bytes; deepseek_hybridep_tp1ep8_fp8 5.142886424064637, 7.6874864339828495, 2652078464
    assert bench.MEASURED["mixtral_a2a_tp1ep8_bf16"] == (4.32688798904419, 7.684332823753357, 2890180198.4)
    assert bench.MEASURED["deepseek_hybridep_tp1ep8_fp8"] == (5.142886424064637, 7.6874864339828495, 2652078464)


def test_the_priced_layer_is_the_moe_layer_alone(bench):
    # MoELayer holds the router, the dispatcher and the experts; the pre-MLP norm and the residual add are
    # TransformerLayer's, so none of ppb's `norm2` / `residual_moe` is priced.
    priced = bench.price(bench.CASES[0])
    names = {name for name, _ in priced.op_ms}
    assert "norm2" not in names and "residual_moe" not in names
    assert {"router", "dispatch", "experts_in", "experts_out", "combine"} <= names
