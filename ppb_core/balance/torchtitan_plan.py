"""The TOML lines torchtitan v0.2.2 (commit 73a0e697) takes for a balance plan's split and recompute.

* the split: `[parallelism] module_fqns_per_model_part` (torchtitan/config/job_config.py), one list
  of module names per stage in stage order, `tok_embeddings` on the first, `layers.N` for each body
  layer, `norm` and `output` on the last (the names of pipeline_parallel.py
  `generate_llm_fqn_per_model_part`). Looped schedules put stage `rank + chunk·P` on each rank
  (pipeline_module_split `_get_stage_indices`, style "loop"), so stage order is ppb's model order,
  chunk by chunk. V schedules (ZBVZeroBubble, DualPipeV) place stages as a V: not said here.
* the recompute: `[activation_checkpoint]` (torchtitan/distributed/activation_checkpoint.py
  `apply_ac`): the setting the balancer solved the plan under (`torchtitan_settings`: none, full,
  selective `op`, or selective N, every N-th block of a rank), so the lines run as printed. A plan
  solved without it (a result from elsewhere) is read from its options: one mode for every block,
  or the split alone with why.
* the batch the plan was priced at (train.py `Trainer.__init__`, pipeline_parallel.py `pipeline_llm`):
  `[parallelism] pipeline_parallel_microbatch_size` = the micro-batch b, and a `[training]` table with
  `local_batch_size` = b·m (m micro-batches a step) and `global_batch_size` = b·m·dp (dp = dp_shard ·
  dp_replicate: one gradient-accumulation step, one pipeline flush). Without them torchtitan takes
  its defaults (b 1, local 8) or the user's own `[training]`, a plan other than the one priced. TOML
  takes one `[training]` table a file, so a comment above it says to merge the keys into the user's;
  pasted beside another `[training]` the file is refused by the TOML parser, never read silently.
  These are v0.2.2's names (since 8570415c3, 2025-06-05; before it `training.batch_size` and
  `experimental.pipeline_parallel_microbatches`, with other split keys too).

* a comment after the split: leave `pipeline_parallel_layers_per_stage` out (`LAYERS_PER_STAGE_OUT`), as
  torchtitan checks the stage count it gives against the schedule first.

`ppb import torchtitan` (`torchtitan_import`) reads these lines back to the same split.

A run stating a torchtitan release from 9810191bb (2026-02-23) gets the same split, recompute and batch as
Python assignments on its `Trainer.Config` (`torchtitan_python`; `format` python), torchtitan reading no job
TOML from then; from 114151ad4 (2026-03-23) the op policy is `mode = "selective"` with no option key, and an
every-N-th plan's recompute is not expressible (`NO_EVERY`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ppb_core.balance.torchtitan_python import batch_fields, config_lines, python_fqns
from ppb_core.balance.torchtitan_settings import op_policy, toml_keys
from ppb_core.config.run import FrameworkRelease, RunConfig

# torchtitan v0.2.2 distributed/pipeline_parallel.py `pipeline_llm`: a job's `pipeline_parallel_layers_per_stage` K
# sets ceil((layers + 2) / K) stages, refused unless a multiple of the degree with one a rank for 1F1B and GPipe
# and two or more for Interleaved1F1B, before `module_fqns_per_model_part` is read (which then sets the parts):
# an imported job's K = 9 (4 stages on PP 2) beside a plan's 1F1B lines raised ValueError. The lines say to drop it.
LAYERS_PER_STAGE_OUT = (
    "# leave pipeline_parallel_layers_per_stage out of your [parallelism]: torchtitan checks the stages it gives "
    "against the schedule before it reads the parts above"
)

# torchtitan from 114151ad4 (2026-03-23, #2357; releases `torchtitan_op_sac_only`): no every-N-th-block setting
NO_EVERY = (
    "torchtitan {release} has no every-N-th-block setting (selective_ac_option gone in 114151ad4, 2026-03-23): "
    "the plan's recompute is not expressible, only the split is"
)

# ppb's schedule (`problem.schedule_name`) → pipeline_parallel_schedule (torch.distributed.pipelining's names)
SCHEDULE_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}


def module_fqns(layers_per_stage: Sequence[int]) -> list[list[str]]:
    """`module_fqns_per_model_part` for these body layers per stage (stage order)."""
    parts, placed = [], 0
    last = len(layers_per_stage) - 1
    for index, count in enumerate(layers_per_stage):
        names = ["tok_embeddings"] if index == 0 else []
        names += [f"layers.{placed + n}" for n in range(count)]
        placed += count
        if index == last:
            names += ["norm", "output"]
        parts.append(names)
    return parts


def activation_checkpoint(
    used: set[str], recompute: Any, setting: Mapping[str, Any] | None = None, release: FrameworkRelease | None = None
) -> tuple[dict[str, str] | None, str | None]:
    """The `[activation_checkpoint]` keys for a plan running the options *used* (under the balancer's
    torchtitan *setting*, when given: `recompute_setting`) as the run's torchtitan *release* names them
    (unset: v0.2.2), or None and why not."""
    release = release or FrameworkRelease()
    op_only = release.holds("torchtitan_op_sac_only")
    if setting is not None:
        keys = toml_keys(setting["name"], setting["num_layers"], op_only)
        return keys, None if keys is not None else NO_EVERY.format(release=release.torchtitan)
    if used <= {"NONE"}:
        return {"mode": "none"}, None
    if used == {"FULL"}:
        return {"mode": "full"}, None
    if used == {"SLCT"}:
        if op_policy(recompute):
            return toml_keys("selective", 0, op_only), None
        return None, (
            "SLCT here is ppb's switch set; write training.recompute in torchtitan's words "
            "({mode: selective, option: op}) to plan with the policy torchtitan takes"
        )
    return None, (
        f"the plan uses {', '.join(sorted(used))} on different layers, not as one of torchtitan's "
        "[activation_checkpoint] settings: the recompute is not expressible, only the split is"
    )


def batch_keys(micro_batch_size: int, micro_batches: int, dp: int) -> dict[str, int]:
    """torchtitan's batch keys for b-sized micro-batches, m of them a step, on dp data-parallel ranks."""
    local = micro_batch_size * micro_batches
    return {
        "pipeline_parallel_microbatch_size": micro_batch_size,
        "local_batch_size": local,
        "global_batch_size": local * dp,
    }


def torchtitan(
    result: Mapping[str, Any],
    recompute: Any,
    batch: tuple[int, int] | None = None,
    release: FrameworkRelease | None = None,
    seq_length: int | None = None,
) -> dict[str, Any] | None:
    """The `torchtitan` section of a balance result (None unless the problem is a torchtitan run's; at
    PP 1 its `[activation_checkpoint]` only), from the result's `input` and `cells`; *recompute* is the
    run's `training.recompute`, *batch* its (micro-batch size, data-parallel degree): without it the
    lines say no batch; *release* its `framework_release` (unset: v0.2.2): a release reading no TOML
    gets its Python config lines instead (`torchtitan_python`, `format` python), whose token batch
    (from 73aed7f6c) needs the run's *seq_length*."""
    release = release or FrameworkRelease()
    said = _toml(result, recompute, batch, release)
    if said is None or not release.holds("torchtitan_config_registry"):
        return said
    return _python(result, said, batch, release, seq_length)


def _python(
    result: Mapping[str, Any],
    said: dict[str, Any],
    batch: tuple[int, int] | None,
    release: FrameworkRelease,
    seq_length: int | None,
) -> dict[str, Any]:
    """`torchtitan`'s section as a release reading Python configs (from 9810191bb) says it: the TOML's
    split, recompute and batch as assignments on `config` (`torchtitan_python.config_lines`)."""
    note = said.get("note")
    if "module_fqns_per_model_part" not in said:  # a split no config says (V placement, GPipe chunks, MTP)
        return {**said, "format": "python", "note": (note or "").replace("torchtitan's TOML", "torchtitan's config")}
    given = result["input"]
    fqns = said["module_fqns_per_model_part"]
    fqns = None if fqns is None else python_fqns(fqns, release)
    fields = {} if batch is None or fqns is None else batch_fields(*_sized(batch, given), seq_length, release)
    pipeline = None if fqns is None else (given["stages"], SCHEDULE_NAMES[given["schedule"]], fqns)
    ac = said["activation_checkpoint"]
    out: dict[str, Any] = {
        "format": "python",
        "lines": None if ac is None and pipeline is None else config_lines(release, ac, pipeline, fields),
        "module_fqns_per_model_part": fqns,
        "activation_checkpoint": ac,
        "recompute_expressible": said["recompute_expressible"],
    }
    if fields:
        out["batch"] = {name: value for name, (_, value) in fields.items()}
    if note is not None:
        out["note"] = note
    return out


def _sized(batch: tuple[int, int], given: Mapping[str, Any]) -> tuple[int, int, int]:
    """(micro-batch size, micro-batches a step, data-parallel degree)."""
    return batch[0], given["micro_batches"], batch[1]


def _toml(
    result: Mapping[str, Any], recompute: Any, batch: tuple[int, int] | None, release: FrameworkRelease
) -> dict[str, Any] | None:
    """`torchtitan`'s section as v0.2.2's job TOML says it (the keys as *release* names them)."""
    given = result["input"]
    stages, chunks, schedule = given["stages"], given["interleave"], given["schedule"]
    if given.get("framework") != "torchtitan" or "cells" not in result:
        return None
    if stages < 2:
        return _unsplit(result, recompute, release)
    if schedule not in SCHEDULE_NAMES:
        return {"lines": None, "note": f"the {schedule} schedule's V placement is not said in torchtitan's TOML"}
    if schedule == "gpipe" and chunks > 1:  # torchtitan's GPipe runs one stage a rank
        return {"lines": None, "note": f"torchtitan's GPipe runs one stage a rank, not {chunks}"}
    if given.get("mtp_layers"):
        return {"lines": None, "note": "torchtitan v0.2.2's decoder has no MTP layers to place"}
    grid = result["cells"]  # [chunk][stage]; model order is chunk by chunk (loop style)
    ordered = [grid[v][s] for v in range(chunks) for s in range(stages)]
    layers = [sum(cell["options"].values()) for cell in ordered]
    used = {option for cell in ordered for option, n in cell["options"].items() if n}
    fqns = module_fqns(layers)
    ac, why = activation_checkpoint(used, recompute, result.get("recompute_setting"), release)
    keys = None if batch is None else batch_keys(batch[0], given["micro_batches"], batch[1])
    lines = [
        "[parallelism]",
        f"pipeline_parallel_degree = {stages}",
        f'pipeline_parallel_schedule = "{SCHEDULE_NAMES[schedule]}"',
        *([] if keys is None else [f"pipeline_parallel_microbatch_size = {keys['pipeline_parallel_microbatch_size']}"]),
        f"module_fqns_per_model_part = {json.dumps(fqns)}",
        LAYERS_PER_STAGE_OUT,
    ]
    if ac is not None:
        lines += ["[activation_checkpoint]", *(f'{key} = "{value}"' for key, value in ac.items())]
    if keys is not None:
        lines += [
            "# the batch the plan was priced at: merge these keys into your own [training] table",
            "[training]",
            f"local_batch_size = {keys['local_batch_size']}",
            f"global_batch_size = {keys['global_batch_size']}",
        ]
    out: dict[str, Any] = {
        "lines": lines,
        "module_fqns_per_model_part": fqns,
        "activation_checkpoint": ac,
        "recompute_expressible": ac is not None,
    }
    if keys is not None:
        out["batch"] = keys
    if why is not None:
        out["note"] = why
    return out


def _unsplit(result: Mapping[str, Any], recompute: Any, release: FrameworkRelease) -> dict[str, Any]:
    """PP 1: no split to say, only the plan's `[activation_checkpoint]`, which may not be the run's (a
    plan without recompute under a config that checkpoints: pasted nowhere, the config's own runs)."""
    used = {option for row in result["cells"] for cell in row for option, n in cell["options"].items() if n}
    ac, why = activation_checkpoint(used, recompute, result.get("recompute_setting"), release)
    out: dict[str, Any] = {
        "lines": None
        if ac is None
        else ["[activation_checkpoint]", *(f'{key} = "{value}"' for key, value in ac.items())],
        "module_fqns_per_model_part": None,
        "activation_checkpoint": ac,
        "recompute_expressible": ac is not None,
    }
    if why is not None:
        out["note"] = why
    return out


def add_torchtitan(result: dict[str, Any], run: RunConfig) -> None:
    """The `torchtitan` section into a balance result of a torchtitan *run* (`ppb balance`, `ppb check`'s
    optimum, the chain's plan), beside `megatron`; nothing for any other."""
    batch = (run.training.micro_batch_size, run.parallel.dp)
    said = torchtitan(result, run.training.recompute, batch, run.framework_release, run.training.seq_length)
    if said is not None:
        result["torchtitan"] = said


def torchtitan_lines(said: Mapping[str, Any]) -> list[str]:
    """What `ppb balance` prints of the section: what runs as it stands first."""
    lines: list[str] = []
    if said.get("lines"):
        what = "torchtitan config (Python)" if said.get("format") == "python" else "torchtitan job TOML"
        if said.get("recompute_expressible"):
            lines.append(f"{what}:")
        else:  # the split under the run's own [activation_checkpoint] is not the plan and need not fit
            lines.append(f"{what}, the plan's split only, NOT runnable alone (it leaves out the plan's recompute):")
        lines += [f"  {line}" for line in said["lines"]]
    if said.get("note"):
        lines.append(f"  ({said['note']})")
    return lines
