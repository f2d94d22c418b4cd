"""What the stage holding the loss still holds while the layers under the TAIL run their backward.

Worked by hand on test_memory_runs' DENSE (h 64, vocabulary 1024, s 64, bf16, ZeRO-0): a body keeps
115712 recomputing nothing and 8192 fully recomputed, its largest gradient 32768; the TAIL keeps its
final norm's input and output (64·64·2 each), the loss's fp32 softmax or log-probabilities
(64·1024·4 = 262144) and the labels (64·8): 279040. Sources: Megatron-LM d98e8a64
(tensor_parallel/cross_entropy.py `_VocabParallelCrossEntropy`, pipeline_parallel/schedules.py),
torchtitan v0.2.2 (train.py `forward_backward_step`) on torch 2.13 (distributed/pipelining/stage.py
`PipelineStage.backward_one_chunk`), MindFormers' SAPP conventions (docs/frameworks.md).
"""

from __future__ import annotations

from test_memory_runs import DENSE, make_run, model

from ppb_core.memory import stage_peaks
from ppb_core.model.walk import walk

TAIL_KEPT = 2 * 64 * 64 * 2 + 64 * 1024 * 4 + 64 * 8
# Megatron's uniform method over all 4 layers: a backward rebuilds 4 layers from the group's input
UNIFORM_4 = {"recompute": {"granularity": "full", "method": "uniform", "num_layers": 4}}
REBUILT_4 = 4 * 115712 - 8192 + 32768


def _peaks(run, in_flight):
    return stage_peaks(model(run), walk(run), in_flight, 80 * 2**30)


def test_megatron_blocks_run_their_backward_after_the_tail_is_freed():
    # The loss's backward releases the softmax it saved, the output layer's and the final norm's backwards
    # their saved inputs; the schedule holds only the loss (forward_step's output). The group's backward,
    # 487424 beyond what it keeps, stands on what is kept less the TAIL's 279040 (the TAIL's own: its
    # logits' gradient 64·1024·2 without the softmax and labels, below 0).
    assert TAIL_KEPT == 279040
    run = make_run(DENSE, parallel={"zero": 0}, training=UNIFORM_4)
    (peak,) = _peaks(run, [[1]])
    assert peak.working_bytes == REBUILT_4 - TAIL_KEPT == 208384
    # the loss's moment: the softmax as the gradient and its 16-bit cast, 64·1024·2 on what is kept, and in its
    # forward the data loader's causal mask, 64·64 bool (tests/test_dataloader_mask.py)
    assert peak.loss_bytes == 131072 + 4096
    assert peak.moment == "backward"


def test_mindformers_counts_the_blocks_backward_on_the_tail():
    # SAPP's payload sums a stage's layers: a fully recomputed body's backward (115712 − 8192 + 32768)
    # on top of everything kept, the TAIL included; the TAIL's largest gradient, its logits' 131072,
    # is below it.
    run = make_run(DENSE, parallel={"zero": 0}, training={"recompute": "full"}, framework="mindformers")
    (peak,) = _peaks(run, [[1]])
    assert peak.working_bytes == 115712 - 8192 + 32768


def test_megatron_deferred_output_layer_keeps_its_input_and_the_logits_gradient():
    # --defer-embedding-wgrad-compute with no limit: the last micro-batch is deferred too, so its
    # output-layer input (64·64·2) stays in embedding_activation_buffer and its 16-bit logits' gradient
    # (64·1024·2) in grad_output_buffer: the blocks' backward stands on 8192 + 131072 of it
    # (and on min(0 → 4, 4 − 1) = 3 earlier micro-batches' of both, the deferred buffers).
    uniform_2 = {"recompute": {"granularity": "full", "method": "uniform", "num_layers": 2}}
    deferred = {**uniform_2, "micro_batches": 4, "defer_embedding_wgrad_compute": True}
    run = make_run(DENSE, parallel={"zero": 0, "pp": 2}, training=deferred)
    last = _peaks(run, [[2, 1]])[1]
    # the last stage's two layers are one uniform group of 2: a backward rebuilds 2·115712 − 8192 + 32768
    assert last.working_bytes == 2 * 115712 - 8192 + 32768 - (TAIL_KEPT - 8192 - 131072) == 116224
    assert last.buffer_bytes - 4096 == 3 * (131072 + 8192)  # the chunk's rotary cache, 4096, beside
    # a limit of 2 below the 4 micro-batches: the last one is not deferred, all of the TAIL is freed
    limited = make_run(DENSE, parallel={"zero": 0, "pp": 2}, training={**deferred, "wgrad_deferral_limit": 2})
    last = _peaks(limited, [[2, 1]])[1]
    assert last.working_bytes == max(0, 2 * 115712 - 8192 + 32768 - TAIL_KEPT) == 0


def test_torchtitan_under_pp_keeps_the_stage_output_through_the_backward():
    # Without PP train.py deletes the logits before loss.backward(); under PP backward_one_chunk holds the
    # stage's output (the 16-bit logits, 64·256·2 = 32768 at a 256 vocabulary) from fwd_cache through the
    # stage's whole backward. TAIL kept at v 256: 8192 + 64·256·4 + 512 = 74240. A full-AC block rebuilds
    # what it keeps without AC and holds its largest gradient: the same block on both runs, so the last
    # stage's working set is 32768 higher under PP.
    spec = {**DENSE, "vocab_size": 256}
    alone = make_run(spec, framework="torchtitan", parallel={"zero": 0}, training={"recompute": {"mode": "full"}})
    piped = make_run(
        spec,
        framework="torchtitan",
        parallel={"zero": 0, "pp": 2},
        training={"recompute": {"mode": "full"}, "micro_batches": 4},
    )
    (one,) = _peaks(alone, [[1]])
    last = _peaks(piped, [[2, 1]])[1]
    assert one.working_bytes > 0
    assert last.working_bytes - one.working_bytes == 64 * 256 * 2


def test_torchtitan_compiled_output_layer_backward_under_pp_keeps_the_logits():
    # The compiled loss saves the bf16 logits (64·1024·2 = 131072) and two fp32 statistics a token (64·2·4
    # = 512). Once its backward ran, the output layer's backward holds the logits' 16-bit gradient, 131072:
    # without PP on neither (autograd released them; train.py deleted the logits), 131072 − 131072 − 512
    # below 0; under PP on the logits still, the stage output backward_one_chunk holds: 131072 − 512.
    def tail_working(parallel, training):
        run = make_run(
            DENSE,
            framework="torchtitan",
            parallel={"zero": 0, **parallel},
            training=training,
            timing={"torch_compile": True},
        )
        memory = model(run)
        tail = next(layer for layer in walk(run) if layer.node == "TAIL")
        return memory.working_extra_bytes(tail, *memory.option_state(tail, "NONE"), 2, on_saved=True)

    assert tail_working({}, {}) == 0
    assert tail_working({"pp": 2}, {"micro_batches": 4}) == 131072 - 512


def test_an_interleaved_chunk_without_the_tail_runs_its_backward_on_it():
    # pp 2, vpp 2: stage 1 holds layer 1 (chunk 0) and layer 3 with the TAIL (chunk 1), stated 2 and 1 in
    # flight. Layer 3's backward follows the loss's of its micro-batch: its largest gradient, 32768, stands
    # on what is kept less the TAIL's 279040 (below 0). Layer 1's runs at other times, with the TAIL's
    # micro-batch in flight: 32768 on what is kept. Without the interleaving the stage's two layers share
    # the TAIL's chunk: nothing on what is kept.
    interleaved = make_run(
        DENSE,
        parallel={"zero": 0, "pp": 2, "vpp": 2, "schedule": "interleaved"},
        training={"micro_batches": 4},
    )
    last = _peaks(interleaved, [[2, 2], [2, 1]])[1]
    assert last.working_bytes == 32768
    plain = make_run(DENSE, parallel={"zero": 0, "pp": 2}, training={"micro_batches": 4})
    assert _peaks(plain, [[2, 1]])[1].working_bytes == 0
