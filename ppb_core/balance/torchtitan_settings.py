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
* `mode = "selective"`, `selective_ac_option = N` (`_apply_layer_sac`): a module-level counter
  (`_layer_sac_count`, one per process, so per rank, never reset) counts the blocks that rank wraps,
  from 1; blocks N, 2N, ... are checkpointed whole, the others not at all: FULL on every N-th block
  of a rank, NONE on the rest (`EveryNth`). Within a model part `apply_ac` walks `layers` in its
  ModuleDict order (the blocks' model order: pipeline_module_split deletes the blocks a stage does not
  hold and keeps the others' order); `pipeline_llm` (distributed/pipeline_parallel.py) then calls the
  parallelize function, so `apply_ac`, on the rank's model parts in the order `_get_stage_indices`
  gives them: rank + chunk·P for looped schedules, (rank, 2P − 1 − rank) for V ones, ppb's chunk
  order either way. So the count runs on across a rank's chunks: a cell's FULL blocks are where
  (the rank's body layers in earlier chunks + the block's place in the cell) is a multiple of N.
  Releases: from v0.1.0 to 094377185 (2025-09-24, in v0.2.0) the counter was an attribute of
  `ptd_checkpoint_wrapper` (`_count`, models/llama3/infra/parallelize.py at v0.1.0), as process-wide;
  114151ad4 (2026-03-23, #2357, after v0.2.2; no release holds it yet) removes the option, selective
  being the op policy alone since.
* `mode = "memory_budget"` needs torch.compile's partitioner: not modelled, not offered.

No setting recomputes the tensor-parallel gathers alone (COMM) or adds them to a selective set
(BOTH): the op policy fixes which ops it saves. So a torchtitan run's balancer considers NONE, FULL
and (for the op policy) SLCT only (`runnable`), and its plan is solved under these settings alone
(`program.solve`), so that what it prints is what torchtitan runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ppb_core.balance.megatron import Setting
from ppb_core.config.recompute import TorchtitanRecompute
from ppb_core.payload.sapp import LayerSet, keep_options


def op_policy(recompute: Any) -> bool:
    """Whether a run's `training.recompute` is torchtitan's per-op policy in torchtitan's words."""
    return isinstance(recompute, TorchtitanRecompute) and recompute.mode == "selective" and recompute.option == "op"


def runnable_options(op: bool) -> tuple[str, ...]:
    """The ppb options a torchtitan block can run: NONE, FULL, and SLCT when SLCT is the op policy."""
    return ("NONE", "SLCT", "FULL") if op else ("NONE", "FULL")


def runnable(layers: LayerSet, op: bool) -> LayerSet:
    """The layer set with the bodies' options torchtitan cannot run withdrawn (`runnable_options`)."""
    return keep_options(layers, runnable_options(op))


@dataclass(frozen=True)
class EveryNth(Setting):
    """`selective_ac_option = N`: blocks N, 2N, ... of a rank fully checkpointed (`_apply_layer_sac`),
    counted across the rank's chunks: a cell's options follow from its layers and *before*, the body
    layers its rank holds in earlier chunks (only before mod N matters: `period`)."""

    rank_wide: ClassVar[bool] = True

    @property
    def period(self) -> int:
        return self.num_layers

    def cell_options(self, layers: int, before: int = 0) -> dict[str, int]:
        # the rank's counts before + 1 ... before + layers: the multiples of N among them
        full = (before + layers) // self.num_layers - before // self.num_layers
        return {"FULL": full, "NONE": layers - full}

    def along(self, layers: int, before: int = 0) -> list[str]:
        # `_layer_sac_count % ac_freq == 0` after counting the block: the N-th, 2N-th, ... block of the rank
        return ["FULL" if (before + index + 1) % self.num_layers == 0 else "NONE" for index in range(layers)]

    def flags(self, modules: Any = None) -> list[str]:
        raise ValueError("torchtitan's every-N-th block setting has no Megatron-LM flags")

    def describe(self) -> str:
        return f"every {_ordinal(self.num_layers)} block of a rank fully recomputed"


def _ordinal(n: int) -> str:
    """2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def settings(options: tuple[str, ...], most_layers: int, every_nth: bool = True) -> list[Setting]:
    """torchtitan's settings over the options considered: none, selective op (SLCT), every N-th block
    for 2 ≤ N ≤ the most body layers a rank can hold, over all its chunks (larger N checkpoints none),
    full last; without *every_nth* (a release from 114151ad4 on: `torchtitan_op_sac_only`) no N-th."""
    found: list[Setting] = []
    if "NONE" in options:
        found.append(Setting("none"))
    if "SLCT" in options:
        found.append(Setting("selective"))
    if every_nth and "NONE" in options and "FULL" in options:
        found += [EveryNth("every", n) for n in range(2, most_layers + 1)]
    if "FULL" in options:
        found.append(Setting("full"))
    return found


def toml_keys(setting_name: str, num_layers: int, op_only: bool = False) -> dict[str, str] | None:
    """The `[activation_checkpoint]` keys of a setting (`Setting.name`, its N); *op_only*: torchtitan from
    114151ad4 (releases `torchtitan_op_sac_only`), whose selective is the op policy with no option key and
    which has no every-N-th setting (None)."""
    if setting_name == "none":
        return {"mode": "none"}
    if setting_name == "full":
        return {"mode": "full"}
    if setting_name == "selective":
        return {"mode": "selective"} if op_only else {"mode": "selective", "selective_ac_option": "op"}
    return None if op_only else {"mode": "selective", "selective_ac_option": str(num_layers)}
