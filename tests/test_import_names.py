"""The project's Triton kernels (`specwatch_kernels`, kept in kernels/specwatch_kernels/) and PyPI's
`kernels` (transformers 5 imports it; the dev extra declares it) both import, whatever the working
directory: the repo root (where `python -m pytest` puts it on sys.path and kernels/ could shadow
PyPI's package), a subdirectory, and a directory outside the repo. Checked in fresh interpreters
(subprocesses: this process has already imported both), for the install this suite runs in
(editable: scripts/test.sh) and, in the slow tier, for a wheel built from the tree.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

PROBE = r"""
import json, sys
import kernels                                   # PyPI's
import specwatch_kernels, specwatch_kernels.ops  # the project's
from specwatch.engine import decode              # the engine's import of the project's kernels
import transformers.integrations.hub_kernels as hub   # transformers' `from kernels import ...`
print(json.dumps({
    "pypi": kernels.__file__, "pypi_has_cuda_properties": hasattr(kernels, "CUDAProperties"),
    "hub_uses_pypi": hub.CUDAProperties is kernels.CUDAProperties,
    "ours": specwatch_kernels.__file__, "ops": specwatch_kernels.ops.__file__,
    "engine_ops": decode.ops.__name__,
}))
"""


def probe(python: str, cwd: Path, env: dict | None = None) -> dict:
    # -c puts the working directory first on sys.path, as `python -m pytest` puts the repo root.
    proc = subprocess.run([python, "-c", PROBE], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, f"from {cwd}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.splitlines()[-1])


def site_packages(python: str) -> Path:
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    return Path(out)


@pytest.mark.parametrize("where", ["repo root", "tests dir", "outside the repo"])
def test_both_kernels_import_from_anywhere(where, tmp_path):
    cwd = {"repo root": ROOT, "tests dir": ROOT / "tests", "outside the repo": tmp_path}[where]
    got = probe(sys.executable, cwd)
    site = site_packages(sys.executable)
    assert Path(got["pypi"]).resolve() == (site / "kernels" / "__init__.py").resolve(), got
    assert got["pypi_has_cuda_properties"] and got["hub_uses_pypi"], got
    assert Path(got["ours"]).resolve() == (ROOT / "kernels" / "specwatch_kernels" / "__init__.py"), got
    assert got["engine_ops"] == "specwatch_kernels.ops"


def test_kernels_folder_is_not_a_package():
    """kernels/ must never become a regular package again: inside the repo it would shadow PyPI's
    `kernels` (transformers' `from kernels import CUDAProperties` failed that way)."""
    assert not (ROOT / "kernels" / "__init__.py").exists()
    assert sorted(p.name for p in (ROOT / "kernels").iterdir() if p.suffix == ".py") == []


@pytest.mark.slow
def test_a_built_wheel_holds_specwatch_kernels_and_no_kernels(tmp_path):
    """A non-editable install: the wheel built from the tree (with the C scanner), installed into a
    directory that is put first on sys.path, imported from outside the repo."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(ROOT)], check=True, capture_output=True, timeout=600)
    (wheel,) = wheels.glob("specwatch-*.whl")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"specwatch", "specwatch_kernels"}, tops
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=600)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = dict(os.environ, PYTHONPATH=str(target))
    got = probe(sys.executable, outside, env)
    assert Path(got["ours"]).parent == target / "specwatch_kernels", got
    assert Path(got["pypi"]).resolve() == (site_packages(sys.executable) / "kernels" / "__init__.py").resolve()
    assert got["hub_uses_pypi"] and got["engine_ops"] == "specwatch_kernels.ops"
