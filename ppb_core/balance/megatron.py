"""A plan in Megatron-Core's words: `--pipeline-model-parallel-layout` and the recompute flags.

The layout is parsed and checked by `ppb_core.config.layout` (Megatron-Core's rules, one parser for
run configs and plans).

Recompute (transformer_config.py `TransformerConfig.__post_init__`, megatron/core/recompute.py):
`--recompute-granularity full` needs `--recompute-method uniform|block` and
`--recompute-num-layers N` (uniform: groups of N layers checkpointed, every layer recomputed;
block: the first N layers of every virtual stage's block, the rest not at all);
`--recompute-granularity selective` takes `--recompute-modules` (default `core_attn`) and no
method or count, and acts on every layer. One setting holds for every layer of the model.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from ppb_core.config.layout import LayoutError
from ppb_core.config.recompute import MegatronRecompute


def quoted(arguments: Sequence[str]) -> str:
    """Arguments as one line a POSIX shell reads back unchanged (`|`, `(`, `*` quoted)."""
    return " ".join(shlex.quote(argument) for argument in arguments)


@dataclass(frozen=True)
class Setting:
    """One recompute setting Megatron-Core applies to every layer, and the options it gives a cell."""

    name: str  # none | full | block | selective
    num_layers: int = 0  # block: the first N layers of each virtual stage

    def cell_options(self, layers: int) -> dict[str, int]:
        """Layers of a virtual stage under each ppb option, from its first layer on."""
        if self.name == "none":
            return {"NONE": layers}
        if self.name == "full":
            return {"FULL": layers}
        if self.name == "selective":
            return {"SLCT": layers}
        full = min(self.num_layers, layers)
        return {"FULL": full, "NONE": layers - full}

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
        return ["--recompute-granularity", "selective", *(["--recompute-modules", *modules] if modules else [])]

    def describe(self) -> str:
        return {
            "none": "no recompute",
            "full": "every layer fully recomputed",
            "block": f"the first {self.num_layers} layer(s) of every virtual stage fully recomputed",
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
    """What a Megatron-LM command line says about the pipeline, recompute and the run's sizes."""

    layout: str | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    pipeline_size: int | None = None
    virtual_stages: int | None = None
    granularity: str | None = None
    method: str | None = None
    num_layers: int | None = None
    modules: tuple[str, ...] | None = None
    tensor_size: int | None = None
    context_size: int | None = None
    expert_size: int | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    seq_length: int | None = None

    def sizes(self) -> dict[str, int]:
        """The sizes the command line states that a run config states too, by flag."""
        return {flag: getattr(self, key) for flag, key in _SIZES.items() if getattr(self, key) is not None}

    def setting(self) -> Setting:
        """The recompute setting, checked as `TransformerConfig.__post_init__` checks it."""
        if self.granularity is None:
            return Setting("none")
        if self.granularity == "selective":
            if self.method is not None or self.num_layers is not None:
                raise LayoutError(
                    "--recompute-granularity selective takes no --recompute-method nor --recompute-num-layers"
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
# Sizes a launch script states that the run config states too (megatron/training/arguments.py)
# (the pipeline size is checked with the plan's stages, `user_plan`)
_SIZES = {
    "--num-virtual-stages-per-pipeline-rank": "virtual_stages",
    "--tensor-model-parallel-size": "tensor_size",
    "--context-parallel-size": "context_size",
    "--expert-model-parallel-size": "expert_size",
    "--micro-batch-size": "micro_batch_size",
    "--global-batch-size": "global_batch_size",
    "--seq-length": "seq_length",
}
_VALUED.update(_SIZES)
_INTEGERS = {"first_stage_layers", "last_stage_layers", "pipeline_size", "num_layers", *_SIZES.values()}


def run_sizes(run: object) -> dict[str, int]:
    """What a run config says of each size in `_SIZES`, by flag: a plan's flags are checked at these."""
    par, training = run.parallel, run.training  # type: ignore[attr-defined]
    return {
        "--num-virtual-stages-per-pipeline-rank": par.vpp,
        "--tensor-model-parallel-size": par.tp,
        "--context-parallel-size": par.cp,
        "--expert-model-parallel-size": par.ep,
        "--micro-batch-size": training.micro_batch_size,
        "--global-batch-size": training.micro_batch_size * training.micro_batches * par.dp,
        "--seq-length": training.seq_length,
    }


def parse_flags(text: str) -> MegatronFlags:
    """The pipeline and recompute flags of a Megatron-LM command line, and the sizes a run config
    states too (`_SIZES`; other flags are skipped); `--recompute-modules` takes every word up to
    the next flag, as argparse's nargs='*' does."""
    # a launch script's lines joined as a shell joins them: a backslash before a newline is removed
    # with it (shlex would keep the newline in the next word, and every flag after it go unread)
    text = re.sub(r"\\\r?\n", "", text)
    try:
        words = shlex.split(text, comments=True)
    except ValueError as err:
        raise LayoutError(f"cannot read the flags: {err}") from None
    found: dict[str, object] = {}
    index = 0
    while index < len(words):
        word = words[index]
        name, _, inline = word.partition("=")
        if name == "--recompute-modules":
            modules = [inline] if inline else []
            index += 1
            while index < len(words) and not words[index].startswith("--"):
                modules.append(words[index])
                index += 1
            found["modules"] = tuple(modules)
            continue
        if name == "--recompute-activations":
            found["granularity"] = "selective"  # arguments.py: --recompute-activations sets selective
        elif name in _VALUED:
            if inline:
                value = inline
            elif index + 1 < len(words):
                index += 1
                value = words[index]
            else:
                raise LayoutError(f"{name} needs a value")
            key = _VALUED[name]
            if key in _INTEGERS:
                try:
                    found[key] = int(value)
                except ValueError:
                    raise LayoutError(f"{name} must be an integer, got {value!r}") from None
            else:
                found[key] = value
        index += 1
    flags = MegatronFlags(**found)  # type: ignore[arg-type]
    if flags.layout is not None and (flags.first_stage_layers is not None or flags.last_stage_layers is not None):
        raise LayoutError(
            "--pipeline-model-parallel-layout cannot be set with --decoder-first/last-pipeline-num-layers"
        )
    if flags.layout is not None and flags.virtual_stages is not None:  # arguments.py: "No more than one of"
        raise LayoutError("--pipeline-model-parallel-layout cannot be set with --num-virtual-stages-per-pipeline-rank")
    return flags
