"""A plan in Megatron-Core's words: `--pipeline-model-parallel-layout` and the recompute flags.

The layout is parsed and checked by `ppb_core.config.layout` (Megatron-Core's rules, one parser for
run configs and plans).

Recompute (transformer_config.py `TransformerConfig.__post_init__`, megatron/core/recompute.py):
`--recompute-granularity full` needs `--recompute-method uniform|block` and
`--recompute-num-layers N` (uniform: groups of N layers checkpointed, every layer recomputed;
block: the first N layers of every virtual stage's block, the rest not at all);
`--recompute-granularity selective` takes `--recompute-modules` (default `core_attn`) and no
method or count, and acts on every layer. One setting holds for every layer of the model.
`moe_act` among the modules needs `--moe-grouped-gemm` (`__post_init__`: "moe_act in
recompute_modules is only supported with moe_grouped_gemm"), so the flags printed for it carry
that switch too; ppb prices Megatron's routed experts as the `TEGroupedMLP` it builds
(ppb_core/memory/frameworks/megatron.py).
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from ppb_core.balance.launch_script import ScriptError, script_words, unread_word
from ppb_core.balance.megatron_vocabulary import (
    AT_DEFAULT,
    BIAS_FUSIONS,
    FIELD_FLAGS,
    MODELLED,
    NEAR_READ_FLAGS,
    NO_BEARING,
    NO_BEARING_PREFIXES,
    NOT_PRICED,
    NOTHING_PRICED,
    TYPO_SIMILARITY,
)
from ppb_core.config.layout import LayoutError
from ppb_core.config.recompute import MegatronRecompute
from ppb_core.errors import shown
from ppb_core.model.switches import CELL_RANK
from ppb_core.units import counted

GROUPED_GEMM = "--moe-grouped-gemm"  # what Megatron-Core's moe_act recompute needs (TransformerConfig)


def quoted(arguments: Sequence[str]) -> str:
    """Arguments as one line a POSIX shell reads back unchanged (`|`, `(`, `*` quoted)."""
    return " ".join(shlex.quote(argument) for argument in arguments)


@dataclass(frozen=True)
class Setting:
    """One recompute setting Megatron-Core applies to every layer, and the options it gives a cell."""

    name: str  # none | full | block | selective
    num_layers: int = 0  # block: the first N layers of each virtual stage
    # whether a cell's options follow from the body layers its rank holds in earlier chunks too
    # (torchtitan's every N-th block counts across them); Megatron-Core starts again in every virtual stage
    rank_wide: ClassVar[bool] = False

    @property
    def period(self) -> int:
        """How many counts of a rank's earlier layers give a cell different options (1: they do not)."""
        return 1

    def cell_options(self, layers: int, before: int = 0) -> dict[str, int]:
        """Layers of a virtual stage under each ppb option, from its first layer on (*before*: the body
        layers its rank holds in earlier chunks, which a Megatron-Core setting does not read)."""
        if self.name == "none":
            return {"NONE": layers}
        if self.name == "full":
            return {"FULL": layers}
        if self.name == "selective":
            return {"SLCT": layers}
        full = min(self.num_layers, layers)
        return {"FULL": full, "NONE": layers - full}

    def along(self, layers: int, before: int = 0) -> list[str]:
        """A virtual stage's options layer by layer from its first: full first (Megatron's block method
        recomputes a chunk's first N layers, megatron/core/recompute.py)."""
        wanted = self.cell_options(layers, before)
        return [option for option in sorted(wanted, key=CELL_RANK.__getitem__) for _ in range(wanted[option])]

    def flags(self, modules: Sequence[str] | None = None) -> list[str]:
        if self.name == "none":
            return []
        if self.name == "full":
            return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
        if self.name == "block":
            return [
                "--recompute-granularity",
                "full",
                "--recompute-method",
                "block",
                "--recompute-num-layers",
                str(self.num_layers),
            ]
        grouped = [GROUPED_GEMM] if modules and "moe_act" in modules else []
        listed = ["--recompute-modules", *modules] if modules else []
        return ["--recompute-granularity", "selective", *listed, *grouped]

    def describe(self) -> str:
        return {
            "none": "no recompute",
            "full": "every layer fully recomputed",
            "block": f"the first {counted(self.num_layers, 'layer')} of every virtual stage fully recomputed",
            "selective": "every layer selectively recomputed",
        }[self.name]


def settings(options: Sequence[str], most_layers: int, selective: bool) -> list[Setting]:
    """The settings Megatron-Core can say with the options the descriptions consider: none, full,
    block N for N below the most layers a virtual stage holds, and selective when SLCT is Megatron's."""
    found = []
    if "NONE" in options:
        found.append(Setting("none"))
    if "FULL" in options:
        found.append(Setting("full"))
        if "NONE" in options:
            found += [Setting("block", n) for n in range(1, most_layers)]
    if selective and "SLCT" in options:
        found.append(Setting("selective"))
    return found


def setting_of(cells: Sequence[dict[str, int]], selective: bool) -> Setting | None:
    """The one setting that gives every cell (option → layers, model order) its options, or None."""
    used = {option for cell in cells for option, n in cell.items() if n}
    if used <= {"NONE"}:
        return Setting("none")
    if used == {"FULL"}:
        return Setting("full")
    if used == {"SLCT"}:
        return Setting("selective") if selective else None
    if used == {"FULL", "NONE"}:
        for n in sorted({cell.get("FULL", 0) for cell in cells}):
            block = Setting("block", n)
            if n and all(
                block.cell_options(sum(cell.values())) == _nonzero(cell, sum(cell.values())) for cell in cells
            ):
                return block
    return None


def _nonzero(cell: dict[str, int], layers: int) -> dict[str, int]:
    full = cell.get("FULL", 0)
    return {"FULL": full, "NONE": layers - full}


def selective_modules(run: object | None) -> tuple[str, ...] | None:
    """The `--recompute-modules` that SLCT stands for, when the run states them in Megatron's words."""
    if run is None or getattr(run, "framework", None) != "megatron":
        return None
    raw = run.training.recompute  # type: ignore[attr-defined]
    if isinstance(raw, MegatronRecompute) and raw.granularity == "selective":
        return tuple(raw.recomputed_modules)
    return None


@dataclass(frozen=True)
class MegatronFlags:
    """What a Megatron-LM command line says about the pipeline and recompute, and every other flag
    it states that a run config states too (`stated`, `switches`; compared by `megatron_run`)."""

    layout: str | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    pipeline_size: int | None = None
    virtual_stages: int | None = None
    granularity: str | None = None
    method: str | None = None
    num_layers: int | None = None
    modules: tuple[str, ...] | None = None
    stated: dict[str, int | str] = field(default_factory=dict)  # SIZE_FLAGS and TEXT_FLAGS given, by flag
    switches: frozenset[str] = frozenset()  # SWITCH_FLAGS given
    flag_words: int = 0  # words starting with `--`, read or read past

    @property
    def complete(self) -> bool:
        """A whole command line: Megatron-LM requires `--num-layers` (arguments.py `required_args`),
        so a text stating it says everything, and a flag it leaves out takes Megatron-LM's default."""
        return "--num-layers" in self.stated

    @property
    def ignored_recompute_flags(self) -> list[str]:
        """Recompute flags given that Megatron-LM reads past (Megatron-LM d98e8a64): without
        `--recompute-granularity` it recomputes nothing whatever the method, count or modules
        (`TransformerConfig.__post_init__` checks them only under a granularity), and each module's
        switch also asks for selective (attention.py `checkpoint_core_attention = recompute_granularity
        == 'selective' and "core_attn" in recompute_modules`), so full ignores `--recompute-modules`."""
        given = {
            "--recompute-method": self.method is not None,
            "--recompute-num-layers": self.num_layers is not None,
            "--recompute-modules": self.modules is not None,
        }
        if self.granularity is None:
            return [flag for flag, said in given.items() if said]
        if self.granularity == "full" and self.modules is not None:
            return ["--recompute-modules"]
        return []

    @property
    def split_adds(self) -> tuple[int, int]:
        """(embedding, loss) counted as a layer in the even split (`--account-for-*-in-pipeline-split`)."""
        return (
            int("--account-for-embedding-in-pipeline-split" in self.switches),
            int("--account-for-loss-in-pipeline-split" in self.switches),
        )

    def setting(self) -> Setting:
        """The recompute setting, checked as `TransformerConfig.__post_init__` checks it."""
        if self.granularity is None:
            return Setting("none")
        if self.granularity == "selective":
            if self.method is not None or self.num_layers is not None:
                raise LayoutError(  # arguments.py validate_args asserts it, TransformerConfig.__post_init__ too
                    "--recompute-granularity selective (or --recompute-activations, which sets it) takes no "
                    "--recompute-method nor --recompute-num-layers"
                )
            return Setting("selective")
        if self.granularity != "full":
            raise LayoutError(f"--recompute-granularity must be full or selective, got {self.granularity!r}")
        if self.method not in ("uniform", "block") or self.num_layers is None:
            raise LayoutError(
                "--recompute-granularity full needs --recompute-method uniform|block and --recompute-num-layers"
            )
        if self.num_layers < 1:
            raise LayoutError(f"--recompute-num-layers must be positive, got {self.num_layers}")
        return Setting("full") if self.method == "uniform" else Setting("block", self.num_layers)


_VALUED = {
    "--pipeline-model-parallel-layout": "layout",
    "--decoder-first-pipeline-num-layers": "first_stage_layers",
    "--decoder-last-pipeline-num-layers": "last_stage_layers",
    "--pipeline-model-parallel-size": "pipeline_size",
    "--num-virtual-stages-per-pipeline-rank": "virtual_stages",
    "--recompute-granularity": "granularity",
    "--recompute-method": "method",
    "--recompute-num-layers": "num_layers",
}
_INTEGERS = {"first_stage_layers", "last_stage_layers", "pipeline_size", "virtual_stages", "num_layers"}
# Flags of megatron/training/arguments.py that state what a run config states too: integers, texts
# and store_true switches. `megatron_run.check_against_run` compares them; every other flag is
# read past (docs/balance.md lists the ones that bear on memory or time and are not compared).
SIZE_FLAGS = (
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--num-query-groups",
    "--kv-channels",
    "--vocab-size",
    "--num-experts",
    "--moe-ffn-hidden-size",
    "--moe-router-topk",
    "--moe-shared-expert-intermediate-size",
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
    "--mtp-num-layers",
    "--num-layers-at-start-in-bf16",
    "--num-layers-at-end-in-bf16",
    "--seq-length",
    "--micro-batch-size",
    "--global-batch-size",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--context-parallel-size",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--num-virtual-stages-per-pipeline-rank",
    "--num-layers-per-virtual-pipeline-stage",
    "--make-vocab-size-divisible-by",
    "--microbatch-group-size-per-virtual-pipeline-stage",
)
TEXT_FLAGS = (
    "--tokenizer-type",
    "--tokenizer-model",
    "--vocab-file",
    "--moe-layer-freq",
    "--data-parallel-sharding-strategy",
    "--cp-comm-type",
    "--fp8-format",
    "--main-grads-dtype",
    "--megatron-fsdp-main-grads-dtype",
    "--attention-backend",
)
SWITCH_FLAGS = (
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--use-torch-fsdp2",
    "--bf16",
    "--fp16",
    "--swiglu",
    "--untie-embeddings-and-output-weights",
    "--group-query-attention",
    "--multi-latent-attention",
    "--qk-layernorm",
    "--overlap-moe-expert-parallel-comm",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--fp8-param-gather",
    "--first-last-layers-bf16",
    "--no-create-attention-mask-in-dataloader",
    "--no-use-layer-wise-param-layout",
    "--grad-reduce-in-bf16",
    "--accumulate-allreduce-grads-in-fp32",
    "--tokenizer-sentencepiece-legacy",
    GROUPED_GEMM,
)


_NARGS = (
    "--recompute-modules",
    "--cp-comm-type",
    "--hierarchical-context-parallel-sizes",
    "--tokenizer-special-tokens",
)


# the flags `parse_flags` reads, and every flag ppb knows (reads, carries, reads past or refuses elsewhere)
_READ = sorted({*_VALUED, *SIZE_FLAGS, *TEXT_FLAGS, *SWITCH_FLAGS, *_NARGS, "--recompute-activations"})
_KNOWN = frozenset(
    {*_READ, *MODELLED, *NO_BEARING, *NOTHING_PRICED, *BIAS_FUSIONS, *AT_DEFAULT, *NOT_PRICED, *FIELD_FLAGS}
    | NEAR_READ_FLAGS
)


def _refuse_typo(name: str) -> None:
    """A flag ppb knows nothing of, a letter or two off one it reads, refused as the typo it likely is:
    Megatron-LM's parser takes no abbreviation and no unknown flag (megatron/training/arguments.py
    `parse_args`: ArgumentParser(allow_abbrev=False), d98e8a64), so that launch would stop, and the
    plan priced without the flag (`--recompute-modul mlp`: the default modules) is not one that runs."""
    if name in _KNOWN or name.startswith(NO_BEARING_PREFIXES):
        return
    near = difflib.get_close_matches(name, _READ, 1, TYPO_SIMILARITY)
    if near:
        raise LayoutError(f"{name}: not a Megatron-LM flag: did you mean {near[0]}? (Megatron-LM refuses it)")


def _integer(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        if "$" in value or "`" in value:
            raise LayoutError(f"{name} is {shown(value)}, {unread_word(value)}: give the number") from None
        raise LayoutError(f"{name} must be an integer, got {shown(value)}") from None


def parse_flags(text: str) -> MegatronFlags:
    """The flags of a Megatron-LM command line or launch script (`launch_script.script_words`):
    the pipeline and recompute flags, and the ones a run config states too (`SIZE_FLAGS`,
    `TEXT_FLAGS`, `SWITCH_FLAGS`); other flags are read past. `--recompute-modules` takes every
    word up to the next flag, one at least, as argparse's nargs='+' does; a flag given twice keeps its last value,
    as argparse does."""
    try:
        words = script_words(text)
    except ScriptError as err:
        raise LayoutError(str(err)) from None
    found: dict[str, object] = {}
    stated: dict[str, int | str] = {}
    switches: set[str] = set()
    activations = False
    index = 0
    while index < len(words):
        word = words[index]
        name, _, inline = word.partition("=")
        if name in (
            "--recompute-modules",
            "--cp-comm-type",
            "--hierarchical-context-parallel-sizes",
            "--tokenizer-special-tokens",
        ):  # nargs: up to the next flag
            values = [inline] if inline else []
            index += 1
            while index < len(words) and not words[index].startswith("--"):
                values.append(words[index])
                index += 1
            if name == "--recompute-modules":
                if not values:  # TransformerConfig.recompute_modules is a List[str]: argparse nargs '+'
                    # (training/argument_utils.py `_extract_type`, Megatron-LM d98e8a64) refuses it empty
                    raise LayoutError("--recompute-modules needs one module or more, as Megatron-LM's argparse does")
                found["modules"] = tuple(values)
            else:
                stated[name] = " ".join(values)
            continue
        if name == "--recompute-activations":
            activations = True
        elif name in SWITCH_FLAGS:
            switches.add(name)
        elif name in _VALUED or name in SIZE_FLAGS or name in TEXT_FLAGS:
            if inline:
                value = inline
            elif index + 1 < len(words):
                index += 1
                value = words[index]
            else:
                raise LayoutError(f"{name} needs a value")
            if name in SIZE_FLAGS:
                stated[name] = _integer(name, value)
            elif name in TEXT_FLAGS:
                stated[name] = value
            key = _VALUED.get(name)
            if key is not None:
                found[key] = _integer(name, value) if key in _INTEGERS else value
        elif name.startswith("--"):
            _refuse_typo(name)
        index += 1
    if activations:
        # arguments.py `validate_args` (d98e8a64) sets selective after parsing, whatever --recompute-granularity
        # says and wherever it stands: `... --recompute-activations --recompute-granularity full` runs selective
        found["granularity"] = "selective"
    flag_words = sum(word.startswith("--") for word in words)
    flags = MegatronFlags(**found, stated=stated, switches=frozenset(switches), flag_words=flag_words)  # type: ignore[arg-type]
    if flags.layout is not None and (flags.first_stage_layers is not None or flags.last_stage_layers is not None):
        raise LayoutError(
            "--pipeline-model-parallel-layout cannot be set with --decoder-first/last-pipeline-num-layers"
        )
    virtual = [
        flag
        for flag in ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank")
        if flag in stated
    ]
    if flags.layout is not None:
        virtual.insert(0, "--pipeline-model-parallel-layout")
    if len(virtual) > 1:  # arguments.py: "No more than one of the following arguments can be set"
        raise LayoutError(f"{virtual[0]} cannot be set with {virtual[1]}")
    if any(flags.split_adds) and (
        flags.layout is not None or flags.first_stage_layers is not None or flags.last_stage_layers is not None
    ):  # TransformerConfig.__post_init__ and transformer_block.get_num_layers_to_build refuse it
        raise LayoutError(
            "--account-for-embedding/loss-in-pipeline-split cannot be set with --pipeline-model-parallel-layout "
            "or --decoder-first/last-pipeline-num-layers"
        )
    return flags
