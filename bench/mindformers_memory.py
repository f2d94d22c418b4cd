"""MindFormers model-card runs' memory: SAPP's ZeRO-1 reading against MindSpore's optimizer parallel.

    PYTHONPATH=$PWD python bench/mindformers_memory.py

Every MindFormers model-card row of bench/public_runs.py (bench/_mindformers.py `CARD_ROWS`: the
yamls at v1.4.0-beta2, a4dfb8219) estimated twice: with `parallel.zero: 1` (SAPP's ZeRO-1, how ppb read
`enable_parallel_optimizer` before) and with the yaml's `parallel.enable_parallel_optimizer` (MindSpore's
optimizer parallel, ppb_core/memory/frameworks/mindformers.py; dp 1 rows shard nothing either way).
Prints the highest-peak stage's static memory and peak, in GiB. No published MindFormers memory figure
states its run's config, so these are not scored (docs/frameworks.md).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _measure import machine
from _mindformers import CARD_ROWS, card_raw

from ppb_core.config.run import parse_run_config
from ppb_core.estimate.run import estimate

GIB = 2**30


def worst_stage(raw: dict) -> tuple[float, float, str]:
    """(static GiB, peak GiB, moment) of the stage with the highest peak."""
    peak = max(estimate(parse_run_config(raw)).stages, key=lambda p: p.peak_bytes)
    return peak.static_bytes / GIB, peak.peak_bytes / GIB, peak.moment


def main() -> int:
    print(f"machine: {machine()}")
    print(f"{'card':60s} {'ZeRO-1 static':>13s} {'peak':>6s}   {'optimizer parallel static':>25s} {'peak':>6s}")
    for card in CARD_ROWS:
        raw = card_raw(card)
        zero = copy.deepcopy(raw)
        zero["parallel"].pop("enable_parallel_optimizer")
        zero["parallel"].pop("embedding_parallel_optimizer", None)  # a word of MindSpore's optimizer parallel
        zero["parallel"]["zero"] = 1 if card.parallel_optimizer and card.dp > 1 else 0
        before, after = worst_stage(zero), worst_stage(raw)
        layout = f"DP{card.dp}" + (f" TP{card.mp}" if card.mp > 1 else "") + (f" PP{card.pp}" if card.pp > 1 else "")
        name = f"{card.name} ({layout}, {card.hardware})"
        print(f"{name:60s} {before[0]:13.1f} {before[1]:6.1f}   {after[0]:25.1f} {after[1]:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
