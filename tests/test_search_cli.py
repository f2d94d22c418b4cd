"""`ppb search` as a user runs it: the ranking as JSON with the contract's keys, `-o DIR` written, bad
input refused in one line with exit 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppb_core.cli.main import main
from ppb_core.cli.search import proven_line
from ppb_core.config.run import load_run_config

DATA = Path(__file__).parent / "data" / "search"


def test_json_and_the_files_of_a_search(tmp_path: Path, capsys) -> None:
    out = tmp_path / "top"
    code = main(["search", str(DATA / "tiny-dense.yaml"), "--json", "-o", str(out), "--top", "2", "--workers", "1"])
    assert code == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    # piped (no terminal), the progress is plain lines on stderr: screening, then each wave balanced
    lines = captured.err.splitlines()
    assert lines[0].endswith(f"screening {data['counts']['enumerated']:,} strategies")
    # the first wave balances the spec's search.wave strategies (4 by default), whatever the workers
    assert any("balanced 4 " in line and ", best " in line for line in lines)
    assert set(data) == {"ranked", "rejected", "counts"}
    assert set(data["counts"]) == {"enumerated", "valid", "screened", "balanced"}
    assert len(data["ranked"]) == 2
    first, second = data["ranked"]
    assert first["iteration_seconds"] <= second["iteration_seconds"]
    # every strategy enumerated is either ranked, balanced or rejected for a reason
    assert data["counts"]["enumerated"] >= data["counts"]["valid"] >= data["counts"]["balanced"] >= 2
    assert sum(data["rejected"].values()) == data["counts"]["enumerated"] - 2
    configs = sorted(out.glob("0?-*.yaml"))
    configs = [path for path in configs if not path.name.endswith(".mindformers.yaml")]
    assert len(configs) == 2
    run = load_run_config(configs[0])
    assert (
        run.parallel.tp == first["parallel"]["tp"] and run.training.micro_batches == first["training"]["micro_batches"]
    )
    assert json.loads((out / "search.json").read_text())["ranked"][0]["plan"] == first["plan"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--top", "0"], "--top: must be a positive integer"),
        (["--top", "1001"], "--top: 1,001 is over ppb's limit of 1,000 strategies"),
        (["--workers", "0"], "--workers: must be a positive integer"),
    ],
)
def test_bad_flags_are_one_line(tmp_path: Path, capsys, argv: list[str], words: str) -> None:
    assert main(["search", str(DATA / "tiny-dense.yaml"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppb: error: ") and words in err and "\n" not in err


def test_an_output_folder_that_is_a_file_is_refused_before_any_work(tmp_path: Path, capsys) -> None:
    taken = tmp_path / "taken"
    taken.write_text("mine")
    assert main(["search", str(DATA / "tiny-dense.yaml"), "-o", str(taken)]) == 2
    assert "is a file, not an output folder" in capsys.readouterr().err
    assert taken.read_text() == "mine" and sorted(tmp_path.iterdir()) == [taken]


def test_quiet_searches_without_progress(capsys) -> None:
    """`-q`, as `ppb balance`/`check`/`plan` take it: nothing on stderr, the same JSON on stdout."""
    argv = ["search", str(DATA / "tiny-dense.yaml"), "--json", "--top", "2", "--workers", "1"]
    assert main([*argv, "-q"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    assert main(argv) == 0
    shown = capsys.readouterr()
    assert shown.err.splitlines()[-1].endswith("] done")  # the wall clock is said on stderr, not in the JSON
    assert shown.out == quiet.out  # byte for byte


def test_the_proven_places_read_right_at_none_and_one() -> None:
    """A budgeted ranking that proves no place said "places 1 to 0 are proven" (ppb search on
    searches/deepseek-v3-2048.yaml with top 3, balance_budget 3)."""
    assert proven_line(0, 17.7041, 0.093).startswith("no place is proven; every place is the fastest found")
    assert proven_line(1, 2.0, None).startswith("place 1 is proven; past it, the fastest found")
    line = proven_line(3, 2.8381, 0.018)
    assert line.startswith("places 1 to 3 are proven; past them,")
    assert line.endswith("bounded at 2.838 s or more: none can be more than 1.8 % faster than the first)")


def test_a_search_that_ranks_nothing_says_so_without_an_empty_table(tmp_path: Path, capsys) -> None:
    # tiny-dense on devices of 2,100 MB with 2,000 reserved: no stage holds its ends, so every strategy is
    # counted under its memory reason; the table of "the 0 fastest strategies" was printed empty before
    text = (DATA / "tiny-dense.yaml").read_text().replace("memory_mb: 9000", "memory_mb: 2100")
    spec = tmp_path / "tight.yaml"
    spec.write_text(text)
    assert main(["search", str(spec), "-q", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "no strategy is ranked: each one of the grid is counted below by its reason" in out
    assert "the 0 fastest" not in out and "memory: no plan fits" in out
