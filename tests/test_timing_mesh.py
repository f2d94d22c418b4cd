"""Collectives inside a full-mesh node (Ascend 910B's HCCS) against a switch (NVSwitch), by hand.

The ascend-910b entry: 196 GB/s a direction over 7 HCCS links (392 GB/s bidirectional, 7 × 56), times
comm_efficiency 0.8 = 156.8e9 B/s, one link 156.8e9 / 7 = 22.4e9 B/s; 5 us a step. HCCL's Mesh algorithm
(CANN HCCL user guide, "Mesh"): all-gather α + n/p·β, all-reduce 2α + 2n/p·β, β one link's time a byte.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from small_models import ROUND_DEVICE

from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.walk import walk
from ppb_core.timing.comm import Group, Links, collective_seconds, hop_seconds
from ppb_core.timing.flops import Collective
from ppb_core.timing.iteration import p2p_bytes, p2p_seconds

LINK = 196e9 * 0.8 / 7  # one HCCS link a direction at comm_efficiency: 22.4e9 B/s
STEP = 5e-6
PAYLOAD = 64 * 2**20  # 67,108,864 bytes


def run(device, **parallel):
    spec = {
        "vocab_size": 4096,
        "hidden_size": 1024,
        "num_layers": 8,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "max_position_embeddings": 2048,
    }
    return parse_run_config(
        {
            "name": "m",
            "framework": "mindformers",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": parallel,
            "training": {"seq_length": 2048, "micro_batches": 8},
            "device": device,
        }
    )


def links(device=None, **parallel):
    config = run(device or {"name": "ascend-910b"}, **parallel)
    return Links.from_run(config, config.device.profile())


def grouped(found: Links, **groups: Group) -> Links:
    """The links with the groups iteration.py `_data_links` adds (dp), stated by hand."""
    return replace(found, groups={**found.groups, **groups})


def test_the_catalog_states_ascend_as_a_mesh_of_seven_and_nvidia_as_switched():
    assert DEVICE_CATALOG["ascend-910b"].intra_node_links == 7
    assert DEVICE_CATALOG["h100-80gb"].intra_node_links == 0
    assert links().intra_node_bytes_per_s / 7 == pytest.approx(LINK)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_tensor_parallel_all_gather_moves_a_shard_over_each_link_in_one_step(tp):
    # (tp−1)/tp of the payload over tp−1 links at once: P/tp over one link, one step.
    # TP2: 33,554,432 / 22.4e9 = 1.498 ms; TP4: 0.749 ms; TP8: 0.374 ms (each + 5 us).
    seconds = collective_seconds(Collective("all_gather", "tp", PAYLOAD, "tp"), links(tp=tp))
    assert seconds == pytest.approx(PAYLOAD / tp / LINK + STEP)


def test_an_all_reduce_inside_the_mesh_is_two_steps():
    # TP4: 2 · P/4 over one link, 2 steps: 2 · 16,777,216 / 22.4e9 + 10 us.
    seconds = collective_seconds(Collective("all_reduce", "tp", PAYLOAD, "tp"), links(tp=4))
    assert seconds == pytest.approx(2 * PAYLOAD / 4 / LINK + 2 * STEP)


def test_a_switch_gives_every_group_the_whole_bandwidth_over_a_ring():
    # ROUND_DEVICE: 100 GB/s at 0.5 = 5e10 B/s; TP2 ring: P/2 over it, one step of 0 us.
    seconds = collective_seconds(Collective("all_gather", "tp", PAYLOAD, "tp"), links(ROUND_DEVICE, tp=2))
    assert seconds == pytest.approx(PAYLOAD / 2 / 5e10)
    # the same device stated as a mesh of 4 links (a node of 5): a TP2 group has one, 1.25e10 B/s
    meshed = links({**ROUND_DEVICE, "intra_node_links": 4}, tp=2, devices_per_node=5)
    assert collective_seconds(Collective("all_gather", "tp", PAYLOAD, "tp"), meshed) == pytest.approx(
        PAYLOAD / 2 / 1.25e10
    )


def test_a_run_config_can_state_a_switched_ascend_node():
    switched = links({"name": "ascend-910b", "intra_node_links": 0}, tp=2)
    # a ring over the whole 156.8e9 B/s, one step (TP2)
    seconds = collective_seconds(Collective("all_gather", "tp", PAYLOAD, "tp"), switched)
    assert seconds == pytest.approx(PAYLOAD / 2 / (7 * LINK) + STEP)


def test_a_negative_link_count_is_refused():
    with pytest.raises((InputError, ValueError)):
        run({"name": "ascend-910b", "intra_node_links": -1}, tp=2)


@pytest.mark.parametrize(
    ("device", "parallel", "field", "said"),
    [
        # one link to each peer: 999 links a device is a node of 1000, not the default 8 (it priced TP2's
        # collectives over 1/999 of the bandwidth, an H100 run 3.4 s -> 281 s)
        ({"name": "h100-80gb", "intra_node_links": 999}, {}, "device.intra_node_links", "a node of 1000 devices"),
        # a mesh of 4 in a node of 8: pairs with no link between them
        ({**ROUND_DEVICE, "intra_node_links": 4}, {}, "device.intra_node_links", "devices_per_node is 8"),
        # the catalog's 7 HCCS links (an 8-NPU server) in a node said to hold 16
        ({"name": "ascend-910b"}, {"devices_per_node": 16}, "parallel.devices_per_node", "ascend-910b's"),
    ],
)
def test_a_mesh_whose_links_do_not_join_the_node_s_devices_is_refused(device, parallel, field, said):
    with pytest.raises(InputError) as caught:
        run(device, tp=2, **parallel)
    assert caught.value.field == field
    assert said in caught.value.problem


def test_a_switched_node_of_any_size_and_a_mesh_of_its_node_are_accepted():
    assert run({"name": "ascend-910b"}, tp=2, devices_per_node=8).device.profile().intra_node_links == 7
    assert run({"name": "ascend-910b", "intra_node_links": 0}, tp=2, devices_per_node=16).parallel.devices_per_node
    assert run({"name": "ascend-910b", "intra_node_links": 3}, tp=2, devices_per_node=4).device.intra_node_links


def test_a_data_parallel_group_spread_over_the_node_uses_its_local_links():
    # DP4 × TP2 on one node: the DP group's 4 ranks (stride 2) are all local: 3 links, one step each way.
    # all-reduce 2 · P · 3/4 over 3 links = 2 · P/4 over one.
    found = grouped(links(tp=2, dp=4), dp=Group(4, 8))
    seconds = collective_seconds(Collective("all_reduce", "dp", PAYLOAD, "dp"), found)
    assert seconds == pytest.approx(2 * PAYLOAD / 4 / LINK + 2 * STEP)


def test_a_group_leaving_the_node_keeps_the_ring_over_the_nics():
    # DP2 across two nodes of TP8: one rank a node, one NIC: 25 GB/s · 0.8 = 20e9 B/s, ring steps of 10 us.
    found = grouped(links(tp=8, dp=2), dp=Group(2, 16))
    seconds = collective_seconds(Collective("all_reduce", "dp", PAYLOAD, "dp"), found)
    assert seconds == pytest.approx(2 * PAYLOAD / 2 / 20e9 + 2 * (STEP + STEP))


def test_a_pipeline_send_inside_the_node_has_one_link():
    # PP2 of TP1 on one node: the stages' send crosses one HCCS link.
    config = run({"name": "ascend-910b"}, pp=2)
    found = Links.from_run(config, config.device.profile())
    layer = next(layer for layer in walk(config) if layer.node == "BODY")
    payload = p2p_bytes(config, layer)
    assert payload == 2048 * 1024 * 2  # one micro-batch's activations, bf16
    assert p2p_seconds(config, found, layer) == pytest.approx(payload / LINK + STEP)


def test_a_ring_hop_inside_the_mesh_has_one_link():
    found = links(tp=4)
    assert hop_seconds(Collective("p2p", "tp", PAYLOAD, "tp"), found) == pytest.approx(PAYLOAD / 4 / LINK + STEP)


def test_a_ring_hop_of_a_group_leaving_the_node_still_has_one_link_inside_it():
    # A ring of 16 over two 8-NPU servers (stride 1): 8 local ranks, so the ring's rate is min(the node's
    # 7 links, 8 NICs) = min(156.8e9, 8 · 20e9) = 156.8e9 B/s; but a hop between neighbours inside a server
    # has their one link, 22.4e9 B/s: P/16 over it, one step. (It was priced at 156.8e9, 7x too fast.)
    found = grouped(links(tp=8, dp=2), tp=Group(16, 16))
    assert found.ring_bytes_per_s(8, 16) == pytest.approx(7 * LINK)
    assert hop_seconds(Collective("p2p", "tp", PAYLOAD, "tp"), found) == pytest.approx(PAYLOAD / 16 / LINK + STEP)
