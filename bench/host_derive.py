"""The host's time a kernel launch (`DeviceProfile.host_kernel_us`) from every host-bound dense Megatron CI case.

    PPB_MEGATRON_LM=DIR python bench/host_derive.py

Megatron-LM's functional tests (NVIDIA/Megatron-LM d98e8a64, read as bench/megatron_ci.py reads them:
`ppb import megatron` of the flags that measured the values, `measured_config`, the golden `iteration-time`
median without iteration 1) include dozens of small
GPT cases (12 layers of hidden 512) whose GPU work ppb puts at a small part of their measured seconds:
their iterations are Megatron's host launching kernels. For each such case (family gpt, every flag
modelled, ppb's GPU work alone under half the measured seconds; plain PyTorch ops at
`launches.PLAIN_OP_SHARE` of a launch) this finds the launch time that makes
ppb give the measured seconds back (ppb's seconds grow with it piecewise linearly: a secant, then
Newton steps), then prints per GPU the median over the cases (the catalog's figure), the quartiles,
and the correlation of the cases' figures with the GPU's share of their seconds: were the figure GPU
work ppb under-prices, the cases with more GPU work would need more. The MoE cases are held out of
the figure: printed below it, the figure each would need, for comparison only. DGX GB200 (Megatron CI's
gb200 recipes, tests/test_utils/recipes/gb200) takes its two-tray cases alone (8 GPUs of one NVL72
NVLink domain, as bench/megatron_ci.py prices them): its one-tray cases log 3-7x their two-tray twins'
seconds with the same model configs.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import machine  # noqa: E402
from megatron_ci import (  # noqa: E402
    CASES,
    COMMIT,
    GPUS,
    MIRROR,
    NODE_GPUS,
    Golden,
    _git,
    case_files,
    launch_text,
    measured_config,
    recipes,
)

from ppb_core.balance.megatron_import import Imported, import_megatron, run_config_of  # noqa: E402
from ppb_core.errors import InputError  # noqa: E402
from ppb_core.timing.iteration import run_iteration  # noqa: E402

HOST_BOUND = 0.5  # ppb's GPU work alone under this share of the measured seconds
SYSTEMS = ("h100", "a100", "gb200")


def seconds_at(imported: Imported, name: str, launch_us: float) -> float:
    """ppb's iteration seconds of the imported case with *launch_us* the host's time a launch."""
    raw = {**imported.raw, "device": {**imported.raw.get("device", {}), "host_kernel_us": launch_us}}
    return run_iteration(run_config_of(Imported(raw, imported.notes), name)).seconds


def launch_us_for(imported: Imported, name: str, measured: float) -> tuple[float, float]:
    """(the launch time giving *measured* back, ppb's GPU work alone) for one case."""
    alone = seconds_at(imported, name, 1e-6)
    low, high = seconds_at(imported, name, 50.0), seconds_at(imported, name, 150.0)
    value = 50.0 + (measured - low) * 100.0 / (high - low)
    for _ in range(3):  # Newton steps on the piecewise-linear seconds
        here, near = seconds_at(imported, name, value), seconds_at(imported, name, value * 0.99)
        slope = (here - near) / (value * 0.01)
        if slope <= 0:
            break
        value += (measured - here) / slope
    return value, alone


def cases() -> list[tuple[str, str, str, float, float, float]]:
    """(family/case, GPU, golden commit, measured, ppb's GPU work alone, the launch time) per host-bound case."""
    listed, trays = recipes("h100"), recipes("gb200")
    rows = []
    for name, files in sorted(case_files().items()):
        family, case = name.split("/")
        recipe = listed.get((family, case))
        if family not in ("gpt", "moe") or (recipe is not None and recipe.script != "pretrain_gpt.py"):
            continue
        tray = trays.get((family, case))  # DGX GB200: a gb200 recipe's two-tray case, trained by pretrain_gpt.py
        on_gb200 = tray is not None and tray.script == "pretrain_gpt.py" and tray.gpus == NODE_GPUS
        try:
            config = yaml.safe_load(_git("show", f"{COMMIT}:{CASES}/{name}/model_config.yaml"))
        except Exception:  # listed in a recipe, absent at the commit
            continue
        if any(re.fullmatch(r"MODEL_ARGS_\d+", str(key)) for key in config):
            continue
        for gpu in SYSTEMS:
            file = f"golden_values_dev_dgx_{gpu}.json"
            if file not in files or (gpu == "gb200" and not on_gb200):
                continue
            golden = Golden.read(f"{CASES}/{name}/{file}")
            if not golden.seconds:
                continue
            measured = measured_config(f"{CASES}/{name}", golden)  # the flags that ran it
            if any(re.fullmatch(r"MODEL_ARGS_\d+", str(key)) for key in measured):
                continue
            text = launch_text(measured)
            try:
                imported = import_megatron(text, 8, GPUS[gpu], name, release=golden.release)
            except InputError:
                continue
            if imported.notes:  # a flag ppb does not model
                continue
            alone = seconds_at(imported, name, 1e-6)
            if alone >= HOST_BOUND * golden.seconds:
                continue
            value, alone = launch_us_for(imported, name, golden.seconds)
            rows.append((name, gpu, golden.commit.split()[0], golden.seconds, alone, value))
    return rows


def _correlation(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / (sxx * syy) ** 0.5


def main() -> int:
    if not MIRROR:
        raise SystemExit("bench/host_derive.py: set PPB_MEGATRON_LM to a Megatron-LM repository holding d98e8a64")
    print(f"machine: {machine()}")
    rows = cases()
    print(f"{'case':96s} {'gpu':4s} {'commit':10s} {'measured':>8s} {'GPU only':>8s} {'us/launch':>9s}")
    for name, gpu, commit, measured, alone, value in rows:
        print(f"{name:96s} {gpu:4s} {commit:10s} {measured:8.3f} {alone:8.3f} {value:9.1f}")
    print()
    for family, label in (("gpt", "dense (the figure)"), ("moe", "MoE (held out, shown only)")):
        for gpu in SYSTEMS:
            chosen = [row for row in rows if row[0].startswith(family + "/") and row[1] == gpu]
            if len(chosen) < 4:
                continue
            values = [row[5] for row in chosen]
            q1, _, q3 = statistics.quantiles(values, n=4)
            share = _correlation([row[4] / row[3] for row in chosen], values)
            print(
                f"{label:27s} {gpu}: {len(chosen):3d} cases, median {statistics.median(values):6.1f} us a launch "
                f"(quartiles {q1:.1f}-{q3:.1f}); correlation with the GPU's share of the seconds {share:+.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
