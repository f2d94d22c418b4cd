"""Input limits: sizes no real training run has, refused in one line before any work starts.

Each limit sits several times above the largest figure of a published run, so no real input
meets it, and low enough that the work it allows stays bounded (a schedule of pp·vpp·m cells is
simulated op by op; a walk has a row per layer) and that integer arithmetic on the largest
values allowed stays far inside int64 (the Parquet tables' integers). Every limit is stated
here once; run configs, model specs, HuggingFace config.json files, SAPP layers.json files,
census and calibration files and the `ppb` flags all check against these.

Reference points (public): Llama 3.1 405B (Dubey et al. 2024, "The Llama 3 Herd of Models"):
126 layers, hidden 16,384, FFN 53,248, 128 heads, vocabulary 128,256, 16,384 GPUs, pp 16.
Megatron-LM's 1T model (Narayanan et al. 2021, table 1): 128 layers, hidden 25,600, tp 8,
pp 64, 3,072 sequences per batch. PaLM 540B: 118 layers, FFN 73,728, vocabulary 256k.
DeepSeek-V3: 61 layers, 256 routed experts, MLA ranks 512/1,536; Kimi K2: 384 experts.
Gemma: vocabulary 256,000. Qwen2.5-1M: 1M-token context.
"""

from __future__ import annotations

from typing import Any

from pydantic import AfterValidator

from ppb_core.errors import InputError

# --- model shapes ---------------------------------------------------------------------------
LAYERS = 1024  # body layers of a model, of a run, and of a layers.json (8× Megatron's 1T: 128)
HIDDEN = 2**17  # hidden size, head dims, MLA ranks: 131,072 (5× Megatron's 1T: 25,600)
FFN = 2**20  # MLP and expert widths: 1,048,576 (14× PaLM's 73,728)
VOCABULARY = 2**22  # 4,194,304 (16× Gemma's 256,000)
HEADS = 4096  # attention and key/value heads (32× Llama 3.1 405B's 128)
EXPERTS = 2**14  # routed or shared experts per layer: 16,384 (40× Kimi K2's 384)
POSITIONS = 2**31  # max_position_embeddings a config.json may state (config files state up to 10M)

# --- the run --------------------------------------------------------------------------------
SEQUENCE = 2**24  # tokens per sequence: 16,777,216 (16× the longest trained context, 1M)
MICRO_BATCH_SIZE = 4096  # sequences per micro-batch
MICRO_BATCHES = 2**16  # micro-batches per iteration: 65,536 (20× Megatron's 1T at dp 6: 512)
STAGES = 512  # pipeline stages (8× Megatron's 1T: 64)
CHUNKS = 64  # virtual pipeline chunks per stage
# Stage × chunk × micro-batch cells of one iteration's schedule, each simulated op by op:
# 131,072 (4× Megatron's 1T, pp 64 × 512 micro-batches × 1 chunk); about 3 s of `ppb estimate`.
SCHEDULE_CELLS = 2**17
DEVICES = 2**20  # dp, tp, cp, ep, world size: 1,048,576 (64× Llama 3's 16,384 GPUs)
MODELS = 64  # sub-models of one run (a vision tower, a projector, a language model: 3)
COMBINED = 1024  # (model, node) pairs ppb.combined may name
# Device figures: finite and below these, so no product of them reaches infinity.
DEVICE_MEMORY_MB = 2**24  # 16 TiB per device (80× a B200's 192 GB)
# ... and at least this: 512 MB, under any accelerator a model is trained on (a B300's 288 GB written as 288 is
# under it, the mistake it catches: memory_mb is in MB)
DEVICE_MEMORY_MIN_MB = 512
DEVICE_RATE = 1e7  # TFLOPS and GB/s (about 5,000× a B200's dense 16-bit 2,250 TFLOPS)
# ... and at least this, as are the efficiencies: a time is bytes or FLOPs over a rate, and a
# rate of 5e-324 (a float, positive) made it infinite.
DEVICE_RATE_MIN = 1e-3
DEVICE_LATENCY_US = 1e7  # ten seconds for one step of a collective
FACTOR = 1e6  # capacity factors, imbalance, recompute coefficients, optimizer bytes
DESCRIPTIONS = 4096  # entries of a layers.json (a description per distinct layer, merged by nb_layer)
SAPP_NUMBER = 1e15  # times and MB of a layers.json entry (an exabyte in MB; 10^15 forward times)

# --- strategy search ------------------------------------------------------------------------
SEARCH_VALUES = 64  # values one dimension of a search spec's limits may list (a real one lists 1 to 6)
# Points of a search's grid, each validated and screened: 10^7 (1,000× the 10,000 the largest
# published searches screen); about an hour of screening on two cores.
SEARCH_POINTS = 10**7
RANKED = 1000  # strategies a search ranks (each balanced exactly)
WORKERS = 1024  # processes one search starts
# a multiple of the balancer's work limits (`--work`): a thousand times the default's 300 M array elements of
# listing alone run for hours
BALANCE_WORK = 1000.0
SEARCH_SECONDS = 7 * 86400.0  # a search's time budget and each strategy's balancing or timeout: a week

# --- files ----------------------------------------------------------------------------------
FILE_BYTES = 16 * 2**20  # a JSON or CSV file: 16 MiB (a census, the largest, is under 1 MiB)
YAML_BYTES = 2**20  # a run config: 1 MiB (a real one is under 4 KB)
DEPTH = 64  # nesting of a YAML or JSON file's mappings and lists (a real one: 5), of a Python config's syntax
YAML_VALUES = 100_000  # values of a run config with every alias expanded (a real one has about 100)
# A torchtitan config function's .py file (torchtitan's largest config_registry.py at b5bcd76c6: 43 KB, 23
# statements a function), and the statements its functions run, each call's again: parsed and read, never run.
PYTHON_BYTES = 2**20
PYTHON_STATEMENTS = 1000
CSV_FIELD_BYTES = 2**17  # one field of a calibration CSV (Python's csv module stops there)


def over(value: object, limit: float, what: str = "") -> str:
    """The one wording of a limit refused: the value, ppb's limit, and where limits are stated."""
    shown = _count(value)
    return f"{shown} is over ppb's limit of {_count(limit)}{' ' + what if what else ''} (ppb_core/limits.py)"


def _count(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        text = f"{value:,}"
        return text if len(text) <= 24 else f"a {len(str(abs(value)))}-digit number"
    if isinstance(value, float):
        return f"{value:,.0f}" if value.is_integer() and abs(value) < 1e15 else f"{value:g}"
    return str(value)


def at_most(limit: float, what: str = "") -> AfterValidator:
    """A pydantic check of a field against a limit, refused in `over`'s wording."""

    def check(value: Any) -> Any:
        if value is not None and value > limit:
            raise ValueError(over(value, limit, what))
        return value

    return AfterValidator(check)


def check_schedule(stages: int, chunks: int, micro_batches: int, source: object, field: str) -> None:
    """Stages, chunks and micro-batches each within their limit, and their product within
    `SCHEDULE_CELLS` (the schedule is simulated cell by cell); an InputError naming *field* if not."""
    for value, limit, what in (
        (stages, STAGES, "pipeline stages"),
        (chunks, CHUNKS, "chunks per stage"),
        (micro_batches, MICRO_BATCHES, "micro-batches"),
    ):
        if value > limit:
            raise InputError(source, field, over(value, limit, what))
    cells = stages * chunks * micro_batches
    if cells > SCHEDULE_CELLS:
        raise InputError(
            source,
            field,
            f"stages·chunks·micro-batches = {stages}·{chunks}·{micro_batches} schedule cells: "
            + over(cells, SCHEDULE_CELLS),
        )
