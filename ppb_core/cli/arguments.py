"""The `ppb` command's interface: every sub-command's arguments and help, importing nothing heavy.

`ppb --help` and `ppb COMMAND --help` read only this module (`bench/startup.py` times them); a
command's work is in `ppb_core.cli.COMMAND`, loaded when the command runs. Values whose vocabulary
the core owns (buffer rules, schedules, stage names) are checked by the command, one line naming
the allowed ones.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NamedTuple, NoReturn

# The exit status of bad input (a flag, a file, a field), as every command of ppb's returns it.
EXIT_BAD_INPUT = 2
# ... and of a command Ctrl-C ended: the shell's 128 + SIGINT (2)
EXIT_INTERRUPTED = 130
# ... and of one ended by SIGTERM (`kill PID`, a scheduler's time limit): 128 + SIGTERM (15)
EXIT_TERMINATED = 143


class OneLineParser(argparse.ArgumentParser):
    """argparse with a bad flag as one line, as any bad input (not the usage block before it);
    sub-command parsers are of this class too (`add_subparsers` makes its parsers of the parent's)."""

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        line = line if len(line) <= 300 else line[:300] + "…"
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {line} (see {self.prog} --help)\n")


# The balancer's time limit the commands default to (`ppb_core.chain.PLAN_TIME_LIMIT_S`;
# tests/test_ppb_cli.py checks the two agree): none, the work limits end every solve.
TIME_LIMIT_S: float | None = None
TIME_LIMIT_HELP = (
    "a wall-clock limit in seconds, a last-resort safety net (default: none; the search ends on "
    "deterministic work limits, so the plan is the same on any machine and load; a plan the limit "
    "cuts short may differ from run to run, and says so)"
)
WORK_HELP = (
    "a multiple of the balancer's deterministic work limits (default 1): more searches further, the plan "
    "still the same on any machine"
)
# Sequence lengths `ppb census` measures at by default.
DEFAULT_SEQ = (128, 256, 512)


def output_path(text: str) -> str:
    """An output file or folder: an empty one (`-o "$OUT"` with OUT unset) is refused, not read as "write
    nothing" or as the working folder (`ppb plan -o ''` wrote its eleven tables there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give a file or folder name")
    return text


def plan(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN.yaml", help="the run config")
    parser.add_argument(
        "-o", "--out", type=output_path, metavar="OUT_DIR", default="out", help="output folder (default: out)"
    )
    parser.add_argument(
        "--until", metavar="STAGE", help="stop after this stage (default: all; run_config, layer_walk, ...)"
    )
    parser.add_argument(
        "-t",
        "--time-limit",
        type=float,
        default=TIME_LIMIT_S,
        metavar="SECONDS",
        help=TIME_LIMIT_HELP,
    )
    parser.add_argument("--work", type=float, default=1.0, metavar="FACTOR", help=WORK_HELP)
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr (a terminal or, every few seconds, a pipe)"
    )


def estimate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_config", help="a run config (configs/*.yaml)")
    parser.add_argument(
        "--json", action="store_true", help="print the estimate as JSON (docs/memory.md states its keys)"
    )
    parser.add_argument(
        "--buffer-rule",
        default="layered",
        metavar="RULE",
        help="how a layer's buffers add up: layered (default) or reference (docs/memory.md)",
    )
    parser.add_argument("--no-times", action="store_true", help="memory only, without the time model")
    parser.add_argument(
        "--no-stages",
        action="store_true",
        help="the rows per kind only, without the per-stage summary (needs no schedule)",
    )


def describe(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN.yaml", help="the run config")
    parser.add_argument(
        "-o", "--output", type=output_path, metavar="layers.json", help="where to write (default: print)"
    )
    parser.add_argument(
        "--no-times",
        action="store_true",
        help="untimed descriptions: NONE, SLCT and FULL memory only, time 1 (SAPP's fallbacks price the rest)",
    )


def profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN.yaml", help="the run config")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument(
        "--most-in-flight",
        type=int,
        metavar="N",
        help="split the buffers at N micro-batches in flight (default: the most any stage of the schedule keeps)",
    )


def census(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model_config",
        help="a HuggingFace config.json, or a torchtitan run config (RUN.yaml: its block under none, op "
        "and full checkpointing beside ppb's torchtitan rules)",
    )
    parser.add_argument(
        "--out", "-o", type=output_path, help="the census file to write (JSON; needed with a config.json)"
    )
    parser.add_argument(
        "--seq",
        type=int,
        nargs="+",
        default=None,
        help="sequence lengths to measure at, two at least (default 128 256 512); "
        "with a run config one (default the run's seq_length)",
    )
    parser.add_argument("--json", action="store_true", help="with a run config: print the comparison as JSON")
    parser.add_argument("--batch", type=int, default=1, help="micro-batch size to measure at (default 1)")
    parser.add_argument(
        "--attention",
        choices=("eager", "sdpa"),
        default="sdpa",
        help="HuggingFace attention implementation (default sdpa)",
    )
    parser.add_argument(
        "--dtype",
        choices=("bf16", "fp16", "fp32"),
        default=None,
        help="activation dtype (default: the config's torch_dtype, else bf16; a run config's training.dtype)",
    )
    parser.add_argument(
        "--experts",
        type=int,
        nargs="+",
        default=None,
        help="routed experts to build MoE kinds with (default: the model's, or two counts from "
        "which the census scales when the model has more than --experts-cap)",
    )
    parser.add_argument(
        "--experts-cap", type=int, default=16, help="build the model's own routed experts up to this many (default 16)"
    )
    parser.add_argument(
        "--experts-implementation",
        choices=("grouped_mm", "eager", "batched_mm"),
        default="grouped_mm",
        help="HuggingFace experts implementation (default grouped_mm, as a loaded model runs)",
    )
    parser.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="attention dropout to measure with, as a run config's training.dropout sets it",
    )
    parser.add_argument(
        "--no-tp-split",
        action="store_true",
        help="do not measure a tensor-parallel rank's share (the working set is then split as the kept bytes are)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")


def balance(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="RUN.yaml|layers.json", help="a run config or a SAPP layers description")
    parser.add_argument("-s", "--stages", type=int, help="pipeline stages P (layers.json default 4)")
    parser.add_argument("-mb", "--micro-batches", type=int, help="micro-batches m (layers.json default 4)")
    parser.add_argument("-i", "--interleave", help="chunks per stage V, or 'auto' to try 1..4 (default 1)")
    parser.add_argument("-mem", "--memory", type=float, help="device memory in MB (layers.json default 56000)")
    parser.add_argument(
        "--constant-memory",
        type=float,
        default=None,
        help="MB every stage holds besides its layers (default: from a run config, the largest "
        "working set of one layer's backward; from a layers.json, its stage_const_mem, 0 without one)",
    )
    parser.add_argument(
        "--schedule",
        metavar="SCHEDULE",
        help="pipeline schedule: 1f1b (default), interleaved (the default when V > 1), gpipe or dualpipev",
    )
    parser.add_argument(
        "--framework",
        choices=("megatron", "mindformers", "torchtitan"),
        help="whose rules the plan follows (default: the run config's; mindformers for a layers.json)",
    )
    parser.add_argument(
        "--mtp-layers", type=int, help="MTP layers the TAIL holds (default: the run config's; 0 for a layers.json)"
    )
    parser.add_argument(
        "-t",
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help=TIME_LIMIT_HELP,
    )
    parser.add_argument(
        "--work",
        type=float,
        default=1.0,
        metavar="FACTOR",
        help=WORK_HELP,
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr (a terminal or, every few seconds, a pipe)"
    )
    parser.add_argument(
        "--closed-form",
        action="store_true",
        help="minimise the closed-form estimate only, not the schedule's critical path",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "-o", "--out", type=output_path, metavar="PLAN.json", help="also write the JSON plan to this file"
    )


def check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN.yaml", help="the run config")
    parser.add_argument(
        "--plan",
        required=True,
        metavar="PLAN",
        help="a MindFormers yaml (or ppb balance's plan JSON), Megatron-LM flags or launch script, or a "
        "torchtitan run's job TOML (.toml) or Python config (.py)",
    )
    parser.add_argument(
        "-t",
        "--time-limit",
        type=float,
        default=TIME_LIMIT_S,
        metavar="SECONDS",
        help=TIME_LIMIT_HELP,
    )
    parser.add_argument("--no-optimum", action="store_true", help="do not solve for the optimum beside it")
    parser.add_argument("--json", action="store_true", help="print the check as JSON")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr (a terminal or, every few seconds, a pipe)"
    )


def search(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SEARCH.yaml", help="a search spec (searches/*.yaml)")
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")
    parser.add_argument(
        "-o", "--out", type=output_path, metavar="DIR", help="write the ranked run configs and plans here"
    )
    parser.add_argument("--workers", type=int, help="processes (default: the spec's, else the machine's CPUs)")
    parser.add_argument("--top", type=int, help="strategies to rank (default: the spec's search.top)")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress on stderr (a terminal or, every few seconds, a pipe)"
    )


def import_framework(value: str) -> str:
    """The framework whose launch `ppb import` reads; for MindFormers, where ppb reads its yaml instead."""
    if value == "mindformers":
        raise argparse.ArgumentTypeError(
            "mindformers has no import: write the run config (framework: mindformers, README 'Run configs') and "
            "check your training yaml's split and recompute against it with ppb check RUN.yaml --plan YOUR.yaml"
        )
    return value


def imports(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "framework",
        type=import_framework,
        choices=("megatron", "torchtitan"),
        help="whose launch: megatron (Megatron-LM's pretrain_gpt.py) or torchtitan (a job TOML, or a config "
        "function's Python file)",
    )
    parser.add_argument(
        "launch",
        metavar="LAUNCH",
        help="megatron: a launch script, or the flags (or the whole command line) as one quoted text; torchtitan: "
        "the job's TOML file, or (from 9810191bb) the .py file of its config function",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="GPUs the launch runs on: the world size (default: torchrun's --nproc-per-node × --nnodes in the "
        "script; for torchtitan, the product of the TOML's degrees)",
    )
    parser.add_argument("--device", required=True, metavar="NAME", help="the device, a catalog name (h100-80gb, ...)")
    parser.add_argument(
        "--tokenizer-vocab",
        type=int,
        metavar="N",
        help="the tokenizer's vocabulary, where Megatron-LM reads it from a file (HuggingFace, SentencePiece)",
    )
    parser.add_argument(
        "--megatron-core-release",
        metavar="RELEASE",
        help="megatron: the Megatron-Core release run, a tag (core_v0.13.0) or the commit's date (YYYY-MM-DD); "
        "written as framework_release.megatron_core (default: the newest code ppb follows, d98e8a64)",
    )
    parser.add_argument(
        "--te-release",
        metavar="RELEASE",
        help="megatron: the Transformer Engine release run, a version (v2.4) or the commit's date; written as "
        "framework_release.transformer_engine (default: d0067d0d)",
    )
    parser.add_argument(
        "--config",
        metavar="FUNCTION",
        dest="config_function",
        help="torchtitan .py: the config function to read, as torchtitan's --config names it (default: the file's "
        "one function returning Trainer.Config)",
    )
    parser.add_argument(
        "--torchtitan-release",
        metavar="RELEASE",
        help="torchtitan .py: the torchtitan commit's date (YYYY-MM-DD) whose config classes the file is read with, "
        "written as framework_release.torchtitan (default: 2026-02-23, 9810191bb, the first configured in Python)",
    )
    parser.add_argument(
        "--name", help="the run config's name (default: the file's name without its suffix; megatron-launch for flags)"
    )
    parser.add_argument(
        "-o", "--output", type=output_path, metavar="RUN.yaml", help="where to write the run config (default: print)"
    )


class Command(NamedTuple):
    summary: str  # one line in `ppb --help`
    description: str  # `ppb COMMAND --help`
    arguments: Callable[[argparse.ArgumentParser], None]


COMMANDS: dict[str, Command] = {
    "plan": Command(
        summary="run every stage for a run config and write each table as Parquet",
        description="""The whole chain without Dagster, every table written as Parquet.

The files are the ones the Dagster assets write (`OUT_DIR/<stage>/<run config stem>.parquet`, and
each stage's artifacts beside its table), byte for byte. Every stage runs before anything is
written, so bad input writes nothing.""",
        arguments=plan,
    ),
    "estimate": Command(
        summary="per-layer memory and time under every recompute option, stage peaks, the iteration",
        description="""Per-layer memory (static, activations per option, buffers) and times of a run, one row per
distinct kind; the iteration in seconds, tokens/s per device, MFU and HFU, with its terms; and each
stage's peak at the moment that sets it, against the device (the same figures `--json` prints).""",
        arguments=estimate,
    ),
    "describe": Command(
        summary="write the layer descriptions (SAPP balancer JSON) of a run config",
        description="""The layer descriptions the SAPP balancer reads.

Each distinct layer is described by the memory model (and the time model), identical layers
merged with a count; then bodies are combined as the run config's `ppb.combined` asks, options no
body is better off with are withdrawn, and times are scaled to the first body's forward time.
The file is `{"layers_description": [...]}` in SAPP's format; without -o it is printed.""",
        arguments=describe,
    ),
    "profile": Command(
        summary="print each layer kind's recompute switch costs and its front",
        description="""What each recompute switch costs each layer kind, and the settings worth offering.

Per model and body kind: the plain layer, each switch alone recomputed, and full recompute, in
MB (per micro-batch in flight, and once) and milliseconds (backward); then the front: the switch
settings no other beats in memory per micro-batch, memory once, backward time, memory at each
count of micro-batches in flight the schedule keeps, and the backward's working set.""",
        arguments=profile,
    ),
    "census": Command(
        summary="measure each layer kind's activations in real PyTorch layers (needs ppb[torch])",
        description="""Measure what each layer kind keeps, in real PyTorch layers.

Needs the torch extra (`pip install 'ppb[torch]'`). Each distinct body kind of the model is built
with `transformers` on the CPU and measured at the shapes given (docs/census.md); a run config
names the file as `models[i].census` to price that model's activations from it. Given a torchtitan
run config (RUN.yaml) instead, its block is measured under torchtitan's none, op and full
activation checkpointing and printed beside what ppb's torchtitan rules predict.""",
        arguments=census,
    ),
    "balance": Command(
        summary="balance layers over pipeline stages with an exact integer program",
        description="""Split the layers over the pipeline and choose their recompute.

From a SAPP layers.json the sizes come from the flags, with SAPP's command-line defaults when a
flag is left out (`run_pipeline_balance.py`: 4 stages, 4 micro-batches, no interleave, 56000 MB,
no time limit), the constant memory from its `stage_const_mem`, and the plan follows MindFormers' rules
unless `--framework` says otherwise. From a run config they come from the config (parallel.pp,
training.micro_batches, parallel.vpp and parallel.schedule, device memory less reserved_mb,
framework, MTP layers) and the descriptions from the PPB builder; flags override.
`--interleave auto` tries 1 to 4 chunks and keeps the fastest.

The search stops on deterministic work limits, so the same input gives the same plan on every
machine and load; `-t` (none by default) bounds the wall-clock time of everything the command does,
and a solve it stops says so, with a warning on stderr. From a run config every time is in
seconds, the unit in the key (`time_s`, ...); from a layers.json in the file's own unit.""",
        arguments=balance,
    ),
    "check": Command(
        summary="check a plan you have (MindFormers yaml, Megatron-LM flags or torchtitan job lines) against "
        "the device",
        description="""A plan you already have, checked before you launch it.

PLAN is a MindFormers/HyperParallel yaml (offset, recompute, select_recompute,
select_comm_recompute; or the plan JSON `ppb balance -o` writes) or Megatron-LM flags
(`--pipeline-model-parallel-layout ...` and the recompute flags, up to a launch script), in a file
or as the text itself, or, for a torchtitan run, its job TOML (`.toml`: the lines `ppb balance` prints,
or a whole job TOML with them merged in; from 9810191bb the Python config lines or function, `.py`).
Every stage's memory is evaluated by the memory model against the device
(which stage runs out, by how much, at which moment), the iteration in seconds by the time model
(the schedule on the layers' times, P2P, data-parallel reduction, optimizer), and the balancer's
optimum for the same run beside it (`--no-optimum` skips it). Exit status 1 when a stage does not
fit, 2 when the plan cannot be read.""",
        arguments=check,
    ),
    "import": Command(
        summary="write the run config of a Megatron-LM launch (flags or script) or a torchtitan job (TOML or "
        "Python config)",
        description="""The run config a Megatron-LM launch or a torchtitan job says, for every other command.

LAUNCH is pretrain_gpt.py's flags, as one text or a launch script (read as bash would without
running it: its variables at their defaults, the branch of an `if` those values decide (both where
they do not), a profiler's own options such as nsys's left out). Every flag ppb models is carried
over, Megatron-LM's default where the launch leaves it out (Megatron-LM d98e8a64, or the releases
--megatron-core-release and --te-release state: framework_release, docs/frameworks.md "Older
releases"); the vocabulary comes from the tokenizer, padded as Megatron pads it. Each flag that
bears on memory or time and that ppb does not model is said on stderr, one line each; a
contradiction, another entry point (pretrain_bert.py, pretrain_hybrid.py) or a model ppb does not
price is refused in one line naming the flag, and nothing is written.

For torchtitan, LAUNCH is the job's TOML (train.py --job.config_file), read with torchtitan v0.2.2's
defaults and its model flavors (llama3, deepseek_v3, qwen3); the same rules hold, naming the TOML
key (a key or section torchtitan does not have is refused). From 9810191bb (2026-02-23) torchtitan
reads a Python config function instead (--module, --config): LAUNCH is then its .py file, parsed
without running it (literal values only), the function named by --config and its classes' fields
those of --torchtitan-release. -o makes the folders it names.""",
        arguments=imports,
    ),
    "search": Command(
        summary="rank parallel strategies for a model on N devices by tokens per second, each balanced",
        description="""The best parallel layouts for a model on N devices, balanced and ranked.

The search spec names the model(s), the device and how many, the global batch and the sequence
length, the framework and optional limits (docs/search.md). Every strategy of the grid is checked
by the run-config validator, screened with the memory model and a proven bound on its iteration,
and the promising ones are balanced and timed; strategies are dropped only where a bound proves
they cannot enter the ranking. `-o DIR` writes the ranked strategies as run configs with their plans
and, in the search's framework's words, its Megatron-LM flags, MindFormers settings or torchtitan
job-TOML lines.""",
        arguments=search,
    ),
}
