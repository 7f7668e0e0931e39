"""What a one-shot bulk ingest keeps across the chunks of a file: one writer connection
(`WriterHold`) and the buffers chunks are read and scanned into (`Buffers`); how large its chunks
are (`bulk_chunk_bytes`, `stream_chunk_bytes`).

Used by `ingest.FileIngestor` when it overlaps scanning with inserting (`overlap`); a follower
(`tail`) opens a writer per burst and lets its small buffers go.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
import time
from pathlib import Path

from specwatch.logs import fastscan
from specwatch.db import store


BULK_CHUNK_BYTES = 64 << 20   # one-shot ingest: a chunk stored in an INSERT of its own
# One-shot ingest, streamed (`FileIngestor._stream`): chunks of at most this many bytes (and of at
# least a scanner piece per scan thread, `stream_chunk_bytes`). DuckDB takes a stream's rows in
# batches of one row group whatever the chunks are, so a small chunk costs it nothing, and each
# chunk's read and scanner buffers are reused sooner: 2M lines on 2 CPUs, 64 MB chunks -> 24 MB:
# page faults 160K -> 100K, peak RSS 780 -> 540 MB, 0.87-0.96x the wall in interleaved runs
# (benchmarks/results/ingest_issue28_s41.md).
STREAM_MIN_BYTES = 24 << 20


def bulk_chunk_bytes() -> int:
    """A one-shot ingest's chunk: BULK_CHUNK_BYTES, times half the threads a chunk is scanned on
    (`fastscan.scan_threads`: half the CPUs, 1-8), at most 4x: a chunk is scanned in pieces on
    those threads (`fastscan.PIECE_BYTES` each at least), and a chunk that falls back to one
    INSERT of its own (`_commit`) holds several DuckDB row groups, which DuckDB stores on a thread
    each (benchmarks/bench_store_scaling.py: 0.88-0.96 s for a 2M-line log's windows at 2 groups
    per statement, 0.37 s at 8 on 8 threads)."""
    return BULK_CHUNK_BYTES * max(1, min(4, fastscan.scan_threads() // 2))


def stream_chunk_bytes() -> int:
    """A one-shot ingest's streamed chunk: STREAM_MIN_BYTES, or more where the chunk is scanned on
    more threads than that feeds a piece each (`fastscan.scan_threads` x `fastscan.PIECE_BYTES`;
    64 MB on 16 CPUs)."""
    return max(STREAM_MIN_BYTES, fastscan.scan_threads() * fastscan.PIECE_BYTES)


_KEEP_FREED = False


def keep_freed_memory() -> None:
    """glibc only, once per process: keep memory that is freed for the next allocations instead
    of giving it back to the OS at once. A fold allocates and frees numpy temporaries of a few MB
    per chunk, which glibc unmapped (or trimmed) and the next chunk faulted in and zeroed again:
    2M-line ingest, 285K -> 177K page faults, 0.2-0.3 s, peak RSS unchanged. Elsewhere a no-op."""
    global _KEEP_FREED
    if _KEEP_FREED:
        return
    _KEEP_FREED = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)    # M_MMAP_THRESHOLD: blocks below 32 MB from the heap
        libc.mallopt(-1, 512 << 20)   # M_TRIM_THRESHOLD: trim the heap top past 512 MB only
    except (OSError, AttributeError):
        pass


class WriterHold:
    """One writer connection kept across the chunks of a bulk drain, given back after `max_s`
    (so readers and `tail` wait at most that long) and at the end. Opening a writer per chunk
    costs a lock, a schema check and a checkpoint each time."""

    def __init__(self, db: str, max_s: float):
        self.db, self.max_s = db, max_s
        self._cm = None
        self._con = None
        self._since = 0.0

    @contextlib.contextmanager
    def writer(self):
        if self._con is not None and time.monotonic() - self._since > self.max_s:
            self.release()
        if self._con is None:
            self._cm = store.writer(self.db)
            self._con = self._cm.__enter__()
            # Let DuckDB insert a chunk's rows on all its threads, in any physical order (every
            # query that needs byte order says ORDER BY byte_offset): decode rows of a 2M-line
            # log inserted alone, 1.6-2.0 -> 0.9 s, same file size. Only this connection.
            self._con.execute("SET preserve_insertion_order = false")
            self._since = time.monotonic()
        try:
            yield self._con
        except BaseException:
            self.release(*sys.exc_info())
            raise

    def release(self, *exc) -> None:
        cm, self._cm, self._con = self._cm, None, None
        if cm is not None:
            cm.__exit__(*(exc or (None, None, None)))


def writer(db: str | Path, hold: WriterHold | None):
    """A write burst through `hold`'s connection when the caller keeps one, else one of its own
    (`store.writer`)."""
    return hold.writer() if hold is not None else store.writer(db)


class Buffers:
    """Read buffers (bytearrays) of chunks already stored, and the scanner's output buffers
    (`fastscan.Buffers`), to read and scan the next chunks into: a fresh 64 MB buffer costs 16K
    page faults to map and zero, and a bulk ingest read its file into fresh memory (and copied it
    once more), and scanned into fresh buffers (perf, 2M lines: the kernel zeroing pages was 16%
    of the CPU). Read buffers come back by `give_back` once their chunk is parsed (two are kept:
    one chunk in flight, the next one read); the scanner's decode and prefill buffers are reused
    once no row of theirs is alive (`fastscan._Kind.free`: DuckDB lets a streamed chunk's rows go
    when it has stored them, which no caller sees; the prefill rows of a transaction wait for its
    end). With `reuse` False (a follower), nothing is kept."""

    KEEP = 4   # decode and prefill buffers kept, each (a streamed transaction pins a few)

    def __init__(self, chunk_bytes: int, reuse: bool):
        self.chunk_bytes, self.reuse = chunk_bytes, reuse
        self._read: list[bytearray] = []
        self._kinds: dict[str, list] = {"dec": [], "pre": []}
        self._lock = threading.Lock()   # the prefetch and the next chunk may ask at once

    def read_buffer(self, n: int) -> bytearray:
        """A bytearray of n bytes, its contents not set (the caller reads into it): a given-back
        one when there is one, else a new one. Neither writes the bytes (`bytearray(n)` and
        growing by `extend` wrote n zeros holding the GIL: 0.15-0.18 s per 256 MB on a host whose
        page faults are slow, the main thread stopped meanwhile)."""
        while True:
            with self._lock:
                if not self._read:
                    break
                buf = self._read.pop()
            try:
                fastscan.resize_buffer(buf, n)
                return buf
            except BufferError:   # still exported somewhere: leave it to the GC
                continue
        return fastscan.new_buffer(n)

    def scan_buffers(self) -> fastscan.Buffers | None:
        """Scanner buffers for any chunk (None: let the scanner allocate, or no scanner)."""
        if not self.reuse or not fastscan.available():
            return None
        size = int(self.chunk_bytes * 1.05) + 8192
        with self._lock:
            got = {k: next((x for x in kinds if x.free() and x.nbytes >= size), None)
                   for k, kinds in self._kinds.items()}
            bufs = fastscan.Buffers(size, dec=got["dec"], pre=got["pre"])
            for k, kind in (("dec", bufs.dec), ("pre", bufs.pre)):
                if kind is not got[k] and len(self._kinds[k]) < self.KEEP:
                    self._kinds[k].append(kind)
        return bufs

    def give_back(self, data) -> None:
        """A chunk's read buffer, once its lines are parsed."""
        if self.reuse and isinstance(data, bytearray):
            with self._lock:
                if len(self._read) < 2:
                    self._read.append(data)


READ_PART_BYTES = 16 << 20   # a chunk is read in parts of at least this many bytes at once


def pread_into(fd: int, buf: bytearray, offset: int, threads: int) -> int:
    """Read len(buf) bytes of `fd` from `offset` into `buf`, in parts on up to `threads` threads
    of the scanner's pool (`os.preadv` releases the GIL). Returns the bytes read from the start
    of `buf` on (fewer at the end of the file). One `preadv` of a 256 MB chunk took 0.16-0.22 s
    on a 16-CPU host, the scan of that chunk waiting for it."""
    n = len(buf)
    parts = max(1, min(threads, n // READ_PART_BYTES))
    if parts == 1:
        return _pread_full(fd, buf, 0, n, offset)
    cuts = [n * i // parts for i in range(parts + 1)]
    got = list(fastscan.pool(parts).map(
        lambda i: _pread_full(fd, buf, cuts[i], cuts[i + 1], offset + cuts[i]), range(parts)))
    total = 0
    for (a, b), g in zip(zip(cuts, cuts[1:]), got):
        total += g
        if g < b - a:   # the end of the file: what follows was not read
            break
    return total


def _pread_full(fd: int, buf: bytearray, a: int, b: int, at: int) -> int:
    """Fill buf[a:b] from `fd` at `at` (a short read is retried); the bytes read."""
    done = 0
    with memoryview(buf) as whole, whole[a:b] as view:
        while done < b - a:
            got = os.preadv(fd, [view[done:]], at + done)
            if not got:
                break
            done += got
    return done
