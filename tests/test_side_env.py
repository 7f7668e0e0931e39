"""The side-env cache (scripts/_side_env.sh, through scripts/sglang_env.sh): builds that run at
the same time never harm each other, a killed build is never used, and a published env is only
ever a finished one.

Real processes: `bash scripts/sglang_env.sh` run as CI runs it, with the requirement set replaced
by a tiny wheel this test writes (SPECWATCH_SGLANG_TEST_SPECS; installed with --no-index, so no
network), in a cache dir of its own. Each case starts the builds together and checks what each
printed, that the python it printed imports the wheel, and what is left in the cache.
"""
from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow
SCRIPT = ROOT / "scripts" / "sglang_env.sh"


def make_wheel(dest: Path, name: str, version: str = "1.0") -> Path:
    """A pure-Python wheel holding module NAME (NAME.VALUE == VERSION)."""
    files = {f"{name}/__init__.py": f"VALUE = {version!r}\n",
             f"{name}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL":
                 "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    wheel = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{name}-{version}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def start(cache: Path, wheel: Path, module: str, **extra) -> subprocess.Popen:
    env = dict(os.environ, SPECWATCH_SGLANG_CACHE=str(cache),
               SPECWATCH_SGLANG_TEST_SPECS=f"--no-index {wheel}",
               SPECWATCH_SGLANG_TEST_CHECK=module, **extra)
    return subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out.strip(), err


def imports(python: str, module: str) -> str:
    return subprocess.run([python, "-c", f"import {module}; print({module}.VALUE)"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def leftovers(cache: Path) -> list[str]:
    """Build dirs no published link points to."""
    published = {p.resolve() for p in cache.iterdir() if p.is_symlink()}
    return sorted(d.name for d in (cache / ".build").iterdir() if d.resolve() not in published)


@pytest.fixture
def wheels(tmp_path):
    d = tmp_path / "wheels"
    d.mkdir()
    return {"a": make_wheel(d, "sidetest_a"), "b": make_wheel(d, "sidetest_b", "2.0")}


def test_two_builds_of_one_set_at_once_share_one_env(tmp_path, wheels):
    cache = tmp_path / "cache"
    first, second = start(cache, wheels["a"], "sidetest_a"), start(cache, wheels["a"], "sidetest_a")
    (out1, err1), (out2, err2) = finish(first), finish(second)
    # Both got the same env.
    assert out1 == out2 and out1.endswith("/bin/python")
    assert imports(out1, "sidetest_a") == "1.0"
    # Exactly one built; the other waited on the lock and took the published env.
    assert (err1 + err2).count("side env: building") == 1, err1 + err2
    assert leftovers(cache) == []
    # A third run is a cache hit: nothing is built.
    out3, err3 = finish(start(cache, wheels["a"], "sidetest_a"))
    assert out3 == out1 and "building" not in err3


def test_two_builds_of_different_sets_at_once_both_work(tmp_path, wheels):
    cache = tmp_path / "cache"
    pa = start(cache, wheels["a"], "sidetest_a")
    pb = start(cache, wheels["b"], "sidetest_b")
    (out_a, _), (out_b, _) = finish(pa), finish(pb)
    assert out_a != out_b
    assert imports(out_a, "sidetest_a") == "1.0" and imports(out_b, "sidetest_b") == "2.0"
    # The first env survives the second's build and its clean-up.
    assert imports(out_a, "sidetest_a") == "1.0"
    assert leftovers(cache) == []


def test_a_killed_build_is_never_published_and_the_next_run_cleans_it(tmp_path, wheels):
    cache = tmp_path / "cache"
    victim = start(cache, wheels["a"], "sidetest_a")
    deadline = time.monotonic() + 120
    while not list((cache / ".build").glob("test-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list((cache / ".build").glob("test-*")), "the build never started"
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    # Half-built: nothing published, so no run can pick it up.
    assert not [p for p in cache.iterdir() if p.is_symlink()]
    out, err = finish(start(cache, wheels["a"], "sidetest_a"))
    assert imports(out, "sidetest_a") == "1.0"
    assert leftovers(cache) == []


def test_a_broken_published_env_is_rebuilt(tmp_path, wheels):
    cache = tmp_path / "cache"
    out, _ = finish(start(cache, wheels["a"], "sidetest_a"))
    # Someone deletes the installed package: the check fails, so the env is built again.
    site = subprocess.run([out, "-c", "import sidetest_a, os; print(os.path.dirname(sidetest_a.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["rm", "-rf", site], check=True)
    again, err = finish(start(cache, wheels["a"], "sidetest_a"))
    assert "side env: building" in err and again != out
    assert imports(again, "sidetest_a") == "1.0"


def test_a_failing_build_publishes_nothing_and_says_so(tmp_path):
    cache = tmp_path / "cache"
    proc = start(cache, tmp_path / "no-such-wheel-1.0-py3-none-any.whl", "sidetest_a")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and out == ""
    assert "side env: building test-0.5.23 failed" in err
    assert not [p for p in cache.iterdir() if p.is_symlink()]
    assert list((cache / ".build").iterdir()) == []


def test_the_interpreter_must_be_python_3_11(tmp_path, wheels):
    other = "python3.12" if sys.version_info[:2] == (3, 11) else "python3.11"
    proc = start(tmp_path / "cache", wheels["a"], "sidetest_a", SPECWATCH_SIDE_PYTHON=other)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and out == ""
    assert f"interpreter '{other}' is not a working Python 3.11" in err
