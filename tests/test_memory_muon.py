"""Megatron-Core's Muon (`training.optimizer: muon`), worked out by hand on test_memory_runs' small shapes
(bf16), with the Megatron-LM d98e8a64 source it follows (ppb_core/memory/frameworks/muon.py)."""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, body, make_run, model

from ppb_core.balance.megatron_import import import_megatron
from ppb_core.errors import InputError
from ppb_core.model.walk import walk

BASE = "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512 --bf16"


def test_muon_keeps_one_moment_for_each_matrix_element():
    # emerging_optimizers.py: matrices run Muon (one fp32 momentum buffer), norms, biases, embeddings and
    # the output layer Adam; both under the bf16 optimizer's fp32 master copy. DENSE's body layer (tp 1,
    # no ZeRO): q, k, v, o 4·64·64 = 16384 and gate, up, down 3·64·128 = 24576 are matrices, 40960
    # elements at 4 + 4 bytes; its two RMSNorms 2·64 = 128 at Adam's 12: 327680 + 1536 = 329216 bytes,
    # against Adam's 41088 · 12 = 493056.
    muon, adam = make_run(DENSE, training={"optimizer": "muon"}), make_run(DENSE)
    assert model(muon).static_breakdown(body(muon)).optimizer_bytes == 329216
    assert model(adam).static_breakdown(body(adam)).optimizer_bytes == 493056
    # the embedding table (1024 · 64) is Adam's either way
    head = next(layer for layer in walk(muon) if layer.node == "HEAD")
    assert model(muon).static_breakdown(head).optimizer_bytes == 1024 * 64 * 12
    # under the layer-wise distributed optimizer (zero 1 at dp 2) each rank steps half: 329216 / 2
    sharded = make_run(DENSE, parallel={"dp": 2}, training={"optimizer": "muon"})
    assert model(sharded).static_breakdown(body(sharded)).optimizer_bytes == 164608


def test_muon_is_megatron_s_and_not_under_fsdp():
    with pytest.raises(InputError, match="set framework megatron"):
        make_run(DENSE, training={"optimizer": "muon"}, framework="torchtitan")
    with pytest.raises(InputError, match="FSDP"):
        make_run(DENSE, parallel={"dp": 2, "fsdp": True}, training={"optimizer": "muon"})


def test_the_importer_reads_muon():
    muon = import_megatron(f"{BASE} --optimizer muon", 8, "h100-80gb")
    assert muon.raw["training"]["optimizer"] == "muon" and muon.raw["parallel"]["zero"] == 0
    # dist_muon: muon under the layer-wise distributed optimizer (arguments.py validate_args)
    dist = import_megatron(f"{BASE} --optimizer dist_muon", 8, "h100-80gb")
    assert dist.raw["training"]["optimizer"] == "muon" and dist.raw["parallel"]["zero"] == 1
    assert not dist.notes
