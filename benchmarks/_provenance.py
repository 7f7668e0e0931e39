"""What a results file must record so that a stale one shows: commit, device, weights, versions."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """`git describe`-like: the HEAD commit, '+dirty' when tracked engine/kernel files differ.
    SPECWATCH_COMMIT overrides it (the device tool's copy of the tree can carry stale git metadata:
    pass the commit the tree was sent at)."""
    if os.environ.get("SPECWATCH_COMMIT"):
        return os.environ["SPECWATCH_COMMIT"] + " (as given by SPECWATCH_COMMIT)"
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=20).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "specwatch",
                                "kernels", "benchmarks"], cwd=ROOT, capture_output=True, text=True,
                               timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return (head or "unknown") + ("+dirty" if dirty else "")


def weight_hashes(models_dir: Path, names=("target", "draft-eagle3", "draft-eagle3-shifted")) -> list[str]:
    out = []
    for name in names:
        f = models_dir / name / "model.safetensors"
        if f.exists():
            out.append(f"{name}/model.safetensors sha256 {hashlib.sha256(f.read_bytes()).hexdigest()[:12]}")
    return out


def lines(device: torch.device, models_dir: Path) -> list[str]:
    """Markdown bullet lines: commit, host, versions, GPU, TF32 settings, weight hashes."""
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "-"
    out = [f"- commit: {commit()}",
           f"- host: {platform.node()} ({platform.machine()}), python {platform.python_version()}, "
           f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {tv}, {torch.get_num_threads()} CPU threads"]
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        try:
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            drv = None
        out.append(f"- device: {device} = {p.name}, {p.multi_processor_count} SMs, "
                   f"{p.total_memory / 2**30:.0f} GiB, driver {drv}")
    else:
        out.append(f"- device: cpu ({platform.processor() or platform.machine()})")
    out.append(f"- TF32: matmul {torch.backends.cuda.matmul.allow_tf32}, cudnn {torch.backends.cudnn.allow_tf32}; "
               f"float32_matmul_precision {torch.get_float32_matmul_precision()}")
    out += [f"- weights {h}" for h in weight_hashes(models_dir)]
    return out
