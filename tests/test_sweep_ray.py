"""`run-sweep --executor ray` on a real Ray cluster simulated on this machine: a head (no
resources) and 2 nodes with 1 CPU and 2 fake GPUs each, all on this host
(`ray.cluster_utils.Cluster`). The built-in engine runs with `--device cpu` on the fake GPUs, so
the placement (Ray's GPU ids -> CUDA_VISIBLE_DEVICES) is real while the compute stays on the CPU.

Checked: the same accept lengths as a local run (greedy), configs running at the same time on
different nodes, node id / hostname / GPU ids per run, only the driver opening the DuckDB file,
logs shipped back and named by node, no server left after the sweep, after a Ctrl-C and after a
node is killed mid-sweep (its config retried elsewhere or failed, nothing stored twice)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_sweep_e2e import ROOT, DbOpeners, leftovers, quiet, rows

ray = pytest.importorskip("ray", reason="pip install 'specwatch[ray]' (scripts/test.sh does)")
from ray.cluster_utils import Cluster  # noqa: E402

from specwatch.run import sweep, sweepfile  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SWEEP = """\
name = "{name}"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "4", "--device", "cpu"]
concurrency = [1, 2]
repeats = {repeats}
startup_timeout_s = 120
stop_grace_s = 5
env = {{OMP_NUM_THREADS = "1"}}

[workload]
prompts = "builtin:chat"
num_prompts = {n}
warmup_requests = 1
output_tokens = 12
temperature = 0.0

[[grid]]
speculative_num_steps = [2, 3]
speculative_eagle_topk = 1
"""


def sweep_file(tmp_path: Path, name: str, n: int = 3, repeats: int = 1) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(SWEEP.format(name=name, n=n, repeats=repeats))
    return p


@pytest.fixture(scope="module")
def cluster():
    # (Ray maps 127.0.0.1 to this host's own address for its control plane, so the nodes use
    # that; every server still binds 127.0.0.1 and nothing leaves this machine.)
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "num_gpus": 0, "include_dashboard": False})
    nodes = [c.add_node(num_cpus=1, num_gpus=2) for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


def test_a_task_that_raises_is_reported_with_its_exception_and_frame(cluster):
    # Ray's first line names only the task ('ray::f() (pid=.., ip=..)'): the reason a run
    # stores must say what the task raised and where
    from specwatch.run import ray_executor

    @ray.remote(num_cpus=1, max_retries=0)
    def boom():
        return len(None)   # TypeError, inside the task

    with pytest.raises(ray.exceptions.RayTaskError) as info:
        ray.get(boom.remote(), timeout=120)
    why = ray_executor.task_failure(info.value)
    assert why.startswith("Ray task raised TypeError")
    assert "TypeError: object of type 'NoneType' has no len()" in why and "\x1b" not in why
    assert "test_sweep_ray.py" in why and "in boom" in why


def test_ray_sweep_matches_local_and_records_nodes(cluster, tmp_path):
    c, nodes = cluster
    node_ids = {n.node_id for n in nodes}
    path = sweep_file(tmp_path, "rayeq")
    s = sweepfile.load(path)
    local_db, ray_db = tmp_path / "local.duckdb", tmp_path / "ray.duckdb"
    sweep.run_sweep(s, str(local_db), str(tmp_path / "local"), progress=quiet())
    watch = DbOpeners(ray_db)
    res = sweep.run_sweep(s, str(ray_db), str(tmp_path / "ray"), progress=quiet(),
                          executor="ray", ray_address=c.address)
    openers = watch.close()
    assert openers <= {os.getpid()}, openers            # only the driver opened the database
    assert {o.status for o in res.outcomes} == {"ok"}, [o.failure_reason for o in res.outcomes]
    loc = {(r["config_name"], r["concurrency"]): r for r in rows(local_db, "SELECT * FROM runs")}
    got = {(r["config_name"], r["concurrency"]): r for r in rows(ray_db, "SELECT * FROM runs")}
    assert set(got) == set(loc) and len(got) == 3 * 2
    for key, r in got.items():
        assert r["status"] == "ok"
        # greedy decoding: the accept length does not depend on where it ran
        assert r["client_accept_len"] == loc[key]["client_accept_len"], key
        assert r["ray_node_id"] in node_ids and r["node_hostname"]
        gpu = json.loads(r["gpu_ids"])
        assert len(gpu) == 1 and gpu[0] in (0, 1), r["gpu_ids"]
        assert r["ray_retries"] == 0
    # decode windows came back with the logs; the stored source names the node
    srcs = rows(ray_db, """SELECT DISTINCT s.path FROM run_sources rs JOIN sources s
                           USING (source_id)""")
    host = got[("baseline", 1)]["node_hostname"]
    assert len(srcs) == 3 and all(
        Path(x["path"]).name.startswith(tuple(f"{host}-{n[:8]}-" for n in node_ids))
        and x["path"].startswith(str(tmp_path / "ray")) for x in srcs), srcs
    wins = rows(ray_db, """SELECT count(*) AS n FROM decode_windows d JOIN run_sources rs
                           ON d.source_id = rs.source_id AND d.byte_offset >= rs.offset_from
                           AND d.byte_offset < rs.offset_to""")
    assert wins[0]["n"] > 0
    # 3 configs on 2 nodes x 2 GPUs: both nodes were used, and runs of different configs
    # overlapped in time (they ran concurrently)
    assert len({r["ray_node_id"] for r in got.values()}) == 2
    # A task's span: from its server's start (the server_args line's timestamp in the log it
    # returned) to its last run's end. Load windows alone are too short to overlap reliably on
    # a quiet machine (each config's runs last ~1 s after a ~4 s start-up).
    starts = {x["config_name"]: x["t0"] for x in rows(ray_db, """
        SELECT r.config_name, min(sc.ts) AS t0 FROM runs r JOIN run_sources rs USING (run_id)
        JOIN server_configs sc ON sc.source_id = rs.source_id GROUP BY 1""")}
    spans = {}
    for r in got.values():
        lo, hi = spans.get(r["config_name"], (starts[r["config_name"]], r["ended_at"]))
        spans[r["config_name"]] = (lo, max(hi, r["ended_at"]))
    (a, b, cc) = sorted(spans.values())
    assert a[1] > b[0] or b[1] > cc[0], spans
    # the per-run Parquet files read back as the runs
    import duckdb
    pq = duckdb.sql(f"SELECT count(*), count(DISTINCT run_id) FROM read_parquet("
                    f"'{tmp_path / 'ray'}/**/*.parquet')").fetchall()[0]
    assert pq == (6, 6)
    assert leftovers(tmp_path) == []


def test_ctrl_c_cancels_ray_tasks_and_leaves_no_server(cluster, tmp_path):
    """Ctrl-C while Ray tasks run: exit 130, every run stored `interrupted` (none `running`, none
    `ok`: each config asks for far more requests than can be served before the signal, so none can
    have finished, however fast or loaded the machine), and every server stops."""
    c, _ = cluster
    db = tmp_path / "c.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run-sweep",
         str(sweep_file(tmp_path, "rayint", n=5000)), "--db", str(db), "--out-dir",
         str(tmp_path / "runs"), "--executor", "ray", "--ray-address", c.address],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Signal once a task's server is up (on a loaded machine the second may still be starting:
    # both cases are cancelled the same way).
    deadline = time.monotonic() + 300
    while not leftovers(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.3)
    assert leftovers(tmp_path), f"no server started; exit {proc.poll()}"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    got = rows(db, "SELECT config_name, concurrency, status FROM runs")
    # 3 configs (the baseline and 2 chains) x 2 concurrencies x 1 repeat, each stored once
    assert len(got) == 6 and len({(r["config_name"], r["concurrency"]) for r in got}) == 6, got
    assert {r["status"] for r in got} == {"interrupted"}, got
    # Each cancelled task stops its server (stop_grace_s = 5, then SIGKILL);
    # bounded, with room for a loaded machine.
    end = time.monotonic() + 120
    while leftovers(tmp_path) and time.monotonic() < end:
        time.sleep(0.2)
    assert leftovers(tmp_path) == []


def test_killed_node_is_retried_or_failed_never_stored_twice(cluster, tmp_path):
    """Runs last in this module: it removes one node of the cluster."""
    c, nodes = cluster
    db = tmp_path / "k.duckdb"
    s = sweepfile.load(sweep_file(tmp_path, "raykill", n=24))
    box = {}
    th = threading.Thread(target=lambda: box.update(res=sweep.run_sweep(
        s, str(db), str(tmp_path / "runs"), progress=quiet(), executor="ray",
        ray_address=c.address)))
    th.start()
    deadline = time.monotonic() + 180
    while len(leftovers(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert len(leftovers(tmp_path)) >= 3, "servers did not start"
    time.sleep(2)
    c.remove_node(nodes[1])             # its raylet and workers die; Ray retries their tasks
    th.join(timeout=500)
    assert not th.is_alive()
    got = rows(db, "SELECT * FROM runs")
    assert len(got) == 3 * 2 and len({r["run_id"] for r in got}) == 6
    dup = rows(db, "SELECT run_id, request_idx, count(*) AS n FROM requests GROUP BY ALL "
                   "HAVING n > 1")
    assert dup == []
    assert all(r["status"] in ("ok", "failed") for r in got), [r["status"] for r in got]
    retried = [r for r in got if (r["ray_retries"] or 0) >= 1]
    failed = [r for r in got if r["status"] == "failed"]
    assert retried or failed
    for r in retried:
        assert r["ray_node_id"] == nodes[0].node_id and r["status"] == "ok"
    for r in failed:
        assert "Ray task failed" in r["failure_reason"]
    end = time.monotonic() + 20
    while leftovers(tmp_path) and time.monotonic() < end:
        time.sleep(0.2)
    assert leftovers(tmp_path) == []
