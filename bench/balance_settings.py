"""CPU seconds of torchtitan balances that solve many settings: `python bench/balance_settings.py [--root DIR]`.

torchtitan runs every block under one setting (none, full, or `selective_ac_option = N`: every N-th block of
a rank fully recomputed, N = 2 up to the most blocks a rank holds), so `ppb balance` of a torchtitan run solves
one problem per setting (`program._torchtitan`): 257 of them for 256 blocks at PP 2. The runs are
configs/llama3.1-8b-torchtitan.yaml's model (Llama-3.1-8B from configs/hf/llama3.1-8b.json) on its 8 H100s at
TP 2 × PP 2 × FSDP 2, 8 micro-batches of 8192 tokens, full recompute stated (as `ppb import torchtitan` writes a
job TOML of tests/test_balance_torchtitan.py), with more blocks or chunks than the model has:

* `256 blocks PP 2` (num_layers 256, 1F1B): at the device's memory no plan fits (the least needs about 178 GB);
  at `--memory 190000` only full recompute fits; at 300000 every 3rd block is the plan;
* `PP 2 x 8 chunks` (32 blocks, Interleaved1F1B, 8 chunks a rank) at 55000 MB (`--heavy`: minutes of CPU).

Each case runs `ppb balance RUN --json` in this process `--repeat` times and prints its CPU seconds
(`time.process_time`: the shared machine's other work inflates wall clock, not this), the status, the plan's
time, its setting, and a digest of the JSON less the input's path and the `solver` section (how the search went: which
settings were not searched, the choices listed): the same digest before and after means the same answer.
`--root DIR` imports ppb from DIR (e.g. `git archive main | tar -x -C /tmp/base` for the before column).
Prints the machine first.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _measure import machine

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "configs" / "llama3.1-8b-torchtitan.yaml"

# (name, blocks, chunks a rank, memory MB or None for the device's, heavy)
CASES = [
    ("256 blocks PP 2, device memory", 256, 1, None, False),
    ("256 blocks PP 2, 190000 MB", 256, 1, 190000, False),
    ("256 blocks PP 2, 300000 MB", 256, 1, 300000, False),
    ("PP 2 x 8 chunks, 55000 MB", 32, 8, 55000, True),
]


def run_config(blocks: int, chunks: int, folder: Path) -> Path:
    """configs/llama3.1-8b-torchtitan.yaml at TP 2 × PP 2 × FSDP 2 with *blocks* layers, *chunks* a rank."""
    from ppb_core.config.hf import read_hf_config

    raw = yaml.safe_load(BASE.read_text())
    model = raw["models"][0]
    spec = read_hf_config(BASE.parent / model.pop("config")).model_dump(exclude_none=True)
    spec["num_layers"] = blocks
    model["spec"] = spec
    raw["parallel"] = {
        "dp": 2,
        "tp": 2,
        "pp": 2,
        "cp": 1,
        "world_size": 8,
        "fsdp": True,
        "zero": 3,
        "sequence_parallel": True,
        "vpp": chunks,
        "schedule": "interleaved" if chunks > 1 else "1f1b",
    }
    raw["training"] = {**copy.deepcopy(raw["training"]), "micro_batches": 8, "recompute": {"mode": "full"}}
    path = folder / f"llama3.1-8b-{blocks}-pp2v{chunks}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def balance(args: list[str]) -> tuple[float, int, dict]:
    """CPU seconds, exit status and JSON of `ppb balance ARGS --json`, run in this process."""
    from ppb_core.cli.main import main

    out = io.StringIO()
    started = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        status = main(["balance", *args, "--json"])
    return time.process_time() - started, status, json.loads(out.getvalue() or "{}")


def digest(result: dict) -> str:
    """The JSON less the input's (temporary) path and the `solver` section (how the search went: its rounds,
    paths, stage choices listed and notes), hashed: what the answer is."""
    kept = copy.deepcopy(result)
    kept.pop("input", None)
    kept.pop("solver", None)
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree whose ppb is measured")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--heavy", action="store_true", help="also the PP 2 x 8 chunks case")
    parser.add_argument("--only", help="cases whose name holds this")
    options = parser.parse_args()
    sys.path.insert(0, str(options.root.resolve()))
    print(machine())
    print(f"ppb from {options.root.resolve()}")
    with tempfile.TemporaryDirectory() as folder:
        for name, blocks, chunks, memory, heavy in CASES:
            if (heavy and not options.heavy) or (options.only and options.only not in name):
                continue
            args = [str(run_config(blocks, chunks, Path(folder))), *(["--memory", str(memory)] if memory else [])]
            seconds = []
            for _ in range(options.repeat):
                cpu, status, result = balance(args)
                seconds.append(cpu)
            setting = (result.get("recompute_setting") or {}).get("description", "-")
            objective = result.get("objective_s")
            said = f"{objective:.3f} s" if objective is not None else result.get("message", "no plan")[:60]
            cpu_said = ", ".join(f"{s:.2f}" for s in seconds)
            print(
                f"{name}: CPU {cpu_said} s; exit {status}, {result.get('status')}, {said}, {setting}, "
                f"answer {digest(result)}"
            )


if __name__ == "__main__":
    main()
