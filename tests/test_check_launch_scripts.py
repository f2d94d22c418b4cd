"""`ppb check RUN.yaml --plan SCRIPT`: a whole Megatron-LM launch script as the plan. Its model and
parallel sizes are compared with the run config's (a mismatch is one line naming the flag and both
values), flags that do not concern the plan are read past, and the script's variables and arrays are
read as the shell reads them (ppb_core.balance.launch_script, megatron_run)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from ppb_core.balance.launch_script import script_words
from ppb_core.balance.megatron_run import moe_pattern
from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"
HF = CONFIGS / "hf"
# a Megatron-LM git repository (a clone or a bare mirror) holding commit d98e8a64, for its launch scripts
MEGATRON = os.environ.get("PPB_MEGATRON_LM")

# A launch script in the shape of Megatron-LM's examples (variables with defaults, bash arrays, a
# quoted "--flag value" element, torchrun's own flags, flags ppb does not compare), stating
# configs/llama3-8b.yaml's run: Llama-3-8B (configs/hf/llama3-8b.json: 32 layers, hidden 4096,
# ffn 14336, 32 heads over 8 key/value heads of 128, vocabulary 128256, untied), tp 2 + SP, pp 4,
# ZeRO-1, 8192 tokens, micro-batch 1, 1 × 32 micro-batches × dp 8 = a global batch of 256, bf16.
# Its tokenizer is Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh's mock-data one (d98e8a64:
# `--tokenizer-type NullTokenizer` `--vocab-size 128256`): without it pretrain_gpt.py builds the
# GPT-2 BPE, 50257 entries, whatever --vocab-size says (build_tokenizer.py).
LLAMA_SCRIPT = """#!/bin/bash
TP=${TP:-2}
PP=4
NUM_LAYERS=32
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
MODEL_ARGS=(
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length 8192
    --max-position-embeddings 8192   # not the plan's concern
    --position-embedding-type rope
    --swiglu
    --untie-embeddings-and-output-weights
    "--tokenizer-type NullTokenizer"
    "--vocab-size 128256"
)
TRAINING_ARGS=(--micro-batch-size 1 --global-batch-size 256 --bf16 --lr 3e-4 --clip-grad 1.0)
PARALLEL_ARGS=(
    --tensor-model-parallel-size ${TP}
    --pipeline-model-parallel-size $PP
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
)
torchrun --nproc_per_node 8 --nnodes $NUM_NODES pretrain_gpt.py \\
    ${MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${PARALLEL_ARGS[@]}
"""


def _run_check(capsys: pytest.CaptureFixture[str], run: Path, plan: Path) -> tuple[int, str, str]:
    code = main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q", "--json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_launch_script_stating_the_runs_sizes_is_checked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(LLAMA_SCRIPT)
    code, out, err = _run_check(capsys, CONFIGS / "llama3-8b.yaml", script)
    assert code in (0, 1), err
    checked = json.loads(out)
    assert checked["form"] == "megatron"
    assert [stage["layers"] for stage in checked["stages"]] == [8, 8, 8, 8]  # the even split of 32 over pp 4


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        ("--num-layers $NUM_LAYERS", "--num-layers 30", "--num-layers: 30, the run config has 32 (num_layers)"),
        ("--hidden-size 4096", "--hidden-size 5120", "--hidden-size: 5120, the run config has 4096 (hidden_size)"),
        ("--ffn-hidden-size 14336", "--ffn-hidden-size 11008", "--ffn-hidden-size: 11008, the run config has 14336"),
        ("--num-attention-heads 32", "--num-attention-heads 64", "--num-attention-heads: 64, the run config has 32"),
        ("--num-query-groups 8", "--num-query-groups 4", "--num-query-groups: 4, the run config has 8"),
        ("--kv-channels 128", "--kv-channels 64", "--kv-channels: 64, the run config has 128 (head_dim)"),
        # arguments.py validate_args: with --swiglu, int(4·4096·2/3 / 64)·64 = 170·64 = 10880
        (
            "--ffn-hidden-size 14336",
            "",
            "--ffn-hidden-size: not given (Megatron-LM's default 10880), the run config has 14336",
        ),
        ("--seq-length 8192", "--seq-length 4096", "--seq-length: 4096, the run config has 8192"),
        ('"--vocab-size 128256"', '"--vocab-size 32000"', "--vocab-size: 32000, the run config has 128256"),
        ("TP=${TP:-2}", "TP=${TP:-4}", "--tensor-model-parallel-size: 4, the run config has 2 (parallel.tp)"),
        ("PP=4", "PP=8", "--pipeline-model-parallel-size: 8, the run config has 4 (parallel.pp)"),
        ("--micro-batch-size 1", "--micro-batch-size 2", "--micro-batch-size: 2, the run config has 1"),
        ("--global-batch-size 256", "--global-batch-size 512", "--global-batch-size: 512, the run config has 256"),
        ("--bf16", "--fp16", "--fp16: given, the run config has dtype bf16 (training.dtype)"),
        ("--bf16", "", "--bf16: neither --bf16 nor --fp16 (Megatron-LM trains in fp32), the run config has dtype bf16"),
        ("    --sequence-parallel\n", "", "--sequence-parallel: not given, the run config has true"),
        (
            "    --use-distributed-optimizer\n",
            "",
            "--use-distributed-optimizer: not given (nothing sharded): shard level 0, the run config has 1 (zero 1",
        ),
        # arguments.py: Megatron-FSDP's default --data-parallel-sharding-strategy is optim_grads_params
        (
            "    --use-distributed-optimizer\n",
            "    --use-megatron-fsdp\n",
            "--use-megatron-fsdp: --data-parallel-sharding-strategy optim_grads_params: shard level 3, the run config "
            "has 1",
        ),
        # optim shards as zero 1 does, but Megatron-FSDP keeps its main gradients in the parameters' bf16
        # (param_and_grad_buffer.py `_resolve_group_grad_dtype`), DDP in fp32: another run's memory
        (
            "    --use-distributed-optimizer\n",
            "    --use-megatron-fsdp --data-parallel-sharding-strategy optim\n",
            "--megatron-fsdp-main-grads-dtype: main gradients in auto (the parameters' dtype), 2 bytes, the run "
            "config has training.grad_bytes: 4",
        ),
        (
            "    --use-distributed-optimizer\n",
            "    --use-megatron-fsdp --data-parallel-sharding-strategy optim --megatron-fsdp-main-grads-dtype fp32\n",
            "",
        ),
        ("--bf16", "--bf16 --grad-reduce-in-bf16", "--grad-reduce-in-bf16: main gradients in bf16, 2 bytes, the run"),
        ("    --swiglu\n", "", "--swiglu: not given, the run config has swiglu (activation)"),
        (
            "    --group-query-attention\n",
            "",
            "--group-query-attention: not given (Megatron-LM then builds a key/value head per head: 32, and ignores "
            "--num-query-groups), the run config has 8 key/value heads",
        ),
        # 8 groups said as 8 groups: the same model (a refusal of the switch alone was no mismatch)
        ("--num-query-groups 8", "--num-query-groups 8", ""),
        ("    --untie-embeddings-and-output-weights\n", "", "--untie-embeddings-and-output-weights: not given"),
        ("--kv-channels 128", "--num-experts 8", "--num-experts: 8, the run config has 0 (num_experts)"),
        ("--kv-channels 128", "--mtp-num-layers 1", "--mtp-num-layers: 1, the run config has 0"),
        (
            "--lr 3e-4",
            "--fp8-format hybrid",
            "--fp8-format: hybrid (FP8 linears keep their inputs in FP8), the run config has fp8_cache none",
        ),
        (
            "--overlap-grad-reduce",
            "--num-layers-per-virtual-pipeline-stage 4",
            "--num-layers-per-virtual-pipeline-stage: 4 gives 2 virtual stages per rank (32 layers over pp 4), "
            "the run config has 1 (parallel.vpp)",
        ),
        (
            "--overlap-grad-reduce",
            "--num-layers-per-virtual-pipeline-stage 3",
            "--num-layers-per-virtual-pipeline-stage: 3 does not divide the 32 layers' share of pp 4",
        ),
        ("NUM_LAYERS=32\n", "", "--num-layers is '$NUM_LAYERS', a shell variable the script does not assign"),
        ("--seq-length 8192", "--seq-length 8k", "--seq-length must be an integer, got '8k'"),
        ("--hidden-size 4096", "--hidden-size", "--hidden-size: must be an integer"),
    ],
)
def test_a_launch_script_stating_another_size_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, old: str, new: str, line: str
) -> None:
    assert old in LLAMA_SCRIPT
    script = tmp_path / "train.sh"
    script.write_text(LLAMA_SCRIPT.replace(old, new, 1))
    code, out, err = _run_check(capsys, CONFIGS / "llama3-8b.yaml", script)
    if not line:  # the same run said otherwise: read
        assert code in (0, 1) and json.loads(out)["form"] == "megatron", err
        return
    if line.startswith("--hidden-size: must"):  # `--hidden-size --ffn-hidden-size`: the next flag is no value
        line = "--hidden-size must be an integer, got '--ffn-hidden-size'"
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{script}: " in err and line in err, err


def test_flags_not_given_are_not_compared_in_a_partial_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """Without `--num-layers` the text is not a whole command line (Megatron-LM requires it), so a
    flag it leaves out is not taken at Megatron-LM's default: layout and recompute flags alone are read."""
    flags = "--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L' --recompute-granularity selective"
    code = main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", flags, "--no-optimum", "-q", "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)  # no size refused; the plan's recompute priced in place of the run config's
    assert code == 0 and out["plan_recompute"] == {"granularity": "selective"}
    assert [stage["options"] for stage in out["stages"]] == [{"SLCT": 8}] * 4


@pytest.mark.parametrize(
    ("flags", "layers"),
    [
        # transformer_block.get_num_layers_to_build: (32 + 1) / 3 = 11 a stage, one fewer where the
        # embedding (first) or the loss (last) is counted
        ("--account-for-embedding-in-pipeline-split", [10, 11, 11]),
        ("--account-for-loss-in-pipeline-split", [11, 11, 10]),
    ],
)
def test_the_embedding_or_loss_counted_in_the_even_split(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: str, layers: list[int]
) -> None:
    text = (CONFIGS / "llama3-8b.yaml").read_text().replace("config: hf/", f"config: {HF}/")
    run = tmp_path / "pp3.yaml"
    run.write_text(text.replace("pp: 4,", "pp: 3,").replace("world_size: 64", "world_size: 48"))
    code = main(["check", str(run), "--plan", flags + " --pipeline-model-parallel-size 3", "--no-optimum", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and [stage["layers"] for stage in out["stages"]] == layers


def test_the_embedding_counted_with_a_layout_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    flags = "--account-for-embedding-in-pipeline-split --pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L'"
    code = main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", flags, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "cannot be set with --pipeline-model-parallel-layout" in err


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("1", [1, 1, 1, 1]),
        ("2", [1, 0, 1, 0]),  # gpt_layer_specs.get_moe_layer_pattern: MoE where i % 2 == 0
        ("[0]*1+[1]*3", [0, 1, 1, 1]),
        ("([1]*1+[0]*1)*2", [1, 0, 1, 0]),
        ("'[0,1,1,0]'", [0, 1, 1, 0]),
    ],
)
def test_moe_layer_freq_as_megatron_reads_it(text: str, pattern: list[int]) -> None:
    assert moe_pattern(text, 4) == pattern


@pytest.mark.parametrize("text", ["[0]*", "__import__('os')", "[0]*999999999", "0"])
def test_moe_layer_freq_that_is_no_pattern_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        moe_pattern(text, 4)


# Megatron-LM's own launch scripts (commit d98e8a64), each against a run config stating what it runs:
# sizes read off the script; the vocabulary padded to 128·tp as Megatron does by default.
_SCRIPTS = {
    "examples/gpt3/train_gpt3_175b_distributed.sh": """
models:
  - name: gpt3
    pad_vocab_multiple: 128
    spec: {vocab_size: 50257, hidden_size: 12288, num_layers: 96, num_attention_heads: 96, intermediate_size: 49152,
           activation: gelu, norm: layernorm, norm_bias: true, tied_embeddings: true, position_embedding: learned,
           max_position_embeddings: 2048, attention_bias: true, attention_output_bias: true, mlp_bias: true}
parallel: {dp: 8, tp: 8, pp: 16, zero: 0}
training: {seq_length: 2048, micro_batch_size: 1, micro_batches: 192, dtype: fp16, grad_bytes: 2}
device: {name: a100-80gb}
""",
    "examples/llama/train_llama3_8b_h100_fp8.sh": """
models: [{name: llm, config: HF/llama3-8b.json}]
parallel: {dp: 8, tp: 1, pp: 1, zero: 1}
training: {seq_length: 8192, micro_batch_size: 1, micro_batches: 16, dtype: bf16, fp8_cache: linear, grad_bytes: 2}
timing: {matmul_dtype: fp8, fp8_param_gather: true, attention_mask_in_dataloader: false, te_attention_backend: fused}
device: {name: h100-80gb}
""",
    "examples/mixtral/train_mixtral_8x7b_distributed.sh": """
models: [{name: llm, config: HF/mixtral-8x7b.json}]
parallel: {dp: 8, tp: 1, pp: 4, ep: 8, zero: 1}
training: {seq_length: 4096, micro_batch_size: 1, micro_batches: 32, dtype: bf16}
device: {name: h100-80gb}
""",
    "examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh": """
models: [{name: llm, config: HF/deepseek-v3.json}]
parallel: {dp: 8, tp: 1, pp: 1, ep: 8, etp: 1, fsdp: true}
training: {seq_length: 4096, micro_batch_size: 4, micro_batches: 64, dtype: bf16, grad_bytes: 2,
           recompute: {granularity: selective, modules: [mlp, moe, mla_up_proj, layernorm]}}
timing: {attention_mask_in_dataloader: false}
device: {name: h100-80gb}
""",
}


@pytest.mark.skipif(MEGATRON is None, reason="PPB_MEGATRON_LM (a Megatron-LM git repository) is not set")
@pytest.mark.parametrize("script", sorted(_SCRIPTS))
def test_megatron_lms_own_launch_scripts_parse(capsys: pytest.CaptureFixture[str], tmp_path: Path, script: str) -> None:
    text = subprocess.run(
        ["git", "-C", str(MEGATRON), "show", f"d98e8a64ddf34856e74b24714e3bedb2f5a39553:{script}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    plan = tmp_path / Path(script).name
    plan.write_text(text)
    run = tmp_path / "run.yaml"
    run.write_text(f"name: {plan.stem}\n" + _SCRIPTS[script].replace("HF/", f"{HF}/"))
    code, out, err = _run_check(capsys, run, plan)
    assert code in (0, 1), err
    assert json.loads(out)["form"] == "megatron"
    # gpt3's script leaves pretrain_gpt.py's GPT-2 BPE, compared (50257); llama's TOKENIZER_ARG defaults to
    # MOCK, so bash runs its mock branch: NullTokenizer with --vocab-size 128256, compared (until session 32
    # both branches were read and the real-data branch's HuggingFaceTokenizer won); the others read theirs from
    # a file (mixtral's Llama2Tokenizer, DeepSeek-V3's HuggingFaceTokenizer), not compared and said
    unread = [note for note in json.loads(out)["notes"] if "vocab_size" in note]
    assert len(unread) == (0 if "gpt3" in script or "llama" in script else 1), unread
    # the same script under a run config of other sizes is refused in one line naming a flag
    code, out, err = _run_check(capsys, CONFIGS / "llama3-8b.yaml", plan)
    assert code == 2 and out == "" and err.count("\n") == 1 and f"{plan}: --" in err, err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('A=(--x "([0]+[1]*3)" --y 1.0)', ["--x", "([0]+[1]*3)", "--y", "1.0"]),  # an array on one line
        ("TP=${TP:-4}\n--tp $TP ${PP:-2} $UNSET", ["--tp", "4", "2", "$UNSET"]),  # the script's default
        ('X=(\n  "--vocab-size 128256"\n)', ["--vocab-size", "128256"]),  # split as ${X[@]} splits it
        ("--a 1 \\\n  --b 2 # --c 3", ["--a", "1", "--b", "2"]),  # joined lines, a comment
        ("X=${X:-${Y:-3}}\n--tp $X", ["--tp", "3"]),  # nested defaults, from the inside
        # bash arithmetic (examples/gptoss/02_train.sh): 8·1 = 8; 64/4 = 16; (8+1)·3 = 27; -7/2 truncates
        # to -3 and 7 % -3 is 7 - (-2)(-3) = 1 as C computes them; $RANDOM is never assigned: left as is
        ("G=8\nN=1\nW=$(($G*$N))\nPP=${W}\n--pp $PP", ["--pp", "8"]),
        (
            "PP=4\n--tp $((64/PP)) --a $(( (8+1) * 3 )) --b $((-7/2)) --c $((7%-3))",
            ["--tp", "16", "--a", "27", "--b", "-3", "--c", "1"],
        ),
        ("--port $(($RANDOM + 1024))", ["--port", "$(($RANDOM+1024))"]),
        # a `case` arm's pattern is the script's own option, not pretrain_gpt.py's
        (
            'case $1 in\n  --checkpoint-path)\n    CKPT="$2"\n    shift 2\n    ;;\nesac\n--tp 2',
            ["case", "$1", "in", "shift", "2", "esac", "--tp", "2"],
        ),
        # `;` separates commands as a newline does (bash(1), Lists): TP is 8, not "8;"; a quoted one is a character
        ("TP=8; PP=4;\n--tp $TP --pp $PP;", ["--tp", "8", "--pp", "4"]),
        ('X="a;b"\n--x $X', ["--x", "a;b"]),
        ("if [ 1 = 1 ]; then --a; fi;", ["if", "then", "--a", "fi"]),
    ],
)
def test_a_scripts_words_as_the_shell_reads_them(text: str, words: list[str]) -> None:
    assert script_words(text) == words


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # examples/llama/train_llama3_8b_h100_fp8.sh's test at its defaults: "MOCK" == "MOCK", so the mock branch
        (
            'T=${3:-"MOCK"}\nif [[ "$T" == "MOCK" ]] || [[ -z "$T" ]]; then\n  A=("--tokenizer-type NullTokenizer")\n'
            'else\n  A=("--tokenizer-type HuggingFaceTokenizer")\nfi',
            ["if", "then", "--tokenizer-type", "NullTokenizer", "else", "fi"],
        ),
        # a given path is no "MOCK" and not empty: false || false || false, the else branch
        (
            'T=/data/tok\nif [[ "$T" == "MOCK" ]] || [[ -z "$T" ]]; then\n--a 1\nelse\n--a 2\nfi',
            ["if", "then", "else", "--a", "2", "fi"],
        ),
        # sbatch_mfsdp_deepseek_v3.sh: `[ "${USE_MEGATRON_FSDP}" = 1 ]` at its default 1; PROFILE 0, the else;
        # a variable set inside a branch not run is not set
        (
            'U=${U:-1}\nP=${P:-0}\nif [ "${U}" = 1 ]; then\n--fsdp\nfi\nif [ "${P}" = 1 ]; then\nX=nsys\n'
            "else\nX=none\nfi\n--x $X",
            ["if", "then", "--fsdp", "fi", "if", "then", "else", "fi", "--x", "none"],
        ),
        # elif: 0 = 1 is false, 0 -eq 0 true, so the else is not run; the nested test -z "" is true
        (
            'P=0\nif [ "$P" = 1 ]; then\n--x 1\nelif [ "$P" -eq 0 ]; then\n--x 2\nif [ -z "" ]; then\n--z\nfi\n'
            "else\n--x 3\nfi",
            ["if", "then", "elif", "then", "--x", "2", "if", "then", "--z", "fi", "else", "fi"],
        ),
        # ! and && : not (1 > 2) and a != b, both true
        ("if ! [ 1 -gt 2 ] && [[ a != b ]]; then\n--a\nelse\n--b\nfi", ["if", "then", "--a", "else", "fi"]),
        # what the script cannot say: a file test, an unassigned variable, a command; both branches, as before
        ('if [ ! -d "$C" ]; then\n--x 1\nelse\n--x 2\nfi', ["if", "then", "--x", "1", "else", "--x", "2", "fi"]),
        ('if [ "$UNSET" = 1 ]; then\n--x 1\nelse\n--x 2\nfi', ["if", "then", "--x", "1", "else", "--x", "2", "fi"]),
        ("if grep -q a f; then\n--x 1\nelse\n--x 2\nfi", ["if", "then", "--x", "1", "else", "--x", "2", "fi"]),
        # a pattern on the right of == is matched, not compared: not decided here
        ("T=abc\nif [[ $T == a* ]]; then\n--x 1\nfi", ["if", "then", "--x", "1", "fi"]),
    ],
)
def test_an_if_the_scripts_own_values_decide_runs_one_branch(text: str, words: list[str]) -> None:
    """bash(1) CONDITIONAL EXPRESSIONS at the script's defaults: string = == !=, -z, -n, -eq ... -ge, !, and
    lists of tests by && and || left to right; anything else leaves both branches read."""
    assert script_words(text) == words


def test_the_experts_width_defaults_to_the_dense_one(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 (dense layers 18432 wide, experts 2048): without `--moe-ffn-hidden-size`
    Megatron-LM builds the experts `--ffn-hidden-size` wide (arguments.py validate_args)."""
    flags = "--ffn-hidden-size 18432 --num-experts 256"
    code = main(["check", str(CONFIGS / "deepseek-v3.yaml"), "--plan", flags, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--plan: --ffn-hidden-size: 18432, the run config has 2048 (moe_intermediate_size; the experts'" in err, err


def test_mla_latent_norms_need_qk_layernorm(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3's latent norms are Megatron's --qk-layernorm under MLA (gpt_layer_specs.py d98e8a64:
    TELayerNormColumnParallelLinear up-projections with it, plain linears without): a whole command line
    without it runs no latent norm, which the run config has."""
    flags = (
        "--num-layers 61 --swiglu --untie-embeddings-and-output-weights --num-experts 256 --moe-router-topk 8"
        " --moe-shared-expert-intermediate-size 2048 --multi-latent-attention"
    )
    code = main(["check", str(CONFIGS / "deepseek-v3.yaml"), "--plan", flags, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "--plan: --qk-layernorm: not given, the run config has True (mla_latent_norms)" in err, err


def test_kv_channels_left_out_default_to_hidden_over_heads(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """4096 / 32 = 128, Llama-3-8B's head_dim: a whole command line without `--kv-channels` is read."""
    script = tmp_path / "train.sh"
    script.write_text(LLAMA_SCRIPT.replace("--kv-channels 128", ""))
    code, out, err = _run_check(capsys, CONFIGS / "llama3-8b.yaml", script)
    assert code in (0, 1) and json.loads(out)["form"] == "megatron", err


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # each variable twice the last: 10 · 2^39 characters were being built
        (
            "\n".join(["A0=xxxxxxxxxx", *(f"A{i}=$A{i - 1}$A{i - 1}" for i in range(1, 40)), "--num-layers $A39"]),
            "variables expanded: 1,310,720 is over ppb's limit of 1,048,576 characters",
        ),
        # a 5,000-digit count was echoed whole in the message
        ("--num-layers " + "9" * 5000, "--num-layers must be an integer, got a 5,000-character string"),
    ],
)
def test_a_script_past_the_limits_is_one_short_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, line: str
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(text)
    code, out, err = _run_check(capsys, CONFIGS / "llama3-8b.yaml", script)
    assert code == 2 and out == "" and err.count("\n") == 1 and len(err) < 300 and line in err, err


def test_as_many_query_groups_as_heads_is_the_same_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """GPT-3 175B has a key/value head per head: `--group-query-attention --num-query-groups 96` builds
    the same attention (argument_utils.py), so it is read; 48 groups are not the run's."""
    run = tmp_path / "gpt3.yaml"
    run.write_text("name: gpt3\n" + _SCRIPTS["examples/gpt3/train_gpt3_175b_distributed.sh"])
    for groups, code_wanted in (("96", (0, 1)), ("48", (2,))):
        flags = f"--group-query-attention --num-query-groups {groups}"
        code = main(["check", str(run), "--plan", flags, "--no-optimum", "-q", "--json"])
        captured = capsys.readouterr()
        assert code in code_wanted, captured.err
    assert "--num-query-groups: 48, the run config has 96 (num_key_value_heads)" in captured.err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ("--cp-comm-type p2p", ""),  # Megatron's ring: the run's cp_variant
        ("--cp-comm-type p2p p2p p2p", ""),  # one type a layer, all the same
        ("--cp-comm-type a2a", "--cp-comm-type: a2a is the ulysses, the run config has ring (parallel.cp_variant)"),
        ("--cp-comm-type allgather", "--cp-comm-type: allgather: ppb prices one type for every layer"),
        ("--cp-comm-type p2p a2a", "--cp-comm-type: p2p a2a: ppb prices one type for every layer"),
        (
            "--cp-comm-type all_gather",
            "--cp-comm-type: all_gather is the all_gather, the run config has ring (parallel.cp_variant)",
        ),
        (
            "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 1 2",
            "--cp-comm-type: a2a+p2p is the hierarchical, the run config has ring (parallel.cp_variant)",
        ),
    ],
)
def test_the_context_parallel_communication_is_the_runs(
    capsys: pytest.CaptureFixture[str], flags: str, said: str
) -> None:
    """configs/qwen2.5-7b.yaml runs cp 2 as a ring: Megatron-LM's --cp-comm-type p2p (its default)."""
    code = main(["check", str(CONFIGS / "qwen2.5-7b.yaml"), "--plan", flags, "--no-optimum", "-q", "--json"])
    captured = capsys.readouterr()
    if said:
        assert code == 2 and captured.err.count("\n") == 1 and f"--plan: {said}" in captured.err, captured.err
    else:
        assert code in (0, 1) and json.loads(captured.out)["form"] == "megatron", captured.err


@pytest.mark.parametrize(
    ("impl", "flag", "line"),
    [
        (
            "torch_fsdp2",
            "--use-megatron-fsdp",
            "--use-megatron-fsdp: given, the run config has parallel.fsdp_impl torch_fsdp2",
        ),
        (
            None,
            "--use-torch-fsdp2",
            "--use-torch-fsdp2: given, the run config has parallel.fsdp_impl megatron_fsdp (unset)",
        ),
        ("torch_fsdp2", "--use-torch-fsdp2", ""),
    ],
)
def test_a_launch_of_the_other_fsdp_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, impl: str | None, flag: str, line: str
) -> None:
    # Megatron-FSDP keeps its non-unit modules gathered, torch FSDP2 does not: which one runs is the plan's
    text = (CONFIGS / "llama3-8b.yaml").read_text().replace("config: hf/", f"config: {HF}/")
    stated = f"fsdp: true, fsdp_impl: {impl}" if impl else "fsdp: true"
    run = tmp_path / "run.yaml"
    run.write_text(text.replace("zero: 1", stated, 1))
    script = tmp_path / "train.sh"
    script.write_text(LLAMA_SCRIPT.replace("--use-distributed-optimizer", flag, 1))
    code, out, err = _run_check(capsys, run, script)
    if not line:
        assert code in (0, 1) and json.loads(out)["form"] == "megatron", err
        return
    assert code == 2 and out == "" and err.count("\n") == 1 and line in err, err


# A small FP8 run through `ppb import megatron` and back through `ppb check --plan` (megatron_run
# `_check_memory_switches`): the switches this session's importer reads that change what a stage holds.
FP8_BASE = (
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024"
    " --micro-batch-size 1 --global-batch-size 64 --pipeline-model-parallel-size 2 --bf16 --use-distributed-optimizer"
    " --fp8-format hybrid --fp8-recipe tensorwise --tokenizer-type NullTokenizer --vocab-size 32000"
)
FP8_SWITCHES = "--fp8-param-gather --first-last-layers-bf16 --no-create-attention-mask-in-dataloader"


def _imported(tmp_path: Path, flags: str, capsys: pytest.CaptureFixture[str]) -> Path:
    run = tmp_path / "run.yaml"
    code = main(["import", "megatron", flags, "--gpus", "8", "--device", "h100-80gb", "-o", str(run)])
    capsys.readouterr()
    assert code == 0
    return run


@pytest.mark.parametrize(
    ("plan", "said"),
    [
        (FP8_BASE, "--fp8-param-gather: not given, the run config has timing.fp8_param_gather: true"),
        (
            f"{FP8_BASE} --fp8-param-gather --first-last-layers-bf16",
            "--no-create-attention-mask-in-dataloader: not given, the run config has "
            "timing.attention_mask_in_dataloader: false",
        ),
        (
            f"{FP8_BASE} {FP8_SWITCHES} --num-layers-at-start-in-bf16 2",
            "--first-last-layers-bf16: given (2 layers at the start, 1 at the end), the run config has [1, 1]",
        ),
        (
            f"{FP8_BASE} --fp8-param-gather --no-create-attention-mask-in-dataloader",
            "--first-last-layers-bf16: not given, the run config has [1, 1]",
        ),
    ],
)
def test_the_imported_memory_switches_are_compared(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, plan: str, said: str
) -> None:
    run = _imported(tmp_path, f"{FP8_BASE} {FP8_SWITCHES}", capsys)
    # the launch it was imported from checks as that run
    assert main(["check", str(run), "--plan", f"{FP8_BASE} {FP8_SWITCHES}", "--no-optimum", "-q"]) == 0
    capsys.readouterr()
    # a whole command line without one of them (or other counts) is another run: refused in one line
    code = main(["check", str(run), "--plan", plan, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and said in err, err
    # a text of flags alone (no --num-layers) leaves the others unsaid
    assert main(["check", str(run), "--plan", "--fp8-param-gather", "--no-optimum", "-q"]) == 0


def test_the_switches_given_to_a_run_without_them_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """configs/llama3-8b.yaml keeps Megatron's defaults: the data loader's mask, no FP8."""
    code = main(["check", str(CONFIGS / "llama3-8b.yaml"), "--plan", "--no-create-attention-mask-in-dataloader", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "timing.attention_mask_in_dataloader: true" in err, err


def test_the_layer_wise_layout_round_trips(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Muon with the distributed optimizer (dist_muon): --no-use-layer-wise-param-layout is
    training.layer_wise_param_layout false (training.py wrap_model_chunks_with_ddp), and back."""
    base = FP8_BASE.replace(" --fp8-format hybrid --fp8-recipe tensorwise", "") + " --optimizer muon"
    run = _imported(tmp_path, f"{base} --no-use-layer-wise-param-layout", capsys)
    assert "layer_wise_param_layout: false" in run.read_text()
    assert main(["check", str(run), "--plan", f"{base} --no-use-layer-wise-param-layout", "--no-optimum", "-q"]) == 0
    capsys.readouterr()
    code = main(["check", str(run), "--plan", base, "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "training.layer_wise_param_layout: false" in err, err


@pytest.mark.parametrize(
    ("flags", "grad_bytes"),
    [
        ("--bf16 --use-distributed-optimizer", 4),  # validate_args accumulates bf16 in fp32
        ("--bf16 --use-distributed-optimizer --grad-reduce-in-bf16", 2),
        ("--fp16 --use-distributed-optimizer", 2),  # fp16 keeps DDP's buffer in the parameters' dtype
        ("--fp16 --use-distributed-optimizer --accumulate-allreduce-grads-in-fp32", 4),
        ("--bf16 --use-megatron-fsdp", 2),  # auto: the parameters' dtype
        ("--bf16 --use-megatron-fsdp --megatron-fsdp-main-grads-dtype fp32", 4),
    ],
)
def test_the_gradient_buffer_round_trips(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: str, grad_bytes: int
) -> None:
    """`ppb import megatron` reads the main gradients' dtype into training.grad_bytes; `ppb check --plan`
    with the same launch reads it back the same way (megatron_run `_check_grad_buffer`)."""
    base = FP8_BASE.split(" --bf16")[0] + " --tokenizer-type NullTokenizer --vocab-size 32000"
    run = _imported(tmp_path, f"{base} {flags}", capsys)
    raw = yaml.safe_load(run.read_text())
    assert raw["training"].get("grad_bytes", 4) == grad_bytes
    assert main(["check", str(run), "--plan", f"{base} {flags}", "--no-optimum", "-q"]) == 0
    capsys.readouterr()
    other = tmp_path / "other.yaml"
    raw["training"]["grad_bytes"] = 6 - grad_bytes
    other.write_text(yaml.safe_dump(raw))
    code = main(["check", str(other), "--plan", f"{base} {flags}", "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and f"the run config has training.grad_bytes: {6 - grad_bytes}" in err, err


def test_the_attention_backend_is_compared(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--attention-backend flash runs TE's FlashAttention, which keeps the attention output twice (memory/setup.py
    `te_flash`): a launch that says another backend than the run config is another run."""
    run = _imported(tmp_path, f"{FP8_BASE} --attention-backend flash", capsys)
    assert main(["check", str(run), "--plan", f"{FP8_BASE} --attention-backend flash", "--no-optimum", "-q"]) == 0
    capsys.readouterr()
    for plan, said in (
        (FP8_BASE, "--attention-backend: not given (auto), the run config has timing.te_attention_backend: flash"),
        (f"{FP8_BASE} --attention-backend fused", "--attention-backend: fused, the run config has"),
        ("--attention-backend auto", "--attention-backend: auto, the run config has"),
    ):
        code = main(["check", str(run), "--plan", plan, "--no-optimum", "-q"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and said in err, err
    # a text of flags alone that leaves the backend out leaves it unsaid
    assert main(["check", str(run), "--plan", "--micro-batch-size 1", "--no-optimum", "-q"]) == 0


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ("--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2", ""),
        (
            "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 1",
            "--hierarchical-context-parallel-sizes: 4 1, the run config has [2, 2] (parallel.hierarchical_cp_sizes)",
        ),
    ],
)
def test_the_hierarchical_levels_are_the_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: str, said: str
) -> None:
    """A run at cp 4 as a2a+p2p [2, 2] (Megatron-LM arguments.py: --hierarchical-context-parallel-sizes)."""
    text = (CONFIGS / "qwen2.5-7b.yaml").read_text()
    text = text.replace("config: hf/", f"config: {CONFIGS}/hf/").replace("dp: 4, tp: 4", "dp: 2, tp: 2")
    text = text.replace("cp: 2, cp_variant: ring", "cp: 4, cp_variant: hierarchical, hierarchical_cp_sizes: [2, 2]")
    run = tmp_path / "hierarchical.yaml"
    run.write_text(text.replace("world_size: 64", "world_size: 32"))
    plan = f"--tensor-model-parallel-size 2 {flags}"
    code = main(["check", str(run), "--plan", plan, "--no-optimum", "-q", "--json"])
    captured = capsys.readouterr()
    if said:
        assert code == 2 and captured.err.count("\n") == 1 and f"--plan: {said}" in captured.err, captured.err
    else:
        assert code in (0, 1) and json.loads(captured.out)["form"] == "megatron", captured.err
