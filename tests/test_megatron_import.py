"""`ppb import megatron`: Megatron-LM launches turned into run configs, the expected configs derived by
hand from Megatron-LM d98e8a64's defaults (megatron/training/arguments.py `validate_args`,
TransformerConfig's fields, megatron/core/tokenizers/utils/build_tokenizer.py)."""

from __future__ import annotations

import pytest
import yaml

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.cli.main import main
from ppb_core.config.run import load_run_config, parse_run_config
from ppb_core.errors import InputError
from ppb_core.timing.iteration import framework_rules

# tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp2_pp2_resume_torch_dist/model_config.yaml, as the CI's
# _run_training.sh hands it to pretrain_gpt.py (ENV_VARS exported first), paths left as variables.
SMALL_GPT = """
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=0
export CUBLAS_WORKSPACE_CONFIG=:4096:8
pretrain_gpt.py --num-layers 12 --hidden-size 512 --num-attention-heads 8 --log-params-norm \\
  --log-num-zeros-in-grad --log-validation-ppl-to-tensorboard --log-timers-to-tensorboard \\
  --tensorboard-dir ${TENSORBOARD_PATH} --micro-batch-size 4 --global-batch-size 32 --seq-length 1024 \\
  --max-position-embeddings 1024 --train-iters 100 --timing-log-level 0 --lr-decay-iters 320000 \\
  --save ${CHECKPOINT_SAVE_PATH} --load ${CHECKPOINT_LOAD_PATH} --data-path ${DATA_PATH}/my-gpt3_00_text_document \\
  --vocab-file ${DATA_PATH}/bpe/vocab.json --merge-file ${DATA_PATH}/bpe/merges.txt --split 949,50,1 \\
  --distributed-backend nccl --lr 0.00015 --lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 1e-2 \\
  --clip-grad 1.0 --lr-warmup-fraction .01 --log-interval 1 --save-interval 50 --eval-interval 1000 \\
  --eval-iters 10 --transformer-impl transformer_engine --tensor-model-parallel-size 2 \\
  --pipeline-model-parallel-size 2 --deterministic-mode --no-gradient-accumulation-fusion \\
  --attention-softmax-in-fp32 --use-checkpoint-opt_param-scheduler --use-mcore-models --ckpt-format torch_dist \\
  --dist-ckpt-strictness log_all --data-cache-path ${DATA_CACHE_PATH} --bf16 --log-memory-to-tensorboard \\
  --async-save --use-persistent-ckpt-worker --verify-integrity
"""


def test_a_small_gpt_case_becomes_the_run_config_derived_by_hand() -> None:
    imported = import_megatron(SMALL_GPT, 8, "h100-80gb")
    raw = imported.raw
    assert raw["models"] == [
        {
            "name": "gpt",
            "spec": {
                "vocab_size": 50257,  # pretrain_gpt.py's default tokenizer, the GPT-2 BPE
                "hidden_size": 512,
                "num_layers": 12,
                "num_attention_heads": 8,
                "intermediate_size": 2048,  # validate_args: 4h without --swiglu
                "activation": "gelu",
                "norm": "layernorm",  # TransformerConfig.normalization
                "norm_bias": True,
                "tied_embeddings": True,  # no --untie-embeddings-and-output-weights
                "position_embedding": "learned",  # learned_absolute
                "max_position_embeddings": 1024,
                "attention_bias": True,  # add_bias_linear
                "attention_output_bias": True,
                "mlp_bias": True,
                "qk_norm": False,
                "attention_dropout": 0.1,
                "hidden_dropout": 0.1,
            },
            "pad_vocab_multiple": 128,  # --make-vocab-size-divisible-by's default
        }
    ]
    # 8 GPUs over tp 2 · pp 2: dp 2; no --use-distributed-optimizer
    assert raw["parallel"] == {
        "dp": 2,
        "tp": 2,
        "pp": 2,
        "cp": 1,
        "world_size": 8,
        "sequence_parallel": False,
        "zero": 0,
    }
    # 32 sequences over micro-batches of 4 on 2 DP ranks: 4 micro-batches; TE's auto backend: flash/fused
    assert raw["training"] == {
        "seq_length": 1024,
        "micro_batch_size": 4,
        "micro_batches": 4,
        "dtype": "bf16",
        "flash_attention": True,
        "optimizer": "adam",
    }
    assert raw["timing"] == {
        "transformer_impl": "transformer_engine",
        "gradient_accumulation_fusion": False,
        "deterministic": True,
        "cross_entropy_fusion": False,
        "check_for_nan_in_grad": True,
        "log_params_norm": True,
        "log_num_zeros_in_grad": True,
        "rope_fusion": True,
        "overlap": {"dp": 0.0, "param_gather": 0.0, "tp": 0.0},  # no --overlap-grad-reduce / -param-gather
        "attention_softmax_in_fp32": True,  # read by Megatron's own attention only (not TE's)
    }
    assert raw["memory"] == {"cublas_workspace_config": ":4096:8"}
    assert imported.notes == []  # every other flag logs, saves or schedules the learning rate
    run = run_config_of(imported, "case")
    assert run.vocab_size("gpt") == 50432  # ⌈50257 / (128·2)⌉ · 256 = 197 · 256


# moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed/model_config.yaml's flags that bear on the run (the
# learning-rate, logging and checkpoint flags dropped), and three that bear on time ppb does not model.
MOE_MLA = """
--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 4
--expert-model-parallel-size 4 --context-parallel-size 1 --expert-tensor-parallel-size 1
--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --attention-backend unfused
--sequence-parallel --disable-bias-linear --micro-batch-size 4 --global-batch-size 32
--exit-duration-in-mins 230 --no-check-for-nan-in-loss-and-grad --no-rope-fusion --cross-entropy-loss-fusion
--cross-entropy-fusion-impl native --manual-gc --manual-gc-interval 100 --transformer-impl transformer_engine
--seq-length 4096 --num-layers 16 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 32
--kv-channels 128 --max-position-embeddings 4096 --position-embedding-type rope --rotary-base 10000
--make-vocab-size-divisible-by 3232 --normalization RMSNorm --norm-epsilon 1e-6 --swiglu
--untie-embeddings-and-output-weights --multi-latent-attention --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1
--attention-dropout 0.0 --hidden-dropout 0.0 --qk-layernorm --num-experts 32 --moe-layer-freq "([0]*1+[1]*15)"
--moe-ffn-hidden-size 1024 --moe-shared-expert-intermediate-size 1024 --moe-router-load-balancing-type seq_aux_loss
--moe-router-topk 4 --moe-token-dispatcher-type alltoall --moe-router-pre-softmax --moe-grouped-gemm
--moe-aux-loss-coeff 1e-4 --moe-router-group-topk 2 --moe-router-num-groups 4 --moe-router-dtype fp32
--moe-permute-fusion --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64
--v-head-dim 128 --bf16
"""


def test_a_moe_mla_case_carries_experts_latent_attention_mtp_and_the_pipeline() -> None:
    imported = import_megatron(MOE_MLA, 8, "h100-80gb")
    spec = imported.raw["models"][0]["spec"]
    expected = {
        "intermediate_size": 4096,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "norm_bias": False,
        "tied_embeddings": False,
        "position_embedding": "rope",
        "attention_bias": False,  # --disable-bias-linear
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "num_experts": 32,
        "experts_per_token": 4,
        "moe_intermediate_size": 1024,
        "shared_experts": 1,  # one shared MLP of 1024
        "shared_expert_intermediate_size": 1024,
        "expert_groups": 4,
        "expert_group_limit": 2,
        "first_dense_layers": 1,  # ([0]*1+[1]*15): layer 0 dense, the rest MoE
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "mtp_layers": 1,
        "qk_norm": False,  # under MLA, --qk-layernorm norms the latents
        "mla_latent_norms": True,
    }
    assert {key: spec[key] for key in expected} == expected
    assert "dense_layers" not in spec and "head_dim" not in spec
    parallel = imported.raw["parallel"]
    assert {key: parallel[key] for key in ("dp", "ep", "etp", "sequence_parallel", "zero", "vpp", "schedule")} == {
        "dp": 2,  # 8 / (tp 2 · pp 2)
        "ep": 4,
        "etp": 1,
        "sequence_parallel": True,
        "zero": 1,
        "vpp": 4,
        "schedule": "interleaved",
    }
    training = imported.raw["training"]
    assert training["micro_batches"] == 4  # 32 / (4 · 2)
    assert training["flash_attention"] is False  # --attention-backend unfused keeps the scores
    assert training["rope_fusion"] is False
    # its router flags here: pre-softmax, seq_aux_loss at --moe-aux-loss-coeff 1e-4 (softmax scores by default)
    router = {"aux_losses": ["seq_aux_loss"], "pre_softmax": True}
    assert training["moe"] == {"router_dtype": "fp32", "permute_fusion": True, "grouped_gemm": True, "router": router}
    timing = imported.raw["timing"]
    assert timing["overlap"] == {"dp": 1.0, "param_gather": 1.0, "tp": 0.0}
    assert (timing["cross_entropy_fusion"], timing["check_for_nan_in_grad"]) == (True, False)
    assert timing["exit_duration_in_mins"] == 230.0
    # --manual-gc and its interval change nothing ppb prices (NOTHING_PRICED): not reported
    assert imported.notes == []
    run = run_config_of(imported, "case")
    assert run.vocab_size("gpt") == 51712  # ⌈50257 / (3232·2)⌉ · 6464 = 8 · 6464


BASE = "--num-layers 14 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 --bf16"


@pytest.mark.parametrize(
    ("flags", "layout"),
    [
        # 14 layers over pp 4 with 2 first and 2 last: 10 for the two middle stages, 5 each
        (
            "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 2 "
            "--decoder-last-pipeline-num-layers 2",
            "Ett|ttttt|ttttt|ttL",
        ),
        # 14 layers + embedding + loss = 16 over pp 4: 4 a stage, the first and last one layer fewer
        (
            "--pipeline-model-parallel-size 4 --account-for-embedding-in-pipeline-split "
            "--account-for-loss-in-pipeline-split",
            "Ettt|tttt|tttt|tttL",
        ),
    ],
)
def test_an_uneven_split_becomes_the_layout_megatron_builds(flags: str, layout: str) -> None:
    imported = import_megatron(f"{BASE} {flags}", 8, "h100-80gb")
    assert imported.raw["parallel"]["layout"] == layout
    run_config_of(imported, "case")  # the layout is one the run config accepts


@pytest.mark.parametrize(
    ("flags", "flag", "said"),
    [
        # TransformerConfig.__post_init__ (uneven PP, d98e8a64): 14 layers all on the first of 4 stages leave
        # 0 layers for 3 middle stages, "Mismatch: 0 middle layers remaining but 3 middle PP stages"
        ("--decoder-first-pipeline-num-layers 14", "--decoder-first-pipeline-num-layers", "leaves 0 layers for 3"),
        # 7 + 7: the same with 2 middle stages
        (
            "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7",
            "--decoder-first-pipeline-num-layers",
            "leaves 0 layers for 2",
        ),
        # "num_layers_in_first_pipeline_stage must be larger than 0" (before, 0 left 14 layers to 3 stages)
        ("--decoder-first-pipeline-num-layers 0", "--decoder-first-pipeline-num-layers", "must be positive, got 0"),
        ("--decoder-last-pipeline-num-layers -2", "--decoder-last-pipeline-num-layers", "must be positive, got -2"),
        # sizes Megatron-LM divides by (the microbatch calculator, world // (tp·pp·cp)): 0 was read as the
        # default (1, or micro-batch × dp for the global batch) without a word
        ("--micro-batch-size 0", "--micro-batch-size", "must be positive, got 0"),
        ("--global-batch-size 0", "--global-batch-size", "must be positive, got 0"),
        ("--context-parallel-size 0", "--context-parallel-size", "must be positive, got 0"),
        ("--num-virtual-stages-per-pipeline-rank 0", "--num-virtual-stages-per-pipeline-rank", "must be positive"),
    ],
)
def test_sizes_megatron_refuses_are_refused_naming_the_flag(flags: str, flag: str, said: str) -> None:
    with pytest.raises(InputError) as caught:
        import_megatron(f"{BASE} --pipeline-model-parallel-size 4 {flags}", 8, "h100-80gb")
    assert caught.value.field == flag
    assert said in str(caught.value)


def test_recompute_is_said_in_megatrons_words() -> None:
    selective = import_megatron(f"{BASE} --recompute-activations", 8, "h100-80gb")
    assert selective.raw["training"]["recompute"] == {"granularity": "selective", "modules": ["core_attn"]}
    full = "--recompute-granularity full --recompute-method block --recompute-num-layers 2"
    blocked = import_megatron(f"{BASE} {full}", 8, "h100-80gb")
    assert blocked.raw["training"]["recompute"] == {"granularity": "full", "method": "block", "num_layers": 2}
    ignored = import_megatron(f"{BASE} --recompute-method uniform", 8, "h100-80gb")
    assert "recompute" not in ignored.raw["training"]
    assert ignored.notes == ["--recompute-method: Megatron-LM ignores it here (no recompute it applies to)"]


def test_recompute_activations_sets_selective_wherever_the_granularity_stands() -> None:
    """Megatron-LM d98e8a64 arguments.py `validate_args` sets `recompute_granularity = 'selective'` after
    parsing when --recompute-activations is given, whatever --recompute-granularity says; then asserts
    "recompute method is not yet supported for selective recomputing granularity". ppb read the flags in
    order: --recompute-granularity full after --recompute-activations was priced as full recompute."""
    after = import_megatron(f"{BASE} --recompute-activations --recompute-granularity full", 8, "h100-80gb")
    assert after.raw["training"]["recompute"] == {"granularity": "selective", "modules": ["core_attn"]}
    full = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    with pytest.raises(InputError) as caught:
        import_megatron(f"{BASE} --recompute-activations {full}", 8, "h100-80gb")
    assert caught.value.field == "--recompute-granularity"
    assert "selective (or --recompute-activations, which sets it) takes no --recompute-method" in str(caught.value)


def test_loss_scaling_fusion_and_fp8_recipe_flags_are_carried() -> None:
    # Megatron-LM d98e8a64: --no-bias-gelu-fusion sets bias_gelu_fusion False (arguments.py, store_false);
    # --calculate-per-token-loss and --ddp-average-in-collective are TransformerConfig / DDPConfig booleans;
    # --fp8-recipe one of transformer_config.py's recipes ("delayed" when not given).
    plain = import_megatron(BASE, 8, "h100-80gb").raw["timing"]
    assert not {"bias_gelu_fusion", "calculate_per_token_loss", "ddp_average_in_collective", "fp8_recipe"} & set(plain)
    flags = "--no-bias-gelu-fusion --calculate-per-token-loss --fp8-format hybrid --fp8-recipe tensorwise"
    imported = import_megatron(f"{BASE} {flags}", 8, "h100-80gb")
    timing = imported.raw["timing"]
    assert (timing["bias_gelu_fusion"], timing["calculate_per_token_loss"]) == (False, True)
    assert (timing["matmul_dtype"], timing["fp8_recipe"]) == ("fp8", "tensorwise")
    assert imported.notes == []
    run = run_config_of(imported, "launch")
    assert (run.timing.bias_gelu_fusion, run.timing.calculate_per_token_loss, run.timing.fp8_recipe) == (
        False,
        True,
        "tensorwise",
    )
    collected = "--ddp-average-in-collective --manual-gc --manual-gc-interval 10"
    averaged = import_megatron(f"{BASE} {collected}", 8, "h100-80gb")
    overlap = "--use-distributed-optimizer --overlap-param-gather --overlap-param-gather-with-optimizer-step"
    virtual = "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 7"
    early = import_megatron(f"{BASE} {overlap} {virtual}", 8, "h100-80gb")
    assert early.raw["timing"]["overlap_param_gather_with_optimizer_step"] is True
    delayed = import_megatron(f"{BASE} --overlap-moe-expert-parallel-comm --delay-wgrad-compute", 8, "h100-80gb")
    assert delayed.raw["timing"]["delay_wgrad_compute"] is True
    assert averaged.raw["timing"]["ddp_average_in_collective"] is True
    assert averaged.notes == []  # the collections change nothing ppb prices


def test_weight_hash_interval_is_carried() -> None:
    # training.py `post_training_step_callbacks` (Megatron-LM d98e8a64) checks the weight hashes on each
    # iteration a multiple of --check-weight-hash-across-dp-replicas-interval (arguments.py: an int, none by default)
    assert "weight_hash_interval" not in import_megatron(BASE, 8, "h100-80gb").raw["timing"]
    flag = "--check-weight-hash-across-dp-replicas-interval"
    imported = import_megatron(f"{BASE} {flag} 1", 8, "h100-80gb")
    assert imported.raw["timing"]["weight_hash_interval"] == 1
    assert imported.notes == []
    assert run_config_of(imported, "launch").timing.weight_hash_interval == 1
    with pytest.raises(InputError) as caught:
        import_megatron(f"{BASE} {flag} 0", 8, "h100-80gb")
    assert caught.value.field == flag


def test_megatron_s_own_attention_and_norm_flags() -> None:
    # --no-masked-softmax-fusion, --attention-softmax-in-fp32 and --apply-query-key-layer-scaling are
    # carried (dot_product_attention.py reads them under --transformer-impl local).
    flags = "--transformer-impl local --no-masked-softmax-fusion --attention-softmax-in-fp32"
    flags += " --apply-query-key-layer-scaling"
    imported = import_megatron(f"{BASE} {flags}", 8, "a100-80gb")
    timing = imported.raw["timing"]
    assert (timing["masked_softmax_fusion"], timing["attention_softmax_in_fp32"]) == (False, True)
    assert timing["apply_query_key_layer_scaling"] is True
    assert run_config_of(imported, "launch").torch_masked_softmax
    # --no-persist-layer-norm: apex's persistent kernel takes hidden sizes in fused_layer_norm.py's
    # persist_ln_hidden_sizes only (256 is not; 1024 is), and TE's norms never read the flag
    assert import_megatron(f"{BASE} --transformer-impl local --no-persist-layer-norm", 8, "a100-80gb").notes == []
    assert import_megatron(f"{BASE} --hidden-size 1024 --no-persist-layer-norm", 8, "a100-80gb").notes == []
    noted = import_megatron(
        f"{BASE} --hidden-size 1024 --transformer-impl local --no-persist-layer-norm", 8, "a100-80gb"
    )
    assert [note.split(":")[0] for note in noted.notes] == ["--no-persist-layer-norm"]


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        ("--calculate-per-token-loss --ddp-average-in-collective", "--ddp-average-in-collective"),  # DDP asserts
        ("--fp8-format hybrid --fp8-recipe custom", "--fp8-recipe"),  # its quantizers are the user's code
        ("--delay-wgrad-compute", "--delay-wgrad-compute"),  # transformer_config.py: needs the EP overlap
        # arguments.py validate_args: the distributed optimizer, --overlap-param-gather, virtual stages
        (
            "--overlap-param-gather-with-optimizer-step --overlap-param-gather",
            "--overlap-param-gather-with-optimizer-step",
        ),
        (
            "--overlap-param-gather-with-optimizer-step --use-distributed-optimizer --overlap-param-gather",
            "--overlap-param-gather-with-optimizer-step",
        ),
        ("--fp16", "--fp16"),  # with BASE's --bf16
        ("--global-batch-size 6 --micro-batch-size 4", "--global-batch-size"),
        ("--tensor-model-parallel-size 3", "--tensor-model-parallel-size"),
        ("--hybrid-layer-pattern M*14", "--hybrid-layer-pattern"),
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-8B", "--tokenizer-model"),
        ("--recompute-granularity full", "--recompute-granularity"),
        ("--recompute-granularity selective --recompute-modules moe_act", "--recompute-modules"),
        ("--num-experts 8 --moe-layer-freq ([0]+[1]*3)", "--moe-layer-freq"),
        ("--num-attention-heads 6", "--num-attention-heads"),
        ("--fp8-format hybird", "--fp8-format"),  # transformer_config.py fp8: Literal['e4m3', 'hybrid']
        ("--recompute-granularity full --recompute-method unifrm --recompute-num-layers 1", "--recompute-method"),
        ("--num-experts 8 --moe-token-dispatcher-type all2all", "--moe-token-dispatcher-type"),
        ("--main-grads-dtype bf17", "--main-grads-dtype"),  # arguments.py choices=['fp32', 'bf16']
        ("--recompute-granularity selective --recompute-modules core_atn", "--recompute-modules"),
        ("--num-layers-per-virtual-pipeline-stage 2", "--pipeline-model-parallel-size"),  # pp 1
        # ppb's limits and pydantic's bounds on the model spec and batch: said with the flag, not the spec field
        ("--num-layers 100000", "--num-layers"),  # limits.LAYERS 1,024
        ("--seq-length 99999999999 --max-position-embeddings 99999999999", "--seq-length"),  # SEQUENCE 2^24
        ("--max-position-embeddings 99999999999", "--max-position-embeddings"),  # POSITIONS 2^31
        ("--micro-batch-size -1 --global-batch-size 8", "--micro-batch-size"),
        ("--ffn-hidden-size 0", "--ffn-hidden-size"),
        (
            # dp 4, 24 / 4 = 6 micro-batches in groups of 5: a last group of 1 < pp 2, which Megatron refuses
            # (16 layers, BASE's 14 replaced, so that 2 ranks × 2 virtual stages split them evenly)
            "--num-layers 16 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
            "--microbatch-group-size-per-virtual-pipeline-stage 5 --global-batch-size 24",
            "--microbatch-group-size-per-virtual-pipeline-stage",
        ),
    ],
)
def test_a_contradiction_is_refused_naming_the_flag(flags: str, flag: str) -> None:
    with pytest.raises(InputError) as caught:
        imported = import_megatron(f"{BASE} {flags}", 8, "h100-80gb")
        run_config_of(imported, "launch")
    assert caught.value.field == flag
    assert "\n" not in caught.value.line()


def test_the_command_writes_a_run_config_other_commands_read(tmp_path, capsys) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SMALL_GPT + " --no-bias-gelu-fusion --te-precision-config-file p.yaml\n")
    out = tmp_path / "run.yaml"
    assert main(["import", "megatron", str(script), "--gpus", "8", "--device", "h100-80gb", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    unmodelled = "ppb: note: --te-precision-config-file p.yaml: not modelled by ppb (priced as if not given)"
    # the run config holds `device.reserved_mb: auto`, said on stderr: dp 2, tp 2, pp 2 on 8 H100, tied
    # embeddings, no distributed optimizer: communicators world 8 (688 MB) and tp·pp 4 (688, Float16Optimizer's
    # gradient norm), tp, dp·cp, pp, embedding pairs (544 each)
    # = 3,552; NVLS tp 2 and dp·cp 2 in the node, 16·2 MiB·2 each = 128; the pipeline's one neighbour in the
    # node (4.34 − 1.06) GB / 7 = 446.9 MB; the CUDA context 300 -> 4,426.9, 4,427 whole
    # (ppb_core.config.runtime_reserve; tests/test_runtime_reserve.py)
    held = "ppb: held back 4,427 MB for the runtime (device.reserved_mb auto): CUDA context 300 MB"
    lines = captured.err.strip().splitlines()
    assert lines[0] == unmodelled and lines[1].startswith(held) and len(lines) == 2
    assert yaml.safe_load(out.read_text())["device"] == {"name": "h100-80gb", "reserved_mb": "auto"}
    run = load_run_config(out)
    assert run.device.reserved == 4427
    assert (run.name, run.parallel.dp, run.training.micro_batches) == ("train", 2, 4)
    assert run.timing.bias_gelu_fusion is False
    assert yaml.safe_load(out.read_text())["memory"] == {"cublas_workspace_config": ":4096:8"}


def test_bad_input_to_the_command_is_one_line_exit_2_and_nothing_written(tmp_path, capsys) -> None:
    out = tmp_path / "run.yaml"
    argv = ["import", "megatron", f"{BASE} --fp16", "--gpus", "8", "--device", "h100-80gb", "-o", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fp16: cannot be set with --bf16" in err
    assert not out.exists()
    # no GPU count given, and none in the launch (torchrun's --nproc-per-node)
    assert main(["import", "megatron", BASE, "--device", "h100-80gb", "-o", str(out)]) == 2
    assert "--gpus" in capsys.readouterr().err
    assert not out.exists()


def test_a_run_config_refuses_moe_act_without_grouped_gemm() -> None:
    # transformer_config.py TransformerConfig.__post_init__: "moe_act in recompute_modules is only supported
    # with moe_grouped_gemm"
    recompute = "--recompute-granularity selective --recompute-modules moe_act"
    imported = import_megatron(f"{MOE_MLA} {recompute}", 8, "h100-80gb")
    run_config_of(imported, "case")  # the case runs --moe-grouped-gemm
    imported.raw["training"]["moe"]["grouped_gemm"] = False
    with pytest.raises(InputError) as caught:
        parse_run_config(imported.raw, "run.yaml")
    assert caught.value.field == "training.recompute"


def test_the_deferred_output_layer_weight_gradients_are_carried_and_checked() -> None:
    flags = f"{BASE} --pipeline-model-parallel-size 2 --defer-embedding-wgrad-compute --wgrad-deferral-limit 2"
    imported = import_megatron(flags, 8, "h100-80gb")
    training = imported.raw["training"]
    assert (training["defer_embedding_wgrad_compute"], training["wgrad_deferral_limit"]) == (True, 2)
    assert imported.notes == []
    run_config_of(imported, "case")
    # ModelParallelConfig.__post_init__: "Cannot defer embedding wgrad compute when gradient accumulation
    # fusion is not used"
    imported = import_megatron(f"{flags} --no-gradient-accumulation-fusion", 8, "h100-80gb")
    with pytest.raises(InputError) as caught:
        run_config_of(imported, "case")
    assert caught.value.field == "--defer-embedding-wgrad-compute"


def test_optimizer_instances_are_carried() -> None:
    flags = f"{BASE} --use-distributed-optimizer --num-distributed-optimizer-instances 2"
    imported = import_megatron(flags, 8, "h100-80gb")
    assert imported.raw["parallel"]["distributed_optimizer_instances"] == 2
    run_config_of(imported, "case")
    with pytest.raises(InputError) as caught:  # without the distributed optimizer: nothing to shard
        run_config_of(import_megatron(f"{BASE} --num-distributed-optimizer-instances 2", 8, "h100-80gb"), "case")
    assert caught.value.field == "--num-distributed-optimizer-instances"


def test_the_micro_batch_group_is_carried_where_the_interleaved_schedule_reads_it() -> None:
    # 8 GPUs over pp 2: dp 4; --global-batch-size 40 / (1 · 4) = 10 micro-batches; groups of 5 (model_parallel_config.py
    # microbatch_group_size_per_vp_stage) run by the interleaved schedule only (schedules.py, d98e8a64)
    pipeline = (  # 16 layers (BASE's 14 replaced): 4 a virtual stage, as Megatron-LM needs them even
        "--num-layers 16 --pipeline-model-parallel-size 2 --global-batch-size 40 "
        "--microbatch-group-size-per-virtual-pipeline-stage 5"
    )
    imported = import_megatron(f"{BASE} {pipeline} --num-virtual-stages-per-pipeline-rank 2", 8, "h100-80gb")
    assert imported.raw["parallel"]["microbatch_group_size_per_vp_stage"] == 5
    assert run_config_of(imported, "case").parallel.microbatch_group_size_per_vp_stage == 5
    assert not imported.notes
    plain = import_megatron(f"{BASE} {pipeline}", 8, "h100-80gb")  # no virtual stages: never read
    assert "microbatch_group_size_per_vp_stage" not in plain.raw["parallel"] and not plain.notes
    # and its warm-up and cool-down receives prefetched (--overlap-p2p-communication-warmup-flush), carried
    flushed = import_megatron(
        f"{BASE} {pipeline} --num-virtual-stages-per-pipeline-rank 2 --overlap-p2p-communication-warmup-flush",
        8,
        "h100-80gb",
    )
    assert flushed.raw["timing"]["overlap_p2p_comm_warmup_flush"] is True and not flushed.notes
    # and --no-overlap-p2p-communication (arguments.py store_false, dest overlap_p2p_comm): the interleaved
    # schedule's blocking calls (pipeline_p2p megatron_batched)
    batched = import_megatron(
        f"{BASE} {pipeline} --num-virtual-stages-per-pipeline-rank 2 --no-overlap-p2p-communication", 8, "h100-80gb"
    )
    assert batched.raw["timing"]["overlap_p2p_comm"] is False and not batched.notes
    assert framework_rules(run_config_of(batched, "case")).p2p_protocol == "megatron_batched"


def test_the_warmup_flush_is_refused_where_megatron_refuses_it() -> None:
    # model_parallel_config.py `__post_init__` (d98e8a64) raises without overlap_p2p_comm, which arguments.py
    # turns off without virtual stages and --no-overlap-p2p-communication turns off (batch_p2p_comm then)
    flags = f"{BASE} --pipeline-model-parallel-size 2 --global-batch-size 40 --overlap-p2p-communication-warmup-flush"
    flags += " --num-layers 16"  # BASE's 14 replaced: 4 a virtual stage below, as Megatron-LM needs them even
    plain = import_megatron(flags, 8, "h100-80gb")
    with pytest.raises(InputError) as caught:
        run_config_of(plain, "case")
    assert caught.value.field == "--overlap-p2p-communication-warmup-flush"
    assert "needs the interleaved schedule" in caught.value.problem
    with pytest.raises(InputError, match="which --no-overlap-p2p-communication turns off"):
        overlap_off = f"{flags} --num-virtual-stages-per-pipeline-rank 2 --no-overlap-p2p-communication"
        import_megatron(overlap_off, 8, "h100-80gb")


def test_the_gradient_buffer_dtype_follows_megatrons_precision_rules() -> None:
    # arguments.py validate_args and training.py (DDP grad_reduce_in_fp32 = accumulate_allreduce_grads_in_fp32):
    # bf16 accumulates in fp32 unless --grad-reduce-in-bf16; fp16 does not unless asked; fp16 without
    # --loss-scale turns the NaN check off (dynamic loss scaling)
    def grad_bytes(flags: str) -> int:
        return import_megatron(flags, 8, "h100-80gb").raw["training"].get("grad_bytes", 4)

    assert grad_bytes(BASE) == 4
    assert grad_bytes(f"{BASE} --grad-reduce-in-bf16") == 2
    fp16 = BASE.replace("--bf16", "--fp16")
    assert grad_bytes(fp16) == 2
    assert grad_bytes(f"{fp16} --accumulate-allreduce-grads-in-fp32") == 4
    assert import_megatron(fp16, 8, "h100-80gb").raw["timing"]["check_for_nan_in_grad"] is False
    assert import_megatron(f"{fp16} --loss-scale 4096", 8, "h100-80gb").raw["timing"]["check_for_nan_in_grad"]


def test_mla_without_qk_layernorm_has_no_latent_norms() -> None:
    # gpt_layer_specs.py (d98e8a64): under MLA --qk-layernorm makes the up-projections
    # TELayerNormColumnParallelLinear; without it they are plain linears, and nothing is noted
    mla = f"{BASE} --multi-latent-attention --kv-lora-rank 64"
    plain = import_megatron(mla, 8, "h100-80gb")
    assert plain.raw["models"][0]["spec"]["mla_latent_norms"] is False and plain.notes == []
    normed = import_megatron(f"{mla} --qk-layernorm", 8, "h100-80gb").raw["models"][0]["spec"]
    assert normed["mla_latent_norms"] is True and normed["qk_norm"] is False


def test_megatron_fsdp_keeps_its_gradients_in_its_own_main_grads_dtype() -> None:
    # Megatron-LM d98e8a64: --megatron-fsdp-main-grads-dtype defaults to auto (None), and
    # param_and_grad_buffer.py `_resolve_group_grad_dtype` then gives the main gradient buffer the
    # parameters' dtype: bf16 under --bf16 (2 bytes), whatever DDP's fp32 accumulation rule says; fp32 when
    # asked (4). The three flags are read, none noted; a comm dtype other than the gradients' is noted.
    fsdp = f"{BASE} --use-megatron-fsdp --use-distributed-optimizer"

    def imported(flags: str):
        return import_megatron(flags, 8, "h100-80gb")

    assert imported(fsdp).raw["training"].get("grad_bytes") == 2
    dtypes = "--megatron-fsdp-main-params-dtype fp32 --megatron-fsdp-main-grads-dtype fp32"
    stated = imported(f"{fsdp} {dtypes} --megatron-fsdp-grad-comm-dtype fp32")
    assert stated.raw["training"].get("grad_bytes", 4) == 4
    assert stated.notes == []
    assert imported(f"{fsdp} --megatron-fsdp-main-grads-dtype bf16").raw["training"].get("grad_bytes") == 2
    assert imported(f"{fsdp} --megatron-fsdp-grad-comm-dtype bf16").notes == []  # auto gradients are bf16 too
    assert imported(f"{fsdp} --megatron-fsdp-grad-comm-dtype fp32").notes == [
        "--megatron-fsdp-grad-comm-dtype fp32: reduce-scatter priced in the main gradients' dtype"
    ]
    assert imported(f"{fsdp} --megatron-fsdp-main-params-dtype auto").notes == [
        "--megatron-fsdp-main-params-dtype auto: priced as fp32 main parameters (the default)"
    ]
    with pytest.raises(InputError) as caught:
        imported(f"{fsdp} --megatron-fsdp-main-grads-dtype fp8")
    assert caught.value.field == "--megatron-fsdp-main-grads-dtype"
    # DDP keeps its own rule: bf16 accumulates in fp32
    assert imported(BASE).raw["training"].get("grad_bytes", 4) == 4


def test_the_op_fuser_runs_the_same_kernels_but_cute_dsls_fused_grouped_mlp() -> None:
    # moe/experts.py TEGroupedMLP._make_fused_ops (d98e8a64): GroupedLinear, ScaledSwiGLU, GroupedLinear as
    # TEGroupedMLP runs them; TE's CuTe DSL fused grouped MLP only for MXFP8 on sm100 with
    # NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (ops/fused/grouped_mlp.py fuse_grouped_mlp_ops)
    moe = f"{BASE} --num-experts 4 --moe-grouped-gemm --use-transformer-engine-op-fuser"
    assert import_megatron(moe, 8, "h100-80gb").notes == []
    mxfp8 = f"export NVTE_CUTEDSL_FUSED_GROUPED_MLP=1\n{moe} --fp8-format e4m3 --fp8-recipe mxfp8"
    assert import_megatron(mxfp8, 8, "h100-80gb").notes == []  # capability 9: the basic ops
    # on sm100 TE's CuTe DSL fused grouped MLP, priced (ppb_core.timing.fused_experts): the op fuser, the command's
    # GLU interleave, rank capacity and paged stash as timing words (the paged-stash recipe's flags, Megatron-LM
    # examples/moe_recipes qwen3_30b/gb200/mxfp8_16GPU_TP1PP1EP16_paged_stash.yaml)
    fused = import_megatron(mxfp8, 8, "b200")
    assert fused.notes == [] and fused.raw["timing"]["use_transformer_engine_op_fuser"]
    stash = f"{mxfp8} --moe-mlp-glu-interleave-size 32 --moe-expert-rank-capacity-factor 1.5 --moe-paged-stash"
    timing = import_megatron(f"{stash} --moe-paged-stash-buffer-size-factor-cuda 1.1", 8, "b200").raw["timing"]
    assert (timing["moe_mlp_glu_interleave_size"], timing["moe_expert_rank_capacity_factor"]) == (32, 1.5)
    assert timing["moe_paged_stash"] and timing["moe_paged_stash_buffer_size_factor_cuda"] == 1.1
    # elsewhere the stash's flags are not read: said, not priced
    plain = import_megatron(f"{moe} --moe-paged-stash", 8, "h100-80gb")
    assert "moe_paged_stash" not in plain.raw["timing"] and any("--moe-paged-stash" in note for note in plain.notes)
    # the rank capacity is Megatron-LM's own flag (transformer_config.py moe_expert_rank_capacity_factor, d98e8a64),
    # not a typo of --moe-expert-capacity-factor, which it comes within TYPO_SIMILARITY of (0.92)
    rank = import_megatron(f"{moe} --moe-expert-rank-capacity-factor 1.5", 8, "h100-80gb").notes
    assert len(rank) == 1 and "typo" not in rank[0] and "fused grouped MLP" in rank[0], rank


def test_a_tp_comm_overlap_cfg_gives_the_userbuffers_methods(tmp_path, capsys) -> None:
    # megatron/training/initialize.py _initialize_tp_communicators hands the YAML to TE's initialize_ub, which
    # updates each GEMM's default config with its entry: only methods other than the defaults are kept
    cfg = "fc2_fprop:\n  method: ring_exchange\nproj_fprop:\n  method: pipeline\n  num_sm: 4\n"
    cfg += "qkv_dgrad:\n  method: bulk\n"
    flags = f"{BASE} --sequence-parallel --tp-comm-overlap --tp-comm-overlap-cfg ub.yaml"
    imported = import_megatron(flags, 8, "h100-80gb", read_file={"ub.yaml": cfg}.get)
    assert imported.raw["timing"]["tp_comm_overlap_methods"] == {"fc2_fprop": "ring_exchange"}
    assert imported.notes == []
    unread = import_megatron(flags, 8, "h100-80gb")
    assert "tp_comm_overlap_methods" not in unread.raw["timing"]
    assert unread.notes == ["--tp-comm-overlap-cfg ub.yaml: not readable here, priced with TE's default methods"]
    with pytest.raises(InputError) as caught:
        import_megatron(flags, 8, "h100-80gb", read_file={"ub.yaml": "fc3_fprop: {method: bulk}\n"}.get)
    assert caught.value.field == "--tp-comm-overlap-cfg"
    # the command reads it relative to the launch script, as Megatron opens it from the working directory
    (tmp_path / "ub.yaml").write_text(cfg)
    script = tmp_path / "train.sh"
    script.write_text(SMALL_GPT + " --sequence-parallel --tp-comm-overlap --tp-comm-overlap-cfg ub.yaml\n")
    out = tmp_path / "run.yaml"
    assert main(["import", "megatron", str(script), "--gpus", "8", "--device", "h100-80gb", "-o", str(out)]) == 0
    assert load_run_config(out).timing.tp_comm_overlap_methods == {"fc2_fprop": "ring_exchange"}


def test_flags_with_nothing_to_price_are_read_past() -> None:
    # the FIM dataset rearranges token ids in the loader (fim_dataset.py); --outer-dp-sharding-strategy
    # no_shard is arguments.py's default; --cuda-graph-warmup-steps counts eager steps before the capture
    flags = (
        f"{BASE} --fim-data --fim-rate 0.5 --fim-spm-rate 0.5 --outer-dp-sharding-strategy no_shard"
        " --cuda-graph-impl transformer_engine --cuda-graph-warmup-steps 0"
    )
    assert import_megatron(flags, 8, "h100-80gb").notes == []
    optim = import_megatron(f"{BASE} --outer-dp-sharding-strategy optim", 8, "h100-80gb").notes
    assert optim == ["--outer-dp-sharding-strategy optim: not modelled by ppb (priced as if not given)"]


def test_megatrons_default_dispatcher_is_the_all_gather() -> None:
    # transformer_config.py: moe_token_dispatcher_type defaults to allgather
    imported = import_megatron(f"{BASE} --num-experts 4 --moe-grouped-gemm", 8, "h100-80gb")
    assert imported.raw["timing"]["moe_dispatcher"] == "allgather"
    assert imported.notes == []  # its time and memory priced as it runs (tests/test_moe_dispatchers.py)
    run_config_of(imported, "case")


def test_without_grouped_gemm_the_experts_are_a_sequential_mlp_priced_as_such() -> None:
    # no --moe-grouped-gemm: Megatron builds a SequentialMLP (transformer_engine_spec_provider.py
    # `grouped_mlp_modules`, d98e8a64), its memory and its time both modelled: no note for the flag
    imported = import_megatron(f"{BASE} --num-experts 4 --moe-token-dispatcher-type alltoall", 8, "h100-80gb")
    assert imported.raw["training"]["moe"]["grouped_gemm"] is False
    assert imported.notes == []
    run_config_of(imported, "case")


def test_notes_name_only_flags_that_change_what_ppb_prices() -> None:
    # no bias to fuse under --disable-bias-linear; --rotary-percent 1.0 is every channel (the default)
    # (--no-bias-gelu-fusion and --no-bias-swiglu-fusion are priced, timing.bias_*_fusion; the SwiGLU one's is not)
    quiet = import_megatron(
        f"{BASE} --disable-bias-linear --no-bias-swiglu-fusion --rotary-percent 1.0", 8, "h100-80gb"
    )
    assert quiet.notes == []
    loud = import_megatron(f"{BASE} --no-bias-swiglu-fusion --rotary-percent 0.5", 8, "h100-80gb")
    assert [note.split(":")[0] for note in loud.notes] == ["--no-bias-swiglu-fusion", "--rotary-percent 0.5"]
    # a flag in an `if` branch: the shell's `fi` that follows is not its value
    script = (
        f'ARGS=({BASE})\nif [ "$FP8" = 1 ]; then\n  ARGS+=(--rotary-percent 0.5)\nfi\npretrain_gpt.py "${{ARGS[@]}}"\n'
    )
    notes = import_megatron(script, 8, "h100-80gb").notes
    assert notes == ["--rotary-percent 0.5: not modelled by ppb (priced as if not given)"]


def test_another_entry_point_is_refused_not_priced_as_gpt() -> None:
    # examples/bert/train_bert_340m_distributed.sh runs pretrain_bert.py: BERT's layers, not GPT's
    with pytest.raises(InputError) as caught:
        import_megatron(f"torchrun --nproc_per_node 8 ../pretrain_bert.py {BASE}", 8, "h100-80gb")
    assert caught.value.field == "pretrain_bert.py"
    import_megatron(f"torchrun --nproc_per_node 8 ../pretrain_gpt.py {BASE}", 8, "h100-80gb")  # accepted


def test_a_profiler_s_options_are_not_megatron_flags() -> None:
    # examples/megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh: nsys's own options before the launch
    script = (
        f"TRAINING_ARGS=({BASE} --record-memory-history)\n"
        "PROFILE_CMD=(nsys profile --sample=none --trace=cuda,nvtx -o out)\n"
        '"${PROFILE_CMD[@]}" torchrun --nproc_per_node 8 pretrain_gpt.py ${TRAINING_ARGS[@]}\n'
        "nsys profile --cuda-memory-usage=true python -m torch.distributed.run pretrain_gpt.py"
        " --te-precision-config-file p.yaml\n"
    )
    noted = [note.split()[0].rstrip(":") for note in import_megatron(script, None, "h100-80gb").notes]
    # no --sample, --trace, -o, --cuda-memory-usage
    assert noted == ["--record-memory-history", "--te-precision-config-file"]


def test_an_expert_group_that_does_not_divide_names_the_expert_flag() -> None:
    # 8 GPUs, pp 4: dp 2, so ep 8 · etp 1 does not divide dp·cp·tp = 2 (examples/mixtral on one node)
    flags = f"{BASE} --pipeline-model-parallel-size 2 --num-experts 8 --expert-model-parallel-size 8"
    flags += " --num-layers 16"  # BASE's 14 replaced: 4 a stage, as Megatron-LM needs them even over pp 4
    with pytest.raises(InputError) as caught:
        run_config_of(import_megatron(flags.replace("size 2 ", "size 4 ", 1), 8, "h100-80gb"), "launch")
    assert caught.value.field == "--expert-model-parallel-size"


def test_an_output_in_a_missing_folder_is_written_there(tmp_path, capsys) -> None:
    out = tmp_path / "new" / "run.yaml"
    assert main(["import", "megatron", BASE, "--gpus", "8", "--device", "h100-80gb", "-o", str(out)]) == 0
    assert load_run_config(out).parallel.dp == 8


def test_an_empty_launch_script_is_said_to_be_empty(tmp_path, capsys) -> None:
    script = tmp_path / "train.sh"
    script.write_text("\n")
    assert main(["import", "megatron", str(script), "--gpus", "8", "--device", "h100-80gb"]) == 2
    assert capsys.readouterr().err == f"ppb: error: {script}: is empty: no Megatron-LM flags\n"


def test_a_flag_a_letter_off_one_ppb_carries_is_said_as_a_likely_typo() -> None:
    # --num-layer is --num-layers less its s (difflib ratio 2·11/23 = 0.96 > 0.9); --te-precision-config-file is
    # near none
    notes = import_megatron(f"{BASE} --num-layer 4 --te-precision-config-file p.yaml", 8, "h100-80gb").notes
    assert notes == [
        "--num-layer 4: not modelled by ppb (priced as if not given); a typo of --num-layers? "
        "Megatron-LM refuses a flag it does not have",
        "--te-precision-config-file p.yaml: not modelled by ppb (priced as if not given)",
    ]


def test_a_gpu_count_past_ppbs_limit_is_refused_naming_gpus(capsys) -> None:
    # limits.DEVICES = 2**20 = 1,048,576; one more is refused before the launch is read
    argv = ["import", "megatron", BASE, "--gpus", "1048577", "--device", "h100-80gb"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "ppb: error: --gpus: 1,048,577 is over ppb's limit of 1,048,576 devices (ppb_core/limits.py)\n"


def test_flags_only_assigned_to_a_variable_are_said_to_be_unused() -> None:
    # examples/post_training/modelopt/conf/Qwen/Qwen3-0.6B.sh: MODEL_ARGS=" ... --num-layers 28 ...", no command
    with pytest.raises(InputError) as caught:
        import_megatron(f'MODEL_ARGS=" \\\n    {BASE} \\\n"\n', 8, "h100-80gb")
    assert caught.value.field == "--num-layers" and "$MODEL_ARGS" in caught.value.problem
    # the same variable handed to pretrain_gpt.py is read (14 layers)
    imported = import_megatron(f'MODEL_ARGS="{BASE}"\npretrain_gpt.py ${{MODEL_ARGS}}\n', 8, "h100-80gb")
    assert imported.raw["models"][0]["spec"]["num_layers"] == 14


def test_a_pasted_command_line_is_read_as_flags_not_as_a_file_name(tmp_path) -> None:
    out = tmp_path / "run.yaml"
    line = f"torchrun --nproc_per_node 8 pretrain_gpt.py {BASE}"
    assert main(["import", "megatron", line, "--device", "h100-80gb", "-o", str(out)]) == 0
    assert load_run_config(out).parallel.dp == 8  # torchrun's 8 GPUs, tp = pp = 1


MOE = f"{BASE} --num-experts 8 --moe-router-topk 2"


@pytest.mark.parametrize(
    "flags, router",
    [
        ("", {}),  # Megatron's default: aux_loss at coefficient 0.0, so no loss (router.py get_aux_loss_coeff)
        ("--moe-router-load-balancing-type sinkhorn --moe-router-topk 1", {"sinkhorn": True}),
        ("--moe-aux-loss-coeff 1e-2", {"aux_losses": ["aux_loss"]}),
        (
            "--moe-router-load-balancing-type seq_aux_loss global_aux_loss --moe-aux-loss-coeff 1e-4 0",
            {"aux_losses": ["seq_aux_loss"]},
        ),
        (
            "--moe-router-score-function sigmoid --moe-router-fusion --moe-z-loss-coeff 1e-3"
            " --moe-router-force-load-balancing",
            {"score_function": "sigmoid", "fusion": True, "z_loss": True, "force_balance": True},
        ),
    ],
)
def test_the_router_s_settings_are_carried(flags: str, router: dict) -> None:
    moe = import_megatron(f"{MOE} {flags}", 8, "h100-80gb").raw["training"]["moe"]
    assert moe.get("router", {}) == router


def test_the_capacity_factor_its_padding_and_drop_policy_are_read() -> None:
    # --moe-pad-expert-input-to-capacity: token_dispatcher.py drop_and_pad (d98e8a64), every expert its capacity;
    # --moe-token-drop-policy picks which tokens drop, not how many (moe_utils.py apply_router_token_dropping):
    # nothing priced, so nothing said
    flags = f"{MOE} --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity"
    flags += " --moe-token-drop-policy position"
    imported = import_megatron(flags, 8, "h100-80gb")
    moe = imported.raw["training"]["moe"]
    assert (moe["capacity_factor"], moe["pad_to_capacity"]) == (1.25, True) and imported.notes == []
    assert run_config_of(imported, "launch").routed_share == 1.25
    # unpadded (Megatron's default): balanced routing keeps its share, 1.0
    unpadded = import_megatron(f"{MOE} --moe-expert-capacity-factor 1.25", 8, "h100-80gb")
    assert "pad_to_capacity" not in unpadded.raw["training"]["moe"]
    assert run_config_of(unpadded, "launch").routed_share == 1.0


@pytest.mark.parametrize(
    "flags, flag",
    [
        ("--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 1 2 3", "--moe-aux-loss-coeff"),
        ("--moe-router-load-balancing-type balanced", "--moe-router-load-balancing-type"),
        ("--moe-router-score-function tanh", "--moe-router-score-function"),
    ],
)
def test_a_bad_router_flag_is_refused_naming_it(flags: str, flag: str) -> None:
    with pytest.raises(InputError) as caught:
        import_megatron(f"{MOE} {flags}", 8, "h100-80gb")
    assert caught.value.field == flag


def test_a_tp_comm_overlap_cfg_turning_set_sm_margin_off_gives_ub_sm_margin_false() -> None:
    # TE d0067d0d initialize_ub: set_sm_margin on by default for the bulk and pipeline methods; Megatron's
    # tp_pp_sp_tp_overlap case turns it off for every one of them (proj_fprop pipeline, the four bulk GEMMs)
    flags = f"{BASE} --sequence-parallel --tp-comm-overlap --tp-comm-overlap-cfg ub.yaml"
    off = "proj_fprop:\n  method: pipeline\n  set_sm_margin: 0\nfc2_fprop:\n  method: ring_exchange\n"
    off += "".join(f"{name}:\n  method: bulk\n  set_sm_margin: 0\n" for name in ("qkv_dgrad", "qkv_wgrad"))
    off += "".join(f"{name}:\n  method: bulk\n  set_sm_margin: 0\n" for name in ("fc1_dgrad", "fc1_wgrad"))
    imported = import_megatron(flags, 8, "h100-80gb", read_file={"ub.yaml": off}.get)
    assert imported.raw["timing"]["ub_sm_margin"] is False
    assert imported.notes == []
    # fc2_fprop, still a pipeline here, keeps TE's default: some on, some off: a note, priced on
    partly = off.replace("fc2_fprop:\n  method: ring_exchange\n", "")
    imported = import_megatron(flags, 8, "h100-80gb", read_file={"ub.yaml": partly}.get)
    assert "ub_sm_margin" not in imported.raw["timing"]
    assert imported.notes == [
        "--tp-comm-overlap-cfg: set_sm_margin off for some bulk or pipeline GEMMs only, priced on"
    ]
    # nothing said: TE's default
    plain = import_megatron(flags, 8, "h100-80gb", read_file={"ub.yaml": "qkv_dgrad:\n  method: bulk\n"}.get)
    assert "ub_sm_margin" not in plain.raw["timing"]


def test_tp_comm_overlap_under_the_local_spec_overlaps_nothing_and_reads_no_cfg() -> None:
    # initialize.py `_initialize_tp_communicators` builds TE's userbuffers under --tp-comm-overlap whatever the
    # spec, but only TE's layers use them: the local spec's tensor_parallel layers read no tp_comm_overlap
    # (megatron/core/tensor_parallel/, d98e8a64). So no TP overlap, and the cfg's methods and margin unread
    # (a run config stating them under transformer_impl local is refused: they would price nothing).
    flags = f"{BASE} --sequence-parallel --tp-comm-overlap --tp-comm-overlap-cfg ub.yaml --transformer-impl local"
    cfg = "fc2_fprop:\n  method: ring_exchange\nqkv_dgrad:\n  method: bulk\n  set_sm_margin: 0\n"
    imported = import_megatron(flags, 8, "h100-80gb", read_file={"ub.yaml": cfg}.get)
    timing = imported.raw["timing"]
    assert timing["overlap"]["tp"] == 0.0
    assert "tp_comm_overlap_methods" not in timing and "ub_sm_margin" not in timing
    te = import_megatron(flags.replace("local", "transformer_engine"), 8, "h100-80gb", read_file={"ub.yaml": cfg}.get)
    assert te.raw["timing"]["overlap"]["tp"] == 1.0
    assert te.raw["timing"]["tp_comm_overlap_methods"] == {"fc2_fprop": "ring_exchange"}


def test_cross_entropy_fusion_impl_is_carried() -> None:
    # Megatron-LM language_module.py `compute_language_model_loss` (d98e8a64): --cross-entropy-fusion-impl te
    # runs TransformerEngine's parallel_cross_entropy, native the compiled fused_cross_entropy.py; it matters
    # only under --cross-entropy-loss-fusion (without it the unfused vocab_parallel_cross_entropy runs).
    te = import_megatron(f"{BASE} --cross-entropy-loss-fusion --cross-entropy-fusion-impl te", 8, "h100-80gb")
    assert te.raw["timing"]["cross_entropy_fusion_impl"] == "te" and te.notes == []
    assert run_config_of(te, "launch").timing.cross_entropy_fusion_impl == "te"
    unfused = import_megatron(f"{BASE} --cross-entropy-fusion-impl te", 8, "h100-80gb")
    assert "cross_entropy_fusion_impl" not in unfused.raw["timing"]
    with pytest.raises(InputError) as caught:
        import_megatron(f"{BASE} --cross-entropy-loss-fusion --cross-entropy-fusion-impl triton", 8, "h100-80gb")
    assert "--cross-entropy-fusion-impl" in str(caught.value) and "native or te" in str(caught.value)


# examples/gptoss/02_train.sh (core_v0.17.0): GPT-OSS's own flags, on a small model with MoE and biases
GPT_OSS = (
    "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --group-query-attention --num-query-groups 2 "
    "--kv-channels 64 --seq-length 512 --max-position-embeddings 512 --bf16 --num-experts 8 --moe-router-topk 2 "
    "--moe-ffn-hidden-size 256 --moe-grouped-gemm --position-embedding-type rope --hidden-dropout 0 "
    "--attention-dropout 0 --no-bias-dropout-fusion --quick-geglu --glu-linear-offset 1.0 --softmax-type learnable "
    "--window-attn-skip-freq 2 --activation-func-clamp-value 7.0 --window-size 127,0"
)


def test_gpt_oss_s_flags_become_its_window_sinks_clamp_and_biases() -> None:
    imported = import_megatron(GPT_OSS, 8, "h100-80gb")
    spec = imported.raw["models"][0]["spec"]
    # utils.py is_layer_window_attention: layer number l (1-based) slides where l % 2 != 0, 1 and 3 (indices 0, 2);
    # TE's window (127, 0) is 127 earlier keys and the query's own: 128
    assert (spec["sliding_window"], spec["window_layers"]) == (128, (0, 2))
    assert spec["activation"] == "quick_geglu" and spec["activation_clamp"] == 7.0
    assert spec["attention_sinks"] is True
    # add_bias_linear: TEGroupedMLP's linears and the router (router.py: a bias where add_bias_linear)
    assert spec["expert_bias"] is True and spec["router_bias"] is True
    # the fused quick-GEGLU's ffn stays --moe-ffn-hidden-size (validate_args shrinks only --swiglu's default)
    assert spec["moe_intermediate_size"] == 256
    assert imported.raw["timing"]["bias_dropout_fusion"] is False
    # --glu-linear-offset is inside the fused kernel (NOTHING_PRICED): nothing said
    assert imported.notes == []
    run = run_config_of(imported, "launch")
    assert run.spec("gpt").layer_window(0) == 128 and run.spec("gpt").layer_window(1) == 0
    # a pattern: the list's 1s slide; no --window-attn-skip-freq: every layer
    pattern = import_megatron(
        GPT_OSS.replace("--window-attn-skip-freq 2", "--window-attn-skip-freq ([1]*3+[0])"), 8, "h100-80gb"
    )
    assert pattern.raw["models"][0]["spec"]["window_layers"] == (0, 1, 2)
    every = import_megatron(GPT_OSS.replace("--window-attn-skip-freq 2", ""), 8, "h100-80gb")
    assert every.raw["models"][0]["spec"]["window_layers"] == (0, 1, 2, 3)
    # no window at all: (-1, 0) is the whole causal prefix; off-by-one has no parameter (priced as vanilla)
    plain = import_megatron(GPT_OSS.replace("127,0", "-1,0").replace("learnable", "off-by-one"), 8, "h100-80gb")
    spec = plain.raw["models"][0]["spec"]
    assert "sliding_window" not in spec and "attention_sinks" not in spec
    assert [note.split(":")[0] for note in plain.notes] == ["--softmax-type off-by-one"]
    # --disable-bias-linear: no expert or router bias
    biasless = import_megatron(f"{GPT_OSS} --disable-bias-linear", 8, "h100-80gb").raw["models"][0]["spec"]
    assert "expert_bias" not in biasless and "router_bias" not in biasless


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        ("--swiglu", "--quick-geglu"),  # argument_utils.py: assert not args.swiglu
        ("--window-size 127,4", "--window-size"),  # a window past the diagonal: not a causal band
        ("--window-size 127", "--window-size"),
        ("--window-attn-skip-freq 0", "--window-attn-skip-freq"),
        ("--window-attn-skip-freq [1,0]", "--window-attn-skip-freq"),  # 2 entries for 4 layers
        ("--softmax-type softmax1", "--softmax-type"),  # transformer_config.py's Literal
        ("--activation-func-clamp-value -1", "--activation-func-clamp-value"),
    ],
)
def test_bad_gpt_oss_flags_are_refused_naming_them(flags: str, flag: str) -> None:
    with pytest.raises(InputError) as caught:
        imported = import_megatron(f"{GPT_OSS} {flags}", 8, "h100-80gb")
        run_config_of(imported, "launch")
    assert caught.value.field == flag
    assert "\n" not in caught.value.line()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # arguments.py validate_args (d98e8a64): "Number of layers should be divisible by the
        # pipeline-model-parallel size": BASE's 14 layers over pp 4 with nothing placing them (session 27)
        ("--pipeline-model-parallel-size 4", "14 layers do not split evenly over pp 4"),
        # transformer_block.py get_num_layers_to_build: 7 a rank over 2 virtual stages
        (
            "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2",
            "14 layers do not split evenly over pp 2 × 2 virtual stages",
        ),
    ],
)
def test_layers_megatron_cannot_split_evenly_are_refused(flags: str, said: str) -> None:
    with pytest.raises(InputError) as caught:
        import_megatron(f"{BASE} {flags}", 8, "h100-80gb")
    assert caught.value.field == "--num-layers" and said in caught.value.problem


def test_layers_split_evenly_or_placed_are_imported() -> None:
    # 14 over pp 2 (7 a rank), and over pp 4 when the launch places them (2 first, 2 last: 5 a middle stage)
    assert import_megatron(f"{BASE} --pipeline-model-parallel-size 2", 8, "h100-80gb").raw["parallel"]["pp"] == 2
    flags = (
        "--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 2"
    )
    assert import_megatron(f"{BASE} {flags}", 8, "h100-80gb").raw["parallel"]["layout"] == "Ett|ttttt|ttttt|ttL"


def test_expert_groups_without_a_group_top_k_are_not_refused() -> None:
    """Megatron-Core checks that moe_router_num_groups divides the experts only under a group top-k
    (transformer_config.py `TransformerConfig.__post_init__`, d98e8a64: `if self.moe_router_group_topk:`), and routes
    without groups otherwise: 3 groups of MOE_MLA's 32 experts run there, and import; under a group top-k of 2 they
    are refused naming the flag, as Megatron-Core's assertion refuses them."""
    ungrouped = MOE_MLA.replace("--moe-router-group-topk 2 --moe-router-num-groups 4", "--moe-router-num-groups 3")
    spec = run_config_of(import_megatron(ungrouped, 8, "h100-80gb"), "launch").models[0].spec
    assert (spec.expert_groups, spec.expert_group_limit) == (3, 0)
    with pytest.raises(InputError) as caught:
        run_config_of(import_megatron(MOE_MLA.replace("num-groups 4", "num-groups 3"), 8, "h100-80gb"), "launch")
    assert caught.value.field == "--moe-router-num-groups"
    assert "expert_groups 3 does not divide num_experts 32" in caught.value.problem


def test_a_vocab_size_the_tokenizer_does_not_read_is_said(tmp_path, capsys) -> None:
    """d98e8a64 build_tokenizer.py hands `--vocab-size` to NullTokenizer and TikTokenizer only; with pad_vocab_size
    on (the default) `_set_padded_vocab_size` pads the tokenizer's own size, which `gpt_config_from_args` takes as
    the model's. So under pretrain_gpt.py's GPT-2 BPE a `--vocab-size 32000` sizes nothing: 50257 entries, padded
    to ⌈50257 / 128⌉ · 128 = 393 · 128 = 50304 at TP 1. It was dropped in silence ("0 flags not modelled")."""
    imported = import_megatron(f"{BASE} --vocab-size 32000", 8, "h100-80gb")
    assert imported.raw["models"][0]["spec"]["vocab_size"] == 50257
    assert run_config_of(imported, "case").vocab_size("gpt") == 50304
    assert [note.split(":")[0] for note in imported.notes] == ["--vocab-size 32000"]
    assert "GPT2BPETokenizer does not read it" in imported.notes[0]
    # NullTokenizer reads it: no note, the size is the flag's (32000 = 250 · 128, padded to itself)
    null = import_megatron(f"{BASE} --tokenizer-type NullTokenizer --vocab-size 32000", 8, "h100-80gb")
    assert null.raw["models"][0]["spec"]["vocab_size"] == 32000 and null.notes == []
    # a file tokenizer with its file elsewhere: the refusal says the --vocab-size given does not stand in for it
    with pytest.raises(InputError) as caught:
        import_megatron(
            f"{BASE} --vocab-size 32000 --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/x",
            8,
            "h100-80gb",
        )
    assert caught.value.field == "--tokenizer-model"
    assert "Megatron-LM does not read --vocab-size 32000 for it" in caught.value.line()
    out = tmp_path / "run.yaml"
    argv = ["import", "megatron", f"{BASE} --vocab-size 32000", "--gpus", "8", "--device", "h100-80gb", "-o", str(out)]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out} (1 flag not modelled)"
