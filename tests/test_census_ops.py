"""torchtitan's eager step counted aten op by aten op (ppb_core.census.ops) against ppb's op table.

The counter runs torchtitan's Llama block at 9dec370 and at v0.2.2, its loss and embedding on the meta
device and records every aten op's launch and bytes; ppb's torchtitan pricing (ppb_core.timing.flops,
the eager factors of ppb_core.timing.kernels) must move the same bytes, with 9dec370's ops where the
run says so (`timing`: norm_type rmsnorm, repeat_kv, sdpa_backend flash) and v0.2.2's by default.
Per-op figures are checked against hand derivations from autograd's formulas (PyTorch
tools/autograd/derivatives.yaml).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import torch
import torch.nn.functional as F
from torch._inductor import scheduler

from ppb_core.census.ops import (
    EagerRMSNorm,
    count_block,
    count_embedding,
    count_loss,
    count_part,
    repeat_kv,
    rotate,
)
from ppb_core.census.torchtitan import BlockDims, rotary_table, wrapped
from ppb_core.config.run import parse_run_config
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.flops import (
    MATMUL,
    MEMORY,
    OpGeometry,
    complex_rope_bytes,
    early_stop_tail,
    layer_ops,
    op_policy_rerun,
)
from ppb_core.timing.kernels import EAGER_TRAFFIC
from ppb_core.timing.pricer import TimeModel

# Llama 3.1 8B's block (h 4096, 32 heads, 8 key/value heads, width 14336) on 2 × 512 tokens: the
# meta device allocates nothing, so the real widths cost no memory.
DIMS = BlockDims(4096, 32, 8, 14336)
BATCH, SEQ = 2, 512
ELEMENTS = BATCH * SEQ * DIMS.hidden  # n·h: the unit the per-token figures are in


# torchtitan 9dec370's kernels in ppb's words (bench/_public.py BEFORE_V022); v0.2.2's are the defaults
BEFORE_V022 = {"norm_type": "rmsnorm", "repeat_kv": True, "sdpa_backend": "flash"}


def _run(recompute: dict, compile_: bool = False, vocab: int = 128256, version: str = "9dec370"):
    timing = {"torch_compile": compile_, **(BEFORE_V022 if version == "9dec370" else {})}
    return parse_run_config(
        {
            "framework": "torchtitan",
            "models": [
                {
                    "name": "llm",
                    "spec": {
                        "vocab_size": vocab,
                        "hidden_size": DIMS.hidden,
                        "num_layers": 2,
                        "num_attention_heads": DIMS.heads,
                        "num_key_value_heads": DIMS.kv_heads,
                        "intermediate_size": DIMS.ffn,
                    },
                }
            ],
            "parallel": {"zero": 3, "fsdp": True, "dp": 8},
            "training": {"seq_length": SEQ, "micro_batch_size": BATCH, "recompute": recompute, "flash_attention": True},
            "device": {"name": "h100-80gb"},
            "timing": timing,
        },
        "titan.yaml",
    )


def _priced_elementwise(ops, fused_norm: bool = False) -> tuple[float, float]:
    """ppb's eager element-wise bytes of a layer (forward, backward): its memory ops with the eager
    factors (a fused norm's own bytes under *fused_norm*), and the backward's passes priced beside the
    matmuls (`side_bytes`)."""
    forward = backward = 0.0
    for op in ops:
        fused = not op.fusion or (op.fusion == "norm" and fused_norm)
        factor = (1.0, 1.0) if fused else EAGER_TRAFFIC[op.fusion]
        if op.category == MEMORY:
            forward += op.bytes * factor[0]
            backward += op.backward_bytes * factor[1]
        elif op.category == MATMUL:
            forward += op.side_bytes[0]
            backward += op.side_bytes[1]
    return forward, backward


def _body(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


def test_the_block_s_elementwise_bytes_are_what_torchtitan_runs():
    counted = count_block(DIMS, BATCH, SEQ, "none")
    run = _run({"mode": "none"})
    forward, backward = _priced_elementwise(TimeModel(run).ops(_body(run)))
    # ppb leaves out what is per row or per table, not per element: the norms' means and rsqrt, the
    # rotary table's reads (under 0.2 bytes per token and hidden unit)
    assert counted.elementwise_bytes("forward") == pytest.approx(forward, rel=2e-3)
    assert counted.elementwise_bytes("backward") == pytest.approx(backward, rel=2e-3)
    # by hand, per token and hidden unit: forward two norms 36 + 36, rotary 20 on q and k (1 + 1/4 of
    # h), repeat_kv reads k and v (1/4 each, 2 bytes) and writes them per query head (2 + 2), two
    # residual adds 6 + 6, SwiGLU 10 on the width (14336/4096 of h): 149
    width = DIMS.ffn / DIMS.hidden
    by_hand = 72 + 20 * 1.25 + (1 + 4) + 12 + 10 * width
    assert forward == pytest.approx(by_hand * ELEMENTS)
    # backward: norms 92 + 92, rotary 20 · 1.25, repeat_kv's sums (read 4, write 1), residual sums
    # 6 + 6, SwiGLU 18 on the width, and the three input-gradient sums (wq+wk, +wv; w1+w3) 3 · 6
    assert backward == pytest.approx((184 + 25 + 5 + 12 + 18 * width + 18) * ELEMENTS)


def test_v0_2_2_s_block_is_what_ppb_prices_by_default():
    """torchtitan v0.2.2: nn.RMSNorm as PyTorch's fused kernel, SDPA with enable_gqa (no repeat_kv)."""
    counted = count_block(DIMS, BATCH, SEQ, "none", version="v0.2.2")
    run = _run({"mode": "none"}, version="v0.2.2")
    model = TimeModel(run)
    assert model.kernels.fused_norm
    forward, backward = _priced_elementwise(model.ops(_body(run)), fused_norm=True)
    # what ppb leaves out (per row: rstd; per table: the rotary table and its conjugate copies, 0.39
    # bytes per token and hidden unit here) is the same as at 9dec370, against totals half as large
    assert counted.elementwise_bytes("forward") == pytest.approx(forward, rel=4e-3)
    assert counted.elementwise_bytes("backward") == pytest.approx(backward, rel=4e-3)
    # by hand, per token and hidden unit: forward each norm reads x and writes y (2 + 2), rotary
    # 20 · 1.25, residual adds 12, SwiGLU 10 on the width: 80; backward each norm reads dy and x and
    # writes dx (2 + 2 + 2), rotary 25, residual sums 12, SwiGLU 18 on the width, input-gradient sums 18
    width = DIMS.ffn / DIMS.hidden
    assert forward == pytest.approx((8 + 25 + 12 + 10 * width) * ELEMENTS)
    assert backward == pytest.approx((12 + 25 + 12 + 18 + 18 * width) * ELEMENTS)
    assert "repeat_kv" not in {op.name.split(".")[-1] for op in model.ops(_body(run))}
    # K and V reach the attention kernel at their 8 heads: its gradients for them are 1/4 of q's
    grads = counted.count("backward", "_scaled_dot_product_cudnn_attention_backward")
    head = BATCH * SEQ * DIMS.head_dim * 2
    assert grads.written_bytes == (DIMS.heads + 2 * DIMS.kv_heads) * head
    # forward launches: 2 fused norms, 7 matmuls, rotary 3 each on q and k, the cuDNN kernel, 2 residual
    # adds, silu and the product: 20
    assert counted.launches("forward") == 20


def test_the_launches_of_a_block_by_hand():
    """Forward: each norm 8 kernels (float, pow, mean, + eps, rsqrt, ·, type_as, · weight), 7 matmuls,
    rotary 3 each on q and k, repeat_kv's 2 copies, the flash kernel, 2 residual adds, silu and the
    product: 16 + 7 + 6 + 2 + 1 + 2 + 2 = 36."""
    counted = {ac: count_block(DIMS, BATCH, SEQ, ac) for ac in ("none", "op", "full")}
    assert counted["none"].launches("forward") == 36
    assert {ac: c.count("backward", "mm").launches for ac, c in counted.items()} == {
        "none": 14,  # input and weight gradient of each of the 7
        "op": 17,  # the per-op policy saves every odd aten.mm (wq, wv, w1, w2) and recomputes wk, wo, w3
        "full": 20,  # early stop: w2's inputs are saved before it runs, so w2 is never replayed
    }


@pytest.mark.parametrize("version", ["9dec370", "v0.2.2"])
@pytest.mark.parametrize("early_stop", [True, False])
@pytest.mark.parametrize("ac", ["op", "full"])
def test_the_recompute_is_what_torchtitan_s_checkpoint_replays(ac, early_stop, version):
    plain = count_block(DIMS, BATCH, SEQ, "none", version=version)
    counted = count_block(DIMS, BATCH, SEQ, ac, early_stop, version)
    recomputed_bytes = counted.elementwise_bytes("backward") - plain.elementwise_bytes("backward")
    recomputed_flops = counted.count("backward", "mm").flops - plain.count("backward", "mm").flops
    recompute = {"mode": "full"} if ac == "full" else {"mode": "selective", "option": "op"}
    run = _run({**recompute, "early_stop": early_stop}, version=version)
    model = TimeModel(run)
    state = LayerType.FULL_REC_LAYER if ac == "full" else LayerType.SEL_REC_LAYER
    rerun = model._rerun(_body(run), state, None)
    priced_bytes = _priced_elementwise((op for op in rerun if op.category == MEMORY), model.kernels.fused_norm)[0]
    priced_flops = sum(op.flops for op in rerun if op.category == MATMUL and op.attention is None)
    assert recomputed_bytes == pytest.approx(priced_bytes, rel=2e-3)
    assert recomputed_flops == pytest.approx(priced_flops)


def test_the_loss_as_train_py_computes_it():
    counted = count_loss(512, 1000)
    logits = 512 * 1000
    # forward: the fp32 copy 2 + 4, log_softmax 4 + 4; backward: nll_loss_backward writes the fp32
    # gradient 4, _log_softmax_backward_data reads it and the output and writes 4 + 4 + 4, the cast
    # back 4 + 2 (the targets and the scalar gradient aside)
    assert counted.elementwise_bytes("forward") == pytest.approx(14 * logits, rel=1e-3)
    assert counted.elementwise_bytes("backward") == pytest.approx(22 * logits, rel=1e-3)
    run = _run({"mode": "none"}, vocab=1000)
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    loss = next(op for op in layer_ops(tail.kind, OpGeometry.from_run(run)) if op.name == "output.loss")
    tokens = BATCH * SEQ
    assert loss.bytes == 14 * tokens * 1000
    assert loss.backward_bytes == 22 * tokens * 1000


@pytest.mark.parametrize("vocab", [128256, 32000, 12256])
def test_the_loss_rereads_rows_past_the_softmax_caches(vocab):
    # PyTorch's SoftMax.cu caches a row in a block's default shared memory while it holds fewer than
    # (48 KiB - 32 warps x 4 B) / 4 B = 12,256 fp32 values; from there `cunn_SoftMaxForward` reads the
    # row three times (max, sum of exponentials, the writing epilogue): 2 reads more than the op count's
    # 14 a logit, and `cunn_SoftMaxBackward` reads the output gradient twice: 1 read (4) more than 22
    run = _run({"mode": "none"}, vocab=vocab)
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    loss = next(op for op in layer_ops(tail.kind, OpGeometry.from_run(run)) if op.name == "output.loss")
    tokens = BATCH * SEQ
    assert loss.bytes == (14 + 2 * 4) * tokens * vocab
    assert loss.backward_bytes == (22 + 4) * tokens * vocab


def test_a_row_below_the_shared_memory_cache_is_read_once():
    # 12,255 fp32 values (49,020 B) fit beside the 32 warps' reduction slots (128 B) in 48 KiB (49,152 B)
    run = _run({"mode": "none"}, vocab=12255)
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    loss = next(op for op in layer_ops(tail.kind, OpGeometry.from_run(run)) if op.name == "output.loss")
    assert loss.bytes == 14 * BATCH * SEQ * 12255
    assert loss.backward_bytes == 22 * BATCH * SEQ * 12255


def test_a_compiled_loss_reads_the_logits_once_each_way():
    # Inductor's kernels (torch 2.13 generated code): forward reads the bf16 logits once (online softmax:
    # max and sum together) = 2 a logit; backward reads them and writes their bf16 gradient = 2 + 2
    run = _run({"mode": "none"}, compile_=True)
    assert run.timing.compiled_loss  # compile_loss unset: as torch_compile
    tail = next(layer for layer in walk(run) if layer.node == "TAIL")
    loss = next(op for op in layer_ops(tail.kind, OpGeometry.from_run(run)) if op.name == "output.loss")
    assert loss.bytes == 2 * BATCH * SEQ * 128256
    assert loss.backward_bytes == 4 * BATCH * SEQ * 128256
    eager = run.model_copy(update={"timing": run.timing.model_copy(update={"compile_loss": False})})
    tail = next(layer for layer in walk(eager) if layer.node == "TAIL")
    loss = next(op for op in layer_ops(tail.kind, OpGeometry.from_run(eager)) if op.name == "output.loss")
    assert loss.bytes == (14 + 8) * BATCH * SEQ * 128256  # the blocks compiled, the loss eager (9dec370)


def test_the_embedding_backward_writes_the_table():
    counted = count_embedding(512, 1000, 64)
    # the lookup reads the ids (8 a token) and the looked-up rows and writes them (2 + 2 an element);
    # embedding_dense_backward reads the ids and the output gradient and writes the whole bf16 table
    assert counted.count("forward", "embedding").bytes == 512 * 8 + 2 * 512 * 64 * 2
    assert counted.count("backward", "embedding_dense_backward").written_bytes == 1000 * 64 * 2


@pytest.mark.parametrize(
    ("part", "shapes", "forward", "backward"),
    [
        # RMSNorm at 9dec370: forward 36 bytes an element, backward 92 (docstring of kernels.EAGER_TRAFFIC)
        (EagerRMSNorm(256), [(4, 64, 256)], 36, 92),
        # the gated activation on gate and up: forward silu 2 + 2, product 4 + 2 = 10 an element of one
        # of them; backward the product's two gradients (4 + 2 each), silu_backward (4 + 2) = 18
        (lambda gate, up: F.silu(gate) * up, [(4, 64, 256), (4, 64, 256)], 10, 18),
        # repeat_kv of 2 heads to 8: reads 1/4 (2 bytes), writes 2 an element of the output; backward
        # sums them back, read 2, write 1/4 of 2
        (lambda x: repeat_kv(x, 4), [(4, 64, 2, 32)], 2 / 4 + 2, 2 + 2 / 4),
    ],
    ids=["rmsnorm", "swiglu", "repeat_kv"],
)
def test_the_eager_parts_by_hand(part, shapes, forward, backward):
    inputs = [torch.empty(*shape, dtype=torch.bfloat16, device="meta", requires_grad=True) for shape in shapes]
    if isinstance(part, torch.nn.Module):
        part = part.to(device="meta", dtype=torch.bfloat16)
    counted = count_part(part, *inputs)
    first = shapes[0]
    elements = first[0] * first[1] * first[2] * (first[3] if len(first) > 3 else 1)
    if len(first) > 3:  # repeat_kv: per element of its output, 4 × the input
        elements *= 4
    # what is per row (the means, their rsqrt) or per weight (the norm weight's read and gradient) is
    # not per element: within 2%
    assert counted.elementwise_bytes("forward") == pytest.approx(forward * elements, rel=0.02)
    assert counted.elementwise_bytes("backward") == pytest.approx(backward * elements, rel=0.02)


def test_rotary_by_hand():
    """apply_rotary_emb on one tensor: upcast 2 + 4, complex product 4 + 4, downcast 4 + 2 = 20 an
    element, and the same three backward (the table is a buffer: no gradient)."""
    x = torch.empty(2, 64, 4, 32, dtype=torch.bfloat16, device="meta", requires_grad=True)
    table = torch.empty(64, 16, dtype=torch.complex64, device="meta")
    counted = count_part(lambda t: rotate(t, table), x)
    elements = x.numel()
    table_bytes = table.numel() * 8
    assert counted.elementwise_bytes("forward") == 20 * elements + table_bytes
    # backward: the product's gradient multiplies by the conjugate table, copied first (read, write),
    # then read by the product
    assert counted.elementwise_bytes("backward") == 20 * elements + 3 * table_bytes


def test_early_stop_drops_the_block_s_last_matmul_and_residual():
    run = _run({"mode": "full", "early_stop": True})
    ops = TimeModel(run).ops(_body(run))
    assert early_stop_tail(ops) == {"mlp_out", "residual_mlp"}


def test_inductor_runs_torchtitan_s_complex_rotary_as_its_eager_steps():
    """torch.compile of model.py's `apply_rotary_emb` (complex64): Inductor falls back to aten for every
    op on a complex tensor (torch/_inductor/lowering.py `unsupported_input_tensor`), so the compiled
    rotary moves `complex_rope_bytes` an element each way, not a fused kernel's 2·bc. Counted from
    Inductor's own scheduler (each kernel's and fallback's buffer bytes) on the CPU."""
    graphs: list[list[tuple[str, int]]] = []
    codegen = scheduler.Scheduler.codegen

    def record(self):
        nodes = []
        for node in self.nodes:
            if isinstance(node, scheduler.NopKernelSchedulerNode):
                continue
            target = str(getattr(node.node, "op_overload", "") or "") if node.is_extern() else "inductor"
            nodes.append((target, node.get_read_write_buffers_sizes()))
        graphs.append(nodes)
        return codegen(self)

    dims = BlockDims(256, 4, 4, 512)
    seq = 512
    x = torch.randn(1, seq, dims.heads, dims.head_dim, dtype=torch.bfloat16, requires_grad=True)
    table = rotary_table(dims, seq)
    torch._dynamo.reset()
    scheduler.Scheduler.codegen = record
    # no cached graph: Inductor must schedule both graphs here
    uncached = torch._inductor.config.patch(fx_graph_cache=False)
    try:
        with uncached, torch._functorch.config.patch(enable_autograd_cache=False):
            out = torch.compile(rotate, fullgraph=True)(x, table)
            out.float().sum().backward()
    finally:
        scheduler.Scheduler.codegen = codegen
        torch._dynamo.reset()
    elements = seq * dims.heads * dims.head_dim
    table_bytes = seq * dims.head_dim // 2 * 8  # complex64 table, read once a multiply
    assert len(graphs) == 2  # the forward's and the backward's
    for graph in graphs:
        # the complex multiply is aten's kernel (read and write 4 bytes a real element)
        assert [t for t, _ in graph if t.startswith("aten.mul")], graph
        moved = sum(size for target, size in graph if target == "inductor" or target.startswith("aten.mul"))
        # with Inductor's upcast (read 2, write 4) and downcast (read 4, write 2) around it, and the
        # multiply's read of the table (the views and the table's conjugate copy launch no HBM pass)
        assert moved == complex_rope_bytes(2) * elements + table_bytes
    assert complex_rope_bytes(2) == 2 + 4 + 4 + 4 + 4 + 2


class _CpuTitanBlock(torch.nn.Module):
    """9dec370's block (EagerRMSNorm, complex `rotate`, `repeat_kv`) with SDPA through its CPU kernel,
    for Inductor on the CPU."""

    def __init__(self, dims: BlockDims) -> None:
        super().__init__()
        self.dims, h, d = dims, dims.hidden, dims.head_dim
        self.attention_norm, self.ffn_norm = EagerRMSNorm(h), EagerRMSNorm(h)
        self.wq = torch.nn.Linear(h, dims.heads * d, bias=False)
        self.wk = torch.nn.Linear(h, dims.kv_heads * d, bias=False)
        self.wv = torch.nn.Linear(h, dims.kv_heads * d, bias=False)
        self.wo = torch.nn.Linear(dims.heads * d, h, bias=False)
        self.w1 = torch.nn.Linear(h, dims.ffn, bias=False)
        self.w2 = torch.nn.Linear(dims.ffn, h, bias=False)
        self.w3 = torch.nn.Linear(h, dims.ffn, bias=False)

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        d, times = self.dims.head_dim, self.dims.heads // self.dims.kv_heads
        normed = self.attention_norm(x)
        q = rotate(self.wq(normed).view(batch, seq, -1, d), table)
        k = repeat_kv(rotate(self.wk(normed).view(batch, seq, -1, d), table), times)
        v = repeat_kv(self.wv(normed).view(batch, seq, -1, d), times)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = x + self.wo(out.transpose(1, 2).contiguous().view(batch, seq, -1))
        normed = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(normed)) * self.w3(normed))


# aten ops Inductor leaves to their own kernels that are views (no HBM pass) or priced apart (GEMMs, SDPA)
_NOT_ELEMENTWISE = (
    "aten.view_as_complex",
    "aten.view_as_real",
    "aten.reshape",
    "aten._conj",
    "aten._scaled_dot",
    "aten.mm",
)


def test_inductor_moves_the_compiled_block_s_element_wise_bytes_ppb_prices():
    """torchtitan 9dec370's block under per-op checkpointing, compiled as `apply_compile` does, on the
    CPU: the bytes of every kernel Inductor's scheduler generates and every aten fallback it keeps
    (GEMMs, SDPA and views aside), forward graph and backward graph (recompute included), against
    ppb's compiled op table for the same block (its memory ops' forward bytes; their backward bytes
    plus the forward bytes of those the per-op policy reruns). Inductor fuses the reruns into the
    backward's kernels (SwiGLU's product with its gradient) and the residual adds into the norms, ppb
    prices them as their own passes: the totals agree within 5% (3% at these widths); with the complex
    rotary priced as one fused kernel ppb's counts were 0.74 and 0.76 of Inductor's."""
    graphs: list[float] = []
    matmuls: list[int] = []
    codegen = scheduler.Scheduler.codegen

    def record(self):
        moved = mm = 0
        for node in self.nodes:
            if isinstance(node, scheduler.NopKernelSchedulerNode):
                continue
            target = str(getattr(node.node, "op_overload", "") or "") if node.is_extern() else "inductor"
            mm += target.startswith("aten.mm")
            if node.is_extern() and (not target or target.startswith(_NOT_ELEMENTWISE)):
                continue  # MultiOutput names no op_overload
            moved += node.get_read_write_buffers_sizes()
        graphs.append(moved)
        matmuls.append(mm)
        return codegen(self)

    dims, seq = BlockDims(512, 8, 2, 1792), 256
    torch.manual_seed(0)
    block = wrapped(_CpuTitanBlock(dims).to(torch.bfloat16), "op")
    x = torch.randn(1, seq, dims.hidden, dtype=torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    scheduler.Scheduler.codegen = record
    uncached = torch._inductor.config.patch(fx_graph_cache=False)
    try:
        with uncached, torch._functorch.config.patch(enable_autograd_cache=False):
            torch.compile(block, fullgraph=True)(x, rotary_table(dims, seq)).float().sum().backward()
    finally:
        scheduler.Scheduler.codegen = codegen
        torch._dynamo.reset()
    assert len(graphs) == 2
    # the block's 7 linears forward; backward their 14 gradient GEMMs and the policy's reruns: wk, wo
    # (norm2's input is rebuilt, not kept) and w3, as ppb's `op_policy_rerun` (the unsaved even matmuls)
    assert matmuls == [7, 14 + 3]

    spec = {
        "vocab_size": 32000,
        "hidden_size": dims.hidden,
        "num_layers": 2,
        "num_attention_heads": dims.heads,
        "num_key_value_heads": dims.kv_heads,
        "intermediate_size": dims.ffn,
        "max_position_embeddings": seq,
    }
    run = parse_run_config(
        {
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"dp": 2, "zero": 3, "fsdp": True},
            "training": {
                "seq_length": seq,
                "micro_batch_size": 1,
                "flash_attention": True,
                "recompute": {"mode": "selective", "option": "op", "early_stop": True},
            },
            "device": {"name": "h100-80gb"},
            "timing": {"torch_compile": True, "norm_type": "rmsnorm", "repeat_kv": True, "sdpa_backend": "flash"},
        }
    )
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    table = TimeModel(run).ops(layer)
    # the per-op policy's reruns, less the residual add early stop spares (`early_stop_tail`)
    tail = early_stop_tail(table)
    reruns = {op.name for op in op_policy_rerun(table, layer.kind, OpGeometry.from_run(run))} - set(tail)
    assert {"qk_proj", "out_proj", "mlp_in"} <= reruns  # wk's, wo's and w3's shares rerun, as compiled
    ops = [op for op in table if op.category == MEMORY]
    forward = sum(op.bytes for op in ops)
    backward = sum(op.backward_bytes + (op.bytes if op.name in reruns else 0) for op in ops)
    assert graphs[0] == pytest.approx(forward, rel=0.05)
    assert graphs[1] == pytest.approx(backward, rel=0.05)
