"""A torchtitan job TOML read back as a plan for `ppb check --plan`: the lines `ppb balance` prints
(`torchtitan_plan`) or a user's whole job TOML; for a release from 9810191bb, its Python config lines
(`torchtitan_python`, `ppb search -o`'s `.torchtitan.py`) or a whole config function, said in the same
sections (`torchtitan_pyconfig.plan_document`).

* the split: `[parallelism] module_fqns_per_model_part` (read as `ppb import torchtitan` reads it),
  one part a cell in model order, chunk by chunk (pipeline_module_split's "loop" style), else the split
  torchtitan cuts itself (`pipeline_parallel_layers_per_stage`, `torchtitan_import.torchtitan_split`);
* the recompute: `[activation_checkpoint]` as torchtitan applies it (activation_checkpoint.py
  `apply_ac`), block by block of a rank counted across its chunks (`Recompute.chunk_options`);
* the schedule: `pipeline_parallel_schedule` (1F1B when unstated, torchtitan's default) must price as
  the run config's;
* the batch: `pipeline_parallel_microbatch_size`, `training.local_batch_size` and
  `training.global_batch_size`, where stated, must be the run config's (b, m, dp), as the plan is
  checked at the run config's batch (train.py `Trainer.__init__`, pipeline_parallel.py `pipeline_llm`).
"""

from __future__ import annotations

from pathlib import Path

from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.torchtitan_import import (
    PARALLELISM_KEYS,
    SCHEDULES,
    _recompute,
    _stages_of_fqns,
    _Toml,
    schedule_of,
    torchtitan_split,
)
from ppb_core.balance.torchtitan_pyconfig import TOKEN_FIELDS, plan_document, python_release
from ppb_core.config.recompute import TorchtitanRecompute, resolve
from ppb_core.config.releases import CHANGES, TORCHTITAN
from ppb_core.config.run import RunConfig
from ppb_core.errors import InputError
from ppb_core.io import parse_toml, read_text
from ppb_core.model.switches import OPTIONS


def from_torchtitan(problem: BalanceInput, path: Path, run: RunConfig | None) -> Plan:
    """The plan a torchtitan job TOML at *path* states, for *problem* (the run config's); a `.py` file: the
    Python config lines of a release from 9810191bb (`ppb balance`'s, or a whole config function), read
    at the run config's `framework_release.torchtitan` (`torchtitan_pyconfig.plan_document`)."""
    where = str(path)
    if path.suffix == ".py":
        release = run.framework_release.of(TORCHTITAN) if run is not None else python_release(None)
        if not release.holds(CHANGES["torchtitan_config_registry"]):
            said = "Python config lines are torchtitan's from 9810191bb; the run config's framework_release.torchtitan"
            raise InputError(where, None, f"{said} is older (a job TOML)")
        document = plan_document(read_text(path), where, release)
        if not release.holds(CHANGES["torchtitan_token_batch"]):
            return _from_document(problem, document, where, run)
        try:
            return _from_document(problem, document, where, run)
        except InputError as err:  # the batch checked in sequences: named by the token field that set it
            if err.field not in TOKEN_FIELDS:
                raise
            said = f"{err.problem} (in {document['training'].get('seq_len', 2048)}-token sequences)"
            field = TOKEN_FIELDS[err.field]
            if err.field == "training.local_batch_size" and problem.stages > 1:  # b · m: b already matched
                field = "parallelism.num_pp_microbatches"
            raise InputError(where, field, said) from None
    document = parse_toml(read_text(path), where)
    return _from_document(problem, document, where, run)


def _from_document(problem: BalanceInput, document: dict, where: str, run: RunConfig | None) -> Plan:
    """`from_torchtitan` of the job's sections."""
    toml = _Toml(document, where)
    parallelism = toml.table("parallelism")
    key = "parallelism.module_fqns_per_model_part"
    if "module_fqns_per_model_part" in parallelism:
        parts = _stages_of_fqns(parallelism["module_fqns_per_model_part"], problem.layers.nb_body_layers, where)
    elif len(problem.cells) == 1:  # PP 1: one part, every layer (ppb balance prints no split for it)
        parts = ["t" * problem.layers.nb_body_layers]
    else:
        # no module names: the split torchtitan cuts itself, as `ppb import torchtitan` reads it (a whole job TOML
        # with `pipeline_parallel_layers_per_stage`, which the import read, was refused here as "missing" names)
        full = {**PARALLELISM_KEYS, **parallelism}
        parts = torchtitan_split(toml, full, problem.layers.nb_body_layers, problem.stages)
        key = "parallelism.pipeline_parallel_layers_per_stage"
    if len(parts) != len(problem.cells):
        said = f"{len(parts)} parts; the run has {problem.stages} stages × {problem.chunks} chunks"
        raise InputError(where, key, said)
    degree = _stated(toml, parallelism, "parallelism", "pipeline_parallel_degree", problem.stages)
    if degree != problem.stages:
        raise InputError(where, "parallelism.pipeline_parallel_degree", f"{degree}; the run has {problem.stages}")
    _same_schedule(parallelism, problem, where)
    said = _recompute(toml, [])
    if run is not None:
        _same_degrees(toml, parallelism, run)
        _same_batch(toml, run, problem.micro_batches)
        if said.get("option") == "op" and run.training.recompute != TorchtitanRecompute(**said):
            # ppb's SLCT is the run's own selective switches: the op policy priced only when the run says it
            raise InputError(
                where,
                "activation_checkpoint.selective_ac_option",
                "op: the run config's training.recompute "
                "must be {mode: selective, option: op} for ppb to price torchtitan's op policy",
            )
    recompute = resolve(TorchtitanRecompute(**said))
    sizes = [part.count("t") for part in parts]
    counts = empty_counts(problem)
    remaining = [body.nb_layer for body in problem.layers.bodies]
    before = [0] * problem.stages  # a rank's blocks in its earlier chunks (apply_ac counts across them)
    body = 0
    for (v, s), size in zip(problem.cells, sizes, strict=True):
        for option in recompute.chunk_options(size, before[s]):
            if option not in problem.options:
                raise InputError(where, "activation_checkpoint.mode", f"needs {option}, which the descriptions lack")
            while remaining[body] == 0:
                body += 1
            counts[body][v][s][OPTIONS.index(option)] += 1
            remaining[body] -= 1
        before[s] += size
    return Plan(problem, freeze(counts))


def _same_schedule(parallelism: dict, problem: BalanceInput, where: str) -> None:
    """Refuse a schedule other than the one the plan is priced under: torchtitan runs the TOML's
    (job_config.py's default 1F1B when unstated; pipeline_parallel.py `pipeline_llm`), ppb's names
    as `ppb import torchtitan` maps them (LoopedBFS and InterleavedZeroBubble priced as interleaved), matched
    case-insensitively as torch's `get_schedule_class` matches them."""
    key = "parallelism.pipeline_parallel_schedule"
    named = schedule_of(parallelism.get("pipeline_parallel_schedule", "1F1B"), where)
    if SCHEDULES[named] != problem.schedule_name:
        said = "" if "pipeline_parallel_schedule" in parallelism else " (torchtitan's default, unstated)"
        raise InputError(
            where, key, f"{named}{said} runs {SCHEDULES[named]}; the run config prices {problem.schedule_name}"
        )


# [parallelism] degrees (job_config.py `Parallelism`, v0.2.2) and the run config's field each is
_DEGREES = (
    ("tensor_parallel_degree", "tp"),
    ("context_parallel_degree", "cp"),
    ("expert_parallel_degree", "ep"),
)


def _same_degrees(toml: _Toml, parallelism: dict, run: RunConfig) -> None:
    """Refuse a stated degree other than the run config's, as a Megatron script's `--tensor-model-parallel-size`
    is: a whole job TOML of tp 2 was checked at the run's tp 1 without a word. Where stated only (the lines
    `ppb balance` prints state none of them); the data-parallel degrees where both are, as their product."""
    par = run.parallel
    for key, name in _DEGREES:
        if key in parallelism and (value := toml.integer(parallelism, "parallelism", key)) != getattr(par, name):
            raise InputError(
                toml.where, f"parallelism.{key}", f"{value}; the run config has {name} {getattr(par, name)}"
            )
    shard, replicate = "data_parallel_shard_degree", "data_parallel_replicate_degree"
    if shard in parallelism and replicate in parallelism and parallelism[shard] != -1:
        product = toml.integer(parallelism, "parallelism", shard) * toml.integer(parallelism, "parallelism", replicate)
        if product != par.dp:
            raise InputError(
                toml.where,
                f"parallelism.{shard}",
                f"{parallelism[shard]} × {replicate} {parallelism[replicate]} = {product} data-parallel ranks; the "
                f"run config has dp {par.dp}",
            )


def _same_batch(toml: _Toml, run: RunConfig, micro_batches: int) -> None:
    """Refuse a stated batch other than the run config's b-sized micro-batches, m a step, on dp ranks. Without
    PP the m micro-batches are accumulation steps of `local_batch_size` b (train.py: global // (local · dp))
    and torchtitan reads no micro-batch size (`ppb search -o`'s PP 1 files say local b; until session 32 they
    were refused here for local b · m)."""
    b, dp = run.training.micro_batch_size, run.parallel.dp
    pipelined = run.parallel.pp > 1
    parallelism, training = toml.table("parallelism"), toml.table("training")
    micro_key = "pipeline_parallel_microbatch_size"
    if micro_key not in parallelism and not {"local_batch_size", "global_batch_size"} & set(training):
        return  # no batch stated: the lines of a plan, priced at the run config's
    # job_config.py's defaults for what is not stated: micro-batch 1, local 8, global -1 (local × dp)
    local = _stated(toml, training, "training", "local_batch_size", 8)
    micro = _stated(toml, parallelism, "parallelism", micro_key, 1) if pipelined else b
    stated = {
        f"parallelism.{micro_key}": (micro, b),
        "training.local_batch_size": (local, b * micro_batches if pipelined else b),
        "training.global_batch_size": (
            _stated(toml, training, "training", "global_batch_size", -1, least=-1),
            b * micro_batches * dp,
        ),
    }
    for key, (value, wanted) in stated.items():
        if value != wanted and not (key == "training.global_batch_size" and value == -1 and local * dp == wanted):
            raise InputError(
                toml.where,
                key,
                f"{value}; the run config prices {micro_batches} micro-batches of {b} on dp {dp} "
                f"(micro-batch {b}, local {b * micro_batches if pipelined else b}, global {b * micro_batches * dp})",
            )


def _stated(toml: _Toml, table: dict, section: str, key: str, default: int, least: int = 1) -> int:
    """A TOML integer where stated (one line naming it otherwise: a string, float or bool is none, as
    JobConfig's int fields take none), torchtitan's default where not."""
    return toml.integer(table, section, key, least) if key in table else default
