"""Megatron's data-loader causal mask and get_batch's tensor-parallel broadcasts (Megatron-LM d98e8a64).

pretrain_gpt.py `get_batch` and megatron/core/utils.py `get_batch_on_this_tp_rank`: tensor-parallel rank 0
broadcasts the batch to the group, one broadcast a tensor, before the forward: the first stage tokens and
position ids (int64 `[b, s]`), the last labels (int64) and the loss mask (fp32), one stage both; each with the
bool causal mask `[b, 1, s, s]` the data loader builds by default (gpt_dataset.py
`_get_ltor_masks_and_position_ids`), which `forward_step` holds through the micro-batch's forward.
"""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, layers, make_run, model

from ppb_core.balance.megatron_import import import_megatron
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.payload.describe import describe
from ppb_core.timing.batch import batch_seconds, batch_tensors, layer_broadcasts
from ppb_core.timing.comm import Group, Links
from ppb_core.timing.iteration import batch_loading, run_iteration
from ppb_core.timing.pricer import TimeModel

LINKS = Links(
    intra_node_bytes_per_s=100e9, inter_node_bytes_per_s=25e9, latency_s=10e-6, devices_per_node=8,
    groups={"tp": Group(2, 2)},
)  # fmt: skip


def test_each_stage_broadcasts_its_tensors_and_the_mask():
    # b 2, s 4: tokens and positions 2·4·8 = 64 bytes each, labels 64, loss mask 2·4·4 = 32, mask 2·4·4 = 32
    assert batch_tensors(2, 4, first=True, last=False, mask=True) == [64, 64, 32]
    assert batch_tensors(2, 4, first=False, last=True, mask=True) == [64, 32, 32]
    assert batch_tensors(2, 4, first=True, last=True, mask=False) == [64, 64, 64, 32]
    # each broadcast over tp 2 on NVLink: bytes / 100 GB/s + 1 step of 10 µs
    expected = (64 + 64 + 32) / 100e9 + 3 * 10e-6
    assert batch_seconds(2, 4, True, False, True, LINKS) == pytest.approx(expected, rel=1e-12)
    alone = Links(100e9, 25e9, 10e-6, 8, {"tp": Group(1, 1)})
    assert batch_seconds(2, 4, True, True, True, alone) == 0.0  # tp 1: a group of one broadcasts nothing


def test_the_cells_that_read_data():
    # pp 2: the embedding's cell (0, 0) tokens, positions and the mask; the loss's (0, 1) labels, loss mask and
    # the mask; pp 1: one cell, all four and the mask
    run = make_run(DENSE, parallel={"tp": 2, "pp": 2, "world_size": 4}, framework="megatron")
    b, s = run.training.micro_batch_size, run.training.seq_length
    found = batch_loading(run, walk(run).layers, LINKS)
    assert found == {
        (0, 0): pytest.approx(batch_seconds(b, s, True, False, True, LINKS)),
        (0, 1): pytest.approx(batch_seconds(b, s, False, True, True, LINKS)),
    }
    one = make_run(DENSE, parallel={"tp": 2, "world_size": 2}, framework="megatron")
    assert batch_loading(one, walk(one).layers, LINKS) == {
        (0, 0): pytest.approx(batch_seconds(b, s, True, True, True, LINKS))
    }


def test_a_cell_broadcasts_each_tensor_once_whichever_layer_reads_it():
    # pp 1, b 1, s 64: the embedding (first in the walk) pays tokens and positions (64·8 = 512 bytes each) and
    # the mask (64·64 = 4096); the loss then only labels (512) and the loss mask (64·4 = 256): each broadcast
    # over tp 2 bytes / 100 GB/s + one 10 µs step
    one = make_run(DENSE, parallel={"tp": 2, "world_size": 2}, framework="megatron")
    shares = layer_broadcasts(one, walk(one).layers, LINKS)
    head, tail = layers(one)["HEAD"], layers(one)["TAIL"]
    assert shares == {
        head: pytest.approx((512 + 512 + 4096) / 100e9 + 3 * 10e-6, rel=1e-12),
        tail: pytest.approx((512 + 256) / 100e9 + 2 * 10e-6, rel=1e-12),
    }
    assert shares[head] + shares[tail] == pytest.approx(batch_loading(one, walk(one).layers, LINKS)[(0, 0)])
    # pp 2: two cells, each its own tensors and the mask
    two = make_run(DENSE, parallel={"tp": 2, "pp": 2, "world_size": 4}, framework="megatron")
    shares = layer_broadcasts(two, walk(two).layers, LINKS)
    assert shares[layers(two)["TAIL"]] == pytest.approx((512 + 256 + 4096) / 100e9 + 3 * 10e-6, rel=1e-12)


@pytest.mark.parametrize("broadcast", [True, False])
def test_the_descriptions_carry_the_broadcasts_in_the_first_and_last_cells(broadcast: bool) -> None:
    # the balancer schedules the descriptions' HEAD in the first cell and the TAIL in the last, where the
    # iteration adds get_batch's broadcasts (`batch_loading`): their forwards carry them, a body's does not
    run = make_run(
        DENSE, parallel={"tp": 2, "pp": 2, "world_size": 4}, framework="megatron", timing={"batch_broadcast": broadcast}
    )
    times = TimeModel(run)
    described = {desc["type"]: desc for desc in describe(run, MemoryModel(run), times)}
    links = Links.from_run(run)
    for node, first, last in (("HEAD", True, False), ("TAIL", False, True)):
        layer = layers(run)[node]
        added = batch_seconds(1, 64, first, last, True, links) * 1e3 if broadcast else 0.0
        assert described[node]["forward_time"] == pytest.approx(times.layer_times(layer, *_end(node))[0] + added)
    body = next(layer for layer in walk(run) if layer.node == "BODY")
    assert described["BODY"]["forward_time"] == times.layer_times(body, LayerType.NOT_REC_LAYER)[0]


def _end(node: str) -> tuple[LayerType, None]:
    return (LayerType.EMBEDDING_LAYER if node == "HEAD" else LayerType.OUTPUT_LAYER), None


def test_the_loss_forward_holds_the_mask():
    # DENSE at s 64, b 1, tp 1: the mask is 64·64 = 4096 bytes, beside the logits 64·1024·2 = 131072 at the
    # loss's forward (the backward holds the same logits' gradient, without the mask)
    with_mask = make_run(DENSE, framework="megatron")
    without = make_run(DENSE, framework="megatron", timing={"attention_mask_in_dataloader": False})
    tails = [layers(run)["TAIL"] for run in (with_mask, without)]
    assert model(without).loss_bytes(tails[1]) == 131072
    assert model(with_mask).loss_bytes(tails[0]) - model(without).loss_bytes(tails[1]) == 4096
    # context parallel 2: this rank's 32 queries against 64 keys, 2048 bytes
    cp = make_run(DENSE, parallel={"cp": 2, "world_size": 2}, framework="megatron")
    cp_off = make_run(
        DENSE, parallel={"cp": 2, "world_size": 2}, framework="megatron", timing={"attention_mask_in_dataloader": False}
    )
    assert model(cp).loss_bytes(layers(cp)["TAIL"]) - model(cp_off).loss_bytes(layers(cp_off)["TAIL"]) == 2048


def test_the_fused_loss_backward_copy_and_the_mask_are_not_at_once():
    # --cross-entropy-loss-fusion: the backward's fp32 scatter copy, 64·1024·4 = 262144, exceeds the forward's
    # mask (4096): the loss moment is the backward's, 131072 + 262144
    fused = make_run(DENSE, framework="megatron", timing={"cross_entropy_fusion": True})
    assert model(fused).loss_bytes(layers(fused)["TAIL"]) == 131072 + 262144


def test_the_importer_and_the_run_config():
    base = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64"
    imported = import_megatron(f"{base} --no-create-attention-mask-in-dataloader", 2, "h100-80gb")
    assert imported.raw["timing"]["attention_mask_in_dataloader"] is False and imported.notes == []
    assert "attention_mask_in_dataloader" not in import_megatron(base, 2, "h100-80gb").raw["timing"]


def test_nemo_s_data_step_broadcasts_nothing():
    # NeMo 2's gpt_data_step reads the batch on every rank (nemo/collections/llm/gpt/model/base.py): with
    # timing.batch_broadcast false the one cell's m = 4 micro-batches lose their broadcasts, tp 2, pp 1
    parallel = {"tp": 2, "world_size": 2}
    training = {"micro_batches": 4}
    on = make_run(DENSE, parallel=parallel, training=training, framework="megatron")
    off = make_run(DENSE, parallel=parallel, training=training, framework="megatron", timing={"batch_broadcast": False})
    links = Links.from_run(on)
    b, s = on.training.micro_batch_size, on.training.seq_length
    lost = run_iteration(on).breakdown["compute"] - run_iteration(off).breakdown["compute"]
    assert lost == pytest.approx(4 * batch_seconds(b, s, True, True, True, links))


@pytest.mark.parametrize("field", ["attention_mask_in_dataloader", "batch_broadcast"])
def test_megatron_s_data_loading_words_are_refused_elsewhere(field: str):
    raw = {
        "name": "x",
        "framework": "torchtitan",
        "models": [{"name": "m", "spec": DENSE}],
        "training": {"seq_length": 64},
        "device": {"name": "h100-80gb"},
        "timing": {field: False},
    }
    with pytest.raises(InputError) as caught:
        parse_run_config(raw, "run.yaml")
    assert caught.value.field == f"timing.{field}"
