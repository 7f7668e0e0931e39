"""GPU energy over a run, read through NVML (nvidia-ml-py, the optional `gpu` extra).

`Gpus.open(indices)` opens NVML for the GPUs a server runs on; `None` when there is no NVML
(nvidia-ml-py not installed, no NVIDIA driver, no GPU): the run's energy columns then stay NULL,
never a default. Per GPU it reads

  energy_mj()  nvmlDeviceGetTotalEnergyConsumption: mJ since the driver loaded (Volta and later);
               None where the GPU does not count it
  power_w()    nvmlDeviceGetPowerUsage: the board's power now, in W (mW / 1000)

`RunEnergy` turns what a sampler read at the start and end of a load (and the power samples in
between) into the `runs` columns, one definition:

  gpu_energy_j = Σ over the GPUs of (energy_mj at the end − at the start) / 1000
                 (gpu_energy_method 'nvml_energy_counter'), or, when any GPU lacks the counter,
                 Σ over the GPUs of the trapezoid ∫ power dt over the power samples
                 ('nvml_power_samples'; at least two samples per GPU, else NULL)

Which GPUs: the indices `launch` gave the server (its CUDA_VISIBLE_DEVICES), mapped through this
process's own CUDA_VISIBLE_DEVICES when that is set (Ray and Slurm set it), since NVML numbers
every GPU of the host whatever CUDA_VISIBLE_DEVICES says; without indices, every GPU this process
may see. UUID entries (`GPU-...`) are looked up by UUID.

Not here: when to sample (run/sampler.py), storing (writer), joules per token (views.py).
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass

_LOCK = threading.Lock()   # nvmlInit / nvmlShutdown are reference counted; keep them paired


def _visible(env: dict) -> list[str] | None:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [p.strip() for p in raw.split(",") if p.strip()]


def nvml_targets(gpus, env: dict | None = None) -> list[str] | None:
    """NVML device ids (index strings or UUIDs) of the server's GPUs: `gpus` (indices relative to
    this process's CUDA_VISIBLE_DEVICES), else everything visible; None = every GPU of the host."""
    vis = _visible(os.environ if env is None else env)
    if gpus is None:
        return vis
    if vis is None:
        return [str(g) for g in gpus]
    return [vis[g] for g in gpus if 0 <= g < len(vis)]


class Gpus:
    """Open NVML handles for some GPUs (see the module docstring). Close it when done."""

    def __init__(self, nvml, handles: list, ids: list[int]):
        self._nvml, self.handles, self.ids = nvml, handles, ids

    @classmethod
    def open(cls, gpus=None, env: dict | None = None) -> "Gpus | None":
        try:
            import pynvml
        except ImportError:
            return None
        with _LOCK:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError:
                return None
            try:
                targets = nvml_targets(gpus, env)
                if targets is None:
                    targets = [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
                handles = []
                for t in targets:
                    h = (pynvml.nvmlDeviceGetHandleByUUID(t) if t.startswith(("GPU-", "MIG-"))
                         else pynvml.nvmlDeviceGetHandleByIndex(int(t)))
                    handles.append(h)
                ids = [pynvml.nvmlDeviceGetIndex(h) for h in handles]
            except (pynvml.NVMLError, ValueError):
                pynvml.nvmlShutdown()
                return None
        if not handles:
            with _LOCK:
                pynvml.nvmlShutdown()
            return None
        return cls(pynvml, handles, ids)

    def energy_mj(self) -> list[int | None]:
        out = []
        for h in self.handles:
            try:
                out.append(int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)))
            except self._nvml.NVMLError:
                out.append(None)
        return out

    def power_w(self) -> list[float | None]:
        out = []
        for h in self.handles:
            try:
                out.append(self._nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
            except self._nvml.NVMLError:
                out.append(None)
        return out

    def names(self) -> list[str]:
        out = []
        for h in self.handles:
            try:
                n = self._nvml.nvmlDeviceGetName(h)
                out.append(n.decode() if isinstance(n, bytes) else str(n))
            except self._nvml.NVMLError:
                out.append("")
        return out

    def close(self) -> None:
        if self.handles:
            self.handles = []
            with _LOCK:
                self._nvml.nvmlShutdown()


@dataclass
class RunEnergy:
    """What a sampler read over one load: counters at start/end, power samples (t_s, [W])."""

    gpus: list[int]
    start_mj: list[int | None]
    end_mj: list[int | None]
    power: list[tuple[float, list[float | None]]]

    def columns(self) -> dict:
        """The `runs` energy columns (module docstring); NULL when nothing was measured."""
        n = len(self.gpus)
        if n and all(a is not None and b is not None and b >= a
                     for a, b in zip(self.start_mj, self.end_mj)):
            joules = sum(b - a for a, b in zip(self.start_mj, self.end_mj)) / 1000.0
            method = "nvml_energy_counter"
        else:
            joules, method = self._integrated(), "nvml_power_samples"
        if joules is None:
            return {"gpu_energy_j": None, "gpu_energy_gpus": None, "gpu_energy_method": None}
        return {"gpu_energy_j": joules, "gpu_energy_gpus": json.dumps(self.gpus),
                "gpu_energy_method": method}

    def _integrated(self) -> float | None:
        total = 0.0
        for g in range(len(self.gpus)):
            pts = [(t, w[g]) for t, w in self.power if g < len(w) and w[g] is not None]
            if len(pts) < 2:
                return None
            total += sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(pts, pts[1:]))
        return total if self.gpus else None
