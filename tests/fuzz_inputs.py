"""Hypothesis strategies and the one property of bad input, shared by the suite's fuzzer
(tests/test_inputs_fuzz.py, few examples) and the bigger run (bench/inputs.py).

The property: whatever the run config, config.json, layers.json, launch script or search spec, `ppb`
either succeeds (exit 0, its `--json` strict JSON: no NaN, no Infinity) or refuses (exit 2, one line on stderr, nothing
written), never raises anything else, and finishes within a deadline.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import signal
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

import ppb_core.cli.main as cli_main

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "configs" / "hf"
DEADLINE_S = 120.0

# Values that have broken readers before: edges of the limits, non-finite floats, wrong types.
NASTY: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 8, 63, 64, 65, 1023, 1024, 1025, 4096, 65536, 65537, 2**17, 2**31, 2**63]),
    st.sampled_from([10**30, -(10**30), 10**300]),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 1.5, 5e-324, 1e-300, 1e300, math.inf, -math.inf, math.nan]),
    st.sampled_from(["", "x", "1e30", "llm", "BODY", "HEAD", "full", "selective", "op", "2", "h100-80gb", "silu"]),
    st.sampled_from(["a" * 300, "\u00ff\u0000", "../x", "/dev/zero", "hf", "hf/llama3-8b.json"]),
    st.none(),
    st.booleans(),
    st.lists(st.integers(-2, 40), max_size=3),
    st.lists(st.lists(st.sampled_from(["llm", "BODY", "HEAD", 1]), max_size=2), max_size=2),
    st.dictionaries(
        st.sampled_from(["a", "granularity", "mode", "option", "softmax", "name"]), st.integers(-1, 3), max_size=2
    ),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
)

# Values a real file might hold instead: the fuzzer also walks the valid space, where wrong answers hide.
PLAUSIBLE: st.SearchStrategy[Any] = st.one_of(
    st.integers(1, 16),
    st.sampled_from([32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072]),
    st.floats(0.0, 1.0),
    st.sampled_from([True, False, "1f1b", "interleaved", "gpipe", "dualpipev", "ring", "ulysses", "bf16", "fp32"]),
    st.sampled_from(["full", "megatron", "torchtitan", "mindformers", "adam", "sgd", "gelu", "relu", "swiglu"]),
)
VALUES = st.one_of(NASTY, PLAUSIBLE, PLAUSIBLE)

# A run of each family ppb reads: dense (Llama 3 8B), MoE (Mixtral), latent attention (DeepSeek-V3), a spec.
RUNS: list[dict[str, Any]] = [
    {
        "models": [{"name": "llm", "config": "hf/llama3-8b.json"}],
        "parallel": {"pp": 2, "tp": 2, "dp": 2, "sequence_parallel": True},
        "training": {"seq_length": 1024, "micro_batches": 4, "recompute": {"softmax": 0}},
        "device": {"name": "h100-80gb", "reserved_mb": 2000},
    },
    {
        "models": [{"name": "moe", "config": "hf/mixtral-8x7b.json"}],
        "parallel": {"pp": 2, "dp": 4, "ep": 2},
        "training": {"seq_length": 512, "micro_batches": 4, "moe": {"dropless": False, "capacity_factor": 1.25}},
        "device": {"name": "a100-80gb"},
    },
    {
        "models": [{"name": "mla", "config": "hf/deepseek-v3.json"}],
        "parallel": {"pp": 4, "vpp": 2, "schedule": "interleaved", "dp": 8, "ep": 8},
        "training": {"seq_length": 512, "micro_batches": 8},
        "device": {"name": "h200"},
    },
    {
        "models": [
            {
                "name": "tiny",
                "spec": {
                    "vocab_size": 1024,
                    "hidden_size": 256,
                    "num_layers": 4,
                    "num_attention_heads": 4,
                    "intermediate_size": 512,
                },
            }
        ],
        "parallel": {"pp": 2, "dp": 2, "zero": 2, "devices_per_node": 4},
        "training": {
            "seq_length": 256,
            "micro_batches": 4,
            "micro_batch_size": 2,
            "dtype": "fp16",
            "dropout": 0.1,
            "flash_attention": False,
        },
        "device": {
            "memory_mb": 16000,
            "reserved_mb": 1000,
            "peak_tflops": 400.0,
            "hbm_bandwidth_gbs": 2000.0,
            "intra_node_bandwidth_gbs": 400.0,
            "inter_node_bandwidth_gbs": 50.0,
            "matmul_efficiency": 0.7,
            "memory_efficiency": 0.8,
            "comm_efficiency": 0.8,
            "collective_latency_us": 10.0,
        },
        "ppb": {"combined": []},
        "timing": {"overlap": {"tp": 0.5, "tp_async": 1.0, "cp_ring": 1.0, "cp_a2a": 0.0, "ep": 0.5}},
    },
]

# Qwen1.5-MoE-A2.7B's config.json (huggingface.co/Qwen/Qwen1.5-MoE-A2.7B), the fields ppb reads.
QWEN2_MOE = {
    "model_type": "qwen2_moe",
    "vocab_size": 151936,
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "intermediate_size": 5632,
    "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "max_position_embeddings": 8192,
    "hidden_act": "silu",
}
GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024}
HF_CONFIGS: list[dict[str, Any]] = [
    *(json.loads(path.read_text()) for path in sorted(HF.glob("*.json"))),
    QWEN2_MOE,
    GPT2,
]

LAYERS: dict[str, Any] = json.loads((ROOT / "tests" / "data" / "demo.json").read_text())


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested mapping (its lists' items too), sections included."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def _set(data: Any, path: tuple, value: Any, delete: bool = False) -> None:
    for key in path[:-1]:
        data = data[key]
    if delete and isinstance(data, dict):
        data.pop(path[-1], None)
    else:
        data[path[-1]] = value


@st.composite
def mutated(draw, bases: list[dict[str, Any]], extra_keys: list[str]) -> dict[str, Any]:
    """A base document with one to three of its values replaced, deleted, or a key added."""
    data = json.loads(json.dumps(draw(st.sampled_from(bases))))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(data)
        leaves = [path for path in paths if not isinstance(_get(data, path), dict | list)]
        if not paths:
            break
        path = draw(st.sampled_from(leaves if leaves and draw(st.integers(0, 4)) else paths))
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
        if action == "add":
            parent = data
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict):
                parent[draw(st.sampled_from(extra_keys))] = draw(VALUES)
        else:
            _set(data, path, draw(VALUES), delete=action == "delete")
    return data


def _yaml_text(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@st.composite
def spoiled(draw, text: str) -> bytes:
    """The file's text, sometimes spoiled as files are: cut short, a line repeated, a stray byte."""
    how = draw(st.sampled_from(["as is"] * 7 + ["cut", "repeat", "byte"]))
    data = text.encode()
    if how == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "repeat":
        lines = text.splitlines(keepends=True)
        index = draw(st.integers(0, max(len(lines) - 1, 0)))
        return "".join([*lines[: index + 1], *lines[index:]]).encode()
    if how == "byte" and data:
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.sampled_from([b"\xff", b"\x00", b"\t", b"&a ", b"*a", b"[", b"{"])) + data[at:]
    return data


RUN_KEYS = ["nope", "pp", "seq_length", "census", "calibration", "combined", "framework", "spec", "config"]
HF_KEYS = [
    "num_hidden_layers",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_layer_freq",
    "kv_lora_rank",
    "q_lora_rank",
    "mlp_only_layers",
    "decoder_sparse_step",
    "first_k_dense_replace",
    "num_experts_per_tok",
    "head_dim",
    "model_type",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "n_inner",
    "num_nextn_predict_layers",
]
LAYER_KEYS = ["coef_select_rec", "forward_time", "backward_time", "recompute_time", "model_name", "vendor_note"]


def run_configs() -> st.SearchStrategy[bytes]:
    return mutated(RUNS, RUN_KEYS).flatmap(lambda data: spoiled(_yaml_text(data)))


def hf_configs() -> st.SearchStrategy[bytes]:
    return mutated(HF_CONFIGS, HF_KEYS).flatmap(lambda data: spoiled(json.dumps(data)))


def layer_files() -> st.SearchStrategy[bytes]:
    return mutated([LAYERS], LAYER_KEYS).flatmap(lambda data: spoiled(json.dumps(data)))


FLAG_VALUES = st.sampled_from(["1", "2", "4", "8", "0", "-1", "64", "65", "4096", "100000", "nan", "inf", "x", "auto"])


@st.composite
def balance_flags(draw) -> list[str]:
    flags: list[str] = []
    for flag in draw(
        st.lists(st.sampled_from(["-s", "-mb", "-i", "-mem", "--constant-memory"]), max_size=3, unique=True)
    ):
        flags += [flag, draw(FLAG_VALUES)]
    return flags


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (rather than hang) when the block runs longer than *seconds*."""

    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


def _tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*")}


def check_command(files: dict[str, bytes], argv: list[str], succeeded: tuple[int, ...] = (0,)) -> int:
    """Lay *files* out next to configs/hf in a fresh folder, run `ppb argv` there, and check the
    property (*succeeded*: the exit statuses of an answer, `ppb check`'s 1 too); returns the exit status."""
    with tempfile.TemporaryDirectory(prefix="ppb-fuzz-") as name:
        folder = Path(name)
        shutil.copytree(HF, folder / "hf")
        for relative, data in files.items():
            (folder / relative).write_bytes(data)
        before = _tree(folder)
        out, err = io.StringIO(), io.StringIO()
        with (
            contextlib.chdir(folder),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            deadline(DEADLINE_S),
        ):
            try:
                code = cli_main.main(argv)
            except SystemExit as stop:
                code = int(stop.code or 0)
        lines = err.getvalue().splitlines()
        if code == 2:
            assert len(lines) == 1 and lines[0].startswith("ppb"), err.getvalue()
            assert len(lines[0]) < 1000, lines[0][:200]  # never an echo of the input
            assert _tree(folder) == before
        else:
            assert code in succeeded, (code, err.getvalue())
            if "--json" in argv:
                _strict(out.getvalue())
        return code


def run_config_command(data: bytes) -> int:
    return check_command({"r.yaml": data}, ["estimate", "r.yaml", "--json"])


def hf_command(data: bytes) -> int:
    run = {
        "models": [{"name": "m", "config": "hf/x.json"}],
        "parallel": {"pp": 2},
        "training": {"seq_length": 256, "micro_batches": 4},
        "device": {"name": "h100-80gb"},
    }
    return check_command({"r.yaml": _yaml_text(run).encode(), "hf/x.json": data}, ["estimate", "r.yaml", "--json"])


def layers_command(data: bytes, flags: list[str]) -> int:
    return check_command({"l.json": data}, ["balance", "l.json", "-t", "1", "--json", *flags])


# Megatron-LM launch scripts: the flags `ppb check --plan` reads (the pipeline, recompute and the
# sizes it compares with the run config), some read past, shell variables, arrays and quoting.
MEGATRON_FLAGS = [
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--num-query-groups",
    "--kv-channels",
    "--num-experts",
    "--moe-layer-freq",
    "--mtp-num-layers",
    "--seq-length",
    "--micro-batch-size",
    "--global-batch-size",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--pipeline-model-parallel-layout",
    "--decoder-first-pipeline-num-layers",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--recompute-modules",
    "--data-parallel-sharding-strategy",
    "--lr",
]
MEGATRON_SWITCHES = [
    "--sequence-parallel",
    "--use-distributed-optimizer",
    "--use-megatron-fsdp",
    "--bf16",
    "--fp16",
    "--swiglu",
    "--group-query-attention",
    "--untie-embeddings-and-output-weights",
    "--account-for-embedding-in-pipeline-split",
    "--recompute-activations",
]
MEGATRON_VALUES = st.one_of(
    st.sampled_from(["1", "2", "4", "8", "32", "0", "-1", "4096", "14336", "128256", "8192", "99999999999999999999"]),
    st.sampled_from(["full", "selective", "uniform", "block", "core_attn", "mlp", "x", "", "1.5", "$UNSET", "${N:-4}"]),
    st.sampled_from(["'Et*8|t*8L'", "'Et*2|t*2|t*2|t*2L'", "'(t|)*9'", "[0]*3+[1]*29", "'([1]*1+[0]*1)*16'", "optim"]),
    st.sampled_from(['"unclosed', "\\\n", "${A:-${B:-2}}", "$((1+1))", "#", "(", ")"]),
)


@st.composite
def launch_scripts(draw) -> bytes:
    """A Megatron-LM launch script: assignments, an array of flags with values, some quoted."""
    lines = [f"N={draw(MEGATRON_VALUES)}"] if draw(st.booleans()) else []
    words = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 3)) == 0:
            words.append(draw(st.sampled_from(MEGATRON_SWITCHES)))
        else:
            flag, value = draw(st.sampled_from(MEGATRON_FLAGS)), draw(MEGATRON_VALUES)
            words.append(f'"{flag} {value}"' if draw(st.integers(0, 5)) == 0 else f"{flag} {value}")
    lines += ["ARGS=(", *(f"    {word}" for word in words), ")", "torchrun pretrain_gpt.py ${ARGS[@]}"]
    return draw(spoiled("\n".join(lines) + "\n"))


def plan_command(data: bytes) -> int:
    """`ppb check` of a launch script against the Llama run of RUNS (exit 1: a stage does not fit)."""
    run = _yaml_text(RUNS[0]).encode()
    argv = ["check", "r.yaml", "--plan", "plan.sh", "--no-optimum", "--json", "-q"]
    return check_command({"r.yaml": run, "plan.sh": data}, argv, succeeded=(0, 1))


# MindFormers plans for RUNS[0] (32 layers, pp 2): ppb's top-level form and a training yaml's places.
MINDFORMERS_PLANS: list[dict[str, Any]] = [
    {"offset": [1, -1], "recompute": [4, 0], "select_recompute": [2, 2], "select_comm_recompute": False},
    {
        "model": {"model_config": {"offset": [0, 0]}},
        "parallel_config": {"pipeline_stage": 2, "data_parallel": 2},
        "recompute_config": {"recompute": [[3, 1]], "select_recompute": {".*norm": [1, 1], ".*act": [1, 1]}},
    },
]
MINDFORMERS_KEYS = ["offset", "ofset", "recompute", "select_recompute", "pipeline_stage", "mp_comm_recompute", "x"]


def mindformers_plans() -> st.SearchStrategy[bytes]:
    return mutated(MINDFORMERS_PLANS, MINDFORMERS_KEYS).flatmap(lambda data: spoiled(_yaml_text(data)))


def mindformers_command(data: bytes) -> int:
    """`ppb check` of a MindFormers plan against the Llama run of RUNS (exit 1: a stage does not fit)."""
    run = _yaml_text(RUNS[0]).encode()
    argv = ["check", "r.yaml", "--plan", "plan.yaml", "--no-optimum", "--json", "-q"]
    return check_command({"r.yaml": run, "plan.yaml": data}, argv, succeeded=(0, 1))


# Calibration files a run config names: measured layer times (timing.calibration) and stage peaks
# (memory.calibration), for RUNS[0] (Llama 3 8B, two stages), their cells replaced by any value.
TIME_ROWS = [
    ["model_name", "node", "kind", "option", "forward_ms", "backward_ms"],
    ["llm", "HEAD", "embedding", "NONE", "0.21", "0.35"],
    ["llm", "BODY", "dense", "NONE", "6.40", "12.90"],
    ["llm", "BODY", "dense", "FULL", "6.45", "19.10"],
]
PEAK_ROWS = [["stage", "peak_mb"], ["0", "23000"], ["1", "17500"]]
CELLS = st.one_of(
    VALUES.map(str),
    st.sampled_from(["6_4", "1e300", "1e-300", "0x10", " 7 ", "", "peak_gib", "SLCT", "TAIL", "output", "-0"]),
)


@st.composite
def calibration_files(draw) -> tuple[str, bytes]:
    """("timing" or "memory", a calibration CSV with one to three cells replaced, sometimes spoiled)."""
    section = draw(st.sampled_from(["timing", "memory"]))
    rows = [list(row) for row in (TIME_ROWS if section == "timing" else PEAK_ROWS)]
    for _ in range(draw(st.integers(1, 3))):
        row = draw(st.integers(0, len(rows) - 1))
        rows[row][draw(st.integers(0, len(rows[row]) - 1))] = draw(CELLS).replace(",", ";").replace("\n", " ")
    text = "".join(",".join(row) + "\n" for row in rows)
    return section, draw(spoiled(text))


def calibration_command(section: str, data: bytes) -> int:
    raw = json.loads(json.dumps(RUNS[0]))
    raw[section] = {"calibration": "c.csv"}
    return check_command({"r.yaml": _yaml_text(raw).encode(), "c.csv": data}, ["estimate", "r.yaml", "--json"])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps("" if value is None else str(value))  # TOML has no null


def _toml_text(document: dict[str, Any], prefix: str = "") -> str:
    """A TOML document: each value a key of its table, each mapping a table of its own."""
    lines = [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    text = "\n".join(lines) + "\n"
    for key, table in ((k, v) for k, v in document.items() if isinstance(v, dict)):
        name = f"{prefix}.{json.dumps(str(key))}" if prefix else json.dumps(str(key))
        text += f"\n[{name}]\n" + _toml_text(table, name)
    return text


# torchtitan v0.2.2's job TOMLs as shipped (tests/data/torchtitan), and keys `ppb import torchtitan` reads.
JOB_TOMLS: list[dict[str, Any]] = [
    tomllib.loads(path.read_text()) for path in sorted((ROOT / "tests" / "data" / "torchtitan").glob("*.toml"))
]
TOML_KEYS = [
    "pipeline_parallel_degree",
    "tensor_parallel_degree",
    "context_parallel_degree",
    "expert_parallel_degree",
    "data_parallel_shard_degree",
    "pipeline_parallel_schedule",
    "pipeline_parallel_microbatch_size",
    "module_fqns_per_model_part",
    "local_batch_size",
    "global_batch_size",
    "seq_len",
    "flavor",
    "mode",
    "selective_ac_option",
    "converters",
    "x",
]


def job_tomls() -> st.SearchStrategy[bytes]:
    return mutated(JOB_TOMLS, TOML_KEYS).flatmap(lambda data: spoiled(_toml_text(data)))


def import_toml_command(data: bytes) -> int:
    """`ppb import torchtitan` of a job TOML on 64 H100s."""
    argv = ["import", "torchtitan", "job.toml", "--gpus", "64", "--device", "h100-80gb", "-o", "run.yaml"]
    return check_command({"job.toml": data}, argv)


def import_megatron_command(data: bytes) -> int:
    """`ppb import megatron` of a launch script on 64 H100s (`check --plan` reads the same flags against a run)."""
    argv = ["import", "megatron", "train.sh", "--gpus", "64", "--device", "h100-80gb", "-o", "run.yaml"]
    return check_command({"train.sh": data}, argv)


# Search specs (searches/*.yaml's form) small enough that a valid one is searched in seconds: a 4-layer spec model
# and Llama 3 8B under torchtitan, on 8 devices, two or three strategies.
SEARCHES: list[dict[str, Any]] = [
    {
        "framework": "megatron",
        "models": [json.loads(json.dumps(RUNS[3]["models"][0]))],
        "devices": 8,
        "device": {"name": "h100-80gb"},
        "training": {"seq_length": 256, "global_batch": 16},
        "limits": {"pp": [1, 2], "tp": [1, 2], "cp": [1], "vpp": [1]},
        "search": {"top": 2},
    },
    {
        "framework": "torchtitan",
        "models": [{"name": "llm", "config": "hf/llama3-8b.json"}],
        "devices": 8,
        "device": {"name": "h100-80gb"},
        "training": {"seq_length": 1024, "global_batch_tokens": 65536},
        "limits": {"pp": [1, 2], "tp": [2], "cp": [1], "vpp": [1], "micro_batch_size": [1]},
        "search": {"top": 1},
    },
]
SEARCH_KEYS = ["pp", "tp", "ep", "vpp", "zero", "recompute", "schedules", "top", "wave", "balance_budget", "x"]


def search_specs() -> st.SearchStrategy[bytes]:
    return mutated(SEARCHES, SEARCH_KEYS).flatmap(lambda data: spoiled(_yaml_text(data)))


def search_command(data: bytes) -> int:
    """`ppb search` of a spec, in this process's one worker (`--workers 1`)."""
    return check_command({"s.yaml": data}, ["search", "s.yaml", "--json", "-q", "--workers", "1"])


def _spec_run(**device: object) -> bytes:
    raw = json.loads(json.dumps(RUNS[3]))
    raw["device"].update(device)
    return _yaml_text(raw).encode()


# Inputs on which the property failed, kept so each failure stays fixed (tests/test_inputs_fuzz.py).
FOUND: dict[str, tuple] = {
    # A positive but subnormal bandwidth: every time bytes / 5e-324 = inf, printed as Infinity in --json.
    "subnormal-bandwidth": (run_config_command, _spec_run(hbm_bandwidth_gbs=5e-324)),
    "subnormal-efficiency": (run_config_command, _spec_run(comm_efficiency=5e-324)),
    # A MindFormers offset of 10^30 layers: the cell's layers were walked one by one (hung).
    "mindformers-huge-offset": (
        mindformers_command,
        b"model:\n  model_config:\n    offset: [0, 1000000000000000000000000000000]\n",
    ),
    # A measured stage peak of 1e300 GiB: infinite bytes, the fit's factors NaN in --json.
    "peak-1e300-gib": (calibration_command, "memory", b"stage,peak_gib\n0,1e300\n1,17\n"),
    # select_recompute a float: `value[0]` of it, a TypeError traceback.
    "mindformers-float-select": (mindformers_command, b"offset: [1, -1]\nrecompute: [4, 0]\nselect_recompute: 0.5\n"),
    # A key YAML reads as a number at a run config's top: RunConfig(**raw) raised TypeError.
    "run-config-number-key": (run_config_command, b"1: 2\n" + _yaml_text(RUNS[0]).encode()),
    # --num-attention-heads 0: hidden % heads, a ZeroDivisionError.
    "megatron-heads-0": (
        import_megatron_command,
        b"torchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 "
        b"--num-attention-heads 0 --seq-length 128 --max-position-embeddings 128\n",
    ),
    # tomllib's RecursionError and Python's 4,300-digit int conversion ValueError.
    "job-toml-nested": (import_toml_command, b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n"),
    "job-toml-5000-digits": (import_toml_command, b"a = " + b"9" * 5000 + b"\n"),
}
