"""A census as the memory model's activation pricer for one model (the seam `MemoryModel` offers).

`CensusActivations` has the methods of `ppb_core.memory.ActivationFormulas` (`terms`,
`full_terms`, `state_terms`): body kinds are priced from the census, one term per part it
measured (the module and op that made the bytes, with the switch that governs them), plus the
inputs a recompute keeps; HEAD and TAIL, which a census does not measure, stay with the
formulas. `held_bytes` is what the backward of a body layer holds at most on one rank, for the
working sets (`census_terms`). `census_pricers(run)` reads every census a run config names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ppb_core.census.record import Census, Kept, KindCensus, RankSplit, kept_bytes, read_census
from ppb_core.errors import InputError
from ppb_core.memory.activations import ActivationFormulas, ActivationTerm
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.kinds import BodyKind, HeadKind, TailKind, kind_to_dict
from ppb_core.model.switches import LayerType

CENSUS_TERM = "census."


class CensusActivations:
    """Prices one model's body kinds from its census (*path* names the file in errors and output)."""

    def __init__(self, census: Census, path: str, dtype: str | None = None) -> None:
        if dtype is not None and census.dtype != dtype:
            raise InputError(path, "dtype", f"the census was measured in {census.dtype}; the run trains in {dtype}")
        self.census = census
        self.path = path
        self._formulas = ActivationFormulas()
        self._kinds: dict[BodyKind, KindCensus] = {}

    @property
    def source(self) -> str:
        return f"census:{self.path}"

    def describe(self) -> dict[str, Any]:
        """What the run's output says of this pricer."""
        census = self.census
        return {
            "source": "census",
            "file": self.path,
            "attention": census.attention,
            "dtype": census.dtype,
            "micro_batch_size": census.micro_batch_size,
            "experts_implementation": census.experts_implementation,
            "kinds": [
                {
                    "kind": kind.name,
                    "layer_index": kind.layer_index,
                    "acting": list(kind.acting),
                    **({"experts": dict(kind.experts)} if kind.experts else {}),
                }
                for kind in census.kinds
            ],
        }

    def kind_census(self, kind: BodyKind) -> KindCensus:
        found = self._kinds.get(kind)
        if found is None:
            found = self.census.for_kind(kind_to_dict(kind))
            if found is None:
                measured = ", ".join(k.name for k in self.census.kinds)
                raise InputError(
                    self.path,
                    "kinds",
                    f"no census of the run's layer kind {kind.name!r} as the run "
                    f"builds it (measured: {measured}{self._differing(kind)}); measure it with ppb census",
                )
            self._kinds[kind] = found
        return found

    def _differing(self, kind: BodyKind) -> str:
        """Where the measured kind of the same name differs from the run's (`(measured: dense)` beside the run's
        'dense' said nothing), its first few fields: `; its dense differs in hidden_size, num_heads`."""
        wanted = kind_to_dict(kind)
        same = next((k for k in self.census.kinds if k.name == kind.name), None)
        if same is None:
            return ""
        had = dict(same.kind)
        fields = sorted(key for key in wanted.keys() | had.keys() if wanted.get(key) != had.get(key))
        shown_fields = ", ".join(fields[:4]) + (f" and {len(fields) - 4} more" if len(fields) > 4 else "")
        return f"; its {kind.name} differs in {shown_fields}" if fields else ""

    # --- ActivationFormulas' methods ---------------------------------------------------------

    def terms(self, kind: BodyKind | HeadKind | TailKind, setup: MemorySetup) -> tuple[ActivationTerm, ...]:
        return self.state_terms(kind, setup, LayerType.NOT_REC_LAYER, None)

    def full_terms(self, kind: BodyKind, setup: MemorySetup) -> tuple[ActivationTerm, ...]:
        return self.state_terms(kind, setup, LayerType.FULL_REC_LAYER, None)

    def state_terms(
        self,
        kind: BodyKind | HeadKind | TailKind,
        setup: MemorySetup,
        state: LayerType,
        switches: Mapping[str, int] | None,
    ) -> tuple[ActivationTerm, ...]:
        """What the layer keeps in *state*, part by part; *switches* act only on SEL_REC_LAYER."""
        if not isinstance(kind, BodyKind):
            return self._formulas.state_terms(kind, setup, state, switches)
        census = self.kind_census(kind)
        split = _split(setup)
        experts = census.model_experts
        bc = setup.dtype_bytes

        def priced(kept: Kept) -> float:
            return kept_bytes(kept, setup.tokens, setup.seq_length, split, experts)

        if state is LayerType.FULL_REC_LAYER:
            return (ActivationTerm(f"{CENSUS_TERM}input", None, priced(census.full) / bc, bc),)
        recompute = census.recomputed(switches) if state is LayerType.SEL_REC_LAYER else frozenset()
        terms = [
            ActivationTerm(f"{CENSUS_TERM}{part.name}", part.switch, priced(Kept(**{part.bucket: part.bytes})) / bc, bc)
            for part in census.parts
            if part.switch not in recompute
        ]
        total = priced(census.settings[recompute].kept)
        rest = total - sum(term.bytes for term in terms)
        if abs(rest) > 1e-9 * max(1.0, abs(total)):
            # What the recompute needs kept that nothing kept already (the residual stream before a
            # recomputed norm, projections before recomputed rotary); with nothing recomputed, what
            # the parts' own fits leave of the layer's.
            name = "recompute_inputs" if recompute else "unattributed"
            terms.append(ActivationTerm(f"{CENSUS_TERM}{name}", None, rest / bc, bc))
        return tuple(terms)

    # --- the working set ---------------------------------------------------------------------

    def held_bytes(self, kind: BodyKind, setup: MemorySetup) -> float:
        """The most the backward of one micro-batch holds on one rank: kept tensors, gradients, temporaries."""
        return self.kind_census(kind).held_bytes(setup.tokens, setup.seq_length, _split(setup))


def _split(setup: MemorySetup) -> RankSplit:
    return RankSplit(tp=setup.tp, sp=setup.sp, ep=setup.ep, routed_factor=setup.routing_factor)


def census_pricers(run: Any) -> dict[str, CensusActivations]:
    """The census pricer of every model of *run* (a `RunConfig`) whose config names a census file."""
    pricers: dict[str, CensusActivations] = {}
    for index, sub in enumerate(run.models):
        if sub.census is None:
            continue
        path = Path(sub.census)
        if not path.is_absolute():
            path = Path(run.base_dir) / path
        try:
            census = read_census(path)
        except InputError as err:
            raise InputError(err.source or run.source, err.field or f"models.{index}.census", err.problem) from None
        pricers[sub.name] = CensusActivations(census, str(sub.census), run.training.dtype)
    return pricers
