"""`python -m ppb_core.cli.compare RUN.yaml CENSUS.json [--model NAME]`: the formulas against a census.

For each body kind, the activation bytes one device keeps per micro-batch under each option (the
formulas, the census, their ratio) at the run's own parallel setup, the backward's working set
both ways, and the census's parts next to the formulas' terms (`ppb_core.estimate.census`).
"""

from __future__ import annotations

import argparse
import sys

from ppb_core.errors import InputError
from ppb_core.estimate.census import compare, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ppb_core.cli.compare", description=__doc__)
    parser.add_argument("run_config")
    parser.add_argument("census")
    parser.add_argument("--model", default=None, help="the model the census measured (default: the first)")
    parser.add_argument("--top", type=int, default=12, help="terms and parts listed per kind")
    args = parser.parse_args(argv)
    try:
        print(report(compare(args.run_config, args.census, args.model), args.top))
    except InputError as err:
        print(f"error: {err.line()}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
