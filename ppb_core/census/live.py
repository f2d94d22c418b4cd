"""Live bytes on the CPU while torch code runs: what is allocated, now and at its most.

`LiveBytes` is a `TorchDispatchMode` that sees every aten op's outputs; a storage the op made
(not one of its inputs' storages, which views and in-place ops return) is counted until it is
freed (a weak-reference finalizer). Storages made before the context are not counted, so a
measurement is what the code inside adds. Tensors without a storage of their own (the wrappers
functional collectives return until they are waited on) are not counted. torch is imported when
this module is.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage_key(tensor: torch.Tensor) -> int:
    """The address of the tensor's storage; 0 where it has none (a wrapper subclass)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except RuntimeError:
        return 0


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages ops make inside the context: `now`, and the most at once, `peak`."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {_storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            key = _storage_key(tensor)
            if key == 0 or key in inputs or key in self._sizes:
                continue
            storage = tensor.untyped_storage()
            self._sizes[key] = storage.nbytes()
            self.now += storage.nbytes()
            weakref.finalize(storage, self._freed, key)
        self.peak = max(self.peak, self.now)
        return out

    def _freed(self, key: int) -> None:
        self.now -= self._sizes.pop(key, 0)
