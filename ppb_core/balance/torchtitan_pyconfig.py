"""A torchtitan config function (from 9810191bb: `--module M --config F`, a Python function returning a
`Trainer.Config`) read without running it, as the job TOML it replaced: `ppb import torchtitan FILE.py`.

The file is parsed (`ast`), never imported or executed. The function is found by name (`--config`, or the
file's one function returning `Trainer.Config`) and its body read as torchtitan's own config registries
write one (torchtitan/models/llama3/config_registry.py at 9810191bb and b5bcd76c6): `return
Trainer.Config(...)`, or `config = another_function_of_the_file()`, then `config.section.field = value`
assignments and `return config`; local names bound once (`model_spec = model_registry("8B")`), docstrings
and `assert`s read past. A value ppb reads must be a literal (numbers, strings, True/False/None, lists, and
+ - * // of integers, as `1 * 8192` in torchtitan's own) or a config class's call with keyword arguments;
a field with no bearing on memory or time (dataloader, checkpoint, metrics, ...) is read past unevaluated.
Anything else on a field ppb reads is refused in one line naming the file, the function and the field.

Each class's fields are checked against the fields the stated release's code has (torchtitan/config/
configs.py and the policy, optimizer and float8 classes; `FIELDS`, from `git log` of those files from
9810191bb to b5bcd76c6), so a field torchtitan would refuse (its dataclasses are kw_only, slots) is
refused here too. The config is then said in v0.2.2's TOML names and priced by `torchtitan_import`:

* 114151ad4 (2026-03-23): `ActivationCheckpointConfig(mode="selective")` is the op policy (no option);
* 786e26f8e (2026-04-27): the output projection is `lm_head` in `module_fqns_per_model_part` and filter_fqns;
* 6348d93d1 (2026-04-27): converters move from `Trainer.Config.model_converters` to `model_registry(...,
  quantization=[...])` (`converters=` from 74181b1e8); Float8LinearConverter's default recipe is rowwise and
  its FSDP float8 all-gather gone;
* c4b409af2 (2026-04-30): no `expert_tensor_parallel_degree` (etp 1);
* c5d93d109 (2026-06-15): `SelectiveAC.Config(...)` (the op policy), `FullAC.Config()`, `MemoryBudgetAC.Config`
  or None (no checkpointing; the field's default is `SelectiveAC.Config`);
* 632f67f12 (2026-06-04): the optimizer is `OptimizersContainer.Config(param_groups=[ParamGroupConfig(...)])`
  or `default_adamw(...)` (AdamW);
* 737594746 (2026-08-12): `enable_async_tensor_parallel` moves from parallelism to compile;
* 73aed7f6c (2026-08-20): the batch in tokens: `num_tokens_per_microbatch_per_dp_rank` T a PP micro-batch
  of a data-parallel rank, `max_context_length` s, `num_pp_microbatches` m, `num_tokens_per_train_step`;
  ppb's micro-batch is T / s sequences (T must hold whole sequences).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from ppb_core import limits
from ppb_core.balance.megatron_import import Imported
from ppb_core.balance.torchtitan_flavors import MODELS
from ppb_core.balance.torchtitan_import import import_document
from ppb_core.config.releases import TORCHTITAN, Change, Release, parse_release
from ppb_core.errors import InputError, did_you_mean, shown

FIRST_PYTHON_RELEASE = "2026-02-23"  # 9810191bb: the first commit configured by Python functions
_ALWAYS = None

# Each class's fields: name → (date added, date removed), None where 9810191bb has it / b5bcd76c6 still has it.
# config/configs.py (git log 9810191bb..b5bcd76c6): hybridep_non_blocking_expert_capacity_factor 156db2ead
# (2026-03-11) to 7cec16600 (2026-04-17); detect_anomaly 246609219; selective_ac_option gone 114151ad4;
# enable_sequence_parallel aa68af18e (2026-03-29); pipeline_parallel_expert_parallel_overlap gone a146a4dec
# (2026-04-04); batch_invariant 52e34d386; expert_tensor_parallel_degree, expert_parallel_comm_backend gone
# c4b409af2 (2026-04-30); enable_structured_logging b2cd149f6; full_dtensor d64eabcce (2026-05-17) to 641b5f6b8;
# enable_fsdp_symm_mem 58b034444 (2026-05-27); spmd_backend, spmd_typechecking 641b5f6b8 (2026-06-06);
# context_parallel_rotate_method gone 8e5554449 (2026-06-14); ActivationCheckpointConfig gone c5d93d109
# (2026-06-15); disable_loss_parallel gone b3b60dabf (2026-06-18); context_parallel_ptrr_mask_key 4c6481182
# (2026-07-24); enable_async_tensor_parallel parallelism → compile 737594746 (2026-08-12); disable_cuda_graphs
# f84224af0 (2026-08-13); the token batch 73aed7f6c (2026-08-20).
_TOKENS = "2026-08-20"
FIELDS: dict[str, dict[str, tuple[str | None, str | None]]] = {
    "TrainingConfig": {
        **dict.fromkeys(("max_norm", "steps", "enable_cpu_offload", "dtype", "mixed_precision_param",
                         "mixed_precision_reduce", "gc_freq", "gc_debug"), (None, None)),
        **dict.fromkeys(("local_batch_size", "global_batch_size", "seq_len"), (None, _TOKENS)),
        **dict.fromkeys(("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
                         "max_context_length"), (_TOKENS, None)),
        "disable_cuda_graphs": ("2026-08-13", None),
    },
    "ParallelismConfig": {
        **dict.fromkeys(("data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                         "tensor_parallel_degree", "pipeline_parallel_degree", "module_fqns_per_model_part",
                         "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                         "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                         "pipeline_parallel_schedule_csv", "context_parallel_degree", "context_parallel_load_balancer",
                         "expert_parallel_degree"), (None, None)),
        "disable_loss_parallel": (None, "2026-06-18"),
        "enable_async_tensor_parallel": (None, "2026-08-12"),
        "pipeline_parallel_microbatch_size": (None, _TOKENS),
        "num_pp_microbatches": (_TOKENS, None),
        "pipeline_parallel_expert_parallel_overlap": (None, "2026-04-04"),
        "context_parallel_rotate_method": (None, "2026-06-14"),
        "expert_tensor_parallel_degree": (None, "2026-04-30"),
        "expert_parallel_comm_backend": (None, "2026-04-30"),
        "hybridep_non_blocking_expert_capacity_factor": ("2026-03-11", "2026-04-17"),
        "enable_sequence_parallel": ("2026-03-29", None),
        "full_dtensor": ("2026-05-17", "2026-06-06"),
        "enable_fsdp_symm_mem": ("2026-05-27", None),
        "spmd_backend": ("2026-06-06", None),
        "context_parallel_ptrr_mask_key": ("2026-07-24", None),
    },
    "ActivationCheckpointConfig": {
        **dict.fromkeys(("mode", "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop", "memory_budget",
                         "visualize_memory_budget_pareto", "preserve_rng_state", "determinism_check", "debug"),
                        (None, "2026-06-15")),
        "selective_ac_option": (None, "2026-03-23"),
    },
    "CompileConfig": {
        **dict.fromkeys(("enable", "components", "backend"), (None, None)),
        "enable_async_tensor_parallel": ("2026-08-12", None),
    },
    "DebugConfig": {
        **dict.fromkeys(("seed", "deterministic", "deterministic_warn_only", "moe_force_load_balance", "print_config",
                         "save_config_file"), (None, None)),
        "detect_anomaly": ("2026-03-15", None),
        "batch_invariant": ("2026-04-06", None),
        "enable_structured_logging": ("2026-05-04", None),
        "spmd_typechecking": ("2026-06-06", None),
    },
    # distributed/activation_checkpoint.py from c5d93d109: ActivationCheckpointing.Config's fields and each
    # policy's own
    "SelectiveAC.Config": {**dict.fromkeys(("preserve_rng_state", "determinism_check", "debug",
                                            "force_recompute_mm_shapes_by_fqns"), ("2026-06-15", None))},
    "FullAC.Config": {**dict.fromkeys(("preserve_rng_state", "determinism_check", "debug"), ("2026-06-15", None))},
    "MemoryBudgetAC.Config": {**dict.fromkeys(("preserve_rng_state", "determinism_check", "debug", "memory_budget",
                                               "visualize_memory_budget_pareto"), ("2026-06-15", None))},
    # components/optimizer.py `OptimizersContainer.Config` (param_groups from 632f67f12, 2026-06-04)
    "OptimizersContainer.Config": {
        **dict.fromkeys(("name", "lr", "beta1", "beta2", "eps", "weight_decay"), (None, "2026-06-04")),
        "implementation": (None, None),
        "param_groups": ("2026-06-04", None),
    },
    "ParamGroupConfig": {**dict.fromkeys(("pattern", "optimizer_name", "optimizer_kwargs"), ("2026-06-04", None))},
    # components/quantization/float8.py `Float8LinearConverter.Config` (6348d93d1, 2026-04-27: the FSDP float8
    # all-gather gone, QuantizationConverter.Config's model_compile_enabled added)
    "Float8LinearConverter.Config": {
        **dict.fromkeys(("enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp"),
                        (None, "2026-04-27")),
        **dict.fromkeys(("recipe_name", "filter_fqns", "emulate"), (None, None)),
        "model_compile_enabled": ("2026-04-27", None),
    },
    "ModelConvertersContainer.Config": {"converters": (None, "2026-04-27")},
    # trainer.py `Trainer.Config` (profiling → profiler de7fc7bd0, loss 786e26f8e, model_converters gone
    # 6348d93d1, override adf340d3f)
    "Trainer.Config": {
        **dict.fromkeys(("model_spec", "hf_assets_path", "dump_folder", "metrics", "tokenizer", "dataloader",
                         "optimizer", "lr_scheduler", "training", "parallelism", "checkpoint",
                         "activation_checkpoint", "compile", "comm", "validator", "debug"), (None, None)),
        "profiling": (None, "2026-04-17"),
        "profiler": ("2026-04-17", None),
        "loss": ("2026-04-27", None),
        "model_converters": (None, "2026-04-27"),
        "override": ("2026-06-10", None),
    },
}  # fmt: skip
# Trainer.Config's fields ppb reads; the others bear on no iteration's memory or time and are read past
READ = ("model_spec", "training", "parallelism", "activation_checkpoint", "compile", "optimizer", "debug",
        "model_converters")  # fmt: skip
# the classes a config of a field is, by the field (ParallelismConfig() where the function builds none)
SECTION_CLASS = {"training": "TrainingConfig", "parallelism": "ParallelismConfig", "compile": "CompileConfig",
                 "debug": "DebugConfig"}  # fmt: skip
CONVERTER_NAMES = {"Float8LinearConverter.Config": "quantize.linear.float8",
                   "Float8GroupedMMConverter.Config": "quantize.grouped_mm.float8",
                   "Float8GroupedExpertsConverter.Config": "quantize.grouped_mm.float8",
                   "MXLinearConverter.Config": "quantize.linear.mx",
                   "MXFP8LinearConverter.Config": "quantize.linear.mx",
                   "MXGroupedMMConverter.Config": "quantize.grouped_mm.mx",
                   "MXFP8GroupedExpertsConverter.Config": "quantize.grouped_mm.mx"}  # fmt: skip
OTHER_CONVERTERS = ("NVFP4LinearConverter.Config", "LoRAConverter.Config")


def _change(date: str) -> Change:
    return Change(TORCHTITAN, "", date, (0, 3), "")


def fields_at(cls: str, release: Release) -> set[str]:
    """The fields *cls* has at *release* (`FIELDS`)."""
    return {
        name
        for name, (added, removed) in FIELDS[cls].items()
        if (added is None or release.holds(_change(added))) and (removed is None or not release.holds(_change(removed)))
    }


@dataclass
class _Call:
    """A config class's call: its name as written (`Trainer.Config`) and keyword arguments, unevaluated."""

    cls: str
    kwargs: dict[str, Any] = field(default_factory=dict)  # name → _Lazy or _Call
    line: int = 0


@dataclass
class _Lazy:
    """An expression and the names bound where it was written: evaluated only when ppb reads it."""

    node: ast.expr
    scope: dict[str, Any]


_INTEGER = 2**63  # the operands of an integer ppb computes: no field's value comes near (ppb_core/limits.py)


def _check_depth(tree: ast.AST, where: str) -> None:
    """The syntax tree at most `limits.DEPTH` deep, walked without recursion: a chain of 300 `+` parsed, then
    overflowed the recursion of copying and printing the expressions (a RecursionError traceback)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limits.DEPTH:
            line = getattr(node, "lineno", None)
            raise InputError(
                where, f"line {line}" if line else None, f"nested more than ppb's limit of {limits.DEPTH} deep"
            )
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


class Reader:
    """One config file's functions, read at a release."""

    def __init__(self, text: str, where: str, release: Release) -> None:
        self.where, self.release = where, release
        if len(text) > limits.PYTHON_BYTES:  # characters: at most its bytes
            size = len(text.encode())
            if size > limits.PYTHON_BYTES:
                raise InputError(where, None, limits.over(size, limits.PYTHON_BYTES, "bytes of a Python config"))
        try:
            self.tree = ast.parse(text, filename=where)
        except SyntaxError as err:
            raise InputError(where, None, f"not Python: {err.msg} (line {err.lineno})") from None
        except RecursionError:  # `1+1+...` thousands long: CPython's parser builds its tree by recursion
            raise InputError(where, None, f"nested more than ppb's limit of {limits.DEPTH} deep") from None
        _check_depth(self.tree, where)
        self.functions = {node.name: node for node in self.tree.body if isinstance(node, ast.FunctionDef)}
        self.registries = self._registries()
        self.function = ""
        # each lazy value's literal, read once: `a1 = a0 + a0; a2 = a1 + a1; ...` read every name twice a step,
        # 2**n readings of n lines (24 lines ran for minutes); the value kept beside its literal pins its id
        self._literals: dict[int, tuple[_Lazy, Any]] = {}
        self._reading = 0  # lazy values being read, one inside another
        self._statements = 0  # statements read, each call's again: `a = base(); b = base(); ...` in every function

    def fail(self, field_name: str | None, problem: str) -> InputError:
        return InputError(f"{self.where} {self.function}()" if self.function else self.where, field_name, problem)

    def _registries(self) -> dict[str, str]:
        """Local names of a model's `model_registry` → the model (torchtitan/models/<model>)."""
        found = {}
        parts = PurePath(self.where).parts
        self.relative: set[str] = set()  # names imported `from .`: the model is the file's folder's name
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if node.level and not module and len(parts) >= 2:  # `from . import model_registry` in models/<model>/
                module = f"torchtitan.models.{parts[-2]}"
                self.relative |= {alias.asname or alias.name for alias in node.names}
            pieces = module.split(".")
            for alias in node.names:
                if alias.name == "model_registry" and pieces[:2] == ["torchtitan", "models"] and len(pieces) == 3:
                    found[alias.asname or alias.name] = pieces[2]
        return found

    def config_function(self, name: str | None) -> str:
        """The function to read: *name*, or the file's one function annotated `-> Trainer.Config`."""
        if name is not None:
            if name not in self.functions:
                hint = did_you_mean(name, self.functions)
                raise InputError(self.where, "--config", f"{shown(name)} is no function of the file{hint}")
            return name
        annotated = [
            n for n, f in self.functions.items() if f.returns is not None and _dotted(f.returns) == "Trainer.Config"
        ]
        if len(annotated) != 1:
            said = f"holds {len(annotated)} functions returning Trainer.Config" if annotated else "holds none"
            listed = f" ({', '.join(annotated[:6])}{', ...' if len(annotated) > 6 else ''})" if annotated else ""
            raise InputError(self.where, "--config", f"the file {said}{listed}: name one with --config FUNCTION")
        return annotated[0]

    def run(self, name: str, depth: int = 0) -> _Call:
        """The `Trainer.Config` the function *name* returns, read statement by statement."""
        if depth > 8:
            raise self.fail(None, "config functions call each other more than 8 deep")
        outer, self.function = self.function, name
        scope: dict[str, Any] = {}
        try:
            for statement in self.functions[name].body:
                self._statements += 1
                if self._statements > limits.PYTHON_STATEMENTS:
                    said = limits.over(self._statements, limits.PYTHON_STATEMENTS, "statements read")
                    raise self.fail(None, f"line {statement.lineno}: {said}")
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    continue  # a docstring
                if isinstance(statement, ast.Assert | ast.Pass | ast.Import | ast.ImportFrom):
                    continue
                if isinstance(statement, ast.Return) and statement.value is not None:
                    result = self._value(statement.value, scope, depth)
                    if not isinstance(result, _Call) or result.cls != "Trainer.Config":
                        raise self.fail(None, f"line {statement.lineno}: returns no Trainer.Config ppb can read")
                    return result
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                    self._assign(statement.targets[0], statement.value, scope, depth)
                    continue
                text = ast.unparse(statement).splitlines()[0][:60]
                raise self.fail(
                    None, f"line {statement.lineno}: `{text}` is not an assignment ppb reads without running"
                )
            raise self.fail(None, "returns nothing")
        finally:
            self.function = outer

    def _value(self, node: ast.expr, scope: dict[str, Any], depth: int) -> Any:
        """A bound value: a config class's call (its arguments lazy), a config function's result, else lazy."""
        if isinstance(node, ast.Name) and node.id in scope:
            return scope[node.id]
        if isinstance(node, ast.Call):
            callee = _dotted(node.func)
            if callee in self.functions and not node.args and not node.keywords:
                return copy.deepcopy(self.run(callee, depth + 1))
            known = callee is not None and (callee in FIELDS or callee in self.registries or callee in _CALLS)
            if known or (callee is not None and callee.endswith(".Config")):  # any class's config: read lazily
                if node.args and callee not in self.registries:  # callee is not None here
                    raise self.fail(None, f"line {node.lineno}: {callee}(...) takes keyword arguments")
                kwargs = {kw.arg: _Lazy(kw.value, dict(scope)) for kw in node.keywords if kw.arg is not None}
                if any(kw.arg is None for kw in node.keywords):
                    raise self.fail(None, f"line {node.lineno}: {callee}(**...) ppb cannot read without running")
                call = _Call(callee, kwargs, node.lineno)
                if node.args:
                    call.kwargs["flavor"] = _Lazy(node.args[0], dict(scope))
                return call
        return _Lazy(node, dict(scope))

    def _assign(self, target: ast.expr, value: ast.expr, scope: dict[str, Any], depth: int) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = self._value(value, scope, depth)
            return
        path = _attributes(target)
        if path is None or path[0] not in scope or not isinstance(scope[path[0]], _Call):
            raise self.fail(None, f"line {target.lineno}: `{ast.unparse(target)}` is not a field of the config")
        call = scope[path[0]]
        for index, name in enumerate(path[1:-1], start=1):
            inner = call.kwargs.get(name)
            if isinstance(inner, _Lazy):
                inner = self._value(inner.node, inner.scope, depth)
            if inner is None:  # the field at Trainer.Config's default: its class, built with no arguments
                policy = (
                    "SelectiveAC.Config" if self.release.holds(_change("2026-06-15")) else "ActivationCheckpointConfig"
                )
                cls = SECTION_CLASS.get(name) or (policy if name == "activation_checkpoint" else None)
                inner = _Call(cls, {}, target.lineno) if cls is not None else None
            if not isinstance(inner, _Call):
                said = f"line {target.lineno}: sets a field of a value ppb cannot read without running the file"
                raise self.fail(".".join(path[1 : index + 1]), said)
            call.kwargs[name] = inner
            call = inner
        call.kwargs[path[-1]] = self._value(value, scope, depth)

    # -- evaluating what ppb reads
    def literal(self, value: Any, where: str) -> Any:
        """A lazy value as a plain literal, refused in one line where it is not one."""
        if isinstance(value, _Call):
            raise self.fail(where, f"{value.cls}(...) where a literal is read")
        if not isinstance(value, _Lazy):
            return value
        if id(value) not in self._literals:
            self._reading += 1
            try:
                if self._reading > limits.DEPTH:  # `a1 = a0 * a0`, `a2 = a1 * a1`, ... a thousand lines deep
                    raise self.fail(where, f"computed from names more than ppb's limit of {limits.DEPTH} deep")
                self._literals[id(value)] = (value, self._literal(value.node, value.scope, where))
            finally:
                self._reading -= 1
        return self._literals[id(value)][1]

    def _literal(self, node: ast.expr, scope: dict[str, Any], where: str) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple):
            return [self._literal(item, scope, where) for item in node.elts]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = self._literal(node.operand, scope, where)
            if isinstance(operand, int | float) and not isinstance(operand, bool):
                return -operand
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.FloorDiv):
            left, right = self._literal(node.left, scope, where), self._literal(node.right, scope, where)
            if all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right)):
                if isinstance(node.op, ast.FloorDiv) and right == 0:
                    raise self.fail(where, "divides by zero")
                if max(abs(left), abs(right)) > _INTEGER:  # `a = a * a` a line: digits doubling each
                    raise self.fail(where, f"`{ast.unparse(node)[:60]}` is over 2**63, no value of a field")
                return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}.get(
                    type(node.op), left // right if right else 0
                )
        if isinstance(node, ast.Name) and node.id in scope:
            bound = scope[node.id]
            return self.literal(bound, where)
        raise self.fail(where, f"`{ast.unparse(node)[:60]}` is not a literal ppb reads without running the file")

    def call(self, value: Any, where: str) -> _Call | None:
        """A lazy value as a config class's call (None for a literal None)."""
        if isinstance(value, _Lazy):
            node = value.node
            if isinstance(node, ast.Constant) and node.value is None:
                return None
            if isinstance(node, ast.Name) and node.id in value.scope:
                return self.call(value.scope[node.id], where)
            if isinstance(node, ast.Call):
                resolved = self._value(node, value.scope, 0)
                if isinstance(resolved, _Call):
                    return resolved
            raise self.fail(where, f"`{ast.unparse(node)[:60]}` is no config class ppb reads")
        return value

    def fields(self, call: _Call, where: str) -> dict[str, Any]:
        """A call's keyword arguments, each a field its class has at the release."""
        have = fields_at(call.cls, self.release)
        for name in call.kwargs:
            if name not in have:
                gone = name in FIELDS[call.cls]
                said = f"is not a field of {call.cls} in torchtitan {_release_text(self.release)}" + (
                    " (one of another release's: state --torchtitan-release)" if gone else did_you_mean(name, have)
                )
                raise self.fail(f"{where}.{name}" if where else name, said)
        return call.kwargs


# callables that are not classes of FIELDS
_CALLS = ("default_adamw",)


def _dotted(node: ast.expr) -> str | None:
    """`a.b.C` of a name or attribute chain, the last two parts kept where they name a nested Config."""
    parts = _attributes(node)
    if parts is None:
        return None
    if parts[-1] == "Config" and len(parts) >= 2:
        return ".".join(parts[-2:])
    return parts[-1]


def _attributes(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _release_text(release: Release) -> str:
    return release.date or (f"v{release.version[0]}.{release.version[1]}" if release.version else "")


def python_release(value: str | None) -> Release:
    """The release a config file is read at (`--torchtitan-release`; unset: 9810191bb's date, the first)."""
    try:
        release = parse_release(TORCHTITAN, value or FIRST_PYTHON_RELEASE)
    except ValueError as err:
        raise InputError(None, "--torchtitan-release", str(err)) from None
    if not release.holds(_change(FIRST_PYTHON_RELEASE)):
        raise InputError(
            None,
            "--torchtitan-release",
            f"{value}: torchtitan configured by Python functions from 9810191bb (2026-02-23)",
        )
    return release


FIELDS["OptimizersInBackwardContainer.Config"] = FIELDS["OptimizersContainer.Config"]
_LM_HEAD = _change("2026-04-27")  # 786e26f8e: `output` is `lm_head`
_AC_CLASSES = _change("2026-06-15")  # c5d93d109
_OP_ONLY = _change("2026-03-23")  # 114151ad4


def read_config(
    text: str, where: str, function: str | None, release: Release, gpus: int | None, device: str
) -> Imported:
    """The run config of the config function *function* (None: the file's one) of the file *text*, read at
    torchtitan *release*, on *gpus* devices of the catalog's *device*."""
    reader = Reader(text, where, release)
    name = reader.config_function(function)
    config = reader.run(name)
    reader.function = name
    notes: list[str] = []
    document, sequence_parallel = _document(reader, config, notes)
    names = _file_names(reader, document)
    try:
        imported = import_document(document, gpus, device, f"{where} {name}()", notes)
    except InputError as error:
        field_name, problem = _in_file_names(error.field or "", error.problem, names, document)
        raise InputError(error.source, field_name or None, problem) from None
    imported.notes[:] = [
        " ".join(_in_file_names(*note.partition(" ")[::2], names, document)) for note in imported.notes
    ]
    raw = imported.raw
    raw["framework_release"] = {"torchtitan": _release_text(release)}
    if not sequence_parallel and raw["parallel"].get("sequence_parallel"):
        raw["parallel"]["sequence_parallel"] = False  # aa68af18e: TP without SP
    return imported


# the job-TOML names the TOML reader's lines say, as the file names them: {TOML prefix: the file's}
def _file_names(reader: Reader, document: dict[str, Any]) -> dict[str, str]:
    """Where the file states what the TOML reader reads at another name: the float8 converter's call (set by
    `_converters`), and from 73aed7f6c the step's tokens for `training.global_batch_size`."""
    names = {"quantize.linear.float8": document.pop("_float8_at")} if "_float8_at" in document else {}
    if reader.release.holds(_change(_TOKENS)):
        names["training.global_batch_size"] = "training.num_tokens_per_train_step"
    return names


def _in_file_names(key: str, said: str, names: dict[str, str], document: dict[str, Any]) -> tuple[str, str]:
    """A line of the TOML reader (its key, then what it says) in the file's names; a global batch of n
    sequences said as the file's n·s tokens, the sequences beside them."""
    for toml, ours in names.items():
        if key != toml and not key.startswith(f"{toml}."):
            continue
        total, seq = document["training"].get("global_batch_size"), document["training"].get("seq_len")
        if toml == "training.global_batch_size" and isinstance(total, int) and said.startswith(f"{total}"):
            said = f"{total * seq} tokens ({total} sequences of {seq}){said[len(str(total)) :]}"
        return ours + key[len(toml) :], said
    return key, said


def _document(reader: Reader, config: _Call, notes: list[str]) -> tuple[dict[str, Any], bool]:
    """The config as v0.2.2's job-TOML sections (`torchtitan_import` reads them), and whether TP runs SP."""
    top = _checked(reader, config, "")
    document: dict[str, Any] = {"model": _model(reader, top, notes)}
    _converters(reader, top, document, notes)
    parallelism = _section(reader, top, "parallelism")
    sequence_parallel = parallelism.pop("enable_sequence_parallel", True)
    for key, said in (
        ("enable_fsdp_symm_mem", "FSDP's symmetric-memory collectives"),
        ("spmd_backend", None),
        ("context_parallel_ptrr_mask_key", None),
        ("full_dtensor", "full DTensor"),
        ("hybridep_non_blocking_expert_capacity_factor", "HybridEP's capacity factor"),
    ):
        value = parallelism.pop(key, None)
        if value and said is not None:
            notes.append(f"parallelism.{key} {value}: {said}, not modelled")
    fqns = parallelism.get("module_fqns_per_model_part")
    if isinstance(fqns, list) and reader.release.holds(_LM_HEAD):
        parallelism["module_fqns_per_model_part"] = _lm_head_named(reader, fqns)
    compiled = _section(reader, top, "compile")
    if "enable_async_tensor_parallel" in compiled:  # 737594746: in compile, read by the TOML's parallelism key
        parallelism["enable_async_tensor_parallel"] = compiled.pop("enable_async_tensor_parallel")
    training = _section(reader, top, "training")
    if "disable_cuda_graphs" in fields_at("TrainingConfig", reader.release) and not training.pop(
        "disable_cuda_graphs", False
    ):  # f84224af0 (2026-08-13): the trainer replays the forward and backward as a CUDA graph unless disabled
        notes.append("training.disable_cuda_graphs false: the step replayed as a CUDA graph (f84224af0), not modelled")
    if reader.release.holds(_change(_TOKENS)):
        _tokens(reader, training, parallelism)
    document |= {"training": training, "parallelism": parallelism, "compile": compiled}
    document["activation_checkpoint"] = _recompute(reader, top.get("activation_checkpoint", _DEFAULT))
    document["optimizer"] = _optimizer(reader, top.get("optimizer"))
    debug = _section(reader, top, "debug")
    document["debug"] = {key: debug[key] for key in ("seed", "deterministic", "moe_force_load_balance") if key in debug}
    return document, bool(sequence_parallel)


_DEFAULT = object()  # a field the function leaves at Trainer.Config's default


def _checked(reader: Reader, call: _Call, where: str) -> dict[str, Any]:
    """*call*'s fields, the class one the release has (a class none of whose fields it has is refused)."""
    if FIELDS.get(call.cls) and not fields_at(call.cls, reader.release):
        said = f"{call.cls} is not in torchtitan {_release_text(reader.release)} (state --torchtitan-release)"
        raise reader.fail(where or None, said)
    return reader.fields(call, where)


def _section(reader: Reader, top: dict[str, Any], name: str) -> dict[str, Any]:
    """A configs.py section's fields as literals ({} where the function sets none)."""
    value = top.get(name)
    if value is None:
        return {}
    call = reader.call(value, name)
    if call is None or call.cls != SECTION_CLASS[name]:
        raise reader.fail(name, f"is a {SECTION_CLASS[name]}(...)")
    return {key: reader.literal(item, f"{name}.{key}") for key, item in _checked(reader, call, name).items()}


def _model(reader: Reader, top: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """`model_spec=model_registry(FLAVOR, ...)` of a model package torchtitan.models.<name>."""
    if "model_spec" not in top:
        raise reader.fail("model_spec", "the config names no model: model_spec=model_registry(FLAVOR)")
    call = reader.call(top["model_spec"], "model_spec")
    if call is None or call.cls not in reader.registries:
        said = "is not model_registry(FLAVOR) of a model ppb reads (from torchtitan.models.MODEL import model_registry)"
        raise reader.fail("model_spec", said)
    name = reader.registries[call.cls]
    if name not in MODELS and call.cls in reader.relative:
        # a config_registry.py copied out of torchtitan/models/<model>/: its `from . import model_registry` names
        # the folder it now sits in, not a model (a user's copy in cfg/ was said to be "torchtitan.models.cfg")
        said = (
            f"`from . import {call.cls}` names the model by the file's folder, {shown(name)}, no model ppb imports "
            f"({', '.join(MODELS)}): keep the file in its model's folder (torchtitan/models/llama3/config_registry.py)"
        )
        raise reader.fail("model_spec", said)
    if name not in MODELS:
        raise reader.fail("model_spec", f"torchtitan.models.{name}: ppb imports {', '.join(MODELS)}")
    flavor = reader.literal(call.kwargs.get("flavor"), "model_spec")
    for key, value in call.kwargs.items():
        if key == "attn_backend":
            backend = reader.literal(value, "model_spec.attn_backend")
            if backend != "sdpa":
                notes.append(f"model_spec attn_backend {backend}: block-causal over documents, priced as causal flash")
        elif key == "tp_gemm_backend":
            if reader.literal(value, "model_spec.tp_gemm_backend") != "default":
                notes.append("model_spec tp_gemm_backend: TP collectives folded into GEMMs, not modelled")
        elif key == "moe_comm_backend":
            backend = reader.literal(value, "model_spec.moe_comm_backend")
            if backend != "standard":
                notes.append(f"model_spec moe_comm_backend {backend}: priced as the all-to-all dispatcher")
        elif key == "num_mtp_layers":
            if reader.literal(value, "model_spec.num_mtp_layers") != 0:
                raise reader.fail("model_spec.num_mtp_layers", "torchtitan's MTP module ppb does not price")
        elif key not in ("flavor", "quantization", "converters", "non_blocking_capacity_factor"):
            raise reader.fail(f"model_spec.{key}", "is not an argument of model_registry ppb reads")
    if "attn_backend" not in call.kwargs and reader.release.holds(_change("2026-06-09")):
        # 169545712 (2026-06-09, SDPA deprecated for language models): model_registry's default is flex
        notes.append("model_spec attn_backend flex (model_registry's default): block-causal, priced as causal flash")
    return {"name": name, "flavor": flavor, "converters": []}


def _converters(reader: Reader, top: dict[str, Any], document: dict[str, Any], notes: list[str]) -> None:
    """Float8LinearConverter.Config (and the others, noted) from `model_converters=ModelConvertersContainer.
    Config(converters=[...])` (before 6348d93d1) or model_registry's `quantization=` / `converters=`."""
    found: list[tuple[str, Any]] = []
    if "model_converters" in top:
        container = reader.call(top["model_converters"], "model_converters")
        if container is not None:
            if container.cls != "ModelConvertersContainer.Config":
                raise reader.fail("model_converters", "is a ModelConvertersContainer.Config(converters=[...])")
            given = _checked(reader, container, "model_converters").get("converters")
            found += [("model_converters.converters", given)] if given is not None else []
    spec = reader.call(top["model_spec"], "model_spec")
    assert spec is not None
    found += [(f"model_spec.{key}", spec.kwargs[key]) for key in ("quantization", "converters") if key in spec.kwargs]
    for where, value in found:
        for index, item in enumerate(_calls(reader, value, where)):
            at = f"{where}[{index}]"
            if item.cls == "Float8LinearConverter.Config":
                given = _checked(reader, item, at)  # model_compile_enabled: the compile config's, read there
                table = {k: reader.literal(v, f"{at}.{k}") for k, v in given.items() if k != "model_compile_enabled"}
                if reader.release.holds(_change("2026-04-27")):  # 6348d93d1: rowwise by default
                    table.setdefault("recipe_name", "rowwise")
                if isinstance(table.get("filter_fqns"), list):
                    table["filter_fqns"] = ["output" if n == "lm_head" else n for n in table["filter_fqns"]]
                document.setdefault("quantize", {}).setdefault("linear", {})["float8"] = table
                document["_float8_at"] = at  # the TOML reader's lines on it name this call (`_file_names`)
                document["model"]["converters"].append(CONVERTER_NAMES[item.cls])
            elif item.cls in CONVERTER_NAMES:
                document["model"]["converters"].append(CONVERTER_NAMES[item.cls])
            elif item.cls in OTHER_CONVERTERS:
                notes.append(f"{at} {item.cls.split('.')[0]}: not modelled")
            else:
                raise reader.fail(at, f"{item.cls} is no converter ppb reads")


def _calls(reader: Reader, value: Any, where: str) -> list[_Call]:
    """A list of config classes' calls."""
    if not isinstance(value, _Lazy) or not isinstance(value.node, ast.List | ast.Tuple):
        raise reader.fail(where, "is a list of converter configs")
    found = []
    for index, node in enumerate(value.node.elts):
        call = reader.call(_Lazy(node, value.scope), f"{where}[{index}]")
        if call is None:
            raise reader.fail(f"{where}[{index}]", "is None, not a converter config")
        found.append(call)
    return found


def _lm_head_named(reader: Reader, fqns: list[Any]) -> list[Any]:
    """From 786e26f8e the output projection is `lm_head`: said as v0.2.2's `output`; `output` refused."""
    key = "parallelism.module_fqns_per_model_part"
    named = []
    for part in fqns:
        if not isinstance(part, list):
            return fqns  # the TOML reader refuses it
        if "output" in part:
            raise reader.fail(key, "'output' is lm_head in torchtitan from 786e26f8e (2026-04-27)")
        named.append(["output" if name == "lm_head" else name for name in part])
    return named


def _tokens(reader: Reader, training: dict[str, Any], parallelism: dict[str, Any], plan_only: bool = False) -> None:
    """73aed7f6c's token batch as v0.2.2's sequences: a micro-batch of T tokens is T / s sequences of
    `max_context_length` s (train step and PP micro-batches in the same units)."""
    stated = {"num_tokens_per_microbatch_per_dp_rank", "max_context_length", "num_tokens_per_train_step"}
    if not stated & set(training) and "num_pp_microbatches" not in parallelism and plan_only:
        return  # a plan's lines that state no batch: checked at the run config's
    tokens = training.pop("num_tokens_per_microbatch_per_dp_rank", 16384)  # configs.py defaults
    seq = training.pop("max_context_length", 2048)
    step = training.pop("num_tokens_per_train_step", -1)
    micro_batches = parallelism.pop("num_pp_microbatches", 1)
    for key, value in (
        ("training.max_context_length", seq),
        ("training.num_tokens_per_microbatch_per_dp_rank", tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise reader.fail(key, f"{shown(value)} is not an integer ≥ 1")
    if tokens % seq:
        said = f"{tokens} is not a whole number of {seq}-token sequences (max_context_length): ppb prices sequences"
        raise reader.fail("training.num_tokens_per_microbatch_per_dp_rank", said)
    micro = tokens // seq
    pp = parallelism.get("pipeline_parallel_degree", 1)
    if not isinstance(micro_batches, int) or isinstance(micro_batches, bool) or micro_batches < 1:
        raise reader.fail("parallelism.num_pp_microbatches", f"{shown(micro_batches)} is not an integer ≥ 1")
    local = micro * (micro_batches if isinstance(pp, int) and pp > 1 else 1)
    training |= {"seq_len": seq, "local_batch_size": local}
    if step != -1:
        if not isinstance(step, int) or isinstance(step, bool) or step < 1 or step % (local * seq):
            said = f"{shown(step)} is not a multiple of a step's {local * seq} tokens a data-parallel rank"
            raise reader.fail("training.num_tokens_per_train_step", said)
        training["global_batch_size"] = step // seq
    parallelism["pipeline_parallel_microbatch_size"] = micro


def _recompute(reader: Reader, value: Any) -> dict[str, Any]:
    """`activation_checkpoint` as the TOML's `[activation_checkpoint]`."""
    policies = reader.release.holds(_AC_CLASSES)
    if value is _DEFAULT:  # ActivationCheckpointConfig(): selective; SelectiveAC.Config() from c5d93d109
        return {"selective_ac_option": "op"} if reader.release.holds(_OP_ONLY) else {}
    call = reader.call(value, "activation_checkpoint")
    if call is None:
        if not policies:
            raise reader.fail("activation_checkpoint", "None is no ActivationCheckpointConfig (mode='none')")
        return {"mode": "none"}
    given = {
        k: reader.literal(v, f"activation_checkpoint.{k}")
        for k, v in _checked(reader, call, "activation_checkpoint").items()
    }
    if call.cls == "ActivationCheckpointConfig":
        if reader.release.holds(_OP_ONLY) and given.get("mode", "selective") == "selective":
            given["selective_ac_option"] = "op"  # 114151ad4: selective is the op policy alone
        return given
    modes = {"SelectiveAC.Config": "selective", "FullAC.Config": "full", "MemoryBudgetAC.Config": "memory_budget"}
    if call.cls not in modes:
        raise reader.fail("activation_checkpoint", f"{call.cls} is no activation checkpointing policy ppb reads")
    out: dict[str, Any] = {"mode": modes[call.cls]}
    if call.cls == "SelectiveAC.Config":
        out["selective_ac_option"] = "op"
        if "force_recompute_mm_shapes_by_fqns" in given:
            out["per_op_sac_force_recompute_mm_shapes_by_fqns"] = given["force_recompute_mm_shapes_by_fqns"]
    return out


def _optimizer(reader: Reader, value: Any) -> dict[str, Any]:
    """The optimizer's name and implementation (AdamW where the function sets none, as both defaults are)."""
    if value is None:
        return {}
    call = reader.call(value, "optimizer")
    if call is None:
        raise reader.fail("optimizer", "None: torchtitan builds an optimizer")
    if call.cls == "default_adamw":  # components/optimizer/optimizer.py: one AdamW param group
        return {"name": "AdamW"}
    if call.cls not in ("OptimizersContainer.Config", "OptimizersInBackwardContainer.Config"):
        raise reader.fail("optimizer", f"{call.cls} is no optimizer config ppb reads")
    given = _checked(reader, call, "optimizer")
    out: dict[str, Any] = {}
    if call.cls == "OptimizersInBackwardContainer.Config":
        out["early_step_in_backward"] = True
    if "implementation" in given:
        out["implementation"] = reader.literal(given["implementation"], "optimizer.implementation")
    if "name" in given:
        out["name"] = reader.literal(given["name"], "optimizer.name")
    if "param_groups" in given:
        names = set()
        for index, group in enumerate(_calls(reader, given["param_groups"], "optimizer.param_groups")):
            at = f"optimizer.param_groups[{index}]"
            if group.cls != "ParamGroupConfig":
                raise reader.fail(at, f"{group.cls} is no ParamGroupConfig")
            fields = _checked(reader, group, at)
            names.add(reader.literal(fields.get("optimizer_name", "AdamW"), f"{at}.optimizer_name"))
        if len(names) > 1:
            raise reader.fail(
                "optimizer.param_groups", f"{', '.join(sorted(map(str, names)))}: ppb prices one optimizer"
            )
        if names:
            out["name"] = names.pop()
    return out


# 73aed7f6c's token fields by the sequence-counted key a plan check may name (`plan_document`)
TOKEN_FIELDS = {
    "training.local_batch_size": "training.num_tokens_per_microbatch_per_dp_rank",
    "parallelism.pipeline_parallel_microbatch_size": "training.num_tokens_per_microbatch_per_dp_rank",
    "training.global_batch_size": "training.num_tokens_per_train_step",
    "training.seq_len": "training.max_context_length",
}


def lines_function(reader: Reader) -> str:
    """The function a plan file's statements make: ppb's printed lines (assignments on `config`, no function)
    read as the body of one on a default `Trainer.Config`; a file with functions as `config_function`."""
    if reader.functions:
        return reader.config_function(None)
    body = [node for node in reader.tree.body if not isinstance(node, ast.Import | ast.ImportFrom)]
    head = ast.parse("config = Trainer.Config()\n").body
    tail = [ast.Return(value=ast.Name(id="config", ctx=ast.Load()))]
    function = ast.FunctionDef(
        name="<lines>",
        args=ast.arguments([], [], None, [], [], None, []),
        body=[*head, *body, *tail],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    ast.fix_missing_locations(function)
    reader.functions["<lines>"] = function
    return "<lines>"


def plan_document(text: str, where: str, release: Release) -> dict[str, Any]:
    """A plan's config lines (ppb's, or a whole config function) as v0.2.2's TOML sections `ppb check --plan`
    reads: parallelism, training (the token batch of 73aed7f6c in sequences) and activation_checkpoint."""
    reader = Reader(text, where, release)
    name = lines_function(reader)
    config = reader.run(name)
    reader.function = name if name != "<lines>" else ""
    top = _checked(reader, config, "")
    parallelism = _section(reader, top, "parallelism")
    for key in (
        "enable_sequence_parallel",
        "enable_fsdp_symm_mem",
        "spmd_backend",
        "context_parallel_ptrr_mask_key",
        "full_dtensor",
        "hybridep_non_blocking_expert_capacity_factor",
    ):
        parallelism.pop(key, None)
    fqns = parallelism.get("module_fqns_per_model_part")
    if isinstance(fqns, list) and release.holds(_LM_HEAD):
        parallelism["module_fqns_per_model_part"] = _lm_head_named(reader, fqns)
    training = _section(reader, top, "training")
    training.pop("disable_cuda_graphs", None)
    if release.holds(_change(_TOKENS)):
        _tokens(reader, training, parallelism, plan_only=True)
    document = {"parallelism": parallelism, "training": training}
    document["activation_checkpoint"] = _recompute(reader, top.get("activation_checkpoint", _DEFAULT))
    return document
