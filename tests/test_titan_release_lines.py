"""torchtitan's printed job lines and recompute words follow the run's `framework_release.torchtitan`.

Read in pytorch/torchtitan:
* 9810191bb (2026-02-23, #2386, "Config System Refactor: TOML to Python Dataclass Registry"):
  config/manager.py `ConfigManager` loads a config_registry function (--module, --config) and CLI
  overrides; tomllib and `--job.config_file` are gone, so no job TOML is read.
* 114151ad4 (2026-03-23, #2357): config/configs.py `ActivationCheckpointConfig` loses
  `selective_ac_option` ("'int' (e.g., 2) for every nth layer, or 'op'"), activation_checkpoint.py
  loses `_apply_layer_sac`; `mode = "selective"` is the per-op policy alone, and no field replaces the
  every-N-th setting (its PP integration tests that relied on it switch to `mode full`).
v0.2.2 (2026-02-20) predates both: unset, ppb prints v0.2.2's TOML as before; from 9810191bb its Python
config lines (`torchtitan_python`, tests/test_titan_python_lines.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.balance.problem import run_problem
from ppb_core.balance.result import balance
from ppb_core.balance.torchtitan_plan import activation_checkpoint, add_torchtitan, torchtitan
from ppb_core.balance.torchtitan_settings import settings
from ppb_core.config.recompute import TorchtitanRecompute
from ppb_core.config.releases import CHANGES, parse_release
from ppb_core.config.run import FrameworkRelease, parse_run_config
from ppb_core.errors import InputError
from ppb_core.payload.run import describe_run

OP = TorchtitanRecompute(mode="selective", option="op")


def _raw(release: str | None, recompute: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "r",
        "framework": "torchtitan",
        **({"framework_release": {"torchtitan": release}} if release is not None else {}),
        "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
        "parallel": {"dp": 2, "zero": 3, "fsdp": True},
        "training": {"seq_length": 2048, "micro_batch_size": 1, "recompute": recompute},
        "device": ROUND_DEVICE,
    }


def _result(grid: list[list[dict[str, int]]], setting: dict[str, Any] | None = None) -> dict[str, Any]:
    given = {"stages": len(grid[0]), "interleave": len(grid), "schedule": "1f1b", "framework": "torchtitan"}
    result: dict[str, Any] = {"input": {**given, "micro_batches": 4}}
    result["cells"] = [[{"options": options} for options in row] for row in grid]
    if setting is not None:
        result["recompute_setting"] = setting
    return result


@pytest.mark.parametrize(
    ("value", "toml_gone", "every_gone"),
    [
        ("v0.2.2", False, False),
        ("2026-02-22", False, False),
        ("2026-02-23", True, False),  # 9810191bb's date
        ("2026-03-22", True, False),
        ("2026-03-23", True, True),  # 114151ad4's date
        ("0.3", True, True),  # no tag holds them yet: the next minor release would
    ],
)
def test_the_two_commits_gate_by_date_or_release(value, toml_gone, every_gone):
    registry, op_only = CHANGES["torchtitan_config_registry"], CHANGES["torchtitan_op_sac_only"]
    assert (registry.commit, registry.date, op_only.commit, op_only.date) == (
        "9810191bb",
        "2026-02-23",
        "114151ad4",
        "2026-03-23",
    )
    if value != "0.3":
        release = parse_release("torchtitan", value)
        assert (release.holds(registry), release.holds(op_only)) == (toml_gone, every_gone)
    else:
        assert registry.release == op_only.release == (0, 3)
    assert not FrameworkRelease().holds("torchtitan_op_sac_only")  # unset: v0.2.2


@pytest.mark.parametrize(
    ("recompute", "every"),
    [({"mode": "selective", "option": 3}, 3), ({"mode": "selective", "option": "2"}, 2), ({"mode": "selective"}, 2)],
)
def test_every_nth_block_is_refused_from_114151ad4_in_one_line(recompute, every):
    # {mode: selective} with no option was v0.2.2's every 2nd block (job_config.py default "2")
    with pytest.raises(InputError) as caught:
        parse_run_config(_raw("2026-03-23", recompute), "run.yaml")
    line = str(caught.value)
    assert line.startswith("run.yaml: training.recompute: ") and "\n" not in line
    assert f"selective_ac_option {every} (blocks {every}, {2 * every}, ..." in line and "114151ad4" in line
    # the day before, and v0.2.2 (unset), still have it
    assert parse_run_config(_raw("2026-03-22", recompute)).training.recompute.every == every
    assert parse_run_config(_raw(None, recompute)).training.recompute.every == every


@pytest.mark.parametrize("recompute", [{"mode": "selective", "option": "op"}, {"mode": "full"}, {"mode": "none"}])
def test_the_op_policy_full_and_none_stay_accepted(recompute):
    assert parse_run_config(_raw("2026-08-21", recompute)).framework_release.holds("torchtitan_op_sac_only")


def test_the_keys_as_each_release_names_them():
    later = FrameworkRelease(torchtitan="2026-03-23")
    # v0.2.2: selective_ac_option "op" and "3" (a string in job_config.py)
    assert activation_checkpoint({"SLCT"}, OP) == ({"mode": "selective", "selective_ac_option": "op"}, None)
    every = {"name": "every", "num_layers": 3}
    assert activation_checkpoint({"NONE", "FULL"}, None, every)[0] == {"mode": "selective", "selective_ac_option": "3"}
    # from 114151ad4: selective is the op policy with no option key; every N-th has no setting
    assert activation_checkpoint({"SLCT"}, OP, None, later) == ({"mode": "selective"}, None)
    selective = {"name": "selective", "num_layers": 0}
    assert activation_checkpoint({"SLCT"}, OP, selective, later) == ({"mode": "selective"}, None)
    ac, why = activation_checkpoint({"NONE", "FULL"}, None, every, later)
    assert ac is None and "114151ad4" in (why or "") and "not expressible" in (why or "")
    assert activation_checkpoint({"FULL"}, OP, {"name": "full", "num_layers": 0}, later) == ({"mode": "full"}, None)


def test_a_release_reading_no_toml_prints_python_lines():
    # PP 2, layers 0-1 | 2-3 under full: v0.2.2 prints the job TOML
    grid = [[{"FULL": 2}, {"FULL": 2}]]
    full = {"name": "full", "num_layers": 0}
    fqns = [["tok_embeddings", "layers.0", "layers.1"], ["layers.2", "layers.3", "norm", "output"]]
    old = torchtitan(_result(grid, full), OP, (1, 2))
    assert old is not None and old["lines"][:2] == ["[parallelism]", "pipeline_parallel_degree = 2"]
    assert "[activation_checkpoint]" in old["lines"] and 'mode = "full"' in old["lines"] and "note" not in old
    assert torchtitan(_result(grid, full), OP, (1, 2), FrameworkRelease(torchtitan="2026-02-22")) == old
    # from 9810191bb: the same split and keys as assignments on the config (test_titan_python_lines)
    new = torchtitan(_result(grid, full), OP, (1, 2), FrameworkRelease(torchtitan="2026-02-23"))
    assert new is not None and new["format"] == "python" and new["module_fqns_per_model_part"] == fqns
    assert new["activation_checkpoint"] == {"mode": "full"} and new["recompute_expressible"] and "note" not in new
    assert 'config.activation_checkpoint.mode = "full"' in new["lines"]
    # an every-3rd plan from 114151ad4 on: the split only, the recompute not expressible
    mixed = [[{"NONE": 2, "FULL": 1}, {"NONE": 2, "FULL": 1}]]
    said = torchtitan(
        _result(mixed, {"name": "every", "num_layers": 3}), None, None, FrameworkRelease(torchtitan="2026-08-21")
    )
    assert said is not None and said["activation_checkpoint"] is None and "batch" not in said
    assert not said["recompute_expressible"] and "114151ad4" in said["note"]
    assert not any("activation_checkpoint" in line for line in said["lines"])
    # PP 1 the same
    one = torchtitan(_result([[{"SLCT": 4}]]), OP, (1, 2), FrameworkRelease(torchtitan="2026-03-23"))
    assert one is not None and one["lines"][-1] == 'config.activation_checkpoint.mode = "selective"'
    assert one["activation_checkpoint"] == {"mode": "selective"}


def test_the_balancer_offers_no_every_nth_setting_from_114151ad4():
    # NONE, SLCT, FULL with 4 layers a rank at most: v0.2.2 none, op, every 2nd, 3rd, 4th, full (6);
    # from 114151ad4 none, op, full (3)
    names = [(s.name, s.num_layers) for s in settings(("NONE", "SLCT", "FULL"), 4)]
    assert names == [("none", 0), ("selective", 0), ("every", 2), ("every", 3), ("every", 4), ("full", 0)]
    later = [(s.name, s.num_layers) for s in settings(("NONE", "SLCT", "FULL"), 4, every_nth=False)]
    assert later == [("none", 0), ("selective", 0), ("full", 0)]


def _pp2(release: str | None) -> Any:
    raw = _raw(release, {"mode": "full"})
    raw["models"][0]["spec"] = {**SMALL_GQA, "num_layers": 8}
    raw["parallel"]["pp"], raw["training"]["micro_batches"] = 2, 4
    return parse_run_config(raw)


def test_a_later_release_s_plan_is_one_setting_it_runs():
    plans = {}
    for release in (None, "2026-03-23"):
        run = _pp2(release)
        problem = run_problem(run, describe_run(run))
        assert problem.every_nth is (release is None)
        # 1260 MB a rank: the control, v0.2.2's plan is an every-N-th one here (NONE on all 4 layers a rank
        # does not fit, FULL on all is slower than on some)
        result = balance(dataclasses.replace(problem, memory_mb=1260.0), time_limit=60)
        add_torchtitan(result, run)
        plans[release] = result
    assert plans[None]["recompute_setting"]["name"] == "every"
    assert plans[None]["torchtitan"]["activation_checkpoint"]["selective_ac_option"].isdigit()
    later = plans["2026-03-23"]
    assert later["recompute_setting"]["name"] in ("none", "full")
    assert all(len([n for n in cell["options"].values() if n]) == 1 for row in later["cells"] for cell in row)
    assert later["torchtitan"]["format"] == "python" and later["torchtitan"]["recompute_expressible"]
