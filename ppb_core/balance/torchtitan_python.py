"""The Python config lines torchtitan from 9810191bb takes for a balance plan's split, batch and recompute.

From 9810191bb (2026-02-23, #2386) torchtitan reads no job TOML: a job is a function returning a
`Trainer.Config` (torchtitan/trainer.py), named by `--module` and `--config`; torchtitan's own
config/README.md at b5bcd76c6 says to derive one by assigning fields on the config another returns
(`config = base(); config.parallelism.context_parallel_degree = 4; return config`), the CLI flags
being frozen. So ppb prints assignments on `config` in torchtitan's field names, as each release
names them (`ppb_core.config.releases`):

* the split, `config.parallelism` (config/configs.py `ParallelismConfig`): `pipeline_parallel_degree`,
  `pipeline_parallel_schedule`, `module_fqns_per_model_part` (the names of pipeline_parallel.py
  `_generate_llm_fqn_per_model_part`: the output projection `output`, `lm_head` from 786e26f8e,
  2026-04-27, `torchtitan_lm_head`) and `pipeline_parallel_layers_per_stage = None`, which sets the
  stages itself when stated (`pipeline_llm`, before 85c549b93 read even beside the parts);
* the batch: before 73aed7f6c `parallelism.pipeline_parallel_microbatch_size` = b and
  `training.local_batch_size` = b·m, `training.global_batch_size` = b·m·dp (as the TOML says it);
  from 73aed7f6c (2026-08-20, #4121, `torchtitan_token_batch`) tokens, with `training.max_context_length` s
  (seq_len's successor: a micro-batch's tokens are b sequences only at the plan's s): the PR's own table maps
  local_batch_size to `training.num_tokens_per_microbatch_per_dp_rank` (a PP micro-batch's tokens on
  one data-parallel rank: b·s), pipeline_parallel_microbatch_size to `parallelism.num_pp_microbatches`
  (m) and global_batch_size to `training.num_tokens_per_train_step` (b·s·m·dp: tokens per microbatch ×
  PP micro-batches × dp × accumulation steps, one step under PP); at PP 1 the m micro-batches are
  accumulation steps, so the step is b·s·m·dp as well;
* the recompute: before c5d93d109 `config.activation_checkpoint` is an `ActivationCheckpointConfig`
  whose `mode` (and, before 114151ad4, `selective_ac_option`) are assigned as the TOML keys; from
  c5d93d109 (2026-06-15, #3674, `torchtitan_ac_policy_classes`) the field's type is the policy:
  `SelectiveAC.Config()` (the op policy), `FullAC.Config()`, or None for none
  (distributed/activation_checkpoint.py `ActivationCheckpointingConfig`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ppb_core.config.run import FrameworkRelease

# distributed/activation_checkpoint.py from c5d93d109: the policy class of each mode (none: the field None)
AC_MODULE = "torchtitan.distributed.activation_checkpoint"
AC_CLASSES = {"selective": "SelectiveAC", "full": "FullAC"}
HEAD_LINE = "# on the Trainer.Config your config function returns (config = your_base(); ...; return config)"


def output_module(release: FrameworkRelease) -> str:
    """The output projection's module name: `lm_head` from 786e26f8e, `output` before."""
    return "lm_head" if release.holds("torchtitan_lm_head") else "output"


def batch_fields(
    micro_batch_size: int, micro_batches: int, dp: int, seq_length: int | None, release: FrameworkRelease
) -> dict[str, tuple[str, int]]:
    """torchtitan's batch fields for b-sized micro-batches of s tokens, m a step, on dp ranks, as *release* names
    them: {name: (config section, value)}; from 73aed7f6c the token fields need *seq_length* (none without it)."""
    b, m = micro_batch_size, micro_batches
    if not release.holds("torchtitan_token_batch"):
        return {
            "pipeline_parallel_microbatch_size": ("parallelism", b),
            "local_batch_size": ("training", b * m),
            "global_batch_size": ("training", b * m * dp),
        }
    if seq_length is None:
        return {}
    return {
        "num_pp_microbatches": ("parallelism", m),
        "max_context_length": ("training", seq_length),
        "num_tokens_per_microbatch_per_dp_rank": ("training", b * seq_length),
        "num_tokens_per_train_step": ("training", b * seq_length * m * dp),
    }


def ac_lines(keys: Mapping[str, str], release: FrameworkRelease) -> list[str]:
    """The assignments of the `[activation_checkpoint]` *keys* (mode, and selective_ac_option where the release
    has it) as *release*'s config says them; from c5d93d109 an import line and the policy object."""
    if not release.holds("torchtitan_ac_policy_classes"):
        return [f"config.activation_checkpoint.{key} = {json.dumps(value)}" for key, value in keys.items()]
    mode = keys["mode"]
    if mode == "none":
        return ["config.activation_checkpoint = None"]
    name = AC_CLASSES[mode]
    return [f"from {AC_MODULE} import {name}", f"config.activation_checkpoint = {name}.Config()"]


def pipeline_lines(
    stages: int, schedule: str, fqns: list[list[str]], batch: Mapping[str, tuple[str, int]]
) -> list[str]:
    """`config.parallelism`'s split (and the batch's pipeline field) for a PP > 1 plan."""
    return [
        f"config.parallelism.pipeline_parallel_degree = {stages}",
        f"config.parallelism.pipeline_parallel_schedule = {json.dumps(schedule)}",
        *[f"config.parallelism.{key} = {value}" for key, (section, value) in batch.items() if section == "parallelism"],
        f"config.parallelism.module_fqns_per_model_part = {json.dumps(fqns)}",
        "config.parallelism.pipeline_parallel_layers_per_stage = None  # the parts above set the stages",
    ]


def training_lines(batch: Mapping[str, tuple[str, int]]) -> list[str]:
    """`config.training`'s batch fields."""
    return [f"config.training.{key} = {value}" for key, (section, value) in batch.items() if section == "training"]


def config_lines(
    release: FrameworkRelease,
    ac: Mapping[str, str] | None,
    pipeline: tuple[int, str, list[list[str]]] | None = None,
    batch: Mapping[str, tuple[str, int]] | None = None,
) -> list[str]:
    """The lines a user pastes into the config function: the split (*pipeline*: stages, torchtitan's schedule
    name, the module names per part; None at PP 1), the recompute (*ac*, the TOML keys; None: not said) and
    the batch (`batch_fields`), imports first."""
    body: list[str] = []
    if pipeline is not None:
        body += pipeline_lines(*pipeline, batch or {})
    said = ac_lines(ac, release) if ac is not None else []
    imports = [line for line in said if line.startswith("from ")]
    body += [line for line in said if not line.startswith("from ")]
    if pipeline is not None:
        body += training_lines(batch or {})
    return [*imports, HEAD_LINE, *body]


def python_fqns(fqns: list[list[str]], release: FrameworkRelease) -> list[list[str]]:
    """v0.2.2's module names per part with the output projection as *release* names it."""
    last = output_module(release)
    return [[last if name == "output" else name for name in part] for part in fqns]


def degree_lines(degrees: Mapping[str, int], release: FrameworkRelease) -> list[str]:
    """`config.parallelism`'s degrees (ParallelismConfig's names), expert_tensor_parallel_degree only before
    c4b409af2 (2026-04-30, `torchtitan_no_etp`), which removed it."""
    gone = {"expert_tensor_parallel_degree"} if release.holds("torchtitan_no_etp") else set()
    return [f"config.parallelism.{name} = {value}" for name, value in degrees.items() if name not in gone]


def accumulation_lines(
    micro_batch_size: int, micro_batches: int, dp: int, seq_length: int, release: FrameworkRelease
) -> list[str]:
    """At PP 1 a step of m micro-batches is m accumulation steps: before 73aed7f6c `local_batch_size` b and
    `global_batch_size` b·m·dp (train.py: accumulation steps = global // (local·dp)); from it the same in
    tokens, b·s a forward and b·s·m·dp a step."""
    b, m = micro_batch_size, micro_batches
    if release.holds("torchtitan_token_batch"):
        return [
            f"config.training.max_context_length = {seq_length}",
            f"config.training.num_tokens_per_microbatch_per_dp_rank = {b * seq_length}",
            f"config.training.num_tokens_per_train_step = {b * seq_length * m * dp}",
        ]
    return [f"config.training.local_batch_size = {b}", f"config.training.global_batch_size = {b * m * dp}"]
