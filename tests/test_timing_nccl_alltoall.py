"""NCCL all-to-all inside one NVLink domain at the bus bandwidth nccl-tests measured by group size
(`DeviceProfile.nccl_alltoall_shares`): ai-dynamo/aiconfigurator 095f58a,
aic-core/src/aiconfigurator_core/systems/data/{b200_sxm,b300_sxm,gb300,h100_sxm}/comm/nccl/2.29.2/nccl_perf.parquet,
op_name alltoall, the rows of 268,435,456 half elements (537 MB): busbw = 2·message_size / latency · (g−1)/g, as
nccl-tests defines an all-to-all's bus bandwidth (doc/PERFORMANCE.md; NVIDIA/nccl-tests issue #130)."""

from __future__ import annotations

import pytest
from small_models import LLAMA_8B_LAYER

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.timing.comm import Links, collective_seconds
from ppb_core.timing.flops import ALL_TO_ALL, Collective


def _run(device: dict, ep: int = 8, devices_per_node: int = 8):
    return parse_run_config(
        {
            "name": "x",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"dp": ep, "ep": ep, "devices_per_node": devices_per_node},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
            "device": device,
        }
    )


@pytest.mark.parametrize(
    ("device", "size", "share"),
    [
        # B200, 8 ranks: 2·268435456 B / 0.83417 ms · 7/8 = 563.1 GB/s of NVLink 5's 900: 0.626
        ("b200", 8, 0.626),
        # 4 ranks: / 0.82516 ms · 3/4 = 488.0: 0.542; 2 ranks: / 0.81 ms · 1/2 = 331.4: 0.368
        ("b200", 4, 0.542),
        ("b200", 2, 0.368),
        # linear in the group size between measured sizes: 6 ranks (0.542 + 0.626) / 2 = 0.584
        ("b200", 6, 0.584),
        # held at 8's for an NVL72's larger groups (not measured)
        ("b200", 64, 0.626),
        # B300, 8 ranks: / 0.8099 ms · 7/8 = 580.0: 0.644
        ("b300", 8, 0.644),
        # GB300, 4 ranks: / 0.78648 ms · 3/4 = 512.0: 0.569; its 8 is B300's (no larger group measured)
        ("gb300", 4, 0.569),
        ("gb300", 64, 0.644),
        # GB200's 8 is B200's (0.369 / 0.542 at 2 / 4 against B200's 0.368 / 0.542)
        ("gb200", 8, 0.626),
        # H100, 8 ranks: / 1.49042 ms · 7/8 = 315.2 of 450: 0.700
        ("h100-80gb", 8, 0.700),
        # H800 has no measurement: comm_efficiency
        ("h800", 8, 0.8),
    ],
)
def test_the_alltoall_share_is_the_measured_bus_bandwidth(device: str, size: int, share: float):
    assert DEVICE_CATALOG[device].alltoall_share(size) == pytest.approx(share, abs=5e-4)


def test_an_ep8_all_to_all_in_a_dgx_b200_runs_at_the_measured_share():
    # 1 GB over 8 ranks, 7/8 of it to the others at 0.626·900 = 563.4 GB/s: 1.553071 ms, plus 7 steps of 5 us:
    # 1.588071 ms (was 1.348049 + 0.035 at comm_efficiency's 0.802)
    run = _run({"name": "b200"})
    links = Links.from_run(run, run.device.profile())
    assert collective_seconds(Collective(ALL_TO_ALL, "ep", 1e9, "ep"), links) == pytest.approx(1.588071e-3, rel=1e-5)


def test_an_all_to_all_leaving_the_node_keeps_the_link_rate_inside_it():
    # EP 16 over two DGX B200: 1e9/16 to each peer, 7 in the node over 0.802·900 = 721.8 GB/s (0.606 ms), 8 across
    # over one NIC at 0.94·50 GB/s: 5e8 / 47e9 = 10.638298 ms, the NIC bounds it; 15 steps of 5 + 5 us: 10.788298 ms
    run = _run({"name": "b200"}, ep=16)
    links = Links.from_run(run, run.device.profile())
    assert collective_seconds(Collective(ALL_TO_ALL, "ep", 1e9, "ep"), links) == pytest.approx(10.788298e-3, rel=1e-5)


def test_a_stated_comm_efficiency_holds_for_all_to_alls_too():
    # the run config's 0.9 for every collective: 1e9·7/8 / 810e9 = 1.08025 ms + 35 us = 1.11525 ms
    run = _run({"name": "b200", "comm_efficiency": 0.9})
    links = Links.from_run(run, run.device.profile())
    assert collective_seconds(Collective(ALL_TO_ALL, "ep", 1e9, "ep"), links) == pytest.approx(1.11525e-3, rel=1e-4)
