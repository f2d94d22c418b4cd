"""A ring that leaves DGX A100 nodes runs at NCCL's measured share of their HDR NICs (`nic_efficiency`): NVIDIA's
nccl-tests all_reduce figures (GTC 2024 talk S62129: one 200 Gb RDMA NIC 24 GB/s, DGX A100 nodes 192 GB/s) and
nccl-tests issue #119 (4 HDR NICs a node: 96 of 100 GB/s at its largest size)."""

from __future__ import annotations

import pytest
from small_models import LLAMA_8B_LAYER

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.timing.comm import Links, collective_seconds
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, Collective


def _links(devices_per_node: int) -> Links:
    run = parse_run_config(
        {
            "name": "x",
            "framework": "megatron",
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"tp": 8, "dp": 1, "devices_per_node": devices_per_node},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": "a100-80gb"},
        }
    )
    return Links.from_run(run, DEVICE_CATALOG["a100-80gb"])


def test_an_hdr_nic_runs_at_nccl_s_measured_24_of_25_gb_per_s():
    assert DEVICE_CATALOG["a100-80gb"].inter_node_efficiency == pytest.approx(24 / 25)


def test_a_ring_over_four_local_ranks_gets_the_96_gb_per_s_issue_119_measured():
    # TP 8 over nodes of 4: the ring leaves each node through its 4 ranks' NICs, 4 · 25 · 0.96 = 96 GB/s (under
    # NVLink 3's 300 · 0.8 = 240); 1 GB gathered: 1e9 · 7/8 / 96e9 = 9.114583 ms, plus 7 steps of 5 + 5 us
    links = _links(4)
    assert links.ring_bytes_per_s(4, 8) == pytest.approx(96e9)
    assert collective_seconds(Collective(ALL_GATHER, "tp", 1e9, "tp"), links) == pytest.approx(9.184583e-3, rel=1e-6)


def test_eight_local_ranks_leave_through_192_gb_per_s_as_nvidia_measured_on_dgx_a100():
    # a group with 8 ranks in each DGX A100 node leaves through their 8 NICs: 8 · 25 · 0.96 = 192 GB/s, NVIDIA's
    # all_reduce bus bandwidth across DGX A100 nodes (under NVLink 3's 240)
    assert _links(8).ring_bytes_per_s(8, 16) == pytest.approx(192e9)


def test_an_all_reduce_over_four_local_ranks_moves_twice_the_ring_s_bytes():
    # 2 · 1e9 · 7/8 / 96e9 = 18.229167 ms, plus 14 steps of 5 + 5 us: 18.369167 ms
    links = _links(4)
    assert collective_seconds(Collective(ALL_REDUCE, "tp", 1e9, "tp"), links) == pytest.approx(18.369167e-3, rel=1e-6)
