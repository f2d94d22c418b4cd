"""The chain without Dagster: stage order, storage layout and bytes, code versions, `ppb plan`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from ppb_core import chain
from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config
from ppb_core.estimate.run import estimate
from ppb_core.memory import run_in_flight_counts
from ppb_core.memory.model import run_workspace_bytes
from ppb_core.model.walk import walk
from ppb_core.payload.profiling import profile_run
from ppb_core.payload.run import describe_run
from ppb_core.payload.sapp import read_layers_description
from ppb_core.tables.estimate import estimate_to_frame, times_frame
from ppb_core.tables.payload import descriptions_from_frame, descriptions_to_frame, profiles_from_frame
from ppb_core.tables.run import run_to_frame
from ppb_core.tables.schema import Summarized
from ppb_core.tables.walk import walk_to_frame
from ppb_core.timing.pricer import TimeModel
from ppb_core.units import MB

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def test_stages_read_only_earlier_stages() -> None:
    seen: set[str] = set()
    for step in chain.STAGES:
        assert set(step.inputs) <= seen, f"{step.name} reads a later stage"
        assert step.description, f"{step.name} has no description"
        seen.add(step.name)
    assert chain.STAGES[0].name == "run_config" and not chain.STAGES[0].inputs


def test_chain_tables_equal_the_core_called_directly() -> None:
    path = CONFIGS / "llama3-8b.yaml"
    tables = chain.run_chain(path)
    assert list(tables) == [step.name for step in chain.STAGES]
    run = load_run_config(path)
    expected_run = run_to_frame(run.model_copy(update={"source": str(path.resolve())}))
    pd.testing.assert_frame_equal(tables["run_config"], expected_run)
    expected_walk = walk_to_frame(walk(run))
    pd.testing.assert_frame_equal(tables["layer_walk"], expected_walk)
    # Llama-3-8B: 32 body layers + HEAD + TAIL.
    assert len(tables["layer_walk"]) == 34


def test_until_stops_after_the_named_stage() -> None:
    assert list(chain.run_chain(CONFIGS / "qwen2.5-7b.yaml", until="run_config")) == ["run_config"]


def test_parquet_bytes_are_deterministic_and_round_trip() -> None:
    frame = chain.run_chain(CONFIGS / "qwen2.5-7b.yaml", until="layer_walk")["layer_walk"]
    data = chain.to_parquet_bytes(frame)
    assert chain.to_parquet_bytes(frame) == data
    back = chain.from_parquet_bytes(data)
    pd.testing.assert_frame_equal(back, frame)
    assert chain.to_parquet_bytes(back) == data


def test_a_summary_is_parquet_metadata_any_reader_sees_and_columns_carry_their_words(tmp_path: Path) -> None:

    summarized = Summarized(pd.DataFrame({"stage": [0, 1]}), {"status": "optimal", "objective": 1.5})
    plan_schema = chain.stage("pipeline_plan").schema
    path = tmp_path / "plan.parquet"
    path.write_bytes(chain.to_parquet_bytes(summarized, plan_schema))
    schema = pq.read_schema(path)
    assert json.loads(schema.metadata[b"ppb.summary"]) == {"status": "optimal", "objective": 1.5}
    assert schema.metadata[b"ppb.table"] == b"pipeline_plan"
    assert schema.field("stage").metadata[b"description"] == b"the pipeline stage, from 0"
    back = chain.from_parquet_bytes(path.read_bytes())
    assert isinstance(back, Summarized) and back.summary == summarized.summary
    pd.testing.assert_frame_equal(back.frame, summarized.frame)
    assert pd.read_parquet(path).attrs == {}


def test_stage_path_layout_keeps_dotted_keys() -> None:
    assert chain.stage_path("s", "layer_walk", "qwen2.5-7b") == Path("s/layer_walk/qwen2.5-7b.parquet")
    assert chain.partition_key("configs/qwen2.5-7b.yaml") == "qwen2.5-7b"


def test_code_version_covers_the_core_modules_a_stage_rests_on() -> None:
    closure = chain.core_closure({"ppb_core.model.walk"})
    # model imports config and kinds; config imports hf, spec, devices, errors, switches.
    walk_modules = (
        "ppb_core.model.walk",
        "ppb_core.config.run",
        "ppb_core.model.kinds",
        "ppb_core.config.hf",
        "ppb_core.config.spec",
    )
    for module in walk_modules:
        assert module in closure
    assert "ppb_core.chain" not in closure
    versions = {step.name: chain.code_version(step.name) for step in chain.STAGES}
    assert all(len(v) == 16 for v in versions.values())
    assert len(set(versions.values())) == len(versions)
    assert chain.code_version("layer_walk") == chain.code_version("layer_walk")


def test_walk_problems_finds_a_missing_layer_and_an_empty_cell() -> None:
    tables = chain.run_chain(CONFIGS / "llama3-8b.yaml")
    assert chain.walk_problems(tables["run_config"], tables["layer_walk"]) == []
    frame = tables["layer_walk"]
    last_stage = frame[(frame["node"] == "BODY") & (frame["stage"] == 3)].index
    broken = frame.drop(index=last_stage)
    problems = chain.walk_problems(tables["run_config"], broken)
    # 32 layers over 4 stages: stage 3 held 8 of them.
    assert problems == ["llm: 24 BODY layers, expected 32", "chunk 0, stage 3 holds no body layer"]


def test_ppb_plan_writes_every_table_as_the_chain_computes_it(tmp_path: Path, capsys) -> None:
    path = CONFIGS / "llama3-8b.yaml"
    assert main(["plan", str(path), "-o", str(tmp_path)]) == 0
    tables = chain.run_chain(path)
    for name, frame in tables.items():
        stored = tmp_path / name / "llama3-8b.parquet"
        assert stored.read_bytes() == chain.stage_files(name, frame)[chain.PARQUET]
        for suffix, data in chain.stage_artifacts(name, frame).items():
            assert (tmp_path / name / f"llama3-8b{suffix}").read_bytes() == data
    out = capsys.readouterr().out
    assert "layer_walk" in out
    # it ends as `python -m pipelines` does: a line a stage (GiB of 2**30 bytes: MB / 1024), the plan, the report
    report = tables["plan_report"].frame
    # the stage's peak, its largest moment; where the backward sets it, the three parts add up to it
    parts = report["parameters_mb"] + report["activations_mb"] + report["buffers_mb"]
    at_backward = report["moment"] == "backward"
    assert (report["peak_mb"][at_backward] - parts[at_backward]).abs().max() < 1e-6
    used = report["peak_mb"] / 1024
    for stage, gib, device in zip(report["stage"], used, report["device_mb"] / 1024, strict=True):
        assert f"  stage {stage}: fits, {gib:,.1f} of {device:,.1f} GiB\n" in out
    assert "  plan: " in out and " faster than the best uniform split" in out
    assert f"  report: {tmp_path / 'plan_report' / 'llama3-8b.md'}\n" in out
    # the report's words (session 28): the balancer's charge is not called a peak, and the note under the plan's
    # own runnable flags is advice, not "Megatron-LM cannot say the plan"
    text = (tmp_path / "plan_report" / "llama3-8b.md").read_text()
    assert "- **memory the balancer charged (fullest stage)**: " in text and "peak memory (balancer)" not in text
    assert "- **with these flags**: the plan recomputes nothing" in text and "cannot say the plan" not in text


def test_ppb_plan_on_bad_input_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(CONFIGS, configs)
    bad = configs / "llama3-8b.yaml"
    bad.write_text(bad.read_text().replace("micro_batch_size: 1", "micro_batch_size: 0"))
    out = tmp_path / "out"
    assert main(["plan", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ppb: error: ") and "training.micro_batch_size" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_plan_summary_without_a_plan_names_what_to_raise() -> None:
    # `ppb plan` and the pipeline_plan asset refuse it as bad input (exit 2), as `ppb balance` does
    time_cut = {"status": "time_limit", "stopped_by": "time_limit", "message": "no plan found in 0.2 s"}
    assert chain.no_plan_words(time_cut).endswith("raise it (ppb plan -t, the asset's time_limit_s)")
    work_cut = {**time_cut, "stopped_by": "work_limit"}
    assert chain.no_plan_words(work_cut).endswith("raise them (ppb plan --work, the asset's work)")
    proven = {"status": "infeasible", "message": "no plan fits in 4 MB per device"}
    assert chain.no_plan_words(proven) == "no plan fits in 4 MB per device"


@pytest.fixture(scope="module", params=sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def shipped(request: pytest.FixtureRequest) -> tuple[str, dict[str, pd.DataFrame]]:
    """Every shipped config up to the balancer (DeepSeek-V3's plan takes the balancer's whole time limit)."""
    return request.param, chain.run_chain(CONFIGS / f"{request.param}.yaml", until="scaled_descriptions")


PLANNED = ("llama3-8b", "qwen2.5-7b")


@pytest.fixture(scope="module", params=PLANNED)
def planned(request: pytest.FixtureRequest) -> tuple[str, dict[str, pd.DataFrame]]:
    return request.param, chain.run_chain(CONFIGS / f"{request.param}.yaml")


def test_the_plan_is_what_ppb_balance_prints(planned, capsys) -> None:
    key, tables = planned
    assert main(["balance", str(CONFIGS / f"{key}.yaml"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    # the whole of it, the solver's notes too: the JSON holds no wall-clock time (`balance.result.report`)
    assert "seconds" not in printed
    assert tables["pipeline_plan"].summary == printed
    assert (
        chain.plan_json(tables["pipeline_plan"])[".json"]
        == (json.dumps(printed, indent=2, sort_keys=True) + "\n").encode()
    )
    assert printed["status"] == "optimal"
    plan = tables["pipeline_plan"].frame
    assert plan["memory_mb"].tolist() == printed["stage_memory_mb"]
    assert plan["layers"].sum() == load_run_config(CONFIGS / f"{key}.yaml").total_body_layers
    assert chain.plan_problems(tables["run_config"], tables["pipeline_plan"]) == []


def test_the_report_agrees_with_the_plan(planned) -> None:
    """The report re-evaluates each stage with the memory and time models, layer by layer."""
    key, tables = planned
    plan, report = tables["pipeline_plan"].frame, tables["plan_report"].frame
    assert report["stage"].tolist() == plan["stage"].tolist()
    assert report["layers"].tolist() == plan["layers"].tolist()
    assert report["planned_mb"].tolist() == plan["memory_mb"].tolist()
    # Times: the plan's in seconds (the balancer's relative times × the first body's forward, in s),
    # the report's in ms from the time model; both sum the same layers' forward and backward, head
    # and tail included, so seconds × 1e3 = ms.
    first_body = next(d for d in descriptions_from_frame(tables["withdrawn_descriptions"]) if d["type"] == "BODY")
    assert tables["pipeline_plan"].summary["time_unit_s"] == pytest.approx(first_body["forward_time"] / 1e3, rel=1e-12)
    for report_ms, plan_s in zip(report["forward_ms"] + report["backward_ms"], plan["time_s"], strict=True):
        assert report_ms == pytest.approx(plan_s * 1e3, rel=1e-9)
    # Memory: the balancer's figures are whole MB per term, from buffers split at `many` micro-batches
    # (`_ppb.py` `_body_memory`), plus the constant it charges every stage for a backward's working set (the
    # largest of any layer and option: the descriptions do not count it); the memory model evaluates
    # each stage at its own counts with its own layers' working set. So the balancer's figure less
    # the constant is close to what the model keeps, and the model's whole peak is within the
    # balancer's figure. Interleaved stages peak at the worst of several in-flight vectors in both;
    # there the balancer is the more cautious: a TAIL description holds its logits once in
    # `memory_parameter` (`_ppb.py` `lay_ppb`), charged even at a vector where the tail's chunk holds no
    # micro-batch (qwen2.5-7b stage 1 at (3, 0): 24·620 MB of COMM layers + the TAIL's 3490, where
    # the memory model's peak is (2, 1) with one logits).
    constant = tables["pipeline_plan"].summary["input"]["constant_memory_mb"]
    assert constant >= report["working_mb"].max()
    run = load_run_config(CONFIGS / f"{key}.yaml")
    interleaved = run.parallel.vpp > 1
    workspace_mb = run_workspace_bytes(run, layer_walk=walk(run, fused_tail=True)) / MB
    whole = report["parameters_mb"] + report["activations_mb"] + report["buffers_mb"]
    for whole_mb, working_mb, planned_mb in zip(whole, report["working_mb"], plan["memory_mb"], strict=True):
        assert whole_mb <= planned_mb * 1.02
        if interleaved:
            assert (planned_mb - constant) * 0.9 <= whole_mb - working_mb
        else:
            # the constant charges every stage the run's workspaces (`run_workspace_bytes`: every layer kind's,
            # TE's cached dummy weight gradients of the output layer's shape among them); the report holds the
            # stage's own among its buffers and parameters, so the model's figure lies between the two
            assert planned_mb - constant <= (whole_mb - working_mb) * 1.02
            assert whole_mb - working_mb <= (planned_mb - constant + workspace_mb) * 1.02
    assert chain.report_problems(tables["plan_report"]) == []
    files = chain.stage_artifacts("plan_report", tables["plan_report"])
    assert files[".png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert f"![memory and time per stage]({key}.png)" in files[".md"].decode()
    # said as `ppb balance` says it (session 33): why the solve ended, not the bare status ("time_limit" where the
    # work limits stopped it), and a Megatron run's plan in its flags, without MindFormers' offset and lists
    text = files[".md"].decode()
    assert "- **balancer**: proven optimal\n" in text  # a proof has no gap to say (`balance.stopped.ended_words`)
    assert "- **Megatron-LM**: `--pipeline-model-parallel-layout '" in text
    assert "**offset**" not in text and "**select_recompute**" not in text


def test_a_mindformers_report_says_the_plan_in_the_yamls_keys(planned, tmp_path: Path) -> None:
    """The same plan reported for a `framework: mindformers` run: its offset and recompute lists are the only words
    a MindFormers user has for it, and no Megatron-LM line."""
    key, tables = planned
    text = (CONFIGS / f"{key}.yaml").read_text().replace("config: hf/", f"config: {CONFIGS / 'hf'}/")
    run = tmp_path / f"{key}.yaml"
    run.write_text("framework: mindformers\n" + text)
    run_config = chain.run_chain(run, until="run_config")["run_config"]
    reported = chain.plan_report(run_config, tables["pipeline_plan"])
    headline = dict(reported.summary["headline"])
    plan = tables["pipeline_plan"].summary
    for name in ("offset", "recompute", "select_recompute", "select_comm_recompute"):
        assert headline[name] == str(plan[name])
    assert "Megatron-LM" not in headline


def test_every_shipped_config_passes_every_check(shipped) -> None:
    _, tables = shipped
    assert chain.walk_problems(tables["run_config"], tables["layer_walk"]) == []
    for name in ("layer_descriptions", "combined_descriptions", "withdrawn_descriptions", "scaled_descriptions"):
        assert chain.description_problems(tables[name]) == [], name
    assert chain.scaling_problems(tables["withdrawn_descriptions"], tables["scaled_descriptions"]) == []


def test_the_chain_equals_the_core_entry_points(shipped) -> None:
    """Stage by stage from stored tables gives what the core's one-call functions give."""
    key, tables = shipped
    run = load_run_config(CONFIGS / f"{key}.yaml")
    assert descriptions_from_frame(tables["scaled_descriptions"]) == describe_run(run)
    result = estimate(run)
    expected_memory = estimate_to_frame(result)
    pd.testing.assert_frame_equal(tables["layer_memory"].frame, expected_memory.frame)
    assert tables["layer_memory"].summary["stages"] == result.to_json()["stages"]
    timed = estimate_to_frame(estimate(run, times=TimeModel(run), stages=False)).frame
    pd.testing.assert_frame_equal(tables["layer_times"], times_frame(timed))
    for column in tables["layer_times"].columns:
        pd.testing.assert_series_equal(tables["layer_times"][column], timed[column])
    counts = run_in_flight_counts(run)
    profiles = profile_run(run, most_in_flight=max(counts), in_flight=counts)
    assert profiles_from_frame(tables["switch_profiles"]) == profiles


def test_the_sapp_file_reads_back_as_the_scaled_descriptions(shipped, tmp_path: Path) -> None:
    key, tables = shipped
    (written,) = [
        p
        for p in chain.write_stage(tmp_path, "scaled_descriptions", key, tables["scaled_descriptions"])
        if p.suffix == ".json"
    ]
    assert written == tmp_path / "scaled_descriptions" / f"{key}.json"
    assert read_layers_description(written) == descriptions_from_frame(tables["scaled_descriptions"])


def test_description_problems_name_a_negative_figure_and_unequal_options() -> None:
    tables = chain.run_chain(CONFIGS / "deepseek-v3.yaml", until="withdrawn_descriptions")
    descriptions = descriptions_from_frame(tables["withdrawn_descriptions"])
    bodies = [d for d in descriptions if d["type"] == "BODY"]
    assert len(bodies) >= 2  # DeepSeek-V3: dense layers, then MoE layers
    bodies[0]["memory_recompute"] = -1
    del bodies[1]["memory_select_rec"], bodies[1]["select_rec_time"]
    problems = chain.description_problems(descriptions_to_frame(descriptions))
    assert problems[0] == f"{bodies[0]['name']}: memory_recompute is -1, not a non-negative number"
    assert problems[1].startswith("bodies offer different options: ")
    assert len(problems) == 2


def test_scaling_problems_name_a_time_not_divided_by_the_unit() -> None:
    tables = chain.run_chain(CONFIGS / "llama3-8b.yaml", until="scaled_descriptions")
    scaled = descriptions_from_frame(tables["scaled_descriptions"])
    tail = next(d for d in scaled if d["type"] == "TAIL")
    tail["backward_time"] *= 1.001
    problems = chain.scaling_problems(tables["withdrawn_descriptions"], descriptions_to_frame(scaled))
    assert len(problems) == 1 and problems[0].startswith("TAIL: backward_time is ")
