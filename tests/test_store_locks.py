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

from specwatch import ingest, query, store
from tests.conftest import ROOT, SAMPLES, run_cli

LINE = ("[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: {seq}, token usage: 0.01, "
        "accept len: 2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 1.00, "
        "#queue-req: 0\n")


def line(seq: int) -> bytes:
    return LINE.format(seq=seq).encode()


def tokens(db) -> list[int]:
    with store.reader(db) as con:
        return [r[0] for r in con.execute("SELECT kv_tokens FROM decode_windows ORDER BY 1").fetchall()]


def tail_proc(db, log, *extra, stderr=subprocess.PIPE):
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

def test_two_tails_on_one_new_file_store_every_line_once(tmp_path):
    """Before: the source row was created at the first commit, keyed by a head length that grows
    with the file, so two tails identifying it at different sizes made two sources (2 of 7
    trials stored every line twice)."""
    for trial in range(4):
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
