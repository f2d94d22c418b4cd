"""What the memory formulas read of a run: sizes, parallel degrees and byte widths, in one frozen record.

Formulas take a `MemorySetup` rather than a `RunConfig` so that tests can state a setup by hand
and the memo of a `MemoryModel` can key on plain values.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppb_core.config.run import RunConfig

# How the buffers of one layer add up (docs/memory.md, "Communication buffers"):
# "layered": transient workspaces are used one at a time, tensors kept for the backward add up;
# "reference": the reference's §7.4 expression max(dp, tp, cp) + ep over whole groups.
BUFFER_RULES: tuple[str, ...] = ("layered", "reference")


@dataclass(frozen=True)
class MemorySetup:
    seq_length: int
    micro_batch_size: int = 1
    dtype_bytes: int = 2  # parameters and activations
    grad_bytes: int = 4
    state_bytes: int = 12  # optimizer states per parameter (fp32 master copy and moments)
    state_bytes_stated: bool = False  # the run config states them (training.optimizer_state_bytes)
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = False
    cp_variant: str = "ring"  # "ring" | "ulysses"
    shard_level: int = 1  # ZeRO: 1 optimizer states, 2 and gradients, 3 (or FSDP) and parameters
    flash_attention: bool = True
    dropless: bool = True
    capacity_factor: float = 1.0
    dropless_imbalance: float = 1.0
    buffer_rule: str = "layered"
    fp8_cache: str = "none"  # none | linear | deepseek (ppb_core.memory.precision)
    framework: str = "mindformers"  # whose rules apply (ppb_core.memory.frameworks); the formulas alone here

    def __post_init__(self) -> None:
        if self.buffer_rule not in BUFFER_RULES:
            raise ValueError(f"buffer_rule must be one of {BUFFER_RULES}, got {self.buffer_rule!r}")
        if self.cp_variant not in ("ring", "ulysses"):
            raise ValueError(f"cp_variant must be ring or ulysses, got {self.cp_variant!r}")

    @classmethod
    def from_run(cls, run: RunConfig, buffer_rule: str = "layered") -> MemorySetup:
        par, train = run.parallel, run.training
        return cls(
            seq_length=train.seq_length,
            micro_batch_size=train.micro_batch_size,
            dtype_bytes=train.dtype_bytes,
            grad_bytes=train.grad_bytes,
            state_bytes=train.state_bytes,
            state_bytes_stated=train.optimizer_state_bytes is not None,
            dp=par.dp,
            tp=par.tp,
            pp=par.pp,
            cp=par.cp,
            ep=par.ep,
            etp=par.expert_tp,
            sequence_parallel=par.sequence_parallel,
            cp_variant=par.cp_variant,
            shard_level=run.shard_level,
            flash_attention=train.flash_attention,
            dropless=train.moe.dropless,
            capacity_factor=train.moe.capacity_factor,
            dropless_imbalance=train.moe.dropless_imbalance,
            buffer_rule=buffer_rule,
            fp8_cache=train.fp8_cache,
            framework=run.framework,
        )

    @property
    def sp(self) -> int:
        """The split of what TP leaves whole: t under sequence parallelism, else 1."""
        return self.tp if self.sequence_parallel and self.tp > 1 else 1

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on one device's sequence chunk: s·b/cp."""
        return self.seq_length * self.micro_batch_size / self.cp

    @property
    def whole_tokens(self) -> float:
        """Tokens of the tensors TP leaves whole (norms, residual, dropout masks): s·b/(cp·sp)."""
        return self.tokens / self.sp

    @property
    def data_group(self) -> int:
        """Ranks that hold the same non-expert parameters: ZeRO shards over dp·cp."""
        return self.dp * self.cp

    @property
    def expert_data_group(self) -> int:
        """Ranks that hold the same expert parameters: dp·cp·tp/(ep·etp)."""
        return self.dp * self.cp * self.tp // (self.ep * self.etp)

    @property
    def gathers(self) -> bool:
        """Whether column-parallel linears all-gather their sequence-parallel inputs."""
        return self.sp > 1
