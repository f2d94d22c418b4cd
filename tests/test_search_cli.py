"""`ppb search` as a user runs it: the ranking as JSON with the contract's keys, `-o DIR` written, bad
input refused in one line with exit 2 and nothing written."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ppb_core.cli.main import main
from ppb_core.cli.search import (
    _Progress,
    behind,
    dualpipev_line,
    duration,
    limits_line,
    proven_line,
    stage_peaks_line,
)
from ppb_core.config.run import load_run_config
from ppb_core.search.enumerate import Strategy
from ppb_core.search.rank import Ranked, search
from ppb_core.search.spec import SearchOptions, load_search_spec

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
    # before the first balance, the balances ahead: the top's 2 places, at most every strategy screened
    most = data["counts"]["screened"]
    ahead = f"2 balances to fill the top 2, then more until the bounds prune the rest (at most {most})"
    assert any(ahead in line for line in lines)
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
    assert line.endswith("bounded at 2.838 s or more: none can be more than 1.80% faster than the first)")


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
    # the work's limits, named in one line after the counts (tiny-dense's top 5, the other defaults)
    assert out.rstrip().splitlines()[-1].startswith("limits (search.*): top 5, balance_work 0.02")


def _ranked(breakdown: dict[str, float]) -> Ranked:
    """A ranked entry whose seconds are its breakdown's sum, as `run_iteration` makes them."""
    strategy = Strategy(1, 1, 2, 4, 1, "1f1b", 1, 1, False, "ring", 1, False, 1, 8, 0)
    seconds = sum(breakdown.values())
    return Ranked(strategy, seconds, 1.0, 0.5, 0.5, breakdown, 1000.0, 2000.0, None, {}, seconds)


def test_each_strategy_after_the_first_says_where_it_loses() -> None:
    """The table's `behind #1 (where)`: the growth over the first and the breakdown parts grown most, in
    milliseconds under a second. By hand: compute 2.000 → 2.010 (+0.010), bubble 0.300 → 0.420 (+0.120),
    DP comm 0.050 → 0.080 (+0.030), optimizer 0.040 → 0.040 (0), p2p 0.020 → 0.0204 (+0.0004, under a
    hundredth of the growth: left out); total 2.410 → 2.5704, +0.1604 s = +160 ms; the two grown most are the
    bubble, then DP comm."""
    first = _ranked({"compute": 2.0, "bubble": 0.3, "dp_communication": 0.05, "optimizer": 0.04, "p2p": 0.02})
    second = _ranked({"compute": 2.01, "bubble": 0.42, "dp_communication": 0.08, "optimizer": 0.04, "p2p": 0.0204})
    assert behind(first, second) == "+160 ms: bubble +120, DP comm +30.0"
    # grown by 0.4 ms in p2p alone: said, and where ("+0.000 s" until session 34)
    third = _ranked({"compute": 2.0, "bubble": 0.3, "dp_communication": 0.05, "optimizer": 0.04, "p2p": 0.0204})
    assert behind(first, third) == "+0.400 ms: p2p +0.400"
    # slower for one part although another shrank: FSDP comm +0.200 (0 → 0.2), compute −0.100 not named
    fourth = _ranked(
        {"compute": 1.9, "bubble": 0.3, "dp_communication": 0.05, "optimizer": 0.04, "p2p": 0.02,
         "fsdp_communication": 0.2}
    )  # fmt: skip
    assert behind(first, fourth) == "+100 ms: FSDP comm +200"
    # a second or more: in seconds (bubble 0.3 → 1.8, +1.500 s)
    fifth = _ranked({"compute": 2.0, "bubble": 1.8, "dp_communication": 0.05, "optimizer": 0.04, "p2p": 0.02})
    assert behind(first, fifth) == "+1.500 s: bubble +1.500"
    # the same seconds by another split of the same terms: a tie, not "+0.000 s"
    same = _ranked({"compute": 2.0, "bubble": 0.3, "dp_communication": 0.04, "optimizer": 0.05, "p2p": 0.02})
    assert behind(first, same) == "tie"


def test_screening_a_large_grid_shows_each_part_screened(capsys) -> None:
    """Piped, screening said nothing between its first and last lines: DeepSeek-V3 on 2048 devices screened
    13,104 strategies for minutes in silence. Each part of the grid screened is a line now; the last part is
    the "screened N; balancing" line. Events as `search_points` sends them for 10 points in two parts, 4
    then 6, of which 3 and then 5 more are valid (2 refused by the validator)."""
    progress = _Progress(load_search_spec(DATA / "tiny-dense.yaml"))
    progress("enumerated", {"enumerated": 10})
    progress("screened", {"screened": 3, "examined": 4, "total": 10})
    progress("screened", {"screened": 8, "examined": 10, "total": 10})
    progress("screening done", {"screened": 8, "total": 10, "seconds": 1.0, "to_fill": 5, "most_balances": 8})
    lines = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        "screening 10 strategies",
        "screened 4 of 10 (3 valid)",
        # the last line in the same terms (session 33: "screened 8" read as fewer points than the 10 examined)
        "screened 10 (8 valid); balancing the most promising: 5 balances to fill the top 5, then more until the bounds "
        "prune the rest (at most 8)",
    ]


def test_a_long_balancing_says_how_many_balances_and_how_long_before_and_as_it_goes(capsys, monkeypatch) -> None:
    """`top: 1000` on a grid of thousands balanced for hours with no word of it (session 27). Screening's last line
    now says the balances ahead; each wave's line, how many are left to fill the top and, at the pace so far,
    how long. Clock faked: screening ends at 10 s, 4 balances done at 70 s, so 15 s a balance; 996 more
    take 996 · 15 = 14,940 s = 4.15 h ("4.2 h")."""
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    spec = spec.model_copy(update={"search": spec.search.model_copy(update={"top": 1000})})
    clock = iter([0.0, 10.0, 10.0, 70.0, 70.0])
    monkeypatch.setattr("ppb_core.cli.search.time.perf_counter", lambda: next(clock))
    progress = _Progress(spec)
    progress("screening done", {"screened": 9216, "seconds": 10.0, "to_fill": 1000, "most_balances": 9216})
    progress("balanced", {"balanced": 4, "relaxed": 40, "waiting": 9000, "best": None, "to_fill": 996})
    lines = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        "screened 9,216; balancing the most promising: 1,000 balances to fill the top 1,000, then more until the "
        "bounds prune the rest (at most 9,216)",
        "balanced 4 (bounded 40, waiting 9,000); 996 more to fill the top 1,000, about 4.2 h more",
    ]
    assert [duration(s) for s in (40.4, 89, 90, 5399, 5400)] == ["40 s", "89 s", "2 min", "90 min", "1.5 h"]


def _filled_top_spec(budget_s: float | None = None):
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    return spec.model_copy(update={"search": spec.search.model_copy(update={"top": 20, "time_budget_s": budget_s})})


def test_after_the_top_fills_the_progress_still_says_how_long_at_most(capsys, monkeypatch) -> None:
    """User QA: once the top 20 filled, "balanced N (bounded M, waiting K)" went on for 20 minutes with no end said.
    Now the line says the balances the bounds still leave (`contenders`, an upper bound) at the pace so far.
    Clock faked: screening ends at 10 s, 20 balances done at 310 s, so 15 s a balance; at most 80 more take
    80 · 15 = 1,200 s = 20 min. With a time budget of 600 s the search stops at 600 s: 600 − 310 = 290 s ("5 min")."""
    for budget_s, said in ((None, "20 min"), (600.0, "5 min")):
        clock = iter([0.0, 10.0, 10.0, 310.0, 310.0])
        monkeypatch.setattr("ppb_core.cli.search.time.perf_counter", lambda clock=clock: next(clock))
        progress = _Progress(_filled_top_spec(budget_s))
        progress("screening done", {"screened": 300, "seconds": 10.0, "to_fill": 20, "most_balances": 300})
        figures = {"balanced": 20, "relaxed": 60, "waiting": 200, "best": None, "to_fill": 0, "contenders": 80}
        progress("balanced", figures)
        last = capsys.readouterr().err.splitlines()[-1].split("] ", 1)[1]
        assert last == (
            "balanced 20 (bounded 60, waiting 200); top 20 filled, at most 80 more to balance until the bounds "
            f"prune the rest, at most about {said} more"
        )


def test_the_live_bar_shows_time_elapsed_and_left(monkeypatch) -> None:
    """On a terminal the bar's columns hold the time elapsed and left: left is the search's own estimate while
    balancing (the figures above: 80 balances at 15 s, 20 min; the bar's end the most balances, 20 + 80), and
    rich's from the speed while screening, "-" before it has one."""
    clock = iter([0.0, 10.0, 310.0])
    monkeypatch.setattr("ppb_core.cli.search.time.perf_counter", lambda: next(clock))
    progress = _Progress(_filled_top_spec())
    progress.live = True  # as on a terminal, the bar not started (no screen drawn)
    columns = [type(column).__name__ for column in progress.progress.columns]
    assert "TimeElapsedColumn" in columns and "_LeftColumn" in columns
    progress("enumerated", {"enumerated": 300})
    progress("screening done", {"screened": 300, "seconds": 10.0, "to_fill": 20, "most_balances": 300})
    progress("balanced", {"balanced": 20, "relaxed": 60, "waiting": 200, "best": None, "contenders": 80})
    left = progress.progress.columns[-1]
    screening, balancing = progress.progress.tasks
    assert left.render(screening).plain == "- left"
    assert balancing.total == 100 and balancing.completed == 20
    assert left.render(balancing).plain == "~20 min left"


def test_the_balances_ahead_end_at_none_when_the_bounds_end_the_search() -> None:
    """Each wave's `contenders` is at most what waits, and the last wave's is 0 when the search ends by its
    bounds (every strategy left is beaten: none unexamined), so the estimate ends where the search does."""
    events: list[dict] = []
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    result = search(spec, 1, lambda event, figures: events.append(figures) if event == "balanced" else None)
    assert events and all(0 <= figures["contenders"] <= figures["waiting"] for figures in events)
    assert result.counts["unexamined"] == 0 and events[-1]["contenders"] == 0


def test_the_limits_of_the_work_are_named_in_one_line() -> None:
    """Defaults as docs/search.md lists them (top 20, balance_work 0.02, no budget, waves of 4, no clock);
    then a spec's own."""
    assert limits_line(SearchOptions()) == (
        "limits (search.*): top 20, balance_work 0.02 of the balancer's work limits each, balance_budget none, "
        "wave 4; no wall clock"
    )
    said = limits_line(SearchOptions(top=5, balance_budget=1200, time_budget_s=600, evaluation_timeout_s=30.5))
    assert said == (
        "limits (search.*): top 5, balance_work 0.02 of the balancer's work limits each, balance_budget 1,200, "
        "wave 4; wall clock: evaluation_timeout_s 30.5, time_budget_s 600"
    )


def test_the_table_says_how_to_launch_the_first(tmp_path: Path, capsys) -> None:
    """A Megatron search printed no flags (only `-o DIR` wrote them; a torchtitan search printed its TOML): the
    first's Megatron-LM flags follow the table now, as its `01-<name>.megatron.txt` holds them."""
    out = tmp_path / "top"
    assert main(["search", str(DATA / "tiny-dense.yaml"), "-q", "--top", "1", "--workers", "1", "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    (written,) = out.glob("01-*.megatron.txt")
    name = written.name.removeprefix("01-").removesuffix(".megatron.txt")
    start = printed.index(f"#1 {name} as Megatron-LM flags:")
    flags = printed[start + 1 :]
    assert "\n".join(flags) + "\n" == written.read_text()
    # the sizes its name says (`tp2sp-cp1-pp1-dp4-...`: tp 2), and tiny-dense's batch of 24 sequences of 4096
    tp = int(name.split("-")[0].removeprefix("tp").removesuffix("sp"))
    assert f"--tensor-model-parallel-size {tp} \\" in flags
    assert "--global-batch-size 24 \\" in flags and any(line.startswith("--seq-length 4096") for line in flags)
    # search.json keeps each stage's peak; the busiest is the table's peak, one a pipeline stage
    (first,) = json.loads((out / "search.json").read_text())["ranked"]
    stages = first["stage_peak_memory_mb"]
    assert len(stages) == first["parallel"]["pp"] and max(stages) == first["peak_memory_mb"]


def test_a_pipelined_firsts_peak_is_said_stage_by_stage() -> None:
    """By hand: 68,000 MB / 1,024 = 66.41 GiB, 61,440 MB = 60.0 GiB; 77,559 MB a stage may use = 75.74 GiB."""
    entry = _ranked({"compute": 1.0})
    entry = Ranked(**{**entry.__dict__, "memory_mb": 77559.0, "stage_peaks_mb": (68000.0, 61440.0)})
    assert stage_peaks_line(entry) == "peak GiB by pipeline stage 66.4 | 60.0 (of 75.7 GiB a stage may use)"


def test_a_ranked_dualpipev_strategy_under_megatron_is_said_not_megatrons() -> None:
    """searches/deepseek-v3-2048.yaml lists dualpipev under framework megatron and ranks DualPipeV first
    (tp2sp-cp1-pp8v2d-dp64-ep32-z1-b1m240-r0 on 1024 H100s); Megatron-LM runs no DualPipeV. Said once
    under the table; nothing when none is ranked or the framework is torchtitan (torch's ScheduleDualPipeV)."""
    spec = load_search_spec(DATA / "tiny-dense.yaml")
    dualpipe = _ranked({"compute": 1.0})
    dualpipe = Ranked(**{**dualpipe.__dict__, "strategy": replace(dualpipe.strategy, vpp=2, schedule="dualpipev")})
    assert dualpipev_line(spec, [_ranked({"compute": 1.0})]) is None
    assert dualpipev_line(spec, [dualpipe]).startswith("DualPipeV (`v2d` in a name): DeepSeek's schedule")
    titan = spec.model_copy(update={"framework": "torchtitan"})
    assert dualpipev_line(titan, [dualpipe]) is None
