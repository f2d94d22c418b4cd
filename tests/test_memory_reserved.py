"""What the caching allocator reserves for a torchtitan FSDP2 stage (ppb_core/memory/reserved.py): its pools
stream by stream and the eager loss's free hole. Hand counts on DENSE (tests/test_memory_runs.py): HEAD 65536
parameters (1024·64), each of the 4 blocks 41088, TAIL 65600 (norm 64 + output 65536); seq 64, one sequence:
64 tokens, 1024 logits each; bf16 gathers (2 bytes), fp32 sharded gradients (4)."""

from __future__ import annotations

import json
import weakref
from typing import Any

import pytest

pytest.importorskip("torch")

import torch
import torch.nn.functional as F
from test_memory_runs import DENSE, layers, make_run, model
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ppb_core.estimate.run import estimate
from ppb_core.memory import run_stage_peaks
from ppb_core.memory.reserved import copy_in_bytes, reserved_pools
from ppb_core.model.walk import walk
from ppb_core.tables.estimate import estimate_from_frame, estimate_to_frame

# 64 tokens · 1024 logits at 2 bytes: the bf16 logits
LOGITS_BF16 = 2 * 64 * 1024


def _titan(**kwargs):
    return make_run(DENSE, framework="torchtitan", **kwargs)


def _hole(run) -> float:
    memory = model(run)
    return memory.rules.loss_hole_bytes(layers(run)["TAIL"].kind, memory.setup)


def test_the_eager_loss_leaves_its_bf16_logits_free():
    assert LOGITS_BF16 == 131072
    assert _hole(_titan(parallel={"dp": 2})) == LOGITS_BF16
    # under TP's loss_parallel the vocabulary shard's: 2 · 64 · 512
    assert _hole(_titan(parallel={"dp": 2, "tp": 2})) == 65536
    # the pipeline keeps the logits (stage.py fwd_cache): the freed copy fits the first fp32 buffer exactly
    assert _hole(_titan(parallel={"dp": 2, "pp": 2}, training={"micro_batches": 2})) == 0
    # compiled, the loss keeps the logits and makes no fp32 buffer a logit
    assert _hole(_titan(parallel={"dp": 2}, timing={"torch_compile": True})) == 0
    # Megatron's runs have no such rule: no pools at all
    megatron = make_run(DENSE, framework="megatron", parallel={"dp": 2})
    peak = run_stage_peaks(megatron)[0]
    assert reserved_pools(model(megatron), walk(megatron), peak) is None


def test_the_copy_in_stream_holds_two_consecutive_units():
    # split units in forward order HEAD, four blocks, TAIL; each unit's bf16 output, and the next unit's shard
    # copy (half at dp 2) beside it: (last block, TAIL) 2·41088 + 2·65600·1.5 = 278,976 is the largest
    # ((HEAD, first block) 2·65536 + 2·41088·1.5 = 254,336; two blocks 205,440)
    run = _titan(parallel={"dp": 2})
    stage = [layer for layer in walk(run) if layer.stage == 0]
    assert copy_in_bytes(model(run), stage) == 278976
    # root units: the embedding, final norm and output layer one unit gathered first, its own shard copy beside
    # it, 2·(65536 + 65600)·1.5 = 393,408, more than it beside the first block's, 262,272 + 2·41088·1.5 = 385,536
    root = _titan(parallel={"dp": 2}, timing={"fsdp_units": "root"})
    assert copy_in_bytes(model(root), [layer for layer in walk(root) if layer.stage == 0]) == 393408


def test_the_pools_of_a_stage():
    run = _titan(parallel={"dp": 2})
    memory, layer_walk = model(run), walk(run)
    peak = run_stage_peaks(run, memory, layer_walk)[0]
    pools = reserved_pools(memory, layer_walk, peak)
    assert pools is not None and peak.moment == "loss"
    # every sharded fp32 gradient: (65536 + 4·41088 + 65600) / 2 · 4 = 590,976
    assert pools.reduce_scatter_bytes == 590976
    assert pools.loss_hole_bytes == LOGITS_BF16 and pools.copy_in_bytes == 278976
    # the loss runs without the gradients (zero_grad before the forward): its moment plus the hole, where the
    # optimizer step's moment, less the gradients on their own stream, is smaller
    assert pools.compute_bytes == peak.moments["loss"] + LOGITS_BF16
    assert pools.compute_bytes > peak.moments["optimizer"] - 590976
    assert pools.total_bytes == pools.compute_bytes + 278976 + 590976


class _Events(TorchDispatchMode):
    """Each storage an op makes, in order, and its free (a weak-reference finalizer): (address, bytes, +1 or −1)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[int, int, int]] = []
        self._seen: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key in inputs or key in self._seen:
                continue
            self._seen.add(key)
            self.events.append((key, storage.nbytes(), 1))
            weakref.finalize(storage, self._freed, key, storage.nbytes())
        return out

    def _freed(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.events.append((key, nbytes, -1))


def _replay(events: list[tuple[int, int, int]], small: int) -> tuple[int, int]:
    """(the most allocated, the mapped extent then) of one stream's segment under the caching allocator's rules
    (c10/cuda/CUDACachingAllocator.cpp): the smallest free block that fits, split from its start; else pages
    mapped after the last block, which a free last block joins. Requests of *small* bytes or fewer go to the
    small pool and are left out."""
    blocks: list[list[int]] = []  # [start, size, key or -1], in address order
    most = at_most = 0
    for key, nbytes, sign in events:
        if nbytes <= small:
            continue
        if sign < 0:
            index = next(i for i, b in enumerate(blocks) if b[2] == key)
            blocks[index][2] = -1
            for i in range(len(blocks) - 1, 0, -1):  # merge free neighbours
                if blocks[i][2] == -1 and blocks[i - 1][2] == -1:
                    blocks[i - 1][1] += blocks.pop(i)[1]
            continue
        fits = [i for i, b in enumerate(blocks) if b[2] == -1 and b[1] >= nbytes]
        if fits:
            index = min(fits, key=lambda i: (blocks[i][1], blocks[i][0]))
            start, size, _ = blocks[index]
            blocks[index] = [start, nbytes, key]
            if size > nbytes:
                blocks.insert(index + 1, [start + nbytes, size - nbytes, -1])
        elif blocks and blocks[-1][2] == -1:
            blocks[-1][1:] = [nbytes, key]
        else:
            end = blocks[-1][0] + blocks[-1][1] if blocks else 0
            blocks.append([end, nbytes, key])
        allocated = sum(b[1] for b in blocks if b[2] != -1)
        if allocated > most:
            most, at_most = allocated, blocks[-1][0] + blocks[-1][1]
    return most, at_most


def test_the_hole_measured_on_the_cpu():
    # torchtitan 9dec370 train.py: pred = model(...); loss = loss_fn(pred, labels) with loss_fn's
    # F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)); del pred; loss.backward(). 128 tokens of
    # an 8192 vocabulary (2 MiB of bf16 logits, above the 1 MiB small-pool limit); h 16 keeps the weight's
    # gradient (256 KiB) in the small pool.
    tokens, vocab, hidden = 128, 8192, 16
    generator = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, hidden, generator=generator, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(vocab, hidden, generator=generator, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(vocab, (1, tokens), generator=generator)
    events = _Events()
    with events:
        pred = (h @ weight.t()).view(1, tokens, vocab)
        loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
        del pred
        loss.backward()
    most, mapped = _replay(events.events, small=2**20)
    # the kept log-probabilities, nll_loss's zeros and log_softmax's gradient: 3 · 4 bytes a logit
    assert most == 3 * 4 * tokens * vocab
    # and the 16-bit logits' 2 bytes a logit free below them: the rule's bc·T·v
    rule = make_run({**DENSE, "vocab_size": vocab}, framework="torchtitan", parallel={"dp": 2},
                    training={"seq_length": tokens})  # fmt: skip
    assert mapped - most == 2 * tokens * vocab == _hole(rule)


def test_the_estimate_carries_the_pools_through_its_tables():
    # `ppb estimate` gives each torchtitan FSDP2 stage its pools (JSON `allocator_reserved`), which the stored
    # tables keep; a Megatron run has none
    run = _titan(parallel={"dp": 2})
    result = estimate(run)
    (pools,) = result.reserved
    memory, layer_walk = model(run), walk(run)
    assert pools == reserved_pools(memory, layer_walk, run_stage_peaks(run, memory, layer_walk)[0])
    data = result.to_json()
    assert data["allocator_reserved"][0]["reserved_bytes"] == pools.total_bytes
    assert estimate_from_frame(estimate_to_frame(result)).to_json() == json.loads(json.dumps(data))
    assert "allocator_reserved" not in estimate(make_run(DENSE, parallel={"dp": 2})).to_json()
