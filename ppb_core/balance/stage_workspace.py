"""The workspaces a stage holds by the layer kinds it runs, beside the constant every stage is charged.

Some of a device's workspaces depend on the layers it runs, not only on the run: Transformer Engine's
cached dummy weight gradients under Megatron's gradient accumulation fusion are one tensor per (weight
shape, dtype) the device's linears hand back (transformer_engine/pytorch/module/base.py at d0067d0d:
`get_dummy_wgrad` keys the module-level `_dummy_wgrads` dict by `(*shape, dtype)` and nothing removes an
entry, so each lives as long as the process, one process per pipeline rank, whatever chunk runs it;
`memory.frameworks.dummy_wgrad`), and TE's grouped-GEMM and the flex dispatcher's buffers come only
where experts run (`MegatronRules.workspace_bytes`). The balancer's constant (`problem.run_problem`)
charges every stage what the union of the run's body kinds asks, and a HEAD's or TAIL's description
what its kind adds to that union (`MemoryModel.end_workspace_bytes`). A stage of DeepSeek-V3 without
its 3 dense layers runs no dense-MLP shape, yet was charged their 0.79 GB.

`StageWorkspace` gives back, per stage, what that charge holds beyond the stage's own workspaces
(`FrameworkRules.workspace_bytes` of the kinds it runs, as `memory.peak.stage_peaks` prices them for
`ppb estimate` and `ppb check`): the *relief*, by which body records the stage holds (grouped by their
kinds) and which of the HEAD, TAIL and standalone MTP parts sit on it. It shrinks as a stage holds
more kinds, and is 0 for a stage holding every body kind beside the ends it carries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ppb_core.config.run import RunConfig
from ppb_core.memory import MemoryModel
from ppb_core.model.kinds import BODY, HEAD, TAIL, LayerKind, TailKind, standalone_parts
from ppb_core.model.walk import walk
from ppb_core.payload.describe import mb
from ppb_core.units import MB

# Roles of the fixed records a stage may carry: the HEAD, the TAIL (with the MTP layers, or the output
# layer alone when they run apart) and Megatron-Core's standalone MTP part (`BalanceInput.mtp_cell`).
ROLES = ("head", "tail", "mtp")
# Past this many distinct kind groups among the body records the table (2^groups per role set) is not
# built, and the constant alone charges every stage (as before: conservative).
MOST_GROUPS = 8


@dataclass(frozen=True)
class StageWorkspace:
    """`group_of[b]`: the kind group of body record b; `relief_mb`: per set of roles a stage carries,
    the MB (whole, truncated) the constant and the ends' descriptions charge it beyond its own
    workspaces, indexed by the bit mask of the groups it holds."""

    group_of: tuple[int, ...]
    relief_mb: tuple[tuple[frozenset[str], tuple[float, ...]], ...]

    def mask(self, bodies: Iterable[int]) -> int:
        found = 0
        for body in bodies:
            found |= 1 << self.group_of[body]
        return found

    def row(self, roles: frozenset[str]) -> tuple[float, ...]:
        """The relief by group mask for a stage carrying *roles* (0 throughout for a set never met)."""
        for key, values in self.relief_mb:
            if key == roles:
                return values
        return (0.0,) * (1 << (max(self.group_of, default=-1) + 1))

    def describe(self) -> dict[str, Any]:
        return {
            "group_of_body": list(self.group_of),
            "relief_mb": [{"ends": sorted(roles), "by_groups": list(values)} for roles, values in self.relief_mb],
        }


def _body_groups(run: RunConfig, bodies: Sequence[Any]) -> tuple[tuple[int, ...], list[frozenset[LayerKind]]] | None:
    """Each body record's kind group, matching the records to the run's body layers in pipeline order
    (`payload.describe.describe_layers` lists them so); None when they do not match (combined bodies)."""
    kinds = [layer.kind for layer in walk(run, fused_tail=True) if layer.node == BODY]
    if sum(body.nb_layer for body in bodies) != len(kinds):
        return None
    groups: list[frozenset[LayerKind]] = []
    group_of: list[int] = []
    start = 0
    for body in bodies:
        held = frozenset(kinds[start : start + body.nb_layer])
        start += body.nb_layer
        if held not in groups:
            groups.append(held)
        group_of.append(groups.index(held))
    return tuple(group_of), groups


def _end_kinds(run: RunConfig, apart: bool) -> dict[str, list[LayerKind]]:
    """The kinds each role's records stand for: `describe` (one TAIL) or `describe_mtp_apart`."""
    found: dict[str, list[LayerKind]] = {role: [] for role in ROLES}
    for layer in walk(run, fused_tail=True):
        if layer.node == HEAD:
            found["head"].append(layer.kind)
        elif layer.node == TAIL:
            if apart and isinstance(layer.kind, TailKind) and layer.kind.mtp_layers:
                norm, mtp, output = standalone_parts(layer.kind)
                found["mtp"] += [norm, mtp]
                found["tail"].append(output)
            else:
                found["tail"].append(layer.kind)
    return found


def stage_workspace(
    run: RunConfig, bodies: Sequence[Any], *, apart: bool = False, memory: MemoryModel | None = None
) -> StageWorkspace | None:
    """The relief table of a run's problem whose body records are *bodies* (module docstring); *apart*:
    the ends as `describe_mtp_apart` splits the TAIL. None where no stage is charged more than its own
    (a framework whose workspaces do not depend on the kinds), or the records cannot be matched.

    A stage carrying the roles E and holding the body groups S is charged, beside the working set and the
    pipeline buffers, W(B) in the constant (B: every body kind) and, in the ends' descriptions, the whole
    MB of W(B ∪ {e}) − W(B) for each end record e (`end_workspace_bytes`); it holds W(S ∪ E). The relief
    is the difference, truncated to whole MB (so the charge never falls below what the stage holds),
    and made non-increasing in S (a subset's relief caps its superset's: exact when W only grows with
    the kinds, as every term of `MegatronRules.workspace_bytes` does)."""
    matched = _body_groups(run, bodies)
    if matched is None:
        return None
    group_of, groups = matched
    if len(groups) > MOST_GROUPS:
        return None
    memory = memory if memory is not None else MemoryModel(run)

    def workspace(kinds: Iterable[LayerKind]) -> float:
        return memory.rules.workspace_bytes(memory.setup, set(kinds))

    every = set().union(*groups) if groups else set()
    base = workspace(every)
    ends = _end_kinds(run, apart)
    # what each role's descriptions carry, as `describe_layer` writes it: whole MB per record
    carried = {role: sum(mb(workspace(every | {kind}) - base) for kind in kinds) for role, kinds in ends.items()}
    table: list[tuple[frozenset[str], tuple[float, ...]]] = []
    present = [role for role in ROLES if ends[role]]
    for size in range(1 << len(present)):
        roles = frozenset(role for bit, role in enumerate(present) if size >> bit & 1)
        fixed = {kind for role in roles for kind in ends[role]}
        charged = base / MB + sum(carried[role] for role in roles)
        values: list[float] = []
        for mask in range(1 << len(groups)):
            held = set(fixed).union(*(groups[g] for g in range(len(groups)) if mask >> g & 1))
            relief = max(0.0, float(math.floor(charged - workspace(held) / MB)))
            # a subset's relief caps this one's (module docstring)
            for g in range(len(groups)):
                if mask >> g & 1:
                    relief = min(relief, values[mask & ~(1 << g)])
            values.append(relief)
        table.append((roles, tuple(values)))
    if not any(any(values) for _, values in table):
        return None
    return StageWorkspace(group_of, tuple(table))
