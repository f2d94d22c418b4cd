"""The ranking written out: each top strategy as a ready run config, its plan, and the settings to paste.

For the strategy ranked n, `-o DIR` writes:

* `NN-<name>.yaml`: the run config (its model files named relative to DIR) stating the balanced plan's
  layout and recompute where a run config can (`plan_config`), so `ppb estimate` on it prices the ranked
  plan; its opening comment says what it cannot state and points at the plan files;
* `NN-<name>.plan.json`: the balancer's JSON for it;
and, for the search's framework alone (`FRAMEWORK_SUFFIX`; until session 30 every search wrote the Megatron-LM
and MindFormers files, a torchtitan search its TOML besides):

* `NN-<name>.megatron.txt`, for a Megatron-LM search: Megatron-LM flags: the parallel sizes
  (megatron/training/arguments.py: `--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
  `--context-parallel-size`, `--expert-model-parallel-size`, `--expert-tensor-parallel-size`, `--sequence-parallel`,
  `--use-distributed-optimizer` for ZeRO-1, Megatron-FSDP's `--data-parallel-sharding-strategy`
  optim_grads for ZeRO-2 and optim_grads_params for ZeRO-3 or FSDP, with `--ckpt-format fsdp_dtensor`), the batch,
  and the plan's `--pipeline-model-parallel-layout` with its recompute flags, as `ppb balance` prints them first
  (`megatron.flags`: the fastest plan Megatron-Core can say when it cannot say the plan; with none, no
  layout: the plan's layout without its recompute does not run as priced);
* `NN-<name>.mindformers.yaml`, for a MindFormers search: MindFormers' `parallel_config` (data_parallel, model_parallel,
  pipeline_stage, context_parallel, expert_parallel, micro_batch_num, use_seq_parallel, vocab_emb_dp false, with
  cp the context_parallel_algo),
  `parallel.enable_parallel_optimizer` (with chunks, `parallel.pipeline_config`), `model.model_config` (offset,
  pp_interleave_num) and
  `recompute_config` (recompute, select_recompute, select_comm_recompute);
* `NN-<name>.torchtitan.toml`, for a torchtitan search's strategy: the job-TOML lines of its plan
  (`[parallelism]` degree, schedule and `module_fqns_per_model_part` where PP > 1, `[activation_checkpoint]`),
  as `ppb balance` prints them (`balance.torchtitan_plan`), which `ppb import torchtitan` reads back to
  the plan's split; the plan.json carries them as `torchtitan`, as `ppb balance`'s JSON does. A search stating a
  torchtitan release from 9810191bb (configured by Python functions) writes `NN-<name>.torchtitan.py` instead:
  the same as assignments on the function's `Trainer.Config` (`balance.torchtitan_python`);

and `search.json`, the result with its details (`ppb search --json`'s keys, and each entry's name, HFU,
time breakdown, headroom, uniform split and bound, every count and the places proven; no wall-clock time,
so a search run twice writes the same bytes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ppb_core.balance.outputs import MINDFORMERS_CP_ALGO, interleave_keys
from ppb_core.balance.torchtitan_plan import torchtitan
from ppb_core.balance.torchtitan_python import HEAD_LINE, accumulation_lines, degree_lines
from ppb_core.config.run import FrameworkRelease
from ppb_core.io import write_files
from ppb_core.search.enumerate import Refusal, Strategy, validate
from ppb_core.search.plan_config import PlanFields, apply_plan, comment, plan_fields
from ppb_core.search.rank import Ranked, SearchResult, megatron_said
from ppb_core.search.spec import SearchSpec, relative_path

# Megatron-FSDP's sharding strategy for each ZeRO stage (megatron/training/arguments.py,
# --data-parallel-sharding-strategy: no_shard, optim, optim_grads, optim_grads_params).
MEGATRON_FSDP_SHARDING = {0: "no_shard", 1: "optim", 2: "optim_grads", 3: "optim_grads_params"}


# ppb's cp_variant as Megatron-LM's --cp-comm-type where it is not the default p2p (the ring): arguments.py, d98e8a64
CP_COMM_TYPES = {"ulysses": "a2a", "all_gather": "all_gather"}


def megatron_flags(spec: SearchSpec, strategy: Strategy, plan: dict[str, Any]) -> list[str]:
    """The Megatron-LM command-line flags of a strategy and its balanced plan."""
    s = strategy
    flags = [
        f"--tensor-model-parallel-size {s.tp}",
        f"--pipeline-model-parallel-size {s.pp}",
        f"--context-parallel-size {s.cp}",
    ]
    if s.cp > 1 and s.cp_variant in CP_COMM_TYPES:
        # the context parallelism priced: Megatron-LM's default --cp-comm-type is p2p, the ring (until December
        # 2026 a Ulysses or all-gather strategy's flags ran the ring)
        flags.append(f"--cp-comm-type {CP_COMM_TYPES[s.cp_variant]}")
    if spec.moe:
        flags += [f"--expert-model-parallel-size {s.ep}", f"--expert-tensor-parallel-size {s.etp}"]
    if s.ep_overlap:
        # the combined 1F1B priced, and the spec's --delay-wgrad-compute the search wrote in with it
        # (`Strategy.run_raw`); until December 2026 no strategy ran it
        flags.append("--overlap-moe-expert-parallel-comm")
        if spec.timing.delay_wgrad_compute:
            flags.append("--delay-wgrad-compute")
    if s.sequence_parallel:
        flags.append("--sequence-parallel")
    # Megatron-LM's distributed optimizer shards the optimizer states only (ZeRO-1: the fp32 gradient
    # buffer stays whole, docs/frameworks.md); sharded gradients (ZeRO-2) are Megatron-FSDP's optim_grads
    if s.fsdp or s.zero >= 2:
        strategy = MEGATRON_FSDP_SHARDING[3 if s.fsdp else s.zero]
        # Megatron-FSDP asserts its checkpoint format (arguments.py validate_args, d98e8a64: "Megatron-FSDP
        # requires the `fsdp_dtensor` checkpointing format")
        flags += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}", "--ckpt-format fsdp_dtensor"]
    elif s.zero == 1:
        flags.append("--use-distributed-optimizer")
    flags += [
        f"--micro-batch-size {s.micro_batch_size}",
        f"--global-batch-size {s.micro_batch_size * s.micro_batches * s.dp}",
        f"--seq-length {spec.seq_length}",
    ]
    megatron = plan.get("megatron", {})
    if megatron.get("flags"):
        # what `ppb balance` prints first after `Megatron-LM:` (`balance.result.report`, `flags_of`): the plan's
        # layout and recompute, or the fastest plan Megatron-Core can say when it cannot say this one, whole
        # and shell-quoted, so that what is pasted runs as priced
        flags.append(megatron["flags"])
    elif s.vpp > 1 and s.schedule != "dualpipev":
        # no layout to paste (the comment lines above the flags say why): the chunks per rank alone; never for
        # DualPipeV, which Megatron-LM does not run (its note says so): the flag would launch the interleaved
        # schedule, which Megatron refuses besides where the layers do not fill pp·vpp chunks evenly (DeepSeek-V3's
        # 61 on PP8 V2, printed until session 27)
        flags.append(f"--num-virtual-stages-per-pipeline-rank {s.vpp}")
        if s.group:
            flags.append(f"--microbatch-group-size-per-virtual-pipeline-stage {s.group}")
    # never `layout_only` as a flag: the plan's layout without its recompute runs every layer with none
    return flags


def mindformers_settings(strategy: Strategy, plan: dict[str, Any]) -> dict[str, Any]:
    """The MindFormers yaml sections a strategy and its balanced plan set."""
    s = strategy
    return {
        "parallel_config": {
            "data_parallel": s.dp,
            "model_parallel": s.tp,
            "pipeline_stage": s.pp,
            "context_parallel": s.cp,
            "expert_parallel": s.ep,
            "micro_batch_num": s.micro_batches,
            "use_seq_parallel": s.sequence_parallel,
            # the search prices vocabulary-parallel tables (RunConfig `parallel.vocab_emb_dp` false); MindFormers'
            # own default, True, would run the embedding and output head whole on every model-parallel rank
            "vocab_emb_dp": False,
            **({"context_parallel_algo": MINDFORMERS_CP_ALGO[s.cp_variant]} if s.cp > 1 else {}),
        },
        # with chunks, MindSpore's interleaved pipeline as well (`interleave_keys`: without it MindFormers runs one
        # chunk a stage and refuses the offsets' rows)
        # never for DualPipeV: MindSpore's schedulers (a05ce588) have none and LayerSetting places chunk 1 in stage
        # order, so "1f1b" would run the counts as another schedule (`mindformers_text` says so; until session 34
        # written as interleaved 1F1B, as `ppb balance` printed it)
        "parallel": {
            "enable_parallel_optimizer": s.zero >= 1 or s.fsdp,
            **(interleave_keys(s.vpp).get("parallel", {}) if s.schedule != "dualpipev" else {}),
        },
        "runner_config": {"batch_size": s.micro_batch_size},
        "model": {"model_config": {"offset": plan.get("offset"), "pp_interleave_num": s.vpp}},
        "recompute_config": {key: plan.get(key) for key in ("recompute", "select_recompute", "select_comm_recompute")},
    }


def ranking_files(result: SearchResult, folder: str | Path) -> dict[Path, bytes]:
    """Every ranked strategy's run config, plan and framework settings, and the result with its details."""
    folder = Path(folder)
    spec = result.spec
    files: dict[Path, bytes] = {}
    for place, entry in enumerate(result.ranked, start=1):
        stem = f"{place:02d}-{entry.strategy.label(spec)}"
        files.update(_entry_files(spec, entry, folder, stem))
    files[folder / "search.json"] = (json.dumps(result_json(result, details=True), indent=2) + "\n").encode()
    return files


def result_json(result: SearchResult, details: bool = False) -> dict[str, Any]:
    """`SearchResult.to_json` with each torchtitan plan's `torchtitan` section (`torchtitan_said`), as
    `ppb balance`'s JSON carries it: `ppb search --json` and `search.json`."""
    data = result.to_json(details)
    for shown, entry in zip(data["ranked"], result.ranked, strict=True):
        said = torchtitan_said(result.spec, entry)
        if said is not None:
            shown["plan"] = {**shown["plan"], "torchtitan": said}  # a copy: the ranked plan stays as balanced
    return data


# what `_entry_files` writes for each ranked strategy, after its `NN-<name>` stem: these two, and the framework's
# file (`FRAMEWORK_SUFFIX`)
FRAMEWORK_SUFFIX = {"megatron": ".megatron.txt", "mindformers": ".mindformers.yaml", "torchtitan": ".torchtitan.toml"}
# a torchtitan release configured in Python (from 9810191bb: `torchtitan_python`) gets its lines as a .py
TORCHTITAN_PYTHON_SUFFIX = ".torchtitan.py"
ENTRY_SUFFIXES = (".yaml", ".plan.json", *FRAMEWORK_SUFFIX.values(), TORCHTITAN_PYTHON_SUFFIX)


def whole_plan_suffix(spec: SearchSpec, chain: bool = False) -> str:
    """The file beside a run config that holds its ranked plan whole, for `ppb check RUN --plan FILE`: a
    MindFormers search's yaml sections (`.yml` for the chain, whose folder takes every `*.yaml` as a run
    config), else the balancer's JSON, as Megatron-LM's flags may be another plan (`megatron_said`) and
    torchtitan's lines one setting for every block."""
    if spec.framework == "mindformers":
        return ".mindformers.yml" if chain else ".mindformers.yaml"
    return ".plan.json"


def earlier_ranking_files(folder: str | Path) -> set[Path]:
    """The ranked strategies' files an earlier search wrote in *folder*, as its `search.json` lists them
    (nothing when there is none, or it is not one): only ppb's own files, never another of the folder's."""
    folder = Path(folder)
    try:
        ranked = json.loads((folder / "search.json").read_text())["ranked"]
        stems = [f"{place:02d}-{entry['name']}" for place, entry in enumerate(ranked, start=1)]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return {folder / f"{stem}{suffix}" for stem in stems if "/" not in stem for suffix in ENTRY_SUFFIXES}


def write_ranking(result: SearchResult, folder: str | Path) -> list[Path]:
    """`ranking_files` written all or nothing; the paths. An earlier search's ranked files the new one does
    not write again are removed, so the folder holds one search's ranking beside its `search.json`."""
    files = ranking_files(result, folder)
    stale = earlier_ranking_files(folder) - set(files)
    write_files(files)
    for path in stale:
        path.unlink(missing_ok=True)
    return list(files)


def write_run_configs(result: SearchResult, folder: str | Path, prefix: str, count: int) -> list[Path]:
    """The first *count* ranked strategies as run configs `<prefix><NN>.yaml` in *folder* (their model files
    named relative to it), for the chain to take up; the paths."""
    folder = Path(folder)
    files = {}
    for place, entry in enumerate(result.ranked[:count], start=1):
        stem = f"{prefix}{place:02d}"
        plan_file = f"{stem}{whole_plan_suffix(result.spec, chain=True)}"
        text, fields = _run_config_text(result.spec, entry, folder, stem, plan_file)
        files[folder / f"{stem}.yaml"] = text.encode()
        if not fields.complete:
            mindformers = plan_file.endswith(".yml")
            whole = (
                mindformers_text(result.spec, entry)
                if mindformers
                else _plan_text(entry, torchtitan_said(result.spec, entry))
            )
            files[folder / plan_file] = whole.encode()
    write_files(files)
    return [path for path in files if path.suffix == ".yaml"]


def _run_config(spec: SearchSpec, entry: Ranked, folder: Path, name: str) -> tuple[dict[str, Any], PlanFields]:
    """The strategy as a run config to be written in *folder*, with what it can state of its balanced plan
    (`plan_config`: the layout and a run-wide recompute), so `ppb estimate` on it prices the ranked plan."""
    raw = entry.strategy.run_raw(spec, models=spec.model_entries(relative_to=folder))
    raw["name"] = name
    calibration = raw.get("timing", {}).get("calibration")
    if calibration:
        raw["timing"]["calibration"] = relative_path(Path(spec.base_dir) / calibration, folder)
    fields = plan_fields(spec, entry.strategy, entry.plan)
    return apply_plan(raw, fields), fields


def _run_config_text(
    spec: SearchSpec, entry: Ranked, folder: Path, name: str, plan_file: str
) -> tuple[str, PlanFields]:
    """The run config as YAML under its comment (the ranked figures; where the plan is when it cannot say it)."""
    raw, fields = _run_config(spec, entry, folder, name)
    figures = [f"{entry.seconds:,.3f} s per iteration", f"peak {entry.peak_memory_mb / 1024:.1f} GiB"]
    head = comment(entry.strategy.label(spec), figures, fields, f"{name}.yaml", plan_file)
    return head + yaml.safe_dump(raw, sort_keys=False), fields


def mindformers_text(spec: SearchSpec, entry: Ranked) -> str:
    """A ranked strategy's MindFormers yaml sections, as `NN-<name>.mindformers.yaml` holds them (and
    `ppb search` prints the first's)."""
    text = yaml.safe_dump(mindformers_settings(entry.strategy, entry.plan), sort_keys=False)
    if entry.strategy.schedule == "dualpipev":
        text = (
            "# MindFormers runs no DualPipeV: MindSpore's pipeline_scheduler has no such schedule and MindFormers\n"
            "# places chunk 1 in stage order; the lists are the cells' layers as DualPipeV holds them\n" + text
        )
    return text


def torchtitan_said(spec: SearchSpec, entry: Ranked) -> dict[str, Any] | None:
    """The `torchtitan` section `ppb balance` gives a torchtitan run's plan (`torchtitan_plan.torchtitan`:
    the job-TOML lines, or why there are none), for a ranked plan; None for another framework or PP 1."""
    if spec.framework != "torchtitan":
        return None
    run = validate(spec, entry.strategy)
    assert not isinstance(run, Refusal)  # it was ranked
    batch = (run.training.micro_batch_size, run.parallel.dp)
    said = torchtitan(entry.plan, run.training.recompute, batch, run.framework_release, run.training.seq_length)
    if said is None or not said.get("lines"):
        return said
    if said.get("format") == "python":
        return {**said, "lines": python_with_degrees(spec, entry.strategy, said["lines"], run.framework_release)}
    return {**said, "lines": with_degrees(spec, entry.strategy, said["lines"])}


def _degrees(spec: SearchSpec, strategy: Strategy) -> dict[str, int]:
    """The strategy's `[parallelism]` degrees in torchtitan's names (`with_degrees`)."""
    s = strategy
    shard = s.fsdp or s.zero >= 1
    degrees = {
        "data_parallel_replicate_degree": 1 if shard else s.dp,
        "data_parallel_shard_degree": s.dp if shard else 1,
        "tensor_parallel_degree": s.tp,
        "context_parallel_degree": s.cp,
    }
    if spec.moe:
        degrees |= {"expert_parallel_degree": s.ep, "expert_tensor_parallel_degree": s.etp}
    return degrees


def python_with_degrees(spec: SearchSpec, strategy: Strategy, lines: list[str], release: FrameworkRelease) -> list[str]:
    """`with_degrees` for a release configured in Python (`torchtitan_python`): the degrees as assignments
    after the lines' head comment and, at PP 1, the batch (`accumulation_lines`) last."""
    head = lines.index(HEAD_LINE) + 1
    degrees = degree_lines(_degrees(spec, strategy), release)
    pipelined = any(line.startswith("config.parallelism.pipeline_parallel_degree") for line in lines)
    batch = (
        []
        if pipelined
        else accumulation_lines(
            strategy.micro_batch_size, strategy.micro_batches, strategy.dp, spec.seq_length, release
        )
    )
    return [*lines[:head], *degrees, *lines[head:], *batch]


def with_degrees(spec: SearchSpec, strategy: Strategy, lines: list[str]) -> list[str]:
    """A search's torchtitan lines with what the search chose and `ppb balance`'s lines leave to the job (it
    reads them from the run config): the `[parallelism]` degrees and, at PP 1, the batch. Until session 27
    the lines of a PP 1 strategy were its `[activation_checkpoint]` alone, so `tp1-cp1-pp1-dp8-fsdp-b1m2`
    printed `mode = "none"` and no degree or batch. torchtitan v0.2.2 config/job_config.py `Parallelism`: the
    world is dp_replicate · dp_shard · cp · tp · pp; FSDP2 shards over dp_shard (× cp), DDP replicates over
    dp_replicate; train.py: gradient_accumulation_steps = global_batch_size // (local_batch_size · dp)."""
    s = strategy
    degrees = [f"{name} = {value}" for name, value in _degrees(spec, strategy).items()]
    if lines and lines[0] == "[parallelism]":  # PP > 1: the plan's pipeline keys, its batch already there
        return [lines[0], *degrees, *lines[1:]]
    batch = [  # PP 1: a step of m micro-batches is m accumulation steps of local_batch_size each
        "# the batch the plan was priced at: merge these keys into your own [training] table",
        "[training]",
        f"local_batch_size = {s.micro_batch_size}",
        f"global_batch_size = {s.micro_batch_size * s.micro_batches * s.dp}",
    ]
    return ["[parallelism]", *degrees, *lines, *batch]


def torchtitan_text(said: dict[str, Any]) -> str:
    """The job-TOML lines of a `torchtitan` section as a file: why they are only the split, or why there
    are none, as comment lines first."""
    lines = []
    if said.get("lines") and not said.get("recompute_expressible"):
        lines.append("# the plan's split only, NOT runnable alone: it leaves out the plan's recompute")
    if said.get("note"):
        lines.append(f"# {said['note']}")
    return "".join(line + "\n" for line in [*lines, *(said.get("lines") or [])])


def _plan_text(entry: Ranked, titan: dict[str, Any] | None) -> str:
    """The balancer's JSON of a ranked plan, as `NN-<name>.plan.json` holds it: a torchtitan plan with its
    `torchtitan` section *titan* (`torchtitan_said`), as `ppb balance`'s JSON carries it (`add_torchtitan`)."""
    plan = dict(entry.plan)
    if titan is not None:
        plan["torchtitan"] = titan
    return json.dumps(plan, indent=2) + "\n"


def _entry_files(spec: SearchSpec, entry: Ranked, folder: Path, stem: str) -> dict[Path, bytes]:
    config, _ = _run_config_text(spec, entry, folder, stem, f"{stem}{whole_plan_suffix(spec)}")
    titan = torchtitan_said(spec, entry)
    texts = {f"{stem}.yaml": config, f"{stem}.plan.json": _plan_text(entry, titan)}
    # the search's framework's own file alone: what a torchtitan user launches is not Megatron-LM's flags
    if spec.framework == "megatron":
        # the flags `ppb balance` prints first: for a plan Megatron-Core cannot say, the fastest it can say
        said = {**entry.plan, "megatron": megatron_said(spec, entry)}
        texts[f"{stem}.megatron.txt"] = megatron_text(spec, entry, said)
    elif spec.framework == "mindformers":
        texts[f"{stem}.mindformers.yaml"] = mindformers_text(spec, entry)
    else:
        assert titan is not None  # a torchtitan search's
        python = titan.get("format") == "python"  # a release from 9810191bb (`torchtitan_plan.torchtitan`)
        texts[f"{stem}{TORCHTITAN_PYTHON_SUFFIX if python else '.torchtitan.toml'}"] = torchtitan_text(titan)
    return {folder / name: text.encode() for name, text in texts.items()}


def megatron_text(spec: SearchSpec, entry: Ranked, said: dict[str, Any] | None = None) -> str:
    """A ranked strategy's Megatron-LM flags as `NN-<name>.megatron.txt` holds them (and `ppb search` prints the
    first's): why they are not the plan's whole, as comment lines, then the flags one a line. *said*: the plan
    with its `megatron` section as `megatron_said` gives it (computed when not given)."""
    if said is None:
        said = {**entry.plan, "megatron": megatron_said(spec, entry)}
    return _megatron_note(said) + " \\\n".join(megatron_flags(spec, entry.strategy, said)) + "\n"


def _megatron_note(plan: dict[str, Any]) -> str:
    """Why the flags lack the plan's layout or recompute, or are another plan's, as comment lines (nothing
    when they are the plan's whole)."""
    said = plan.get("megatron", {})
    lines = [f"# {said['note']}"] if said.get("note") else []
    alternative = said.get("alternative")
    if said.get("flags_of") == "plan" and alternative:
        # Megatron-Core's setting was as fast as the ranked plan and replaced it (`balance.program._megatron`)
        lines.append(
            f"# the ranked plan mixes what Megatron-Core takes one setting for; these flags are an equally fast plan "
            f"it can say ({alternative.get('setting', '')})"
        )
    elif said.get("flags_of") == "alternative" and alternative:
        slower = alternative.get("slower_by")
        cost = f", {100 * slower:.2f}% slower than the plan by the layers' schedule" if slower is not None else ""
        lines.append(
            f"# so these flags are the fastest plan Megatron-Core can say ({alternative.get('setting', '')}){cost}; "
            f"the plan's own layout alone, {said.get('layout_only', '')}, is not runnable as priced"
        )
    elif said.get("layout_only"):
        why = f" ({said['no_alternative']})" if said.get("no_alternative") else ""
        lines.append(
            f"# and no plan Megatron-Core can say stands beside it{why}: these flags state the parallel sizes and "
            f"the batch alone; the plan's own layout alone, {said['layout_only']}, is not runnable as priced"
        )
    return "".join(line + "\n" for line in lines)
