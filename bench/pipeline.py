"""One partition, every asset of the chain (group ppb), from the CLI with the in-process executor; and the core's share.

    python bench/pipeline.py [--config llama3-8b] [--repeat 3]

Times, on this machine:
- `dagster job execute -j register_run_configs` (adds the partitions the CLI needs; once);
- `dagster asset materialize --select 'group:ppb' --partition KEY` (the chain's assets: `--select '*'`
  takes the search's too, partitioned by search spec, which Dagster refuses beside a run config's key):
  the wall time of the command, and
  the run's own duration and step times from the instance's event log;
- the core alone: the whole chain for the same config in a fresh Python (imports included) and
  warm in this process, with no Dagster.
Each command runs against a fresh DAGSTER_HOME and storage folder in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import machine, python_env, wall_seconds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def core_cold(config: Path, env: dict[str, str]) -> float:
    """The chain in a fresh interpreter, imports included, as a run's process would pay it."""
    code = (
        "import time; t = time.perf_counter(); from ppb_core import chain; "
        f"chain.run_chain({str(config)!r}); print(time.perf_counter() - t)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="llama3-8b", help="run config stem under configs/")
    parser.add_argument("--repeat", type=int, default=3, help="materializations to time (median reported)")
    args = parser.parse_args()
    config = ROOT / "configs" / f"{args.config}.yaml"

    from ppb_core import chain

    print(f"machine: {machine()} (other work on the machine slows every figure)")
    import dagster

    print(f"dagster {dagster.__version__}; stages: {', '.join(step.name for step in chain.STAGES)}")
    dagster_cli = shutil.which("dagster") or sys.exit("dagster is not on PATH")

    walls, runs, steps = [], [], []
    with tempfile.TemporaryDirectory(prefix="ppb-bench-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        env = {**python_env(ROOT), "DAGSTER_HOME": str(home), "PPB_STORAGE_DIR": str(Path(scratch) / "storage")}
        module = ["-m", "pipelines.definitions"]
        register = wall_seconds([dagster_cli, "job", "execute", *module, "-j", "register_run_configs"], ROOT, env)
        print(f"register_run_configs (once):                  {register:6.2f} s")
        command = [dagster_cli, "asset", "materialize", *module, "--select", "group:ppb", "--partition", args.config]
        print("$ DAGSTER_HOME=... " + shlex.join(["dagster", *command[1:]]))
        for _ in range(args.repeat):
            walls.append(wall_seconds(command, ROOT, env))

        from dagster import DagsterInstance, RunsFilter

        os.environ["DAGSTER_HOME"] = str(home)
        with DagsterInstance.get() as instance:
            for record in instance.get_run_records(RunsFilter(job_name="__ASSET_JOB")):
                runs.append(record.end_time - record.start_time)
                stats = instance.get_run_step_stats(record.dagster_run.run_id)
                steps.append({s.step_key: s.end_time - s.start_time for s in stats})
        cold = [core_cold(config, env) for _ in range(args.repeat)]

    chain.run_chain(config)  # warm the caches of this process
    warm = []
    for _ in range(max(args.repeat, 5)):
        started = time.perf_counter()
        chain.run_chain(config)
        warm.append(time.perf_counter() - started)

    wall, run, core = statistics.median(walls), statistics.median(runs), statistics.median(cold)
    print(f"dagster asset materialize, {args.config}, the chain, in-process executor (median of {len(walls)}):")
    each = ", ".join(f"{w:.2f}" for w in walls)
    print(f"  command wall time:                            {wall:6.2f} s   (runs: {each})")
    print(f"  the run itself (start to end in the event log): {run:6.2f} s")
    step_median = {key: statistics.median(s[key] for s in steps) for key in steps[0]}
    for key, seconds in step_median.items():
        print(f"    step {key:<40} {seconds * 1000:7.0f} ms")
    print(f"core alone, fresh Python (imports included):    {core:6.2f} s   = {core / wall:.0%} of the command")
    print(f"core alone, warm:                               {statistics.median(warm) * 1000:6.0f} ms")
    print(f"Dagster's share (command − core cold):          {wall - core:6.2f} s   = {(wall - core) / wall:.0%}")
    print(f"fastest command: {min(walls):.2f} s; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
