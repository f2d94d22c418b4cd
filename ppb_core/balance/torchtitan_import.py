"""A run config from a torchtitan job TOML (`torchtitan/train.py --job.config_file JOB.toml`), read as
torchtitan v0.2.2 (commit 73a0e697) reads it: torchtitan/config/job_config.py `JobConfig` and its
sections' defaults where the TOML leaves a key out.

* the model: `[model] name` (llama3, deepseek_v3, qwen3) and `flavor` (`torchtitan_flavors`);
* parallelism (`[parallelism]`, torchtitan/distributed/parallel_dims.py `ParallelDims`): the world
  is dp_replicate × dp_shard × CP × TP × PP, `data_parallel_shard_degree = -1` taking the ranks
  left; FSDP2 where dp_shard or CP > 1 (`fsdp_enabled`), DDP where only dp_replicate is, HSDP
  (both) priced as FSDP over all data-parallel ranks; TP always with sequence parallelism
  (llama3/infra/parallelize.py `apply_tp`); EP and ETP (1 or TP);
* the pipeline (torchtitan/distributed/pipeline_parallel.py `pipeline_llm`): the schedule, one stage
  a rank for single-stage schedules and two for looped ones unless
  `pipeline_parallel_layers_per_stage` says, the split of `generate_llm_fqn_per_model_part` (the
  embedding and the output counted as `pipeline_parallel_first/last_stage_less_layers` layers) or
  `module_fqns_per_model_part`, written as a layout;
* the batch (train.py `Trainer.__init__`): `local_batch_size` per data-parallel rank,
  `global_batch_size` (default local × DP) in gradient-accumulation steps; under PP,
  `local_batch_size / pipeline_parallel_microbatch_size` micro-batches a step;
* `mixed_precision_param` (bf16 or fp32), the optimizer (Adam, AdamW, its implementation), `[activation_checkpoint]`
  in torchtitan's words, `[compile]` of the model, and the float8 linear converter.

Each key that bears on memory or time and ppb does not model is said in one line (`notes`); a key
torchtitan does not have, a value it refuses, or a contradiction is refused in one line naming the
TOML key. Sections with no bearing (job, metrics, checkpoint, lr_scheduler, validation, ...) are
read past.
"""

from __future__ import annotations

from typing import Any

from ppb_core.balance.megatron_import import Imported
from ppb_core.balance.torchtitan_flavors import MODELS, model_spec
from ppb_core.config.run import RunConfig, parse_run_config
from ppb_core.errors import InputError, did_you_mean, shown
from ppb_core.io import parse_toml

RELEASE = "torchtitan v0.2.2"
# The TOML key that sets each run-config field a check may refuse.
FIELD_KEYS = {
    "training.seq_length": "training.seq_len",
    # every model's `update_from_config` sets max_seq_len = seq_len (torchtitan_flavors.model_spec)
    "models.0.spec.max_position_embeddings": "training.seq_len",
    "training.micro_batch_size": "training.local_batch_size",
    "training.micro_batches": "training.global_batch_size",
    "training.recompute": "activation_checkpoint",
    "parallel.dp": "parallelism.data_parallel_shard_degree",
    # zero 0 is replicate: the TOML's data_parallel_replicate_degree over a shard degree of 1
    "parallel.zero": "parallelism.data_parallel_replicate_degree",
    "parallel.tp": "parallelism.tensor_parallel_degree",
    "parallel.pp": "parallelism.pipeline_parallel_degree",
    "parallel.cp": "parallelism.context_parallel_degree",
    "parallel.ep": "parallelism.expert_parallel_degree",
    "parallel.etp": "parallelism.expert_tensor_parallel_degree",
    "parallel.layout": "parallelism.pipeline_parallel_layers_per_stage",
    "parallel.vpp": "parallelism.pipeline_parallel_layers_per_stage",
    "parallel.schedule": "parallelism.pipeline_parallel_schedule",
    "timing.matmul_dtype": "model.converters",
    "timing.torch_compile": "compile.enable",
    "timing.compile_loss": "compile.components",
    "timing.cp_rotate_method": "parallelism.context_parallel_rotate_method",
    "timing.overlap": "parallelism.enable_async_tensor_parallel",
    "device": "--device",  # the command's option, not a TOML key
}
# JobConfig's sections ppb reads past: no bearing on an iteration's memory or time.
NO_BEARING = frozenset(
    {"job", "profiling", "metrics", "lr_scheduler", "checkpoint", "validation", "comm", "memory_estimation"}
)
# job_config.py's keys (v0.2.2) of the sections ppb reads past or only glances at: a key outside them
# is a typo torchtitan refuses (manager.py _dict_to_dataclass), whatever its bearing.
OTHER_KEYS = {
    "job": {"config_file", "dump_folder", "description", "print_config", "save_config_file", "custom_config_module"},
    "profiling": {"enable_profiling", "save_traces_folder", "profile_freq", "profiler_active", "profiler_warmup",
                  "enable_memory_snapshot", "save_memory_snapshot_folder"},
    "metrics": {"log_freq", "enable_tensorboard", "disable_color_printing", "save_tb_folder", "save_for_all_ranks",
                "enable_wandb"},
    "lr_scheduler": {"warmup_steps", "total_steps", "decay_ratio", "decay_type", "min_lr_factor"},
    "checkpoint": {"enable", "enable_ft_dataloader_checkpoints", "folder", "interval", "initial_load_path",
                   "initial_load_model_only", "initial_load_in_hf", "initial_load_in_hf_quantized",
                   "last_save_model_only", "last_save_in_hf", "export_dtype", "async_mode", "keep_latest_k",
                   "load_step", "exclude_from_loading", "enable_first_step_checkpoint", "create_seed_checkpoint",
                   "load_only"},
    "validation": {"enable", "dataset", "dataset_path", "local_batch_size", "seq_len", "freq", "steps", "dataloader"},
    "comm": {"init_timeout_seconds", "train_timeout_seconds", "trace_buf_size", "save_traces_folder",
             "save_traces_file_prefix", "mode"},
    "memory_estimation": {"enable", "disable_fake_mode"},
    "fault_tolerance": {"enable", "process_group", "process_group_timeout_ms", "replica_id", "group_size",
                        "min_replica_size", "semi_sync_method"},
    "experimental": {"custom_import", "custom_args_module"},
    "debug": {"seed", "deterministic", "deterministic_warn_only", "moe_force_load_balance"},
}  # fmt: skip
# job_config.py's keys of the sections ppb reads, with their defaults (v0.2.2).
MODEL_KEYS = {"name": "llama3", "flavor": "debugmodel", "hf_assets_path": None, "tokenizer_path": None,
              "converters": [], "print_after_conversion": False}  # fmt: skip
TRAINING_KEYS = {"dataset": None, "dataset_path": None, "local_batch_size": 8, "global_batch_size": -1,
                 "seq_len": 2048, "max_norm": None, "steps": None, "enable_cpu_offload": False,
                 "dtype": "float32", "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32",
                 "gc_freq": None, "gc_debug": False, "dataloader": None}  # fmt: skip
PARALLELISM_KEYS = {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": -1,
                    "fsdp_reshard_after_forward": "default", "tensor_parallel_degree": 1,
                    "disable_loss_parallel": False, "enable_async_tensor_parallel": False,
                    "pipeline_parallel_degree": 1, "module_fqns_per_model_part": None,
                    "pipeline_parallel_first_stage_less_layers": 1, "pipeline_parallel_last_stage_less_layers": 1,
                    "pipeline_parallel_layers_per_stage": None, "pipeline_parallel_schedule": "1F1B",
                    "pipeline_parallel_schedule_csv": "", "pipeline_parallel_microbatch_size": 1,
                    "pipeline_parallel_expert_parallel_overlap": True, "context_parallel_degree": 1,
                    "context_parallel_load_balancer": "headtail", "context_parallel_rotate_method": "allgather",
                    "expert_parallel_degree": 1, "expert_tensor_parallel_degree": 1,
                    "expert_parallel_comm_backend": "standard"}  # fmt: skip
AC_KEYS = {"mode": "selective", "selective_ac_option": "2",
           "per_op_sac_force_recompute_mm_shapes_by_fqns": ["moe.router.gate"], "early_stop": False,
           "memory_budget": 0.5, "visualize_memory_budget_pareto": False, "preserve_rng_state": True,
           "determinism_check": "default", "debug": False}  # fmt: skip
OPTIMIZER_KEYS = {"name": "AdamW", "lr": None, "beta1": None, "beta2": None, "eps": None, "weight_decay": None,
                  "implementation": "fused", "early_step_in_backward": False}  # fmt: skip
COMPILE_KEYS = {"enable": False, "components": ["model", "loss"], "backend": "inductor"}
# pipeline_parallel.py: schedules of one stage a rank, and ppb's name of each schedule.
SINGLE_STAGE = ("1F1B", "GPipe")
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved", "LoopedBFS": "interleaved",
             "InterleavedZeroBubble": "interleaved", "ZBVZeroBubble": "dualpipev",
             "DualPipeV": "dualpipev"}  # fmt: skip
# The converters of v0.2.2 (components/quantization: `register_model_converter`), and v0.1.0's names
# of the linear ones, which v0.2.2's own llama3_405b.toml still writes (`converters = ["float8"]`).
CONVERTERS = ("quantize.linear.float8", "quantize.grouped_mm.float8", "quantize.linear.mx", "quantize.grouped_mm.mx")
OLD_CONVERTERS = {"float8": "quantize.linear.float8", "mx": "quantize.linear.mx"}


def schedule_of(value: Any, where: str) -> str:
    """The schedule *value* names, spelled as SCHEDULES spells it: torch.distributed.pipelining's
    `get_schedule_class` (schedules.py, which pipeline_parallel.py `pipeline_llm` calls) matches the
    name case-insensitively, so "interleaved1f1b" runs Interleaved1F1B."""
    key = "parallelism.pipeline_parallel_schedule"
    if not isinstance(value, str):
        raise InputError(where, key, f"{shown(value)} is not a string")
    named = {name.lower(): name for name in SCHEDULES}.get(value.lower())
    if named is None:
        raise InputError(where, key, f"{shown(value)} is none of {', '.join(SCHEDULES)}")
    return named


class _Toml:
    """A job TOML's sections, each key checked against JobConfig's and read with its default."""

    def __init__(self, document: dict[str, Any], where: str) -> None:
        self.document, self.where = document, where

    def section(self, name: str, keys: dict[str, Any]) -> dict[str, Any]:
        given = self.table(name)
        for key in given:
            if key not in keys:
                hint = did_you_mean(key, keys)
                raise InputError(self.where, f"{name}.{key}", f"is not a key of {RELEASE}'s [{name}]{hint}")
        return {**keys, **given}

    def table(self, *path: str) -> dict[str, Any]:
        """The nested table at *path* ({} where absent); a value that is not a table refused."""
        table: Any = self.document
        for depth, name in enumerate(path):
            table = table.get(name, {})
            if not isinstance(table, dict):
                raise InputError(self.where, ".".join(path[: depth + 1]), "is a TOML table in torchtitan's job config")
        return table

    def text(self, table: dict[str, Any], section: str, key: str) -> str:
        value = table[key]
        if not isinstance(value, str):
            raise InputError(self.where, f"{section}.{key}", f"{shown(value)} is not a string")
        return value

    def integer(self, table: dict[str, Any], section: str, key: str, least: int = 1) -> int:
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InputError(self.where, f"{section}.{key}", f"{shown(value)} is not an integer ≥ {least}")
        return value


def import_torchtitan(text: str, gpus: int | None, device: str, where: str = "<job toml>") -> Imported:
    """The run config of the torchtitan job *text* (a TOML) on *gpus* devices of the catalog's *device*
    (None: the product of the TOML's degrees, which then may not leave `data_parallel_shard_degree -1`)."""
    document = parse_toml(text, where)
    if not document:  # torchtitan would train its debugmodel on every default: not what a job file means
        raise InputError(where, None, "holds no keys: an empty torchtitan job")
    return import_document(document, gpus, device, where)


def import_document(
    document: dict[str, Any], gpus: int | None, device: str, where: str, notes: list[str] | None = None
) -> Imported:
    """`import_torchtitan` of a job's sections as the TOML parser gives them (`torchtitan_pyconfig` says a
    Python config function in them); *notes* the lines said before."""
    toml = _Toml(document, where)
    notes = [] if notes is None else notes
    job = document.get("job")
    custom = isinstance(job, dict) and bool(job.get("custom_config_module"))
    for section in document:
        if section in NO_BEARING or section in _READ:
            continue
        # manager.py ConfigManager._dict_to_dataclass refuses a name JobConfig lacks ("Invalid field
        # names"), unless job.custom_config_module merges in a dataclass that has it
        if not custom:
            raise InputError(
                where,
                section,
                f"is not a section of {RELEASE}'s job config{did_you_mean(section, [*_READ, *NO_BEARING])} "
                "(a custom module's: set job.custom_config_module)",
            )
        notes.append(f"[{section}]: job.custom_config_module's section, not read by ppb (priced as if absent)")
    for section, keys in OTHER_KEYS.items():
        for key in toml.table(section):
            if key not in keys and not custom:  # a custom module may add keys to a section too
                hint = did_you_mean(key, keys)
                raise InputError(where, f"{section}.{key}", f"is not a key of {RELEASE}'s [{section}]{hint}")
    model = toml.section("model", MODEL_KEYS)
    training = toml.section("training", TRAINING_KEYS)
    seq = toml.integer(training, "training", "seq_len")
    spec = _model(toml, model, seq, notes)
    parallel, dp = _parallel(toml, spec, gpus, notes)
    rotate = parallel.pop("cp_rotate_method", None)  # a timing field (TimingOptions.cp_rotate_method)
    async_tp = parallel.pop("async_tp", False)
    raw: dict[str, Any] = {
        "name": "torchtitan-job",
        "framework": "torchtitan",
        "models": [{"name": "llm", "spec": spec}],
        "parallel": parallel,
        "training": _training(toml, training, parallel, dp, seq, notes),
        # held back for the CUDA context and NCCL's buffers of this layout's communicators, not 0
        # (`ppb_core.config.runtime_reserve`)
        "device": {"name": device, "reserved_mb": "auto"},
    }
    timing = _timing(toml, model, bool(spec.get("num_experts")), notes)
    if rotate is not None:
        timing["cp_rotate_method"] = rotate
    if async_tp:
        if not timing.get("torch_compile"):  # maybe_enable_async_tp raises RuntimeError
            said = "true needs the model compiled ([compile] enable, 'model' in components), as torchtitan asserts"
            raise InputError(toml.where, "parallelism.enable_async_tensor_parallel", said)
        timing["overlap"] = {"tp": 1.0}
    if timing:
        raw["timing"] = timing
    _other(toml, notes)
    return Imported(raw, notes)


# torchtitan v0.2.2's models (torchtitan/models/__init__.py `_supported_models`) and experiments
# (torchtitan/experiments/__init__.py `_supported_experiments`): a name among them is no misspelling of one ppb imports
TORCHTITAN_MODELS = frozenset(
    {"deepseek_v3", "flux", "gpt_oss", "llama3", "llama3_ft", "llama4", "qwen3", "simple_fsdp.llama3",
     "simple_fsdp.deepseek_v3", "vlm", "compiler_toolkit.deepseek_v3", "compiler_toolkit.llama3",
     "transformers_modeling_backend", "autoparallel.llama3", "autoparallel.deepseek_v3",
     "autoparallel.local_map_deepseek_v3"}
)  # fmt: skip

_READ = ("model", "training", "parallelism", "activation_checkpoint", "optimizer", "compile", "quantize")
_READ += ("fault_tolerance", "experimental", "debug", "float8", "mx")  # v0.1.0's [float8], [mx]


def _model(toml: _Toml, model: dict[str, Any], seq: int, notes: list[str]) -> dict[str, Any]:
    where = toml.where
    name, flavor = toml.text(model, "model", "name"), toml.text(model, "model", "flavor")
    if name in TORCHTITAN_MODELS and name not in MODELS:  # a real model: no "did you mean llama3?" for llama4
        said = f"{shown(name)} is a torchtitan model ppb does not price: ppb imports {', '.join(MODELS)}"
        raise InputError(where, "model.name", said)
    if name not in MODELS:
        raise InputError(
            where, "model.name", f"{shown(name)}: ppb imports {', '.join(MODELS)}{did_you_mean(name, MODELS)}"
        )
    if flavor not in MODELS[name]:
        raise InputError(
            where,
            "model.flavor",
            f"{shown(flavor)} is none of {name}'s: {', '.join(MODELS[name])}{did_you_mean(flavor, MODELS[name])}",
        )
    spec, attn = model_spec(name, flavor, seq)
    if attn != "sdpa":  # llama3/model/model.py: FlexAttention or varlen, block-causal over documents
        notes.append(f"model.flavor {flavor}: {attn} attention with a block-causal mask, priced as causal flash")
    return spec


def _parallel(toml: _Toml, spec: dict[str, Any], gpus: int | None, notes: list[str]) -> tuple[dict[str, Any], int]:
    """ParallelDims (parallel_dims.py `_validate`): the degrees multiply to the world size."""
    par = toml.section("parallelism", PARALLELISM_KEYS)
    where, key = toml.where, "parallelism"
    replicate = toml.integer(par, key, "data_parallel_replicate_degree")
    tp = toml.integer(par, key, "tensor_parallel_degree")
    pp = toml.integer(par, key, "pipeline_parallel_degree")
    cp = toml.integer(par, key, "context_parallel_degree")
    ep = toml.integer(par, key, "expert_parallel_degree")
    etp = toml.integer(par, key, "expert_tensor_parallel_degree")
    shard = par["data_parallel_shard_degree"]
    if shard != -1:
        shard = toml.integer(par, key, "data_parallel_shard_degree")
    others = replicate * tp * pp * cp
    if shard == -1:
        if gpus is None:
            raise InputError(where, "parallelism.data_parallel_shard_degree", "-1 takes the ranks left: give --gpus N")
        if gpus % others:
            raise InputError(
                where,
                "parallelism.data_parallel_shard_degree",
                f"-1: {gpus} GPUs do not divide by replicate·tp·pp·cp = {replicate}·{tp}·{pp}·{cp} = {others}",
            )
        shard = gpus // others
    world = shard * others
    if gpus is not None and world != gpus:
        raise InputError(where, "parallelism", f"the degrees multiply to {world}, not --gpus {gpus}")
    dp = replicate * shard
    parallel: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "world_size": world}
    if shard > 1 or cp > 1:  # parallel_dims.py fsdp_enabled: FSDP2 over dp_shard × cp, as ppb shards over dp·cp
        parallel |= {"fsdp": True, "zero": 3}
        if replicate > 1:  # HSDP: sharded over dp_shard × cp only, replicated across dp_replicate
            notes.append(f"parallelism.data_parallel_replicate_degree {replicate}: HSDP, priced as FSDP over dp {dp}")
    else:
        parallel["zero"] = 0  # DDP (replicate) or no data parallelism: nothing sharded
    if tp > 1:
        parallel["sequence_parallel"] = True
        if par["disable_loss_parallel"]:
            notes.append("parallelism.disable_loss_parallel: the output's logits gathered, not modelled")
        if par["enable_async_tensor_parallel"]:
            # distributed/tensor_parallel.py maybe_enable_async_tp (v0.2.2): Inductor's micro-pipelining,
            # priced as ppb's comm-GEMM overlap with the fused ops' copies (docs/timing.md, overlap.tp)
            parallel["async_tp"] = True  # moved to `timing.overlap` by import_torchtitan
    rotate = par["context_parallel_rotate_method"]
    if rotate not in ("allgather", "alltoall"):
        raise InputError(where, "parallelism.context_parallel_rotate_method", f"{shown(rotate)}: allgather or alltoall")
    if cp > 1 and rotate == "alltoall":  # distributed/utils.py create_context_parallel_ctx: set_rotate_method
        parallel["cp_rotate_method"] = rotate  # moved to `timing` by import_torchtitan
    _experts(toml, par, spec, parallel, ep, etp, tp, notes)
    _fsdp_reshard(par, pp, where, notes)
    if pp > 1:
        parallel |= _pipeline(toml, par, spec["num_layers"], pp, notes)
    return parallel, dp


def _experts(
    toml: _Toml,
    par: dict[str, Any],
    spec: dict[str, Any],
    parallel: dict[str, Any],
    ep: int,
    etp: int,
    tp: int,
    notes: list[str],
) -> None:
    if ep == 1:
        return
    if not spec.get("num_experts"):
        notes.append(f"parallelism.expert_parallel_degree {ep}: the model has no experts, read past")
        return
    if etp not in (1, tp):  # job_config.py: "etp is either 1 or is the same as tp"
        raise InputError(
            toml.where, "parallelism.expert_tensor_parallel_degree", f"{etp}: torchtitan takes 1 or TP {tp}"
        )
    parallel["ep"] = ep
    parallel["etp"] = etp
    if par["expert_parallel_comm_backend"] == "deepep":
        notes.append("parallelism.expert_parallel_comm_backend deepep: priced as the all-to-all dispatcher")


def _fsdp_reshard(par: dict[str, Any], pp: int, where: str, notes: list[str]) -> None:
    """llama3/infra/parallelize.py `apply_fsdp`: "default" reshards after the forward without PP and
    not with it, which ppb models; "always"/"never" against that default are not."""
    policy = str(par["fsdp_reshard_after_forward"])
    if policy not in ("default", "always", "never"):
        raise InputError(where, "parallelism.fsdp_reshard_after_forward", f"{shown(policy)}: default, always or never")
    if (policy == "always" and pp > 1) or (policy == "never" and pp == 1):
        notes.append(f"parallelism.fsdp_reshard_after_forward {policy}: priced as the default (pp {pp})")


def _pipeline(toml: _Toml, par: dict[str, Any], layers: int, pp: int, notes: list[str]) -> dict[str, Any]:
    where = toml.where
    schedule = schedule_of(par["pipeline_parallel_schedule"], where)
    if schedule in ("LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble"):
        notes.append(f"parallelism.pipeline_parallel_schedule {schedule}: priced as {SCHEDULES[schedule]}")
    if par["pipeline_parallel_schedule_csv"]:
        notes.append("parallelism.pipeline_parallel_schedule_csv: a schedule from a file, not modelled")
    fqns = par["module_fqns_per_model_part"]
    stages = _stages_of_fqns(fqns, layers, where) if fqns is not None else torchtitan_split(toml, par, layers, pp)
    if len(stages) % pp:
        key = "module_fqns_per_model_part" if fqns is not None else "pipeline_parallel_layers_per_stage"
        raise InputError(where, f"parallelism.{key}", f"{len(stages)} stages do not split over pp {pp}")
    vpp = len(stages) // pp
    if schedule in SINGLE_STAGE and vpp != 1:
        raise InputError(
            where, "parallelism.pipeline_parallel_schedule", f"{schedule} runs one stage a rank, not {vpp}"
        )
    if schedule not in SINGLE_STAGE and vpp < 2:
        raise InputError(where, "parallelism.pipeline_parallel_schedule", f"{schedule} needs two stages a rank or more")
    if SCHEDULES[schedule] == "dualpipev":  # stage s of a V sits on rank s or 2P-1-s: not a Megatron layout
        notes.append(f"parallelism.pipeline_parallel_schedule {schedule}: the V's split priced as ppb's even one")
        return {"vpp": vpp, "schedule": "dualpipev"}
    return {"vpp": vpp, "schedule": SCHEDULES[schedule], "layout": "|".join(stages)}


def torchtitan_split(toml: _Toml, par: dict[str, Any], layers: int, pp: int) -> list[str]:
    """The stages torchtitan cuts where the job names no modules (*par* its [parallelism] with job_config.py's
    defaults): `pipeline_parallel_layers_per_stage` layers a stage, else one stage a rank (two for a schedule of
    several), the embedding and output counted as `pipeline_parallel_first/last_stage_less_layers` layers
    (pipeline_parallel.py `pipeline_llm`, v0.2.2)."""
    schedule = schedule_of(par["pipeline_parallel_schedule"], toml.where)
    first = toml.integer(par, "parallelism", "pipeline_parallel_first_stage_less_layers", 0)
    last = toml.integer(par, "parallelism", "pipeline_parallel_last_stage_less_layers", 0)
    per_stage = par["pipeline_parallel_layers_per_stage"]
    if per_stage is None:
        count = pp * (1 if schedule in SINGLE_STAGE else 2)
    else:
        per_stage = toml.integer(par, "parallelism", "pipeline_parallel_layers_per_stage")
        count = -(-(layers + first + last) // per_stage)
    return _even_split(count, layers, first, last, toml.where)


def _even_split(stages: int, layers: int, first: int, last: int, where: str) -> list[str]:
    """pipeline_parallel.py `generate_llm_fqn_per_model_part`: the layers plus the embedding's and
    output's weights split evenly, the first stages taking one more where it does not divide."""
    effective = layers + first + last
    each, extra = divmod(effective, stages)
    if stages > effective or each == 0 or first > each or last > each:
        raise InputError(where, "parallelism.pipeline_parallel_degree", f"{stages} stages for {layers} layers")
    text, placed = [], 0
    for index in range(stages):
        size = each + (index < extra)
        size -= first if index == 0 else last if index == stages - 1 else 0
        take = min(size, layers - placed)
        placed += take
        text.append(("E" if index == 0 else "") + "t" * take + ("L" if index == stages - 1 else ""))
    return text


def _stages_of_fqns(fqns: Any, layers: int, where: str) -> list[str]:
    """`module_fqns_per_model_part`: each part's modules, `tok_embeddings`, `layers.N`, `norm`,
    `output`; the layers in model order, each once (pipeline_module_split keeps the named modules)."""
    key = "parallelism.module_fqns_per_model_part"
    if not isinstance(fqns, list) or not all(isinstance(part, list) for part in fqns):
        raise InputError(where, key, "is a list of lists of module names")
    text, order = [], []
    for part in fqns:
        words = []
        for name in part:
            if name == "tok_embeddings":
                words.append("E")
            elif name == "output":
                words.append("L")
            elif isinstance(name, str) and name.startswith("layers.") and name[7:].isdigit():
                words.append("t")
                order.append(int(name[7:]))
            elif name != "norm":
                raise InputError(where, key, f"{shown(name)} is not a module of torchtitan's decoder")
        text.append("".join(words))
    if order != list(range(layers)):
        raise InputError(where, key, f"names the layers {_span(order)}, not layers.0 to layers.{layers - 1} in order")
    return text


def _span(order: list[int]) -> str:
    return ", ".join(map(str, order[:6])) + (", ..." if len(order) > 6 else "") if order else "none"


def _training(
    toml: _Toml,
    training: dict[str, Any],
    parallel: dict[str, Any],
    dp: int,
    seq: int,
    notes: list[str],
) -> dict[str, Any]:
    where = toml.where
    local = toml.integer(training, "training", "local_batch_size")
    total = training["global_batch_size"]
    total = local * dp if total == -1 or total is None else toml.integer(training, "training", "global_batch_size")
    if total % (local * dp):  # train.py Trainer.__init__ asserts it
        raise InputError(where, "training.global_batch_size", f"{total} is not a multiple of local {local} × dp {dp}")
    steps = total // (local * dp)
    if parallel["pp"] > 1:
        par = toml.table("parallelism")
        micro = toml.integer({**PARALLELISM_KEYS, **par}, "parallelism", "pipeline_parallel_microbatch_size")
        if local % micro:  # pipeline_parallel.py pipeline_llm raises
            key = "parallelism.pipeline_parallel_microbatch_size"
            raise InputError(where, key, f"{micro} does not divide training.local_batch_size {local}")
        micro_batches = local // micro * steps
        if steps > 1:
            notes.append(f"training.global_batch_size {total}: {steps} pipeline flushes a step, priced as one")
    else:
        micro, micro_batches = local, steps
    param = toml.text(training, "training", "mixed_precision_param")
    if param not in ("bfloat16", "float32"):
        raise InputError(where, "training.mixed_precision_param", f"{shown(param)}: bfloat16 or float32")
    if training["dtype"] == "bfloat16":
        notes.append("training.dtype bfloat16: parameters and optimizer states in bf16, priced as mixed precision")
    if training["enable_cpu_offload"]:
        notes.append("training.enable_cpu_offload: FSDP's CPU offload, not modelled")
    out: dict[str, Any] = {
        "seq_length": seq,
        "micro_batch_size": micro,
        "micro_batches": micro_batches,
        "dtype": "bf16" if param == "bfloat16" else "fp32",
        "optimizer": _optimizer(toml, notes),
        "flash_attention": True,  # SDPA's flash kernel (the flex/varlen flavors noted)
        "recompute": _recompute(toml, notes),
    }
    return out


def _optimizer(toml: _Toml, notes: list[str]) -> str:
    optimizer = toml.section("optimizer", OPTIMIZER_KEYS)
    names = {"Adam": "adam", "AdamW": "adamw"}  # components/optimizer.py build_optimizers
    if toml.text(optimizer, "optimizer", "name") not in names:
        raise InputError(toml.where, "optimizer.name", f"{shown(optimizer['name'])}: ppb prices Adam and AdamW")
    if optimizer["early_step_in_backward"]:
        notes.append("optimizer.early_step_in_backward: gradients freed in the backward, not modelled")
    return names[optimizer["name"]]


def _recompute(toml: _Toml, notes: list[str]) -> dict[str, Any]:
    """`[activation_checkpoint]` in torchtitan's words (ppb_core.config.recompute)."""
    ac = toml.section("activation_checkpoint", AC_KEYS)
    mode = toml.text(ac, "activation_checkpoint", "mode")
    if mode == "memory_budget":
        raise InputError(
            toml.where, "activation_checkpoint.mode", "memory_budget (the compiler's min-cut) ppb cannot price"
        )
    if mode not in ("none", "full", "selective"):
        hint = did_you_mean(mode, ("none", "selective", "full"))
        raise InputError(toml.where, "activation_checkpoint.mode", f"{shown(mode)}: none, selective or full{hint}")
    # early_stop (job_config.py, default false): the recompute stops once every saved tensor is back;
    # ppb then does not replay a dense block's last matmul and residual add (`flops.early_stop_tail`)
    if not isinstance(ac["early_stop"], bool):
        raise InputError(toml.where, "activation_checkpoint.early_stop", f"{shown(ac['early_stop'])}: true or false")
    stop = {"early_stop": True} if ac["early_stop"] and mode != "none" else {}
    if mode != "selective":
        return {"mode": mode, **stop}
    option = str(ac["selective_ac_option"])
    if option != "op" and not (option.isdigit() and int(option) > 0):
        key = "activation_checkpoint.selective_ac_option"
        raise InputError(toml.where, key, f"{shown(option)}: 'op' or a positive layer count")
    if (
        option == "op"
        and ac["per_op_sac_force_recompute_mm_shapes_by_fqns"]
        != AC_KEYS["per_op_sac_force_recompute_mm_shapes_by_fqns"]
    ):
        notes.append("activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns: not modelled")
    return {"mode": "selective", "option": option if option == "op" else int(option), **stop}


def _timing(toml: _Toml, model: dict[str, Any], experts: bool, notes: list[str]) -> dict[str, Any]:
    timing: dict[str, Any] = {}
    _check_quantize(toml)
    # optimizer.implementation (components/optimizer.py build_optimizers: fused, foreach or for-loop)
    implementation = toml.section("optimizer", OPTIMIZER_KEYS)["implementation"]
    if implementation not in ("fused", "foreach", "for-loop"):
        raise InputError(toml.where, "optimizer.implementation", f"{shown(implementation)}: fused, foreach or for-loop")
    if implementation != "fused":
        timing["optimizer_implementation"] = implementation
    compiled = toml.section("compile", COMPILE_KEYS)
    if compiled["enable"]:
        components = compiled["components"]
        if not isinstance(components, list):
            raise InputError(toml.where, "compile.components", "is a list: model, loss")
        if "model" in components:
            timing["torch_compile"] = True
        if ("loss" in components) != ("model" in components):  # timing.compiled_loss follows torch_compile
            timing["compile_loss"] = "loss" in components
    converters = model["converters"]
    if not isinstance(converters, list):
        raise InputError(toml.where, "model.converters", "is a list of converter names")
    for given in converters:
        converter = OLD_CONVERTERS.get(given, given) if isinstance(given, str) else ""
        if converter not in CONVERTERS:
            raise InputError(toml.where, "model.converters", f"{shown(given)} is none of {', '.join(CONVERTERS)}")
        if converter == "quantize.linear.float8":
            timing["matmul_dtype"] = "fp8"  # components/quantization/float8.py Float8LinearConverter
            _float8(toml, timing, experts, notes)
        else:
            notes.append(f"model.converters {converter}: not modelled")
    return timing


# job_config.py's [quantize] (v0.2.2): Quantize's tables, and the keys of each converter's dataclass
# (Float8Linear, MXLinear, Float8GroupedMM, MXGroupedMM)
QUANTIZE_KEYS = {
    "linear": {
        "float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "recipe_name",
                   "filter_fqns", "emulate"},
        "mx": {"mxfp8_dim1_cast_kernel_choice", "recipe_name", "filter_fqns"},
    },
    "grouped_mm": {"float8": {"fqns"}, "mx": {"recipe_name", "fqns"}},
}  # fmt: skip


def _check_quantize(toml: _Toml) -> None:
    """A key [quantize] does not have refused, as ConfigManager._dict_to_dataclass refuses it at
    every depth (`enable_fsdp_float8_all_gathr` would otherwise be priced as its default)."""
    quantize = toml.table("quantize")
    for kind in quantize:
        if kind not in QUANTIZE_KEYS:
            raise InputError(toml.where, f"quantize.{kind}", f"is not a table of {RELEASE}'s [quantize]")
        for converter in toml.table("quantize", kind):
            if converter not in QUANTIZE_KEYS[kind]:
                raise InputError(
                    toml.where, f"quantize.{kind}.{converter}", f"is not a table of {RELEASE}'s [quantize.{kind}]"
                )
            for key in toml.table("quantize", kind, converter):
                if key not in QUANTIZE_KEYS[kind][converter]:
                    where = f"quantize.{kind}.{converter}"
                    hint = did_you_mean(key, QUANTIZE_KEYS[kind][converter])
                    raise InputError(toml.where, f"{where}.{key}", f"is not a key of {RELEASE}'s [{where}]{hint}")


def _float8(toml: _Toml, timing: dict[str, Any], experts: bool, notes: list[str]) -> None:
    """Float8LinearConverter (components/quantization/float8.py): every `nn.Linear` but the
    `filter_fqns` to torchao's Float8Linear, dynamically scaled per tensor unless `recipe_name` says
    (Float8LinearConfig's default: tensorwise). ppb runs the body's GEMMs in FP8 and keeps the output
    layer and the MoE router in 16 bits (`ppb_core.timing.flops` `Op.fp8`)."""
    linear = toml.table("quantize", "linear", "float8") or toml.table("float8")
    timing["fp8_recipe"] = "tensorwise"  # per-tensor current scaling, TE's name for it
    # Float8LinearConverter.__init__: the float8 all-gather (and its scale precompute) only under FSDP's
    # data sharding and without a recipe_name (it asserts against one); both default false in v0.2.2
    if linear.get("enable_fsdp_float8_all_gather") and linear.get("recipe_name") is not None:
        said = "with recipe_name: torchtitan refuses it (Float8LinearConverter.__init__)"
        raise InputError(toml.where, "quantize.linear.float8.enable_fsdp_float8_all_gather", said)
    if linear.get("enable_fsdp_float8_all_gather"):
        timing["fp8_fsdp_all_gather"] = True
        if linear.get("precompute_float8_dynamic_scale_for_fsdp"):
            timing["fp8_precompute_scale"] = True
    if linear.get("recipe_name") not in (None, "tensorwise"):
        notes.append(f"quantize.linear.float8.recipe_name {linear['recipe_name']}: priced as tensorwise")
    filtered = linear.get("filter_fqns") or []
    if not isinstance(filtered, list):
        raise InputError(toml.where, "quantize.linear.float8.filter_fqns", "is a list of module names")
    if "output" not in filtered:
        notes.append("quantize.linear.float8.filter_fqns: the output layer in fp8, priced in 16 bits")
    if experts and "router.gate" not in filtered:
        notes.append("quantize.linear.float8.filter_fqns: the MoE router in fp8, priced in 16 bits")
    others = [name for name in filtered if name not in ("output", "router.gate")]
    if others:
        notes.append(f"quantize.linear.float8.filter_fqns {others}: these linears priced in fp8")


def _other(toml: _Toml, notes: list[str]) -> None:
    experimental = toml.table("experimental")
    if toml.table("fault_tolerance").get("enable"):
        notes.append("fault_tolerance.enable: torchft's replica groups, not modelled")
    if experimental.get("custom_import") or experimental.get("custom_args_module"):
        notes.append("experimental: a custom module, priced as the named model")
    if toml.table("debug").get("deterministic"):
        notes.append("debug.deterministic: deterministic kernels, not modelled")
    # debug.moe_force_load_balance routes evenly: ppb's default (training.moe.dropless_imbalance 1.0)


def torchtitan_run_config(imported: Imported, where: str) -> RunConfig:
    """The imported run config validated, a problem said with the TOML key that sets the field."""
    try:
        return parse_run_config(imported.raw, where)
    except InputError as err:
        field = err.field or ""
        key = FIELD_KEYS.get(field) or next((k for f, k in FIELD_KEYS.items() if field.startswith(f)), None)
        if key is None:
            raise
        raise InputError(where, key, f"{err.problem} (run config field {field})") from None
