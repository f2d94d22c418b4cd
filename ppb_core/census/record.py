"""The census record: what a layer kind keeps, measured, and the file that carries it (JSON, versioned).

Readable without torch. A census file holds, for each body kind of one model, the bytes per
token of one micro-batch the layer keeps for its backward under every setting of the switches
that act on it (and under full recompute), split the way a tensor-parallel rank keeps them, the
working set of its backward, the parts (module and op) the bytes come from, and the fit's
residuals. `KindActivations` is its record at one sequence length, as the memory model prices it.

Bytes per token are `base + per_seq · seq_length + per_expert · routed_experts` (see
`ppb_core.census.fit`). Buckets (`ppb_core.census.attribution.BUCKETS`): `saved` is what TP
leaves whole (sequence parallelism splits it), `saved_tp` what TP splits; `routed` and
`routed_tp` are the same for the routed experts. A rank keeps, for *tokens* tokens of its
micro-batch (`micro · s · b / cp`):

    tokens · (saved / sp + saved_tp / t)
    + tokens · routed_factor · (routed / ep + routed_tp) / t

as the memory model counts routed rows (`ppb_core.memory.activations.routed_rows`): a rank's
experts process the k copies of its TP group's share of the tokens (times the routing's
imbalance, or capacity factor, *routed_factor*), whatever ep and etp are; of the tokens on the
hidden side that the all-to-alls carry (dispatched to the experts, combined back), the rank
keeps as activations the 1/ep that never left it, the memory model counting the rest as EP
buffers (and the rows expert TP all-gathers as TP buffers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ppb_core import limits
from ppb_core.census.attribution import BUCKETS
from ppb_core.errors import InputError, shown
from ppb_core.io import read_json
from ppb_core.model.switches import HYPER_SELECTIVE_REC_OP, SWITCHES

CENSUS_FORMAT = "ppb-census"
CENSUS_VERSION = 1


@dataclass(frozen=True)
class PerToken:
    """Bytes per token of one micro-batch: `base + per_seq · seq_length + per_expert · experts`."""

    base: float = 0.0
    per_seq: float = 0.0
    per_expert: float = 0.0

    def at(self, seq_length: int, experts: int = 0) -> float:
        return self.base + self.per_seq * seq_length + self.per_expert * experts

    def __add__(self, other: PerToken) -> PerToken:
        return PerToken(self.base + other.base, self.per_seq + other.per_seq, self.per_expert + other.per_expert)

    def __sub__(self, other: PerToken) -> PerToken:
        return PerToken(self.base - other.base, self.per_seq - other.per_seq, self.per_expert - other.per_expert)

    def to_dict(self) -> dict[str, float]:
        return {"base": _round(self.base), "per_seq": _round(self.per_seq), "per_expert": _round(self.per_expert)}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> PerToken:
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected {{base, per_seq, per_expert}}")
        extra = set(data) - {"base", "per_seq", "per_expert"}
        if extra:
            raise ValueError(f"{where}: unknown field {shown(sorted(map(str, extra))[0])}")
        return cls(*(_number(data.get(name, 0.0), f"{where}.{name}") for name in ("base", "per_seq", "per_expert")))


def _round(value: float) -> float:
    """Fitted bytes to a ten-thousandth of a byte: below that an exact fit's residue is noise."""
    rounded = round(value, 4)
    return 0.0 if rounded == 0 else rounded


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a number, got {shown(value)}")
    if abs(value) > limits.SAPP_NUMBER:
        raise ValueError(f"{where}: {limits.over(abs(value), limits.SAPP_NUMBER, 'bytes per token')}")
    return float(value)


def _count(value: Any, where: str, least: int, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ValueError(f"{where}: expected an integer from {least:,} to {most:,}, got {shown(value)}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > 1024:
        raise ValueError(f"{where}: expected a string, got {shown(value)}")
    return value


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected an object, got {shown(value)}")
    return value


def _items(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list, got {shown(value)}")
    return value


@dataclass(frozen=True)
class Kept:
    """What a layer keeps per token, bucket by bucket."""

    saved: PerToken = PerToken()
    saved_tp: PerToken = PerToken()
    routed: PerToken = PerToken()
    routed_tp: PerToken = PerToken()

    def bucket(self, name: str) -> PerToken:
        return getattr(self, name)

    def __sub__(self, other: Kept) -> Kept:
        return Kept(*(self.bucket(name) - other.bucket(name) for name in BUCKETS))

    def to_dict(self) -> dict[str, Any]:
        return {name: self.bucket(name).to_dict() for name in BUCKETS}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Kept:
        if not isinstance(data, Mapping) or set(data) - set(BUCKETS):
            raise ValueError(f"{where}: expected the buckets {', '.join(BUCKETS)}")
        return cls(*(PerToken.from_dict(data.get(name, {}), f"{where}.{name}") for name in BUCKETS))


@dataclass(frozen=True)
class RankSplit:
    """How one rank's share of the layer's tokens and widths is set (see the module docstring)."""

    tp: int = 1
    sp: int = 1
    ep: int = 1
    routed_factor: float = 1.0


def kept_bytes(kept: Kept, tokens: float, seq_length: int, split: RankSplit, experts: int = 0) -> float:
    """Bytes one rank keeps for *tokens* tokens of a micro-batch of sequences of *seq_length*."""

    def at(name: str) -> float:
        return kept.bucket(name).at(seq_length, experts)

    layer = at("saved") / split.sp + at("saved_tp") / split.tp
    routed = split.routed_factor * (at("routed") / split.ep + at("routed_tp")) / split.tp
    return tokens * (layer + routed)


@dataclass(frozen=True)
class WorkingLine:
    """What the backward holds at one point of its run, per token: TP-whole and TP-split."""

    whole: PerToken = PerToken()
    tp: PerToken = PerToken()

    def at(self, seq_length: int, split: RankSplit, experts: int = 0) -> float:
        return self.whole.at(seq_length, experts) / split.sp + self.tp.at(seq_length, experts) / split.tp

    def to_dict(self) -> dict[str, Any]:
        return {"whole": self.whole.to_dict(), "tp": self.tp.to_dict()}

    @classmethod
    def from_dict(cls, data: Any, where: str) -> WorkingLine:
        if not isinstance(data, Mapping) or set(data) - {"whole", "tp"}:
            raise ValueError(f"{where}: expected {{whole, tp}}")
        return cls(
            PerToken.from_dict(data.get("whole", {}), f"{where}.whole"),
            PerToken.from_dict(data.get("tp", {}), f"{where}.tp"),
        )


@dataclass(frozen=True)
class Setting:
    """The layer selective with *recompute* switched to 0: what it keeps and which projections it reruns."""

    recompute: frozenset[str]
    kept: Kept
    attention_mm_share: float = 0.0
    ffn_mm_share: float = 0.0


@dataclass(frozen=True)
class Part:
    """What one module's op makes that the plain layer keeps."""

    name: str  # "<module path>:<aten op>", "input" for the layer's input
    switch: str | None
    bucket: str
    bytes: PerToken


@dataclass(frozen=True)
class KindActivations:
    """A kind's census at one sequence length, bytes per token at one micro-batch.

    `saved`/`saved_tp` the plain layer keeps (TP-whole / TP-split), `working`/`working_tp` its
    backward holds at most, `selective`/`selective_tp` it keeps under HyperParallel's selective
    policy, which reruns `selective_attention_mm` and `selective_ffn_mm` of the attention's and
    the FFN's projections; `ops`/`ops_tp` what recomputing each switch alone frees. `routed*`
    (our addition) are the routed experts' parts, priced by their own layout.
    """

    saved: float
    saved_tp: float
    working: float
    working_tp: float
    seq_length: int
    selective: float = 0.0
    selective_tp: float = 0.0
    selective_attention_mm: float = 0.0
    selective_ffn_mm: float = 0.0
    ops: Mapping[str, float] = field(default_factory=dict)
    ops_tp: Mapping[str, float] = field(default_factory=dict)
    routed: float = 0.0
    routed_tp: float = 0.0
    selective_routed: float = 0.0
    selective_routed_tp: float = 0.0


@dataclass(frozen=True)
class KindCensus:
    """One body kind's census."""

    name: str
    kind: Mapping[str, Any]  # `ppb_core.model.kinds.kind_to_dict` of the kind measured
    layer_index: int
    acting: tuple[str, ...]
    settings: Mapping[frozenset[str], Setting]
    full: Kept
    # What the backward holds at the points of its run that can be the most (for some sequence
    # length and split); the working set is the largest of them.
    working: tuple[WorkingLine, ...]
    parts: tuple[Part, ...] = ()
    experts: Mapping[str, Any] | None = None  # {"model": E, "measured": [..], "scaling": "..."}
    fit: Mapping[str, Any] = field(default_factory=dict)

    @property
    def model_experts(self) -> int:
        return int(self.experts["model"]) if self.experts else 0

    def recomputed(self, switches: Mapping[str, int] | None) -> frozenset[str]:
        """The acting switches *switches* set to 0 (a switch not stated keeps its op)."""
        stated = switches or {}
        return frozenset(name for name in self.acting if not int(bool(stated.get(name, 1))))

    def kept(self, switches: Mapping[str, int] | None, full: bool = False) -> Kept:
        """What the layer keeps per token: selective with *switches* (None: plain), or fully recomputed."""
        if full:
            return self.full
        return self.settings[self.recomputed(switches)].kept

    def setting(self, switches: Mapping[str, int] | None) -> Setting:
        return self.settings[self.recomputed(switches)]

    def held_line(self, seq_length: int, split: RankSplit | None = None) -> WorkingLine:
        """The point of the backward that holds the most for one rank at *seq_length*."""
        split = split or RankSplit()
        return max(self.working, key=lambda line: line.at(seq_length, split, self.model_experts), default=WorkingLine())

    def held_bytes(self, tokens: float, seq_length: int, split: RankSplit | None = None) -> float:
        """The most the backward of one micro-batch of *tokens* tokens holds on one rank."""
        split = split or RankSplit()
        return tokens * self.held_line(seq_length, split).at(seq_length, split, self.model_experts)

    def activations(self, seq_length: int, split: RankSplit | None = None) -> KindActivations:
        """The record at *seq_length*, at the model's own routed expert count.

        The working set's split is that of the backward's fullest point on a rank of *split*.
        """
        experts = self.model_experts
        plain = self.settings[frozenset()].kept
        policy = self.setting(HYPER_SELECTIVE_REC_OP)
        held = self.held_line(seq_length, split)

        def at(value: PerToken) -> float:
            return value.at(seq_length, experts)

        ops: dict[str, float] = {}
        ops_tp: dict[str, float] = {}
        for name in self.acting:
            freed = plain - self.settings[frozenset({name})].kept
            ops[name] = at(freed.saved)
            ops_tp[name] = at(freed.saved_tp)
        return KindActivations(
            saved=at(plain.saved),
            saved_tp=at(plain.saved_tp),
            working=at(held.whole),
            working_tp=at(held.tp),
            seq_length=seq_length,
            selective=at(policy.kept.saved),
            selective_tp=at(policy.kept.saved_tp),
            selective_attention_mm=policy.attention_mm_share,
            selective_ffn_mm=policy.ffn_mm_share,
            ops=ops,
            ops_tp=ops_tp,
            routed=at(plain.routed),
            routed_tp=at(plain.routed_tp),
            selective_routed=at(policy.kept.routed),
            selective_routed_tp=at(policy.kept.routed_tp),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": dict(self.kind),
            "layer_index": self.layer_index,
            "experts": dict(self.experts) if self.experts else None,
            "acting": list(self.acting),
            "settings": [
                {
                    "recompute": [n for n in SWITCHES if n in s.recompute],
                    "kept": s.kept.to_dict(),
                    "attention_mm_share": _round(s.attention_mm_share),
                    "ffn_mm_share": _round(s.ffn_mm_share),
                }
                for s in sorted(self.settings.values(), key=lambda s: (len(s.recompute), _order(s.recompute)))
            ],
            "full": self.full.to_dict(),
            "working": [line.to_dict() for line in self.working],
            "parts": [
                {"name": p.name, "switch": p.switch, "bucket": p.bucket, "bytes": p.bytes.to_dict()} for p in self.parts
            ],
            "fit": dict(self.fit),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> KindCensus:
        data = _mapping(data, where)
        for name in ("name", "kind", "layer_index", "acting", "settings", "full", "working"):
            if name not in data:
                raise ValueError(f"{where}.{name}: missing")
        acting = tuple(_items(data["acting"], f"{where}.acting"))
        if any(not isinstance(name, str) or name not in SWITCHES for name in acting) or len(set(acting)) != len(acting):
            raise ValueError(f"{where}.acting: expected distinct switches of {', '.join(SWITCHES)}")
        settings: dict[frozenset[str], Setting] = {}
        for index, entry in enumerate(_items(data["settings"], f"{where}.settings")):
            at = f"{where}.settings.{index}"
            entry = _mapping(entry, at)
            named = _items(entry.get("recompute", []), f"{at}.recompute")
            if not all(isinstance(name, str) for name in named) or not set(named) <= set(acting):
                raise ValueError(f"{at}.recompute: switches not acting on this kind")
            recompute = frozenset(named)
            settings[recompute] = Setting(
                recompute,
                Kept.from_dict(entry.get("kept"), f"{at}.kept"),
                _number(entry.get("attention_mm_share", 0.0), f"{at}.attention_mm_share"),
                _number(entry.get("ffn_mm_share", 0.0), f"{at}.ffn_mm_share"),
            )
        if len(settings) != 2 ** len(acting):
            raise ValueError(f"{where}.settings: expected all {2 ** len(acting)} settings of {list(acting)}")
        parts = []
        for index, part in enumerate(_items(data.get("parts", []), f"{where}.parts")):
            at = f"{where}.parts.{index}"
            part = _mapping(part, at)
            switch = part.get("switch")
            if switch is not None and switch not in SWITCHES:
                raise ValueError(f"{at}.switch: expected a switch or null, got {shown(switch)}")
            if part.get("bucket") not in BUCKETS:
                raise ValueError(f"{at}.bucket: expected one of {', '.join(BUCKETS)}, got {shown(part.get('bucket'))}")
            parts.append(
                Part(
                    _text(part.get("name"), f"{at}.name"),
                    switch,
                    part["bucket"],
                    PerToken.from_dict(part.get("bytes"), f"{at}.bytes"),
                )
            )
        experts = data.get("experts")
        if experts is not None:
            experts = _mapping(experts, f"{where}.experts")
            if "model" not in experts:
                raise ValueError(f"{where}.experts.model: missing")
            _count(experts["model"], f"{where}.experts.model", 0, limits.EXPERTS)
        return cls(
            name=_text(data["name"], f"{where}.name"),
            kind=dict(_mapping(data["kind"], f"{where}.kind")),
            layer_index=_count(data["layer_index"], f"{where}.layer_index", 0, limits.LAYERS),
            acting=acting,
            settings=settings,
            full=Kept.from_dict(data["full"], f"{where}.full"),
            working=tuple(
                WorkingLine.from_dict(line, f"{where}.working.{i}")
                for i, line in enumerate(_items(data["working"], f"{where}.working"))
            ),
            parts=tuple(parts),
            experts=dict(experts) if experts else None,
            fit=dict(_mapping(data.get("fit", {}), f"{where}.fit")),
        )


def _order(names: Iterable[str]) -> tuple[int, ...]:
    return tuple(sorted(SWITCHES.index(name) for name in names))


@dataclass(frozen=True)
class Census:
    """A census file: every body kind of one model, measured one way."""

    kinds: tuple[KindCensus, ...]
    model_type: str
    attention: str
    dtype: str
    micro_batch_size: int
    source: str = ""
    experts_implementation: str = "grouped_mm"
    shapes: tuple[tuple[int, int], ...] = ()
    versions: Mapping[str, str] = field(default_factory=dict)

    def kind_named(self, name: str) -> KindCensus | None:
        return next((kind for kind in self.kinds if kind.name == name), None)

    def for_kind(self, kind_dict: Mapping[str, Any]) -> KindCensus | None:
        """The census of the kind *kind_dict* describes (`kind_to_dict`), if it was measured."""
        return next((kind for kind in self.kinds if dict(kind.kind) == dict(kind_dict)), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": CENSUS_FORMAT,
            "version": CENSUS_VERSION,
            "source": self.source,
            "model_type": self.model_type,
            "attention": self.attention,
            "dtype": self.dtype,
            "micro_batch_size": self.micro_batch_size,
            "experts_implementation": self.experts_implementation,
            "shapes": [list(shape) for shape in self.shapes],
            "versions": dict(self.versions),
            "kinds": [kind.to_dict() for kind in self.kinds],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"

    @classmethod
    def from_dict(cls, data: Any, source: str = "<census>") -> Census:
        if not isinstance(data, Mapping):
            raise InputError(source, None, "expected a JSON object")
        if data.get("format") != CENSUS_FORMAT:
            raise InputError(source, "format", f"not a census file (expected format {CENSUS_FORMAT!r})")
        if data.get("version") != CENSUS_VERSION:
            raise InputError(
                source, "version", f"version {shown(data.get('version'))}; this ppb reads {CENSUS_VERSION}"
            )
        try:
            kinds = tuple(
                KindCensus.from_dict(kind, f"kinds.{i}")
                for i, kind in enumerate(_items(data.get("kinds", []), "kinds"))
            )
            if not kinds:
                raise ValueError("kinds: no kind measured")
            shapes = []
            for index, shape in enumerate(_items(data.get("shapes", []), "shapes")):
                shape = _items(shape, f"shapes.{index}")
                if len(shape) != 2:
                    raise ValueError(f"shapes.{index}: expected [sequence length, micro-batch size]")
                shapes.append(
                    (
                        _count(shape[0], f"shapes.{index}.0", 1, limits.SEQUENCE),
                        _count(shape[1], f"shapes.{index}.1", 1, limits.MICRO_BATCH_SIZE),
                    )
                )
            versions = _mapping(data.get("versions", {}), "versions")
            return cls(
                kinds=kinds,
                model_type=_text(data["model_type"], "model_type"),
                attention=_text(data["attention"], "attention"),
                dtype=_text(data["dtype"], "dtype"),
                micro_batch_size=_count(data["micro_batch_size"], "micro_batch_size", 1, limits.MICRO_BATCH_SIZE),
                source=_text(data.get("source", ""), "source"),
                experts_implementation=_text(data.get("experts_implementation", ""), "experts_implementation"),
                shapes=tuple(shapes),
                versions={_text(k, "versions"): _text(v, f"versions.{k}") for k, v in versions.items()},
            )
        except KeyError as err:
            raise InputError(source, str(err.args[0]), "missing") from None
        except (TypeError, ValueError) as err:
            field_name, _, problem = str(err).partition(": ")
            raise InputError(source, field_name if problem else None, problem or str(err)) from None


def read_census(path: str | Path) -> Census:
    """A census file, validated; any problem is an InputError naming the file and the field."""
    return Census.from_dict(read_json(path), str(path))
