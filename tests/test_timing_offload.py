"""The time of Megatron-Core's fine-grained activation offloading (ppb_core/timing/offload.py): the
backward's waits for the host-to-device reloads, by hand, with the PCIe rates the device catalog cites
(stas00/ml-engineering network/README.md at 744d01e: nvbandwidth on 8x H200, each on its own Gen5 x16
link, 55.43 GB/s host-to-device; NVIDIA/nvbandwidth issue #53: 24.81 GB/s on 8x A100-SXM4-80GB)."""

from __future__ import annotations

import pytest
from test_memory_offload import ATTENTION, _offload
from test_memory_runs import DENSE, body, model

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import TAIL, walk
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.offload import reload_seconds, reload_wait_s
from ppb_core.timing.pricer import TimeModel

NOT = LayerType.NOT_REC_LAYER
GIB = 1024**3


def test_catalog_links():
    # H100 SXM5 and H200 (PCIe Gen5 x16): the measured 55.43 GB/s; A100 SXM4 (Gen4 x16): nvbandwidth's
    # 24.81 GB/s on 8x A100-SXM4-80GB (NVIDIA/nvbandwidth issue #53); the others not priced
    assert DEVICE_CATALOG["h100-80gb"].host_link_gbs == 55.43
    assert DEVICE_CATALOG["h200"].host_link_gbs == 55.43
    assert DEVICE_CATALOG["a100-80gb"].host_link_gbs == 24.81
    assert DEVICE_CATALOG["generic"].host_link_gbs == 0.0


def test_a_reload_beyond_its_window_is_waited_for():
    # 1 GiB at 55.43 GB/s: 1073741824 / 55.43e9 = 0.0193712 s; behind a 5 ms backward the compute waits
    # 0.0143712 s, behind a 25 ms one not at all
    assert reload_seconds(GIB, 55.43) == pytest.approx(0.0193712, rel=1e-5)
    assert reload_wait_s(GIB, 55.43, 0.005) == pytest.approx(0.0143712, rel=1e-5)
    assert reload_wait_s(GIB, 55.43, 0.025) == 0.0
    # no link priced, or nothing offloaded: no wait
    assert reload_wait_s(GIB, 0.0, 0.0) == 0.0
    assert reload_wait_s(0.0, 55.43, 0.0) == 0.0


def test_the_iteration_waits_for_each_layers_copies_and_reloads():
    # DENSE (4 body layers) at s 64 with the attention groups offloaded moves 50176 bytes a layer and
    # micro-batch (test_memory_offload). Over a link of 1e-6 GB/s (1000 B/s) each copy takes c = 50.176 s
    # each way, far beyond any layer's time. pp 1, 2 micro-batches: F0 B0 F1 B1, the cell HEAD, 4 bodies
    # (forward f, backward b, b + (c - b) = c with its reload wait, timing/offload.py), TAIL (T_f, T_b);
    # X the forward's time before the first body (get_batch, HEAD).
    # F0 starts at 0; its bodies' copies queue on the one device-to-host stream from t1 = X + f: the first
    #   three end at t1 + 3c, the fourth stays on the device (the first backward's kept layer, host_copies).
    # B0: the TAIL (T_b) and the kept layer (c) run, then layer 3's reload waits for t1 + 3c and takes c;
    #   layer 3's compute starts at t1 + 4c = start + T_b + c + (c - b) (its wait), so B0 starts at
    #   t1 + 2c + b - T_b and ends T_b + 4c + E_b later.
    # F1 starts there; all four copies queue from its first body's end: its last ends at start(F1) + t1 + 4c.
    # B1 starts at that + c - (c - b) - T_b, ends T_b + 4c + E_b later.
    # End: 2 t1 + 14c + 2b + 2 E_b; without a link 2 (X + 4f + T_f + T_b + 4b + E_b); added 14c - 6f - 6b
    # - 2 T_f - 2 T_b (X, E_b cancel): the 7 copies each way one after another, less what compute overlaps.
    slow = _offload(DENSE, ATTENTION, micro_batches=2)
    slow = slow.model_copy(update={"device": slow.device.model_copy(update={"host_link_gbs": 1e-6})})
    free = slow.model_copy(update={"device": slow.device.model_copy(update={"host_link_gbs": 0.0})})
    assert model(slow).state_memory(body(slow), NOT).offloaded_bytes == 50176
    times = TimeModel(free)
    forward_ms, backward_ms = times.layer_times(body(free), NOT)
    tail = next(layer for layer in walk(free) if layer.node == TAIL)
    tail_forward_ms, tail_backward_ms = times.layer_times(tail, LayerType.OUTPUT_LAYER)
    c = 50176 / 1000
    expected = 14 * c - (6 * (forward_ms + backward_ms) + 2 * (tail_forward_ms + tail_backward_ms)) / 1e3
    added = run_iteration(slow).seconds - run_iteration(free).seconds
    assert added == pytest.approx(expected, rel=1e-9)
    # at the catalog's 55.43 GB/s, 50176 B take 0.9 µs, under any layer's time: nothing added
    catalog = slow.model_copy(update={"device": slow.device.model_copy(update={"host_link_gbs": None})})
    assert run_iteration(catalog).seconds == pytest.approx(run_iteration(free).seconds, rel=1e-12)
