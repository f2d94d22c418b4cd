"""The ranking written out states its plans: `ppb estimate` on a written run config prices the ranked plan.

The ranked figures come from the plan's cells (`run_iteration` and the memory model on the balancer's
[chunk][stage] options); the written config is read back and estimated through its own `parallel.layout`
and `training.recompute` (`walk` and the recompute rule), a separate path that must land on the same
seconds and the same stage peaks as `ppb check` gives for the plan.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config
from ppb_core.estimate.check import check_plan
from ppb_core.search.enumerate import Strategy
from ppb_core.search.outputs import (
    mindformers_settings,
    mindformers_text,
    torchtitan_said,
    write_ranking,
    write_run_configs,
)
from ppb_core.search.plan_config import plan_fields
from ppb_core.search.rank import Ranked, SearchResult, evaluate, search
from ppb_core.search.spec import load_search_spec

DATA = Path(__file__).parent / "data" / "search"


@pytest.fixture(scope="module")
def tight() -> SearchResult:
    """The tight search: its plans recompute the first layers fully and others nothing (hand-read below)."""
    return search(load_search_spec(DATA / "tiny-tight.yaml"), workers=1)


def _estimate(path: Path, capsys) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["estimate", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_written_config_estimates_to_its_ranked_figures(tight: SearchResult, tmp_path: Path, capsys) -> None:
    write_ranking(tight, tmp_path)
    used = set()
    for place, entry in enumerate(tight.ranked, start=1):
        path = tmp_path / f"{place:02d}-{entry.strategy.label(tight.spec)}.yaml"
        assert "`ppb estimate` on this file prices it" in path.read_text().splitlines()[1]
        estimated = _estimate(path, capsys)
        assert estimated["iteration"]["seconds"] == pytest.approx(entry.seconds, rel=1e-9)
        # the stage peaks the memory model gives the plan's own cells (what `ppb check` reports), the
        # busiest of which the ranking shows
        checked = check_plan(load_run_config(path), entry.plan["cells"])
        peaks = [(s["peak_bytes"] - s["reserved_bytes"]) / 2**20 for s in estimated["stages"]]
        assert peaks == pytest.approx([stage.peak_mb for stage in checked.stages], rel=1e-9)
        assert max(peaks) == pytest.approx(entry.peak_memory_mb, rel=1e-9)
        used |= {option for row in entry.plan["cells"] for cell in row for option in cell["options"]}
    assert used == {"NONE", "FULL"}  # the ranked plans of this search recompute some layers, not all


def test_the_first_layers_recomputed_are_megatrons_block_method(tight: SearchResult, tmp_path: Path) -> None:
    entry = tight.ranked[0]
    cells = [[cell["options"] for cell in row] for row in entry.plan["cells"]]
    # one stage, 6 layers: 4 fully recomputed (the first, as a cell places FULL first) and 2 not
    assert cells == [[{"NONE": 2, "FULL": 4}]]
    [path] = write_run_configs(tight, tmp_path, "tight-top", 1)
    raw = yaml.safe_load(path.read_text())
    assert raw["parallel"]["layout"] == "Et*6L"
    assert raw["training"]["recompute"] == {"granularity": "full", "method": "block", "num_layers": 4}
    assert [p.name for p in tmp_path.iterdir()] == ["tight-top01.yaml"]  # stated whole: no plan file beside


def _plan(*rows: list[dict[str, int]]) -> dict[str, Any]:
    return {"cells": [[{"options": cell, "layers": {}} for cell in row] for row in rows]}


def test_what_a_run_config_can_say_of_a_plan(tight: SearchResult) -> None:
    spec = tight.spec
    strategy = Strategy(1, 1, 2, 4, 1, "1f1b", 1, 1, False, "ring", 1, False, 1, 2, 0)
    # stage 0 recomputes its first layer fully, stage 1 none: no block N gives both (block 1 would
    # recompute stage 1's first too), so Megatron's one setting cannot say it
    mixed = _plan([{"FULL": 1, "NONE": 2}, {"NONE": 3}])
    fields = plan_fields(spec, strategy, mixed)
    assert fields.layout == "Et*3|t*3L" and fields.recompute is None and not fields.complete
    assert fields.unsaid == ["the recompute (FULL, NONE on different layers; a run config's is one run-wide setting)"]
    # every layer selectively recomputed: the strategy's own selective setting, which priced SLCT
    assert plan_fields(spec, strategy, _plan([{"SLCT": 3}, {"SLCT": 3}])).recompute == {"granularity": "selective"}
    assert plan_fields(spec, strategy, _plan([{"NONE": 3}, {"NONE": 3}])).recompute == {}
    assert plan_fields(spec, strategy, _plan([{"FULL": 3}, {"FULL": 3}])).recompute == {
        "granularity": "full",
        "method": "uniform",
        "num_layers": 1,
    }
    assert plan_fields(spec, strategy, _plan([{"FULL": 1, "NONE": 2}, {"FULL": 1, "NONE": 2}])).recompute == {
        "granularity": "full",
        "method": "block",
        "num_layers": 1,
    }
    assert plan_fields(spec, strategy, _plan([{"FULL": 1, "SLCT": 2}, {"SLCT": 3}])).recompute is None


def test_a_plan_beside_its_config_checks_to_the_ranked_figures(tight: SearchResult, tmp_path: Path, capsys) -> None:
    spec = tight.spec
    # tp1 cp1 pp2 dp4, ZeRO-0, 4 micro-batches of 1: 1F1B's first stage holds two micro-batches, the
    # second one, so the balancer recomputes on the first stage only (read off the plan below)
    strategy = Strategy(1, 1, 2, 4, 1, "1f1b", 1, 1, False, "ring", 0, False, 1, 4, 0)
    ranked = evaluate(spec, strategy)
    assert isinstance(ranked, Ranked)
    assert [[cell["options"] for cell in row] for row in ranked.plan["cells"]] == [
        [{"NONE": 1, "FULL": 3}, {"NONE": 2}]
    ]
    # written for the chain: the config keeps the strategy's setting, says so, and has the plan beside it
    result = replace(tight, ranked=[ranked])
    assert write_run_configs(result, tmp_path, "tight-top", 1) == [tmp_path / "tight-top01.yaml"]
    text = (tmp_path / "tight-top01.yaml").read_text()
    assert "# Not stated here: the recompute (FULL, NONE on different layers" in text
    # the balancer's JSON, the plan whole (until session 30 MindFormers' yaml sections, for a Megatron-LM search)
    assert "`ppb check tight-top01.yaml --plan tight-top01.plan.json`" in text
    raw = yaml.safe_load(text)
    assert raw["parallel"]["layout"] == "Et*4|ttL"
    assert raw["training"]["recompute"] == {"granularity": "selective"}
    capsys.readouterr()
    config, plan = tmp_path / "tight-top01.yaml", tmp_path / "tight-top01.plan.json"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tight-top01.plan.json", "tight-top01.yaml"]
    assert main(["check", str(config), "--plan", str(plan), "--no-optimum", "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["iteration_s"] == pytest.approx(ranked.seconds, rel=1e-9)
    assert max(stage["peak_mb"] for stage in checked["stages"]) == pytest.approx(ranked.peak_memory_mb, rel=1e-9)


@pytest.mark.parametrize(("framework", "own"), [("megatron", ".megatron.txt"), ("mindformers", ".mindformers.yaml")])
def test_a_search_writes_its_own_frameworks_file_alone(
    tight: SearchResult, framework: str, own: str, tmp_path: Path
) -> None:
    """`-o DIR` wrote Megatron-LM's flags and MindFormers' yaml for every search, a torchtitan one's too
    (session 29's report): each ranked strategy now gets its run config, its plan JSON and the file of the
    search's framework; the run config's comment points at the file that holds the plan whole."""
    # the strategy of the test above, whose plan (FULL and NONE mixed) a run config cannot state
    ranked = evaluate(tight.spec, Strategy(1, 1, 2, 4, 1, "1f1b", 1, 1, False, "ring", 0, False, 1, 4, 0))
    assert isinstance(ranked, Ranked)
    spec = tight.spec.model_copy(update={"framework": framework})
    assert not plan_fields(spec, ranked.strategy, ranked.plan).complete
    written = write_ranking(replace(tight, spec=spec, ranked=[ranked]), tmp_path)
    stem = f"01-{ranked.strategy.label(spec)}"
    assert sorted(path.name for path in written) == sorted(
        ["search.json", f"{stem}.yaml", f"{stem}.plan.json", f"{stem}{own}"]
    )
    whole = f"{stem}.mindformers.yaml" if framework == "mindformers" else f"{stem}.plan.json"
    assert f"`ppb check {stem}.yaml --plan {whole}`" in (tmp_path / f"{stem}.yaml").read_text()


def test_torchtitan_says_no_recompute_in_its_words() -> None:
    spec = load_search_spec(DATA / "tiny-titan.yaml")
    strategy = Strategy(1, 1, 1, 8, 1, "1f1b", 1, 1, False, "ring", 0, True, 1, 2, 0)
    assert plan_fields(spec, strategy, _plan([{"NONE": 6}])).recompute == {"mode": "none"}
    assert plan_fields(spec, strategy, _plan([{"SLCT": 6}])).recompute == {"mode": "selective", "option": "op"}
    assert plan_fields(spec, strategy, _plan([{"FULL": 6}])).recompute == {"mode": "full"}
    # torchtitan's layer-selective rule counts every N-th block of a rank: not Megatron's block method
    assert plan_fields(spec, strategy, _plan([{"FULL": 2, "NONE": 4}])).recompute is None


def _checked(config: Path, flags: Path, capsys) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["check", str(config), "--plan", str(flags), "--no-optimum", "--json", "-q"]) == 0  # every stage fits
    return json.loads(capsys.readouterr().out)


def test_the_megatron_flags_written_are_what_ppb_check_accepts(tight: SearchResult, tmp_path: Path, capsys) -> None:
    """What `NN-<name>.megatron.txt` holds is pasted as it stands: `ppb check` reads it back beside its run
    config and every stage fits. A plan Megatron-Core can say (block N here) checks to its ranked seconds; a
    plan it cannot (FULL on 3 of stage 0's 4 layers, none on stage 1's) writes the fastest plan it can say,
    never the plan's layout alone."""
    write_ranking(tight, tmp_path / "ranked")
    for place, entry in enumerate(tight.ranked, start=1):
        stem = tmp_path / "ranked" / f"{place:02d}-{entry.strategy.label(tight.spec)}"
        assert entry.plan["megatron"]["flags_of"] == "plan"
        checked = _checked(stem.with_suffix(".yaml"), stem.with_suffix(".megatron.txt"), capsys)
        assert checked["iteration_s"] == pytest.approx(entry.seconds, rel=1e-9)
    strategy = Strategy(1, 1, 2, 4, 1, "1f1b", 1, 1, False, "ring", 0, False, 1, 4, 0)
    mixed = evaluate(tight.spec, strategy)
    assert isinstance(mixed, Ranked) and mixed.plan["megatron"]["flags"] is None
    write_ranking(replace(tight, ranked=[mixed]), tmp_path / "mixed")
    stem = tmp_path / "mixed" / f"01-{strategy.label(tight.spec)}"
    text = stem.with_suffix(".megatron.txt").read_text()
    assert "--recompute-granularity full" in text and "not runnable as priced" in text
    layout_lines = [line for line in text.splitlines() if not line.startswith("#") and "layout" in line]
    assert len(layout_lines) == 1 and "--recompute-" in layout_lines[0]  # the layout never alone
    checked = _checked(stem.with_suffix(".yaml"), stem.with_suffix(".megatron.txt"), capsys)
    assert checked["iteration_s"] >= mixed.seconds  # Megatron's one setting is no faster than the ranked plan


def test_a_plan_with_the_mtp_layers_apart_is_written_as_megatrons_standalone_layout(tmp_path: Path, capsys) -> None:
    """tiny-mtp at PP 4: the balancer runs the MTP layer apart on rank 2 (`balance.mtp_apart`); the written
    run config's layout puts `m` there and `L` alone on rank 3, and `ppb estimate` on it prices the ranked
    iteration (walk's standalone MTP, another path than the balancer's cells)."""
    spec = load_search_spec(DATA / "tiny-mtp.yaml")
    strategy = Strategy(1, 1, 4, 2, 1, "1f1b", 1, 1, False, "ring", 1, False, 1, 16, 0)
    ranked = evaluate(spec, strategy)
    assert isinstance(ranked, Ranked) and ranked.mtp == "apart"
    fields = plan_fields(spec, strategy, ranked.plan)
    assert fields.layout is not None and fields.layout.endswith("m|L") and fields.complete
    [path] = write_run_configs(SearchResult(spec, [ranked]), tmp_path, "mtp-top", 1)
    assert "`ppb estimate` on this file prices it" in path.read_text()
    estimated = _estimate(path, capsys)
    assert estimated["iteration"]["seconds"] == pytest.approx(ranked.seconds, rel=1e-9)


# The rest of a torchtitan job TOML around the written lines: its llama3 debugmodel has 6 layers
# (torchtitan/models/llama3/__init__.py, flavor "debugmodel": n_layers 6), as tiny-titan's model does.
TITAN_REST = """[model]
name = "llama3"
flavor = "debugmodel"
[training]
local_batch_size = 4
seq_len = 4096
"""


def test_a_torchtitan_search_writes_job_toml_lines_that_import_to_the_plans_split(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = search(load_search_spec(DATA / "tiny-titan.yaml"), workers=1)
    files = write_ranking(result, tmp_path / "top")
    # torchtitan's own file alone beside the run config and the plan (until session 30 the Megatron-LM and
    # MindFormers files too)
    assert {path.name.split(".", 1)[1] for path in files if path.name != "search.json"} == {
        "yaml",
        "plan.json",
        "torchtitan.toml",
    }
    written = 0
    for place, entry in enumerate(result.ranked, start=1):
        stem = tmp_path / "top" / f"{place:02d}-{entry.strategy.label(result.spec)}"
        toml = stem.with_name(stem.name + ".torchtitan.toml")
        lines = toml.read_text().splitlines()
        s = entry.strategy
        # the degrees the search chose, which the job cannot know (torchtitan's names; FSDP2 shards over
        # dp_shard, replicate (ZeRO-0) over dp_replicate; tiny-titan has no experts): `ppb balance` reads them
        # from the run config, so the search says them (before session 27 a PP 1 strategy's lines were its
        # [activation_checkpoint] alone, no degree and no batch)
        assert lines[:5] == [
            "[parallelism]",
            f"data_parallel_replicate_degree = {1 if s.fsdp else s.dp}",
            f"data_parallel_shard_degree = {s.dp if s.fsdp else 1}",
            f"tensor_parallel_degree = {s.tp}",
            f"context_parallel_degree = {s.cp}",
        ]
        assert json.loads(stem.with_name(stem.name + ".plan.json").read_text())["torchtitan"]["lines"] == lines
        job = tmp_path / f"job{place}.toml"
        # the lines' [training] keys merged into the job's own [training], as their comment says
        text, _, training = "\n".join(lines).partition("[training]\n")
        assert "local_batch_size" in training
        job.write_text(TITAN_REST.replace("local_batch_size = 4\n", training + "\n") + text + "\n")
        out = tmp_path / f"imported{place}.yaml"
        assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(out)]) == 0
        raw = yaml.safe_load(out.read_text())
        # the strategy as ranked, read back by `ppb import torchtitan`: its sizes and the batch it was ranked at
        # (not the job's own local_batch_size 4), ZeRO-0 for replicate and FSDP2 (ZeRO-3) for shard
        assert (raw["parallel"]["dp"], raw["parallel"]["tp"], raw["parallel"]["pp"]) == (s.dp, s.tp, s.pp)
        assert raw["parallel"]["zero"] == (3 if s.fsdp else 0)
        batch = (raw["training"]["micro_batch_size"], raw["training"]["micro_batches"])
        assert batch == (s.micro_batch_size, s.micro_batches)
        if s.pp == 1:  # no split to place
            assert "module_fqns_per_model_part" not in toml.read_text()
            continue
        written += 1
        # the plan's split, model order chunk by chunk (torchtitan's "loop" style): E on the first, L on the last
        chunks, stages = len(entry.plan["cells"]), len(entry.plan["cells"][0])
        counts = [entry.plan["cells"][v][s]["options"] for v in range(chunks) for s in range(stages)]
        split = "|".join(
            ("E" if i == 0 else "") + "t" * sum(c.values()) + ("L" if i == len(counts) - 1 else "")
            for i, c in enumerate(counts)
        )
        assert raw["parallel"]["layout"] == split
        assert raw["training"]["recompute"] == {"mode": "none"}
    # every pipelined plan of the ranking gets its lines (tiny-titan's holds PP 2 × 2 chunks, ZeRO-0)
    assert written == sum(entry.strategy.pp > 1 for entry in result.ranked) >= 1
    capsys.readouterr()
    assert main(["search", str(DATA / "tiny-titan.yaml"), "-q"]) == 0
    printed = capsys.readouterr().out
    # the first ranked plan's lines, at PP 1 its [activation_checkpoint] alone
    said = torchtitan_said(result.spec, result.ranked[0])
    assert said is not None
    shown = "".join(f"  {line}\n" for line in said["lines"])
    assert f"#1 {result.ranked[0].strategy.label(result.spec)}:\ntorchtitan job TOML:\n{shown}" in printed
    # `--json` and search.json carry the same section in each plan, as `ppb balance`'s JSON does
    assert main(["search", str(DATA / "tiny-titan.yaml"), "-q", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["ranked"]
    stored = json.loads((tmp_path / "top" / "search.json").read_text())["ranked"]
    for place, entry in enumerate(result.ranked):
        said = shown[place]["plan"].get("torchtitan")
        assert stored[place]["plan"].get("torchtitan") == said
        assert said is not None and "torchtitan" not in entry.plan
        assert (said["module_fqns_per_model_part"] is None) == (entry.strategy.pp == 1)


def test_a_search_at_a_python_config_release_writes_lines_its_check_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # torchtitan from 9810191bb reads no job TOML (releases `torchtitan_config_registry`): each ranked strategy's
    # file is `.torchtitan.py`, assignments on the config function's Trainer.Config, its degrees after the head
    # comment and, at PP 1, the batch last in tokens (from 73aed7f6c): b · m · dp sequences of 4096
    text = (DATA / "tiny-titan.yaml").read_text()
    text = text.replace(
        "framework: torchtitan\n", 'framework: torchtitan\nframework_release: {torchtitan: "2026-08-21"}\n'
    )
    (tmp_path / "spec.yaml").write_text(text)
    result = search(load_search_spec(tmp_path / "spec.yaml"), workers=1)
    files = write_ranking(result, tmp_path / "top")
    assert {path.name.split(".", 1)[1] for path in files if path.name != "search.json"} == {
        "yaml",
        "plan.json",
        "torchtitan.py",
    }
    for place, entry in enumerate(result.ranked, start=1):
        stem = tmp_path / "top" / f"{place:02d}-{entry.strategy.label(result.spec)}"
        lines = stem.with_name(stem.name + ".torchtitan.py").read_text().splitlines()
        s = entry.strategy
        assert lines[1:5] == [
            f"config.parallelism.data_parallel_replicate_degree = {1 if s.fsdp else s.dp}",
            f"config.parallelism.data_parallel_shard_degree = {s.dp if s.fsdp else 1}",
            f"config.parallelism.tensor_parallel_degree = {s.tp}",
            f"config.parallelism.context_parallel_degree = {s.cp}",
        ]
        if s.pp == 1:
            tokens = s.micro_batch_size * s.micro_batches * s.dp * 4096
            assert lines[-1] == f"config.training.num_tokens_per_train_step = {tokens}"
        # the run config written beside it checks the lines as its plan
        plan = stem.with_name(stem.name + ".torchtitan.py")
        assert main(["check", str(stem.with_name(stem.name + ".yaml")), "--plan", str(plan), "--no-optimum"]) == 0
    capsys.readouterr()


def test_a_second_search_into_the_same_folder_leaves_only_its_own_ranking(tmp_path: Path) -> None:
    result = search(load_search_spec(DATA / "tiny-titan.yaml"), workers=1)
    assert len(result.ranked) >= 2
    folder = tmp_path / "top"
    first = set(write_ranking(result, folder))
    mine = folder / "notes.txt"  # a file of the user's own, which no search.json lists
    mine.write_text("kept\n")
    second = set(write_ranking(replace(result, ranked=result.ranked[:1]), folder))
    # the earlier search's places 2.. are gone; place 1 and search.json are the new search's
    assert {path for path in folder.iterdir() if path != mine} == second < first | {folder / "search.json"}
    assert mine.read_text() == "kept\n"
    assert len(json.loads((folder / "search.json").read_text())["ranked"]) == 1


@pytest.mark.parametrize(
    ("cp", "variant", "vpp", "algo", "pipeline"),
    [
        (2, "ulysses", 1, "ulysses_cp", None),
        (2, "ring", 2, "colossalai_cp", {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}),
        (1, "ring", 1, None, None),  # no context parallelism: MindFormers' default, nothing said
    ],
)
def test_a_mindformers_file_says_the_context_parallel_algorithm_and_the_interleave(
    cp: int, variant: str, vpp: int, algo: str | None, pipeline: dict | None
) -> None:
    """MindFormers' words for what the strategy runs (modules/transformer/transformer.py `ContextParallelAlgo`,
    fd4deebc: colossalai_cp, the default, or ulysses_cp; a plan of chunks needs MindSpore's pipeline_interleave,
    models/utils.py `LayerSetting`): a Ulysses strategy's file said no algorithm, so MindFormers ran its ring."""
    strategy = Strategy(2, cp, 2, 2, vpp, "interleaved" if vpp > 1 else "1f1b", 1, 1, True, variant, 1, False, 1, 4, 0)
    plan = {"offset": [0, 0], "recompute": [0, 0], "select_recompute": [0, 0], "select_comm_recompute": [0, 0]}
    settings = mindformers_settings(strategy, plan)
    assert settings["parallel_config"].get("context_parallel_algo") == algo
    assert settings["parallel"].get("pipeline_config") == pipeline
    assert settings["parallel"]["enable_parallel_optimizer"] is True  # ZeRO-1: MindFormers' parallel optimizer
    # the vocabulary-parallel tables ppb priced, against MindFormers' default vocab_emb_dp True
    assert settings["parallel_config"]["vocab_emb_dp"] is False


def test_a_mindformers_dualpipev_file_says_no_interleaved_1f1b() -> None:
    """MindSpore's pipeline_scheduler (a05ce588: 1f1b, gpipe, seqpipe, seqvpp, seqsmartvpp) has no DualPipeV and
    MindFormers' LayerSetting (fd4deebc) places chunk 1 in stage order: a DualPipeV strategy's file said
    `pipeline_scheduler: 1f1b` (interleaved), which runs another schedule than the one ranked, until session 34."""
    strategy = Strategy(2, 1, 2, 2, 2, "dualpipev", 1, 1, True, "ring", 1, False, 1, 4, 0)
    plan = {"offset": [[0, 0], [0, 0]], "recompute": 0, "select_recompute": 0, "select_comm_recompute": 0}
    assert "pipeline_config" not in mindformers_settings(strategy, plan)["parallel"]
    interleaved = replace(strategy, schedule="interleaved")
    assert mindformers_settings(interleaved, plan)["parallel"]["pipeline_config"]["pipeline_scheduler"] == "1f1b"
    # the file says why, in a comment MindFormers' yaml loader skips
    said = mindformers_text(None, SimpleNamespace(strategy=strategy, plan=plan))
    assert said.startswith("# MindFormers runs no DualPipeV") and yaml.safe_load(said)["parallel"] == {
        "enable_parallel_optimizer": True
    }
