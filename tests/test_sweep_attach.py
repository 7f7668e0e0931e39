"""Attach mode: `run-sweep --endpoint URL [--log PATH]` measures a server specwatch did not start.

The test starts a built-in engine itself (as a deployment would), attaches to it through the CLI,
and compares with a launched run of the same config: greedy decoding gives the same accept
length, throughput agrees within noise, the log (when given) scopes decode windows to each run,
nothing is launched and the server is left running for its owner."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_sweep_e2e import ROOT, leftovers, quiet, rows

from specwatch.run import launch, load, sweep, sweepfile

SWEEP = """\
name = "{name}"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "4"]
concurrency = [1, 2]
repeats = 2
env = {{OMP_NUM_THREADS = "1"}}

[workload]
prompts = "builtin:chat"
num_prompts = 6
warmup_requests = 1
output_tokens = 16

[[config]]
name = "eagle3-s3"
speculative_num_steps = 3
speculative_eagle_topk = 1
"""


def start_server(cfg, log: Path, port: int) -> subprocess.Popen:
    argv = launch.command("builtin", cfg, port)
    env = launch.environment(dict(os.environ), (("OMP_NUM_THREADS", "1"),), None, "builtin")
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while load.health(port, 1.0) != 200:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)
    return proc


@pytest.mark.slow  # 12-15 s on 2 cores
def test_attach_matches_a_launched_run_and_reads_the_log(tmp_path):
    p = tmp_path / "att.toml"
    p.write_text(SWEEP.format(name="att"))
    s = sweepfile.load(p)
    cfg = next(c for c in s.configs if not c.is_baseline)
    launched_db, attached_db = tmp_path / "launched.duckdb", tmp_path / "attached.duckdb"
    sweep.run_sweep(s, str(launched_db), str(tmp_path / "runs-l"), progress=quiet())

    port = launch.free_port()
    log = tmp_path / "deployed.log"
    server = start_server(cfg, log, port)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "specwatch.cli", "run-sweep", str(p), "--db", str(attached_db),
             "--out-dir", str(tmp_path / "runs-a"), "--endpoint", f"http://127.0.0.1:{port}",
             "--log", str(log)], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert server.poll() is None                     # attach never stops the server
        assert leftovers(tmp_path) == []                 # and launches nothing
        # without --log: /server_info still gives the server's accept length
        nolog = tmp_path / "nolog.duckdb"
        res = sweep.run_sweep(s, str(nolog), str(tmp_path / "runs-n"), progress=quiet(),
                              attach={cfg.name: (f"http://127.0.0.1:{port}", None)})
        assert [o.status for o in res.outcomes] == ["ok"]
    finally:
        server.terminate()
        server.wait(30)

    la = {(r["concurrency"], r["repeat_idx"]): r
          for r in rows(launched_db, "SELECT * FROM runs WHERE config_name = ?", [cfg.name])}
    at = {(r["concurrency"], r["repeat_idx"]): r for r in rows(attached_db, "SELECT * FROM runs")}
    assert set(at) == set(la) and len(at) == 4
    for key, r in at.items():
        assert r["status"] == "ok" and r["attached_endpoint"] == f"http://127.0.0.1:{port}"
        assert r["client_accept_len"] == la[key]["client_accept_len"]       # greedy: equal
        assert r["server_accept_len"] is not None
    # throughput: the same server config under the same load agrees within noise. Other work on
    # the (shared, 2-core) machine only ever slows a run down, so compare the best repeat.
    for conc in (1, 2):
        best = [max(d[(conc, r)]["output_tok_s"] for r in (0, 1)) for d in (at, la)]
        assert 0.5 < best[0] / best[1] < 2.0, (conc, best)
    # accept length from the log: each run's byte range holds its decode windows
    wins = rows(attached_db, """SELECT rs.run_id, count(*) AS n, avg(d.accept_len) AS al
                                FROM run_sources rs JOIN sources s USING (source_id)
                                JOIN decode_windows d ON d.source_id = rs.source_id
                                 AND d.byte_offset >= rs.offset_from
                                 AND d.byte_offset < rs.offset_to
                                WHERE s.path = ? GROUP BY rs.run_id""", [str(log.resolve())])
    assert len(wins) == 4 and all(w["n"] >= 1 and w["al"] > 1.0 for w in wins), wins
    n = rows(nolog, "SELECT count(*) AS n, count(server_accept_len) AS sal FROM runs")[0]
    assert n == {"n": 4, "sal": 4}
    assert rows(nolog, "SELECT count(*) AS n FROM run_sources")[0]["n"] == 0
