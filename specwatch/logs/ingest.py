"""Read log files from their committed offset to the last complete line, parse, store.

A file is identified by a fingerprint of its first bytes plus its device and inode (see
`schema.Source`), so a file renamed by rotation continues where it stopped, a copy made by
copy-truncate continues the original, and a truncated, recreated or replaced file starts a new
source. Rows reach the store only together with the offset that produced them (`store.
append_with_checkpoint`), so a crash at any point loses and duplicates nothing. A last line without
its newline is left for later.

Not for: following files as they grow (see `tail`), or knowing any line format (see `parse`).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from specwatch.logs import bulk, fastscan
from specwatch.db import schema, store, stream
from specwatch.logs.identity import (FP_LEN, _fingerprint, _matching_sources, find_source,
                                     forget_run_if_empty, forget_unrecognised,
                                     stored_source)
from specwatch.logs.logfile import IngestError, expand_paths, open_log
from specwatch.logs.rows import Batches, parse_chunk, parse_chunk_checked

CHUNK_BYTES = 32 << 20     # read this much per parse/commit burst while following a file
# A follower holds a record at the end of a growing file that the next line may continue until
# that line comes or the file has not grown for this long (docker writes the 16 KiB pieces of one
# message back to back; a tail poll lands between them now and then).
HOLD_QUIET_S = 1.0
BULK_HOLD_S = 2.0          # one-shot ingest keeps its writer across chunks for up to this long
# DuckDB's row group size (rows). A chunk that inserts a part of a row group leaves a partial row
# group behind, which the next checkpoint re-packs: decompressing and compressing again most of
# what the chunks wrote (2M-line log, 64 MB chunks: a 0.6-1.3 s close, and a 48 MB file where
# whole row groups give 26 MB). So a chunk with more decode windows than this stores a multiple
# of it and the rest is read again with the next chunk (rows.parse_chunk `align`), and the next
# read is sized to end just past such a multiple.
ROW_GROUP_ROWS = store.ROW_GROUP_ROWS
_PREFETCH_ID = "(prefetch)"   # rows of a prefetched chunk until the source is identified
# What a batch insert raises when a value in it cannot be stored (not: locks, disk, checkpoints).
_DATA_ERRORS = (pa.ArrowException, duckdb.DataError, duckdb.IntegrityError,
                duckdb.InvalidInputException, ValueError, TypeError, OverflowError)
@dataclass
class IngestResult:
    path: str
    source_id: str | None = None
    lines: int = 0                      # complete lines consumed this call
    rows: int = 0                       # rows stored (all tables)
    rejected: int = 0
    bytes_read: int = 0
    warnings: list[str] = field(default_factory=list)
    unrecognised: bool = False          # read whole, yet not one line specwatch stores

    def merge(self, other: "IngestResult") -> None:
        self.source_id = other.source_id or self.source_id
        self.lines += other.lines
        self.rows += other.rows
        self.rejected += other.rejected
        self.bytes_read += other.bytes_read
        self.warnings.extend(other.warnings)


@dataclass
class _Chunk:
    """Complete lines read and parsed, not yet committed."""
    data: bytes
    batches: Batches
    notes: IngestResult          # rejected count and warnings, merged once committed
    offset: int                  # file offset of data[0]
    lines_done: int              # lines before data[0]
    changed: bool = False        # the file was replaced while read: nothing here may be stored
    size: int | None = None      # bytes of data the rows cover (less when a record is held)

    @property
    def end(self) -> int:
        return self.offset + (len(self.data) if self.size is None else self.size)


class _Stat:
    """What identifies an open log: the named file's device, inode and mtime, and the size of the
    text read from it (the decompressed size for a compressed file)."""

    def __init__(self, ident: os.stat_result, size: int):
        self.st_dev, self.st_ino, self.st_mtime = ident.st_dev, ident.st_ino, ident.st_mtime
        self.st_size = size


class FileIngestor:
    """Ingests one path, across rotations: remembers the open file and its source between calls.

    `known_only`: only continue a source already stored (never start a new one); `tail` uses it for
    rotated siblings (`server.log.1`, `server.log.2.gz`), which may hold the unread end of a source
    but must not be ingested from their start when they are old archives. With
    `adopt_modified_after` (epoch s), a file that matches no stored source at all and was modified
    after that time is read from its start after all: a rotated file written while followed but
    never read (tail was down). gzip/zstd files are read transparently (`open_log`).
    `overlap` (one-shot ingest): the file is stored in transactions of several chunks each, its
    decode windows streamed into one INSERT while the next chunk is read (in parts, at once) and
    scanned on a thread (`_stream`); the chunks streamed are at most `stream_bytes` (default
    `bulk.stream_chunk_bytes()`, never more than `chunk_bytes`), the first half that, so that DuckDB
    starts early.
    A record that the next line might still continue (a hard-wrapped record, see `reassemble`) is
    stored at the end of the file as it is, unless `hold_at_eof` (a follower of a growing file):
    then it waits for the next line, or until the file has not grown for HOLD_QUIET_S."""

    def __init__(self, db: str | Path, path: str | Path, run_id: str | None = None,
                 chunk_bytes: int = CHUNK_BYTES, known_only: bool = False,
                 adopt_modified_after: float | None = None, overlap: bool = False,
                 hold_at_eof: bool = False, align_rows: int = ROW_GROUP_ROWS,
                 hold: bulk.WriterHold | None = None, stream_bytes: int | None = None):
        self.db = str(db)
        self.path = os.path.abspath(path)
        self.run_id = run_id
        self.chunk_bytes = chunk_bytes
        self.stream_bytes = (min(chunk_bytes, stream_bytes or bulk.stream_chunk_bytes())
                             if overlap else chunk_bytes)   # (only a one-shot ingest streams)
        self.known_only = known_only
        self.adopt_modified_after = adopt_modified_after
        self.overlap = overlap
        self.hold_at_eof = hold_at_eof
        self.align_rows = align_rows
        self._row_bytes = 0.0   # bytes per decode window in the last aligned chunk
        # a bulk ingest reuses the read and scan buffers of stored chunks (two are in flight)
        self._bufs = bulk.Buffers(chunk_bytes, reuse=overlap)
        self._prefetch = None   # (future of the first chunk, its thread, size then): `prefetch`
        # (offset, size, monotonic s) when a record was first held at the end of the file
        self._quiet_at: tuple[int, int, float] | None = None
        self._fh = None
        self._ident: os.stat_result | None = None   # stat of the path when it was opened
        self._compressed = False
        self._src: schema.Source | None = None
        self._attached: set[str] = set()
        self._tail_of: schema.Source | None = None   # the source _tail_bytes belongs to
        self._tail_bytes = b""
        self._hold: bulk.WriterHold | None = None
        # the caller's writer, kept across its own steps and this file's (one-shot ingest: one
        # connection for the run, the source and every chunk instead of one each)
        self._shared_hold = hold
        self._last_ts: list = []   # [ts_us, line] of the last record read (clock.jumps)

    def close(self) -> None:
        if self._prefetch is not None:   # not used: let its thread finish before the file closes
            self._prefetch[1].shutdown(wait=True)
            self._prefetch = None
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._src = None

    def _open(self):
        fh = open_log(self.path)
        own = os.fstat(fh.fileno())
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            named = own   # rotated away meanwhile: what we opened is all there is
        # a decompressed scratch copy is another file than the one named
        self._compressed = (own.st_dev, own.st_ino) != (named.st_dev, named.st_ino)
        self._ident = named if self._compressed else own
        return fh

    def _fstat(self) -> _Stat:
        st = os.fstat(self._fh.fileno())
        return _Stat(st if not self._compressed else self._ident, st.st_size)

    def prefetch(self) -> None:
        """Open the file, and read and scan its first chunk on a thread while the caller sets up
        (a one-shot ingest creates the run meanwhile) and `poll` identifies the source: `poll`
        uses that chunk if the file is a new source (checkpoint at 0) that still starts with the
        bytes read, else drops it. Its rows carry a placeholder source id until then."""
        try:
            self._fh = self._open()
            end = self._fstat().st_size
        except (OSError, IngestError):
            self.close()   # poll opens it again and reports what is wrong
            return
        pool = ThreadPoolExecutor(1)
        placeholder = schema.Source(source_id=_PREFETCH_ID, path=self.path)
        # half a streamed chunk (the next ones twice as large, up to stream_bytes, `_stream`):
        # DuckDB starts storing soon after the setup
        self._prefetch = (pool.submit(self._read, placeholder, 0, 0, end, False,
                                      max(1, self.stream_bytes // 2)), pool, end)

    def _prefetched(self, src: schema.Source, end: int) -> _Chunk | None:
        """The chunk `prefetch` read, when it is the start of `src` as the file is now."""
        if self._prefetch is None:
            return None
        fut, pool, spec_end = self._prefetch
        self._prefetch = None
        try:
            chunk = fut.result()
        except Exception:  # noqa: BLE001 - the normal read meets (and reports) it again
            return None
        finally:
            pool.shutdown(wait=True)
        if (chunk is None or src.offset_bytes != 0 or src.lines_done != 0 or spec_end != end
                or not self._same_head(src)
                or _fingerprint(bytes(chunk.data[:src.fingerprint_len])) != src.fingerprint):
            return None
        chunk.batches.relabel(src.source_id)
        return chunk

    def poll(self) -> IngestResult:
        """Ingest everything complete that is not stored yet. Returns what was done."""
        result = IngestResult(self.path)
        if self._fh is not None:
            # A rotated-away file (renamed, or unlinked) is drained before the new one is read.
            try:
                st = os.stat(self.path)
                same = (st.st_dev, st.st_ino) == (self._ident.st_dev, self._ident.st_ino)
                if same and self._compressed and st.st_mtime_ns != self._ident.st_mtime_ns:
                    same = False  # rewritten in place: decompress it again
            except FileNotFoundError:
                same = False
            if not same:
                # the last read of this file: a record held at its end is stored as it is
                hold, self.hold_at_eof = self.hold_at_eof, False
                try:
                    result.merge(self._drain())
                finally:
                    self.hold_at_eof = hold
                self.close()
            elif self._fstat().st_size < (self._src.offset_bytes if self._src else 0):
                self.close()  # truncated in place (copy-truncate): a new source starts
        if self._fh is None:
            self._fh = self._open()
            self._src = None
        result.merge(self._drain())
        return result

    def _identify(self) -> schema.Source | None:
        st = self._fstat()
        # pread, not the file object's read: its buffer may hold bytes from before the file was
        # rewritten in place (read when it was opened, e.g. by `prefetch`)
        head = os.pread(self._fh.fileno(), FP_LEN, 0)
        if b"\n" not in head and len(head) < FP_LEN:
            return None  # nothing complete yet: do not register a source for it
        fd = self._fh.fileno()
        with bulk.writer(self.db, self._shared_hold) as con:
            if self.known_only:
                src = stored_source(con, self.path, st, head, fd)
                if src is None and self.adopt_modified_after is not None \
                        and st.st_mtime > self.adopt_modified_after \
                        and not _matching_sources(con, self.path, st, head, fd):
                    # (a match whose checkpoint is past this file's size is a copy in progress)
                    src = find_source(con, self.path, st, head, fd)
                return src
            return find_source(con, self.path, st, head, fd)

    def _same_head(self, src: schema.Source) -> bool:
        """Does the open file still start with the bytes `src` fingerprinted?"""
        head = os.pread(self._fh.fileno(), src.fingerprint_len, 0)
        return _fingerprint(head) == src.fingerprint

    def _same_tail(self, src: schema.Source) -> bool:
        """Does the open file still hold, just before the checkpoint, the bytes last committed?"""
        if self._tail_of is not src or not self._tail_bytes:
            return True   # not read yet: matched against tail_fingerprint when identified
        n = len(self._tail_bytes)
        return os.pread(self._fh.fileno(), n, src.offset_bytes - n) == self._tail_bytes

    def _read(self, src: schema.Source, offset: int, lines_done: int, end: int,
              check_head: bool = True, want: int | None = None) -> _Chunk | None:
        """The complete lines from `offset` (at most chunk_bytes, or `want`, unless one line is
        longer), parsed; None when no complete line is there yet. `check_head`: False when `src`
        is not identified yet (`prefetch`: checked when the chunk is used)."""
        fd = self._fh.fileno()
        if want is None and self._row_bytes:   # end just past a multiple of align_rows windows
            groups = max(1, int(self.chunk_bytes / (self._row_bytes * self.align_rows)))
            want = int(groups * self.align_rows * self._row_bytes * 1.02) + 4096
        want = want or self.chunk_bytes
        while True:
            data = self._bufs.read_buffer(min(want, end - offset))
            got = (bulk.pread_into(fd, data, offset, fastscan.scan_threads()) if self.overlap
                   else os.preadv(fd, [data], offset))
            if got < len(data):
                del data[got:]
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) < want:
                    return None
                # One line longer than a whole chunk: read until its newline.
                parts, at = [data], offset + len(data)
                while cut < 0:
                    extra = os.pread(fd, self.chunk_bytes, at)
                    if not extra:
                        return None
                    parts.append(extra)
                    at += len(extra)
                    cut = extra.rfind(b"\n")
                data = bytearray(b"".join(parts))
                cut = data.rfind(b"\n")
            # everything there is was read (what follows the last newline is a partial line):
            # reading more cannot show more, so a held record is at the end (else this loop spins)
            read_to_end = offset + len(data) >= end
            del data[cut + 1:]   # in place (a bytearray; was a copy of the whole chunk)
            # Truncated and rewritten past our offset while we read (copy-truncate)? Then `data`
            # may be new bytes: store nothing, identify the file again next time.
            if check_head and not self._same_head(src):
                return _Chunk(data, Batches(), IngestResult(self.path), offset, lines_done,
                              changed=True)
            at_eof = read_to_end
            final = at_eof and (not self.hold_at_eof or (
                self._quiet_at is not None and self._quiet_at[:2] == (offset, end)
                and time.monotonic() - self._quiet_at[2] >= HOLD_QUIET_S))
            notes = IngestResult(self.path)
            batches = Batches()
            parse_chunk(data, src.source_id, self.path, offset, lines_done, batches, notes,
                        # (a one-shot ingest streams a file into one INSERT: nothing to align)
                        final=final, align=0 if read_to_end or self.overlap else self.align_rows,
                        buffers=self._bufs.scan_buffers(), last_ts=self._last_ts)
            if batches.aligned:
                self._row_bytes = batches.consumed / batches.aligned
            if batches.consumed or final:
                return _Chunk(data, batches, notes, offset, lines_done, size=batches.consumed)
            if at_eof:
                # only a record that the next line may still continue: wait for that line, or
                # until the file has not grown for HOLD_QUIET_S
                if self._quiet_at is None or self._quiet_at[:2] != (offset, end):
                    self._quiet_at = (offset, end, time.monotonic())
                return None
            # a held record as long as what was read: read on (twice as far) to see its end
            want = max(want, len(data)) * 2

    def _reuse(self, chunk: _Chunk) -> None:
        """`chunk` is stored (or dropped): a bulk ingest reads and scans into its buffers again."""
        chunk.size = chunk.end - chunk.offset   # (computed from data until now)
        self._bufs.give_back(chunk.data)
        chunk.data, chunk.batches = b"", Batches()   # its rows are views of those buffers

    def _drain(self) -> IngestResult:
        result = IngestResult(self.path)
        if self._src is None:
            self._src = self._identify()
            if self._src is None:
                return result
        else:
            # Re-check the fingerprints on every drain: the file may have been replaced by one of
            # the same inode, or truncated and regrown past our offset with the same first KB
            # while we were busy (then only the bytes before the checkpoint tell).
            if not self._same_head(self._src) or not self._same_tail(self._src):
                self._src = self._identify()
                if self._src is None:
                    return result
        src = self._src
        result.source_id = src.source_id
        if self._tail_of is not src:
            # The bytes just before the checkpoint (verified against tail_fingerprint when the
            # source was matched); from here on they roll forward from the data we commit.
            n = min(FP_LEN, src.offset_bytes)
            self._tail_bytes = os.pread(self._fh.fileno(), n, src.offset_bytes - n)
            self._tail_of = src
        # Read up to the size seen now, not "until EOF stays put": a file that grows faster than we
        # commit would otherwise keep us in back-to-back write bursts that lock readers out.
        # Later appends wait for the next poll (`tail` paces those).
        end = self._fstat().st_size
        if src.offset_bytes >= end:
            return result
        pool = ThreadPoolExecutor(1) if self.overlap else None
        self._hold = self._shared_hold or (bulk.WriterHold(self.db, BULK_HOLD_S) if self.overlap
                                           else None)
        try:
            nxt = self._prefetched(src, end) or self._read(src, src.offset_bytes, src.lines_done,
                                                           end)
            streamed = self.overlap
            while nxt is not None and streamed:
                try:
                    nxt = self._stream(src, nxt, end, pool, result)
                except _DATA_ERRORS:
                    # a value the store refused: everything since the checkpoint again, a chunk
                    # at a time, storing every other line (`_commit`)
                    streamed = False
                    nxt = self._read(src, src.offset_bytes, src.lines_done, end)
                if self._src is None:
                    return result   # the file or the checkpoint changed under us
            while nxt is not None:
                chunk, ahead = nxt, None
                if pool is not None and chunk.end < end:
                    # scan the next chunk while this one is inserted (DuckDB releases the GIL)
                    ahead = pool.submit(self._read, src, chunk.end,
                                        chunk.lines_done + chunk.batches.lines, end)
                stored = self._commit(src, chunk, result)
                self._reuse(chunk)
                if not stored:
                    if ahead is not None:
                        ahead.cancel()
                    return result
                if ahead is not None:
                    nxt = ahead.result()
                elif chunk.end < end:
                    nxt = self._read(src, chunk.end, src.lines_done, end)
                else:
                    nxt = None
        finally:
            if pool is not None:
                pool.shutdown(wait=True)
            if self._hold is not None and self._hold is not self._shared_hold:
                self._hold.release()
            self._hold = None
        return result

    def _stream(self, src: schema.Source, first: _Chunk, end: int, pool: ThreadPoolExecutor,
                result: IngestResult) -> _Chunk | None:
        """Store `first` and the chunks after it in one transaction (`store.
        append_stream_with_checkpoint`: their decode windows in one INSERT), each next chunk read
        and scanned on `pool` while DuckDB stores the ones before. Ends at the end of the file,
        or after the chunk that took the writer past BULK_HOLD_S (readers and `tail` get the file
        in between; the chunk already read then comes back to be stored next). None when done,
        or when the file or the checkpoint changed under us (then `_src` is None)."""
        start = time.monotonic()
        done: list[tuple[_Chunk, bytes]] = []   # chunks handed to the store, with their tails
        rest: list[_Chunk | None] = [None]      # the chunk read but not stored

        def pieces():
            chunk, tail, ahead = first, self._tail_bytes, None
            try:
                while chunk is not None:
                    if chunk.changed or chunk.offset != (done[-1][0].end if done else
                                                         src.offset_bytes):
                        self._src = None   # replaced while read: identified again next time
                        return
                    if chunk.end < end:
                        # twice the last chunk, up to stream_bytes: DuckDB gets rows soon after
                        # the start
                        want = min(self.stream_bytes, 2 * (chunk.end - chunk.offset))
                        ahead = pool.submit(self._read, src, chunk.end,
                                            chunk.lines_done + chunk.batches.lines, end, True,
                                            want)
                    with memoryview(chunk.data)[:chunk.end - chunk.offset] as data:
                        tail = self._fingerprint_to(src, chunk.end, data, tail)
                    done.append((chunk, tail))
                    yield stream.Piece(chunk.batches.all(), chunk.end,
                                      chunk.lines_done + chunk.batches.lines)
                    # its rows are in the store's hands now; the read buffer is free (the rows
                    # are copies, or views of the scanner's buffers, reused once they are gone)
                    chunk.size = chunk.end - chunk.offset
                    self._bufs.give_back(chunk.data)
                    chunk.data, chunk.batches = b"", Batches()
                    chunk, ahead = (ahead.result() if ahead is not None else None), None
                    if chunk is not None and time.monotonic() - start > BULK_HOLD_S:
                        rest[0] = chunk
                        return
            finally:
                if ahead is not None:   # abandoned (an error): let the read finish first
                    try:
                        ahead.result()
                    except Exception:  # noqa: BLE001 - read again by whoever goes on
                        pass

        attach = self.run_id if src.source_id not in self._attached else None
        try:
            with bulk.writer(self.db, self._hold) as con:
                rows, last = stream.append_stream_with_checkpoint(
                    con, src, src.offset_bytes, pieces(), run_id=attach)
        except store.CheckpointMoved:
            self._src = None   # someone else stored this range first: re-read our position
            return None
        if last is None:
            return rest[0]
        for chunk, _ in done:
            result.rejected += chunk.notes.rejected
            result.warnings.extend(chunk.notes.warnings)
        result.rows += rows
        result.lines += last.lines_done - src.lines_done
        result.bytes_read += last.offset - src.offset_bytes
        if attach:
            self._attached.add(src.source_id)
        src.offset_bytes, src.lines_done = last.offset, last.lines_done
        self._tail_bytes = done[-1][1]
        return rest[0]

    def _fingerprint_to(self, src: schema.Source, end: int, data, tail: bytes) -> bytes:
        """`src`'s fingerprints for a checkpoint at `end`, after `data` (the bytes read up to it;
        `tail`: the last bytes before them); returns the new last bytes. The tail is hashed from
        what was read, not the file again: it may be truncated by now (copy-truncate), and a wrong
        hash would keep the copy from continuing this source."""
        if src.fingerprint_len < FP_LEN:
            head = os.pread(self._fh.fileno(), min(FP_LEN, end), 0)
            src.fingerprint, src.fingerprint_len = _fingerprint(head), len(head)
        tail = bytes(data[-FP_LEN:]) if len(data) >= FP_LEN else (tail + data)[-FP_LEN:]
        src.tail_fingerprint = _fingerprint(tail)
        return tail

    def _commit(self, src: schema.Source, chunk: _Chunk, result: IngestResult) -> bool:
        """Store `chunk` with the checkpoint after it; False when the file or the checkpoint
        changed under us (nothing stored; the caller identifies the file again next time)."""
        data = memoryview(chunk.data)[:chunk.end - chunk.offset]
        if chunk.changed or chunk.offset != src.offset_bytes:
            self._src = None
            return False
        lines = chunk.batches.lines
        new_offset = chunk.end
        tail = self._fingerprint_to(src, new_offset, data, self._tail_bytes)
        attach = self.run_id if src.source_id not in self._attached else None
        notes = chunk.notes
        with bulk.writer(self.db, self._hold) as con:
            try:
                try:
                    stored = store.append_with_checkpoint(
                        con, src, src.offset_bytes, new_offset, src.lines_done + lines,
                        chunk.batches.all(), run_id=attach)
                except _DATA_ERRORS:
                    # A value the store refused: store every other line, reject the offender(s).
                    notes = IngestResult(self.path)
                    batches = parse_chunk_checked(con, bytes(data), src.source_id, self.path,
                                                  src.offset_bytes, src.lines_done, notes)
                    batches.lines = lines
                    stored = store.append_with_checkpoint(
                        con, src, src.offset_bytes, new_offset, src.lines_done + lines,
                        batches.all(), run_id=attach)
            except store.CheckpointMoved:
                # Someone else stored this range first: re-read our position and go on.
                self._src = None
                return False
        result.rows += stored
        result.rejected += notes.rejected
        result.warnings.extend(notes.warnings)
        if attach:
            self._attached.add(src.source_id)
        src.offset_bytes = new_offset
        self._tail_bytes = tail
        src.lines_done += lines
        result.lines += lines
        result.bytes_read += len(data)
        return True


def ensure_run(db: str | Path, run_id: str, hold: bulk.WriterHold | None = None,
               **fields) -> bool:
    """Create the run unless it exists; True when it was created. `hold`: write through it."""
    with bulk.writer(db, hold) as con:
        existing = con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if existing is None:
            store.upsert_run(con, {"run_id": run_id, "run_name": run_id, "origin": "ingest",
                                   "status": "ok", **fields})
        return existing is None


def ingest_paths(db: str | Path, paths: list[str], run: str | None = None) -> list[IngestResult]:
    """One-shot ingest of files and directories; each file becomes (or joins) a run. A file with
    no line specwatch stores (a README, a TOML, a binary) is reported, joins no run, and creates
    no empty one (`IngestResult.unrecognised`)."""
    files, problems = expand_paths(paths)
    results = [IngestResult(p, warnings=[p]) for p in problems]
    bulk.keep_freed_memory()
    for path, default_run in files:
        run_id = run or default_run
        created = False
        try:
            # one writer connection for the run, the source and the chunks (each connection
            # costs an open, a schema check and a checkpoint at close), given back for readers
            # every BULK_HOLD_S and at the end
            hold = bulk.WriterHold(db, BULK_HOLD_S)
            ing = FileIngestor(db, path, run_id, chunk_bytes=bulk.bulk_chunk_bytes(), overlap=True,
                               hold=hold)
            try:
                ing.prefetch()   # the first chunk is read and scanned while the run is set up
                created = ensure_run(db, run_id, hold=hold)
                res = ing.poll()
                if ing._src is not None and ing._src.source_id not in ing._attached:
                    with hold.writer() as con:  # a re-run still (re)attaches the source
                        store.attach_source(con, run_id, ing._src.source_id)
            finally:
                ing.close()
                hold.release()
            if res.rows == 0 and res.rejected == 0 and (
                    res.source_id is None or forget_unrecognised(db, run_id, res.source_id, created)):
                if res.source_id is None and created:
                    forget_run_if_empty(db, run_id)
                res.unrecognised, res.source_id = True, None
                res.warnings.append(f"no SGLang or vLLM metric or config lines in {path}; "
                                    "is this a server log?")
        except IngestError as exc:
            if created:   # a file that cannot be read (a broken gzip, an archive) leaves no run
                forget_run_if_empty(db, run_id)
            res = IngestResult(str(path), warnings=[str(exc)])
        results.append(res)
    return results
