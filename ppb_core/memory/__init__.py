"""The memory model: static memory, activations per op and switch, buffers, and stage peaks (docs/memory.md)."""

from ppb_core.memory.activations import ActivationFormulas, ActivationTerm
from ppb_core.memory.buffers import Buffers, BufferTerm
from ppb_core.memory.model import (
    MemoryModel,
    StateMemory,
    run_memory_fit,
    run_stage_peaks,
    run_working_set_bytes,
    run_workspace_bytes,
)
from ppb_core.memory.peak import (
    MOMENTS,
    StagePeak,
    configured_option,
    configured_options,
    run_combined_steps,
    run_in_flight,
    run_in_flight_counts,
    run_in_flight_vectors,
    stage_peaks,
)
from ppb_core.memory.setup import BUFFER_RULES, MemorySetup
from ppb_core.memory.static import StaticBytes

__all__ = [
    "BUFFER_RULES",
    "MOMENTS",
    "ActivationFormulas",
    "ActivationTerm",
    "BufferTerm",
    "Buffers",
    "MemoryModel",
    "MemorySetup",
    "StagePeak",
    "StateMemory",
    "StaticBytes",
    "configured_option",
    "configured_options",
    "run_combined_steps",
    "run_in_flight",
    "run_in_flight_counts",
    "run_in_flight_vectors",
    "run_memory_fit",
    "run_stage_peaks",
    "run_working_set_bytes",
    "run_workspace_bytes",
    "stage_peaks",
]
