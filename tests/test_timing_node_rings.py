"""A data-parallel ring that leaves the node, as NCCL runs it: every rank of the group in a node sends its own
channels out through its own NIC, so the bus bandwidth (nccl-tests' busbw, doc/PERFORMANCE.md: all-gather and
reduce-scatter algbw·(n−1)/n, all-reduce algbw·2(n−1)/n, the gathered size's bytes) is the local ranks' NICs
together, capped by NVLink; a group with one rank per node has one NIC. NCCL's rings take the NICs of the GPUs
they leave from (NVIDIA/nccl issue #569: a 1.6 GB ring all-reduce over 8 DGX-2 GPUs takes 363, 173 and 132 ms
with 1, 2 and 4 GPUs a node, one IB card each); NVIDIA measures 380 GB/s all_reduce busbw across DGX H100 nodes
(GTC 2024 S62129) and NCCL's maintainers 46-48 GB/s per 400 Gb/s NIC (nccl-tests issue #290), where one NIC per
GPU would give 47. Placement: the iteration's data-parallel group, dp·cp ranks spaced tp·cp apart."""

from __future__ import annotations

import pytest
from small_models import LLAMA_8B_LAYER

from ppb_core.config.run import parse_run_config
from ppb_core.memory.model import MemoryModel
from ppb_core.timing.comm import Links, collective_seconds
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER, Collective
from ppb_core.timing.iteration import _data_links

# one Llama 3.1 8B block's BF16 parameters, the FSDP unit torchtitan gathers: q and o 4096², k and v 4096·1024,
# the MLP 3·4096·14336, two norms 4096: 218,112,000 · 2 bytes
BLOCK_BYTES = 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096)


def _links(framework: str, tp: int, dp: int) -> Links:
    run = parse_run_config(
        {
            "name": "x",
            "framework": framework,
            "models": [{"name": "llm", "spec": LLAMA_8B_LAYER}],
            "parallel": {"tp": tp, "dp": dp, "devices_per_node": 8},
            "training": {"seq_length": 1024, "micro_batch_size": 1, "flash_attention": True},
            "device": {"name": "h100-80gb"},
        }
    )
    return _data_links(run, Links.from_run(run), MemoryModel(run))


def test_fsdp_over_16_nodes_leaves_each_through_its_8_nics():
    # torchtitan FSDP 128 on 16 DGX H100 (its Table 3): 8 ranks a node, their 8 NICs at 0.94 · 50 = 376 GB/s, over
    # NVLink's 0.8 · 450 = 360: 360 GB/s. A block's gather: 436,224,000 · 127/128 / 360e9 = 1.202267 ms, plus 127
    # steps of 5 + 5 us = 2.472267 ms (through one NIC each it would be 9.2 ms: not how NCCL's ring runs)
    links = _links("torchtitan", 1, 128)
    assert BLOCK_BYTES == 436_224_000
    assert links.in_node(links.groups["dp"]) == 8
    gather = collective_seconds(Collective(ALL_GATHER, "dp", BLOCK_BYTES, "dp"), links)
    assert gather == pytest.approx(2.472267e-3, rel=1e-6)
    # the FP32 gradients' reduce-scatter, twice the bytes: 2.404533 + 1.27 = 3.674533 ms
    reduce = collective_seconds(Collective(REDUCE_SCATTER, "dp", 2 * BLOCK_BYTES, "dp"), links)
    assert reduce == pytest.approx(3.674533e-3, rel=1e-6)


def test_fsdp_in_one_node_runs_at_the_measured_nvlink_share():
    # FSDP 8 (Table 1): inside the node at nccl-tests' 8-rank share on H100, 0.745 · 450 = 335.25 GB/s:
    # 436,224,000 · 7/8 / 335.25e9 = 1.138541 ms, plus 7 steps of 5 us = 1.173541 ms
    links = _links("torchtitan", 1, 8)
    gather = collective_seconds(Collective(ALL_GATHER, "dp", BLOCK_BYTES, "dp"), links)
    assert gather == pytest.approx(1.173541e-3, rel=1e-6)


def test_megatron_s_distributed_optimizer_under_tp8_has_one_nic():
    # TP 8 · DP 16: the DP group's 16 ranks 8 apart, one a node: its ring leaves through that rank's NIC alone,
    # 47 GB/s. A 1 GB bucket's parameter all-gather: 1e9 · 15/16 / 47e9 = 19.946809 ms, plus 15 steps of 10 us =
    # 20.096809 ms; without the distributed optimizer the all-reduce: 39.893617 + 0.3 = 40.193617 ms
    links = _links("megatron", 8, 16)
    assert links.in_node(links.groups["dp"]) == 1
    gather = collective_seconds(Collective(ALL_GATHER, "dp", 1e9, "dp"), links)
    assert gather == pytest.approx(20.096809e-3, rel=1e-6)
    reduce = collective_seconds(Collective(ALL_REDUCE, "dp", 1e9, "dp"), links)
    assert reduce == pytest.approx(40.193617e-3, rel=1e-6)


def test_megatron_s_dp_group_under_tp2_leaves_through_4_nics():
    # TP 2 · DP 64: 4 DP ranks a node (2 apart), their 4 NICs 4 · 47 = 188 GB/s (under NVLink's 360): a 1 GB
    # reduce-scatter 1e9 · 63/64 / 188e9 = 5.236037 ms, plus 63 steps of 10 us = 5.866037 ms
    links = _links("megatron", 2, 64)
    assert links.in_node(links.groups["dp"]) == 4
    reduce = collective_seconds(Collective(REDUCE_SCATTER, "dp", 1e9, "dp"), links)
    assert reduce == pytest.approx(5.866037e-3, rel=1e-6)
