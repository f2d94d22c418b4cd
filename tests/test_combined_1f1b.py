"""Megatron-Core's combined 1F1B schedule (--overlap-moe-expert-parallel-comm): its steps, what
coexists within one, and what its nodes keep (megatron/core/pipeline_parallel/schedules.py,
combined_1f1b.py, models/common/model_chunk_schedule_plan.py, models/gpt/fine_grained_callables.py
at Megatron-LM d98e8a64)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_memory_activations import MOE
from test_memory_runs import DENSE, make_run, model
from test_run_layout import MOE as MOE_MTP
from test_run_layout import _run

from ppb_core.balance.problem import run_problem
from ppb_core.cli.main import main
from ppb_core.estimate.inputs import load_run
from ppb_core.memory import MemoryModel, stage_peaks
from ppb_core.memory.combined import ChunkNodes, LayerNodes, step_extra_bytes
from ppb_core.memory.frameworks.megatron import schedule_node
from ppb_core.memory.peak import _chunk_nodes
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import BODY, TAIL, walk
from ppb_core.payload.run import describe_run
from ppb_core.schedules import combined_in_flight_vectors, combined_pairs, combined_steps, simulate
from ppb_core.timing.combined import layer_segments, mtp_segments
from ppb_core.timing.host import HostWaits
from ppb_core.timing.iteration import _combined_savings, _state
from ppb_core.timing.pricer import TimeModel

CONFIGS = Path(__file__).parent.parent / "configs"


def test_steps_of_the_interleaved_schedule_with_one_more_warm_up_forward():
    # P 2, V 4, m 4, groups of P micro-batches. Forward slots (micro-batch, chunk): (0,0) (1,0) (0,1)
    # (1,1) (0,2) (1,2) (0,3) (1,3) (2,0) (3,0) (2,1) ...; backward slots the same with the chunks
    # reversed: (0,3) (1,3) (0,2) (1,2) (0,1) (1,1) (0,0) (1,0) (2,3) ... Rank 1 warms up with
    # 2·(2−1−1) + (4−1)·2 = 6 forwards, + 1 under the flag (get_pp_rank_microbatches): 7, holding
    # (2, 2, 2, 1); then step k runs forward slot 7+k beside backward slot k, 16 − 7 = 9 steps:
    steps = combined_steps("interleaved", 2, 4, 4)
    assert steps[1] == [
        ((2, 2, 2, 1), 3, 3),  # F (1,3) beside B (0,3)
        ((2, 2, 2, 1), 0, 3),  # F (2,0) beside B (1,3)
        ((3, 2, 2, 0), 0, 2),
        ((4, 2, 1, 0), 1, 2),
        ((4, 3, 0, 0), 1, 1),
        ((4, 3, 0, 0), 2, 1),
        ((4, 2, 1, 0), 2, 0),
        ((3, 2, 2, 0), 3, 0),
        ((2, 2, 2, 1), 3, 3),  # F (3,3) beside B (2,3)
    ]
    # rank 0 warms up with 2·1 + 6 + 1 = 9 forwards: slots 0..8 hold (3, 2, 2, 2)
    assert steps[0][0] == ((3, 2, 2, 2), 0, 3)
    # between steps rank 1 never holds more than the steps start from (a step's forward runs beside
    # its backward), where the plain schedule's forward first reaches (2, 2, 2, 1) on its own
    between = [(4, 3, 0, 0), (4, 2, 1, 0), (3, 2, 2, 0), (2, 2, 2, 1)]
    assert combined_in_flight_vectors(2, 4, 4, "interleaved")[1] == between


def test_without_pipelining_the_first_forward_runs_alone():
    # combined_1f1b_schedule_for_no_pipelining: F0, then (F1, B0), (F2, B1), (F3, B2), then B3
    assert combined_steps("1f1b", 1, 1, 4) == [[((1,), 0, 0)] * 3]
    assert combined_in_flight_vectors(1, 1, 4, "1f1b") == [[(1,)]]
    # one micro-batch: F0 alone, then B0 alone (its own backward never runs beside its forward); the
    # stage holds that micro-batch between them (Megatron CI's deepseek_proxy_fsdp_ep2_fsdp2_ep_overlap:
    # global batch 32 = micro-batch 4 × dp 8)
    assert combined_steps("1f1b", 1, 1, 1) == [[]]
    assert combined_in_flight_vectors(1, 1, 1, "1f1b") == [[(1,)]]
    # two: F0, (F1, B0), B1 (Megatron CI's gpt3_mcore_te_tp2_pp1_te_a2a_ovlp_8experts_etp1_ep4: 32 = 4 × dp 4 × 2)
    assert combined_steps("1f1b", 1, 1, 2) == [[((1,), 0, 0)]]


@pytest.mark.parametrize("micro_batches", [1, 2, 3])
def test_without_pipelining_every_step_saves_in_the_simulated_schedule(micro_batches: int) -> None:
    # combined_1f1b_schedule_for_no_pipelining (d98e8a64): F0 alone, then (F_{i+1}, B_i) for i < m − 1 as one step
    # each, then B_{m−1} alone: m − 1 steps, each f + b − s; one micro-batch none. With f = 1, b = 2, s = 0.5 the
    # makespan is m·3 − (m − 1)·0.5: 3, 5.5, 8 (two micro-batches ran as 6 until December 2026, no step saved)
    timeline = simulate("1f1b", [[1.0]], [[2.0]], micro_batches, combined=[[[0.5]]])
    assert timeline.makespan == 3.0 * micro_batches - 0.5 * (micro_batches - 1)
    assert combined_pairs("1f1b", 1, 1, micro_batches) == [[(0, 0)] * (micro_batches - 1)]


def test_a_step_adds_the_forward_layer_by_layer_as_the_backward_frees():
    # TransformerLayerSchedulePlan.run: per pair, the backward MTP post-process, + forward pre-dispatch,
    # − backward experts, + forward experts, − backward pre-dispatch, + forward MTP post-process.
    plain = ChunkNodes(0, (LayerNodes(10, 3), LayerNodes(10, 3)), 0)
    tail = ChunkNodes(0, (LayerNodes(10, 3), LayerNodes(12, 3, 8)), 9)
    # forward of the TAIL's chunk beside a plain chunk's backward: pair 0 reaches 10 (+10, −3, +3, −10),
    # pair 1 reaches 12 and ends at 12 − 3 + 3 − 10 + 8 = 10; the post-process then adds 9: 19, the
    # forward's 45 less the backward's 26
    assert step_extra_bytes(tail, plain) == 19
    # the other way round the backward frees its post-process (9) and its MTP's (8) before the
    # forward adds anything: the running sum never rises above the start
    assert step_extra_bytes(plain, tail) == 0
    # a longer backward finishes its layers before the forward's remaining ones run: 10 at pair 0,
    # then −13 for the third backward layer, then +13 for the forward's own second layer: 10
    three = ChunkNodes(0, (LayerNodes(10, 3),) * 3, 0)
    one = ChunkNodes(0, (LayerNodes(10, 3),), 0)
    assert step_extra_bytes(three, three) == 10
    assert step_extra_bytes(one, three) == 10
    # the forward's pre-process (the embedding) comes first, the backward's last
    assert step_extra_bytes(ChunkNodes(4, (), 0), ChunkNodes(7, (), 0)) == 4


def test_the_node_that_keeps_each_tensor():
    # fine_grained_callables.py: attention, the pre-MLP norm, shared experts, router and permutation in
    # pre_dispatch; the experts with their tokens (and a dense layer's MLP, `_forward_mlp`) in mlp;
    # an MTP layer's final norm in mtp_post_process (common/fine_grained_callables.py
    # `submodule_mtp_postprocess_forward` runs `MultiTokenPredictionLayer._postprocess`); every head's
    # output layer and loss, the model's and each MTP layer's, in the chunk's post-process
    # (common/utils.py `PostProcessNode.forward_impl` → `GPTModel._postprocess` → `process_mtp_loss`)
    assert schedule_node("attention.core_output") == "pre_dispatch"
    assert schedule_node("moe.norm_input") == "pre_dispatch"
    assert schedule_node("moe.shared.gate_up_output") == "pre_dispatch"
    assert schedule_node("moe.detached_shared_output") == "pre_dispatch"
    assert schedule_node("moe.dispatched_tokens_remote") == "mlp"
    assert schedule_node("moe.dispatched_probs_detached") == "mlp"
    assert schedule_node("mtp0.moe.expert.gate_up_output") == "mlp"
    assert schedule_node("mlp.norm_input") == "mlp"
    assert schedule_node("mtp0.output.norm_input") == "mtp_post_process"
    assert schedule_node("mtp0.output.logits_softmax") == "post_process"
    assert schedule_node("mtp0.output.norm_output") == "post_process"
    assert schedule_node("mtp0.projection_input") == "pre_dispatch"
    assert schedule_node("output.logits_softmax") == "post_process"


def test_the_nodes_keep_what_they_detach():
    # fine_grained_callables.py: node.detach(shared_expert_output) and node.detach(dispatched_probs),
    # held by the node until the layer's backward. MOE with one shared expert of 16, h 32, s 64, b 1,
    # dp 2, ep 2, top 2: the shared output 64 · 32 · 2 = 4096 bytes; the probabilities of the rows the
    # rank's experts get, 64 · 2 = 128 rows of 2 bytes: 256. Without the flag neither.
    spec = {**MOE, "shared_experts": 1, "shared_expert_intermediate_size": 16}
    parallel = {"dp": 2, "ep": 2}
    combined = make_run(spec, parallel={**parallel, "overlap_moe_expert_parallel_comm": True}, framework="megatron")
    plain = make_run(spec, parallel=parallel, framework="megatron")
    layer = next(x for x in walk(combined) if x.node == BODY)
    terms = {t.op: t.bytes for t in model(combined).activation_terms(layer, LayerType.NOT_REC_LAYER)}
    assert terms["moe.detached_shared_output"] == 4096
    assert terms["moe.dispatched_probs_detached"] == 256
    others = {t.op for t in model(plain).activation_terms(layer, LayerType.NOT_REC_LAYER)}
    assert not others & {"moe.detached_shared_output", "moe.dispatched_probs_detached"}


def test_a_stage_is_charged_at_its_steps():
    # DENSE (h 64, s 64, b 1, vocabulary 1024) without pipelining, Megatron's rules. One micro-batch
    # keeps: the HEAD its token ids 64 · 8 = 512; each layer, in pre_dispatch, its norm input and
    # output, q, k, v and the attention output 6 · 8192 and the flash statistics 1024 (50176), in mlp
    # its norm input and output 2 · 8192, the gate-up output 32768 and the SwiGLU output 16384 (65536);
    # the TAIL, in the post-process, its norm input and output 2 · 8192, the fp32 logits
    # 64 · 1024 · 4 = 262144 and the labels 512 (279040). A step of F beside B: +512 (the next
    # micro-batch's token ids), −279040, then per layer +50176 −65536 +65536 −50176, then +279040 −512:
    # it peaks at 512 above the one micro-batch the step starts with.
    run = make_run(DENSE, training={"micro_batches": 4}, framework="megatron")
    memory, layer_walk = model(run), walk(run)
    plain = stage_peaks(memory, layer_walk, [[1]], device_bytes=80 * 2**30)
    steps = [[((1,), 0, 0)] * 3]
    combined = stage_peaks(memory, layer_walk, [[1]], device_bytes=80 * 2**30, steps=steps)
    one = 512 + 4 * (50176 + 65536) + 279040
    assert plain[0].activation_bytes == one
    assert combined[0].activation_bytes == one + 512


def test_megatron_runs_the_combined_schedule_only_interleaved_or_without_pipelining():
    # transformer_config.py: with PP > 1 the virtual pipeline size must be set
    for schedule, stages, chunks in (("1f1b", 2, 1), ("gpipe", 2, 1), ("dualpipev", 2, 2)):
        with pytest.raises(ValueError, match="combined 1F1B"):
            combined_steps(schedule, stages, chunks, 8)


def _deepseek(tmp_path: Path, layout: str):
    """configs/deepseek-v3.yaml on *layout* under --overlap-moe-expert-parallel-comm."""
    text = (CONFIGS / "deepseek-v3.yaml").read_text()
    text = text.replace("config: hf/deepseek-v3.json", f"config: {CONFIGS / 'hf' / 'deepseek-v3.json'}")
    text = text.replace("pp: 16, vpp: 2,", "pp: 16, overlap_moe_expert_parallel_comm: true,")
    text = text.replace("layout: 'Et|(tt|)*29,t|tmL'", f"layout: '{layout}'")
    path = tmp_path / "ds.yaml"
    path.write_text(text)
    run = load_run(path)
    return MemoryModel(run), walk(run)


@pytest.mark.parametrize(
    ("layout", "mtp_cell", "loss_cell"),
    [
        ("Et*3|(tt|)*29,m|L", (1, 14), (1, 15)),  # standalone: the MTP layer on rank 14, the loss on 15
        ("Et*3|(tt|)*29,|mL", (1, 15), (1, 15)),  # fused, in a chunk of no decoder layer
    ],
)
def test_the_mtp_heads_run_in_the_loss_chunks_post_process(tmp_path: Path, layout, mtp_cell, loss_cell):
    """DeepSeek-V3 (h 7168, vocabulary 129,280, T = 4096 tokens a micro-batch, bf16, one MTP layer). The
    MTP layer's node keeps, in its mtp_post_process, only its final norm's input T·h·2 = 58,720,256 B;
    the loss chunk's post-process every head's output-layer input 2·T·h·2 = 117,440,512, fp32 softmax
    2·T·V·4 = 4,236,247,040 and int64 labels 2·T·8 = 65,536 -> 4,353,753,088 (the fused chunk besides
    keeps the MTP layer's hidden-state norm input in its pre-dispatch node). Standalone, the loss chunk
    runs no layer: before, its MTP head was a layer paired with the other micro-batch's."""
    memory, placed = _deepseek(tmp_path, layout)
    mtp = _chunk_nodes(memory, placed, lambda layer: "NONE", mtp_cell[1], mtp_cell[0])
    assert mtp.layers[-1].mtp_post_process == 58_720_256
    loss = _chunk_nodes(memory, placed, lambda layer: "NONE", loss_cell[1], loss_cell[0])
    assert loss.post_process == 4_353_753_088
    if mtp_cell != loss_cell:
        assert loss.layers == () and mtp.post_process == 0


def test_a_cell_of_the_last_decoder_layer_and_the_mtp_layer_holds_both_tail_parts(tmp_path: Path):
    """'Et*3|(tt|)*28,t|tm|L': rank 14's chunk 1 holds the last decoder layer, the model's final norm
    (its input T·h·2 = 58,720,256 B, as post-process) and the MTP layer (its own final norm's input,
    58,720,256, as its mtp_post_process): neither part is lost."""
    memory, placed = _deepseek(tmp_path, "Et*3|(tt|)*28,t|tm|L")
    cell = _chunk_nodes(memory, placed, lambda layer: "NONE", 14, 1)
    assert len(cell.layers) == 2 and cell.layers[-1].mtp_post_process == 58_720_256
    assert cell.post_process == 58_720_256


def test_an_mtp_layer_pairs_like_a_decoder_layer_in_the_time_model():
    """Megatron-Core's combined schedule builds a layer plan for each MTP layer after the decoder's
    (model_chunk_schedule_plan.py `_build_layer_schedule_plan(model.mtp)`); its pre-dispatch node wraps
    the MTP's embedding, norms and projection around the layer's pre-dispatch computation
    (common/fine_grained_callables.py `build_mtp_layer_callables`), the rest is its MoE layer's. So the
    MTP layer's parts are a decoder MoE layer's (the same kind: the model's last layer) with its
    embedding lookup, norms and projection added to the pre-dispatch part, its final norm and head
    left out (they run alone). Layout 'Et|t|t|t|m|L' (pp 2, three virtual stages): the MTP layer alone
    in rank 0's chunk 2, whose steps beside the backward of rank 0's other chunks now save time."""
    run = _run(MOE_MTP, layout="Et|t|t|t|m|L", overlap_moe_expert_parallel_comm=True, dp=2, ep=2)
    times, memory = TimeModel(run), MemoryModel(run)
    placed = walk(run)
    mtp = next(layer for layer in placed if layer.node == TAIL and layer.kind.part == "mtp")
    assert (mtp.chunk, mtp.stage) == (2, 0)
    decoder = [layer for layer in placed if layer.node == BODY][-1]
    (cut,) = mtp_segments(times, mtp, LayerType.OUTPUT_LAYER)
    body = layer_segments(times, decoder, LayerType.NOT_REC_LAYER)
    prices = times.op_prices(mtp)
    wrapped = sum(prices[name].forward_ms for name in ("mtp0.embedding.lookup", "mtp0.norms", "mtp0.projection"))
    assert cut.pre_forward == pytest.approx(body.pre_forward + wrapped / 1e3, rel=1e-9)
    assert (cut.dispatch_forward, cut.mlp_forward, cut.combine_forward) == pytest.approx(
        (body.dispatch_forward, body.mlp_forward, body.combine_forward), rel=1e-9
    )
    head = sum(prices[name].forward_ms for name in prices if name.startswith(("output.", "mtp0.output.")))
    whole_forward = sum(price.forward_ms for price in prices.values())
    assert cut.forward_alone == pytest.approx((whole_forward - head) / 1e3, rel=1e-9)
    # the time model's steps: the MTP chunk's forward beside chunk 1's backward on rank 0 saves time
    states = {layer: _state(layer, {x: "NONE" for x in placed if x.node == BODY}, memory) for layer in placed}
    per_cell: dict = {}
    for layer in placed:
        per_cell.setdefault((layer.chunk, layer.stage), []).append((layer, 0.0, 0.0))
    saved = _combined_savings(run, times, per_cell, states, dict.fromkeys(placed, HostWaits()))  # no host waits
    assert saved[2][1][0] > 0


def _mixtral_combined(tmp_path: Path, reserved_mb: int) -> Path:
    """configs/mixtral-8x7b.yaml at pp 4 × vpp 2 (the combined schedule needs virtual stages) under
    --overlap-moe-expert-parallel-comm, *reserved_mb* of the H100's memory reserved."""
    text = (CONFIGS / "mixtral-8x7b.yaml").read_text()
    text = text.replace("config: hf/mixtral-8x7b.json", f"config: {CONFIGS / 'hf' / 'mixtral-8x7b.json'}")
    text = text.replace("pp: 4,", "pp: 4, vpp: 2, overlap_moe_expert_parallel_comm: true,")
    text = text.replace("schedule: 1f1b", "schedule: interleaved")
    text = text.replace("reserved_mb: 4000", f"reserved_mb: {reserved_mb}")
    path = tmp_path / "mixtral-combined.yaml"
    path.write_text(text)
    return path


def test_no_plan_fully_recomputes_a_layer_under_the_combined_schedule(tmp_path: Path, capsys) -> None:
    """transformer_config.py `TransformerConfig.__post_init__` (d98e8a64) asserts recompute_granularity != 'full'
    under --overlap-moe-expert-parallel-comm: the balancer offers no FULL (it printed a plan of FULL layers and
    `--recompute-granularity full --recompute-method block --recompute-num-layers 2` at 25,559 MB), and
    `ppb check` refuses a plan that fully recomputes any layer, naming the flag or the yaml key."""
    path = _mixtral_combined(tmp_path, 52000)
    run = load_run(path)
    assert "FULL" not in run_problem(run, describe_run(run)).layers.options
    assert "FULL" in run_problem(run, describe_run(run), runnable=False).layers.options  # a user's plan: priced
    flags = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    assert main(["check", str(path), "--plan", flags, "-q", "--no-optimum"]) == 2
    assert "--recompute-granularity: full recomputation, which Megatron-Core refuses" in capsys.readouterr().err
    yaml_plan = tmp_path / "plan.yaml"
    yaml_plan.write_text("offset: [[0, 0, 0, 0], [0, 0, 0, 0]]\nrecompute: [[1, 0, 0, 0], [0, 0, 0, 0]]\n")
    assert main(["check", str(path), "--plan", str(yaml_plan), "-q", "--no-optimum"]) == 2
    assert f"{yaml_plan}: recompute: full recomputation" in capsys.readouterr().err
    # at 25,559 MB: selective recompute on most layers, none fully recomputed
    assert main(["balance", str(_mixtral_combined(tmp_path, 56000)), "-q", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["input"]["memory_mb"] == 25559
    assert all(not stage["options"].get("FULL") for stage in plan["stages"])
    assert any(stage["options"].get("SLCT") for stage in plan["stages"])
    assert "full" not in " ".join(plan["megatron"].get("flags") or [])


@pytest.mark.parametrize(
    ("timing", "training", "words"),
    [
        # transformer_config.py __post_init__ (d98e8a64): CUDA graph scope on moe and mlp is not supported with it
        ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["moe"]}, {}, "TE's CUDA graphs on moe"),
        ({"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["attn", "mlp"]}, {}, "moe or mlp"),
        # ...and with ncclep it does not support offloading expert_fc1
        ({"moe_dispatcher": "ncclep"}, {"offload_modules": ["expert_fc1"]}, "ncclep dispatcher and expert_fc1"),
    ],
)
def test_the_combined_schedule_is_refused_where_megatron_core_asserts(tmp_path, capsys, timing, training, words):
    raw = yaml.safe_load((CONFIGS / "mixtral-8x7b.yaml").read_text())
    raw["models"][0]["config"] = str(CONFIGS / raw["models"][0]["config"])
    raw["parallel"].update(vpp=2, schedule="interleaved", overlap_moe_expert_parallel_comm=True)
    raw["training"].update(recompute={"granularity": "selective"}, **training)
    raw["timing"] = timing
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: parallel.overlap_moe_expert_parallel_comm: is refused with" in err
    assert words in err
    raw["timing"]["cuda_graph_modules"] = ["attn"] if "cuda_graph_modules" in timing else None
    raw["timing"] = {key: value for key, value in raw["timing"].items() if value is not None}
    raw["training"].pop("offload_modules", None)
    path.write_text(yaml.safe_dump(raw))
    assert main(["estimate", str(path), "--no-times"]) == 0  # the same run without the setting Megatron refuses
