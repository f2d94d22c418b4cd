"""Collective times over a device's links: where each parallel group sits, and ring / pairwise costs.

Placement follows Megatron-LM's default rank order (tensor-parallel ranks innermost, then
context-parallel, then data-parallel; experts laid out as expert-tensor-parallel innermost,
then expert-parallel): a group of *size* ranks spans `span` consecutive ranks, and sits inside
one node when that span fits in `devices_per_node`.

Costs (bandwidth per direction per device, times the device's `comm_efficiency`, over a NIC its
`nic_efficiency`, an all-gather / reduce-scatter inside one NVLink domain its measured share for the
group's size, `nccl_gather_shares`; one
`collective_latency_us` per step, plus `inter_node_latency_us` when the group leaves the node):
- all-gather / reduce-scatter of a P-byte tensor over g ranks: a ring, P·(g−1)/g bytes, g−1 steps;
- all-reduce: reduce-scatter then all-gather, 2·P·(g−1)/g bytes, 2(g−1) steps;
- all-to-all: each rank sends P/g to each peer; peers in the node over the intra-node link (a group inside one
  NVLink domain at NCCL's measured all-to-all share for its size, `nccl_alltoall_shares`, a flex dispatcher's
  own kernels at the link's `comm_efficiency`) and
  the rest over the inter-node link at the same time, g−1 steps (a dispatcher that sends a token
  once per destination node states the bytes leaving the node: `Collective.inter_node_bytes`); a
  backend measured within one NVLink domain (`Collective.algorithm_bytes_per_s`: HybridEP's kernels,
  `ppb_core.timing.flex`) P over its measured rate instead, inside that domain, and the bytes leaving
  the node at the backend's measured rate where it has one (`Collective.inter_node_bytes_per_s`);
- point-to-point ring exchange (ring attention): P bytes in g−1 steps, over one NIC where a hop
  leaves the node.
A ring that leaves the node runs at the inter-node bandwidth of the NICs it can use: NCCL runs one
ring per channel and sends each channel out of the node through the NIC nearest the GPU it leaves
from, so a group with k ranks in each node leaves every node through those k ranks' NICs at once
(one NIC per device on the catalog's systems): k times a device's inter-node bandwidth, never more
than the NVLink hops inside the node carry. Public nccl-tests runs show it: 24 A100 on 3 nodes with
4 HDR NICs each reach 84.8 GB/s average and 96 GB/s peak all_reduce bus bandwidth against the 100
GB/s of 4 × 25 GB/s (NVIDIA/nccl-tests issue #119), and NCCL's maintainers expect 46-48 GB/s per
400 Gb/s NIC (issue #290), which an 8-GPU node's ring multiplies by its 8 NICs. A group with one
rank per node (data parallelism across tensor-parallel groups of 8) has one NIC.

A node whose devices form a full mesh (`DeviceProfile.intra_node_links` n > 0: Ascend 910B's Atlas
800T A2 server, each NPU wired to the 7 others by one HCCS link) has no switch: a device reaches a peer
over that peer's one link, 1/n of its intra-node bandwidth. HCCL runs a collective inside such a server
with its Mesh algorithm, every rank reading from or writing to all its peers at once (CANN HCCL user
guide, "Mesh": AllGather α + n/p·β, ReduceScatter α + n/p·β + (p−1)/p·n·γ, AllReduce their sum, β one
link's time a byte; CANN's Ascend C `SetAlgConfig`: on Atlas A2 "only the FullMesh algorithm is
supported" inside the server). So a group of k ranks in the node moves its P·(k−1)/k bytes over k−1
links, (k−1)/n of the node bandwidth (tensor parallelism of 2 one link, of 8 all seven), in one step
(all-reduce two) instead of a ring's k−1; a pipeline's send between two devices, or one hop of a ring
exchange, has one link.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppb_core.config.devices import DeviceProfile, measured_share
from ppb_core.config.run import RunConfig
from ppb_core.timing.flops import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, ONE_SHOT, P2P, REDUCE_SCATTER, Collective


@dataclass(frozen=True)
class Group:
    size: int
    span: int  # consecutive ranks the group covers


@dataclass(frozen=True)
class Links:
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    latency_s: float
    devices_per_node: int
    groups: dict[str, Group]
    inter_node_latency_s: float = 0.0  # added to a step that crosses nodes
    mesh_links: int = 0  # a full mesh's links a device (`DeviceProfile.intra_node_links`); 0: a switch
    # NCCL's all-gather / reduce-scatter share of the link by group size inside the node, over its raw rate
    # (`DeviceProfile.nccl_gather_shares`, `link_bytes_per_s`); (): `intra_node_bytes_per_s`
    gather_shares: tuple[tuple[int, float], ...] = ()
    link_bytes_per_s: float = 0.0
    # NCCL's all-to-all share the same way (`DeviceProfile.nccl_alltoall_shares`); (): `intra_node_bytes_per_s`
    alltoall_shares: tuple[tuple[int, float], ...] = ()

    @classmethod
    def from_run(cls, run: RunConfig, device: DeviceProfile | None = None) -> Links:
        par = run.parallel
        device = device or run.device.profile()
        etp = par.expert_tp
        groups = {
            "tp": Group(par.tp, par.tp),
            "cp": Group(par.cp, par.tp * par.cp),
            # hierarchical CP (Megatron parallel_state.py `create_hierarchical_groups`, d98e8a64): the first
            # level's cp_a2a consecutive CP ranks, the second level's ranks cp_a2a apart
            "cp_a2a": Group(par.cp_a2a, par.tp * par.cp_a2a),
            "cp_p2p": Group(par.cp // par.cp_a2a, par.tp * par.cp),
            "ep": Group(par.ep, etp * par.ep),
            "etp": Group(etp, etp),
            # Megatron's expert-TP × EP group (the allgather dispatcher's `tp_ep_group`), expert TP innermost
            "tp_ep": Group(etp * par.ep, etp * par.ep),
        }
        return cls(
            intra_node_bytes_per_s=device.intra_node_bandwidth_gbs * 1e9 * device.comm_efficiency,
            inter_node_bytes_per_s=device.inter_node_bandwidth_gbs * 1e9 * device.inter_node_efficiency,
            latency_s=device.collective_latency_us * 1e-6,
            devices_per_node=par.devices_per_node,
            groups=groups,
            inter_node_latency_s=device.inter_node_latency_us * 1e-6,
            mesh_links=device.intra_node_links,
            gather_shares=device.nccl_gather_shares,
            link_bytes_per_s=device.intra_node_bandwidth_gbs * 1e9,
            alltoall_shares=device.nccl_alltoall_shares,
        )

    def node_bytes_per_s(self, local: int) -> float:
        """What one device of a group with *local* ranks in its node sends per direction to the others:
        through a switch the whole intra-node bandwidth; over a full mesh the local-1 links to them."""
        if not self.mesh_links:
            return self.intra_node_bytes_per_s
        return self.intra_node_bytes_per_s * min(max(local - 1, 1), self.mesh_links) / self.mesh_links

    def pair_bytes_per_s(self) -> float:
        """Between two devices of a node: the switch's whole bandwidth, or a mesh's one link."""
        return self.node_bytes_per_s(2)

    def mesh(self, local: int, size: int) -> bool:
        """Whether HCCL's one-step Mesh algorithm runs the group: a full mesh, the group inside the node."""
        return bool(self.mesh_links) and local >= size

    def ring_bytes_per_s(self, local: int, size: int) -> float:
        """A ring's bandwidth per direction: inside the node NVLink's (a full mesh's links to the group's
        other local ranks); leaving it, the *local* ranks' NICs together (NCCL's channels leave through
        every local rank's NIC), at most what the node carries."""
        node = self.node_bytes_per_s(local)
        if local >= size:
            return node
        if local <= 1:
            return self.inter_node_bytes_per_s
        return min(node, local * self.inter_node_bytes_per_s)

    def gather_ring_bytes_per_s(self, local: int, size: int) -> float:
        """An NCCL all-gather / reduce-scatter ring's bandwidth: inside one NVLink domain the share measured
        for its group size (`DeviceProfile.nccl_gather_shares`), else `ring_bytes_per_s`."""
        if local >= size and not self.mesh_links and self.gather_shares:
            return self.link_bytes_per_s * measured_share(self.gather_shares, size)
        return self.ring_bytes_per_s(local, size)

    def alltoall_bytes_per_s(self, local: int, size: int) -> float:
        """What one device of an NCCL all-to-all sends to its node's peers per direction: inside one NVLink domain
        the share measured for its group size (`DeviceProfile.nccl_alltoall_shares`), else `node_bytes_per_s`."""
        if local >= size and not self.mesh_links and self.alltoall_shares:
            return self.link_bytes_per_s * measured_share(self.alltoall_shares, size)
        return self.node_bytes_per_s(local)

    def in_node(self, group: Group) -> int:
        """How many of the group's ranks share a node with any one of them."""
        if group.span <= self.devices_per_node:
            return group.size
        return max(1, group.size * self.devices_per_node // group.span)


def collective_seconds(collective: Collective, links: Links) -> float:
    """The time one device spends in *collective*, before any overlap with compute."""
    group = links.groups[collective.group]
    size, payload = group.size, collective.payload_bytes
    if size <= 1 or payload <= 0:
        return 0.0
    local = links.in_node(group)
    # each of the framework's separate calls for the payload pays its steps' latency
    step = (links.latency_s + (links.inter_node_latency_s if local < size else 0.0)) * collective.calls
    if collective.kind == ALL_TO_ALL:
        if collective.algorithm_bytes_per_s and local >= size:
            # a backend measured in one NVLink domain: every row a rank receives over that rate, its kernel's
            # own latency in the measurement (`ppb_core.timing.flex`, HybridEP)
            return payload / collective.algorithm_bytes_per_s
        share = payload / size
        node = links.node_bytes_per_s(local) if collective.flex_backend else links.alltoall_bytes_per_s(local, size)
        intra = share * (local - 1) / node if local > 1 else 0.0
        leaving = share * (size - local) if collective.inter_node_bytes is None else collective.inter_node_bytes
        inter = leaving / (collective.inter_node_bytes_per_s or links.inter_node_bytes_per_s)
        return max(intra, inter) + (size - 1) * step
    if collective.method == ONE_SHOT and local >= size:  # one kernel over NVLink (`Collective.method`)
        return one_shot_seconds(collective, links)
    bandwidth = links.ring_bytes_per_s(local, size)
    steps = 1 if links.mesh(local, size) else size - 1  # HCCL's Mesh: one step (module docstring)
    if collective.kind in (ALL_GATHER, REDUCE_SCATTER):
        bandwidth = links.gather_ring_bytes_per_s(local, size)
        return payload * (size - 1) / size / bandwidth + steps * step
    if collective.kind == ALL_REDUCE:
        return 2 * payload * (size - 1) / size / bandwidth + 2 * steps * step
    if collective.kind == P2P:
        # each rank sends its block to one neighbour: the hop that leaves the node has one NIC
        link = links.pair_bytes_per_s() if local == size else links.inter_node_bytes_per_s
        return payload / link + (size - 1) * step
    raise ValueError(f"unknown collective {collective.kind!r}")


def hop_seconds(collective: Collective, links: Links) -> float:
    """One hop of a ring exchange: a rank's shard of *collective*'s payload to its neighbour (one
    step's latency), over the ring's bandwidth (a copy engine's peer copy, taken at NVLink's rate)."""
    group = links.groups[collective.group]
    if group.size <= 1 or collective.payload_bytes <= 0:
        return 0.0
    local = links.in_node(group)
    bandwidth = links.ring_bytes_per_s(local, group.size)
    if links.mesh_links:  # a hop between two devices of a mesh node has their one link, the group in the node or not
        bandwidth = min(bandwidth, links.pair_bytes_per_s())
    return collective.payload_bytes / group.size / bandwidth + links.latency_s


def one_shot_seconds(collective: Collective, links: Links) -> float:
    """A reduce-scatter (or all-gather) done in one kernel that reads every peer's slice over NVLink
    at once (TransformerEngine's userbuffers, `userbuffers_fp16_sum_inplace_gpu_rr_rs_oop_stride`):
    a ring's bytes, P·(g-1)/g, but one step's latency instead of g-1."""
    group = links.groups[collective.group]
    if group.size <= 1 or collective.payload_bytes <= 0:
        return 0.0
    bandwidth = links.ring_bytes_per_s(links.in_node(group), group.size)
    return collective.payload_bytes * (group.size - 1) / group.size / bandwidth + links.latency_s
