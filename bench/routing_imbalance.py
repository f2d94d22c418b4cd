"""How the natural-routing Megatron-Bridge card rows would move with routing imbalance: a SENSITIVITY, not a fit.

    python bench/routing_imbalance.py [--shares R ...]

ppb prices a MoE layer for its busiest expert-parallel rank (`training.moe.dropless_imbalance`, or the
per-expert `max_vio`): every rank waits for it at the combine all-to-all, so its expert GEMMs, the rows it
receives and sends back, and the passes where its tokens land set each MoE layer's time; its dropless buffers
set the memory peak (printed too: these runs publish none). Balanced (1.0) is the default and what every bench
row states, since no card publishes its run's per-rank load.

The card rows that route naturally (no `--moe-router-force-load-balancing`: bench/_bridge_cards.py's `pretrain`
entries) are priced here again with the busiest rank at each share R of its fair share. The default shares are
1 + MaxVio_global as Wang et al. publish it ("Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts",
arXiv 2408.15664 v1, §4.1 Eq. 4: (max_i Load_i − mean Load)/mean Load over the validation set; §4.2 Table 2:
auxiliary-loss-controlled 0.72 at 1B and 0.52 at 3B, loss-free 0.04 at both): 1 + MaxVio is the most a rank can
receive at that per-expert imbalance (exact with one expert a rank; these rows hold 8 experts a rank, whose
mean is smaller). Their models are not these rows' models, their MaxVio_global is over a whole validation set
(a step's MaxVio_batch, their Figure 3, is larger), and the rows' routers differ (Qwen3: aux loss; Moonlight:
expert bias with a sequence aux loss; GPT-OSS: none). So no row is set to any of these shares; the table only
says how far the rows' errors move across the published range.

Last column: the share at which ppb's price would equal the measurement (bisection up to the routing's own
bound, `MoeTraining.routing_bound`), i.e. what the run's busiest rank would have had to receive for the whole
gap to be routing. Not a figure ppb uses.

One measured anchor: the Qwen3 30B-A3B recipe ran 24.714 s a step with forced balance ("Megatron-Bridge Qwen3
30B-A3B BF16 EP16 HybridEP (16 H100)") and 30.290 s with natural routing (the card's pretrain entry), ×1.226
as session 29 reads the two rows; ppb's ratio of its natural-routing row at each share to its price at 1.0 is
printed beside it.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _public import run_config  # noqa: E402
from public_runs import PublicRun, public_runs  # noqa: E402

from ppb_core.config.run import MoeTraining, RunConfig  # noqa: E402
from ppb_core.config.spec import ModelSpec  # noqa: E402
from ppb_core.memory.model import run_stage_peaks  # noqa: E402
from ppb_core.timing.iteration import run_iteration  # noqa: E402

# arXiv 2408.15664 v1 §4.2 Table 2, MaxVio_global: (label, figure)
PAPER_MAX_VIO = (
    ("loss-free 1B/3B", 0.04),
    ("aux-loss 3B", 0.52),
    ("aux-loss 1B", 0.72),
)
FORCED_QWEN3 = "Megatron-Bridge Qwen3 30B-A3B BF16 EP16 HybridEP (16 H100)"
NATURAL_QWEN3 = "Megatron-Bridge card Qwen3 30B-A3B BF16 EP16 HybridEP natural routing (16 H100)"


def natural_rows(rows: list[PublicRun]) -> list[PublicRun]:
    """The Megatron-Bridge card rows of MoE runs without forced balance."""
    return [
        row
        for row in rows
        if row.name.startswith("Megatron-Bridge card")
        and row.raw["parallel"].get("ep", 1) > 1
        and not row.raw["training"].get("moe", {}).get("router", {}).get("force_balance", False)
    ]


def _at(row: PublicRun, share: float) -> RunConfig:
    raw = copy.deepcopy(row.raw)
    raw["training"].setdefault("moe", {})["dropless_imbalance"] = share
    return run_config(raw, row.name)


def seconds_at(row: PublicRun, share: float) -> float:
    """The row's priced seconds with its busiest expert-parallel rank at *share* of its fair share."""
    return run_iteration(_at(row, share)).seconds


def peak_gib_at(row: PublicRun, share: float) -> float:
    """The row's largest stage peak (GiB) with its busiest rank at *share*: its dropless buffers grow with it."""
    return max(peak.peak_bytes for peak in run_stage_peaks(_at(row, share))) / 2**30


def routing_bound(row: PublicRun) -> float:
    """The most the row's routing lets one expert-parallel rank receive over its fair share."""
    run = run_config(row.raw, row.name)
    spec = next(spec for spec in run.specs.values() if isinstance(spec, ModelSpec) and spec.is_moe)
    return MoeTraining.routing_bound(spec.num_experts, spec.experts_per_token, run.parallel.ep)


def matching_share(row: PublicRun, bound: float, steps: int = 12) -> float | None:
    """The share at which the row's price equals its measurement, by bisection on [1, bound]; None if
    the price at 1.0 is already above it or the bound's is still below."""
    low, high = 1.0, bound
    if seconds_at(row, low) >= row.seconds or seconds_at(row, high) <= row.seconds:
        return None
    for _ in range(steps):
        middle = (low + high) / 2
        low, high = (middle, high) if seconds_at(row, middle) < row.seconds else (low, middle)
    return (low + high) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shares", type=float, nargs="+", help="busiest-rank shares (default: 1 + Table 2's)")
    args = parser.parse_args(argv)
    labelled = [("balanced", 1.0)] + [(label, 1.0 + vio) for label, vio in PAPER_MAX_VIO]
    if args.shares:
        if any(share < 1.0 for share in args.shares):
            print("--shares: each share is at least 1 (the busiest rank gets at least its fair share)")
            return 2
        labelled = [(f"R {share:g}", share) for share in args.shares]
    rows = public_runs()
    natural = natural_rows(rows)
    print("SENSITIVITY, not a fit: no bench row states a routing imbalance (module docstring).")
    print("Shares: " + ", ".join(f"{label} {share:.2f}" for label, share in labelled))
    print()
    header = f"{'row':<86} {'measured':>9}" + "".join(f" {share:>14.2f}" for _, share in labelled)
    print(header + f" {'bound':>6} {'match':>6}")
    for row in natural:
        prices = [seconds_at(row, share) for _, share in labelled]
        cells = "".join(f" {price:6.2f} {price / row.seconds - 1:+6.1%}" for price in prices)
        bound = routing_bound(row)
        match = matching_share(row, bound)
        shown = "  none" if match is None else f"{match:6.2f}"
        print(f"{row.name:<86} {row.seconds:9.2f}{cells} {bound:6.2f} {shown}")
        peaks = ", ".join(f"{peak_gib_at(row, share):.1f}" for _, share in labelled)
        print(f"  largest stage peak at each share (GiB, not measured for these runs): {peaks}")
        if row.name == NATURAL_QWEN3:
            forced = next((other for other in rows if other.name == FORCED_QWEN3), None)
            if forced is not None:
                ratios = ", ".join(f"{price / prices[0]:.3f}" for price in prices)
                print(
                    f"  measured natural/forced {row.seconds / forced.seconds:.3f} "
                    f"({row.seconds:.3f} / {forced.seconds:.3f} s); ppb at each share over its 1.0: {ratios}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
