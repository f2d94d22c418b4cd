"""bench/megatron_ci.py: a case's model_config.yaml handed to the reader as Megatron's CI hands it to
pretrain_gpt.py (tests/functional_tests/shell_test_utils/_run_training.sh, Megatron-LM d98e8a64)."""

from __future__ import annotations

import json
import math
import os
import subprocess

import pytest
from bench_modules import load_bench

from ppb_core.balance.megatron_import import import_megatron


@pytest.fixture(scope="module")
def bench():
    return load_bench("megatron_ci")


def git_at(repo, day: str, *args: str) -> str:
    """Runs git in a scratch repository with every commit dated `day` (noon), so a test's history has dates."""
    env = {**os.environ, "GIT_AUTHOR_DATE": f"{day}T12:00:00", "GIT_COMMITTER_DATE": f"{day}T12:00:00"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    done = subprocess.run(["git", "-C", str(repo), *ident, *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_ci_s_yaml_becomes_the_launch_it_runs(bench):
    # _run_training.sh: `true` is the bare flag, a `[...]` value its words, a value with `(`, `|` or a
    # space one quoted word; ENV_VARS are the environment (exported before the launch)
    config = {
        "ENV_VARS": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NCCL_ALGO": "Ring"},
        "MODEL_ARGS": {
            "--num-layers": 4,
            "--hidden-size": 64,
            "--num-attention-heads": 4,
            "--seq-length": 128,
            "--max-position-embeddings": 128,
            "--bf16": True,
            "--recompute-modules": "[core_attn, mlp]",
            "--recompute-granularity": "selective",
            "--pipeline-model-parallel-size": 2,
            "--pipeline-model-parallel-layout": "Et|(tt|)*1tL",
            "--data-path": "${DATA_PATH}/text",
        },
    }
    text = bench.launch_text(config)
    assert text.splitlines()[0] == "export CUBLAS_WORKSPACE_CONFIG=:4096:8"
    imported = import_megatron(text, 8, "h100-80gb")
    assert imported.raw["memory"] == {"cublas_workspace_config": ":4096:8"}
    assert imported.raw["training"]["recompute"] == {"granularity": "selective", "modules": ["core_attn", "mlp"]}
    assert imported.raw["parallel"]["layout"] == "Et|(tt|)*1tL"
    assert imported.notes == []


def test_the_golden_values_median_leaves_iteration_one_out(bench):
    # bench/public_runs.py's convention: the median of the logged windows without iteration 1
    # (iteration 3's "nan" is not a value): the median of 1.0, 3.0 and 2.0
    assert bench.seconds_of({"values": {"1": 9.0, "2": 1.0, "3": "nan", "4": 3.0, "5": 2.0}}) == 2.0
    assert bench.seconds_of({"values": {"1": 9.0}}) is None


def test_a_row_names_the_commit_that_measured_its_memory(bench, tmp_path, monkeypatch):
    # adc69dba2d renamed every golden file (R100) and 93ebf8d72f only dropped NaN iteration times: the
    # row's memory was measured by the last commit that changed mem-max-allocated-bytes, renames followed
    def git(*args: str) -> str:
        return git_at(tmp_path, "2025-01-23", *args)

    def write(path: str, memory: int, seconds: float) -> None:
        values = {"mem-max-allocated-bytes": {"values": {"1": memory}}, "iteration-time": {"values": {"2": seconds}}}
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(json.dumps(values, indent=1))

    git("init", "-q")
    write("old/golden.json", 100, 1.0)
    git("add", "-A")
    git("commit", "-qm", "first")
    write("old/golden.json", 200, 1.0)  # the memory measured
    git("commit", "-qam", "memory")
    measured = git("rev-parse", "--short=10", "HEAD")
    (tmp_path / "new").mkdir()
    git("mv", "old/golden.json", "new/golden.json")  # adc69dba2d's refactor
    git("commit", "-qm", "rename")
    write("new/golden.json", 200, float("nan"))  # 93ebf8d72f: the times edited, the memory kept
    git("commit", "-qam", "times")
    edited = git("rev-parse", "--short=10", "HEAD")
    monkeypatch.setattr(bench, "MIRROR", str(tmp_path))
    monkeypatch.setattr(bench, "COMMIT", "HEAD")
    file_commit, memory_commit = bench._set_by("new/golden.json")
    assert file_commit.split()[0].startswith(edited[:7]) and memory_commit.split()[0].startswith(measured[:7])


def test_moe_rows_beyond_3_percent_are_priced_at_their_routing_bound(bench):
    # A small dropless MoE launch, EP 2 over 4 experts, top 2: the busiest expert-parallel rank receives at most
    # ep·min(k, experts/ep)/k = 2·min(2, 2)/2 = 2 times its fair share (every token's two copies on its experts);
    # a dense row and an MoE row within 3% are left out
    moe = (
        "pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
        "--max-position-embeddings 512 --micro-batch-size 2 --global-batch-size 16 --bf16 --vocab-size 32000 "
        "--tokenizer-type NullTokenizer --num-experts 4 --moe-router-topk 2 --expert-model-parallel-size 2"
    )
    dense = moe.split(" --num-experts")[0]
    golden = bench.Golden(None, None, None, "c0ffee 2026-01-01")
    rows = []
    for name, text, off in (("moe_off", moe, 1.10), ("moe_near", moe, 1.01), ("dense_off", dense, 1.10)):
        row = bench.price("moe", name, "h100", text, golden, 8)
        predicted = bench.predicted_gib(row.measured)[0]
        rows.append(bench.Row(**{**row.__dict__, "peak": (predicted * off, predicted), "moment": "loss"}))
    (found,) = bench.routing_rows(rows)
    row = found.row
    assert row.case == "moe_off"
    assert found.balanced == pytest.approx(row.peak[1])
    assert found.bound == pytest.approx(2.0)
    assert found.worst > found.balanced
    # measured 1.10 × balanced on a peak linear in the share: 1 + 0.10·balanced/(worst − balanced)·(2 − 1)
    assert found.implied == pytest.approx(1 + 0.10 * found.balanced / (found.worst - found.balanced))
    # no golden iterations logged: one draw, whose largest is its mean, whatever the spread
    assert found.independent == pytest.approx(1.0)


def test_expected_largest_of_normals(bench):
    # E[max of n standard normals]: 0 for one; 1/√π for two; 3/(2√π) for three (the order statistics' closed forms)
    assert bench.expected_max_normal(1) == pytest.approx(0.0, abs=1e-9)
    assert bench.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert bench.expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), rel=1e-6)


def test_independent_routing_spread_of_the_ep8_case(bench):
    # moe/gpt3_moe_mcore_te_ep8_*: 8 experts over EP 8 (one a rank), top 2, MBS 4 × 1024 tokens: the rank's
    # expert takes 4096 · 2 = 8192 rows a layer at balance (allgather: 8 ranks' 4096 tokens × 2/8), 12 layers,
    # one micro-batch in flight. A token's copies on the rank: hypergeometric, variance 2·(1/8)(7/8)·(6/7) =
    # 0.1875; over the 32768 tokens 6144, over the mean squared 6144/8192² = (7/8)·6/(7·8192) a layer, /12 for
    # the 12 layers: 5.25/688,128 = 7.629e-6, a spread of 0.2762%; at its largest of 100 logged iterations
    # (E[max of 100 standard normals] = 2.5076, tabulated): 1 + 2.5076 · 0.002762 = 1.00693
    share = bench.independent_share(8192, 8, 1, 2, 12, 100)
    assert share == pytest.approx(1 + 2.50759 * math.sqrt(5.25 / 688128), rel=1e-5)
    assert share == pytest.approx(1.00693, abs=1e-5)


def test_a_row_is_priced_at_the_releases_that_measured_it(bench, tmp_path, monkeypatch):
    # A rerun that re-records the times and leaves the memory the same (2795ebde97's image upgrade) measured the
    # file; an edit that only drops NaN times (93ebf8d72f) did not. Transformer Engine: the CI image's
    # Dockerfile.ci.dev TE_COMMIT (bee4649c1 is TE's commit of 2025-03-18), else uv.lock's version, else none.
    def git(*args: str, day: str = "2025-04-04") -> str:
        return git_at(tmp_path, day, *args)

    def write(path: str, text: str) -> None:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)

    def golden(memory: int, seconds: float, nan: bool = True) -> str:
        times = {"1": "nan", "2": seconds} if nan else {"2": seconds}
        return json.dumps({"mem-max-allocated-bytes": {"values": {"1": memory}}, "iteration-time": {"values": times}})

    git("init", "-q")
    write("case/golden.json", golden(100, 1.0))
    write("Dockerfile.ci.dev", "ARG TE_COMMIT=bee4649c15a79ffcb9689ca7c0c963f5febaa28a\n")
    git("add", "-A")
    git("commit", "-qm", "first")
    write("case/golden.json", golden(100, 1.5))  # a rerun in a new image: the times differ
    write("Dockerfile.ci.dev", "FROM image\n")
    write("uv.lock", 'name = "transformer-engine"\nversion = "2.6.0.post1"\n')
    git("add", "-A")
    git("commit", "-qm", "rerun", day="2025-07-05")
    rerun = git("rev-parse", "--short=10", "HEAD")
    write("case/golden.json", golden(100, 1.5, nan=False))  # 93ebf8d72f-like: the leading NaN time dropped
    git("commit", "-qam", "times", day="2026-08-19")
    monkeypatch.setattr(bench, "MIRROR", str(tmp_path))
    monkeypatch.setattr(bench, "COMMIT", "HEAD")
    found = bench._measured_by("case/golden.json")
    assert found.split() == [found.split()[0], "2025-07-05"] and found.startswith(rerun[:7])
    first = git("rev-parse", "--short=10", "HEAD~2")
    assert bench.te_release(first) == "2025-03-18"
    assert bench.te_release(rerun) == "2.6.0.post1"
    assert bench.te_release(git("rev-parse", "--short=10", "HEAD")) == "2.6.0.post1"
    golden_row = bench.Golden(None, None, None, found, found, found)
    assert golden_row.release == {"megatron_core": "2025-07-05", "transformer_engine": "2.6.0.post1"}


def test_a_row_is_priced_at_the_pytorch_of_its_ci_image(bench, tmp_path, monkeypatch):
    # The dev image's NGC container: the BASE_IMAGE of the CI_MCORE_DEV_IMAGE build job (46fdcd5b7e's
    # .gitlab/stages/01.test.yml: the LTS image first, 24.01, then the dev one, 24.10), later
    # docker/.ngc_version.dev; NGC 24.10 ships PyTorch 2.5.0a0+e000cf0ad9; a container not listed: unstated
    def git(*args: str) -> str:
        return git_at(tmp_path, "2025-01-23", *args)

    def write(path: str, text: str) -> None:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)

    git("init", "-q")
    write(
        ".gitlab/stages/01.test.yml",
        "    matrix:\n      - IMAGE: CI_MCORE_LTS_IMAGE\n        FILE: Dockerfile.ci.lts\n"
        "        BASE_IMAGE: nvcr.io/nvidia/pytorch:24.01-py3\n      - IMAGE: CI_MCORE_DEV_IMAGE\n"
        "        FILE: Dockerfile.ci.dev\n        BASE_IMAGE: nvcr.io/nvidia/pytorch:24.10-py3\n",
    )
    write("case/golden.json", json.dumps({"mem-max-allocated-bytes": {"values": {"1": 100}}}))
    git("add", "-A")
    git("commit", "-qm", "jan")
    january = git("rev-parse", "--short=10", "HEAD")
    write("docker/.ngc_version.dev", "nvcr.io/nvidia/pytorch:99.01-py3\n")
    git("add", "-A")
    git("commit", "-qm", "unknown container")
    monkeypatch.setattr(bench, "MIRROR", str(tmp_path))
    assert bench.torch_release(january) == "2.5.0a0+e000cf0ad9"
    assert bench.torch_release(git("rev-parse", "--short=10", "HEAD")) == "2.5.0a0+e000cf0ad9"  # 01.test.yml still
    git("rm", "-q", ".gitlab/stages/01.test.yml")
    git("commit", "-qm", "gone")
    assert bench.torch_release(git("rev-parse", "--short=10", "HEAD")) is None
    row = bench.Golden(None, None, None, f"{january} 2025-01-23", measured_commit=f"{january} 2025-01-23")
    assert row.release == {
        "megatron_core": "2025-01-23",
        "transformer_engine": "2025-01-23",
        "pytorch": "2.5.0a0+e000cf0ad9",
    }


def test_rows_beyond_3_percent_by_iteration(bench):
    # mem-max-allocated-bytes never falls: iteration 1 (no Adam moments yet) against ppb without them, and the rise
    # from the second logged iteration to the last. A small dense launch priced, its measurement made up 10% over
    # ppb at the last iteration, iteration 1 at 1.0 GiB and iteration 2 at 1.5 GiB: a rise of 10% of ppb's − 0.5
    text = (
        "pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
        "--max-position-embeddings 512 --micro-batch-size 2 --global-batch-size 16 --bf16 --vocab-size 32000 "
        "--tokenizer-type NullTokenizer"
    )
    gib = 2**30
    golden = bench.Golden(None, None, None, "c0ffee 2026-01-01", peaks_by_iteration=((1, gib), (2, gib + gib // 2)))
    row = bench.price("gpt", "dense_off", "h100", text, golden, 8)
    predicted = bench.predicted_gib(row.measured)[0]
    off = bench.Row(**{**row.__dict__, "peak": (predicted * 1.10, predicted), "moment": "loss"})
    near = bench.Row(**{**row.__dict__, "peak": (predicted * 1.01, predicted), "moment": "loss"})
    (found,) = bench.iteration_rows([off, near])
    assert found.row is off and found.first == 1.0 and found.second == 1.5
    assert found.rise == pytest.approx(predicted * 1.10 - 1.5)
    assert found.first_ppb == pytest.approx(bench.predicted_first_iteration_gib(row.measured))


def test_iteration_1_holds_the_moments_an_fsdp_dtensor_load_made(bench, monkeypatch):
    # Megatron-FSDP with --ckpt-format fsdp_dtensor and --load: load_checkpoint's dummy step makes Adam's moments
    # before iteration 1 (optimizer/distrib_optimizer.py `_init_optimizer_states_with_dummy_values`, febd25e3fb),
    # so ppb's iteration 1 is its steady peak; without --load it is that peak less the stage's moments, and so
    # for a row measured before af28b5a559 (2025-08-21: no such format, no dummy step).
    monkeypatch.setattr(bench, "te_release", lambda commit: None)
    monkeypatch.setattr(bench, "torch_release", lambda commit: None)
    text = (
        "pretrain_gpt.py --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 "
        "--max-position-embeddings 512 --micro-batch-size 2 --global-batch-size 16 --bf16 --vocab-size 32000 "
        "--tokenizer-type NullTokenizer --use-distributed-optimizer --use-megatron-fsdp --ckpt-format fsdp_dtensor"
    )
    cases = (
        ("loaded", " --load /ckpt", "2026-03-22"),
        ("fresh", "", "2026-03-22"),
        ("old", " --load /ckpt", "2025-07-05"),
    )
    found = {}
    for name, flags, day in cases:
        golden = bench.Golden(None, None, None, f"c0ffee {day}", measured_commit=f"c0ffee {day}")
        row = bench.price("gpt", name, "h100", text + flags, golden, 8)
        found[name] = (row, bench.predicted_first_iteration_gib(row.measured), bench.predicted_gib(row.measured)[0])
    row, first, steady = found["loaded"]
    assert bench._states_at_start(row) and first == pytest.approx(steady)
    for name in ("fresh", "old"):
        row, first, steady = found[name]
        assert not bench._states_at_start(row) and first < steady


def test_a_launch_s_settings_are_its_variables_and_flags_with_their_values(bench):
    # launch_text's shape: exports, then pretrain_gpt.py and its words; a path (${...}) says where, not how
    text = bench.launch_text(
        {
            "ENV_VARS": {"NCCL_ALGO": "Ring"},
            "MODEL_ARGS": {
                "--num-experts": 8,
                "--moe-grouped-gemm": True,
                "--recompute-modules": "[core_attn, mlp]",
                "--data-path": "${DATA_PATH}/text",
            },
        }
    )
    assert bench.launch_settings(text) == (
        "NCCL_ALGO=Ring",
        "--num-experts=8",
        "--moe-grouped-gemm",
        "--recompute-modules=core_attn mlp",
    )


def test_moe_seconds_split_by_setting(bench):
    # five MoE rows and a dense one; seconds errors by hand (ppb / measured - 1):
    #   a: 1.0 -> 1.2 (+20%), b: 1.0 -> 1.1 (+10%), c: 1.0 -> 1.3 (+30%), d: 1.0 -> 0.6 (-40%), e: 1.0 -> 0.8 (-20%)
    # "x" is on a, b, c: with (20 + 10 + 30) / 3 = +20%, without (-40 - 20) / 2 = -30%: gap +50% (2 rows without:
    # kept at least=2, left out at the default 3); "y" is on a, d, e: with (20 - 40 - 20) / 3 = -13.3%, without
    # (10 + 30) / 2 = +20%: gap -33.3%; "all" is on every row (no row without it); the dense row's "x" is not counted
    golden = bench.Golden(None, None, None, "c0ffee 2026-01-01")

    def row(family, case, ppb, settings):
        return bench.Row(family, case, "h100", golden, None, None, (1.0, ppb), "", (), settings=settings)

    rows = [
        row("moe", "a", 1.2, ("x", "y", "all")),
        row("moe", "b", 1.1, ("x", "all")),
        row("moe", "c", 1.3, ("x", "all")),
        row("moe", "d", 0.6, ("y", "all")),
        row("moe", "e", 0.8, ("y", "all")),
        row("gpt", "f", 5.0, ("x", "all")),
    ]
    first, second = bench.setting_splits(rows, least=2)
    assert (first.setting, first.with_rows, first.without_rows) == ("x", 3, 2)
    assert first.with_mean == pytest.approx(0.20)
    assert first.without_mean == pytest.approx(-0.30)
    assert first.gap == pytest.approx(0.50)
    assert (second.setting, second.with_rows, second.without_rows) == ("y", 3, 2)
    assert second.gap == pytest.approx(-0.40 / 3 - 0.20)
    assert bench.setting_splits(rows) == []


def test_one_case_s_peak_on_two_clusters(bench, tmp_path, monkeypatch):
    # the dev golden file of DGX H100 and DGX Cloud's beside it: each peak is the last logged
    # mem-max-allocated-bytes (iteration 3 here, 3 GiB and 2.85 GiB: 2.85/3 - 1 = -5%); a case with one
    # cluster's file, or another GPU's only, gives no pair
    def git(*args: str) -> str:
        return git_at(tmp_path, "2025-10-23", *args)

    def write(case: str, name: str, values: dict[str, float]) -> None:
        path = tmp_path / bench.CASES / case / f"golden_values_{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"mem-max-allocated-bytes": {"values": values}}))

    gib = 2**30
    write("moe/a", "dev_dgx_h100", {"1": 2 * gib, "2": 2.5 * gib, "3": 3 * gib})
    write("moe/a", "dev_dgxh100_dgxc", {"1": 2 * gib, "3": 2.85 * gib, "2": 2.9 * gib})
    write("moe/b", "dev_dgx_h100", {"1": gib})
    write("moe/c", "dev_dgx_a100", {"1": gib})
    write("moe/c", "dev_dgxh100_dgxc", {"1": gib})
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "golden")
    monkeypatch.setattr(bench, "MIRROR", str(tmp_path))
    monkeypatch.setattr(bench, "COMMIT", "HEAD")
    (pair,) = bench.cluster_pairs()
    assert (pair.case, pair.gpu, pair.cluster) == ("moe/a", "h100", "dgxh100_dgxc")
    assert pair.peak == 3.0 and pair.other == pytest.approx(2.85)
    assert pair.spread == pytest.approx(-0.05)


def test_a_golden_file_recorded_again(bench, tmp_path, monkeypatch):
    # three recordings of one case's dev golden file: 2 GiB then 2.1 GiB with the same flags and 0.5 GiB after the
    # step each time (2.1/2 - 1 = +5% with nothing set otherwise), an edit that keeps the memory (no recording),
    # and the oldest, 1.9 GiB, with another --data-path; newest first
    def git(*args: str) -> str:
        return git_at(tmp_path, "2025-10-23", *args)

    case = tmp_path / bench.CASES / "moe" / "a"
    case.mkdir(parents=True)
    gib = 2**30

    def record(peak: float, data: str, seconds: float = 1.0) -> None:
        values = {
            "mem-max-allocated-bytes": {"values": {"1": peak * gib}},
            "mem-allocated-bytes": {"values": {"1": 0.5 * gib}},
            "iteration-time": {"values": {"2": seconds}},
        }
        (case / "golden_values_dev_dgx_h100.json").write_text(json.dumps(values))
        (case / "model_config.yaml").write_text(f"MODEL_ARGS:\n  --data-path: {data}\n  --num-experts: 8\n")

    git("init", "-q")
    record(1.9, "old")
    git("add", "-A")
    git("commit", "-qm", "oldest")
    record(2.0, "new")
    git("commit", "-qam", "data path changed, recorded again")
    record(2.1, "new")
    git("commit", "-qam", "recorded again")
    record(2.1, "new", seconds=float("nan"))
    git("commit", "-qam", "times edited, memory kept")
    monkeypatch.setattr(bench, "MIRROR", str(tmp_path))
    monkeypatch.setattr(bench, "COMMIT", "HEAD")
    versions = bench.golden_reruns(f"{bench.CASES}/moe/a/golden_values_dev_dgx_h100.json")
    assert [round(v.peak, 6) for v in versions] == [2.1, 2.0, 1.9]
    assert [v.after_step for v in versions] == [0.5, 0.5, 0.5]
    assert [v.changed for v in versions] == [(), (), ("--data-path",)]
    assert versions[0].peak / versions[1].peak - 1 == pytest.approx(0.05)


def test_a_golden_file_s_seconds_recorded_again(bench, tmp_path, monkeypatch):
    # four recordings of one case's dev golden file: the oldest at 0.30 s with another --data-path, then 0.20,
    # 0.29 and 0.20 s with the same flags (medians of iterations 2-4: iteration 1 left out), and an edit that
    # keeps the times (shown at the commit that recorded them); newest first. Same-flag spread: 0.29 / 0.20 = 1.45.
    def git(*args: str) -> str:
        return git_at(tmp_path, "2026-05-07", *args)

    case = tmp_path / bench.CASES / "moe" / "a"
    case.mkdir(parents=True)

    def record(times: list[float], data: str, peak: int = 100) -> None:
        values = {
            "mem-max-allocated-bytes": {"values": {"1": peak}},
            "iteration-time": {"values": {str(step): value for step, value in enumerate(times, start=1)}},
        }
        (case / "golden_values_dev_dgx_h100.json").write_text(json.dumps(values))
        (case / "model_config.yaml").write_text(f"MODEL_ARGS:\n  --data-path: {data}\n  --num-experts: 8\n")

    git("init", "-q")
    record([9.0, 0.30, 0.31, 0.29], "old")
    git("add", "-A")
    git("commit", "-qm", "oldest")
    record([9.0, 0.21, 0.20, 0.19], "new")
    git("commit", "-qam", "data path changed, recorded again")
    record([9.0, 0.29, 0.28, 0.30], "new")
    git("commit", "-qam", "recorded again, slower")
    record([9.0, 0.20, 0.21, 0.19], "new")
    git("commit", "-qam", "recorded again")
    record([9.0, 0.20, 0.21, 0.19], "new", peak=101)
    git("commit", "-qam", "memory edited, times kept")
    monkeypatch.setattr(bench, "MIRROR", str(tmp_path))
    monkeypatch.setattr(bench, "COMMIT", "HEAD")
    versions = bench.seconds_reruns(f"{bench.CASES}/moe/a/golden_values_dev_dgx_h100.json")
    assert [v.seconds for v in versions] == pytest.approx([0.20, 0.29, 0.20, 0.30])
    assert [v.changed for v in versions] == [(), (), (), ("--data-path",)]
    # the newest times are shown at the commit that recorded them, not the later memory edit
    assert bench._git("log", "-1", "--format=%s", versions[0].commit.split()[0]) == "recorded again\n"
    assert bench.same_flag_spread(versions) == pytest.approx(0.29 / 0.20)
    assert bench.same_flag_spread(versions[-1:]) is None


def test_a_word_reaches_megatron_as_the_launch_s_shell_unescapes_it(bench):
    # c08d89bea0's MLA selective-recompute case: the YAML value `Et*3\\|\\(tt\\|\\)*6tL` (two backslashes each);
    # _run_training.sh's `echo "$value" | xargs` leaves one (`Et*3\|\(tt\|\)*6tL`), the eval of the unquoted
    # word none: `Et*3|(tt|)*6tL`, the layout its comment names. A value with spaces is quoted: kept.
    config = {"MODEL_ARGS": {"--pipeline-model-parallel-layout": "Et*3\\\\|\\\\(tt\\\\|\\\\)*6tL", "--x": "a\\ b"}}
    assert bench._shell_word("Et*3\\\\|\\\\(tt\\\\|\\\\)*6tL") == "Et*3|(tt|)*6tL"
    assert bench._shell_word("a\\ b") == "a\\ b"
    assert bench.launch_text(config) == "pretrain_gpt.py --pipeline-model-parallel-layout 'Et*3|(tt|)*6tL' --x 'a\\ b'"


def test_a_row_is_priced_with_the_flags_that_measured_it(bench, tmp_path, monkeypatch):
    # 2659630721 gave the 8-expert TP2 case --disable-bias-linear and left its A100 values (cb12e3dea4's, a run
    # with biases) as they were; adc69dba2d later moved the case's directory (a pure rename). The values were
    # measured by the first commit's flags, in the directory the file had there.
    def git(*args: str, day: str = "2025-04-04") -> str:
        return git_at(tmp_path, day, *args)

    def write(path: str, text: str) -> None:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)

    golden = json.dumps({"mem-max-allocated-bytes": {"values": {"1": 100}}, "iteration-time": {"values": {"2": 0.4}}})
    git("init", "-q")
    write("old/case/golden.json", golden)
    write("old/case/model_config.yaml", "MODEL_ARGS:\n  --num-layers: 12\n")
    git("add", "-A")
    git("commit", "-qm", "measured")
    measured = git("rev-parse", "--short=10", "HEAD")
    write("old/case/model_config.yaml", "MODEL_ARGS:\n  --num-layers: 12\n  --disable-bias-linear: true\n")
    git("commit", "-qam", "flags only", day="2025-04-09")
    git("mv", "old/case", "new")
    git("commit", "-qm", "moved", day="2025-10-21")
    monkeypatch.setattr(bench, "MIRROR", str(tmp_path))
    monkeypatch.setattr(bench, "COMMIT", "HEAD")
    row = bench.Golden.read("new/golden.json")
    assert row.measured_commit.split() == [measured[:7], "2025-04-04"] and row.measured_dir == "old/case"
    assert bench.measured_config("new", row) == {"MODEL_ARGS": {"--num-layers": 12}}
    # a golden file with no measuring commit found: the case's flags at COMMIT
    unknown = bench.Golden(None, None, None, "")
    assert bench.measured_config("new", unknown)["MODEL_ARGS"]["--disable-bias-linear"] is True
