"""The device catalog: memory, peak 16-bit FLOPS, HBM and link bandwidths, each with its public source.

Memory is in MB of 2**20 bytes, as the descriptions count it (what `nvidia-smi` reports as MiB).
Link bandwidths are per device and per direction. Efficiencies are the fractions of peak the
time model assumes kernels and collectives reach; a run config may override every figure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    memory_mb: float
    peak_tflops: float
    hbm_bandwidth_gbs: float
    intra_node_bandwidth_gbs: float
    inter_node_bandwidth_gbs: float
    matmul_efficiency: float = 0.55
    memory_efficiency: float = 0.8
    comm_efficiency: float = 0.75

    def replace(self, **changes: float) -> DeviceProfile:
        return dataclasses.replace(self, **changes)


DEVICE_CATALOG: dict[str, DeviceProfile] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021): 80GB HBM2e (81920 MiB in nvidia-smi), 312 TFLOPS
    # BF16 dense, 2,039 GB/s; NVLink 3 600 GB/s bidirectional; one 200 Gb/s HDR InfiniBand per GPU.
    "a100-80gb": DeviceProfile("a100-80gb", 81920, 312.0, 2039.0, 300.0, 25.0),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80GB HBM3 (81559 MiB in nvidia-smi), 989 TFLOPS
    # BF16 dense, 3.35 TB/s; NVLink 4 900 GB/s bidirectional; one 400 Gb/s NDR InfiniBand per GPU.
    "h100-80gb": DeviceProfile("h100-80gb", 81559, 989.0, 3350.0, 450.0, 50.0),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): 141GB HBM3e (143771 MiB), 989 TFLOPS BF16 dense,
    # 4.8 TB/s; NVLink 4 900 GB/s bidirectional; 400 Gb/s per GPU.
    "h200": DeviceProfile("h200", 143771, 989.0, 4800.0, 450.0, 50.0),
    # NVIDIA DGX B200 datasheet: 1,440 GB HBM3e over 8 GPUs (180 GB each, 183359 MiB), 2.25 PFLOPS
    # dense FP16/BF16 per GPU, 8 TB/s; NVLink 5 1.8 TB/s bidirectional; 400 Gb/s ConnectX-7 per GPU.
    "b200": DeviceProfile("b200", 183359, 2250.0, 8000.0, 900.0, 50.0),
    # Huawei Atlas 800T A2 / Ascend 910B public specifications: 64 GB HBM2e (65536 MiB), about
    # 313 TFLOPS FP16, 1.6 TB/s; HCCS 392 GB/s within the node (7 x 56 GB/s); 200 Gb/s RoCE per NPU.
    "ascend-910b": DeviceProfile("ascend-910b", 65536, 313.0, 1600.0, 196.0, 25.0),
    # Fallback when a run config states only memory_mb: H100-like rates.
    "generic": DeviceProfile("generic", 81559, 989.0, 3350.0, 450.0, 50.0),
}
