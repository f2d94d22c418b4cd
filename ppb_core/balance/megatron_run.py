"""A Megatron-LM launch command compared with the run config it is checked under.

`ppb check --plan` prices the plan at the run config's sizes; a launch script stating another
model or parallel size (`--num-layers 96` for a 32-layer model, `--tensor-model-parallel-size 8`
for tp 2) would have the check price a run other than the one launched, so the first such flag is
refused in one line naming it and both values. A flag a text states is compared; a flag a whole
command line (`MegatronFlags.complete`: it states `--num-layers`) leaves out takes Megatron-LM's
default and is compared too (no `--sequence-parallel` with tp 2 runs without it). The defaults
and derivations are megatron/training/arguments.py's and TransformerConfig's (Megatron-LM commit
d98e8a64, 2026-08): `validate_args` (expert TP defaults to TP; sequence parallelism is dropped
at TP 1; `ffn_hidden_size` of experts defaults to the dense one; the virtual pipeline size from
`--num-layers-per-virtual-pipeline-stage`), argument_utils.py `core_transformer_config_from_args`
(`--num-query-groups` counts only with `--group-query-attention`) and gpt_layer_specs.py
`get_moe_layer_pattern` (`--moe-layer-freq` N: layer i is MoE when i % N == 0).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ppb_core.balance.megatron import MegatronFlags
from ppb_core.balance.megatron_tokenizer import (
    DEFAULT_TOKENIZER,
    FILE_TOKENIZERS,
    READS_VOCAB_SIZE,
    file_vocabulary,
    tokenizer_vocabulary,
)
from ppb_core.config.run import RunConfig
from ppb_core.config.spec import ModelSpec
from ppb_core.errors import InputError
from ppb_core.units import counted

WHY = "ppb checks the plan at the run's sizes"


@dataclass(frozen=True)
class Rule:
    """One flag: what the run config says of it (None: the flag does not concern this run) and
    Megatron-LM's value when a whole command line leaves it out (None: no default compared)."""

    flag: str
    field: str
    run_says: Callable[[RunConfig, ModelSpec], int | bool | None]
    default: int | bool | None = None
    says: str = ""  # a switch: what the run config has, `str.format`ted with spec and run


def _dense_ffn(spec: ModelSpec) -> int | None:
    if not spec.is_moe or any(not spec.layer_is_moe(i) for i in range(spec.num_layers)):
        return spec.intermediate_size
    return None


def _moe(value: Callable[[ModelSpec], int | None]) -> Callable[[RunConfig, ModelSpec], int | None]:
    return lambda run, spec: value(spec) if spec.is_moe else None


def _mla(value: Callable[[ModelSpec], int | None]) -> Callable[[RunConfig, ModelSpec], int | None]:
    return lambda run, spec: value(spec) if spec.is_mla else None


def _shared_width(spec: ModelSpec) -> int:
    """Megatron's `--moe-shared-expert-intermediate-size` is every shared expert's width together."""
    return spec.shared_experts * (spec.shared_expert_intermediate_size or spec.moe_intermediate_size or 0)


_RULES = (
    Rule("--num-layers", "num_layers", lambda run, spec: spec.num_layers),
    Rule("--hidden-size", "hidden_size", lambda run, spec: spec.hidden_size),
    Rule("--num-attention-heads", "num_attention_heads", lambda run, spec: spec.num_attention_heads),
    Rule("--swiglu", "activation", lambda run, spec: spec.activation == "swiglu", False, "{spec.activation}"),
    Rule(
        "--untie-embeddings-and-output-weights",
        "tied_embeddings",
        lambda run, spec: not spec.tied_embeddings,
        False,
        "{spec.tied_embeddings}",
    ),
    Rule("--num-experts", "num_experts", lambda run, spec: spec.num_experts, 0),
    Rule("--moe-router-topk", "experts_per_token", _moe(lambda spec: spec.experts_per_token), 2),
    Rule("--moe-shared-expert-intermediate-size", "shared experts' width", _moe(_shared_width), 0),
    Rule("--multi-latent-attention", "kv_lora_rank", lambda run, spec: spec.is_mla, False, "{spec.kv_lora_rank}"),
    # under MLA --qk-layernorm builds the latent norms (gpt_layer_specs.py: TELayerNormColumnParallelLinear
    # up-projections; plain column-parallel linears without it)
    Rule(
        "--qk-layernorm",
        "mla_latent_norms",
        _mla(lambda spec: spec.mla_latent_norms),
        False,
        "{spec.mla_latent_norms}",
    ),
    Rule("--q-lora-rank", "q_lora_rank", _mla(lambda spec: spec.q_lora_rank), 0),
    Rule("--kv-lora-rank", "kv_lora_rank", _mla(lambda spec: spec.kv_lora_rank), 32),
    Rule("--qk-head-dim", "qk_nope_head_dim", _mla(lambda spec: spec.qk_nope_head_dim), 128),
    Rule("--qk-pos-emb-head-dim", "qk_rope_head_dim", _mla(lambda spec: spec.qk_rope_head_dim), 64),
    Rule("--v-head-dim", "v_head_dim", _mla(lambda spec: spec.v_head_dim), 128),
    Rule("--mtp-num-layers", "mtp_layers", lambda run, spec: spec.mtp_layers, 0),
    Rule("--seq-length", "training.seq_length", lambda run, spec: run.training.seq_length),
    Rule("--micro-batch-size", "training.micro_batch_size", lambda run, spec: run.training.micro_batch_size, 1),
    Rule("--tensor-model-parallel-size", "parallel.tp", lambda run, spec: run.parallel.tp, 1),
    Rule("--pipeline-model-parallel-size", "parallel.pp", lambda run, spec: run.parallel.pp, 1),
    Rule("--context-parallel-size", "parallel.cp", lambda run, spec: run.parallel.cp, 1),
    Rule("--expert-model-parallel-size", "parallel.ep", lambda run, spec: run.parallel.ep, 1),
    Rule(
        "--overlap-moe-expert-parallel-comm",
        "parallel.overlap_moe_expert_parallel_comm",
        lambda run, spec: run.parallel.overlap_moe_expert_parallel_comm,
        False,
    ),
)


def _shown(value: int | bool | str | None) -> str:
    if isinstance(value, bool):
        return "given" if value else "not given"
    return str(value)


def _refuse(where: str, flag: str, given: object, expected: object, field: str, stated: bool) -> InputError:
    said = _shown(given) if stated or isinstance(given, bool) else f"not given (Megatron-LM's default {given})"
    has = "true" if expected is True else "false" if expected is False else expected
    return InputError(where, flag, f"{said}, the run config has {has} ({field}): {WHY}")


def check_against_run(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    """Refuse the first flag (stated, or left at Megatron-LM's default by a whole command line)
    whose value is not the run config's, in one line naming the flag and both values."""
    spec = run.specs[run.models[0].name]
    if not isinstance(spec, ModelSpec):
        return  # a vision tower: flags are refused before (outputs.not_megatrons)
    stated, switches, complete = flags.stated, flags.switches, flags.complete
    for rule in _RULES:
        expected = rule.run_says(run, spec)
        if expected is None:
            continue
        if isinstance(expected, bool):
            given: int | bool | str | None = rule.flag in switches
            if not given and not complete:
                continue
        elif rule.flag in stated:
            given = stated[rule.flag]
        elif complete and rule.default is not None:
            given = rule.default
        else:
            continue
        if given != expected:
            shown = rule.says.format(spec=spec, run=run) if rule.says else expected
            raise _refuse(where, rule.flag, given, shown, rule.field, rule.flag in stated)
    _check_vocabulary(flags, run, spec, where)
    _check_ffn(flags, spec, where)
    _check_query_groups(flags, spec, where)
    _check_moe_pattern(flags, spec, where)
    _check_parallel(flags, run, where)
    _check_training(flags, run, where)
    _check_attention_backend(flags, run, where)
    _check_memory_switches(flags, run, where)
    _check_grad_buffer(flags, run, where)


def _tokenizer(flags: MegatronFlags) -> str | None:
    """The launch's tokenizer: stated, or `pretrain_gpt.py`'s default under a whole command line;
    None where a shorter text leaves it to the rest of the launch."""
    stated = flags.stated.get("--tokenizer-type")
    if stated is not None:
        return str(stated)
    return DEFAULT_TOKENIZER if flags.complete else None


def _file_vocabulary(flags: MegatronFlags, kind: str) -> int | str:
    """A file tokenizer's vocabulary read from the `--tokenizer-model` the launch names, or why not."""
    model = flags.stated.get("--tokenizer-model")
    special = str(flags.stated.get("--tokenizer-special-tokens", "")).split()
    vocab_file = flags.stated.get("--vocab-file")
    legacy = "--tokenizer-sentencepiece-legacy" in flags.switches
    return file_vocabulary(kind, None if model is None else str(model), special, legacy, vocab_file and str(vocab_file))


def _check_vocabulary(flags: MegatronFlags, run: RunConfig, spec: ModelSpec, where: str) -> None:
    """The tokenizer's vocabulary against the run's `vocab_size`, by `megatron_tokenizer`'s rule (the
    importer's): `--vocab-size` where the tokenizer reads it (NullTokenizer, TikTokenizer), the GPT-2
    BPE's own 50257 entries (it reads no `--vocab-size`); a file tokenizer's size read from the
    `--tokenizer-model` file where it is on this machine, compared after Megatron's padding
    (build_tokenizer.py `vocab_size_with_padding`: `--make-vocab-size-divisible-by`, default 128, × TP)
    with the run's padded vocabulary (`RunConfig.vocab_size`), as the embedding each builds; else read
    past (`vocabulary_note`)."""
    kind = _tokenizer(flags)
    if kind is None:
        return
    if kind in FILE_TOKENIZERS:
        _check_file_vocabulary(flags, run, spec, kind, where)
        return
    size = flags.stated.get("--vocab-size")
    built = tokenizer_vocabulary(kind, int(size) if size is not None else None, where)
    if built is None or built == spec.vocab_size:
        return
    has = f"the run config has {spec.vocab_size} (vocab_size): {WHY}"
    if kind in READS_VOCAB_SIZE:
        said = str(size) if size is not None else f"not given ({kind}'s default {built})"
        raise InputError(where, "--vocab-size", f"{said}, {has}")
    unread = f", --vocab-size {size} not read" if size is not None else ""
    if "--tokenizer-type" in flags.stated:
        said = f"{kind} ({built} entries{unread})"
    else:
        said = f"not given (pretrain_gpt.py's default {kind}: {built} entries{unread})"
    raise InputError(where, "--tokenizer-type", f"{said}, {has}")


def _check_file_vocabulary(flags: MegatronFlags, run: RunConfig, spec: ModelSpec, kind: str, where: str) -> None:
    built = _file_vocabulary(flags, kind)
    if isinstance(built, str):
        return
    multiple = int(flags.stated.get("--make-vocab-size-divisible-by", 128)) * run.parallel.tp
    padded = -(-built // multiple) * multiple
    trained = run.vocab_size(run.models[0].name)
    if padded == trained:
        return
    raise InputError(
        where,
        "--tokenizer-model",
        f"{flags.stated['--tokenizer-model']} builds {built} entries, padded to {padded} (a multiple of {multiple}), "
        f"the run config trains {trained} (vocab_size {spec.vocab_size} padded): {WHY}",
    )


def vocabulary_note(flags: MegatronFlags) -> str | None:
    """Why the launch's vocabulary was not compared with the run config's, where it was not."""
    kind = _tokenizer(flags)
    if kind is None:
        if "--vocab-size" not in flags.stated:
            return None
        return (
            "--vocab-size not compared with the run config's vocab_size: Megatron-LM reads it only with "
            f"--tokenizer-type {' or '.join(READS_VOCAB_SIZE)}, and the plan does not say its tokenizer"
        )
    if kind not in FILE_TOKENIZERS:
        return None
    built = _file_vocabulary(flags, kind)
    if not isinstance(built, str):
        return None
    return f"{built}: the tokenizer's vocabulary is not compared with the run config's vocab_size"


def _check_ffn(flags: MegatronFlags, spec: ModelSpec, where: str) -> None:
    """The widths Megatron-LM builds (arguments.py `validate_args`): `--ffn-hidden-size` defaults to
    int(4h·2/3 / 64)·64 with `--swiglu`, else 4h; the experts' `--moe-ffn-hidden-size` defaults to
    `--ffn-hidden-size`; `--kv-channels` to h / heads."""
    stated, complete = flags.stated, flags.complete
    hidden = int(stated.get("--hidden-size", spec.hidden_size))
    heads = int(stated.get("--num-attention-heads", spec.num_attention_heads))
    ffn = stated.get("--ffn-hidden-size")
    if ffn is None and complete:
        ffn = int(4 * hidden * 2 / 3 / 64) * 64 if "--swiglu" in flags.switches else 4 * hidden
    dense = _dense_ffn(spec)
    if ffn is not None and dense is not None and ffn != dense:
        raise _refuse(where, "--ffn-hidden-size", ffn, dense, "intermediate_size", "--ffn-hidden-size" in stated)
    if spec.is_moe:
        flag = "--moe-ffn-hidden-size" if "--moe-ffn-hidden-size" in stated else "--ffn-hidden-size"
        experts = stated.get("--moe-ffn-hidden-size", ffn)
        if experts is not None and experts != spec.moe_intermediate_size:
            field = "moe_intermediate_size" + (
                "" if flag == "--moe-ffn-hidden-size" else "; the experts' width defaults to it"
            )
            raise _refuse(where, flag, experts, spec.moe_intermediate_size, field, flag in stated)
    if not spec.is_mla and ("--kv-channels" in stated or complete):
        channels = stated.get("--kv-channels", hidden // heads)
        if channels != spec.attention_head_dim:
            raise _refuse(
                where, "--kv-channels", channels, spec.attention_head_dim, "head_dim", "--kv-channels" in stated
            )


def _check_query_groups(flags: MegatronFlags, spec: ModelSpec, where: str) -> None:
    """The key/value heads Megatron-LM builds: `--num-query-groups` (default 1) with
    `--group-query-attention`, else one a head, the count ignored (argument_utils.py)."""
    if spec.is_mla:
        return
    gqa, stated = "--group-query-attention" in flags.switches, "--num-query-groups" in flags.stated
    if gqa:
        groups = int(flags.stated.get("--num-query-groups", 1))
        if groups != spec.kv_heads:
            raise _refuse(where, "--num-query-groups", groups, spec.kv_heads, "num_key_value_heads", stated)
    elif flags.complete or stated:
        heads = int(flags.stated.get("--num-attention-heads", spec.num_attention_heads))
        if heads != spec.kv_heads:
            raise InputError(
                where,
                "--group-query-attention",
                f"not given (Megatron-LM then builds a key/value head per head: {heads}"
                + (", and ignores --num-query-groups" if stated else "")
                + f"), the run config has {spec.kv_heads} key/value heads (num_key_value_heads): {WHY}",
            )


def moe_pattern(text: str, layers: int) -> list[int]:
    """`--moe-layer-freq` as Megatron-Core reads it: N (layer i is MoE when i % N == 0) or a list
    expression of 0/1 lists, `*` counts, `+` and parentheses (`[0]*3+[1]*58`), evaluated here by
    a small grammar rather than Python's eval."""
    text = text.strip().strip("\"'")
    if text.isdigit():
        every = int(text)
        if every < 1:
            raise ValueError("must be positive")
        return [1 if i % every == 0 else 0 for i in range(layers)]
    tokens = re.findall(r"\d+|[\[\]()*+,]|\S", text)
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal position
        token = peek()
        if token is None or (expected is not None and token != expected):
            raise ValueError(f"expected {expected or 'more'} at {token!r}")
        position += 1
        return token

    def atom() -> list[int]:
        if peek() == "(":
            take("(")
            value = total()
            take(")")
        else:
            take("[")
            value = [int(take())]
            while peek() == ",":
                take(",")
                value.append(int(take()))
            take("]")
        while peek() == "*":
            take("*")
            count = int(take())
            if len(value) * count > 100_000:
                raise ValueError("longer than any model")
            value = value * count
        return value

    def total() -> list[int]:
        value = atom()
        while peek() == "+":
            take("+")
            value = value + atom()
        return value

    pattern = total()
    if peek() is not None:
        raise ValueError(f"unexpected {peek()!r}")
    return pattern


def _run_length(pattern: list[int]) -> str:
    runs: list[list[int]] = []
    for value in pattern:
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return "+".join(f"[{value}]*{count}" for value, count in runs)


def _check_moe_pattern(flags: MegatronFlags, spec: ModelSpec, where: str) -> None:
    text = flags.stated.get("--moe-layer-freq")
    if not spec.is_moe or (text is None and not flags.complete):
        return
    try:
        given = moe_pattern(str(text or "1"), spec.num_layers)
    except ValueError as err:
        raise InputError(where, "--moe-layer-freq", f"cannot read {text!r}: {err}") from None
    expected = [int(spec.layer_is_moe(i)) for i in range(spec.num_layers)]
    if given != expected:
        said = str(text) if text is not None else "not given (Megatron-LM's default 1)"
        raise InputError(
            where,
            "--moe-layer-freq",
            f"{said} makes MoE layers {_run_length(given)}, the run config has {_run_length(expected)} "
            f"(first_dense_layers, moe_layer_frequency, dense_layers): {WHY}",
        )


def _check_parallel(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    par = run.parallel
    stated, switches, complete = flags.stated, flags.switches, flags.complete
    tp = int(stated.get("--tensor-model-parallel-size", par.tp))
    if "--expert-tensor-parallel-size" in stated or complete:
        given = stated.get("--expert-tensor-parallel-size", tp)
        if given != par.expert_tp:
            raise _refuse(where, "--expert-tensor-parallel-size", given, par.expert_tp, "parallel.etp", True)
    sequence_parallel = "--sequence-parallel" in switches
    if par.tp > 1 and (sequence_parallel or complete) and sequence_parallel != par.sequence_parallel:
        raise _refuse(
            where, "--sequence-parallel", sequence_parallel, par.sequence_parallel, "parallel.sequence_parallel", True
        )
    _check_sharding(flags, run, where)
    _check_context_parallel(flags, run, where)
    _check_virtual_stages(flags, run, where)
    _check_group(flags, run, where)


# What data parallelism shards (ppb's shard level: 1 optimizer states, 2 and gradients, 3 and
# parameters) under Megatron-FSDP's --data-parallel-sharding-strategy (arguments.py: default
# optim_grads_params); torch FSDP2 shards all three; the distributed optimizer the optimizer states.
_FSDP_LEVELS = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _check_sharding(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    switches, level = flags.switches, run.shard_level
    shown_run = f"{level} (zero {run.parallel.zero}, fsdp {str(run.parallel.fsdp).lower()})"
    if "--use-megatron-fsdp" in switches:
        strategy = str(flags.stated.get("--data-parallel-sharding-strategy", "optim_grads_params"))
        if strategy not in _FSDP_LEVELS:
            raise InputError(
                where, "--data-parallel-sharding-strategy", f"{strategy!r} is none of {', '.join(_FSDP_LEVELS)}"
            )
        given, said = _FSDP_LEVELS[strategy], f"--data-parallel-sharding-strategy {strategy}"
        flag = "--use-megatron-fsdp"
    elif "--use-torch-fsdp2" in switches:
        given, said, flag = 3, "given (parameters, gradients and optimizer states sharded)", "--use-torch-fsdp2"
    elif "--use-distributed-optimizer" in switches:
        given, said, flag = 1, "given (the optimizer states sharded)", "--use-distributed-optimizer"
        if not flags.complete and level >= 1:
            return  # a partial text may leave out the FSDP flags that shard more
    elif flags.complete:
        given, said, flag = 0, "not given (nothing sharded)", "--use-distributed-optimizer"
    else:
        return
    if given != level:
        raise InputError(where, flag, f"{said}: shard level {given}, the run config has {shown_run}: {WHY}")
    # which FSDP shards matters to memory (Megatron-FSDP keeps its non-unit modules gathered)
    if level == 3 and flag in ("--use-megatron-fsdp", "--use-torch-fsdp2"):
        named = "megatron_fsdp" if flag == "--use-megatron-fsdp" else "torch_fsdp2"
        if run.parallel.fsdp and (run.parallel.fsdp_impl or "megatron_fsdp") != named:
            stated = run.parallel.fsdp_impl or "megatron_fsdp (unset)"
            raise InputError(where, flag, f"given, the run config has parallel.fsdp_impl {stated}: {WHY}")


# Megatron-LM's --cp-comm-type (default p2p, one type a layer allowed) as ppb's parallel.cp_variant, in the
# words TransformerEngine takes (d0067d0d `attn_forward_func_with_cp`): p2p the ring, a2a Ulysses' all-to-all,
# all_gather, a2a+p2p hierarchical (its levels --hierarchical-context-parallel-sizes).
_CP_VARIANTS = {"p2p": "ring", "a2a": "ulysses", "all_gather": "all_gather", "a2a+p2p": "hierarchical"}


def _check_context_parallel(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    par = run.parallel
    text = flags.stated.get("--cp-comm-type")
    if par.cp < 2 or (text is None and not flags.complete):
        return
    kinds = sorted(set(str(text or "p2p").split())) or ["p2p"]
    if len(kinds) > 1 or kinds[0] not in _CP_VARIANTS:
        raise InputError(
            where,
            "--cp-comm-type",
            f"{text}: ppb prices one type for every layer, p2p (ring), a2a (ulysses), all_gather or a2a+p2p",
        )
    if _CP_VARIANTS[kinds[0]] != par.cp_variant:
        said = kinds[0] if text is not None else "not given (Megatron-LM's default p2p)"
        raise InputError(
            where,
            "--cp-comm-type",
            f"{said} is the {_CP_VARIANTS[kinds[0]]}, the run config has {par.cp_variant} (parallel.cp_variant): {WHY}",
        )
    sizes_text = flags.stated.get("--hierarchical-context-parallel-sizes")
    if par.cp_variant == "hierarchical" and (sizes_text is not None or flags.complete):
        sizes = [int(word) for word in str(sizes_text or "").split() if word.lstrip("-").isdigit()]
        if sizes != par.hierarchical_cp_sizes:
            said = str(sizes_text) if sizes_text is not None else "not given"
            raise InputError(
                where,
                "--hierarchical-context-parallel-sizes",
                f"{said}, the run config has {par.hierarchical_cp_sizes} (parallel.hierarchical_cp_sizes): {WHY}",
            )


def _check_virtual_stages(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    """The virtual stages per rank the flags give (arguments.py `validate_args`), against vpp."""
    par, stated = run.parallel, flags.stated
    if flags.layout is not None:
        return  # the layout's own count is checked with its cells (user_plan)
    pp = int(stated.get("--pipeline-model-parallel-size", par.pp))
    if "--num-virtual-stages-per-pipeline-rank" in stated:
        flag = "--num-virtual-stages-per-pipeline-rank"
        given = int(stated[flag])
        said = str(given)
    elif "--num-layers-per-virtual-pipeline-stage" in stated:
        flag = "--num-layers-per-virtual-pipeline-stage"
        per_virtual = int(stated[flag])
        layers = int(stated.get("--num-layers", run.total_body_layers)) + sum(flags.split_adds)
        if per_virtual < 1 or layers % pp or (layers // pp) % per_virtual:
            raise InputError(
                where, flag, f"{per_virtual} does not divide the {layers} layers' share of pp {pp}, as Megatron needs"
            )
        given = layers // pp // per_virtual
        said = f"{per_virtual} gives {counted(given, 'virtual stage')} per rank ({layers} layers over pp {pp})"
    elif flags.complete:
        flag, given, said = "--num-virtual-stages-per-pipeline-rank", 1, "not given (no virtual stages)"
    else:
        return
    if given != par.vpp:
        raise InputError(where, flag, f"{said}, the run config has {par.vpp} (parallel.vpp): {WHY}")


GROUP_FLAG = "--microbatch-group-size-per-virtual-pipeline-stage"


def _check_group(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    """The interleaved schedule's micro-batch group against the run's (model_parallel_config.py
    `microbatch_group_size_per_vp_stage`, default pp in `__post_init__`; only the interleaved schedule reads
    it, schedules.py at d98e8a64)."""
    par = run.parallel
    if par.vpp < 2 or par.schedule != "interleaved" or (GROUP_FLAG not in flags.stated and not flags.complete):
        return
    pp = int(flags.stated.get("--pipeline-model-parallel-size", par.pp))
    given = int(flags.stated.get(GROUP_FLAG, pp))
    has = par.microbatch_group_size_per_vp_stage or par.pp
    if given != has:
        said = str(given) if GROUP_FLAG in flags.stated else f"not given (Megatron-LM's default pp = {given})"
        field = "parallel.microbatch_group_size_per_vp_stage"
        stated = "" if par.microbatch_group_size_per_vp_stage else ", unset: the default pp"
        raise InputError(where, GROUP_FLAG, f"{said}, the run config has {has} ({field}{stated}): {WHY}")


def _check_training(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    training, par = run.training, run.parallel
    given_dtype = "bf16" if "--bf16" in flags.switches else "fp16" if "--fp16" in flags.switches else None
    if given_dtype is not None or flags.complete:
        dtype = given_dtype or "fp32"
        if dtype != training.dtype:
            flag = f"--{given_dtype}" if given_dtype else "--bf16"
            said = "given" if given_dtype else "neither --bf16 nor --fp16 (Megatron-LM trains in fp32)"
            raise InputError(where, flag, f"{said}, the run config has dtype {training.dtype} (training.dtype): {WHY}")
    # --fp8-format runs Transformer Engine's FP8 linears, which keep their inputs in FP8 for the weight
    # gradient (memory/precision.py): training.fp8_cache prices that, none prices 16-bit inputs
    fp8 = flags.stated.get("--fp8-format")
    if (fp8 is not None or flags.complete) and (fp8 is not None) != (training.fp8_cache != "none"):
        said = f"{fp8} (FP8 linears keep their inputs in FP8)" if fp8 is not None else "not given (16-bit linears)"
        raise InputError(
            where, "--fp8-format", f"{said}, the run config has fp8_cache {training.fp8_cache} (training): {WHY}"
        )
    if "--global-batch-size" in flags.stated:
        expected = training.micro_batch_size * training.micro_batches * par.dp
        given = flags.stated["--global-batch-size"]
        if given != expected:
            raise InputError(
                where,
                "--global-batch-size",
                f"{given}, the run config has {expected} (micro_batch_size {training.micro_batch_size} × "
                f"micro_batches {training.micro_batches} × dp {par.dp}): {WHY}",
            )


def _check_memory_switches(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    """The switches that change what a stage holds, as the importer reads them (megatron_import.py):
    `--fp8-param-gather` (no 16-bit copy beside the FP8 weights, memory/frameworks/te_fp8.py),
    `--first-last-layers-bf16` with its counts (1 and 1; read under FP8 only, fp8_utils.py
    `is_first_last_bf16_layer`), `--no-create-attention-mask-in-dataloader` (the b·s·s mask
    pretrain_gpt.py `get_batch` holds), `--attention-backend` auto, flash or fused under TE's fused
    attention (`timing.te_attention_backend`: which keeps the attention output twice) and, under Muon with
    the distributed optimizer (training.py `wrap_model_chunks_with_ddp`), `--no-use-layer-wise-param-layout`.
    A whole command line leaving one out runs without it (Megatron-LM d98e8a64)."""
    switches, complete, timing = flags.switches, flags.complete, run.timing
    # each flag: the run config's field, its value, and whether that value means the flag is given
    said = {
        "--fp8-param-gather": ("timing.fp8_param_gather", timing.fp8_param_gather, timing.fp8_param_gather),
        "--no-create-attention-mask-in-dataloader": (
            "timing.attention_mask_in_dataloader",
            timing.attention_mask_in_dataloader,
            not timing.attention_mask_in_dataloader,
        ),
    }
    if run.training.optimizer == "muon" and run.shard_level == 1:
        layout = run.training.layer_wise_param_layout
        said["--no-use-layer-wise-param-layout"] = ("training.layer_wise_param_layout", layout, not layout)
    for flag, (field, value, expected) in said.items():
        given = flag in switches
        if (given or complete) and given != expected:
            has = "true" if value else "false"
            raise InputError(where, flag, f"{_shown(given)}, the run config has {field}: {has}: {WHY}")
    backend = flags.stated.get("--attention-backend")
    engine = timing.transformer_impl == "transformer_engine" and run.training.flash_attention
    if engine and (backend is not None or complete):  # which TE attention keeps what (memory/setup.py `te_flash`)
        given = str(backend or "auto")
        if given in ("auto", "flash", "fused") and given != timing.te_attention_backend:
            has = timing.te_attention_backend
            said_backend = given if backend is not None else "not given (auto)"
            raise InputError(
                where,
                "--attention-backend",
                f"{said_backend}, the run config has timing.te_attention_backend: {has}: {WHY}",
            )
    fp8 = "--fp8-format" in flags.stated if complete else timing.matmul_dtype == "fp8"
    bf16 = "--first-last-layers-bf16" in switches
    if fp8 and (bf16 or complete):
        start = int(flags.stated.get("--num-layers-at-start-in-bf16", 1))
        end = int(flags.stated.get("--num-layers-at-end-in-bf16", 1))
        given_layers = (start, end) if bf16 else (0, 0)
        if given_layers != tuple(timing.fp8_bf16_layers):
            shown_flags = f"given ({start} layers at the start, {end} at the end)" if bf16 else "not given"
            has = list(timing.fp8_bf16_layers)
            raise InputError(
                where,
                "--first-last-layers-bf16",
                f"{shown_flags}, the run config has {has} (timing.fp8_bf16_layers): {WHY}",
            )


def _check_attention_backend(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    """`--attention-backend` under TransformerEngine's spec against `training.flash_attention`, as the importer
    reads it (megatron_import.py `_flash`; Megatron-LM's default auto, d98e8a64): unfused (TE's
    UnfusedDotProductAttention) and local (Megatron's DotProductAttention) keep the scores, auto, flash and fused
    not (which of TE's fused attentions: `_check_memory_switches`)."""
    given = flags.stated.get("--attention-backend")
    if run.timing.transformer_impl != "transformer_engine" or (given is None and not flags.complete):
        return
    backend = str(given or "auto")
    if (backend in ("auto", "flash", "fused")) != run.training.flash_attention:
        said = backend if given is not None else "not given (Megatron-LM's default auto)"
        has = "true" if run.training.flash_attention else "false"
        raise InputError(
            where, "--attention-backend", f"{said}, the run config has training.flash_attention: {has}: {WHY}"
        )


def _check_grad_buffer(flags: MegatronFlags, run: RunConfig, where: str) -> None:
    """The main gradients' bytes a whole command line says (`training.grad_bytes`), by the importer's
    rule (megatron_import.py `_training`, Megatron-LM d98e8a64): DDP accumulates in fp32 under
    `--accumulate-allreduce-grads-in-fp32`, which validate_args sets under --bf16 unless
    `--grad-reduce-in-bf16` or `--main-grads-dtype bf16`; Megatron-FSDP keeps its main gradients in
    `--megatron-fsdp-main-grads-dtype`, the parameters' dtype at its default (auto)."""
    if not flags.complete:
        return  # a plan's text alone leaves the gradients' dtype to the run config
    switches, stated = flags.switches, flags.stated
    bf16, fp16 = "--bf16" in switches, "--fp16" in switches
    accumulate = "--accumulate-allreduce-grads-in-fp32"
    if "--use-megatron-fsdp" in switches:
        flag = "--megatron-fsdp-main-grads-dtype"
        grads = str(stated.get(flag, "auto"))
        fp32 = not (bf16 or fp16) if grads == "auto" else grads == "fp32"
        why = f"{grads}" + (" (the parameters' dtype)" if grads == "auto" else "")
    elif accumulate in switches or not (bf16 or fp16):
        flag, fp32, why = accumulate, True, "fp32 accumulation"
    elif fp16:
        flag, fp32, why = "--fp16", False, f"fp16, without {accumulate}"
    elif "--grad-reduce-in-bf16" in switches or str(stated.get("--main-grads-dtype", "fp32")) == "bf16":
        flag = "--grad-reduce-in-bf16" if "--grad-reduce-in-bf16" in switches else "--main-grads-dtype"
        fp32, why = False, "bf16"
    else:
        flag, fp32, why = "--bf16", True, "fp32 (validate_args accumulates bf16 in fp32)"
    says = 2 if (bf16 or fp16) and not fp32 else 4
    if says != run.training.grad_bytes:
        raise InputError(
            where,
            flag,
            f"main gradients in {why}, {says} bytes, the run config has training.grad_bytes: "
            f"{run.training.grad_bytes}: {WHY}",
        )
