"""Megatron-Core's `--pipeline-model-parallel-layout`: which virtual stage holds which layers.

Read by a run config (`parallel.layout`, the run's own placement) and by `ppb check --plan` (a
plan in Megatron's words, `ppb_core.balance.megatron`): one parser for both.

The layout rules are Megatron-Core's, read from Megatron-LM core_v0.19.0 (commit 5be96267),
megatron/core/transformer/pipeline_parallel_layer_layout.py:

* `PipelineParallelLayerLayout.parse_str_to_list`: commas are cosmetic and dropped; `(...)*n`
  (no nested parentheses) repeats its text n times, then `x*n` repeats one character; `|` splits
  virtual stages; each character is `E` (embedding), `L` (loss), `t` (transformer decoder layer) or
  `m` (multi-token-prediction layer); a stage may be empty.
* `__init__`: the number of stages is a multiple of the pipeline size P; stage `v·P + p` of the
  list is pipeline rank p's virtual stage v (model order is chunk by chunk).
* `validate_layer_layout`: the model order starts with `E` and ends with `L`, each exactly once;
  as many `t` as decoder layers and as many `m` as MTP layers; no `t` after the first `m`; `m`
  only in a rank's last virtual stage, all of them in one stage, and never on rank 0 before its
  last virtual stage.
* megatron/training/arguments.py and `TransformerConfig.__post_init__`: the layout may not be
  combined with `--decoder-first/last-pipeline-num-layers` nor `--account-for-*-in-pipeline-split`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ppb_core import limits

# A layout written out holds a character per layer (decoder, MTP, E, L) and a `|` per virtual stage.
EXPANDED_CHARACTERS = 2 * limits.LAYERS + 2 + limits.STAGES * limits.CHUNKS

LAYER_CHARACTERS: dict[str, str] = {"E": "embedding", "L": "loss", "t": "decoder", "m": "mtp"}


class LayoutError(ValueError):
    """A layout Megatron-Core would refuse, with its reason."""


def expand(text: str) -> str:
    """The layout with its repetitions written out, as Megatron-Core unrolls them; LayoutError
    before writing out more than a layout of the largest model ppb takes can hold."""
    text = text.replace(",", "")
    added = [0]

    def repeated(found: re.Match[str]) -> str:
        # a count of more digits than the limit has cannot be within it (int() refuses 4,300 digits)
        digits = found.group(2)
        part, times = found.group(1), int(digits) if len(digits) <= 9 else EXPANDED_CHARACTERS + 1
        added[0] += len(part) * max(times - 1, 0)
        if len(text) + added[0] > EXPANDED_CHARACTERS:
            raise LayoutError(f"the repetitions write out more than {EXPANDED_CHARACTERS} characters")
        return part * times

    text = re.sub(r"\(([^)]+)\)\*(\d+)", repeated, text)
    added[0] = 0  # the second pass grows the text the first wrote out
    return re.sub(r"(.)\*(\d+)", repeated, text)


def parse_layout(text: str, pipeline_size: int) -> list[list[str]]:
    """[pipeline rank][virtual stage] -> the stage's characters; LayoutError where Megatron-Core stops."""
    stages = expand(text).split("|")
    for stage in stages:
        for character in stage:
            if character not in LAYER_CHARACTERS:
                raise LayoutError(f"invalid layer character {character!r} (known: E, L, t, m)")
    if pipeline_size < 1 or len(stages) % pipeline_size:
        raise LayoutError(f"{len(stages)} stages are not a multiple of the pipeline size {pipeline_size}")
    chunks = len(stages) // pipeline_size
    return [[stages[v * pipeline_size + p] for v in range(chunks)] for p in range(pipeline_size)]


def model_order(layout: Sequence[Sequence[str]]) -> list[str]:
    """The virtual stages in the order the model's layers run through them (chunk by chunk)."""
    chunks = len(layout[0]) if layout else 0
    return [layout[p][v] for v in range(chunks) for p in range(len(layout))]


def validate_layout(layout: Sequence[Sequence[str]], num_layers: int, mtp_layers: int = 0) -> None:
    """Megatron-Core's checks of a parsed layout; LayoutError naming the first one that fails."""
    flat = "".join(model_order(layout))
    if not flat or flat[0] != "E":
        raise LayoutError("the first layer must be the embedding E")
    if flat[-1] != "L":
        raise LayoutError("the last layer must be the loss L")
    if flat.count("E") != 1 or flat.count("L") != 1:
        raise LayoutError("E and L must each appear exactly once")
    if flat.count("t") != num_layers:
        raise LayoutError(f"{flat.count('t')} decoder layers t, the model has {num_layers}")
    if flat.count("m") != mtp_layers:
        raise LayoutError(f"{flat.count('m')} MTP layers m, the model has {mtp_layers}")
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise LayoutError("decoder layers must come before the MTP layers")
    for rank, stages in enumerate(layout):
        if any("m" in stage for stage in stages[:-1]):
            raise LayoutError(f"rank {rank}: MTP layers must be in the rank's last virtual stage")
        if "m" in stages[-1] and stages[-1].count("m") != mtp_layers:
            raise LayoutError("all MTP layers must be in one virtual stage")


def standalone_mtp_cell(layout: Sequence[Sequence[str]]) -> tuple[int, int] | None:
    """The [chunk][stage] cell of the MTP layers when they sit apart from the loss `L`, else None.

    Megatron-Core runs such a layout as standalone MTP (`PipelineParallelLayerLayout.
    validate_layer_layout` sets `mtp_standalone` when `m` is on a rank other than the last, commit
    d98e8a64; `validate_layout` keeps `m` in a rank's last virtual stage, so apart from `L` means
    on another rank), as its DeepSeek-V3 example 'Et*3|(tt|)*29,m|L' does: the MTP chunk holds an
    embedding copy and the MTP layers, the loss chunk every head's logits and loss
    (`ppb_core.model.kinds.standalone_parts`).
    """
    for stage, stages in enumerate(layout):
        if "m" in stages[-1] and "L" not in stages[-1]:
            return len(stages) - 1, stage
    return None


def format_layout(stages: Sequence[str]) -> str:
    """Virtual stages (model order) as a layout string: `t*n` for runs of three or more layers and
    `(S|)*r` for r identical stages in a row, as Megatron-Core's own examples write it."""

    def stage_text(stage: str) -> str:
        return re.sub(r"t{3,}", lambda found: f"t*{len(found.group(0))}", stage)

    text_out = ""
    index = 0
    while index < len(stages):
        run = 1
        while index + run < len(stages) and stages[index + run] == stages[index]:
            run += 1
        text = stage_text(stages[index])
        last = index + run == len(stages)
        if run >= 3:
            # the group's text ends with '|': a group that ends the layout leaves its last stage out
            repeated = run - 1 if last else run
            text_out += f"({text}|)*{repeated}" + (text if last else ",")
        else:
            text_out += "|".join([text] * run) + ("" if last else "|")
        index += run
    return text_out


def cell_layers(layout: Sequence[Sequence[str]]) -> list[list[int]]:
    """[chunk][stage] decoder layers of a parsed layout (ppb's cells are [chunk][stage])."""
    chunks = len(layout[0]) if layout else 0
    return [[layout[stage][chunk].count("t") for stage in range(len(layout))] for chunk in range(chunks)]
