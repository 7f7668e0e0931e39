"""`run-sweep --executor slurm` through the real submitit path. There is no srun here, so
submitit's LocalExecutor runs each array task as local processes (a controller and the task, as
srun would on a node); the task function, its server, the result pickle, the job ids and the
cancel are submitit's real ones.

Slow tier: the same accept lengths as the local executor (greedy), every run naming the job that
measured it (checked against submitit's own job log and submitted pickle), only the driver
opening the database, a signal to run-sweep cancelling the array with nothing left running, a
preempted task (SIGTERM, as Slurm sends) or one near its time limit (SIGUSR2, submitit's
--signal) and a lost one (SIGKILL) stored as failed rows with the reason and measured again by a
re-run, a SIGKILLed driver leaving nothing behind.
Default tier: the `[slurm]` table, job ids, GPU picking, and the sbatch script submitit writes for
the settings (a recording `sbatch` on PATH: the one step that needs a Slurm controller), with
`scancel` naming exactly the array's tasks, and a SIGKILLed driver's watchdog scancelling them.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_sweep_e2e import ROOT, DbOpeners, leftovers, quiet, rows

submitit = pytest.importorskip("submitit", reason="pip install 'specwatch[slurm]'")

from specwatch.run import procs, slurm_executor, slurm_settings, sweep, sweepfile  # noqa: E402

SWEEP = """\
name = "{name}"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "4", "--device", "cpu"]
concurrency = [1, 2]
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
{extra}"""


def sweep_file(tmp_path: Path, name: str, n: int = 3, extra: str = "") -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(SWEEP.format(name=name, n=n, extra=extra))
    return p


def submitit_procs(folder: Path) -> list[int]:
    """Live submitit controllers and tasks of this folder (their command lines name it)."""
    out = []
    for p in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")
            state = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and "submitit" in cmd and str(folder) in cmd:
            out.append(int(p))
    return out


def nothing_left(tmp_path: Path, folder: Path, within_s: float = 30.0) -> tuple[list, list]:
    end = time.monotonic() + within_s
    while (leftovers(tmp_path) or submitit_procs(folder)) and time.monotonic() < end:
        time.sleep(0.2)
    return leftovers(tmp_path), submitit_procs(folder)


def job_record(folder: Path, job_id: str) -> tuple[str, str, str]:
    """What submitit itself wrote for a job: (job id, hostname) from its log's first line and the
    config name from its submitted pickle."""
    first = (folder / f"{job_id}_0_log.out").read_text().splitlines()[0]
    m = re.search(r"JobEnvironment\(job_id=([^,]+), hostname=([^,]+),", first)
    sub = submitit.core.utils.DelayedSubmission.load(folder / f"{job_id}_submitted.pkl")
    return m.group(1), m.group(2), sub.args[0].config.name


def tasks_by_config(tmp_path: Path) -> dict[str, int]:
    """{config: pid of the submitit task running its server}: a server's parent is its task."""
    out = {}
    for pid in leftovers(tmp_path):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            parent = open(f"/proc/{ppid}/cmdline", "rb").read()
        except (OSError, ValueError):
            continue
        run_dir = next(e for e in env if e.startswith(b"SPECWATCH_RUN_DIR=")).decode()
        if b"submitit.core._submit" in parent:
            out[Path(run_dir.split("=", 1)[1]).name] = ppid
    return out


# ------------------------------------------------------------------------------- slow: end to end

@pytest.mark.slow
@pytest.mark.timeout(600)
def test_slurm_sweep_matches_local_and_names_every_job(tmp_path):
    # gpus_per_node = 1: submitit's local executor hands each task GPU 0 (CUDA_VISIBLE_DEVICES),
    # which the server gets (it runs on the CPU all the same: --device cpu)
    s = sweepfile.load(sweep_file(tmp_path, "slurmeq", extra="[slurm]\ngpus_per_node = 1\n"))
    local_db, slurm_db, folder = tmp_path / "local.duckdb", tmp_path / "slurm.duckdb", \
        tmp_path / "submitit"
    sweep.run_sweep(s, str(local_db), str(tmp_path / "local"), progress=quiet())
    watch = DbOpeners(slurm_db)
    res = sweep.run_sweep(s, str(slurm_db), str(tmp_path / "out"), progress=quiet(),
                          executor="slurm", slurm_folder=str(folder))
    assert watch.close() <= {os.getpid()}              # only the driver opened the database
    assert {o.status for o in res.outcomes} == {"ok"}, [o.failure_reason for o in res.outcomes]
    loc = {(r["config_name"], r["concurrency"]): r for r in rows(local_db, "SELECT * FROM runs")}
    got = {(r["config_name"], r["concurrency"]): r for r in rows(slurm_db, "SELECT * FROM runs")}
    assert set(got) == set(loc) and len(got) == 3 * 2
    for key, r in got.items():
        assert r["status"] == "ok"
        # greedy decoding: the accept length does not depend on where it ran (per request, so
        # also at c=2; the server's own average is over its verify steps, whose batches depend
        # on when requests arrive, so it is compared alone at c=1)
        assert r["client_accept_len"] == loc[key]["client_accept_len"], key
        if key[1] == 1:
            assert r["server_accept_len"] == loc[key]["server_accept_len"], key
        assert (r["client_accept_len"] is None) == (key[0] == "baseline"), key
        # the run names the job that measured it, as submitit recorded that job
        job, host, config = job_record(folder / "slurmeq", r["slurm_job_id"])
        assert (job, config) == (r["slurm_job_id"], key[0])
        assert r["node_hostname"] == host == socket.gethostname()
        assert r["slurm_array_task_id"] is None          # local mode: a plain job per config
        assert json.loads(r["gpu_ids"]) == [0]           # the task's one GPU id
    assert len({r["slurm_job_id"] for r in got.values()}) == 3
    # decode windows came back with the logs; the stored source names node and job
    srcs = rows(slurm_db, """SELECT r.config_name, s.path FROM runs r JOIN run_sources rs
                             USING (run_id) JOIN sources s USING (source_id)""")
    jobs = {r["config_name"]: r["slurm_job_id"] for r in got.values()}
    assert srcs and all(Path(x["path"]).name.startswith(
        f"{socket.gethostname()}-{jobs[x['config_name']]}-server-") for x in srcs), srcs
    wins = rows(slurm_db, """SELECT count(*) AS n FROM decode_windows d JOIN run_sources rs
                             ON d.source_id = rs.source_id AND d.byte_offset >= rs.offset_from
                             AND d.byte_offset < rs.offset_to""")
    assert wins[0]["n"] > 0
    assert nothing_left(tmp_path, folder, within_s=10) == ([], [])


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_cancels_the_array_and_leaves_nothing_running(tmp_path, sig):
    db, folder = tmp_path / "c.duckdb", tmp_path / "submitit"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run-sweep",
         str(sweep_file(tmp_path, "slurmint", n=40)), "--db", str(db), "--out-dir",
         str(tmp_path / "runs"), "--executor", "slurm", "--slurm-folder", str(folder)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while len(tasks_by_config(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.3)
    if len(tasks_by_config(tmp_path)) < 3:
        proc.kill()
        raise AssertionError(f"the three array tasks' servers did not start (run-sweep: exit "
                             f"{proc.wait()}):\n{proc.communicate()[1][-3000:]}")
    time.sleep(3)                       # servers up; loads under way
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    got = rows(db, "SELECT * FROM runs")
    assert len(got) == 6 and "running" not in {r["status"] for r in got}
    assert "interrupted" in {r["status"] for r in got}, [(r["status"], r["failure_reason"])
                                                         for r in got]
    assert "failed configs" not in err, err          # a cancel is no failure
    assert all(r["slurm_job_id"] for r in got)       # every run names its job, cut or not
    assert signal.Signals(sig).name in err
    assert nothing_left(tmp_path, folder) == ([], [])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig,why", [(signal.SIGTERM, "preempted"),
                                     (signal.SIGUSR2, "before the time limit")],
                         ids=["preempted", "time-limit"])
def test_preempted_or_lost_task_is_a_failed_row_and_a_rerun_measures_it(tmp_path, sig, why):
    db, folder, out = tmp_path / "p.duckdb", tmp_path / "submitit", tmp_path / "runs"
    s = sweepfile.load(sweep_file(tmp_path, "slurmfail", n=40))
    box = {}
    th = threading.Thread(target=lambda: box.update(res=sweep.run_sweep(
        s, str(db), str(out), progress=quiet(), executor="slurm", slurm_folder=str(folder))))
    th.start()
    deadline = time.monotonic() + 180
    while len(tasks_by_config(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.3)
    tasks = tasks_by_config(tmp_path)
    assert len(tasks) == 3, tasks
    time.sleep(2)
    os.kill(tasks["eagle3-s2k1d3"], sig)    # what Slurm sends a preempted job / near the limit
    os.kill(tasks["eagle3-s3k1d4"], signal.SIGKILL)   # a node lost, an out-of-memory kill
    th.join(timeout=300)
    assert not th.is_alive()
    got = {(r["config_name"], r["concurrency"]): r for r in rows(db, "SELECT * FROM runs")}
    assert len(got) == 6
    assert {got[("baseline", c)]["status"] for c in (1, 2)} == {"ok"}
    preempted = [got[("eagle3-s2k1d3", c)] for c in (1, 2)]
    assert "failed" in {r["status"] for r in preempted}, preempted
    for r in preempted:
        if r["status"] == "failed":
            assert signal.Signals(sig).name in r["failure_reason"] and why in \
                r["failure_reason"], r
            assert f"local job {r['slurm_job_id']}" in r["failure_reason"]
    for c in (1, 2):
        r = got[("eagle3-s3k1d4", c)]
        assert r["status"] == "failed" and "ended without a result" in r["failure_reason"], r
        assert r["slurm_job_id"] and f"local job {r['slurm_job_id']}" in r["failure_reason"]
    assert sweep.failed_configs(str(db), s) == ["eagle3-s2k1d3", "eagle3-s3k1d4"]
    assert nothing_left(tmp_path, folder) == ([], [])  # the lost task's server too (its watchdog)
    first_jobs = {k: r["slurm_job_id"] for k, r in got.items()}

    # resume: only what failed is measured again, by new jobs, and now it is ok
    res = sweep.run_sweep(s, str(db), str(out), progress=quiet(), executor="slurm",
                          slurm_folder=str(folder))
    assert "baseline" in res.up_to_date
    again = {(r["config_name"], r["concurrency"]): r for r in rows(db, "SELECT * FROM runs")}
    assert {r["status"] for r in again.values()} == {"ok"}, [
        (k, r["failure_reason"]) for k, r in again.items()]
    for k, r in again.items():
        if got[k]["status"] == "ok":
            assert r["slurm_job_id"] == first_jobs[k], k        # kept, not measured again
        else:
            assert r["slurm_job_id"] != first_jobs[k], k
    assert nothing_left(tmp_path, folder) == ([], [])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkilled_driver_leaves_no_task_or_server(tmp_path):
    db, folder = tmp_path / "k.duckdb", tmp_path / "submitit"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run-sweep",
         str(sweep_file(tmp_path, "slurmkill", n=40)), "--db", str(db), "--out-dir",
         str(tmp_path / "runs"), "--executor", "slurm", "--slurm-folder", str(folder)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while len(tasks_by_config(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert len(tasks_by_config(tmp_path)) == 3
    proc.kill()
    proc.wait()
    # each task's watchdog stops it (SIGTERM, SIGKILL after the cancel grace); its server's own
    # watchdog stops the server
    assert nothing_left(tmp_path, folder, within_s=60) == ([], [])


# ------------------------------------------------------------------------------- default tier

def settings(text: str) -> slurm_settings.SlurmSettings:
    return sweepfile.loads('model = "builtin:target"\n' + text, "s.toml").slurm


def test_slurm_table_parses_with_defaults():
    assert settings("") == slurm_settings.SlurmSettings()
    assert settings("") .time_limit_min == 60 and settings("").gpus_per_node is None
    got = settings('[slurm]\npartition = "gpu"\naccount = "proj"\ntime_limit_min = 45\n'
                   'gpus_per_node = 0\nconstraint = "h200|a100"\n'
                   'extra_sbatch = ["--qos=high", "--exclusive", "--mem=200G"]\n'
                   'setup = ["module load cuda/12.4"]\narray_parallelism = 3\n'
                   'cluster = "local"\n')
    assert got == slurm_settings.SlurmSettings(
        partition="gpu", account="proj", time_limit_min=45, gpus_per_node=0,
        constraint="h200|a100", extra_sbatch=(("qos", "high"), ("exclusive", True),
                                              ("mem", "200G")),
        setup=("module load cuda/12.4",), array_parallelism=3, cluster="local")


@pytest.mark.parametrize("body,line,message", [
    ('partitoin = "gpu"', 3, "unknown key in [slurm]; did you mean partition?"),
    ("time_limit_min = 0", 3, "time_limit_min: 0 is out of range; allowed: 1..527040"),
    ("time_limit_min = 1.5", 3, "time_limit_min: expected an integer"),
    ("gpus_per_node = -1", 3, "gpus_per_node: -1 is out of range"),
    ("gpus_per_node = true", 3, "gpus_per_node: expected an integer, got true"),
    ("array_parallelism = 0", 3, "array_parallelism: 0 is out of range"),
    ('cluster = "k8s"', 3, "cluster: 'k8s' is not one of auto, slurm, local"),
    ('extra_sbatch = ["--time=10"]', 3, "--time is set by specwatch itself: use the key "
                                        "time_limit_min"),
    ('extra_sbatch = ["--array=0-3"]', 3, "--array is set by specwatch itself"),
    ('extra_sbatch = ["-p", "gpu"]', 3, "-p is set by specwatch itself: use the key partition"),
    ('extra_sbatch = ["--qos high"]', 3, "is not a long sbatch option; write --name=value"),
    ('extra_sbatch = ["qos=high"]', 3, "is not a long sbatch option"),
    ('setup = ["module load x\\nrm -rf /"]', 3, "holds the control character '\\n'"),
    ('partition = "gpu\\u0000"', 3, "holds the control character"),
])
def test_slurm_table_errors_name_file_line_and_key(body, line, message):
    with pytest.raises(sweepfile.SweepFileError) as err:
        settings("[slurm]\n" + body + "\n")
    assert str(err.value).startswith(f"s.toml:{line}: ") and message in str(err.value), err.value


def test_slurm_not_a_table():
    with pytest.raises(sweepfile.SweepFileError, match=r"s.toml:1: slurm: expected a table"):
        sweepfile.loads('slurm = "gpu"\nmodel = "builtin:target"\n', "s.toml")


@pytest.mark.parametrize("job_id,want", [
    ("4242_3", ("4242", 3)), ("4242_0", ("4242", 0)), ("4242", ("4242", None)),
    ("31337", ("31337", None)), ("77_12", ("77", 12)),
])
def test_split_job_id(job_id, want):
    assert slurm_executor.split_job_id(job_id) == want


@pytest.mark.parametrize("need,text,want", [
    (1, "0", (0,)), (2, "2,3", (2, 3)), (2, "4,5,6,7", (4, 5)), (1, None, None), (1, "", None),
    (0, "0,1", None), (1, "GPU-5e1b3c2a-0000", None), (4, "0,1", (0, 1)),
])
def test_visible_gpus(need, text, want):
    assert slurm_executor.visible_gpus(need, text) == want


SLURM_BIN = {
    "srun": "#!/bin/sh\nexit 0\n",
    # sbatch as Slurm's: reads the script, prints its job id; this one also keeps the script
    "sbatch": '#!/bin/sh\nn=$(( $(cat "{rec}/count" 2>/dev/null || echo 4000) + 1 ))\n'
              'echo $n > "{rec}/count"\ncp "$1" "{rec}/sbatch-$n.sh"\n'
              'echo "Submitted batch job $n"\n',
    "scancel": '#!/bin/sh\necho "$@" >> "{rec}/scancel"\n',
    # sacct knows no job yet: submitit keeps waiting for the result files
    "sacct": '#!/bin/sh\necho "JobID|State|NodeList"\n',
}


@pytest.fixture
def slurm_bin(tmp_path, monkeypatch):
    rec, bin_dir = tmp_path / "rec", tmp_path / "bin"
    rec.mkdir()
    bin_dir.mkdir()
    for name, text in SLURM_BIN.items():
        (bin_dir / name).write_text(text.format(rec=rec))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return rec


def sbatch_lines(path: Path) -> dict[str, str]:
    out = {}
    for ln in path.read_text().splitlines():
        if ln.startswith("#SBATCH --"):
            key, _, value = ln[len("#SBATCH --"):].partition("=")
            out[key] = value or True
    return out


@pytest.mark.parametrize("gpus_line,want", [
    ("", {1: 3, 2: 2}),                    # default: tp*pp*dp per config, one array each
    ("gpus_per_node = 2\n", {2: 5}),       # every task asks for 2, one array
    ("gpus_per_node = 0\n", {0: 5}),       # CPU configs: no GPU request
], ids=["per-config", "fixed", "cpu"])
def test_sbatch_script_carries_the_settings_and_scancel_names_the_tasks(
        tmp_path, slurm_bin, gpus_line, want):
    extra = ('[[grid]]\nspeculative_num_steps = 2\nspeculative_eagle_topk = 1\ntp_size = 2\n'
             '[slurm]\npartition = "gpu"\naccount = "proj"\ntime_limit_min = 45\n'
             'constraint = "h200"\nextra_sbatch = ["--qos=high", "--exclusive"]\n'
             'setup = ["module load cuda/12.4", "export HF_HOME=/scratch/hf"]\n'
             'array_parallelism = 1\ncluster = "slurm"\n' + gpus_line)
    s = sweepfile.load(sweep_file(tmp_path, "sb", extra=extra))
    todo = sweep.plan(s, str(tmp_path / "none.duckdb"), force=True)
    jobs = list(sweep._jobs(s, todo, sweep.interleave(s, todo, 0), str(tmp_path / "out"),
                            0).values())
    assert sorted(j.config.tp_size for j in jobs) == [1, 1, 1, 2, 2]
    backend = slurm_executor.SlurmBackend(tmp_path / "submitit", s.slurm, s, quiet())
    handles = backend.submit(jobs)
    scripts = sorted(slurm_bin.glob("sbatch-*.sh"))
    assert len(scripts) == len(want)
    seen = {}
    for path in scripts:
        n = path.stem.split("-")[1]
        opts = sbatch_lines(path)
        gpus = int(opts.get("gpus-per-node", 0))
        seen[gpus] = int(opts["array"].split("-")[1].split("%")[0]) + 1
        assert opts["array"].endswith("%1")           # array_parallelism
        assert (opts["partition"], opts["account"], opts["time"], opts["constraint"]) == (
            "gpu", "proj", "45", "h200")
        assert opts["qos"] == "high" and opts["exclusive"] is True
        assert opts["job-name"] == "specwatch-sb" and opts["nodes"] == "1"
        text = path.read_text()
        assert text.index("module load cuda/12.4") < text.index("export HF_HOME=/scratch/hf") \
            < text.index("srun ")
        # this array's tasks, as submitit numbers them
        assert {h.job_id for h in handles if h.job_id.split("_")[0] == n} == {
            f"{n}_{i}" for i in range(seen[gpus])}
        assert gpus == 0 or all(backend.gpus_per_task(j) == gpus for j, h in zip(jobs, handles)
                                if h.job_id.startswith(n + "_"))
    assert seen == want
    backend.cancel(handles)
    assert sorted((slurm_bin / "scancel").read_text().split()) == sorted(h.job_id
                                                                          for h in handles)
    backend.close()                   # its watchdog scancels the arrays once more, and exits


def test_config_needing_more_gpus_than_asked_is_a_failed_row(tmp_path, slurm_bin):
    extra = '[slurm]\ngpus_per_node = 1\ncluster = "slurm"\n'
    text = sweep_file(tmp_path, "big", extra=extra).read_text().replace(
        "speculative_eagle_topk = 1\n", "speculative_eagle_topk = 1\ntp_size = 2\n")
    s = sweepfile.loads(text, "big.toml")
    todo = sweep.plan(s, str(tmp_path / "none.duckdb"), force=True)
    jobs = list(sweep._jobs(s, todo, sweep.interleave(s, todo, 0), str(tmp_path / "out"),
                            0).values())
    got = []
    slurm_executor.run(jobs, "unused.duckdb", str(tmp_path / "out"), str(tmp_path / "f"),
                       threading.Event(), quiet(), got.append)
    assert {r.config for r in got} == {c.name for c in s.configs} and len(got) == 3
    for r in got:
        assert r.status == "failed" and "needs 2 GPUs (tp*pp*dp) but [slurm] gpus_per_node = 1" \
            in r.failure_reason and len(r.runs) == 2
    assert not list(slurm_bin.glob("sbatch-*"))       # nothing was submitted


def test_sigkilled_driver_scancels_its_arrays(tmp_path, slurm_bin):
    """The arrays run on other machines: if run-sweep dies by SIGKILL, its watchdog scancels
    them (a Ctrl-C does it in the driver)."""
    extra = '[slurm]\ncluster = "slurm"\n'
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run-sweep",
         str(sweep_file(tmp_path, "orphan", extra=extra)), "--db", str(tmp_path / "o.duckdb"),
         "--out-dir", str(tmp_path / "runs"), "--executor", "slurm", "--slurm-folder",
         str(tmp_path / "submitit")], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(slurm_bin.glob("sbatch-*.sh")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(slurm_bin.glob("sbatch-*.sh")), proc.stderr.read() if proc.poll() else "no sbatch"
    # the watchdog starts (and learns the job ids) right after sbatch
    while not [p for p in procs._pids() if procs.proc_stat(p) and procs.proc_stat(p)[1] ==
               str(proc.pid) and str(procs.WATCHDOG) in " ".join(procs.cmdline(p) or [])] \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    assert not (slurm_bin / "scancel").exists()     # still waiting for its tasks
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 20
    while not (slurm_bin / "scancel").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (slurm_bin / "scancel").read_text().split() == ["4001"]   # the one array, whole


@pytest.mark.parametrize("printed,want", [
    ("PREEMPTED|0:15|gpu-node-12\n", ("PREEMPTED", "0:15", "gpu-node-12")),
    ("CANCELLED by 1234|0:0|gpu-node-3\n", ("CANCELLED by 1234", "0:0", "gpu-node-3")),
    ("NODE_FAIL|1:0|gpu-[1-2]\n", ("NODE_FAIL", "1:0", "gpu-[1-2]")),
    ("OUT_OF_MEMORY|0:125|n7\n", ("OUT_OF_MEMORY", "0:125", "n7")),
    ("", (None, None, None)),                        # sacct knows no such job (yet)
], ids=["preempted", "cancelled", "node-fail", "oom", "unknown"])
def test_sacct_state_reads_state_exit_code_and_node(tmp_path, slurm_bin, printed, want):
    (slurm_bin / "sacct.out").write_text(printed)
    sacct = Path(os.environ["PATH"].split(os.pathsep)[0]) / "sacct"
    sacct.write_text(f'#!/bin/sh\necho "$@" > "{slurm_bin}/sacct.args"\n'
                     f'cat "{slurm_bin}/sacct.out"\n')
    assert slurm_executor.sacct_state("4242_3") == want
    args = (slurm_bin / "sacct.args").read_text().split()
    assert args[:2] == ["-j", "4242_3"] and "State,ExitCode,NodeList" in args
