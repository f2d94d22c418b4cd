"""MindFormers: the SAPP/HyperParallel conventions (hyper-parallel's `_ppb.py` and MemEst) (MindFormers at fd4deebc).

MindFormers runs MindSpore's graph mode; what it keeps is what its recompute configuration does
not recompute, which is SAPP's switch vocabulary:

* `select_recompute` names ops to recompute by pattern (mindformers/models/utils.py,
  `LayerSetting.__init__`: the default patterns are the feed-forward's `mul` and `silu`, ppb's
  `ffAct`), `recompute` whole layers per stage (`LayerSetting._check_layer_rule`), each as a count
  of layers per (interleave, stage) cell.
* `select_comm_recompute` recomputes the communication ops after the norms (default pattern
  `.*\\.norm`, set with `add_prim_attr` in `LayerSetting._set_select_recompute`): without it the
  sequence-parallel all-gather's output is kept for the backward, which is ppb's kept tp buffer
  under the `gather` switch, and COMM/BOTH drop it.
* Communication workspaces are counted in each layer's "once" part, as the SAPP payload counts
  them (the balancer's `memory_parameter`).

These are `FrameworkRules`' answers unchanged: SAPP's figures are MindFormers' figures.
"""

from __future__ import annotations

from ppb_core.memory.frameworks.base import FrameworkRules


class MindFormersRules(FrameworkRules):
    name = "mindformers"
