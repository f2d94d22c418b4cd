"""A plan written in a framework's own words, read back into the balancer's `Plan`.

Two forms, both what the balancer prints (and what users write today by hand):

* a MindFormers/HyperParallel yaml with `offset`, `recompute`, `select_recompute` and
  `select_comm_recompute`, at the top level or where a MindFormers training yaml keeps them
  (`model.model_config.offset`, `recompute_config.*`); a `select_recompute` given per operator
  pattern must use one list for every pattern (ppb's SLCT is one setting); a `.json` file is read
  the same way, so the plan `ppb balance -o plan.json` wrote checks as it is;
* Megatron-LM flags: `--pipeline-model-parallel-layout` (or `--decoder-first/last-pipeline-num-layers`,
  or neither: the even split) and `--recompute-granularity/-method/-num-layers/-modules`, in a file
  or as the text itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ppb_core.balance.megatron import MegatronFlags, parse_flags
from ppb_core.balance.megatron_run import check_against_run
from ppb_core.balance.mtp_apart import standalone_problem
from ppb_core.balance.outputs import MINDFORMERS_CP_ALGO, YAML_KEYS, cells, not_megatrons, plan_from_yaml
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.balance.torchtitan_user_plan import from_torchtitan
from ppb_core.config.layout import LayoutError, parse_layout, standalone_mtp_cell, validate_layout
from ppb_core.config.recompute import MINDFORMERS_RECOMPUTE_KEYS
from ppb_core.config.run import ParallelOptimizerConfig, RunConfig
from ppb_core.config.spec import ModelSpec
from ppb_core.errors import InputError, misspelt, shown, shown_key
from ppb_core.io import read_json, read_text, read_yaml
from ppb_core.model.switches import CELL_RANK, OPTIONS
from ppb_core.units import counted as count_of


def read_plan(
    problem: BalanceInput,
    plan: str,
    modules: tuple[str, ...] | None = None,
    run: RunConfig | None = None,
) -> tuple[Plan, str, tuple[int, int] | None]:
    """(the plan, "mindformers" or "megatron", the MTP layers' [chunk][stage] where a Megatron layout
    runs them apart from the loss, else None) that *plan* (a file, or Megatron flags as text) describes.

    *modules* are the `--recompute-modules` the run's SLCT stands for (Megatron's words in the
    run config); selective flags naming others cannot be priced and are refused. Flags stating
    another model or size than *run*'s are refused (`megatron_run.check_against_run`), as the plan
    is checked at the run config's.
    """
    read, form, mtp_cell = _read_plan(problem, plan, modules, run)
    # transformer_config.py `TransformerConfig.__post_init__` (d98e8a64): "disable full recomputation when
    # enabling overlap_moe_expert_parallel_comm"
    combined = run is not None and run.framework == "megatron" and run.parallel.overlap_moe_expert_parallel_comm
    if combined and any(cell["options"].get("FULL") for row in cells(read) for cell in row):
        where = "--plan" if plan.lstrip().startswith("--") else plan
        field = "--recompute-granularity" if form == "megatron" else "recompute"
        said = "full recomputation, which Megatron-Core refuses under --overlap-moe-expert-parallel-comm"
        raise InputError(where, field, f"{said} (parallel.overlap_moe_expert_parallel_comm)")
    return read, form, mtp_cell


def _read_plan(
    problem: BalanceInput,
    plan: str,
    modules: tuple[str, ...] | None = None,
    run: RunConfig | None = None,
) -> tuple[Plan, str, tuple[int, int] | None]:
    """`read_plan` but for the rules the plan's whole recompute is held to."""
    if not plan.strip():  # Path("") is the working folder: say what is missing instead
        raise InputError(None, "--plan", "is empty: give a MindFormers yaml (.yaml, .yml) or Megatron-LM flags (--...)")
    if plan.lstrip().startswith("--"):  # flags first: a long layout is no file name (the OS refuses it)
        text, where = plan, "--plan"
    else:
        path = Path(plan)
        if path.suffix.lower() in (".yaml", ".yml"):
            return from_mindformers(problem, _read_yaml(path), str(path), run), "mindformers", None
        if path.suffix.lower() == ".json":  # `ppb balance -o plan.json`: its MindFormers keys, read as a yaml's
            document = _read_json(path)
            standalone, mtp_cell = _mtp_apart_of(problem, document, path, run)
            return from_mindformers(standalone, document, str(path), run), "mindformers", mtp_cell
        if not os.path.exists(path):
            if (
                "\n" in plan.strip()
            ):  # a plan's text pasted (yaml keys, TOML lines): one line naming --plan, not the text
                raise InputError(
                    None,
                    "--plan",
                    "text that is not Megatron-LM flags (--...): a MindFormers yaml (.yaml, .yml), a plan JSON or a "
                    "torchtitan TOML (.toml) is given as its file",
                )
            raise InputError(plan, None, "no such file (and not Megatron-LM flags)")
        if path.suffix.lower() == ".toml" or (
            path.suffix == ".py" and run is not None and run.framework == "torchtitan"
        ):
            # torchtitan's plan lines (`ppb balance`'s) or a whole job TOML; from 9810191bb its Python config lines
            if run is not None and run.framework != "torchtitan":
                raise InputError(str(path), None, f"a torchtitan job TOML; the run's framework is {run.framework}")
            return from_torchtitan(problem, path, run), "torchtitan", None
        text, where = read_text(path), str(path)  # a folder or a device is refused by the reader
    unsaid = not_megatrons(problem)
    if unsaid is not None:
        raise InputError(where, None, f"Megatron-LM flags, but {unsaid}: give the plan as a MindFormers yaml")
    try:
        flags = parse_flags(text)
    except LayoutError as err:
        raise InputError(where, None, str(err)) from None
    if not flags.flag_words:  # read as flags it stated nothing: the even split, unrecomputed, was checked
        raise InputError(
            where, None, "holds no Megatron-LM flag (--...); a MindFormers yaml plan needs a .yaml or .yml name"
        )
    if run is not None:
        check_against_run(flags, run, where)
    plan_read, mtp_cell = from_megatron(problem, flags, where, modules)
    if mtp_cell is not None and run is not None and run.framework != "megatron":
        raise InputError(
            where,
            "--pipeline-model-parallel-layout",
            f"MTP layers m apart from the loss L are Megatron-Core's; the run's framework is {run.framework}",
        )
    if mtp_cell is not None and run is not None:
        # on rank P - 2's last virtual stage the balancer prices the MTP layers apart (`balance.mtp_apart`)
        standalone = standalone_problem(run, problem, withdrawing=False)
        if standalone is not None and standalone.mtp_cell == mtp_cell:
            plan_read = Plan(standalone, plan_read.counts)
    return plan_read, "megatron", mtp_cell


def _mtp_apart_of(
    problem: BalanceInput, document: dict[str, Any], path: Path, run: RunConfig | None
) -> tuple[BalanceInput, tuple[int, int] | None]:
    """A plan JSON whose MTP layers run apart from the loss (`input.mtp_cell`, `balance.mtp_apart`): the
    problem with its TAIL split there, and the cell; else *problem* and None. A plan solved at other sizes
    (`input.stages`, `interleave`, `micro_batches`: `ppb balance -s/-i/-mb`) is refused naming both."""
    given = document.get("input")
    sizes = (
        ("stages", "parallel.pp", problem.stages),
        ("interleave", "parallel.vpp", problem.chunks),
        ("micro_batches", "training.micro_batches", problem.micro_batches),
    )
    for key, field, ours in sizes:
        theirs = given.get(key) if isinstance(given, dict) else None
        if isinstance(theirs, int) and not isinstance(theirs, bool) and theirs != ours:
            # `ppb balance -i auto`, `-s`, `-mb` solve at other sizes than the run config's
            raise InputError(
                path,
                f"input.{key}",
                f"the plan was solved at {key} {theirs}, the run config has {field} {ours}; ppb checks a plan at "
                "the run's sizes (set them in the run config)",
            )
    cell = given.get("mtp_cell") if isinstance(given, dict) else None
    if cell is None:
        return problem, None
    standalone = standalone_problem(run, problem, withdrawing=False) if run is not None else None
    if standalone is None or standalone.mtp_cell is None or cell != [*standalone.mtp_cell]:
        raise InputError(
            path, "input.mtp_cell", f"{cell!r}: not where this run can place its MTP layers apart from the loss"
        )
    return standalone, standalone.mtp_cell


def _read_yaml(path: Path) -> dict[str, Any]:
    document = read_yaml(path)
    if not isinstance(document, dict):
        raise InputError(path, None, "must hold a mapping with offset and the recompute lists")
    return document


def _read_json(path: Path) -> dict[str, Any]:
    """A plan JSON as `ppb balance` writes it (its flags' texts were once read as flags: `--decoder-last-
    pipeline-num-layers must be an integer, got '6,'`)."""
    document = read_json(path)
    if not isinstance(document, dict):
        raise InputError(path, None, "must hold an object with offset and the recompute lists (ppb balance --json)")
    return document


_EXCLUSIONS = ("select_recompute_exclude", "select_comm_recompute_exclude")


def _check_keys(document: dict[str, Any], where: str) -> None:
    """A misspelt plan key would be skipped and the plan checked without it: a top-level key within
    two edits of one of the four is refused, as is a recompute_config key MindFormers refuses, and
    an exclusion from selective recompute (ppb prices one selective setting for every layer)."""
    for key in document:
        if isinstance(key, str) and key not in YAML_KEYS:
            near = misspelt(key, YAML_KEYS)
            if near:
                raise InputError(where, key, f"not a key ppb reads: did you mean {near}?")
    recompute_config = document.get("recompute_config")
    if isinstance(recompute_config, dict):
        for key, value in recompute_config.items():
            if key not in MINDFORMERS_RECOMPUTE_KEYS:
                raise InputError(
                    where,
                    f"recompute_config.{shown_key(key)}",
                    "not a TransformerRecomputeConfig key (MindFormers refuses it): "
                    + ", ".join(MINDFORMERS_RECOMPUTE_KEYS),
                )
            if key in _EXCLUSIONS and value not in (None, False, [], {}):
                raise InputError(
                    where,
                    f"recompute_config.{key}",
                    "ppb prices one selective setting on every layer and cannot price exclusions from it",
                )


def _mindformers_values(document: dict[str, Any], where: str) -> dict[str, Any]:
    """The four values, from the top level or a MindFormers training yaml's places."""
    _check_keys(document, where)
    found = {key: document[key] for key in YAML_KEYS if key in document}
    model = document.get("model")
    model_config = model.get("model_config") if isinstance(model, dict) else None
    if "offset" not in found and isinstance(model_config, dict) and "offset" in model_config:
        found["offset"] = model_config["offset"]
    recompute_config = document.get("recompute_config") or {}
    if isinstance(recompute_config, dict):
        for key in YAML_KEYS[1:]:
            if key not in found and key in recompute_config:
                found[key] = recompute_config[key]
    if not found:
        raise InputError(where, "offset", "missing: give offset and the recompute lists (top level or MindFormers')")
    for key in ("select_recompute", "select_comm_recompute"):
        value = found.get(key)
        if isinstance(value, dict):
            lists = list(value.values())
            if any(item != lists[0] for item in lists[1:]):
                raise InputError(
                    where, key, "per-pattern lists differ; ppb prices one selective setting, so give one list"
                )
            found[key] = lists[0] if lists else False
    return found


# MindFormers' parallel_config keys (mindformers/modules/transformer/transformer.py
# `TransformerOpParallelConfig`, commit fd4deebc) and the run config's field each states.
_PARALLEL_SIZES = (
    ("data_parallel", "dp"),
    ("model_parallel", "tp"),
    ("context_parallel", "cp"),
    ("expert_parallel", "ep"),
)


# MindFormers' model_config words for the model's sizes (LlamaConfig's and the Hugging Face ones of its newer
# configs) and the run config's size each states
_MODEL_SIZES = (
    ("num_layers", "num_layers"),
    ("num_hidden_layers", "num_layers"),
    ("hidden_size", "hidden_size"),
    ("num_heads", "num_attention_heads"),
    ("num_attention_heads", "num_attention_heads"),
    ("n_kv_heads", "num_key_value_heads"),
    ("num_key_value_heads", "num_key_value_heads"),
    ("vocab_size", "vocab_size"),
    ("seq_length", "seq_length"),
)


def _check_sizes(document: dict[str, Any], problem: BalanceInput, run: RunConfig | None, where: str) -> None:
    """The sizes a MindFormers yaml states are the run config's, as Megatron flags' must be
    (`megatron_run.check_against_run`): a yaml of 3 interleaved chunks or another micro-batch count
    was priced at the run's without a word."""
    parallel = document.get("parallel_config") or {}
    if not isinstance(parallel, dict):
        raise InputError(where, "parallel_config", f"must be a mapping, got {shown(parallel)}")
    model = document.get("model")
    model_config = model.get("model_config") if isinstance(model, dict) else None
    interleave = model_config.get("pp_interleave_num") if isinstance(model_config, dict) else None
    stated: list[tuple[str, object, str, int]] = [
        ("parallel_config.pipeline_stage", parallel.get("pipeline_stage"), "pp", problem.stages),
        ("parallel_config.micro_batch_num", parallel.get("micro_batch_num"), "micro_batches", problem.micro_batches),
        ("model.model_config.pp_interleave_num", interleave, "vpp", problem.chunks),
    ]
    if run is not None:
        stated += [
            (f"parallel_config.{key}", parallel.get(key), name, getattr(run.parallel, name))
            for key, name in _PARALLEL_SIZES
        ]
        algo = parallel.get("context_parallel_algo")
        ring = MINDFORMERS_CP_ALGO["ring"]  # MindFormers' default
        run_algo = MINDFORMERS_CP_ALGO.get(run.parallel.cp_variant) if run.parallel.cp > 1 else None
        if algo is not None and run_algo is not None and algo != run_algo:
            # MindFormers' context-parallel algorithm (`outputs.MINDFORMERS_CP_ALGO`): a Ulysses run priced beside a
            # yaml of the ring, or the other way round, is another run
            raise InputError(
                where,
                "parallel_config.context_parallel_algo",
                f"{shown(algo)}, the run config has cp_variant {run.parallel.cp_variant} ({run_algo}"
                f"{', the default' if run_algo == ring else ''}): ppb checks the plan at the run's context parallelism",
            )
        if run.parallel.tp > 1:  # MindFormers' sequence parallelism splits along model_parallel: none at 1
            said = parallel.get("use_seq_parallel")
            sp = run.parallel.sequence_parallel
            stated.append(("parallel_config.use_seq_parallel", said, "sequence_parallel", sp))
            # the embedding and output head whole on every model_parallel rank or split over it (`kinds.vocab_rows`)
            said = parallel.get("vocab_emb_dp")
            stated.append(("parallel_config.vocab_emb_dp", said, "vocab_emb_dp", run.parallel.vocab_emb_dp))
        spec = run.specs[run.models[0].name]
        if len(run.models) == 1 and isinstance(spec, ModelSpec) and isinstance(model_config, dict):
            # MindFormers' model_config sizes, as Megatron-LM's --num-layers to --seq-length are refused: the
            # LlamaConfig words (mindformers/models/llama/llama_config.py, commit fd4deebc) and the Hugging Face
            # words of its newer configs (configs/qwen3/pretrain_qwen3_32b_4k.yaml, configuration_qwen3.py at
            # b18b9a6a4: `num_hidden_layers: 64`, which was checked at the run's layers without a word)
            sizes = {
                "num_layers": spec.num_layers,
                "hidden_size": spec.hidden_size,
                "num_attention_heads": spec.num_attention_heads,
                "num_key_value_heads": spec.num_key_value_heads or spec.num_attention_heads,
                "vocab_size": spec.vocab_size,
                "seq_length": run.training.seq_length,
            }
            for key, name in _MODEL_SIZES:
                stated.append((f"model.model_config.{key}", model_config.get(key), name, sizes[name]))
    for field, value, name, expected in stated:
        if value is not None and value != expected:
            raise InputError(
                where,
                field,
                f"{shown(value)}, the run config has {name} {expected}: ppb checks the plan at the run's sizes",
            )
    _check_interleave(document, problem.chunks, where)
    if run is not None:
        _check_device_memory(document, problem, where)
    if run is not None and run.framework == "mindformers":
        _check_optimizer_parallel(document, run, where)
        _check_grouped_matmul_moe(document, run, where)


def _check_interleave(document: dict[str, Any], chunks: int, where: str) -> None:
    """A MindFormers training yaml runs *chunks* chunks a stage only with what `outputs.interleave_keys` says:
    its `model.model_config.pp_interleave_num` (MindFormers' default 1) and, where it states its `parallel`
    section, MindSpore's `pipeline_config.pipeline_interleave` on; else MindFormers runs one chunk a stage
    (`LayerSetting.__init__`) and refuses the offsets' rows, which ppb checked as chunks. A bare plan (the four
    lists alone) says neither and is checked at the run's chunks."""
    if chunks == 1:
        return
    model = document.get("model")
    model_config = model.get("model_config") if isinstance(model, dict) else None
    if isinstance(model_config, dict) and "pp_interleave_num" not in model_config:
        raise InputError(
            where,
            "model.model_config.pp_interleave_num",
            f"missing: MindFormers' default 1 runs one chunk a stage; the run config has vpp {chunks}",
        )
    parallel = document.get("parallel")
    if parallel is None:
        return
    pipeline = parallel.get("pipeline_config") if isinstance(parallel, dict) else None
    if not isinstance(pipeline, dict) or pipeline.get("pipeline_interleave") is not True:
        raise InputError(
            where,
            "parallel.pipeline_config.pipeline_interleave",
            f"not true: MindFormers then runs one chunk a stage (pp_interleave_num 1) and refuses {chunks} chunks' "
            "offsets; give pipeline_config: {pipeline_interleave: true, pipeline_scheduler: 1f1b}",
        )


# MindSpore's "xxGB" memory sizes: GiB (mindspore/ccsrc/backend/common/mem_reuse/mem_dynamic_allocator.cc
# `kGBToByte = 1024 << 20`), a number before "GB"
_GIB = re.compile(r"(\d+(?:\.\d+)?)GB")


def _check_device_memory(document: dict[str, Any], problem: BalanceInput, where: str) -> None:
    """A MindFormers yaml's `context.max_device_memory` caps MindSpore's memory pool (the API docs'
    `mindspore.runtime.set_memory` max_size: the memory used is the least of the device's and it): a plan
    checked against more than it, the run config's usable memory, fits in ppb and not in MindSpore."""
    context = document.get("context")
    if not isinstance(context, dict) or context.get("max_device_memory") is None:
        return
    given = context["max_device_memory"]
    found = _GIB.fullmatch(given.strip()) if isinstance(given, str) else None
    if found is None:
        raise InputError(where, "context.max_device_memory", f"{shown(given)} is not MindSpore's size, e.g. '58GB'")
    cap_mb = float(found[1]) * 1024
    if cap_mb < problem.memory_mb:
        raise InputError(
            where,
            "context.max_device_memory",
            f"{shown(given)} ({cap_mb:,.0f} MB), under the run config's {problem.memory_mb:,.0f} MB usable: ppb checks "
            f"the plan at the run's memory (give device.reserved_mb {problem.memory_mb - cap_mb:,.0f} more)",
        )


def _check_optimizer_parallel(document: dict[str, Any], run: RunConfig, where: str) -> None:
    """The yaml's `parallel.enable_parallel_optimizer` and `parallel_optimizer_config` are the run config's
    (ppb_core.memory.frameworks.mindformers prices them): a yaml that shards otherwise was checked at the
    run config's memory without a word."""
    parallel = document.get("parallel")
    if not isinstance(parallel, dict) or "enable_parallel_optimizer" not in parallel:
        return
    par = run.parallel
    said = parallel["enable_parallel_optimizer"]
    # a run config without the words reads it as SAPP's ZeRO level (`ppb search` writes the yaml from it)
    has = par.enable_parallel_optimizer if par.enable_parallel_optimizer is not None else run.shard_level >= 1
    if bool(said) != has:
        stated = f"has {has}" if par.enable_parallel_optimizer is not None else f"has zero {run.shard_level}"
        raise InputError(
            where,
            "parallel.enable_parallel_optimizer",
            f"{shown(said)}, the run config {stated}: ppb checks the plan at the run's sharding",
        )
    config = parallel.get("parallel_optimizer_config") or {}
    if not said or par.enable_parallel_optimizer is None or not isinstance(config, dict):
        return
    ours = par.parallel_optimizer_config or ParallelOptimizerConfig()
    for key, value in config.items():
        if key not in ParallelOptimizerConfig.model_fields:
            continue  # MindSpore's other keys (optimizer_level, ...): not priced
        expected = getattr(ours, key)
        if value != expected:
            raise InputError(
                where,
                f"parallel.parallel_optimizer_config.{key}",
                f"{shown(value)}, the run config has {shown(expected)}: ppb checks the plan at the run's sharding",
            )


def _check_grouped_matmul_moe(document: dict[str, Any], run: RunConfig, where: str) -> None:
    """A yaml whose `moe_config.use_gmm` is on runs MindFormers' MoEV3 (mindformers/models/llama/llama_layer.py
    `LlamaFeedForwardWithMoE.__init__`, the DeepSeek-V3 pretrain yaml's path, 6bac7f5ab^): its experts are whole on
    each expert-parallel rank (mindformers/modules/transformer/moev3.py `FFN`: tokens stay sharded over
    data_parallel·model_parallel, `ffn_forward_func` all-to-alls them over the `expert_parallel` ranks and runs
    GroupedMatmul on whole expert weights; no expert tensor parallelism) and it routes every token ("Capacity
    factor is ignored", `MoEV3.__init__`). A run config pricing expert TP at tp, or a capacity, prices another
    MoE (gathers of the routed tokens over tp, padded experts) without a word. MindFormers reads `use_gmm` by its
    truth (`elif self.use_gmm:`, no `Validator.check_bool` in `MoEConfig.__init__`), so "yes" or 1 is on too; the
    refusal quotes the yaml's own value. A `moe_config` that is set but not a mapping MindFormers cannot build
    (mindformers/core/parallel_config.py `build_parallel_config`: `MoEConfig(**config.moe_config)` when it is
    true, the default MoE config when it is empty or null): refused."""
    moe_config = document.get("moe_config")
    if moe_config and not isinstance(moe_config, dict):
        raise InputError(
            where, "moe_config", f"{shown(moe_config)}: must be a mapping (MindFormers builds MoEConfig from its keys)"
        )
    if not isinstance(moe_config, dict) or not moe_config.get("use_gmm"):
        return
    gmm = shown(moe_config["use_gmm"])
    if run.parallel.expert_tp != 1:
        said = "not set, so tp" if run.parallel.etp is None else str(run.parallel.etp)
        raise InputError(
            where,
            "moe_config.use_gmm",
            f"{gmm} runs MoEV3, whose experts have no tensor parallelism; the run config's parallel.etp is {said} "
            f"({run.parallel.expert_tp}): set parallel.etp 1",
        )
    if not run.training.moe.dropless:
        raise InputError(
            where,
            "moe_config.use_gmm",
            f"{gmm} runs MoEV3, which ignores capacity_factor and routes every token; the run config has "
            "training.moe.dropless false: set it true",
        )


def from_mindformers(problem: BalanceInput, document: dict[str, Any], where: str, run: RunConfig | None = None) -> Plan:
    values = _mindformers_values(document, where)
    _check_sizes(document, problem, run, where)
    try:
        plan = plan_from_yaml(problem, values)
    except InputError as err:
        raise InputError(where, err.field, err.problem) from None
    _check(plan, where)
    return plan


def _cell_layers_from_flags(
    problem: BalanceInput, flags: MegatronFlags, where: str
) -> tuple[list[int], tuple[int, int] | None]:
    """Body layers per cell in model order, and the MTP layers' cell where the layout runs them apart
    from the loss (Megatron-Core's standalone MTP, `config.layout.standalone_mtp_cell`)."""
    p = problem
    total = p.layers.nb_body_layers
    if flags.pipeline_size is not None and flags.pipeline_size != p.stages:
        raise InputError(where, "--pipeline-model-parallel-size", f"{flags.pipeline_size}, the run has pp {p.stages}")
    if flags.layout is not None:
        try:
            layout = parse_layout(flags.layout, p.stages)
            validate_layout(layout, total, p.mtp_layers)
        except LayoutError as err:
            raise InputError(where, "--pipeline-model-parallel-layout", str(err)) from None
        if len(layout[0]) != p.chunks:
            raise InputError(
                where,
                "--pipeline-model-parallel-layout",
                f"{len(layout[0])} virtual stages per rank, the run has {p.chunks}",
            )
        return [layout[s][v].count("t") for v, s in p.cells], standalone_mtp_cell(layout)
    cells = len(p.cells)
    if flags.first_stage_layers is not None or flags.last_stage_layers is not None:
        first, last = flags.first_stage_layers, flags.last_stage_layers
        # the flag the user gave is the field (the first one's when both are)
        named = f"--decoder-{'first' if first is not None else 'last'}-pipeline-num-layers"
        if p.chunks > 1 or p.stages < 2:
            raise InputError(where, named, "needs pp > 1 without virtual stages here")
        # TransformerConfig.__post_init__ (uneven PP): each given count positive; the layers left and
        # the stages left are both none or both some, the layers an even share of the stages
        for name, given in (("first", first), ("last", last)):
            if given is not None and given <= 0:
                raise InputError(where, f"--decoder-{name}-pipeline-num-layers", f"must be positive, got {given}")
        middle_stages = p.stages - (first is not None) - (last is not None)
        rest = total - (first or 0) - (last or 0)
        if rest < 0:
            raise InputError(where, named, f"{total - rest} layers, the model has {total}")
        if bool(rest) != bool(middle_stages) or (middle_stages and rest % middle_stages):
            raise InputError(
                where,
                named,
                f"leaves {rest} of the model's {total} layers to {count_of(middle_stages, 'other stage')}; "
                "Megatron-Core needs as many on each (and none where no stage is left)",
            )
        each = rest // middle_stages if middle_stages else 0
        sizes = [first if first is not None else each, *([each] * (p.stages - 2)), last if last is not None else each]
        return sizes, None
    # the even split (transformer_block.get_num_layers_to_build): the embedding and the loss count as
    # a layer each where `--account-for-*-in-pipeline-split` says so, taken from the first and last cell
    embedding, loss = flags.split_adds
    counted = total + embedding + loss
    if counted % cells or (counted // cells) < max(embedding, loss):
        share = f"pp {p.stages}" + (f" × {p.chunks} virtual stages" if p.chunks > 1 else "")
        said = f"{counted} layers" + (" (the embedding and loss counted)" if embedding or loss else "")
        raise InputError(
            where,
            "--pipeline-model-parallel-layout",
            f"missing, and {said} do not split evenly over {share}: Megatron-LM refuses that (arguments.py "
            "validate_args); give the layout, or --decoder-first/last-pipeline-num-layers",
        )
    sizes = [counted // cells] * cells
    sizes[0] -= embedding
    sizes[-1] -= loss
    return sizes, None


def from_megatron(
    problem: BalanceInput, flags: MegatronFlags, where: str, modules: tuple[str, ...] | None
) -> tuple[Plan, tuple[int, int] | None]:
    """The plan the flags describe, and the MTP layers' cell where the layout runs them apart from the loss."""
    p = problem
    try:
        setting = flags.setting()
    except LayoutError as err:  # "--recompute-num-layers must be ...": the flag it names is the field
        flag, _, problem = str(err).partition(" ")
        raise InputError(where, flag, problem) from None
    if setting.name == "selective":
        asked = flags.modules or ("core_attn",)  # Megatron-Core's default
        if modules is None or tuple(sorted(asked)) != tuple(sorted(modules)):
            raise InputError(
                where,
                "--recompute-modules",
                f"{' '.join(asked)}: the run config's training.recompute must say these modules "
                "({granularity: selective, modules: [...]}) for ppb to price them",
            )
    sizes, mtp_cell = _cell_layers_from_flags(p, flags, where)
    counts = empty_counts(p)
    remaining = [body.nb_layer for body in p.layers.bodies]
    body = 0
    for (v, s), size in zip(p.cells, sizes, strict=True):
        wanted = setting.cell_options(size)
        for option in sorted(wanted, key=lambda o: CELL_RANK[o]):
            if wanted[option] and option not in p.options:
                raise InputError(where, "--recompute-granularity", f"needs {option}, which the descriptions lack")
            for _ in range(wanted[option]):
                while remaining[body] == 0:
                    body += 1
                counts[body][v][s][OPTIONS.index(option)] += 1
                remaining[body] -= 1
    plan = Plan(p, freeze(counts))
    _check(plan, where)
    return plan, mtp_cell


def _check(plan: Plan, where: str) -> None:
    problems = [text for text in plan.problems() if "is empty" not in text]
    if problems:
        raise InputError(where, None, problems[0])
