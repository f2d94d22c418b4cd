"""A run config from a Megatron-LM launch: `pretrain_gpt.py`'s flags (a command line or a launch
script, `launch_script`) read as Megatron-LM d98e8a64 reads them.

Every flag ppb models is carried into the run config, its default Megatron's where the launch
leaves it out (megatron/training/arguments.py `validate_args`, TransformerConfig's fields,
argument_utils.py `core_transformer_config_from_args`; the same sources as `megatron_run`):

* the model: `--num-layers`, `--hidden-size`, `--num-attention-heads`, `--ffn-hidden-size` (4h, or
  int(4h·2/3/64)·64 with `--swiglu`), `--group-query-attention --num-query-groups`, `--kv-channels`,
  `--normalization` (LayerNorm), `--position-embedding-type` (learned_absolute),
  `--disable-bias-linear`, `--add-qkv-bias`, `--qk-layernorm`, dropouts (0.1 each),
  `--untie-embeddings-and-output-weights`, MoE (`--num-experts`, `--moe-router-topk` 2,
  `--moe-ffn-hidden-size`, `--moe-shared-expert-intermediate-size` as one shared expert,
  `--moe-layer-freq`, `--moe-router-num-groups/--moe-router-group-topk`), MLA, `--mtp-num-layers`,
  GPT-OSS's (`--quick-geglu`, `--activation-func-clamp-value`, `--window-size`, `--window-attn-skip-freq`,
  `--softmax-type`; the experts' and router's biases with the linears');
* the vocabulary from the tokenizer (`megatron_tokenizer`, after build_tokenizer.py): the GPT-2
  BPE (`pretrain_gpt.py`'s default tokenizer, 50257 entries), NullTokenizer's `--vocab-size`
  (exactly, since c9dfe34798), TikTokenizer's `--vocab-size` or 2**17; a tokenizer read from a
  file (HuggingFace, SentencePiece) is read from its `--tokenizer-model` where that file is on this
  machine (`tokenizer_file`), else needs its size given (`--tokenizer-vocab`); padded to
  `--make-vocab-size-divisible-by` (128) times TP (`vocab_size_with_padding`);
* parallelism: TP, PP, CP (`--cp-comm-type`), EP, ETP (defaults to TP), SP (dropped at TP 1),
  virtual stages, the layout (`--decoder-first/last-pipeline-num-layers` and
  `--account-for-*-in-pipeline-split` written as one), the distributed optimizer and FSDP, DP
  from the GPU count;
* training: sequence, micro-batch, micro-batches from `--global-batch-size` (default: one a DP
  rank), dtype, optimizer (Adam, SGD, Muon), attention backend, recompute in Megatron's words, rope fusion, FP8,
  the router dtype, permute fusion, the capacity factor and its padding, the router's settings (score function, the
  load-balancing types whose `--moe-aux-loss-coeff` is above 0 or sinkhorn, z-loss, expert bias, fusion,
  pre-softmax, top-k scaling, forced balancing; `training.moe.router`);
* time: `--transformer-impl`, gradient-accumulation fusion, `--deterministic-mode`,
  `--cross-entropy-loss-fusion`, the NaN check, `--log-params-norm`, `--log-num-zeros-in-grad`,
  `--exit-duration-in-mins`, `--check-weight-hash-across-dp-replicas-interval`, the gradient
  reduction's and parameter gather's overlap
  (`--overlap-grad-reduce`, `--overlap-param-gather`, `--tp-comm-overlap`), the dispatcher,
  `--fp8-recipe`, `--no-bias-gelu-fusion`, `--no-bias-dropout-fusion`, `--calculate-per-token-loss`,
  `--ddp-average-in-collective`, `--overlap-param-gather-with-optimizer-step`,
  `--delay-wgrad-compute`, CUDA graphs (`--cuda-graph-impl`, `--cuda-graph-modules`,
  `--cuda-graph-warmup-steps`), `--moe-grouped-gemm`
  (without it a `SequentialMLP`, its experts one by one), `--fp8-param-gather`, `--first-last-layers-bf16`
  (`--num-layers-at-start-in-bf16`, `--num-layers-at-end-in-bf16`), `--no-create-attention-mask-in-dataloader`;
* memory settings: `--defer-embedding-wgrad-compute` / `--wgrad-deferral-limit`,
  `--num-distributed-optimizer-instances`, the gradient buffer's dtype (fp16, `--grad-reduce-in-bf16`,
  `--main-grads-dtype`, `--accumulate-allreduce-grads-in-fp32`; under Megatron-FSDP
  `--megatron-fsdp-main-grads-dtype`), `--moe-grouped-gemm`,
  `--no-masked-softmax-fusion`, `--attention-softmax-in-fp32` (`--apply-query-key-layer-scaling`),
  `--fine-grained-activation-offloading` with `--offload-modules` and `--min-offloaded-tensor-size`,
  `--cpu-offloading-num-layers` (Transformer Engine's CPU offloading);
* the environment's `CUBLAS_WORKSPACE_CONFIG` and `NVTE_ALLOW_NONDETERMINISTIC_ALGO` (TransformerEngine's
  deterministic attention, `timing.te_deterministic_attention`), where the script sets them.

A flag that bears on memory or time and ppb does not model is said in one line each (`notes`); a
flag with no bearing on either (logging, checkpoints, data, learning-rate schedule, the launcher's)
and a flag that changes nothing ppb prices (`NOTHING_PRICED`, each with why)
are read past (`megatron_vocabulary`); a contradiction or a flag ppb cannot price is refused in one
line naming it.
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from ppb_core import limits
from ppb_core.balance.launch_script import ScriptError, script_words_and_variables, unread_word
from ppb_core.balance.megatron import parse_flags
from ppb_core.balance.megatron_run import moe_pattern
from ppb_core.balance.megatron_tokenizer import (
    DEFAULT_TOKENIZER,
    READS_VOCAB_SIZE,
    file_vocabulary,
    tokenizer_vocabulary,
    unread_vocab_size,
)
from ppb_core.balance.megatron_vocabulary import (
    AT_DEFAULT,
    BIAS_FUSIONS,
    CHOICES,
    FIELD_FLAGS,
    FUSED_EXPERT_FLAGS,
    MODELLED,
    NO_BEARING,
    NO_BEARING_PREFIXES,
    NOT_PRICED,
    NOTHING_PRICED,
    PARALLEL_PROBLEMS,
    SHELL_WORDS,
    TYPO_SIMILARITY,
)
from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.layout import LayoutError, parse_layout
from ppb_core.config.run import FrameworkRelease, RunConfig, parse_run_config, pydantic_error
from ppb_core.errors import InputError, shown
from ppb_core.units import counted


@dataclass(frozen=True)
class Imported:
    """The run config a launch says (raw, as a run config file holds it), and one line for each
    flag that bears on memory or time that ppb does not model."""

    raw: dict[str, Any]
    notes: list[str] = field(default_factory=list)


# Flags Megatron-LM renamed, by their old name: a launch of the older code means the new one (arguments.py,
# af28b5a559 2025-08-21: `--use-custom-fsdp` became `--use-megatron-fsdp`, the same Megatron-FSDP)
RENAMED_FLAGS = {"--use-custom-fsdp": "--use-megatron-fsdp"}


class _Args:
    """A launch's flags as argparse keeps them: the last occurrence wins; a flag's values are the
    words up to the next flag (`None`: given as `--flag=value`, one value); a renamed flag under its
    new name (`RENAMED_FLAGS`)."""

    def __init__(self, words: list[str], where: str) -> None:
        self.where = where
        self.given: dict[str, list[str]] = {}
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            if not word.startswith("--"):
                continue
            name, equals, inline = word.partition("=")
            values = [inline] if equals else []
            while not equals and index < len(words) and not words[index].startswith("--"):
                if words[index] in SHELL_WORDS:  # `fi` after a flag in an `if` branch is the shell's
                    break
                values.append(words[index])
                index += 1
            self.given[RENAMED_FLAGS.get(name, name)] = values
        self.read: set[str] = set()

    def has(self, flag: str) -> bool:
        self.read.add(flag)
        return flag in self.given

    def text(self, flag: str, default: str | None = None) -> str | None:
        self.read.add(flag)
        if flag not in self.given:
            return default
        values = self.given[flag]
        if not values:
            raise InputError(self.where, flag, "needs a value")
        return values[0]

    def words(self, flag: str) -> list[str] | None:
        self.read.add(flag)
        return self.given.get(flag)

    def integer(self, flag: str, default: int | None = None) -> int | None:
        value = self.text(flag)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise InputError(self.where, flag, f"{shown(value)} is {unread_word(value)}: give the number") from None

    def number(self, flag: str, default: float) -> float:
        value = self.text(flag)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise InputError(self.where, flag, f"{shown(value)} is not a number") from None

    def positive(self, flag: str, default: int | None = None) -> int | None:
        """A size flag's integer, refused at 0 or below (Megatron-LM divides by it, or builds nothing)."""
        value = self.integer(flag, default)
        if value is not None and value <= 0 and self.has(flag):
            raise InputError(self.where, flag, f"must be positive, got {value}")
        return value

    def required(self, flag: str) -> int:
        """A size Megatron-LM requires (layers, hidden, heads, sequence): given, and above 0."""
        value = self.positive(flag)
        if value is None:
            raise InputError(self.where, flag, "missing: Megatron-LM requires it")
        return value


def import_megatron(
    text: str,
    gpus: int | None,
    device: str,
    where: str = "<flags>",
    tokenizer_vocab: int | None = None,
    read_file: Callable[[str], str | None] | None = None,
    release: Mapping[str, str] | None = None,
) -> Imported:
    """The run config *text* (Megatron-LM flags or a launch script) launches on *gpus* devices of the
    catalog's *device* (None: torchrun's `--nproc-per-node` × `--nnodes` in the script). *read_file*
    gives the text of a file the launch names (`--tp-comm-overlap-cfg`), None where it cannot. *release*
    states the Megatron-Core and Transformer Engine releases run (`framework_release`: the flags' defaults
    and effects as that code has them; None: the newest ppb follows)."""
    stated = _release(release, where)
    try:
        words, variables = script_words_and_variables(text)
    except ScriptError as err:
        raise InputError(where, None, str(err)) from None
    _refuse_other_entry(words, where)
    args = _Args(words, where)
    for flag, what in NOT_PRICED.items():
        if flag in args.given:
            raise InputError(where, flag, f"{what}: ppb prices GPT decoder layers")
    for flag, choices in CHOICES.items():  # read from `given`: a flag ppb does not carry stays noted
        value = (args.given.get(flag) or [None])[0]
        if value is not None and value not in choices:
            raise InputError(where, flag, f"{shown(value)} is none of Megatron-LM's {', '.join(choices)}")
    if "--num-layers" not in args.given:
        _unused_flag_variable(variables, where)
    notes: list[str] = []
    spec, pad_multiple = _model(args, notes, tokenizer_vocab)
    world = gpus if gpus is not None else _torchrun_world(args)
    parallel, dp = _parallel(args, spec, world, notes, stated)
    training = _training(args, spec, dp, notes, stated)
    _even_split(where, spec["num_layers"], parallel)
    raw: dict[str, Any] = {
        "name": "megatron-launch",
        "framework": "megatron",
        **({"framework_release": stated.model_dump(exclude_none=True)} if stated.stated else {}),
        "models": [{"name": "gpt", "spec": spec, "pad_vocab_multiple": pad_multiple}],
        "parallel": parallel,
        "training": training,
        # held back for the CUDA context and NCCL's buffers of this layout's communicators, not 0
        # (`ppb_core.config.runtime_reserve`)
        "device": {"name": device, "reserved_mb": "auto"},
        "timing": _timing(args, notes),
    }
    entries = _ub_entries(args, read_file, notes)
    methods = _ub_methods(args, entries)
    if methods:
        raw["timing"]["tp_comm_overlap_methods"] = methods
    margin = _ub_sm_margin(entries, methods, notes)
    if margin is not None:
        raw["timing"]["ub_sm_margin"] = margin
    te_deterministic = _te_deterministic_attention(args, variables)
    if te_deterministic is not None:
        raw["timing"]["te_deterministic_attention"] = te_deterministic
    raw["timing"].update(_op_fuser(args, device, variables))
    if args.integer("--cpu-offloading-num-layers") and variables.get("NVTE_CPU_OFFLOAD_V1", "0").strip("'\"") == "1":
        notes.append("NVTE_CPU_OFFLOAD_V1=1: TE's older CPU offload handler, not modelled (priced as TE's default)")
    cublas = variables.get("CUBLAS_WORKSPACE_CONFIG")
    if cublas:
        raw["memory"] = {"cublas_workspace_config": cublas}
    notes.extend(_unmodelled(args))
    return Imported(raw, notes)


def _te_deterministic_attention(args: _Args, variables: dict[str, str]) -> bool | None:
    """NVTE_ALLOW_NONDETERMINISTIC_ALGO where the script sets it (None where it does not): TransformerEngine
    reads `int(value)` and runs its deterministic attention at 0 (dot_product_attention.py `__init__`,
    TE v1.12 to d0067d0d). Under --deterministic-mode Megatron sets it to 0 and refuses any other value
    (megatron/training/determinism.py `apply_determinism_env`, d98e8a64), so the flag decides."""
    value = variables.get("NVTE_ALLOW_NONDETERMINISTIC_ALGO")
    if value is None:
        return None
    name = "NVTE_ALLOW_NONDETERMINISTIC_ALGO"
    if args.has("--deterministic-mode"):
        if value != "0":
            raise InputError(args.where, name, f"{shown(value)} under --deterministic-mode: Megatron-LM accepts only 0")
        return None
    try:
        return int(value) == 0
    except ValueError:
        said = f"{shown(value)} is not an integer (TransformerEngine reads int())"
        raise InputError(args.where, name, said) from None


def _unused_flag_variable(variables: dict[str, str], where: str) -> None:
    """A script that only assigns its flags (Megatron-LM's examples/post_training/modelopt/conf/*.sh:
    `MODEL_ARGS=" --num-layers 28 ..."`, sourced by the script that launches) launches nothing: said,
    rather than `--num-layers` missing."""
    for name, value in variables.items():
        if "--num-layers" in value.split():
            raise InputError(
                where,
                "--num-layers",
                f"only in ${name}, which no command here is given: import the launch that uses it",
            )


def _refuse_other_entry(words: list[str], where: str) -> None:
    """A launch of another Megatron-LM entry point (examples/bert/train_bert_340m_distributed.sh runs
    pretrain_bert.py, examples/mamba/train.sh pretrain_mamba.py) builds other layers than the GPT
    decoder ppb prices: refused, not priced as pretrain_gpt.py."""
    for word in words:
        name = word.rsplit("/", 1)[-1]
        if name.startswith("pretrain_") and name.endswith(".py") and name != "pretrain_gpt.py":
            raise InputError(where, name, "is not pretrain_gpt.py: ppb prices GPT decoder layers")


def _torchrun_world(args: _Args) -> int:
    per_node = args.integer("--nproc-per-node") or args.integer("--nproc_per_node")
    nodes = args.integer("--nnodes", 1)
    if per_node is None:
        raise InputError(args.where, "--gpus", "the launch does not say its GPU count: give --gpus N")
    return per_node * (nodes or 1)


def _vocabulary(args: _Args, tokenizer_vocab: int | None, notes: list[str]) -> int:
    """The tokenizer's vocabulary, before Megatron pads it (`megatron_tokenizer`, the rule `ppb check`
    compares a launch by); a file tokenizer's read from its `--tokenizer-model` where that file is on
    this machine, else *tokenizer_vocab* gives it. A `--vocab-size` the tokenizer does not read is said
    (until session 34 it was dropped in silence, "0 flags not modelled")."""
    kind = args.text("--tokenizer-type", DEFAULT_TOKENIZER) or DEFAULT_TOKENIZER
    given = args.positive("--vocab-size")
    built = tokenizer_vocabulary(kind, given, args.where)
    unread = given is not None and kind not in READS_VOCAB_SIZE
    if built is None and tokenizer_vocab is None:
        special = args.words("--tokenizer-special-tokens") or []
        read = file_vocabulary(
            kind,
            args.text("--tokenizer-model"),
            special,
            args.has("--tokenizer-sentencepiece-legacy"),
            args.text("--vocab-file"),
        )
        built = read if isinstance(read, int) else None
    if built is None and tokenizer_vocab is None:
        raise InputError(
            args.where,
            "--tokenizer-model",
            f"{kind} reads its vocabulary from the tokenizer's file: give its size with --tokenizer-vocab N"
            + (f" (Megatron-LM does not read --vocab-size {given} for it)" if unread else ""),
        )
    if built is not None and tokenizer_vocab is not None and tokenizer_vocab != built:
        raise InputError(
            None,
            "--tokenizer-vocab",
            f"{tokenizer_vocab}, but the launch's {kind} builds {built} entries, read from no file",
        )
    vocab: int = built if built is not None else tokenizer_vocab  # type: ignore[assignment]
    if unread:
        notes.append(unread_vocab_size(kind, given, vocab))  # type: ignore[arg-type]
    return vocab


def _model(args: _Args, notes: list[str], tokenizer_vocab: int | None) -> tuple[dict[str, Any], int]:
    where = args.where
    layers = args.required("--num-layers")
    hidden = args.required("--hidden-size")
    heads = args.required("--num-attention-heads")
    swiglu, squared, quick = args.has("--swiglu"), args.has("--squared-relu"), args.has("--quick-geglu")
    if swiglu and squared:
        raise InputError(where, "--squared-relu", "cannot be set with --swiglu (one activation)")
    if quick and (swiglu or squared):  # argument_utils.py: `elif args.quick_geglu: assert not args.swiglu`
        raise InputError(where, "--quick-geglu", f"cannot be set with {'--swiglu' if swiglu else '--squared-relu'}")
    default_ffn = int(4 * hidden * 2 / 3 / 64) * 64 if swiglu else 4 * hidden  # arguments.py validate_args
    ffn = args.integer("--ffn-hidden-size", default_ffn)
    norm = args.text("--normalization", "LayerNorm")
    if norm not in ("LayerNorm", "RMSNorm"):
        raise InputError(where, "--normalization", f"{shown(norm)}: LayerNorm or RMSNorm")
    position = args.text("--position-embedding-type", "learned_absolute")
    if args.has("--use-rotary-position-embeddings"):
        position = "rope"
    if args.has("--no-position-embedding") and position != "rope":  # arguments.py validate_args refuses it
        raise InputError(where, "--no-position-embedding", "is deprecated: use --position-embedding-type")
    positions = {"learned_absolute": "learned", "rope": "rope", "none": "none", "yarn": "rope", "mrope": "rope"}
    if position not in positions:
        raise InputError(where, "--position-embedding-type", f"{shown(position)} is none of {', '.join(positions)}")
    if position in ("yarn", "mrope"):
        notes.append(f"--position-embedding-type {position}: priced as rope")
    seq = args.required("--seq-length")
    if seq > limits.SEQUENCE:  # before the spec's positions (max(--max-position-embeddings, seq)) say it
        raise InputError(where, "--seq-length", limits.over(seq, limits.SEQUENCE, "tokens"))
    max_positions = args.integer("--max-position-embeddings")
    if position == "learned_absolute" and max_positions is None:
        raise InputError(where, "--max-position-embeddings", "missing: learned positions need it")
    if max_positions is not None and max_positions < seq:  # arguments.py validate_args asserts it
        raise InputError(where, "--max-position-embeddings", f"{max_positions} is below --seq-length {seq}")
    bias = not args.has("--disable-bias-linear")
    spec: dict[str, Any] = {
        "vocab_size": _vocabulary(args, tokenizer_vocab, notes),
        "hidden_size": hidden,
        "num_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ffn,
        "activation": "swiglu" if swiglu else "relu" if squared else "quick_geglu" if quick else "gelu",
        "norm": "rmsnorm" if norm == "RMSNorm" else "layernorm",
        "norm_bias": norm == "LayerNorm",
        "tied_embeddings": not args.has("--untie-embeddings-and-output-weights"),
        "position_embedding": positions[position],
        "max_position_embeddings": max(max_positions or seq, seq),
        "attention_bias": bias or args.has("--add-qkv-bias"),
        "attention_output_bias": bias,
        "mlp_bias": bias,
        "qk_norm": args.has("--qk-layernorm"),
        "attention_dropout": args.number("--attention-dropout", 0.1),
        "hidden_dropout": args.number("--hidden-dropout", 0.1),
    }
    if squared:
        notes.append("--squared-relu: priced as relu (the square's extra elementwise pass is not)")
    channels = args.positive("--kv-channels")
    mla = args.has("--multi-latent-attention")
    if channels is None and not mla and hidden % heads:  # validate_args: kv_channels = hidden / heads
        raise InputError(where, "--num-attention-heads", f"{heads} does not divide --hidden-size {hidden}")
    if channels is not None and channels != hidden // heads and not mla:  # MLA's head sizes are its own
        spec["head_dim"] = channels
    groups = args.integer("--num-query-groups")
    if args.has("--group-query-attention"):
        spec["num_key_value_heads"] = groups or 1
    elif groups is not None:
        notes.append("--num-query-groups without --group-query-attention: Megatron-LM ignores it")
    _moe_spec(args, spec, layers, ffn)
    _gpt_oss_spec(args, spec, layers, bias, notes)
    _mla_spec(args, spec)
    mtp = args.integer("--mtp-num-layers", 0)
    if mtp:
        spec["mtp_layers"] = mtp
    return spec, args.integer("--make-vocab-size-divisible-by", 128) or 128


def _moe_spec(args: _Args, spec: dict[str, Any], layers: int, ffn: int) -> None:
    experts = args.integer("--num-experts", 0) or 0
    if not experts:
        for flag in ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-layer-freq"):
            if flag in args.given:
                raise InputError(args.where, flag, "is a MoE setting, and --num-experts is not given")
        return
    spec["num_experts"] = experts
    spec["experts_per_token"] = args.integer("--moe-router-topk", 2)
    spec["moe_intermediate_size"] = args.integer("--moe-ffn-hidden-size", ffn)
    shared = args.integer("--moe-shared-expert-intermediate-size")
    if shared:  # Megatron's shared experts are one MLP of this width (moe/shared_experts.py)
        spec["shared_experts"] = 1
        spec["shared_expert_intermediate_size"] = shared
    groups, limit = args.integer("--moe-router-num-groups"), args.integer("--moe-router-group-topk", 0)
    if limit and not groups:  # transformer_config.py TransformerConfig.__post_init__ (d98e8a64) raises it
        raise InputError(args.where, "--moe-router-group-topk", "needs --moe-router-num-groups, as Megatron-Core says")
    if groups:
        spec["expert_groups"] = groups
        spec["expert_group_limit"] = limit
    text = args.text("--moe-layer-freq", "1")
    try:
        pattern = moe_pattern(str(text), layers)
    except ValueError as err:
        raise InputError(args.where, "--moe-layer-freq", f"cannot read {shown(text)}: {err}") from None
    if len(pattern) != layers:
        raise InputError(args.where, "--moe-layer-freq", f"gives {len(pattern)} layers, --num-layers is {layers}")
    dense = [index for index, moe in enumerate(pattern) if not moe]
    leading = next((index for index, moe in enumerate(pattern) if moe), layers)
    if leading:
        spec["first_dense_layers"] = leading
    if dense[leading:]:
        spec["dense_layers"] = dense[leading:]


def _window_layers(args: _Args, layers: int) -> tuple[int, ...]:
    """The 0-based layers `--window-size` applies to: utils.py `is_layer_window_attention` (d98e8a64,
    core_v0.17.0): every layer without `--window-attn-skip-freq`; with N, layer number ℓ (1-based) where
    ℓ % N != 0 (GPT-OSS's 2: the odd-numbered layers slide); with a list pattern (`moe_freq_type`'s), where
    its entry is 1."""
    text = args.text("--window-attn-skip-freq")
    if text is None:
        return tuple(range(layers))
    bare = text.strip().strip("\"'")
    if bare.isdigit():
        every = int(bare)
        if every < 1:
            raise InputError(args.where, "--window-attn-skip-freq", f"must be positive, got {every}")
        return tuple(i for i in range(layers) if (i + 1) % every)
    try:
        pattern = moe_pattern(bare, layers)
    except ValueError as err:
        raise InputError(args.where, "--window-attn-skip-freq", f"cannot read {shown(text)}: {err}") from None
    if len(pattern) != layers:
        problem = f"gives {len(pattern)} layers, --num-layers is {layers}"
        raise InputError(args.where, "--window-attn-skip-freq", problem)
    return tuple(i for i, windowed in enumerate(pattern) if windowed)


def _gpt_oss_spec(args: _Args, spec: dict[str, Any], layers: int, bias: bool, notes: list[str]) -> None:
    """GPT-OSS's settings as TransformerConfig reads them (core_v0.17.0; d98e8a64 alike; the flags of
    examples/gptoss/02_train.sh): `--window-size L,R` (TE's window: L earlier keys, R later; `tuple_type`)
    on `_window_layers`, a causal window of L + 1 keys (GPTOSSBridge writes (sliding_window − 1, 0));
    `--softmax-type learnable` a sink logit a head (TEDotProductAttention's `softmax_offset`), off-by-one
    the same offset fixed at 0 (no parameter), priced as vanilla; `--activation-func-clamp-value` the
    quick-GEGLU's clamp (fused_bias_geglu.py `weighted_bias_quick_geglu_impl`); with biases
    (`add_bias_linear`, no `--disable-bias-linear`) the experts' linears (`TEGroupedMLP`: `bias=
    config.add_bias_linear`) and the router (router.py `Router.__init__`: a bias where `add_bias_linear`)."""
    where = args.where
    window = args.text("--window-size")
    if window is not None:
        try:
            left, right = (int(part) for part in window.strip("()").split(","))
        except ValueError:
            raise InputError(where, "--window-size", f"{shown(window)} is not two integers L,R") from None
        if right != 0 and (left, right) != (-1, -1):
            raise InputError(where, "--window-size", f"{shown(window)}: ppb prices causal windows (L,0) only")
        if left >= 0:
            spec["sliding_window"] = left + 1
            spec["window_layers"] = _window_layers(args, layers)
    elif args.has("--window-attn-skip-freq"):
        notes.append("--window-attn-skip-freq without --window-size: no layer has a window")
    softmax = args.text("--softmax-type", "vanilla")
    if softmax not in ("vanilla", "off-by-one", "learnable"):  # transformer_config.py's Literal
        raise InputError(where, "--softmax-type", f"{shown(softmax)} is none of vanilla, off-by-one, learnable")
    if softmax == "learnable":
        spec["attention_sinks"] = True
    if softmax == "off-by-one":
        notes.append("--softmax-type off-by-one: its fixed sink priced as vanilla softmax (as learnable's kernel)")
    clamp = args.text("--activation-func-clamp-value")
    if clamp is not None:
        value = args.number("--activation-func-clamp-value", 0.0)
        if not 0 < value <= 1e6:  # transformer_config.py: finite and above zero (for SwiGLU; ppb: any)
            raise InputError(where, "--activation-func-clamp-value", f"{shown(clamp)}: must be above 0")
        spec["activation_clamp"] = value
        if spec["activation"] != "quick_geglu":
            notes.append(f"--activation-func-clamp-value {clamp}: the clamp priced with --quick-geglu only")
    if bias and spec.get("num_experts"):
        spec["expert_bias"] = spec["router_bias"] = True


def _mla_spec(args: _Args, spec: dict[str, Any]) -> None:
    """MLA's sizes (TransformerConfig's MLA fields). Megatron's `--qk-layernorm` is, under MLA, the
    norms of the compressed query and key/value, not per-head norms (`qk_norm`): gpt_layer_specs.py
    (d98e8a64) builds the up-projections as `TELayerNormColumnParallelLinear`s with it, plain
    column-parallel linears without it (`q_layernorm`, `kv_layernorm` are IdentityOp either way), so
    without it there is no latent norm (`mla_latent_norms: false`)."""
    if not args.has("--multi-latent-attention"):
        return
    spec["qk_norm"] = False
    spec["mla_latent_norms"] = args.has("--qk-layernorm")
    spec["q_lora_rank"] = args.integer("--q-lora-rank", 0) or 0  # None: no query compression
    spec["kv_lora_rank"] = args.integer("--kv-lora-rank", 32)
    spec["qk_nope_head_dim"] = args.integer("--qk-head-dim", 128)
    spec["qk_rope_head_dim"] = args.integer("--qk-pos-emb-head-dim", 64)
    spec["v_head_dim"] = args.integer("--v-head-dim", 128)


_FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")  # not "custom": its quantizers are the user's
_FSDP_LEVELS = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
# --cp-comm-type as TransformerEngine takes it (d0067d0d `attn_forward_func_with_cp`: p2p, a2a+p2p, all_gather,
# a2a; any other word, "allgather" included, raises "Unsupported communication type")
_CP_VARIANTS = {"p2p": "ring", "a2a": "ulysses", "all_gather": "all_gather", "a2a+p2p": "hierarchical"}


def _parallel(
    args: _Args, spec: dict[str, Any], world: int, notes: list[str], release: FrameworkRelease
) -> tuple[dict[str, Any], int]:
    where = args.where
    tp = args.positive("--tensor-model-parallel-size", 1) or 1
    pp = args.positive("--pipeline-model-parallel-size", 1) or 1
    cp = args.positive("--context-parallel-size", 1) or 1
    if world % (tp * pp * cp):
        raise InputError(
            where, "--tensor-model-parallel-size", f"tp·pp·cp = {tp * pp * cp} does not divide {world} GPUs"
        )
    dp = world // (tp * pp * cp)
    parallel: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "world_size": world}
    if "num_experts" in spec:
        parallel["ep"] = args.integer("--expert-model-parallel-size", 1)
        parallel["etp"] = args.integer("--expert-tensor-parallel-size", tp)  # validate_args: defaults to TP
    parallel["sequence_parallel"] = args.has("--sequence-parallel") and tp > 1  # dropped at TP 1
    if cp > 1:
        kinds = sorted(set(args.words("--cp-comm-type") or ["p2p"]))
        if len(kinds) > 1 or kinds[0] not in _CP_VARIANTS:
            raise InputError(
                where, "--cp-comm-type", f"{' '.join(kinds)}: ppb prices one of p2p, a2a, all_gather, a2a+p2p"
            )
        parallel["cp_variant"] = _CP_VARIANTS[kinds[0]]
    flag = "--hierarchical-context-parallel-sizes"
    words = args.words(flag)
    sizes = None if words is None else [_size(where, flag, w) for text in words for w in text.split()]
    # Megatron-LM d98e8a64 arguments.py `validate_args`: their product is cp; a2a+p2p needs them
    if sizes is not None and math.prod(sizes) != cp:
        raise InputError(
            where, flag, f"{' '.join(map(str, sizes))}: their product must be --context-parallel-size {cp}"
        )
    if sizes is None and parallel.get("cp_variant") == "hierarchical":
        raise InputError(where, flag, "must be set when --cp-comm-type is a2a+p2p")
    if sizes is not None and parallel.get("cp_variant") == "hierarchical":
        parallel["hierarchical_cp_sizes"] = sizes
    elif sizes is not None:  # only TEDotProductAttention under a2a+p2p uses the groups (Parallel's check)
        notes.append(f"{flag}: read only under --cp-comm-type a2a+p2p, nothing priced")
    parallel.update(_sharding(args))
    instances = args.positive("--num-distributed-optimizer-instances", 1) or 1
    if instances > 1:
        parallel["distributed_optimizer_instances"] = instances
    parallel.update(_pipeline(args, spec, pp, release))
    if args.has("--overlap-moe-expert-parallel-comm"):
        parallel["overlap_moe_expert_parallel_comm"] = True
    return parallel, dp


def _size(where: str, flag: str, word: str) -> int:
    """One of a list flag's integers (argparse's `type=int`)."""
    try:
        return int(word)
    except ValueError:
        raise InputError(where, flag, f"{shown(word)} is not an integer: give the number") from None


def _sharding(args: _Args) -> dict[str, Any]:
    where = args.where
    fsdp2, megatron_fsdp = args.has("--use-torch-fsdp2"), args.has("--use-megatron-fsdp")
    if fsdp2 and megatron_fsdp:
        raise InputError(where, "--use-torch-fsdp2", "cannot be set with --use-megatron-fsdp")
    if megatron_fsdp:
        strategy = args.text("--data-parallel-sharding-strategy", "optim_grads_params")
        if strategy not in _FSDP_LEVELS:
            raise InputError(
                where, "--data-parallel-sharding-strategy", f"{shown(strategy)} is none of {', '.join(_FSDP_LEVELS)}"
            )
        level = _FSDP_LEVELS[strategy]
        return {"fsdp": True, "zero": 3, "fsdp_impl": "megatron_fsdp"} if level == 3 else {"zero": level}
    if fsdp2:
        return {"fsdp": True, "zero": 3, "fsdp_impl": "torch_fsdp2"}
    # dist_muon: Muon under the layer-wise distributed optimizer (arguments.py validate_args)
    distributed = args.has("--use-distributed-optimizer") or args.text("--optimizer") == "dist_muon"
    return {"zero": 1 if distributed else 0}


def _pipeline(args: _Args, spec: dict[str, Any], pp: int, release: FrameworkRelease) -> dict[str, Any]:
    """Virtual stages, and the layers each holds where the launch places them unevenly. A layout of Megatron-Core
    before `releases.CHANGES["layout_holds_mtp"]` names no MTP layer: they all sit on the last stage, before
    the loss (`_mtp_on_last_stage`)."""
    try:
        flags = parse_flags(" ".join(_quoted(args)))
    except LayoutError as err:
        raise InputError(args.where, None, str(err)) from None
    layers = spec["num_layers"]
    # the interleaved schedule's group (model_parallel_config.py microbatch_group_size_per_vp_stage, default
    # pp); the schedule without virtual stages never reads it (schedules.py, d98e8a64)
    given = args.integer("--microbatch-group-size-per-virtual-pipeline-stage")
    if flags.layout is not None:
        layout = flags.layout
        if not release.holds("layout_holds_mtp"):
            layout = _mtp_on_last_stage(layout, spec.get("mtp_layers", 0))
        try:
            chunks = len(parse_layout(layout, pp)[0])
        except LayoutError:  # the run config says what is wrong with it
            chunks = 1
        return {"layout": layout} | _group(given, chunks)
    vpp = 1
    if flags.virtual_stages is not None:
        vpp = args.positive("--num-virtual-stages-per-pipeline-rank") or 1
    per_virtual = args.integer("--num-layers-per-virtual-pipeline-stage")
    adds = flags.split_adds
    if per_virtual is not None:
        total = layers + sum(adds)
        if per_virtual < 1 or total % pp or (total // pp) % per_virtual:
            raise InputError(
                args.where,
                "--num-layers-per-virtual-pipeline-stage",
                f"{per_virtual} does not divide the {total} layers' share of pp {pp}",
            )
        vpp = total // pp // per_virtual
    first, last = flags.first_stage_layers, flags.last_stage_layers
    if first is not None or last is not None or any(adds):
        layout = _layout(args, layers, spec.get("mtp_layers", 0), pp, vpp, first, last, adds)
        return {"layout": layout, "vpp": vpp} | _group(given, vpp)
    return {"vpp": vpp, "schedule": "interleaved"} | _group(given, vpp) if vpp > 1 else {}


def _mtp_on_last_stage(layout: str, mtp_layers: int) -> str:
    """*layout* with the model's *mtp_layers* before its loss `L` (the last stage's last layer), where it names
    none: Megatron-Core before d7bf5aaaa8 built every MTP layer on the last pipeline stage whatever the layout
    (c08d89bea0 multi_token_prediction.py `get_mtp_num_layers_to_build`, after the decoder layers there)."""
    if not mtp_layers or "m" in layout or not layout.endswith("L"):
        return layout
    return f"{layout[:-1]}{'m' * mtp_layers}L"


def _even_split(where: str, layers: int, parallel: Mapping[str, Any]) -> None:
    """A launch that places no layer itself (no layout, no uneven first or last stage) splits them evenly, or
    Megatron-LM stops: arguments.py `validate_args` (d98e8a64), "Number of layers should be divisible by the
    pipeline-model-parallel size", and transformer_block.py `get_num_layers_to_build`, a rank's layers by
    vp_size. ppb priced a 95-layer pp-16 launch on an uneven split of its own."""
    pp, vpp = parallel.get("pp", 1), parallel.get("vpp", 1)
    if "layout" in parallel or not (layers % pp or (layers // pp) % vpp):
        return
    share = f"pp {pp}" + (f" × {vpp} virtual stages" if vpp > 1 else "")
    raise InputError(
        where,
        "--num-layers",
        f"{layers} layers do not split evenly over {share}: Megatron-LM refuses it without "
        "--pipeline-model-parallel-layout or --decoder-first/last-pipeline-num-layers",
    )


def _group(given: int | None, vpp: int) -> dict[str, int]:
    """The run config's micro-batch group where the interleaved schedule reads one."""
    return {"microbatch_group_size_per_vp_stage": given} if given is not None and vpp > 1 else {}


def _layout(
    args: _Args, layers: int, mtp: int, pp: int, vpp: int, first: int | None, last: int | None, adds: tuple[int, int]
) -> str:
    """The even split Megatron-Core makes around an uneven first or last stage, or with the embedding
    and loss counted as layers (transformer_block.py `get_num_layers_to_build`), as a layout."""
    flag = "--decoder-first-pipeline-num-layers" if first is not None else "--decoder-last-pipeline-num-layers"
    if first is not None or last is not None:
        if vpp > 1:
            raise InputError(args.where, flag, "with virtual stages: ppb takes the uneven split without them")
        for name in ("first", "last"):  # TransformerConfig.__post_init__ (uneven PP): each count positive
            args.positive(f"--decoder-{name}-pipeline-num-layers")
        middle = layers - (first or 0) - (last or 0)
        inner = pp - (first is not None) - (last is not None)
        # the layers left and the middle stages left both none or both some, an even share each
        if middle < 0 or bool(middle) != bool(inner) or (inner and middle % inner):
            raise InputError(
                args.where,
                flag,
                f"leaves {counted(middle, 'layer')} for {counted(inner, 'middle stage')}: Megatron-Core needs an "
                "even share on each, and none where no stage is left",
            )
        each = middle // inner if inner else 0
        counts = [each] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
    else:
        total = layers + sum(adds)
        cells = pp * vpp
        if total % cells:
            flag = "--account-for-embedding-in-pipeline-split"
            raise InputError(
                args.where, flag, f"{total} layers with the embedding/loss do not split over {cells} stages"
            )
        counts = [total // cells] * cells
        counts[0] -= adds[0]
        counts[-1] -= adds[1]
    # model order is chunk by chunk: cell v·pp + p is rank p's virtual stage v
    cells = ["t" * count for count in counts]
    cells[0] = "E" + cells[0]
    cells[-1] = cells[-1] + "m" * mtp + "L"
    return "|".join(cells)


def _quoted(args: _Args) -> list[str]:
    """The pipeline and recompute flags, as `megatron.parse_flags` reads them."""
    words: list[str] = []
    for flag in (
        "--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers", "--pipeline-model-parallel-size",
        "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
        "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-modules",
        "--recompute-activations", "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split", "--num-layers",
    ):  # fmt: skip
        if args.has(flag):
            words += [flag, *(shlex.quote(value) for value in args.given[flag])]
    return words


def _recompute(args: _Args, notes: list[str]) -> dict[str, Any] | None:
    try:
        flags = parse_flags(" ".join(_quoted(args)))
        setting = flags.setting()
    except LayoutError as err:
        raise InputError(args.where, "--recompute-granularity", str(err)) from None
    notes.extend(
        f"{flag}: Megatron-LM ignores it here (no recompute it applies to)" for flag in flags.ignored_recompute_flags
    )
    if setting.name == "none":
        return None
    if setting.name == "selective":
        modules = flags.modules or ("core_attn",)
        if "moe_act" in modules and not args.has("--moe-grouped-gemm"):
            raise InputError(
                args.where, "--recompute-modules", "moe_act needs --moe-grouped-gemm, as Megatron-Core asserts"
            )
        return {"granularity": "selective", "modules": list(modules)}
    return {"granularity": "full", "method": flags.method, "num_layers": flags.num_layers}


def _release(release: Mapping[str, str] | None, where: str) -> FrameworkRelease:
    """The stated releases validated (`ppb_core.config.releases`), a problem said with its field."""
    try:
        return FrameworkRelease(**(release or {}))
    except ValidationError as err:
        found = pydantic_error(err, where, FrameworkRelease)
        raise InputError(where, f"framework_release.{found.field}", found.problem) from None


def _training(
    args: _Args, spec: dict[str, Any], dp: int, notes: list[str], release: FrameworkRelease
) -> dict[str, Any]:
    where = args.where
    bf16, fp16 = args.has("--bf16"), args.has("--fp16")
    if bf16 and fp16:  # arguments.py validate_args: one of them
        raise InputError(where, "--fp16", "cannot be set with --bf16")
    micro = args.positive("--micro-batch-size", 1) or 1
    batch = args.positive("--global-batch-size", micro * dp) or micro * dp
    if batch % (micro * dp):  # arguments.py validate_args / the microbatch calculator
        raise InputError(
            where, "--global-batch-size", f"{batch} is not a multiple of micro-batch {micro} × data-parallel {dp}"
        )
    training: dict[str, Any] = {
        "seq_length": args.required("--seq-length"),
        "micro_batch_size": micro,
        "micro_batches": batch // (micro * dp),
        "dtype": "bf16" if bf16 else "fp16" if fp16 else "fp32",
        "flash_attention": _flash(args),
    }
    optimizer = args.text("--optimizer", "adam")
    # training.py wrap_model_chunks_with_ddp: the layout applies to the layer-wise distributed optimizer only
    # before 0044db1f20 no precomputed layout: every parameter in one layer-wise buffer, as the flag keeps it
    layout = not args.has("--no-use-layer-wise-param-layout") and release.holds("layer_wise_param_layout")
    if not layout and (optimizer == "dist_muon" or (optimizer == "muon" and args.has("--use-distributed-optimizer"))):
        training["layer_wise_param_layout"] = False
    if optimizer in ("adam", "sgd"):
        training["optimizer"] = optimizer
    elif optimizer in ("muon", "dist_muon"):  # arguments.py validate_args: dist_muon is muon, layer-wise distributed
        training["optimizer"] = "muon"
        scalar = args.text("--muon-scalar-optimizer", "adam")
        if scalar != "adam":
            notes.append(f"--muon-scalar-optimizer {scalar}: the non-matrix parameters priced as Adam's")
    else:
        notes.append(f"--optimizer {optimizer}: priced as adam's states")
    # the gradient buffer's dtype (training.py: DDP's grad_reduce_in_fp32 = accumulate_allreduce_grads_in_fp32,
    # which validate_args sets under bf16 unless --grad-reduce-in-bf16 or --main-grads-dtype bf16; fp16
    # keeps it off unless --accumulate-allreduce-grads-in-fp32)
    fp32_buffer = args.has("--accumulate-allreduce-grads-in-fp32") or (
        bf16 and not args.has("--grad-reduce-in-bf16") and args.text("--main-grads-dtype", "fp32") != "bf16"
    )
    if args.has("--use-megatron-fsdp"):
        own = _megatron_fsdp_grads_fp32(args, notes)
        # before adfe9e11d9 (core_v0.19.0) mcore_fsdp_adapter.py made the main gradients fp32 wherever DDP's
        # grad_reduce_in_fp32 holds ("Grandfathered Argument"), else --megatron-fsdp-main-grads-dtype
        fp32_buffer = own if release.holds("fsdp_grads_own_dtype") else fp32_buffer or own
    if (bf16 or fp16) and not fp32_buffer:
        training["grad_bytes"] = 2
    recompute = _recompute(args, notes)
    if recompute is not None:
        training["recompute"] = recompute
    if args.has("--no-rope-fusion"):
        training["rope_fusion"] = False
    if args.has("--defer-embedding-wgrad-compute"):
        training["defer_embedding_wgrad_compute"] = True
        training["wgrad_deferral_limit"] = args.integer("--wgrad-deferral-limit", 0)
    if args.text("--fp8-format") is not None:
        training["fp8_cache"] = "linear"
    training.update(_offload(args, notes))
    layers = args.integer("--cpu-offloading-num-layers")
    if layers:  # arguments.py: N > 0 sets cpu_offloading (activations on, weights off: no flags of their own)
        training["cpu_offloading_num_layers"] = layers
    moe: dict[str, Any] = {}
    router_dtype = args.text("--moe-router-dtype")
    if router_dtype is not None:
        if router_dtype not in ("fp32", "fp64"):
            raise InputError(where, "--moe-router-dtype", f"{shown(router_dtype)}: fp32 or fp64")
        moe["router_dtype"] = router_dtype
    if args.has("--moe-permute-fusion"):
        moe["permute_fusion"] = True
    router = _router(args)
    if router:
        moe["router"] = router
    capacity = args.text("--moe-expert-capacity-factor")
    if capacity is not None:
        moe["capacity_factor"] = args.number("--moe-expert-capacity-factor", 1.0)
    if args.has("--moe-pad-expert-input-to-capacity"):  # refused without a capacity factor, as Megatron asserts
        moe["pad_to_capacity"] = True
    if "num_experts" in spec:  # TEGroupedMLP with --moe-grouped-gemm, else SequentialMLP
        training["moe"] = {**moe, "grouped_gemm": args.has("--moe-grouped-gemm")}
    if _states_at_load(args, release):
        training["optimizer_states_at_start"] = True
    return training


def _states_at_load(args: _Args, release: FrameworkRelease) -> bool:
    """Whether `load_checkpoint` makes the optimizer's states before iteration 1 (training/checkpointing.py
    and optimizer/distrib_optimizer.py, af28b5a559 to d98e8a64; febd25e3fb read too). training.py calls
    `load_checkpoint` wherever --load is set (and not --moe-use-upcycling); with `args.ckpt_format ==
    "fsdp_dtensor"` (Megatron-FSDP's only format, arguments.py) it builds the state dict to load into,
    checkpoint found or not (`FileNotFoundError` read as no metadata; --auto-detect-ckpt-format only looks
    first), handing `generate_state_dict` the optimizer unless --finetune or --no-load-optim; that asks for
    its `sharded_state_dict(is_loading=True)` unless --no-save-optim, and `sharded_param_state_fsdp_dtensor`
    runs `_init_optimizer_states_with_dummy_values`: a zero gradient for every parameter and one
    `optimizer.step()`, which makes Adam's moments."""
    given = args.given  # checkpoint flags read past (NO_BEARING), not marked read
    if not (release.holds("fsdp_dtensor_load_states") and given.get("--ckpt-format", [])[:1] == ["fsdp_dtensor"]):
        return False
    if "--load" not in given or any(flag in given for flag in ("--moe-use-upcycling", "--finetune", "--no-load-optim")):
        return False
    return not args.has("--no-save-optim")  # read: here it bears on the memory


MEGATRON_FSDP_DTYPES = ("fp32", "bf16", "fp16", "auto")  # arguments.py choices of the three flags below


def _megatron_fsdp_grads_fp32(args: _Args, notes: list[str]) -> bool:
    """Whether Megatron-FSDP's main gradient buffer is fp32 (Megatron-LM d98e8a64). Its three dtypes
    (arguments.py: `--megatron-fsdp-main-params-dtype` fp32, `--megatron-fsdp-main-grads-dtype` and
    `--megatron-fsdp-grad-comm-dtype` auto; `validate_args` maps auto to None) reach `MixedPrecisionPolicy`
    (distributed/fsdp/mcore_fsdp_adapter.py `FullyShardedDataParallel.__init__`), not DDP's
    `grad_reduce_in_fp32`: param_and_grad_buffer.py `_resolve_group_grad_dtype` makes the main gradient
    buffer `main_grads_dtype`, or the parameters' own dtype where it is None (bf16 under --bf16: the DDP
    rule that bf16 accumulates in fp32 does not apply). The gradient-communication dtype allocates a
    buffer of its own only where it differs from the main gradients' and under HSDP or a fixed-pool
    allocator (`DistributedDataParallelConfig.megatron_fsdp_grad_comm_dtype`: "No additional memory is
    allocated when grad_comm_dtype == main_grads_dtype"); ppb's reduce-scatter moves the main gradients'
    bytes. A main-parameter dtype other than fp32 drops or narrows the main weight buffer
    (`_init_each_parameter_group_buffers`), which ppb does not price: noted."""
    found = {}
    for flag, default in (
        ("--megatron-fsdp-main-params-dtype", "fp32"),
        ("--megatron-fsdp-main-grads-dtype", "auto"),
        ("--megatron-fsdp-grad-comm-dtype", "auto"),
    ):
        value = args.text(flag, default) or default
        if value not in MEGATRON_FSDP_DTYPES:
            raise InputError(args.where, flag, f"{shown(value)} is none of {', '.join(MEGATRON_FSDP_DTYPES)}")
        found[flag] = value
    if found["--megatron-fsdp-main-params-dtype"] != "fp32":
        value = found["--megatron-fsdp-main-params-dtype"]
        notes.append(f"--megatron-fsdp-main-params-dtype {value}: priced as fp32 main parameters (the default)")
    grads = found["--megatron-fsdp-main-grads-dtype"]
    comm = found["--megatron-fsdp-grad-comm-dtype"]
    if comm not in ("auto", grads) and not (grads == "auto" and comm == _params_dtype(args)):
        notes.append(f"--megatron-fsdp-grad-comm-dtype {comm}: reduce-scatter priced in the main gradients' dtype")
    if grads == "auto":  # the parameters' dtype
        return not (args.has("--bf16") or args.has("--fp16"))
    return grads == "fp32"


def _params_dtype(args: _Args) -> str:
    return "bf16" if args.has("--bf16") else "fp16" if args.has("--fp16") else "fp32"


# --offload-modules' choices (transformer_config.py `offload_modules`, d98e8a64) ppb does not price
_OFFLOAD_NOT_PRICED = {
    "fused_group_mlp": "the op fuser's whole grouped MLP (--use-transformer-engine-op-fuser)",
    "gdp_qkv": "the hybrid model's GatedDeltaProduct mixer",
}
_OFFLOAD_CHOICES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")


def _offload(args: _Args, notes: list[str]) -> dict[str, Any]:
    """Fine-grained activation offloading (`--fine-grained-activation-offloading`, `--offload-modules`,
    `--min-offloaded-tensor-size`: TransformerConfig's fields, d98e8a64); the module list without the
    flag offloads nothing, as Megatron-Core reads it."""
    modules = args.words("--offload-modules") or []
    size = args.integer("--min-offloaded-tensor-size")
    if not args.has("--fine-grained-activation-offloading"):
        return {}
    if not modules:  # transformer_config.py asserts a non-empty list
        raise InputError(args.where, "--offload-modules", "needed with --fine-grained-activation-offloading")
    priced = []
    for module in modules:
        if module in _OFFLOAD_NOT_PRICED:
            why = _OFFLOAD_NOT_PRICED[module]
            notes.append(f"--offload-modules {module}: {why}, not modelled (kept on the device)")
        elif module not in _OFFLOAD_CHOICES:
            choices = ", ".join((*_OFFLOAD_CHOICES, *_OFFLOAD_NOT_PRICED))
            raise InputError(args.where, "--offload-modules", f"{shown(module)}: Megatron-Core's choices are {choices}")
        elif module not in priced:
            priced.append(module)
    found: dict[str, Any] = {"offload_modules": priced} if priced else {}
    if size is not None:
        found["min_offloaded_tensor_size"] = size
    return found


ROUTER_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing", "none")


def _router(args: _Args) -> dict[str, Any]:
    """`training.moe.router` from Megatron's router flags (arguments.py, transformer_config.py d98e8a64:
    `--moe-router-load-balancing-type` aux_loss and `--moe-aux-loss-coeff` 0.0, one per type, by
    default; router.py `get_aux_loss_coeff`: a loss runs where its coefficient is above 0)."""
    where = args.where
    types = args.words("--moe-router-load-balancing-type") or ["aux_loss"]
    for kind in types:
        if kind not in ROUTER_BALANCING:
            why = f"{shown(kind)}: one of {', '.join(ROUTER_BALANCING)}"
            raise InputError(where, "--moe-router-load-balancing-type", why)
    if "quantile_balancing" in types:
        why = "quantile_balancing: ppb does not price its routing"
        raise InputError(where, "--moe-router-load-balancing-type", why)
    words = args.words("--moe-aux-loss-coeff") or ["0.0"]
    try:
        coefficients = [float(word) for word in words]
    except ValueError:
        raise InputError(where, "--moe-aux-loss-coeff", f"{shown(' '.join(words))} is not a number") from None
    if len(coefficients) == 1:
        coefficients *= len(types)
    if len(coefficients) != len(types):
        why = f"{len(coefficients)} coefficients for {len(types)} load-balancing types"
        raise InputError(where, "--moe-aux-loss-coeff", why)
    router: dict[str, Any] = {}
    aux = [kind for kind, coefficient in zip(types, coefficients, strict=True) if coefficient > 0 and "aux" in kind]
    if aux:
        router["aux_losses"] = aux
    if "sinkhorn" in types:
        router["sinkhorn"] = True
    score = args.text("--moe-router-score-function", "softmax")
    if score not in ("softmax", "sigmoid", "sqrtsoftplus"):
        raise InputError(where, "--moe-router-score-function", f"{shown(score)}: softmax, sigmoid or sqrtsoftplus")
    if score != "softmax":
        router["score_function"] = score
    for flag, name in (
        ("--moe-z-loss-coeff", "z_loss"),
        ("--moe-router-enable-expert-bias", "expert_bias"),
        ("--moe-router-fusion", "fusion"),
        ("--moe-router-pre-softmax", "pre_softmax"),
        ("--moe-router-topk-scaling-factor", "topk_scaling"),
        ("--moe-router-force-load-balancing", "force_balance"),
    ):
        if args.has(flag):
            router[name] = True
    return router


def _flash(args: _Args) -> bool:
    """Whether attention runs a fused kernel that keeps no score matrix: TE's flash or cuDNN fused
    attention (`--attention-backend` auto, flash, fused); `unfused` runs TransformerEngine's
    UnfusedDotProductAttention under the TE spec (`flops.te_attention_mask`), `local` (only with
    `--spec local`, arguments.py) and `--transformer-impl local` Megatron's DotProductAttention: both
    keep the scores."""
    backend = args.text("--attention-backend", "auto")
    if backend not in ("auto", "flash", "fused", "unfused", "local"):
        raise InputError(args.where, "--attention-backend", f"{shown(backend)}: auto, flash, fused, unfused or local")
    if args.text("--transformer-impl", "transformer_engine") == "local" and not args.has("--use-flash-attn"):
        return False
    return backend in ("auto", "flash", "fused")


def _timing(args: _Args, notes: list[str]) -> dict[str, Any]:
    impl = args.text("--transformer-impl", "transformer_engine")
    if impl not in ("transformer_engine", "local"):
        raise InputError(args.where, "--transformer-impl", f"{shown(impl)}: transformer_engine or local")
    timing: dict[str, Any] = {
        "transformer_impl": impl,
        "gradient_accumulation_fusion": not args.has("--no-gradient-accumulation-fusion"),
        "deterministic": args.has("--deterministic-mode"),
        "cross_entropy_fusion": args.has("--cross-entropy-loss-fusion"),
        # validate_args turns the NaN check off under fp16's dynamic loss scaling (no --loss-scale)
        "check_for_nan_in_grad": not args.has("--no-check-for-nan-in-loss-and-grad")
        and not (args.has("--fp16") and not args.has("--loss-scale")),
        "log_params_norm": args.has("--log-params-norm"),
        "log_num_zeros_in_grad": args.has("--log-num-zeros-in-grad"),
        "rope_fusion": not args.has("--no-rope-fusion"),
        # Megatron's DDP reduces the gradients after the backward unless --overlap-grad-reduce, and
        # the distributed optimizer gathers parameters after the step unless --overlap-param-gather
        "overlap": {
            "dp": 1.0 if args.has("--overlap-grad-reduce") else 0.0,
            "param_gather": 1.0 if args.has("--overlap-param-gather") else 0.0,
            # TE's userbuffers (initialize_ub); the local spec's tensor_parallel layers read no tp_comm_overlap
            "tp": 1.0 if args.has("--tp-comm-overlap") and impl == "transformer_engine" else 0.0,
        },
    }
    backend = args.text("--attention-backend", "auto")
    if impl == "transformer_engine" and backend in ("flash", "fused"):  # which TE attention runs (memory/setup.py)
        timing["te_attention_backend"] = backend
    timing.update(_cuda_graphs(args, notes))
    impl_ce = args.text("--cross-entropy-fusion-impl", "native")
    if impl_ce not in ("native", "te"):
        raise InputError(args.where, "--cross-entropy-fusion-impl", f"{shown(impl_ce)}: native or te")
    if timing["cross_entropy_fusion"] and impl_ce == "te":
        timing["cross_entropy_fusion_impl"] = impl_ce
    exit_minutes = args.text("--exit-duration-in-mins")
    if exit_minutes is not None:
        timing["exit_duration_in_mins"] = args.number("--exit-duration-in-mins", 0.0)
    # training.py `post_training_step_callbacks`: the weight-hash check on each iteration a multiple of it
    hash_interval = args.integer("--check-weight-hash-across-dp-replicas-interval")
    if hash_interval is not None:
        if hash_interval < 1:
            raise InputError(
                args.where, "--check-weight-hash-across-dp-replicas-interval", f"{hash_interval}: give 1 or more"
            )
        timing["weight_hash_interval"] = hash_interval
    if args.text("--fp8-format") is not None:
        timing["matmul_dtype"] = "fp8"
    if args.has("--fp8-param-gather") and "matmul_dtype" in timing:  # FP8 parameters (memory/frameworks/te_fp8.py)
        timing["fp8_param_gather"] = True
    elif args.has("--fp8-param-gather"):
        notes.append("--fp8-param-gather without --fp8-format: no FP8 recipe to keep the parameters in, priced as bf16")
    # transformer_config.py first_last_layers_bf16 and its counts (1 and 1), read under FP8 only
    # (fp8_utils.py `is_first_last_bf16_layer` runs inside the fp8 context's choice)
    start = args.integer("--num-layers-at-start-in-bf16", 1)
    end = args.integer("--num-layers-at-end-in-bf16", 1)
    if args.has("--first-last-layers-bf16") and "matmul_dtype" in timing:
        timing["fp8_bf16_layers"] = [start, end]
    recipe = args.text("--fp8-recipe")
    if recipe is not None:  # transformer_config.py `fp8_recipe`, "delayed" by default
        if recipe not in _FP8_RECIPES:
            raise InputError(args.where, "--fp8-recipe", f"{shown(recipe)}: ppb prices {', '.join(_FP8_RECIPES)}")
        timing["fp8_recipe"] = recipe
    # the data loader's causal mask (pretrain_gpt.py get_batch, gpt_dataset.py; ppb_core/timing/batch.py)
    if args.has("--no-create-attention-mask-in-dataloader"):
        timing["attention_mask_in_dataloader"] = False
    if args.has("--no-bias-gelu-fusion"):  # read under --swiglu too, where bias_swiglu_fusion decides instead
        timing["bias_gelu_fusion"] = False
    if args.has("--no-bias-dropout-fusion"):  # the eager bias-dropout-add (flops.py `_residual`)
        timing["bias_dropout_fusion"] = False
    # read by Megatron's own attention only (dot_product_attention.py), where ppb prices them
    if args.has("--no-masked-softmax-fusion"):
        timing["masked_softmax_fusion"] = False
    if args.has("--attention-softmax-in-fp32"):
        timing["attention_softmax_in_fp32"] = True
    if args.has("--apply-query-key-layer-scaling"):
        timing["apply_query_key_layer_scaling"] = True
    _persist_layer_norm(args, impl, notes)
    if args.has("--delay-wgrad-compute"):
        if not args.has("--overlap-moe-expert-parallel-comm"):  # transformer_config.py asserts it
            raise InputError(args.where, "--delay-wgrad-compute", "needs --overlap-moe-expert-parallel-comm")
        timing["delay_wgrad_compute"] = True
    if args.has("--overlap-param-gather-with-optimizer-step"):
        _optimizer_step_overlap(args)
        timing["overlap_param_gather_with_optimizer_step"] = True
    per_token, average = args.has("--calculate-per-token-loss"), args.has("--ddp-average-in-collective")
    if per_token and average:  # distributed_data_parallel.py asserts it
        raise InputError(args.where, "--ddp-average-in-collective", "cannot be set with --calculate-per-token-loss")
    if per_token:
        timing["calculate_per_token_loss"] = True
    if average:
        timing["ddp_average_in_collective"] = True
    if args.has("--no-overlap-p2p-communication"):  # arguments.py store_false: the interleaved blocking calls
        timing["overlap_p2p_comm"] = False
    if args.has("--overlap-p2p-communication-warmup-flush"):  # model_parallel_config.py, read when interleaved
        if args.has("--no-overlap-p2p-communication"):  # batch_p2p_comm then: model_parallel_config.py raises
            said = "needs overlap_p2p_comm, which --no-overlap-p2p-communication turns off (Megatron-Core refuses it)"
            raise InputError(args.where, "--overlap-p2p-communication-warmup-flush", said)
        timing["overlap_p2p_comm_warmup_flush"] = True
    dispatcher = args.text("--moe-token-dispatcher-type", "allgather")
    if args.has("--num-experts"):
        timing.update(_flex_dispatcher(args, dispatcher, notes))
    return timing


FLEX_BACKENDS = ("deepep", "hybridep", "ncclep")


def _flex_dispatcher(args: _Args, dispatcher: str | None, notes: list[str]) -> dict[str, Any]:
    """The token dispatcher, the shared experts' overlap (`--moe-shared-expert-overlap`) and, under flex, its backend
    and the words only the backends read
    (transformer_config.py `TransformerConfig.__post_init__` and token_dispatcher.py `MoEFlexTokenDispatcher`,
    d98e8a64); what Megatron-Core refuses, refused in one line."""
    backend = args.text("--moe-flex-dispatcher-backend", "deepep")
    if args.has("--moe-enable-deepep"):  # deprecated: __post_init__ turns it into the deepep backend
        if dispatcher != "flex":
            raise InputError(args.where, "--moe-enable-deepep", "needs --moe-token-dispatcher-type flex")
        if backend == "hybridep":
            said = "cannot be set with --moe-flex-dispatcher-backend hybridep (one backend only)"
            raise InputError(args.where, "--moe-enable-deepep", said)
        backend = "deepep"
    if backend not in FLEX_BACKENDS:
        raise InputError(
            args.where, "--moe-flex-dispatcher-backend", f"{shown(backend)} is not deepep, hybridep or ncclep"
        )
    if backend == "ncclep" and dispatcher != "flex":
        said = "ncclep needs --moe-token-dispatcher-type flex (Megatron-Core refuses it)"
        raise InputError(args.where, "--moe-flex-dispatcher-backend", said)
    out: dict[str, Any] = {}
    if dispatcher == "flex":
        out["moe_dispatcher"] = backend
    elif dispatcher in ("alltoall", "allgather"):  # Megatron's default: allgather (transformer_config.py)
        out["moe_dispatcher"] = dispatcher
    else:
        notes.append(f"--moe-token-dispatcher-type {dispatcher}: priced as alltoall")
        out["moe_dispatcher"] = "alltoall"
    for flag, word in (
        ("--moe-permute-fusion-into-hybridep", "moe_permute_fusion_into_hybridep"),
        ("--moe-hybridep-pad-uneven-dispatch-inputs", "moe_hybridep_pad_uneven_dispatch_inputs"),
    ):
        if args.has(flag) and out["moe_dispatcher"] == "hybridep":
            out[word] = True
        elif args.has(flag):  # read by `_HybridEPManager` alone
            notes.append(f"{flag}: read by the hybridep flex backend only, not by {out['moe_dispatcher']}")
    if args.has("--moe-shared-expert-overlap"):  # the shared experts' side stream (`ppb_core.timing.shared_overlap`)
        out["moe_shared_expert_overlap"] = True
    sms = args.integer("--moe-flex-dispatcher-num-sms")
    # the deprecated per-backend knobs are routed to it where it is unset; two different ones are refused
    deprecated = {flag: args.integer(flag) for flag in ("--moe-deepep-num-sms", "--moe-hybridep-num-sms")}
    given = {flag: value for flag, value in deprecated.items() if value is not None}
    if sms is None and len(set(given.values())) > 1:
        said = "conflicts with --moe-hybridep-num-sms: set one --moe-flex-dispatcher-num-sms (Megatron-Core refuses it)"
        raise InputError(args.where, "--moe-deepep-num-sms", said)
    if sms is None and given:
        sms = next(iter(given.values()))
    if sms is not None and out["moe_dispatcher"] in FLEX_BACKENDS:
        out["moe_flex_dispatcher_num_sms"] = sms
    return out


GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
GRAPH_MODULES = ("attn", "mlp", "moe", "moe_router", "moe_preprocess")


def _cuda_graphs(args: _Args, notes: list[str]) -> dict[str, Any]:
    """Megatron's CUDA graphs (megatron/training/arguments.py validate_args, d98e8a64): --enable-cuda-graph
    is --cuda-graph-impl local, --external-cuda-graph transformer_engine; --cuda-graph-scope is the old
    spelling of --cuda-graph-modules, whose "full" is the whole layer (empty) and "full_iteration" the
    full_iteration impl (cuda_graph_config.py CUDA_GRAPH_MODULES_DEPRECATIONS)."""
    impl = args.text("--cuda-graph-impl", "none")
    if impl not in GRAPH_IMPLS:
        raise InputError(args.where, "--cuda-graph-impl", f"{shown(impl)}: {', '.join(GRAPH_IMPLS)}")
    if args.has("--enable-cuda-graph"):
        impl = "local"
    if args.has("--external-cuda-graph"):
        impl = "transformer_engine"
    flag = "--cuda-graph-modules" if args.has("--cuda-graph-modules") else "--cuda-graph-scope"
    words = [w for word in args.words(flag) or [] for w in re.split(r"[\s,\[\]'\"]+", word) if w]
    modules: list[str] = []
    for word in words:
        if word == "full_iteration":
            impl = "full_iteration" if impl in ("none", "local", "full_iteration") else impl
        elif word not in ("full", "full_iteration_inference"):
            if word not in GRAPH_MODULES:
                raise InputError(args.where, flag, f"{shown(word)}: {', '.join(GRAPH_MODULES)} (mamba is not priced)")
            modules.append(word)
    # transformer_config.py `cuda_graph_warmup_steps` (3): eager iterations before the capture (training.py
    # `iteration - start_iteration == args.cuda_graph_warmup_steps`); read past without graphs
    warmup = args.integer("--cuda-graph-warmup-steps")
    if impl == "none":
        return {}
    found: dict[str, Any] = {"cuda_graph_impl": impl, "cuda_graph_modules": modules}
    if warmup is not None:
        found["cuda_graph_warmup_steps"] = warmup
    return found


# Hidden sizes apex's persistent LayerNorm kernel takes (megatron/core/fusions/fused_layer_norm.py
# `FusedLayerNorm.__init__`, `persist_ln_hidden_sizes`, d98e8a64)
PERSIST_LN_HIDDEN_SIZES = frozenset(
    {1024, 1536, 2048, 2304, 3072, 3840, 4096, 5120, 6144, 8192, 10240, 12288, 12800, 15360, 16384, 18432,
     20480, 24576, 25600, 30720, 32768, 40960, 49152, 65536}
)  # fmt: skip


def _persist_layer_norm(args: _Args, impl: str, notes: list[str]) -> None:
    """`--no-persist-layer-norm` reaches only Megatron's FusedLayerNorm (the local implementation's
    norm with apex), and there only at a hidden size its persistent kernel takes: elsewhere apex's
    non-persistent kernel, or TE's norm, or torch's (no apex: torch_norm.py asserts the flag) runs
    either way, and the flag changes nothing ppb prices."""
    if not args.has("--no-persist-layer-norm"):
        return
    if impl == "local" and args.integer("--hidden-size") in PERSIST_LN_HIDDEN_SIZES:
        notes.append("--no-persist-layer-norm: apex's non-persistent LayerNorm kernels, not modelled (priced as TE's)")


def _optimizer_step_overlap(args: _Args) -> None:
    """What arguments.py `validate_args` asserts of --overlap-param-gather-with-optimizer-step."""
    flag = "--overlap-param-gather-with-optimizer-step"
    if not args.has("--use-distributed-optimizer"):
        raise InputError(args.where, flag, "needs --use-distributed-optimizer, as Megatron-LM asserts")
    if not args.has("--overlap-param-gather"):
        raise InputError(args.where, flag, "needs --overlap-param-gather, as Megatron-LM asserts")
    virtual = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank")
    if not any(args.has(name) for name in (*virtual, "--pipeline-model-parallel-layout")):
        raise InputError(args.where, flag, "needs the interleaved schedule (virtual stages), as Megatron-LM asserts")


# TE d0067d0d module/base.py `initialize_ub`: the GEMMs' default userbuffers methods
UB_DEFAULT_METHODS = {
    **dict.fromkeys(("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad"), "ring_exchange"),
    **dict.fromkeys(("proj_fprop", "fc2_fprop"), "pipeline"),
    **dict.fromkeys(("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"), "bulk"),
    **dict.fromkeys(("proj_wgrad", "fc2_wgrad"), "external"),
}


def _ub_entries(args: _Args, read_file: Callable[[str], str | None] | None, notes: list[str]) -> dict[str, Any]:
    """The GEMM entries of a `--tp-comm-overlap-cfg` YAML (megatron/training/initialize.py
    `_initialize_tp_communicators` hands the file's mapping to TE's `initialize_ub`, which updates each GEMM's
    default config with its entry); read under `--tp-comm-overlap` only, and with TE's layers only (the local
    spec's layers use no userbuffers); {} when there is none to read."""
    path = args.text("--tp-comm-overlap-cfg")
    te = args.text("--transformer-impl", "transformer_engine") == "transformer_engine"
    if path is None or not args.has("--tp-comm-overlap") or not te:
        return {}
    text = read_file(path) if read_file is not None else None
    if text is None:
        notes.append(f"--tp-comm-overlap-cfg {path}: not readable here, priced with TE's default methods")
        return {}
    try:
        entries = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        raise InputError(args.where, "--tp-comm-overlap-cfg", f"{shown(path)} is not YAML") from None
    if not isinstance(entries, dict):
        raise InputError(args.where, "--tp-comm-overlap-cfg", f"{shown(path)} is not a mapping of GEMM names")
    for name in entries:
        if name not in UB_DEFAULT_METHODS:  # initialize_ub: KeyError "Given layer name ... does not exist"
            raise InputError(args.where, "--tp-comm-overlap-cfg", f"{shown(str(name))} is no GEMM TE overlaps")
    return entries


def _ub_methods(args: _Args, entries: dict[str, Any]) -> dict[str, str]:
    """The userbuffers methods the YAML's *entries* give where they differ from TE's defaults. The entries'
    other settings (`num_sm`, `num_splits`, `aggregate`, atomic GEMMs) are not priced: ppb's methods run TE's
    default splits and SM share; `set_sm_margin` is read apart (`_ub_sm_margin`)."""
    methods = {}
    for name, entry in entries.items():
        method = (entry or {}).get("method", UB_DEFAULT_METHODS[name]) if isinstance(entry, dict) else None
        if method not in ("ring_exchange", "pipeline", "bulk", "external"):
            raise InputError(args.where, "--tp-comm-overlap-cfg", f"{name}: method {shown(str(method))}")
        if method != UB_DEFAULT_METHODS[name]:
            methods[name] = method
    return methods


def _ub_sm_margin(entries: dict[str, Any], methods: dict[str, str], notes: list[str]) -> bool | None:
    """`timing.ub_sm_margin` from the YAML's `set_sm_margin` of its bulk and pipeline GEMMs (TE d0067d0d
    `initialize_ub`: on by default for every method but the ring exchange, since TE 2.0): false where every
    such GEMM turns it off, as Megatron's tensor-parallel FP8 overlap case does
    (gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap/tp_comm_overlap_cfg.yaml);
    None (TE's default) where none does; a note where only some do (one setting a run)."""
    margins = []
    for name, default in UB_DEFAULT_METHODS.items():
        if methods.get(name, default) not in ("bulk", "pipeline"):
            continue
        entry = entries.get(name)
        margins.append(bool(entry.get("set_sm_margin", True)) if isinstance(entry, dict) else True)
    if all(margins):
        return None
    if not any(margins):
        return False
    notes.append("--tp-comm-overlap-cfg: set_sm_margin off for some bulk or pipeline GEMMs only, priced on")
    return None


def _op_fuser(args: _Args, device: str, variables: dict[str, str]) -> dict[str, Any]:
    """`--use-transformer-engine-op-fuser` (Megatron-LM d98e8a64, TE d0067d0d) builds the dense MLP as
    `TEFusedMLP` and the grouped experts' MLP as one `te.pytorch.ops.Sequential` of `GroupedLinear`,
    `ScaledSwiGLU` (the router's probabilities applied in the activation, as `TEGroupedMLP` does) and
    `GroupedLinear` (gpt_layer_specs.py `get_mlp_module_spec_for_backend`, moe/experts.py
    `TEGroupedMLP._make_fused_ops`): the same GEMM and activation kernels, which keep the same tensors, with
    one module's host dispatch: read past. TE's CuTe DSL fused grouped MLP (ops/fused/grouped_mlp.py
    `fuse_grouped_mlp_ops`: MXFP8, compute capability 10, `NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`) runs other kernels:
    then the timing words that price it (`ppb_core.timing.fused_experts`), with the GLU interleave, the rank
    capacity and the paged stash the command gives (the run config refuses what ppb does not price)."""
    if not args.has("--use-transformer-engine-op-fuser"):
        return {}
    profile = DEVICE_CATALOG.get(device)
    blackwell = profile is not None and int(profile.compute_capability) == 10
    quantized = args.text("--fp8-format") is not None and args.text("--fp8-recipe") == "mxfp8"
    fused = variables.get("NVTE_CUTEDSL_FUSED_GROUPED_MLP", "0").strip("'\"") not in ("", "0")
    if not (args.has("--num-experts") and blackwell and quantized and fused):
        return {}
    words: dict[str, Any] = {"use_transformer_engine_op_fuser": True}
    interleave = args.integer("--moe-mlp-glu-interleave-size")
    if interleave is not None:
        words["moe_mlp_glu_interleave_size"] = interleave
    if args.text("--moe-expert-rank-capacity-factor") is not None:
        words["moe_expert_rank_capacity_factor"] = args.number("--moe-expert-rank-capacity-factor", 0.0)
    if args.has("--moe-paged-stash"):
        words["moe_paged_stash"] = True
        for flag, word in (
            ("--moe-paged-stash-buffer-size-factor-cuda", "moe_paged_stash_buffer_size_factor_cuda"),
            ("--moe-paged-stash-buffer-size-factor-cpu", "moe_paged_stash_buffer_size_factor_cpu"),
        ):
            if args.text(flag) is not None:
                words[word] = args.number(flag, 0.0)
    return words


def _unmodelled(args: _Args) -> list[str]:
    """One line for each flag given that bears on memory or time and that ppb does not model."""
    lines = []
    biases = "--disable-bias-linear" not in args.given
    for flag, values in args.given.items():
        if flag in MODELLED or flag in args.read or flag in NO_BEARING or flag.startswith(NO_BEARING_PREFIXES):
            continue
        if flag in NOTHING_PRICED:
            continue
        if flag in BIAS_FUSIONS and not biases:  # no bias to fuse: the same kernels either way
            continue
        if flag in AT_DEFAULT and values == [AT_DEFAULT[flag]]:
            continue
        value = f" {' '.join(values)}" if values else ""
        # a flag a letter off one ppb carries is likelier a typo, which Megatron-LM's parser refuses
        # (arguments.py: ArgumentParser(allow_abbrev=False), parse_args), than a flag of its own
        near = difflib.get_close_matches(flag, sorted(MODELLED | args.read), 1, TYPO_SIMILARITY)
        why = f"; a typo of {near[0]}? Megatron-LM refuses a flag it does not have" if near else ""
        if flag in FUSED_EXPERT_FLAGS:
            why = "; read where TE's fused grouped MLP runs (MXFP8 on sm100, NVTE_CUTEDSL_FUSED_GROUPED_MLP=1)"
        lines.append(f"{flag}{value}: not modelled by ppb (priced as if not given){why}")
    return lines


def run_config_of(imported: Imported, where: str) -> RunConfig:
    """The imported run config validated, a problem said with the flag that sets the field."""
    try:
        return parse_run_config(imported.raw, where)
    except InputError as err:
        named = err.field or ""
        prefixes = [known for known in FIELD_FLAGS if named.startswith(f"{known}.")]  # a list's item: its list's flag
        flag = FIELD_FLAGS.get(named) or (FIELD_FLAGS[max(prefixes, key=len)] if prefixes else None)
        if named == "parallel":  # RunParallel's checks across fields: the flag its problem starts from
            flag = next((flag for start, flag in PARALLEL_PROBLEMS if err.problem.startswith(start)), None)
        if named == "models.0.spec":  # ModelSpec's checks across fields: the flag of the field the problem starts with
            first = re.match(r"\w+", err.problem)
            flag = FIELD_FLAGS.get(f"{named}.{first[0]}") if first else None
        if flag is None:
            raise
        raise InputError(where, flag, f"{err.problem} (run config field {err.field})") from None
