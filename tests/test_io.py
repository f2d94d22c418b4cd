"""Files in and out (ppb_core.io): bounded YAML and JSON, all-or-nothing writes with the umask, stale
temporaries, output paths checked before work, and the core functions Dagster's glue relies on
(config_hash and a stored table's reader) raising nothing but InputError."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import ppb_core.cli.main as cli_main
import ppb_core.io as ppb_io
from ppb_core import chain, limits
from ppb_core.config.run import config_hash, load_run_config
from ppb_core.errors import InputError
from ppb_core.io import (
    atomic_write_bytes,
    check_output,
    host_tag,
    parse_json,
    parse_yaml,
    read_bytes,
    read_yaml,
    remove_stale_temporaries,
    write_files,
)

ROOT = Path(__file__).resolve().parents[1]


# --- YAML -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_yaml_reads_as_pyyaml_safe_load_does(path: Path) -> None:
    assert read_yaml(path) == yaml.safe_load(path.read_text())


def test_yaml_keeps_anchors_and_merge_keys() -> None:
    text = "base: &b {tp: 2, pp: 4}\nrun: {<<: *b, pp: 8}\nlist: &l [1, 2]\nagain: *l\n"
    assert parse_yaml(text, "x.yaml") == {
        "base": {"tp": 2, "pp": 4},
        "run": {"tp": 2, "pp": 8},
        "list": [1, 2],
        "again": [1, 2],
    }


def test_yaml_uses_libyaml_where_installed() -> None:
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml")
    assert issubclass(ppb_io._Loader, yaml.cyaml.CParser)


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ("a: 1\nb: {c: 1, c: 2}\n", "b.c", "twice"),
        ("a: &r [1, *r]\n", "a.1", "refers to a collection it is in"),
        ("a: " + "[" * 70 + "]" * 70 + "\n", "a.0.0.0.….0.0.0", f"limit of {limits.DEPTH} deep"),
        ("a: *missing\n", None, "undefined alias"),
        ("a: 1" + "0" * 5000 + "\n", None, "thousands of digits"),
        ("a: !!python/object:os.system x\n", None, "constructor"),
        ("a: [1, 2\n", None, "line 2"),
    ],
)
def test_yaml_problems_are_one_line(text: str, field: str | None, problem: str) -> None:
    with pytest.raises(InputError) as err:
        parse_yaml(text, "x.yaml")
    assert err.value.field == field and problem in err.value.problem and "\n" not in err.value.line()


def test_yaml_alias_expansion_is_bounded_and_quick() -> None:
    # Nine levels of nine aliases: 9^9 values expanded; refused at the limit, long before.
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 9) + "]" for k in range(1, 9)]
    started = time.perf_counter()
    with pytest.raises(InputError, match="aliases expanded") as err:
        parse_yaml("\n".join(levels) + "\n", "bomb.yaml")
    assert time.perf_counter() - started < 30  # generous: the refusal takes milliseconds
    assert len(err.value.line()) < 200
    # Under the limit, aliases are fine: five levels expand to 9 + 81 + ... + 9^5 = 66,429 values.
    assert len(parse_yaml("\n".join(levels[:5]) + "\n", "ok.yaml")["a4"]) == 9


# --- JSON -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ('{"a": {"b": 1, "b": 2}}', "a.b", "twice"),
        ('{"a": [1, NaN]}', "a.1", "NaN is not a number"),
        ('{"a": -Infinity}', "a", "-Infinity"),
        ("[" * 70 + "]" * 70, "0.0.0.0.….0.0.0", "deep"),
        ("[" * 100000 + "]" * 100000, None, "deep"),
        ('{"a": 1' + "0" * 200 + "}", None, "201-digit integer"),
        ('{"a": }', None, "line 1, column 7"),
    ],
)
def test_json_problems_name_the_key(text: str, field: str | None, problem: str) -> None:
    with pytest.raises(InputError) as err:
        parse_json(text, "x.json")
    assert err.value.field == field and problem in err.value.problem


def test_json_at_the_depth_limit_reads() -> None:
    nested = "[" * limits.DEPTH + "]" * limits.DEPTH
    assert parse_json(nested, "x.json") is not None


# --- reading files -----------------------------------------------------------------------------


def test_reads_refuse_what_is_not_a_small_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it would wait for a writer forever
    with pytest.raises(InputError, match="not a regular file"):
        read_bytes(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b"{}")
    os.truncate(big, limits.FILE_BYTES + 1)
    with pytest.raises(InputError, match="over ppb's limit"):
        read_bytes(big)
    with pytest.raises(InputError, match="a directory"):
        read_bytes(tmp_path)
    with pytest.raises(InputError, match="part of the path is a file"):
        read_bytes(big / "x.json")


# --- writing files -----------------------------------------------------------------------------


def test_writes_follow_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        write_files({tmp_path / "a.txt": b"x"})
        assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o640
        os.umask(0o002)
        write_files({tmp_path / "b.txt": b"x"})
        assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o664
    finally:
        os.umask(previous)


def test_writes_are_all_or_nothing(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "old.txt").write_text("old")
    real = ppb_io._write_aside
    calls = []

    def fail_third(path: Path, data: bytes) -> str:
        calls.append(path)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(ppb_io, "_write_aside", fail_third)
    files = {tmp_path / "old.txt": b"new", tmp_path / "a" / "b.txt": b"b", tmp_path / "c" / "d" / "e.txt": b"e"}
    with pytest.raises(InputError, match="No space left"):
        write_files(files)
    # The old file is whole, no new file, no temporary, no folder made for them.
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["old.txt"]
    assert (tmp_path / "old.txt").read_text() == "old"


def test_plan_writes_every_stage_or_none(tmp_path: Path, monkeypatch, capsys) -> None:
    """`ppb plan -o`: a write failing after another stage's file was written aside leaves none."""
    spec = {"vocab_size": 1024, "hidden_size": 256, "num_layers": 4, "num_attention_heads": 4, "intermediate_size": 512}
    run = tmp_path / "tiny.yaml"
    run.write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "llm", "spec": spec}],
                "parallel": {"pp": 2},
                "training": {"seq_length": 256, "micro_batches": 4},
                "device": {"name": "h100-80gb"},
            }
        )
    )
    real = ppb_io._write_aside
    calls = []

    def fail_second(path: Path, data: bytes) -> str:
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(path, data)

    monkeypatch.setattr(ppb_io, "_write_aside", fail_second)
    out = tmp_path / "out"
    code = cli_main.main(["plan", str(run), "-o", str(out), "--until", "layer_walk"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "Input/output error" in err
    assert len(calls) == 2 and not out.exists()  # run_config's table was written aside, then removed
    monkeypatch.setattr(ppb_io, "_write_aside", real)
    assert cli_main.main(["plan", str(run), "-o", str(out), "--until", "layer_walk"]) == 0
    assert sorted(p.parent.name for p in out.rglob("*.parquet")) == ["layer_walk", "run_config"]


def test_stale_temporaries_are_removed(tmp_path: Path) -> None:
    gone = 2**22 + 12345  # above Linux's default pid_max (4,194,304): no such process
    dead = tmp_path / "layer_walk" / f".run.parquet.{gone}.abcd1234.tmp"
    live = tmp_path / "layer_walk" / f".run.parquet.{os.getpid()}.efgh5678.tmp"
    old = tmp_path / f".other.parquet.{os.getpid()}.ijkl9012.tmp"
    kept = tmp_path / ".not-ours.tmp"
    for path in (dead, live, old, kept):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert sorted(remove_stale_temporaries(tmp_path, older_than_s=3600)) == sorted([dead, old])
    assert live.exists() and kept.exists() and not dead.exists() and not old.exists()


def test_ppb_plan_removes_what_a_killed_ppb_plan_left_in_its_stage_folders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    gone = 2**22 + 12345  # no such process
    dead = out / "run_config" / f".demo.parquet.{gone}@{host_tag()}.abcd1234.tmp"
    writing = out / "layer_walk" / f".demo.parquet.{os.getpid()}@{host_tag()}.efgh5678.tmp"
    not_ours = out / "notes" / f".n.txt.{gone}@{host_tag()}.ijkl9012.tmp"  # a folder of the user's
    for path in (dead, writing, not_ours):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    run = ROOT / "configs" / "llama3-8b.yaml"
    assert cli_main.main(["plan", str(run), "-o", str(out), "--until", "layer_walk"]) == 0
    assert not dead.exists() and writing.exists() and not_ours.exists()


def test_another_hosts_temporaries_are_judged_by_their_age_alone(tmp_path: Path) -> None:
    """A run in another container or machine writing to a shared folder: its pid means nothing here."""
    gone = 2**22 + 12345  # no such process here, whatever it is there
    here = host_tag()
    elsewhere = "other-host" if here != "other-host" else "another-host"
    writing = tmp_path / f".run.parquet.{gone}@{elsewhere}.abcd1234.tmp"
    forgotten = tmp_path / f".old.parquet.{gone}@{elsewhere}.efgh5678.tmp"
    killed_here = tmp_path / f".mine.parquet.{gone}@{here}.ijkl9012.tmp"
    for path in (writing, forgotten, killed_here):
        path.write_bytes(b"partial")
    os.utime(forgotten, (time.time() - 7200, time.time() - 7200))
    assert sorted(remove_stale_temporaries(tmp_path, older_than_s=3600)) == sorted([forgotten, killed_here])
    assert writing.exists()


def test_a_write_in_flight_names_its_process_and_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = ppb_io._write_aside

    def aside(path: Path, data: bytes) -> str:
        temporary = real(path, data)
        seen.append(Path(temporary).name)
        return temporary

    monkeypatch.setattr(ppb_io, "_write_aside", aside)
    atomic_write_bytes(tmp_path / "t.parquet", b"x")
    (name,) = seen
    assert name.startswith(f".t.parquet.{os.getpid()}@{host_tag()}.") and name.endswith(".tmp")
    match = ppb_io._TEMPORARY.match(name)  # what remove_stale_temporaries reads back
    assert match and (match["name"], int(match["pid"]), match["host"]) == ("t.parquet", os.getpid(), host_tag())


@pytest.mark.parametrize(
    ("name", "folder", "problem"),
    [
        ("d", False, "is a folder"),
        ("f", True, "is a file"),
        ("f/x.json", False, "is a file, not a folder"),
        ("f/x/y", True, "is a file, not a folder"),
    ],
)
def test_output_paths_are_checked(tmp_path: Path, name: str, folder: bool, problem: str) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(InputError, match=problem):
        check_output(tmp_path / name, folder=folder)
    assert sorted(tmp_path.rglob("*")) == before
    check_output(tmp_path / "new" / "deeper" / "x.json")  # folders to make: fine, and none made yet
    assert sorted(tmp_path.rglob("*")) == before


# --- what the Dagster glue calls ---------------------------------------------------------------

BAD_RUN_CONFIGS = {
    "models-empty": b"models:\n",
    "models-a-number": b"models: 5\n",
    "models-a-mapping": b"models: {a: 1}\ntiming: 7\n",
    "not-utf8": b"models: \xff\n",
    "alias-bomb": (
        "a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 9) + "]\n" for k in range(1, 9))
        + "models: *a8\n"
    ).encode(),
    "not-yaml": b"models: [\n",
    "a-list": b"- 1\n- 2\n",
    "names-a-folder": b"models: [{name: m, config: .}]\ntiming: {calibration: /dev/zero}\n",
}


@pytest.mark.parametrize("content", BAD_RUN_CONFIGS.values(), ids=BAD_RUN_CONFIGS)
def test_a_bad_run_config_hashes_and_fails_with_input_error_only(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    digest = config_hash(path)
    assert len(digest) == 64 and config_hash(path) == digest
    with pytest.raises(InputError):
        load_run_config(path)
    path.write_bytes(content + b"\n# changed\n")
    assert config_hash(path) != digest


def test_config_hash_of_what_cannot_be_read_is_an_input_error(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.yaml", tmp_path):
        with pytest.raises(InputError):
            config_hash(path)


def test_a_corrupt_stored_table_names_its_path(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": [1, 2]})
    path = chain.stage_path(tmp_path, "layer_walk", "run")
    path.parent.mkdir(parents=True)
    path.write_bytes(chain.to_parquet_bytes(frame)[:-20])  # cut short
    with pytest.raises(InputError) as err:
        chain.read_stage(tmp_path, "layer_walk", "run")
    assert err.value.source == str(path) and "Parquet" in err.value.problem
    with pytest.raises(InputError, match="file not found"):
        chain.read_stage(tmp_path, "layer_walk", "other")
