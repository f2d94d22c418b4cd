"""Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"), Table 2
and the GPT-3 175B figures of §6: per-layer activation bytes of a GPT layer, reproduced exactly.

The layer: LayerNorm, 4h GeLU MLP, attention without flash kernels, dropout (1-byte masks) on the
attention probabilities and after the projection and the MLP, 16-bit activations. Selective
recompute is "the attention core recomputed": softmax output, its dropout mask and the dropout
output dropped (softmax 0, dropout 0, headCast 0), everything else kept.
"""

from __future__ import annotations

import pytest
from small_models import gpt_spec
from test_memory_runs import body, make_run

from ppb_core.memory import MemoryModel
from ppb_core.model.switches import KEEP_ALL, LayerType

NOT, SEL, FULL = LayerType.NOT_REC_LAYER, LayerType.SEL_REC_LAYER, LayerType.FULL_REC_LAYER
ATTENTION_CORE = dict(KEEP_ALL, softmax=0, dropout=0, headCast=0)


def gpt(h: int, a: int, s: int, layers: int = 4, vocab: int = 51200) -> dict:
    return gpt_spec(h, a, s, layers, vocab)


def layer_bytes(h: int, a: int, s: int, b: int, t: int, sp: bool, state: LayerType, switches=None) -> float:
    run = make_run(
        gpt(h, a, s),
        parallel={"tp": t, "sequence_parallel": sp},
        training={"seq_length": s, "micro_batch_size": b, "flash_attention": False},
    )
    return MemoryModel(run).activation_bytes(body(run), state, switches)


# s, b, h, a, t with 5as/h = 5·8·256/512 = 20 and 24/t, 34/t whole multiples of 1/2: sbh = 262144.
S, B, H, A, T = 256, 2, 512, 8, 4
SBH = S * B * H


@pytest.mark.parametrize(
    ("row", "t", "sp", "state", "switches", "expected"),
    [
        # no parallelism: sbh(34 + 5as/h) = sbh(34 + 20) = 54 sbh
        ("no parallelism", 1, False, NOT, None, SBH * (34 + 5 * A * S / H)),
        # TP: sbh(10 + 24/t + 5as/(ht)) = sbh(10 + 6 + 5) = 21 sbh
        ("TP", T, False, NOT, None, SBH * (10 + 24 / T + 5 * A * S / (H * T))),
        # TP + SP: sbh(34/t + 5as/(ht)) = sbh(8.5 + 5) = 13.5 sbh
        ("TP + SP", T, True, NOT, None, SBH * (34 / T + 5 * A * S / (H * T))),
        # TP + selective: sbh(10 + 24/t) = 16 sbh
        ("TP + selective", T, False, SEL, ATTENTION_CORE, SBH * (10 + 24 / T)),
        # TP + SP + selective: 34 sbh/t = 8.5 sbh
        ("TP + SP + selective", T, True, SEL, ATTENTION_CORE, 34 * SBH / T),
        # full recompute: 2sbh, the layer's input
        ("full recompute", T, False, FULL, None, 2 * SBH),
        # full recompute with SP: the input as Megatron-LM stores it, sequence-sharded: 2sbh/t
        ("full recompute + SP", T, True, FULL, None, 2 * SBH / T),
        # no parallelism + selective: sbh·34
        ("selective", 1, False, SEL, ATTENTION_CORE, 34 * SBH),
    ],
)
def test_table_2_rows(row, t, sp, state, switches, expected):
    assert layer_bytes(H, A, S, B, t, sp, state, switches) == expected, row


def test_table_2_at_another_shape():
    # h 1024, a 16, s 512, b 1, t 8: 5as/h = 40; TP: sbh(10 + 3 + 5) = 18 sbh; TP+SP: sbh(4.25 + 5)
    sbh = 512 * 1024
    assert layer_bytes(1024, 16, 512, 1, 8, False, NOT) == 18 * sbh
    assert layer_bytes(1024, 16, 512, 1, 8, True, NOT) == sbh * (34 / 8 + 5)
    assert layer_bytes(1024, 16, 512, 1, 8, True, SEL, ATTENTION_CORE) == 34 * sbh / 8


def test_gpt3_175b_first_stage():
    """GPT-3 175B (h 12288, a 96, s 2048, b 1, t 8, p 8, 96 layers, interleave 3).

    1F1B keeps p micro-batches of L/p layers on the first stage, times 1 + (p−1)/(p·v)
    interleaved (the paper's estimate): 66.84 GiB with TP alone, 12.35 GiB with SP + selective.
    By hand: TP alone is sbh(10 + 3 + 10) = 23 sbh per layer, 23·2048·12288 = 578,813,952 bytes;
    × 8 × 12 × 31/24 = 71,776,305,152 bytes = 66.84 GiB. SP + selective is 34/8 sbh =
    106,954,752 bytes per layer, × 96 × 31/24 = 13,262,389,248 bytes = 12.35 GiB.
    """
    h, a, s, t, p, layers, v = 12288, 96, 2048, 8, 8, 96, 3
    spec = gpt(h, a, s, layers=layers)

    def per_layer(sp: bool, state: LayerType, switches=None) -> float:
        run = make_run(
            spec,
            parallel={"tp": t, "pp": p, "vpp": v, "schedule": "interleaved", "sequence_parallel": sp},
            training={"seq_length": s, "micro_batch_size": 1, "micro_batches": 64, "flash_attention": False},
        )
        return MemoryModel(run).activation_bytes(body(run), state, switches)

    tp_alone, sp_selective = per_layer(False, NOT), per_layer(True, SEL, ATTENTION_CORE)
    assert tp_alone == 578_813_952
    assert sp_selective == 106_954_752
    factor = 1 + (p - 1) / (p * v)
    first_stage = p * (layers // p) * factor
    assert round(tp_alone * first_stage / 2**30, 2) == 66.84
    assert round(sp_selective * first_stage / 2**30, 2) == 12.35
