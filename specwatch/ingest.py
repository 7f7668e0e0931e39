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

import datetime as dt
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from specwatch import fastscan, parse, schema, store

FP_LEN = 1024              # bytes hashed to fingerprint a file
CHUNK_BYTES = 32 << 20     # read this much per parse/commit burst while following a file
BULK_CHUNK_BYTES = 64 << 20   # one-shot ingest: fewer, larger write bursts (peak RSS ~0.65 GB)
MAX_LINE_TEXT = 2000       # characters of a rejected line kept in rejected_lines

# Cheap byte-level prefilter: a line without one of these cannot be a stored record.
_ANCHORS = (b" batch", b"server_args=", b"metrics: ", b"Avg prompt throughput:",
            parse.READY_TEXT.encode(), *(t.encode() for t, _ in parse.EVENT_TEXTS))


class IngestError(RuntimeError):
    """A file could not be read at all (missing, unreadable, a directory given as a file, ...)."""


@dataclass
class IngestResult:
    path: str
    source_id: str | None = None
    lines: int = 0                      # complete lines consumed this call
    rows: int = 0                       # rows stored (all tables)
    rejected: int = 0
    bytes_read: int = 0
    warnings: list[str] = field(default_factory=list)

    def merge(self, other: "IngestResult") -> None:
        self.source_id = other.source_id or self.source_id
        self.lines += other.lines
        self.rows += other.rows
        self.rejected += other.rejected
        self.bytes_read += other.bytes_read
        self.warnings.extend(other.warnings)


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
    return schema.Source(source_id=source_id, path=path, device=st.st_dev, inode=st.st_ino,
                         fingerprint=fp, fingerprint_len=fp_len, offset_bytes=0, lines_done=0)


_ts_cache: dict[str, dt.datetime | None] = {}


def _ts(text: str | None) -> dt.datetime | None:
    if text is None:
        return None
    v = _ts_cache.get(text, False)
    if v is False:
        try:
            v = dt.datetime.fromisoformat(text)
        except ValueError:
            v = None  # vLLM prints no year: keep ts_text only
        if len(_ts_cache) > 100_000:
            _ts_cache.clear()
        _ts_cache[text] = v
    return v


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class _Batches:
    """Column lists per table, filled record by record."""

    def __init__(self):
        self.tables: dict[str, dict[str, list]] = {}
        self.arrow: dict[str, list] = {}

    def all(self) -> dict[str, list]:
        """{table: [column lists and/or Arrow tables]} for store.insert."""
        out = {t: [c] for t, c in self.tables.items()}
        for t, tbls in self.arrow.items():
            out.setdefault(t, []).extend(tbls)
        return out

    def add_arrow(self, table: str, tbl) -> None:
        self.arrow.setdefault(table, []).append(tbl)

    def add(self, table: str, row: dict) -> None:
        cols = self.tables.get(table)
        if cols is None:
            cols = self.tables[table] = {c: [] for c in schema.column_names(table)}
        for c, lst in cols.items():
            lst.append(row.get(c))


_COLS = {kind: fmt for kind, fmt in parse.FORMATS.lines.items()}


def record_row(rec: parse.Record, source_id: str, offset: int, line_no: int) -> tuple[str, dict]:
    """(table, row) for one parsed record."""
    row = {"source_id": source_id, "byte_offset": offset, "line_no": line_no}
    f = rec.fields
    if rec.kind in ("sglang_decode", "sglang_prefill"):
        row.update(ts=_ts(rec.timestamp), ts_text=rec.timestamp, rank=rec.rank,
                   forward_iter=f.get("forward_iter"), **rec.ranks)
    elif rec.kind.startswith("vllm_"):
        row.update(ts_text=rec.timestamp, process=rec.process, engine=f.get("engine"))
    if rec.kind in _COLS:
        for key, value in f.items():
            col = _COLS[rec.kind].by_key.get(key)
            if col is None or value is None or isinstance(value, str) and col.type != "str":
                continue
            if col.type == "pct" and not isinstance(value, parse.Pct):
                value = value * 100.0  # vLLM V0 prints the acceptance rate as a fraction
            row[col.column] = value
            if col.column == "graph_enabled":
                row["graph_device"] = key.split("_")[0]
        # `fields` keeps what no typed column holds, so typed columns + fields = the whole line
        extra = {k: v for k, v in f.items()
                 if k not in _COLS[rec.kind].by_key and k not in ("forward_iter", "engine")}
        row["fields"] = store.dumps(extra) if extra else None
        return schema.KIND_TABLE[rec.kind], row
    if rec.kind == "server_args":
        row.update(
            ts=_ts(rec.timestamp),
            form=rec.form,
            model_path=f.get("model_path"),
            draft_model_path=f.get("speculative_draft_model_path"),
            speculative_algorithm=f.get("speculative_algorithm") or None,
            speculative_num_steps=_int(f.get("speculative_num_steps")),
            speculative_eagle_topk=_int(f.get("speculative_eagle_topk")),
            speculative_num_draft_tokens=_int(f.get("speculative_num_draft_tokens")),
            tp_size=_int(f.get("tp_size")), dp_size=_int(f.get("dp_size")),
            ep_size=_int(f.get("ep_size", f.get("moe_ep_size"))), pp_size=_int(f.get("pp_size")),
            decode_log_interval=_int(f.get("decode_log_interval")),
            disable_cuda_graph=f.get("disable_cuda_graph") if isinstance(
                f.get("disable_cuda_graph"), bool) else None,
            sglang_version=str(f.get("version", f.get("sglang_version")))
            if f.get("version", f.get("sglang_version")) is not None else None,
            args=store.dumps(f))
        return "server_configs", row
    row.update(ts=_ts(rec.timestamp), kind=rec.kind, message=f.get("message"))
    return "events", row


def parse_raw(raw: bytes) -> tuple[str, parse.Record | parse.Rejected | None, bool]:
    """(text, parse result, valid UTF-8) for one line's bytes; invalid UTF-8 is read with
    replacement characters and still parsed."""
    try:
        text, valid = raw.decode("utf-8"), True
    except UnicodeDecodeError:
        text, valid = raw.decode("utf-8", errors="replace"), False
    return text, parse.parse_line(text), valid


def _parse_line_into(raw: bytes, here: int, line_no: int, source_id: str, path: str,
                     batches: _Batches, result: IngestResult, bad_utf8: list[int]) -> None:
    text, got, valid = parse_raw(raw)
    if not valid:
        bad_utf8.append(line_no)
    if got is None:
        return
    if isinstance(got, parse.Rejected):
        batches.add("rejected_lines", {
            "source_id": source_id, "byte_offset": here, "line_no": line_no, "path": path,
            "kind": got.kind, "reason": got.reason, "field": got.field,
            "line_text": text[:MAX_LINE_TEXT]})
        result.rejected += 1
        return
    table, row = record_row(got, source_id, here, line_no)
    batches.add(table, row)


def _warn(result: IngestResult, path: str, what: str, first: int, n: int) -> None:
    if n:
        more = f" ({n} lines like this)" if n > 1 else ""
        result.warnings.append(f"{path}:{first}: {what}{more}; is this a log file?")


def parse_chunk(data: bytes, source_id: str, path: str, start_offset: int, start_line: int,
                batches: _Batches, result: IngestResult) -> None:
    """Parse complete lines in `data` (which ends with a newline) into `batches`.

    With the C accelerator built, canonical SGLang decode/prefill lines are extracted in bulk
    (`fastscan`) and only the other anchored lines go through `parse`; without it, `parse` sees
    every anchored line. Both store identical rows (tests/test_fastscan.py)."""
    if fastscan.available():
        sr = fastscan.scan(data, start_offset, start_line)
        for table, cols in (("decode_windows", sr.decode), ("prefill_windows", sr.prefill)):
            n = len(cols["byte_offset"])
            if n:
                batches.add_arrow(table, store.arrow_from_columns(table, cols, n, source_id=source_id))
        bad_utf8: list[int] = []
        for rel, line_no in sr.slow_lines.tolist():
            end = data.index(b"\n", rel)
            _parse_line_into(data[rel:end], start_offset + rel, line_no, source_id, path, batches,
                             result, bad_utf8)
        _warn(result, path, "invalid UTF-8, read with replacement characters", sr.first_bad_utf8,
              sr.n_bad_utf8)
        _warn(result, path, "binary data (NUL bytes), skipped", sr.first_binary, sr.n_binary)
        return
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    binary = b"\x00" in data
    offset = start_offset
    line_no = start_line
    bad_utf8: list[int] = []
    bad_binary: list[int] = []
    for raw in data.split(b"\n")[:-1]:
        line_no += 1
        here = offset
        offset += len(raw) + 1
        if binary and b"\x00" in raw:
            bad_binary.append(line_no)
            continue
        for a in _ANCHORS:
            if a in raw:
                break
        else:
            if not valid:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    bad_utf8.append(line_no)
            continue
        _parse_line_into(raw, here, line_no, source_id, path, batches, result, bad_utf8)
    _warn(result, path, "invalid UTF-8, read with replacement characters",
          bad_utf8[0] if bad_utf8 else -1, len(bad_utf8))
    _warn(result, path, "binary data (NUL bytes), skipped", bad_binary[0] if bad_binary else -1,
          len(bad_binary))


class FileIngestor:
    """Ingests one path, across rotations: remembers the open file and its source between calls.

    `known_only`: only continue a source already stored (never start a new one); `tail` uses it for
    rotated siblings (`server.log.1`), which may hold the unread end of a source but must not be
    ingested from their start when they are old archives. With `adopt_modified_after` (epoch s),
    a file that matches no stored source at all and was modified after that time is read from its
    start after all: a rotated file written while followed but never read (tail was down)."""

    def __init__(self, db: str | Path, path: str | Path, run_id: str | None = None,
                 chunk_bytes: int = CHUNK_BYTES, known_only: bool = False,
                 adopt_modified_after: float | None = None):
        self.db = str(db)
        self.path = os.path.abspath(path)
        self.run_id = run_id
        self.chunk_bytes = chunk_bytes
        self.known_only = known_only
        self.adopt_modified_after = adopt_modified_after
        self._fh = None
        self._src: schema.Source | None = None
        self._attached: set[str] = set()
        self._tail_of: schema.Source | None = None   # the source _tail_bytes belongs to
        self._tail_bytes = b""

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self._src = None

    def _open(self):
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            raise IngestError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise IngestError(f"{self.path}: is a directory") from None
        except PermissionError:
            raise IngestError(f"{self.path}: permission denied") from None
        except OSError as exc:
            raise IngestError(f"{self.path}: cannot open: {exc.strerror}") from None
        return fh

    def poll(self) -> IngestResult:
        """Ingest everything complete that is not stored yet. Returns what was done."""
        result = IngestResult(self.path)
        if self._fh is not None:
            # A rotated-away file (renamed, or unlinked) is drained before the new one is read.
            try:
                st = os.stat(self.path)
                same = (st.st_dev, st.st_ino) == (os.fstat(self._fh.fileno()).st_dev,
                                                   os.fstat(self._fh.fileno()).st_ino)
            except FileNotFoundError:
                same = False
            if not same:
                result.merge(self._drain())
                self.close()
            elif os.fstat(self._fh.fileno()).st_size < (self._src.offset_bytes if self._src else 0):
                self.close()  # truncated in place (copy-truncate): a new source starts
        if self._fh is None:
            self._fh = self._open()
            self._src = None
        result.merge(self._drain())
        return result

    def _identify(self) -> schema.Source | None:
        st = os.fstat(self._fh.fileno())
        self._fh.seek(0)
        head = self._fh.read(FP_LEN)
        if b"\n" not in head and len(head) < FP_LEN:
            return None  # nothing complete yet: do not register a source for it
        fd = self._fh.fileno()
        with store.writer(self.db) as con:
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

    def _drain(self) -> IngestResult:
        result = IngestResult(self.path)
        if self._src is None:
            self._src = self._identify()
            if self._src is None:
                return result
        else:
            # Re-check the fingerprint: the file may have been replaced by one of the same inode.
            if not self._same_head(self._src):
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
        end = os.fstat(self._fh.fileno()).st_size
        while src.offset_bytes < end:
            self._fh.seek(src.offset_bytes)
            data = self._fh.read(min(self.chunk_bytes, end - src.offset_bytes))
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) >= self.chunk_bytes:
                    # One line longer than a whole chunk: read until its newline.
                    more = data
                    while cut < 0:
                        extra = self._fh.read(self.chunk_bytes)
                        if not extra:
                            break
                        more += extra
                        cut = more.rfind(b"\n")
                    data = more
                    if cut < 0:
                        return result
                else:
                    return result
            data = data[:cut + 1]
            # Truncated and rewritten past our offset while we read (copy-truncate)? Then `data` may
            # be new bytes: store nothing, identify the file again next time.
            if not self._same_head(src):
                self._src = None
                return result
            batches = _Batches()
            parse_chunk(data, src.source_id, self.path, src.offset_bytes, src.lines_done,
                        batches, result)
            lines = data.count(b"\n")
            new_offset = src.offset_bytes + len(data)
            if src.fingerprint_len < FP_LEN:
                self._fh.seek(0)
                head = self._fh.read(min(FP_LEN, new_offset))
                src.fingerprint, src.fingerprint_len = _fingerprint(head), len(head)
            # Hash what was read, not the file again: it may be truncated by now (copy-truncate),
            # and a wrong hash would keep the copy from continuing this source.
            tail = data[-FP_LEN:] if len(data) >= FP_LEN else (self._tail_bytes + data)[-FP_LEN:]
            src.tail_fingerprint = _fingerprint(tail)
            attach = self.run_id if src.source_id not in self._attached else None
            with store.writer(self.db) as con:
                try:
                    result.rows += store.append_with_checkpoint(
                        con, src, src.offset_bytes, new_offset, src.lines_done + lines,
                        batches.all(), run_id=attach)
                except store.CheckpointMoved:
                    # Someone else stored this range first: re-read our position and go on.
                    self._src = None
                    return result
            if attach:
                self._attached.add(src.source_id)
            src.offset_bytes = new_offset
            self._tail_bytes = tail
            src.lines_done += lines
            result.lines += lines
            result.bytes_read += len(data)
        return result


def ensure_run(db: str | Path, run_id: str, **fields) -> None:
    with store.writer(db) as con:
        existing = con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if existing is None:
            store.upsert_run(con, {"run_id": run_id, "run_name": run_id, "origin": "ingest",
                                   "status": "ok", **fields})


def expand_paths(paths: list[str]) -> tuple[list[tuple[Path, str]], list[str]]:
    """[(file, default run name)] for files and the files under directories, plus problems."""
    out, problems = [], []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file())
            if not files:
                problems.append(f"{path}: directory has no files")
            out.extend((f, str(f.relative_to(path))) for f in files)
        elif path.exists():
            out.append((path, path.name))
        else:
            problems.append(f"{path}: no such file or directory")
    return out, problems


def ingest_paths(db: str | Path, paths: list[str], run: str | None = None) -> list[IngestResult]:
    """One-shot ingest of files and directories; each file becomes (or joins) a run."""
    files, problems = expand_paths(paths)
    results = [IngestResult(p, warnings=[p]) for p in problems]
    for path, default_run in files:
        run_id = run or default_run
        try:
            ensure_run(db, run_id)
            ing = FileIngestor(db, path, run_id, chunk_bytes=BULK_CHUNK_BYTES)
            try:
                res = ing.poll()
                if ing._src is not None and run_id not in ing._attached:
                    with store.writer(db) as con:  # a re-run still (re)attaches the source
                        store.attach_source(con, run_id, ing._src.source_id)
            finally:
                ing.close()
        except IngestError as exc:
            res = IngestResult(str(path), warnings=[str(exc)])
        results.append(res)
    return results
