"""What torchtitan v0.2.2 (commit 73a0e697) can run of ppb's recompute options, and its settings.

torchtitan's `[activation_checkpoint]` (torchtitan/config/job_config.py `ActivationCheckpoint`) is
read by torchtitan/distributed/activation_checkpoint.py `apply_ac`, which wraps every transformer
block of a model part the same way (`_apply_ac_to_transformer_block`):

* `mode = "none"`: apply_ac is not called (models/llama3/infra/parallelize.py `parallelize_llama`):
  every block NONE.
* `mode = "full"` (`_apply_full_ac`): every block checkpointed whole, FULL.
* `mode = "selective"`, `selective_ac_option = "op"` (`_apply_op_sac`): every block under the one
  per-op policy (save mm outputs but every second one, attention, reduce-scatter, max; recompute
  the rest, the all-gathers among them). ppb's SLCT when the run config says this policy in
  torchtitan's words (`{mode: selective, option: op}`); ppb's own switch sets are not it.
* `mode = "selective"`, `selective_ac_option = N` (`_apply_layer_sac`): a process-wide counter
  (`_layer_sac_count`) counts the blocks that rank wraps, across its model parts, from 1; blocks N,
  2N, ... are checkpointed whole, the others not at all: FULL on every N-th block of a rank, NONE
  on the rest (`EveryNth`). At one chunk per rank a rank's blocks are one cell, so the setting is
  the cell's own; with several chunks the counter runs on across them and is not searched.
* `mode = "memory_budget"` needs torch.compile's partitioner: not modelled, not offered.

No setting recomputes the tensor-parallel gathers alone (COMM) or adds them to a selective set
(BOTH): the op policy fixes which ops it saves. So a torchtitan run's balancer considers NONE, FULL
and (for the op policy) SLCT only (`runnable`), and its plan is solved under these settings alone
(`program.solve`), so that what it prints is what torchtitan runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ppb_core.balance.megatron import Setting
from ppb_core.config.recompute import TorchtitanRecompute
from ppb_core.payload.sapp import LayerRecord, LayerSet


def op_policy(recompute: Any) -> bool:
    """Whether a run's `training.recompute` is torchtitan's per-op policy in torchtitan's words."""
    return isinstance(recompute, TorchtitanRecompute) and recompute.mode == "selective" and recompute.option == "op"


def runnable_options(op: bool) -> tuple[str, ...]:
    """The ppb options a torchtitan block can run: NONE, FULL, and SLCT when SLCT is the op policy."""
    return ("NONE", "SLCT", "FULL") if op else ("NONE", "FULL")


def _kept(record: LayerRecord, options: tuple[str, ...]) -> LayerRecord:
    return LayerRecord(
        name=record.name,
        type=record.type,
        nb_layer=record.nb_layer,
        forward_time=record.forward_time,
        memory_parameter_mb=record.memory_parameter_mb,
        memory_mb={o: v for o, v in record.memory_mb.items() if o in options or record.type != "BODY"},
        backward_time={o: v for o, v in record.backward_time.items() if o in options or record.type != "BODY"},
        model_name=record.model_name,
        models=record.models,
    )


def runnable(layers: LayerSet, op: bool) -> LayerSet:
    """The layer set with the bodies' options torchtitan cannot run withdrawn (`runnable_options`)."""
    options = tuple(o for o in layers.options if o in runnable_options(op))
    if options == layers.options:
        return layers
    return LayerSet(
        heads=layers.heads,
        bodies=tuple(_kept(body, options) for body in layers.bodies),
        tails=layers.tails,
        options=options,
    )


@dataclass(frozen=True)
class EveryNth(Setting):
    """`selective_ac_option = N`: blocks N, 2N, ... of a rank fully checkpointed (`_apply_layer_sac`),
    for a cell that is all of a rank's blocks (one chunk per rank)."""

    def cell_options(self, layers: int) -> dict[str, int]:
        full = layers // self.num_layers
        return {"FULL": full, "NONE": layers - full}

    def along(self, layers: int) -> list[str]:
        # `_layer_sac_count % ac_freq == 0` after counting the block: the N-th, 2N-th, ... block
        return ["FULL" if (index + 1) % self.num_layers == 0 else "NONE" for index in range(layers)]

    def flags(self, modules: Any = None) -> list[str]:
        raise ValueError("torchtitan's every-N-th block setting has no Megatron-LM flags")

    def describe(self) -> str:
        return f"every {self.num_layers}-th block of a rank fully recomputed"


def settings(options: tuple[str, ...], chunks: int, most_layers: int) -> list[Setting]:
    """torchtitan's settings over the options considered: none, selective op (SLCT), every N-th block
    for 2 ≤ N ≤ the most layers a cell can hold (larger N checkpoints none), full last."""
    found: list[Setting] = []
    if "NONE" in options:
        found.append(Setting("none"))
    if "SLCT" in options:
        found.append(Setting("selective"))
    if "NONE" in options and "FULL" in options and chunks == 1:
        found += [EveryNth("every", n) for n in range(2, most_layers + 1)]
    if "FULL" in options:
        found.append(Setting("full"))
    return found


def toml_keys(setting_name: str, num_layers: int) -> dict[str, str]:
    """The `[activation_checkpoint]` keys of a setting (`Setting.name`, its N)."""
    if setting_name == "none":
        return {"mode": "none"}
    if setting_name == "full":
        return {"mode": "full"}
    if setting_name == "selective":
        return {"mode": "selective", "selective_ac_option": "op"}
    return {"mode": "selective", "selective_ac_option": str(num_layers)}
