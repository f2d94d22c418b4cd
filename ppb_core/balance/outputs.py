"""What a user pastes: MindFormers/HyperParallel yaml, Megatron-LM flags, a stage table.

The yaml's four lists are those of `yaml_from_internal` and `internal_from_yaml` in
mindspore-ai/hyper-parallel `hyper_parallel/auto_parallel/sapp_ppb/utils/recompute.py` (the same
in MindFormers' `toolkit/pipeline_balance/utils/recompute.py`).

MindFormers counts per (chunk, stage) cell, from the cell's first layer: `recompute` layers are
fully recomputed, `select_recompute` layers run selective recompute, `select_comm_recompute`
layers recompute the tensor-parallel gathers, and `offset` is the cell's layers minus
nb_layer // (P·V). A layer in both selective counts runs BOTH. So a cell's options must come in
the order FULL, BOTH, SLCT or COMM, NONE along its layers, and never SLCT with COMM, which is
what the balancer's program enforces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ppb_core.balance.megatron import quoted, setting_of
from ppb_core.balance.plan import Plan, empty_counts, freeze
from ppb_core.balance.problem import BalanceInput
from ppb_core.config.layout import format_layout
from ppb_core.errors import InputError, shown
from ppb_core.model.switches import CELL_RANK, OPTIONS
from ppb_core.units import counted

YAML_KEYS: tuple[str, ...] = ("offset", "recompute", "select_recompute", "select_comm_recompute")
_N, _S, _C, _B, _F = (OPTIONS.index(o) for o in ("NONE", "SLCT", "COMM", "BOTH", "FULL"))


def says_yaml_keys(framework: str | None, megatron_said: dict[str, Any]) -> bool:
    """Whether a run's plan is said in the MindFormers/HyperParallel yaml keys above: a MindFormers run's,
    and a Megatron run's Megatron-LM cannot say (DualPipeV, a second model: `not_megatrons`), whose only
    form `ppb check` reads is that yaml. A Megatron run's other plans are its flags, a torchtitan run's its
    job TOML lines; the JSON keeps every form."""
    if framework == "mindformers":
        return True
    return framework == "megatron" and not (megatron_said.get("flags") or megatron_said.get("layout_only"))


def yaml_from_cell(options: Sequence[int], nass: int) -> dict[str, int]:
    """One cell's counts (per option, OPTIONS order) as MindFormers' four numbers (`yaml_from_internal`)."""
    return {
        "offset": sum(options) - nass,
        "recompute": options[_F],
        "select_recompute": options[_S] + options[_B] + options[_F],
        "select_comm_recompute": options[_C] + options[_B] + options[_F],
    }


def cell_from_yaml(offset: int, recompute: int, select: int, comm: int, nass: int) -> tuple[int, ...]:
    """The inverse (`internal_from_yaml`): per-option counts of one cell."""
    full = recompute
    both = max(min(select - full, comm - full), 0)
    slct = max(select - full - both, 0)
    comm_only = max(comm - full - both, 0)
    none = offset + nass - slct - comm_only - both - full
    counts = [0] * len(OPTIONS)
    counts[_N], counts[_S], counts[_C], counts[_B], counts[_F] = none, slct, comm_only, both, full
    return tuple(counts)


def nass(problem: BalanceInput) -> int:
    """Layers per cell of the even split the offsets count from: nb_layer // (P·V), MTP layers counted
    (MindFormers' LayerSetting is built with num_layers + mtp_num_layers, transformer_block.py)."""
    return (problem.layers.nb_body_layers + problem.mtp_layers) // (problem.stages * problem.chunks)


def _mtp_in(problem: BalanceInput, chunk: int, stage: int) -> int:
    """MTP layers the yaml counts in a cell: all of them in the tail's (the model's last layers)."""
    return problem.mtp_layers if (chunk, stage) == (problem.mtp_cell or problem.tail_cell) else 0


def _shape(values: list[list[int]], chunks: int) -> list[int] | list[list[int]]:
    """MindFormers writes one list per stage without interleave and one list per chunk with it."""
    return values[0] if chunks == 1 else values


# ppb's cp_variant as MindFormers' `parallel_config.context_parallel_algo` (modules/transformer/transformer.py
# `ContextParallelAlgo`, fd4deebc: colossalai_cp, the ring and its default, or ulysses_cp; the run config refuses
# the others under MindFormers). Unsaid until session 31, so a Ulysses strategy ran MindFormers' default ring.
MINDFORMERS_CP_ALGO = {"ring": "colossalai_cp", "ulysses": "ulysses_cp"}


def interleave_keys(chunks: int) -> dict[str, Any]:
    """The MindFormers yaml keys that run *chunks* chunks a stage, beside the four lists: none at one chunk.

    MindFormers builds its layers over `model_config.pp_interleave_num` chunks only when MindSpore's
    `pipeline_interleave` is on (mindformers/models/utils.py `LayerSetting.__init__`, commit fd4deebc:
    `pp_interleave_num if use_pp_interleave else 1`, then `_check_inputs` refuses an offset of more rows
    than that); the yaml's `parallel` section is MindSpore's `set_auto_parallel_context`
    (core/context/parallel.py), whose `pipeline_config` takes both `pipeline_interleave` and
    `pipeline_scheduler` (mindspore `_auto_parallel_context.py` `set_pipeline_config`, a05ce588; "1f1b" its
    interleaved 1F1B). Until session 31 a plan of 2 chunks printed the offsets alone, which MindFormers refuses."""
    if chunks == 1:
        return {}
    return {
        "model": {"model_config": {"pp_interleave_num": chunks}},
        "parallel": {"pipeline_config": {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}},
    }


def to_yaml(plan: Plan) -> dict[str, Any]:
    p = plan.problem
    base = nass(p)
    table = {key: [[0] * p.stages for _ in range(p.chunks)] for key in YAML_KEYS}
    for v in range(p.chunks):
        for s in range(p.stages):
            options = list(plan.cell_options(v, s))
            options[_N] += _mtp_in(p, v, s)  # the MTP layers come last in the cell and run NONE
            for key, value in yaml_from_cell(options, base).items():
                table[key][v][s] = value
    return {key: _shape(table[key], p.chunks) for key in YAML_KEYS}


def _grid(value: Any, key: str, problem: BalanceInput, layers: list[list[int]] | None) -> list[list[int]]:
    """A yaml value as [chunk][stage] counts: a bool (all or none of each cell's layers), or lists."""
    p = problem
    if isinstance(value, bool) or value is None:
        if key == "offset":
            raise InputError(None, key, "must be a number or a list of numbers")
        if not value:
            return [[0] * p.stages for _ in range(p.chunks)]
        if layers is None:
            raise InputError(None, key, "True needs the cells' layer counts (give offset first)")
        return [row[:] for row in layers]
    if isinstance(value, int):
        if key != "offset":
            raise InputError(None, key, "must be a bool or a list")
        return [[value] * p.stages for _ in range(p.chunks)]
    if not isinstance(value, list):  # a float, a text or a mapping (a TypeError traceback)
        wanted = "an integer or a list of integers" if key == "offset" else "a bool or a list"
        raise InputError(None, key, f"must be {wanted}, got {shown(value)}")
    flat = bool(value) and not any(isinstance(entry, list) for entry in value)
    if flat and p.chunks > 1 and len(value) == p.stages:
        return _flat_over_chunks(value, key, p, layers)
    rows = [value] if p.chunks == 1 and flat else value
    if len(rows) != p.chunks or any(not isinstance(row, list) or len(row) != p.stages for row in rows):
        raise InputError(None, key, f"must have {counted(p.chunks, 'list')} of {counted(p.stages, 'entry', 'entries')}")
    grid = []
    for v, row in enumerate(rows):
        out = []
        for s, entry in enumerate(row):
            if isinstance(entry, bool):
                if layers is None:
                    raise InputError(None, f"{key}[{v}][{s}]", f"must be an integer, got {entry}")
                out.append(layers[v][s] if entry else 0)
            elif isinstance(entry, int):
                if layers is not None and not 0 <= entry <= max(layers[v][s], 0):
                    raise InputError(
                        None, f"{key}[{v}][{s}]", f"{entry} layers; the cell (chunk {v}, stage {s}) has {layers[v][s]}"
                    )
                out.append(entry)
            else:
                raise InputError(None, f"{key}[{v}][{s}]", f"must be an integer or a bool, got {shown(entry)}")
        grid.append(out)
    return grid


def _flat_over_chunks(
    value: list[Any], key: str, problem: BalanceInput, layers: list[list[int]] | None
) -> list[list[int]]:
    """One list of P under interleave, as MindFormers reads it (mindformers/models/utils.py `LayerSetting`,
    fd4deebc1): an offset is the same in every chunk (`np.broadcast_to(offset, (pp_interleave_num, pp))`);
    a recompute count is the stage's, handed out one layer a chunk in turn, chunk 0 first, while a chunk
    has layers left (`_alloc_recompute_layer`), True every layer of the stage."""
    p = problem
    grid = [[0] * p.stages for _ in range(p.chunks)]
    for s, entry in enumerate(value):
        if isinstance(entry, bool) and layers is None:
            raise InputError(None, f"{key}[{s}]", f"must be an integer, got {entry}")
        if not isinstance(entry, int):
            wanted = "an integer" if layers is None else "an integer or a bool"
            raise InputError(None, f"{key}[{s}]", f"must be {wanted}, got {shown(entry)}")
        if layers is None:
            for v in range(p.chunks):
                grid[v][s] = entry
            continue
        stage = sum(max(layers[v][s], 0) for v in range(p.chunks))
        left = stage if entry is True else int(entry)
        if not 0 <= left <= stage:
            raise InputError(None, f"{key}[{s}]", f"{entry} layers; stage {s} has {stage} over its chunks")
        while left:
            for v in range(p.chunks):
                if left and grid[v][s] < layers[v][s]:
                    grid[v][s] += 1
                    left -= 1
    if layers is None:  # `_check_inputs` sums the offset as given, before it is broadcast
        total, cells_n = p.layers.nb_body_layers + p.mtp_layers, p.stages * p.chunks
        if sum(value) != total % cells_n:
            raise InputError(
                None,
                "offset",
                f"sums to {sum(value)}; MindFormers needs {total} layers mod {cells_n} cells = {total % cells_n} "
                f"(one list of {p.stages} is every chunk's)",
            )
    return grid


def plan_from_yaml(problem: BalanceInput, yaml: dict[str, Any]) -> Plan:
    """The plan the four yaml values describe: cells filled with body types in pipeline order, each
    cell's layers under FULL, BOTH, SLCT/COMM then NONE from its first layer."""
    p = problem
    base = nass(p)
    offsets = _grid(yaml.get("offset", 0), "offset", p, None)
    layers = [[offsets[v][s] + base for s in range(p.stages)] for v in range(p.chunks)]
    total = p.layers.nb_body_layers + p.mtp_layers
    for v, s in p.cells:
        if layers[v][s] < 0:
            raise InputError(
                None, f"offset[{v}][{s}]", f"{offsets[v][s]} leaves the cell {layers[v][s]} layers (even split {base})"
            )
        if layers[v][s] > total:  # before a cell's layers are walked one by one (10^30 of them hung)
            raise InputError(
                None, f"offset[{v}][{s}]", f"{shown(offsets[v][s])} gives the cell more layers than the model's {total}"
            )
    held = sum(layers[v][s] for v, s in p.cells)
    if held != total:  # LayerSetting._check_inputs: the offsets sum to num_layers % (pp · pp_interleave_num)
        cells_n = p.stages * p.chunks
        raise InputError(
            None,
            "offset",
            f"sums to {sum(map(sum, offsets))}: the cells hold {held} layers, the model {total}; MindFormers needs "
            f"{total} mod {cells_n} cells = {total % cells_n}",
        )
    recompute = _grid(yaml.get("recompute"), "recompute", p, layers)
    select = _grid(yaml.get("select_recompute"), "select_recompute", p, layers)
    comm = _grid(yaml.get("select_comm_recompute"), "select_comm_recompute", p, layers)
    counts = empty_counts(p)
    remaining = [body.nb_layer for body in p.layers.bodies]
    body = 0
    for v, s in p.cells:
        cell = list(cell_from_yaml(offsets[v][s], recompute[v][s], select[v][s], comm[v][s], base))
        if min(cell) < 0:
            raise InputError(None, f"cell (chunk {v}, stage {s})", f"counts give a negative option count: {cell}")
        # the cell's last layers are its MTP layers, which ppb prices without recompute
        mtp = _mtp_in(p, v, s)
        for k in (_N, _S, _C, _B, _F):
            taken = min(mtp, cell[k])
            cell[k] -= taken
            mtp -= taken
        if mtp:
            raise InputError(None, "offset", f"cell (chunk {v}, stage {s}) holds fewer layers than its MTP layers")
        # the cell's layers from its first: options by rank, body types in order
        sequence = [k for k in sorted(range(len(OPTIONS)), key=lambda k: CELL_RANK[OPTIONS[k]]) for _ in range(cell[k])]
        for k in sequence:
            while body < len(remaining) and remaining[body] == 0:
                body += 1
            if body == len(remaining):
                raise InputError(None, "offset", "the cells hold more layers than the descriptions have")
            counts[body][v][s][k] += 1
            remaining[body] -= 1
    if any(remaining):
        raise InputError(
            None,
            "offset",
            f"{counted(sum(remaining), 'layer')} of the descriptions "
            f"{'is' if sum(remaining) == 1 else 'are'} in no cell",
        )
    return Plan(p, freeze(counts))


# ---------------------------------------------------------------------------------------------
# Megatron-LM


def virtual_stages(plan: Plan) -> list[str]:
    """Each (chunk, stage) cell in model order as Megatron-Core's layout writes it: `E` on the first,
    a `t` per body layer, an `m` per MTP layer and `L` on the last (Megatron always has both ends)."""
    p = plan.problem
    texts = []
    last = len(p.cells) - 1
    for position, (v, s) in enumerate(p.cells):
        text = "E" if position == 0 else ""
        text += "t" * plan.cell_layers(v, s)
        if (v, s) == p.mtp_cell:
            text += "m" * p.mtp_layers
        if position == last:
            text += ("" if p.mtp_cell else "m" * p.mtp_layers) + "L"
        texts.append(text)
    return texts


def cell_option_counts(plan: Plan) -> list[dict[str, int]]:
    """Per cell in model order: option → body layers."""
    return [{OPTIONS[k]: n for k, n in enumerate(plan.cell_options(v, s)) if n} for v, s in plan.problem.cells]


def not_megatrons(problem: BalanceInput) -> str | None:
    """Why a plan of this problem is not Megatron-LM's to say (None when it is): the schedule or the
    sub-models. `megatron` prints no flags for it, and `ppb check` reads none."""
    if problem.schedule_name == "dualpipev":
        return "Megatron-LM does not run DualPipeV"
    models = {m for body in problem.layers.bodies for m in (body.models or (body.model_name,)) if m}
    if len(models) > 1:
        return (
            "Megatron-Core's flexible layout places decoder layers only (validate_layer_layout refuses "
            "encoder layers): a second model in the pipeline is not Megatron's to say"
        )
    return None


def group_flags(problem: BalanceInput) -> list[str]:
    """Megatron's micro-batch group flag for the group the plan was timed and held at, when not its default."""
    if problem.group is not None and problem.schedule_name == "interleaved":
        return ["--microbatch-group-size-per-virtual-pipeline-stage", str(problem.group)]
    return []


# The launch's flags a pasted layout replaces: arguments.py `validate_args` (d98e8a64) takes no more than one of
# the layout, --num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank ("No more than
# one of the following arguments can be set at the same time"), and transformer_config.py `__post_init__` no
# layout beside an uneven first or last stage or the embedding or loss counted in the split ("cannot be set with
# other pipeline layout arguments")
LAYOUT_REPLACES = (
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
)


def megatron(plan: Plan, modules: Sequence[str] | None = None) -> dict[str, Any]:
    """`--pipeline-model-parallel-layout` and the recompute flags Megatron-Core takes for this plan
    (`ppb_core.balance.megatron` holds its rules), shell-quoted in `flags`: the whole of it, or None
    when Megatron-Core cannot say the plan's recompute (then `layout_only` holds the layout, marked
    as not runnable alone).

    *modules* are the `--recompute-modules` SLCT stands for (known when the run config states its
    recompute in Megatron's words); without them a plan using SLCT is not Megatron's to say.
    """
    p = plan.problem
    unsaid = not_megatrons(p)
    if unsaid is not None:
        return {"layout": None, "flags": None, "recompute": None, "recompute_expressible": False, "note": unsaid}
    layout = format_layout(virtual_stages(plan))
    layout_args = ["--pipeline-model-parallel-layout", layout, *group_flags(p)]
    cells = cell_option_counts(plan)
    setting = setting_of(cells, selective=modules is not None)
    result: dict[str, Any] = {
        "layout": layout,
        "replaces": list(LAYOUT_REPLACES),
        # what pasting the layout into a launch asks (`megatron_text` and the report print it)
        "replaces_note": f"the layout replaces any {', '.join(LAYOUT_REPLACES)} of the launch: Megatron-LM "
        "refuses them beside a layout",
    }
    if setting is not None:
        recompute = setting.flags(modules)
        result.update(
            recompute=recompute,
            recompute_expressible=True,
            setting=setting.describe(),
            flags=quoted([*layout_args, *recompute]),
        )
        if setting.name == "none":
            # Megatron-LM's default is no recompute, so the flags carry none; a launch that already has
            # --recompute-* flags (a run config in Megatron's words, an imported script) keeps them when
            # only these are pasted in, and runs another plan than this one
            result["note"] = "the plan recomputes nothing: drop every --recompute-* flag the launch has"
    else:
        used = [o for o in OPTIONS if any(cell.get(o) for cell in cells)]
        if "COMM" in used or "BOTH" in used:
            why = "Megatron-Core has no module that re-sends the tensor-parallel gathers (COMM, BOTH)"
        elif used == ["SLCT"]:
            why = (
                "SLCT here is ppb's switch set; write training.recompute in Megatron's words "
                "({granularity: selective, modules: [...]}) to plan with modules Megatron-Core takes"
            )
        else:
            why = (
                f"the plan uses {', '.join(used)} on different layers; Megatron-Core takes one setting for "
                "every layer (none, full, full on the first N layers of every virtual stage, or selective)"
            )
        # the layout alone runs every layer with no recompute: not this plan, and it may not fit, so
        # nothing here is to paste as it stands (`result.report` puts the fastest plan Megatron-Core
        # can say under `flags` when there is one)
        result.update(
            recompute=None, recompute_expressible=False, note=why, flags=None, layout_only=quoted(layout_args)
        )
    if p.chunks == 1 and p.stages > 2:
        layers = [plan.cell_layers(0, s) for s in range(p.stages)]
        # transformer_config.py (d98e8a64) `__post_init__`, uneven PP: "num_layers_in_first_pipeline_stage must be
        # larger than 0" (and the last's): a plan leaving the first or last stage no layer says it by the layout
        # alone (it printed `--decoder-last-pipeline-num-layers 0`, which Megatron-LM and ppb check refuse)
        if len(set(layers[1:-1])) == 1 and not p.mtp_layers and min(layers[0], layers[-1]) > 0:
            # instead of the layout, never with it (TransformerConfig refuses both together)
            result["first_last"] = quoted(
                [
                    "--decoder-first-pipeline-num-layers",
                    str(layers[0]),
                    "--decoder-last-pipeline-num-layers",
                    str(layers[-1]),
                ]
            )
    return result


# ---------------------------------------------------------------------------------------------
# The table per stage


def stage_rows(plan: Plan) -> list[dict[str, Any]]:
    """Per stage: layers, layers per option, peak memory, work per micro-batch, idle share."""
    p = plan.problem
    rows = []
    for s in range(p.stages):
        options = {o: 0 for o in p.options}
        for v in range(p.chunks):
            for k, n in enumerate(plan.cell_options(v, s)):
                if n:
                    options[OPTIONS[k]] += n
        rows.append(
            {
                "stage": s,
                "layers": sum(plan.cell_layers(v, s) for v in range(p.chunks)),
                "layers_per_chunk": [plan.cell_layers(v, s) for v in range(p.chunks)],
                "options": options,
                "memory_mb": plan.stage_memory_mb[s],
                "time": plan.stage_time(s),
                "bubble": plan.bubble(s),
            }
        )
    return rows


def cells(plan: Plan) -> list[list[dict[str, Any]]]:
    """[chunk][stage]: the layers of each body type under each option."""
    p = plan.problem
    grid = []
    for v in range(p.chunks):
        row = []
        for s in range(p.stages):
            layers = {}
            for index, body in enumerate(p.layers.bodies):
                counts = plan.counts[index][v][s]
                if sum(counts):
                    layers[body.name] = {OPTIONS[k]: n for k, n in enumerate(counts) if n}
            row.append(
                {"layers": layers, "options": {OPTIONS[k]: n for k, n in enumerate(plan.cell_options(v, s)) if n}}
            )
        grid.append(row)
    return grid
