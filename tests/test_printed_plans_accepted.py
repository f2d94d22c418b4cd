"""Every plan ppb prints for Megatron-LM, torchtitan and MindFormers is one the framework accepts as printed.

The rules are the frameworks' own, rewritten from their code in tests/framework_rules.py (Megatron-LM
d98e8a64 arguments.py, transformer_config.py, pipeline_parallel_layer_layout.py, schedules.py; torchtitan
v0.2.2 pipeline_parallel.py, torch's ScheduleInterleaved1F1B; MindFormers fd4deebc models/utils.py
`LayerSetting` with MindSpore's `set_pipeline_config`), never read from ppb. Three sources of plans:
hand-built plans over random splits, options and groups (hypothesis) through the printers themselves
(`balance.outputs.megatron`, `balance.torchtitan_plan.torchtitan`); `ppb search -o` on the tiny specs (the
`.megatron.txt` and `.torchtitan.toml` files); and `ppb balance --json` on run configs at several sizes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from framework_rules import megatron_problems, mindformers_problems, torchtitan_batch, torchtitan_problems
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ppb_core.balance import BalanceInput
from ppb_core.balance.outputs import cells, interleave_keys, megatron, to_yaml
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.torchtitan_plan import torchtitan
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set
from ppb_core.search.enumerate import accepted_groups
from ppb_core.search.outputs import mindformers_settings, write_ranking
from ppb_core.search.rank import search
from ppb_core.search.spec import load_search_spec

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "search"
HEAD = {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 1}
TAIL = {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1, "memory_parameter": 1}


@st.composite
def plans(draw: st.DrawFn, framework: str) -> tuple[Plan, int]:
    """A plan over one body type: P stages, V chunks, m micro-batches (a group Megatron accepts under the
    interleaved schedule), each cell 1..3 layers (the first and last may hold none), each layer's option
    drawn from NONE, FULL and SLCT per cell or one for all; and its micro-batch count."""
    stages = draw(st.integers(1, 4))
    chunks = draw(st.integers(1, 3)) if stages > 1 else 1
    schedule = (
        "interleaved"
        if chunks > 1
        else draw(st.sampled_from(["1f1b", "gpipe"] if framework == "torchtitan" else ["1f1b"]))
    )
    micro_batches = draw(st.integers(stages, 4 * stages)) if schedule == "interleaved" else draw(st.integers(1, 8))
    if schedule == "1f1b" and framework == "torchtitan":
        # torch's Schedule1F1B refuses fewer micro-batches than stages, and so does the run config
        # (tests/test_schedule_group.py): a plan of torchtitan's 1F1B has at least P
        micro_batches = draw(st.integers(stages, 8))
    group = None
    if schedule == "interleaved" and framework == "megatron":
        accepted = accepted_groups(stages, micro_batches)
        if not accepted:
            micro_batches = stages * draw(st.integers(1, 4))
            accepted = accepted_groups(stages, micro_batches)
        group = draw(st.sampled_from(accepted))
    if schedule == "interleaved" and framework in ("torchtitan", "mindformers"):
        # torch's Interleaved1F1B takes a whole number of rounds (max(1, m // P)), and ppb's problem the
        # default group's m (BalanceInput refuses 5 on 4 stages: a last group of 1): m a multiple of P
        micro_batches = stages * draw(st.integers(1, 4))
    cells_count = stages * chunks
    # MindFormers places layers only: a layer in every cell (`BalanceInput.reserved_cells`)
    ends = (0, cells_count - 1) if framework != "mindformers" else ()
    per_cell = [draw(st.integers(0 if i in ends else 1, 3)) for i in range(cells_count)]
    if sum(per_cell) == 0:
        per_cell[0] = 1
    one_option = draw(st.booleans())
    everywhere = draw(st.sampled_from(["NONE", "FULL", "SLCT"]))
    layers = sum(per_cell)
    body = {"name": "L", "type": "BODY", "nb_layer": layers, "time": 1, "memory_parameter": 1, "memory_activation": 1}
    problem = BalanceInput(
        layer_set([HEAD, body, TAIL]),
        stages,
        micro_batches,
        chunks,
        10**9,
        schedule=schedule,
        framework=framework,
        group=group,
    )
    counts = empty_counts(problem)
    for (chunk, stage), n in zip(problem.cells, per_cell, strict=True):
        for _ in range(n):
            option = everywhere if one_option else draw(st.sampled_from(["NONE", "FULL", "SLCT"]))
            counts[0][chunk][stage][OPTIONS.index(option)] += 1
    return Plan(problem, freeze(counts)), micro_batches


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=plans("megatron"), selective=st.booleans())
def test_megatrons_printed_flags_are_accepted(drawn: tuple[Plan, int], selective: bool) -> None:
    plan, micro_batches = drawn
    said = megatron(plan, ["core_attn"] if selective else None)
    if said.get("flags") is None:
        return  # nothing printed to run (`layout_only` is marked NOT runnable alone)
    layers = plan.problem.layers.nb_body_layers
    problems = megatron_problems(said["flags"], num_layers=layers, pp=plan.problem.stages, micro_batches=micro_batches)
    assert problems == [], (said["flags"], problems)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=plans("torchtitan"), micro_batch_size=st.integers(1, 4), dp=st.integers(1, 16))
def test_torchtitans_printed_lines_are_accepted(drawn: tuple[Plan, int], micro_batch_size: int, dp: int) -> None:
    plan, micro_batches = drawn
    p = plan.problem
    result = {"input": p.describe(), "cells": cells(plan)}
    said = torchtitan(result, {"mode": "selective", "option": "op"}, (micro_batch_size, dp))
    if said is None or not said.get("lines"):
        return
    toml = tomllib.loads("\n".join(said["lines"]))
    ac = toml.get("activation_checkpoint", {})
    if p.stages == 1:  # no split to say: the [activation_checkpoint] table alone, a mode torchtitan takes
        assert set(toml) == {"activation_checkpoint"} and ac["mode"] in ("none", "full", "selective")
        return
    # the batch torchtitan takes from the lines is the plan's: b-sized micro-batches, m of them, one step
    micro, scheduled, steps, batch_problems = torchtitan_batch(toml["training"], toml["parallelism"], dp)
    assert batch_problems == [] and (micro, scheduled, steps) == (micro_batch_size, micro_batches, 1)
    problems = torchtitan_problems(
        toml["parallelism"]["module_fqns_per_model_part"],
        degree=toml["parallelism"]["pipeline_parallel_degree"],
        schedule=toml["parallelism"]["pipeline_parallel_schedule"],
        num_layers=p.layers.nb_body_layers,
        micro_batches=scheduled,
        mode=ac.get("mode"),
        option=ac.get("selective_ac_option"),
    )
    assert problems == [], (said["lines"], problems)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=plans("mindformers"))
def test_mindformers_printed_keys_are_accepted(drawn: tuple[Plan, int]) -> None:
    """The four lists `ppb balance` prints (`to_yaml`) and, with chunks, the keys beside them
    (`interleave_keys`), merged into a training yaml of the plan's pipeline_stage. Until session 31 a plan
    of 2 chunks printed its 2-row offset alone: MindFormers then runs pp_interleave_num 1 (MindSpore's
    pipeline_interleave off) and refuses the offset's rows."""
    plan, _ = drawn
    p = plan.problem
    printed = to_yaml(plan)
    alone = {"parallel_config": {"pipeline_stage": p.stages}, "model": {"model_config": {"offset": printed["offset"]}}}
    document = _merged(alone, interleave_keys(p.chunks))
    assert mindformers_problems(document, num_layers=p.layers.nb_body_layers) == [], (document, printed)
    if p.chunks > 1:  # the offsets alone, as printed until session 31: refused
        assert mindformers_problems(alone, num_layers=p.layers.nb_body_layers)


def _merged(base: dict, extra: dict) -> dict:
    """*extra*'s keys merged into *base*'s, mapping by mapping (as a user merges printed keys into a yaml)."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def test_mindformers_rules_refuse_what_mindformers_refuses() -> None:
    # 8 layers over pp 2 × 2 chunks: avg 8 // 4 = 2, offsets summing to 8 mod 4 = 0
    two_rows = {"parallel_config": {"pipeline_stage": 2}, "model": {"model_config": {"offset": [[1, -1], [0, 0]]}}}
    # no pipeline_interleave: LayerSetting takes pp_interleave_num 1, `_check_inputs` refuses 2 rows
    assert mindformers_problems(two_rows, num_layers=8) == [
        "offset of 2 rows, pp_interleave_num 1 (pipeline_interleave False)"
    ]
    on = {"pipeline_config": {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}}
    with_v = _merged(two_rows, {"model": {"model_config": {"pp_interleave_num": 2}}, "parallel": on})
    assert mindformers_problems(with_v, num_layers=8) == []
    # set_pipeline_config reads both keys; a scheduler other than 1f1b needs the interleave
    half = _merged(with_v, {"parallel": {"pipeline_config": {}}})
    half["parallel"] = {"pipeline_config": {"pipeline_interleave": True}}
    assert mindformers_problems(half, num_layers=8)
    gpipe = {"parallel": {"pipeline_config": {"pipeline_interleave": False, "pipeline_scheduler": "gpipe"}}}
    assert mindformers_problems(gpipe, num_layers=8)
    # the offsets' sum: 9 layers over pp 2 × 2 chunks leave 1
    assert mindformers_problems(_merged(with_v, {}), num_layers=9)


def test_torchtitans_batch_rules_refuse_what_torchtitan_refuses() -> None:
    # job_config.py defaults (local 8, global -1 = 8 × dp, micro-batch 1): 8 micro-batches, one step
    assert torchtitan_batch({}, {}, 4) == (1, 8, 1, [])
    # global 64 on dp 4 at local 8: 64 / 32 = 2 gradient-accumulation steps of 8 / 2 = 4 micro-batches
    training = {"local_batch_size": 8, "global_batch_size": 64}
    assert torchtitan_batch(training, {"pipeline_parallel_microbatch_size": 2}, 4) == (2, 4, 2, [])
    assert torchtitan_batch({"local_batch_size": 6}, {"pipeline_parallel_microbatch_size": 4}, 1)[3]  # 6 % 4
    assert torchtitan_batch({"local_batch_size": 8, "global_batch_size": 48}, {}, 4)[3]  # 48 % 32


def test_the_rules_refuse_what_the_frameworks_refuse() -> None:
    """The rules are not empty: the flags ppb used to print for Megatron-FSDP, a group Megatron refuses,
    a layout short of a layer, and torchtitan lines with a layer twice or a single-stage schedule over two."""
    assert megatron_problems("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", num_layers=2)
    assert megatron_problems(
        "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|t|t|tL' "
        "--microbatch-group-size-per-virtual-pipeline-stage 4",
        num_layers=4,
        micro_batches=5,
    ) == ["a last group of 1 < pp 2"]
    assert megatron_problems("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Et|tL'", num_layers=3)
    assert megatron_problems("--recompute-granularity full --recompute-method block", num_layers=2)
    parts = [["tok_embeddings", "layers.0"], ["layers.0", "norm", "output"]]
    assert torchtitan_problems(parts, degree=2, schedule="1F1B", num_layers=1, micro_batches=2)
    parts = [["tok_embeddings", "layers.0"], ["layers.1"], ["layers.2"], ["layers.3", "norm", "output"]]
    assert torchtitan_problems(parts, degree=2, schedule="1F1B", num_layers=4, micro_batches=2)
    assert torchtitan_problems(parts, degree=2, schedule="Interleaved1F1B", num_layers=4, micro_batches=5)
    assert not torchtitan_problems(parts, degree=2, schedule="Interleaved1F1B", num_layers=4, micro_batches=4)
    two = [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]]
    assert torchtitan_problems(two, degree=2, schedule="1F1B", num_layers=2, micro_batches=1)
    assert not torchtitan_problems(two, degree=2, schedule="GPipe", num_layers=2, micro_batches=1)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, Path]]:
    """The tiny specs searched (one worker) and written out with `-o`: Megatron's with ZeRO 0-3 and FSDP."""
    out = {}
    for name in ("tiny-dense", "tiny-moe", "tiny-mtp", "tiny-groups", "tiny-titan", "tiny-mindformers"):
        # tiny-dense searched as MindFormers runs it, with 1 or 2 chunks a stage
        raw = yaml.safe_load((DATA / f"{name.replace('mindformers', 'dense')}.yaml").read_text())
        if name == "tiny-mindformers":
            raw["framework"] = "mindformers"
            raw["limits"]["pp"] = [2]
        if raw.get("framework", "megatron") == "megatron":
            raw.setdefault("limits", {})["zero"] = [0, 1, 2]
            raw["limits"]["fsdp"] = [False, True]
        path = tmp_path_factory.mktemp(name) / f"{name}.yaml"
        for entry in raw["models"]:
            if "config" in entry:
                entry["config"] = str((DATA / entry["config"]).resolve())
        path.write_text(yaml.safe_dump(raw))
        spec = load_search_spec(path)
        result = search(spec, workers=1)
        target = path.parent / "top"
        write_ranking(result, target)
        out[name] = (result, target)
    return out


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-moe", "tiny-mtp", "tiny-groups"])
def test_the_searchs_megatron_files_are_accepted(written, name: str) -> None:
    """Each ranked strategy's `NN-<name>.megatron.txt` as written (comment lines aside)."""
    result, target = written[name]
    spec = result.spec
    mtp = sum(getattr(sub, "mtp_layers", 0) or 0 for sub in spec.specs.values())
    assert result.ranked
    for place, entry in enumerate(result.ranked, start=1):
        s = entry.strategy
        text = (target / f"{place:02d}-{s.label(spec)}.megatron.txt").read_text()
        flags = " ".join(line.rstrip("\\ ") for line in text.splitlines() if not line.startswith("#"))
        problems = megatron_problems(
            flags, num_layers=spec.total_body_layers, mtp_num_layers=mtp, micro_batches=s.micro_batches
        )
        assert problems == [], (s.label(spec), flags, problems)


def test_the_searchs_torchtitan_files_are_accepted(written) -> None:
    result, target = written["tiny-titan"]
    spec = result.spec
    checked = 0
    for path in sorted(target.glob("*.torchtitan.toml")):
        label = path.name.split("-", 1)[1].removesuffix(".torchtitan.toml")
        entry = next(e for e in result.ranked if e.strategy.label(spec) == label)
        toml = tomllib.loads(path.read_text())
        ac = toml.get("activation_checkpoint", {})
        s = entry.strategy
        par = toml["parallelism"]
        # the degrees the search chose (session 27): torchtitan's world is replicate · shard · cp · tp · pp
        world = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
        world *= par["context_parallel_degree"] * par["tensor_parallel_degree"] * par.get("pipeline_parallel_degree", 1)
        assert world == spec.devices
        if s.pp == 1:  # no split to say: a mode torchtitan takes, and the batch as accumulation steps
            assert set(toml) == {"parallelism", "activation_checkpoint", "training"}
            assert ac["mode"] in ("none", "full", "selective")
            _, local, steps, batch_problems = torchtitan_batch(toml["training"], par, s.dp)
            assert batch_problems == [] and (local, steps) == (s.micro_batch_size, s.micro_batches)
            checked += 1
            continue
        micro, scheduled, steps, batch_problems = torchtitan_batch(toml["training"], toml["parallelism"], s.dp)
        assert batch_problems == [] and (micro, scheduled, steps) == (s.micro_batch_size, s.micro_batches, 1)
        problems = torchtitan_problems(
            toml["parallelism"]["module_fqns_per_model_part"],
            degree=toml["parallelism"]["pipeline_parallel_degree"],
            schedule=toml["parallelism"]["pipeline_parallel_schedule"],
            num_layers=spec.total_body_layers,
            micro_batches=entry.strategy.micro_batches,
            mode=ac.get("mode"),
            option=ac.get("selective_ac_option"),
        )
        assert problems == [], (path.name, problems)
        checked += 1
    assert checked


def test_the_searchs_mindformers_files_are_accepted(written) -> None:
    """Each ranked strategy's `NN-<name>.mindformers.yaml` as written, chunks or not."""
    result, target = written["tiny-mindformers"]
    spec = result.spec
    chunks = set()
    for place, entry in enumerate(result.ranked, start=1):
        document = yaml.safe_load((target / f"{place:02d}-{entry.strategy.label(spec)}.mindformers.yaml").read_text())
        assert document == mindformers_settings(entry.strategy, entry.plan)
        problems = mindformers_problems(document, num_layers=spec.total_body_layers)
        assert problems == [], (entry.strategy.label(spec), document, problems)
        chunks.add(entry.strategy.vpp)
    assert 2 in chunks, chunks  # an interleaved strategy among them


@pytest.mark.parametrize(
    ("config", "update", "memory"),
    [
        ("configs/llama3-8b.yaml", {}, None),
        ("configs/llama3-8b.yaml", {"vpp": 2, "schedule": "interleaved"}, None),
        # 30 micro-batches over 4 stages: Megatron's default group is refused; groups of 5 run them
        ("configs/llama3-8b.yaml", {"vpp": 2, "schedule": "interleaved", "microbatch_group_size_per_vp_stage": 5}, 30),
        ("configs/llama3-8b.yaml", {}, 52000),  # tight: mixed recompute, the alternative printed first
    ],
)
def test_ppb_balance_prints_flags_megatron_accepts(tmp_path: Path, config: str, update: dict, memory) -> None:
    raw = yaml.safe_load((ROOT / config).read_text())
    raw["models"][0]["config"] = str((ROOT / "configs" / raw["models"][0]["config"]).resolve())
    raw["parallel"].update(update)
    args = []
    if isinstance(memory, int) and memory < 100:
        raw["training"]["micro_batches"] = memory
    elif memory is not None:
        args = ["--memory", str(memory)]
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [sys.executable, "-m", "ppb_core.cli.main", "balance", str(run), "--json", "-q", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    said = result["megatron"]
    assert said.get("flags"), said
    problems = megatron_problems(
        said["flags"],
        num_layers=result["input"]["bodies"][0]["nb_layer"],
        pp=result["input"]["stages"],
        micro_batches=result["input"]["micro_batches"],
    )
    assert problems == [], (said["flags"], problems)
