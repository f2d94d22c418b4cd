"""The run config: sub-models, parallel setup, training, device; read and validated with clear errors.

Every problem is an `InputError` naming the file, the field (dotted) and what is wrong. Files a
run config names (HuggingFace config.json, census files) are read relative to it.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    Discriminator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Strict,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ppb_core import limits
from ppb_core.config.devices import DEVICE_CATALOG, DeviceProfile, attention_die
from ppb_core.config.hf_vision import VISION_LANGUAGE_TYPES, spec_of_part
from ppb_core.config.layout import LayoutError, cell_layers, parse_layout, standalone_mtp_cell, validate_layout
from ppb_core.config.recompute import (
    FORMS,
    SWITCHES,
    Framework,
    Recompute,
    RecomputeForm,
    Switches,
    TorchtitanRecompute,
    framework_words,
    resolve,
)
from ppb_core.config.releases import (
    CHANGES,
    MEGATRON_CORE,
    PYTORCH,
    TORCHTITAN,
    TRANSFORMER_ENGINE,
    UNSTATED,
    Release,
    parse_release,
    send_waits_of,
)
from ppb_core.config.runtime_reserve import RuntimeReserve, runtime_reserve
from ppb_core.config.spec import ModelSpec, StrictModel, VisionSpec
from ppb_core.config.vision import QWEN_MAX_PIXELS, QWEN_MIN_PIXELS, VisionSequence, vision_sequence
from ppb_core.errors import InputError, meant, misspelt, shown
from ppb_core.io import decode, parse_yaml, read_bytes, read_json, read_yaml, refuse_foreign
from ppb_core.schedules import check as check_schedule
from ppb_core.units import counted

Schedule = Literal["1f1b", "interleaved", "gpipe", "dualpipev"]
Dtype = Literal["bf16", "fp16", "fp32"]
# Megatron-Core's fine-grained activation offloading modules ppb prices (transformer_config.py
# `offload_modules`, d98e8a64; `fused_group_mlp` and the hybrid model's `gdp_qkv` are not priced)
OffloadModule = Literal["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"]
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}
# Optimizer state bytes per parameter with mixed precision: an fp32 master copy plus moments.
# fp32 master copy and moments per parameter; Muon's: Adam's, which its non-matrix parameters run, the
# matrices' one momentum buffer is Megatron's rule (memory/frameworks/muon.py)
OPTIMIZER_STATE_BYTES: dict[str, int] = {"adam": 12, "adamw": 12, "sgd": 8, "sgd_plain": 4, "muon": 12}
# The vocabulary padding each framework applies when the run config states none (`pad_vocab_multiple`):
# Megatron-LM pads the tokenizer's vocabulary to a multiple of --make-vocab-size-divisible-by (default 128)
# times the tensor-parallel size (d98e8a64: megatron/training/arguments.py `--make-vocab-size-divisible-by`,
# megatron/core/tokenizers/utils/build_tokenizer.py `vocab_size_with_padding`, applied whenever
# `pad_vocab_size`, True by default in training_config.py `TokenizerConfig`). torchtitan builds its embedding
# and output layer at the model args' vocab_size as they stand (b5bcd76c6 torchtitan/models/llama3/__init__.py: no
# padding rule anywhere in torchtitan), nor does MindFormers pad its yaml's vocab_size.
DEFAULT_PAD_VOCAB_MULTIPLE: dict[str, int] = {"megatron": 128}

# Sizes bounded by `ppb_core.limits`, refused before any work.
Devices = Annotated[PositiveInt, limits.at_most(limits.DEVICES, "devices")]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=128)]
Factor = Annotated[float, limits.at_most(limits.FACTOR)]
Rate = Annotated[float, Field(ge=limits.DEVICE_RATE_MIN), limits.at_most(limits.DEVICE_RATE)]
Efficiency = Annotated[float, Field(ge=limits.DEVICE_RATE_MIN, le=1.0)]
Latency = Annotated[NonNegativeFloat, limits.at_most(limits.DEVICE_LATENCY_US, "µs")]


def _none_or_efficiency(value: float) -> float:
    """0 (none), or an efficiency a time can be divided by."""
    if 0 < value < limits.DEVICE_RATE_MIN:
        raise ValueError(f"0 (none) or at least {limits.DEVICE_RATE_MIN:g}, got {value!r}")
    return value


ZeroOrEfficiency = Annotated[float, Field(ge=0.0, le=1.0), AfterValidator(_none_or_efficiency)]


class Images(StrictModel):
    """What a vision sub-model sees per sample: how many images, and their size before the processor resizes them."""

    per_sample: PositiveInt = 1
    height: PositiveInt
    width: PositiveInt
    min_pixels: PositiveInt = Field(QWEN_MIN_PIXELS, description="Qwen's image processor: fewest pixels kept")
    max_pixels: PositiveInt = Field(QWEN_MAX_PIXELS, description="Qwen's image processor: most pixels kept")


def _spec_tag(value: Any) -> str:
    """Which spec a sub-model states: a vision tower's has patches."""
    if isinstance(value, dict):
        return "vision" if "patch_size" in value else "text"
    return "vision" if isinstance(value, VisionSpec) else "text"


AnySpec = Annotated[Annotated[ModelSpec, Tag("text")] | Annotated[VisionSpec, Tag("vision")], Discriminator(_spec_tag)]


class SubModel(StrictModel):
    """One model in the pipeline: its architecture from a config.json or an explicit spec."""

    name: Name
    config: str | None = Field(None, description="HuggingFace config.json, relative to the run config")
    part: Literal["vision", "text"] | None = Field(
        None, description="the tower of a vision-language config.json this model is: vision or text"
    )
    spec: AnySpec | None = None
    images: Images | None = Field(None, description="a vision model's images per sample (its sequence)")
    census: str | None = Field(None, description="activations measured by `ppb census`, relative path")
    recompute: Switches | None = Field(None, description="this model's selective switches, over training's")
    pad_vocab_multiple: Annotated[PositiveInt, limits.at_most(limits.VOCABULARY)] | None = Field(
        None,
        description="pad the vocabulary to a multiple of this times tp (Megatron's --make-vocab-size-divisible-by; "
        "unset: 128 under framework megatron, as Megatron-LM pads by default, no padding under the others)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> SubModel:
        if (self.config is None) == (self.spec is None):
            raise ValueError("give exactly one of config (a config.json) or spec (explicit fields)")
        if self.part is not None and self.config is None:
            raise ValueError("part picks a tower of a config.json; an explicit spec is one model already")
        return self


class ParallelOptimizerConfig(StrictModel):
    """MindFormers' `parallel.parallel_optimizer_config` (MindSpore's `set_auto_parallel_context`
    keys; mindformers/trainer/config_args.py `ParallelContextConfig`, commit fd4deebc): how MindSpore's
    optimizer parallel shards (ppb_core.memory.frameworks.mindformers)."""

    gradient_accumulation_shard: bool = Field(
        False,
        description="the accumulated gradients (pipeline or gradient accumulation) sharded over the data-parallel "
        "group too, reduce-scattered at every micro-step; else held whole",
    )
    parallel_optimizer_threshold: Annotated[NonNegativeInt, limits.at_most(limits.DEVICE_MEMORY_MB * 1024, "KB")] = (
        Field(64, description="KB: a parameter smaller than this (shape x its dtype's bytes) is not sharded")
    )
    optimizer_weight_shard_size: Annotated[int, limits.at_most(limits.DEVICES, "devices")] = Field(
        -1, description="ranks a weight is sharded over; -1: its whole data-parallel group (dp x cp)"
    )

    @field_validator("optimizer_weight_shard_size")
    @classmethod
    def _shard_size(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise ValueError(f"must be -1 (the data-parallel group) or a positive group size, got {value}")
        return value


# torchtitan's context parallelism is torch's ring attention (torch/distributed/tensor/experimental/
# _context_parallel, rotating K and V by all-gather or all-to-all: `context_parallel_rotate_method`); v0.2.2
# has no head-splitting (Ulysses) variant.
TITAN_NO_ULYSSES = "ulysses: torchtitan's context parallelism is ring attention (timing.cp_rotate_method)"


class Parallel(StrictModel):
    dp: Devices = 1
    tp: Devices = 1
    pp: Annotated[PositiveInt, limits.at_most(limits.STAGES, "pipeline stages")] = 1
    vpp: Annotated[PositiveInt, limits.at_most(limits.CHUNKS, "chunks per stage")] = Field(
        1, description="virtual pipeline chunks per stage"
    )
    cp: Devices = 1
    cp_variant: Literal["ring", "ulysses", "all_gather", "hierarchical"] = Field(
        "ring",
        description="context parallelism as Megatron-LM's --cp-comm-type runs it under TransformerEngine: ring "
        "(p2p), ulysses (a2a), all_gather (all_gather: K, V gathered before attention, dK, dV reduce-scattered) "
        "or hierarchical (a2a+p2p: an all-to-all inside the first hierarchical_cp_sizes group, the ring across "
        "the second)",
    )
    hierarchical_cp_sizes: list[Annotated[PositiveInt, limits.at_most(limits.DEVICES, "devices")]] | None = Field(
        None,
        max_length=8,
        description="Megatron's --hierarchical-context-parallel-sizes: the CP group's levels, innermost first "
        "(under cp_variant hierarchical [all-to-all ranks, ring ranks]); their product is cp",
    )
    ep: Devices = 1
    etp: Devices | None = Field(None, description="expert tensor parallel; defaults to tp")
    sequence_parallel: bool = False
    zero: Literal[0, 1, 2, 3] = 1
    fsdp: bool = False
    fsdp_impl: Literal["megatron_fsdp", "torch_fsdp2"] | None = Field(
        None,
        description="under framework megatron with fsdp true, which FSDP runs: megatron_fsdp (--use-megatron-fsdp, "
        "the default, as ppb's launch lines write it) or torch_fsdp2 (--use-torch-fsdp2)",
    )
    schedule: Schedule = "1f1b"
    world_size: Devices | None = None
    devices_per_node: Devices = 8
    layout: Annotated[str, Field(max_length=limits.YAML_BYTES)] | None = Field(
        None,
        description="Megatron's --pipeline-model-parallel-layout: the run's layers per virtual stage "
        "(sets vpp and the interleaved schedule where not stated)",
    )
    distributed_optimizer_instances: Devices = Field(
        1,
        description="Megatron's --num-distributed-optimizer-instances: the distributed optimizer shards over "
        "dp·cp / N ranks (each of the N instances a replica)",
    )
    overlap_moe_expert_parallel_comm: bool = Field(
        False,
        description="Megatron's --overlap-moe-expert-parallel-comm: the combined 1F1B schedule, one micro-batch's "
        "forward beside another's backward layer by layer",
    )
    enable_parallel_optimizer: bool | None = Field(
        None,
        description="MindFormers' parallel.enable_parallel_optimizer (framework mindformers): MindSpore's optimizer "
        "parallel shards the weights and their optimizer states over the data-parallel group and all-gathers "
        "each weight in the forward; unset: SAPP's ZeRO levels (parallel.zero)",
    )
    parallel_optimizer_config: ParallelOptimizerConfig | None = Field(
        None, description="MindFormers' parallel.parallel_optimizer_config (with enable_parallel_optimizer true)"
    )
    embedding_parallel_optimizer: bool = Field(
        False,
        description="MindFormers' model.model_config.parallel_optimizer (LlamaConfig, default False): the "
        "embedding table sharded by the optimizer parallel too",
    )
    vocab_emb_dp: bool = Field(
        False,
        description="MindFormers' parallel_config.vocab_emb_dp (framework mindformers; MindFormers' own default is "
        "true): the embedding table and the output head whole on every model-parallel rank (the lookup local, the "
        "head's logits computed over the whole vocabulary, the loss still split); false: both split over tp",
    )
    microbatch_group_size_per_vp_stage: (
        Annotated[PositiveInt, limits.at_most(limits.MICRO_BATCHES, "micro-batches")] | None
    ) = Field(
        None,
        description="Megatron's --microbatch-group-size-per-virtual-pipeline-stage (model_parallel_config.py "
        "microbatch_group_size_per_vp_stage): the interleaved schedule runs each chunk over this many micro-batches "
        "at a time; default pp",
    )

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def cp_a2a(self) -> int:
        """The all-to-all ranks of hierarchical CP (its first level); 1 for the other variants."""
        if self.cp_variant != "hierarchical" or not self.hierarchical_cp_sizes:
            return 1
        return self.hierarchical_cp_sizes[0]

    def _check_hierarchical_cp(self) -> None:
        """Megatron-LM d98e8a64 arguments.py `validate_args`: the levels' product is cp, and a2a+p2p needs
        them; TransformerEngine d0067d0d `attn_forward_func_with_cp` takes a2a+p2p's cp_group as exactly
        [a2a group, p2p group]."""
        sizes = self.hierarchical_cp_sizes
        if sizes is not None and math.prod(sizes) != self.cp:
            raise ValueError(f"hierarchical_cp_sizes {sizes}: their product must be cp {self.cp}")
        if sizes is not None and self.cp_variant != "hierarchical":
            # Megatron-LM d98e8a64 builds the levels' groups whenever they are given (parallel_state.py
            # `initialize_model_parallel`), but only TEDotProductAttention under a2a+p2p hands them to TE
            # (extensions/transformer_engine.py, `cp_group`): elsewhere they price nothing
            raise ValueError(f"hierarchical_cp_sizes {sizes}: read only under cp_variant hierarchical (a2a+p2p)")
        if self.cp_variant == "hierarchical":
            if sizes is None:
                raise ValueError("cp_variant hierarchical (a2a+p2p) needs hierarchical_cp_sizes")
            if len(sizes) != 2:
                raise ValueError(
                    f"hierarchical_cp_sizes {sizes}: a2a+p2p runs two levels, [all-to-all ranks, ring ranks]"
                )

    @property
    def sp(self) -> int:
        """The sequence-parallel split of the activations TP leaves whole."""
        return self.tp if self.sequence_parallel else 1

    @property
    def shard_level(self) -> int:
        """What DP shards: 1 optimizer states, 2 and gradients, 3 (or FSDP) and parameters."""
        return 3 if self.fsdp else self.zero

    def layout_stages(self) -> list[list[str]] | None:
        """The layout parsed: [pipeline rank][virtual stage] -> its characters (None: no layout)."""
        return None if self.layout is None else parse_layout(self.layout, self.pp)

    @model_validator(mode="before")
    @classmethod
    def _chunks_of_the_layout(cls, data: Any) -> Any:
        """Megatron-Core takes the virtual stages from the layout: vpp, and the interleaved schedule
        where there are several, unless stated (a layout it cannot parse is refused after)."""
        if not isinstance(data, dict) or not isinstance(data.get("layout"), str):
            return data
        pp = data.get("pp", 1)
        if not isinstance(pp, int) or pp < 1:
            return data
        try:
            chunks = len(parse_layout(data["layout"], pp)[0])
        except LayoutError:
            return data
        if chunks > 1 and "vpp" not in data and data.get("schedule") in ("1f1b", "gpipe"):
            # the chunks are the layout's: this read "vpp 2 needs schedule interleaved", of a vpp not written
            raise ValueError(
                f"schedule {data['schedule']} runs one chunk a stage; the layout has {chunks} virtual stages per rank, "
                "which Megatron-LM runs interleaved (schedule interleaved, or none stated)"
            )
        filled = dict(data)
        filled.setdefault("vpp", chunks)
        if chunks > 1:
            filled.setdefault("schedule", "interleaved")
        return filled

    @model_validator(mode="after")
    def _consistent(self) -> Parallel:
        if self.layout is not None:
            try:
                chunks = len(parse_layout(self.layout, self.pp)[0])
            except LayoutError as err:
                raise ValueError(f"layout: {err}") from None
            if self.vpp != chunks:
                raise ValueError(f"the layout has {chunks} virtual stages per rank, vpp says {self.vpp}")
        if self.schedule == "interleaved" and self.vpp < 2:
            raise ValueError("schedule interleaved needs vpp >= 2")
        if self.schedule in ("1f1b", "gpipe") and self.vpp > 1:
            raise ValueError(f"vpp {self.vpp} needs schedule interleaved (or dualpipev with vpp 2)")
        if self.schedule == "dualpipev" and self.vpp != 2:
            raise ValueError("schedule dualpipev runs two chunks per stage: set vpp 2")
        if self.pp == 1 and self.schedule != "1f1b":
            raise ValueError(f"schedule {self.schedule} needs pp > 1")
        self._check_hierarchical_cp()
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


class MoeRouter(StrictModel):
    """Megatron's top-k router as configured (megatron/core/transformer/moe/router.py `TopKRouter`,
    d98e8a64): which kernels it launches (`ppb_core.timing.router`). Defaults are Megatron's
    (transformer_config.py: softmax scores, the aux_loss type at coefficient 0, so no auxiliary loss)."""

    score_function: Literal["softmax", "sigmoid", "sqrtsoftplus"] = Field(
        "softmax", description="--moe-router-score-function"
    )
    aux_losses: list[Literal["aux_loss", "seq_aux_loss", "global_aux_loss"]] = Field(
        default_factory=list,
        description="the --moe-router-load-balancing-type losses whose --moe-aux-loss-coeff is above 0",
    )
    sinkhorn: bool = Field(False, description="--moe-router-load-balancing-type sinkhorn (S-BASE balancing)")
    z_loss: bool = Field(False, description="--moe-z-loss-coeff given")
    expert_bias: bool = Field(False, description="--moe-router-enable-expert-bias (aux-loss-free balancing)")
    fusion: bool = Field(False, description="--moe-router-fusion: Transformer Engine's fused router kernels")
    pre_softmax: bool = Field(False, description="--moe-router-pre-softmax")
    topk_scaling: bool = Field(False, description="--moe-router-topk-scaling-factor given")
    force_balance: bool = Field(False, description="--moe-router-force-load-balancing (random logits, benchmarks)")

    @model_validator(mode="after")
    def _one_balancing(self) -> MoeRouter:
        if self.sinkhorn and self.aux_losses:
            raise ValueError("sinkhorn routing takes no aux loss (router.py asserts moe_aux_loss_coeff == 0)")
        return self


class MoeTraining(StrictModel):
    """How the router's tokens reach the experts, in Megatron's terms: dropless (no
    `--moe-expert-capacity-factor`, the default) or dropping beyond a capacity factor, padded to it or not;
    and how unevenly the routing loads the expert-parallel ranks (balanced unless stated)."""

    dropless: bool = Field(True, description="no capacity: every routed token reaches its expert")
    capacity_factor: Annotated[PositiveFloat, limits.at_most(limits.FACTOR)] = Field(
        1.0, description="--moe-expert-capacity-factor: an expert takes at most this times its fair share"
    )
    pad_to_capacity: bool | None = Field(
        None,
        description="Megatron's --moe-pad-expert-input-to-capacity (with a capacity factor): every expert "
        "receives exactly its capacity, padded, whatever the routing (unset: the framework's way, Megatron "
        "off, MindFormers' static shapes on)",
    )
    dropless_imbalance: Annotated[Factor, Field(ge=1.0)] | Literal["bound"] = Field(
        1.0,
        description="the busiest expert-parallel rank's routed tokens over the mean, max/mean per EP rank "
        "(1.0: balanced; bound: the most the routing allows, RunConfig.routed_share); with a capacity factor "
        "and no padding the capacity caps it",
    )
    max_vio: Annotated[Factor, Field(ge=0.0)] | None = Field(
        None,
        description="MaxVio (Wang et al. 2024, arXiv 2408.15664): the most loaded expert's tokens over the "
        "mean, minus 1, in a step; ppb charges the busiest expert-parallel rank 1 + max_vio (exact with one "
        "expert a rank, an upper bound with more), at most what the routing allows",
    )
    router_dtype: Literal["fp32", "fp64"] | None = Field(
        None,
        description="Megatron's --moe-router-dtype: the router's logits and probabilities in this dtype "
        "(unset: the training dtype)",
    )
    permute_fusion: bool = Field(
        False,
        description="Megatron's --moe-permute-fusion: Transformer Engine's fused permute, whose row map is "
        "tokens × (2·experts + 1) int32 (unfused: the sorted indices, one int64 per routed copy)",
    )

    router: MoeRouter = Field(default_factory=MoeRouter, description="the router's settings (Megatron's flags)")
    grouped_gemm: bool = Field(
        True,
        description="Megatron's --moe-grouped-gemm: the local experts as one TEGroupedMLP, whose grouped GEMM "
        "holds Transformer Engine's per-stream workspaces; false: SequentialMLP, each expert's own linears "
        "(Megatron's default)",
    )

    @field_validator("dropless_imbalance", mode="before")
    @classmethod
    def _factor_or_bound(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "bound":
            raise ValueError(f"a factor of at least 1 or bound, got {shown(value)}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _capacity_means_dropping(cls, data: Any) -> Any:
        """Megatron drops tokens exactly when a capacity factor is set (`moe_expert_capacity_factor`
        not None: megatron/core/transformer/moe/moe_utils.py `get_capacity`; dropless otherwise)."""
        if isinstance(data, dict) and "capacity_factor" in data and "dropless" not in data:
            return {**data, "dropless": False}
        return data

    @model_validator(mode="after")
    def _one_routing(self) -> MoeTraining:
        stated = self.dropless_imbalance != 1.0 or self.max_vio is not None
        if self.dropless and self.capacity_factor != 1.0:
            raise ValueError("dropless routing has no capacity factor (Megatron drops tokens when one is set)")
        if self.pad_to_capacity and self.dropless:
            # token_dispatcher.py `MoEAlltoAllTokenDispatcher.__init__` (d98e8a64): drop_and_pad asserts
            # moe_expert_capacity_factor is not None
            raise ValueError("pad_to_capacity needs a capacity_factor, as Megatron-Core asserts")
        if self.pad_to_capacity and stated:
            raise ValueError(
                "with pad_to_capacity every expert receives exactly its capacity: no routing imbalance to state "
                "(dropless_imbalance, max_vio)"
            )
        if self.dropless_imbalance != 1.0 and self.max_vio is not None:
            raise ValueError("state one of dropless_imbalance (per EP rank) and max_vio (per expert), not both")
        if self.router.force_balance and (isinstance(self.dropless_imbalance, float) and stated):
            # moe_utils.py `apply_random_logits` (d98e8a64): random normal logits route every expert evenly
            raise ValueError(
                "router.force_balance routes by random logits, evenly: no imbalance to state (dropless_imbalance, "
                "max_vio)"
            )
        return self

    @property
    def routed_share(self) -> float:
        """The busiest rank's expert rows over their fair share, where no model is needed: the stated
        imbalance of dropless routing; with a capacity factor the capacity padded to, else the imbalance
        the capacity caps (`bound` and `max_vio` need the model's experts, and `pad_to_capacity` unset
        the framework: `RunConfig.routed_share`)."""
        if self.pad_to_capacity:
            return self.capacity_factor
        if self.dropless_imbalance == "bound" or self.max_vio is not None:
            raise ValueError("dropless_imbalance bound and max_vio are resolved with the model's experts")
        return self.dropless_imbalance if self.dropless else min(self.dropless_imbalance, self.capacity_factor)

    def routed_share_bound(self, num_experts: int, experts_per_token: int, ep: int) -> float:
        """The most any expert-parallel rank can receive over its fair share (what `dropless_imbalance`
        may be set to for a guarantee). With a capacity factor every source rank sends each expert at
        most ⌈tokens·k/experts · factor⌉ rows (megatron/core/transformer/moe/moe_utils.py
        `get_capacity`, token_dispatcher.py `MoEAlltoAllTokenDispatcher.preprocess`): the factor.
        Dropless, nothing but the routing itself bounds it: a token's k experts are distinct, so a rank
        holding experts/ep of them receives at most min(k, experts/ep) copies of each token, against
        the k/ep of balanced routing (group-limited routing, `--moe-router-group-topk`, limits the
        ranks a token reaches, not its copies on one)."""
        if not self.dropless:
            return self.capacity_factor
        return self.routing_bound(num_experts, experts_per_token, ep)

    @staticmethod
    def routing_bound(num_experts: int, experts_per_token: int, ep: int) -> float:
        """The most the routing itself lets one expert-parallel rank receive over its fair share:
        ep·min(k, experts/ep)/k (`routed_share_bound`'s dropless case)."""
        return ep * min(experts_per_token, num_experts // ep) / experts_per_token

    def padded(self, framework: str) -> bool:
        """Whether every expert receives its whole capacity: `pad_to_capacity`, unset the framework's way.
        Megatron pads only when asked (`--moe-pad-expert-input-to-capacity`, default off); MindFormers'
        expert inputs have the capacity as their static shape (mindformers/modules/transformer/moe.py
        `MoE.construct`, fd4deebc1: expert_input is dp_group × hidden × expert_dim·expert_capacity)."""
        if self.dropless:
            return False
        return framework == "mindformers" if self.pad_to_capacity is None else self.pad_to_capacity

    def model_share(self, num_experts: int, experts_per_token: int, ep: int) -> float:
        """`routed_share` for a model of *num_experts* experts, top *experts_per_token*, over *ep* ranks.

        MaxVio is per expert (Wang et al. 2024 §2: max over experts of the load, over the mean, minus 1);
        an expert-parallel rank's load is the mean of its experts' over the mean of all, so it is at most
        1 + MaxVio, exactly that with one expert a rank. The routing's own bound caps either. Without
        padding a capacity factor caps what a rank receives (token_dispatcher.py
        `MoEAlltoAllTokenDispatcher.preprocess`, d98e8a64: dropped tokens are not sent; the output size
        is the kept count, `num_out_tokens = num_local_tokens_per_expert.sum()`); padded, every expert
        receives its capacity from every source (`drop_and_pad`: `num_out_tokens = capacity · experts`)."""
        if self.pad_to_capacity:
            return self.capacity_factor
        bound = self.routing_bound(num_experts, experts_per_token, ep)
        if self.max_vio is not None:
            stated = min(1.0 + self.max_vio, bound)
        elif self.dropless_imbalance == "bound":
            stated = bound
        else:
            stated = self.dropless_imbalance
        return stated if self.dropless else min(stated, self.capacity_factor)


class Training(StrictModel):
    seq_length: Annotated[PositiveInt, limits.at_most(limits.SEQUENCE, "tokens")]
    micro_batch_size: Annotated[PositiveInt, limits.at_most(limits.MICRO_BATCH_SIZE, "sequences")] = 1
    micro_batches: Annotated[PositiveInt, limits.at_most(limits.MICRO_BATCHES, "micro-batches")] = 1
    dtype: Dtype = "bf16"
    grad_bytes: Literal[2, 4] = Field(4, description="main-gradient bytes (fp32 accumulation is 4)")
    optimizer: Literal["adam", "adamw", "sgd", "sgd_plain", "muon"] = "adam"
    optimizer_state_bytes: Annotated[PositiveInt, limits.at_most(limits.FACTOR)] | None = Field(
        None, description="overrides the optimizer's default"
    )
    flash_attention: bool = True
    rope_fusion: bool = Field(
        True,
        description="Megatron's rope fusion (off with --no-rope-fusion): where its cos/sin tables are built",
    )
    fp8_cache: Literal["none", "linear", "deepseek"] = Field(
        "none",
        description="linear layers' cached inputs in FP8 (linear), and DeepSeek-V3's MoE SwiGLU inputs in FP8 "
        "and attention output in E5M6 (deepseek); ppb_core.memory.precision",
    )
    dropout: NonNegativeFloat | None = Field(None, description="overrides the models' dropout rates")
    recompute: RecomputeForm = Field(
        default_factory=dict,
        description="a switch dict, full, Megatron's {granularity, modules, method, num_layers} "
        "or torchtitan's {mode, option} (ppb_core.config.recompute)",
    )
    moe: MoeTraining = Field(default_factory=MoeTraining)
    layer_wise_param_layout: bool = Field(
        True,
        description="Megatron's layer-wise distributed optimizer (Muon with zero 1) with its precomputed layout; "
        "false (--no-use-layer-wise-param-layout): the legacy ping-pong of whole parameters over the "
        "data-parallel ranks (ppb_core.memory.frameworks.layer_wise)",
    )
    defer_embedding_wgrad_compute: bool = Field(
        False,
        description="Megatron's --defer-embedding-wgrad-compute: the output layer's weight-gradient GEMMs run at "
        "the pipeline's flush, its inputs and logits' gradients held until then",
    )
    wgrad_deferral_limit: Annotated[NonNegativeInt, limits.at_most(limits.MICRO_BATCHES, "micro-batches")] = Field(
        0, description="Megatron's --wgrad-deferral-limit: micro-batches deferred (0: every one)"
    )
    offload_modules: list[OffloadModule] = Field(
        default_factory=list,
        description="Megatron's --fine-grained-activation-offloading --offload-modules: the modules whose saved "
        "tensors go to host memory between their forward and backward (ppb_core.memory.frameworks.offload)",
    )
    min_offloaded_tensor_size: Annotated[NonNegativeInt, limits.at_most(limits.SEQUENCE**2, "elements")] = Field(
        1024 * 1024, description="Megatron's --min-offloaded-tensor-size: smaller saved tensors stay on the device"
    )
    cpu_offloading_num_layers: Annotated[NonNegativeInt, limits.at_most(limits.LAYERS, "layers")] = Field(
        0,
        description="Megatron's --cpu-offloading-num-layers: Transformer Engine's CPU offloading of the first N "
        "decoder layers' saved activations (ppb_core.memory.frameworks.te_offload)",
    )
    optimizer_states_at_start: bool = Field(
        False,
        description="the optimizer's states (Adam's moments) exist before the launch's first iteration: a run "
        "resumed with its optimizer state, or Megatron-FSDP's with --ckpt-format fsdp_dtensor and --load even "
        "where no checkpoint exists (one step on zero gradients makes them; ppb_core.balance.megatron_import); "
        "the first iteration's moments then hold them",
    )

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


def unknown_device(name: str) -> str:
    """The words for a device name not in the catalog: the one meant, where one is near (`B300`: b300; `h100`, the
    start of one name only: h100-80gb), and the catalog."""
    near = meant(name, DEVICE_CATALOG)
    starting = [known for known in DEVICE_CATALOG if known.startswith(name.lower())] if len(name) >= 3 else []
    if near is None and len(starting) == 1:
        near = starting[0]
    hint = f"did you mean {near}? " if near else ""
    return f"unknown device {shown(name)}: {hint}(catalog: {', '.join(DEVICE_CATALOG)})"


class Device(StrictModel):
    """A catalog device, any figure of which the run config may override."""

    name: str | None = None
    memory_mb: Annotated[PositiveInt, limits.at_most(limits.DEVICE_MEMORY_MB, "MB")] | None = None
    reserved_mb: Annotated[NonNegativeInt, limits.at_most(limits.DEVICE_MEMORY_MB, "MB")] | Literal["auto"] = Field(
        0,
        description="held back outside the framework's allocator (CUDA context, NCCL's buffers); auto: what "
        "ppb_core.config.runtime_reserve derives for the run's framework and parallel layout; unset: 0",
    )
    peak_tflops: Rate | None = Field(None, description="dense 16-bit tensor TFLOPS")
    hbm_bandwidth_gbs: Rate | None = None
    intra_node_bandwidth_gbs: Rate | None = None
    intra_node_links: Annotated[NonNegativeInt, limits.at_most(limits.DEVICES)] | None = Field(
        None, description="a full mesh's links a device, each 1/n of the intra-node bandwidth (0: a switch)"
    )
    inter_node_bandwidth_gbs: Rate | None = None
    matmul_efficiency: Efficiency | None = Field(
        None, description="the fraction of peak a large GEMM reaches (MAMF / peak)"
    )
    memory_efficiency: Efficiency | None = None
    eager_memory_efficiency: ZeroOrEfficiency | None = Field(
        None, description="HBM share PyTorch's eager element-wise kernels reach (0: memory_efficiency)"
    )
    comm_efficiency: Efficiency | None = None
    nic_efficiency: Efficiency | None = Field(None, description="NCCL's share of a NIC's rate (else comm_efficiency)")
    collective_latency_us: Latency | None = Field(None, description="cost of one step of a collective")
    inter_node_latency_us: Latency | None = Field(None, description="added per step across nodes")
    sm_count: Devices | None = Field(None, description="SMs or AI cores: the slots GEMM tiles fill")
    comm_sms: Annotated[NonNegativeInt, limits.at_most(limits.DEVICES)] | None = Field(
        None, description="SMs a collective beside compute takes from it"
    )
    attention_forward_efficiency: Efficiency | None = None
    attention_backward_efficiency: Efficiency | None = None
    flash2_forward_efficiency: Efficiency | None = None
    flash2_backward_efficiency: Efficiency | None = None
    sdpa_flash2_forward_ratio: Efficiency | None = Field(
        None, description="PyTorch SDPA's FlashAttention-2 forward over flash-attn 2's on this GPU (1: as fast)"
    )
    # head size 64's flash-attention rate over head size 128's (0: the generic head-size law)
    attention_head64_forward: ZeroOrEfficiency | None = None
    attention_head64_backward: ZeroOrEfficiency | None = None
    flash2_head64_forward: ZeroOrEfficiency | None = None
    flash2_head64_backward: ZeroOrEfficiency | None = None
    fp8_matmul_efficiency: Annotated[float, Field(ge=0.0, le=1.0), AfterValidator(_none_or_efficiency)] | None = None
    mxfp8_matmul_ratio: Efficiency | None = Field(
        None, description="MXFP8 GEMMs' rate over per-tensor FP8 GEMMs' (TE's block-scaled GEMM with its swizzles)"
    )
    layer_gemm_share: Efficiency | None = Field(
        None, description="a training step's 16-bit GEMMs at a layer's shapes over the tile model at MAMF"
    )
    fp8_layer_gemm_share: Efficiency | None = Field(
        None, description="a training step's FP8 GEMMs at a layer's shapes over the tile model at MAMF"
    )
    attention_back_to_back_share: Efficiency | None = Field(
        None, description="a training step's attention, back to back, over the single-call attention rates"
    )
    mxfp8_quantize_efficiency: ZeroOrEfficiency | None = Field(
        None, description="HBM share TE's MXFP8 quantize kernels reach (0: memory_efficiency)"
    )
    fp8_quantize_efficiency: ZeroOrEfficiency | None = Field(
        None, description="HBM share TE's current-scaling FP8 quantize kernels reach (0: memory_efficiency)"
    )
    gemm_epilogue_overlapped: bool | None = None
    fp8_tile_overhead_us: Latency | None = Field(None, description="fixed time per output tile of an FP8 GEMM")
    gemm_kernel_us: Latency | None = Field(None, description="fixed time of every 16-bit GEMM kernel")
    fp8_gemm_kernel_us: Latency | None = Field(None, description="fixed time of every FP8 GEMM kernel")
    elementwise_kernel_us: Latency | None = Field(
        None, description="fixed GPU time of every memory-bound kernel beside its bytes (0: none)"
    )
    gemm_full_intensity: Annotated[float, Field(gt=0.0, le=1024.0)] | None = Field(
        None, description="operand intensity Tm·Tn/(Tm+Tn) from which a GEMM tile runs at the ceiling"
    )
    host_kernel_us: Latency | None = Field(
        None, description="Megatron's host time per kernel launch, where the GPU waits for it (0: not modelled)"
    )
    host_boost_ghz: Annotated[float, Field(ge=0.0, le=10.0)] | None = Field(
        None, description="the host CPU's max boost clock, GHz, what Megatron's CPU-side work runs at (0: unknown)"
    )
    host_link_gbs: Annotated[float, Field(ge=0.0, le=10000.0)] | None = Field(
        None, description="pinned host-to-device copies, GB/s, what offloaded activations reload at (0: not priced)"
    )

    @field_validator("memory_mb")
    @classmethod
    def _in_mb(cls, memory_mb: int | None) -> int | None:
        if memory_mb is not None and memory_mb < limits.DEVICE_MEMORY_MIN_MB:
            raise ValueError(
                f"{memory_mb:,} MB is less than any accelerator's memory (ppb_core/limits.py): memory_mb is in MB "
                f"of 2**20 bytes ({memory_mb} GiB would be {memory_mb * 1024:,})"
            )
        return memory_mb

    @field_validator("reserved_mb", mode="before")
    @classmethod
    def _auto_or_mb(cls, value: Any) -> Any:
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{shown(value)} is neither a whole number of MB nor auto")
        return value

    @field_validator("name")
    @classmethod
    def _in_catalog(cls, name: str | None) -> str | None:
        if name is not None and name not in DEVICE_CATALOG:
            raise ValueError(unknown_device(name))
        return name

    @model_validator(mode="after")
    def _known(self) -> Device:
        if self.name is None and self.memory_mb is None:
            raise ValueError("give a catalog name or memory_mb")
        return self

    def profile(self) -> DeviceProfile:
        """The catalog figures with this config's overrides applied."""
        base = DEVICE_CATALOG[self.name] if self.name else DEVICE_CATALOG["generic"]
        overrides = {
            key: value for key, value in self.model_dump(exclude={"name", "reserved_mb"}).items() if value is not None
        }
        # a stated NCCL share holds for every collective, gathers and all-to-alls included
        if self.comm_efficiency is not None:
            overrides["nccl_gather_shares"] = ()
            overrides["nccl_alltoall_shares"] = ()
        return base.replace(**overrides)

    @property
    def reserved(self) -> int:
        """reserved_mb in MB; `auto` is resolved by the run config's loader (`parse_run_config`)."""
        if self.reserved_mb == "auto":
            raise ValueError("device.reserved_mb auto is resolved with the run's layout (parse_run_config)")
        return self.reserved_mb

    @property
    def usable_mb(self) -> float:
        return self.profile().memory_mb - self.reserved


Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class Overlap(StrictModel):
    """The share of each collective the time model hides behind compute of the same pass (docs/timing.md)."""

    tp: Fraction = Field(0.0, description="TP collectives on the critical path (comm-GEMM overlap)")
    tp_async: Fraction = Field(1.0, description="backward input-gradient reductions and re-sent all-gathers")
    cp_ring: Fraction = Field(1.0, description="ring attention's key/value exchange behind its blocks")
    cp_a2a: Fraction = Field(0.0, description="Ulysses all-to-alls")
    ep: Fraction = Field(0.0, description="expert dispatch and combine all-to-alls")
    dp: Fraction = Field(
        1.0, description="DP gradient reduction behind the last backward (Megatron --overlap-grad-reduce)"
    )
    param_gather: Fraction = Field(
        1.0, description="distributed optimizer's parameter all-gather behind the next forward"
    )


# TransformerEngine's userbuffers GEMM names and overlap methods (d0067d0d module/base.py `initialize_ub`)
UbGemm = Literal[
    "qkv_fprop", "qkv_dgrad", "qkv_wgrad", "proj_fprop", "proj_dgrad", "proj_wgrad",
    "fc1_fprop", "fc1_dgrad", "fc1_wgrad", "fc2_fprop", "fc2_dgrad", "fc2_wgrad",
]  # fmt: skip
UbMethod = Literal["ring_exchange", "pipeline", "bulk", "external"]
# initialize_ub's reduce-scatter GEMMs (the dgrads' once given a method other than bulk): every other one
# all-gathers, where `pipeline` is refused
UB_REDUCE_SCATTERS = ("proj_fprop", "fc2_fprop", "qkv_wgrad", "fc1_wgrad", "qkv_dgrad", "fc1_dgrad")


class TimingOptions(StrictModel):
    overlap: Overlap = Field(default_factory=Overlap)
    calibration: str | None = Field(None, description="measured layer times (CSV), relative to the run config")
    torch_compile: bool = Field(
        False,
        description="torchtitan's [compile]: each block's element-wise ops fused by Inductor, but the complex "
        "rotary (Inductor falls back to aten's kernels on complex tensors) and, with norm_type rmsnorm, the final "
        "norm outside the compiled blocks",
    )
    norm_type: Literal["nn_rmsnorm", "rmsnorm", "fused_rmsnorm"] = Field(
        "nn_rmsnorm",
        description="torchtitan's RMSNorm: nn_rmsnorm (torch.nn.RMSNorm, from 3b39d7ab0, 2025-03-19; on CUDA "
        "PyTorch's fused kernel aten._fused_rms_norm, pytorch#153666, one kernel each way), rmsnorm (eager "
        "PyTorch ops: torchtitan's models/norms.py RMSNorm before it, or nn.RMSNorm on a PyTorch without the "
        "fused kernel), fused_rmsnorm (its Triton FusedRMSNorm, [model] norm_type before 5078e92e4, 2025-04-17)",
    )
    repeat_kv: bool = Field(
        False,
        description="torchtitan copies K and V out to every query head before SDPA (model.py `repeat_kv`) "
        "instead of passing enable_gqa: its Llama models until ff0829c10 (2026-01-27)",
    )
    sdpa_backend: Literal["cudnn", "flash"] = Field(
        "cudnn",
        description="the kernel torchtitan's SDPA runs: cudnn (cuDNN attention, first in v0.2.2's models/"
        "attention.py ScaledDotProductAttentionWrapper on every GPU from 6a3a9da95, 2025-10-09, on B200 from "
        "3b85aa31f; PyTorch's can_use_cudnn_attention takes GQA) or flash (FlashAttention-2, PyTorch's first "
        "choice before)",
    )
    cp_rotate_method: Literal["allgather", "alltoall"] = Field(
        "allgather",
        description="torchtitan's parallelism.context_parallel_rotate_method (allgather by default from 9dec370 "
        "to v0.2.2): how PyTorch's ring attention passes K and V, one all-gather a pass (_AllGatherRotater) or "
        "one all-to-all shift a step (_AllToAllRotater)",
    )
    fsdp_units: Literal["split", "root"] = Field(
        "split",
        description="the modules torchtitan wraps with fully_shard: split (from 83e694105, 2025-07-28; v0.2.2 "
        "apply_fsdp: tok_embeddings, every block and [norm, output] apart, the last not resharded after the "
        "forward) or root (before it: every block, the last not resharded, and the root model holding the "
        "embedding, final norm and output layer, gathered first and reduce-scattered after the whole backward)",
    )
    optimizer_implementation: Literal["fused", "foreach", "for-loop"] = Field(
        "fused",
        description="torchtitan's optimizer.implementation: fused (torch._fused_adamw_, its default from "
        "6e4988550, 2025-02-24), foreach (torch's _multi_tensor_adam: eight element-wise passes; the "
        "default before) or for-loop (the same passes tensor by tensor)",
    )
    compile_loss: bool | None = Field(
        None,
        description="torchtitan's compile.components holds loss (the cross-entropy compiled: one Inductor kernel "
        "each way; memory: it keeps the 16-bit logits, not fp32 log-probabilities); unset, as torch_compile "
        "(torchtitan compiles both from bbb1b616e, 2025-04-02; before, the loss ran eagerly)",
    )
    moe_dispatcher: Literal["alltoall", "allgather", "deepep", "hybridep", "ncclep"] = Field(
        "alltoall",
        description="Megatron's --moe-token-dispatcher-type: alltoall (all-to-all of every routed copy), "
        "allgather (Megatron's default: every token of the expert-TP × EP group gathered, the outputs "
        "reduce-scattered), or flex with its --moe-flex-dispatcher-backend: deepep (one copy per destination "
        "node), hybridep (HybridEP: one copy per destination NVLink domain, then NVLink inside it; the "
        "permutation inside its dispatch) or ncclep (NCCL EP through Transformer Engine, HybridEP's "
        "hierarchy; the permutation inside its dispatch)",
    )
    moe_shared_expert_overlap: bool = Field(
        False,
        description="Megatron's --moe-shared-expert-overlap (alltoall or flex moe_dispatcher): the shared experts "
        "run on a side stream, their FC1 beside the dispatch's all-to-all and their FC2 beside the combine's, "
        "forward and backward",
    )
    moe_permute_fusion_into_hybridep: bool = Field(
        False,
        description="Megatron's --moe-permute-fusion-into-hybridep (moe_dispatcher hybridep): the permutation "
        "and unpermutation fused into HybridEP's dispatch and combine kernels, no HBM pass of their own",
    )
    moe_hybridep_pad_uneven_dispatch_inputs: bool = Field(
        False,
        description="Megatron's --moe-hybridep-pad-uneven-dispatch-inputs (moe_dispatcher hybridep): each "
        "layer's token count all-reduced (MAX) over expert TP × EP and read on the host before the dispatch",
    )
    hybridep_custom_allgather: bool | None = Field(
        None,
        description="DeepEP HybridEPBuffer's enable_custom_allgather (moe_dispatcher hybridep; Megatron passes "
        "none, so the installed DeepEP's default): true gathers the routing maps inside one NVLink domain with "
        "HybridEP's own one-shot kernel, false with NCCL's all_gather_into_tensor (a ring); unset: true (the "
        "default from hybrid-ep a0d27f1 to e0a5b1d, Megatron-Bridge's CI pin 34152ae among them; false at "
        "eb9cee7 / 7febc6e and again from 94a9f8f)",
    )
    moe_flex_dispatcher_num_sms: Annotated[PositiveInt, limits.at_most(limits.DEVICES)] | None = Field(
        None,
        description="Megatron's --moe-flex-dispatcher-num-sms: the SMs the flex dispatcher's dispatch and "
        "combine kernels take beside compute (unset: DeepEP 20, HybridEP 24 within one NVLink domain and 8 "
        "across, NCCL EP its own)",
    )
    matmul_dtype: Literal["bf16", "fp16", "fp32", "fp8"] | None = Field(
        None, description="the GEMMs' dtype when it differs from training.dtype (FP8 training)"
    )
    param_dtype: Dtype | None = Field(
        None,
        description="MindFormers' model_config.param_init_type, the dtype its weights are kept in, where it "
        "differs from training.dtype (compute_dtype): every Linear casts its weight each forward, the weight "
        "gradient is cast back, gradients accumulate over micro-batches in it, and the data-parallel gradient "
        "reductions (and, without a pipeline or accumulation, the optimizer-parallel gathers) move its bytes "
        "(`iteration.mindspore_reduction_bytes`; time only; framework mindformers)",
    )
    gradient_aggregation_group: PositiveInt | None = Field(
        None,
        description="MindFormers' parallel_config.gradient_aggregation_group (default 4): without a pipeline the "
        "layers' gradient reductions and parameter gathers are fused into that many groups by layer index "
        "(models/utils.py `LayerSetting.set`; time only; framework mindformers)",
    )
    jit_level: Literal["O0", "O1", "O2"] | None = Field(
        None,
        description="MindFormers' context.jit_level, MindSpore's compile level: O1 adds graph-kernel fusion "
        "(DVM on Ascend), under which the cross-entropy and the RMSNorms run as the kernels "
        "`flops.mindformers_loss_bytes` and `flops.mindformers_o1_ops` count; O0, O2 and unset keep the generic "
        "fused counts, not re-derived (time only; framework mindformers)",
    )
    rotary_dtype: Dtype | None = Field(
        None,
        description="MindFormers' model_config.rotary_dtype (LlamaConfig default float32): LLaMA's RotaryEmbedding "
        "casts Q and K to it and rotates them there, its half swap a BatchMatMul; under jit_level O1 priced as "
        "`flops.mindformers_rope_bytes` counts those kernels; unset, or without O1, the generic fused count "
        "(time only; framework mindformers)",
    )
    softmax_compute_type: Dtype | None = Field(
        None,
        description="MindFormers' model_config.softmax_compute_type: without flash attention its `_attn` casts the "
        "scaled, masked scores to it for the Softmax and casts the probabilities back; under jit_level O1 priced as "
        "`flops.mindformers_softmax_bytes` counts those kernels; unset, with flash attention or without O1, the "
        "generic fused count (time only; framework mindformers)",
    )
    fine_grain_interleave: Literal[1, 2] | None = Field(
        None,
        description="MindFormers' model_config.fine_grain_interleave: at 2 each LLaMA layer runs its projections, "
        "norms and MLP as two sequence halves whose forward tensor-parallel collectives MindSpore alternates with "
        "the other half's compute (llama_interleave.py; micro_interleaved_order_control.cc): each collective's half "
        "hides behind half of the compute on one side of it, the other half of it beside the norm and residual add "
        "on the other side (`TimeModel._exposed_s`; time only; framework mindformers)",
    )
    fp8_fsdp_all_gather: bool = Field(
        False,
        description="torchtitan's quantize.linear.float8.enable_fsdp_float8_all_gather (v0.2.2 default false): FSDP2 "
        "all-gathers the blocks' Float8 linear weights in float8, 1 byte an element (torchao float8/fsdp_utils.py "
        "`WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`); needs matmul_dtype fp8, fp8_recipe tensorwise",
    )
    fp8_precompute_scale: bool = Field(
        False,
        description="torchtitan's quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp (v0.2.2 default "
        "false): after the optimizer step one pass over the local weight shards for their amax and one all-reduce "
        "of the scales (torchao `precompute_float8_dynamic_scale_for_fsdp`); needs fp8_fsdp_all_gather",
    )
    tp_comm_overlap_methods: dict[UbGemm, UbMethod] = Field(
        default_factory=dict,
        description="Megatron's --tp-comm-overlap-cfg: TransformerEngine's userbuffers method per GEMM where it is "
        "not initialize_ub's default (ring_exchange for qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; pipeline for "
        "proj_fprop, fc2_fprop; bulk for the rest); a `pipeline` all-gather is refused, as TE does",
    )
    ub_sm_margin: bool = Field(
        True,
        description="TransformerEngine's initialize_ub set_sm_margin for its bulk and pipeline methods (Megatron's "
        "--tp-comm-overlap): the GEMM beside a userbuffers kernel is launched for the SMs the kernel leaves. On by "
        "default since TE 2.0 (d715c836e, #1427); TE 1.x, Megatron core_r0.8.0's, left it off (false), and a "
        "persistent GEMM then waits for the kernel's SMs (ppb_core.timing.kernels.persistent_added_s)",
    )
    fp8_bf16_layers: Annotated[tuple[NonNegativeInt, NonNegativeInt], Strict(False)] = Field(
        (0, 0),
        description="Megatron's --first-last-layers-bf16 (--num-layers-at-start-in-bf16, --num-layers-at-end-in-bf16, "
        "1 and 1): under FP8 these first and last decoder layers run in bf16 (fp8_utils.py "
        "`is_first_last_bf16_layer`)",
    )
    fp8_param_gather: bool = Field(
        False,
        description="Megatron's --fp8-param-gather: the linear weights are FP8 parameters (no quantized copy kept "
        "beside a 16-bit one) and the distributed optimizer all-gathers them in FP8; needs matmul_dtype fp8, "
        "framework megatron and the distributed optimizer or FSDP (ppb_core.memory.frameworks.te_fp8)",
    )
    fp8_recipe: Literal["delayed", "tensorwise", "mxfp8", "blockwise"] = Field(
        "delayed",
        description="Megatron's --fp8-recipe under FP8 training (matmul_dtype fp8): how TransformerEngine scales "
        "its FP8 tensors, which sets the quantization kernels the host launches (ppb_core.timing.launches)",
    )
    transformer_impl: Literal["transformer_engine", "local"] = Field(
        "transformer_engine",
        description="Megatron's --transformer-impl: local runs Megatron's own modules (as Megatron-LM did "
        "before TransformerEngine), adding a linear's bias after its GEMM",
    )
    cuda_graph_impl: Literal["none", "local", "transformer_engine", "full_iteration"] = Field(
        "none",
        description="Megatron's --cuda-graph-impl (off by default; --enable-cuda-graph = local, --external-cuda-graph "
        "= transformer_engine): each graphed layer's captured ops replay as one CUDA graph, one launch on the host; "
        "full_iteration graphs the whole forward-backward (ppb_core.timing.graphs)",
    )
    cuda_graph_modules: list[Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess"]] = Field(
        default_factory=list,
        description="Megatron's --cuda-graph-modules (--cuda-graph-scope before): what a layer's graph captures; "
        "empty, the whole layer (as Megatron)",
    )
    cuda_graph_warmup_steps: Annotated[int, Field(ge=0, le=1_000_000)] = Field(
        3,
        description="Megatron's --cuda-graph-warmup-steps (transformer_config.py, 3): eager iterations before "
        "the graphs are captured; with 0 the capture comes before the first optimizer step "
        "(ppb_core.memory.allocated: what the allocator counts)",
    )
    gradient_accumulation_fusion: bool = Field(
        True,
        description="Megatron's gradient accumulation fusion (off with --no-gradient-accumulation-fusion): the "
        "weight-gradient GEMM adds into the fp32 main gradient; off, it writes a 16-bit gradient that Megatron's "
        "DDP hook adds to the main gradient in its own kernel",
    )
    deepspeed_bf16_optimizer: bool = Field(
        False,
        description="DeepSpeed's BF16_Optimizer (Megatron-DeepSpeed under bf16 with ZeRO stage 0): autograd writes "
        "each micro-batch's 16-bit weight gradients and `update_hp_grads` casts each to fp32 and adds it into the "
        "fp32 gradients (a cast kernel and an add where Megatron's DDP hook adds in one); needs "
        "gradient_accumulation_fusion false, bf16 and zero 1",
    )
    deepspeed_pipeline: bool = Field(
        False,
        description="DeepSpeed's pipeline engine (Megatron-DeepSpeed's PipelineModule): its TrainSchedule's 1F1B with "
        "blocking sends and receives one after another, a forward's receive before the previous backward's send, "
        "a backward's receive after the previous forward's send (ppb_core.pipeline_p2p); needs pp > 1 and 1f1b",
    )
    deterministic: bool = Field(
        False,
        description="Megatron's --deterministic-mode: PyTorch's deterministic algorithms (the NaN fill of what "
        "TransformerEngine allocates) and NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (te_deterministic_attention)",
    )
    te_deterministic_attention: bool | None = Field(
        None,
        description="NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 in Megatron's environment: TransformerEngine's deterministic "
        "attention (below sm90 FlashAttention-2 with its deterministic backward; cuDNN's dP-workspace backward on "
        "Hopper and sm100); default: as deterministic, whose --deterministic-mode sets it",
    )
    te_attention_backend: Literal["auto", "flash", "fused"] = Field(
        "auto",
        description="Megatron's --attention-backend under TransformerEngine (language_module.py "
        "`_set_attention_backend`: NVTE_FLASH_ATTN / NVTE_FUSED_ATTN): auto lets TE choose (flash-attn below "
        "sm90, cuDNN from sm90 on), flash runs TE's FlashAttention on any GPU, fused cuDNN's FusedAttention; "
        "memory (the attention's kept output and backward workspace) and time (FlashAttention-2's rates or cuDNN's)",
    )
    fp8_dot_product_attention: bool = Field(
        False,
        description="Megatron-Core's TransformerConfig.fp8_dot_product_attention (no Megatron-LM flag at d98e8a64: "
        "arguments.py excludes it; Megatron-Bridge's mixed_precision.fp8_dot_product_attention), TE's recipe "
        "fp8_dpa: under FP8 training TransformerEngine's attention runs "
        "cuDNN's FP8 kernels of the recipe (delayed and tensorwise per-tensor FP8, mxfp8 MXFP8) with their casts "
        "(ppb_core.timing.fp8_attention); time only",
    )
    use_transformer_engine_op_fuser: bool = Field(
        False,
        description="Megatron-Core's TransformerConfig.use_transformer_engine_op_fuser (Megatron-LM's "
        "--use-transformer-engine-op-fuser): the routed experts of TEGroupedMLP run as TE's op fuser's fused "
        "grouped MLP, the CuTe DSL kernels of cuDNN's frontend (TE ops/fused/grouped_mlp.py, NVTE_CUTEDSL_FUSED_"
        "GROUPED_MLP=1, which Megatron asserts for a gated expert): the activation, the routing probabilities and "
        "the MXFP8 quantization in the GEMMs' epilogues, one persistent kernel over every expert "
        "(ppb_core.timing.fused_experts); dense MLPs (TEFusedMLP) priced as TE's modules",
    )
    moe_mlp_glu_interleave_size: Annotated[PositiveInt, limits.at_most(limits.FFN)] | None = Field(
        None,
        description="Megatron's --moe-mlp-glu-interleave-size: the experts' fc1 output as alternating blocks of "
        "gate and linear columns; TE's fused grouped MLP matches only at 32 (grouped_mlp.py "
        "`validate_grouped_mlp_dims`)",
    )
    moe_expert_rank_capacity_factor: Annotated[PositiveFloat, limits.at_most(limits.FACTOR)] | None = Field(
        None,
        description="Megatron's --moe-expert-rank-capacity-factor: HybridEP's receive buffer and the fused "
        "grouped MLP sized to this times a rank's balanced rows (static shapes, no host synchronization; tokens "
        "beyond it make the step rerun dropless); time and memory are priced at the routed rows",
    )
    moe_paged_stash: bool = Field(
        False,
        description="Megatron's --moe-paged-stash: the fused grouped MLP's saved tensors (their routed rows only) "
        "copied into paged buffers after its forward and back before its backward "
        "(megatron/core/transformer/moe/paged_stash.py): memory at the buffer's size "
        "(ppb_core.memory.activations), the copies' HBM passes on a side stream (ppb_core.timing.fused_experts)",
    )
    moe_paged_stash_buffer_size_factor_cuda: Annotated[float, Field(ge=-limits.FACTOR, le=limits.FACTOR)] = Field(
        1.10,
        description="Megatron's --moe-paged-stash-buffer-size-factor-cuda: the stash's device buffer over the "
        "balanced rows of the layers in flight (positive; negative sizes it to the measured maximum, which ppb "
        "cannot state: refused)",
    )
    moe_paged_stash_buffer_size_factor_cpu: Annotated[float, Field(ge=-limits.FACTOR, le=limits.FACTOR)] = Field(
        0.0,
        description="Megatron's --moe-paged-stash-buffer-size-factor-cpu: a pinned host buffer the stash spills "
        "to when its device pages run out (host memory; not priced: ppb prices balanced rows, which fit)",
    )
    cudnn_release: str | None = Field(
        None,
        max_length=24,
        pattern=r"^\d+\.\d+(\.\d+){0,2}$",
        description="the cuDNN release whose attention kernels the run ran (9.13.1.26, as a container's release "
        "notes name it): on sm100, before 9.17, cuDNN 9.13's measured rates (ppb_core.timing.attention_rates); "
        "unset: the newest measured, 9.22; not read on other GPUs (one measured release there)",
    )
    host_launch_us: Annotated[float, Field(ge=0.0, le=1000.0)] = Field(
        5.0,
        description="the host's time to launch one kernel where the device states no host_kernel_us, and the "
        "GPU's wait after a host sync: Holistic Trace Analysis's 5-20 us, its lower bound",
    )
    rope_fusion: bool = Field(
        True,
        description="Megatron's fused rotary embedding (off with --no-rope-fusion): unfused, the rotation runs "
        "one PyTorch op at a time",
    )
    check_for_nan_in_grad: bool = Field(
        True,
        description="Megatron's NaN check (--check-for-nan-in-loss-and-grad, on by default; off with --no-check-"
        "for-nan-in-loss-and-grad): each micro-batch's loss checked for NaN and Inf on the host (two syncs); and, "
        "but under fp16's dynamic loss scaling, DDP reads each gradient bucket for its norm before reducing it",
    )
    batch_broadcast: bool = Field(
        True,
        description="Megatron's pretrain_gpt.py get_batch: tensor-parallel rank 0 reads the batch and broadcasts it "
        "over TP before each forward; false: every rank reads its own (NeMo's gpt_data_step)",
    )
    attention_mask_in_dataloader: bool = Field(
        True,
        description="Megatron's create_attention_mask_in_dataloader (--no-create-attention-mask-in-dataloader turns "
        "it off): each micro-batch's bool causal mask, b·s·s bytes, broadcast over TP with the batch and held "
        "through its forward on the first and last stage",
    )
    cross_entropy_fusion: bool = Field(
        False,
        description="Megatron's --cross-entropy-loss-fusion (off by default): the loss's fp32 passes over the "
        "logits fused into three kernels, not run one by one; memory: its compiled backward scatters into an "
        "fp32 copy of the softmax",
    )
    cross_entropy_fusion_impl: Literal["native", "te"] = Field(
        "native",
        description="Megatron's --cross-entropy-fusion-impl under --cross-entropy-loss-fusion: native (Megatron's "
        "compiled functions, fused_cross_entropy.py) or te (TransformerEngine's Triton parallel_cross_entropy, as "
        "NeMo / Megatron-Bridge perf recipes set: two reads of the 16-bit logits and the gradient written over them)",
    )
    log_params_norm: bool = Field(
        False,
        description="Megatron's --log-params-norm: every iteration an L2 norm over the fp32 main parameters a "
        "device holds, two scalar all-reduces and a host sync",
    )
    log_num_zeros_in_grad: bool = Field(
        False,
        description="Megatron's --log-num-zeros-in-grad: every iteration a zero count over the held main "
        "gradients (count_nonzero), two scalar all-reduces and two host syncs",
    )
    exit_duration_in_mins: float | None = Field(
        None,
        gt=0.0,
        description="Megatron's --exit-duration-in-mins: each iteration an all-reduce over every rank of the "
        "exit decision and a host sync (the duration itself costs nothing)",
    )
    weight_hash_interval: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = Field(
        None,
        description="Megatron's --check-weight-hash-across-dp-replicas-interval: on one iteration in N every "
        "parameter is copied to the host and SHA-1 hashed there, the hashes all-gathered and compared (1: every "
        "iteration pays it; above 1 the typical iteration runs none)",
    )
    bias_gelu_fusion: bool = Field(
        True,
        description="Megatron's bias-GeLU fusion (off with --no-bias-gelu-fusion; Megatron turns it off without "
        "biases): unfused, fc1's bias is added by its own kernel before the GeLU",
    )
    bias_dropout_fusion: bool = Field(
        True,
        description="Megatron's bias-dropout-add fusion (off with --no-bias-dropout-fusion; GPTOSSBridge sets it "
        "off): unfused, a branch's bias add, its dropout and the residual add are kernels of their own",
    )
    calculate_per_token_loss: bool = Field(
        False,
        description="Megatron's --calculate-per-token-loss: DDP reduces the gradients unscaled, then the token "
        "count is broadcast over the pipeline and all-reduced over dp·cp, and every held gradient divided by it",
    )
    overlap_param_gather_with_optimizer_step: bool = Field(
        False,
        description="Megatron's --overlap-param-gather-with-optimizer-step (interleaved schedule, distributed "
        "optimizer): the first model chunk's parameter all-gathers launched after its own optimizer step, beside "
        "the other chunks' steps",
    )
    delay_wgrad_compute: bool = Field(
        False,
        description="Megatron's --delay-wgrad-compute (with --overlap-moe-expert-parallel-comm): in the combined "
        "1F1B the experts' and the pre-dispatch part's weight gradients run after their input gradients, off the "
        "all-to-alls' path (ppb_core.timing.combined)",
    )
    masked_softmax_fusion: bool = Field(
        True,
        description="Megatron's scale-mask-softmax fusion (off with --no-masked-softmax-fusion): read only by "
        "Megatron's own attention (--transformer-impl local, unfused); off, the cast, scale, mask, softmax and "
        "cast back run as PyTorch ops",
    )
    attention_softmax_in_fp32: bool = Field(
        False,
        description="Megatron's --attention-softmax-in-fp32 (--apply-query-key-layer-scaling sets it): the "
        "unfused softmax in fp32",
    )
    apply_query_key_layer_scaling: bool = Field(
        False, description="Megatron's --apply-query-key-layer-scaling: the unfused softmax's input scaled first"
    )
    ddp_average_in_collective: bool = Field(
        False,
        description="Megatron's --ddp-average-in-collective: the gradient reduction averages (NCCL's AVG) instead "
        "of DDP scaling each bucket by 1/(dp·cp) before it",
    )
    interleaved_send_waits: Literal["core_r0.8", "core_r0.10", "core_v0.18"] = Field(
        "core_v0.18",
        description="the Megatron-Core release whose overlapped interleaved schedule the run waits for its "
        "pipeline sends as: core_r0.8 (to r0.9) before the next op of the send's kind; core_r0.10 (to v0.17) "
        "after it; core_v0.18 (and d98e8a64) a forward's send before the next op, a backward's after the next "
        "backward (ppb_core.pipeline_p2p)",
    )
    overlap_p2p_comm: bool = Field(
        True,
        description="Megatron's --overlap-p2p-communication (on by default with virtual stages); false "
        "(--no-overlap-p2p-communication, and Megatron-LM of 2022, before the flag): the interleaved schedule's "
        "sends and receives in one blocking call after each warm-up forward, each steady forward-backward pair "
        "and each cool-down backward (ppb_core.pipeline_p2p, megatron_batched)",
    )
    overlap_p2p_comm_warmup_flush: bool = Field(
        False,
        description="Megatron's --overlap-p2p-communication-warmup-flush: the interleaved schedule's warm-up and "
        "cool-down receives prefetched, each posted before the op ahead of it (ppb_core.pipeline_p2p)",
    )
    pipe_partitioned: bool = Field(
        False,
        description="the pipeline's sends split over the tensor-parallel ranks, each sending its share, and "
        "all-gathered over them on arrival, activations and gradients alike (DeepSpeed's pipeline engine, "
        "pipe_partitioned and grad_partitioned, on by default; Megatron-LM's --scatter-gather-tensors-in-pipeline "
        "before Megatron-Core): without sequence parallelism Megatron-Core sends the whole tensor from every rank",
    )

    @model_validator(mode="after")
    def _loss_scaling(self) -> TimingOptions:
        if self.calculate_per_token_loss and self.ddp_average_in_collective:
            # distributed_data_parallel.py asserts it ("Cannot average in collective when calculating
            # per-token loss!")
            raise ValueError("ddp_average_in_collective cannot be set with calculate_per_token_loss")
        return self

    @model_validator(mode="after")
    def _graph_modules(self) -> TimingOptions:
        """Megatron's own checks (megatron/training/arguments.py validate_args, d98e8a64)."""
        modules = self.cuda_graph_modules
        if modules and self.cuda_graph_impl == "full_iteration":
            raise ValueError("cuda_graph_modules must be empty with cuda_graph_impl full_iteration")
        if "moe_preprocess" in modules and "moe_router" not in modules:
            raise ValueError("cuda_graph_modules: moe_preprocess must be given with moe_router")
        return self

    @model_validator(mode="after")
    def _te_determinism(self) -> TimingOptions:
        """--deterministic-mode sets NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 and refuses any other value
        (megatron/training/determinism.py `apply_determinism_env`, d98e8a64)."""
        if self.deterministic and self.te_deterministic_attention is False:
            raise ValueError("te_deterministic_attention false contradicts deterministic true (Megatron requires it)")
        return self

    @property
    def compiled_loss(self) -> bool:
        """Whether torchtitan compiles the loss (`compile_loss`, else with the blocks as v0.2.2 does)."""
        return self.torch_compile if self.compile_loss is None else self.compile_loss

    @property
    def attention_deterministic(self) -> bool:
        """Whether the attention runs its deterministic backend. TransformerEngine's DotProductAttention
        takes `deterministic` = NVTE_ALLOW_NONDETERMINISTIC_ALGO is 0 or PyTorch's deterministic algorithms
        are on (dot_product_attention.py `__init__`; the same test since TE v1.12 (attention.py), through the
        v2.x releases Megatron CI ran, to d0067d0d): the env var alone (`te_deterministic_attention`) under
        TransformerEngine, or Megatron's --deterministic-mode (or torchtitan's debug.deterministic)."""
        te_env = bool(self.te_deterministic_attention) and self.transformer_impl == "transformer_engine"
        return self.deterministic or te_env

    @property
    def cudnn_version(self) -> tuple[int, int] | None:
        """`cudnn_release` as (major, minor); None where unstated."""
        if self.cudnn_release is None:
            return None
        major, minor = self.cudnn_release.split(".")[:2]
        return int(major), int(minor)


# CUBLAS_WORKSPACE_CONFIG's form, ":SIZE:COUNT" pairs (SIZE in KiB), as PyTorch parses it
_CUBLAS_CONFIG = re.compile(r"(:([0-9]+):([0-9]+))+")
_CUBLAS_PAIR = re.compile(r":([0-9]+):([0-9]+)")


class MemoryOptions(StrictModel):
    calibration: str | None = Field(
        None,
        description="measured per-stage peaks of one run (CSV, JSON, or a MindFormers dry run's "
        "'peak memory usage' grep lines or memory_usage YAML), relative to the run config "
        "(ppb_core.memory.calibration)",
    )
    cublas_workspace_config: str | None = Field(
        None,
        max_length=100,
        description="the run's CUBLAS_WORKSPACE_CONFIG (e.g. ':4096:8'): PyTorch's cuBLAS workspace per handle "
        "is the sum of SIZE KiB × COUNT; unset, PyTorch's default for the device",
    )

    @field_validator("cublas_workspace_config")
    @classmethod
    def _cublas_pairs(cls, value: str | None) -> str | None:
        if value is not None and not _CUBLAS_CONFIG.fullmatch(value):
            raise ValueError("CUBLAS_WORKSPACE_CONFIG is ':SIZE:COUNT' pairs (SIZE in KiB), e.g. ':4096:8'")
        return value

    @property
    def cublas_workspace_bytes(self) -> int:
        """PyTorch's workspace per cuBLAS handle under the stated config (aten/src/ATen/cuda/
        CublasHandlePool.cpp `parseChosenWorkspaceSize`: the sum of SIZE·COUNT KiB), 0 when unset."""
        if self.cublas_workspace_config is None:
            return 0
        pairs = _CUBLAS_PAIR.findall(self.cublas_workspace_config)
        return sum(int(size) * int(count) * 1024 for size, count in pairs)


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


class FrameworkRelease(StrictModel):
    """The Megatron-Core, Transformer Engine, PyTorch and torchtitan releases the run ran
    (`ppb_core.config.releases`): the rules that changed since are priced as that code held them. Unset: the
    newest code ppb follows (torchtitan: v0.2.2, whose defaults ppb's follow)."""

    megatron_core: str | None = Field(
        None,
        max_length=40,
        description="Megatron-Core's release tag (core_v0.13.0, core_r0.13.0, 0.13) or the date of the commit "
        "run (YYYY-MM-DD); unset: d98e8a64 (2026-08-22)",
    )
    transformer_engine: str | None = Field(
        None,
        max_length=40,
        description="Transformer Engine's release (v2.4, 2.4, 2.6.0.post1) or the date of the commit run "
        "(YYYY-MM-DD); unset: d0067d0d (2026-08-22)",
    )
    pytorch: str | None = Field(
        None,
        max_length=40,
        description="PyTorch's version (2.5, 2.5.0, or as a container names it, 2.5.0a0+e000cf0ad9); unset: 2.13",
    )
    torchtitan: str | None = Field(
        None,
        max_length=40,
        description="torchtitan's release tag (v0.2.2, 0.2) or the date of the commit run (YYYY-MM-DD, 2024-12-26 "
        "for 9dec370); unset: v0.2.2 (73a0e697, 2026-02-20)",
    )

    @field_validator("megatron_core", "transformer_engine", "pytorch", "torchtitan", mode="before")
    @classmethod
    def _dated(cls, value: Any) -> Any:
        """YAML reads an unquoted 2025-07-05 as a date: the same release as the quoted one."""
        return value.isoformat() if isinstance(value, datetime.date) else value

    @field_validator("megatron_core", "transformer_engine", "pytorch", "torchtitan")
    @classmethod
    def _known(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            parse_release(info.field_name or MEGATRON_CORE, value)
        return value

    def of(self, library: str) -> Release:
        """One library's release (unset: the newest, which holds every change; torchtitan's v0.2.2)."""
        value = getattr(self, library)
        if value is None and library in UNSTATED:
            value = UNSTATED[library][0]
        return Release() if value is None else parse_release(library, value)

    def holds(self, change: str) -> bool:
        """Whether the stated releases' code has the change named *change* (`releases.CHANGES`)."""
        found = CHANGES[change]
        return self.of(found.library).holds(found)

    @property
    def stated(self) -> bool:
        stated = (self.megatron_core, self.transformer_engine, self.pytorch, self.torchtitan)
        return any(value is not None for value in stated)


class RunConfig(StrictModel):
    name: Annotated[str, Field(max_length=256)]
    framework: Framework = Field(
        "megatron", description="what holds the memory: megatron (Megatron-Core), torchtitan (FSDP2), mindformers"
    )
    framework_release: FrameworkRelease = Field(
        default_factory=FrameworkRelease,
        description="under framework megatron, the Megatron-Core, Transformer Engine and PyTorch releases run; "
        "under torchtitan, PyTorch's and torchtitan's (ppb_core.config.releases); unset: the newest code ppb "
        "follows (torchtitan: v0.2.2)",
    )
    models: Annotated[list[SubModel], Field(min_length=1, max_length=limits.MODELS)]
    parallel: Parallel = Field(default_factory=Parallel)
    training: Training
    device: Device
    ppb: PPBOptions = Field(default_factory=PPBOptions)
    timing: TimingOptions = Field(default_factory=TimingOptions)
    memory: MemoryOptions = Field(default_factory=MemoryOptions)
    # Filled by the loader: each sub-model's architecture, and where the file was.
    specs: dict[str, ModelSpec | VisionSpec] = Field(default_factory=dict, exclude=True)
    source: str = Field("", exclude=True)
    base_dir: str = Field(".", exclude=True)
    # what `device.reserved_mb: auto` was resolved from (`runtime_reserve`); None: the config stated a number
    reserve: RuntimeReserve | None = Field(None, exclude=True)

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.models]

    def files_read(self) -> tuple[Path, ...]:
        """The files this run config names (config.json, census and calibration files), where it reads them: an
        output written over one of them would lose an input (`ppb describe run.yaml -o hf/llama3-8b.json`)."""
        names = [name for m in self.models for name in (m.config, m.census)]
        names += [self.timing.calibration, self.memory.calibration]
        return tuple(Path(self.base_dir) / name for name in names if name is not None)

    @property
    def send_waits(self) -> str:
        """When the overlapped interleaved schedule waits for its sends: `timing.interleaved_send_waits` where
        stated, else as `framework_release.megatron_core` runs it (`releases.send_waits_of`)."""
        if "interleaved_send_waits" in self.timing.model_fields_set:
            return self.timing.interleaved_send_waits
        if self.framework_release.megatron_core is not None:
            return send_waits_of(self.framework_release.of(MEGATRON_CORE))
        return self.timing.interleaved_send_waits

    @property
    def shard_level(self) -> int:
        """What data parallelism shards as the framework runs it: 1 optimizer states, 2 and gradients,
        3 and parameters. torchtitan either shards all three with FSDP2 or replicates (zero 0)."""
        par = self.parallel
        if self.framework == "torchtitan":
            return 0 if par.zero == 0 and not par.fsdp else 3
        if par.enable_parallel_optimizer is not None:
            # MindSpore's optimizer parallel: level 1 of its own (weights sharded too, gathered in the forward:
            # `optimizer_parallel`, ppb_core.memory.frameworks.mindformers); off: nothing sharded
            return 1 if par.enable_parallel_optimizer else 0
        return par.shard_level

    @property
    def optimizer_parallel(self) -> bool:
        """MindSpore's optimizer parallel as MindFormers states it (parallel.enable_parallel_optimizer true)."""
        return self.framework == "mindformers" and bool(self.parallel.enable_parallel_optimizer)

    @property
    def megatron_fsdp(self) -> bool:
        """Whether Megatron-FSDP shards the parameters (framework megatron, fsdp true, fsdp_impl unset or
        megatron_fsdp): its non-unit modules then stay gathered (`ppb_core.memory.frameworks.megatron`)."""
        par = self.parallel
        return self.framework == "megatron" and par.fsdp and par.fsdp_impl != "torch_fsdp2"

    @property
    def routed_share(self) -> float:
        """`training.moe.routed_share`, with `dropless_imbalance: bound` and `max_vio` resolved with each
        MoE model's experts (`MoeTraining.model_share`), the largest of them."""
        moe = self.training.moe
        if moe.padded(self.framework):
            if self.framework != "mindformers":
                return moe.capacity_factor
            specs = [spec for spec in self.specs.values() if isinstance(spec, ModelSpec) and spec.is_moe]
            shares = [self.mindformers_capacity_share(s.num_experts, s.experts_per_token) for s in specs]
            return max(shares, default=moe.capacity_factor)
        if moe.dropless_imbalance != "bound" and moe.max_vio is None:
            return moe.routed_share
        specs = [spec for spec in self.specs.values() if isinstance(spec, ModelSpec) and spec.is_moe]
        shares = [moe.model_share(s.num_experts, s.experts_per_token, self.parallel.ep) for s in specs]
        return max(shares, default=1.0)

    def mindformers_capacity_share(self, num_experts: int, experts_per_token: int) -> float:
        """The slots MindFormers' MoEV2 pads each expert to, over the fair share: mindformers/modules/transformer/
        moe.py `calculate_expert_capacity_v2` (2388c729a, a4dfb8219): ⌈k·N·factor / E⌉, at most N, rounded up to a
        multiple of model_parallel, N the tokens the router's group holds (the micro-batch's b·s over cp; under
        `use_seq_parallel` a4dfb8219 routes over dp·mp groups and rounds to 1: N/mp tokens, the same share)."""
        factor, par, train = self.training.moe.capacity_factor, self.parallel, self.training
        tokens = train.micro_batch_size * train.seq_length // par.cp
        capacity = min(math.ceil(experts_per_token * tokens * factor / num_experts), tokens)
        capacity = -(-capacity // par.tp) * par.tp
        return capacity * num_experts / (experts_per_token * tokens)

    def layout_cells(self) -> list[list[int]] | None:
        """[chunk][stage] body layers the run's `parallel.layout` places (None: no layout)."""
        layout = self.parallel.layout_stages()
        return None if layout is None else cell_layers(layout)

    def layout_mtp_cell(self) -> tuple[int, int] | None:
        """[chunk][stage] of the MTP layers where the run's layout puts them apart from the loss
        (Megatron-Core's standalone MTP, `config.layout.standalone_mtp_cell`), else None."""
        layout = self.parallel.layout_stages()
        return None if layout is None else standalone_mtp_cell(layout)

    @property
    def recompute(self) -> Recompute:
        """training.recompute resolved: SLCT's switches, the framework's selective units, the full rule."""
        return resolve(self.training.recompute)

    @property
    def torch_masked_softmax(self) -> bool:
        """Whether Megatron's own attention (dot_product_attention.py `DotProductAttention`, run under
        --transformer-impl local with no flash kernel) takes FusedScaleMaskSoftmax's PyTorch path
        (fused_softmax.py `forward_torch_softmax`, Megatron-LM d98e8a64): with the fusion off."""
        return (
            self.framework == "megatron"
            and self.timing.transformer_impl == "local"
            and not self.training.flash_attention
            and not self.timing.masked_softmax_fusion
        )

    @property
    def yarn_unfused_rope(self) -> bool:
        """Whether a YaRN-scaled rotary sends Megatron to its unfused rotary steps whatever `apply_rope_fusion`
        says: attention.py passes `mscale=_yarn_get_concentration_factor_from_config(config)` (0.1·ln(factor) + 1
        above a factor of 1 with no mscale given: yarn_rotary_pos_embedding.py `_yarn_get_mscale`) and
        rope_utils.py `apply_rotary_pos_emb` falls back to `_apply_rotary_pos_emb_bshd` for any `mscale != 1.0`
        ("not supported by TE's fused RoPE"), Megatron-LM 0d8e0714cd and core_v0.17.0 alike: GPT-OSS through
        Megatron-Bridge (GPTOSSBridge: position_embedding_type "yarn", factor 32, mscale None: 1.3466). MLA's
        rotary is its own path (`_mla_rope_bytes`), not read here."""
        return self.framework == "megatron" and any(
            isinstance(s, ModelSpec) and s.rope_yarn_factor > 1 and not s.is_mla for s in self.specs.values()
        )

    @property
    def attention_sinks(self) -> bool:
        """Whether a model's attention has sinks: a learnable logit per head in every softmax (GPT-OSS; Megatron's
        softmax_type "learnable", which Megatron-Bridge's GPTOSSBridge sets)."""
        return any(isinstance(s, ModelSpec) and s.attention_sinks for s in self.specs.values())

    @property
    def te_attention_backend_run(self) -> str:
        """The attention backend TransformerEngine runs under Megatron's --attention-backend
        (`timing.te_attention_backend`): auto with attention sinks is cuDNN's FusedAttention on any GPU, since
        `get_attention_backend` drops FlashAttention for any softmax_type but vanilla (TE v2.9 and v2.14
        transformer_engine/pytorch/attention/dot_product_attention/utils.py, "Filter: Softmax type"); what
        cuDNN release runs it is `_check_attention_sinks`'s."""
        backend = self.timing.te_attention_backend
        return "fused" if backend == "auto" and self.framework == "megatron" and self.attention_sinks else backend

    @property
    def rope_fused(self) -> bool:
        """Whether Megatron's rotary runs TransformerEngine's fused kernel (time): `apply_rope_fusion`
        (--no-rope-fusion off), unless `yarn_unfused_rope`."""
        return self.timing.rope_fusion and not self.yarn_unfused_rope

    @property
    def softmax_in_fp32(self) -> bool:
        """TransformerConfig `attention_softmax_in_fp32`, which `apply_query_key_layer_scaling` sets."""
        return self.timing.attention_softmax_in_fp32 or self.timing.apply_query_key_layer_scaling

    def spec(self, model: str) -> ModelSpec | VisionSpec:
        return self.specs[model]

    def is_vision(self, model: str) -> bool:
        return isinstance(self.specs[model], VisionSpec)

    def vision(self, model: str) -> VisionSequence:
        """A vision model's sequence per sample: its images as the processor resizes them, in patches."""
        spec = self.specs[model]
        sub = next(m for m in self.models if m.name == model)
        if not isinstance(spec, VisionSpec) or sub.images is None:
            raise KeyError(f"{model} is not a vision model with images")
        images = sub.images
        return vision_sequence(
            spec, images.per_sample, images.height, images.width, images.min_pixels, images.max_pixels
        )

    def switches(self, model: str) -> dict[str, int]:
        """The selective switches a model's layers run (SLCT): training's, then the model's own."""
        sub = next(m for m in self.models if m.name == model)
        stated = {**self.recompute.switches, **(sub.recompute or {})}
        return {name: int(stated.get(name, 1)) for name in SWITCHES}

    def vocab_size(self, model: str) -> int:
        """The vocabulary as trained: padded to `pad_vocab_multiple` × tp, whose default is the framework's
        (`DEFAULT_PAD_VOCAB_MULTIPLE`)."""
        sub = next(m for m in self.models if m.name == model)
        vocab = self.specs[model].vocab_size
        multiple = sub.pad_vocab_multiple or DEFAULT_PAD_VOCAB_MULTIPLE.get(self.framework)
        if multiple:
            step = multiple * self.parallel.tp
            vocab = math.ceil(vocab / step) * step
        return vocab

    @property
    def total_body_layers(self) -> int:
        return sum(spec.num_layers for spec in self.specs.values())


_UNION_TAGS = {*(("recompute", form) for form in FORMS), ("spec", "text"), ("spec", "vision")}


def _is_field(part: Any, previous: Any) -> bool:
    """Whether a part of pydantic's error location is a key the user wrote: not a union member's
    type or a validator (`int`, `function-after[...]`), a mapping's `[key]`, the tag of a tagged union
    (a recompute form's: switches, full, megatron, torchtitan; a sub-model's spec: text or vision)."""
    if isinstance(part, int):
        return True
    if part == "[key]" or (previous, part) in _UNION_TAGS:
        return False
    return not any(mark in part for mark in ("[", "]", "-")) and part not in ("int", "str", "float", "bool", "none")


def _misspelling(errors: list[Any]) -> tuple[Any, str] | None:
    """(the unknown-field error, the required field it misspells) when the first error is a required
    field missing beside an unknown one within two edits of it: `devics: 64` is one mistake, and
    "devices: missing" alone hid which key was at fault."""
    missing = errors[0]["loc"]
    if errors[0]["type"] != "missing" or not missing or not isinstance(missing[-1], str):
        return None
    for other in errors[1:]:
        loc = other["loc"]
        same_place = other["type"] == "extra_forbidden" and loc[:-1] == missing[:-1] and isinstance(loc[-1], str)
        if same_place and misspelt(loc[-1], [missing[-1]]):
            return other, missing[-1]
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation holds: itself, or inside Optional, Annotated, a union or a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The field names (and aliases) the models at pydantic's error location *loc* take, *model* its top: what an
    unknown key there may have meant. Parts that name no field (a list index, a union's tag, a validator) are
    passed over."""
    models = [] if model is None else [model]
    for part in loc:
        inner = [
            found
            for held in models
            if isinstance(part, str) and part in held.model_fields
            for found in _models_in(held.model_fields[part].annotation)
        ]
        models = inner if inner or any(isinstance(part, str) and part in m.model_fields for m in models) else models
    names: list[str] = []
    for held in models:
        for name, info in held.model_fields.items():
            names += [name] if info.alias is None else [name, info.alias]
    return names


def pydantic_error(err: ValidationError, source: str, model: type[BaseModel] | None = None) -> InputError:
    """Pydantic's first error as one line naming the field; an unknown key says the field of *model* (the
    validated class, where given) it most likely meant (`errors.meant`)."""
    errors = err.errors()
    first, wanted = errors[0], None
    typo = _misspelling(errors)
    if typo is not None:
        first, wanted = typo
    loc = first["loc"]
    parts = [p for i, p in enumerate(loc) if _is_field(p, loc[i - 1] if i else None)]
    where = ".".join(str(p) for p in parts) or None
    kind = first["type"]
    if kind == "extra_forbidden" and wanted is None and loc and isinstance(loc[-1], str):
        wanted = meant(loc[-1], _fields_at(model, loc[:-1]))
    if kind == "extra_forbidden":
        problem = "unknown field" + (f": did you mean {wanted}?" if wanted else "")
    elif kind == "missing":
        problem = "missing, and required"
    else:
        problem = first["msg"].removeprefix("Value error, ")
        if "input" in first and kind not in ("value_error", "model_type") and not isinstance(first["input"], dict):
            problem = f"{problem} (got {shown(first['input'])})"
    return InputError(source, where, problem)


def _read_config(path: Path, part: str | None, where: str, index: int) -> ModelSpec | VisionSpec:
    """A sub-model's config.json, the part it names of a vision-language one."""
    raw = read_json(path)
    if part is None and isinstance(raw, dict) and raw.get("model_type") in VISION_LANGUAGE_TYPES:
        raise InputError(
            where, f"models.{index}.part", f"{path} is a {raw['model_type']} model: set part: vision or part: text"
        )
    return spec_of_part(raw, part, str(path))


def _check_vision(run: RunConfig, index: int, sub: SubModel, spec: VisionSpec, where: str) -> None:
    """A vision tower's images, and what it hands the model after it."""
    par, field = run.parallel, f"models.{index}"
    if sub.images is None:
        raise InputError(where, f"{field}.images", "a vision model needs its images: {per_sample, height, width}")
    if sub.census is not None:
        raise InputError(where, f"{field}.census", "the census measures decoder layers, not a vision tower's blocks")
    try:
        sequence = run.vision(sub.name)
    except ValueError as err:
        raise InputError(where, f"{field}.images", str(err)) from None
    if spec.num_attention_heads % par.tp:
        raise InputError(
            where, f"{field}.num_attention_heads", f"{spec.num_attention_heads} heads are not divisible by tp {par.tp}"
        )
    if spec.projector != "none" and spec.projector_hidden_size % par.tp:
        raise InputError(
            where, f"{field}.projector", f"the projector's width {spec.projector_hidden_size} is not divisible by tp"
        )
    tokens = sequence.tokens * run.training.micro_batch_size
    if par.sequence_parallel and tokens % par.tp:
        raise InputError(
            where,
            f"{field}.images",
            f"sequence parallelism splits the tower's {tokens} tokens a micro-batch over tp {par.tp}: not divisible",
        )
    following = run.models[index + 1] if index + 1 < len(run.models) else None
    if spec.projector == "none" or following is None:
        return
    receiver = run.specs[following.name]
    if isinstance(receiver, ModelSpec):
        if spec.out_hidden_size != receiver.hidden_size:
            raise InputError(
                where,
                f"{field}.out_hidden_size",
                f"{sub.name} projects to width {spec.out_hidden_size} but {following.name}'s hidden_size is "
                f"{receiver.hidden_size}",
            )
        if sequence.llm_tokens > run.training.seq_length:
            raise InputError(
                where,
                f"{field}.images",
                f"{sequence.images} images make {sequence.llm_tokens} tokens a sample, more than seq_length "
                f"{run.training.seq_length}",
            )


def _check_model(run: RunConfig, index: int, sub: SubModel, spec: ModelSpec | VisionSpec, where: str) -> None:
    """Combinations a model and the parallel setup cannot run together."""
    par = run.parallel
    field = f"models.{index}"
    if isinstance(spec, VisionSpec):
        _check_vision(run, index, sub, spec, where)
        return
    if sub.images is not None:
        raise InputError(where, f"{field}.images", f"{sub.name} is a language model: images belong to a vision model")
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
    if run.framework == "torchtitan" and not spec.is_mla and spec.kv_heads % par.tp:
        # torchtitan shards wk/wv column-wise and replicates no key/value head: b5bcd76c6
        # torchtitan/models/common/decoder.py raises "tensor_parallel_degree (tp) must divide n_kv_heads" (#2577,
        # fa8e6ccc9, March 2026); before it the attention's view(..., -1, head_dim) failed mid-forward (issue #932)
        raise InputError(
            where,
            f"{field}.num_key_value_heads",
            f"torchtitan shards {spec.kv_heads} key/value heads over tp {par.tp} and replicates none: tp must "
            "divide them",
        )
    if run.vocab_size(sub.name) % par.tp:
        raise InputError(
            where,
            f"{field}.vocab_size",
            f"{spec.vocab_size} is not divisible by tp {par.tp} (set pad_vocab_multiple to pad it)",
        )
    if spec.is_moe and spec.num_experts % par.ep:
        raise InputError(where, f"{field}.num_experts", f"{spec.num_experts} experts are not divisible by ep {par.ep}")
    if spec.position_embedding == "alibi" and (run.framework == "torchtitan" or spec.is_mla):
        # ALiBi is Megatron-DeepSpeed's (BLOOM's) and MindFormers' bloom; torchtitan's models and MLA have rotary
        said = "has no ALiBi in torchtitan's models" if run.framework == "torchtitan" else "MLA carries its own rotary"
        raise InputError(where, f"{field}.spec.position_embedding", f"alibi: {said}")
    if par.cp > 1 and par.cp_variant == "ulysses" and spec.num_attention_heads % (par.tp * par.cp):
        raise InputError(
            where,
            "parallel.cp",
            f"Ulysses splits heads: {spec.num_attention_heads} heads not divisible by tp·cp = {par.tp * par.cp}",
        )
    if par.cp > 1 and par.cp_variant == "ulysses" and spec.kv_heads % (par.tp * par.cp):
        # K and V split by head too: TE d0067d0d context_parallel.py `AttnFuncWithCPAndQKVOA2A.forward` asserts
        # "num_heads % cp_size == 0 for Q, K, V" of a tensor-parallel rank's heads (Megatron's a2a); MindFormers'
        # llama_transformer.py `LLamaAttention` raises unless n_kv_head is a multiple of model_parallel·ulysses_cp_num
        raise InputError(
            where,
            "parallel.cp",
            f"Ulysses splits key/value heads too: {spec.kv_heads} not divisible by tp·cp = {par.tp * par.cp}",
        )
    if par.cp > 1 and par.cp_a2a > 1:
        # TE d0067d0d `flash_attn_a2a_communicate` views each of q, k, v's heads as [cp_a2a, heads/cp_a2a]
        a2a = par.cp_a2a
        kv = max(1, spec.kv_heads // par.tp)  # as geometry.kv_heads_per_rank
        if spec.num_attention_heads % (par.tp * a2a) or kv % a2a:
            raise InputError(
                where,
                "parallel.hierarchical_cp_sizes",
                f"a2a+p2p's all-to-all splits heads over {a2a} ranks: {spec.num_attention_heads // par.tp} query "
                f"and {kv} key/value heads a TP rank must both divide by it",
            )
    if spec.position_embedding == "learned" and run.training.seq_length > spec.max_position_embeddings:
        raise InputError(
            where,
            "training.seq_length",
            f"{run.training.seq_length} exceeds {sub.name}'s {spec.max_position_embeddings} learned positions",
        )


def _check_sizes(run: RunConfig, where: str) -> None:
    """The limits on sizes of the whole run (`ppb_core.limits`), before any check that works on them."""
    par, train = run.parallel, run.training
    if run.total_body_layers > limits.LAYERS:
        raise InputError(
            where,
            "models",
            f"{run.total_body_layers:,} body layers in all: "
            + limits.over(run.total_body_layers, limits.LAYERS, "body layers"),
        )
    limits.check_schedule(par.pp, par.vpp, train.micro_batches, where, "training.micro_batches")


def _check_megatron_modules(run: RunConfig, where: str) -> None:
    """`--recompute-modules` as Megatron-Core refuses them (transformer_config.py
    `TransformerConfig.__post_init__`, d98e8a64), as `ppb check --plan` does for the flags."""
    modules = run.recompute.modules
    plain = [name for name in run.model_names if not run.is_vision(name) and not run.spec(name).is_mla]
    if "mla_up_proj" in modules and plain:
        # "mla_up_proj in recompute_modules is only supported with multi_latent_attention"
        said = f"mla_up_proj needs multi-latent attention, which {plain[0]} has not"
        raise InputError(where, "training.recompute", said)
    fp8_delayed = run.timing.matmul_dtype == "fp8" and run.timing.fp8_recipe == "delayed"
    if fp8_delayed and modules & {"moe_act", "layernorm"}:
        # "Delayed scaling does not support moe_act and layernorm recompute for fp8"
        named = " and ".join(sorted(modules & {"moe_act", "layernorm"}))
        said = f"{named} under FP8's delayed scaling (timing.fp8_recipe): Megatron-Core refuses it"
        raise InputError(where, "training.recompute", said)


# `timing` fields that are Megatron-LM's flags alone, which a torchtitan or MindFormers run reads nowhere (a
# setting away from the default under another framework would be read past without a word); `deterministic`
# is not among them (torchtitan's debug.deterministic runs FlashAttention-2's deterministic backward too),
# nor fp8_recipe (torchtitan's float8 recipes share its words)
MEGATRON_TIMING = frozenset(
    {
        "transformer_impl",
        "ub_sm_margin",
        "gradient_accumulation_fusion",
        "deepspeed_bf16_optimizer",
        "deepspeed_pipeline",
        "rope_fusion",
        "check_for_nan_in_grad",
        "cross_entropy_fusion",
        "cross_entropy_fusion_impl",
        "log_params_norm",
        "log_num_zeros_in_grad",
        "exit_duration_in_mins",
        "weight_hash_interval",
        "bias_gelu_fusion",
        "bias_dropout_fusion",
        "calculate_per_token_loss",
        "overlap_param_gather_with_optimizer_step",
        "delay_wgrad_compute",
        "masked_softmax_fusion",
        "attention_softmax_in_fp32",
        "apply_query_key_layer_scaling",
        "ddp_average_in_collective",
        "te_deterministic_attention",
        "te_attention_backend",
        "fp8_dot_product_attention",
        "use_transformer_engine_op_fuser",
        "moe_mlp_glu_interleave_size",
        "moe_expert_rank_capacity_factor",
        "moe_paged_stash",
        "moe_paged_stash_buffer_size_factor_cuda",
        "moe_paged_stash_buffer_size_factor_cpu",
        "cuda_graph_warmup_steps",
        "overlap_p2p_comm_warmup_flush",
        "overlap_p2p_comm",
    }
)

# `timing` fields that say which torchtitan version runs: its kernels, FSDP2 units and optimizer (TimingOptions)
TORCHTITAN_KERNELS = frozenset(
    {"norm_type", "repeat_kv", "sdpa_backend", "fsdp_units", "optimizer_implementation", "cp_rotate_method"}
)


def _check_float8_gather(run: RunConfig, where: str) -> None:
    """torchtitan v0.2.2 components/quantization/float8.py `Float8LinearConverter.__init__`: the float8
    all-gather only with the tensorwise default (it asserts against a `recipe_name`), the precompute
    only with the float8 all-gather."""
    timing = run.timing
    if timing.fp8_fsdp_all_gather:
        if run.framework != "torchtitan":
            raise InputError(
                where, "timing.fp8_fsdp_all_gather", f"is torchtitan's; this run's framework is {run.framework}"
            )
        if timing.matmul_dtype != "fp8" or timing.fp8_recipe != "tensorwise":
            raise InputError(where, "timing.fp8_fsdp_all_gather", "needs matmul_dtype fp8 and fp8_recipe tensorwise")
    if timing.fp8_precompute_scale and not timing.fp8_fsdp_all_gather:
        raise InputError(where, "timing.fp8_precompute_scale", "needs timing.fp8_fsdp_all_gather")
    for gemm, method in timing.tp_comm_overlap_methods.items():  # TE initialize_ub's checks (d0067d0d)
        if method == "pipeline" and gemm not in UB_REDUCE_SCATTERS:
            raise InputError(where, f"timing.tp_comm_overlap_methods.{gemm}", "pipeline is not for an all-gather")
    if any(timing.fp8_bf16_layers):  # transformer_config.py __post_init__ (d98e8a64)
        field = "timing.fp8_bf16_layers"
        if run.framework != "megatron" or timing.matmul_dtype != "fp8":
            raise InputError(
                where, field, "is Megatron's --first-last-layers-bf16: needs framework megatron, matmul_dtype fp8"
            )
        if timing.fp8_recipe == "delayed":
            raise InputError(where, field, "under delayed scaling (timing.fp8_recipe): Megatron-Core refuses it")
        most = min(spec.num_layers for spec in run.specs.values() if isinstance(spec, ModelSpec)) // run.parallel.pp
        if max(timing.fp8_bf16_layers) > most:
            raise InputError(
                where, field, f"more than a stage's {most} layers (num_layers // pp), as Megatron-Core refuses"
            )
    if timing.fp8_param_gather:  # arguments.py validate_args (d98e8a64) asserts the sharding
        if run.framework != "megatron" or timing.matmul_dtype != "fp8":
            raise InputError(
                where, "timing.fp8_param_gather", "is Megatron's: needs framework megatron, matmul_dtype fp8"
            )
        if run.shard_level < 1:
            raise InputError(where, "timing.fp8_param_gather", "needs the distributed optimizer (zero 1) or FSDP")
    if timing.delay_wgrad_compute and not run.parallel.overlap_moe_expert_parallel_comm:
        # transformer_config.py `__post_init__` (d98e8a64) asserts it; `ppb import megatron` refuses it likewise
        said = "needs parallel.overlap_moe_expert_parallel_comm (the combined 1F1B), as Megatron-Core asserts"
        raise InputError(where, "timing.delay_wgrad_compute", said)
    if timing.overlap_param_gather_with_optimizer_step:
        # arguments.py validate_args (d98e8a64) asserts the distributed optimizer, --overlap-param-gather and
        # virtual stages; `ppb import megatron` refuses the flags likewise (`_optimizer_step_overlap`), and a
        # search spec setting it has its strategies without them refused, as Megatron-LM would
        field, par = "timing.overlap_param_gather_with_optimizer_step", run.parallel
        if run.shard_level < 1:
            raise InputError(where, field, "needs the distributed optimizer (zero 1 or more), as Megatron-LM asserts")
        if timing.overlap.param_gather == 0:
            raise InputError(where, field, "needs the parameter gathers overlapped (timing.overlap.param_gather > 0)")
        if par.schedule != "interleaved" or par.vpp < 2:
            raise InputError(where, field, "needs the interleaved schedule (vpp 2 or more), as Megatron-LM asserts")


def check_timing_words(
    framework: str, timing: TimingOptions, where: str, whose: str = "run", flash_attention: bool = True
) -> None:
    """`timing` settings one framework's code reads and another's never does, refused under the other
    (a run config, and a search spec before its strategies: they hold for every one of them), and settings
    of one part of a framework without that part (*flash_attention*: the run's `training.flash_attention`)."""
    # a setting away from v0.2.2's (a dumped run carries the defaults under every framework)
    fields = TimingOptions.model_fields
    compiled = [f for f in ("torch_compile", "compile_loss") if getattr(timing, f) != fields[f].default]
    if framework != "torchtitan" and compiled:
        # torchtitan's [compile] enable and components (train.py, components/loss.py `build_cross_entropy_loss`);
        # Megatron's and MindFormers' pricing reads neither
        said = f"is torchtitan's [compile] (docs/frameworks.md); this {whose}'s framework is {framework}"
        raise InputError(where, f"timing.{compiled[0]}", said)
    titan_kernels = sorted(f for f in TORCHTITAN_KERNELS if getattr(timing, f) != fields[f].default)
    if framework != "torchtitan" and titan_kernels:
        said = f"is torchtitan's (docs/frameworks.md, torchtitan's version); this {whose}'s framework is {framework}"
        raise InputError(where, f"timing.{titan_kernels[0]}", said)
    if framework != "mindformers" and timing.param_dtype is not None:
        said = f"is MindFormers' param_init_type (docs/timing.md); this {whose}'s framework is {framework}"
        raise InputError(where, "timing.param_dtype", said)
    for word in ("rotary_dtype", "softmax_compute_type"):
        if framework != "mindformers" and getattr(timing, word) is not None:
            said = f"is MindFormers' model_config word (docs/frameworks.md); this {whose}'s framework is {framework}"
            raise InputError(where, f"timing.{word}", said)
    if framework != "mindformers" and timing.jit_level is not None:
        said = f"is MindFormers' context word (docs/frameworks.md); this {whose}'s framework is {framework}"
        raise InputError(where, "timing.jit_level", said)
    if framework != "mindformers" and timing.fine_grain_interleave is not None:
        said = f"is MindFormers' model_config word (docs/frameworks.md); this {whose}'s framework is {framework}"
        raise InputError(where, "timing.fine_grain_interleave", said)
    if framework != "mindformers" and timing.gradient_aggregation_group is not None:
        said = f"is MindFormers' parallel_config word (docs/frameworks.md); this {whose}'s framework is {framework}"
        raise InputError(where, "timing.gradient_aggregation_group", said)
    megatron_words = sorted(f for f in MEGATRON_TIMING if getattr(timing, f) != fields[f].default)
    if framework != "megatron" and megatron_words:
        said = f"is Megatron-LM's (docs/timing.md); this {whose}'s framework is {framework}"
        raise InputError(where, f"timing.{megatron_words[0]}", said)
    if not timing.batch_broadcast and framework != "megatron":
        raise InputError(where, "timing.batch_broadcast", "is Megatron's get_batch: set framework megatron")
    if timing.cudnn_release is not None and framework == "mindformers":
        # MindSpore's FlashAttentionScore is CANN's kernel (devices.py, Ascend 910B): no cuDNN to state
        said = f"is NVIDIA's cuDNN, which no {framework} kernel ppb prices runs; drop it"
        raise InputError(where, "timing.cudnn_release", said)
    if not timing.attention_mask_in_dataloader and framework != "megatron":
        raise InputError(
            where,
            "timing.attention_mask_in_dataloader",
            "is Megatron's --no-create-attention-mask-in-dataloader: set framework megatron",
        )
    # torch.distributed.pipelining's stages (PipelineStage's send ops) send each rank's output as it is
    if timing.pipe_partitioned and framework == "torchtitan":
        raise InputError(
            where,
            "timing.pipe_partitioned",
            "is DeepSpeed's (and Megatron-LM's before Megatron-Core): torchtitan sends each rank's output as it is",
        )
    if timing.cuda_graph_impl != "none" and framework != "megatron":
        raise InputError(where, "timing.cuda_graph_impl", "is Megatron's --cuda-graph-impl: set framework megatron")
    _check_te_words(timing, where, flash_attention)
    warmup = timing.cuda_graph_warmup_steps
    if timing.cuda_graph_impl == "none" and warmup != fields["cuda_graph_warmup_steps"].default:
        # Megatron reads --cuda-graph-warmup-steps only where graphs are captured (training.py), as does
        # `ppb import megatron`; a run without them would read it past without a word
        said = f"{warmup} is the eager steps before a CUDA graph capture: set cuda_graph_impl, or drop it"
        raise InputError(where, "timing.cuda_graph_warmup_steps", said)


def _check_framework_interleaving(run: RunConfig, where: str) -> None:
    """The interleaved schedule's micro-batch counts each framework refuses, beyond a deadlock, and torch's
    1F1B's (fewer micro-batches than stages).

    Megatron-LM d98e8a64 schedules.py `forward_backward_pipelining_with_interleaving` raises RuntimeError
    when the last group of micro-batches, m mod g, is neither 0 nor at least pp; its default group is pp
    (model_parallel_config.py `__post_init__`), so without a group m must be a multiple of pp, deadlock
    or not. torch's ScheduleInterleaved1F1B (torch 2.13 distributed/pipelining/schedules.py, torchtitan's
    Interleaved1F1B) runs max(1, m // pp) rounds and raises ValueError unless m is a multiple of them."""
    par, m = run.parallel, run.training.micro_batches
    if run.framework == "torchtitan" and par.schedule == "1f1b" and par.pp > 1 and m < par.pp:
        # torch 2.13 distributed/pipelining/schedules.py `Schedule1F1B.__init__` (torchtitan v0.2.2's "1F1B"):
        # ValueError "Number of microbatches (m) must be greater than or equal to the number of stages (pp)";
        # torchtitan's `build_pipeline_schedule` only warns, GPipe runs any m
        raise InputError(
            where,
            "training.micro_batches",
            f"torch's Schedule1F1B refuses {m} micro-batches on {par.pp} stages (it needs at least as many as "
            "stages; GPipe runs them)",
        )
    if par.schedule != "interleaved" or m < par.pp:
        return
    if run.framework == "megatron" and par.microbatch_group_size_per_vp_stage is None and m % par.pp:
        accepted = [g for g in range(par.pp, m + 1) if not 0 < m % g < par.pp]
        raise InputError(
            where,
            "training.micro_batches",
            f"{m} micro-batches in Megatron's default groups of pp {par.pp} leave a last group of {m % par.pp}: "
            f"Megatron refuses it; set parallel.microbatch_group_size_per_vp_stage (it accepts {accepted[0]})",
        )
    rounds = max(1, m // par.pp)
    if run.framework == "torchtitan" and m % rounds:
        raise InputError(
            where,
            "training.micro_batches",
            f"torch's Interleaved1F1B runs {m} micro-batches in {rounds} rounds of pp {par.pp} and refuses a "
            "count that is not a multiple of them",
        )


def _check_fp8_attention(run: RunConfig, where: str) -> None:
    """What TransformerEngine runs no FP8 attention for: its recipe's `fp8_dpa` is read only inside FP8 training
    by TE's DotProductAttention, whose backend choice (attention/dot_product_attention/utils.py
    `get_attention_backend`, TE v2.17.0 2e559f062) under FP8 drops FlashAttention and the unfused core and keeps
    cuDNN's FusedAttention only: not for Float8BlockScaling; current scaling and MXFP8 from sm100 only, from cuDNN
    9.14 and 9.21; not on sm120; with determinism on sm100 from cuDNN 9.18 for per-tensor FP8; a softmax offset
    (attention sinks) from sm100 and cuDNN 9.21. With no backend left TE raises ("No dot product attention
    backend is available"); ppb refuses the same settings."""
    timing = run.timing
    if not timing.fp8_dot_product_attention:
        return
    field = "timing.fp8_dot_product_attention"
    if timing.matmul_dtype != "fp8" or timing.transformer_impl != "transformer_engine":
        said = "TE's FP8 attention needs matmul_dtype fp8 and transformer_impl transformer_engine"
        raise InputError(where, field, said)
    if not run.training.flash_attention or timing.te_attention_backend == "flash":
        raise InputError(where, field, "runs cuDNN's fused attention only: needs flash_attention true, not flash")
    capability, cudnn = run.device.profile().compute_capability, timing.cudnn_version
    recipe = timing.fp8_recipe
    if recipe == "blockwise":
        raise InputError(where, field, "TE has no FP8 attention under the blockwise recipe (timing.fp8_recipe)")
    if attention_die(capability) is None:
        said = f"no FP8 attention measured at compute capability {capability} (sm90, sm100, sm103 are)"
        raise InputError(where, field, said)
    if recipe in ("tensorwise", "mxfp8") and capability < 10.0:
        raise InputError(where, field, f"TE runs {recipe} FP8 attention from sm100 only; {run.device.name} is sm90")
    least = {"tensorwise": (9, 14), "mxfp8": (9, 21)}.get(recipe)
    if least is not None and cudnn is not None and cudnn < least:
        said = f"TE runs {recipe} FP8 attention from cuDNN {least[0]}.{least[1]}; timing.cudnn_release is older"
        raise InputError(where, field, said)
    per_tensor = recipe in ("delayed", "tensorwise")
    if per_tensor and timing.attention_deterministic and capability >= 10.0 and cudnn is not None and cudnn < (9, 18):
        said = f"TE's deterministic {recipe} FP8 attention on sm100 needs cuDNN 9.18 (timing.cudnn_release)"
        raise InputError(where, field, said)
    sinks = any(isinstance(spec, ModelSpec) and spec.attention_sinks for spec in run.specs.values())
    if sinks and (capability < 10.0 or (cudnn is not None and cudnn < (9, 21))):
        raise InputError(where, field, "TE's FP8 attention with attention sinks needs sm100 and cuDNN 9.21")


# The first cuDNN whose F16 arbitrary-seqlen SDPA takes a softmax offset (attention sinks): TransformerEngine's
# common/fused_attn/fused_attn.cpp `nvte_get_fused_attn_backend` ("pre-9.13.1: vanilla; 9.13.1+: vanilla, off-by-one,
# learnable", TE v2.9 and v2.14); cudnn-frontend's SDPA node refuses a sink token before 9.13
# (scaled_dot_product_flash_attention.h, 3929da2), computing the sink's gradient beside its dO·O reduction.
CUDNN_SINKS = (9, 13, 1)


def _check_attention_sinks(run: RunConfig, where: str) -> None:
    """What TransformerEngine runs attention sinks with under Megatron (`RunConfig.te_attention_backend_run`):
    cuDNN's FusedAttention from `CUDNN_SINKS`, else UnfusedDotProductAttention under --attention-backend auto
    (`get_attention_backend`'s "Filter: Softmax type" keeps those two, FlashAttention never). Megatron's flash
    backend sets NVTE_FLASH_ATTN=1, NVTE_FUSED_ATTN=0, NVTE_UNFUSED_ATTN=0 and its fused backend NVTE_FUSED_ATTN=1
    alone (language_module.py `_set_attention_backend`, 2edffadb52), leaving no backend where neither qualifies:
    TE raises ("No dot product attention backend is available"), ppb refuses it. The unfused core before
    cuDNN 9.13.1 is ppb's training.flash_attention false; with it true ppb refuses rather than price a flash
    kernel that does not run. A release that names no patch at 9.13 is taken as qualifying."""
    timing, train = run.timing, run.training
    te = run.framework == "megatron" and timing.transformer_impl == "transformer_engine"
    if not te or not run.attention_sinks or not train.flash_attention:
        return
    backend = timing.te_attention_backend
    if backend == "flash":
        said = (
            "flash runs no attention sinks: TE drops FlashAttention for a softmax offset and Megatron's flash "
            "backend turns the fused and unfused cores off (no backend left); use auto or fused"
        )
        raise InputError(where, "timing.te_attention_backend", said)
    if timing.cudnn_release is None:
        return
    parts = tuple(int(part) for part in timing.cudnn_release.split(".")[:3])
    older = parts[:2] < CUDNN_SINKS[:2] or (parts[:2] == CUDNN_SINKS[:2] and len(parts) > 2 and parts[2] < 1)
    if not older:
        return
    if backend == "fused":
        said = "cuDNN runs attention sinks from 9.13.1: TE's fused backend alone leaves no backend before it"
    else:
        said = (
            "cuDNN runs attention sinks from 9.13.1: before it TE runs UnfusedDotProductAttention "
            "(set training.flash_attention false, or a newer release)"
        )
    raise InputError(where, "timing.cudnn_release", said)


def _check_fused_experts(run: RunConfig, where: str) -> None:
    """What Megatron-Core and TransformerEngine run under the op fuser, the rank capacity and the paged stash, and
    what ppb prices of it, each refused in one line. Megatron-LM d98e8a64 experts.py `TEGroupedMLP.__init__`
    asserts `_is_fused_impl_supported` under use_transformer_engine_op_fuser: TE from 2.14 (its fused ops there), no
    expert TP, no expert_fc1 / moe_act offloading, a SwiGLU or quick-GEGLU expert, NVTE_CUTEDSL_FUSED_GROUPED_MLP set
    (for a gated expert). TE 2e559f062 ops/fused/grouped_mlp.py `fuse_grouped_mlp_ops` fuses fc1, activation and fc2
    only under MXFP8 (NVFP4 is no ppb recipe), sm100 kernels (`*_wrapper_sm100`), widths a multiple of 64 and a
    32-wide GLU interleave; elsewhere the op fuser runs its basic ops, which ppb does not price. transformer_config.py
    `__post_init__`: the rank capacity needs the hybridep or ncclep backend (hybridep: the op fuser or
    moe_use_grouped_tensor), the paged stash the rank capacity, no CPU offloading and no offloaded expert_fc1 or
    moe_act."""
    timing, train = run.timing, run.training
    fuser, field = timing.use_transformer_engine_op_fuser, "timing.use_transformer_engine_op_fuser"
    moe = [spec for spec in run.specs.values() if isinstance(spec, ModelSpec) and spec.is_moe]
    if fuser:
        capability = run.device.profile().compute_capability
        problem = None
        if timing.transformer_impl != "transformer_engine":
            problem = "is TransformerEngine's op fuser: needs timing.transformer_impl transformer_engine"
        elif not moe:
            problem = "ppb prices the op fuser's routed experts only; this run has no MoE model (TEFusedMLP)"
        elif not train.moe.grouped_gemm:
            problem = "runs TEGroupedMLP's experts fused: needs training.moe.grouped_gemm (--moe-grouped-gemm)"
        elif run.parallel.expert_tp > 1:
            problem = "Megatron-Core's fused grouped MLP has no expert tensor parallelism (parallel.etp must be 1)"
        elif any(spec.activation not in ("swiglu", "quick_geglu") for spec in moe):
            problem = "Megatron-Core fuses SwiGLU or quick-GEGLU experts only (it asserts for other activations)"
        elif {"expert_fc1", "moe_act"} & set(train.offload_modules):
            problem = "Megatron-Core offloads expert_fc1 or moe_act only unfused (it asserts under the op fuser)"
        elif "moe_act" in run.recompute.modules:
            problem = "moe_act recompute under the fused grouped MLP is not priced (its kernel saves its input)"
        elif timing.matmul_dtype != "fp8" or timing.fp8_recipe != "mxfp8":
            problem = "TE fuses the grouped MLP under MXFP8 only (timing.fp8_recipe); its basic ops are not priced"
        elif not 10.0 <= capability < 11.0:
            problem = f"TE's fused grouped MLP runs sm100 kernels; {run.device.name} is compute capability {capability}"
        elif timing.moe_mlp_glu_interleave_size != 32:
            problem = "TE's fused grouped MLP needs timing.moe_mlp_glu_interleave_size 32 (else its basic ops run)"
        elif any(spec.hidden_size % 64 or (spec.moe_intermediate_size or 0) % 64 for spec in moe):
            problem = "TE's fused grouped MLP needs hidden and expert widths that are multiples of 64"
        elif not run.framework_release.holds("te_fused_grouped_mlp"):
            problem = "TE's fused grouped MLP is from v2.14 (framework_release.transformer_engine is older)"
        elif not run.framework_release.holds("mcore_fused_grouped_mlp"):
            problem = "Megatron-Core runs its experts through the op fuser from core_v0.18.0 (2026-05-15)"
        if problem is not None:
            raise InputError(where, field, problem)
    if timing.moe_mlp_glu_interleave_size is not None and not fuser:
        said = "without the op fuser Megatron reorders the interleaved columns each forward, which is not priced"
        raise InputError(where, "timing.moe_mlp_glu_interleave_size", said)
    capacity, field = timing.moe_expert_rank_capacity_factor, "timing.moe_expert_rank_capacity_factor"
    if capacity is not None:
        if not moe:
            raise InputError(where, field, "is a MoE setting; this run has no MoE model")
        if timing.moe_dispatcher != "hybridep":
            raise InputError(where, field, "ppb prices the rank capacity under HybridEP (timing.moe_dispatcher)")
        if not fuser:
            said = (
                "with HybridEP needs the op fuser (use_transformer_engine_op_fuser) here: Megatron-Core's other "
                "path, moe_use_grouped_tensor, is not priced"
            )
            raise InputError(where, field, said)
        if not run.framework_release.holds("mcore_paged_stash"):
            raise InputError(where, field, "is Megatron-Core's from core_v0.18.0 (2026-05-22)")
    field = "timing.moe_paged_stash"
    if timing.moe_paged_stash:
        if capacity is None:
            said = "needs timing.moe_expert_rank_capacity_factor, as Megatron-Core asserts"
            raise InputError(where, field, said)
        if train.cpu_offloading_num_layers:
            raise InputError(where, field, "cannot run with CPU offloading, as Megatron-Core asserts")
        if {"expert_fc1", "moe_act"} & set(train.offload_modules):
            raise InputError(where, field, "covers expert_fc1 and moe_act: Megatron-Core refuses offloading them")
        if timing.moe_paged_stash_buffer_size_factor_cuda <= 0:
            said = "a buffer sized to the measured maximum (factor <= 0) is not priced: give a positive factor"
            raise InputError(where, "timing.moe_paged_stash_buffer_size_factor_cuda", said)
    else:
        fields = TimingOptions.model_fields
        for name in ("moe_paged_stash_buffer_size_factor_cuda", "moe_paged_stash_buffer_size_factor_cpu"):
            if getattr(timing, name) != fields[name].default:
                raise InputError(where, f"timing.{name}", "is read only with timing.moe_paged_stash")


def _check_te_words(timing: TimingOptions, where: str, flash_attention: bool) -> None:
    """TransformerEngine's settings without the TE part they set, which would price nothing: the attention
    backend (Megatron's language_module.py `_set_attention_backend` sets NVTE_FLASH_ATTN / NVTE_FUSED_ATTN,
    which only TE's DotProductAttention reads, d98e8a64; `ppb import` writes it under the TE spec alone) and
    the userbuffers' settings (`--tp-comm-overlap-cfg`, read by `_initialize_tp_communicators` only under
    `--tp-comm-overlap`, which Megatron runs with TE alone; `ppb import` reads the file only then)."""
    te = timing.transformer_impl == "transformer_engine"
    backend = timing.te_attention_backend
    if backend != "auto" and not te:
        said = f"{backend} is TransformerEngine's attention: needs transformer_impl transformer_engine"
        raise InputError(where, "timing.te_attention_backend", said)
    if backend != "auto" and not flash_attention:
        said = (
            f"{backend} runs a fused attention kernel; training.flash_attention is false (--attention-backend unfused)"
        )
        raise InputError(where, "timing.te_attention_backend", said)
    userbuffers = te and timing.overlap.tp > 0
    if not userbuffers:
        needs = "needs transformer_impl transformer_engine and timing.overlap.tp > 0 (Megatron's --tp-comm-overlap)"
        if timing.tp_comm_overlap_methods:
            raise InputError(where, "timing.tp_comm_overlap_methods", f"are TE's userbuffers methods: {needs}")
        if not timing.ub_sm_margin:
            raise InputError(where, "timing.ub_sm_margin", f"is TE's userbuffers set_sm_margin: {needs}")


def _check_tp_comm_overlap(run: RunConfig, where: str) -> None:
    """Megatron-LM's `--tp-comm-overlap` (`timing.overlap.tp` above 0) asserts sequence parallelism (arguments.py
    `validate_args`, from 116ffddc58, 2023-10-23, to d98e8a64), which it turns off at tensor parallel 1."""
    par = run.parallel
    if run.framework == "megatron" and run.timing.overlap.tp > 0 and (par.tp == 1 or not par.sequence_parallel):
        at = "tp is 1 (Megatron turns sequence parallelism off there)" if par.tp == 1 else "it is off"
        said = f"is Megatron's --tp-comm-overlap, which needs parallel.sequence_parallel; {at}"
        raise InputError(where, "timing.overlap.tp", said)


def check_mesh(device: Device, devices_per_node: int, where: str) -> None:
    """A full mesh of n links a device (`intra_node_links`, one to each peer: `ppb_core.timing.comm`) is a
    node of n + 1 devices; another node size would have pairs with no link, or links to no peer."""
    links = device.profile().intra_node_links
    if links and devices_per_node != links + 1:
        stated = device.intra_node_links is not None
        field = "device.intra_node_links" if stated else "parallel.devices_per_node"
        whose = "" if stated else f" (device {device.name}'s)"
        said = f"a full mesh of {links} links a device{whose} is a node of {links + 1} devices; "
        said += f"devices_per_node is {devices_per_node}"
        raise InputError(where, field, said)


def check_fused_determinism(framework: str, timing: TimingOptions, device: Device, seq_length: int, where: str) -> None:
    """`--attention-backend fused` with deterministic attention below sm90 has no attention to run: TE's
    `get_attention_backend` drops cuDNN's F16_arbitrary_seqlen FusedAttention "for determinism reasons"
    below sm90 when training (transformer_engine/pytorch/attention/dot_product_attention/utils.py, d0067d0d;
    sequences over 512, where the max-512 sub-backend cannot run), and Megatron's fused backend has turned
    FlashAttention and the unfused attention off (language_module.py `_set_attention_backend`, d98e8a64)."""
    if timing.te_attention_backend != "fused" or not timing.attention_deterministic or framework != "megatron":
        return
    capability = device.profile().compute_capability
    if 8.0 <= capability < 9.0 and seq_length > 512:
        said = (
            f"fused under deterministic attention on sm{int(capability * 10)}: TransformerEngine drops cuDNN's "
            "fused attention for determinism below sm90 and Megatron has turned the others off (no attention runs)"
        )
        raise InputError(where, "timing.te_attention_backend", said)


def misplaced_release(framework: str, release: FrameworkRelease) -> tuple[str, str] | None:
    """The first release *release* states that *framework* does not read, and why (None: every one is read):
    Megatron reads Megatron-Core's, TE's and PyTorch's; torchtitan PyTorch's (FSDP2's root rule) and its own
    (`releases.CHANGES`)."""
    read = {"megatron": (MEGATRON_CORE, TRANSFORMER_ENGINE, PYTORCH), "torchtitan": (PYTORCH, TORCHTITAN)}
    for library in (MEGATRON_CORE, TRANSFORMER_ENGINE, PYTORCH, TORCHTITAN):
        if getattr(release, library) is not None and library not in read.get(framework, ()):
            whose = {
                PYTORCH: "is read under frameworks megatron and torchtitan only",
                TORCHTITAN: "is torchtitan's",
            }.get(library, "is Megatron-Core's and Transformer Engine's")
            return library, whose
    return None


def _check_layer_sac(run: RunConfig, where: str) -> None:
    """torchtitan from 114151ad4 (2026-03-23, #2357) has no every-N-th-block selective setting: its
    `selective_ac_option` is gone and `mode = "selective"` is the per-op policy alone (releases
    `torchtitan_op_sac_only`). A run of that code saying every N-th block (an N, or selective with no
    option: v0.2.2's default, 2) asks for what it cannot run."""
    recompute = run.training.recompute
    if not isinstance(recompute, TorchtitanRecompute) or recompute.every is None:
        return
    if run.framework_release.holds("torchtitan_op_sac_only"):
        raise InputError(
            where,
            "training.recompute",
            f"selective_ac_option {recompute.every} (blocks {recompute.every}, {2 * recompute.every}, ... of a rank "
            f"checkpointed) is gone from torchtitan {run.framework_release.torchtitan} (114151ad4, 2026-03-23, on): "
            "selective is the per-op policy "
            "alone; write {mode: selective, option: op}, or mode full",
        )


def _check_titan_etp(run: RunConfig, where: str) -> None:
    """torchtitan from c4b409af2 (2026-04-30, #3167; releases `torchtitan_no_etp`) has no expert tensor
    parallelism: an expert-parallel run of that code with its experts TP-sharded asks for what it cannot run."""
    par = run.parallel
    if run.framework != "torchtitan" or par.ep <= 1 or par.expert_tp <= 1:
        return
    if run.framework_release.holds("torchtitan_no_etp"):
        raise InputError(
            where,
            "parallel.etp",
            f"{par.expert_tp} (unset: tp): torchtitan {run.framework_release.torchtitan} has no expert tensor "
            "parallelism (expert_tensor_parallel_degree gone in c4b409af2, 2026-04-30): set parallel.etp 1",
        )


def _check_titan_replicate(run: RunConfig, where: str) -> None:
    """torchtitan before e1847f439 (2026-03-09; releases `torchtitan_replicate_composes`), v0.2.2 among them,
    replicates without FSDP by DDP, and raises "DDP has not supported > 1D parallelism" unless the replicate
    mesh is the whole world (v0.2.2 models/llama3/infra/parallelize.py `parallelize_llama`: FSDP2 where dp_shard
    or cp > 1, else DDP where dp_replicate > 1). Replicating over dp > 1 beside TP or PP is a run it refuses; the
    search ranked one first (torchtitan Llama 3.1 8B on 8 H100: tp 2, pp 2, dp 2 replicated, session 33)."""
    par = run.parallel
    if run.framework != "torchtitan" or run.shard_level != 0 or par.dp <= 1 or par.cp > 1:
        return  # cp > 1 shards (refused above as replicate)
    if (par.tp > 1 or par.pp > 1) and not run.framework_release.holds("torchtitan_replicate_composes"):
        release = run.framework_release.torchtitan or "v0.2.2"
        # one wording whichever of the two is set: the search's table of reasons is one row, not one per pair
        raise InputError(
            where,
            "parallel.zero",
            f"replicate (zero 0) over dp {par.dp} beside tensor or pipeline parallelism (tp {par.tp}, pp {par.pp}): "
            f"torchtitan {release} replicates by DDP alone, which "
            'refuses any other parallelism ("DDP has not supported > 1D parallelism", models/llama3/infra/'
            "parallelize.py; composable replicate from e1847f439): set fsdp, or state a release from it "
            "(framework_release.torchtitan 2026-03-09 or later)",
        )


def _check_run(run: RunConfig, where: str) -> None:
    par, train = run.parallel, run.training
    release = run.framework_release
    misplaced = misplaced_release(run.framework, release)
    if misplaced is not None:
        library, whose = misplaced
        said = f"{whose}; this run's framework is {run.framework}"
        raise InputError(where, f"framework_release.{library}", said)
    if release.megatron_core is not None and "interleaved_send_waits" in run.timing.model_fields_set:
        waits = send_waits_of(release.of(MEGATRON_CORE))
        if run.timing.interleaved_send_waits != waits:
            said = f"{run.timing.interleaved_send_waits} contradicts framework_release.megatron_core "
            raise InputError(where, "timing.interleaved_send_waits", f"{said}{release.megatron_core} ({waits})")
    words = framework_words(train.recompute)
    if words is not None and words != run.framework:
        said = "granularity, modules, method, num_layers" if words == "megatron" else "mode, option"
        raise InputError(
            where, "training.recompute", f"{said} are {words}'s words; this run's framework is {run.framework}"
        )
    _check_layer_sac(run, where)
    _check_titan_etp(run, where)
    _check_titan_replicate(run, where)
    check_timing_words(run.framework, run.timing, where, flash_attention=train.flash_attention)
    check_mesh(run.device, par.devices_per_node, where)
    _check_tp_comm_overlap(run, where)
    check_fused_determinism(run.framework, run.timing, run.device, run.training.seq_length, where)
    _check_float8_gather(run, where)
    _check_fp8_attention(run, where)
    _check_attention_sinks(run, where)
    _check_fused_experts(run, where)
    for index, sub in enumerate(run.models):
        if sub.recompute is not None and not isinstance(train.recompute, dict):
            raise InputError(
                where,
                f"models.{index}.recompute",
                "a model's switches refine ppb's switch dict; training.recompute in another form is run-wide",
            )
    if par.fsdp and "zero" in par.model_fields_set and par.zero != 3:
        # FSDP shards parameters, gradients and optimizer states (`shard_level` 3): a ZeRO stage stated beside
        # it says otherwise, and taking either silently prices a run the user did not ask for
        raise InputError(
            where,
            "parallel.zero",
            f"zero {par.zero} contradicts fsdp true (FSDP shards as ZeRO-3): drop zero or set it to 3, "
            "or set fsdp false",
        )
    _check_parallel_optimizer(run, where)
    _check_vocab_emb_dp(run, where)
    if run.timing.overlap_p2p_comm_warmup_flush and par.schedule != "interleaved":
        # Megatron sets overlap_p2p_comm False without virtual stages (arguments.py validate_args), so
        # batch_p2p_comm = True (argument_utils.py), and model_parallel_config.py `__post_init__` then raises
        # ("only compatible with overlap_p2p_comm but not batch_p2p_comm"; d98e8a64)
        said = f"needs the interleaved schedule (vpp > 1), as Megatron-Core asserts; this run's is {par.schedule}"
        raise InputError(where, "timing.overlap_p2p_comm_warmup_flush", said)
    if run.timing.overlap_p2p_comm_warmup_flush and not run.timing.overlap_p2p_comm:
        # model_parallel_config.py `__post_init__` (d98e8a64): the flush "is only compatible with
        # overlap_p2p_comm but not batch_p2p_comm", and batch_p2p_comm is `not overlap_p2p_comm`
        said = "needs timing.overlap_p2p_comm (Megatron-Core refuses it with --no-overlap-p2p-communication)"
        raise InputError(where, "timing.overlap_p2p_comm_warmup_flush", said)
    if par.microbatch_group_size_per_vp_stage is not None and par.schedule != "interleaved":
        # Megatron reads the group only in forward_backward_pipelining_with_interleaving
        said = f"is the interleaved schedule's group (vpp > 1, schedule interleaved); this run's is {par.schedule}"
        raise InputError(where, "parallel.microbatch_group_size_per_vp_stage", said)
    if par.microbatch_group_size_per_vp_stage is not None and run.framework != "megatron":
        # torchtitan's Interleaved1F1B and MindFormers' interleaved pipeline have no such group
        said = f"is Megatron-Core's interleaved schedule's group; this run's framework is {run.framework}"
        raise InputError(where, "parallel.microbatch_group_size_per_vp_stage", said)
    if par.fsdp_impl is not None and (run.framework != "megatron" or not par.fsdp):
        # the choice is Megatron-LM's (--use-megatron-fsdp or --use-torch-fsdp2); elsewhere it prices nothing
        said = "needs framework megatron" if run.framework != "megatron" else "needs fsdp true"
        raise InputError(where, "parallel.fsdp_impl", f"{par.fsdp_impl} {said}")
    if run.framework == "torchtitan" and par.cp > 1 and par.cp_variant == "ulysses":
        raise InputError(where, "parallel.cp_variant", TITAN_NO_ULYSSES)
    if run.framework == "torchtitan" and par.cp > 1 and run.shard_level == 0:
        # torchtitan v0.2.2 distributed/parallel_dims.py `fsdp_enabled` is dp_shard or cp enabled, and
        # models/llama3/infra/parallelize.py applies FSDP2 over dp_shard·cp whenever it holds (HSDP beside
        # dp_replicate), DDP only without it: with cp > 1 the parameters are sharded, never replicated
        said = (
            f"torchtitan shards with FSDP2 over dp_shard·cp whenever cp > 1 (parallel_dims.py fsdp_enabled): "
            f"replicate (zero 0) with cp {par.cp} is not what it runs; set fsdp"
        )
        raise InputError(where, "parallel.zero", said)
    if run.framework == "torchtitan" and "zero" in par.model_fields_set and par.zero in (1, 2) and not par.fsdp:
        # torchtitan shards with FSDP2 (fully_shard: parameters, gradients and optimizer states
        # together) or replicates; it has no ZeRO-1 or ZeRO-2.
        raise InputError(
            where,
            "parallel.zero",
            f"torchtitan has no ZeRO-{par.zero}: fsdp (zero 3, the default) or replicate (zero 0)",
        )
    if par.distributed_optimizer_instances > 1:
        _check_optimizer_instances(run, where)
    if train.defer_embedding_wgrad_compute or train.wgrad_deferral_limit:
        _check_deferral(run, where)
    if train.offload_modules:
        _check_offload(run, where)
    if run.timing.deepspeed_bf16_optimizer:
        _check_bf16_optimizer(run, where)
    if run.timing.deepspeed_pipeline and (par.pp == 1 or par.vpp > 1 or par.schedule != "1f1b"):
        # DeepSpeed's PipelineEngine runs `TrainSchedule` (runtime/pipe/schedule.py): 1F1B, one stage a rank
        said = "needs pipeline parallelism (pp > 1)" if par.pp == 1 else "runs 1F1B alone: schedule 1f1b, vpp 1"
        raise InputError(where, "timing.deepspeed_pipeline", said)
    if train.cpu_offloading_num_layers:
        _check_cpu_offloading(run, where)
    if not train.layer_wise_param_layout and (train.optimizer != "muon" or run.shard_level != 1):
        raise InputError(
            where,
            "training.layer_wise_param_layout",
            "is Megatron's layer-wise optimizer's: needs optimizer muon, zero 1",
        )
    if train.optimizer == "muon" and run.framework != "megatron":
        raise InputError(
            where, "training.optimizer", "muon is Megatron-Core's emerging optimizer: set framework megatron"
        )
    if train.optimizer == "muon" and par.fsdp:
        # arguments.py validate_args: "Emerging optimizer does not support Torch-FSDP2 / Megatron-FSDP for now."
        raise InputError(where, "training.optimizer", "muon does not run under FSDP, as Megatron-LM asserts")
    if run.framework == "megatron" and "moe_act" in run.recompute.modules and not train.moe.grouped_gemm:
        # transformer_config.py TransformerConfig.__post_init__: "moe_act in recompute_modules is only
        # supported with moe_grouped_gemm"
        raise InputError(
            where, "training.recompute", "moe_act needs training.moe.grouped_gemm (Megatron's --moe-grouped-gemm)"
        )
    if run.framework == "megatron":
        _check_megatron_modules(run, where)
    _check_padding(run, where)
    if run.framework != "megatron" and run.timing.moe_dispatcher == "allgather":
        raise InputError(
            where, "timing.moe_dispatcher", "allgather is Megatron-Core's token dispatcher: set framework megatron"
        )
    _check_flex(run, where)
    _check_shared_overlap(run, where)
    plain_mla = [name for name, spec in run.specs.items() if isinstance(spec, ModelSpec) and not spec.mla_latent_norms]
    if plain_mla and run.framework != "megatron":  # torchtitan's and MindFormers' MLA norm their latents
        said = "mla_latent_norms false is Megatron's MLA without --qk-layernorm: set framework megatron"
        raise InputError(where, f"models.{run.model_names.index(plain_mla[0])}.spec.mla_latent_norms", said)
    if par.layout is not None:
        _check_layout(run, where)
    if par.overlap_moe_expert_parallel_comm:
        _check_combined_1f1b(run, where)
    cells = par.pp * par.vpp
    if par.layout is None and run.total_body_layers < cells:
        layers, verb = counted(run.total_body_layers, "layer"), "is" if run.total_body_layers == 1 else "are"
        raise InputError(where, "parallel.pp", f"{layers} {verb} fewer than pp·vpp = {cells} pipeline cells")
    group = par.microbatch_group_size_per_vp_stage
    if group is not None and train.micro_batches >= par.pp:  # fewer micro-batches than stages: said below
        try:
            check_schedule(par.schedule, par.pp, par.vpp, train.micro_batches, group)
        except ValueError as err:
            raise InputError(where, "parallel.microbatch_group_size_per_vp_stage", str(err)) from None
    try:
        check_schedule(par.schedule, par.pp, par.vpp, train.micro_batches, group)
    except ValueError as err:
        raise InputError(where, "training.micro_batches", str(err)) from None
    _check_framework_interleaving(run, where)
    if train.seq_length % par.cp:
        raise InputError(where, "training.seq_length", f"{train.seq_length} is not divisible by cp {par.cp}")
    if par.cp > 1 and par.cp_variant != "ulysses" and train.seq_length % (2 * par.cp):
        raise InputError(
            where,
            "training.seq_length",
            f"{train.seq_length} is not divisible by 2·cp = {2 * par.cp}: {par.cp_variant} context parallelism "
            "splits the sequence in 2·cp load-balanced chunks",
        )
    if par.cp > 1 and par.cp_variant in ("all_gather", "hierarchical"):
        # TransformerEngine's implementations of Megatron's --cp-comm-type all_gather and a2a+p2p (context_parallel.py
        # d0067d0d); TE runs context parallelism only in its flash and fused backends (dot_product_attention/utils.py
        # `get_attention_backend`: "Disabling UnfusedDotProductAttention as it does not support context parallelism")
        if run.framework != "megatron" or run.timing.transformer_impl != "transformer_engine":
            raise InputError(
                where, "parallel.cp_variant", f"{par.cp_variant} is TransformerEngine's, under framework megatron"
            )
        if not train.flash_attention:
            raise InputError(
                where,
                "parallel.cp_variant",
                f"{par.cp_variant}: TransformerEngine runs context parallelism in flash or fused attention only",
            )
    if par.sequence_parallel and (train.seq_length // par.cp) % par.tp:
        raise InputError(
            where, "training.seq_length", f"sequence parallelism needs seq_length/cp divisible by tp {par.tp}"
        )
    if run.timing.matmul_dtype == "fp8" and not run.device.profile().fp8_matmul_efficiency:
        raise InputError(
            where, "timing.matmul_dtype", f"{run.device.name or 'the device'} has no FP8 tensor cores in the catalog"
        )
    for name in ("memory_mb",):
        if run.device.profile().memory_mb <= run.device.reserved:
            held = f" ({run.device.reserved:,} MB: auto)" if run.reserve is not None else ""
            raise InputError(where, f"device.{name}", f"no memory left after reserved_mb{held}")
    names = run.model_names
    if len(set(names)) != len(names):
        twice = next(index for index, name in enumerate(names) if name in names[:index])
        raise InputError(
            where, f"models.{twice}.name", f"{shown(names[twice])} is also models.{names.index(names[twice])}'s name"
        )
    for group in run.ppb.combined:
        for model, _ in group:
            if model not in names:
                raise InputError(where, "ppb.combined", f"no model named {shown(model)}")


def _check_padding(run: RunConfig, where: str) -> None:
    """MindFormers' MoE has no unpadded capacity mode: its expert inputs are shaped to the capacity
    (`MoeTraining.padded`), so neither `pad_to_capacity: false` nor an imbalance beside a capacity factor."""
    moe = run.training.moe
    if run.framework != "mindformers" or moe.dropless:
        return
    if moe.pad_to_capacity is False:
        said = "false is not MindFormers': its expert inputs are shaped to the capacity (static shapes)"
        raise InputError(where, "training.moe.pad_to_capacity", said)
    if moe.dropless_imbalance != 1.0 or moe.max_vio is not None:
        said = "MindFormers pads every expert to its capacity: no routing imbalance to state beside a capacity_factor"
        raise InputError(where, "training.moe", said)
    par = run.parallel
    moe_models = any(isinstance(spec, ModelSpec) and spec.is_moe for spec in run.specs.values())
    if moe_models and par.etp is not None and par.etp != par.tp:
        # MoEV2's experts split their width over model_parallel (llama_layer.py `LlamaFeedForward.shard`, expert_num
        # > 1: w1/w3 `(ep, mp, 1)`, w2 `(ep, 1, mp)`, a4dfb8219), and expert_parallel groups inside data_parallel ·
        # context_parallel (moe.py `MoEV2`: `dp_moe = dp // ep`, the reshape to `(dp_moe, ep, E, n, h)`)
        said = f"{par.etp}: MindFormers' capacity MoE (MoEV2) splits each expert over model_parallel, etp = tp {par.tp}"
        raise InputError(where, "parallel.etp", said)


def _check_vocab_emb_dp(run: RunConfig, where: str) -> None:
    """MindFormers' `parallel_config.vocab_emb_dp`: framework mindformers only (LlamaEmbedding.shard and the
    models' lm_head shard read it, mindformers a4dfb8219)."""
    if run.parallel.vocab_emb_dp and run.framework != "mindformers":
        said = f"is MindFormers' (docs/frameworks.md); this run's framework is {run.framework}"
        raise InputError(where, "parallel.vocab_emb_dp", said)


def _check_parallel_optimizer(run: RunConfig, where: str) -> None:
    """MindFormers' optimizer-parallel words: framework mindformers only, and not beside a ZeRO level."""
    par = run.parallel
    stated = [f for f in ("enable_parallel_optimizer", "parallel_optimizer_config") if getattr(par, f) is not None]
    stated += ["embedding_parallel_optimizer"] if par.embedding_parallel_optimizer else []
    if run.framework != "mindformers" and stated:
        said = f"is MindFormers' (docs/frameworks.md); this run's framework is {run.framework}"
        raise InputError(where, f"parallel.{stated[0]}", said)
    if par.enable_parallel_optimizer is None:
        if stated:
            raise InputError(where, f"parallel.{stated[0]}", "needs parallel.enable_parallel_optimizer stated")
        return
    if "zero" in par.model_fields_set or par.fsdp:
        said = "SAPP's ZeRO level" if "zero" in par.model_fields_set else "fsdp"
        raise InputError(
            where, "parallel.enable_parallel_optimizer", f"says how MindSpore shards; drop {said} beside it"
        )
    if par.parallel_optimizer_config is not None and not par.enable_parallel_optimizer:
        raise InputError(where, "parallel.parallel_optimizer_config", "needs enable_parallel_optimizer true")
    if par.embedding_parallel_optimizer and not par.enable_parallel_optimizer:  # shards nothing without it
        raise InputError(where, "parallel.embedding_parallel_optimizer", "needs enable_parallel_optimizer true")
    size = par.parallel_optimizer_config.optimizer_weight_shard_size if par.parallel_optimizer_config else -1
    if size != -1 and (par.dp * par.cp) % size:
        raise InputError(
            where,
            "parallel.parallel_optimizer_config.optimizer_weight_shard_size",
            f"{size} does not divide the data-parallel group dp x cp = {par.dp * par.cp}",
        )


def _check_optimizer_instances(run: RunConfig, where: str) -> None:
    """What Megatron-Core asserts of `--num-distributed-optimizer-instances` (parallel_state.py
    `initialize_model_parallel`, d98e8a64): the data-parallel (and expert-data-parallel) ranks split
    into the instances evenly; it is the distributed optimizer's (ZeRO-1 here)."""
    par, field = run.parallel, "parallel.distributed_optimizer_instances"
    instances, problem = par.distributed_optimizer_instances, None
    expert_data = par.dp * par.cp * par.tp // (par.ep * par.expert_tp)
    if run.framework != "megatron":
        problem = "is Megatron-Core's: set framework megatron"
    elif run.shard_level != 1:
        problem = "applies to the distributed optimizer: zero 1"
    elif (par.dp * par.cp) % instances or expert_data % instances:
        problem = f"{instances} does not divide dp·cp = {par.dp * par.cp} (or the experts' data-parallel {expert_data})"
    if problem is not None:
        raise InputError(where, field, problem)


def _check_deferral(run: RunConfig, where: str) -> None:
    """What Megatron-Core asserts of `--defer-embedding-wgrad-compute` (model_parallel_config.py
    `ModelParallelConfig.__post_init__`, d98e8a64), each refused in one line."""
    train, field = run.training, "training.defer_embedding_wgrad_compute"
    problem = None
    if not train.defer_embedding_wgrad_compute:
        field, problem = "training.wgrad_deferral_limit", "applies with defer_embedding_wgrad_compute true"
    elif run.framework != "megatron":
        problem = "is Megatron-Core's: set framework megatron"
    elif run.parallel.pp == 1:
        problem = "needs pipeline parallelism (pp > 1), as Megatron-Core does"
    elif not run.timing.gradient_accumulation_fusion:
        problem = "needs timing.gradient_accumulation_fusion, as Megatron-Core does"
    if problem is not None:
        raise InputError(where, field, problem)


def _check_bf16_optimizer(run: RunConfig, where: str) -> None:
    """What DeepSpeed's BF16_Optimizer takes (deepspeed/runtime/bf16_optimizer.py at 93e9307d, the commit
    BigScience ran BLOOM on): Megatron-DeepSpeed's linears are `F.linear` (no fused accumulation), the
    optimizer runs under bf16 alone, and it partitions its fp32 state over data parallelism itself."""
    field, problem = "timing.deepspeed_bf16_optimizer", None
    if run.timing.gradient_accumulation_fusion:
        field, problem = "timing.gradient_accumulation_fusion", "must be false under deepspeed_bf16_optimizer"
    elif run.training.dtype != "bf16":
        problem = f"runs under bf16; this run's training.dtype is {run.training.dtype}"
    elif run.shard_level != 1:
        level = run.shard_level
        problem = f"partitions its fp32 state over data parallelism alone (zero 1); this run shards at level {level}"
    if problem is not None:
        raise InputError(where, field, problem)


def _check_offload(run: RunConfig, where: str) -> None:
    """What Megatron-Core asserts of fine-grained activation offloading (transformer_config.py
    `TransformerConfig.__post_init__`, arguments.py `validate_args`, d98e8a64), each refused in one line."""
    modules, field, problem = run.training.offload_modules, "training.offload_modules", None
    if run.framework != "megatron":
        problem = "is Megatron-Core's fine-grained activation offloading: set framework megatron"
    elif run.timing.transformer_impl != "transformer_engine":
        problem = "needs timing.transformer_impl transformer_engine, as Megatron-LM asserts"
    elif "attn_proj" in modules and "core_attn" not in modules:
        problem = "attn_proj needs core_attn (its input is core_attn's output, which core_attn's backward needs)"
    elif "moe" in run.recompute.modules and {"expert_fc1", "moe_act"} & set(modules):
        problem = "expert_fc1 and moe_act cannot be offloaded while moe is recomputed, as Megatron-Core asserts"
    if problem is not None:
        raise InputError(where, field, problem)


def _check_cpu_offloading(run: RunConfig, where: str) -> None:
    """What Megatron-Core and Transformer Engine refuse of `--cpu-offloading-num-layers` (transformer_config.py
    `TransformerConfig.__post_init__` at d98e8a64; TE cpu_offload.py `get_cpu_offload_context`, v2.10 on,
    d0067d0d: the last layer is never offloaded), each in one line."""
    train, field, problem = run.training, "training.cpu_offloading_num_layers", None
    layers = run.spec(run.models[0].name).num_layers
    if run.framework != "megatron":
        problem = "is Megatron-LM's Transformer Engine CPU offloading: set framework megatron"
    elif run.timing.transformer_impl != "transformer_engine":
        problem = "is Transformer Engine's CPU offloading: needs timing.transformer_impl transformer_engine"
    elif len(run.models) != 1:
        problem = "counts the layers of one language model's transformer block"
    elif train.cpu_offloading_num_layers >= layers:
        problem = f"{train.cpu_offloading_num_layers} must be below the model's {layers} layers (Megatron-Core asserts)"
    elif run.parallel.pp > 1:
        problem = "Megatron-Core has no pipeline parallelism with CPU offloading (pp must be 1)"
    elif run.recompute.full is not None or run.recompute.selective:
        problem = "Megatron-Core refuses CPU offloading with activation recomputation"
    elif train.offload_modules:
        problem = "cannot be set beside fine-grained activation offloading (training.offload_modules)"
    elif run.timing.cuda_graph_impl not in ("none", "full_iteration"):
        problem = "Megatron-Core refuses CUDA graphs other than full_iteration with CPU offloading"
    if problem is not None:
        raise InputError(where, field, problem)


def _check_layout(run: RunConfig, where: str) -> None:
    """A layout names the layers of one language model, Megatron-Core's way (`config.layout`)."""
    if len(run.models) != 1 or run.is_vision(run.models[0].name):
        raise InputError(where, "parallel.layout", "a Megatron layout places the layers of one language model")
    spec = run.spec(run.models[0].name)
    layout = run.parallel.layout_stages()
    assert layout is not None
    try:
        validate_layout(layout, spec.num_layers, spec.mtp_layers)
    except LayoutError as err:
        raise InputError(where, "parallel.layout", str(err)) from None
    if standalone_mtp_cell(layout) is not None and run.framework != "megatron":
        raise InputError(
            where, "parallel.layout", "MTP layers m apart from the loss L are Megatron-Core's: set framework megatron"
        )


def _check_flex(run: RunConfig, where: str) -> None:
    """Megatron-Core's flex token dispatcher's backends (token_dispatcher.py `MoEFlexTokenDispatcher`,
    d98e8a64) and the words only they read, each refused in one line."""
    timing, par = run.timing, run.parallel
    backend = timing.moe_dispatcher
    if backend in ("hybridep", "ncclep") and run.framework != "megatron":
        said = f"{backend} is a backend of Megatron-Core's flex token dispatcher: set framework megatron"
        raise InputError(where, "timing.moe_dispatcher", said)
    moe = any(isinstance(spec, ModelSpec) and spec.is_moe for spec in run.specs.values())
    if moe and backend in ("deepep", "ncclep") and par.expert_tp * par.ep < 2:
        # `MoEFlexTokenDispatcher.__init__`: assert tp_size * ep_size > 1 ("... dispatcher requires TPxEP > 1")
        said = f"{backend} needs expert_tp × ep > 1 (Megatron-Core's flex dispatcher asserts it)"
        raise InputError(where, "timing.moe_dispatcher", said)
    if timing.hybridep_custom_allgather is not None and backend != "hybridep":  # HybridEPBuffer's own setting
        said = f"is HybridEP's: set timing.moe_dispatcher hybridep, not {backend}"
        raise InputError(where, "timing.hybridep_custom_allgather", said)
    for name in ("moe_permute_fusion_into_hybridep", "moe_hybridep_pad_uneven_dispatch_inputs"):
        if getattr(timing, name) and backend != "hybridep":  # read by `_HybridEPManager` alone
            said = f"is HybridEP's: set timing.moe_dispatcher hybridep, not {backend}"
            raise InputError(where, f"timing.{name}", said)
    sms = timing.moe_flex_dispatcher_num_sms
    if sms is not None and backend not in ("deepep", "hybridep", "ncclep"):
        said = f"is the flex dispatcher's (deepep, hybridep or ncclep), not {backend}'s"
        raise InputError(where, "timing.moe_flex_dispatcher_num_sms", said)
    if sms is not None and backend == "hybridep" and sms > run.device.profile().sm_count:
        # DeepEP hybrid-ep 94a9f8f csrc/hybrid_ep/config.cuh `Configurer`: assert(sm_count >= sms_dispatch)
        said = f"{sms} is more than the device's {run.device.profile().sm_count} SMs (HybridEP asserts it)"
        raise InputError(where, "timing.moe_flex_dispatcher_num_sms", said)


def _check_shared_overlap(run: RunConfig, where: str) -> None:
    """What Megatron-Core refuses of `--moe-shared-expert-overlap` for a model with shared experts
    (transformer_config.py `TransformerConfig.__post_init__`, at d98e8a64), each in one line."""
    if not run.timing.moe_shared_expert_overlap:
        return
    field = "timing.moe_shared_expert_overlap"
    shared = any(not run.is_vision(name) and run.spec(name).shared_experts for name in run.model_names)
    problem = None
    if run.framework != "megatron":
        problem = "is Megatron-Core's shared-expert side stream: set framework megatron"
    elif not shared:
        return
    elif run.timing.moe_dispatcher == "allgather":
        problem = "only works with the alltoall or flex token dispatcher, not allgather (timing.moe_dispatcher)"
    elif "shared_experts" in run.recompute.modules:
        problem = "cannot work with the recompute module shared_experts"
    elif run.parallel.overlap_moe_expert_parallel_comm:
        problem = "is refused with parallel.overlap_moe_expert_parallel_comm"
    if problem is not None:
        raise InputError(where, field, problem)


def _check_combined_1f1b(run: RunConfig, where: str) -> None:
    """What Megatron-Core asserts of `--overlap-moe-expert-parallel-comm` (transformer_config.py
    `TransformerConfig.__post_init__`, at d98e8a64), each refused in one line."""
    par, recompute = run.parallel, run.recompute
    field = "parallel.overlap_moe_expert_parallel_comm"
    problem = None
    if run.framework != "megatron":
        problem = "is Megatron-Core's combined 1F1B schedule: set framework megatron"
    elif par.ep < 2:
        problem = "needs expert parallelism (ep > 1)"
    elif run.timing.moe_dispatcher == "allgather":
        problem = "needs the alltoall or flex token dispatcher, not allgather (timing.moe_dispatcher)"
    elif par.pp > 1 and par.schedule != "interleaved":
        problem = "needs virtual pipeline stages when pp > 1 (Megatron's interleaved schedule)"
    elif recompute.full is not None or "moe" in recompute.modules:
        problem = "is refused with full recomputation and with the recompute module moe"
    elif run.training.dtype == "fp32":
        problem = "needs a bf16 or fp16 model"
    elif any(not run.is_vision(name) and run.spec(name).mtp_layers > 1 for name in run.model_names):
        problem = "supports at most one MTP layer"
    elif run.timing.moe_dispatcher == "ncclep" and "expert_fc1" in run.training.offload_modules:
        # NCCL EP's overlap path frees expert FC1's raw input, which offloading it keeps (d98e8a64)
        problem = "is refused with the ncclep dispatcher and expert_fc1 among training.offload_modules"
    elif run.timing.cuda_graph_impl == "transformer_engine" and {"moe", "mlp"} & set(run.timing.cuda_graph_modules):
        problem = "is refused with TE's CUDA graphs on moe or mlp (timing.cuda_graph_modules)"
    if problem is not None:
        raise InputError(where, field, problem)


def run_reserve(run: RunConfig) -> RuntimeReserve:
    """What the runtime holds outside the allocator for this run's framework, layout and device
    (`ppb_core.config.runtime_reserve`): the figure `device.reserved_mb: auto` holds back."""
    # the embedding group's all-reduce: tied weights, or MTP layers sharing the embedding on the last stage
    tied = any(getattr(spec, "tied_embeddings", False) or getattr(spec, "mtp_layers", 0) for spec in run.specs.values())
    # Megatron's alltoall dispatcher (and torchtitan's) exchange tokens by NCCL's all-to-all; the flex
    # dispatchers by DeepEP's own buffers (`memory.frameworks.flex_buffers`), allgather by collectives
    a2a = run.framework == "torchtitan" or run.timing.moe_dispatcher == "alltoall"
    return runtime_reserve(run.framework, run.parallel, run.device.profile(), tied=tied, a2a=a2a)


def parse_run_config(raw: Any, source: str | Path = "<run config>", base_dir: str | Path = ".") -> RunConfig:
    """A validated `RunConfig` from parsed YAML; referenced files are read relative to *base_dir*."""
    where = str(source)
    if raw is None:  # an empty file (or only comments) parses to nothing
        raise InputError(where, None, "is empty: expected a mapping at the top level")
    if not isinstance(raw, dict):
        raise InputError(where, None, "expected a mapping at the top level")
    raw = dict(raw)
    raw.setdefault("name", Path(where).stem)
    try:
        run = RunConfig.model_validate(raw)
    except ValidationError as err:
        if "parallel" not in raw and ("devices" in raw or "limits" in raw):  # `ppb estimate searches/x.yaml`
            field = "devices" if "devices" in raw else "limits"
            raise InputError(
                where, field, "a search spec's field: this is a search spec, not a run config (ppb search reads it)"
            ) from None
        raise pydantic_error(err, where, RunConfig) from None
    base = Path(base_dir)
    specs: dict[str, ModelSpec] = {}
    for index, sub in enumerate(run.models):
        if sub.spec is not None:
            specs[sub.name] = sub.spec
        else:
            with named_by(where, f"models.{index}.config", base / sub.config):
                specs[sub.name] = _read_config(base / sub.config, sub.part, where, index)
        if sub.census is not None and not isinstance(specs[sub.name], VisionSpec):  # a tower's is refused below
            _check_file(base / sub.census, where, f"models.{index}.census", "census")
    if run.timing.calibration is not None:
        _check_file(base / run.timing.calibration, where, "timing.calibration", "calibration")
    if run.memory.calibration is not None:
        _check_file(base / run.memory.calibration, where, "memory.calibration", "measured peaks")
    run = run.model_copy(update={"specs": specs, "source": where, "base_dir": str(base)})
    if run.device.reserved_mb == "auto":
        reserve = run_reserve(run)
        device = run.device.model_copy(update={"reserved_mb": reserve.total_mb})
        run = run.model_copy(update={"device": device, "reserve": reserve})
    _check_sizes(run, where)
    for index, sub in enumerate(run.models):
        _check_model(run, index, sub, specs[sub.name], where)
    _check_run(run, where)
    return run


@contextmanager
def named_by(where: str, field: str, path: Path) -> Iterator[None]:
    """A file the run config (or search spec) names that cannot be read is said with the field that
    names it (`run.yaml: models.0.config: hf/none.json: file not found`); it was the file alone. A
    problem inside the file keeps that file and its own field."""
    try:
        yield
    except InputError as err:
        if err.field is not None or err.source != str(path):
            raise
        raise InputError(where, field, f"{err.source}: {err.problem}") from None


def _check_file(path: Path, where: str, field: str, kind: str) -> None:
    """A census, calibration or measured-peaks file the run config names exists and is a file; its
    content is read by `ppb_core.estimate.inputs.load_run` (its readers sit above the config)."""
    if not path.exists():
        raise InputError(where, field, f"{path} not found")
    if path.is_dir():
        raise InputError(where, field, f"{path} is a folder, not a {kind} file")


def load_run_config(path: str | Path) -> RunConfig:
    """Read, validate and resolve a run config file; any problem with it or a file it names is an
    InputError (and nothing else), found before any work."""
    path = Path(path)
    refuse_foreign(path, "a run config")
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
    models = raw.get("models")
    refs: list[Any] = []
    for sub in models if isinstance(models, list) else []:
        if isinstance(sub, dict):
            refs.extend(sub.get(key) for key in ("config", "census"))
    for section in ("timing", "memory"):
        options = raw.get(section)
        refs.append(options.get("calibration") if isinstance(options, dict) else None)
    for ref in refs:
        if isinstance(ref, str):
            digest.update(ref.encode("utf-8", "replace") + b"\0")
            try:
                digest.update(read_bytes(path.parent / ref))
            except InputError as err:  # a file missing, a folder, too big: the partition will say so
                digest.update(err.problem.encode())
    return digest.hexdigest()


# Overlap shares whose absence a framework reads (timing/pricer.py `torchtitan_overlap`: torchtitan's
# TP and compiled ring hide nothing unless the run says so): a resolved config leaves them unstated too,
# so the chain's tables price a run as `ppb estimate` does.
UNSTATED_OVERLAP_DIFFERS = ("tp_async", "cp_ring")


def resolved_raw(run: RunConfig) -> dict[str, Any]:
    """The run config as plain data, every model's architecture inlined, so it stands alone."""
    raw = run.model_dump(mode="json", exclude_none=True)
    if run.framework == "torchtitan" and "zero" not in run.parallel.model_fields_set:
        raw["parallel"].pop("zero")  # torchtitan's default is FSDP2; an explicit ZeRO-1 is refused
    if run.parallel.enable_parallel_optimizer is not None and "zero" not in run.parallel.model_fields_set:
        raw["parallel"].pop(
            "zero"
        )  # MindSpore's optimizer parallel says how it shards; a ZeRO level beside it is refused
    raw["timing"]["interleaved_send_waits"] = run.send_waits  # as the stated release runs them, where unstated
    for key in UNSTATED_OVERLAP_DIFFERS:  # torchtitan's own shares where the run states none (`torchtitan_overlap`)
        if key not in run.timing.overlap.model_fields_set:
            raw["timing"]["overlap"].pop(key, None)
    base = Path(run.base_dir)
    for sub, entry in zip(run.models, raw["models"], strict=True):
        entry.pop("config", None)
        entry.pop("part", None)
        entry["spec"] = run.specs[sub.name].model_dump(mode="json")
        if sub.census is not None:
            entry["census"] = str((base / sub.census).resolve())
    if run.timing.calibration is not None:
        raw["timing"]["calibration"] = str((base / run.timing.calibration).resolve())
    if run.memory.calibration is not None:
        raw["memory"]["calibration"] = str((base / run.memory.calibration).resolve())
    return raw
