"""MindSpore's optimizer parallel under framework mindformers (ppb_core.memory.frameworks.mindformers).

Expected values are counted by hand from MindSpore's rules (mindspore-ai/mindspore,
mindspore/ccsrc/frontend/parallel: opt_param_mgr.cc 7fa6e756, tensor_layout.cc 367dc859, the stored 2024
step_parallel.cc, parameter_manager.cc 4ac3f804): opt_param_mgr.cc `SplitParam` (a parameter under
`parallel_optimizer_threshold` KB, its whole shape times its dtype's bytes, stays whole), tensor_layout.cc
`GenerateOptShardSliceShape` (the first dimension must divide by the shard count), parameter_manager.cc
`SetClonedTensorShapeForOptimizer` (optimizer states take the slice; `accu_grads` stays whole unless
gradient_accumulation_shard), step_parallel.cc `InsertAllGatherOp` (under a pipeline or accumulation the
forward gathers after the Cast to the compute dtype, `InsertAllGatherAfterCast`; otherwise it gathers the
parameter itself, in its dtype, and the Linear casts the gathered weight); MindFormers' Linear weights are
(out, in) (layers.py `Linear`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from small_models import ROUND_DEVICE
from test_memory_runs import DENSE, DENSE_BODY_PARAMS, body, layers, make_run, model

from ppb_core.cli.main import main
from ppb_core.config.run import parse_run_config, resolved_raw
from ppb_core.errors import InputError
from ppb_core.model.switches import LayerType
from ppb_core.timing.iteration import run_iteration

# DENSE at tp 1: wq, wk, wv, wo 64x64 = 4096 elements each (16 KB in fp32); w1, w3 128x64 and w2
# 64x128 = 8192 each (32 KB in fp32); two RMSNorm scales of 64.
ATTENTION, MLP, NORMS = 4 * 4096, 3 * 8192, 128


def _run(parallel: dict[str, Any], training: dict[str, Any] | None = None, param_dtype: str = "fp32"):
    return make_run(
        DENSE,
        parallel={"dp": 8, "enable_parallel_optimizer": True, **parallel},
        training={"dtype": "bf16", **(training or {})},
        framework="mindformers",
        timing={"param_dtype": param_dtype},
    )


def _static(run, node: str | None = None):
    memory = model(run)
    layer = body(run) if node is None else layers(run)[node]
    return memory.static_breakdown(layer)


def test_threshold_keeps_the_small_weights_whole():
    """Threshold 20 KB in fp32: the attention matrices (16 KB) stay whole, the MLP's (32 KB) are sliced
    over dp 8: held 24576/8 + 16384 + 128 = 19584 elements; the fp32 parameters (param_init_type) 4 B each,
    and the optimizer's two fp32 moments 8 B each, no master copy (MindFormers v1.3.0 optim.py
    `FP32StateAdamWeightDecay`: `clone_state(..., dtype=mstype.float32)` twice, the parameter updated in
    place); one micro-batch, no accumulation: gradients reduce-scattered into the slice, fp32 (the
    parameter's dtype); the forward's gathered MLP weights in bf16: 24576 x 2 B. 16 B a held element."""
    static = _static(_run({"parallel_optimizer_config": {"parallel_optimizer_threshold": 20}}))
    held = MLP // 8 + ATTENTION + NORMS
    assert held == 19584
    assert static.parameters == static.optimizer_states == static.gradients == held
    assert static.parameter_bytes == held * 4 == 78336
    assert static.optimizer_bytes == held * 8 == 156672
    assert static.gradient_bytes == held * 4 == 78336
    assert static.parameter_bytes + static.optimizer_bytes + static.gradient_bytes == held * 16
    assert static.held_through_step_bytes == MLP * 2 == 49152
    # the gathered weights are freed before the optimizer step
    assert static.step_bytes == static.total - 49152


def _working(run) -> float:
    """What the framework's rules say a body layer's forward and backward hold of parameters and gradients."""
    memory = model(run)
    layer = body(run)
    return memory.rules.parameter_working_bytes(
        memory.parameters(layer), memory.setup, "BODY", 2, None, None, layer.kind
    )


def test_without_accumulation_the_layer_gathers_and_reduces_in_the_parameter_dtype():
    """Threshold 20 KB, fp32 parameters, one micro-batch, no pipeline: MindSpore's AllGather takes the fp32 slice
    of the MLP's three matrices (`InsertAllGatherAfterCast` returns nothing without a pipeline), whose output the
    Linear casts to bf16; the layer's forward holds that fp32 output until the cast, its backward the fp32
    cast-back gradient the AllGather's backward reduce-scatters: 24576 x 4 B = 98304 B beyond its static memory.
    What the backward reads stays the bf16 cast (Cast's bprop reads only its input's dtype): 24576 x 2 B."""
    run = _run({"parallel_optimizer_config": {"parallel_optimizer_threshold": 20}})
    assert _working(run) == MLP * 4 == 98304
    assert _static(run).held_through_step_bytes == MLP * 2 == 49152
    # two micro-batches without a pipeline gather the same way (both functions test only
    # `pipeline_stage_split_num() <= 1`, v2.3.0-v2.6.0): the layer holds the same 98304 B; the backward's fp32
    # gradient is added into the whole `accu_grads` (`_MiniStepAllGather`'s bprop) instead of reduce-scattered
    two = _run({"parallel_optimizer_config": {"parallel_optimizer_threshold": 20}}, {"micro_batches": 2})
    assert _working(two) == MLP * 4
    # the stage's working set of the layer carries it: a pipeline (two stages of DENSE's four layers) gathers after
    # the cast, and holds 98304 B less in a layer's backward
    piped = _run({"pp": 2, "parallel_optimizer_config": {"parallel_optimizer_threshold": 20}}, {"micro_batches": 2})
    assert _working(piped) == 0
    once, twice = model(two), model(piped)
    extra = [
        m.working_extra_bytes(body(r), LayerType.NOT_REC_LAYER, None, 2, True) for m, r in ((once, two), (twice, piped))
    ]
    assert extra[0] - extra[1] == pytest.approx(98304 * once.correction.working)


def test_parameters_in_the_compute_dtype_hold_their_gradient_once_whole():
    """bf16 parameters, threshold 0: all 40960 matrix elements sliced; no cast between gather and GEMM, so the
    forward holds nothing beyond the kept gathered weight, and the backward the whole bf16 gradient the
    reduce-scatter takes: 40960 x 2 B = 81920 B. A pipeline (two stages of DENSE's four layers) gathers after
    the cast: nothing."""
    config = {"parallel_optimizer_config": {"parallel_optimizer_threshold": 0}}
    assert _working(_run(config, param_dtype="bf16")) == (ATTENTION + MLP) * 2 == 81920
    assert _working(_run({**config, "pp": 2}, {"micro_batches": 2}, param_dtype="bf16")) == 0
    # dp 1 slices nothing: nothing gathered
    assert _working(_run({**config, "dp": 1}, param_dtype="bf16")) == 0


def test_sixteen_bit_parameters_keep_no_fp32_master():
    """param_init_type float16 under bf16 compute (the Llama 2 cards): the held parameter 2 B, its gradient 2 B
    (the parameter's dtype), the two moments fp32 8 B (FP32StateAdamWeightDecay forces them fp32, no master:
    optim.py v1.3.0): 12 B a held element. Threshold 0, dp 8: 40960/8 + 128 = 5248 held elements."""
    static = _static(_run({"parallel_optimizer_config": {"parallel_optimizer_threshold": 0}}, param_dtype="fp16"))
    assert static.parameters == (ATTENTION + MLP) // 8 + NORMS == 5248
    assert static.parameter_bytes == 5248 * 2
    assert static.gradient_bytes == 5248 * 2
    assert static.optimizer_bytes == 5248 * 8
    # a stated training.optimizer_state_bytes is taken as stated
    config = {"parallel_optimizer_config": {"parallel_optimizer_threshold": 0}}
    stated = _run(config, {"optimizer_state_bytes": 12}, param_dtype="fp16")
    assert _static(stated).optimizer_bytes == 5248 * 12


def test_default_threshold_keeps_every_matrix_of_a_tiny_layer_whole():
    """At MindSpore's 64 KB default none of DENSE's matrices (16 and 32 KB) is sliced: nothing gathered."""
    static = _static(_run({}))
    assert static.parameters == DENSE_BODY_PARAMS
    assert static.held_through_step_bytes == 0


def test_threshold_reads_the_parameter_dtype():
    """In bf16 (param_init_type = compute dtype) the MLP matrices are 16 KB: under a 20 KB threshold."""
    static = _static(_run({"parallel_optimizer_config": {"parallel_optimizer_threshold": 20}}, param_dtype="bf16"))
    assert static.parameters == DENSE_BODY_PARAMS
    assert static.gradient_bytes == DENSE_BODY_PARAMS * 2


def test_accumulation_buffer_whole_unless_gradient_accumulation_shard():
    """Two micro-batches: `accu_grads` (wrapper.py, a clone of the weights) holds all 41088 elements in
    fp32 = 164352 B; with gradient_accumulation_shard the slice: threshold 0 slices all 40960 matrix
    elements, 40960/8 + 128 = 5248 elements, 20992 B."""
    config = {"parallel_optimizer_threshold": 0}
    whole = _static(_run({"parallel_optimizer_config": config}, {"micro_batches": 2}))
    assert whole.gradient_bytes == DENSE_BODY_PARAMS * 4 == 164352
    sharded = _static(
        _run({"parallel_optimizer_config": {**config, "gradient_accumulation_shard": True}}, {"micro_batches": 2})
    )
    assert sharded.gradients == (ATTENTION + MLP) // 8 + NORMS == 5248
    assert sharded.gradient_bytes == 5248 * 4


def test_shard_size_and_first_dimension():
    """optimizer_weight_shard_size 2: every matrix halved, 40960/2 + 128 = 20608. At dp 128 only w1
    and w3 (first dimension 128) divide: 16384/128 + (41088 - 16384) = 24832."""
    halves = _static(
        _run({"parallel_optimizer_config": {"parallel_optimizer_threshold": 0, "optimizer_weight_shard_size": 2}})
    )
    assert halves.parameters == (ATTENTION + MLP) // 2 + NORMS == 20608
    wide = _static(_run({"dp": 128, "parallel_optimizer_config": {"parallel_optimizer_threshold": 0}}))
    assert wide.parameters == 2 * 8192 // 128 + (DENSE_BODY_PARAMS - 2 * 8192) == 24832


def test_embedding_sliced_only_under_model_config_parallel_optimizer():
    """The table, 1024 x 64 = 65536 elements (256 KB in fp32), stays whole by default (LlamaConfig's
    parallel_optimizer False); the untied output layer is a Linear, sliced: 65536/8 + the final norm's 64."""
    run = _run({})
    assert _static(run, "HEAD").parameters == 65536
    assert _static(run, "TAIL").parameters == 65536 // 8 + 64 == 8256
    sliced = _run({"embedding_parallel_optimizer": True})
    assert _static(sliced, "HEAD").parameters == 65536 // 8


def test_a_sliced_embedding_table_is_not_kept_gathered():
    """LlamaEmbedding looks rows up with a Gather of the parameter (llama_layer.py v1.3.0), and Gather's backward
    does not read the table (grad_array_ops.cc v2.4.0, `SetUnusedInputs({i0, i4})`): the HEAD's gathered table,
    1024 x 64 = 65536 elements, is not held to the backward, where the TAIL's output Linear keeps its bf16 weight,
    65536 x 2 B = 131072 (sliced: 256 KB in fp32, over the 64 KB default). One micro-batch, no pipeline: the
    HEAD's forward still holds the fp32 AllGather output, 65536 x 4 B = 262144, until the lookup."""
    run = _run({"embedding_parallel_optimizer": True})
    assert _static(run, "HEAD").held_through_step_bytes == 0
    assert _static(run, "TAIL").held_through_step_bytes == 65536 * 2 == 131072
    memory = model(run)
    head = layers(run)["HEAD"]
    working = memory.rules.parameter_working_bytes(
        memory.parameters(head), memory.setup, "HEAD", 2, None, None, head.kind
    )
    assert working == 65536 * 4 == 262144


def test_sapp_zero_levels_unchanged_without_the_statement():
    """Without enable_parallel_optimizer, framework mindformers keeps SAPP's ZeRO-1: parameters and
    gradients whole, states over dp 8 (41088/8 = 5136)."""
    run = make_run(DENSE, parallel={"dp": 8, "zero": 1}, framework="mindformers")
    static = model(run).static_breakdown(body(run))
    assert static.parameters == static.gradients == DENSE_BODY_PARAMS
    assert static.optimizer_states == DENSE_BODY_PARAMS // 8
    assert static.held_through_step_bytes == 0


@pytest.mark.parametrize(
    ("parallel", "framework", "field"),
    [
        ({"enable_parallel_optimizer": True}, "megatron", "parallel.enable_parallel_optimizer"),
        ({"embedding_parallel_optimizer": True}, "torchtitan", "parallel.embedding_parallel_optimizer"),
        ({"parallel_optimizer_config": {}}, "mindformers", "parallel.parallel_optimizer_config"),
        ({"enable_parallel_optimizer": True, "zero": 1}, "mindformers", "parallel.enable_parallel_optimizer"),
        (
            {"enable_parallel_optimizer": False, "parallel_optimizer_config": {}},
            "mindformers",
            "parallel.parallel_optimizer_config",
        ),
        # model_config.parallel_optimizer slices the embedding only where the optimizer parallel runs
        (
            {"enable_parallel_optimizer": False, "embedding_parallel_optimizer": True},
            "mindformers",
            "parallel.embedding_parallel_optimizer",
        ),
        (
            {"enable_parallel_optimizer": True, "parallel_optimizer_config": {"optimizer_weight_shard_size": 3}},
            "mindformers",
            "parallel.parallel_optimizer_config.optimizer_weight_shard_size",
        ),
    ],
)
def test_refused_in_one_line(parallel, framework, field):
    with pytest.raises(InputError) as err:
        make_run(DENSE, parallel={"dp": 8, **parallel}, framework=framework)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_shard_size_must_be_a_group():
    with pytest.raises(InputError):
        make_run(
            DENSE,
            parallel={
                "dp": 8,
                "enable_parallel_optimizer": True,
                "parallel_optimizer_config": {"optimizer_weight_shard_size": 0},
            },
            framework="mindformers",
        )


def _cli_run(folder) -> str:
    raw = {
        "name": "mf-op",
        "framework": "mindformers",
        "models": [{"name": "m", "spec": DENSE}],
        "parallel": {"dp": 4, "pp": 2, "enable_parallel_optimizer": True},
        "training": {"seq_length": 64, "micro_batches": 4},
        "device": {"name": "ascend-910b"},
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize(
    ("parallel", "line"),
    [
        (
            "{enable_parallel_optimizer: false}",
            "parallel.enable_parallel_optimizer: false, the run config has True: ppb checks the plan at the run's "
            "sharding",
        ),
        (
            "{enable_parallel_optimizer: true, parallel_optimizer_config: {parallel_optimizer_threshold: 32}}",
            "parallel.parallel_optimizer_config.parallel_optimizer_threshold: 32, the run config has 64",
        ),
    ],
)
def test_check_refuses_a_yaml_that_shards_otherwise(capsys, tmp_path, parallel, line):
    """`ppb check --plan` with a MindFormers yaml: its optimizer-parallel settings are the run config's."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"offset: [0, 0]\nparallel: {parallel}\n")
    code = main(["check", _cli_run(tmp_path), "--plan", str(plan), "--no-optimum", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and f"{plan}: {line}" in err, err


def test_check_reads_a_yaml_that_shards_as_the_run(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "offset: [0, 0]\nparallel: {enable_parallel_optimizer: true, parallel_optimizer_config: "
        "{gradient_accumulation_shard: false, parallel_optimizer_threshold: 64}}\n"
    )
    code = main(["check", _cli_run(tmp_path), "--plan", str(plan), "--no-optimum", "-q"])
    assert code in (0, 1), capsys.readouterr().err


def test_check_reads_the_yaml_against_sapp_zero_without_the_words(capsys, tmp_path):
    """A run config in SAPP's words (zero 1, as `ppb search` writes the yaml from it): the yaml's
    `enable_parallel_optimizer: true` agrees; false contradicts it."""
    raw = yaml.safe_load(Path(_cli_run(tmp_path)).read_text())
    raw["parallel"] = {"dp": 4, "pp": 2, "zero": 1}
    run = tmp_path / "sapp.yaml"
    run.write_text(yaml.safe_dump(raw))
    plan = tmp_path / "plan.yaml"
    plan.write_text("offset: [0, 0]\nparallel: {enable_parallel_optimizer: true}\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) in (0, 1)
    capsys.readouterr()
    plan.write_text("offset: [0, 0]\nparallel: {enable_parallel_optimizer: false}\n")
    assert main(["check", str(run), "--plan", str(plan), "--no-optimum", "-q"]) == 2
    assert "the run config has zero 1" in capsys.readouterr().err


def test_accumulated_gradients_are_all_reduced_whole():
    """Time: over accumulated micro-batches the backward of `_MiniStepAllGather` all-reduces the whole
    `accu_grads` and keeps its slice (grad_comm_ops.py `split(all_reduce(z))[rank]`, mindspore-ai/mindspore
    c3665836); with gradient_accumulation_shard the reduce-scatter stays. The weights left whole are all-reduced by
    their mirror op either way, and only the sharded ones gathered. Without optimizer parallel (shard_level 0)
    every gradient is all-reduced and nothing is gathered. On a device without latency (bytes-linear; an
    all-reduce twice a reduce-scatter): link(off) = AR(S + W), link(on) - link(on, sharded) = AR(S) - RS(S) =
    AR(S) / 2, with threshold 0 S = 4 · 40960 + 65536 (the output layer) = 229,376 sharded elements and W = 4 · 128
    + 65536 (the embedding table) + 64 = 66,112 whole ones."""

    def link(parallel: dict[str, Any]) -> float:
        run = make_run(
            DENSE,
            parallel={"dp": 8, "enable_parallel_optimizer": True, **parallel},
            training={"dtype": "bf16", "micro_batches": 2},
            device=ROUND_DEVICE,
            framework="mindformers",
            timing={"param_dtype": "fp32"},
        )
        return run_iteration(run).link_seconds["dp_communication"]

    config = {"parallel_optimizer_threshold": 0}
    whole = link({"parallel_optimizer_config": config})
    sharded = link({"parallel_optimizer_config": {**config, "gradient_accumulation_shard": True}})
    off = link({"enable_parallel_optimizer": False})
    assert off > 0
    assert 4 * DENSE_BODY_PARAMS + 65536 + 65536 + 64 == 229_376 + 66_112
    assert whole - sharded == pytest.approx(off / 2 * 229_376 / (229_376 + 66_112), rel=1e-9)


def test_a_dumped_run_reads_back():
    """`resolved_raw` (the runs table's config_json) dumps the defaults; zero beside
    enable_parallel_optimizer would be refused on reading it back."""
    run = _run({"parallel_optimizer_config": {"gradient_accumulation_shard": True}})
    again = parse_run_config(resolved_raw(run))
    assert again.parallel.enable_parallel_optimizer is True
    assert again.parallel.parallel_optimizer_config == run.parallel.parallel_optimizer_config
