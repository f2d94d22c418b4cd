"""The device catalog: memory, peak 16-bit FLOPS, HBM and link bandwidths, each with its public source.

Memory is in MB of 2**20 bytes, as the descriptions count it (what `nvidia-smi` reports as MiB).
Rates are decimal: TFLOPS = 1e12 FLOP/s, GB/s = 1e9 B/s. Peak FLOPS are dense (no structured
sparsity) 16-bit tensor-core figures. Link bandwidths are per device and per direction: the
intra-node figure is half the bidirectional NVLink/HCCS figure vendors quote, the inter-node one
a device's share of the node's scale-out NICs (one NIC per device on the systems below).

Efficiencies are the fractions of peak the time model assumes kernels and collectives reach (the
MFU of the matmuls, the achieved share of HBM bandwidth of element-wise kernels, NCCL's bus
bandwidth over the link rate); they are assumptions to calibrate, not datasheet figures. A run
config may override every figure (`device:` in the run config, `ppb_core.config.run.Device`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    memory_mb: float
    peak_tflops: float  # dense 16-bit tensor-core peak
    hbm_bandwidth_gbs: float
    intra_node_bandwidth_gbs: float  # per direction
    inter_node_bandwidth_gbs: float  # per direction
    matmul_efficiency: float = 0.55
    memory_efficiency: float = 0.8
    comm_efficiency: float = 0.75
    # Cost of one step of a collective (one hop of a ring, one peer of an all-to-all): launch and
    # link latency, a few microseconds for NCCL/HCCL on one node. An assumption to calibrate.
    collective_latency_us: float = 5.0

    def replace(self, **changes: float) -> DeviceProfile:
        return dataclasses.replace(self, **changes)


DEVICE_CATALOG: dict[str, DeviceProfile] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM4 80GB: 80GB HBM2e (81920 MiB in nvidia-smi),
    # 312 TFLOPS BF16/FP16 dense, 2,039 GB/s; NVLink 3 600 GB/s bidirectional (300 per direction);
    # DGX A100 user guide: eight 200 Gb/s HDR InfiniBand adapters, one per GPU (25 GB/s).
    "a100-80gb": DeviceProfile("a100-80gb", 81920, 312.0, 2039.0, 300.0, 25.0),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM5: 80GB HBM3 (81559 MiB in nvidia-smi), 989 TFLOPS
    # BF16 dense (1,979 with sparsity), 3.35 TB/s; NVLink 4 900 GB/s bidirectional; DGX H100:
    # eight 400 Gb/s ConnectX-7 NDR adapters, one per GPU (50 GB/s).
    "h100-80gb": DeviceProfile("h100-80gb", 81559, 989.0, 3350.0, 450.0, 50.0),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM: 141GB HBM3e (143771 MiB in nvidia-smi), 989 TFLOPS
    # BF16 dense, 4.8 TB/s; NVLink 4 900 GB/s bidirectional; DGX H200: 400 Gb/s per GPU.
    "h200": DeviceProfile("h200", 143771, 989.0, 4800.0, 450.0, 50.0),
    # NVIDIA DGX B200 datasheet: 1,440 GB HBM3e over 8 GPUs (nvidia-smi shows 183359 MiB per GPU,
    # e.g. NVIDIA/TensorRT-LLM issue #10278), 2.25 PFLOPS dense BF16 per GPU (4.5 with sparsity;
    # also torchao's roofline table), NVLink 5 1.8 TB/s bidirectional, 400 Gb/s ConnectX-7 per GPU.
    # HBM: the datasheet says 8 TB/s; the driver's 7680-bit bus at 3996 MHz DDR gives 7.67 TB/s
    # (pytorch/ao pull request #4002), which is what kernels can approach, so we use that.
    "b200": DeviceProfile("b200", 183359, 2250.0, 7672.0, 900.0, 50.0),
    # Huawei Ascend 910B (Atlas 800T A2 training server) public specifications: 64 GB HBM2e
    # (65536 MiB), 1.6 TB/s; about 313 TFLOPS FP16 for the 910B3 (the 910B2 measures ~315 TFLOPS
    # on 4096^3 FP16/BF16 GEMMs, zzc0721/torch-performance-test-data issue #109, so its peak is
    # higher: set peak_tflops for that part); HCCS 392 GB/s within the node (7 links of 56 GB/s,
    # bidirectional), 200 Gb/s RoCE per NPU.
    "ascend-910b": DeviceProfile("ascend-910b", 65536, 313.0, 1600.0, 196.0, 25.0),
    # Fallback when a run config states only memory_mb: H100-like rates.
    "generic": DeviceProfile("generic", 81559, 989.0, 3350.0, 450.0, 50.0),
}
