"""CPU-seconds of a search's balances: `python bench/search_balances.py {fresh,kept} [LABEL ...]`.

Balances and times strategies of the DeepSeek-V3 search on 1024 H100s (searches/deepseek-v3-2048.yaml,
`--spec`/`--devices` for another) as the search does (`rank.evaluate`), either each in a fresh process
from a fork server (`fresh`: how the search balanced before its balancing processes were kept) or dealt
over `--processes` processes that each balance theirs one after the other (`kept`: how it balances now),
one process at a time so that they do not share the cores. CPU-seconds are measured inside each process
around the balances (imports and the grid left out) and printed per strategy with its iteration seconds,
which must be the same in both modes. The default strategies are the 20 the search balanced on this spec
at a58436e (docs/search.md, "Measured").
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from pathlib import Path

from _measure import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ppb_core.search.enumerate import Strategy, enumerate_strategies  # noqa: E402
from ppb_core.search.rank import Ranked, evaluate  # noqa: E402
from ppb_core.search.spec import load_search_spec  # noqa: E402

DEFAULT_LABELS = [
    "tp1-cp2-pp16v2d-dp32-ep8-z1-b1m480-r0",
    "tp2sp-cp1-pp16v2d-dp32-ep8-z1-b1m480-r0",
    "tp2sp-cp2-pp16v2d-dp16-ep8-z1-b2m480-r0",
    "tp1-cp4-pp16v2d-dp16-ep8-z1-b2m480-r0",
    "tp2sp-cp2-pp16v2d-dp16-ep8-z1-b1m960-r0",
    "tp2sp-cp1-pp16v2d-dp32-ep8-z1-b2m240-r0",
    "tp2-cp2-pp16v2d-dp16-ep8-z1-b1m960-r0",
    "tp1-cp1-pp16v2d-dp64-ep8-z1-b1m240-r0",
    "tp1-cp2-pp16v2d-dp32-ep8-z1-b2m240-r0",
    "tp2-cp1-pp16v2d-dp32-ep8-z1-b1m480-r0",
    "tp4sp-cp1-pp16v2d-dp16-ep8-z1-b2m480-r0",
    "tp2-cp2-pp16v2d-dp16-ep8-z1-b2m480-r0",
    "tp1-cp2-pp16-dp32-ep8-z1-b1m480-r0",
    "tp2sp-cp2-pp16-dp16-ep8-z1-b1m960-r0",
    "tp1-cp2-pp16v2i-dp32-ep8-z1-b1m480-r0",
    "tp2sp-cp1-pp16v2i-dp32-ep8-z1-b1m480-r0",
    "tp2sp-cp2-pp16v2i-dp16-ep8-z1-b2m480-r0",
    "tp2sp-cp2-pp16v2i-dp16-ep8-z1-b1m960-r0",
    "tp2-cp2-pp16v2i-dp16-ep8-z1-b1m960-r0",
    "tp2-cp1-pp16v2i-dp32-ep8-z1-b1m480-r0",
]


def _balance(spec_path: str, devices: int, labels: list[str], queue: multiprocessing.Queue) -> None:
    spec = load_search_spec(spec_path)
    spec = spec.model_copy(update={"devices": devices})
    points = {p.label(spec): p for p in enumerate_strategies(spec) if isinstance(p, Strategy)}
    for label in labels:
        started = time.process_time()
        entry = evaluate(spec, points[label])
        seconds = entry.seconds if isinstance(entry, Ranked) else None
        queue.put((label, time.process_time() - started, seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("fresh", "kept"))
    parser.add_argument("labels", nargs="*", default=DEFAULT_LABELS)
    parser.add_argument("--spec", default=str(ROOT / "searches" / "deepseek-v3-2048.yaml"))
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--processes", type=int, default=4, help="kept processes (the search: two per worker)")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["ppb_core.search.rank"])
    queue = context.Queue()
    labels = args.labels
    groups = (
        [[label] for label in labels]
        if args.mode == "fresh"
        else [labels[i :: args.processes] for i in range(args.processes)]
    )
    found = []
    for group in [g for g in groups if g]:
        process = context.Process(target=_balance, args=(args.spec, args.devices, group, queue))
        process.start()
        found += [queue.get() for _ in group]
        process.join()
    print(f"{args.mode}: {sum(cpu for _, cpu, _ in found):.2f} CPU-s for {len(found)} balances")
    for label, cpu, seconds in sorted(found):
        print(f"  {label:42s} {cpu:6.3f} CPU-s  {seconds} s")


if __name__ == "__main__":
    main()
