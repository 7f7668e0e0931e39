"""Persistent device buffers the single-launch kernels use for cross-program hand-off.

The buffers are left in their initial state by the kernels themselves (the last program of a
request resets what it used), so one allocation serves every call and every CUDA-graph replay.
Buffers are never freed: a graph captured earlier may still point at a smaller, older one.
Not safe for concurrent calls on two streams of one device.
"""
from __future__ import annotations

import torch

_buffers: dict[tuple[str, str, torch.device], torch.Tensor] = {}
_retired: list[torch.Tensor] = []


def workspace(name: str, numel: int, dtype: torch.dtype, fill: int, device: torch.device) -> torch.Tensor:
    """A buffer of at least `numel` elements, filled with `fill` when first allocated."""
    key = (name, str(dtype), device)
    buf = _buffers.get(key)
    if buf is None or buf.numel() < numel:
        if buf is not None:
            _retired.append(buf)
        buf = torch.full((max(numel, 64),), fill, dtype=dtype, device=device)
        _buffers[key] = buf
    return buf
