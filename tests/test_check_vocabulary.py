"""`ppb import megatron` and `ppb check --plan` read a launch's vocabulary by one rule
(ppb_core.balance.megatron_tokenizer, after megatron/core/tokenizers/utils/build_tokenizer.py
`build_tokenizer`, Megatron-LM d98e8a64): `--vocab-size` only where the tokenizer reads it
(NullTokenizer exactly, TikTokenizer or its 2**17 default), the GPT-2 BPE's own 50257 entries
(pretrain_gpt.py's default tokenizer, which reads no `--vocab-size`), a file tokenizer's size from
`--tokenizer-vocab` on import and not compared by check where the file is not on this machine. A launch
imported then checked passes; the same launch with another tokenizer or size is refused in one line
naming the flag and both values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ppb_core.cli.main import main

CONFIGS = Path(__file__).parent.parent / "configs"
# a small Llama-shaped launch on 8 GPUs: tp 2 × pp 2 × dp 2, 1 × 8 micro-batches × dp 2 = 16
BASE = (
    "pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 "
    "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 16 --bf16 "
    "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel "
    "--use-distributed-optimizer --swiglu --untie-embeddings-and-output-weights --position-embedding-type rope"
)
NULL = "--tokenizer-type NullTokenizer --vocab-size 128256"
HF_NOTE = (  # a hub name is no file here (tests/test_check_tokenizer_file.py reads files that are)
    "--tokenizer-model meta-llama/Meta-Llama-3-8B is no file or folder on this machine (a hub name or another "
    "machine's path): the tokenizer's vocabulary is not compared with the run config's vocab_size"
)


def _import(tmp_path: Path, capsys: pytest.CaptureFixture[str], tokenizer: str, *extra: str) -> Path:
    script = tmp_path / "imported.sh"
    script.write_text(f"{BASE} {tokenizer}\n")
    run = tmp_path / "run.yaml"
    argv = ["import", "megatron", str(script), "--gpus", "8", "--device", "h100-80gb", "-o", str(run), *extra]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    return run


def _check(capsys: pytest.CaptureFixture[str], run: Path, plan: Path | str) -> tuple[int, str, str]:
    code = main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q", "--json"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("tokenizer", "extra", "vocab", "note"),
    [
        ("", [], 50257, None),  # pretrain_gpt.py's default GPT-2 BPE: its vocab.json's 50257 entries
        ("--vocab-size 128256", [], 50257, None),  # build_tokenizer passes --vocab-size only to Null/Tik
        (NULL, [], 128256, None),  # null_tokenizer.py: exactly vocab_size
        ("--tokenizer-type TikTokenizer --tokenizer-model t.json", [], 131072, None),  # 2**17 default
        ("--tokenizer-type TikTokenizer --tokenizer-model t.json --vocab-size 100000", [], 100000, None),
        (
            "--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B",
            ["--tokenizer-vocab", "128256"],
            128256,
            HF_NOTE,
        ),
    ],
)
def test_an_imported_launch_checks_against_its_own_run_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tokenizer: str, extra: list[str], vocab: int, note: str | None
) -> None:
    run = _import(tmp_path, capsys, tokenizer, *extra)
    assert yaml.safe_load(run.read_text())["models"][0]["spec"]["vocab_size"] == vocab
    code, out, err = _check(capsys, run, tmp_path / "imported.sh")
    assert code in (0, 1), err
    notes = [line for line in json.loads(out)["notes"] if "vocab" in line]
    assert notes == ([note] if note else [])


@pytest.mark.parametrize(
    ("imported", "checked", "line"),
    [
        (NULL, "--tokenizer-type NullTokenizer --vocab-size 32000", "--vocab-size: 32000, the run config has 128256"),
        # the same --vocab-size without the tokenizer that reads it: pretrain_gpt.py builds the GPT-2 BPE
        (
            NULL,
            "--vocab-size 128256",
            "--tokenizer-type: not given (pretrain_gpt.py's default GPT2BPETokenizer: 50257 entries, --vocab-size "
            "128256 not read), the run config has 128256 (vocab_size)",
        ),
        (
            NULL,
            "--tokenizer-type GPT2BPETokenizer --vocab-size 128256",
            "--tokenizer-type: GPT2BPETokenizer (50257 entries, --vocab-size 128256 not read), the run config has "
            "128256 (vocab_size)",
        ),
        ("", "--tokenizer-type NullTokenizer --vocab-size 50304", "--vocab-size: 50304, the run config has 50257"),
        (
            "",
            "--tokenizer-type TikTokenizer --tokenizer-model t.json",
            "--vocab-size: not given (TikTokenizer's default 131072), the run config has 50257 (vocab_size)",
        ),
        (NULL, "--tokenizer-type NullTokenizer", "--vocab-size: NullTokenizer needs --vocab-size"),
        (NULL, "--tokenizer-type BertWordPieceLowerCase", "--tokenizer-type: 'BertWordPieceLowerCase' is not a GPT"),
    ],
)
def test_another_tokenizer_or_size_is_refused_naming_the_flag_and_both_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], imported: str, checked: str, line: str
) -> None:
    run = _import(tmp_path, capsys, imported)
    plan = tmp_path / "train.sh"
    plan.write_text(f"{BASE} {checked}\n")
    code, out, err = _check(capsys, run, plan)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{plan}: {line}" in err


def test_a_shorter_text_compares_the_vocabulary_only_where_it_states_the_tokenizer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = CONFIGS / "llama3-8b.yaml"  # Llama-3-8B: vocabulary 128256 (configs/hf/llama3-8b.json)
    code, out, err = _check(capsys, run, "--vocab-size 32000")  # the tokenizer is the rest of the launch's
    assert code in (0, 1), err
    assert json.loads(out)["notes"] == [
        "--vocab-size not compared with the run config's vocab_size: Megatron-LM reads it only with "
        "--tokenizer-type NullTokenizer or TikTokenizer, and the plan does not say its tokenizer"
    ]
    code, out, err = _check(capsys, run, "--tokenizer-type NullTokenizer --vocab-size 128256")
    assert code in (0, 1) and json.loads(out)["notes"] == [], err
    code, out, err = _check(capsys, run, "--tokenizer-type GPT2BPETokenizer")
    assert code == 2 and err.count("\n") == 1
    assert "--plan: --tokenizer-type: GPT2BPETokenizer (50257 entries), the run config has 128256 (vocab_size)" in err


def test_import_refuses_a_file_size_for_a_tokenizer_that_reads_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(f"{BASE}\n")
    run = tmp_path / "run.yaml"
    argv = ["import", "megatron", str(script), "--gpus", "8", "--device", "h100-80gb", "-o", str(run)]
    assert main([*argv, "--tokenizer-vocab", "128256"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--tokenizer-vocab: 128256, but the launch's GPT2BPETokenizer builds 50257" in err
    assert not run.exists()
