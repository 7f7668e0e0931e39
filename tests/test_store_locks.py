"""Readers never break writers; writers never lose (issue 13). Real `specwatch` processes on real
DuckDB files: long readers while writers write, two tails racing on one new file, a file truncated
and regrown behind a busy tail, a full disk, a corrupt database, a FIFO."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from specwatch.logs import ingest
from specwatch.db import query, store
from tests.conftest import ROOT, SAMPLES, run_cli, Spawned

LINE = ("[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: {seq}, token usage: 0.01, "
        "accept len: 2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 1.00, "
        "#queue-req: 0\n")


def line(seq: int) -> bytes:
    return LINE.format(seq=seq).encode()


def tokens(db) -> list[int]:
    with store.reader(db) as con:
        return [r[0] for r in con.execute("SELECT kv_tokens FROM decode_windows ORDER BY 1").fetchall()]


_started = Spawned()


@pytest.fixture(autouse=True)
def _no_tail_left_behind():
    """Whatever a test asserts, no `specwatch tail` it started outlives it."""
    yield
    _started.reap()


def tail_proc(db, log, *extra, stderr=subprocess.PIPE):
    p = _popen_tail(db, log, *extra, stderr=stderr)
    _started.append(p)
    return p


def _popen_tail(db, log, *extra, stderr=subprocess.PIPE):
    return subprocess.Popen([sys.executable, "-m", "specwatch.cli", "tail", str(log), "--db", str(db),
                             "--poll-interval", "0.05", "--quiet", *extra], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=stderr, text=True)


def stop(p, timeout=90) -> str:
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        raise AssertionError(f"tail did not stop: {err}")
    assert p.returncode == 0, err
    return err or ""


# --- one file is one source, whoever races ------------------------------------------------------

@pytest.mark.slow  # ~10 s on 2 cores; .ci/run runs the slow tier
def test_two_tails_on_one_new_file_store_every_line_once(tmp_path):
    """Before: the source row was created at the first commit, keyed by a head length that grows
    with the file, so two tails identifying it at different sizes made two sources (2 of 7
    trials stored every line twice)."""
    for trial in range(2):   # the step-by-step race is the next test; this is the real thing
        db, log = tmp_path / f"t{trial}.duckdb", tmp_path / f"server{trial}.log"
        ingest.ensure_run(db, log.name)   # both tails start at once on an existing store
        tails = [tail_proc(db, log) for _ in range(2)]
        time.sleep(1.5)                   # both up and waiting for the file
        seq = 0
        with open(log, "ab") as f:
            for burst in range(12):       # small appends: the head grows past several sizes < 1 KB
                for _ in range(1 + burst % 3):
                    f.write(line(seq))
                    seq += 1
                f.flush()
                time.sleep(0.03 + 0.02 * (burst % 4))
        deadline = time.monotonic() + 30
        while len(tokens(db)) < seq and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        errs = [stop(p) for p in tails]
        got = tokens(db)
        assert got == list(range(seq)), (trial, len(got), seq, errs)
        with store.reader(db) as con:
            assert con.execute("SELECT count(*) FROM sources").fetchone()[0] == 1


def test_two_writers_identifying_a_new_file_at_different_sizes_make_one_source(tmp_path):
    """The race, step by step: A identifies the file at one line, the file grows, B identifies it
    at three lines, then both commit. One source, every line once."""
    db, log = tmp_path / "r.duckdb", tmp_path / "server.log"
    log.write_bytes(line(0))
    a, b = ingest.FileIngestor(db, log, "r"), ingest.FileIngestor(db, log, "r")
    try:
        a._fh = a._open()
        a._src = a._identify()
        with open(log, "ab") as f:
            f.write(line(1) + line(2))
        b._fh = b._open()
        b._src = b._identify()
        for ing in (a, b, b, a):
            ing.poll()
        with open(log, "ab") as f:
            f.write(line(3))
        for ing in (b, a):
            ing.poll()
    finally:
        a.close()
        b.close()
    assert tokens(db) == [0, 1, 2, 3]
    with store.reader(db) as con:
        assert con.execute("SELECT count(*) FROM sources").fetchone()[0] == 1


def test_truncated_and_regrown_past_the_offset_with_the_same_first_kb_loses_nothing(tmp_path):
    """A busy tail never saw the file shorter than its checkpoint: same first KB, same inode,
    longer than before. Only the bytes just before the checkpoint tell it is another file."""
    db, log = tmp_path / "g.duckdb", tmp_path / "server.log"
    first = b"".join(line(i) for i in range(30))
    log.write_bytes(first)
    ing = ingest.FileIngestor(db, log, "r")
    try:
        ing.poll()
        assert len(tokens(db)) == 30
        ino = os.stat(log).st_ino
        regrown = b"".join(line(i) for i in range(6)) + b"".join(line(1000 + i) for i in range(50))
        assert regrown[:1024] == first[:1024] and len(regrown) > len(first)
        with open(log, "r+b") as f:    # truncate in place and rewrite, as copy-truncate + writer
            f.truncate(0)
            f.write(regrown)
        assert os.stat(log).st_ino == ino
        ing.poll()
        with open(log, "ab") as f:
            f.write(line(2000))
        ing.poll()
    finally:
        ing.close()
    want = sorted(list(range(30)) + list(range(6)) + [1000 + i for i in range(50)] + [2000])
    assert tokens(db) == want


# --- readers never break writers ------------------------------------------------------------------

def _holds_lock(db) -> bool:
    try:
        duckdb.connect(str(db)).close()
        return False
    except duckdb.Error as exc:
        return "lock" in str(exc).lower()


@pytest.mark.slow  # 12-15 s on 2 cores
def test_long_reader_never_aborts_a_writer_and_readers_queue_behind_it(tmp_path):
    """Before: a 25 s `specwatch sql` made the sweep's writer give up ("locked ... stop the other
    writer") and the measured run was lost; 12 s is past the old 10 s writer wait. Now the writer
    waits longer than any reader may run,
    and readers arriving meanwhile queue behind the writer instead of keeping it out."""
    db, log = tmp_path / "l.duckdb", tmp_path / "server.log"
    shutil.copy(SAMPLES / "sglang-0.5.23-llama8b-eagle3-s3k1.log", log)
    run_cli("ingest", log, "--db", db)
    reader = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "sql", "SELECT sum(a.range % 7) FROM range(10000000000000) a",
         "--db", str(db), "--timeout", "12"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not _holds_lock(db):
        assert time.monotonic() < deadline and reader.poll() is None
        time.sleep(0.05)
    held_from = time.monotonic()
    stop_readers = threading.Event()
    reads, errors = [], []

    def dashboard_like():   # short reads back to back, as a polling dashboard does
        while not stop_readers.is_set():
            try:
                query.run_sql(db, "SELECT count(*) FROM decode_windows")
                reads.append(time.monotonic())
            except (query.QueryError, store.StoreError) as exc:
                errors.append(str(exc))
    pollers = [threading.Thread(target=dashboard_like) for _ in range(2)]
    for t in pollers:
        t.start()
    more = tmp_path / "more.log"
    more.write_bytes(b"".join(line(i) for i in range(50)))
    try:
        w = run_cli("ingest", more, "--db", db, check=False, timeout=store.LOCK_WAIT_S + 30)
        wrote_at = time.monotonic()
    finally:
        stop_readers.set()
        for t in pollers:
            t.join()
    _, rerr = reader.communicate(timeout=60)
    assert "longer than 12 s" in rerr and "Traceback" not in rerr
    assert w.returncode == 0, w.stderr
    assert "50 new lines" in w.stdout
    # the writer got in once the long reader's limit expired, not after the pollers gave up
    assert wrote_at - held_from < 12 + query.KILL_GRACE_S + 10
    assert errors == [] or all("another process (reader or writer)" in e for e in errors), errors
    with store.reader(db) as con:
        assert con.execute("SELECT count(*) FROM decode_windows WHERE kv_tokens < 50").fetchone()[0] >= 50


def test_lock_messages_name_readers_and_writers(tmp_path):
    db = tmp_path / "m.duckdb"
    with store.writer(db):
        pass
    ready = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", (   # a foreign client holding the file
        "import duckdb, pathlib, time\n"
        f"con = duckdb.connect({str(db)!r})\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(30)\n")])
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.02)
        with pytest.raises(store.StoreLocked, match=r"another process \(reader or writer\)"):
            with store.writer(db, wait_s=0.5):
                pass
        with pytest.raises(store.StoreLocked, match=r"another process \(reader or writer\)"):
            with store.reader(db, wait_s=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert store.MAX_READ_S == query.MAX_TIMEOUT_S
    assert store.READ_WAIT_S + store.MAX_READ_S < store.LOCK_WAIT_S


# --- FIFO ------------------------------------------------------------------------------------------

def test_fifo_given_to_ingest_or_tail_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    db = tmp_path / "f.duckdb"
    for cmd in (("ingest", fifo, "--db", db), ("tail", fifo, "--db", db),
                ("sql", "SELECT 1", "--db", fifo)):
        t0 = time.monotonic()
        p = run_cli(*cmd, check=False, timeout=30)
        assert p.returncode == 1 and "not a regular file" in p.stderr, (cmd, p.stderr)
        assert "Traceback" not in p.stderr and time.monotonic() - t0 < 20


# --- corrupt database ------------------------------------------------------------------------------

def _corrupt_files(tmp_path, samples_db) -> dict[str, Path]:
    out = {}
    text = tmp_path / "text.duckdb"
    text.write_text("this is not a database\n" * 50)
    out["text"] = text
    trunc = tmp_path / "trunc.duckdb"
    shutil.copy(samples_db, trunc)
    os.truncate(trunc, 6000)   # inside the headers
    out["truncated"] = trunc
    garbled = tmp_path / "garbled.duckdb"
    shutil.copy(samples_db, garbled)
    with open(garbled, "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(16384))
    out["garbled"] = garbled
    return out


def test_corrupt_database_gives_a_clear_message_from_every_command(tmp_path, samples_db):
    log = tmp_path / "server.log"
    log.write_bytes(line(1))
    every = (("sql", "SELECT count(*) FROM runs"), ("report",), ("ingest", log), ("tail", log),
             ("doctor",), ("dashboard", "--port", "18599"))
    for kind, bad in _corrupt_files(tmp_path, samples_db).items():
        # every command on a garbled file; the other damage on a reader and a writer
        for cmd in every if kind == "garbled" else every[:1] + every[2:3]:
            p = run_cli(*cmd, "--db", bad, check=False, timeout=60)
            assert p.returncode != 0, (kind, cmd, p.stdout)
            assert "corrupt or not a DuckDB database" in p.stderr, (kind, cmd, p.stderr)
            assert "Traceback" not in p.stderr, (kind, cmd, p.stderr)
            assert len(p.stderr.strip().splitlines()) <= 2, (kind, cmd, p.stderr)


# --- disk full -------------------------------------------------------------------------------------

@pytest.fixture
def small_fs(tmp_path):
    """A 1 MB tmpfs (needs root; CI containers without mount rights skip this one test)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow  # ~10 s on 2 cores; .ci/run runs the slow tier
def test_disk_full_says_so_and_tail_retries_until_space_returns(tmp_path, small_fs):
    db = small_fs / "full.duckdb"
    log = tmp_path / "server.log"
    n = 30000
    log.write_bytes(b"".join(line(i) for i in range(n)))
    p = run_cli("ingest", log, "--db", db, check=False, timeout=120)
    assert p.returncode == 1 and "No space left on device" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "rollback" not in p.stderr.lower(), p.stderr
    tail = tail_proc(db, log)
    try:
        time.sleep(6)
        assert tail.poll() is None, tail.communicate()[1]   # retrying, not exited
        subprocess.run(["mount", "-o", "remount,size=256m", str(small_fs)], check=True)
        deadline = time.monotonic() + 90
        got = []
        while time.monotonic() < deadline:
            try:
                got = tokens(db)
            except (store.StoreError, duckdb.Error):
                got = []
            if len(got) >= n:
                break
            time.sleep(0.5)
    finally:
        err = stop(tail)
    assert "No space left on device" in err and "will retry" in err, err
    assert "Traceback" not in err
    assert tokens(db) == list(range(n))


def test_second_signal_stops_a_tail_that_waits_for_a_held_database(tmp_path):
    """A foreign client holds the file: the first SIGTERM asks tail to stop after its drain (which
    waits for the lock), a second one stops it at once, with nothing stored twice later."""
    db, log = tmp_path / "s.duckdb", tmp_path / "server.log"
    log.write_bytes(b"".join(line(i) for i in range(5)))
    run_cli("ingest", log, "--db", db)
    tail = tail_proc(db, log)
    time.sleep(2.0)
    ready = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, pathlib, time\n"
        "while True:\n"
        "    try:\n"
        f"        con = duckdb.connect({str(db)!r})\n"
        "        break\n"
        "    except duckdb.Error:\n"
        "        time.sleep(0.01)   # the tail holds it for a burst\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n")])
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.02)
        with open(log, "ab") as f:
            f.write(b"".join(line(i) for i in range(5, 10)))
        time.sleep(1.0)     # tail is now waiting for the lock
        tail.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert tail.poll() is None
        t0 = time.monotonic()
        tail.send_signal(signal.SIGTERM)
        _, err = tail.communicate(timeout=20)
        assert time.monotonic() - t0 < 10
        assert tail.returncode == 1 and "stopped by signal" in err and "Traceback" not in err, err
    finally:
        holder.kill()
        holder.wait()
    run_cli("ingest", log, "--db", db)
    assert tokens(db) == list(range(10))


def test_a_database_in_a_missing_directory_says_so_and_creates_nothing(tmp_path):
    path = tmp_path / "no-such-dir" / "sw.duckdb"
    with pytest.raises(store.StoreError, match=r"the directory .*no-such-dir does not exist: create it"):
        with store.writer(path):
            pass
    assert not path.parent.exists()
