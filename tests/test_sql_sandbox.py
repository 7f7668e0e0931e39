"""Read-only SQL is a sandbox (issue 13): each attack of the adversarial run, through the real
`specwatch sql` process and `query.run_sql` on real DuckDB files, is refused or stopped, and the
files it aimed at are unchanged afterwards."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time

import duckdb
import pytest

from specwatch.db import query, store
from tests.conftest import ROOT, run_cli


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def dbs(samples_db, tmp_path):
    """The samples database copied (tests may attack it) plus a victim database next to it."""
    db = tmp_path / "store.duckdb"
    shutil.copy(samples_db, db)
    victim = tmp_path / "victim.duckdb"
    con = duckdb.connect(str(victim))
    con.execute("CREATE TABLE precious AS SELECT range AS i FROM range(100)")
    con.close()
    return db, victim


def sql(db, text, *extra, timeout=60):
    p = run_cli("sql", text, "--db", db, *extra, check=False, timeout=timeout)
    assert "Traceback" not in p.stderr, p.stderr
    return p


ATTACKS = [
    # (what, SQL template: {victim} {db} {dir} filled in, the words the refusal must contain)
    ("COPY TO another database file", "COPY (SELECT 1) TO '{victim}'", "COPY statements are not allowed"),
    ("COPY TO a fresh path", "COPY runs TO '{dir}/leak.csv'", "not allowed"),
    ("ATTACH READ_WRITE", "ATTACH '{victim}' AS v (READ_WRITE)", "ATTACH statements are not allowed"),
    ("DELETE after ATTACH", "DELETE FROM precious", "DELETE statements are not allowed"),
    ("read_text a secret file", "SELECT * FROM read_text('/etc/shadow')", "file system operations are disabled"),
    ("read_csv a file", "SELECT * FROM read_csv('/etc/passwd')", "disabled by configuration"),
    ("glob the file system", "SELECT * FROM glob('/etc/*')", "disabled by configuration"),
    ("read another database as a table", "SELECT * FROM '{victim}'", "disabled by configuration"),
    ("INSTALL an extension", "INSTALL httpfs", "INSTALL statements are not allowed"),
    ("LOAD an extension", "LOAD httpfs", "not allowed"),
    ("SET a setting", "SET enable_external_access = true", "SET statements are not allowed"),
    ("PRAGMA that sets", "PRAGMA memory_limit='64GB'", "not allowed"),
    ("PRAGMA not on the list", "PRAGMA enable_profiling", "not allowed"),
    ("two statements", "SELECT 1; DELETE FROM runs", "2 statements given"),
    ("statement hidden after a comment", "SELECT 1; -- x\nCOPY runs TO '{dir}/x.csv'", "2 statements"),
    ("CREATE TEMP TABLE", "CREATE TEMP TABLE t AS SELECT 1", "CREATE statements are not allowed"),
    ("EXPLAIN ANALYZE of a COPY", "EXPLAIN ANALYZE COPY runs TO '{dir}/x.csv'", "not allowed"),
    ("CHECKPOINT", "CHECKPOINT", "not allowed"),
    ("EXPORT DATABASE", "EXPORT DATABASE '{dir}/dump'", "not allowed"),
    ("query() smuggling a COPY", "SELECT * FROM query('COPY runs TO ''{dir}/q.csv''')", "SELECT"),
    ("empty query", "", "empty query"),
    ("only whitespace and ;", "  ;  ", "no statement"),
]


@pytest.mark.parametrize("what,template,refusal", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_is_refused_and_touches_nothing(dbs, tmp_path, what, template, refusal):
    db, victim = dbs
    before = (sha(db), sha(victim), sorted(os.listdir(tmp_path)))
    text = template.format(victim=victim, db=db, dir=tmp_path)
    with pytest.raises(query.QueryError, match=None) as err:
        query.run_sql(db, text)
    assert refusal in str(err.value)
    assert "Traceback" not in str(err.value)
    after = (sha(db), sha(victim), sorted(os.listdir(tmp_path)))
    assert after == before, f"{what} changed files"


def test_cli_refuses_attacks_with_one_line_and_no_traceback(dbs, tmp_path):
    db, victim = dbs
    before = sha(victim)
    for text in (f"ATTACH '{victim}' AS v (READ_WRITE)", f"COPY (SELECT 42) TO '{victim}'",
                 "SELECT * FROM read_text('/etc/shadow')", ""):
        p = sql(db, text)
        assert p.returncode == 1 and p.stderr.startswith("Error: "), (text, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert sha(victim) == before
    assert duckdb.connect(str(victim), read_only=True).execute(
        "SELECT count(*) FROM precious").fetchone()[0] == 100


def test_reads_that_should_work_still_do(dbs):
    db, _ = dbs
    ok = ["SELECT count(*) FROM runs", "WITH r AS (SELECT * FROM runs) SELECT count(*) FROM r",
          "FROM runs LIMIT 1", "DESCRIBE runs", "SHOW TABLES", "SUMMARIZE runs",
          "PRAGMA table_info('runs')", "PRAGMA database_size", "EXPLAIN SELECT * FROM runs",
          "SELECT 1;", "VALUES (1), (2)", "-- a comment\nSELECT 1"]
    for i, text in enumerate(ok):
        res = query.run_sql(db, text, isolate=i < 2)   # same check and sandbox, in process or not
        assert res.columns, text
    n = query.run_sql(db, "SELECT count(*) AS n FROM decode_windows", isolate=True).rows[0][0]
    assert n == duckdb.connect(str(db), read_only=True).execute(
        "SELECT count(*) FROM decode_windows").fetchone()[0]


def test_fifo_cannot_hang_a_reader(dbs, tmp_path):
    """Reading a FIFO with no writer blocked forever (and kept every writer out)."""
    db, _ = dbs
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for fn in ("read_text", "read_csv", "read_json", "read_blob"):
        t0 = time.monotonic()
        p = sql(db, f"SELECT * FROM {fn}('{fifo}')", "--timeout", "3")
        assert p.returncode == 1 and "disabled by configuration" in p.stderr
        assert time.monotonic() - t0 < 15


def test_time_limit_holds_even_when_duckdb_ignores_the_interrupt(dbs):
    """One huge expression runs ~30 s on this box whatever interrupt() says; the limit holds
    because the query runs in a child that is killed."""
    db, _ = dbs
    t0 = time.monotonic()
    with pytest.raises(query.QueryError, match="longer than 1 s|memory"):
        query.run_sql(db, "SELECT length(repeat('x', 1500000000))", timeout_s=1, isolate=True,
                      memory_mb=4096)
    assert time.monotonic() - t0 < 1 + query.KILL_GRACE_S + 8   # + interpreter start
    t0 = time.monotonic()
    p = sql(db, "SELECT sum(a.range % 7) FROM range(10000000000000) a", "--timeout", "1")
    assert p.returncode == 1 and "longer than 1 s" in p.stderr
    assert time.monotonic() - t0 < 12


def test_memory_limit_holds(dbs):
    db, _ = dbs
    with pytest.raises(query.QueryError, match="memory limit of 128 MB"):
        query.run_sql(db, "SELECT list(range) FROM range(300000000)", isolate=True, memory_mb=128)
    # DuckDB's memory_limit does not cover one giant string; the resident-memory cap does.
    t0 = time.monotonic()
    with pytest.raises(query.QueryError, match="memory"):
        query.run_sql(db, "SELECT length(repeat('x', 4000000000))", isolate=True, memory_mb=128,
                      timeout_s=60)
    assert time.monotonic() - t0 < 30
    p = sql(db, "SELECT list(range) FROM range(300000000)", "--memory-limit", "128")
    assert p.returncode == 1 and "memory limit of 128 MB" in p.stderr


def test_timeout_above_what_writers_wait_is_refused(dbs):
    db, _ = dbs
    assert query.MAX_TIMEOUT_S + store.READ_WAIT_S < store.LOCK_WAIT_S
    p = sql(db, "SELECT 1", "--timeout", str(query.MAX_TIMEOUT_S + 1))
    assert p.returncode == 2 and "is not in the range 0<x<=60" in p.stderr, p.stderr
    with pytest.raises(query.QueryError, match="writers"):
        query.run_sql(db, "SELECT 1", timeout_s=query.MAX_TIMEOUT_S + 1)


def test_killed_reader_releases_the_database_for_a_writer(dbs):
    """After the time limit the child is gone: a writer gets in right away."""
    db, _ = dbs
    done = threading.Event()

    def long_reader():
        try:
            query.run_sql(db, "SELECT length(repeat('x', 1500000000))", timeout_s=1, isolate=True,
                          memory_mb=4096)
        except query.QueryError:
            pass
        done.set()
    t = threading.Thread(target=long_reader)
    t.start()
    assert done.wait(30)
    t0 = time.monotonic()
    with store.writer(db, wait_s=5) as con:
        con.execute("SELECT 1")
    assert time.monotonic() - t0 < 5
    t.join()


def test_isolated_child_dies_with_its_caller(dbs, tmp_path):
    """The caller (a dashboard, a CLI) killed mid-query leaves no query process behind."""
    db, _ = dbs
    script = tmp_path / "caller.py"
    script.write_text(
        "import sys\nsys.path.insert(0, %r)\nfrom specwatch.db import query\n"
        "query.run_sql(%r, 'SELECT sum(a.range // 7) FROM range(10000000000000) a', timeout_s=60, isolate=True)\n"
        % (str(ROOT), str(db)))
    caller = subprocess.Popen([sys.executable, str(script)])
    deadline = time.monotonic() + 20
    child = None
    while time.monotonic() < deadline and child is None:
        out = subprocess.run(["pgrep", "-P", str(caller.pid)], capture_output=True, text=True).stdout
        child = int(out.split()[0]) if out.split() else None
        time.sleep(0.1)
    assert child is not None
    time.sleep(1.0)
    caller.kill()
    caller.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}"):
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"query process {child} outlived its caller")
