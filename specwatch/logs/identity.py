"""Which stored source an open log file continues: fingerprints of its first and last consumed
bytes, device and inode (see `schema.Source`). A file renamed by rotation continues where it
stopped, a copy made by copy-truncate continues the original, and a truncated, recreated or
replaced file starts a new source.

Also: forgetting a source that held no line specwatch stores (and a run made for it).
Not for: reading or committing lines (see `ingest`).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import os

from specwatch.db import schema, store

FP_LEN = 1024              # bytes hashed to fingerprint a file
# the tables whose rows come from a source's lines
LINE_TABLES = ("decode_windows", "prefill_windows", "vllm_spec_windows",
               "vllm_throughput_windows", "server_configs", "events", "rejected_lines")


def _fingerprint(head: bytes) -> str:
    return hashlib.sha1(head).hexdigest()


def _tail_fingerprint(fd: int, offset: int) -> str:
    """Hash of the (up to) FP_LEN bytes just before `offset`."""
    n = min(FP_LEN, offset)
    return _fingerprint(os.pread(fd, n, offset - n))


def _matching_sources(con, path: str, st: os.stat_result, head: bytes,
                      fd: int | None = None) -> list[schema.Source]:
    """Stored sources whose fingerprinted first bytes this file starts with (any checkpoint) and,
    given the open file `fd`, whose last consumed bytes it also holds at the same offset."""
    fp_len = min(len(head), FP_LEN)
    fp = _fingerprint(head[:fp_len])
    # A source committed while its file was under FP_LEN bytes has a shorter fingerprint that no
    # hash of this head can be looked up by; such sources are few (tiny files), so check them all.
    rows = con.execute(
        "SELECT * FROM sources WHERE (fingerprint = ? AND fingerprint_len = ?) "
        "OR fingerprint_len < ? OR (device = ? AND inode = ?) OR path = ?",
        [fp, fp_len, FP_LEN, st.st_dev, st.st_ino, path]).fetchall()
    cols = schema.column_names("sources")
    out = []
    for row in rows:
        src = schema.Source(**dict(zip(cols, row)))
        if src.fingerprint_len > len(head) or \
                _fingerprint(head[:src.fingerprint_len]) != src.fingerprint:
            continue
        if fd is not None and src.tail_fingerprint is not None and \
                0 < src.offset_bytes <= st.st_size and \
                _tail_fingerprint(fd, src.offset_bytes) != src.tail_fingerprint:
            continue  # starts alike but is another file (two servers started alike)
        out.append(src)
    return out


def stored_source(con, path: str, st: os.stat_result, head: bytes,
                  fd: int | None = None) -> schema.Source | None:
    """The stored source this open file continues, or None. A source matches when the file starts
    with the bytes it fingerprinted and is at least as long as its checkpoint; the same
    device+inode wins over a copy (copy-truncate), then the furthest checkpoint."""
    best = None
    for src in _matching_sources(con, path, st, head, fd):
        if src.offset_bytes > st.st_size:
            continue
        rank = ((src.device, src.inode) == (st.st_dev, st.st_ino), src.offset_bytes)
        if best is None or rank > best[0]:
            best = (rank, src)
    if best is None:
        return None
    src = best[1]
    src.path, src.device, src.inode = path, st.st_dev, st.st_ino
    fp_len = min(len(head), FP_LEN)
    if src.fingerprint_len < fp_len:  # the file grew past what we hashed: hash more of it
        src.fingerprint, src.fingerprint_len = _fingerprint(head[:fp_len]), fp_len
    return src


def find_source(con, path: str, st: os.stat_result, head: bytes,
                fd: int | None = None) -> schema.Source:
    """The stored source this open file continues, or a new one (offset 0)."""
    src = stored_source(con, path, st, head, fd)
    if src is not None:
        return src
    fp_len = min(len(head), FP_LEN)
    fp = _fingerprint(head[:fp_len])
    key = f"{fp}:{fp_len}:{st.st_dev}:{st.st_ino}"
    source_id = hashlib.sha1(key.encode()).hexdigest()[:16]
    # The id is derived from the identity so that two writers racing on one new file agree on it.
    # A stored source can have this id yet not match (same inode truncated and rewritten with the
    # same first line, shorter than its checkpoint): salt the id, or its checkpoint would block us.
    salt = 0
    while con.execute("SELECT 1 FROM sources WHERE source_id = ?", [source_id]).fetchone():
        salt += 1
        source_id = hashlib.sha1(f"{key}:{salt}".encode()).hexdigest()[:16]
    src = schema.Source(source_id=source_id, path=path, device=st.st_dev, inode=st.st_ino,
                        fingerprint=fp, fingerprint_len=fp_len, offset_bytes=0, lines_done=0)
    # Register it now, under the same lock as the lookup above: a second writer identifying this
    # file a moment later (when its head has grown) then finds this source instead of creating
    # another one, and the checkpoint's compare-and-set keeps the two from storing a line twice.
    now = dt.datetime.now()
    con.execute("INSERT INTO sources (source_id, path, device, inode, fingerprint, fingerprint_len, "
                "offset_bytes, lines_done, first_seen, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, 0, "
                "?, ?)", [source_id, path, st.st_dev, st.st_ino, fp, fp_len, now, now])
    return src


def forget_unrecognised(db, run_id: str, source_id: str, created_run: bool) -> bool:
    """If the source holds no stored line at all, detach it (and drop the run this call created
    for it) and forget it; True when it was unrecognised."""
    with store.writer(db) as con:
        for t in LINE_TABLES:
            if con.execute(f"SELECT 1 FROM {t} WHERE source_id = ? LIMIT 1",
                           [source_id]).fetchall():
                return False
        con.execute("BEGIN")
        con.execute("DELETE FROM run_sources WHERE run_id = ? AND source_id = ?", [run_id, source_id])
        if not con.execute("SELECT 1 FROM run_sources WHERE source_id = ? LIMIT 1",
                           [source_id]).fetchall():
            con.execute("DELETE FROM sources WHERE source_id = ?", [source_id])
        if created_run and not con.execute("SELECT 1 FROM run_sources WHERE run_id = ? LIMIT 1",
                                           [run_id]).fetchall():
            con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
        con.execute("COMMIT")
    return True


def forget_run_if_empty(db, run_id: str) -> None:
    """Drop the run unless a source is attached to it."""
    with store.writer(db) as con:
        if not con.execute("SELECT 1 FROM run_sources WHERE run_id = ? LIMIT 1",
                           [run_id]).fetchall():
            con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])


def relabel_source(db, source_id: str, path: str) -> None:
    """Store `path` as the source's path (a source read through a scratch copy: standard input)."""
    with store.writer(db) as con:
        con.execute("UPDATE sources SET path = ? WHERE source_id = ?", [path, source_id])
