"""The run config: sub-models, parallel setup, training, device; read and validated with clear errors.

Every problem is an `InputError` naming the file, the field (dotted) and what is wrong. Files a
run config names (HuggingFace config.json, census files) are read relative to it.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from ppb_core.config import limits
from ppb_core.config.devices import DEVICE_CATALOG, DeviceProfile
from ppb_core.config.hf import read_hf_config
from ppb_core.config.recompute import FORMS, Framework, Recompute, RecomputeForm, Switches, framework_words, resolve
from ppb_core.config.spec import ModelSpec, StrictModel
from ppb_core.errors import InputError, shown
from ppb_core.io import decode, parse_yaml, read_bytes, read_yaml
from ppb_core.model.switches import SWITCHES
from ppb_core.schedules import check as check_schedule

Schedule = Literal["1f1b", "interleaved", "gpipe", "dualpipev"]
Dtype = Literal["bf16", "fp16", "fp32"]
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
# Optimizer state bytes per parameter with mixed precision: an fp32 master copy plus moments.
OPTIMIZER_STATE_BYTES: dict[str, int] = {"adam": 12, "adamw": 12, "sgd": 8, "sgd_plain": 4}

# Sizes bounded by `ppb_core.config.limits`, refused before any work.
Devices = Annotated[PositiveInt, limits.at_most(limits.DEVICES, "devices")]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=128)]
Factor = Annotated[float, limits.at_most(limits.FACTOR)]
Rate = Annotated[float, Field(ge=limits.DEVICE_RATE_MIN), limits.at_most(limits.DEVICE_RATE)]
Efficiency = Annotated[float, Field(ge=limits.DEVICE_RATE_MIN, le=1.0)]


class SubModel(StrictModel):
    """One model in the pipeline: its architecture from a config.json or an explicit spec."""

    name: Name
    config: str | None = Field(None, description="HuggingFace config.json, relative to the run config")
    spec: ModelSpec | None = None
    census: str | None = Field(None, description="activations measured by `ppb census`, relative path")
    recompute: Switches | None = Field(None, description="this model's selective switches, over training's")
    pad_vocab_multiple: Annotated[PositiveInt, limits.at_most(limits.VOCABULARY)] | None = Field(
        None, description="pad the vocabulary to a multiple of this times tp (Megatron's divisible-by)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> SubModel:
        if (self.config is None) == (self.spec is None):
            raise ValueError("give exactly one of config (a config.json) or spec (explicit fields)")
        return self


class Parallel(StrictModel):
    dp: Devices = 1
    tp: Devices = 1
    pp: Annotated[PositiveInt, limits.at_most(limits.STAGES, "pipeline stages")] = 1
    vpp: Annotated[PositiveInt, limits.at_most(limits.CHUNKS, "chunks per stage")] = Field(
        1, description="virtual pipeline chunks per stage"
    )
    cp: Devices = 1
    cp_variant: Literal["ring", "ulysses"] = "ring"
    ep: Devices = 1
    etp: Devices | None = Field(None, description="expert tensor parallel; defaults to tp")
    sequence_parallel: bool = False
    zero: Literal[0, 1, 2, 3] = 1
    fsdp: bool = False
    schedule: Schedule = "1f1b"
    world_size: Devices | None = None
    devices_per_node: Devices = 8

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def sp(self) -> int:
        """The sequence-parallel split of the activations TP leaves whole."""
        return self.tp if self.sequence_parallel else 1

    @property
    def shard_level(self) -> int:
        """What DP shards: 1 optimizer states, 2 and gradients, 3 (or FSDP) and parameters."""
        return 3 if self.fsdp else self.zero

    @model_validator(mode="after")
    def _consistent(self) -> Parallel:
        if self.schedule == "interleaved" and self.vpp < 2:
            raise ValueError("schedule interleaved needs vpp >= 2")
        if self.schedule in ("1f1b", "gpipe") and self.vpp > 1:
            raise ValueError(f"vpp {self.vpp} needs schedule interleaved (or dualpipev with vpp 2)")
        if self.schedule == "dualpipev" and self.vpp != 2:
            raise ValueError("schedule dualpipev runs two chunks per stage: set vpp 2")
        if self.pp == 1 and self.schedule != "1f1b":
            raise ValueError(f"schedule {self.schedule} needs pp > 1")
        product = self.dp * self.tp * self.pp * self.cp
        if self.world_size is not None and product != self.world_size:
            raise ValueError(
                f"dp·tp·pp·cp = {self.dp}·{self.tp}·{self.pp}·{self.cp} = {product} does not match "
                f"world_size {self.world_size}"
            )
        # Experts are laid out over the data-parallel (and context-parallel) ranks of a TP group.
        expert_ranks = self.dp * self.cp * self.tp
        if expert_ranks % (self.ep * self.expert_tp):
            raise ValueError(f"ep·etp = {self.ep}·{self.expert_tp} does not divide dp·cp·tp = {expert_ranks}")
        return self


class MoeTraining(StrictModel):
    dropless: bool = True
    capacity_factor: Annotated[PositiveFloat, limits.at_most(limits.FACTOR)] = 1.0
    # Dropless routing is imbalanced: the busiest rank gets this many times its fair share.
    dropless_imbalance: Annotated[Factor, Field(ge=1.0)] = 1.0


class Training(StrictModel):
    seq_length: Annotated[PositiveInt, limits.at_most(limits.SEQUENCE, "tokens")]
    micro_batch_size: Annotated[PositiveInt, limits.at_most(limits.MICRO_BATCH_SIZE, "sequences")] = 1
    micro_batches: Annotated[PositiveInt, limits.at_most(limits.MICRO_BATCHES, "micro-batches")] = 1
    dtype: Dtype = "bf16"
    grad_bytes: Literal[2, 4] = Field(4, description="main-gradient bytes (fp32 accumulation is 4)")
    optimizer: Literal["adam", "adamw", "sgd", "sgd_plain"] = "adam"
    optimizer_state_bytes: Annotated[PositiveInt, limits.at_most(limits.FACTOR)] | None = Field(
        None, description="overrides the optimizer's default"
    )
    flash_attention: bool = True
    dropout: NonNegativeFloat | None = Field(None, description="overrides the models' dropout rates")
    recompute: RecomputeForm = Field(
        default_factory=dict,
        description="a switch dict, full, Megatron's {granularity, modules, method, num_layers} "
        "or torchtitan's {mode, option} (ppb_core.config.recompute)",
    )
    moe: MoeTraining = Field(default_factory=MoeTraining)

    @field_validator("dropout")
    @classmethod
    def _rate(cls, value: float | None) -> float | None:
        if value is not None and value >= 1:
            raise ValueError("dropout is a rate below 1")
        return value

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def state_bytes(self) -> int:
        return self.optimizer_state_bytes or OPTIMIZER_STATE_BYTES[self.optimizer]


class Device(StrictModel):
    """A catalog device, any figure of which the run config may override."""

    name: str | None = None
    memory_mb: Annotated[PositiveInt, limits.at_most(limits.DEVICE_MEMORY_MB, "MB")] | None = None
    reserved_mb: Annotated[NonNegativeInt, limits.at_most(limits.DEVICE_MEMORY_MB, "MB")] = Field(
        0, description="held back for the framework and fragmentation"
    )
    peak_tflops: Rate | None = Field(None, description="dense 16-bit tensor TFLOPS")
    hbm_bandwidth_gbs: Rate | None = None
    intra_node_bandwidth_gbs: Rate | None = None
    inter_node_bandwidth_gbs: Rate | None = None
    matmul_efficiency: Efficiency | None = Field(
        None, description="achieved fraction of peak on matmuls (MFU of the kernels)"
    )
    memory_efficiency: Efficiency | None = None
    comm_efficiency: Efficiency | None = None
    collective_latency_us: Annotated[NonNegativeFloat, limits.at_most(limits.DEVICE_LATENCY_US, "µs")] | None = Field(
        None, description="cost of one step of a collective"
    )

    @model_validator(mode="after")
    def _known(self) -> Device:
        if self.name is None and self.memory_mb is None:
            raise ValueError("give a catalog name or memory_mb")
        if self.name is not None and self.name not in DEVICE_CATALOG:
            raise ValueError(f"unknown device {shown(self.name)} (catalog: {', '.join(DEVICE_CATALOG)})")
        return self

    def profile(self) -> DeviceProfile:
        """The catalog figures with this config's overrides applied."""
        base = DEVICE_CATALOG[self.name] if self.name else DEVICE_CATALOG["generic"]
        overrides = {
            key: value for key, value in self.model_dump(exclude={"name", "reserved_mb"}).items() if value is not None
        }
        return base.replace(**overrides)

    @property
    def usable_mb(self) -> float:
        return self.profile().memory_mb - self.reserved_mb


Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class Overlap(StrictModel):
    """The share of each collective the time model hides behind compute of the same pass (docs/timing.md)."""

    tp: Fraction = Field(0.0, description="TP collectives on the critical path (comm-GEMM overlap)")
    tp_async: Fraction = Field(1.0, description="backward input-gradient reductions and re-sent all-gathers")
    cp_ring: Fraction = Field(1.0, description="ring attention's key/value exchange behind its blocks")
    cp_a2a: Fraction = Field(0.0, description="Ulysses all-to-alls")
    ep: Fraction = Field(0.0, description="expert dispatch and combine all-to-alls")


class TimingOptions(StrictModel):
    overlap: Overlap = Field(default_factory=Overlap)
    calibration: str | None = Field(None, description="measured layer times (CSV), relative to the run config")


class PPBOptions(StrictModel):
    """Post-processing of the descriptions: which bodies the balancer sees as one."""

    combined: Annotated[
        list[Annotated[list[Annotated[tuple[str, str], Strict(False)]], Field(max_length=limits.COMBINED)]],
        Field(max_length=limits.COMBINED),
    ] = Field(default_factory=list)

    @field_validator("combined")
    @classmethod
    def _types(cls, groups: list[list[tuple[str, str]]]) -> list[list[tuple[str, str]]]:
        pairs = sum(len(group) for group in groups)
        if pairs > limits.COMBINED:
            raise ValueError(limits.over(pairs, limits.COMBINED, "pairs"))
        for group in groups:
            for _, node in group:
                if node.upper() not in ("HEAD", "BODY", "TAIL"):
                    raise ValueError(f"{shown(node)} is not one of head, body, tail")
        return groups


class RunConfig(StrictModel):
    name: Annotated[str, Field(max_length=256)]
    framework: Framework = Field(
        "megatron", description="what holds the memory: megatron (Megatron-Core), torchtitan (FSDP2), mindformers"
    )
    models: Annotated[list[SubModel], Field(min_length=1, max_length=limits.MODELS)]
    parallel: Parallel = Field(default_factory=Parallel)
    training: Training
    device: Device
    ppb: PPBOptions = Field(default_factory=PPBOptions)
    timing: TimingOptions = Field(default_factory=TimingOptions)
    # Filled by the loader: each sub-model's architecture, and where the file was.
    specs: dict[str, ModelSpec] = Field(default_factory=dict, exclude=True)
    source: str = Field("", exclude=True)
    base_dir: str = Field(".", exclude=True)

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.models]

    @property
    def recompute(self) -> Recompute:
        """training.recompute resolved: SLCT's switches, the framework's selective units, the full rule."""
        return resolve(self.training.recompute)

    def spec(self, model: str) -> ModelSpec:
        return self.specs[model]

    def switches(self, model: str) -> dict[str, int]:
        """The selective switches a model's layers run (SLCT): training's, then the model's own."""
        sub = next(m for m in self.models if m.name == model)
        stated = {**self.recompute.switches, **(sub.recompute or {})}
        return {name: int(stated.get(name, 1)) for name in SWITCHES}

    def vocab_size(self, model: str) -> int:
        """The vocabulary as trained: padded where the model asks for it."""
        sub = next(m for m in self.models if m.name == model)
        vocab = self.specs[model].vocab_size
        if sub.pad_vocab_multiple:
            multiple = sub.pad_vocab_multiple * self.parallel.tp
            vocab = math.ceil(vocab / multiple) * multiple
        return vocab

    @property
    def total_body_layers(self) -> int:
        return sum(spec.num_layers for spec in self.specs.values())


def _is_field(part: Any, previous: Any) -> bool:
    """Whether a part of pydantic's error location is a key the user wrote: not a union member's
    type or a validator (`int`, `function-after[...]`), a mapping's `[key]`, a recompute form's tag."""
    if isinstance(part, int):
        return True
    if part == "[key]" or (previous == "recompute" and part in FORMS):
        return False
    return not any(mark in part for mark in ("[", "]", "-")) and part not in ("int", "str", "float", "bool", "none")


def _pydantic_error(err: ValidationError, source: str) -> InputError:
    first = err.errors()[0]
    loc = first["loc"]
    parts = [p for i, p in enumerate(loc) if _is_field(p, loc[i - 1] if i else None)]
    where = ".".join(str(p) for p in parts) or None
    kind = first["type"]
    if kind == "extra_forbidden":
        problem = "unknown field"
    elif kind == "missing":
        problem = "missing, and required"
    else:
        problem = first["msg"].removeprefix("Value error, ")
        if "input" in first and kind not in ("value_error", "model_type") and not isinstance(first["input"], dict):
            problem = f"{problem} (got {shown(first['input'])})"
    return InputError(source, where, problem)


def _check_model(run: RunConfig, index: int, sub: SubModel, spec: ModelSpec, where: str) -> None:
    """Combinations a model and the parallel setup cannot run together."""
    par = run.parallel
    field = f"models.{index}"
    if spec.num_attention_heads % par.tp:
        raise InputError(
            where, f"{field}.num_attention_heads", f"{spec.num_attention_heads} heads are not divisible by tp {par.tp}"
        )
    if not spec.is_mla and spec.kv_heads % par.tp and par.tp % spec.kv_heads:
        raise InputError(
            where,
            f"{field}.num_key_value_heads",
            f"{spec.kv_heads} key/value heads and tp {par.tp}: neither divides the other",
        )
    if run.vocab_size(sub.name) % par.tp:
        raise InputError(
            where,
            f"{field}.vocab_size",
            f"{spec.vocab_size} is not divisible by tp {par.tp} (set pad_vocab_multiple to pad it)",
        )
    if spec.is_moe and spec.num_experts % par.ep:
        raise InputError(where, f"{field}.num_experts", f"{spec.num_experts} experts are not divisible by ep {par.ep}")
    if par.cp > 1 and par.cp_variant == "ulysses" and spec.num_attention_heads % (par.tp * par.cp):
        raise InputError(
            where,
            "parallel.cp",
            f"Ulysses splits heads: {spec.num_attention_heads} heads not divisible by tp·cp = {par.tp * par.cp}",
        )
    if spec.position_embedding == "learned" and run.training.seq_length > spec.max_position_embeddings:
        raise InputError(
            where,
            "training.seq_length",
            f"{run.training.seq_length} exceeds {sub.name}'s {spec.max_position_embeddings} learned positions",
        )


def _check_sizes(run: RunConfig, where: str) -> None:
    """The limits on sizes of the whole run (`ppb_core.config.limits`), before any check that works on them."""
    par, train = run.parallel, run.training
    if run.total_body_layers > limits.LAYERS:
        raise InputError(
            where,
            "models",
            f"{run.total_body_layers:,} body layers in all: "
            + limits.over(run.total_body_layers, limits.LAYERS, "body layers"),
        )
    limits.check_schedule(par.pp, par.vpp, train.micro_batches, where, "training.micro_batches")


def _check_run(run: RunConfig, where: str) -> None:
    par, train = run.parallel, run.training
    words = framework_words(train.recompute)
    if words is not None and words != run.framework:
        said = "granularity, modules, method, num_layers" if words == "megatron" else "mode, option"
        raise InputError(
            where, "training.recompute", f"{said} are {words}'s words; this run's framework is {run.framework}"
        )
    cells = par.pp * par.vpp
    if run.total_body_layers < cells:
        raise InputError(
            where, "parallel.pp", f"{run.total_body_layers} layers are fewer than pp·vpp = {cells} pipeline cells"
        )
    try:
        check_schedule(par.schedule, par.pp, par.vpp, train.micro_batches)
    except ValueError as err:
        raise InputError(where, "training.micro_batches", str(err)) from None
    if train.seq_length % par.cp:
        raise InputError(where, "training.seq_length", f"{train.seq_length} is not divisible by cp {par.cp}")
    if par.cp > 1 and par.cp_variant == "ring" and train.seq_length % (2 * par.cp):
        raise InputError(
            where,
            "training.seq_length",
            f"ring attention splits the sequence in 2·cp = {2 * par.cp} load-balanced chunks",
        )
    if par.sequence_parallel and (train.seq_length // par.cp) % par.tp:
        raise InputError(
            where, "training.seq_length", f"sequence parallelism needs seq_length/cp divisible by tp {par.tp}"
        )
    for name in ("memory_mb",):
        if run.device.profile().memory_mb <= run.device.reserved_mb:
            raise InputError(where, f"device.{name}", "no memory left after reserved_mb")
    names = run.model_names
    if len(set(names)) != len(names):
        raise InputError(where, "models", "two models share a name")
    for group in run.ppb.combined:
        for model, _ in group:
            if model not in names:
                raise InputError(where, "ppb.combined", f"no model named {shown(model)}")


def parse_run_config(raw: Any, source: str | Path = "<run config>", base_dir: str | Path = ".") -> RunConfig:
    """A validated `RunConfig` from parsed YAML; referenced files are read relative to *base_dir*."""
    where = str(source)
    if not isinstance(raw, dict):
        raise InputError(where, None, "expected a mapping at the top level")
    raw = dict(raw)
    raw.setdefault("name", Path(where).stem)
    try:
        run = RunConfig(**raw)
    except ValidationError as err:
        raise _pydantic_error(err, where) from None
    base = Path(base_dir)
    specs: dict[str, ModelSpec] = {}
    for index, sub in enumerate(run.models):
        specs[sub.name] = sub.spec if sub.spec is not None else read_hf_config(base / sub.config)
        if sub.census is not None:
            _check_file(base / sub.census, where, f"models.{index}.census", "census")
    if run.timing.calibration is not None:
        _check_file(base / run.timing.calibration, where, "timing.calibration", "calibration")
    run = run.model_copy(update={"specs": specs, "source": where, "base_dir": str(base)})
    _check_sizes(run, where)
    for index, sub in enumerate(run.models):
        _check_model(run, index, sub, specs[sub.name], where)
    _check_run(run, where)
    return run


def _check_file(path: Path, where: str, field: str, kind: str) -> None:
    """A census or calibration file the run config names, read and validated now, before any work:
    its errors name the file; that it is missing or a folder names the run config's field."""
    if not path.exists():
        raise InputError(where, field, f"{path} not found")
    if path.is_dir():
        raise InputError(where, field, f"{path} is a folder, not a {kind} file")
    if kind == "census":
        from ppb_core.census.record import read_census  # the census package imports the config

        read_census(path)
    else:
        from ppb_core.timing.calibration import read_calibration  # the timing package imports the config

        read_calibration(path)


def load_run_config(path: str | Path) -> RunConfig:
    """Read, validate and resolve a run config file; any problem with it or a file it names is an
    InputError (and nothing else), found before any work."""
    path = Path(path)
    raw = read_yaml(path, "is a directory, not a run config")
    return parse_run_config(raw, path, path.parent)


def config_hash(path: str | Path) -> str:
    """A content hash of a run config and every file it names, so any change makes it stale.

    Bad content is hashed like good content (reading it is what fails, later, as one InputError
    of its own partition); only a run config that cannot be read at all (gone, a folder, over the
    size limit, a device) raises, and then only InputError.
    """
    path = Path(path)
    data = read_bytes(path, "is a directory, not a run config", limits.YAML_BYTES)
    digest = hashlib.sha256(data)
    try:
        raw = parse_yaml(decode(data, path), path)
    except InputError:
        return digest.hexdigest()
    raw = raw if isinstance(raw, dict) else {}
    models, timing = raw.get("models"), raw.get("timing")
    refs: list[Any] = []
    for sub in models if isinstance(models, list) else []:
        if isinstance(sub, dict):
            refs.extend(sub.get(key) for key in ("config", "census"))
    refs.append(timing.get("calibration") if isinstance(timing, dict) else None)
    for ref in refs:
        if isinstance(ref, str):
            digest.update(ref.encode("utf-8", "replace") + b"\0")
            try:
                digest.update(read_bytes(path.parent / ref))
            except InputError as err:  # a file missing, a folder, too big: the partition will say so
                digest.update(err.problem.encode())
    return digest.hexdigest()


def resolved_raw(run: RunConfig) -> dict[str, Any]:
    """The run config as plain data, every model's architecture inlined, so it stands alone."""
    raw = run.model_dump(mode="json", exclude_none=True)
    base = Path(run.base_dir)
    for sub, entry in zip(run.models, raw["models"], strict=True):
        entry.pop("config", None)
        entry["spec"] = run.specs[sub.name].model_dump(mode="json")
        if sub.census is not None:
            entry["census"] = str((base / sub.census).resolve())
    if run.timing.calibration is not None:
        raw["timing"]["calibration"] = str((base / run.timing.calibration).resolve())
    return raw


RUN_CONFIG_COLUMNS = ("name", "source", "config_json")


def run_to_frame(run: RunConfig) -> Any:
    """One row: the run config resolved to JSON (the `run_config` asset's table)."""
    import json

    import pandas as pd

    return pd.DataFrame(
        {"name": [run.name], "source": [run.source], "config_json": [json.dumps(resolved_raw(run), sort_keys=True)]}
    )


def run_from_frame(frame: Any) -> RunConfig:
    import json

    if len(frame) != 1:
        raise InputError("run_config table", None, f"expected one row, got {len(frame)}")
    row = frame.iloc[0]
    return parse_run_config(json.loads(row["config_json"]), str(row["source"]), ".")
