"""Bad and big input, timed: `python bench/inputs.py [--examples 2000] [--repeat 5]`.

1. The issue's three refusals that must take under a second each: the YAML alias bomb (nine
   levels of nine aliases), `micro_batches: 10^9` and a layers.json with `nb_layer: 10^6`; each
   timed in process (the median of --repeat reads: load_run_config / read_layers_description)
   and as a whole `ppb` process (interpreter start and imports included).
2. Big valid YAML: a run config at the size limit read by ppb's reader (libyaml's C parser under
   the bounded composer) against PyYAML's pure-Python safe_load.
3. The fuzzer (tests/fuzz_inputs.py) on --examples fresh random run configs, config.json files
   and layers.json files each; prints the exit statuses and every distinct failure.
4. The counts: issue cases covered by tests/test_inputs.py.

Prints the machine first. Exits 1 when a refusal took a second or more, or the fuzzer failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from _measure import machine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import fuzz_inputs as fuzz  # noqa: E402
import yaml  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ppb_core import limits  # noqa: E402
from ppb_core.config.run import load_run_config  # noqa: E402
from ppb_core.errors import InputError  # noqa: E402
from ppb_core.io import read_yaml  # noqa: E402
from ppb_core.payload.sapp import read_layers_description  # noqa: E402


def _bomb() -> str:
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"a{k}: &a{k} [" + ", ".join([f"*a{k - 1}"] * 9) + "]" for k in range(1, 9)]
    return "\n".join(levels) + "\nname: *a8\n"


def _run(**training: object) -> str:
    return yaml.safe_dump(
        {
            "models": [{"name": "llm", "config": str(ROOT / "configs" / "hf" / "llama3-8b.json")}],
            "parallel": {"pp": 2},
            "training": {"seq_length": 1024, "micro_batches": 4, **training},
            "device": {"name": "h100-80gb"},
        }
    )


REFUSALS = {
    "alias bomb (9 levels of 9 aliases)": ("r.yaml", _bomb(), load_run_config, ["estimate"]),
    "micro_batches: 10^9": ("r.yaml", _run(micro_batches=10**9), load_run_config, ["estimate"]),
    "nb_layer: 10^6 (layers.json)": (
        "l.json",
        json.dumps(
            {
                "layers_description": [
                    {"name": "B", "type": "BODY", "nb_layer": 10**6, "time": 1, "memory_activation": 1}
                ]
            }
        ),
        read_layers_description,
        ["balance"],
    ),
}


def refusals(repeat: int, folder: Path) -> bool:
    print(f"\n1. refusals (in process: median of {repeat}; process: one `ppb` run, start-up included)")
    print(f"   {'input':<38} {'in process ms':>13} {'process s':>9}  message")
    fine = True
    for label, (name, text, reader, command) in REFUSALS.items():
        path = folder / name
        path.write_text(text)
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            try:
                reader(path)
            except InputError as err:
                message = err.line()
            times.append(time.perf_counter() - started)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "ppb_core.cli.main", *command, str(path)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        process = time.perf_counter() - started
        median = statistics.median(times)
        fine &= median < 1.0 and done.returncode == 2 and len(done.stderr.splitlines()) == 1
        print(f"   {label:<38} {median * 1000:13.2f} {process:9.2f}  {message[len(str(path)) + 2 :][:70]}")
    return fine


def big_yaml(folder: Path) -> None:
    rows = []
    size = 0
    while size < limits.YAML_BYTES - 4096:
        row = f"# layer group {len(rows)}: {'measured on eight nodes, kept for the record ' * 2}\n"
        rows.append(row)
        size += len(row)
    path = folder / "big.yaml"
    path.write_text(_run() + "".join(rows))
    started = time.perf_counter()
    read_yaml(path)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    yaml.load(path.read_text(), Loader=yaml.SafeLoader)
    python = time.perf_counter() - started
    print(
        f"\n2. a {path.stat().st_size / 2**20:.2f} MiB run config (the limit is {limits.YAML_BYTES / 2**20:.0f} MiB): "
        f"ppb's reader {ours:.3f} s, PyYAML's pure-Python safe_load {python:.3f} s ({python / ours:.1f}× slower); "
        f"libyaml {'used' if yaml.__with_libyaml__ else 'NOT installed'}"
    )
    dense = "items:\n" + "".join(f"  - {{name: body{i}, nb: {i}, time: 1.5, mem: [1, 2, 3]}}\n" for i in range(6000))
    path.write_text(dense)
    started = time.perf_counter()
    read_yaml(path)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    yaml.load(dense, Loader=yaml.SafeLoader)
    python = time.perf_counter() - started
    print(
        f"   {len(dense) / 2**20:.2f} MiB of flow mappings (60,000 values): ppb's reader {ours:.3f} s, "
        f"pure-Python safe_load {python:.3f} s ({python / ours:.1f}×)"
    )


def _fuzz(files, flags, command, examples: int) -> tuple[dict, dict[str, str]]:
    """Exit statuses (or exception names) of *examples* random examples, and each distinct failure."""
    codes: dict = {}
    failures: dict[str, str] = {}

    def once(arguments: tuple) -> None:
        try:
            code: object = command(*arguments)
        except BaseException as err:  # every failure is reported, none stops the run
            code = type(err).__name__
            failures.setdefault(f"{code}: {str(err)[:100]}", traceback.format_exc(limit=-3))
        codes[code] = codes.get(code, 0) + 1

    run = settings(
        max_examples=examples,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    arguments = st.tuples(files) if flags is None else st.tuples(files, flags)
    started = time.perf_counter()
    run(given(arguments)(once))()
    codes["seconds"] = time.perf_counter() - started
    return codes, failures


def fuzzer(examples: int) -> bool:
    print(f"\n3. fuzzer: {examples} fresh random examples of each kind")
    fine = True
    targets = {
        "run configs": (fuzz.run_configs(), None, fuzz.run_config_command),
        "config.json": (fuzz.hf_configs(), None, fuzz.hf_command),
        "layers.json": (fuzz.layer_files(), fuzz.balance_flags(), fuzz.layers_command),
        "launch script": (fuzz.launch_scripts(), None, fuzz.plan_command),
        "plan yaml": (fuzz.mindformers_plans(), None, fuzz.mindformers_command),
        "job TOML": (fuzz.job_tomls(), None, fuzz.import_toml_command),
        "launch import": (fuzz.launch_scripts(), None, fuzz.import_megatron_command),
        "search spec": (fuzz.search_specs(), None, fuzz.search_command),
    }
    for label, (files, flags, command) in targets.items():
        codes, failures = _fuzz(files, flags, command, examples)
        spent = codes.pop("seconds")
        print(f"   {label:<13} exit statuses {dict(sorted(codes.items(), key=str))} in {spent:.0f} s")
        for key, trace in failures.items():
            fine = False
            print(f"   FAILURE {key}\n{trace}")
    return fine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500, help="fuzzer examples of each kind (default 500)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory(prefix="ppb-bench-inputs-") as name:
        folder = Path(name)
        fine = refusals(args.repeat, folder)
        big_yaml(folder)
    fine &= fuzzer(args.examples)
    from test_inputs import CASES

    print(f"\n4. issue cases covered by tests/test_inputs.py: {len(CASES)}")
    sys.exit(0 if fine else 1)


if __name__ == "__main__":
    main()
