"""`ppb census`: writes a census a run config can name; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from small_models import SMALL_LLAMA, SMALL_TORCHTITAN_RUN

from ppb_core.census.record import read_census
from ppb_core.cli.census import lacks_bf16_arithmetic
from ppb_core.cli.main import main


def _config(tmp_path: Path, raw: dict | str, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


@pytest.mark.oracle
def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    """*code* in a fresh Python from the repository root (where a test hides torch from it)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_writes_a_census_the_reader_accepts(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

    config = _config(tmp_path, SMALL_LLAMA)
    out = tmp_path / "census" / "llama.json"
    assert main(["census", str(config), "--out", str(out), "--seq", "16", "32", "--no-tp-split", "-q"]) == 0
    census = read_census(out)
    assert [kind.name for kind in census.kinds] == ["dense"]
    assert census.attention == "sdpa" and census.dtype == "bf16" and census.micro_batch_size == 1
    assert census.shapes == ((1, 16), (1, 32))
    printed = capsys.readouterr().out
    assert str(out) in printed and "dense (layer 0)" in printed


@pytest.mark.parametrize(
    ("raw", "args", "message"),
    [
        (None, [], "file not found"),
        ("{", [], "not valid JSON"),
        (
            {"model_type": "gpt2", "vocab_size": 10, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2},
            [],
            "the census builds",
        ),
        ({**SMALL_LLAMA, "hidden_size": "x"}, [], "hidden_size"),
        (SMALL_LLAMA, ["--seq", "64"], "two sequence lengths"),
        (SMALL_LLAMA, ["--batch", "0"], "--batch: must be positive, got 0"),
        # the batch's line said "must be positive (seq ≥ 2)", of both flags at once
        (SMALL_LLAMA, ["--seq", "1", "64"], "--seq: each sequence length must be 2 or more, got 1"),
        (SMALL_LLAMA, ["--dropout", "1.5"], "--dropout"),
        (SMALL_LLAMA, ["--json"], "--json: prints a run config's torchtitan comparison"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, raw, args, message) -> None:
    config = tmp_path / "missing.json" if raw is None else _config(tmp_path, raw)
    out = tmp_path / "out.json"
    assert main(["census", str(config), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppb: error:") and message in err
    assert len(err.splitlines()) == 1
    assert not out.exists()


def test_a_config_json_needs_out(tmp_path, capsys) -> None:
    assert main(["census", str(_config(tmp_path, SMALL_LLAMA))]) == 2
    assert capsys.readouterr().err.strip() == "ppb: error: ppb census: --out: name the census file to write"


def test_without_torch_one_line_says_how_to_install(tmp_path) -> None:
    # A Python where torch cannot be imported (its module entry set to None).
    config = _config(tmp_path, SMALL_LLAMA)
    out = tmp_path / "out.json"
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "from ppb_core.cli.main import main\n"
        f"sys.exit(main(['census', {str(config)!r}, '--out', {str(out)!r}]))\n"
    )
    done = _run_python(code)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ppb: error: ppb census needs PyTorch and transformers: pip install 'ppb[torch]'"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "lacking"),
    [
        ("fpu sse2 avx avx2 fma", True),  # this machine's kind: AVX2 alone (docs/census.md: 77 s for one matmul)
        ("fpu avx2 avx512f avx512_bf16", False),  # AVX-512 BF16
        ("fpu avx2 avx512f amx_bf16 amx_tile", False),  # AMX
        ("fpu sse2", False),  # no AVX2: not the x86 CPU the rule knows, so no claim
    ],
)
def test_a_cpu_without_bf16_arithmetic_is_told_apart(tmp_path, flags: str, lacking: bool) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert lacks_bf16_arithmetic(cpuinfo) is lacking
    assert lacks_bf16_arithmetic(tmp_path / "absent") is False  # nothing said where /proc/cpuinfo is not


def _titan_run(tmp_path: Path, text: str = SMALL_TORCHTITAN_RUN) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        (
            SMALL_TORCHTITAN_RUN.replace("framework: torchtitan", "framework: megatron").replace(
                "{mode: selective, option: op}", "full"
            ),
            [],
            "framework: megatron: the run-config census measures torchtitan runs",
        ),
        (SMALL_TORCHTITAN_RUN, ["-o", "census.json"], "--out: a run config cannot name a torchtitan census"),
        (SMALL_TORCHTITAN_RUN, ["--seq", "32", "64"], "--seq: one sequence length"),
        (SMALL_TORCHTITAN_RUN, ["--attention", "eager"], "--attention: measures HuggingFace layers"),
        (
            SMALL_TORCHTITAN_RUN.replace(
                "intermediate_size: 352}",
                "intermediate_size: 352, num_experts: 4, experts_per_token: 2,\n           moe_intermediate_size: 64}",
            ),
            [],
            "models[0].num_experts: the torchtitan census builds torchtitan's dense Llama block",
        ),
    ],
)
def test_a_torchtitan_run_s_bad_input_is_one_line(tmp_path, capsys, text, args, message) -> None:
    assert main(["census", str(_titan_run(tmp_path, text)), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("ppb: error:") and message in captured.err
    assert not (tmp_path / "census.json").exists()


def test_a_torchtitan_run_without_torch_is_one_line(tmp_path) -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from ppb_core.cli.main import main\n"
        f"sys.exit(main(['census', {str(_titan_run(tmp_path))!r}]))\n"
    )
    done = _run_python(code)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ppb: error: ppb census needs PyTorch and transformers: pip install 'ppb[torch]'"
    ]
