"""A Megatron-LM plan's selective recompute priced as the plan says it, whatever the run config says.

The plan's layout overrides the run config's split; its recompute overrides the run config's
recompute the same way: `ppb check RUN.yaml --plan "--recompute-granularity selective"` prices
Megatron-Core's selective recompute of the modules the flags name (`core_attn` when none,
transformer_config.py `TransformerConfig.__post_init__`, Megatron-LM d98e8a64), not the run
config's recompute. The run config is read again with `training.recompute` in Megatron's words,
so every rule a run config's Megatron recompute meets applies to the flags too (module names,
no `--recompute-method`/`--recompute-num-layers` with selective: megatron/training/arguments.py
`validate_args` asserts "recompute method is not yet supported for selective recomputing
granularity", and `__post_init__` refuses `recompute_num_layers` with selective, and
`mla_up_proj` without multi-latent attention, and `moe_act` without `--moe-grouped-gemm`
where the text is a whole command line).

Full recompute by layers (`--recompute-method block`, or `uniform` over 1 layer) needs no such
step: the plan's cells say which layers are FULL, priced the same whatever the run config's
recompute. Megatron's `uniform` method over N > 1 layers is not per layer: it checkpoints each
group of N consecutive layers of a virtual stage as one (megatron/core/recompute.py
`checkpointed_forward`, called by transformer_block.py `TransformerBlock.forward`, Megatron-LM
d98e8a64: `chunk_runner(layer_idx, layer_idx + recompute_num_layers, True)`), so a cell keeps one
input per group per micro-batch and a backward rebuilds a whole group. The memory model prices
that from the run's recompute (memory/peak.py `stage_peaks`), so those flags (or a run config saying
them, under flags of another group) are priced with the run config read again in the flags' words.
"""

from __future__ import annotations

import os
from pathlib import Path

from ppb_core.balance.megatron import GROUPED_GEMM, MegatronFlags, parse_flags
from ppb_core.config.layout import LayoutError
from ppb_core.config.run import RunConfig, parse_run_config
from ppb_core.errors import InputError
from ppb_core.io import read_text, read_yaml


def plan_flags(plan: str) -> tuple[MegatronFlags, str] | None:
    """The plan's Megatron flags and where they come from, or None (a yaml, or anything `read_plan`
    refuses with its own line)."""
    if plan.lstrip().startswith("--"):
        text, where = plan, "--plan"
    else:
        path = Path(plan)
        if path.suffix.lower() in (".yaml", ".yml", ".json", ".toml") or not os.path.isfile(path):
            return None
        try:
            text, where = read_text(path), str(path)
        except InputError:
            return None
    try:
        return parse_flags(text), where
    except LayoutError:
        return None


def ignored_flags(plan: str) -> list[str]:
    """The plan's recompute flags Megatron-LM reads past (`MegatronFlags.ignored_recompute_flags`):
    priced as Megatron-LM runs them, and said, since a user who wrote them meant something."""
    found = plan_flags(plan)
    return found[0].ignored_recompute_flags if found is not None else []


def _group(run: RunConfig) -> int:
    """Layers the run's own recompute checkpoints as one (Megatron's uniform method; else 1)."""
    recompute = run.recompute
    return (recompute.num_layers or 1) if recompute.full == "uniform" else 1


def full_words(flags: MegatronFlags, run: RunConfig) -> dict[str, object] | None:
    """`training.recompute` in Megatron's words for full flags where a group of layers is priced as one
    (uniform over N > 1, by the flags or by the run config's own recompute), else None."""
    if flags.granularity != "full" or flags.method not in ("uniform", "block") or (flags.num_layers or 0) < 1:
        return None  # not full, or refused with its own line when the plan is read
    group = flags.num_layers if flags.method == "uniform" else 1
    if group == 1 and _group(run) == 1:
        return None
    return {"granularity": "full", "method": flags.method, "num_layers": flags.num_layers}


def selective_words(flags: MegatronFlags) -> dict[str, object] | None:
    """`training.recompute` in Megatron's words for selective flags (None for any other recompute)."""
    if flags.granularity != "selective":
        return None
    words: dict[str, object] = {"granularity": "selective"}
    if flags.modules is not None:
        words["modules"] = list(flags.modules)
    if flags.method is not None:
        words["method"] = flags.method
    if flags.num_layers is not None:
        words["num_layers"] = flags.num_layers
    return words


def run_for_plan(run: RunConfig, plan: str) -> tuple[RunConfig, dict[str, object] | None]:
    """(the run the plan is priced at, the recompute the plan put in place of the run config's, or None)."""
    found = plan_flags(plan)
    if found is None:
        return run, None
    flags, where = found
    try:  # Megatron-LM's own checks first, in its words (not the run config's they would be converted to)
        flags.setting()
    except LayoutError as err:  # "--recompute-num-layers must be ...": the flag it names is the field
        flag, _, problem = str(err).partition(" ")
        raise InputError(where, flag, problem) from None
    words = selective_words(flags) or full_words(flags, run)
    if words is None:
        return run, None
    if run.framework != "megatron":
        said = "selective recompute" if words["granularity"] == "selective" else "uniform method over layer groups"
        raise InputError(
            where, "--recompute-granularity", f"Megatron-LM's {said}, but the run's framework is {run.framework}"
        )
    if "mla_up_proj" in (flags.modules or ()):
        # transformer_config.py TransformerConfig.__post_init__: "mla_up_proj in recompute_modules is
        # only supported with multi_latent_attention"
        plain = [name for name in run.model_names if not run.is_vision(name) and not run.spec(name).is_mla]
        if plain:
            raise InputError(
                where, "--recompute-modules", f"mla_up_proj needs multi-latent attention, which {plain[0]} has not"
            )
    if "moe_act" in (flags.modules or ()) and flags.complete and GROUPED_GEMM not in flags.switches:
        # transformer_config.py TransformerConfig.__post_init__: "moe_act in recompute_modules is only
        # supported with moe_grouped_gemm"; a whole command line without the switch runs without it
        raise InputError(where, "--recompute-modules", f"moe_act needs {GROUPED_GEMM}, which the command leaves out")
    raw = read_yaml(Path(run.source))
    if not isinstance(raw, dict) or not isinstance(raw.get("training"), dict):
        return run, None  # the run config was read once already; it cannot have changed shape unseen
    raw = {**raw, "training": {**raw["training"], "recompute": words}}
    try:
        priced = parse_run_config(raw, run.source, run.base_dir)
    except InputError as err:
        said = f"{err.field or ''} {err.problem}"
        field = "--recompute-granularity"  # the flag behind the run config's field at fault
        for word, flag in (("num_layers", "--recompute-num-layers"), ("method", "--recompute-method")):
            if (err.field or "").endswith(word):
                field = flag
        if "modules" in said or "module " in said:
            field = "--recompute-modules"
        raise InputError(
            where, field, f"as Megatron-LM's words in the run config, {err.field}: {err.problem}"
        ) from None
    return priced, words
