"""Why a solve ended is said in one vocabulary (`balance.stopped`): the progress's last line and the
commands' summaries say the same words (until session 34 the progress said "stopped at its work limits (the
same on every run)" where `ppb balance` said "(the same plan on every run)")."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppb_core.balance.stopped import STOPPED, ended_words, stopped_words
from ppb_core.cli import console
from ppb_core.cli.main import main
from ppb_core.units import percent_words

DATA = Path(__file__).parent / "data"
CORE = Path(__file__).parent.parent / "ppb_core"


def test_the_words_live_in_one_module() -> None:
    holders = [path for path in CORE.rglob("*.py") if "STOPPED = {" in path.read_text()]
    assert holders == [CORE / "balance" / "stopped.py"]


def test_a_time_limit_given_is_named_and_a_proof_cut_in_its_tie_break_stays_proven() -> None:
    said = stopped_words("time_limit", "time_limit", 60.0)
    assert said == "stopped by the time limit of 60 s: the best plan found so far (another run may differ)"
    assert stopped_words("time_limit", "optimal", 60.0).startswith("proven optimal;")
    assert stopped_words("work_limit", "time_limit") == STOPPED["work_limit"]
    assert stopped_words("cutoff") == "proven no faster than a setting before it"


def test_the_progress_and_the_summary_say_the_same_words_and_gap(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console, "PIPED_EVERY_S", 0.0)  # every step, for the test
    monkeypatch.setenv("COLUMNS", "400")
    # a hundred-thousandth of the work limits stops the demo's search unproven (gap 1.33%), the same on every run
    code = main(["balance", str(DATA / "demo.json"), "-s", "4", "-mb", "8", "-mem", "150000", "--work", "0.00001"])
    captured = capsys.readouterr()
    assert code == 0
    done = captured.err.splitlines()[-1]
    words = done.split(" — ", 1)[1]
    assert words == STOPPED["work_limit"]
    status = next(line for line in captured.out.splitlines() if line.startswith("status "))
    assert status.endswith(": " + words)
    # the gap (73980 − 72997.2) / 73980 = 1.33%, in the same words on both (the status line said 0.0133)
    assert "gap 1.33% — " in done and "  gap 1.33%  " in status


def test_a_gap_reads_as_a_percentage_everywhere() -> None:
    assert percent_words(0.0335) == "3.35%"
    assert percent_words(0.0) == "0.00%"
    assert percent_words(3e-7) == "<0.01%"  # open, though it rounds to nothing (GAP_TOLERANCE is 1e-6)
    assert ended_words({"stopped_by": "optimal", "status": "optimal", "gap": 0.0}) == "proven optimal"
    said = ended_words({"stopped_by": "work_limit", "status": "time_limit", "gap": 0.0335})
    assert said == "stopped at its work limits (the same plan on every run), gap 3.35%"
