"""bench/trends.py: a row's features read back from its run config, and the statistics by hand."""

from __future__ import annotations

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("trends")


@pytest.fixture(scope="module")
def row_177b(bench):
    # one row priced, not the table
    row = next(r for r in bench.public_runs() if r.name.startswith("Megatron GPT 177B ("))
    return bench.collect([row])[0]


def test_the_177b_row_s_features_are_the_readme_table_s(row_177b):
    # Megatron-LM README (core_r0.8.0) model table: 177B, hidden 12288, 96 layers, TP 8, PP 6, DP 48 on 2304
    # H100, batch 1152: 1152 / 48 = 24 micro-batches of one sequence a pipeline, 24 / 6 = 4 a stage;
    # interleaved at one layer a virtual stage (bench/public_runs.py `megatron_schedule`): 96 / 6 = 16 chunks;
    # 2304 GPUs over 8 a node = 288 nodes; bf16, ZeRO-1 (the distributed optimizer), sequence 4096
    f = row_177b
    assert (f["device"], f["framework"], f["precision"], f["moe"]) == ("h100-80gb", "megatron", "bf16", "dense")
    assert (f["hidden"], f["layers"], f["hidden_per_tp"]) == (12288, 96, 12288 // 8)
    assert (f["tp"], f["pp"], f["vp"], f["cp"], f["ep"], f["dp"]) == (8, 6, 16, 1, 1, 48)
    assert (f["mbs"], f["m"], f["m_per_pp"], f["seq"]) == (1, 24, 4.0, 4096)
    assert (f["gpus"], f["nodes"], f["sharding"], f["group"]) == (2304, 288, "zero1", "published tables")
    assert (f["tp_overlap"], f["p2p_overlap"], f["cuda_graphs"]) == (True, True, "none")
    assert (f["dispatcher"], f["offload"], f["recompute"]) == ("-", "-", "none")
    assert f["ep_overlap"] == "-"  # no experts: no combined 1F1B to tell
    # the README row: 432.8 TFLOP/s per GPU of Megatron's FLOP count; the error is ppb's seconds over those
    assert f["error"] == pytest.approx(f["ppb_s"] / f["published_s"] - 1)
    assert 0 < f["share_bubble"] < 1 and 0 < f["share_dp_communication"] < 1


def test_residuals_are_against_the_mean_of_the_row_s_device(bench):
    rows = [
        {"device": "a", "error": -0.10},
        {"device": "a", "error": -0.20},
        {"device": "b", "error": 0.05},
    ]
    # device a's mean −0.15: −0.10 − (−0.15) = +0.05, −0.20 − (−0.15) = −0.05; b alone: 0
    assert bench.residuals(rows, "device") == pytest.approx([0.05, -0.05, 0.0])


def test_explained_variance_by_hand(bench):
    rows = [
        {"device": "a", "error": -0.10},
        {"device": "a", "error": -0.20},
        {"device": "b", "error": 0.05},
        {"device": "b", "error": 0.05},
    ]
    # mean −0.05; deviations −0.05, −0.15, +0.10, +0.10: variance (0.0025 + 0.0225 + 0.01 + 0.01) / 4 = 0.01125;
    # against the devices' means (−0.15, +0.05): +0.05, −0.05, 0, 0: (0.0025 + 0.0025) / 4 = 0.00125 left
    assert bench.explained(rows, "device") == pytest.approx(1 - 0.00125 / 0.01125)


def test_within_t_by_hand(bench):
    # device a: x 0, 1, 2 with errors 0, 0.1, 0.3; device b: x 0, 1 with errors 0.5, 0.5.
    # Against the devices' means: a's x −1, 0, 1, errors −0.1333, −0.0333, +0.1667; b's x −0.5, +0.5, errors 0, 0.
    # sxx = 1 + 0 + 1 + 0.25 + 0.25 = 2.5; sxy = 0.1333 + 0.1667 = 0.3: slope 0.12.
    # Residuals: −0.1333 + 0.12 = −0.0133, −0.0333, 0.1667 − 0.12 = 0.0467, +0.06, −0.06:
    # their squares 0.000178 + 0.001111 + 0.002178 + 0.0036 + 0.0036 = 0.010667 over 5 − 2 − 1 = 2: 0.005333;
    # se = sqrt(0.005333 / 2.5) = 0.046188, t = 0.12 / 0.046188 = 2.598
    rows = [
        {"device": "a", "x": 0, "error": 0.0},
        {"device": "a", "x": 1, "error": 0.1},
        {"device": "a", "x": 2, "error": 0.3},
        {"device": "b", "x": 0, "error": 0.5},
        {"device": "b", "x": 1, "error": 0.5},
    ]
    assert bench.within_t(rows, "x", "device") == pytest.approx(2.598, abs=1e-3)
    # a feature constant within every device has no slope to fit
    assert bench.within_t([{**r, "x": 1 if r["device"] == "a" else 2} for r in rows], "x", "device") == 0.0


def test_spearman_by_hand(bench):
    # ties share their mean rank: [1, 2, 2, 3] -> ranks [1, 2.5, 2.5, 4]
    assert bench.ranks([1, 2, 2, 3]) == [1.0, 2.5, 2.5, 4.0]
    # a monotone relation is ±1 whatever its shape
    assert bench.spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)
    assert bench.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # x ranks [1, 2, 3], y ranks [2, 1, 3]: d = (1, 1, 0), 1 − 6·Σd²/(n(n²−1)) = 1 − 12/24 = 0.5
    assert bench.spearman([1, 2, 3], [5, 4, 6]) == pytest.approx(0.5)
    assert bench.spearman([1, 2, 3], [7, 7, 7]) == 0.0


def test_buckets_by_value_or_by_tercile(bench):
    labels, label = bench.buckets([1, 2, 2, 8])
    assert labels == ["1", "2", "8"] and label(2) == "2"
    values = list(range(1, 10))  # nine values: the thirds start at the 4th and the 7th, 4 and 7
    labels, label = bench.buckets(values)
    assert labels == ["<4", "4-7", ">=7"]
    assert [label(v) for v in (3, 4, 6, 7)] == ["<4", "4-7", "4-7", ">=7"]
    # a quarter or more zeros (no pipeline, no bubble) are a bucket apart; the thirds are of the rest
    labels, label = bench.buckets([0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert labels == ["0", "<4", "4-7", ">=7"] and label(0) == "0"


def _row(name: str, published_s: float, ppb_s: float, **settings) -> dict:
    """A row of one model, every setting at one value but *settings*."""
    base = dict.fromkeys(("framework", "device", "family", "moe"), "x") | {"hidden": 4096, "layers": 32}
    base |= dict.fromkeys(("tp", "pp", "vp", "cp", "ep", "dp", "mbs", "m", "gpus"), 1) | {"seq": 4096}
    words = ("precision", "sharding", "recompute", "p2p_overlap", "tp_overlap", "cuda_graphs", "dispatcher")
    words += ("offload", "release", "ep_overlap")
    base |= dict.fromkeys(words, "-") | {"name": name, "published_s": published_s, "ppb_s": ppb_s}
    return base | settings


def test_a_pair_compares_gpu_seconds_a_token(bench):
    # a: 8 GPUs, DP 8, 4 micro-batches of 1 sequence of 4096: 131,072 tokens in 10 s measured, 9 s ppb;
    # b: the same but 16 micro-batches a replica (4x the tokens) in 36 s measured, 36 s ppb.
    # GPU-seconds a token, b over a: measured 36/(4·10) = 0.9, ppb 36/(4·9) = 1.0
    a = _row("a", 10.0, 9.0, dp=8, gpus=8, m=4)
    b = _row("b", 36.0, 36.0, dp=8, gpus=8, m=16)
    other_model = _row("c", 1.0, 1.0, hidden=8192)
    three_apart = _row("d", 1.0, 1.0, dp=8, gpus=8, m=16, tp=2, pp=2, vp=2)  # 3 apart from b, 4 from a
    (found,) = bench.pairs([a, b, other_model, three_apart])
    apart, first, second, measured, ours = found
    assert (apart, first["name"], second["name"]) == (["m"], "a", "b")
    assert measured == pytest.approx(0.9) and ours == pytest.approx(1.0)


def test_megatron_bridge_s_a_b_is_a_pair_apart_in_the_combined_1f1b_alone(bench):
    # bench/_bridge_cards.py: one recipe, overlap_moe_expert_parallel_comm off then on; the same GPUs and tokens, so
    # the measured ratio is the steps': 20.99203 / 24.7138 = 0.84941
    runs = [r for r in bench.public_runs() if r.name.startswith("Megatron-Bridge Qwen3 30B-A3B")]
    (found,) = bench.pairs(bench.collect(runs))
    apart, first, second, measured, _ = found
    assert apart == ["ep_overlap"] and (first["ep_overlap"], second["ep_overlap"]) == (False, True)
    assert measured == pytest.approx(20.99203 / 24.7138)


def test_an_fp8_row_pairs_with_its_bf16_twin_of_the_same_group(bench):
    # bf16 10 s measured, 9 s ppb; fp8 7 s measured, 6 s ppb: FP8/BF16 measured 0.7, ppb 6/9 = 0.6667, ppb over
    # measured 0.6667 / 0.7 − 1 = −4.76%. The FP8 row comes first in the list: the pair is still BF16 first. The
    # same FP8 settings in another group (another source's table) pair with nothing; an MXFP8 row is the BF16 row's
    # twin too (7.5 / 10 measured), but not the FP8 one's (two FP8 recipes apart).
    fp8 = _row("fp8", 7.0, 6.0, precision="fp8-delayed", group="g")
    bf16 = _row("bf16", 10.0, 9.0, precision="bf16", group="g")
    elsewhere = _row("elsewhere", 7.0, 6.0, precision="fp8-delayed", group="h")
    mxfp8 = _row("mxfp8", 7.5, 6.0, precision="fp8-mxfp8", group="g")
    found = bench.fp8_pairs([fp8, bf16, elsewhere, mxfp8])
    assert [(a["name"], b["name"]) for a, b, _, _ in found] == [("bf16", "fp8"), ("bf16", "mxfp8")]
    assert found[1][2] == pytest.approx(0.75)
    first, second, measured, ours = found[0]
    assert (first["name"], second["name"]) == ("bf16", "fp8")
    assert measured == pytest.approx(0.7) and ours == pytest.approx(6 / 9)
    assert ours / measured - 1 == pytest.approx(-0.0476, abs=1e-4)


def test_the_dgxc_tables_give_every_fp8_row_its_bf16_twin_unpriced(bench):
    # bench/_dgxc.py: each NeMo 1 table (8B, 70B, 405B, 175B at v24.11.1 and v25.02.02) has a BF16 and an FP8 row of
    # one recipe: 16 rows; v25.04.02's 70B FP8 runs PP8 without CP where its BF16 runs PP4 CP2: no twin
    runs = [r for r in bench.public_runs() if r.name.startswith(("dgxc v24.11.1", "dgxc v25.02.02", "dgxc v25.04.02"))]
    names = {r.name for r in bench.twin_rows(runs)}
    assert len([n for n in names if not n.startswith("dgxc v25.04.02")]) == 16
    assert not any("70B" in n for n in names if n.startswith("dgxc v25.04.02"))
    assert "dgxc v25.04.02 25.02.01 Llama 3.1 8B CP2 FP8 (8 H100)" in names


def test_term_fit_by_hand(bench):
    # One cell, published 1 s each, so ppb/published = ppb, the miss 1 − ppb, the term over published = t:
    # rows (ppb, t, miss) (1.0, 0, 0), (1.0, 0.1, 0), (0.8, 0.1, 0.2).
    # Less their projections on ppb (sum ppb² = 1 + 1 + 0.64 = 2.64): the miss's coefficient 0.16 / 2.64 =
    # 0.060606, the term's (0.1 + 0.08) / 2.64 = 0.068182; miss residuals −0.060606, −0.060606, 0.2 − 0.048485 =
    # 0.151515; term residuals −0.068182, 0.1 − 0.068182 = 0.031818, 0.1 − 0.054545 = 0.045455.
    # szz = 0.0046488 + 0.0010124 + 0.0020661 = 0.0077273; szy = 0.0041322 − 0.0019284 + 0.0068871 = 0.0090909:
    # slope 0.0090909 / 0.0077273 = 20/17 = 1.17647. Left: 0.019608, −0.098039, 0.098039, squares summing to
    # 0.019608 over 3 − 1 − 1 = 1; se = sqrt(0.019608 / 0.0077273) = 1.59294, t = 1.17647 / 1.59294 = 0.7386
    rows = [
        {"cell": "a", "published_s": 1.0, "ppb_s": 1.0, "error": 0.0, "t": 0.0},
        {"cell": "a", "published_s": 1.0, "ppb_s": 1.0, "error": 0.0, "t": 0.1},
        {"cell": "a", "published_s": 1.0, "ppb_s": 0.8, "error": -0.2, "t": 0.1},
    ]
    slope, t = bench.term_fit(rows, lambda row: row["t"], "cell")
    assert slope == pytest.approx(20 / 17)
    assert t == pytest.approx(0.7386, abs=1e-3)


def test_term_fit_recovers_a_term_the_rows_were_made_with(bench):
    # published = ppb · (1 + c) + 2 · term with c 0.1 in cell a and 0.2 in cell b, no noise:
    # a: ppb 1, term 0 -> 1.1; ppb 1, term 0.05 -> 1.2; ppb 2, term 0.1 -> 2.4;
    # b: ppb 1, term 0.1 -> 1.4; ppb 2, term 0 -> 2.4 (cell, ppb, term, published)
    made = [
        ("a", 1.0, 0.0, 1.1),
        ("a", 1.0, 0.05, 1.2),
        ("a", 2.0, 0.1, 2.4),
        ("b", 1.0, 0.1, 1.4),
        ("b", 2.0, 0.0, 2.4),
    ]
    rows = [
        {"cell": cell, "published_s": published, "ppb_s": ppb, "error": ppb / published - 1, "t": term}
        for cell, ppb, term, published in made
    ]
    slope, t = bench.term_fit(rows, lambda row: row["t"], "cell")
    assert slope == pytest.approx(2.0)
    assert abs(t) > 1e6  # an exact fit
    # a term that is ppb's own seconds within each cell is the cell's rate: nothing left to fit
    assert bench.term_fit(rows, lambda row: 0.3 * row["ppb_s"], "cell") == (0.0, 0.0)


def test_class_terms_read_the_class_s_share_of_ppb_s_seconds(bench):
    # published = ppb · 1.1 + 0.5 · attention seconds, one cell, attention seconds = share · ppb:
    # ppb 1, share 0.1 -> 1.1 + 0.05 = 1.15; ppb 2, share 0.3 -> 2.2 + 0.3 = 2.5; ppb 1, share 0.2 -> 1.2
    made = [(1.0, 0.1, 1.15), (2.0, 0.3, 2.5), (1.0, 0.2, 1.2)]
    rows = [
        {
            "cell": "a",
            "published_s": published,
            "ppb_s": ppb,
            "error": ppb / published - 1,
            "share_attention": share,
            "share_gemm": 0.5,
            "share_rerun": 0.0,
        }
        for ppb, share, published in made
    ]
    term = next(term for name, _, term in bench.TERMS if name == "ppb's attention (class)")
    slope, _ = bench.term_fit(rows, term, "cell")
    assert slope == pytest.approx(0.5)


def test_class_terms_without_collected_classes_say_so(bench, capsys):
    rows = [{"cell": "a", "published_s": 1.0, "ppb_s": 1.0, "error": 0.0, "m": 1, "nodes": 1, "dp": 1}]
    rows[0].update({f"share_{name}": 0.0 for name in (*bench.SHARES, "host_wait")})
    bench.print_terms(rows, "cell")
    printed = capsys.readouterr().out
    assert "ppb's rerun (class)" in printed and "not collected" in printed


def test_class_shares_of_the_177b_row(bench):
    # the README's 177B row: flash attention, no recompute (Megatron-LM README core_r0.8.0): no reruns; its GEMMs
    # are most of the layers' seconds (hidden 12288: 24·h² FLOPs a token against attention's 4·s·h at s 4096)
    row = next(r for r in bench.public_runs() if r.name.startswith("Megatron GPT 177B ("))
    shares = bench.collect([row], classes=True)[0]
    assert shares["share_rerun"] == 0.0
    assert 0 < shares["share_attention"] < shares["share_gemm"] < 1


def test_the_overlap_term_reads_the_collected_full_charge(bench):
    # published = ppb · 1.05 + 0.25 · overlap_full_s, one cell: ppb 1, term 0.2 -> 1.05 + 0.05 = 1.1;
    # ppb 2, term 0 -> 2.1; ppb 1, term 0.4 -> 1.05 + 0.1 = 1.15
    made = [(1.0, 0.2, 1.1), (2.0, 0.0, 2.1), (1.0, 0.4, 1.15)]
    rows = [
        {"cell": "a", "published_s": published, "ppb_s": ppb, "error": ppb / published - 1, "overlap_full_s": term}
        for ppb, term, published in made
    ]
    term = next(term for name, _, term in bench.TERMS if name == "ppb's overlap in full")
    slope, _ = bench.term_fit(rows, term, "cell")
    assert slope == pytest.approx(0.25)


def test_the_overlap_term_without_collection_says_so(bench, capsys):
    rows = [{"cell": "a", "published_s": 1.0, "ppb_s": 1.0, "error": 0.0, "m": 1, "nodes": 1, "dp": 1}]
    rows[0].update({f"share_{name}": 0.0 for name in (*bench.SHARES, "host_wait")})
    bench.print_terms(rows, "cell")
    printed = capsys.readouterr().out
    assert "ppb's overlap in full" in printed and "--overlap" in printed


def test_the_full_charge_of_the_177b_row_s_overlap(bench):
    # The README's 177B (TP 8, PP 6, DP 48, --overlap-grad-reduce and --overlap-param-gather, core_r0.8.0): its
    # data-parallel reduce-scatter hides behind the last backward and its parameter all-gather behind the next
    # forward, each slowing the compute beside it by 16 / 132 of the hidden time on H100 (`Kernels.contention`).
    # With every collective taking all 132 SMs, a hidden second costs a full second (exposed = c − share·c +
    # max(share·c − partner, 1 · hidden) = c while the collective is the shorter): the step can only grow, and
    # by no more than the collectives' whole link time, the bound of running them after the compute.
    row = next(r for r in bench.public_runs() if r.name.startswith("Megatron GPT 177B ("))
    iteration = bench.row_iteration(row)
    added = bench.overlap_in_full_s(row, bench.config(row), iteration.seconds)
    assert 0 < added <= sum(iteration.link_seconds.values())


def test_host_per_gpu_is_the_layers_launches_at_the_h100_host_time_over_their_gpu_work(bench, row_177b):
    # DGX H100's host time a launch, 80.9 us (ppb_core/config/devices.py HOST_KERNEL_US_DGX_H100, the median of
    # Megatron CI's host-bound dense cases): the busiest stage's layers' launches (forward + backward, each
    # kind times its count) at 80.9 us, over their GPU milliseconds a micro-batch
    row = next(r for r in bench.public_runs() if r.name.startswith("Megatron GPT 177B ("))
    hosts = bench.layer_hosts(bench.config(row))
    launches = sum(count * (forward + backward) for _, count, _, _, forward, backward in hosts)
    gpu_ms = sum(count * (forward + backward) for _, count, forward, backward, _, _ in hosts)
    assert row_177b["host_per_gpu"] == pytest.approx(launches * 80.9e-3 / gpu_ms, rel=1e-9)
    assert 0 < row_177b["host_per_gpu"] < 1  # a 12288-wide TP 8 layer: GPU-bound


def test_host_per_gpu_is_zero_outside_megatron(bench):
    # torchtitan's rows carry no launch count (ppb prices no host for them)
    row = next(r for r in bench.public_runs() if r.name.startswith("torchtitan Llama 3.1 8B FSDP (8 H100)"))
    assert bench.collect([row])[0]["host_per_gpu"] == 0.0


def test_cells_by_one_feature_and_two_crossed(bench):
    rows = [
        {"device": "b200", "moe": "dense", "error": -0.10},
        {"device": "b200", "moe": "moe", "error": -0.30},
        {"device": "h100", "moe": "dense", "error": 0.04},
        {"device": "b200", "moe": "dense", "error": -0.20},
    ]
    # by device: b200 holds rows 1, 2, 4 (−0.10, −0.30, −0.20), h100 row 3 (+0.04), in order of the values
    assert [(values, errors) for values, errors in bench.cells(rows, ["device"])] == [
        (("b200",), [-0.10, -0.30, -0.20]),
        (("h100",), [0.04]),
    ]
    # crossed with moe: b200 dense (−0.10, −0.20), b200 moe (−0.30), h100 dense (+0.04)
    assert [values for values, _ in bench.cells(rows, ["device", "moe"])] == [
        ("b200", "dense"),
        ("b200", "moe"),
        ("h100", "dense"),
    ]


def test_the_cells_table_prints_means_and_rows_under(bench, capsys):
    rows = [{"device": "b200", "error": -0.10}, {"device": "b200", "error": 0.02}, {"device": "h100", "error": -0.30}]
    bench.print_cells(rows, ["device"])
    lines = capsys.readouterr().out.splitlines()
    # b200: mean (−0.10 + 0.02) / 2 = −4.0%, absolute (0.10 + 0.02) / 2 = 6.0%, one under, −10.0 .. +2.0%;
    # all: (−0.10 + 0.02 − 0.30) / 3 = −12.7%, absolute 0.42 / 3 = 14.0%, two under
    assert lines[1].split() == ["b200", "2", "-4.0%", "6.0%", "1", "-10.0%", "..", "+2.0%"]
    assert lines[3].split() == ["all", "3", "-12.7%", "14.0%", "2", "-30.0%", "..", "+2.0%"]


def test_a_model_is_its_family_shape_and_experts(bench):
    class Spec:
        family, hidden_size, num_layers, num_experts = "generic", 2048, 48, 128

    class Dense:
        family, hidden_size, num_layers = "generic", 16384, 126

    assert bench.model(Spec()) == "generic 2048x48 128e"
    assert bench.model(Dense()) == "generic 16384x126"


def test_cells_refuses_an_unknown_feature(bench, tmp_path, capsys):
    dumped = tmp_path / "rows.json"
    dumped.write_text('[{"device": "b200", "error": -0.1}]')
    assert bench.main(["--rows", str(dumped), "--cells", "device,colour"]) == 2
    assert capsys.readouterr().err.strip() == "bench/trends.py: --cells: colour: not a feature"
