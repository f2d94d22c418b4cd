"""An option that costs no backward time and saves memory is not taken where NONE fits (issue 13).

Hand-made description (SAPP keys, `model.switches.TIME_KEY`/`MEMORY_KEY`): one body type B of four
layers, time 5 → forward 5, backward_time 10 under NONE; COMM states select_comm_time 10 (= NONE's)
and 20 MB per micro-batch against NONE's 30 MB; 1 MB parameters each. P = 2, m = 4, 1F1B, 1000 MB.

Every split of the four layers has the same iteration whatever the options (COMM's backward is
NONE's), so every plan that fits ties; the worst stage under NONE holds at most 4·1 + 2·2·30 = 124
MB (stage 0 keeps 2 micro-batches in flight with 2 layers; a 3 | 1 split: 3 + 2·3·30 = 183 MB) —
all far below 1000 MB. Tie-break (`balance/tiebreak.py`): least recompute time (0 for all), then
the fewest recomputed layers: 0, only with NONE on every layer. So the plan holds NONE everywhere.
"""

from __future__ import annotations

from ppb_core.balance import BalanceInput, balance
from ppb_core.balance.choices import _option_front
from ppb_core.model.switches import OPTIONS
from ppb_core.payload.sapp import layer_set

B = {"name": "B", "type": "BODY", "nb_layer": 4, "time": 5, "memory_parameter": 1}
B |= {"backward_time": 10, "memory_activation": 30, "memory_recompute": 10, "recompute_time": 15}
B |= {"select_comm_time": 10, "memory_select_comm": 20}


def test_none_everywhere_when_comm_is_free() -> None:
    result = balance(BalanceInput(layer_set([B]), 2, 4, 1, 1000), time_limit=60)
    assert result["status"] == "optimal"
    assert result["ties"]["recomputed_layers"] == 0
    assert result["ties"]["recompute_time"] == 0


def test_the_front_keeps_none_beside_free_comm() -> None:
    """Two layers, NONE (b 10, a 30) and COMM (b 10, a 20): COMM is no slower and leaner but recomputes,
    so NONE×2 (b 20, a 60, 0 recomputed), NONE+COMM (20, 50, 1) and COMM×2 (20, 40, 2) all stay."""
    none, comm = OPTIONS.index("NONE"), OPTIONS.index("COMM")
    backward = [0.0] * len(OPTIONS)
    activation = [0.0] * len(OPTIONS)
    backward[none] = backward[comm] = 10.0
    activation[none], activation[comm] = 30.0, 20.0
    front = _option_front(2, (none, comm), backward, activation)
    assert sorted((b, a) for b, a, _ in front) == [(20.0, 40.0), (20.0, 50.0), (20.0, 60.0)]
