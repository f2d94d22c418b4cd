"""MemoryModel as a MemorySource: options, memo per distinct kind, working sets, stage peaks by hand."""

from __future__ import annotations

from small_models import SMALL_MLA
from test_memory_runs import DENSE, body, layers, make_run, model

from ppb_core.config.run import load_run_config
from ppb_core.memory import ActivationFormulas, MemoryModel, run_working_set_bytes, stage_peaks
from ppb_core.model.switches import KEEP_ALL, LayerType
from ppb_core.model.walk import walk
from ppb_core.payload.sources import MemorySource

NOT, SEL, FULL = LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER
MB = 2**20


def test_implements_memory_source():
    run = make_run(DENSE)
    memory: MemorySource = MemoryModel(run)
    assert memory.census_terms(body(run), NOT, None) is None
    assert memory.static_bytes(body(run)) > 0


def test_options_and_configured_switches():
    run = make_run(DENSE, training={"seq_length": 64, "recompute": {"softmax": 0, "ffAct": 0}})
    memory, layer = model(run), body(run)
    # NONE 115712 (test_memory_activations); SLCT drops the LSE (1024) and activation output (16384);
    # COMM recomputes the gathers alone (none here); FULL keeps the input (8192)
    assert memory.option_activation_bytes(layer) == {
        "NONE": 115712,
        "SLCT": 98304,
        "COMM": 115712,
        "BOTH": 98304,
        "FULL": 8192,
    }
    # switches None on SEL_REC_LAYER: the model's configured ones
    assert memory.activation_bytes(layer, SEL, None) == 98304
    assert memory.option_state(layer, "BOTH") == (SEL, dict(KEEP_ALL, softmax=0, ffAct=0, gather=0))
    assert memory.option_state(layers(run)["HEAD"], "SLCT") == (LayerType.EMBEDDING_LAYER, None)


def test_working_extra_by_state():
    # DENSE, s 64: the largest gradient is that of gate/up, 64·256 elements · 2 bytes = 32768.
    run = make_run(DENSE, training={"seq_length": 64})
    memory, layer = model(run), body(run)
    assert memory.working_extra_bytes(layer, NOT, None, 2, True) == 32768
    # full recompute rebuilds 115712 − 8192 = 107520 in the backward
    assert memory.working_extra_bytes(layer, FULL, None, 2, True) == 107520 + 32768
    # ... and where the stage counts none of what the layer keeps (8192), holds that too
    assert memory.working_extra_bytes(layer, FULL, None, 1, False) == 107520 + 32768 + 8192
    # selective softmax 0, ffAct 0 rebuilds 1024 + 16384
    assert memory.working_extra_bytes(layer, SEL, dict(KEEP_ALL, softmax=0, ffAct=0), 2, True) == 17408 + 32768


class _Counting(ActivationFormulas):
    def __init__(self) -> None:
        self.calls = 0

    def terms(self, kind, setup):
        self.calls += 1
        return super().terms(kind, setup)


def test_identical_layers_are_evaluated_once():
    # DeepSeek-V3's 61 layers are of two body kinds; every layer asked three states, twice over
    run = load_run_config("configs/deepseek-v3.yaml")
    counting = _Counting()
    memory = MemoryModel(run, activations={"llm": counting})
    for _ in range(2):
        for layer in walk(run):
            if layer.node == "BODY":
                for state in (NOT, SEL):
                    memory.dynamic_bytes(layer, state, None, 3)
    # one call per (kind, state): 2 kinds × (NOT, SEL)
    assert counting.calls == 4


def test_census_seam_replaces_one_model_pricer():
    class Halved(ActivationFormulas):
        def terms(self, kind, setup):
            return tuple(
                t.__class__(t.op, t.switch, t.elements / 2, t.element_bytes, t.gradient)
                for t in super().terms(kind, setup)
            )

    run = make_run(DENSE, training={"seq_length": 64})
    assert MemoryModel(run, activations={"m": Halved()}).activation_bytes(body(run), NOT) == 115712 / 2


WORKSPACES = 2 * 32 * 2**20 + 32 * 2**20 + 1024
# Transformer Engine's cached dummy weight gradients under gradient accumulation fusion (Megatron's default;
# frameworks/dummy_wgrad.py): one per distinct weight shape, bf16. DENSE at tp 1: QKV (4 + 2·4 heads of 16 = 192)
# × 64 = 12288, the projection 64 × 64 = 4096, fc1 (2·128) × 64 = 16384, fc2 64 × 128 = 8192: 40960 elements,
# 81920 bytes on a stage of body layers; with the output layer 1024 × 64 = 65536 more, 212992.
DUMMIES_BODY, DUMMIES_TAIL = 81920, 212992


def test_stage_peaks_by_hand():
    # DENSE (untied), 4 layers on 2 stages, tp 1, ZeRO-0, s 64, flash; hand-stated in-flight 2 and 1.
    # static: HEAD 1024·64·18 = 1179648, body 41088·18 = 739584, TAIL (1024·64 + 64)·18 = 1180800.
    # activations: HEAD 512, body 115712, TAIL 279040. No buffers (no TP, no DP reduce bucket).
    # working: a body's 32768; the TAIL's largest gradient is its logits', 64·1024·2 = 131072.
    # Every stage also holds the GEMM workspaces on the generic device (compute capability 9.0):
    # PyTorch's two cuBLAS handles' 2·32 MiB and Transformer Engine's 32 MiB + 1 KiB = 100664320.
    run = make_run(
        DENSE,
        parallel={"pp": 2, "zero": 0},
        training={"seq_length": 64, "micro_batches": 4},
        device={"memory_mb": 1000, "reserved_mb": 100},
    )
    memory = model(run)
    first, last = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=1000 * MB, reserved_bytes=100 * MB)
    assert (first.body_layers, first.in_flight, last.in_flight) == (2, (2,), (1,))
    assert first.static_bytes == 1179648 + 2 * 739584 + WORKSPACES + DUMMIES_BODY
    assert first.activation_bytes == 2 * (512 + 2 * 115712)
    # the chunk's cached rotary frequencies (Megatron's GPTModel RotaryEmbedding), 64 · 16 · 4 = 4096
    assert first.buffer_bytes == 4096
    assert first.working_bytes == 32768
    assert first.peak_bytes == (
        1179648 + 2 * 739584 + WORKSPACES + DUMMIES_BODY + 2 * (512 + 2 * 115712) + 4096 + 32768 + 100 * MB
    )
    assert last.static_bytes == 2 * 739584 + 1180800 + WORKSPACES + DUMMIES_TAIL
    assert last.activation_bytes == 2 * 115712 + 279040
    # the TAIL's backward holds its logits' 16-bit gradient, 64·1024·2, once the loss's backward freed the
    # fp32 softmax, 64·1024·4, and the labels, 64·8 (cross_entropy.py `_VocabParallelCrossEntropy`); the
    # bodies' 32768 forms after the TAIL's backward freed its 279040: nothing beyond what is kept, and the
    # loss's moment (the softmax and its 16-bit cast, + 131072, beside the data loader's causal mask that
    # get_batch hands the model, b·s·s bools = 1·64·64 = 4096: gpt_dataset.py, Megatron-LM d98e8a64) sets it
    assert last.working_bytes == 0
    assert last.moment == "loss" and last.peak_bytes == last.kept_bytes + 131072 + 4096 + 100 * MB
    assert first.fits and last.fits
    # every body layer fully recomputed: 8192 kept, working 107520 + 32768
    full = stage_peaks(memory, walk(run), [[2, 1]], 1000 * MB, 100 * MB, option_of=lambda layer: "FULL")
    assert full[0].activation_bytes == 2 * (512 + 2 * 8192)
    assert full[0].working_bytes == 140288
    tight = stage_peaks(memory, walk(run), [[2, 1]], device_bytes=100 * MB, reserved_bytes=100 * MB)
    assert not tight[0].fits
    # The constant the balancer charges every stage for a backward: the largest working set of any
    # layer under any option, here a fully recomputed body's 140288 (above the TAIL's 131072).
    assert run_working_set_bytes(run, memory) == 140288


def test_stage_peak_is_the_largest_over_the_schedules_vectors():
    # DENSE, 4 layers, pp 2, vpp 2: stage 0 holds chunk 0 (HEAD + one body) and chunk 1 (one body).
    # Per micro-batch: HEAD 512, a body 115712 (NONE) or 8192 (FULL). Hand-stated candidate vectors
    # (8, 3) and (7, 4) for stage 0 (the interleaved order reaches both, docs/balance.md).
    run = make_run(
        DENSE,
        parallel={"pp": 2, "vpp": 2, "zero": 0, "schedule": "interleaved"},
        training={"seq_length": 64, "micro_batches": 4},
        device={"memory_mb": 1000, "reserved_mb": 100},
    )
    memory = model(run)
    vectors = [[(8, 3), (7, 4)], [(1, 1)]]
    in_flight = [[8, 1], [3, 1]]

    def peak_of(chunk_options):
        peaks = stage_peaks(
            memory,
            walk(run),
            in_flight,
            1000 * MB,
            100 * MB,
            option_of=lambda layer: chunk_options[layer.chunk],
            vectors=vectors,
        )
        return peaks[0]

    # chunk 0 keeps more: (8, 3) gives 8·(512 + 115712) + 3·8192 = 954368 > 7·116224 + 4·8192 = 846336
    lean_late = peak_of({0: "NONE", 1: "FULL"})
    assert (lean_late.in_flight, lean_late.activation_bytes) == ((8, 3), 954368)
    # chunk 1 keeps more: (7, 4) gives 7·(512 + 8192) + 4·115712 = 523776 > 8·8704 + 3·115712 = 416768
    lean_early = peak_of({0: "FULL", 1: "NONE"})
    assert (lean_early.in_flight, lean_early.activation_bytes) == ((7, 4), 523776)


# Additivity: every tensor sits under one switch, so what a set of switches drops is the sum of what
# each drops alone; the switch profiles (9 measurements for 128 settings) rest on it.
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ppb_core.model.switches import SWITCHES  # noqa: E402

_ADDITIVE_RUNS = {
    "eager-sp-dropout": (
        {**DENSE, "qk_norm": True},
        {"tp": 2, "sequence_parallel": True, "cp": 2},
        {"seq_length": 64, "flash_attention": False, "dropout": 0.1},
    ),
    "mla-moe-ep": (
        {
            **SMALL_MLA,
            "num_experts": 4,
            "experts_per_token": 2,
            "moe_intermediate_size": 16,
            "shared_experts": 1,
        },
        {"tp": 2, "sequence_parallel": True, "dp": 4, "ep": 2, "etp": 2},
        {"seq_length": 32},
    ),
}


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(_ADDITIVE_RUNS)), dropped=st.sets(st.sampled_from(SWITCHES)))
def test_switches_add_up(name, dropped):
    spec, parallel, training = _ADDITIVE_RUNS[name]
    run = make_run(spec, parallel=parallel, training=training)
    memory = model(run)
    layer = body(run)  # dense / MoE with MLA

    def kept(names) -> tuple[float, float]:
        state = memory.state_memory(layer, SEL, {**KEEP_ALL, **dict.fromkeys(names, 0)})
        return state.activation_bytes, state.buffers.kept_bytes()

    plain = kept(())
    together = kept(dropped)
    for part in range(2):
        alone = sum(plain[part] - kept((name,))[part] for name in dropped)
        assert plain[part] - together[part] == alone
