"""Every Megatron-LM functional-test case ppb's Megatron reader accepts, priced against its golden values.

    PPB_MEGATRON_LM=DIR python bench/megatron_ci.py [--cases SUBSTRING] [--gpus h100,a100,gb200] [--verbose]

Source: NVIDIA/Megatron-LM at d98e8a64 (DIR: a clone or bare mirror holding that commit, read with git),
tests/functional_tests/test_cases/<family>/<case>/: model_config.yaml's MODEL_ARGS (pretrain_gpt.py's
flags, turned into words as tests/functional_tests/shell_test_utils/_run_training.sh does: `true` is
the bare flag, a `[...]` list its words) and ENV_VARS (exported before the launch), read by
`ppb import megatron` (`ppb_core.balance.megatron_import`) on one node of 8 GPUs
(tests/test_utils/recipes/h100/*.yaml: `nodes: 1`, `gpus: 8`); golden_values_dev_dgx_h100.json and
_dgx_a100.json hold each logged iteration's `mem-max-allocated-bytes`, `mem-allocated-bytes` and
`iteration-time`. With `--gpus ...,gb200` also golden_values_dev_dgx_gb200.json, the cases of the gb200
recipes (tests/test_utils/recipes/gb200: two 4-GPU trays of one NVL72 NVLink domain, priced as one node
of 8) on the catalog's `gb200` entry: held out, nothing in it is set from these cases but the host's
time a launch, from the 12-layer TP4 case (bench/decompose.py). The conventions are
bench/public_memory.py's and bench/public_runs.py's (their docstrings): the logging rank is the last
(the last pipeline stage); the peak is the last logged iteration's `mem-max-allocated-bytes` against
ppb's stage peak, the after-step memory its `mem-allocated-bytes` against ppb's optimizer moment; the
seconds are the median of the logged `iteration-time` values without iteration 1, against
`run_iteration`. Reserved memory 0 (the counters leave the CUDA context and NCCL out).

Families whose script is not pretrain_gpt.py (bert, t5, hybrid, multimodal, mimo) are counted as
refused; so are the release cases (mixtral/), whose recipes (node count) are not in the repository
(bench/public_memory.py prices them, and the 15B ones, at the dp their after-step memory gives),
cases without training golden values (inference), and cases the reader refuses, grouped by the flag
it names. A golden file's values may be older than d98e8a64, which ppb's rules follow: each row
shows the last commit that set them and its date (`git log --follow`, a pure rename setting none), and
the older one that set its memory values where a later edit left them. Each row is priced with the flags that
measured it, the case's model_config.yaml at that commit (`measured_config`; `--verbose` names the flags that
differ from d98e8a64's), and as the code that measured it (`framework_release`, ppb_core.config.releases):
Megatron-Core at the date of the last commit whose file changed a logged number (`_measured_by`: 93ebf8d72f's
removal of NaN times measured nothing), and Transformer Engine as that commit's CI image built it (`te_release`:
Dockerfile.ci.dev's TE_COMMIT, else the uv.lock's transformer-engine version, else, the NGC image's own TE, no
later than the commit's date), and PyTorch as that image's NGC container shipped it (`torch_release`).

Prints each case (peak, after-step, seconds: measured, ppb, error), then per family and GPU the mean
absolute and the largest error of each, with `--verbose` the MoE rows beyond 3% priced with the busiest
expert-parallel rank at its routing bound (`routing_rows`), the MoE rows' seconds split by setting (`setting_splits`:
each flag, exported variable, micro-batch count and release some rows carry and others do not, with the signed
mean error on each side) and every row beyond 3% iteration by iteration (`iteration_rows`: iteration 1 against
ppb without Adam's moments, with them where the load made them, the rise after iteration 2), every row beyond
10% in seconds with each earlier recording of its golden file and its median seconds (`seconds_reruns`: Megatron's
CI re-records H100 cases with unchanged flags at times 1.45x apart, e.g. the 8-expert TP2 cases' 0.20 and 0.30 s
at 4e85d74ae9 and 5fe3f06658), and each case whose peak another cluster measured on the same GPU model
(`cluster_pairs`), then the refusals by reason.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import shlex
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import machine  # noqa: E402
from public_memory import (  # noqa: E402
    GIB,
    MeasuredPeak,
    config,
    predicted_after_step_gib,
    predicted_at_share_gib,
    predicted_first_iteration_gib,
    predicted_gib,
    routing_bound,
)
from public_runs import GoldenTimes  # noqa: E402

from ppb_core.balance.megatron_import import import_megatron, run_config_of  # noqa: E402
from ppb_core.errors import InputError  # noqa: E402
from ppb_core.memory import MemoryModel  # noqa: E402
from ppb_core.memory.activations import routed_rows  # noqa: E402
from ppb_core.memory.model import run_stage_peaks  # noqa: E402
from ppb_core.model.kinds import Moe  # noqa: E402
from ppb_core.model.walk import walk  # noqa: E402
from ppb_core.timing.iteration import run_iteration  # noqa: E402

# a Megatron-LM git repository holding the commit (as tests/test_check_launch_scripts.py takes it)
MIRROR = os.environ.get("PPB_MEGATRON_LM", "")
COMMIT = "d98e8a64"
CASES = "tests/functional_tests/test_cases"
GPT_FAMILIES = ("gpt", "moe")  # trained by pretrain_gpt.py (recipes/h100/gpt.yaml, moe.yaml)
GPUS = {"h100": "h100-80gb", "a100": "a100-80gb", "gb200": "gb200"}
DEFAULT_GPUS = ("h100", "a100")  # --gpus h100,a100,gb200 adds the DGX GB200 golden values
# the recipes directory that lists a system's cases (A100 runs the h100 recipes' cases; DGX GB200 its own,
# two 4-GPU trays of one NVL72 NVLink domain: tests/test_utils/recipes/gb200/gpt.yaml nodes 2, gpus 4)
RECIPE_DIRS = {"h100": "h100", "a100": "h100", "gb200": "gb200"}
NODE_GPUS = 8


def _git(*args: str) -> str:
    return _git_in(MIRROR, *args)


@functools.cache
def _git_in(mirror: str, *args: str) -> str:
    """A git command's output in *mirror*, kept: the sweep reads each golden file's history more than once."""
    return subprocess.run(["git", "-C", mirror, *args], capture_output=True, text=True, check=True).stdout


def repository_file(path: str) -> str | None:
    """A file a case's flags name (`--tp-comm-overlap-cfg`), relative to the repository as the CI runs it."""
    try:
        return _git("show", f"{COMMIT}:{path}")
    except subprocess.CalledProcessError:
        return None


def case_files() -> dict[str, set[str]]:
    """<family>/<case> → its file names, at the commit."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in _git("ls-tree", "-r", "--name-only", COMMIT, CASES + "/").split():
        parts = path.split("/")
        if len(parts) == 6:
            found[f"{parts[3]}/{parts[4]}"].add(parts[5])
    return found


@dataclass(frozen=True)
class Recipe:
    script: str  # TRAINING_SCRIPT_PATH
    gpus: int  # nodes × gpus


def recipes(platform: str = "h100") -> dict[tuple[str, str], Recipe]:
    """(family, case) → the script and GPU count of the *platform* recipe that lists it
    (tests/test_utils/recipes/<platform>/*.yaml: spec.model, spec.nodes, spec.gpus, the script's
    TRAINING_SCRIPT_PATH, products[].test_case); pretrain_gpt.py's recipe wins a case listed twice."""
    found: dict[tuple[str, str], Recipe] = {}
    for path in _git("ls-tree", "--name-only", COMMIT, f"tests/test_utils/recipes/{platform}/").split():
        recipe = yaml.safe_load(_git("show", f"{COMMIT}:{path}"))
        spec = recipe.get("spec") or {}
        match = re.search(r"TRAINING_SCRIPT_PATH=([^\"\s]+)", str(spec.get("script", "")))
        script = match.group(1) if match else "(none stated)"
        gpus = int(spec.get("nodes", 1)) * int(spec.get("gpus", 8))
        for product in recipe.get("products") or []:
            for case in product.get("test_case") or []:
                key = (str(spec.get("model")), str(case))
                if key not in found or script == "pretrain_gpt.py":
                    found[key] = Recipe(script, gpus)
    return found


def launch_text(config: dict[str, Any]) -> str:
    """The case's environment and flags as the CI's launch hands them to pretrain_gpt.py
    (_run_training.sh: `true` is the bare flag, a `[a, b]` list its words, other values one word, a word
    without spaces unescaped as the script's shell passes leave it: `_shell_word`)."""
    lines = [f"export {name}={shlex.quote(str(value))}" for name, value in (config.get("ENV_VARS") or {}).items()]
    words = ["pretrain_gpt.py"]
    for flag, value in (config.get("MODEL_ARGS") or {}).items():
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words += [flag, *(shlex.quote(str(v)) for v in value)]
        elif value is not None and value != "":
            text = str(value)
            if text.startswith("[") and text.endswith("]"):
                words += [flag, *text[1:-1].replace(",", " ").split()]
            else:
                words += [flag, shlex.quote(_shell_word(text))]
    return "\n".join([*lines, " ".join(words)])


def _shell_word(text: str) -> str:
    """A flag's value without spaces as _run_training.sh hands it over (c08d89bea0 to d98e8a64): `echo "$value" |
    xargs` drops each backslash that escapes a character, then the `eval` of the unquoted word drops the next
    level, so c08d89bea0's layout `Et*3\\\\|\\\\(tt\\\\|\\\\)*6tL` reached Megatron as `Et*3|(tt|)*6tL`
    (its own comment there). A value with spaces is quoted there and kept as it is."""
    if any(char.isspace() for char in text):
        return text
    for _ in range(2):  # xargs, then the eval
        text = re.sub(r"\\(.)", r"\1", text)
    return text


@dataclass(frozen=True)
class Golden:
    peak_bytes: int | None
    after_step_bytes: int | None
    seconds: float | None
    commit: str  # the last commit that set the file, and its date
    memory_commit: str = ""  # the last that set its mem-max-allocated-bytes (`_set_by`)
    measured_commit: str = ""  # the last whose edit changed a logged number (`_measured_by`), and its date
    # mem-max-allocated-bytes by logged iteration, ascending (`iteration_peaks`)
    peaks_by_iteration: tuple[tuple[int, int], ...] = ()
    measured_dir: str = ""  # the case's directory at `measured_commit` (renames followed)

    @classmethod
    def read(cls, path: str) -> Golden:
        data = json.loads(_git("show", f"{COMMIT}:{path}"))
        commit, memory_commit = _set_by(path)

        def last(metric: str) -> int | None:
            values = _numbers(data.get(metric))
            return int(values[max(values)]) if values else None

        peaks = _numbers(data.get("mem-max-allocated-bytes"))
        measured = _measured_by(path)
        there = next((where for version, where, _ in _history(path) if version == measured), path)
        return cls(
            last("mem-max-allocated-bytes"),
            last("mem-allocated-bytes"),
            seconds_of(data.get("iteration-time"), path, commit),
            commit,
            memory_commit,
            measured,
            tuple((step, int(peaks[step])) for step in sorted(peaks)),
            there.rsplit("/", 1)[0],
        )

    @property
    def release(self) -> dict[str, str]:
        """The releases that measured the file (`framework_release`): Megatron-Core at the measuring
        commit's date, Transformer Engine and PyTorch as its CI image had them (`te_release`, `torch_release`)."""
        if not self.measured_commit:
            return {}
        sha, day = self.measured_commit.split()
        found = {"megatron_core": day, "transformer_engine": te_release(sha) or day}
        torch = torch_release(sha)
        return found | ({"pytorch": torch} if torch else {})


def measured_config(case_dir: str, golden: Golden) -> dict[str, Any]:
    """The case's model_config.yaml as the run that measured *golden* read it: at its measuring commit, in the
    case's directory there (`Golden.measured_dir`), else *case_dir*'s at COMMIT. A later commit may change a
    case's flags without recording its values again: 2659630721 (2025-04-09) gave the 8-expert TP2 case
    `--disable-bias-linear`, its A100 values still cb12e3dea4's, run with biases; d7bf5aaaa8 (2025-08-26) gave
    the MLA selective-recompute case `--overlap-moe-expert-parallel-comm`, its values still c08d89bea0's, run
    without it."""
    if golden.measured_commit and golden.measured_dir:
        sha = golden.measured_commit.split()[0]
        with contextlib.suppress(subprocess.CalledProcessError):
            return yaml.safe_load(_git("show", f"{sha}:{golden.measured_dir}/model_config.yaml")) or {}
    return yaml.safe_load(_git("show", f"{COMMIT}:{case_dir}/model_config.yaml")) or {}


def _history(path: str) -> list[tuple[str, str, bool]]:
    """The file's versions, newest first, following renames: (commit and date, its path there, whether
    the commit only renamed it: R100, as adc69dba2d's test-system refactor, 2025-10-21, moved every
    golden file)."""
    log = _git("log", "--follow", "--format=@%h %ad", "--date=short", "--name-status", COMMIT, "--", path)
    found = []
    for entry in log.split("@")[1:]:
        head, *changes = [line for line in entry.splitlines() if line.strip()]
        fields = changes[0].split("\t") if changes else [path]
        found.append((head.strip(), fields[-1], bool(changes) and all(c.startswith("R100") for c in changes)))
    return found


def _set_by(path: str) -> tuple[str, str]:
    """(the last commit that changed the file's values, the last that changed its `mem-max-allocated-bytes`),
    each with its date: a pure rename sets none, and a later edit (93ebf8d72f removed leading NaN
    iteration times) may leave the memory values of an older run."""
    history = [entry for entry in _history(path) if not entry[2]] or _history(path)[:1]
    if not history:
        return "", ""

    def memory(commit: str, where: str) -> Any:
        return json.loads(_git("show", f"{commit.split()[0]}:{where}")).get("mem-max-allocated-bytes")

    newest = memory(*history[0][:2])
    memory_commit = history[0][0]
    for commit, where, _ in history[1:]:
        try:
            if memory(commit, where) != newest:
                break
        except (subprocess.CalledProcessError, json.JSONDecodeError):
            break
        memory_commit = commit
    return history[0][0], memory_commit


def _measured_by(path: str) -> str:
    """The last commit (and its date) whose version of the file changed or added a logged number: a rerun
    (2795ebde97's image upgrade re-recorded loss and times, its memory the same) measures, an edit that
    only drops values (93ebf8d72f's leading NaN times) or renames does not."""
    history = [entry for entry in _history(path) if not entry[2]]
    for (commit, where, _), older in zip(history, [*history[1:], None], strict=True):
        if older is None:
            return commit
        try:
            now, before = (json.loads(_git("show", f"{c.split()[0]}:{w}")) for c, w, _ in ((commit, where, 0), older))
        except (subprocess.CalledProcessError, json.JSONDecodeError):
            return commit
        for metric in sorted(now):  # a number changed or added at some step (dropped ones measure nothing)
            kept = _numbers(before.get(metric))
            if any(kept.get(step) != value for step, value in _numbers(now.get(metric)).items()):
                return commit
    return history[0][0] if history else ""


# The Transformer Engine commits the CI image built (Dockerfile.ci.dev `ARG TE_COMMIT`, 2025-03 to 2025-07),
# with their dates (NVIDIA/TransformerEngine `git log -1 --date=short`)
TE_COMMIT_DATES = {"bee4649c15": "2025-03-18", "8382eed6cc": "2025-06-26"}


def te_release(commit: str) -> str | None:
    """Transformer Engine as the CI image of *commit* built it: the date of Dockerfile.ci.dev's TE_COMMIT,
    else the version uv.lock pins (`name = "transformer-engine"`), else None (the base NGC image's TE)."""
    for path in ("docker/Dockerfile.ci.dev", "Dockerfile.ci.dev"):
        try:
            found = re.search(r"TE_COMMIT=([0-9a-f]{10})", _git("show", f"{commit}:{path}"))
        except subprocess.CalledProcessError:
            continue
        if found:
            return TE_COMMIT_DATES.get(found.group(1))
    try:
        lock = _git("show", f"{commit}:uv.lock")
    except subprocess.CalledProcessError:
        return None
    found = re.search(r'name = "transformer-engine"\nversion = "([0-9][^"]*)"', lock)
    return found.group(1) if found else None


# The PyTorch of the NGC PyTorch containers Megatron's CI image built on (NVIDIA's PyTorch container release
# notes, "PyTorch Release YY.MM": 24.10 ships 2.5.0a0+e000cf0ad9); only the version's major.minor matters here
NGC_PYTORCH = {
    "24.10": "2.5.0a0+e000cf0ad9",
    "25.03": "2.7",
    "25.05": "2.8",
    "25.06": "2.8",
    "25.09": "2.9",
    "25.11": "2.10",
}


def torch_release(commit: str) -> str | None:
    """PyTorch as the dev CI image of *commit* had it: the NGC container named in docker/.ngc_version.dev, else
    the `BASE_IMAGE` of the job building `CI_MCORE_DEV_IMAGE` (.gitlab/stages/01.test.yml or 01.build.yml), mapped
    by `NGC_PYTORCH`; None where neither names a container listed there (the newest PyTorch ppb follows)."""
    tags = []
    with contextlib.suppress(subprocess.CalledProcessError):
        tags.append(_git("show", f"{commit}:docker/.ngc_version.dev").strip())
    for path in (".gitlab/stages/01.test.yml", ".gitlab/stages/01.build.yml"):
        try:
            text = _git("show", f"{commit}:{path}")
        except subprocess.CalledProcessError:
            continue
        found = re.search(r"IMAGE: CI_MCORE_DEV_IMAGE\s*\n(?:.*\n){0,3}?\s*BASE_IMAGE: (\S+)", text)
        if found:
            tags.append(found.group(1))
    for tag in tags:
        found = re.fullmatch(r"nvcr\.io/nvidia/pytorch:(\d\d\.\d\d)-py3", tag)
        if found and found.group(1) in NGC_PYTORCH:
            return NGC_PYTORCH[found.group(1)]
    return None


def seconds_of(metric: Any, path: str = "", commit: str = "") -> float | None:
    """The logged `iteration-time` values' median without iteration 1 (bench/public_runs.py's
    `GoldenTimes.median_s`), None where none is logged."""
    kept = tuple(value for step, value in _numbers(metric).items() if step > 1)
    return GoldenTimes(path, commit, "2-", kept).median_s if kept else None


def _numbers(metric: Any) -> dict[int, float]:
    """A golden metric's logged values by iteration ("nan" and missing ones left out)."""
    if not isinstance(metric, dict):
        return {}
    out = {}
    values = metric.get("values") or {}
    if isinstance(values, list):  # the older files' form: a list from start_step every step_interval
        start, every = int(metric.get("start_step", 0)), int(metric.get("step_interval", 1))
        values = {start + index * every: value for index, value in enumerate(values)}
    for step, value in values.items():
        if isinstance(value, int | float) and value == value:
            out[int(step)] = float(value)
    return out


@dataclass(frozen=True)
class Row:
    family: str
    case: str
    gpu: str
    golden: Golden
    peak: tuple[float, float] | None  # (measured, ppb) GiB
    after_step: tuple[float, float] | None
    seconds: tuple[float, float] | None
    moment: str
    notes: tuple[str, ...]  # the flags ppb does not model (`Imported.notes`)
    gpus: int = NODE_GPUS  # the recipe's GPUs
    measured: MeasuredPeak | None = None  # the row as bench/public_memory.py prices it (routing bounds)
    settings: tuple[str, ...] = ()  # what `setting_splits` groups rows by (`launch_settings`, releases, micro-batches)
    # the flags and variables the measuring run set otherwise than COMMIT's file (`measured_config`)
    drift: tuple[str, ...] = ()


def _error(pair: tuple[float, float] | None) -> float | None:
    return None if pair is None else pair[1] / pair[0] - 1


def price(family: str, case: str, gpu: str, text: str, golden: Golden, gpus: int) -> Row:
    where = f"{family}/{case}"
    imported = import_megatron(text, gpus, GPUS[gpu], where, read_file=repository_file, release=golden.release)
    imported.raw["name"] = case
    # the golden values are torch's allocator counters (mem-allocated, mem-max-allocated): nothing held back
    # beside them, where `ppb import` holds back the runtime's memory (`device.reserved_mb: auto`)
    imported.raw["device"]["reserved_mb"] = 0
    run = run_config_of(imported, where)
    stage = run.parallel.pp - 1
    row = MeasuredPeak(case, where, imported.raw, stage, (golden.peak_bytes or 0) / GIB)
    peak = after = seconds = None
    moment = ""
    if golden.peak_bytes:
        predicted, moment = predicted_gib(row)
        peak = (golden.peak_bytes / GIB, predicted)
    if golden.after_step_bytes:
        after = (golden.after_step_bytes / GIB, predicted_after_step_gib(row))
    if golden.seconds:
        seconds = (golden.seconds, run_iteration(run).seconds)
    release = golden.release
    settings = (
        *launch_settings(text),
        f"micro_batches={run.training.micro_batches}",
        *(f"{name}={release[name]}" for name in ("pytorch", "transformer_engine") if name in release),
    )
    return Row(family, case, gpu, golden, peak, after, seconds, moment, tuple(imported.notes), gpus, row, settings)


def launch_settings(text: str) -> tuple[str, ...]:
    """A launch's settings as words (*text*: `launch_text`'s): each exported variable `NAME=value`, each flag
    with its value (`--flag=value`, a list's words joined by spaces; a bare flag alone). Values naming a path
    (`${...}`) are left out: they say where the data is, not how the run goes."""
    lines = text.splitlines()
    found = [line.removeprefix("export ") for line in lines if line.startswith("export ")]
    flag, values = "", []
    for word in [*shlex.split(lines[-1])[1:], "--"]:
        if word.startswith("--"):
            if flag and not any("$" in value for value in values):
                found.append(f"{flag}={' '.join(values)}" if values else flag)
            flag, values = word, []
        else:
            values.append(word)
    return tuple(found)


@dataclass(frozen=True)
class SettingSplit:
    """A family's rows with a setting and without it: how many, and the signed mean error of their seconds."""

    setting: str
    with_rows: int
    without_rows: int
    with_mean: float
    without_mean: float

    @property
    def gap(self) -> float:
        return self.with_mean - self.without_mean


def setting_splits(rows: list[Row], family: str = "moe", least: int = 3) -> list[SettingSplit]:
    """For the *family*'s rows with measured seconds, each setting (`Row.settings`) that at least *least* of
    them carry and at least *least* do not: the signed mean error of the rows' seconds with it and without it,
    the largest gap first. A setting the rows far off share shows as a large gap; it points at where to read
    the code, it does not say why (settings come together: a newer case carries many new ones at once)."""
    priced = [(row, error) for row in rows if row.family == family and (error := _error(row.seconds)) is not None]
    found = []
    for setting in sorted({setting for row, _ in priced for setting in row.settings}):
        inside = [error for row, error in priced if setting in row.settings]
        outside = [error for row, error in priced if setting not in row.settings]
        if len(inside) >= least and len(outside) >= least:
            found.append(
                SettingSplit(setting, len(inside), len(outside), sum(inside) / len(inside), sum(outside) / len(outside))
            )
    return sorted(found, key=lambda split: (-abs(split.gap), split.setting))


def routing_rows(rows: list[Row], beyond: float = 0.03) -> list[RoutingRow]:
    """MoE rows whose peak is off by more than *beyond*: balanced, the routing bound and ppb with the busiest
    expert-parallel rank at that bound, as bench/public_memory.py prices them (`routing_bound`), and the share
    independent routing would give the logged rank (`independent_share`). Whether the measurement lies between
    is what data-dependent routing can explain; where it does not, routing alone cannot."""
    found = []
    for row in rows:
        error = _error(row.peak)
        if row.measured is None or error is None or abs(error) <= beyond:
            continue
        bound = routing_bound(row.measured)
        if bound is None or row.moment == "allocated":
            continue
        balanced = predicted_at_share_gib(row.measured, 1.0)
        worst = predicted_at_share_gib(row.measured, "bound")
        found.append(RoutingRow(row, balanced, bound, worst, _independent_of(row)))
    return found


@functools.lru_cache
def expected_max_normal(draws: int) -> float:
    """The expected largest of *draws* independent standard normals, E[max] = ∫ x·n·φ(x)·Φ(x)^(n−1) dx by the
    trapezoid rule on [−10, 10] (0 for one draw; 1/√π for two)."""
    step = 1e-3
    total = 0.0
    for i in range(-10_000, 10_001):
        x = i * step
        density = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        weight = 0.5 if abs(i) == 10_000 else 1.0
        total += weight * x * draws * density * (0.5 * (1 + math.erf(x / math.sqrt(2)))) ** (draws - 1)
    return total * step


def independent_share(rows: float, experts: int, local: int, k: int, units: int, draws: int) -> float:
    """The logged rank's routed rows over their mean at their largest over *draws* iterations, were every
    token's k distinct experts a uniform draw independent of every other token's.

    A token sends X copies to the rank's *local* experts of *experts*: hypergeometric, mean k·l/E, variance
    k·(l/E)·(1 − l/E)·(E − k)/(E − 1). Over the tokens behind a mean of *rows* copies the variance is
    rows·(1 − l/E)·(E − k)/(E − 1); the peak holds *units* such sums (the stage's MoE layers times its
    micro-batches in flight: each layer's router is drawn apart, megatron/core/transformer/moe/router.py
    `Router.__init__` at d98e8a64, and each micro-batch's tokens are others), so the sum's relative spread is
    √((1 − l/E)·(E − k)/((E − 1)·rows·units)), and its largest over the draws `expected_max_normal` of them."""
    spread = (1 - local / experts) * (experts - k) / ((experts - 1) * rows * units)
    return 1 + expected_max_normal(draws) * math.sqrt(spread)


@dataclass(frozen=True)
class RoutingRow:
    """A MoE row beyond 3% between balanced routing and its bound (`routing_rows`), GiB."""

    row: Row
    balanced: float  # ppb with every expert-parallel rank at its fair share
    bound: float  # the most one rank can receive over its fair share (`routing_bound`)
    worst: float  # ppb with the logged rank at that bound
    independent: float | None  # `independent_share` of the logged rank (None: group-limited routing)

    @property
    def implied(self) -> float | None:
        """The share at which ppb's peak, linear in it between balanced and the bound, meets the measurement:
        what the logged rank received, were routing the whole gap (a reading, not a setting); None below
        balanced, where no routing explains it."""
        measured = self.row.peak[0] if self.row.peak else self.balanced
        if measured < self.balanced:
            return None
        return 1 + (measured - self.balanced) / (self.worst - self.balanced) * (self.bound - 1)


def _independent_of(row: Row) -> float | None:
    """`independent_share` of the row's logged rank: its stage's MoE layers and micro-batches in flight, the
    rows one of them routes to the rank at balance (`routed_rows`), over the golden file's logged iterations
    (at most the draws: a resumed launch's maximum starts again)."""
    assert row.measured is not None
    run = config(row.measured)
    memory = MemoryModel(run)
    stage = row.measured.stage
    peak = run_stage_peaks(run, memory)[stage]
    held = [layer for layer in walk(run) if layer.stage == stage and isinstance(getattr(layer.kind, "mlp", None), Moe)]
    if not held:
        return None
    moe = held[0].kind.mlp
    if moe.group_limit:  # a token's experts from a few groups: not k uniform of all
        return None
    units = sum(peak.in_flight[layer.chunk] for layer in held)
    draws = max(1, len(row.golden.peaks_by_iteration))
    local = moe.num_experts // run.parallel.ep
    rows = routed_rows(moe, memory.setup)
    return independent_share(rows, moe.num_experts, local, moe.experts_per_token, units, draws)


@dataclass(frozen=True)
class IterationRow:
    """A row beyond 3% iteration by iteration (`iteration_rows`), GiB."""

    row: Row
    first: float | None  # the measured peak at iteration 1 (None: the file logs no iteration 1)
    # ppb's peak at iteration 1: without Adam's moments unless made at the load (None: not Adam, or CUDA graphs)
    first_ppb: float | None
    second: float | None  # the measured peak at the second logged iteration

    @property
    def rise(self) -> float | None:
        """What the peak grew from the second logged iteration to the last, no setting having changed."""
        return None if self.second is None or self.row.peak is None else self.row.peak[0] - self.second


# other clusters' runs of a case on the same GPU model: the golden files beside `golden_values_dev_dgx_<gpu>.json`
# (tests/test_utils/recipes name the clusters; d98e8a64)
OTHER_CLUSTERS = {"h100": ("dgxh100_dgxc",), "a100": ("dgxa100_dracooci", "dgxa100_dracooci-ord")}


@dataclass(frozen=True)
class ClusterPair:
    case: str  # family/case
    gpu: str
    cluster: str  # the other golden file's cluster
    peak: float  # GiB: the last logged `mem-max-allocated-bytes` of dev_dgx_<gpu>, the figure the row scores
    other: float  # GiB: the other cluster's
    set_by: tuple[str, str]  # the commits that set each file's memory values (`_set_by`)

    @property
    def spread(self) -> float:
        return self.other / self.peak - 1


def last_peak_gib(metric: Any) -> float | None:
    """A golden `mem-max-allocated-bytes`'s last logged value (the peak a row scores), in GiB."""
    values = _numbers(metric)
    return values[max(values)] / GIB if values else None


def cluster_pairs(files: dict[str, set[str]] | None = None) -> list[ClusterPair]:
    """Every case whose dev golden values on a GPU have another cluster's beside them (`OTHER_CLUSTERS`), with
    both runs' scored peaks: how far two measurements of one case's peak lie apart, as a floor for how close
    ppb can come to either. The files may hold different commits' runs (`set_by`)."""
    found = []
    for case, names in sorted((files if files is not None else case_files()).items()):
        for gpu, clusters in OTHER_CLUSTERS.items():
            ours = f"golden_values_dev_dgx_{gpu}.json"
            for cluster in clusters:
                theirs = f"golden_values_dev_{cluster}.json"
                if ours not in names or theirs not in names:
                    continue
                paths = [f"{CASES}/{case}/{name}" for name in (ours, theirs)]
                texts = [_git("show", f"{COMMIT}:{path}") for path in paths]
                peak, other = (last_peak_gib(json.loads(text).get("mem-max-allocated-bytes")) for text in texts)
                if peak and other:
                    set_by = (_set_by(paths[0])[1], _set_by(paths[1])[1])
                    found.append(ClusterPair(case, gpu, cluster, peak, other, set_by))
    return found


@dataclass(frozen=True)
class GoldenVersion:
    """One earlier recording of a case's dev golden file (`golden_reruns`), GiB."""

    commit: str  # the commit that wrote this version, and its date
    peak: float  # the last logged `mem-max-allocated-bytes`
    after_step: float | None  # the last logged `mem-allocated-bytes`
    # the flags and variables set otherwise than where the newest version (the one a row scores) was written
    # (None: no config there)
    changed: tuple[str, ...] | None


def _settings(commit: str, case_dir: str) -> dict[str, Any] | None:
    """The case's flags and exported variables at *commit* (its model_config.yaml's MODEL_ARGS and ENV_VARS)."""
    try:
        config = yaml.safe_load(_git("show", f"{commit}:{case_dir}/model_config.yaml")) or {}
    except subprocess.CalledProcessError:
        return None
    return {**(config.get("ENV_VARS") or {}), **(config.get("MODEL_ARGS") or {})}


def _changed(then: dict[str, Any] | None, now: dict[str, Any] | None) -> tuple[str, ...] | None:
    if then is None or now is None:
        return None
    return tuple(sorted(name for name in then.keys() | now.keys() if then.get(name) != now.get(name)))


def _golden_versions(path: str) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(commit line, sha, path then, the file's JSON) of every version of a golden file, newest first
    (`_history`: renames followed, pure renames and unreadable versions skipped)."""
    for commit, where, renamed in _history(path):
        if renamed:
            continue
        sha = commit.split()[0]
        try:
            data = json.loads(_git("show", f"{sha}:{where}"))
        except (subprocess.CalledProcessError, json.JSONDecodeError):
            continue
        yield commit, sha, where, data


def golden_reruns(path: str) -> list[GoldenVersion]:
    """Every version of a golden file that recorded a peak, newest first (`_history`: renames followed, pure
    renames skipped), with the case's flags and variables set otherwise then than where the newest was written
    (later commits may change a case's flags without recording again). Versions
    with the same settings and the same memory after the step (the parameters, gradients and optimizer states
    the run holds) that log different peaks show what moves the peak from one recording to the next without any
    setting changing: what the data and the initialization route, for an MoE case."""
    now: dict[str, Any] | None = None
    found: list[GoldenVersion] = []
    for commit, sha, where, data in _golden_versions(path):
        peak = last_peak_gib(data.get("mem-max-allocated-bytes"))
        after = last_peak_gib(data.get("mem-allocated-bytes"))
        if peak is None or (found and found[-1].peak == peak and found[-1].after_step == after):
            continue  # an edit that kept the memory values records nothing new
        settings = _settings(sha, where.rsplit("/", 1)[0])
        now = settings if not found else now
        found.append(GoldenVersion(commit, peak, after, _changed(settings, now)))
    return found


@dataclass(frozen=True)
class SecondsVersion:
    """One recording of a case's dev golden file with logged iteration times (`seconds_reruns`)."""

    commit: str  # the commit that wrote this version, and its date
    seconds: float  # its median `iteration-time` without iteration 1 (`seconds_of`)
    changed: tuple[str, ...] | None  # as `GoldenVersion.changed`


def seconds_reruns(path: str) -> list[SecondsVersion]:
    """Every version of a golden file that logged iteration times, newest first (renames followed, pure
    renames skipped; times a later edit kept shown at the commit that wrote them), with the flags and variables
    set otherwise than where the newest was written. Versions with the same settings show how far the CI's
    seconds move from one recording to the next with nothing changed in the case: the spread any price of the
    row is read against."""
    now: dict[str, Any] | None = None
    found: list[SecondsVersion] = []
    for commit, sha, where, data in _golden_versions(path):
        seconds = seconds_of(data.get("iteration-time"))
        if seconds is None:
            continue
        settings = _settings(sha, where.rsplit("/", 1)[0])
        now = settings if not found else now
        if found and found[-1].seconds == seconds:  # a later edit kept these times: the older commit wrote them
            found[-1] = SecondsVersion(commit, seconds, found[-1].changed)
            continue
        found.append(SecondsVersion(commit, seconds, _changed(settings, now)))
    return found


def _flags_text(changed: tuple[str, ...] | None) -> str:
    """A recording's flags set otherwise than the newest's, the first four named."""
    if changed is None:
        return "flags not found"
    more = " ..." if len(changed) > 4 else ""
    return ", ".join(changed[:4]) + more or "the same flags"


def same_flag_spread(versions: list[SecondsVersion]) -> float | None:
    """The largest over the smallest seconds among the versions recorded with the newest one's settings
    (None: fewer than two such)."""
    same = [version.seconds for version in versions if version.changed == ()]
    return max(same) / min(same) if len(same) > 1 else None


def _states_at_start(row: Row) -> bool:
    """Whether the row's run has its optimizer's states before iteration 1 (`training.optimizer_states_at_start`,
    set by `ppb import megatron` from the case's flags)."""
    return row.measured is not None and bool(row.measured.raw["training"].get("optimizer_states_at_start"))


def iteration_rows(rows: list[Row], beyond: float = 0.03) -> list[IterationRow]:
    """Rows whose peak is off by more than *beyond*, with their golden file's first iterations.

    `mem-max-allocated-bytes` is the most allocated since the process started (Megatron's training_log
    logs `torch.cuda.max_memory_allocated()` and resets nothing), so it never falls. Iteration 1 runs
    before the first optimizer step creates Adam's two moments (torch.optim.Adam and Transformer Engine's
    FusedAdam make a parameter's state at its first step): it is compared with ppb's peak without them
    (bench/public_memory.py `predicted_first_iteration_gib`), or with them where the case's flags make them
    at the load (Megatron-FSDP's --ckpt-format fsdp_dtensor with --load: `training.optimizer_states_at_start`).
    A rise after the second iteration, every setting the same, is what the data moves: an MoE router's
    balance as it trains. A peak flat from iteration 1 on with ppb's lower later on is iteration 1's own."""
    found = []
    for row in rows:
        error = _error(row.peak)
        if row.measured is None or error is None or abs(error) <= beyond:
            continue
        peaks = dict(row.golden.peaks_by_iteration)
        steps = sorted(peaks)
        first = peaks[1] / GIB if 1 in peaks else None
        second = peaks[steps[1]] / GIB if len(steps) > 1 else None
        adam = row.measured.raw.get("training", {}).get("optimizer", "adam") in ("adam", "adamw")
        first_ppb = predicted_first_iteration_gib(row.measured) if adam and row.moment != "allocated" else None
        found.append(IterationRow(row, first, first_ppb, second))
    return found


def sweep(
    only: str | None = None, gpus: tuple[str, ...] = DEFAULT_GPUS
) -> tuple[list[Row], list[tuple[str, str, str]]]:
    """(priced rows, refused (case, reason group, example line)) on the systems *gpus*."""
    rows: list[Row] = []
    refused: list[tuple[str, str, str]] = []
    listed = {platform: recipes(platform) for platform in set(RECIPE_DIRS.values())}
    for name, files in sorted(case_files().items()):
        family, case = name.split("/")
        if only and only not in name:
            continue
        goldens = {gpu: f"golden_values_dev_dgx_{gpu}.json" for gpu in gpus}
        goldens = {gpu: file for gpu, file in goldens.items() if file in files}
        if not goldens:
            continue
        for platform in dict.fromkeys(RECIPE_DIRS[gpu] for gpu in goldens):  # a case refused once a platform
            recipe = listed[platform].get((family, case))
            if recipe is None and family in GPT_FAMILIES:  # a case no recipe lists now: its family's
                recipe = Recipe("pretrain_gpt.py", NODE_GPUS)
            shown = name if platform == "h100" else f"{name} ({platform})"
            if recipe is None:
                why = f"in no {platform} recipe (release cases: node count not in the repository)"
                refused.append((shown, why, ""))
            elif recipe.script != "pretrain_gpt.py":
                refused.append((shown, f"trained by {recipe.script}, not pretrain_gpt.py", ""))
            else:
                continue
            goldens = {gpu: file for gpu, file in goldens.items() if RECIPE_DIRS[gpu] != platform}
        if not goldens:
            continue
        for gpu, file in goldens.items():
            recipe = listed[RECIPE_DIRS[gpu]].get((family, case)) or Recipe("pretrain_gpt.py", NODE_GPUS)
            golden = Golden.read(f"{CASES}/{name}/{file}")
            if not (golden.peak_bytes or golden.seconds):
                refused.append((f"{name} ({gpu})", "no training golden values (memory, iteration time)", ""))
                continue
            config = measured_config(f"{CASES}/{name}", golden)  # the flags that ran it
            if any(re.fullmatch(r"MODEL_ARGS_\d+", str(key)) for key in config):
                # _run_training.sh runs MODEL_ARGS_<n> for run n: the golden values span several launches
                refused.append((f"{name} ({gpu})", "several launches (MODEL_ARGS_<n>), one golden file", ""))
                continue
            text = launch_text(config)
            now = yaml.safe_load(_git("show", f"{COMMIT}:{CASES}/{name}/model_config.yaml")) or {}
            drift = _changed(*({**(c.get("ENV_VARS") or {}), **(c.get("MODEL_ARGS") or {})} for c in (config, now)))
            try:
                rows.append(replace(price(family, case, gpu, text, golden, recipe.gpus), drift=drift or ()))
            except InputError as err:
                refused.append((f"{name} ({gpu})", f"refused at {err.field or 'the launch'}", err.problem))
    return rows, refused


def _priced_at(golden: Golden) -> str:
    """The releases a row is priced at (`Golden.release`)."""
    release = golden.release
    if not release:
        return ""
    torch = f", PyTorch {release['pytorch']}" if "pytorch" in release else ""
    return f" priced at {release.get('megatron_core')}, TE {release.get('transformer_engine')}{torch}"


def _cell(pair: tuple[float, float] | None, digits: int) -> str:
    if pair is None:
        return f"{'-':>8s} {'-':>8s} {'-':>7s}"
    return f"{pair[0]:8.{digits}f} {pair[1]:8.{digits}f} {_error(pair):+7.1%}"


def _summary(rows: list[Row], label: str) -> str:
    parts = []
    for name in ("peak", "after_step", "seconds"):
        errors = [abs(e) for row in rows if (e := _error(getattr(row, name))) is not None]
        if errors:
            parts.append(f"{name} {sum(errors) / len(errors):5.1%} mean, {max(errors):6.1%} largest ({len(errors)})")
    return f"{label:20s} " + "; ".join(parts)


def main() -> int:
    argv = sys.argv[1:]
    only = argv[argv.index("--cases") + 1] if "--cases" in argv else None
    verbose = "--verbose" in argv
    gpus = tuple(argv[argv.index("--gpus") + 1].split(",")) if "--gpus" in argv else DEFAULT_GPUS
    if not set(gpus) <= set(GPUS):
        print(f"--gpus: {','.join(gpus)}: known systems are {', '.join(GPUS)}", file=sys.stderr)
        return 2
    if not MIRROR:
        print("set PPB_MEGATRON_LM to a Megatron-LM git repository holding commit d98e8a64", file=sys.stderr)
        return 2
    print(f"machine: {machine()}")
    print(f"Megatron-LM {COMMIT} functional tests, one node of {NODE_GPUS} GPUs")
    rows, refused = sweep(only, gpus)
    head = f"{'case':62s} {'gpu':4s} {'peak GiB: measured':>18s} {'ppb':>8s} {'error':>7s} "
    print(
        head + f"{'after step':>8s} {'ppb':>8s} {'error':>7s} {'seconds':>8s} {'ppb':>8s} {'error':>7s} "
        f"{'unmod.':>6s}  golden of"
    )
    for row in rows:
        print(
            f"{row.family + '/' + row.case:62s} {row.gpu:4s} {_cell(row.peak, 2):>34s} {_cell(row.after_step, 3)} "
            f"{_cell(row.seconds, 3)} {len(row.notes):6d}  {row.golden.commit}"
            + (f" (memory {row.golden.memory_commit})" if row.golden.memory_commit != row.golden.commit else "")
            + (_priced_at(row.golden) if verbose else "")
        )
        if verbose:
            for note in row.notes:
                print(f"    not modelled: {note}")
            if row.drift:
                print(f"    flags as measured at {row.golden.measured_commit}, not {COMMIT}'s: {', '.join(row.drift)}")
    print()
    print("mean absolute and largest error, per family and GPU:")
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows:
        groups[row.family, row.gpu].append(row)
    for (family, gpu), members in sorted(groups.items()):
        print(_summary(members, f"{family} {gpu}"))
    print(_summary(rows, "all"))
    modelled = [row for row in rows if not row.notes]
    print(_summary(modelled, "every flag modelled"))
    trays = [row for row in rows if row.gpu == "gb200" and row.gpus == NODE_GPUS]
    if trays:
        # the gb200 1-node recipe's cases (one 4-GPU tray) log 3-7x their two-tray twins' seconds with
        # identical model configs (e.g. the 12-layer TP4 case: 2.19 s against 0.309): not the model's
        print(_summary(trays, "gb200, two trays"))
    print(f"({len(rows) - len(modelled)} rows carry flags ppb does not model (column unmod.); --verbose names them)")
    flags = Counter(note.split(":")[0].split()[0] for row in rows for note in row.notes)
    print("flags not modelled, by rows: " + ", ".join(f"{flag} {count}" for flag, count in flags.most_common()))
    if verbose:
        print()
        print("MoE rows beyond 3%: ppb with every expert-parallel rank at its fair share (balanced) and with")
        print("the busiest at the most the routing allows (bound: routing_bound); is the measurement between?")
        print("Then the share of its rows the logged rank would need (implied) and the share independent routing")
        print("gives it at its largest over the logged iterations (independent_share; -: group-limited routing):")
        for item in routing_rows(rows):
            row = item.row
            measured = row.peak[0] if row.peak else 0.0
            within = "yes" if item.balanced <= measured <= item.worst else "no "
            name = f"{row.family}/{row.case}"
            alone = f"{item.independent:6.3f}" if item.independent is not None else f"{'-':>6s}"
            implied = f"{item.implied:6.3f}" if item.implied is not None else f"{'-':>6s}"
            print(
                f"  {name:62s} {row.gpu:4s} {measured:7.2f} {item.balanced:7.2f} {item.bound:5.2f} {item.worst:7.2f}"
                f"  {within} {implied} {alone}"
            )
        print()
        print("MoE seconds by setting: the signed mean error of the MoE rows with a setting and without it (at least")
        print("3 rows each way), the 20 largest gaps; settings come together, so a gap points where to read the code:")
        for split in setting_splits(rows)[:20]:
            print(
                f"  {split.setting[:70]:70s} with {split.with_rows:3d} {split.with_mean:+7.1%}  "
                f"without {split.without_rows:3d} {split.without_mean:+7.1%}  gap {split.gap:+7.1%}"
            )
        print()
        print("Rows beyond 3% by iteration: the measured peak at iteration 1 (no Adam moments yet, unless the load")
        print("made them: `at load`) against ppb's there, at the second logged iteration, and its rise from there")
        print("to the last (no setting changes):")
        for item in iteration_rows(rows):
            row = item.row
            name = f"{row.family}/{row.case}"
            first = f"{item.first:7.2f}" if item.first is not None else f"{'-':>7s}"
            if item.first is not None and item.first_ppb is not None:
                ppb = f"{item.first_ppb:7.2f} {item.first_ppb / item.first - 1:+7.1%}"
            else:
                ppb = f"{'-':>7s} {'-':>7s}"
            second = f"{item.second:7.2f}" if item.second is not None else f"{'-':>7s}"
            rise = f"{item.rise:+7.2f}" if item.rise is not None else f"{'-':>7s}"
            at_load = "  at load" if _states_at_start(row) else ""
            print(f"  {name:62s} {row.gpu:4s} {first} {ppb} {second} {rise}{at_load}")
        print()
        print("Rows beyond 3% recorded again: each version of the row's golden file, newest first, with the peak and")
        print("the memory after the step it logged and the flags set otherwise than for the newest (`golden_reruns`):")
        for item in iteration_rows(rows):
            row = item.row
            path = f"{CASES}/{row.family}/{row.case}/golden_values_dev_dgx_{row.gpu}.json"
            print(f"  {row.family}/{row.case} ({row.gpu}), ppb {row.peak[1] if row.peak else 0.0:.3f}")
            for version in golden_reruns(path):
                after = f"{version.after_step:7.3f}" if version.after_step is not None else f"{'-':>7s}"
                print(f"    {version.commit:22s} {version.peak:7.3f} {after}  {_flags_text(version.changed)}")
        print()
        print("Rows beyond 10% in seconds recorded again: each version of the row's golden file that logged iteration")
        print("times, newest first (the row scores the newest), its median seconds and the flags set otherwise than")
        print("for the newest (`seconds_reruns`); spread: the largest over the smallest with the same flags:")
        for row in rows:
            error = _error(row.seconds)
            if row.seconds is None or error is None or abs(error) <= 0.10:
                continue
            path = f"{CASES}/{row.family}/{row.case}/golden_values_dev_dgx_{row.gpu}.json"
            versions = seconds_reruns(path)
            if len(versions) < 2:
                continue
            spread = same_flag_spread(versions)
            spread_text = f"spread x{spread:.2f}" if spread is not None else "no rerun with the same flags"
            print(f"  {row.family}/{row.case} ({row.gpu}), ppb {row.seconds[1]:.3f} ({error:+.1%}), {spread_text}")
            for version in versions[:8]:
                print(f"    {version.commit:22s} {version.seconds:7.3f}  {_flags_text(version.changed)}")
        print()
        print("One case's peak measured on two clusters of the same GPU (dev golden files; their runs may be of")
        print("different commits, each file's memory set by the commit shown): how far two measurements lie apart:")
        for pair in cluster_pairs():
            print(
                f"  {pair.case[:62]:62s} {pair.gpu:4s} {pair.peak:7.3f} {pair.cluster:20s} {pair.other:7.3f} "
                f"{pair.spread:+6.1%}  {pair.set_by[0].split()[0]} / {pair.set_by[1].split()[0]}"
            )
    print()
    reasons = Counter(reason for _, reason, _ in refused)
    print(f"refused: {len(refused)} (case, gpu) pairs or cases")
    for reason, count in reasons.most_common():
        example = next((case, line) for case, why, line in refused if why == reason)
        print(f"  {count:3d}  {reason}" + (f": e.g. {example[0]}: {example[1]}" if example[1] else ""))
    if verbose:
        for case, reason, line in refused:
            print(f"    {case}: {reason} {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
