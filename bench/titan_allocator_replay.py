"""What PyTorch's caching allocator reserves for a torchtitan pipeline stage: an eager replay (needs torch).

    python bench/titan_allocator_replay.py 1f1b-first    # Table 5's 405B stage 0 under 1F1B (minutes)
    python bench/titan_allocator_replay.py interleaved-first
    python bench/titan_allocator_replay.py 1f1b-last
    python bench/titan_allocator_replay.py 1f1b-first --small   # a small block, seconds

The blocks of a 9dec370 Llama stage (torchtitan/models/llama/model.py: eager RMSNorm, complex rotary,
`repeat_kv`, flash SDPA, SwiGLU) run on the meta device at their tensor-parallel rank's shapes (405B at TP 8:
16 query heads, one key/value head, FFN 6656; sequence parallelism's all-gathers and reduce-scatters as
allocations of their outputs), each block under torch.utils.checkpoint (full AC), micro-batch 4 of 8192 tokens,
8 micro-batches, through one stage's order of forwards and backwards. FSDP2 under PP is stood in for: the
gathered bf16 parameters from the first forward, and `FSDPParamGroup.post_backward`'s fp32 accumulators
(`to_accumulated_grad_if_needed` at a unit's first backward, `accumulate_unsharded_grad_if_needed` after),
freed at the reduction. A TorchDispatchMode records every storage made and when it dies; the requests go,
in that order, through a model of the allocator's large pool under `expandable_segments:True` (torchtitan's
run script), read in c10/cuda/CUDACachingAllocator.cpp (pytorch/pytorch 001074d2):

* `round_size`: 512-byte multiples; requests of 1 MiB or less go to the small pool (left out here);
* `get_free_block`: the smallest free block that fits, a block followed by unmapped pages counting as
  unbounded (`expandable_size`), so a free block inside the segment is taken first;
* `should_split`: under expandable segments any remainder of 512 bytes or more is split off, the
  allocation keeping the block's start;
* `try_allocate_expandable_block` / `map_block`: with no free block, 20 MiB pages (`kLargeBuffer`, the large
  pool's segment size) are mapped after the last block, joined with it where it is free;
* `free_block`: merged with free neighbours; pages stay mapped (torchtitan calls no `empty_cache`).

It prints the stage's allocated peak and the reserved peak of that pool over two steps: what the compute
stream's fragmentation adds for this order of requests. Eager, bf16 and unfused: the runs compiled the blocks
(Inductor plans its own buffers) and ran Float8, so this is an order of magnitude for the published rows
(docs/memory.md, **The caching allocator's pages on a 405B stage**), not a price.
"""

from __future__ import annotations

import argparse
import bisect
import sys
from typing import Any

GIB = 2**30
PAGE = 20 * 2**20  # kLargeBuffer: the large pool's expandable-segment page
MIN_BLOCK = 512  # kMinBlockSize
SMALL = 2**20  # kSmallSize


class LargePool:
    """One stream's large pool under expandable segments (module docstring)."""

    def __init__(self) -> None:
        self.mapped = 0
        self.addrs: list[int] = []
        self.blocks: dict[int, list[Any]] = {}  # address -> [size, allocated]
        self.live: dict[object, int] = {}
        self.allocated = 0
        self.peak_allocated = 0

    def alloc(self, key: object, nbytes: int) -> None:
        size = max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)
        best = None
        for addr in self.addrs:
            block_size, used = self.blocks[addr]
            if used or block_size < size:
                continue
            tail = addr + block_size == self.mapped
            candidate = (tail, block_size, addr)
            best = candidate if best is None or candidate < best else best
        if best is not None:
            addr = best[2]
        else:
            last = self.addrs[-1] if self.addrs else None
            tail_free = self.blocks[last][0] if last is not None and not self.blocks[last][1] else 0
            pages = -(-(size - tail_free) // PAGE) * PAGE
            start, self.mapped = self.mapped, self.mapped + pages
            if tail_free:
                addr = last
                self.blocks[addr][0] += pages
            else:
                addr = start
                self.blocks[addr] = [pages, False]
                bisect.insort(self.addrs, addr)
        block = self.blocks[addr]
        if block[0] - size >= MIN_BLOCK:
            rest = addr + size
            self.blocks[rest] = [block[0] - size, False]
            bisect.insort(self.addrs, rest)
            block[0] = size
        block[1] = True
        self.live[key] = addr
        self.allocated += block[0]
        self.peak_allocated = max(self.peak_allocated, self.allocated)

    def free(self, key: object) -> None:
        addr = self.live.pop(key)
        block = self.blocks[addr]
        block[1] = False
        self.allocated -= block[0]
        i = bisect.bisect_left(self.addrs, addr)
        if i + 1 < len(self.addrs) and not self.blocks[self.addrs[i + 1]][1]:
            block[0] += self.blocks.pop(self.addrs[i + 1])[0]
            del self.addrs[i + 1]
        if i > 0 and not self.blocks[self.addrs[i - 1]][1]:
            self.blocks[self.addrs[i - 1]][0] += self.blocks.pop(addr)[0]
            del self.addrs[i]


def replay(schedule: str, small: bool) -> list[tuple[float, float]]:
    import torch
    import torch.nn.functional as F
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import checkpoint

    pool = LargePool()

    class Recorder(TorchDispatchMode):
        """Every new storage an op returns is a request; one whose last reference died is freed."""

        def __init__(self) -> None:
            super().__init__()
            self.live: dict[int, StorageWeakRef] = {}

        def poll(self) -> None:
            for key in [k for k, ref in self.live.items() if ref.expired()]:
                del self.live[key]
                pool.free(key)

        def track(self, tensor: torch.Tensor) -> None:
            storage = tensor.untyped_storage()
            key = storage._cdata
            if key in self.live or storage.nbytes() <= SMALL:
                return
            self.live[key] = StorageWeakRef(storage)
            pool.alloc(key, storage.nbytes())

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.poll()
            out = func(*args, **(kwargs or {}))
            for leaf in torch.utils._pytree.tree_leaves(out):
                if isinstance(leaf, torch.Tensor) and leaf.device.type == "meta":
                    self.track(leaf)
            return out

    class Gather(torch.autograd.Function):
        """Sequence parallelism's all-gather (backward: its reduce-scatter), as the outputs' allocations."""

        @staticmethod
        def forward(ctx, x, tp):
            ctx.tp = tp
            return x.new_empty(x.shape[0], x.shape[1] * tp, x.shape[2])

        @staticmethod
        def backward(ctx, grad):
            return grad.new_empty(grad.shape[0], grad.shape[1] // ctx.tp, grad.shape[2]), None

    class Scatter(torch.autograd.Function):
        """Sequence parallelism's reduce-scatter (backward: its all-gather)."""

        @staticmethod
        def forward(ctx, x, tp):
            ctx.tp = tp
            return x.new_empty(x.shape[0], x.shape[1] // tp, x.shape[2])

        @staticmethod
        def backward(ctx, grad):
            return grad.new_empty(grad.shape[0], grad.shape[1] * ctx.tp, grad.shape[2]), None

    class PostBackward(torch.autograd.Function):
        """FSDP2's RegisterPostBackwardFunction on a unit's input: runs after the unit's backward."""

        @staticmethod
        def forward(ctx, x, block):
            ctx.block = block
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            ctx.block.post_backward()
            return grad, None

    def rmsnorm(x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * weight

    def rotate(x, table):
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * table.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)

    class Block(torch.nn.Module):
        def __init__(self, h, heads, kv, d, ffn, tp):
            super().__init__()

            def weight(*shape):
                return torch.nn.Parameter(torch.empty(*shape, device="meta", dtype=torch.bfloat16))

            self.tp, self.d, self.rep = tp, d, heads // kv
            self.an, self.fn = weight(h), weight(h)
            self.wq, self.wk, self.wv, self.wo = (
                weight(heads * d, h),
                weight(kv * d, h),
                weight(kv * d, h),
                weight(h, heads * d),
            )
            self.w1, self.w3, self.w2 = weight(ffn, h), weight(ffn, h), weight(h, ffn)
            self.acc: dict[str, Any] = {}

        def post_backward(self):
            for name, p in self.named_parameters():
                if p.grad is None:
                    continue
                if name in self.acc:
                    self.acc[name] += p.grad
                else:
                    self.acc[name] = p.grad.to(torch.float32)
                p.grad = None

        def inner(self, x, table):
            b = x.shape[0]
            g = Gather.apply(rmsnorm(x, self.an), self.tp)
            s = g.shape[1]
            q = F.linear(g, self.wq).view(b, s, -1, self.d)
            k = F.linear(g, self.wk).view(b, s, -1, self.d)
            v = F.linear(g, self.wv).view(b, s, -1, self.d)
            q, k = rotate(q, table), rotate(k, table)  # apply_rotary_emb(xq, xk) after the three linears
            if self.rep > 1:
                shape = (b, s, k.shape[2], self.rep, self.d)
                k = k[:, :, :, None, :].expand(shape).reshape(b, s, -1, self.d)
                v = v[:, :, :, None, :].expand(shape).reshape(b, s, -1, self.d)
            o = torch.ops.aten._scaled_dot_product_flash_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )[0]
            h = x + Scatter.apply(F.linear(o.transpose(1, 2).contiguous().view(b, s, -1), self.wo), self.tp)
            g2 = Gather.apply(rmsnorm(h, self.fn), self.tp)
            return h + Scatter.apply(F.linear(F.silu(F.linear(g2, self.w1)) * F.linear(g2, self.w3), self.w2), self.tp)

        def forward(self, x, table):
            return checkpoint(self.inner, PostBackward.apply(x, self), table, use_reentrant=False)

    if small:
        dims = {"h": 512, "heads": 8, "kv": 2, "d": 64, "ffn": 1024, "tp": 2}
        layers, micro, seq = 4, 1, 1024
    else:  # Llama 3.1 405B at TP 8, 16 blocks, micro-batch 4 of 8192
        dims = {"h": 16384, "heads": 16, "kv": 1, "d": 128, "ffn": 6656, "tp": 8}
        layers, micro, seq = 16, 4, 8192
    n = 8
    chunks = 2 if schedule == "interleaved-first" else 1
    if schedule == "1f1b-first":  # stage 0: warm-up of every micro-batch (torch Schedule1F1B)
        order = [("F", 0, m) for m in range(n)] + [("B", 0, m) for m in range(n)]
    elif schedule == "1f1b-last":
        order = [op for m in range(n) for op in (("F", 0, m), ("B", 0, m))]
    else:  # rank 0 of interleaved 1F1B at 2 chunks of PP 8: its warm-up covers all 16 forwards
        order = [("F", c, m) for c in (0, 1) for m in range(n)] + [("B", c, m) for c in (1, 0) for m in range(n)]
    blocks = [[Block(**dims) for _ in range(layers // chunks)] for _ in range(chunks)]
    table = torch.empty(seq, dims["d"] // 2, dtype=torch.complex64, device="meta")
    recorder = Recorder()
    found = []
    with recorder:
        for step in range(2):
            held: dict[tuple[int, int], tuple[Any, Any]] = {}
            for kind, chunk, m in order:
                if kind == "F":
                    if step == 0 and m == 0:
                        for block in blocks[chunk]:
                            for parameter in block.parameters():
                                recorder.track(parameter)
                    x = torch.empty(
                        micro, seq // dims["tp"], dims["h"], dtype=torch.bfloat16, device="meta", requires_grad=True
                    )
                    recorder.track(x)
                    y = x
                    for block in blocks[chunk]:
                        y = block(y, table)
                    held[(chunk, m)] = (x, y)
                else:
                    x, y = held.pop((chunk, m))
                    y.backward(torch.empty_like(y))
                    del x, y
            for chunk_blocks in blocks:  # the reduction copies the accumulators out and frees them
                for block in chunk_blocks:
                    block.acc.clear()
            recorder.poll()
            found.append((pool.peak_allocated / GIB, pool.mapped / GIB))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("schedule", choices=("1f1b-first", "interleaved-first", "1f1b-last"))
    parser.add_argument("--small", action="store_true", help="a small block (seconds), for a quick check")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("needs torch (CPU is enough: the tensors are on the meta device)", file=sys.stderr)
        return 2
    for step, (allocated, reserved) in enumerate(replay(args.schedule, args.small), start=1):
        print(
            f"{args.schedule} step {step}: allocated peak {allocated:.2f} GiB, reserved {reserved:.2f} GiB, "
            f"{reserved - allocated:.2f} GiB beyond"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
