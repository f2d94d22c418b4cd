"""What loading a micro-batch costs Megatron-LM's GPUs: `pretrain_gpt.py` `get_batch` (Megatron-LM d98e8a64).

On the stages that read data (the first and the last, and a stage running MTP layers:
`is_first_or_last_pipeline_stage`, `mtp_on_this_rank`) tensor-parallel rank 0 takes the batch from the
data loader and copies it to the device; `get_batch_on_this_tp_rank` (megatron/core/utils.py) then
broadcasts each tensor from it over the tensor-parallel group, one `torch.distributed.broadcast` each, waited
before the forward: with one pipeline stage (or MTP on the stage) tokens, labels, loss mask and position ids;
on the first stage tokens and position ids; on the last labels and the loss mask; and on each of these stages,
where the data loader builds it (`--create-attention-mask-in-dataloader`, the default: gpt_dataset.py
`_get_ltor_masks_and_position_ids`), the bool causal mask `[b, 1, s, s]`. Tokens, labels and positions are
int64, the loss mask fp32, all `[b, s]` of the whole sequence (context parallelism slices after,
`get_batch_on_this_cp_rank`).

NeMo 2's `gpt_data_step` (nemo/collections/llm/gpt/model/base.py) has every rank read its own batch and copy it
to the device, broadcasting nothing (`timing.batch_broadcast: false`). A broadcast runs NCCL's ring, pipelined:
the payload crosses each link once, and the last rank waits g−1 steps' latency (`broadcast_seconds`). The
host-to-device copies on rank 0 (pinned memory, `non_blocking`) are not priced: ppb's devices carry no
host-link bandwidth.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from ppb_core.config.run import RunConfig
from ppb_core.model.kinds import HeadKind, TailKind
from ppb_core.model.walk import Layer
from ppb_core.timing.comm import Links

INDEX_BYTES = 8  # tokens, labels and position ids are int64
LOSS_MASK_BYTES = 4  # the loss mask is fp32
MASK_BYTES = 1  # the attention mask is bool


def broadcast_seconds(payload_bytes: float, links: Links) -> float:
    """One broadcast of *payload_bytes* over the tensor-parallel group on NCCL's ring."""
    group = links.groups["tp"]
    if group.size <= 1 or payload_bytes <= 0:
        return 0.0
    local = links.in_node(group)
    step = links.latency_s + (links.inter_node_latency_s if local < group.size else 0.0)
    return payload_bytes / links.ring_bytes_per_s(local, group.size) + (group.size - 1) * step


def batch_tensors(micro_batch: int, seq_length: int, first: bool, last: bool, mask: bool) -> list[float]:
    """Bytes of each tensor `get_batch_on_this_tp_rank` broadcasts on a stage that holds the model's
    first layers (*first*), its loss or MTP layers (*last*), or both (module docstring)."""
    rows = micro_batch * seq_length
    tensors: list[float] = []
    if first:
        tensors += [rows * INDEX_BYTES, rows * INDEX_BYTES]  # tokens, position ids
    if last:
        tensors += [rows * INDEX_BYTES, rows * LOSS_MASK_BYTES]  # labels, loss mask
    if (first or last) and mask:
        tensors.append(micro_batch * seq_length * seq_length * MASK_BYTES)
    return tensors


def batch_seconds(micro_batch: int, seq_length: int, first: bool, last: bool, mask: bool, links: Links) -> float:
    """A micro-batch's broadcasts on such a stage, one after another."""
    return sum(broadcast_seconds(size, links) for size in batch_tensors(micro_batch, seq_length, first, last, mask))


def reads(layer: Layer) -> tuple[bool, bool]:
    """(first, last): whether the layer's cell reads the tokens and positions (the token embedding, or MTP
    layers, which embed the tokens again) and the labels and loss mask (the loss, or MTP layers' losses)."""
    first = isinstance(layer.kind, HeadKind)
    last = isinstance(layer.kind, TailKind) and (layer.kind.has_output or layer.kind.has_mtp_modules)
    first = first or (last and isinstance(layer.kind, TailKind) and layer.kind.has_mtp_modules)
    return first, last


def layer_broadcasts(
    run: RunConfig, layers: Sequence[Layer], links: Links, cell_of: Callable[[Layer], Hashable] | None = None
) -> dict[Layer, float]:
    """Each data-reading layer's share of its cell's `get_batch` seconds a micro-batch: a cell broadcasts each
    tensor once, whichever of its layers reads it, and the causal mask (`timing.attention_mask_in_dataloader`)
    once; the cell's first reading layer, in walk order, pays the mask and its own tensors, a later one only
    the tensors not yet paid. The shares of a cell sum to its seconds. *cell_of* says which layers share a
    cell (default: their (chunk, stage))."""
    cell_of = cell_of or (lambda layer: (layer.chunk, layer.stage))
    train, mask = run.training, run.timing.attention_mask_in_dataloader
    b, s = train.micro_batch_size, train.seq_length
    paid: dict[Hashable, list[bool]] = {}  # per cell: first's tensors, last's tensors, the mask
    found: dict[Layer, float] = {}
    for layer in layers:
        first, last = reads(layer)
        if not (first or last):
            continue
        done = paid.setdefault(cell_of(layer), [False, False, False])
        tensors = batch_tensors(b, s, first and not done[0], last and not done[1], False)
        if mask and not done[2]:
            tensors.append(b * s * s * MASK_BYTES)
        found[layer] = sum(broadcast_seconds(size, links) for size in tensors)
        done[0], done[1], done[2] = done[0] or first, done[1] or last, True
    return found
