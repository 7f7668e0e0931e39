"""File identity cases for `tail.follow`, in-process, on real files and real DuckDB files.

Each decode line carries a sequence number twice (`Decode batch [seq]` -> forward_iter and
`#token: seq` -> kv_tokens) and `#running-req: seq % 97`, so exactly-once and content are checked
by SQL. `once()` runs follow with `stop` already set: one full poll (main file and rotated siblings)
from the committed checkpoints, as after a restart. `Live` runs follow in a thread, as the sweep does.
"""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from specwatch.db import store
from specwatch.logs import tail

RUN = "r1"


def line(seq: int) -> bytes:
    return (f"[2025-10-27 16:40:02] Decode batch [{seq}], #running-req: {seq % 97}, #token: {seq}, "
            "token usage: 0.04, accept len: 3.12, accept rate: 0.78, cuda graph: True, "
            "gen throughput (token/s): 911.30, #queue-req: 0, \n").encode()


def write(path, seqs, mode="ab"):
    with open(path, mode) as f:
        for s in seqs:
            f.write(line(s))


def once(db, log, run=RUN):
    stop = threading.Event()
    stop.set()
    tail.follow(db, [str(log)], run=run, stop=stop)


def rows(db, sql="SELECT kv_tokens FROM decode_windows ORDER BY kv_tokens"):
    with store.reader(db) as con:
        return con.execute(sql).fetchall()


def assert_exactly(db, seqs, run=RUN):
    """Every sequence number stored once, with its content, and inside the run's scope."""
    got = rows(db, "SELECT kv_tokens, forward_iter, running_req, accept_len FROM decode_windows "
                   "ORDER BY kv_tokens")
    assert [r[0] for r in got] == sorted(seqs)
    assert all(r[1] == r[0] and r[2] == r[0] % 97 and r[3] == 3.12 for r in got)
    scoped = rows(db, f"SELECT count(*) FROM decode_windows_scoped WHERE run_id = '{run}'")[0][0]
    assert scoped == len(seqs)


class Live:
    """follow() in a thread; `wait(n)` until n rows are stored."""

    def __init__(self, db, log, poll_interval_s=0.05):
        self.db = db
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(db, log, poll_interval_s))
        self.thread.start()

    def _run(self, db, log, poll_interval_s):
        try:
            tail.follow(db, [str(log)], run=RUN, poll_interval_s=poll_interval_s, stop=self.stop)
        except BaseException as exc:  # surfaced by close()
            self.error = exc

    def wait(self, n, timeout_s=10.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.path.exists(self.db) and rows(self.db, "SELECT count(*) FROM decode_windows")[0][0] >= n:
                return
            time.sleep(0.02)
        raise AssertionError(f"fewer than {n} rows after {timeout_s} s: {rows(self.db)[-3:]}")

    def close(self):
        self.stop.set()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive()
        if self.error:
            raise self.error


@pytest.fixture
def env(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    return str(tmp_path / "t.duckdb"), logs / "server.log"


def test_partial_last_line_waits_for_its_newline(env):
    db, log = env
    write(log, range(10))
    half = line(10)
    with open(log, "ab") as f:
        f.write(half[:40])
    once(db, log)
    assert_exactly(db, range(10))
    with open(log, "ab") as f:
        f.write(half[40:])
    write(log, [11])
    once(db, log)
    assert_exactly(db, range(12))


def test_copy_truncate_while_stopped_drains_the_copy(env):
    db, log = env
    write(log, range(50))
    once(db, log)
    write(log, range(50, 60))               # not read before the rotation
    shutil.copyfile(log, str(log) + ".1")
    os.truncate(log, 0)
    write(log, range(60, 70))
    once(db, log)
    assert_exactly(db, range(70))
    assert rows(db, "SELECT count(*) FROM sources")[0][0] == 2


def test_copy_truncate_live(env):
    db, log = env
    live = Live(db, log)
    try:
        write(log, range(50))
        live.wait(50)
        write(log, range(50, 60))
        shutil.copyfile(log, str(log) + ".1")
        os.truncate(log, 0)
        write(log, range(60, 70))
        live.wait(70)
    finally:
        live.close()
    assert_exactly(db, range(70))


def test_rename_create_while_stopped_drains_the_renamed_file(env):
    db, log = env
    write(log, range(50))
    once(db, log)
    write(log, range(50, 60))
    os.rename(log, str(log) + ".1")
    write(log, range(60, 70))
    once(db, log)
    assert_exactly(db, range(70))


def test_copy_truncate_just_after_a_first_commit_under_1kb(env):
    """The source's fingerprint covers < 1 KB (all the file had): the copy is still recognised."""
    db, log = env
    write(log, range(2))
    once(db, log)
    write(log, range(2, 30))
    shutil.copyfile(log, str(log) + ".1")
    os.truncate(log, 0)
    write(log, range(30, 35))
    once(db, log)
    assert_exactly(db, range(35))


def test_file_created_and_rotated_away_while_stopped_is_read_whole(env):
    db, log = env
    write(log, range(50))
    once(db, log)
    time.sleep(0.05)  # file mtimes have coarse (jiffy) granularity
    write(log, range(50, 60))
    os.rename(log, str(log) + ".1")
    write(log, range(60, 100))               # never seen by tail ...
    os.rename(str(log) + ".1", str(log) + ".2")
    os.rename(log, str(log) + ".1")          # ... and rotated away before it comes back
    write(log, range(100, 110))
    once(db, log)
    assert_exactly(db, range(110))


def test_rename_create_live_old_writer_keeps_writing(env):
    """logrotate `create` without a reopen signal: the server writes to the renamed file a while."""
    db, log = env
    live = Live(db, log)
    try:
        old = open(log, "ab", buffering=0)
        for s in range(50):
            old.write(line(s))
        live.wait(50)
        os.rename(log, str(log) + ".1")
        write(log, range(100, 110))         # the new file appears ...
        live.wait(60)
        for s in range(50, 60):              # ... while the old inode still grows
            old.write(line(s))
        old.close()
        live.wait(70)
    finally:
        live.close()
    assert_exactly(db, list(range(60)) + list(range(100, 110)))


def test_delete_and_recreate_live_drains_the_deleted_file(env):
    db, log = env
    live = Live(db, log)
    try:
        write(log, range(50))
        live.wait(50)
        write(log, range(50, 60))
        os.unlink(log)                       # tail still holds the open file: its tail is read
        write(log, range(60, 70))
        live.wait(70)
    finally:
        live.close()
    assert_exactly(db, range(70))


def test_replaced_in_place_by_longer_different_file_is_read_from_its_start(env):
    """Same path, same inode, new content longer than the old checkpoint: the fingerprint, not
    the size, tells it is another file, so none of its first bytes are skipped."""
    db, log = env
    write(log, range(5))
    once(db, log)
    write(log, range(1000, 1040), mode="wb")
    once(db, log)
    assert_exactly(db, list(range(5)) + list(range(1000, 1040)))


def test_replaced_by_rename_of_another_file(env):
    db, log = env
    write(log, range(20))
    once(db, log)
    other = log.parent / "incoming.tmp"
    write(other, range(500, 530))
    os.replace(other, log)
    once(db, log)
    write(log, range(530, 535))
    once(db, log)
    assert_exactly(db, list(range(20)) + list(range(500, 535)))


def test_old_archives_other_logs_and_database_next_to_the_log_are_not_ingested(env, tmp_path):
    db, log = env
    write(str(log) + ".7", range(900, 910))  # an archive from before the run
    db = str(log) + ".duckdb"                # a database named like a rotated sibling
    write(log, range(10))
    once(db, log)
    time.sleep(0.05)
    write(str(log) + "-worker1", range(800, 810))  # another log sharing the prefix
    write(str(log) + ".err", range(700, 710))
    once(db, log)
    assert_exactly(db, range(10))


def test_stop_drains_what_was_written_before_it(env):
    db, log = env
    live = Live(db, log, poll_interval_s=5.0)
    write(log, range(3))
    live.wait(3)
    write(log, range(3, 200))
    live.close()
    assert_exactly(db, range(200))


def test_file_that_does_not_exist_yet_is_waited_for(env):
    db, log = env
    shutil.rmtree(log.parent)
    live = Live(db, log)
    try:
        time.sleep(0.3)
        log.parent.mkdir()
        write(log, range(10))
        live.wait(10)
    finally:
        live.close()
    assert_exactly(db, range(10))


def test_a_directory_is_refused_with_a_reason(env):
    db, log = env
    with pytest.raises(tail.TailError, match="is a directory"):
        once(db, log.parent)


def test_rename_rotation_compressed_while_stopped_drains_the_gz(env):
    """logrotate with `compress`: server.log -> server.log.1.gz while tail was down; the unread
    end of the old file is read from the .gz, nothing twice."""
    import gzip
    db, log = env
    write(log, range(30))
    once(db, log)
    write(log, range(30, 40))               # not read before the rotation
    with open(log, "rb") as src, gzip.open(str(log) + ".1.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.unlink(log)
    write(log, range(40, 45))
    once(db, log)
    assert_exactly(db, range(45))


def test_a_record_written_in_pieces_is_stored_whole_never_as_a_piece(env):
    """A followed file whose last record is only partly written for several polls: a docker-split
    server_args line (16 KiB pieces, each with its own timestamp), a decode line cut mid-field and
    a prefill line cut at a field boundary (its first part parses whole: only the next line says
    it goes on). Each is stored once, joined; no piece is stored or rejected on its own."""
    from conftest import ROOT
    from specwatch.logs import parse, reassemble
    db, log = env
    cfg = (ROOT / "tests/data/real_server_args/sglang-0.5.23-dict-eagle3.txt").read_text().strip()
    msg, k = cfg.encode(), reassemble.DOCKER_SPLIT
    assert len(msg) > k
    pieces = [f"2026-11-20T10:00:00.{i:06d}Z " + msg[j:j + k].decode()
              for i, j in enumerate(range(0, len(msg), k))]
    dec = ("[2026-11-20 10:00:05 TP0] Decode batch, #running-req: 24, #token: 30112, token usage: "
           "0.14, accept len: 3.27, accept rate: 0.82, cuda graph: True, gen throughput (token/s): "
           "2210.48, #queue-req: 0")
    pre = ("[2026-11-20 10:00:06 TP0] Prefill batch, #new-seq: 8, #new-token: 4096, #cached-token: 0, "
           "token usage: 0.01, #running-req: 8, #queue-req: 0, #pending-token: 0, cuda graph: False, "
           "input throughput (token/s): 81920.00")
    cut = pre.index("#pending-token")
    assert isinstance(parse.parse_line(pre[:cut].rstrip(", ")), parse.Record)  # whole on its own
    parts = [pieces[0], pieces[1], dec[:100], dec[100:], pre[:cut], pre[cut:]]
    live = Live(db, log, poll_interval_s=0.05)
    try:
        for text in parts:
            with open(log, "a") as f:
                f.write(text + "\n")
            time.sleep(0.3)      # six polls with this piece at the end of the file
        with open(log, "a") as f:    # a next record: the prefill line is complete for sure
            f.write(dec.replace("10:00:05", "10:00:07") + "\n")
        live.wait(2)
    finally:
        live.close()
    want = parse.parse_line(cfg)
    got = rows(db, "SELECT model_path, speculative_algorithm, speculative_num_steps, "
                   "speculative_num_draft_tokens, decode_log_interval FROM server_configs")
    assert got == [tuple(want.fields[k] for k in (
        "model_path", "speculative_algorithm", "speculative_num_steps",
        "speculative_num_draft_tokens", "decode_log_interval"))]
    assert None not in got[0]
    assert rows(db, "SELECT accept_len, gen_throughput_tok_s, queue_req FROM decode_windows "
                    "ORDER BY byte_offset") == [(3.27, 2210.48, 0), (3.27, 2210.48, 0)]
    assert rows(db, "SELECT new_seq, input_throughput_tok_s, graph_enabled FROM "
                    "prefill_windows") == [(8, 81920.0, False)]
    assert rows(db, "SELECT count(*) FROM rejected_lines") == [(0,)]
