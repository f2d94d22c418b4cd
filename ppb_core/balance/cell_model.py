"""The integer program over cell choices, for when a stage's choices are too many to list.

A stage's listed choices (`choices.Catalogue.stage_choices`) are the product of its chunks' cell
choices, which grows as choices^V: at V ≥ 3 the listing may run past its budget. Memory is linear
in the cells' choices (a stage holds Σ_v parameters + in-flight(v)·activation at each in-flight
vector), so the program can take one binary x[v, s, c] per cell choice instead and write each
stage's memory as a row per in-flight vector. The rows that follow (cell times D, placement,
body order, paths) are `ChoiceModel`'s, written per cell. Nothing is reduced across a stage's
chunks, so the program is larger and its relaxation no tighter; the memory rows are checked in
floating point, so every plan read back is checked again exactly (`admits`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ppb_core.balance.choice_model import ChoiceModel
from ppb_core.balance.choices import Catalogue, CellChoice
from ppb_core.balance.highs import INF
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput

Cell = tuple[int, int]  # (chunk, stage)


def cell_choices(problem: BalanceInput, catalogue: Catalogue, work_limit: float, k_max: int) -> dict[Cell, list]:
    """Every cell's choices of at most k_max layers whose forward + backward (head and tail
    included) is within the stage work limit and whose parameters fit; the head's and tail's
    cells may stay empty where the framework allows it."""
    p = problem
    found: dict[Cell, list[CellChoice]] = {}
    compositions = catalogue.compositions(k_max)
    for v, s in p.cells:
        fixed = p.fixed_time("F", v, s) + p.fixed_time("B", v, s)
        options = [catalogue.empty_cell()] if (v, s) in p.reserved_cells else []
        for types, counts in compositions:
            if not catalogue.reachable((v, s), types, counts):
                continue
            room = p.memory_mb - p.constant_memory_mb + p.relief_mb(s, types)  # the most relief with these types
            for choice in catalogue.cell_choices(types, counts):
                if choice.forward + choice.backward + fixed <= work_limit and choice.parameter_mb <= room:
                    options.append(choice)
        catalogue.budget.spend(len(options))
        found[(v, s)] = options
    return found


class CellModel(ChoiceModel):
    """`ChoiceModel`'s program with a binary per cell choice, memory as rows (module docstring)."""

    def __init__(self, problem: BalanceInput, cells: dict[Cell, list[CellChoice]], tau: float) -> None:
        self.p = problem
        self.cell_choices = cells
        self.choices = []  # no stage listing: tie-breaking, which works on stage choices, is not run
        self.tau = tau
        self.columns = []
        self.rows = []
        self.x = {cell: [self._column(0, 1, True) for _ in options] for cell, options in cells.items()}
        self.y = []
        self.top = self._column(0, INF, False)
        self.g = {}
        self.duration = {}
        self.residue: dict[Cell, tuple[list[int], int]] = {}  # (z per residue, q) per cell of chunk ≥ 1
        # per stage whose relief varies: (h per kind group, the relief r in MB), `_relief`
        self.relief: dict[int, tuple[list[int], int]] = {}
        self._durations()
        self._placement()
        self._memory()
        self._order()
        self._rank_counts()

    def _durations(self) -> None:
        for (v, s), options in self.cell_choices.items():
            for kind in ("F", "B"):
                column = self.duration[(kind, v, s)] = self._column(0, INF, False)
                fixed = self.p.fixed_time(kind, v, s) / self.tau
                terms = {column: 1.0}
                for x, choice in zip(self.x[(v, s)], options, strict=True):
                    length = choice.forward if kind == "F" else choice.backward
                    if length:
                        terms[x] = -length / self.tau
                self._row(fixed, fixed, terms)

    def _placement(self) -> None:
        """One choice per cell; every body type's layers placed."""
        for columns in self.x.values():
            self._row(1, 1, dict.fromkeys(columns, 1.0))
        for body, layers in enumerate(self.p.layers.bodies):
            terms = {}
            for cell, options in self.cell_choices.items():
                for x, choice in zip(self.x[cell], options, strict=True):
                    if choice.body_count(body):
                        terms[x] = float(choice.body_count(body))
            self._row(layers.nb_layer, layers.nb_layer, terms)

    def _relief(self, s: int) -> int | None:
        """The column of stage s's relief (MB, `BalanceInput.relief_mb`), None where it is the same whatever
        the stage holds. h[g] ≥ the choices of each cell holding kind group g (so 1 where the stage holds g;
        nothing else pulls it up), and for every set S of groups r ≤ R(S) + (R(∅) − R(S))·Σ_{g∈S}(1 − h[g]):
        binding at S = the groups held, and loose (≥ R(∅)) for any S holding one more. R never grows with S,
        so r ≤ R(held) exactly in every integer solution."""
        p = self.p
        row = p.relief_row(s)
        if max(row) == min(row):
            return None
        workspace = p.workspace
        assert workspace is not None
        groups = max(workspace.group_of) + 1
        h = [self._column(0, 1, False) for _ in range(groups)]
        r = self._column(0, row[0], False)
        self.relief[s] = (h, r)
        for v in range(p.chunks):
            for g in range(groups):
                terms = {
                    x: 1.0
                    for x, choice in zip(self.x[(v, s)], self.cell_choices[(v, s)], strict=True)
                    if any(workspace.group_of[b] == g for b in choice.bodies)
                }
                if terms:
                    self._row(-INF, 0, {**terms, h[g]: -1.0})
        for mask in range(1, 1 << groups):
            slack = row[0] - row[mask]
            terms = {r: 1.0}
            held = [g for g in range(groups) if mask >> g & 1]
            for g in held:
                terms[h[g]] = slack
            self._row(-INF, row[mask] + slack * len(held), terms)
        return r

    def _memory(self) -> None:
        """Per stage and in-flight vector: parameters + in flight × activations, head and tail too, less the
        stage's relief (`_relief`), within the device (in units of the device's memory)."""
        p = self.p
        scale = p.memory_mb
        for s in range(p.stages):
            relief = self._relief(s)
            fixed = p.relief_row(s)[0] if relief is None else 0.0
            for vector in p.vectors[s]:
                terms: dict[int, float] = {}
                for v in range(p.chunks):
                    for x, choice in zip(self.x[(v, s)], self.cell_choices[(v, s)], strict=True):
                        held = choice.parameter_mb + vector[v] * choice.activation_mb
                        if held:
                            terms[x] = held / scale
                room = p.memory_mb - p.constant_memory_mb + fixed - p.head_stage_memory_mb(s, vector)
                if relief is not None:
                    terms[relief] = -1.0 / scale
                self._row(-INF, room / scale, terms)

    def _order(self) -> None:
        """g[b, p] = 1 from the first cell holding a type after b on (as `ChoiceModel._order`)."""
        p = self.p
        for b in range(len(p.layers.bodies) - 1):
            for position, cell in enumerate(p.cells):
                g = self.g[(b, position)] = self._column(0, 1, True)
                options = self.cell_choices[cell]
                later = {x: 1.0 for x, c in zip(self.x[cell], options, strict=True) if any(t > b for t in c.bodies)}
                self._row(-INF, 0, {**later, g: -1.0})
                if position:
                    previous = self.g[(b, position - 1)]
                    self._row(0, INF, {g: 1.0, previous: -1.0})
                    early = {
                        x: 1.0 for x, c in zip(self.x[cell], options, strict=True) if any(t <= b for t in c.bodies)
                    }
                    self._row(-INF, 1, {**early, previous: 1.0})

    def _rank_counts(self) -> None:
        """Under a rank-wide setting (torchtitan's every N-th block, `CellChoice.residues`) a cell's
        choice holds only at the counts of its rank's earlier layers its residues name: chunk 0 at
        none before it; for chunk v ≥ 1 one binary z[r] per residue mod N (one of them) and an integer
        q with Σ_{w<v} layers(w, s) = N·q + Σ_r r·z[r], each choice at most the z of its residues."""
        p = self.p
        period = next((len(c.residues) for cs in self.cell_choices.values() for c in cs if c.residues), 1)
        if period == 1:
            return
        for s in range(p.stages):
            for v in range(p.chunks):
                if v == 0:
                    z: list[int] = []
                else:
                    z = [self._column(0, 1, True) for _ in range(period)]
                    q = self._column(0, INF, True)
                    self.residue[(v, s)] = (z, q)
                    self._row(1, 1, dict.fromkeys(z, 1.0))
                    terms = {q: -float(period)}
                    for r in range(1, period):
                        terms[z[r]] = -float(r)
                    for w in range(v):
                        for x, choice in zip(self.x[(w, s)], self.cell_choices[(w, s)], strict=True):
                            if choice.layers:
                                terms[x] = float(choice.layers)
                    self._row(0, 0, terms)
                for x, choice in zip(self.x[(v, s)], self.cell_choices[(v, s)], strict=True):
                    if choice.residues is None:
                        continue
                    held = [z[r] for r in range(period) if choice.residues[r]] if z else []
                    if v == 0 and choice.residues[0]:
                        continue
                    self._row(-INF, 0, {x: 1.0, **dict.fromkeys(held, -1.0)})

    def _taken(self, values: Sequence[float]) -> dict[Cell, CellChoice]:
        return {
            cell: options[max(range(len(options)), key=lambda c: values[self.x[cell][c]])]
            for cell, options in self.cell_choices.items()
        }

    def plan(self, values: Sequence[float]) -> Plan:
        counts = empty_counts(self.p)
        for (v, s), choice in self._taken(values).items():
            for body, row in zip(choice.bodies, choice.counts, strict=True):
                counts[body][v][s] = list(row)
        return Plan(self.p, freeze(counts))

    def admits(self, plan: Plan) -> bool:
        """The memory rows were met in floating point: the plan must also fit exactly."""
        return plan.fits and not plan.problems()

    def assignment(self, plan: Plan, top: float) -> list[float] | None:
        """Every column's value for a plan whose cells are all listed (None otherwise)."""
        p = self.p
        values = [0.0] * len(self.columns)
        for (v, s), options in self.cell_choices.items():
            wanted = tuple(tuple(plan.counts[b][v][s]) for b in range(len(plan.counts)))
            found = next(
                (
                    c
                    for c, choice in enumerate(options)
                    if all(
                        wanted[b] == (choice.counts[choice.bodies.index(b)] if b in choice.bodies else (0,) * len(row))
                        for b, row in enumerate(wanted)
                    )
                ),
                None,
            )
            if found is None:
                return None
            values[self.x[(v, s)][found]] = 1.0
            for kind in ("F", "B"):
                time = options[found].forward if kind == "F" else options[found].backward
                values[self.duration[(kind, v, s)]] = (time + p.fixed_time(kind, v, s)) / self.tau
        values[self.top] = top
        self._order_values(plan, values)
        for (v, s), (z, q) in self.residue.items():
            before = sum(plan.cell_layers(w, s) for w in range(v))
            values[z[before % len(z)]], values[q] = 1.0, float(before // len(z))
        for s, (h, r) in self.relief.items():
            held = plan.stage_bodies(s)
            groups = {p.workspace.group_of[b] for b in held} if p.workspace is not None else set()
            for g, column in enumerate(h):
                values[column] = 1.0 if g in groups else 0.0
            values[r] = p.relief_mb(s, held)
        return values
