"""NCCL all-gather / reduce-scatter inside one NVLink domain at the bus bandwidth nccl-tests measured by group
size (`DeviceProfile.nccl_gather_shares`): ai-dynamo/aiconfigurator 095f58a,
aic-core/src/aiconfigurator_core/systems/data/{b200_sxm,gb200,h100_sxm}/comm/nccl/2.29.2/nccl_perf.parquet, the
rows of 268,435,456 half elements (537 MB): busbw = 2·message_size / latency · (g−1)/g, as nccl-tests defines it."""

from __future__ import annotations

import pytest
from small_models import LLAMA_8B_LAYER

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.timing.comm import Links, collective_seconds
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Collective

B200 = DEVICE_CATALOG["b200"]


def _run(device: dict, tp: int = 8, devices_per_node: int = 8):
    return parse_run_config(
        {
            "name": "x",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"tp": tp, "dp": 8 // tp, "devices_per_node": devices_per_node},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
            "device": device,
        }
    )


@pytest.mark.parametrize(
    ("device", "size", "share"),
    [
        # B200, 8 ranks: all_gather 2·268435456 B / 0.76142 ms · 7/8 = 617.0 GB/s, reduce_scatter / 0.76645 ms
        # = 612.9; their mean 614.95 of NVLink 5's 900: 0.683
        ("b200", 8, 0.683),
        # 4 ranks: 2·268435456 / 0.71064 ms · 3/4 = 566.6, / 0.72881 ms = 552.5; 559.55 / 900 = 0.622
        ("b200", 4, 0.622),
        # 2 ranks: / 0.6123 ms · 1/2 = 438.4, / 0.65103 ms = 412.3; 425.35 / 900 = 0.473
        ("b200", 2, 0.473),
        # between measured sizes linear in the group size: 6 ranks (0.622 + 0.683) / 2 = 0.6525
        ("b200", 6, 0.6525),
        # held at the nearest measured size outside them: an NVL72's 72 at 8's, 1 at 2's
        ("b200", 72, 0.683),
        ("b200", 1, 0.473),
        # H100, 8 ranks: / 1.4015 ms · 7/8 = 335.2, / 1.39936 ms = 335.7; 335.45 / 450 = 0.745
        ("h100-80gb", 8, 0.745),
        # GB200 4 ranks: / 0.71445 ms · 3/4 = 563.6, / 0.7333 ms = 549.1; 556.35 / 900 = 0.618
        ("gb200", 4, 0.618),
        # GB200's 8 is not measured: B200's (the two agree within 1% at 2 and 4 ranks)
        ("gb200", 8, 0.683),
        # H800 has no measurement: comm_efficiency for every group
        ("h800", 8, 0.8),
    ],
)
def test_the_gather_share_is_the_measured_bus_bandwidth(device: str, size: int, share: float):
    assert DEVICE_CATALOG[device].gather_share(size) == pytest.approx(share, abs=5e-4)


def test_a_tp8_all_gather_in_a_dgx_b200_runs_at_the_measured_share():
    # 1 GB gathered over 8 ranks: 1e9·7/8 bytes at 0.683·900 GB/s = 614.7 GB/s: 1.42346 ms, plus 7 steps of
    # 5 us: 1.45846 ms; the reduce-scatter the same
    links = Links.from_run(_run({"name": "b200"}), B200)
    for kind in (ALL_GATHER, REDUCE_SCATTER):
        assert collective_seconds(Collective(kind, "tp", 1e9, "tp"), links) == pytest.approx(1.45846e-3, rel=1e-4)


def test_all_reduce_keeps_nccl_s_topology_share():
    # NVLink SHARP all-reduce is not a ring (8 B200 measure 704 GB/s busbw there): 2·1e9·7/8 bytes at
    # 0.802·900 = 721.8 GB/s, 2.42449 ms, plus 14 steps of 5 us: 2.49449 ms
    links = Links.from_run(_run({"name": "b200"}), B200)
    assert collective_seconds(Collective(ALL_REDUCE, "tp", 1e9, "tp"), links) == pytest.approx(2.49449e-3, rel=1e-4)


def test_a_group_leaving_the_node_keeps_the_ring_over_the_nics():
    # TP 8 over nodes of 4: 4 local ranks, their 4 NICs at 0.94 of 50 GB/s = 188 GB/s, under NVLink's rate:
    # 1e9·7/8 / 188e9 = 4.65426 ms, plus 7 steps of 5 + 5 us: 4.72426 ms
    run = _run({"name": "b200"}, devices_per_node=4)
    links = Links.from_run(run, run.device.profile())
    assert collective_seconds(Collective(ALL_GATHER, "tp", 1e9, "tp"), links) == pytest.approx(4.72426e-3, rel=1e-4)


def test_a_stated_comm_efficiency_holds_for_gathers_too():
    # the run config's 0.9 for every collective: 1e9·7/8 / 810e9 = 1.08025 ms + 35 us = 1.11525 ms
    run = _run({"name": "b200", "comm_efficiency": 0.9})
    links = Links.from_run(run, run.device.profile())
    assert collective_seconds(Collective(ALL_GATHER, "tp", 1e9, "tp"), links) == pytest.approx(1.11525e-3, rel=1e-4)
