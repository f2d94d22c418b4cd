"""torchtitan's published benchmark files beyond the two eager FSDP rows: compiled and Float8 runs,
2D (FSDP + TP), 3D (+ PP) and 4D (+ CP) Llama 3.1 runs, as run configs for bench/public_runs.py.

Sources (pytorch/torchtitan, benchmarks/, read at b5bcd76c6):
- llama3_h100_202412_torchtitan.md (runs at torchtitan 9dec370, torch 1963fc8): Tables 1 and 3's
  compiled and compiled + Float8 rows (the eager rows are bench/public_runs.py's own), Tables 2, 4,
  5 and 6 (every run compiled and Float8); 500 W H100 with 96 GB HBM2e.
- asyncTP_llama3_h100_2025-06_torchtitan.md (torchtitan 820504e): Llama 3.1 70B on 256 H100 (FSDP
  32, TP 8, full checkpointing, local batch 16) and 8B on 64 H100 (FSDP 8, TP 8, per-op
  checkpointing, local batch 12), compiled, BF16 and Float8 tensorwise, vanilla and async TP. The
  Float8 rowwise rows are left out: ppb has no rowwise-scaled recipe.
- llama3-8b_h200_202506_trainy-whitefiber.md (torchtitan e7c0cae, a community submission): Llama 3.1
  8B on 4 and 8 nodes of 8 H200, llama3_8b.toml at e7c0cae (FSDP over all, per-op checkpointing,
  sequence 8192) with local batch 2, compile and Float8 (FSDP Float8 all-gather on).

Seconds from tokens/s per GPU as torchtitan computes it (train.py at 9dec370 and e7c0cae): every
rank counts its batch's labels before context parallelism shards them (local batch · sequence) and
divides by the log window's time and by `non_data_parallel_size` = cp · tp · pp; so an iteration
takes local batch · sequence / (tokens/s · cp · tp · pp). Pipelined runs split the local batch into
`pipeline_parallel_microbatches` micro-batches, by default the PP degree (config_manager.py at 9dec370).
"""

from __future__ import annotations

import re
from typing import Any

from _public import FOREACH_ADAMW, LLAMA3_405B, LLAMA31_8B, LLAMA31_70B, TORCHTITAN_COMMITS, torchtitan_run

_BENCH = "pytorch/torchtitan benchmarks"
DEC2024 = f"{_BENCH}/llama3_h100_202412_torchtitan.md (runs at 9dec370)"
ASYNC_TP = f"{_BENCH}/asyncTP_llama3_h100_2025-06_torchtitan.md (runs at 820504e)"
TRAINY = f"{_BENCH}/llama3-8b_h200_202506_trainy-whitefiber.md (runs at e7c0cae)"
TITAN_SOURCES = (DEC2024, ASYNC_TP, TRAINY)

# torchtitan's [compile] and its Float8 converter (Float8Linear, dynamic tensorwise scaling; the
# output layer left in BF16: its filter_fqns = ["output"])
COMPILED: dict[str, Any] = {"torch_compile": True}
FLOAT8: dict[str, Any] = {"torch_compile": True, "matmul_dtype": "fp8", "fp8_recipe": "tensorwise"}
_OP = {"mode": "selective", "option": "op"}
_SP = {"tp": 8, "sequence_parallel": True}  # torchtitan's TP plan shards the norms' sequence (SP)
_FLOAT8_GATHER = "FSDP's Float8 all-gather not stated: priced off, in BF16 (torchtitan's default)"
# Runs whose flags turn on FSDP's Float8 all-gather and the scale precompute (Trainy's command line,
# 3faaa1a0d's llama3_405b.toml): the blocks' linears gathered at a byte (ppb_core.timing.fsdp_float8)
FLOAT8_GATHERED: dict[str, Any] = {**FLOAT8, "fp8_fsdp_all_gather": True, "fp8_precompute_scale": True}
_GATHERED = "FSDP's Float8 all-gather and scale precompute on (its flags): the linears gathered at a byte"
# Tables 5 and 6 name the techniques of train_configs/llama3_405b.toml at 9dec370 (compile, Float8 linears,
# async TP), whose [float8] also sets enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp
# (the 8B and 70B tomls set neither: those rows' Float8 comes from the command line, the gathers off)
_TOML_405B = "FSDP's Float8 all-gather and scale precompute on, as llama3_405b.toml at 9dec370 sets them"


def titan_seconds(local_batch: int, seq: int, tokens_per_s: float, parallel: dict[str, Any]) -> float:
    """An iteration's seconds from torchtitan's tokens/s per GPU (the module docstring's rule)."""
    ranks = parallel.get("cp", 1) * parallel.get("tp", 1) * parallel.get("pp", 1)
    return local_batch * seq / (tokens_per_s * ranks)


def _row(
    label: str,
    source: str,
    spec: dict[str, Any],
    parallel: dict[str, Any],
    seq: int,
    local_batch: int,
    micro_batches: int,
    recompute: str | dict[str, str],
    timing: dict[str, Any],
    tokens_per_s: float,
    device: dict[str, Any],
    assumptions: tuple[str, ...],
) -> dict[str, Any]:
    name = f"torchtitan {label}"
    commit = re.search(r"\bat ([0-9a-f]{7,})", source)  # every source names the commit its runs ran
    assert commit is not None and commit.group(1) in TORCHTITAN_COMMITS, source
    per_rank = local_batch // micro_batches
    raw = torchtitan_run(name, spec, parallel, seq, per_rank, micro_batches, recompute, device, commit.group(1))
    raw["timing"] |= timing
    if source.startswith((DEC2024, DOCS_2024)):  # before 6e4988550: foreach AdamW
        raw["timing"] |= FOREACH_ADAMW
    if source.startswith((DEC2024, DOCS_2024)) and raw["timing"].get("torch_compile"):
        # before bbb1b616e (2025-04-02) train.py calls the loss eagerly: only the blocks are compiled
        raw["timing"] |= {"compile_loss": False}
    return {
        "name": name,
        "source": source,
        "raw": raw,
        "published": f"{tokens_per_s:,.0f} tokens/s per GPU",
        "seconds": titan_seconds(local_batch, seq, tokens_per_s, parallel),
        "assumptions": assumptions,
    }


def titan_rows(h100: dict[str, Any]) -> list[dict[str, Any]]:
    """Each row's fields for bench/public_runs.py's PublicRun; *h100* is torchtitan's 500 W H100."""
    rows = []
    # Tables 1 and 3: Llama 3.1 8B FSDP, local batch 2 of 8192, per-op checkpointing
    for gpus, table, compiled, float8 in ((8, "Table 1", 6667, 8532), (128, "Table 3", 6514, 8380)):
        for label, timing, tps in (("compile", COMPILED, compiled), ("compile + Float8", FLOAT8, float8)):
            rows.append(
                _row(
                    f"8B FSDP {label} ({gpus} H100)", f"{DEC2024}, {table}", LLAMA31_8B, {"dp": gpus},
                    8192, 2, 1, _OP, timing, tps, h100,
                    (_FLOAT8_GATHER,) if timing is FLOAT8 else (),
                )
            )  # fmt: skip
    # Table 2: 8B, 8 GPUs, FSDP x CP, local batch 1, full checkpointing, compiled, Float8
    for dp, cp, seq, tps in ((8, 1, 32768, 3890), (4, 2, 65536, 2540), (2, 4, 131072, 1071), (1, 8, 262144, 548)):
        rows.append(
            _row(
                f"8B FSDP{dp} CP{cp} s{seq} (8 H100)", f"{DEC2024}, Table 2", LLAMA31_8B, {"dp": dp, "cp": cp},
                seq, 1, 1, "full", FLOAT8, tps, h100,
                ("ring attention (torchtitan's CP) with its all-gather rotation priced as ppb's ring", _FLOAT8_GATHER),
            )
        )  # fmt: skip
    # Table 4: 70B, FSDP 32 x TP 8, local batch 16, full checkpointing, compiled, Float8
    for label, overlap, tps in (("2D", 0.0, 829), ("2D + AsyncTP", 1.0, 876)):
        rows.append(
            _row(
                f"70B FSDP32 TP8 {label} (256 H100)", f"{DEC2024}, Table 4", LLAMA31_70B, {"dp": 32, **_SP},
                8192, 16, 1, "full", {**FLOAT8, "overlap": {"tp": overlap}}, tps, h100,
                ("async TP as ppb's comm-GEMM overlap (overlap.tp 1.0)" if overlap else "vanilla TP: no overlap",
                 _FLOAT8_GATHER),
            )
        )  # fmt: skip
    # Table 5: 405B, FSDP 8 x TP 8 x PP 8, local batch 32 in 8 micro-batches (the PP degree)
    for schedule, vpp, tps in (("1f1b", 1, 100), ("interleaved", 2, 128)):
        parallel = {"dp": 8, "pp": 8, "vpp": vpp, "schedule": schedule, **_SP}
        rows.append(
            _row(
                f"405B FSDP8 TP8 PP8 {schedule} (512 H100)", f"{DEC2024}, Table 5", LLAMA3_405B, parallel,
                8192, 32, 8, "full", {**FLOAT8_GATHERED, "overlap": {"tp": 1.0}}, tps, h100,
                ("8 micro-batches (torchtitan's default: the PP degree)",
                 *(("two stages a rank (torchtitan's looped schedule)",) if vpp > 1 else ()),
                 "async TP as ppb's comm-GEMM overlap (overlap.tp 1.0)", _TOML_405B),
            )
        )  # fmt: skip
    # Table 6: 405B, TP 8 x PP 8 x FSDP x CP, local batch 8, 1F1B
    for dp, cp, seq, tps in ((8, 1, 32768, 76), (4, 2, 65536, 47), (2, 4, 131072, 31), (1, 8, 262144, 16)):
        rows.append(
            _row(
                f"405B FSDP{dp} CP{cp} TP8 PP8 s{seq} (512 H100)", f"{DEC2024}, Table 6", LLAMA3_405B,
                {"dp": dp, "cp": cp, "pp": 8, **_SP}, seq, 8, 8, "full", {**FLOAT8_GATHERED, "overlap": {"tp": 1.0}},
                tps, h100,
                ("8 micro-batches (the PP degree)", "async TP as ppb's comm-GEMM overlap (overlap.tp 1.0)",
                 "ring attention priced as ppb's ring", _TOML_405B),
            )
        )  # fmt: skip
    # The async-TP file (June 2025): BF16 (compiled) and Float8 tensorwise, vanilla and async TP
    cases = (
        ("70B", LLAMA31_70B, 256, 32, 16, "full", (597.3, 652.4, 809.8, 942.4)),
        ("8B", LLAMA31_8B, 64, 8, 12, _OP, (4378.0, 4809.4, 5078.1, 5570.1)),
    )
    for size, spec, gpus, dp, local, recompute, published in cases:
        variants = (
            ("BF16", COMPILED, 0.0), ("BF16 AsyncTP", COMPILED, 1.0),
            ("Float8", FLOAT8, 0.0), ("Float8 AsyncTP", FLOAT8, 1.0),
        )  # fmt: skip
        for (label, timing, overlap), tps in zip(variants, published, strict=True):
            rows.append(
                _row(
                    f"{size} FSDP{dp} TP8 {label} ({gpus} H100, 2025)", ASYNC_TP, spec, {"dp": dp, **_SP},
                    8192, local, 1, recompute, {**timing, "overlap": {"tp": overlap}}, tps, h100,
                    ("torch.compile on (the file's heading)",
                     "async TP as ppb's comm-GEMM overlap (overlap.tp 1.0)" if overlap else "vanilla TP: no overlap",
                     *((_FLOAT8_GATHER,) if timing is FLOAT8 else ())),
                )
            )  # fmt: skip
    # Trainy on WhiteFiber H200 (700 W SXM, the catalog's h200): 8B FSDP over 32 and 64 GPUs
    for nodes, tps in ((4, 10938), (8, 10753)):
        gpus = 8 * nodes
        rows.append(
            _row(
                f"8B FSDP{gpus} compile + Float8 ({gpus} H200)", TRAINY, LLAMA31_8B, {"dp": gpus},
                8192, 2, 1, _OP, FLOAT8_GATHERED, tps, {"name": "h200"},
                ("H200 SXM at the catalog's figures (the file names no power limit)",
                 "force_recompute_fp8_weight_in_bwd: the weights' casts not re-priced", _GATHERED,
                 "tokens/s sampled at iteration 100"),
            )
        )  # fmt: skip
    return rows


# torchtitan's docs/performance.md of 2024 -------------------------------------------------------
# At 1ea476e9f (2024-04-24): Llama 3 8B / 70B and Llama 2 13B / 70B, FSDP2 over 64 A100 80GB, WPS
# (tokens per second per GPU: train.py then divides the rank's labels by the window's time and by
# `model_parallel_size`, 1 here) and MFU. The configs of that commit: train_configs/llama3_8b.toml and
# llama2_13b.toml (sequence 8192 / 4096, `norm_type = "fused_rmsnorm"`, no compile), the 70B tomls
# (full checkpointing; their TP 8 replaced by the table's FSDP over 64). "selective layer" is the
# integer option, config_manager.py's default "2" (every other block checkpointed). The MFU column
# checks the transcription: utils.py `get_num_flop_per_token`, 6 · parameters + 12 · l · h · q · t.
# At 3faaa1a0d (2024-08-23): Llama 3.1 405B on 128 H100 ("HBM2e based lower TDP SXM H100 (95GB)"),
# FSDP 16 × TP 8, local batch 2 of 8192, full checkpointing; train_configs/llama3_405b.toml there:
# compile on, Float8 with FSDP Float8 all-gather, async TP.
DOCS_2024 = "pytorch/torchtitan docs/performance.md"
DOCS_A100 = f"{DOCS_2024} at 1ea476e9f"
DOCS_405B = f"{DOCS_2024} at 3faaa1a0d"
DOCS_SOURCES = (DOCS_A100, DOCS_405B)

# torchtitan's Llama 2 flavors (torchtitan/models/llama/__init__.py at 1ea476e9f): the FFN width
# 4·dim·2/3 rounded up to `multiple_of` (256 by default; 70B: ×1.3, 4096); the Llama 2 tokenizer.
LLAMA2_13B = {
    "vocab_size": 32000,
    "hidden_size": 5120,
    "num_layers": 40,
    "num_attention_heads": 40,
    "intermediate_size": 13824,
    "max_position_embeddings": 4096,
}
LLAMA2_70B = {"vocab_size": 32000, "hidden_size": 8192, "num_layers": 80, "num_attention_heads": 64,
              "num_key_value_heads": 8, "intermediate_size": 28672, "max_position_embeddings": 4096}  # fmt: skip


def titan_docs_rows(h100: dict[str, Any]) -> list[dict[str, Any]]:
    """docs/performance.md's rows for bench/public_runs.py's PublicRun; *h100*: torchtitan's 500 W H100."""
    a100 = {"name": "a100-80gb"}
    every_other = {"mode": "selective", "option": 2}
    fused_norm = "norm_type fused_rmsnorm (its toml): one Triton kernel each way"
    cases = (
        # (label, spec, seq, local batch, recompute, WPS, MFU, notes)
        ("Llama 3 8B selective layer", LLAMA31_8B, 8192, 1, every_other, 2904, 0.568, (fused_norm,)),
        ("Llama 3 8B selective op", LLAMA31_8B, 8192, 1, _OP, 2973, 0.582, (fused_norm,)),
        ("Llama 3 70B full", LLAMA31_70B, 8192, 1, "full", 331, 0.517, ()),
        ("Llama 2 13B no AC", LLAMA2_13B, 4096, 2, {"mode": "none"}, 2162, 0.611, (fused_norm,)),
        ("Llama 2 13B selective layer", LLAMA2_13B, 4096, 2, every_other, 1914, 0.541, (fused_norm,)),
        ("Llama 2 13B selective op", LLAMA2_13B, 4096, 2, _OP, 1904, 0.538, (fused_norm,)),
        ("Llama 2 70B selective op", LLAMA2_70B, 4096, 1, _OP, 355, 0.508, ()),
    )
    rows = []
    for label, spec, seq, local, recompute, wps, mfu, notes in cases:
        rows.append(
            _row(
                f"{label} FSDP64 (64 A100, 2024)", DOCS_A100, spec, {"dp": 64}, seq, local, 1, recompute,
                {"norm_type": "fused_rmsnorm"} if fused_norm in notes else {},
                float(wps), a100,
                (f"MFU {100 * mfu:.1f}% as published", "eager (no compile)", *notes,
                 "DGX A100's network (the doc names none)"),
            )
        )  # fmt: skip
    sp = {"dp": 16, **_SP}
    for label, timing, wps in (
        ("compiled", {**COMPILED, "overlap": {"tp": 0.0}}, 109),
        ("Float8", {**FLOAT8_GATHERED, "overlap": {"tp": 0.0}}, 177),
        ("Float8 + AsyncTP", {**FLOAT8_GATHERED, "overlap": {"tp": 1.0}}, 185),
    ):
        rows.append(
            _row(
                f"Llama 3.1 405B FSDP16 TP8 {label} (128 H100, 2024)", DOCS_405B, LLAMA3_405B, sp, 8192, 2, 1,
                "full", timing, float(wps), h100,
                ("torch.compile on (the toml's; the table's 'None' row names no optimization beyond it)",
                 "async TP as ppb's comm-GEMM overlap (overlap.tp 1.0)" if "Async" in label else "vanilla TP",
                 *((_GATHERED,) if "Float8" in label else ())),
            )
        )  # fmt: skip
    return rows
