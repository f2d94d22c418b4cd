"""Units the numbers people read are stated in: one definition each.

MB is 2**20 bytes, as SAPP's payload builder divides and as `nvidia-smi` reports MiB; device
memory in the catalog and every `_mb` figure use it. GiB is 2**30 bytes.
"""

from __future__ import annotations

MB = 2**20
GIB = 2**30
