"""The search spec: the model(s), the device and how many, the global batch, and the limits of the strategy grid.

A search spec names its models as a run config does (HuggingFace `config.json` files relative to
the spec, or explicit `spec:` fields), the device and the number of devices, the global batch in
sequences (`global_batch`) or tokens (`global_batch_tokens`) with the sequence length, the
framework, and optional limits on every dimension the search walks. Everything a run config's
`training` section holds besides what the search chooses (micro-batch size, micro-batches,
recompute) is fixed here and validated by the run config's own `Training` model, so a spec
accepts exactly the words a run config does. Bad input is one `InputError` line naming the file
and the dotted field.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, model_validator

from ppb_core import limits
from ppb_core.config.hf import read_hf_config
from ppb_core.config.recompute import Framework, RecomputeForm, framework_words
from ppb_core.config.run import (
    TITAN_NO_ULYSSES,
    Device,
    Devices,
    FrameworkRelease,
    MemoryOptions,
    PPBOptions,
    Schedule,
    SubModel,
    TimingOptions,
    Training,
    check_fused_determinism,
    check_mesh,
    check_timing_words,
    misplaced_release,
    named_by,
    pydantic_error,
)
from ppb_core.config.spec import ModelSpec, StrictModel
from ppb_core.errors import InputError, shown
from ppb_core.io import read_yaml, refuse_foreign

# What the search chooses for each strategy: a spec's training section may not fix these.
CHOSEN_TRAINING: tuple[str, ...] = ("micro_batch_size", "micro_batches", "recompute")
BATCH_FIELDS: tuple[str, ...] = ("global_batch", "global_batch_tokens")

# The recompute setting tried when the spec lists none: the framework's own selective recompute
# (Megatron-Core's default `--recompute-modules core_attn`, torchtitan's per-op policy, HyperParallel's
# selective set). The balancer picks NONE, SLCT (this setting's switches), COMM, BOTH or FULL for each
# layer; with no recompute set, SLCT and BOTH would only repeat NONE and COMM, so the selective setting
# offers every plan the empty one does, and `full` forms every plan FULL already offers.
DEFAULT_RECOMPUTE: dict[str, tuple[Any, ...]] = {
    "megatron": ({"granularity": "selective"},),
    "torchtitan": ({"mode": "selective", "option": "op"},),
    "mindformers": ({"headCast": 0, "dropout": 0, "softmax": 0, "normOp": 0, "gather": 0, "ffAct": 0},),
}
# The schedules tried when the spec lists none, per framework: Megatron-LM runs 1F1B and its
# interleaved variant; torchtitan also GPipe (torch.distributed.pipelining ScheduleGPipe).
DEFAULT_SCHEDULES: dict[str, tuple[str, ...]] = {
    "megatron": ("1f1b", "interleaved"),
    "torchtitan": ("1f1b", "interleaved", "gpipe"),
    "mindformers": ("1f1b", "interleaved"),
}
# Data-parallel sharding tried by default: Megatron's plain DDP and distributed optimizer (ZeRO-1);
# torchtitan's replicate (ZeRO-0) and FSDP2; MindFormers' optimizer parallelism (ZeRO-1) or none.
DEFAULT_ZERO: dict[str, tuple[int, ...]] = {"megatron": (0, 1), "torchtitan": (0,), "mindformers": (0, 1)}
DEFAULT_FSDP: dict[str, tuple[bool, ...]] = {
    "megatron": (False,),
    "torchtitan": (False, True),
    "mindformers": (False,),
}
DEFAULT_VPP: tuple[int, ...] = (1, 2, 4)
DEFAULT_CP: tuple[int, ...] = (1, 2, 4, 8)
DEFAULT_MICRO_BATCH_SIZE: tuple[int, ...] = (1, 2)
# Megatron's interleaved micro-batch groups tried by default: the least it accepts (`enumerate.microbatch_groups`)
DEFAULT_MICROBATCH_GROUP: tuple[str, ...] = ("least",)

Value = Annotated[PositiveInt, limits.at_most(limits.DEVICES)]
Values = Annotated[list[Value], Field(min_length=1, max_length=limits.SEARCH_VALUES)]
Seconds = Annotated[PositiveFloat, limits.at_most(limits.SEARCH_SECONDS, "s")]
Models = Annotated[list[SubModel], Field(min_length=1, max_length=limits.MODELS)]


def _choices(item: Any) -> Any:
    """A limit listing choices: at least one, at most `limits.SEARCH_VALUES`."""
    return Annotated[list[item], Field(min_length=1, max_length=limits.SEARCH_VALUES)]


class SearchLimits(StrictModel):
    """Which values each dimension may take; a dimension left out takes its default (docs/search.md)."""

    tp: Values | None = Field(None, description="tensor parallel; default: powers of 2 dividing devices_per_node")
    pp: Values | None = Field(None, description="pipeline stages; default: divisors of devices up to the layers")
    cp: Values | None = Field(None, description="context parallel; default 1, 2, 4, 8")
    ep: Values | None = Field(None, description="expert parallel (MoE); default: powers of 2 dividing the experts")
    etp: Values | None = Field(None, description="expert tensor parallel (MoE); default 1")
    vpp: Values | None = Field(None, description="chunks per stage; default 1, 2, 4")
    schedules: _choices(Schedule) | None = None
    zero: _choices(Literal[0, 1, 2, 3]) | None = None
    fsdp: _choices(bool) | None = None
    micro_batch_size: Values | None = Field(None, description="sequences per micro-batch; default 1, 2")
    recompute: _choices(RecomputeForm) | None = Field(
        None, description="training.recompute settings; default: none and the framework's selective"
    )
    sequence_parallel: _choices(bool) = Field(
        default_factory=lambda: [True], description="with tp > 1; tp 1 runs without"
    )
    cp_variant: _choices(Literal["ring", "ulysses", "all_gather"]) = Field(
        default_factory=lambda: ["ring"],
        description="context parallelism's variants to try (all_gather: Megatron's --cp-comm-type all_gather)",
    )
    tp_within_node: bool = Field(True, description="keep tensor (and expert tensor) parallel groups in one node")
    microbatch_group: _choices(Literal["least", "all"] | Value) | None = Field(
        None,
        description="Megatron's interleaved schedule: --microbatch-group-size-per-virtual-pipeline-stage values "
        "to try: least (default: the least it accepts, pp where the micro-batches are a multiple of pp), all "
        "(every value it accepts), or numbers",
    )
    ep_overlap: _choices(bool) | None = Field(
        None,
        description="Megatron-Core's --overlap-moe-expert-parallel-comm (the combined 1F1B) off or on: [false, true] "
        "tries both, at ep > 1 without pipelining or interleaved (Megatron, an MoE model); default off",
    )


class SearchOptions(StrictModel):
    top: Annotated[PositiveInt, limits.at_most(limits.RANKED, "strategies")] = Field(
        20, description="strategies ranked (and balanced at least)"
    )
    balance_work: Annotated[PositiveFloat, Field(le=1.0)] = Field(
        0.02,
        description="each strategy's balancing gets this share of the balancer's default work limits "
        "(deterministic: the same plan on any machine and load); 1 is the balancer's own",
    )
    balance_budget: PositiveInt | None = Field(
        None,
        description="balance at most this many strategies, the least bounds first (deterministic); the ranking "
        "then says how many places are proven and the least bound left",
    )
    balance_time_limit_s: Seconds | None = Field(
        None,
        description="opt-in wall-clock safety net of one strategy's balancing (none by default: work limits end "
        "it); when it stops a balance, the result says so (that plan then depends on the machine)",
    )
    evaluation_timeout_s: Seconds | None = Field(
        None,
        description="opt-in: seconds one strategy's balancing and timing may take before it is given up (none by "
        "default; when it fires, the ranking says so: it then depends on the machine)",
    )
    time_budget_s: Seconds | None = Field(
        None,
        description="a wall-clock safety net: stop bounding and balancing after this long (the ranking then says "
        "how many places are proven, and that the clock stopped it)",
    )
    wave: Annotated[PositiveInt, limits.at_most(limits.WORKERS, "strategies")] = Field(
        4,
        description="strategies balanced side by side in each wave of the branch and bound (and 32 times as many "
        "bounds refined): the waves decide which strategies are balanced, so they are the spec's, not the "
        "machine's CPUs, and the result is the same with any number of workers",
    )
    workers: Annotated[PositiveInt, limits.at_most(limits.WORKERS, "processes")] | None = Field(
        None, description="processes; default: the machine's CPUs (the result does not depend on it)"
    )


class SearchSpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    framework: Framework = "megatron"
    framework_release: FrameworkRelease = Field(
        default_factory=FrameworkRelease,
        description="under framework megatron, the Megatron-Core and Transformer Engine releases every strategy runs "
        "(ppb_core.config.releases); unset: the newest code ppb follows",
    )
    models: Models
    devices: Devices
    devices_per_node: Devices = 8
    partial_nodes: bool = Field(False, description="devices need not be whole nodes (a part of one node, or the last)")
    device: Device
    training: dict[str, Any]
    timing: TimingOptions = Field(default_factory=TimingOptions)
    # as in a run config (the cuBLAS workspace every strategy runs with); not its `calibration`, one run's stages
    memory: MemoryOptions = Field(default_factory=MemoryOptions)
    ppb: PPBOptions = Field(default_factory=PPBOptions)
    limits: SearchLimits = Field(default_factory=SearchLimits)
    search: SearchOptions = Field(default_factory=SearchOptions)
    # Filled by the loader: each sub-model's architecture, where the file was.
    specs: dict[str, ModelSpec] = Field(default_factory=dict, exclude=True)
    source: str = Field("", exclude=True)
    base_dir: str = Field(".", exclude=True)

    @model_validator(mode="after")
    def _names(self) -> SearchSpec:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            twice = next(index for index, name in enumerate(names) if name in names[:index])
            raise ValueError(f"{names[twice]!r} names two models (models {names.index(names[twice])} and {twice})")
        return self

    @property
    def seq_length(self) -> int:
        return int(self.training["seq_length"])

    @property
    def global_batch(self) -> int:
        """Sequences per iteration over all data-parallel ranks."""
        if "global_batch" in self.training:
            return int(self.training["global_batch"])
        return int(self.training["global_batch_tokens"]) // self.seq_length

    @property
    def fixed_training(self) -> dict[str, Any]:
        """The training fields every strategy shares (the spec's, less the global batch)."""
        return {key: value for key, value in self.training.items() if key not in BATCH_FIELDS}

    @property
    def total_body_layers(self) -> int:
        return sum(spec.num_layers for spec in self.specs.values())

    @property
    def moe(self) -> bool:
        return any(spec.is_moe for spec in self.specs.values())

    @property
    def ep_overlap_choices(self) -> tuple[bool, ...]:
        """Whether strategies run Megatron-Core's combined 1F1B (`enumerate.ep_overlaps`): the spec's list, else
        off. Not on by default: under ppb's model its strategies lose to their plain twins at the jobs measured
        (no FULL recompute, one more micro-batch in flight) and their relaxed bounds miss the memory's hold on
        their plans, so a balance budget spends balances on them (Qwen3 30B-A3B on 16 H100s: 7 places proven
        against 10 without them; docs/search.md, *The combined 1F1B*)."""
        return tuple(dict.fromkeys(self.limits.ep_overlap)) if self.limits.ep_overlap is not None else (False,)

    @property
    def recompute_settings(self) -> list[Any]:
        """The recompute settings to try, each as a run config writes it."""
        if self.limits.recompute is not None:
            return [_plain(form) for form in self.limits.recompute]
        return list(DEFAULT_RECOMPUTE[self.framework])

    def model_entries(self, relative_to: str | Path | None = None) -> list[dict[str, Any]]:
        """The `models` section of a run config: with each architecture inlined (None), or with the
        files it names given relative to *relative_to* so a run config written there finds them."""
        entries = []
        base = Path(self.base_dir)
        for sub in self.models:
            entry = sub.model_dump(mode="json", exclude_none=True)
            if relative_to is None:
                entry.pop("config", None)
                entry["spec"] = self.specs[sub.name].model_dump(mode="json")
                if sub.census is not None:
                    entry["census"] = str((base / sub.census).resolve())
            else:
                for key in ("config", "census"):
                    if key in entry:
                        entry[key] = relative_path(base / entry[key], relative_to)
            entries.append(entry)
        return entries


def _plain(form: Any) -> Any:
    """A parsed recompute form back to what a run config writes."""
    return form.model_dump(mode="json", exclude_none=True) if hasattr(form, "model_dump") else form


def relative_path(path: Path, start: str | Path) -> str:
    """*path* as seen from the folder *start*."""
    return os.path.relpath(path.resolve(), Path(start).resolve())


def _check_training(raw: Any, where: str) -> dict[str, Any]:
    """The spec's training section, checked by the run config's own `Training` (global batch aside)."""
    if not isinstance(raw, dict):
        raise InputError(where, "training", "expected a mapping")
    for key in CHOSEN_TRAINING:
        if key in raw:
            raise InputError(where, f"training.{key}", "chosen by the search: list the values to try under limits")
    given = [key for key in BATCH_FIELDS if key in raw]
    if len(given) != 1:
        raise InputError(where, "training", "give exactly one of global_batch (sequences) or global_batch_tokens")
    batch = raw[given[0]]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InputError(where, f"training.{given[0]}", f"must be a positive integer (got {shown(batch)})")
    most = limits.MICRO_BATCH_SIZE * limits.MICRO_BATCHES * limits.DEVICES  # sequences: mbs · m · dp
    if given[0] == "global_batch_tokens":
        most *= limits.SEQUENCE
    if batch > most:
        raise InputError(where, f"training.{given[0]}", limits.over(batch, most, given[0].replace("_", " ")))
    rest = {key: value for key, value in raw.items() if key not in BATCH_FIELDS}
    try:
        Training(**rest)
    except ValidationError as err:
        error = pydantic_error(err, where, Training)
        raise InputError(where, f"training.{error.field}" if error.field else "training", error.problem) from None
    if given[0] == "global_batch_tokens" and batch % rest["seq_length"]:
        raise InputError(
            where,
            "training.global_batch_tokens",
            f"{batch} tokens are not a whole number of {rest['seq_length']}-token sequences",
        )
    return dict(raw)


def _check_devices(spec: SearchSpec, where: str) -> None:
    """Nodes are whole unless the spec says otherwise; each listed size can split the devices (a size
    that does not divide them gives no whole data-parallel degree: no strategy); with
    `tp_within_node`, a listed tensor (or expert tensor) parallel size fits a node and divides it, so
    that every group of consecutive ranks (TP is the innermost dimension, Megatron-Core's
    `RankGenerator` order tp-cp-ep-dp-pp) stays inside a node."""
    devices, node = spec.devices, spec.devices_per_node
    if devices % node and not spec.partial_nodes:
        raise InputError(
            where,
            "devices",
            f"{devices} devices are not whole nodes of {node} (devices_per_node); "
            "set partial_nodes: true to search on part of a node",
        )
    for dimension in ("tp", "cp", "pp", "ep", "etp"):
        for value in getattr(spec.limits, dimension) or ():
            if devices % value:
                raise InputError(
                    where, f"limits.{dimension}", f"{dimension} {value} does not divide the {devices} devices"
                )
    if not spec.limits.tp_within_node:
        return
    for dimension in ("tp", "etp"):
        for value in getattr(spec.limits, dimension) or ():
            if value > node:
                problem = f"{dimension} {value} spans more than a node of {node} devices"
            elif node % value:
                problem = f"{dimension} {value} does not divide a node of {node} devices: its groups cross nodes"
            else:
                continue
            raise InputError(where, f"limits.{dimension}", f"{problem} (limits.tp_within_node is true)")


def parse_search_spec(raw: Any, source: str | Path = "<search spec>", base_dir: str | Path = ".") -> SearchSpec:
    """A validated `SearchSpec` from parsed YAML; model files are read relative to *base_dir*."""
    where = str(source)
    if raw is None:  # an empty file (or only comments) parses to nothing
        raise InputError(where, None, "is empty: expected a mapping at the top level")
    if not isinstance(raw, dict):
        raise InputError(where, None, "expected a mapping at the top level")
    raw = dict(raw)
    raw.setdefault("name", Path(where).stem)
    if "parallel" in raw and "devices" not in raw:  # `ppb search configs/x.yaml`: its first line was
        # "training.micro_batch_size: chosen by the search", true but not the mistake
        raise InputError(
            where, "parallel", "a run config's section: this is a run config, not a search spec (searches/*.yaml)"
        )
    if "training" in raw:
        raw["training"] = _check_training(raw["training"], where)
    try:
        spec = SearchSpec.model_validate(raw)
    except ValidationError as err:
        raise pydantic_error(err, where, SearchSpec) from None
    for index, form in enumerate(spec.limits.recompute or ()):
        words = framework_words(form)
        if words is not None and words != spec.framework:
            raise InputError(
                where, f"limits.recompute.{index}", f"{words}'s words; this search's framework is {spec.framework}"
            )
    misplaced = misplaced_release(spec.framework, spec.framework_release)
    if misplaced is not None:
        library, whose = misplaced
        said = f"{whose}; this search's framework is {spec.framework}"
        raise InputError(where, f"framework_release.{library}", said)
    flash = spec.training.get("flash_attention", True)  # every strategy's, refused once:
    check_timing_words(spec.framework, spec.timing, where, "search", flash_attention=flash is not False)
    check_mesh(spec.device, spec.devices_per_node, where)
    check_fused_determinism(spec.framework, spec.timing, spec.device, spec.seq_length, where)
    _check_devices(spec, where)
    fsdp_only = spec.limits.fsdp is not None and False not in spec.limits.fsdp
    others = sorted(set(spec.limits.zero or ()) - {3})
    if fsdp_only and others:
        # the grid pairs each listed zero with fsdp false: under fsdp [true] alone those points are what the
        # spec ruled out, and every FSDP point is ZeRO-3 whatever zero lists
        raise InputError(
            where,
            "limits.zero",
            f"zero {others} contradicts limits.fsdp [true] (FSDP shards as ZeRO-3): list zero [3], or fsdp "
            "[false, true] to try both",
        )
    if spec.limits.microbatch_group is not None and spec.framework != "megatron":
        raise InputError(
            where,
            "limits.microbatch_group",
            f"is Megatron-LM's --microbatch-group-size-per-virtual-pipeline-stage; this search's framework is "
            f"{spec.framework}",
        )
    if spec.framework == "torchtitan" and "ulysses" in spec.limits.cp_variant:
        raise InputError(where, "limits.cp_variant", TITAN_NO_ULYSSES)
    if spec.framework != "megatron" and "all_gather" in spec.limits.cp_variant:
        # the run config refuses every such point: refused once here, not point by point
        raise InputError(where, "limits.cp_variant", "all_gather is TransformerEngine's, under framework megatron")
    if spec.framework == "torchtitan":
        # the grid pairs each listed zero with fsdp false, which the run config refuses for ZeRO-1/2
        # (torchtitan shards with FSDP2 or replicates): such a value can never give a strategy
        for value in spec.limits.zero or ():
            if value in (1, 2):
                raise InputError(
                    where,
                    "limits.zero",
                    f"torchtitan has no ZeRO-{value}: list 0 (replicate), or FSDP2 under limits.fsdp",
                )
    # auto is each strategy's own (its communicators), resolved as its run config is read
    if spec.device.reserved_mb != "auto" and spec.device.profile().memory_mb <= spec.device.reserved_mb:
        raise InputError(where, "device.memory_mb", "no memory left after reserved_mb")
    base = Path(base_dir)
    specs: dict[str, ModelSpec] = {}
    for index, sub in enumerate(spec.models):
        if sub.spec is not None:
            specs[sub.name] = sub.spec
        else:
            with named_by(where, f"models.{index}.config", base / sub.config):
                specs[sub.name] = read_hf_config(base / sub.config)
        if sub.census is not None and not (base / sub.census).is_file():
            raise InputError(where, f"models.{index}.census", f"{base / sub.census} not found")
    if spec.memory.calibration is not None:
        # ppb_core.memory.calibration: measured per-stage peaks of one run, its layout's stages
        said = "is one run's measured stage peaks; a search prices many layouts: calibrate a ranked run config"
        raise InputError(where, "memory.calibration", said)
    if spec.timing.calibration is not None and not (base / spec.timing.calibration).is_file():
        raise InputError(where, "timing.calibration", f"{base / spec.timing.calibration} not found")
    spec = spec.model_copy(update={"specs": specs, "source": where, "base_dir": str(base)})
    if spec.timing.delay_wgrad_compute and True not in spec.ep_overlap_choices:
        # transformer_config.py `__post_init__` (d98e8a64) asserts --overlap-moe-expert-parallel-comm for it; the
        # combined strategies take it, the others run without (`Strategy.run_raw`), as Megatron-Bridge sets it
        said = (
            "needs Megatron-Core's combined 1F1B (parallel.overlap_moe_expert_parallel_comm), "
            "which this grid does not offer (limits.ep_overlap)"
        )
        raise InputError(where, "timing.delay_wgrad_compute", said)
    if not spec.moe:  # a dense model's grid has no expert dimensions (`enumerate.grid`): listing one did nothing
        for name in ("ep", "etp"):
            listed = getattr(spec.limits, name)
            if listed is not None and set(listed) != {1}:
                said = "expert parallel" if name == "ep" else "expert tensor parallel"
                raise InputError(where, f"limits.{name}", f"is {said}, for an MoE model (no model has experts)")
    if True in (spec.limits.ep_overlap or ()):
        # what transformer_config.py __post_init__ (d98e8a64) asserts of it whatever the layout: refused once here,
        # not point by point (the run config refuses each point the same)
        said = None
        if spec.framework != "megatron":
            said = "under framework megatron"
        elif not spec.moe:
            said = "for an MoE model (no model has experts)"
        elif spec.timing.moe_dispatcher == "allgather":
            said = "with the alltoall or flex dispatcher, not allgather (timing.moe_dispatcher)"
        elif spec.training.get("dtype") == "fp32":
            said = "with a bf16 or fp16 model (training.dtype is fp32)"
        elif any(getattr(model, "mtp_layers", 0) > 1 for model in spec.specs.values()):
            said = "with at most one MTP layer"
        if said is not None:
            raise InputError(
                where, "limits.ep_overlap", f"is Megatron-Core's --overlap-moe-expert-parallel-comm, {said}"
            )
    return spec


def load_search_spec(path: str | Path) -> SearchSpec:
    """Read and validate a search spec file."""
    path = Path(path)
    refuse_foreign(path, "a search spec (searches/*.yaml)", importable=False)
    return parse_search_spec(read_yaml(path, "is a directory, not a search spec"), path, path.parent)
