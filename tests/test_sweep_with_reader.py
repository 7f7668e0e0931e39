"""A long read-only query never aborts a running sweep (issue 13: a 25 s `specwatch sql` made the
sweep's writer give up and lose a measured run; kept covered by issue 26). The real `run-sweep`
(built-in engine, baseline + one speculative config) runs while real `specwatch sql` processes
hold the database with queries that run to their time limit, back to back."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import duckdb
import pytest

from tests.conftest import ROOT
from tests.test_sweep_e2e import leftovers, make

LONG = "SELECT sum(a.range % 7) FROM range(10000000000000) a"   # runs until its --timeout


@pytest.mark.slow   # ~30 s on 2 cores
def test_a_long_reader_never_aborts_a_running_sweep(tmp_path):
    db = tmp_path / "s.duckdb"
    make(tmp_path, "reader", """
[[config]]
name = "s2"
speculative_num_steps = 2
speculative_eagle_topk = 1
""", conc="[1, 2]", n=16)
    sweep_proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run-sweep", str(tmp_path / "reader.toml"),
         "--db", str(db), "--out-dir", str(tmp_path / "runs")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held: list[tuple[float, float, str]] = []

    def readers():   # one long query after another, from when the database exists
        while sweep_proc.poll() is None:
            if not db.exists():
                time.sleep(0.1)
                continue
            t0 = time.monotonic()
            p = subprocess.run([sys.executable, "-m", "specwatch.cli", "sql", LONG, "--db",
                                str(db), "--timeout", "6"], cwd=ROOT, capture_output=True,
                               text=True, timeout=120)
            held.append((t0, time.monotonic(), p.stderr))

    t = threading.Thread(target=readers)
    t.start()
    try:
        out, err = sweep_proc.communicate(timeout=600)
    finally:
        sweep_proc.kill()
        t.join(180)
    assert sweep_proc.returncode == 0, out + err
    assert "locked" not in err and "Traceback" not in err, err
    # the readers really held the file during the sweep, to their limit
    assert sum("longer than 6 s" in e for _, _, e in held) >= 2, held
    con = duckdb.connect(str(db), read_only=True)
    runs = con.execute("SELECT config_name, concurrency, status FROM runs ORDER BY 1, 2").fetchall()
    assert runs == [("baseline", 1, "ok"), ("baseline", 2, "ok"), ("s2", 1, "ok"), ("s2", 2, "ok")]
    assert con.execute("SELECT count(*) FROM requests WHERE NOT is_warmup").fetchone()[0] == 4 * 16
    assert leftovers(tmp_path) == []
