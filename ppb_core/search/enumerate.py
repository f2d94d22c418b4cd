"""Every strategy of a search spec's grid, and the run-config validator's verdict on each.

A strategy is one point of the grid: tp (with sequence parallelism), cp, pp, the data-parallel
degree dp = devices / (tp·cp·pp), ep and etp for MoE models, vpp with a schedule that runs it,
ZeRO stage or FSDP, micro-batch size, micro-batches from the global batch, and a recompute
setting. Products tp·cp·pp that do not divide the devices are not strategies (no whole dp) and are
not counted; neither are ep·etp that do not divide a stage's dp·cp·tp ranks (no whole expert group:
the default ep grid holds only sizes dividing the experts and the devices) nor schedule/vpp pairs that
do not go together (1F1B and GPipe run one chunk, the interleaved schedule two or more, DualPipeV exactly
two). Every other point is enumerated, and
is either refused — by the global batch (it does not split into dp·micro_batch_size) or by the
run-config validator — or valid (a listed size that crosses a node or cannot divide the devices is
the spec's error: `ppb_core.search.spec`). Refusals are
counted by reason: the field and the problem with its numbers written N, so one family (say, tp
not dividing the heads) counts as one reason whatever the numbers.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ppb_core.config.run import RunConfig, parse_run_config
from ppb_core.errors import InputError
from ppb_core.limits import MICRO_BATCHES, SEARCH_POINTS, over
from ppb_core.search.spec import (
    DEFAULT_CP,
    DEFAULT_FSDP,
    DEFAULT_MICRO_BATCH_SIZE,
    DEFAULT_MICROBATCH_GROUP,
    DEFAULT_SCHEDULES,
    DEFAULT_VPP,
    DEFAULT_ZERO,
    SearchSpec,
)

# a CP variant's mark in a strategy's label (ring: none): cp2u, cp2ag
CP_SUFFIXES = {"ulysses": "u", "all_gather": "ag"}


@dataclass(frozen=True, order=True)
class Strategy:
    """One point of the grid. Ordered field by field, which settles ties between equal times."""

    tp: int
    cp: int
    pp: int
    dp: int
    vpp: int
    schedule: str
    ep: int
    etp: int
    sequence_parallel: bool
    cp_variant: str
    zero: int
    fsdp: bool
    micro_batch_size: int
    micro_batches: int
    recompute: int  # index into the spec's recompute settings
    # Megatron's `--microbatch-group-size-per-virtual-pipeline-stage` under the interleaved schedule; 0: its
    # default, pp (`microbatch_groups`)
    group: int = 0
    # Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`): each steady forward beside a
    # backward, layer by layer, the expert all-to-alls of one behind the other's compute (`ep_overlaps`)
    ep_overlap: bool = False

    def parallel(self, spec: SearchSpec) -> dict[str, Any]:
        """The run config's `parallel` section."""
        section: dict[str, Any] = {
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "vpp": self.vpp,
            "cp": self.cp,
            "cp_variant": self.cp_variant,
            "ep": self.ep,
            "sequence_parallel": self.sequence_parallel,
            "zero": self.zero,
            "fsdp": self.fsdp,
            "schedule": self.schedule,
            "world_size": spec.devices,
            "devices_per_node": spec.devices_per_node,
        }
        if self.group:
            section["microbatch_group_size_per_vp_stage"] = self.group
        if self.ep_overlap:
            section["overlap_moe_expert_parallel_comm"] = True
        if spec.moe:
            section["etp"] = self.etp
        return section

    def training(self, spec: SearchSpec) -> dict[str, Any]:
        """The run config's `training` section."""
        return {
            **spec.fixed_training,
            "micro_batch_size": self.micro_batch_size,
            "micro_batches": self.micro_batches,
            "recompute": spec.recompute_settings[self.recompute],
        }

    def label(self, spec: SearchSpec) -> str:
        """A short name that says the strategy: tp8sp-cp1-pp16v2i-dp8-z1-b1m64-r1 (`pp4v2ig5`: micro-batch groups
        of 5, `--microbatch-group-size-per-virtual-pipeline-stage 5`; `ep8ov`: the expert all-to-alls overlapped
        by the combined 1F1B, `--overlap-moe-expert-parallel-comm`). A strategy the global batch
        refuses has no micro-batch count (`micro_batches` 0): its name says the micro-batch size tried
        alone, `-b2-`, never a count it does not have."""
        schedule = {"1f1b": "", "interleaved": "i", "gpipe": "g", "dualpipev": "d"}[self.schedule]
        parts = [
            f"tp{self.tp}{'sp' if self.sequence_parallel else ''}",
            f"cp{self.cp}{CP_SUFFIXES.get(self.cp_variant, '')}",
            f"pp{self.pp}"
            + (f"v{self.vpp}" if self.vpp > 1 else "")
            + schedule
            + (f"g{self.group}" if self.group else ""),
            f"dp{self.dp}",
        ]
        if spec.moe:
            parts.append(
                f"ep{self.ep}" + (f"etp{self.etp}" if self.etp != 1 else "") + ("ov" if self.ep_overlap else "")
            )
        batch = f"b{self.micro_batch_size}" + (f"m{self.micro_batches}" if self.micro_batches else "")
        parts += ["fsdp" if self.fsdp else f"z{self.zero}", batch]
        parts.append(f"r{self.recompute}")
        return "-".join(parts)

    def run_raw(self, spec: SearchSpec, models: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The strategy as a run config (plain data); *models* defaults to the architectures inlined."""
        raw: dict[str, Any] = {
            "name": f"{spec.name}-{self.label(spec)}",
            "framework": spec.framework,
            **(
                {"framework_release": spec.framework_release.model_dump(exclude_none=True)}
                if spec.framework_release.stated
                else {}
            ),
            "models": models if models is not None else spec.model_entries(),
            "parallel": self.parallel(spec),
            "training": self.training(spec),
            "device": spec.device.model_dump(mode="json", exclude_none=True),
        }
        timing = spec.timing.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        if spec.framework == "megatron" and (self.tp == 1 or not self.sequence_parallel):
            timing = _without_tp_comm_overlap(timing)
        if not self.ep_overlap:  # --delay-wgrad-compute is the combined 1F1B's (Megatron-Core asserts it)
            timing.pop("delay_wgrad_compute", None)
        if timing:
            raw["timing"] = timing
        memory = spec.memory.model_dump(mode="json", exclude_defaults=True)
        if memory:  # a search spec could not state it before session 27 (its memory section was refused)
            raw["memory"] = memory
        ppb = spec.ppb.model_dump(mode="json", exclude_defaults=True)
        if ppb:
            raw["ppb"] = ppb
        return raw

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _without_tp_comm_overlap(timing: dict[str, Any]) -> dict[str, Any]:
    """A spec's `--tp-comm-overlap` (timing.overlap.tp, with its userbuffers settings) where a strategy runs no
    sequence parallelism, which Megatron-LM asserts for it (arguments.py `validate_args`, d98e8a64): left out, as
    Megatron-Bridge leaves it out at TP 1 or without sequence parallelism (training/comm_overlap.py
    `CommOverlapConfig`: "Disabling tensor parallel communication overlap due to TP size < 2")."""
    timing = {key: value for key, value in timing.items() if key not in ("ub_sm_margin", "tp_comm_overlap_methods")}
    overlap = {key: value for key, value in timing.get("overlap", {}).items() if key != "tp"}
    timing.pop("overlap", None)
    return {**timing, **({"overlap": overlap} if overlap else {})}


@dataclass(frozen=True)
class Refusal:
    """A strategy the limits, the global batch or the validator refuse: its reason family and its line."""

    strategy: Strategy
    reason: str  # the family: "field: problem" with numbers as N
    message: str  # the validator's own line


def reason_family(field: str | None, problem: str) -> str:
    """What counts refusals alike: the field and the problem, numbers written N (digits inside a name, torch's
    `Schedule1F1B`, `fp8`, `bf16`, stay: families read "ScheduleNFNB" and "bf1N" until December 2026; a number
    with thousands separators is one N: 262,144 and 1,048,576 were "N,N" and "N,N,N", two families, before)."""
    text = re.sub(r"(?<![A-Za-z_\d])\d{1,3}(,\d{3})+(?!\d)|(?<![A-Za-z_\d.])\d+(\.\d+)?", "N", problem)
    return f"{field}: {text}" if field else text


def _powers_of_two(up_to: int) -> list[int]:
    return [2**i for i in range(up_to.bit_length()) if 2**i <= up_to]


def _divisors(n: int, up_to: int) -> list[int]:
    return [d for d in range(1, min(n, up_to) + 1) if n % d == 0]


@dataclass(frozen=True)
class Grid:
    """The values each dimension takes: the spec's limits, else the defaults (docs/search.md)."""

    tp: tuple[int, ...]
    cp: tuple[int, ...]
    pp: tuple[int, ...]
    ep: tuple[int, ...]
    etp: tuple[int, ...]
    vpp: tuple[int, ...]
    schedules: tuple[str, ...]
    shards: tuple[tuple[int, bool], ...]  # (zero, fsdp)
    micro_batch_size: tuple[int, ...]
    sequence_parallel: tuple[bool, ...]
    cp_variant: tuple[str, ...]
    recompute: int  # how many settings
    microbatch_group: tuple[str | int, ...] = ()  # Megatron's interleaved groups (`microbatch_groups`); () none
    most_micro_batches: int = 1  # the global batch: no strategy has more micro-batches
    ep_overlap: tuple[bool, ...] = (False,)  # Megatron-Core's combined 1F1B (`ep_overlaps`)

    @property
    def size(self) -> int:
        """Points of the grid at most (before the batch and the devices rule some out)."""
        groups = self.most_micro_batches if "all" in self.microbatch_group else max(1, len(self.microbatch_group))
        pairs = (len(self.schedules) * len(self.vpp) * groups + 1) * len(self.ep_overlap)
        return math.prod(
            map(len, (self.tp, self.cp, self.pp, self.ep, self.etp, self.shards, self.micro_batch_size))
        ) * (pairs * len(self.sequence_parallel) * len(self.cp_variant) * self.recompute)


def grid(spec: SearchSpec) -> Grid:
    limits, framework = spec.limits, spec.framework
    experts = [s.num_experts for s in spec.specs.values() if s.is_moe]
    # default: the powers of two up to a node; with TP kept in a node, those dividing it (the sizes that can be)
    node = spec.devices_per_node
    tp = limits.tp or [t for t in _powers_of_two(node) if not limits.tp_within_node or node % t == 0]
    pp = limits.pp or _divisors(spec.devices, spec.total_body_layers)
    if experts:
        # default: the powers of two dividing every model's routed experts and the devices (an expert group lies
        # within the devices, `_points`), so no size the devices cannot hold is enumerated
        ep = limits.ep or [
            e for e in _powers_of_two(min(experts)) if all(n % e == 0 for n in experts) and spec.devices % e == 0
        ]
        # MindFormers' capacity MoE (MoEV2) splits each expert over model_parallel: etp follows tp (0), the one
        # setting it runs (`run._check_padding`)
        moe = spec.training.get("moe") or {}
        capacity = framework == "mindformers" and moe.get("dropless", True) is False
        etp = limits.etp or ([0] if capacity else [1])
    else:
        ep, etp = [1], [0]  # a dense model has no expert tensor parallelism: etp follows tp
    zero = limits.zero or DEFAULT_ZERO[framework]
    fsdp = limits.fsdp or DEFAULT_FSDP[framework]
    shards = [(int(z), False) for z in sorted(set(zero))] + ([(3, True)] if True in fsdp else [])
    found = Grid(
        tp=tuple(sorted(set(tp))),
        cp=tuple(sorted(set(limits.cp or DEFAULT_CP))),
        pp=tuple(sorted(set(pp))),
        ep=tuple(sorted(set(ep))),
        etp=tuple(sorted(set(etp))),
        vpp=tuple(sorted(set(limits.vpp or DEFAULT_VPP))),
        schedules=tuple(dict.fromkeys(limits.schedules or DEFAULT_SCHEDULES[framework])),
        shards=tuple(shards),
        micro_batch_size=tuple(sorted(set(limits.micro_batch_size or DEFAULT_MICRO_BATCH_SIZE))),
        sequence_parallel=tuple(dict.fromkeys(limits.sequence_parallel)),
        cp_variant=tuple(dict.fromkeys(limits.cp_variant)),
        recompute=len(spec.recompute_settings),
        microbatch_group=tuple(dict.fromkeys(limits.microbatch_group or DEFAULT_MICROBATCH_GROUP))
        if framework == "megatron"
        else (),
        most_micro_batches=spec.global_batch,
        ep_overlap=tuple(dict.fromkeys(spec.ep_overlap_choices)),
    )
    if found.size > SEARCH_POINTS:
        raise InputError(spec.source, "limits", over(found.size, SEARCH_POINTS, "points in the search's grid"))
    if any(stages > 1 for stages in found.pp) and not schedule_pairs(found.schedules, found.vpp, 2):
        # every pipelined point would be dropped without a word (a grid of none, or of pp 1 alone)
        raise InputError(
            spec.source,
            "limits.vpp",
            f"{', '.join(map(str, found.vpp))} runs none of the schedules {', '.join(found.schedules)} "
            "(1f1b and gpipe take vpp 1, interleaved vpp 2 or more, dualpipev vpp 2), so no pp above 1 is searched",
        )
    if not any(spec.devices % (tp * cp * stages) == 0 for tp in found.tp for cp in found.cp for stages in found.pp):
        said = f"no tp·cp·pp of the limits divides the {spec.devices} devices: the grid holds no strategy"
        raise InputError(spec.source, "limits", said)
    return found


def accepted_groups(stages: int, micro_batches: int) -> list[int]:
    """The micro-batch groups Megatron-LM runs the interleaved schedule with (d98e8a64 schedules.py
    `forward_backward_pipelining_with_interleaving`: P ≤ g ≤ m, else ValueError; a last group
    0 < m mod g < P, else RuntimeError), least first."""
    return [g for g in range(stages, micro_batches + 1) if not 0 < micro_batches % g < stages]


def microbatch_groups(choices: Sequence[str | int], stages: int, micro_batches: int) -> tuple[int, ...]:
    """The groups an interleaved strategy is tried with (0: Megatron's default, P), from the spec's
    `limits.microbatch_group`: `least`, the least group Megatron accepts (P where m is a multiple of P;
    else the least g > P with m mod g 0 or ≥ P: with equal cells every accepted group gives the same
    schedule makespan and a larger one holds more micro-batches, `docs/search.md`); `all`, every group
    it accepts; a number, that group (the validator refuses it where Megatron does). No choices (not
    Megatron) or no micro-batch count: the default alone."""
    if not choices or not micro_batches or micro_batches > MICRO_BATCHES:
        # past ppb's limit the validator refuses the strategy whatever its group: listing the groups of a
        # billion micro-batches took minutes before the first line of progress
        return (0,)
    found: list[int] = []
    for choice in choices:
        if choice == "least":
            least = next((g for g in range(stages, micro_batches + 1) if not 0 < micro_batches % g < stages), None)
            found.append(stages if least is None else least)
        elif choice == "all":
            found += accepted_groups(stages, micro_batches) or [stages]
        else:
            found.append(int(choice))
    return tuple(sorted({0 if group == stages else group for group in found}))


def ep_overlaps(choices: Sequence[bool], schedule: str, pp: int, ep: int) -> tuple[bool, ...]:
    """Whether a point runs Megatron-Core's combined 1F1B, of the spec's choices: only with expert parallelism,
    and without pipelining or interleaved (transformer_config.py `TransformerConfig.__post_init__`, d98e8a64,
    asserts ep > 1 and virtual stages when pp > 1), as a schedule runs only with the chunks it takes. Its
    other conditions (the dispatcher, recompute, precision, MTP) the run-config validator says, with reasons."""
    if ep > 1 and (pp == 1 or schedule == "interleaved"):
        return tuple(choices)
    return (False,)


def schedule_pairs(schedules: tuple[str, ...], vpps: tuple[int, ...], pp: int) -> list[tuple[str, int]]:
    """The (schedule, vpp) pairs that go together: 1F1B and GPipe at vpp 1, interleaved at vpp ≥ 2,
    DualPipeV at vpp 2; without pipeline parallelism only 1F1B at vpp 1."""
    if pp == 1:
        return [("1f1b", 1)]
    pairs = []
    for schedule in schedules:
        for vpp in vpps:
            if (
                (schedule in ("1f1b", "gpipe") and vpp == 1)
                or (schedule == "interleaved" and vpp >= 2)
                or (schedule == "dualpipev" and vpp == 2)
            ):
                pairs.append((schedule, vpp))
    return pairs


def enumerate_strategies(spec: SearchSpec) -> Iterator[Strategy | Refusal]:
    """Every point of the grid in a fixed order: a `Strategy` to validate, or a `Refusal` by the spec's
    limits or the global batch. Points that share tp, cp, ep, etp, micro-batch size and recompute
    setting come together (they share layer times, `ppb_core.search.screen`)."""
    g = grid(spec)
    for tp, cp in itertools.product(g.tp, g.cp):
        sequence_parallel = g.sequence_parallel if tp > 1 else (False,)  # tp 1: nothing to split
        variants = g.cp_variant if cp > 1 else g.cp_variant[:1]  # cp 1: no variant to choose
        for ep, etp, mbs, sp, variant, recompute in itertools.product(
            g.ep, g.etp, g.micro_batch_size, sequence_parallel, variants, range(g.recompute)
        ):
            yield from _points(spec, g, tp, cp, ep, etp, mbs, sp, variant, recompute)


def _points(
    spec: SearchSpec, g: Grid, tp: int, cp: int, ep: int, etp: int, mbs: int, sp: bool, variant: str, recompute: int
) -> Iterator[Strategy | Refusal]:
    batch = spec.global_batch
    expert_tp = etp if etp else tp
    for pp in g.pp:
        if spec.devices % (tp * cp * pp):
            continue
        dp = spec.devices // (tp * cp * pp)
        if (dp * cp * tp) % (ep * expert_tp):
            # the expert groups lie within a stage's dp·cp·tp ranks (`ParallelConfig`'s rule, run.py): ep·etp not
            # dividing them is not a strategy, as tp·cp·pp not dividing the devices is not (no whole group)
            continue
        for schedule, vpp in schedule_pairs(g.schedules, g.vpp, pp):
            micro_batches = batch // (dp * mbs) if batch % (dp * mbs) == 0 else 0
            groups = microbatch_groups(g.microbatch_group, pp, micro_batches) if schedule == "interleaved" else (0,)
            overlaps = ep_overlaps(g.ep_overlap, schedule, pp, ep)
            for (zero, fsdp), group, overlap in itertools.product(
                _shards(g.shards, dp, cp, tp, ep, expert_tp), groups, overlaps
            ):
                strategy = Strategy(
                    tp=tp,
                    cp=cp,
                    pp=pp,
                    dp=dp,
                    vpp=vpp,
                    schedule=schedule,
                    ep=ep,
                    etp=expert_tp,
                    sequence_parallel=sp,
                    cp_variant=variant,
                    zero=zero,
                    fsdp=fsdp,
                    micro_batch_size=mbs,
                    micro_batches=micro_batches,
                    recompute=recompute,
                    group=group,
                    ep_overlap=overlap,
                )
                if not micro_batches:
                    message = (
                        f"{batch} sequences do not split into dp·micro_batch_size = {dp}·{mbs} whole micro-batches"
                    )
                    yield Refusal(strategy, reason_family("training.global_batch", message), message)
                else:
                    yield strategy


def _shards(
    shards: tuple[tuple[int, bool], ...], dp: int, cp: int, tp: int, ep: int, expert_tp: int
) -> tuple[tuple[int, bool], ...]:
    """The (zero, fsdp) choices that differ: with no data-parallel rank to shard over (dp·cp 1, and the experts'
    dp·cp·tp / (ep·etp) 1) every ZeRO stage is the lowest one's plan, its states sharded over a group of one
    (Megatron's distributed optimizer, MindSpore's optimizer parallel), so only the lowest is kept; FSDP stays
    (its units' gathers and launches are its own)."""
    if dp * cp > 1 or (dp * cp * tp) // (ep * expert_tp) > 1:
        return shards
    plain = [shard for shard in shards if not shard[1]]
    return tuple(plain[:1]) + tuple(shard for shard in shards if shard[1])


def validate(spec: SearchSpec, strategy: Strategy) -> RunConfig | Refusal:
    """The strategy's run config, or the validator's refusal (its one line)."""
    try:
        return parse_run_config(strategy.run_raw(spec), spec.source, spec.base_dir)
    except InputError as err:
        return Refusal(strategy, reason_family(err.field, err.problem), err.problem)
