"""Where the kernel tests run: interpreted on CPU (default, CI) or compiled on a CUDA GPU.

Default: TRITON_INTERPRET=1 and CPU tensors (tests/conftest.py sets it before triton is imported).
With `TRITON_INTERPRET=0` in the environment on a machine where torch sees a GPU, the same tests
run the compiled kernels: `load()` returns the kernel module wrapped so that each call moves its
tensor arguments (dataclasses too) to the GPU and its results back to the CPU, where the tests
compare them with the torch references. In-place outputs (AcceptCounters) are copied back.

    TRITON_INTERPRET=0 python -m pytest -q -m "" tests/test_kernels_*.py     # on the GPU machine (-m "": the slow-marked cases too)
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import sys

COMPILED = os.environ.get("TRITON_INTERPRET") == "0"
_TRITON_IMPORTED_EARLY = "triton" in sys.modules and not COMPILED and os.environ.get("TRITON_INTERPRET") != "1"
if not COMPILED:
    # Triton decides interpret-vs-compile when each @triton.jit (its own standard library too)
    # is decorated, so this must be set before triton is first imported.
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = "cuda" if COMPILED else "cpu"
MODE = "cuda-compiled" if COMPILED else "cpu-interpreted"


def load(module: str, kernel: str):
    """The Triton module `module` (whose @triton.jit `kernel` tells the mode), device-wrapped."""
    import pytest
    import torch

    if COMPILED:
        if not torch.cuda.is_available():
            pytest.fail("TRITON_INTERPRET=0 runs the kernel tests compiled on CUDA, but torch sees no "
                        "GPU; unset TRITON_INTERPRET to run them interpreted on CPU")
        return OnDevice(importlib.import_module(module), "cuda")
    if _TRITON_IMPORTED_EARLY:
        pytest.fail("triton was imported before TRITON_INTERPRET=1 was set (by another test module); "
                    "run the kernel tests in their own process: pytest tests/test_kernels_*.py")
    from triton.runtime.interpreter import InterpretedFunction

    mod = importlib.import_module(module)
    if not isinstance(getattr(mod, kernel), InterpretedFunction):
        mod = importlib.reload(mod)
    return OnDevice(mod, "cpu")


def _move(x, device, back: list | None):
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        moved = {f.name: _move(getattr(x, f.name), device, None) for f in dataclasses.fields(x)}
        if back is not None:  # an argument: its fields may be updated in place
            back += [(getattr(x, k), v) for k, v in moved.items() if isinstance(v, torch.Tensor)]
        return dataclasses.replace(x, **moved)
    if isinstance(x, (list, tuple)):
        return type(x)(_move(v, device, back) for v in x)
    return x


class OnDevice:
    """A kernel module whose functions take and return CPU tensors and run on `device`."""

    def __init__(self, mod, device: str):
        self._mod, self.device = mod, device

    def __getattr__(self, name):
        fn = getattr(self._mod, name)
        if self.device == "cpu" or not callable(fn) or isinstance(fn, type):
            return fn

        def call(*args, **kw):
            back: list = []
            out = fn(*_move(list(args), self.device, back), **{k: _move(v, self.device, back) for k, v in kw.items()})
            for host, dev in back:
                host.copy_(dev)
            return _move(out, "cpu", None)

        return call
