"""`ppb check RUN.yaml --plan PLAN`: a user's own plan (MindFormers yaml or Megatron-LM flags)
checked against the device, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ppb_core.cli.check import render
from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"


@pytest.fixture(scope="module")
def small_device(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/llama3-8b.yaml (P=4, 32 layers, 1F1B, m=32) with 55000 MB of the H100's memory
    reserved, so that a few layers more on the first stage overflow it."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    text = text.replace("reserved_mb: 4000", "reserved_mb: 55000")
    path = tmp_path_factory.mktemp("check") / "llama3-8b-small.yaml"
    path.write_text(text)
    return path


def _yaml_plan(folder: Path, offset: list[int], recompute: list[int] | bool = False) -> Path:
    path = folder / "plan.yaml"
    path.write_text(
        f"offset: {offset}\nrecompute: {recompute}\nselect_recompute: False\nselect_comm_recompute: False\n"
    )
    return path


def _check(capsys: pytest.CaptureFixture[str], run: Path, plan: str, *flags: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", str(run), "--plan", plan, "--json", *flags])
    return code, json.loads(capsys.readouterr().out)


def test_a_plan_that_overflows_one_stage_says_which_and_exits_1(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    # offset +2 on stage 0 (10 layers), -2 on stage 3 (6), nothing recomputed
    code, out = _check(capsys, small_device, str(_yaml_plan(tmp_path, [2, 0, 0, -2])), "--no-optimum")
    assert code == 1
    assert [stage["layers"] for stage in out["stages"]] == [10, 8, 8, 6]
    assert [stage["fits"] for stage in out["stages"]] == [False, True, True, True]
    first = out["stages"][0]
    over = first["peak_mb"] - first["device_mb"]
    assert over > 0
    assert out["message"].startswith(f"stage 0 runs out of memory by {over:,.0f} MB at its ")
    # the figures of the table's "peak MB" and "usable MB" columns, said in the same words
    assert f"({first['peak_mb']:,.0f} of {first['device_mb']:,.0f} MB usable" in out["message"]
    assert out["iteration_s"] > 0
    # the balancer's own figure in seconds: the schedule on the layers' times, i.e. the time model's
    # compute and bubble (its iteration adds P2P, the DP reduction and the optimizer step), Megatron's
    # get_batch broadcasts included: the iteration runs them in the first and last stages' forwards
    # (docs/timing.md, `compute`), the HEAD's and TAIL's descriptions carry them there
    breakdown = out["iteration"]["breakdown"]
    scheduled = breakdown["compute"] + breakdown["bubble"]
    assert out["balancer"]["simulated_time_s"] == pytest.approx(scheduled, rel=1e-9)


def test_layers_cost_the_same_memory_each(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    """The layers are identical: each one moved onto stage 0 adds the same MB to its peak."""
    peaks = []
    for extra in (0, 2, 4):
        _, out = _check(capsys, small_device, str(_yaml_plan(tmp_path, [extra, 0, 0, -extra])), "--no-optimum")
        peaks.append(out["stages"][0]["peak_mb"])
    assert peaks[2] - peaks[1] == pytest.approx(peaks[1] - peaks[0], rel=1e-9)


def test_recomputing_the_stage_makes_it_fit(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    code, out = _check(capsys, small_device, str(_yaml_plan(tmp_path, [2, 0, 0, -2], [10, 0, 0, 0])), "--no-optimum")
    assert code == 0 and out["fits"]
    assert out["stages"][0]["options"] == {"FULL": 10}


def test_megatron_flags_give_what_the_same_mindformers_plan_gives(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    # the layout spells the same split: E and 10 layers | 8 | 8 | 6 layers and the loss
    _, mindformers = _check(capsys, small_device, str(_yaml_plan(tmp_path, [2, 0, 0, -2])), "--no-optimum")
    flags = "--pipeline-model-parallel-layout 'Et*10|t*8|t*8|t*6L'"
    code, megatron = _check(capsys, small_device, flags, "--no-optimum")
    assert code == 1 and megatron["form"] == "megatron" and mindformers["form"] == "mindformers"
    assert [s["peak_mb"] for s in megatron["stages"]] == [s["peak_mb"] for s in mindformers["stages"]]
    assert megatron["iteration_s"] == pytest.approx(mindformers["iteration_s"], rel=1e-12)
    # Megatron's --recompute-num-layers counts per stage: 10 recomputes every layer of every stage here
    full = flags + " --recompute-granularity full --recompute-method block --recompute-num-layers 10"
    code, recomputed = _check(capsys, small_device, full, "--no-optimum")
    assert code == 0
    assert [s["options"] for s in recomputed["stages"]] == [{"FULL": n} for n in (10, 8, 8, 6)]


def test_the_optimum_beside_a_plan_that_fits_is_no_slower(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    code, out = _check(capsys, small_device, str(_yaml_plan(tmp_path, [0, 0, 0, 0])), "-t", "30")
    assert code == 0
    optimum = out["optimum"]
    assert optimum["fits"]
    assert optimum["iteration_s"] <= out["iteration_s"] * (1 + 1e-9)


def test_a_plan_that_is_neither_a_file_nor_flags_is_one_line(
    capsys: pytest.CaptureFixture[str], small_device: Path
) -> None:
    code = main(["check", str(small_device), "--plan", "no-such-plan.txt", "--no-optimum"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "no such file" in err


@pytest.mark.parametrize("plan", ["", "   "])
def test_an_empty_plan_is_one_line_naming_the_option(
    capsys: pytest.CaptureFixture[str], small_device: Path, plan: str
) -> None:
    """`--plan ""` was read as the working folder: ".: is a directory, not a file"."""
    code = main(["check", str(small_device), "--plan", plan, "--no-optimum"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "--plan: is empty" in err, err


def test_a_last_stage_holding_only_the_loss_is_charged_the_loss(
    capsys: pytest.CaptureFixture[str], small_device: Path
) -> None:
    """Megatron-Core's layout puts `L` (the output layer and the loss) in the last virtual stage even
    when it holds no decoder layer; the re-evaluation did so only for plans not split per sub-model,
    so DeepSeek-V3's plan ('Et|(tt|)*30,mL') had its loss charged on stage 14 and "ran out"."""
    _, out = _check(capsys, small_device, "--pipeline-model-parallel-layout 'Et*8|t*12|t*12|L'", "--no-optimum")
    assert [stage["layers"] for stage in out["stages"]] == [8, 12, 12, 0]
    assert "loss" in out["stages"][3]["moments_mb"]
    assert all("loss" not in stage["moments_mb"] for stage in out["stages"][:3])


@pytest.mark.parametrize(
    ("flags", "field", "problem"),
    [
        # TransformerConfig.__post_init__: "num_layers_in_first_pipeline_stage must be larger than 0"
        ("--decoder-first-pipeline-num-layers -1", "--decoder-first-pipeline-num-layers", "must be positive"),
        ("--decoder-last-pipeline-num-layers 0", "--decoder-last-pipeline-num-layers", "must be positive"),
        ("--decoder-first-pipeline-num-layers 40", "--decoder-first-pipeline-num-layers", "the model has 32"),
        # the last stage's flag alone is the one named (it was the first's, which the user never gave):
        # 40 > 32 layers; 9 leave 23 to the 3 other stages, not an even share
        ("--decoder-last-pipeline-num-layers 40", "--decoder-last-pipeline-num-layers", "the model has 32"),
        ("--decoder-last-pipeline-num-layers 9", "--decoder-last-pipeline-num-layers", "leaves 23 of"),
        # 16 + 16 leave the 2 middle stages no layer: Megatron-Core's "Mismatch: 0 middle layers remaining"
        (
            "--decoder-first-pipeline-num-layers 16 --decoder-last-pipeline-num-layers 16",
            "--decoder-first-pipeline-num-layers",
            "leaves 0 of",
        ),
        ("--pipeline-model-parallel-layout '(Et*8|)*99999999'", "--pipeline-model-parallel-layout", "write out"),
        # the recompute flag at fault is the field, said once (arguments.py choices=['full', 'selective'];
        # TransformerConfig.__post_init__ wants recompute_num_layers between 1 and the stage's layers)
        ("--recompute-granularity partial", "--recompute-granularity", "must be full or selective, got 'partial'"),
        (
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 0",
            "--recompute-num-layers",
            "must be positive, got 0",
        ),
        # arguments.py validate_args: --recompute-activations sets selective after parsing, whatever the granularity
        # flag says, then asserts selective has no method (before, priced as full recompute, HFU 40.8%)
        (
            "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L' --recompute-activations --recompute-granularity "
            "full --recompute-method uniform --recompute-num-layers 1",
            "--recompute-granularity",
            "selective (or --recompute-activations, which sets it) takes no --recompute-method",
        ),
        pytest.param(
            "--pipeline-model-parallel-layout 'Et*" + "9" * 5000 + "L'",
            "--pipeline-model-parallel-layout",
            "write out",
            id="a-5000-digit-count",
        ),
    ],
)
def test_megatron_flags_megatron_refuses_are_one_line(
    capsys: pytest.CaptureFixture[str], small_device: Path, flags: str, field: str, problem: str
) -> None:
    code = main(["check", str(small_device), "--plan", flags, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and f"--plan: {field}: " in err and problem in err, err


def test_first_and_last_stage_layers_on_two_stages(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """pp 2 with both counts given leaves no middle stage and no layer, which Megatron-Core accepts."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    run = tmp_path / "pp2.yaml"
    run.write_text(text.replace("pp: 4,", "pp: 2,").replace("world_size: 64", "world_size: 32"))
    flags = "--decoder-first-pipeline-num-layers 14 --decoder-last-pipeline-num-layers 18"
    code, out = _check(capsys, run, flags, "--no-optimum", "-q")
    assert code in (0, 1) and [stage["layers"] for stage in out["stages"]] == [14, 18]


def test_flags_over_several_lines_are_all_read(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    """A launch script's flags, one a line joined by backslashes (as `ppb search -o` writes them):
    every flag is read, as the shell reads it. shlex kept the newline in the next word, so every flag
    after the first line went unread and the even split [8, 8, 8, 8] was checked instead."""
    flags = tmp_path / "flags.txt"
    flags.write_text(
        "--tensor-model-parallel-size 2 \\\n--pipeline-model-parallel-size 4 \\\n"
        "--pipeline-model-parallel-layout 'Et*10|t*8|t*8|t*6L' \\\n"
        "--recompute-granularity full \\\n--recompute-method uniform \\\n--recompute-num-layers 1\n"
    )
    _, out = _check(capsys, small_device, str(flags), "--no-optimum")
    assert [stage["layers"] for stage in out["stages"]] == [10, 8, 8, 6]
    assert [stage["options"] for stage in out["stages"]] == [{"FULL": n} for n in (10, 8, 8, 6)]


@pytest.mark.parametrize("text", ["model: 3\n", "model: [1, 2]\nrecompute_config: 4\n"])
def test_a_mindformers_yaml_of_the_wrong_shape_is_one_line(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path, text: str
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)  # `model` not a mapping was an AttributeError traceback
    code = main(["check", str(small_device), "--plan", str(plan), "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{plan}: offset: missing" in err, err


@pytest.mark.parametrize(
    ("flag", "given", "run_has"),
    [
        ("--tensor-model-parallel-size", "4", "2"),
        ("--context-parallel-size", "2", "1"),
        ("--micro-batch-size", "2", "1"),
        ("--seq-length", "4096", "8192"),
        ("--global-batch-size", "512", "256"),  # the run's 1 × 32 micro-batches × dp 8
        ("--num-virtual-stages-per-pipeline-rank", "2", "1"),
    ],
)
def test_flags_stating_other_sizes_than_the_run_are_refused(
    capsys: pytest.CaptureFixture[str], small_device: Path, flag: str, given: str, run_has: str
) -> None:
    """A launch script pasted whole: its sizes are the run config's, or the check would price a run
    other than the one launched (they were skipped without a word)."""
    flags = f"--pipeline-model-parallel-size 4 {flag} {given}"
    code = main(["check", str(small_device), "--plan", flags, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"--plan: {flag}: {given}, the run config has {run_has}" in err, err


def test_flags_stating_the_runs_sizes_are_read(capsys: pytest.CaptureFixture[str], small_device: Path) -> None:
    # the run: tp 2, cp 1, ep 1, micro-batch 1, 32 micro-batches over dp 8 (a global batch of 256), 8192 tokens
    flags = (
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --context-parallel-size 1 "
        "--expert-model-parallel-size 1 --micro-batch-size 1 --global-batch-size 256 --seq-length 8192 "
        "--pipeline-model-parallel-layout 'Et*10|t*8|t*8|t*6L'"
    )
    code, out = _check(capsys, small_device, flags, "--no-optimum")
    assert code == 1 and [stage["layers"] for stage in out["stages"]] == [10, 8, 8, 6]


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        # validate_layer_layout: "decoder layers must be placed before MTP layers"
        ("Et*3|(tt|)*28,tm|t|L", "decoder layers must come before the MTP layers"),
        # validate_layer_layout: "the MTP should be always in the last virtual pipeline stage of that rank"
        # (rank 15's first virtual stage holds 30 t and the m; every later stage is empty but the last)
        ("Et*3|(tt|)*14,t*30m|" + "|" * 15 + "L", "rank 15: MTP layers must be in the rank's last virtual stage"),
        # "Number of mtp layers in layout must match mtp_num_layers"
        ("Et*3|(tt|)*29,mm|L", "2 MTP layers m, the model has 1"),
    ],
)
def test_mtp_layouts_megatron_refuses_are_refused_with_its_reason(
    capsys: pytest.CaptureFixture[str], layout: str, why: str
) -> None:
    code = main(["check", str(CONFIGS / "deepseek-v3.yaml"), "--plan", f"--pipeline-model-parallel-layout '{layout}'"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"--pipeline-model-parallel-layout: {why}" in err, err


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ("deepseek-v3-report.yaml", "Megatron-LM does not run DualPipeV"),
        ("qwen2.5-vl-7b.yaml", "a second model in the pipeline is not Megatron's to say"),
    ],
)
def test_megatron_flags_for_a_run_megatron_cannot_say_are_refused(
    capsys: pytest.CaptureFixture[str], config: str, why: str
) -> None:
    """`ppb balance` prints no Megatron flags for these runs, for these reasons; read anyway, a layout
    was mapped onto DualPipeV's V-shaped cells (the loss on rank 15, where DualPipeV has it on rank 0)
    and the tower's blocks counted as decoder layers."""
    flags = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    code = main(["check", str(CONFIGS / config), "--plan", flags, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and why in err and "MindFormers yaml" in err, err


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # a misspelt key was skipped: the plan was checked with nothing recomputed, exit 0
        ("offset: [0, 0, 0, 0]\nrecomptue: [8, 0, 0, 0]\n", "recomptue: not a key ppb reads: did you mean recompute?"),
        ("ofset: [1, 0, 0, -1]\n", "ofset: not a key ppb reads: did you mean offset?"),
        (
            "offset: [0, 0, 0, 0]\nrecompute_config: {recompute: [8, 0, 0, 0], recompute_typo: true}\n",
            "recompute_config.recompute_typo: not a TransformerRecomputeConfig key (MindFormers refuses it)",
        ),
        (
            "offset: [0, 0, 0, 0]\nrecompute_config: {select_recompute: true, select_recompute_exclude: {'.*': [1]}}\n",
            "recompute_config.select_recompute_exclude: ppb prices one selective setting",
        ),
        # counts beyond a cell were "cell (chunk 0, stage 0): counts give a negative option count: [...]"
        (
            "offset: [0, 0, 0, 0]\nrecompute: [100, 0, 0, 0]\n",
            "recompute[0][0]: 100 layers; the cell (chunk 0, stage 0) has 8",
        ),
        (
            "offset: [0, 0, 0, 0]\nrecompute: [-3, 0, 0, 0]\n",
            "recompute[0][0]: -3 layers; the cell (chunk 0, stage 0) has 8",
        ),
        ("offset: [-9, 0, 0, 9]\n", "offset[0][0]: -9 leaves the cell -1 layers (even split 8)"),
        # a parallel_config that is no mapping was skipped without a word
        ("offset: [0, 0, 0, 0]\nparallel_config: [1]\n", "parallel_config: must be a mapping, got a list of 1 item"),
        # sizes the yaml states other than the run config's were priced at the run's without a word
        # (the run: dp 8, tp 2, pp 4, one chunk, 32 micro-batches; MindFormers' keys for them)
        (
            "offset: [0, 0, 0, 0]\nparallel_config: {model_parallel: 4}\n",
            "parallel_config.model_parallel: 4, the run config has tp 2",
        ),
        (
            "offset: [0, 0, 0, 0]\nparallel_config: {data_parallel: 4, pipeline_stage: 4}\n",
            "parallel_config.data_parallel: 4, the run config has dp 8",
        ),
        (
            "offset: [0, 0, 0, 0]\nparallel_config: {micro_batch_num: 16}\n",
            "parallel_config.micro_batch_num: 16, the run config has micro_batches 32",
        ),
        (
            "model: {model_config: {offset: [0, 0, 0, 0], pp_interleave_num: 2}}\n",
            "model.model_config.pp_interleave_num: 2, the run config has vpp 1",
        ),
        # a MindFormers training yaml of a 30-layer model was checked at the run's 32 layers without a word
        # (Megatron-LM's `--num-layers 30` is refused); MindFormers' LlamaConfig `num_layers` is the
        # decoder's layer count (mindformers/models/llama/llama_config.py, commit fd4deebc)
        (
            "model: {model_config: {offset: [0, 0, 0, 0], num_layers: 30}}\n",
            "model.model_config.num_layers: 30, the run config has num_layers 32",
        ),
        # MindFormers' newer configs say it in Hugging Face's words (configs/qwen3/pretrain_qwen3_32b_4k.yaml at
        # b18b9a6a4: num_hidden_layers), checked at the run's layers without a word; and the other sizes (session 27)
        (
            "model: {model_config: {offset: [0, 0, 0, 0], num_hidden_layers: 30}}\n",
            "model.model_config.num_hidden_layers: 30, the run config has num_layers 32",
        ),
        (
            "model: {model_config: {offset: [0, 0, 0, 0], hidden_size: 5120}}\n",
            "model.model_config.hidden_size: 5120, the run config has hidden_size 4096",
        ),
        (
            "model: {model_config: {offset: [0, 0, 0, 0], n_kv_heads: 4}}\n",
            "model.model_config.n_kv_heads: 4, the run config has num_key_value_heads 8",
        ),
        # the run is tp 2 with sequence parallelism: MindFormers' use_seq_parallel False keeps whole activations
        (
            "offset: [0, 0, 0, 0]\nparallel_config: {use_seq_parallel: False}\n",
            "parallel_config.use_seq_parallel: false, the run config has sequence_parallel True",
        ),
        # MindFormers' vocab_emb_dp True runs the output head whole on each of the tp 2 ranks: another run
        (
            "offset: [0, 0, 0, 0]\nparallel_config: {vocab_emb_dp: True}\n",
            "parallel_config.vocab_emb_dp: true, the run config has vocab_emb_dp False",
        ),
        (
            "model: {model_config: {offset: [0, 0, 0, 0], seq_length: 4096}}\n",
            "model.model_config.seq_length: 4096, the run config has seq_length 8192",
        ),
        # MindSpore's pool stops at context.max_device_memory (GiB: mem_dynamic_allocator.cc kGBToByte = 1024 << 20);
        # the research Llama 3.1 8B yaml's "58GB" was checked against the 910B's whole 64 GB, exit 0 (session 27).
        # Here 20 GiB = 20,480 MB against 81,559 − 55,000 = 26,559 usable: 6,079 MB short
        (
            "offset: [0, 0, 0, 0]\ncontext: {max_device_memory: '20GB'}\n",
            "context.max_device_memory: '20GB' (20,480 MB), under the run config's 26,559 MB usable: ppb checks the "
            "plan at the run's memory (give device.reserved_mb 6,079 more)",
        ),
        (
            "offset: [0, 0, 0, 0]\ncontext: {max_device_memory: 20}\n",
            "context.max_device_memory: 20 is not MindSpore's size, e.g. '58GB'",
        ),
    ],
)
def test_a_mindformers_plan_with_a_wrong_key_or_count_is_one_line(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path, text: str, line: str
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    code = main(["check", str(small_device), "--plan", str(plan), "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert f"{plan}: {line}" in captured.err, captured.err


def test_one_megatron_flag_as_the_plan_is_read(capsys: pytest.CaptureFixture[str], small_device: Path) -> None:
    """`--plan --sequence-parallel`: argparse took the one word for an option and said "argument --plan:
    expected one argument"; a text with a space it already read."""
    code = main(["check", str(small_device), "--plan", "--sequence-parallel", "--no-optimum", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and out["form"] == "megatron" and [s["layers"] for s in out["stages"]] == [8, 8, 8, 8]


def test_check_options_after_plan_are_still_options(capsys: pytest.CaptureFixture[str], small_device: Path) -> None:
    """A forgotten plan (`--plan --no-optimum`) stays argparse's one-line error, not an empty plan."""
    with pytest.raises(SystemExit) as exit_:
        main(["check", str(small_device), "--plan", "--no-optimum"])
    assert exit_.value.code == 2 and "argument --plan: expected one argument" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["offset: [2, 0, 0, -2]\nrecompute: [10, 0, 0, 0]\n", "hello\n", ""])
def test_a_plan_file_with_no_megatron_flag_is_refused(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path, text: str
) -> None:
    """A MindFormers yaml named plan.txt was read as Megatron-LM flags stating nothing, and the even
    split without recompute checked in its place (exit 0)."""
    plan = tmp_path / "plan.txt"
    plan.write_text(text)
    code = main(["check", str(small_device), "--plan", str(plan), "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{plan}: holds no Megatron-LM flag" in err, err


def test_a_torchtitan_job_toml_is_refused_for_another_frameworks_run(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    """A job TOML holds torchtitan's plan lines, not Megatron-LM flags: the error said "holds no Megatron-LM
    flag ... a MindFormers yaml plan needs a .yaml name", which points the wrong way. A torchtitan run's
    reads it (tests/test_balance_torchtitan.py); a Megatron run's says whose it is."""
    plan = tmp_path / "llama3_8b.toml"
    plan.write_text("[parallelism]\npipeline_parallel_degree = 2\n")
    code = main(["check", str(small_device), "--plan", str(plan), "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert (
        code == 2 and err.count("\n") == 1 and f"{plan}: a torchtitan job TOML; the run's framework is megatron" in err
    )


@pytest.mark.parametrize(
    ("change", "line"),
    [
        ("tensor_parallel_degree = 1", "parallelism.tensor_parallel_degree: 2; the run config has tp 1"),
        ("context_parallel_degree = 1", "parallelism.context_parallel_degree: 2; the run config has cp 1"),
        (
            "data_parallel_shard_degree = -1",
            "parallelism.data_parallel_shard_degree: 4 × data_parallel_replicate_degree 1 = 4 data-parallel ranks; "
            "the run config has dp 8",
        ),
    ],
)
def test_a_torchtitan_job_toml_of_other_degrees_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, change: str, line: str
) -> None:
    """configs/llama3.1-8b-torchtitan.yaml is dp 8 (FSDP), tp 1, cp 1; torchtitan's shipped llama3_8b.toml with
    one degree changed was checked at the run's degrees, exit 0 (session 27), where a Megatron script's
    `--tensor-model-parallel-size` is refused. The degree set to 2 (the shard degree to 4)."""
    shipped = (Path(__file__).parent / "data" / "torchtitan" / "llama3_8b.toml").read_text()
    name, _ = change.split(" = ")
    plan = tmp_path / "job.toml"
    plan.write_text(shipped.replace(change, f"{name} = {4 if 'shard' in name else 2}"))
    code = main(["check", str(CONFIGS / "llama3.1-8b-torchtitan.yaml"), "--plan", str(plan), "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{plan}: {line}" in err, err


def test_the_printed_iteration_is_the_whole_iterations(capsys: pytest.CaptureFixture[str], small_device: Path) -> None:
    """The table's iteration line is `iteration.seconds` (schedule, P2P, DP reduction, optimizer),
    with its tokens/s per device; it said "(the pipeline schedule run on the layers' times)"."""
    plan = "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'"
    _, out = _check(capsys, small_device, plan, "--no-optimum")
    breakdown = out["iteration"]["breakdown"]
    assert breakdown["p2p"] > 0 and breakdown["optimizer"] > 0
    assert out["iteration_s"] == pytest.approx(sum(breakdown.values()), rel=1e-9)
    main(["check", str(small_device), "--plan", plan, "--no-optimum"])
    text = capsys.readouterr().out
    tokens = out["iteration"]["tokens_per_second_per_device"]
    assert f"iteration {out['iteration_s']:.3f} s, {tokens:,.0f} tokens/s per device, MFU " in text


FIRST_LAST = "--decoder-first-pipeline-num-layers 10 --decoder-last-pipeline-num-layers 6"


def test_the_plan_json_ppb_balance_writes_is_checked_as_it_is(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    """`ppb balance RUN -o plan.json`, then `ppb check RUN --plan plan.json`: the JSON's offset and
    recompute lists are read as a MindFormers yaml's. Its Megatron flags' texts were read as flags
    (`--decoder-last-pipeline-num-layers must be an integer, got '6,'`)."""
    written = tmp_path / "plan.json"
    written.write_text(
        json.dumps(
            {
                "offset": [2, 0, 0, -2],
                "recompute": [2, 0, 0, 0],
                "select_recompute": [0, 0, 0, 0],
                "select_comm_recompute": [0, 0, 0, 0],
                "megatron": {"first_last": FIRST_LAST},
            }
        )
    )
    code, out = _check(capsys, small_device, str(written), "--no-optimum")
    assert code in (0, 1) and out["form"] == "mindformers"
    # 32 layers over 4 stages: 8 each, plus the offsets; the first 2 of stage 0 fully recomputed
    assert [stage["layers"] for stage in out["stages"]] == [10, 8, 8, 6]
    assert out["stages"][0]["options"] == {"NONE": 8, "FULL": 2}
    assert out["plan_recompute"] is None  # no flag text was taken for the plan's recompute
    # the table says what the file is, not "mindformers plan" for a Megatron run's plan JSON
    assert main(["check", str(small_device), "--plan", str(written), "--no-optimum", "-q"]) in (0, 1)
    assert f": ppb balance plan {written}" in " ".join(capsys.readouterr().out.split())
    (tmp_path / "list.json").write_text("[1, 2]")
    assert main(["check", str(small_device), "--plan", str(tmp_path / "list.json"), "--no-optimum"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "list.json: must hold an object with offset" in err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # no granularity: Megatron-LM recomputes nothing (TransformerConfig.__post_init__)
        ("--recompute-method block --recompute-num-layers 2", "--recompute-method, --recompute-num-layers without"),
        ("--recompute-modules mlp", "--recompute-modules without effect"),
        # full: the modules' switches ask for selective (attention.py checkpoint_core_attention)
        (
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --recompute-modules mlp",
            "--recompute-modules without effect",
        ),
    ],
)
def test_recompute_flags_megatron_reads_past_are_said_and_priced_as_it_runs(
    capsys: pytest.CaptureFixture[str], small_device: Path, flags: str, said: str
) -> None:
    _, out = _check(capsys, small_device, flags, "--no-optimum")
    (note,) = out["notes"]
    assert note.startswith(said)
    full = "full" in flags
    # 32 layers, 8 a stage: all FULL under full uniform 1, none recomputed without a granularity
    assert [stage["options"] for stage in out["stages"]] == [{"FULL": 8} if full else {"NONE": 8}] * 4
    _, plain = _check(capsys, small_device, "--recompute-granularity selective", "--no-optimum")
    assert plain["notes"] == []


@pytest.mark.parametrize("limit", ["0", "inf", "nan"])
def test_a_time_limit_of_no_seconds_is_one_line(
    capsys: pytest.CaptureFixture[str], small_device: Path, limit: str
) -> None:
    """`-t inf` passed (`not inf > 0` is False) as ppb plan and balance refuse it."""
    code = main(["check", str(small_device), "--plan", "--recompute-granularity selective", "-t", limit])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--time-limit: must be a positive number of seconds, got " in err


def test_recompute_modules_without_a_module_is_refused_as_megatron_refuses_it(
    capsys: pytest.CaptureFixture[str], small_device: Path
) -> None:
    """Megatron-LM's argparse takes `--recompute-modules` with nargs '+' (TransformerConfig's List[str]);
    empty, ppb took it for the default core_attn and then said the run config must name core_attn."""
    code = main(["check", str(small_device), "--plan", "--recompute-granularity selective --recompute-modules"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--plan: --recompute-modules needs one module or more" in err


def test_the_text_says_an_overflowing_plan_does_not_fit_rather_than_a_speedup_over_it(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    """Beside a plan that runs out of memory a speedup means nothing (it cannot run): the balancer's line
    says so instead, and keeps the speedup for a plan that fits."""
    main(["check", str(small_device), "--plan", str(_yaml_plan(tmp_path, [2, 0, 0, -2]))])
    text = capsys.readouterr().out
    assert "yours does not fit" in text and "× yours" not in text
    main(["check", str(small_device), "--plan", str(_yaml_plan(tmp_path, [2, 0, 0, -2], [10, 0, 0, 0]))])
    text = capsys.readouterr().out
    assert "× yours" in text and "does not fit" not in text


def test_a_plan_json_solved_at_other_sizes_names_them(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`ppb balance -s 2 -o plan.json` (or `-i auto`, which took V = 3 for llama3-8b) solves at other sizes
    than the run config's; `ppb check` said "offset: must have 1 list of 4 entries" of such a plan."""
    run = CONFIGS / "llama3-8b.yaml"
    plan = tmp_path / "plan.json"
    assert main(["balance", str(run), "-s", "2", "-q", "--json", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert main(["check", str(run), "--plan", str(plan), "-q", "--no-optimum"]) == 2
    said = capsys.readouterr().err
    assert f"{plan}: input.stages: the plan was solved at stages 2, the run config has parallel.pp 4" in said


def test_a_mindspore_pool_at_least_the_usable_memory_is_accepted(
    capsys: pytest.CaptureFixture[str], small_device: Path, tmp_path: Path
) -> None:
    """26 GiB = 26,624 MB is at least the run's 26,559 MB usable: the plan is checked as before (session 27)."""
    plan = tmp_path / "plan.yaml"
    plan.write_text("offset: [0, 0, 0, 0]\ncontext: {max_device_memory: '26GB'}\n")
    assert main(["check", str(small_device), "--plan", str(plan), "--no-optimum", "-q"]) in (0, 1)
    assert "max_device_memory" not in capsys.readouterr().err


def test_flags_without_a_layout_on_an_uneven_split_say_over_what(tmp_path: Path, capsys) -> None:
    """Megatron-LM d98e8a64 arguments.py `validate_args`: 32 layers over pp 3 (32 % 3 = 2) need a layout or an
    uneven first/last stage. The line said only "32 layers do not split evenly"; now over what, and the fix."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    path = tmp_path / "pp3.yaml"
    path.write_text(text.replace("pp: 4,", "pp: 3,").replace("world_size: 64", "world_size: 48"))
    flags = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    assert main(["check", str(path), "--plan", flags, "--no-optimum"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "ppb: error: --plan: --pipeline-model-parallel-layout: missing, and 32 layers do not split evenly over pp 3: "
        "Megatron-LM refuses that (arguments.py validate_args); give the layout, or "
        "--decoder-first/last-pipeline-num-layers"
    ]


# 32 layers over pp 4 × 2 chunks: 4 a cell, the offsets sum to 32 mod 8 = 0
TWO_ROWS = "offset: [[0, 0, 0, 0], [1, 1, 0, -2]]"
INTERLEAVE = "pipeline_config: {pipeline_interleave: true, pipeline_scheduler: 1f1b}"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # a training yaml's model_config without pp_interleave_num: MindFormers' default 1 (configuration_utils.py)
        (f"model: {{model_config: {{{TWO_ROWS}}}}}\n", "model.model_config.pp_interleave_num: missing"),
        # MindSpore's pipeline_interleave off: LayerSetting takes pp_interleave_num 1, refuses the 2 rows
        (
            f"model: {{model_config: {{{TWO_ROWS}, pp_interleave_num: 2}}}}\n"
            "parallel: {enable_parallel_optimizer: true}\n",
            "parallel.pipeline_config.pipeline_interleave: not true",
        ),
    ],
)
def test_a_mindformers_yaml_of_chunks_without_the_interleave_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, line: str
) -> None:
    """A MindFormers run of 2 chunks a stage, its yaml short of what MindFormers needs to run them (until
    session 31 checked as 2 chunks, and `ppb balance` printed the offsets alone)."""
    run = _interleaved_mindformers(tmp_path)
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    code = main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert f"{plan}: {line}" in captured.err, captured.err
    # with the keys `ppb balance` now prints beside the offsets, it is checked; the four lists alone too
    plan.write_text(f"model: {{model_config: {{{TWO_ROWS}, pp_interleave_num: 2}}}}\nparallel: {{{INTERLEAVE}}}\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) in (0, 1)
    plan.write_text(TWO_ROWS + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) in (0, 1)


def test_ppb_balance_prints_the_interleave_keys_beside_the_offsets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = _interleaved_mindformers(tmp_path)
    capsys.readouterr()
    assert main(["balance", str(run), "-q"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = lines.index("To put in the MindFormers / HyperParallel yaml:")
    assert lines[at + 5 : at + 8] == [
        "  model.model_config.pp_interleave_num: 2",
        "  parallel.pipeline_config.pipeline_interleave: true",
        '  parallel.pipeline_config.pipeline_scheduler: "1f1b"',
    ]
    # one chunk: MindSpore's default pipeline, nothing more to say
    assert main(["balance", str(CONFIGS / "llama3-8b.yaml"), "-q"]) == 0
    assert "pp_interleave_num" not in capsys.readouterr().out


def test_ppb_balance_prints_no_interleaved_1f1b_keys_for_a_dualpipev_plan(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """MindSpore's pipeline_scheduler (a05ce588: 1f1b, gpipe, seqpipe, seqvpp, seqsmartvpp) runs no DualPipeV and
    MindFormers' LayerSetting (fd4deebc) places chunk 1 in stage order: `pipeline_scheduler: "1f1b"` beside a
    DualPipeV plan's lists ran them as another schedule, the last layers on stage P-1 instead of stage 0. Until
    session 34 it was printed; now a note says so, and the four lists alone still check as the plan."""
    run = _interleaved_mindformers(tmp_path)
    run.write_text(run.read_text().replace("schedule: interleaved", "schedule: dualpipev"))
    capsys.readouterr()
    assert main(["balance", str(run), "-q"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = lines.index("To put in the MindFormers / HyperParallel yaml:")
    assert not any(line.startswith(("  parallel.", "  model.")) for line in lines), out
    assert "MindFormers runs no DualPipeV" in " ".join(out.split()), out
    plan = tmp_path / "plan.yaml"
    plan.write_text("\n".join(line.strip() for line in lines[at + 1 : at + 5]) + "\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 0


def _interleaved_mindformers(folder: Path) -> Path:
    """configs/llama3-8b.yaml as MindFormers runs it with 2 chunks a stage (interleaved)."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    text = text.replace("vpp: 1", "vpp: 2").replace("schedule: 1f1b", "schedule: interleaved")
    path = folder / "mindformers-v2.yaml"
    path.write_text("framework: mindformers\n" + text)
    return path


@pytest.mark.parametrize(
    ("variant", "algo", "refused"),
    [
        ("ulysses", "colossalai_cp", True),  # a Ulysses run beside a yaml of MindFormers' ring
        ("ulysses", "ulysses_cp", False),
        ("ring", "ulysses_cp", True),
        ("ring", "colossalai_cp", False),
        ("ulysses", None, False),  # not stated: the four lists alone
    ],
)
def test_a_mindformers_yaml_of_another_context_parallel_algorithm_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, variant: str, algo: str | None, refused: bool
) -> None:
    """MindFormers' `parallel_config.context_parallel_algo` (modules/transformer/transformer.py `ContextParallelAlgo`,
    fd4deebc: colossalai_cp, its default, or ulysses_cp) against the run config's cp_variant at cp 2; until
    session 31 a yaml of the other algorithm was checked as the run's without a word."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    text = text.replace("dp: 8, tp: 2", "dp: 4, tp: 2").replace("cp: 1,", f"cp: 2, cp_variant: {variant},")
    run = tmp_path / "mindformers-cp2.yaml"
    run.write_text("framework: mindformers\n" + text)
    plan = tmp_path / "plan.yaml"
    stated = "" if algo is None else f"parallel_config: {{context_parallel: 2, context_parallel_algo: {algo}}}\n"
    plan.write_text("offset: [0, 0, 0, 0]\n" + stated)
    code = main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"])
    captured = capsys.readouterr()
    if refused:
        assert code == 2 and captured.err.count("\n") == 1, captured.err
        assert f"{plan}: parallel_config.context_parallel_algo: '{algo}', the run config has cp_variant {variant}" in (
            captured.err
        )
    else:
        assert code in (0, 1), captured.err


def test_the_optimum_megatron_cannot_say_is_beside_what_its_flags_run(capsys, tmp_path: Path) -> None:
    """configs/llama3-8b.yaml with 62000 MB reserved (19,559 usable): the optimum mixes NONE, SLCT and FULL per
    layer, which Megatron-Core cannot say (one setting for every layer), so the flags printed are the fastest
    plan it can say. Until session 32 only the optimum's iteration and "N× yours" were said, not what the
    printed flags run; now `megatron_iteration_s`, which `ppb check` of those very flags prices the same (a path
    of its own: the flags parsed), and the speedup over the user's plan by it."""
    text = (CONFIGS / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {CONFIGS / 'hf' / 'llama3-8b.json'}")
    run = tmp_path / "tight.yaml"
    run.write_text(text.replace("reserved_mb: 4000", "reserved_mb: 62000"))
    mine = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    code, out = _check(capsys, run, mine, "-q")
    assert code == 0
    optimum = out["optimum"]
    assert optimum["megatron_flags_of"] == "alternative"
    code, theirs = _check(capsys, run, optimum["megatron"], "--no-optimum")
    assert code == 0
    assert optimum["megatron_iteration_s"] == pytest.approx(theirs["iteration"]["seconds"], rel=1e-9)
    assert optimum["megatron_speedup"] == pytest.approx(out["iteration"]["seconds"] / theirs["iteration"]["seconds"])
    assert optimum["megatron_peak_mb"] == pytest.approx(max(stage["peak_mb"] for stage in theirs["stages"]))
    assert optimum["iteration_s"] < optimum["megatron_iteration_s"]  # the optimum mixes what Megatron cannot say
    assert main(["check", str(run), "--plan", mine, "-q"]) == 0
    said = capsys.readouterr().out
    assert f"these flags run: iteration {optimum['megatron_iteration_s']:,.3f} s" in said


def test_a_pasted_plan_text_that_is_no_flags_is_one_line(capsys) -> None:
    """`ppb check RUN --plan "$(cat plan.yaml)"` (MindFormers keys or torchtitan's TOML lines as text): the error
    named the whole pasted text as the file, over several lines; now one line naming --plan and what to give."""
    text = "offset: [0, 0, 0, 0]\nrecompute: false\nselect_recompute: true"
    assert main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", text, "--no-optimum"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "ppb: error: --plan: text that is not Megatron-LM flags (--...): a MindFormers yaml (.yaml, .yml), a plan "
        "JSON or a torchtitan TOML (.toml) is given as its file"
    ]


def test_an_optimum_not_proven_says_why_the_solve_ended(capsys: pytest.CaptureFixture[str]) -> None:
    """A solve its deterministic work limits ended has the status "time_limit" (no proof), which `ppb check`
    printed bare, "the balancer's plan (time_limit)", to a user who set no time limit (Llama 3 70B at PP 4 VPP 5,
    session 33); it says now what `ppb balance` says, with the gap: 0.0335 is 3.35%."""
    code, out = _check(capsys, CONFIGS / "llama3-8b.yaml", "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'")
    assert code == 0 and out["optimum"]["status"] == "optimal"
    render(out)
    assert "the balancer's plan (proven optimal): iteration " in capsys.readouterr().out
    out["optimum"].update(status="time_limit", stopped_by="work_limit", gap=0.0335)
    render(out)
    printed = capsys.readouterr().out
    assert "the balancer's plan (stopped at its work limits (the same plan on every run), gap 3.35%): " in printed
    assert "time_limit" not in printed


def test_a_plan_that_is_the_balancers_says_nothing_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    """README's quick-start plan for configs/llama3-8b.yaml is 'Et*8|t*9|t*9|t*6L', nothing recomputed (3.962 s): given
    as the user's flags, the check printed that same layout and `--decoder-first/last-pipeline-num-layers` to paste,
    "1.000× yours" (session 33, on Megatron-LM's gpt3 175B example). The even split is not it: its optimum is said."""
    code, out = _check(capsys, CONFIGS / "llama3-8b.yaml", "--pipeline-model-parallel-layout 'Et*8|t*9|t*9|t*6L'")
    assert code == 0 and out["optimum"]["same_as_yours"] is True
    render(out)
    printed = capsys.readouterr().out
    assert "the balancer's plan (proven optimal) is yours: the same split and recompute, nothing to change" in printed
    assert "Megatron-LM:" not in printed
    code, out = _check(capsys, CONFIGS / "llama3-8b.yaml", "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'")
    assert code == 0 and out["optimum"]["same_as_yours"] is False
    render(out)
    assert "Megatron-LM: --pipeline-model-parallel-layout 'Et*8|t*9|t*9|t*6L'" in capsys.readouterr().out


def test_no_optimum_says_why_without_the_bare_status(capsys: pytest.CaptureFixture[str]) -> None:
    """A solve that ended with no plan printed its status bare ("the balancer's plan: time_limit: ..."), the word
    the line with a plan no longer prints: it says the proof that none fits, or which limit stopped the search."""
    code, out = _check(capsys, CONFIGS / "llama3-8b.yaml", "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'")
    assert code == 0
    message = "no plan fits in 5,000 MB per device: the least-memory plan needs 9,762 MB"
    out["optimum"] = {"status": "infeasible", "stopped_by": "infeasible", "message": message}
    render(out)
    assert f"the balancer's plan: none, {message}\n" in capsys.readouterr().out
    for stopped_by, limit in (("time_limit", "time limit"), ("work_limit", "work limits")):
        out["optimum"] = {"status": "time_limit", "stopped_by": stopped_by, "message": None}
        render(out)
        printed = capsys.readouterr().out
        assert f"the balancer's plan: none, no plan found: the {limit} stopped the search first\n" in printed
        assert "time_limit" not in printed
