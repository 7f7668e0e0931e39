"""Shared fixtures: a real DuckDB file per test, the real CLI, and the repo's sample logs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

# Signals this run inherited as ignored (`nohup` ignores SIGHUP; a non-interactive shell's
# background `&` ignores SIGINT and SIGQUIT) stay ignored in every process a test starts, so
# "specwatch dies of SIGHUP" and "run-sweep stops on SIGINT" failed only when the suite was
# launched that way (test_lifecycle's SIGHUP case, test_sweep_ray's Ctrl-C). The tests are about
# the dispositions a terminal gives, which they get here whatever launched them.
for _sig in (signal.SIGHUP, signal.SIGQUIT):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The suite runs on CPU: Triton kernels run interpreted. This must be set before any module imports
# triton, so it lives here rather than in the kernel test modules (tests/test_kernels_aot.py
# compiles for sm_90 in a subprocess without it).
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"


# The README's example sweep (the example_sweep fixture) runs inside the setup of the first test
# that uses it: ~2 min on an idle 2-core machine, over 10 min under load (it is CPU-bound), so
# such tests get this timeout instead of addopts' 600 s (the sweep itself is cut a minute earlier).
EXAMPLE_SWEEP_TIMEOUT_S = 1800


def pytest_collection_modifyitems(config, items):
    """SPECWATCH_TEST_SHARD=I/N keeps every N-th collected test from the I-th (0-based): the GPU
    machine runs the compiled kernel tests as N processes, so Triton compiles in parallel.
    Tests that use example_sweep get EXAMPLE_SWEEP_TIMEOUT_S."""
    for item in items:
        if "example_sweep" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(EXAMPLE_SWEEP_TIMEOUT_S))
    shard = os.environ.get("SPECWATCH_TEST_SHARD")
    if not shard:
        return
    try:
        i, n = (int(x) for x in shard.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"SPECWATCH_TEST_SHARD={shard!r}: expected I/N with 0 <= I < N, e.g. 0/4")
    kept = items[i::n]
    config.hook.pytest_deselected(items=[t for j, t in enumerate(items) if j % n != i])
    items[:] = kept


def pytest_ignore_collect(collection_path, config):
    """tests/contract/ needs the real sglang: it runs as its own tier under the side environment
    (scripts/test.sh), not in specwatch's environment, where sglang is absent."""
    if collection_path.name == "contract" and collection_path.parent == ROOT / "tests":
        import importlib.util
        return importlib.util.find_spec("sglang") is None
    # tests/contract_vllm/ likewise needs real vLLM (the side env of scripts/vllm_env.sh)
    if collection_path.name == "contract_vllm" and collection_path.parent == ROOT / "tests":
        import importlib.util
        return importlib.util.find_spec("vllm") is None
    return None


class Spawned(list):
    """Processes a test module started; `reap()` kills whichever still run (a module's autouse
    fixture calls it after each test, so nothing a test started outlives it, whatever it asserts)."""

    def reap(self) -> None:
        while self:
            p = self.pop()
            if p.poll() is None:
                p.kill()
                p.wait()


def assert_rows_close(a: list[tuple], b: list[tuple], names=None, rel=1e-12, abs=1e-12) -> None:
    """Rows a equal rows b: floats to `rel`/`abs`, every other field (ints, strings, dates, None)
    exactly. Field by field: pytest.approx of a whole row rejects rows that hold strings
    (pytest 9.2). `names` (column names) label the failure."""
    assert len(a) == len(b), (len(a), len(b))
    for ra, rb in zip(a, b):
        assert len(ra) == len(rb), (ra, rb)
        for i, (x, y) in enumerate(zip(ra, rb)):
            name = names[i] if names else i
            if isinstance(x, float) and isinstance(y, float):
                assert x == pytest.approx(y, rel=rel, abs=abs), (ra[:5], name, x, y)
            else:
                assert x == y, (ra[:5], name, x, y)


def drain(db, log, run: str = "r", **kw) -> None:
    """Ingest `log` into `db` poll by poll with a FileIngestor of these settings (e.g. small
    `chunk_bytes`, so that chunk ends fall everywhere) until a poll finds nothing new."""
    from specwatch.logs import ingest
    ing = ingest.FileIngestor(db, log, run, **kw)
    try:
        while ing.poll().lines:
            pass
    finally:
        ing.close()


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "specwatch.duckdb"


def run_cli(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `python -m specwatch.cli ARGS` as a real process."""
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"specwatch {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def samples_db(tmp_path_factory) -> Path:
    """A database with every sample log ingested (one run per file)."""
    path = tmp_path_factory.mktemp("samples") / "samples.duckdb"
    from specwatch.logs import ingest
    ingest.ingest_paths(path, [str(SAMPLES)])
    return path


@pytest.fixture(scope="session")
def example_sweep(tmp_path_factory) -> dict:
    """The README's main job, `specwatch run-sweep examples/builtin_sweep.toml`, run once through
    the real CLI (~2 min on 2 cores) and shared by the tests that read its database or its table:
    {"db": path, "stdout": the final table, "sweep": the loaded sweep file}."""
    from specwatch.run import sweepfile
    example = ROOT / "examples" / "builtin_sweep.toml"
    tmp = tmp_path_factory.mktemp("example")
    db = tmp / "example.duckdb"
    env = dict(os.environ, COLUMNS="120", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "run-sweep", str(example),
                           "--db", str(db), "--out-dir", str(tmp / "runs")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=EXAMPLE_SWEEP_TIMEOUT_S - 60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"db": db, "stdout": proc.stdout, "sweep": sweepfile.load(example)}

