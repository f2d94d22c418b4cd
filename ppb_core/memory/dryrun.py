"""MindFormers' dry-run memory reports read as measured stage peaks (`memory.calibration`).

A MindFormers dry run (`MS_SIMULATION_LEVEL=1`, `MS_MEMORY_STATISTIC=1`) compiles one rank of each
pipeline stage without a device and ends each rank's log with MindSpore's memory statistics,
printed by `AscendDynamicMemAdapter::DevMemStatistics` (mindspore-ai/mindspore,
`plugin/device/ascend/hal/device/ascend_dynamic_mem_adapter.cc`) as whole MB of 2**20 bytes
(`used_peak_memory_ / kMBToByte`, truncated):

    Used peak memory usage (without fragments): 48874M
    Actual peak memory usage (with fragments): 48874M

Two forms are read, both as MindFormers' own pipeline-balance tool took them (mindformers
`toolkit/pipeline_balance`, removed in c5cc799e3, read at its parent 6be67890): its readme's
`grep -rn 'peak memory usage' OUTPUT` over the logs `utils/dryrun.sh` writes per stage
(`log/stage{S}_{RANK}/mindformer.log`; the readme's sample names them `stage_{S}_rank_{R}`), one
line per log, the stage number taken from the path; and the init YAML's `memory_usage` block that
`utils/config.py` `memory_parser` reads (`head_memory` = stage 0, `tail_memory` = the last stage,
`body_memories: {stage_id: [...], memories: [...]}`, MB).

Of a log's two figures the one without fragments is used: it is what the allocator handed out, as
`torch.cuda.max_memory_allocated` is; the one with fragments is used only for a stage whose lines
lack it (MindSpore's recycling pool prints only `Actual peak memory usage: NM`).
"""

from __future__ import annotations

import re
from typing import Any

from ppb_core.errors import InputError
from ppb_core.io import parse_yaml

Row = tuple[str, dict[str, Any]]

_PEAK = re.compile(r"(Used|Actual) peak memory usage(?: \((?:with|without) fragments\))?: (\d+)M")
_STAGE = re.compile(r"stage_?(\d+)")
_SAPP = re.compile(r"^memory_usage\s*:", re.MULTILINE)


def is_dryrun_log(text: str) -> bool:
    return _PEAK.search(text) is not None


def is_sapp_memory_usage(text: str) -> bool:
    return _SAPP.search(text) is not None


def dryrun_log_rows(text: str, source: str) -> list[Row]:
    """Per stage its peak in MB from `grep -rn 'peak memory usage'` lines (module docstring)."""
    used: dict[int, tuple[str, int]] = {}
    actual: dict[int, tuple[str, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        found = _PEAK.search(line)
        if found is None:
            continue
        path = line[: found.start()]
        stage = _STAGE.findall(path)  # the innermost stage folder
        if not stage:
            raise InputError(
                source,
                f"line {number}",
                "no stage in the log's path: give `grep -rn 'peak memory usage'` over the dry run's "
                "stage{S}_{RANK} or stage_{S}_rank_{R} folders",
            )
        kept = used if found.group(1) == "Used" else actual
        s = int(stage[-1])
        if s in kept and kept[s][1] != int(found.group(2)):
            raise InputError(source, f"line {number}", f"stage {s} has two {found.group(1)} peaks")
        kept[s] = (f"line {number}", int(found.group(2)))
    chosen = {**actual, **used}
    return [(where, {"stage": stage, "peak_mb": mb}) for stage, (where, mb) in sorted(chosen.items())]


def sapp_memory_usage_rows(text: str, source: str, stages: int) -> list[Row]:
    """Per stage its peak in MB from a pipeline-balance init YAML's `memory_usage` block."""
    data = parse_yaml(text, source)
    block = data.get("memory_usage") if isinstance(data, dict) else None
    if not isinstance(block, dict):
        raise InputError(source, "memory_usage", "expected {head_memory, tail_memory, body_memories}")
    unknown = sorted(set(block) - {"head_memory", "tail_memory", "body_memories"})
    if unknown:
        raise InputError(source, f"memory_usage.{unknown[0]}", "unknown field")
    rows: list[Row] = []
    for name, stage in (("head_memory", 0), ("tail_memory", stages - 1)):
        if block.get(name) is not None:
            rows.append((f"memory_usage.{name}", {"stage": stage, "peak_mb": block[name]}))
    body = block.get("body_memories")
    if body is not None:
        if not isinstance(body, dict) or set(body) != {"stage_id", "memories"}:
            raise InputError(source, "memory_usage.body_memories", "expected {stage_id: [...], memories: [...]}")
        ids, memories = body["stage_id"], body["memories"]
        if not isinstance(ids, list) or not isinstance(memories, list) or len(ids) != len(memories):
            raise InputError(source, "memory_usage.body_memories", "stage_id and memories: two lists of one length")
        if any(isinstance(item, list) for item in ids + memories):
            raise InputError(
                source,
                "memory_usage.body_memories",
                "several dry-run rounds (lists of lists), each at another offset and recompute: "
                "give the one round that is this run config",
            )
        for i, (stage, mb) in enumerate(zip(ids, memories, strict=True)):
            rows.append((f"memory_usage.body_memories.{i}", {"stage": stage, "peak_mb": mb}))
    return rows
