"""Transformer Engine's CPU offloading as Megatron-LM runs it (`--cpu-offloading-num-layers`,
`training.cpu_offloading_num_layers`): what stays on the device (memory/frameworks/te_offload.py) and what
the compute waits for (timing/offload.py `cpu_offload_waits`), worked by hand from TE cpu_offload.py
(v2.10 on, d0067d0d: `DefaultOffloadSynchronizer`, `OffloadableLayerState`) and Megatron-LM d98e8a64
(transformer_block.py, transformer_config.py, arguments.py)."""

from __future__ import annotations

import pytest
from test_memory_offload import BASE
from test_memory_runs import DENSE, body, make_run, model

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.errors import InputError
from ppb_core.memory.frameworks.te_offload import held_bytes, offloaded_bytes
from ppb_core.memory.model import run_stage_peaks
from ppb_core.model.switches import LayerType
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.offload import cpu_offload_waits
from ppb_core.timing.pricer import TimeModel

NOT = LayerType.NOT_REC_LAYER


def test_the_device_holds_a_window_of_layers():
    # L 4 layers of 4 (3 of it offloadable), N 2: after layer j's forward the device holds layers
    # j - L + N + 1 ... j whole and those below only their 1: j = 1: 8; j = 2: 12 - 3 = 9; j = 3: 16 - 6 = 10
    assert held_bytes([4, 4, 4, 4], [3, 3, 3, 3], 2) == 10
    # a large first layer: at j = 1 layer 0 is still whole (released at layer 2's forward): 11, then
    # 12 - 9 = 3 and 13 - 9.5 = 3.5; nothing offloaded: all 13
    assert held_bytes([10, 1, 1, 1], [9, 0.5, 0.5, 0.5], 2) == 11
    assert held_bytes([10, 1, 1, 1], [9, 0.5, 0.5, 0.5], 0) == 13


def test_what_leaves_the_device_and_the_peak():
    # DENSE at s 4096 (tp 1, bf16): every saved tensor but the softmax statistics (4096 tokens · 4 heads =
    # 16384 elements, fp32) has at least 256·1024 elements (OffloadableLayerState._check_if_offload):
    # 8 of 4096·64 (norms' inputs and outputs, q, k, v, the core's output) = 8 · 524288 B, gate_up 4096·256·2
    # = 2097152, the activation 4096·128·2 = 1048576: 7340032 of the layer's 7405568 bytes.
    run = make_run(DENSE, training={"seq_length": 4096}, framework="megatron")
    held = model(run).state_memory(body(run), NOT)
    assert held.activation_bytes == 7405568
    assert offloaded_bytes(held) == 7340032
    # the peak (at the loss, the forward's end) drops by the N offloaded layers' 7340032 each
    plain = run_stage_peaks(run)[0].peak_bytes
    for layers in (1, 2, 3):
        offloaded = make_run(DENSE, training={"seq_length": 4096, "cpu_offloading_num_layers": layers})
        assert run_stage_peaks(offloaded)[0].peak_bytes == pytest.approx(plain - layers * 7340032, abs=1e-6)


def test_the_waits_by_hand():
    # L 4, N 2, forward 1 s and backward 2 s a layer, copies 5 s (layers 0, 1). One stream, in order.
    # Forward: layer 0 ends at 1, its copy [1, 6]; layer 1 ends at 2, its copy [6, 11]; layer 2 waits for
    # layer 0's copy (6 - 2 = 4), ends at 7; layer 3 for layer 1's (11 - 7 = 4), ends at 12: 8.
    # Backward: layer 3 [12, 14]; before layer 2 layer 1's reload [14, 19]; layer 2 [14, 16]; before layer 1
    # layer 0's reload [19, 24]; layer 1 waits 19 - 16 = 3, runs [19, 21]; layer 0 waits 24 - 21 = 3: 6.
    assert cpu_offload_waits([1.0] * 4, [2.0] * 4, [5.0, 5.0, 0.0, 0.0], 2) == (8.0, 6.0)
    # copies faster than a layer: nothing waits
    assert cpu_offload_waits([1.0] * 4, [2.0] * 4, [0.5, 0.5, 0.0, 0.0], 2) == (0.0, 0.0)


def test_the_iteration_waits_for_the_copies():
    # DENSE at s 4096, 2 micro-batches, pp 1, N 3 of L 4 layers, c = 7340032 B / 55.43 GB/s. Layer i's
    # copy is waited for before layer 1 + i's forward and its reload, queued just before its own backward
    # (L - 1 - N + i = i), before that backward: c each, whatever the layers' times (the copies queue
    # one behind another from each layer's end): forward 3c, backward 3c, 2 micro-batches one after
    # another: 12c more.
    c = 7340032 / 55.43e9
    training = {"seq_length": 4096, "micro_batches": 2}
    plain = run_iteration(make_run(DENSE, training=training)).seconds
    three = make_run(DENSE, training={**training, "cpu_offloading_num_layers": 3})
    assert run_iteration(three).seconds - plain == pytest.approx(12 * c, rel=1e-9)
    # N 1: layer 0's copy has layers 1 and 2's forwards to run behind, its reload layers 2 and 1's backwards,
    # each longer than c here: nothing waits
    forward_ms, backward_ms = TimeModel(three).layer_times(body(three), NOT)
    assert min(forward_ms, backward_ms) / 1e3 > c
    one = make_run(DENSE, training={**training, "cpu_offloading_num_layers": 1})
    assert run_iteration(one).seconds == pytest.approx(plain, rel=1e-12)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"training": {"cpu_offloading_num_layers": 4}}, "below the model's 4 layers"),
        ({"parallel": {"pp": 2}}, "pipeline parallelism"),
        ({"training": {"recompute": {"softmax": 0}}}, "recomputation"),
        ({"training": {"offload_modules": ["core_attn"]}}, "fine-grained"),
        ({"framework": "torchtitan"}, "framework megatron"),
    ],
)
def test_megatron_s_refusals(extra, said):
    # transformer_config.py __post_init__ (d98e8a64): N < num_layers, no pipeline, no recompute, not beside
    # fine-grained offloading; TE's CPU offloading is Megatron-LM's flag
    training = {"cpu_offloading_num_layers": 2, **extra.get("training", {})}
    with pytest.raises(InputError, match=said):
        make_run(
            DENSE,
            parallel=extra.get("parallel"),
            training=training,
            framework=extra.get("framework"),
        )


def test_the_importer_reads_the_flag():
    imported = import_megatron(f"{BASE} --cpu-offloading-num-layers 2", 8, "h100-80gb")
    assert imported.raw["training"]["cpu_offloading_num_layers"] == 2
    assert not imported.notes
    run_config_of(imported, "x")
    # TE's older handler under NVTE_CPU_OFFLOAD_V1=1 is said, not modelled
    v1 = import_megatron(f"export NVTE_CPU_OFFLOAD_V1=1\n{BASE} --cpu-offloading-num-layers 2", 8, "h100-80gb")
    assert [note.split(":")[0] for note in v1.notes] == ["NVTE_CPU_OFFLOAD_V1=1"]
    # Megatron-Core's own check, said by the flag
    with pytest.raises(InputError, match="--cpu-offloading-num-layers"):
        run_config_of(import_megatron(f"{BASE} --cpu-offloading-num-layers 4", 8, "h100-80gb"), "x")
