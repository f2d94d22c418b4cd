"""What the runtime holds on a device outside the framework's tensors: `device.reserved_mb: auto`.

A stage's peak is what the framework's allocator holds (PyTorch's caching allocator, MindSpore's pool);
the process holds more beside it, which no tensor accounts for. `runtime_reserve(run)` prices it part by
part, each from the library's code or a public measurement, with the communicators the run's parallel
layout creates:

* **The CUDA context** (CUDA GPUs): the driver's state and the kernels loaded into it. With lazy module
  loading (CUDA 11.7+, on by default on Linux since CUDA 12.2) PyTorch's context is "~300MB" where it
  took more than 1000 MB before (PyTorch maintainer's measurement, pytorch/pytorch#107667, 2023-08-28).
  A training step loads more kernels than that measurement's model did (cuBLAS, cuDNN, NCCL,
  Transformer Engine), so it is a floor; no per-generation measurement is published.
* **NCCL's buffers per communicator** (CUDA GPUs): every process group the framework runs a collective
  on is an NCCL communicator with its own buffers (torch creates it at the group's first collective;
  split communicators do not share buffers unless asked: NVIDIA/nccl#986). Per channel a ring
  connection holds NCCL_BUFFSIZE (4 MiB, Simple) + the LL buffer (8 lines · 512 threads · 8 steps ·
  16 bytes = 512 KiB) + the LL128 buffer (120 · 640 threads · 8 steps · 8 bytes = 4,800 KiB) (nccl
  src/init.cc `computeBuffSizes`, v2.30.7), in 2 MiB IPC granules (src/transport/p2p.cc, `CUDA_IPC_MIN`),
  times channels and tree connections. Priced by the
  published measurement of the whole: 688 MB per communicator of more than two ranks, 544 MB per
  two-rank one, after a 4 MB all-reduce on 4 A100 with NVLink through PyTorch (NVIDIA/nccl#964); that is
  about 70 of those 9.19 MiB connections (~24 channels · ring and tree).
* **NVLS** (sm90+ behind an NVSwitch): a communicator with two or more ranks in a node that reduces or
  gathers in bulk also maps NVLink SHARP buffers: nvlsChannels (16 on sm90, 24 on sm100 in one node, 32
  across nodes) · 2 · NVLS_CHUNKSIZE (128 KiB) · NCCL_STEPS (8) per head, a head per local rank (nccl
  src/transport/nvls.cc `ncclNvlsTuning`, `ncclNvlsBufferSetup`, v2.30.7; 8 heads for 8 H100 a node in the
  log of NVIDIA/nccl#1453): 256 MiB on 8 H100, before the multicast granularity's rounding.
* **Point-to-point peers in the node** (CUDA GPUs): NCCL's send/receive connects each peer on its own
  channels with its own buffers; measured for an all-to-all among 8 H100 (one node) at 3.28 GB beyond
  the communicator, 7 peers, 32 channels a pair, allocations of 10 MiB and 2 MiB (NVIDIA/nccl#1685; by
  p2p.cc, a receive side's three protocols and a send side's header, each in 2 MiB granules: 32 · 12 MiB
  = 384 MiB a peer). Counted per peer in the node for Megatron's alltoall
  token dispatcher and torchtitan's expert all-to-all, the pipeline's neighbours and the CP ring's;
  across nodes NCCL's network transport shares one buffer for all send/receive (NVIDIA/nccl#1450), not
  counted.
* **HCCL's buffers per communicator** (Ascend): each communication domain holds 2 · HCCL_BUFFSIZE
  (default 200 MB), one for sending, one for receiving (CANN's environment variable reference,
  HCCL_BUFFSIZE). The Ascend runtime's own context has no published figure and is not counted.

Not held here: cuBLAS's, cuBLASLt's, Transformer Engine's and cuDNN's workspaces come from the caching
allocator and are in the peak already (`ppb_core.memory.frameworks.workspaces`); what torch's caching
allocator reserves beyond the allocated peak is priced for torchtitan's FSDP2 pools
(`ppb_core.memory.reserved`, counted by the fit) and not for Megatron or MindFormers.

The communicators are the framework's process groups a training step runs collectives on, as its code
creates them: Megatron-LM's `parallel_state.initialize_model_parallel` (megatron/core/parallel_state.py:
TP, CP, DP·CP, PP, the model-parallel group the gradient norm is reduced over, the embedding group of
tied weights, the expert groups), torchtitan's device mesh (torchtitan/distributed/parallel_dims.py
`build_mesh`: tp, cp, pp, the FSDP mesh dp_shard·cp, dp_replicate, the loss's dp_cp, ep), MindSpore's
(the world group and one per parallel dimension); each with the default world group of
`init_process_group`'s barrier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ppb_core.units import MB

if TYPE_CHECKING:
    from ppb_core.config.devices import DeviceProfile
    from ppb_core.config.run import Parallel

# PyTorch's CUDA context with lazy module loading (pytorch/pytorch#107667: "~300MB")
CUDA_CONTEXT_BYTES = 300 * MB
# one NCCL communicator after a 4 MB all-reduce, 4 A100 with NVLink, through PyTorch (NVIDIA/nccl#964)
NCCL_COMMUNICATOR_BYTES = 688 * MB
NCCL_PAIR_COMMUNICATOR_BYTES = 544 * MB  # a two-rank one, same measurement
# an all-to-all's buffers per peer in the node: 4.34 − 1.06 GB over 7 peers, 8 H100 (NVIDIA/nccl#1685)
NCCL_P2P_PEER_BYTES = (4.34 - 1.06) * 1e9 / 7
# NVLS: NVLS_CHUNKSIZE 128 KiB · NCCL_STEPS 8 · 2 (nccl src/transport/nvls.cc `ncclNvlsBufferSetup`)
NVLS_HEAD_CHANNEL_BYTES = 2 * 8 * 128 * 1024
# HCCL: 2 · HCCL_BUFFSIZE (200 MB) per communication domain (CANN, HCCL_BUFFSIZE)
HCCL_COMMUNICATOR_BYTES = 2 * 200 * MB


@dataclass(frozen=True)
class Group:
    """One process group a framework runs collectives on: its name, its size, its ranks in rank 0's node
    (`local`), whether it reduces or gathers in bulk (NVLS-eligible) and its point-to-point peers in the node."""

    name: str
    size: int
    local: int
    bulk: bool = False
    p2p_peers: int = 0


@dataclass(frozen=True)
class ReservePart:
    """One thing the runtime holds outside the allocator: what, how many bytes, and why."""

    name: str
    bytes: float
    why: str


@dataclass(frozen=True)
class RuntimeReserve:
    parts: tuple[ReservePart, ...]
    groups: tuple[Group, ...]

    @property
    def total_bytes(self) -> float:
        return sum(part.bytes for part in self.parts)

    @property
    def total_mb(self) -> int:
        """Whole MB, rounded up: what `device.reserved_mb: auto` holds back."""
        return math.ceil(self.total_bytes / MB - 1e-9)

    def to_json(self) -> dict:
        return {
            "total_mb": self.total_mb,
            "parts": [{"name": p.name, "mb": p.bytes / MB, "why": p.why} for p in self.parts],
            "communicators": [{"name": g.name, "size": g.size, "local": g.local} for g in self.groups],
        }


def local_ranks(size: int, stride: int, node: int) -> int:
    """A group's ranks on one node: members *stride* apart, the node *node* ranks (rank order puts the
    inner dimensions in a node first)."""
    if size <= 1:
        return 1
    return max(1, min(size, node // stride))


def _megatron_groups(par: Parallel, *, tied: bool, a2a: bool) -> list[Group]:
    """Megatron-LM's groups with more than one rank (parallel_state.py `initialize_model_parallel`, rank order
    tp-cp-ep-dp-pp): the ones a training step runs collectives on."""
    node, tp, cp, dp, pp = par.devices_per_node, par.tp, par.cp, par.dp, par.pp
    ep, etp = par.ep, par.expert_tp
    groups = [Group("world", dp * tp * pp * cp, min(dp * tp * pp * cp, node))]
    if tp > 1:
        groups.append(Group("tp", tp, local_ranks(tp, 1, node), bulk=True))
    if cp > 1:
        local = local_ranks(cp, tp, node)
        ring = par.cp_variant in ("ring", "hierarchical")
        groups.append(Group("cp", cp, local, p2p_peers=min(2, local - 1) if ring else 0))
    if dp * cp > 1:  # the gradient reduction and the distributed optimizer's gather (`_DATA_PARALLEL_GROUP_WITH_CP`)
        groups.append(Group("dp·cp", dp * cp, local_ranks(dp * cp, tp, node), bulk=True))
    if pp > 1:  # send/receive to the neighbouring stages
        local = local_ranks(pp, tp * cp * dp, node)
        groups.append(Group("pp", pp, local, p2p_peers=min(2, local - 1)))
        if tied:  # the first and last stages' embedding gradient all-reduce (`_EMBEDDING_GROUP`)
            groups.append(Group("embedding", 2, local_ranks(2, tp * cp * dp * (pp - 1), node)))
    world = dp * tp * pp * cp
    instances = par.distributed_optimizer_instances
    if par.zero >= 1 and not par.fsdp:
        # the distributed optimizer reduces the gradient norm and zeros over its instance's ranks, a group of its
        # own (megatron/core/optimizer/__init__.py: grad_stats_parallel_group = `_INTRA_DISTRIBUTED_OPTIMIZER_
        # INSTANCE_GROUP`, the whole world at one instance); across instances the gradients are all-reduced
        groups.append(Group("optimizer instance", world // instances, min(world // instances, node)))
        if instances > 1:
            groups.append(Group("optimizer instances", instances, 1, bulk=True))
    elif not par.fsdp and tp * pp > 1:  # Float16Optimizer's: the model-parallel group (`_MODEL_PARALLEL_GROUP`)
        groups.append(Group("tp·pp", tp * pp, local_ranks(tp, 1, node)))
    if ep > 1:
        local = local_ranks(ep, etp, node)
        groups.append(Group("ep", ep, local, p2p_peers=local - 1 if a2a else 0))
        if etp > 1 and etp != tp:
            groups.append(Group("etp", etp, local_ranks(etp, 1, node), bulk=True))
        expert_dp = dp * cp * tp // (ep * etp)
        if expert_dp > 1:
            groups.append(Group("expert dp", expert_dp, local_ranks(expert_dp, ep * etp, node), bulk=True))
    return groups


def _torchtitan_groups(par: Parallel, *, a2a: bool) -> list[Group]:
    """torchtitan's mesh dimensions with more than one rank (parallel_dims.py `build_mesh`, mesh order pp,
    dp_replicate, dp_shard, cp, tp, tp innermost), with the flattened meshes it runs collectives on."""
    node, tp, cp, dp, pp, ep = par.devices_per_node, par.tp, par.cp, par.dp, par.pp, par.ep
    # the default group broadcasts the seed (torchtitan/distributed/utils.py `set_determinism`)
    groups = [Group("world", dp * tp * pp * cp, min(dp * tp * pp * cp, node))]
    if tp > 1:
        groups.append(Group("tp", tp, local_ranks(tp, 1, node), bulk=True))
    if cp > 1:
        local = local_ranks(cp, tp, node)
        groups.append(Group("cp", cp, local, p2p_peers=min(2, local - 1)))
    if dp * cp > 1:  # FSDP2's fsdp mesh dp_shard·cp (or DDP's dp_replicate), and the loss mesh batch·cp
        groups.append(Group("dp·cp (FSDP)", dp * cp, local_ranks(dp * cp, tp, node), bulk=True))
        groups.append(Group("dp·cp (loss)", dp * cp, local_ranks(dp * cp, tp, node)))
    if pp > 1:
        local = local_ranks(pp, tp * cp * dp, node)
        groups.append(Group("pp", pp, local, p2p_peers=min(2, local - 1)))
    if ep > 1:
        local = local_ranks(ep, 1, node)
        groups.append(Group("ep", ep, local, p2p_peers=local - 1 if a2a else 0))
        efsdp = dp * cp * tp // ep  # the experts' FSDP mesh (`efsdp`: dp_shard·cp·tp / ep)
        if efsdp > 1:
            groups.append(Group("efsdp", efsdp, local_ranks(efsdp, ep, node), bulk=True))
    return groups


def _mindformers_groups(par: Parallel) -> list[Group]:
    """MindSpore's communication domains: the world group `init()` creates and one per parallel dimension."""
    world = par.dp * par.tp * par.pp * par.cp
    sizes = {"world": world, "tp": par.tp, "dp": par.dp, "pp": par.pp, "cp": par.cp, "ep": par.ep}
    return [Group(name, size, 1) for name, size in sizes.items() if size > 1]


def _names(groups: Sequence[Group]) -> str:
    return ", ".join(f"{g.name} {g.size}" for g in groups)


def nvls_channels(compute_capability: float, nodes: int) -> int:
    """NCCL's NVLS channels (nvls.cc `ncclNvlsTuning`): 16 on sm90, 24 on sm100 in one node, 32 across."""
    if compute_capability >= 10.0:
        return 24 if nodes <= 1 else 32
    return 16


def runtime_reserve(
    framework: str, par: Parallel, profile: DeviceProfile, *, tied: bool = False, a2a: bool = True
) -> RuntimeReserve:
    """What the runtime holds outside the framework's allocator on one device of this layout (module
    docstring). *tied*: the model ties its embedding and output weights; *a2a*: experts exchange tokens
    by NCCL's all-to-all (Megatron's alltoall dispatcher, torchtitan), not by DeepEP's own buffers."""
    if framework == "mindformers":
        groups = _mindformers_groups(par)
    elif framework == "torchtitan":
        groups = _torchtitan_groups(par, a2a=a2a)
    else:
        groups = _megatron_groups(par, tied=tied, a2a=a2a)
    groups = [g for g in groups if g.size > 1]
    if profile.compute_capability <= 0:  # Ascend: HCCL's domains, no CUDA context
        if not groups:
            return RuntimeReserve((), ())
        part = ReservePart(
            f"HCCL {len(groups)} communicator{'s' if len(groups) > 1 else ''}",
            len(groups) * HCCL_COMMUNICATOR_BYTES,
            f"{_names(groups)}; 2 · HCCL_BUFFSIZE 200 MB each",
        )
        return RuntimeReserve((part,), tuple(groups))
    parts = [ReservePart("CUDA context", CUDA_CONTEXT_BYTES, "PyTorch's, lazy module loading")]
    if groups:
        pairs = sum(1 for g in groups if g.size == 2)
        nccl = pairs * NCCL_PAIR_COMMUNICATOR_BYTES + (len(groups) - pairs) * NCCL_COMMUNICATOR_BYTES
        parts.append(
            ReservePart(
                f"NCCL {len(groups)} communicator{'s' if len(groups) > 1 else ''}",
                nccl,
                f"{_names(groups)}; 688 MB each, 544 at two ranks",
            )
        )
    switch = profile.compute_capability >= 9.0 and profile.intra_node_links == 0
    nodes = math.ceil(par.dp * par.tp * par.pp * par.cp / par.devices_per_node)
    nvls = [g for g in groups if g.bulk and g.local >= 2] if switch else []
    if nvls:
        channels = nvls_channels(profile.compute_capability, nodes)
        parts.append(
            ReservePart(
                "NVLS",
                sum(channels * NVLS_HEAD_CHANNEL_BYTES * g.local for g in nvls),
                f"{', '.join(g.name for g in nvls)}; {channels} channels · 2 MiB per rank in the node",
            )
        )
    peers = sum(g.p2p_peers for g in groups)
    if peers:
        said = ", ".join(f"{g.name} {g.p2p_peers}" for g in groups if g.p2p_peers)
        parts.append(ReservePart("NCCL send/receive", peers * NCCL_P2P_PEER_BYTES, f"peers in the node: {said}"))
    return RuntimeReserve(tuple(parts), tuple(groups))
