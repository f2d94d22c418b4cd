"""The layer walk: each sub-model's HEAD, BODY layers and TAIL, and the (chunk, stage) cell each sits in.

Body layers of all sub-models, in pipeline order, fill the P·V cells in the order the schedule
runs them (chunk by chunk; DualPipe-V's second chunk comes back from the last stage). The
default split is uniform, the extra layers one each to the cells holding neither head nor tail,
earliest first (`uniform_split`, the balancer's uniform baselines' rule).
A sub-model's HEAD sits just before its first body layer and its TAIL just after its last.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ppb_core.config.layout import format_layout
from ppb_core.config.run import RunConfig
from ppb_core.config.spec import VisionSpec
from ppb_core.errors import InputError
from ppb_core.model.kinds import (
    BODY,
    HEAD,
    TAIL,
    WHOLE,
    BodyKind,
    HeadKind,
    LayerKind,
    TailKind,
    body_kind,
    head_kind,
    norm_apart,
    standalone_parts,
    tail_kind,
    vision_kinds,
)
from ppb_core.schedules import cell_order


@dataclass(frozen=True)
class Layer:
    model_name: str
    node: str  # HEAD | BODY | TAIL
    kind: LayerKind
    index: int  # body layer index within its model; -1 for the HEAD, num_layers for the TAIL
    chunk: int
    stage: int


@dataclass(frozen=True)
class KindSlot:
    """One distinct (model, node, kind) and how many layers of the walk are of it."""

    model_name: str
    node: str
    kind: LayerKind
    count: int


@dataclass(frozen=True)
class LayerWalk:
    stages: int
    chunks: int
    layers: tuple[Layer, ...]
    cell_counts: tuple[tuple[int, ...], ...] = field(default=())  # [chunk][stage] body layers

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def distinct(self) -> list[KindSlot]:
        """Each distinct (model, node, kind) in order of first appearance, with its count."""
        counts: dict[tuple[str, str, LayerKind], int] = {}
        for layer in self.layers:
            key = (layer.model_name, layer.node, layer.kind)
            counts[key] = counts.get(key, 0) + 1
        return [KindSlot(m, n, k, c) for (m, n, k), c in counts.items()]

    def in_cell(self, chunk: int, stage: int) -> list[Layer]:
        return [layer for layer in self.layers if layer.chunk == chunk and layer.stage == stage]


# Per framework whose plan it is: whether the head's and the tail's cells may hold no body layer
# (None: SAPP's program, which exempts them; `balance.problem.BalanceInput.reserved_cells` says why).
FRAMEWORK_RULES: dict[str | None, bool] = {None: True, "megatron": True, "torchtitan": True, "mindformers": False}


def end_cells(stages: int, chunks: int, schedule: str, framework: str | None, mtp: bool) -> frozenset[tuple[int, int]]:
    """The head's and the tail's cells where they may hold no body layer (the balancer's
    `reserved_cells` for a run with a head and a tail): both where the framework allows it, the
    tail's alone where MTP layers sit there (MindFormers' LayerSetting counts them)."""
    cells = cell_order(schedule, stages, chunks)
    ends = set()
    if FRAMEWORK_RULES[framework]:
        ends |= {cells[0], cells[-1]}
    if mtp:
        ends.add(cells[-1])
    return frozenset(ends)


def uniform_split(
    layers: int,
    stages: int,
    chunks: int,
    schedule: str = "1f1b",
    ends: frozenset[tuple[int, int]] = frozenset(),
    framework: str | None = None,
) -> list[list[int]]:
    """Body layers per [chunk][stage]: layers // cells in every cell, the remainder one each to the
    cells in pipeline order, earliest first, the cells in *ends* (the head's and tail's, which
    carry the embedding or the loss already) after every other. Under torchtitan, its own default
    split where it gives every cell a layer (`torchtitan_split`).

    One rule for `ppb estimate` (a run without a layout) and the balancer's uniform baselines, so
    both price the same split. Megatron-Core has no rule of its own to follow for an uneven split:
    without a layout or first/last-stage counts it asserts `num_layers % pipeline_model_parallel_size
    == 0` (and the per-rank count divisible by the virtual stages), Megatron-LM d98e8a64,
    megatron/core/transformer/transformer_block.py `get_num_layers_to_build`; there every rule gives
    layers // cells everywhere."""
    cells = cell_order(schedule, stages, chunks)
    counts = [[0] * stages for _ in range(chunks)]
    titan = torchtitan_split(layers, len(cells)) if framework == "torchtitan" else None
    if titan is not None:
        for (chunk, stage), size in zip(cells, titan, strict=True):
            counts[chunk][stage] = size
        return counts
    base, extra = divmod(layers, len(cells))
    counts = [[base] * stages for _ in range(chunks)]
    order = [cell for cell in cells if cell not in ends] + [cell for cell in cells if cell in ends]
    for chunk, stage in order[:extra]:
        counts[chunk][stage] += 1
    return counts


def refused_split(run: RunConfig) -> str | None:
    """Why the run's framework would not start the run as its config places the layers, with the split to
    state instead; None where it would. Megatron-LM d98e8a64, without `--pipeline-model-parallel-layout` or
    an uneven first or last stage, asserts `num_layers % pipeline_model_parallel_size == 0`
    (megatron/training/arguments.py `validate_args`) and a rank's share divisible by its virtual stages
    (megatron/core/transformer/transformer_block.py `get_num_layers_to_build`); a run config has only
    `parallel.layout` for the others (an import writes `--decoder-first/last-pipeline-num-layers` and
    `--account-for-*-in-pipeline-split` as one). MindFormers (fd4deebc, mindformers/models/utils.py
    `LayerSetting._check_inputs`, and parallel_core's twin) refuses offsets that do not sum to
    `num_layers % (pp · pp_interleave_num)`, so its default offset 0 on an uneven split. Until session 28
    `ppb estimate` priced such a run on `uniform_split`, a split neither runs. One language model on a
    schedule of theirs only (DualPipeV and several sub-models are not said in their words). MindFormers counts
    the MTP layers in the split, the last cell's (until session 32 ppb left them out: DeepSeek-V3's 61 + 1 over
    16 stages was said to sum to 13, offsets MindFormers refuses)."""
    par = run.parallel
    if run.framework not in ("megatron", "mindformers") or par.layout is not None or par.pp == 1:
        return None
    if len(run.models) != 1 or par.schedule == "dualpipev" or run.is_vision(run.model_names[0]):
        return None
    layers = run.total_body_layers
    mtp = run.spec(run.model_names[0]).mtp_layers
    # MindFormers' LayerSetting splits num_layers + mtp_num_layers, the MTP layers last (transformer_block.py
    # `LayerSetting(config.num_layers + mtp_num_layers, ...)` at fd4deebc; research/deepseek3 deepseek2_model.py
    # the same with mtp_depth); Megatron-LM's check counts the decoder layers alone
    split = layers + mtp if run.framework == "mindformers" else layers
    cells = par.pp * par.vpp
    counts = uniform_split(layers, par.pp, par.vpp, par.schedule, run_ends(run), run.framework)
    order = cell_order(par.schedule, par.pp, par.vpp)
    if not (split % par.pp or (split // par.pp) % par.vpp):
        if run.framework == "megatron" or not mtp:
            return None
        even = {cell: split // cells - (mtp if cell == order[-1] else 0) for cell in order}
        if all(counts[chunk][stage] == even[chunk, stage] for chunk, stage in order):
            return None  # MindFormers' offset 0 is the split ppb walks
        counts = [[even[chunk, stage] for stage in range(par.pp)] for chunk in range(par.vpp)]
    stages = ["t" * counts[chunk][stage] for chunk, stage in order]  # model order
    stages[0] = "E" + stages[0]
    stages[-1] += "m" * mtp + "L"
    share = f"pp {par.pp}" + (f" × {par.vpp} virtual stages" if par.vpp > 1 else "")
    layout = f"layout: '{format_layout(stages)}'"
    if run.framework == "megatron":
        return (
            f"{layers} layers do not split evenly over {share}: Megatron-LM refuses it without a layout "
            f"(arguments.py validate_args); state the one you launch, e.g. {layout}"
        )
    average = split // cells
    offsets = [
        [counts[chunk][stage] + (mtp if (chunk, stage) == order[-1] else 0) - average for stage in range(par.pp)]
        for chunk in range(par.vpp)
    ]
    offset = offsets[0] if par.vpp == 1 else offsets
    if split % cells == 0:  # MindFormers runs offset 0; ppb's walk places the MTP layers otherwise
        return (
            f"{layers} layers and {mtp} MTP split evenly over {share} as MindFormers places them (LayerSetting "
            f"counts both: {split}), not as ppb does without a layout; state it: {layout} (offset {offset})"
        )
    counted = f"{layers} layers" + (f" and {mtp} MTP (LayerSetting counts both: {split})" if mtp else "")
    return (
        f"{counted} do not split evenly over {share}: MindFormers refuses offset 0 (LayerSetting: the "
        f"offsets sum to the remainder, {split % cells}); state the split you launch, e.g. {layout} "
        f"(offset {offset})"
    )


def torchtitan_split(layers: int, cells: int) -> list[int] | None:
    """Body layers per cell, in pipeline order, as torchtitan v0.2.2 splits a model it is given no
    `module_fqns_per_model_part` for: pipeline_parallel.py `generate_llm_fqn_per_model_part` at its
    defaults input_weight = output_weight = 1, the embedding and the norm-and-output counted as a
    layer each, (layers + 2) // cells per stage, the first (layers + 2) % cells stages one more
    (Llama-3.1-8B over 4 stages: 8, 9, 8, 7). None where torchtitan refuses the split (more stages than
    weighted layers) or a stage would hold its embedding or output alone, which ppb's walk does not place."""
    if cells == 1:
        return [layers]
    each, extra = divmod(layers + 2, cells)
    sizes = [each + (index < extra) - (index == 0) - (index == cells - 1) for index in range(cells)]
    return sizes if each >= 1 and min(sizes) >= 1 else None


def run_ends(run: RunConfig) -> frozenset[tuple[int, int]]:
    """The run's `end_cells`: its framework's rule, and whether its language model has MTP layers."""
    par = run.parallel
    mtp = any(not run.is_vision(name) and run.spec(name).mtp_layers for name in run.model_names)
    return end_cells(par.pp, par.vpp, par.schedule, run.framework, mtp)


def walk(
    run: RunConfig,
    cell_counts: Sequence[Sequence[int]] | None = None,
    mtp_cell: tuple[int, int] | None = None,
    fused_tail: bool = False,
) -> LayerWalk:
    """Every layer of the run in pipeline order, placed in its cell.

    *cell_counts* ([chunk][stage] body layers) replaces the run's own split (its `parallel.layout`,
    else the uniform split), e.g. with a plan's. A layout also places the HEAD (`E`) in the first
    cell and the TAIL (`L`, with the MTP layers) in the last, empty of decoder layers or not.

    Where the MTP layers run apart from the loss (Megatron-Core's standalone MTP: the run's layout
    says so, or *mtp_cell* does for *cell_counts*), the TAIL is three layers (`kinds.standalone_parts`):
    the final norm in the last body layer's cell, the MTP part in their cell and the output part in
    the loss's. *fused_tail* keeps one TAIL
    whatever the layout: the balancer's descriptions price the MTP layers with the loss.
    """
    par = run.parallel
    stages, chunks = par.pp, par.vpp
    total = run.total_body_layers
    layout = run.layout_cells() if cell_counts is None else None
    if cell_counts is None:
        mtp_cell = run.layout_mtp_cell()
    if fused_tail:
        mtp_cell = None
    if cell_counts is not None:
        counts = [list(row) for row in cell_counts]
    else:
        # torchtitan's own split for one language model (it splits no vision tower with it)
        framework = run.framework if len(run.models) == 1 else None
        counts = (
            layout
            if layout is not None
            else uniform_split(total, stages, chunks, par.schedule, run_ends(run), framework)
        )
    if len(counts) != chunks or any(len(row) != stages for row in counts):
        raise InputError(run.source, "cell_counts", f"expected {chunks} chunks of {stages} stages")
    if sum(map(sum, counts)) != total or any(c < 0 for row in counts for c in row):
        raise InputError(run.source, "cell_counts", f"counts must be non-negative and add up to {total} layers")
    cells: list[tuple[int, int]] = []
    for chunk, stage in cell_order(par.schedule, stages, chunks):
        cells.extend([(chunk, stage)] * counts[chunk][stage])

    layers: list[Layer] = []
    position = 0
    for sub in run.models:
        head, bodies, tail = model_kinds(run, sub.name)
        first_cell = cells[position]
        layers.append(Layer(sub.name, HEAD, head, -1, *first_cell))
        for index, kind in enumerate(bodies):
            layers.append(Layer(sub.name, BODY, kind, index, *cells[position]))
            position += 1
        if mtp_cell is not None and isinstance(tail, TailKind) and tail.mtp_layers:
            norm_part, mtp_part, tail = standalone_parts(tail)
            layers.append(Layer(sub.name, TAIL, norm_part, len(bodies), *cells[position - 1]))
            layers.append(Layer(sub.name, TAIL, mtp_part, len(bodies), *mtp_cell))
        layers.append(Layer(sub.name, TAIL, tail, len(bodies), *cells[position - 1]))
    if layout is not None:  # one language model (config._check_layout): E first, L last
        order = cell_order(par.schedule, stages, chunks)
        layers[0] = replace(layers[0], chunk=order[0][0], stage=order[0][1])
        layers[-1] = replace(layers[-1], chunk=order[-1][0], stage=order[-1][1])
    if not fused_tail:
        layers = final_norm_with_last_decoder(run, layers)
    return LayerWalk(stages, chunks, tuple(layers), tuple(tuple(row) for row in counts))


def final_norm_with_last_decoder(run: RunConfig, layers: Sequence[Layer]) -> list[Layer]:
    """Under Megatron, a model with MTP layers whose fused TAIL (`mL`) sits in another cell than its last
    decoder layer has its final norm there (`kinds.norm_apart`; transformer_block.py
    `has_final_layernorm_in_this_stage`, d98e8a64). The balancer's descriptions keep the norm in the
    TAIL (`walk(fused_tail=True)`): they charge the TAIL to the last cell whatever the plan, and
    which cell holds the last decoder layer is the plan's."""
    if run.framework != "megatron":
        return list(layers)
    result: list[Layer] = []
    for layer in layers:
        kind = layer.kind
        if layer.node == TAIL and isinstance(kind, TailKind) and kind.mtp_layers and kind.part == WHOLE:
            last = max(
                (x for x in layers if x.model_name == layer.model_name and x.node == BODY), key=lambda x: x.index
            )
            if (last.chunk, last.stage) != (layer.chunk, layer.stage):
                norm, rest = norm_apart(kind)
                result += [replace(layer, kind=norm, chunk=last.chunk, stage=last.stage), replace(layer, kind=rest)]
                continue
        result.append(layer)
    return result


def walk_by_model(
    run: RunConfig, model_counts: Mapping[str, Sequence[Sequence[int]]], mtp_cell: tuple[int, int] | None = None
) -> LayerWalk:
    """Every layer of the run, each sub-model's body layers filling the cells by its own [chunk][stage] counts.

    A plan whose body types hold layers of several sub-models at once (a combined body stands for
    one layer of each part) places each sub-model along the cells on its own; each sub-model's
    HEAD sits in its first layer's cell and its TAIL in its last's. A sub-model without counts
    is refused. *mtp_cell*: the MTP layers stand apart from the loss there (as in `walk`).
    """
    par = run.parallel
    stages, chunks = par.pp, par.vpp
    order = cell_order(par.schedule, stages, chunks)
    totals = [[0] * stages for _ in range(chunks)]
    layers: list[Layer] = []
    for sub in run.models:
        head, bodies, tail = model_kinds(run, sub.name)
        counts = model_counts.get(sub.name)
        if counts is None or len(counts) != chunks or any(len(row) != stages for row in counts):
            raise InputError(run.source, "cell_counts", f"{sub.name}: expected {chunks} chunks of {stages} stages")
        if sum(map(sum, counts)) != len(bodies) or any(c < 0 for row in counts for c in row):
            raise InputError(run.source, "cell_counts", f"{sub.name}: counts must add up to its {len(bodies)} layers")
        cells = [cell for cell in order for _ in range(counts[cell[0]][cell[1]])]
        layers.append(Layer(sub.name, HEAD, head, -1, *cells[0]))
        for index, (kind, cell) in enumerate(zip(bodies, cells, strict=True)):
            layers.append(Layer(sub.name, BODY, kind, index, *cell))
            totals[cell[0]][cell[1]] += 1
        if mtp_cell is not None and isinstance(tail, TailKind) and tail.mtp_layers:
            norm_part, mtp_part, tail = standalone_parts(tail)
            layers.append(Layer(sub.name, TAIL, norm_part, len(bodies), *cells[-1]))
            layers.append(Layer(sub.name, TAIL, mtp_part, len(bodies), *mtp_cell))
        layers.append(Layer(sub.name, TAIL, tail, len(bodies), *cells[-1]))
    return LayerWalk(stages, chunks, tuple(layers), tuple(tuple(row) for row in totals))


def model_kinds(run: RunConfig, model_name: str) -> tuple[LayerKind, list[BodyKind], LayerKind]:
    """A sub-model's HEAD kind, each body layer's kind in order, and its TAIL kind.

    A vision tower's kinds carry its own sequence (`RunConfig.vision`); a language model's the
    run's dropout override and its (padded) vocabulary.
    """
    spec = run.spec(model_name)
    if isinstance(spec, VisionSpec):
        head, bodies, tail = vision_kinds(spec, run.vision(model_name))
        return head, list(bodies), tail
    dropout, vocab = run.training.dropout, run.vocab_size(model_name)
    bodies = [body_kind(spec, index, dropout) for index in range(spec.num_layers)]
    start, end = run.timing.fp8_bf16_layers if run.timing.matmul_dtype == "fp8" else (0, 0)
    for index in (*range(start), *range(spec.num_layers - end, spec.num_layers)):
        # Megatron-LM d98e8a64 fp8_utils.py `is_first_last_bf16_layer`: the first `start` and last `end` of
        # the model's layers (global indices) run outside the fp8 context
        bodies[index] = replace(bodies[index], name=f"{bodies[index].name}_bf16", high_precision=True)
    replicated = run.framework == "mindformers" and run.parallel.vocab_emb_dp and run.parallel.tp > 1
    head = head_kind(spec, vocab, dropout, vocab_replicated=replicated)
    return head, bodies, tail_kind(spec, vocab, dropout, vocab_replicated=replicated)


def is_body(kind: LayerKind) -> bool:
    return isinstance(kind, BodyKind)


__all__ = [
    "BODY",
    "HEAD",
    "TAIL",
    "BodyKind",
    "HeadKind",
    "KindSlot",
    "Layer",
    "LayerWalk",
    "TailKind",
    "torchtitan_split",
    "uniform_split",
    "walk",
]
