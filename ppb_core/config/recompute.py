"""The run's recompute as its framework spells it, and what each form asks of ppb's options.

`training.recompute` takes one of four forms:

* ppb's switch dict `{attBMM: 1, softmax: 0, ...}` (the SAPP/MindFormers `select_recompute`
  vocabulary), in any framework;
* `full`: every body layer fully recomputed, in any framework;
* Megatron-Core's words `{granularity, modules, method, num_layers}` (`framework: megatron`), as
  `--recompute-granularity`, `--recompute-modules`, `--recompute-method` and
  `--recompute-num-layers` (megatron/core/transformer/transformer_config.py,
  `TransformerConfig.__post_init__`, Megatron-LM main at d98e8a64);
* torchtitan's words `{mode, option, early_stop}` (`framework: torchtitan`), as `[activation_checkpoint]
  mode`, `selective_ac_option` and `early_stop` (torchtitan/config/job_config.py `ActivationCheckpoint`,
  torchtitan v0.2.2).

Each resolves to a `Recompute`: the switches the SLCT option runs, the framework's selective
units (Megatron's modules, torchtitan's `op` policy) that the framework's memory rules refine,
and which body layers of a pipeline chunk are fully recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, PositiveInt, Strict, Tag, model_validator

from ppb_core.config.spec import StrictModel
from ppb_core.errors import shown

# The recompute switches a run config sets (the SAPP/MindFormers `select_recompute` names); at 1
# a switch keeps its op's activation, at 0 the op is recomputed in the backward. The rest of the
# recompute vocabulary is in `ppb_core.model.switches`.
SWITCHES: tuple[str, ...] = ("attBMM", "headCast", "dropout", "softmax", "normOp", "gather", "ffAct", "attUp")

Framework = Literal["megatron", "torchtitan", "mindformers"]
FRAMEWORKS: tuple[str, ...] = ("megatron", "torchtitan", "mindformers")

# Megatron-Core's `recompute_modules` choices that act on the layers ppb models (transformer_config.py;
# the GatedDeltaNet/Product and hyper-connection modules act on layer kinds ppb does not have).
MEGATRON_MODULES: tuple[str, ...] = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
MegatronModule = Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"]

# The ppb switches nearest to each Megatron module: the part of the module a switch expresses.
# The framework's memory rules drop the rest of what a module recomputes (ppb_core.memory.frameworks).
MEGATRON_MODULE_SWITCHES: dict[str, tuple[str, ...]] = {
    "core_attn": ("softmax", "dropout", "headCast"),  # Korthikanti's selective: the attention core
    "moe_act": ("ffAct",),
    "layernorm": ("normOp",),
    "mla_up_proj": ("attUp",),
    "mlp": ("ffAct",),
    "moe": ("ffAct",),
    "shared_experts": ("ffAct",),
}
# torchtitan's op-level policy keeps matmul and attention outputs and recomputes the elementwise
# ops between them: the norms, the rotary and key/value expansion, the gated activation.
TORCHTITAN_OP_SWITCHES: tuple[str, ...] = ("normOp", "attBMM", "ffAct")

MEGATRON_WORDS: frozenset[str] = frozenset({"granularity", "modules", "method", "num_layers"})
# MindFormers' `recompute_config` keys, in its order (mindformers/modules/transformer/transformer.py
# `TransformerRecomputeConfig.__init__`, fd4deebc1; it refuses any other): its per-stage lists are a plan, which
# `ppb check --plan` reads from the training yaml; a run config says the recompute in ppb's words
MINDFORMERS_RECOMPUTE_KEYS: tuple[str, ...] = (
    "recompute",
    "select_recompute",
    "parallel_optimizer_comm_recompute",
    "select_comm_recompute",
    "mp_comm_recompute",
    "recompute_slice_activation",
    "select_recompute_exclude",
    "select_comm_recompute_exclude",
)
MINDFORMERS_WORDS: frozenset[str] = frozenset(MINDFORMERS_RECOMPUTE_KEYS)
_IN_PPB_WORDS = (
    "say `full` (every body layer fully recomputed) or ppb's switch dict, 0 for an op recomputed "
    f"({', '.join(SWITCHES)}; the balancer chooses each layer's option), and check the yaml's own lists with "
    "`ppb check RUN.yaml --plan your.yaml`"
)
TORCHTITAN_WORDS: frozenset[str] = frozenset({"mode", "option", "early_stop"})
# torchtitan's default `selective_ac_option` (job_config.py, v0.2.2): every second block checkpointed.
TORCHTITAN_DEFAULT_EVERY = 2


class MegatronRecompute(StrictModel):
    """Megatron-Core's recompute flags, checked as `TransformerConfig.__post_init__` checks them."""

    granularity: Literal["full", "selective"]
    modules: Annotated[tuple[MegatronModule, ...], Strict(False)] | None = Field(
        None, description="--recompute-modules (selective); Megatron's default is core_attn"
    )
    method: Literal["uniform", "block"] | None = Field(None, description="--recompute-method (full)")
    num_layers: PositiveInt | None = Field(None, description="--recompute-num-layers (full)")

    @model_validator(mode="after")
    def _megatron_rules(self) -> MegatronRecompute:
        if self.granularity == "full":
            if self.method is None or self.num_layers is None:
                raise ValueError("granularity full needs method (uniform or block) and num_layers, as Megatron does")
            if self.modules is not None:
                raise ValueError("modules apply to granularity selective; full recomputes whole layers")
        else:
            if self.method is not None or self.num_layers is not None:
                raise ValueError("method and num_layers apply to granularity full; selective acts on every layer")
            if self.modules is not None and len(set(self.modules)) != len(self.modules):
                raise ValueError("a module is listed twice")
        return self

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """The modules selective recompute acts on (Megatron's default: core_attn alone)."""
        return ("core_attn",) if self.modules is None else self.modules


def _option_word(value: Any) -> Any:
    """torchtitan's `selective_ac_option`: "op", or a positive count written as an integer or a digit
    string (job_config.py; activation_checkpoint.py reads it with `isdigit`)."""
    if value is None or value == "op":
        return value
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"option is 'op' or a positive layer count (got {shown(value)})")
    return value


class TorchtitanRecompute(StrictModel):
    """torchtitan's `activation_checkpoint` section: `mode` and `selective_ac_option`."""

    mode: Literal["none", "full", "selective"]
    option: Annotated[str | int | None, BeforeValidator(_option_word)] = Field(
        None, description="selective: 'op' (per-op policy) or N (every N-th block fully checkpointed)"
    )
    early_stop: bool = Field(
        False,
        description="the recompute stops once every saved tensor is back: torchtitan's `early_stop` (v0.2.2 "
        "job_config.py, default false); before 25413d224 (2025-08-29) torchtitan passed none, so "
        "torch.utils.checkpoint's default, true, applied",
    )

    @model_validator(mode="after")
    def _torchtitan_rules(self) -> TorchtitanRecompute:
        if self.mode != "selective" and self.option is not None:
            raise ValueError(f"option applies to mode selective, not {self.mode}")
        return self

    @property
    def every(self) -> int | None:
        """Layer-selective: every N-th block checkpointed (torchtitan's default option is 2)."""
        if self.mode != "selective" or self.option == "op":
            return None
        return self.option if isinstance(self.option, int) else TORCHTITAN_DEFAULT_EVERY


# How a chunk's body layers are fully recomputed: every layer ("all"), Megatron's groups of
# `num_layers` checkpointed as one ("uniform"), Megatron's first `num_layers` of each chunk
# ("block"), or torchtitan's every `num_layers`-th block of the rank ("every").
FullRule = Literal["all", "uniform", "block", "every"]


@dataclass(frozen=True)
class Recompute:
    """A run's recompute resolved: the form it was written in and what it asks of each body layer.

    `switches` are the selective switches SLCT runs (every switch, 0 or 1). `modules` are the
    framework's selective units (Megatron's module names, or `op` for torchtitan's per-op
    policy), empty for ppb's own switches. `full` says which body layers are fully recomputed
    (None: none), with `num_layers` its Megatron/torchtitan count.
    """

    form: Literal["switches", "full", "megatron", "torchtitan"]
    switches: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SWITCHES, 1))
    modules: frozenset[str] = frozenset()
    full: FullRule | None = None
    num_layers: int | None = None
    # torchtitan's checkpoint stops replaying a block once every tensor its forward saved is back
    early_stop: bool = False

    @property
    def selective(self) -> bool:
        """Whether the layers not fully recomputed recompute part of themselves (SLCT)."""
        return 0 in self.switches.values() or bool(self.modules)

    def chunk_options(self, layers: int, first: int = 0) -> list[str]:
        """The option (NONE, SLCT or FULL) of each of a chunk's *layers* body layers, in order.

        *first* counts the rank's body layers before this chunk (torchtitan counts blocks across
        the chunks a rank builds; Megatron starts again in every chunk).
        """
        rest = "SLCT" if self.selective else "NONE"
        if self.full is None:
            return [rest] * layers
        if self.full in ("all", "uniform"):
            return ["FULL"] * layers
        if self.full == "block":  # megatron/core/recompute.py: the chunk's first num_layers layers
            return ["FULL" if index < (self.num_layers or 0) else rest for index in range(layers)]
        every = self.num_layers or 1  # torchtitan: blocks N, 2N, ... of the rank, counted from 1
        return ["FULL" if (first + index + 1) % every == 0 else rest for index in range(layers)]


def _switches_of(names: tuple[str, ...] | frozenset[str]) -> dict[str, int]:
    return {name: int(name not in names) for name in SWITCHES}


def resolve(raw: Any) -> Recompute:
    """The `Recompute` of a validated `training.recompute` value (any of the four forms)."""
    if raw == "full":
        return Recompute("full", full="all")
    if isinstance(raw, MegatronRecompute):
        if raw.granularity == "full":
            return Recompute("megatron", full=raw.method, num_layers=raw.num_layers)
        modules = frozenset(raw.recomputed_modules)
        switches = _switches_of(frozenset(s for m in modules for s in MEGATRON_MODULE_SWITCHES[m]))
        return Recompute("megatron", switches=switches, modules=modules)
    if isinstance(raw, TorchtitanRecompute):
        stop = raw.early_stop
        if raw.mode == "none":
            return Recompute("torchtitan")
        if raw.mode == "full":
            return Recompute("torchtitan", full="all", early_stop=stop)
        if raw.option == "op":
            op = _switches_of(TORCHTITAN_OP_SWITCHES)
            return Recompute("torchtitan", switches=op, modules=frozenset({"op"}), early_stop=stop)
        return Recompute("torchtitan", full="every", num_layers=raw.every, early_stop=stop)
    return Recompute("switches", switches={name: int(raw.get(name, 1)) for name in SWITCHES})


def _form(value: Any) -> str:
    """Which form a `training.recompute` value is in: Megatron's and torchtitan's words by their keys."""
    if isinstance(value, str):
        return "full"
    if isinstance(value, MegatronRecompute):
        return "megatron"
    if isinstance(value, TorchtitanRecompute):
        return "torchtitan"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, dict):
        keys = set(value)
        if keys & MEGATRON_WORDS and keys & TORCHTITAN_WORDS:
            return "mixed"
        if keys & MINDFORMERS_WORDS:
            return "mindformers"
        if keys & MEGATRON_WORDS:
            return "megatron"
        if keys & TORCHTITAN_WORDS:
            return "torchtitan"
    return "switches"


def _known_switches(switches: dict[str, int]) -> dict[str, int]:
    unknown = sorted(set(switches) - set(SWITCHES))
    if unknown:
        raise ValueError(f"unknown switch {shown(unknown[0])} (switches: {', '.join(SWITCHES)})")
    return switches


def _mixed_words(value: dict[str, Any]) -> dict[str, Any]:
    """Megatron's words beside torchtitan's: said as such, not as the other form's unknown field."""
    keys = set(value)
    megatron, torchtitan = sorted(keys & MEGATRON_WORDS), sorted(keys & TORCHTITAN_WORDS)
    raise ValueError(
        f"{', '.join(megatron)} (Megatron's words) beside {', '.join(torchtitan)} (torchtitan's): "
        "give the run's framework's words alone"
    )


def _mindformers_words(value: dict[str, Any]) -> dict[str, Any]:
    """MindFormers' `recompute_config` keys: said as such, not as an unknown switch whose value is no integer
    (`recompute: true` was "training.recompute.recompute: Input should be a valid integer", session 33)."""
    said = ", ".join(sorted(set(value) & MINDFORMERS_WORDS))
    raise ValueError(f"{said}: MindFormers' recompute_config words; in a run config {_IN_PPB_WORDS}")


def _bool_words(value: bool) -> bool:
    """`recompute: true` / `false` as MindFormers' recompute_config says it: ppb's words are `full` and `{}`."""
    said = "`full` (every body layer fully recomputed)" if value else "`{}` (ppb's switch dict, every op kept)"
    raise ValueError(
        f"{shown(value)}: MindFormers' recompute_config word; a run config says {said}, or a switch dict with 0 "
        f"for an op recomputed ({', '.join(SWITCHES)})"
    )


Switches = Annotated[dict[str, Annotated[int, Field(ge=0, le=1)]], AfterValidator(_known_switches)]
FORMS: tuple[str, ...] = ("switches", "full", "megatron", "torchtitan", "mixed", "mindformers", "bool")
# training.recompute: one of the four forms, told apart before validation so errors name the right fields.
RecomputeForm = Annotated[
    Annotated[Switches, Tag("switches")]
    | Annotated[Literal["full"], Tag("full")]
    | Annotated[MegatronRecompute, Tag("megatron")]
    | Annotated[TorchtitanRecompute, Tag("torchtitan")]
    | Annotated[dict[str, Any], AfterValidator(_mixed_words), Tag("mixed")]
    | Annotated[dict[str, Any], AfterValidator(_mindformers_words), Tag("mindformers")]
    | Annotated[bool, AfterValidator(_bool_words), Tag("bool")],
    Discriminator(_form),
]


def framework_words(value: Any) -> str | None:
    """The framework whose words a parsed recompute value is in (None: ppb's own forms)."""
    if isinstance(value, MegatronRecompute):
        return "megatron"
    if isinstance(value, TorchtitanRecompute):
        return "torchtitan"
    return None
