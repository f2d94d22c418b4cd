"""`ppb import torchtitan`: torchtitan job TOMLs turned into run configs, the expected configs derived
by hand from torchtitan v0.2.2 (73a0e697): torchtitan/config/job_config.py's defaults, the model
registries (models/*/__init__.py) and llama3/model/model.py `FeedForward`'s width rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bench._public import (
    BEFORE_V022,
    LLAMA3_405B,
    LLAMA31_8B,
    LLAMA31_70B,
    TORCHTITAN_COMMITS,
    torchtitan_llama31_8b,
    torchtitan_run,
)
from ppb_core.balance.torchtitan_flavors import llama3_ffn, model_spec
from ppb_core.balance.torchtitan_import import import_torchtitan, torchtitan_run_config
from ppb_core.cli.main import main
from ppb_core.config.run import TimingOptions, load_run_config, parse_run_config
from ppb_core.errors import InputError
from ppb_core.estimate.run import estimate
from ppb_core.model.kinds import body_kind, head_kind, tail_kind
from ppb_core.model.params import body_params, head_params, tail_params

SHIPPED = Path(__file__).parent / "data" / "torchtitan"
H100 = {"name": "h100-80gb", "memory_mb": 98304, "reserved_mb": 0}


def _imported(text: str, gpus: int | None = None) -> dict[str, Any]:
    return import_torchtitan(text, gpus, "h100-80gb").raw


@pytest.mark.parametrize(
    ("dim", "multiple_of", "multiplier", "ffn"),
    [
        # 8B: int(2·16384/3) = 10922; int(1.3·10922) = int(14198.6) = 14198; up to 1024s: 14·1024 = 14336
        (4096, 1024, 1.3, 14336),
        # 70B: int(2·32768/3) = 21845; int(1.3·21845) = 28398; up to 4096s: 7·4096 = 28672
        (8192, 4096, 1.3, 28672),
        # 405B: int(2·65536/3) = 43690; int(1.2·43690) = 52428; up to 4096s: 13·4096 = 53248
        (16384, 4096, 1.2, 53248),
        # debugmodel: int(2·1024/3) = 682, no multiplier; up to 256s: 3·256 = 768
        (256, 256, None, 768),
    ],
)
def test_the_ffn_width_follows_torchtitans_rule(dim: int, multiple_of: int, multiplier: float | None, ffn: int) -> None:
    assert llama3_ffn(dim, multiple_of, multiplier) == ffn


def test_the_shipped_8b_job_becomes_the_run_config_derived_by_hand() -> None:
    imported = import_torchtitan((SHIPPED / "llama3_8b.toml").read_text(), 64, "h100-80gb")
    raw = imported.raw
    assert raw["framework"] == "torchtitan"
    assert raw["models"][0]["spec"] == {
        "max_position_embeddings": 8192,  # update_from_config: max_seq_len = training.seq_len
        "activation": "swiglu",
        "norm": "rmsnorm",
        "vocab_size": 128256,  # TransformerModelArgs.vocab_size
        "hidden_size": 4096,
        "num_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
    }
    # data_parallel_shard_degree -1 takes the 64 ranks; FSDP2 (ParallelDims.fsdp_enabled)
    assert raw["parallel"] == {"dp": 64, "tp": 1, "pp": 1, "cp": 1, "world_size": 64, "fsdp": True, "zero": 3}
    assert raw["training"] == {
        "seq_length": 8192,
        "micro_batch_size": 1,  # local_batch_size
        "micro_batches": 1,  # global_batch_size -1: local × dp, one accumulation step
        "dtype": "bf16",  # mixed_precision_param's default
        "optimizer": "adamw",
        "flash_attention": True,
        "recompute": {"mode": "selective", "option": "op"},
    }
    assert "timing" not in raw  # [compile] enable false; the float8 section without its converter
    assert imported.notes == []


def _total_params(raw: dict[str, Any]) -> int:
    run = parse_run_config(raw)
    spec = run.specs["llm"]
    body = sum(body_params(body_kind(spec, index)).total for index in range(spec.num_layers))
    head = head_params(head_kind(spec, spec.vocab_size)).total
    return head + body + tail_params(tail_kind(spec, spec.vocab_size)).total


def test_the_imported_8b_counts_transformers_llama_parameters() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    expected = sum(p.numel() for p in model.parameters())
    assert _total_params(_imported((SHIPPED / "llama3_8b.toml").read_text(), 8)) == expected


def _meta_count(config: Any) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def test_the_imported_deepseek_16b_and_qwen3_count_transformers_parameters() -> None:
    transformers = pytest.importorskip("transformers")
    # deepseekv3_args["16B"] in transformers' words: no query compression, 2 shared experts of 1408,
    # the first layer dense, one expert group (no grouped routing)
    deepseek = transformers.DeepseekV3Config(
        vocab_size=102400,
        hidden_size=2048,
        intermediate_size=10944,
        moe_intermediate_size=1408,
        num_hidden_layers=27,
        num_attention_heads=16,
        num_key_value_heads=16,
        n_shared_experts=2,
        n_routed_experts=64,
        num_experts_per_tok=6,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        tie_word_embeddings=False,
    )
    job = '[model]\nname = "deepseek_v3"\nflavor = "16B"\n[training]\nseq_len = 4096\n'
    assert _total_params(_imported(job, 8)) == _meta_count(deepseek)
    # qwen3_args["0.6B"]: head_dim 128, per-head q/k norms, the embedding tied to the output
    qwen = transformers.Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    )
    job = '[model]\nname = "qwen3"\nflavor = "0.6B"\n[training]\nseq_len = 4096\n'
    assert _total_params(_imported(job, 8)) == _meta_count(qwen)


def test_replicas_alone_are_ddp_and_with_shards_hsdp_is_said() -> None:
    # parallel_dims.py: dp_shard 1 and no CP is DDP (nothing sharded); both degrees > 1 is HSDP
    raw = _imported("[parallelism]\ndata_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1", 8)
    assert (raw["parallel"]["dp"], raw["parallel"]["zero"], "fsdp" in raw["parallel"]) == (8, 0, False)
    imported = import_torchtitan("[parallelism]\ndata_parallel_replicate_degree = 2", 16, "h100-80gb")
    assert (imported.raw["parallel"]["dp"], imported.raw["parallel"]["fsdp"]) == (16, True)
    assert imported.notes == ["parallelism.data_parallel_replicate_degree 2: HSDP, priced as FSDP over dp 16"]


def _comparable(raw: dict[str, Any]) -> dict[str, Any]:
    """A run config as ppb reads it, less what does not bear on the comparison: the name, the world
    size (derived from the degrees), the rope model's position limit (read only by learned
    positions) and Adam against AdamW (the same 12 bytes of state a parameter); the recompute as
    it resolves (torchtitan's `{mode: full}` and ppb's `full` are the same switches)."""
    run = parse_run_config({**raw, "device": H100})
    dumped = run.model_dump()
    resolved = run.recompute
    dumped["training"]["recompute"] = (
        resolved.switches,
        resolved.modules,
        resolved.full,
        resolved.num_layers,
        resolved.early_stop,
    )
    dumped.pop("name")
    dumped["parallel"].pop("world_size")
    dumped["models"][0]["spec"].pop("max_position_embeddings")
    dumped["training"].pop("optimizer")
    return dumped


# torchtitan's published H100 runs (benchmarks/llama3_h100_202412_torchtitan.md) as a user writes them
# in a v0.2.2 job TOML; torch.compile and Float8 are left out, as the bench rows leave them out. The
# runs predate torchtitan's own early_stop (25413d224): torch.utils.checkpoint's default, early stop,
# applied, which v0.2.2 spells `early_stop = true`.
TABLE_1_AND_3 = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
early_stop = true
[optimizer]
implementation = "foreach"
"""
TABLE_2_CP2 = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
seq_len = 65536
[parallelism]
data_parallel_shard_degree = 4
context_parallel_degree = 2
[activation_checkpoint]
mode = "full"
early_stop = true
"""
TABLE_4 = """
[model]
name = "llama3"
flavor = "70B"
[training]
local_batch_size = 16
global_batch_size = 512
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 32
tensor_parallel_degree = 8
[activation_checkpoint]
mode = "full"
early_stop = true
"""


def _at_9dec370(raw: dict[str, Any]) -> dict[str, Any]:
    """An imported run with the kernels of 9dec370, the benchmarks' commit: a toml does not say its
    commit, so the importer writes v0.2.2's (the defaults) and the bench rows state the older ones."""
    return {**raw, "timing": {**raw.get("timing", {}), **BEFORE_V022}}


def test_the_importer_reads_the_optimizer_implementation() -> None:
    # 9dec370's default (foreach) is a v0.2.2 key's value; v0.2.2's own default is fused
    for toml, implementation in ((TABLE_1_AND_3, "foreach"), (TABLE_2_CP2, "fused")):
        timing = parse_run_config({**_imported(toml, 8), "device": H100}).timing
        assert timing.optimizer_implementation == implementation
    with pytest.raises(InputError, match=r"optimizer\.implementation: 'adafactor'"):
        _imported(TABLE_2_CP2 + '[optimizer]\nimplementation = "adafactor"\n', 8)


def test_the_importer_writes_v0_2_2_s_kernels() -> None:
    timing = parse_run_config({**_imported(TABLE_1_AND_3, 8), "device": H100}).timing
    assert (timing.norm_type, timing.repeat_kv, timing.sdpa_backend) == ("nn_rmsnorm", False, "cudnn")


@pytest.mark.parametrize("gpus", [8, 128])
def test_the_fsdp_benchmark_is_reproduced_by_its_toml(gpus: int) -> None:
    # the bench rows of Tables 1 and 3 also state their commit's date (9dec370, 2024-12-26), which a toml
    # cannot say: a user running that commit states it as the rows do
    imported = _at_9dec370(_imported(TABLE_1_AND_3, gpus))
    imported["framework_release"] = {"torchtitan": TORCHTITAN_COMMITS["9dec370"]}
    assert _comparable(imported) == _comparable(torchtitan_llama31_8b(gpus, H100))


def test_the_cp_and_tp_benchmarks_are_reproduced_by_their_toml() -> None:
    cp = torchtitan_run("cp", LLAMA31_8B, {"dp": 4, "cp": 2}, 65536, 1, 1, "full", H100)
    assert _comparable(_at_9dec370(_imported(TABLE_2_CP2))) == _comparable(cp)
    # 512 = 16 × dp 32: one step; TP 8 always with sequence parallelism (apply_tp)
    tp = torchtitan_run("tp", LLAMA31_70B, {"dp": 32, "tp": 8, "sequence_parallel": True}, 8192, 16, 1, "full", H100)
    assert _comparable(_at_9dec370(_imported(TABLE_4))) == _comparable(tp)


def test_the_importer_reads_the_cp_rotate_method() -> None:
    # parallelism.context_parallel_rotate_method (distributed/utils.py create_context_parallel_ctx's
    # set_rotate_method): allgather, its default, writes nothing; alltoall the timing field; a typo refused
    assert "cp_rotate_method" not in _imported(TABLE_2_CP2).get("timing", {})
    job = TABLE_2_CP2.replace(
        "context_parallel_degree = 2", 'context_parallel_degree = 2\ncontext_parallel_rotate_method = "alltoall"'
    )
    imported = import_torchtitan(job, None, "h100-80gb")
    assert imported.raw["timing"]["cp_rotate_method"] == "alltoall"
    assert not any("rotate" in note for note in imported.notes)
    assert "cp_rotate_method" not in imported.raw["parallel"]
    with pytest.raises(InputError, match=r"context_parallel_rotate_method: 'ring'"):
        _imported(job.replace('"alltoall"', '"ring"'))


TABLE_5 = """
[model]
name = "llama3"
flavor = "405B"
[training]
local_batch_size = 32
global_batch_size = 256
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 8
tensor_parallel_degree = 8
pipeline_parallel_degree = 8
pipeline_parallel_schedule = "SCHEDULE"
pipeline_parallel_microbatch_size = 4
[activation_checkpoint]
mode = "full"
early_stop = true
"""


@pytest.mark.parametrize(("schedule", "ours", "vpp"), [("1F1B", "1f1b", 1), ("Interleaved1F1B", "interleaved", 2)])
def test_the_pipeline_benchmark_is_reproduced_by_its_toml(schedule: str, ours: str, vpp: int) -> None:
    # Table 5: 32 a rank in micro-batches of 4, 8 of them; torchtitan's split (126 layers + embedding +
    # output = 128 over 8 or 16 stages) is the even one the bench row leaves to ppb, written as a layout
    imported = parse_run_config({**_imported(TABLE_5.replace("SCHEDULE", schedule), 512), "device": H100})
    par = {"dp": 8, "tp": 8, "pp": 8, "vpp": vpp, "schedule": ours, "sequence_parallel": True}
    bench = parse_run_config(torchtitan_run("405b", LLAMA3_405B, par, 8192, 4, 8, "full", H100))
    assert [s.peak_bytes for s in estimate(imported).stages] == [s.peak_bytes for s in estimate(bench).stages]


@pytest.mark.parametrize("name", sorted(path.stem for path in SHIPPED.glob("*.toml")))
def test_every_shipped_job_imports_and_is_estimated(name: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run.yaml"
    job = str(SHIPPED / f"{name}.toml")
    assert main(["import", "torchtitan", job, "--gpus", "64", "--device", "h100-80gb", "-o", str(out)]) == 0
    run = load_run_config(out)
    assert run.framework == "torchtitan" and run.parallel.world_size == 64
    said = capsys.readouterr().out.strip()
    # a job with nothing unmodelled says no count (it said "(0 keys not modelled)" until session 34)
    notes = len(import_torchtitan((SHIPPED / f"{name}.toml").read_text(), 64, "h100-80gb").notes)
    assert said == f"wrote {out}" + (f" ({notes} key{'s' * (notes > 1)} not modelled)" if notes else "")
    assert main(["estimate", str(out)]) == 0
    assert "run peak" in capsys.readouterr().out


def test_the_405b_job_says_what_is_not_modelled() -> None:
    imported = import_torchtitan((SHIPPED / "llama3_405b.toml").read_text(), 512, "h100-80gb")
    raw = imported.raw
    # `converters = ["float8"]`: v0.1.0's name of the float8 linear converter; [compile] the model
    # Float8LinearConfig's default recipe, per-tensor scaling (TE calls it tensorwise)
    # enable_fsdp_float8_all_gather and precompute_float8_dynamic_scale_for_fsdp true in the TOML
    assert raw["timing"] == {
        "torch_compile": True,
        "matmul_dtype": "fp8",
        "fp8_recipe": "tensorwise",
        "fp8_fsdp_all_gather": True,
        "fp8_precompute_scale": True,
        # enable_async_tensor_parallel true (compiled): async TP as ppb prices it, overlap.tp 1.0 with the
        # fused ops' copies (docs/timing.md), as bench/_titan.py's async TP rows state it
        "overlap": {"tp": 1.0},
    }
    assert raw["parallel"]["tp"] == 8 and raw["parallel"]["dp"] == 64 and raw["parallel"]["sequence_parallel"]
    assert raw["training"]["recompute"] == {"mode": "full"}
    # compile.components model and loss (the default): the loss compiled with the blocks, no key of its own
    assert run_config_compiled_loss(raw)
    assert imported.notes == []  # filter_fqns ["output"]: the output layer in 16 bits, as ppb prices it


def test_async_tp_needs_the_model_compiled() -> None:
    # v0.2.2 distributed/tensor_parallel.py maybe_enable_async_tp: RuntimeError without 'model' compiled
    toml = (SHIPPED / "llama3_405b.toml").read_text().replace('components = ["model", "loss"]', 'components = ["loss"]')
    assert 'components = ["loss"]' in toml
    with pytest.raises(InputError, match=r"parallelism\.enable_async_tensor_parallel: true needs the model compiled"):
        import_torchtitan(toml, 512, "h100-80gb")


def run_config_compiled_loss(raw: dict) -> bool:
    return TimingOptions(**raw["timing"]).compiled_loss


@pytest.mark.parametrize(
    ("components", "timing"),
    [
        ('["model"]', {"torch_compile": True, "compile_loss": False}),
        ('["loss"]', {"compile_loss": True}),
        ('["model", "loss"]', {"torch_compile": True}),
    ],
)
def test_compile_components_say_what_is_compiled(components: str, timing: dict) -> None:
    shipped = '[compile]\nenable=false\ncomponents = ["model", "loss"]'
    toml = (SHIPPED / "llama3_8b.toml").read_text()
    assert shipped in toml
    toml = toml.replace(shipped, f"[compile]\nenable = true\ncomponents = {components}")
    assert import_torchtitan(toml, 8, "h100-80gb").raw["timing"] == timing


def test_deepseek_v3_flavors_carry_experts_and_latent_attention() -> None:
    spec, attn = model_spec("deepseek_v3", "16B", 4096)
    assert attn == "flex"
    # deepseekv3_args["16B"]: 64 routed experts, top 6, 2 shared experts built as one FeedForward of
    # 2 × 1408 (moe.py MoE.__init__), the first layer dense at 10944, no query compression
    assert spec["num_experts"] == 64 and spec["experts_per_token"] == 6
    assert spec["shared_experts"] == 1 and spec["shared_expert_intermediate_size"] == 2816
    assert spec["first_dense_layers"] == 1 and spec["intermediate_size"] == 10944
    assert spec["q_lora_rank"] == 0 and spec["kv_lora_rank"] == 512
    spec, _ = model_spec("deepseek_v3", "671B", 4096)
    assert (spec["expert_groups"], spec["expert_group_limit"], spec["first_dense_layers"]) == (8, 4, 3)


PIPELINE = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 8
global_batch_size = 32
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 2
tensor_parallel_degree = 2
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_microbatch_size = 2
"""


def test_the_pipeline_split_is_torchtitans() -> None:
    imported = import_torchtitan(PIPELINE, 16, "h100-80gb")
    raw = imported.raw
    # Interleaved1F1B: two stages a rank, 8 stages; 32 layers + 1 (embedding) + 1 (output) = 34,
    # 34 // 8 = 4 rest 2: stages 0 and 1 take 5; stage 0 is the embedding and 4 layers, stage 1
    # 5 layers, stages 2-6 4 layers, stage 7 3 layers and the output (32 layers in all).
    assert raw["parallel"]["layout"] == "Etttt|ttttt|tttt|tttt|tttt|tttt|tttt|tttL"
    assert (raw["parallel"]["vpp"], raw["parallel"]["schedule"]) == (2, "interleaved")
    # 32 = 8 × dp 2 × 2 steps; each step 8 / 2 = 4 micro-batches of 2 through the pipeline
    assert (raw["training"]["micro_batch_size"], raw["training"]["micro_batches"]) == (2, 8)
    assert imported.notes == ["training.global_batch_size 32: 2 pipeline flushes a step, priced as one"]
    parse_run_config(raw)


@pytest.mark.parametrize("spelled", ["interleaved1f1b", "INTERLEAVED1F1B", "Interleaved1f1b"])
def test_the_schedule_name_is_matched_case_insensitively_as_torch_does(spelled: str) -> None:
    # torch.distributed.pipelining schedules.py `get_schedule_class` lowers the name before looking it
    # up, so torchtitan runs "interleaved1f1b" as Interleaved1F1B: the same run config as PIPELINE's
    raw = _imported(PIPELINE.replace('"Interleaved1F1B"', f'"{spelled}"'), 16)
    assert raw["parallel"] == _imported(PIPELINE, 16)["parallel"]
    with pytest.raises(InputError) as err:  # a TOML array is no name: one line, not a TypeError
        import_torchtitan(PIPELINE.replace('"Interleaved1F1B"', '["Interleaved1F1B"]'), 16, "h100-80gb", "job.toml")
    assert err.value.field == "parallelism.pipeline_parallel_schedule"


@pytest.mark.parametrize(
    ("text", "gpus", "key"),
    [
        ('[parallelism]\ndata_parallel_shard_degre = 8', 8, "parallelism.data_parallel_shard_degre"),
        ("[parallelism]\ntensor_parallel_degree = 3", 8, "parallelism.data_parallel_shard_degree"),
        ("[parallelism]\ndata_parallel_shard_degree = 4", 8, "parallelism"),
        ("[training]\nlocal_batch_size = 3\nglobal_batch_size = 16", 4, "training.global_batch_size"),
        ('[model]\nflavor = "7B"', 8, "model.flavor"),
        ('[model]\nname = "llama4"', 8, "model.name"),
        ('[activation_checkpoint]\nmode = "memory_budget"', 8, "activation_checkpoint.mode"),
        ('[activation_checkpoint]\nselective_ac_option = "0"', 8, "activation_checkpoint.selective_ac_option"),
        ('[activation_checkpoint]\nearly_stop = "yes"', 8, "activation_checkpoint.early_stop"),
        ('[model]\nconverters = ["fp4"]', 8, "model.converters"),
        ('[optimizer]\nname = "Lion"', 8, "optimizer.name"),
        ("[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 3", 8,
         "parallelism.pipeline_parallel_microbatch_size"),
        ('[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "Zigzag"', 8,
         "parallelism.pipeline_parallel_schedule"),
        ("[parallelism]\ndata_parallel_shard_degree = -1", None, "parallelism.data_parallel_shard_degree"),
        ('[model]\nname = ["llama3"]', 8, "model.name"),
        ('[compile]\nenable = true\ncomponents = "model"', 8, "compile.components"),
        ("training = 5", 8, "training"),
        ("[compiel]\nenable = true", 8, "compiel"),  # manager.py _dict_to_dataclass: "Invalid field names"
        ("seq_len = 4096", 8, "seq_len"),  # a key above every section is JobConfig's field too
        ("[checkpoint]\nenabel = true", 8, "checkpoint.enabel"),  # job_config.py Checkpoint.enable
        ("[job]\ndump_folder = 'x'\n[metrics]\nlog_frq = 1", 8, "metrics.log_frq"),  # Metrics.log_freq
        # job_config.py Float8Linear has enable_fsdp_float8_all_gather; _dict_to_dataclass recurses
        ("[quantize.linear.float8]\nenable_fsdp_float8_all_gathr = true", 8,
         "quantize.linear.float8.enable_fsdp_float8_all_gathr"),
        ("[quantize.linear.fp8]\nemulate = true", 8, "quantize.linear.fp8"),
        # v0.2.2 float8.py Float8LinearConverter.__init__ asserts against the float8 all-gather with a recipe
        ('[model]\nconverters = ["quantize.linear.float8"]\n[quantize.linear.float8]\n'
         'enable_fsdp_float8_all_gather = true\nrecipe_name = "rowwise"', 8,
         "quantize.linear.float8.enable_fsdp_float8_all_gather"),
        ("[quantize.linar.float8]\nemulate = true", 8, "quantize.linar"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_toml_key(text: str, gpus: int | None, key: str) -> None:
    with pytest.raises(InputError) as err:
        import_torchtitan(text, gpus, "h100-80gb", "job.toml")
    assert err.value.field == key


@pytest.mark.parametrize(
    ("text", "gpus", "words"),
    [
        ("[training]\nlocal_batch_sise = 1", 8, "[training]: did you mean local_batch_size?"),
        ("[paralelism]\ntensor_parallel_degree = 1", 8, "job config: did you mean parallelism?"),
        ("[checkpoint]\nasyncmode = 'disabled'", 8, "[checkpoint]: did you mean async_mode?"),
        ('[model]\nflavor = "8b"', 8, "70B, 405B: did you mean 8B?"),
        ('[model]\nname = "Llama3"', 8, "qwen3: did you mean llama3?"),
        ('[activation_checkpoint]\nmode = "Selective"', 8, "selective or full: did you mean selective?"),
        ("[quantize.linear.float8]\nfilter_fqn = []", 8, "did you mean filter_fqns?"),
        # the -1 shard degree's divisor is said as torchtitan's degrees multiply it (parallel_dims.py)
        ("[parallelism]\npipeline_parallel_degree = 3", 64, "do not divide by replicate·tp·pp·cp = 1·1·3·1 = 3"),
    ],
)  # fmt: skip
def test_a_near_miss_says_what_was_meant(text: str, gpus: int, words: str) -> None:
    """A key, section, name or word a letter or a case off torchtitan's says the one it is near (session 27)."""
    with pytest.raises(InputError) as err:
        import_torchtitan(text, gpus, "h100-80gb", "job.toml")
    assert words in err.value.problem, err.value.line()


def test_bad_input_to_the_command_is_one_line_exit_2_and_nothing_written(tmp_path: Path, capsys) -> None:
    job = tmp_path / "job.toml"
    job.write_text("[parallelism]\ntensor_parallel_degree = 3\n")
    out = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "parallelism.data_parallel_shard_degree" in err[0] and str(job) in err[0]
    assert not out.exists()
    job.write_text("[training\n")
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "h100-80gb"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_an_unknown_device_is_said_with_the_option_that_gives_it(tmp_path: Path, capsys) -> None:
    # the device is the command's --device, not a key of the TOML (`ppb import megatron` says the same)
    job = tmp_path / "job.toml"
    job.write_text('[model]\nname = "llama3"\nflavor = "8B"\n')
    out = tmp_path / "run.yaml"
    assert main(["import", "torchtitan", str(job), "--gpus", "8", "--device", "b3000", "-o", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{job}: --device: unknown device 'b3000'" in line and not out.exists()


def test_the_written_run_config_reads_back(tmp_path: Path) -> None:
    imported = import_torchtitan(PIPELINE, 16, "h100-80gb", "job.toml")
    imported.raw["name"] = "job"
    run = torchtitan_run_config(imported, "job.toml")
    assert run.parallel.layout is not None
    out = tmp_path / "run.yaml"
    out.write_text(yaml.safe_dump(imported.raw, sort_keys=False))
    assert load_run_config(out).model_dump() == run.model_dump() | {"name": "job"}


def test_float8_without_filters_says_the_output_and_router_ppb_keeps_in_16_bits() -> None:
    # Float8Linear's filter_fqns defaults to [] (job_config.py): torchtitan converts the output
    # layer and the router's gate too, which ppb prices in 16 bits (timing/flops.py Op.fp8)
    job = '[model]\nname = "deepseek_v3"\nflavor = "16B"\nconverters = ["quantize.linear.float8"]\n'
    imported = import_torchtitan(job, 8, "h100-80gb")
    assert imported.raw["timing"] == {"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"}
    assert imported.notes[1:] == [
        "quantize.linear.float8.filter_fqns: the output layer in fp8, priced in 16 bits",
        "quantize.linear.float8.filter_fqns: the MoE router in fp8, priced in 16 bits",
    ]


def test_layers_per_stage_and_named_parts_give_the_split() -> None:
    job = """
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 8
[parallelism]
data_parallel_shard_degree = 8
pipeline_parallel_degree = 3
pipeline_parallel_schedule = "Interleaved1F1B"
pipeline_parallel_layers_per_stage = 4
"""
    raw = _imported(job, 24)
    # ceil((32 + 1 + 1) / 4) = 9 stages, 3 a rank; 34 // 9 = 3 rest 7: stages 0-6 take 4, 7-8 take 3;
    # stage 0 the embedding and 3 layers, stages 1-6 4 layers, stage 7 3, stage 8 2 and the output
    assert raw["parallel"]["layout"] == "Ettt|tttt|tttt|tttt|tttt|tttt|tttt|ttt|ttL"
    assert raw["parallel"]["vpp"] == 3
    parse_run_config(raw)
    named = """
[model]
name = "llama3"
flavor = "debugmodel"
[parallelism]
pipeline_parallel_degree = 2
module_fqns_per_model_part = [["tok_embeddings", "layers.0", "layers.1"],
                              ["layers.2", "layers.3", "layers.4", "layers.5", "norm", "output"]]
"""
    assert _imported(named, 2)["parallel"]["layout"] == "Ett|ttttL"
    with pytest.raises(InputError) as err:
        import_torchtitan(named.replace('"layers.4", ', ""), 2, "h100-80gb")
    assert err.value.field == "parallelism.module_fqns_per_model_part"
    with pytest.raises(InputError) as err:  # ceil(34 / 5) = 7 stages do not split over 2 ranks
        import_torchtitan(job.replace("= 4", "= 5").replace("degree = 3", "degree = 2"), 16, "h100-80gb")
    assert err.value.field == "parallelism.pipeline_parallel_layers_per_stage"


def test_qwen3_moe_takes_expert_parallelism() -> None:
    job = '[model]\nname = "qwen3"\nflavor = "30B-A3B"\n[parallelism]\nexpert_parallel_degree = 8\n'
    raw = _imported(job, 16)
    # qwen3_args["30B-A3B"]: 128 experts of 768, top 8, every block MoE; EP 8 out of the 16 FSDP ranks
    spec = raw["models"][0]["spec"]
    assert (spec["num_experts"], spec["experts_per_token"], spec["moe_intermediate_size"]) == (128, 8, 768)
    assert "first_dense_layers" not in spec and spec["num_key_value_heads"] == 4
    assert (raw["parallel"]["dp"], raw["parallel"]["ep"], raw["parallel"]["etp"]) == (16, 8, 1)
    parse_run_config(raw)


def test_a_custom_config_module_s_section_is_said_not_refused() -> None:
    # manager.py _maybe_add_custom_config merges the module's dataclass: its sections are valid there
    text = '[job]\ncustom_config_module = "my.config"\n[my_extension]\nknob = 1\n[checkpoint]\nmy_knob = 2'
    notes = import_torchtitan(text, 8, "h100-80gb", "job.toml").notes
    assert notes == ["[my_extension]: job.custom_config_module's section, not read by ppb (priced as if absent)"]


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_job_is_refused_not_priced_as_torchtitans_debugmodel(text: str) -> None:
    with pytest.raises(InputError) as err:
        import_torchtitan(text, 8, "h100-80gb", "job.toml")
    assert (err.value.source, err.value.field) == ("job.toml", None)


def test_a_folder_given_as_the_job_is_said_to_be_a_folder(tmp_path: Path, capsys) -> None:
    assert main(["import", "torchtitan", str(tmp_path), "--gpus", "8", "--device", "h100-80gb"]) == 2
    assert capsys.readouterr().err == f"ppb: error: {tmp_path}: is a directory, not a file\n"


def test_a_sequence_over_ppb_s_limits_is_said_as_the_toml_s_seq_len() -> None:
    # 10^11 tokens is over ppb's 2^31 positions (the flavor's max_seq_len = seq_len) before its 2^24 tokens
    # a sequence: the refusal still names the TOML key, with the run config's field after it
    imported = import_torchtitan("[training]\nseq_len = 99999999999", 8, "h100-80gb", "job.toml")
    with pytest.raises(InputError) as err:
        torchtitan_run_config(imported, "job.toml")
    assert err.value.field == "training.seq_len"
    assert "models.0.spec.max_position_embeddings" in err.value.problem


def test_a_torchtitan_model_ppb_does_not_price_is_not_taken_for_a_misspelling() -> None:
    """torchtitan v0.2.2's llama4 (models/__init__.py `_supported_models`) is one edit from llama3: until
    session 32 the refusal asked "did you mean llama3?", a different model; a real misspelling still is asked."""
    with pytest.raises(InputError) as err:
        import_torchtitan('[model]\nname = "llama4"', 8, "h100-80gb", "job.toml")
    assert str(err.value).endswith(
        "'llama4' is a torchtitan model ppb does not price: ppb imports llama3, deepseek_v3, qwen3"
    )
    with pytest.raises(InputError) as err:
        import_torchtitan('[model]\nname = "lama3"', 8, "h100-80gb", "job.toml")
    assert str(err.value).endswith("did you mean llama3?")


def test_replicating_beside_tp_or_pp_names_the_toml_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """torchtitan v0.2.2 replicates by DDP alone, which raises "DDP has not supported > 1D parallelism" beside TP or
    PP (models/llama3/infra/parallelize.py): a TOML replicating over 4 beside TP 8 is refused naming its key."""
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "70B"\n[training]\nlocal_batch_size = 8\nseq_len = 8192\n'
        "[parallelism]\ndata_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 1\n"
        "tensor_parallel_degree = 8\n"
    )
    assert main(["import", "torchtitan", str(toml), "--gpus", "32", "--device", "h100-80gb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{toml}: parallelism.data_parallel_replicate_degree: replicate (zero 0)" in err
    assert "over dp 4 beside tensor or pipeline parallelism (tp 8, pp 1): torchtitan v0.2.2 replicates by DDP" in err
