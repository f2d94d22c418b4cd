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
from ppb_core.config.spec import ModelSpec
from ppb_core.errors import InputError

WHY = "ppb checks the plan at the run's sizes"


@dataclass(frozen=True)
class Rule:
    """One flag: what the run config says of it (None: the flag does not concern this run) and
    Megatron-LM's value when a whole command line leaves it out (None: no default compared)."""

    flag: str
    field: str
    run_says: Callable[[object, ModelSpec], int | bool | None]
    default: int | bool | None = None
    says: str = ""  # a switch: what the run config has, `str.format`ted with spec and run


def _dense_ffn(run: object, spec: ModelSpec) -> int | None:
    del run
    if not spec.is_moe or any(not spec.layer_is_moe(i) for i in range(spec.num_layers)):
        return spec.intermediate_size
    return None


def _moe(value: Callable[[ModelSpec], int | None]) -> Callable[[object, ModelSpec], int | None]:
    return lambda run, spec: value(spec) if spec.is_moe else None


def _mla(value: Callable[[ModelSpec], int | None]) -> Callable[[object, ModelSpec], int | None]:
    return lambda run, spec: value(spec) if spec.is_mla else None


def _shared_width(spec: ModelSpec) -> int:
    """Megatron's `--moe-shared-expert-intermediate-size` is every shared expert's width together."""
    return spec.shared_experts * (spec.shared_expert_intermediate_size or spec.moe_intermediate_size or 0)


def _gqa(spec: ModelSpec) -> bool:
    return not spec.is_mla and spec.kv_heads != spec.num_attention_heads


_RULES = (
    Rule("--num-layers", "num_layers", lambda run, spec: spec.num_layers),
    Rule("--hidden-size", "hidden_size", lambda run, spec: spec.hidden_size),
    Rule("--num-attention-heads", "num_attention_heads", lambda run, spec: spec.num_attention_heads),
    Rule(
        "--group-query-attention",
        "num_key_value_heads",
        lambda run, spec: _gqa(spec),
        False,
        "{spec.kv_heads} key/value heads for {spec.num_attention_heads} heads",
    ),
    Rule("--kv-channels", "head_dim", lambda run, spec: None if spec.is_mla else spec.attention_head_dim),
    Rule("--vocab-size", "vocab_size", lambda run, spec: spec.vocab_size),
    Rule("--swiglu", "activation", lambda run, spec: spec.activation == "swiglu", False, "{spec.activation}"),
    Rule(
        "--untie-embeddings-and-output-weights",
        "tied_embeddings",
        lambda run, spec: not spec.tied_embeddings,
        False,
        "{spec.tied_embeddings}",
    ),
    Rule("--num-experts", "num_experts", lambda run, spec: spec.num_experts, 0),
    Rule("--moe-ffn-hidden-size", "moe_intermediate_size", _moe(lambda spec: spec.moe_intermediate_size)),
    Rule("--moe-router-topk", "experts_per_token", _moe(lambda spec: spec.experts_per_token), 2),
    Rule("--moe-shared-expert-intermediate-size", "shared experts' width", _moe(_shared_width), 0),
    Rule("--multi-latent-attention", "kv_lora_rank", lambda run, spec: spec.is_mla, False, "{spec.kv_lora_rank}"),
    Rule("--q-lora-rank", "q_lora_rank", _mla(lambda spec: spec.q_lora_rank), 0),
    Rule("--kv-lora-rank", "kv_lora_rank", _mla(lambda spec: spec.kv_lora_rank), 32),
    Rule("--qk-head-dim", "qk_nope_head_dim", _mla(lambda spec: spec.qk_nope_head_dim), 128),
    Rule("--qk-pos-emb-head-dim", "qk_rope_head_dim", _mla(lambda spec: spec.qk_rope_head_dim), 64),
    Rule("--v-head-dim", "v_head_dim", _mla(lambda spec: spec.v_head_dim), 128),
    Rule("--mtp-num-layers", "mtp_layers", lambda run, spec: spec.mtp_layers, 0),
    Rule("--seq-length", "training.seq_length", lambda run, spec: run.training.seq_length),  # type: ignore[attr-defined]
    Rule("--micro-batch-size", "training.micro_batch_size", lambda run, spec: run.training.micro_batch_size, 1),  # type: ignore[attr-defined]
    Rule("--tensor-model-parallel-size", "parallel.tp", lambda run, spec: run.parallel.tp, 1),  # type: ignore[attr-defined]
    Rule("--pipeline-model-parallel-size", "parallel.pp", lambda run, spec: run.parallel.pp, 1),  # type: ignore[attr-defined]
    Rule("--context-parallel-size", "parallel.cp", lambda run, spec: run.parallel.cp, 1),  # type: ignore[attr-defined]
    Rule("--expert-model-parallel-size", "parallel.ep", lambda run, spec: run.parallel.ep, 1),  # type: ignore[attr-defined]
    Rule(
        "--overlap-moe-expert-parallel-comm",
        "parallel.overlap_moe_expert_parallel_comm",
        lambda run, spec: run.parallel.overlap_moe_expert_parallel_comm,  # type: ignore[attr-defined]
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


def check_against_run(flags: MegatronFlags, run: object, where: str) -> None:
    """Refuse the first flag (stated, or left at Megatron-LM's default by a whole command line)
    whose value is not the run config's, in one line naming the flag and both values."""
    spec = run.specs[run.models[0].name]  # type: ignore[attr-defined]
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
    _check_ffn(flags, spec, where)
    _check_query_groups(flags, spec, where)
    _check_moe_pattern(flags, spec, where)
    _check_parallel(flags, run, where)
    _check_training(flags, run, where)


def _check_ffn(flags: MegatronFlags, spec: ModelSpec, where: str) -> None:
    given = flags.stated.get("--ffn-hidden-size")
    if given is None:
        return
    expected, field = _dense_ffn(None, spec), "intermediate_size"
    if expected is None and "--moe-ffn-hidden-size" not in flags.stated:
        expected, field = spec.moe_intermediate_size, "moe_intermediate_size (the experts' width defaults to it)"
    if expected is not None and given != expected:
        raise _refuse(where, "--ffn-hidden-size", given, expected, field, True)


def _check_query_groups(flags: MegatronFlags, spec: ModelSpec, where: str) -> None:
    """`--num-query-groups` counts with `--group-query-attention` only (default 1 then)."""
    if spec.is_mla or "--group-query-attention" not in flags.switches:
        return
    stated = "--num-query-groups" in flags.stated
    given = flags.stated.get("--num-query-groups", 1)
    if given != spec.kv_heads:
        raise _refuse(where, "--num-query-groups", given, spec.kv_heads, "num_key_value_heads", stated)


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


def _check_parallel(flags: MegatronFlags, run: object, where: str) -> None:
    par = run.parallel  # type: ignore[attr-defined]
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
    fsdp = switches & {"--use-megatron-fsdp", "--use-torch-fsdp2"}
    if (fsdp or complete) and bool(fsdp) != par.fsdp:
        flag = min(fsdp) if fsdp else "--use-megatron-fsdp"
        raise _refuse(where, flag, bool(fsdp), par.fsdp, "parallel.fsdp", True)
    distributed = par.zero >= 1 or par.fsdp
    if ("--use-distributed-optimizer" in switches or complete) and (
        "--use-distributed-optimizer" in switches
    ) != distributed:
        raise _refuse(
            where,
            "--use-distributed-optimizer",
            "--use-distributed-optimizer" in switches,
            f"zero {par.zero}",
            "parallel.zero",
            True,
        )
    _check_virtual_stages(flags, run, where)


def _check_virtual_stages(flags: MegatronFlags, run: object, where: str) -> None:
    """The virtual stages per rank the flags give (arguments.py `validate_args`), against vpp."""
    par, stated = run.parallel, flags.stated  # type: ignore[attr-defined]
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
        layers = int(stated.get("--num-layers", run.total_body_layers)) + sum(flags.split_adds)  # type: ignore[attr-defined]
        if per_virtual < 1 or layers % pp or (layers // pp) % per_virtual:
            raise InputError(
                where, flag, f"{per_virtual} does not divide the {layers} layers' share of pp {pp}, as Megatron needs"
            )
        given = layers // pp // per_virtual
        said = f"{per_virtual} gives {given} virtual stage(s) per rank ({layers} layers over pp {pp})"
    elif flags.complete:
        flag, given, said = "--num-virtual-stages-per-pipeline-rank", 1, "not given (no virtual stages)"
    else:
        return
    if given != par.vpp:
        raise InputError(where, flag, f"{said}, the run config has {par.vpp} (parallel.vpp): {WHY}")


def _check_training(flags: MegatronFlags, run: object, where: str) -> None:
    training, par = run.training, run.parallel  # type: ignore[attr-defined]
    given_dtype = "bf16" if "--bf16" in flags.switches else "fp16" if "--fp16" in flags.switches else None
    if given_dtype is not None or flags.complete:
        dtype = given_dtype or "fp32"
        if dtype != training.dtype:
            flag = f"--{given_dtype}" if given_dtype else "--bf16"
            said = "given" if given_dtype else "neither --bf16 nor --fp16 (Megatron-LM trains in fp32)"
            raise InputError(where, flag, f"{said}, the run config has dtype {training.dtype} (training.dtype): {WHY}")
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
