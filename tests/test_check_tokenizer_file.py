"""A file tokenizer's vocabulary, read offline from the `--tokenizer-model` a launch names
(ppb_core.balance.tokenizer_file, after Megatron-LM d98e8a64 megatron/core/tokenizers/text/libraries/:
HuggingFaceTokenizer `len(self.tokenizer)`, SentencePieceTokenizer `get_piece_size()`), is compared by
`ppb check --plan` after Megatron's padding (build_tokenizer.py `vocab_size_with_padding`: a multiple of
`--make-vocab-size-divisible-by` 128 × TP) with the run config's padded vocabulary. Expected sizes come
from the tokenizers library and from protobuf's own encoder (transformers' sentencepiece_model_pb2),
independent of ppb's readers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tokenizers import Tokenizer
from tokenizers.models import Unigram, WordLevel
from transformers.utils import sentencepiece_model_pb2_new as sp_pb2

from ppb_core.balance.tokenizer_file import huggingface_tokens, sentencepiece_pieces
from ppb_core.cli.main import main
from tests.test_check_vocabulary import BASE, NULL, _check, _import


def _hf_folder(tmp_path: Path, words: int, special: list[str]) -> Path:
    folder = tmp_path / f"hf{words}"
    folder.mkdir()
    tokenizer = Tokenizer(WordLevel(vocab={f"w{i}": i for i in range(words)}, unk_token="w0"))
    tokenizer.add_special_tokens(special)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def _sp_model(tmp_path: Path, pieces: int) -> Path:
    proto = sp_pb2.ModelProto()
    proto.trainer_spec.vocab_size = pieces  # other ModelProto fields the reader must step over
    proto.normalizer_spec.name = "nmt_nfkc"
    for i in range(pieces):
        piece = proto.pieces.add()
        piece.piece, piece.score = f"p{i}", -float(i)
    path = tmp_path / "tokenizer.model"
    path.write_bytes(proto.SerializeToString())
    return path


def test_the_readers_count_as_the_tokenizer_libraries_do(tmp_path: Path) -> None:
    # 300 words + <s>, </s> new + w5 already a word: 302, as tokenizers counts with its added tokens
    folder = _hf_folder(tmp_path, 300, ["<s>", "w5", "</s>"])
    expected = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    assert expected == 302 and len(huggingface_tokens(folder)) == 302
    unigram = Tokenizer(Unigram([("a", -1.0), ("b", -2.0), ("c", -1.5)], unk_id=0))
    unigram.add_special_tokens(["<x>"])  # Unigram's [piece, score] list: 3 + 1
    unigram.save(str(tmp_path / "unigram.json"))
    assert len(huggingface_tokens(tmp_path / "unigram.json")) == 4
    pieces = sentencepiece_pieces(_sp_model(tmp_path, 1000))
    assert len(pieces) == 1000 and pieces[:2] == ["p0", "p1"]  # protobuf's serialisation of 1000 pieces


def test_an_imported_launch_reads_its_tokenizer_file_and_checks_against_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _hf_folder(tmp_path, 300, ["<s>", "</s>"])  # 302 entries
    run = _import(tmp_path, capsys, f"--tokenizer-type HuggingFaceTokenizer --tokenizer-model {folder}")
    assert yaml.safe_load(run.read_text())["models"][0]["spec"]["vocab_size"] == 302
    code, out, err = _check(capsys, run, tmp_path / "imported.sh")
    assert code in (0, 1), err
    assert [line for line in json.loads(out)["notes"] if "vocab" in line] == []


def test_a_file_of_another_padded_size_is_refused_and_one_of_the_same_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _import(tmp_path, capsys, NULL)  # vocab_size 128256 = 501 × 256 (128 × tp 2): trained 128256
    folder = _hf_folder(tmp_path, 300, [])
    plan = tmp_path / "train.sh"
    plan.write_text(f"{BASE} --tokenizer-type HuggingFaceTokenizer --tokenizer-model {folder}\n")
    code, out, err = _check(capsys, run, plan)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    # 300 entries padded to the next multiple of 128 × 2 = 256: 512
    assert (
        f"{plan}: --tokenizer-model: {folder} builds 300 entries, padded to 512 (a multiple of 256), the run "
        "config trains 128256 (vocab_size 128256 padded)" in err
    )
    # a 290-entry run config and a 300-entry file both pad to 512: Megatron builds the same embedding
    hub = "--tokenizer-type HuggingFaceTokenizer --tokenizer-model org/name"
    other = tmp_path / "other"
    other.mkdir()
    run = _import(other, capsys, hub, "--tokenizer-vocab", "290")
    code, out, err = _check(capsys, run, plan)
    assert code in (0, 1), err
    assert [line for line in json.loads(out)["notes"] if "vocab" in line] == []
    # --make-vocab-size-divisible-by 1: 300 pads to 302 (a multiple of 1 × 2) and 290 to 512
    plan.write_text(f"{plan.read_text().strip()} --make-vocab-size-divisible-by 1\n")
    code, out, err = _check(capsys, run, plan)
    assert code == 2 and "builds 300 entries, padded to 300 (a multiple of 2), the run config trains 512" in err


def test_sentencepiece_models_are_counted_with_legacy_special_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _sp_model(tmp_path, 1000)
    launch = f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {model}"
    run = _import(tmp_path, capsys, launch)
    assert yaml.safe_load(run.read_text())["models"][0]["spec"]["vocab_size"] == 1000
    plan = tmp_path / "train.sh"
    # legacy: p3 is a piece, <a> and <b> are not: 1000 + 2 = 1002, padded to 1024 like 1000 → passes
    plan.write_text(f"{BASE} {launch} --tokenizer-sentencepiece-legacy --tokenizer-special-tokens <a> p3 <b> --bf16\n")
    code, out, err = _check(capsys, run, plan)
    assert code in (0, 1), err
    # without legacy Megatron refuses special tokens: not compared, said in a note
    plan.write_text(f"{BASE} {launch} --tokenizer-special-tokens <a> --bf16\n")
    code, out, err = _check(capsys, run, plan)
    assert code in (0, 1), err
    assert any("without --tokenizer-sentencepiece-legacy" in line for line in json.loads(out)["notes"])


def test_a_missing_or_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _import(tmp_path, capsys, NULL)
    plan = tmp_path / "train.sh"
    plan.write_text(f"{BASE} --tokenizer-type HuggingFaceTokenizer --tokenizer-model {tmp_path / 'absent'}\n")
    code, out, err = _check(capsys, run, plan)
    assert code in (0, 1), err
    assert json.loads(out)["notes"] == [
        f"--tokenizer-model {tmp_path / 'absent'} is no file or folder on this machine (a hub name or another "
        "machine's path): the tokenizer's vocabulary is not compared with the run config's vocab_size"
    ]
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": {"type": "BPE"}}')
    plan.write_text(f"{BASE} --tokenizer-type HuggingFaceTokenizer --tokenizer-model {broken}\n")
    code, out, err = _check(capsys, run, plan)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{broken}: model.vocab: missing" in err
    truncated = tmp_path / "t.model"
    truncated.write_bytes(_sp_model(tmp_path, 5).read_bytes()[:-3])
    assert main(["check", str(run), "--plan", f"--tokenizer-type Llama2Tokenizer --tokenizer-model {truncated}"]) == 2
    assert f"{truncated}: is not a SentencePiece model" in capsys.readouterr().err


@pytest.mark.parametrize(
    "config",
    [
        {},
        {
            "added_tokens_decoder": {
                "300": {"content": "<s>", "special": True},
                "301": {"content": "<x>", "special": True},
            }
        },
        {"pad_token": "<pad>", "eos_token": "<s>", "unk_token": "w0"},
        {"bos_token": {"__type": "AddedToken", "content": "<b>", "special": True}, "mask_token": "<m>"},
        {"additional_special_tokens": ["<a1>", "w3"], "extra_special_tokens": ["<e1>"]},
    ],
)
def test_a_folder_counts_the_tokens_its_config_declares_as_transformers_loads_them(
    tmp_path: Path, config: dict
) -> None:
    # the independent count: transformers' AutoTokenizer on the folder, offline (len(tokenizer), which
    # Megatron's HuggingFaceTokenizer.vocab_size returns)
    from transformers import AutoTokenizer

    folder = _hf_folder(tmp_path, 300, ["<s>"])
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", **config}))
    assert len(huggingface_tokens(folder)) == len(AutoTokenizer.from_pretrained(str(folder)))
