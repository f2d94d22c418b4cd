"""Megatron-Core's layout and recompute flags: the parser's rules, every shipped config's layout parsed back.

The rules are Megatron-Core's (Megatron-LM core_v0.19.0, commit 5be96267,
megatron/core/transformer/pipeline_parallel_layer_layout.py): the expected values below are its
own documented examples (the `parse_str_to_list` docstring, docs/user-guide/features/
pipeline_parallel_layout.md) and what `validate_layer_layout` asserts.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ppb_core.balance.program as program_module
from ppb_core.balance.megatron import Setting, setting_of
from ppb_core.balance.megatron_text import megatron_lines
from ppb_core.balance.outputs import megatron, not_megatrons, plan_from_yaml, virtual_stages
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput, run_problem
from ppb_core.balance.program import Solution, _megatron, solve
from ppb_core.balance.progress import Clock, Reporter, WorkLimits
from ppb_core.balance.result import report
from ppb_core.config.layout import LayoutError, expand, format_layout, model_order, parse_layout, validate_layout
from ppb_core.config.run import load_run_config
from ppb_core.limits import CHUNKS, LAYERS, STAGES
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.run import describe_run
from ppb_core.payload.sapp import layer_set

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


def test_megatrons_documented_example() -> None:
    # parse_str_to_list's docstring: "Ettt|(tt|)*29,m|L" is [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]
    assert expand("Ettt|(tt|)*29,m|L").split("|") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    # the DeepSeek-V3 layout of the docs, PP 16: rank 0 holds E + 3 t, then 2 t; rank 14 holds 2 t, then m;
    # rank 15 holds 2 t, then L
    layout = parse_layout("Et*3|(tt|)*29,m|L", 16)
    assert layout[0] == ["Ettt", "tt"] and layout[14] == ["tt", "m"] and layout[15] == ["tt", "L"]
    validate_layout(layout, 61, 1)
    # "Empty stages are allowed, for example E||t|L"
    validate_layout(parse_layout("E||t|L", 2), 1)


@pytest.mark.parametrize(
    ("text", "pp", "layers", "mtp", "reason"),
    [
        ("Et|tL", 3, 2, 0, "not a multiple"),
        ("Ex|tL", 2, 2, 0, "invalid layer character"),
        ("tE|tL", 2, 2, 0, "first layer must be the embedding"),
        ("Et|Lt", 2, 2, 0, "last layer must be the loss"),
        ("Et|EtL", 2, 2, 0, "exactly once"),
        ("Et|tL", 2, 3, 0, "decoder layers"),
        ("Et|tL", 2, 2, 1, "MTP layers"),
        ("Em|ttL", 2, 2, 1, "before the MTP"),
        # V = 2, P = 2: stage 1 is rank 1's first virtual stage, where no m may go
        ("Et|m||L", 2, 1, 1, "last virtual stage"),
        ("Et|m|mL", 3, 1, 2, "one virtual stage"),
    ],
)
def test_megatrons_refusals(text: str, pp: int, layers: int, mtp: int, reason: str) -> None:
    with pytest.raises(LayoutError, match=reason):
        validate_layout(parse_layout(text, pp), layers, mtp)


@pytest.mark.parametrize(
    "text",
    [
        "(Et*8|)*99999999",  # unrolled: 99,999,999 × 5 characters, hundreds of MB
        "Et*8|t*99999999999999999999L",  # a count Python cannot make a string of
        "Et*8|t*" + "9" * 5000 + "L",  # a count int() refuses to read (4,300 digits)
    ],
)
def test_a_layout_longer_than_any_run_is_refused_before_it_is_unrolled(text: str) -> None:
    with pytest.raises(LayoutError, match="write out more than"):
        expand(text)


def test_a_layout_at_the_limit_unrolls() -> None:
    # E, 1,024 t, L and one stage less than the limit's 512 × 64 stages: 2 + 1,024 + 32,767 = 33,793
    # characters, within 2 + 2 × 1,024 + 512 × 64 = 34,818
    text = "Et*1024|" + "|" * (STAGES * CHUNKS - 2) + "L"
    assert len(expand(text)) == 2 + LAYERS + STAGES * CHUNKS - 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="t", max_size=7), min_size=1, max_size=40), st.integers(0, 3))
def test_formatted_layouts_parse_back(middles: list[str], mtp: int) -> None:
    stages = ["E" + middles[0], *middles[1:]]
    stages[-1] += "m" * mtp + "L"
    text = format_layout(stages)
    assert expand(text).split("|") == stages
    assert model_order(parse_layout(text, len(stages))) == stages


def _plan(problem: BalanceInput, per_cell: list[list[dict[str, int]]]) -> Plan:
    counts = empty_counts(problem)
    for v, row in enumerate(per_cell):
        for s, options in enumerate(row):
            for option, n in options.items():
                counts[0][v][s][OPTIONS.index(option)] = n
    return Plan(problem, freeze(counts))


def _problem(layers: int, stages: int, chunks: int, mtp: int = 0) -> BalanceInput:
    body = {
        "name": "BODY_0",
        "type": "BODY",
        "nb_layer": layers,
        "time": 1,
        "memory_parameter": 1,
        "memory_activation": 1,
        "memory_select_rec": 1,
        "memory_select_comm": 1,
        "memory_recompute": 1,
    }
    ends = [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1},
        {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1},
    ]
    return BalanceInput(
        layer_set([ends[0], body, ends[1]]), stages, 2 * stages, chunks, 1e9, framework="megatron", mtp_layers=mtp
    )


def test_layout_with_mtp_and_flags_quoted() -> None:
    # P = 2, V = 2, 6 layers, one MTP layer: cells in model order (0,0) (0,1) (1,0) (1,1) hold 1, 2, 2, 1
    problem = _problem(6, 2, 2, mtp=1)
    plan = _plan(problem, [[{"NONE": 1}, {"NONE": 2}], [{"NONE": 2}, {"NONE": 1}]])
    assert virtual_stages(plan) == ["Et", "tt", "tt", "tmL"]
    out = megatron(plan)
    assert out["layout"] == "Et|tt|tt|tmL" and out["recompute_expressible"] and out["recompute"] == []
    # the flags survive a POSIX shell unchanged
    assert shlex.split(out["flags"]) == ["--pipeline-model-parallel-layout", "Et|tt|tt|tmL"]
    # no recompute is Megatron-LM's default, so no flag says it: a launch's own --recompute-* flags must go
    assert "drop every --recompute-* flag" in out["note"]
    assert "drop every --recompute-* flag" in megatron_lines(out)[-1]
    validate_layout(parse_layout(out["layout"], 2), 6, 1)


def test_recompute_settings() -> None:
    problem = _problem(6, 2, 2)
    block = _plan(problem, [[{"FULL": 1}, {"FULL": 1, "NONE": 1}], [{"FULL": 1, "NONE": 1}, {"FULL": 1}]])
    assert megatron(block)["recompute"] == [
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "block",
        "--recompute-num-layers",
        "1",
    ]
    full = _plan(problem, [[{"FULL": 1}, {"FULL": 2}], [{"FULL": 2}, {"FULL": 1}]])
    assert megatron(full)["recompute"][:4] == ["--recompute-granularity", "full", "--recompute-method", "uniform"]
    # block 2 gives a one-layer virtual stage FULL 1, a two-layer one FULL 2: the same as all FULL here,
    # so block 1 with a two-layer stage fully recomputed is not one setting
    mixed = _plan(problem, [[{"FULL": 1}, {"FULL": 2}], [{"FULL": 1, "NONE": 1}, {"FULL": 1}]])
    assert setting_of([{"FULL": 1}, {"FULL": 2}, {"FULL": 1, "NONE": 1}, {"FULL": 1}], False) is None
    out = megatron(mixed)
    assert out["recompute_expressible"] is False and "one setting" in out["note"]
    # COMM re-sends the tensor-parallel gathers: no Megatron-Core module does
    comm = _plan(problem, [[{"COMM": 1}, {"COMM": 2}], [{"COMM": 2}, {"COMM": 1}]])
    assert megatron(comm)["recompute"] is None and "gathers" in megatron(comm)["note"]
    # SLCT everywhere is selective recompute with the run's modules, and only with them
    slct = _plan(problem, [[{"SLCT": 1}, {"SLCT": 2}], [{"SLCT": 2}, {"SLCT": 1}]])
    assert megatron(slct)["recompute"] is None
    # moe_act needs --moe-grouped-gemm (transformer_config.py TransformerConfig.__post_init__, d98e8a64)
    assert megatron(slct, ("core_attn", "moe_act"))["recompute"] == [
        "--recompute-granularity",
        "selective",
        "--recompute-modules",
        "core_attn",
        "moe_act",
        "--moe-grouped-gemm",
    ]
    assert Setting("block", 2).cell_options(1) == {"FULL": 1, "NONE": 0}


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda path: path.stem)
def config_plan(request):
    run = load_run_config(request.param)
    problem = run_problem(run, describe_run(run))
    return run, problem, solve(problem, time_limit=120, exact=False).plan


def test_every_shipped_config_layout_parses_back(config_plan) -> None:
    """The closed form's plan of each shipped config, its layout read back by Megatron-Core's rules."""
    run, problem, plan = config_plan
    assert plan is not None
    out = megatron(plan)
    if problem.schedule_name == "dualpipev" or len(run.model_names) > 1:
        assert out["layout"] is None  # Megatron runs neither DualPipeV nor a tower in its decoder layout
        return
    # the whole flags when Megatron-Core can say the plan, else its layout alone, marked as such
    arguments = shlex.split(out["flags"] or out["layout_only"])
    layout_text = arguments[arguments.index("--pipeline-model-parallel-layout") + 1]
    assert (out["flags"] is None) == (not out["recompute_expressible"])
    layout = parse_layout(layout_text, run.parallel.pp)
    layers = sum(run.spec(name).num_layers for name in run.model_names)
    mtp = sum(getattr(run.spec(name), "mtp_layers", 0) for name in run.model_names)
    validate_layout(layout, layers, mtp)
    assert len(layout[0]) == run.parallel.vpp
    # each virtual stage holds the plan's layers of its cell
    for v, s in problem.cells:
        assert layout[s][v].count("t") == plan.cell_layers(v, s)


def test_megatron_settings_cut_short_say_so_and_claim_nothing_else() -> None:
    """A plan Megatron-Core cannot say (SLCT on stage 0 only), the clock out before any setting was
    tried: the notes said "stopped by the time limit" and then "no plan fits under one setting for
    every layer", which nothing showed; the report now says why no alternative stands beside it."""
    run = load_run_config(Path(__file__).parent.parent / "configs" / "llama3-8b.yaml")
    problem = run_problem(run, describe_run(run))
    plan = plan_from_yaml(problem, {"offset": [0, 0, 0, 0], "select_recompute": [8, 0, 0, 0]})
    solution = Solution(problem, "time_limit", plan=plan, objective=plan.iteration_time, stopped_by="time_limit")
    _megatron(problem, solution, True, WorkLimits(), Clock(0.0), Reporter(None, Clock(0.0)), None)
    assert solution.notes == ["Megatron-Core's settings: stopped by the time limit"]
    said = report(solution)["megatron"]
    assert not said["recompute_expressible"] and said["no_alternative"] == "stopped by the time limit"


def test_no_megatron_settings_are_searched_for_a_second_model_in_the_pipeline(monkeypatch) -> None:
    """Megatron-Core's layout places decoder layers only (`outputs.not_megatrons`), so a two-model
    run has no flags to give: `ppb balance` on qwen2.5-vl-7b without its `ppb:` line spent its whole
    90 s on Megatron-Core's settings and printed an "alternative" layout counting the tower's blocks
    as decoder layers. The settings are now not searched for such a run, as for DualPipeV."""

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("Megatron-Core's settings searched for a two-model pipeline")

    monkeypatch.setattr(program_module, "_megatron", fail)
    body = {"type": "BODY", "time": 1, "memory_parameter": 1, "memory_activation": 1, "memory_recompute": 1}
    layers = [
        {"name": "HEAD", "type": "HEAD", "nb_layer": 1, "time": 1, "model_name": "vit"},
        {**body, "name": "BODY_0", "nb_layer": 4, "model_name": "vit"},
        {**body, "name": "BODY_1", "nb_layer": 4, "model_name": "llm"},
        {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "time": 1, "model_name": "llm"},
    ]
    problem = BalanceInput(layer_set(layers), 2, 4, 1, 1e9, framework="megatron")
    assert not_megatrons(problem) is not None
    solution = solve(problem, time_limit=30)
    assert solution.plan is not None
    assert "alternative" not in report(solution)["megatron"]
