"""SIGTERM to `run-sweep` leaves no run `running`: configs it never reached are `interrupted`.
(Seen on the H200: a sweep stopped while one SGLang server started kept the next config's rows
`running` for ever.)"""
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from specwatch.run import launch

ROOT = Path(__file__).resolve().parent.parent

SWEEP = """\
name = "term"
engine = "builtin"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "4"]
concurrency = [1]
port = {port}
stop_grace_s = 2
env = {{OMP_NUM_THREADS = "1"}}
[workload]
prompts = "builtin:chat"
num_prompts = 2
warmup_requests = 0
output_tokens = 4
[[grid]]
speculative_num_steps = [2, 3]
speculative_eagle_topk = 1
"""


def test_sigterm_before_later_configs_start_stores_them_interrupted(tmp_path):
    port = launch.free_port()
    (tmp_path / "t.toml").write_text(SWEEP.format(port=port))   # fixed port: one config at a time
    db = tmp_path / "s.duckdb"
    out = tmp_path / "out.log"
    with open(out, "w") as f:
        p = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "run-sweep",
                              str(tmp_path / "t.toml"), "--db", str(db), "--out-dir",
                              str(tmp_path / "runs")], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "launched pid" not in out.read_text():
            assert p.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
    assert rc == 130, out.read_text()
    con = duckdb.connect(str(db), read_only=True)
    statuses = dict(con.execute("SELECT config_name, list(DISTINCT status) FROM runs GROUP BY 1"
                                ).fetchall())
    con.close()
    assert len(statuses) == 3, statuses                     # baseline + 2 chain configs
    assert all("running" not in s for s in statuses.values()), statuses
    assert sum(s == ["interrupted"] for s in statuses.values()) >= 2, statuses
