"""What Megatron-LM and torchtitan accept, written from their code, not from ppb's (ppb's own readers are
`config.layout` and `balance.megatron_import`; these rules check what ppb prints against the frameworks).

Megatron-LM d98e8a64 (the release docs/frameworks.md names):
* megatron/training/arguments.py `validate_args`: at most one of --num-layers-per-virtual-pipeline-stage,
  --num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout; the layout's stages a multiple
  of --pipeline-model-parallel-size; virtual stages need pp > 1 (pp > 2 without --overlap-p2p-communication,
  on by default: `--no-overlap-p2p-communication` is a store_false); selective recompute takes no method;
  Megatron-FSDP (--use-megatron-fsdp) needs `--ckpt-format fsdp_dtensor`; the global batch a multiple of
  micro-batch size × data-parallel size (`build_num_microbatches_calculator`).
* megatron/core/transformer/pipeline_parallel_layer_layout.py `parse_str_to_list` (commas dropped, `(..)*n`
  then `x*n` unrolled, stages split on `|`, characters E L t m) and `validate_layer_layout`.
* megatron/core/transformer/transformer_config.py `__post_init__`: recompute granularity full or selective;
  full needs a method (uniform, block) and --recompute-num-layers; selective takes no --recompute-num-layers;
  --recompute-modules among the allowed ones.
* megatron/core/pipeline_parallel/schedules.py `forward_backward_pipelining_with_interleaving`: the group g
  (default pp) with pp ≤ g ≤ m and a last group m mod g of 0 or at least pp.

torchtitan v0.2.2 (73a0e697) with torch's schedules (torch 2.13 torch/distributed/pipelining/schedules.py):
* distributed/pipeline_parallel.py `pipeline_module_split`: the model parts a multiple of the pipeline degree
  (`_get_stage_indices`), two a rank for V schedules; `build_pipeline_schedule` hands a single-stage schedule
  (1F1B, GPipe) `stages[0]` alone, so it needs one part a rank.
* every model module in exactly one part (`_build_stage_from_modules` keeps, in each part, the modules it
  names, deleting the others): tok_embeddings first, layers.0..N-1 in model order along the stages (the
  stage index is model order), norm and output in the last stage.
* ScheduleInterleaved1F1B: m a multiple of its rounds, max(1, m // pp). Schedule1F1B and ScheduleDualPipeV:
  at least as many micro-batches as stages (pp; 2·pp), else ValueError (GPipe runs any m).
* config/job_config.py `ActivationCheckpoint.mode` none | selective | full | memory_budget;
  activation_checkpoint.py: selective_ac_option "op" or a positive whole number.
* the batch: train.py `Trainer.__init__` takes `global_batch_size` -1 as local × dp (dp = dp_shard ×
  dp_replicate, the batch mesh) and asserts global a multiple of local × dp, the quotient its gradient-
  accumulation steps; pipeline_parallel.py `pipeline_llm` raises ValueError unless
  `pipeline_parallel_microbatch_size` divides `local_batch_size` and gives the schedule local / micro
  micro-batches a step (job_config.py defaults: local 8, global -1, micro-batch 1).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

MEGATRON_RECOMPUTE_MODULES = {
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
    "gdn_norm_out",
    "gdp_in_proj",
    "gdp_qkv",
    "mhc",
}
SINGLE_STAGE = {"1F1B", "GPipe"}
MULTI_STAGE = {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"}
V_STAGE = {"ZBVZeroBubble", "DualPipeV"}


def _values(flags: str) -> dict[str, list[str]]:
    """Each flag and the words after it up to the next flag."""
    out: dict[str, list[str]] = {}
    current = None
    for word in shlex.split(flags):
        if word.startswith("--"):
            current = word
            out.setdefault(current, [])
        elif current is not None:
            out[current].append(word)
    return out


def layout_stages(layout: str) -> list[list[str]]:
    """Megatron's `parse_str_to_list`, rewritten."""
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), text)
    stages = [list(stage) for stage in text.split("|")]
    for stage in stages:
        for char in stage:
            if char not in "ELtm":
                raise ValueError(f"invalid layer character {char!r}")
    return stages


def megatron_problems(
    flags: str,
    *,
    num_layers: int,
    mtp_num_layers: int = 0,
    pp: int | None = None,
    micro_batches: int | None = None,
) -> list[str]:
    """Megatron-LM's objections to *flags* (empty: it accepts them). *pp* and *micro_batches* where the flags
    do not carry them (a plan's flags beside a run config's sizes)."""
    given = _values(flags)
    problems: list[str] = []

    def one(name: str) -> str | None:
        values = given.get(name)
        return values[0] if values else None

    pp = int(one("--pipeline-model-parallel-size") or pp or 1)
    layout = one("--pipeline-model-parallel-layout")
    chosen = [
        f for f in ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank") if f in given
    ]
    if len(chosen) + (layout is not None) > 1:
        problems.append("more than one of the layout and the virtual-stage flags")
    vpp = 1
    if layout is not None:
        try:
            stages = layout_stages(layout)
        except ValueError as err:
            return [*problems, str(err)]
        if len(stages) % pp:
            problems.append(f"{len(stages)} layout stages are not a multiple of pp {pp}")
            return problems
        vpp = len(stages) // pp
        flat = [char for stage in stages for char in stage]
        if not flat or flat[0] != "E" or flat[-1] != "L" or flat.count("E") != 1 or flat.count("L") != 1:
            problems.append("the layout must start with its one E and end with its one L")
        if flat.count("t") != num_layers:
            problems.append(f"{flat.count('t')} decoder layers in the layout, the model has {num_layers}")
        if flat.count("m") != mtp_num_layers:
            problems.append(f"{flat.count('m')} MTP layers in the layout, the model has {mtp_num_layers}")
        if "m" in flat and "t" in flat[flat.index("m") :]:
            problems.append("a decoder layer after an MTP layer")
        # per rank, per virtual stage: stage index v·pp + rank
        for rank in range(pp):
            for v in range(vpp - 1):
                if "m" in stages[v * pp + rank]:
                    problems.append("MTP layers outside a rank's last virtual stage")
            last = stages[(vpp - 1) * pp + rank]
            if "m" in last and last.count("m") != mtp_num_layers:
                problems.append("the MTP layers split over virtual stages")
    elif "--num-virtual-stages-per-pipeline-rank" in given:
        vpp = int(given["--num-virtual-stages-per-pipeline-rank"][0])
    if vpp > 1 and pp <= (1 if "--no-overlap-p2p-communication" not in given else 2):
        problems.append(f"virtual stages need pp > {1 if '--no-overlap-p2p-communication' not in given else 2}")
    granularity = one("--recompute-granularity")
    method = one("--recompute-method")
    layers = one("--recompute-num-layers")
    if granularity is not None:
        if granularity not in ("full", "selective"):
            problems.append(f"recompute granularity {granularity}")
        if granularity == "full" and (method not in ("uniform", "block") or layers is None):
            problems.append("full recompute needs --recompute-method uniform|block and --recompute-num-layers")
        if granularity == "selective" and (method is not None or layers is not None):
            problems.append("selective recompute takes no method and no layer count")
        unknown = set(given.get("--recompute-modules", [])) - MEGATRON_RECOMPUTE_MODULES
        if unknown:
            problems.append(f"unknown recompute modules {sorted(unknown)}")
    elif method is not None or layers is not None:
        problems.append("a recompute method without --recompute-granularity")
    if "--use-megatron-fsdp" in given and one("--ckpt-format") != "fsdp_dtensor":
        problems.append("Megatron-FSDP needs --ckpt-format fsdp_dtensor")
    if micro_batches is not None and vpp > 1:
        group = int(one("--microbatch-group-size-per-virtual-pipeline-stage") or pp)
        if not pp <= group <= micro_batches:
            problems.append(f"group {group} outside [pp {pp}, m {micro_batches}]")
        elif 0 < micro_batches % group < pp:
            problems.append(f"a last group of {micro_batches % group} < pp {pp}")
    return problems


def torchtitan_problems(
    parts: Sequence[Sequence[str]],
    *,
    degree: int,
    schedule: str,
    num_layers: int,
    micro_batches: int,
    mode: str | None = None,
    option: str | None = None,
) -> list[str]:
    """torchtitan's (and torch's schedules') objections to a plan's TOML lines (empty: it runs them)."""
    problems: list[str] = []
    if schedule not in SINGLE_STAGE | MULTI_STAGE | V_STAGE:
        problems.append(f"unknown schedule {schedule}")
    if len(parts) % degree:
        return [*problems, f"{len(parts)} model parts over pipeline degree {degree}"]
    per_rank = len(parts) // degree
    if schedule in SINGLE_STAGE and per_rank != 1:
        problems.append(f"{schedule} runs one stage a rank, the lines give {per_rank}")
    if schedule in V_STAGE and per_rank != 2:
        problems.append(f"{schedule} runs two stages a rank, the lines give {per_rank}")
    expected = ["tok_embeddings", *(f"layers.{i}" for i in range(num_layers)), "norm", "output"]
    flat = [name for part in parts for name in part]
    if flat != expected:
        problems.append("the parts do not hold every module once, in model order")
    if parts and "tok_embeddings" not in parts[0]:
        problems.append("tok_embeddings not in the first part")
    if parts and not {"norm", "output"} <= set(parts[-1]):
        problems.append("norm and output not in the last part")
    if schedule == "1F1B" and micro_batches < degree:
        problems.append(f"1F1B: {micro_batches} micro-batches are fewer than its {degree} stages")
    if schedule == "DualPipeV" and micro_batches < 2 * degree:
        problems.append(f"DualPipeV: {micro_batches} micro-batches are fewer than its {2 * degree} stages")
    if schedule == "Interleaved1F1B":
        rounds = max(1, micro_batches // degree)
        if micro_batches % rounds:
            problems.append(f"Interleaved1F1B: {micro_batches} micro-batches are not a multiple of {rounds} rounds")
    if mode is not None and mode not in ("none", "selective", "full", "memory_budget"):
        problems.append(f"activation checkpoint mode {mode}")
    if mode == "selective" and not (option == "op" or ((option or "").isdigit() and int(option) >= 1)):
        problems.append(f"selective_ac_option {option!r}")
    return problems


def torchtitan_batch(training: dict, parallelism: dict, dp: int) -> tuple[int, int, int, list[str]]:
    """(micro-batch size, micro-batches the schedule runs, gradient-accumulation steps, objections) that
    torchtitan takes from a job TOML's `[training]` and `[parallelism]` tables on dp data-parallel ranks."""
    local = training.get("local_batch_size", 8)
    total = training.get("global_batch_size", -1)
    micro = parallelism.get("pipeline_parallel_microbatch_size", 1)
    total = local * dp if total < 0 else total
    problems = []
    if total <= 0 or total % (local * dp):
        problems.append(f"global batch {total} is not a multiple of local {local} × dp {dp}")
    if local % micro:
        problems.append(f"local batch {local} is not divisible by the micro-batch size {micro}")
    return micro, local // micro, total // (local * dp), problems


# MindSpore's pipeline schedulers (mindspore/python/mindspore/parallel/_auto_parallel_context.py
# `set_pipeline_config`, a05ce588: `_PipelineScheduler`)
MINDSPORE_SCHEDULERS = {"1f1b", "gpipe", "seqpipe", "seqvpp", "seqsmartvpp"}


def mindformers_problems(document: dict, *, num_layers: int) -> list[str]:
    """MindFormers' (and MindSpore's) objections to a training yaml's pipeline keys (empty: it runs them).

    MindSpore `set_pipeline_config` (a05ce588): `pipeline_config` keys are pipeline_interleave and
    pipeline_scheduler alone, both read (`pipeline_config[...]`), the scheduler among MINDSPORE_SCHEDULERS
    and 1f1b when not interleaved. MindFormers mindformers/models/utils.py `LayerSetting.__init__`
    (fd4deebc): pp = parallel_config.pipeline_stage; pp_interleave_num (model_config, default 1 from
    configuration_utils.py) only when MindSpore's pipeline_interleave is on, else 1; `_check_inputs`: the
    offset's last axis pp, its second-last (when 2-D) pp_interleave_num, its sum num_layers mod (pp × that);
    the cells' layers avg + offset (avg = num_layers // (pp × chunks))."""
    problems: list[str] = []
    parallel = document.get("parallel") or {}
    pipeline = parallel.get("pipeline_config")
    interleave = False
    if pipeline is not None:
        unknown = set(pipeline) - {"pipeline_interleave", "pipeline_scheduler"}
        if unknown:
            problems.append(f"pipeline_config: unknown {sorted(unknown)}")
        if "pipeline_interleave" not in pipeline or "pipeline_scheduler" not in pipeline:
            return [*problems, "pipeline_config needs pipeline_interleave and pipeline_scheduler"]
        interleave = pipeline["pipeline_interleave"]
        if not isinstance(interleave, bool):
            problems.append(f"pipeline_interleave {interleave!r} not a bool")
        if pipeline["pipeline_scheduler"] not in MINDSPORE_SCHEDULERS:
            problems.append(f"pipeline_scheduler {pipeline['pipeline_scheduler']!r}")
        elif not interleave and pipeline["pipeline_scheduler"] != "1f1b":
            problems.append("a scheduler but 1f1b without pipeline_interleave")
    pp = (document.get("parallel_config") or {}).get("pipeline_stage", 1)
    model_config = (document.get("model") or {}).get("model_config") or {}
    chunks = (model_config.get("pp_interleave_num") or 1) if interleave else 1
    offset = model_config.get("offset", document.get("offset", 0))
    rows = offset if isinstance(offset, list) and offset and isinstance(offset[0], list) else [offset]
    if isinstance(rows[0], list) and any(len(row) != pp for row in rows):
        problems.append(f"offset rows of {[len(row) for row in rows]} entries, pp {pp}")
    if isinstance(offset, list) and isinstance(offset[0], list) and len(rows) != chunks:
        problems.append(f"offset of {len(rows)} rows, pp_interleave_num {chunks} (pipeline_interleave {interleave})")
    # the sum of the array as given, before it is broadcast to (chunks, pp)
    total = sum(sum(row) if isinstance(row, list) else row for row in rows)
    if total != num_layers % (pp * chunks):
        problems.append(
            f"offset sum {total}, num_layers {num_layers} mod (pp {pp} × {chunks}) = {num_layers % (pp * chunks)}"
        )
    return problems
