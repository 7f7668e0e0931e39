"""Bulk-ingest accelerator: the C scanner (`_fastscan.c`) filling Arrow column buffers directly.

The scanner takes only the common, canonical SGLang decode/prefill lines and returns every other
line that carries an anchor to the caller, who parses it with `specwatch.logs.parse` (the definition).
A line it takes may carry a capture prefix (any text before `[docker ts [CRI]] [(process)] [ts
ranks] `, e.g. `sglang-1  | `): `resolve_capture` asks `prefix.locate` how it reads each distinct
prefix once, fills the capture columns from that, and hands back the rows whose prefix the Python
parser would read otherwise. `tests/test_fastscan.py`, `tests/test_fuzz.py` and
`tests/test_capture.py` check both paths store identical rows. If the extension is not built, or
`formats/lines.toml` no longer types the fields the way the scanner assumes, `available()` is False
and ingest uses `parse` for everything.
"""
from __future__ import annotations

import mmap
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from functools import lru_cache

from specwatch.logs import clock, glued, parse, prefix

try:
    from specwatch.logs import _fastscan
except ImportError:  # no compiler at install time
    _fastscan = None

NULL_I64 = np.iinfo(np.int64).min
NULL_I32 = np.iinfo(np.int32).min
_DEV = pa.array(["cuda", "cpu", "npu", "musa"])
MIN_ROW_BYTES = 64   # no decode/prefill line the scanner takes is shorter than this

# Column slots, in the order of the enums in _fastscan.c; (names, Arrow type) per group.
_KINDS = {
    "decode": dict(
        i64=["byte_offset", "line_no", "forward_iter", "kv_tokens", "ts"],
        i32=["dp_rank", "tp_rank", "pp_rank", "ep_rank", "running_req", "queue_req", "mamba_num"],
        f64=["token_usage_frac", "accept_len", "accept_rate_printed", "gen_throughput_tok_s",
             "mamba_usage_frac"],
        graph_device=True),
    "prefill": dict(
        i64=["byte_offset", "line_no", "forward_iter", "new_tokens", "cached_tokens", "ts"],
        i32=["dp_rank", "tp_rank", "pp_rank", "ep_rank", "new_seq", "running_req", "queue_req"],
        f64=["token_usage_frac", "input_throughput_tok_s", "cache_hit_rate_pct",
             "mamba_usage_frac"],
        graph_device=False),
}
# string columns; "" is NULL for the last four
_STRINGS = ["ts_text", "rank", "fields", "line_prefix", "outer_ts_text", "process"]
_NULL_IF_EMPTY = {"fields", "line_prefix", "outer_ts_text", "process"}

# What the scanner assumes formats/lines.toml declares (printed key -> (column, type)); it types
# these itself and treats every other declared key as "not mine".
_ASSUMED = {
    "sglang_decode": ({"running_req": ("running_req", "int"), "token": ("kv_tokens", "int"),
                       "token_usage": ("token_usage_frac", "float"),
                       "accept_len": ("accept_len", "float"),
                       "accept_rate": ("accept_rate_printed", "float"),
                       "cuda_graph": ("graph_enabled", "bool"),
                       "gen_throughput": ("gen_throughput_tok_s", "float"),
                       "queue_req": ("queue_req", "int"),
                       "full_token": ("kv_tokens", "int"),
                       "full_token_usage": ("token_usage_frac", "float"),
                       "mamba_num": ("mamba_num", "int"),
                       "mamba_usage": ("mamba_usage_frac", "float")},
                      ("running_req", "gen_throughput", "queue_req"), "running_req"),
    "sglang_prefill": ({"new_seq": ("new_seq", "int"), "new_token": ("new_tokens", "int"),
                        "cached_token": ("cached_tokens", "int"),
                        "token_usage": ("token_usage_frac", "float"),
                        "running_req": ("running_req", "int"), "queue_req": ("queue_req", "int"),
                        "input_throughput": ("input_throughput_tok_s", "float"),
                        "cache_hit_rate": ("cache_hit_rate_pct", "pct"),
                        "cuda_graph": ("graph_enabled", "bool"),
                        "full_token_usage": ("token_usage_frac", "float"),
                        "mamba_usage": ("mamba_usage_frac", "float")},
                       ("new_seq", "new_token", "queue_req"), "new_seq"),
}


def format_drift() -> list[str]:
    """Where formats/lines.toml no longer matches what the scanner assumes (empty: in step)."""
    out = []
    for kind, (typed, required, first) in _ASSUMED.items():
        fmt = parse.FORMATS.lines[kind]
        for key, (col, typ) in typed.items():
            got = fmt.by_key.get(key)
            if got is None or (got.column, got.type) != (col, typ):
                out.append(f"{kind}.{key}: scanner assumes {col} {typ}, lines.toml says "
                           f"{(got.column, got.type) if got else None}")
        if set(fmt.required) != set(required) or fmt.first_key != first:
            out.append(f"{kind}: required/first_key changed ({fmt.required}, {fmt.first_key})")
    return out


def _reserved_keys() -> list[str]:
    keys = {"forward_iter", "engine"}  # ingest keeps these out of `fields`
    for kind in _ASSUMED:
        keys.update(parse.FORMATS.lines[kind].by_key)
    return sorted(keys)


_DRIFT = format_drift() if _fastscan is not None else []
if _fastscan is not None and not _DRIFT:
    _fastscan.configure(_reserved_keys())


def available() -> bool:
    """True when the C scanner is built, in step with lines.toml, and not disabled (env
    SPECWATCH_NO_FASTSCAN=1)."""
    return _fastscan is not None and not _DRIFT and os.environ.get("SPECWATCH_NO_FASTSCAN") != "1"


@dataclass
class ScanResult:
    decode: dict[str, pa.Array]       # columns by store name (source_id not included)
    prefill: dict[str, pa.Array]
    slow_lines: np.ndarray            # [n, 2]: (offset in the buffer, line number) for the Python parser
    first_bad_utf8: int               # line number or -1
    n_bad_utf8: int
    first_binary: int
    n_binary: int
    lines: int = 0                    # complete lines scanned
    buffers: "Buffers | None" = None  # what the columns are views of


class _Arena:
    """Anonymous memory for the scanner's output buffers, in small pages. Their capacity is the
    worst case (every line a row), so most of it is never touched; numpy would ask for huge
    pages for arrays this large, and then every column touched clears 2 MB at its first row
    (perf: 12% of a bulk ingest's CPU was the kernel zeroing such pages). Freed (unmapped) when
    the last array carved from it is gone."""

    def __init__(self, shapes: list[tuple[tuple[int, ...], type]]):
        sizes = [(int(np.prod(shape)) * np.dtype(dt).itemsize + 63) // 64 * 64
                 for shape, dt in shapes]
        self.mem = mmap.mmap(-1, max(1, sum(sizes)))
        if hasattr(self.mem, "madvise") and hasattr(mmap, "MADV_NOHUGEPAGE"):
            self.mem.madvise(mmap.MADV_NOHUGEPAGE)
        self.arrays, at = [], 0
        for (shape, dt), size in zip(shapes, sizes):
            n = int(np.prod(shape))
            self.arrays.append(np.frombuffer(self.mem, dt, count=n, offset=at).reshape(shape))
            at += size


class _Lease:
    """What every Arrow buffer of one `_Kind.columns` call keeps alive: the kind's memory. Once
    the last of those buffers is gone (DuckDB has stored the rows and let them go, whenever that
    is), the lease is, and the kind may be written again (`_Kind.free`)."""

    __slots__ = ("kind", "__weakref__")

    def __init__(self, kind: "_Kind"):
        self.kind = kind


_TAKEN = object()   # a kind handed out for a scan, its columns not built yet


class _Kind:
    """Caller-allocated column buffers for one table, in the layout _fastscan.c writes, for
    chunks of up to `nbytes` bytes."""

    def __init__(self, spec: dict, cap: int, nbytes: int):
        self.spec, self.nbytes = spec, nbytes
        arena = _Arena([((len(spec["i64"]), cap), np.int64), ((len(spec["i32"]), cap), np.int32),
                        ((len(spec["f64"]), cap), np.float64), ((3, cap), np.int8),
                        ((len(_STRINGS), cap + 1), np.int32)]
                       + [((nbytes + 64,), np.uint8)] * len(_STRINGS))
        self.i64, self.i32, self.f64, self.i8, self.soff, *self.sdata = arena.arrays
        self._lease = None   # weakref to the lease of the columns last built, or _TAKEN

    def free(self) -> bool:
        """No column built from this kind is alive, and no scan is about to write it."""
        return self._lease is None or (self._lease is not _TAKEN and self._lease() is None)

    def take(self) -> None:
        self._lease = _TAKEN

    def give_up(self) -> None:
        """The scan it was taken for failed: no column was built, it may be written again."""
        if self._lease is _TAKEN:
            self._lease = None

    def buffers(self) -> tuple:
        return (self.i64, self.i32, self.f64, self.i8, self.soff, *self.sdata)

    def columns(self, n: int, str_lens) -> dict[str, pa.Array]:
        lease = _Lease(self)
        self._lease = weakref.ref(lease)

        def view(a: np.ndarray) -> pa.Buffer:
            return pa.foreign_buffer(a.ctypes.data, a.nbytes, base=lease)

        def fixed(typ: pa.DataType, values: np.ndarray, null: np.ndarray) -> pa.Array:
            if n == 0:
                return pa.array([], type=typ)
            validity = _bits(~null) if null.any() else None
            return pa.Array.from_buffers(typ, n, [validity, view(values)])

        cols: dict[str, pa.Array] = {}
        for j, name in enumerate(self.spec["i64"]):
            typ = pa.timestamp("us") if name == "ts" else pa.int64()
            cols[name] = fixed(typ, self.i64[j, :n], self.i64[j, :n] == NULL_I64)
        for j, name in enumerate(self.spec["i32"]):
            cols[name] = fixed(pa.int32(), self.i32[j, :n], self.i32[j, :n] == NULL_I32)
        for j, name in enumerate(self.spec["f64"]):
            cols[name] = fixed(pa.float64(), self.f64[j, :n], np.isnan(self.f64[j, :n]))
        flag = self.i8[0, :n]
        cols["graph_enabled"] = pa.Array.from_buffers(
            pa.bool_(), n, [_bits(flag >= 0), _bits(flag == 1)])
        if self.spec["graph_device"]:
            dev = self.i8[1, :n]
            idx = fixed(pa.int8(), dev, dev < 0)
            cols["graph_device"] = pa.DictionaryArray.from_arrays(idx, _DEV).cast(pa.string())
        cols["_shape"] = fixed(pa.int8(), self.i8[2, :n], np.zeros(n, bool))  # not stored
        for k, name in enumerate(_STRINGS):
            off = self.soff[k, :n + 1]
            valid = None if name not in _NULL_IF_EMPTY else _bits(off[1:] != off[:-1])
            cols[name] = pa.Array.from_buffers(
                pa.string(), n, [valid, view(off), view(self.sdata[k][:str_lens[k]])])
        return cols


def _bits(mask: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


class Buffers:
    """The scanner's output buffers for chunks of up to `size` bytes: a decode and a prefill
    `_Kind` (given, when free, to write again: pages already mapped instead of fresh ones faulted
    and zeroed for every chunk) and the handed-back lines' offsets. The arrays of a ScanResult
    are views of its kinds, which keep them from being written again while any is alive."""

    def __init__(self, size: int, dec: _Kind | None = None, pre: _Kind | None = None):
        self.size = size
        cap = size // MIN_ROW_BYTES + 16
        self.dec = dec if dec is not None and dec.nbytes >= size else \
            _Kind(_KINDS["decode"], cap, size)
        self.pre = pre if pre is not None and pre.nbytes >= size else \
            _Kind(_KINDS["prefill"], cap, size)
        self.dec.take()
        self.pre.take()
        # a line handed back carries an anchor (>= 6 bytes) and its newline
        self.sl = _Arena([((size // 7 + 1, 2), np.int64)]).arrays[0]


def scan(data, base_offset: int, base_line: int, buffers: Buffers | None = None,
         threads: int | None = None) -> ScanResult:
    """Scan `data` (complete lines, ending with a newline) starting at file offset `base_offset`,
    after `base_line` lines, into `buffers` (new ones when None or too small; the set used is
    `ScanResult.buffers`). The C scanner releases the GIL: ingest scans the next chunk on a
    thread while the previous one is inserted. On `threads` (default `scan_threads()`) a chunk of
    several pieces of PIECE_BYTES is scanned piecewise in parallel (`_scan_pieces`)."""
    if buffers is None or buffers.size < len(data):
        buffers = Buffers(len(data))
    threads = scan_threads() if threads is None else threads
    pieces = min(threads, len(data) // PIECE_BYTES)
    try:
        if pieces > 1 and hasattr(data, "find"):
            counts = _scan_pieces(data, base_offset, base_line, buffers, pieces)
        else:
            counts = _fastscan.scan(data, base_offset, base_line, buffers.dec.buffers(),
                                    buffers.pre.buffers(), buffers.sl)
    except BaseException:
        buffers.dec.give_up()   # nothing was built from them: free to write again
        buffers.pre.give_up()
        raise
    nd, npf, ns, fbad, nbad, fbin, nbin, dlens, plens, nlines = counts
    return ScanResult(buffers.dec.columns(nd, dlens), buffers.pre.columns(npf, plens),
                      buffers.sl[:ns].copy(), fbad, nbad, fbin, nbin, nlines, buffers)


# A chunk is cut into pieces of at least this many bytes, scanned on threads at once, then
# their rows are copied into the chunk's buffers in file order.
PIECE_BYTES = 8 << 20
_POOL: list = [None, 0]              # [ThreadPoolExecutor, its size]
_POOL_LOCK = threading.Lock()
_PIECE_BUFFERS: list[Buffers] = []   # the pieces' own output buffers, reused from chunk to chunk


class _Counts(NamedTuple):
    """What `_fastscan.scan` returns, in its order."""
    dec: int                 # decode rows
    pre: int                 # prefill rows
    slow: int                # lines handed back
    first_bad_utf8: int      # line number or -1
    n_bad_utf8: int
    first_binary: int
    n_binary: int
    dec_str: tuple           # bytes written per string column (_STRINGS order)
    pre_str: tuple
    lines: int


def new_buffer(n: int) -> bytearray:
    """A bytearray of `n` bytes to read into: contents not set where the C module is built
    (`bytearray(n)` writes n zeros holding the GIL; the reader fills it anyway)."""
    return _fastscan.new_buffer(n) if _fastscan is not None else bytearray(n)


def resize_buffer(buf: bytearray, n: int) -> None:
    """`buf` to `n` bytes in place, the bytes it gains not set (zeros without the C module);
    BufferError while it is exported."""
    if _fastscan is not None:
        _fastscan.resize_buffer(buf, n)
    elif len(buf) > n:
        del buf[n:]
    else:
        buf.extend(bytes(n - len(buf)))


def scan_threads() -> int:
    """Threads one chunk is scanned on: env SPECWATCH_SCAN_THREADS (1-256), else half the CPUs
    this process may run on, 1-8 (the other half inserts the previous chunk: DuckDB stores a
    chunk's row groups on its threads). 1 on 2 CPUs, where pieces buy nothing (2M lines: 1.88 s
    at 2 threads vs 1.83 s at 1, same rows and file size)."""
    env = os.environ.get("SPECWATCH_SCAN_THREADS", "").strip()
    if not env:
        return max(1, min(8, usable_cpus() // 2))
    if not env.isdigit() or not 1 <= int(env) <= 256:
        raise ValueError(f"SPECWATCH_SCAN_THREADS={env!r}: expected a whole number 1-256")
    return int(env)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask: a container's or taskset's share)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def pool(n: int) -> ThreadPoolExecutor:
    """The scanner's thread pool, with at least `n` threads (a bulk ingest also reads a chunk's
    parts on it, `bulk.pread_into`)."""
    with _POOL_LOCK:
        if _POOL[1] < n:
            _POOL[:] = [ThreadPoolExecutor(n, thread_name_prefix="specwatch-scan"), n]
        return _POOL[0]


def _take_buffers(size: int) -> Buffers:
    with _POOL_LOCK:
        for i, b in enumerate(_PIECE_BUFFERS):
            if b.size >= size:
                return _PIECE_BUFFERS.pop(i)
    return Buffers(size + size // 8)


def _scan_pieces(data, base_offset: int, base_line: int, out: Buffers, pieces: int) -> _Counts:
    """`_fastscan.scan`'s counts for `data`, scanned as `pieces` runs of whole lines at once, each
    into its own buffers, their rows then copied into `out` in file order with line numbers and
    chunk offsets rebased. The same rows as one scan: the scanner decides a line from that line
    and the next one only, and hands the last line of its buffer to Python (`parse_chunk` holds
    it, reading on in the whole chunk), so a piece's last line goes to Python, which takes it as
    the scanner would."""
    cuts, n = [0], len(data)
    for k in range(1, pieces):
        at = data.find(b"\n", max(cuts[-1], n * k // pieces))
        if at < 0 or at + 1 >= n:
            break
        cuts.append(at + 1)
    cuts.append(n)
    spans = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
    view = memoryview(data)
    bufs = [_take_buffers(b - a) for a, b in spans]
    workers = pool(len(spans))
    try:
        got = list(workers.map(lambda i: _Counts(*_fastscan.scan(
            view[spans[i][0]:spans[i][1]], base_offset + spans[i][0], 0, bufs[i].dec.buffers(),
            bufs[i].pre.buffers(), bufs[i].sl)), range(len(spans))))
        # where each piece's rows, string bytes, lines and handed-back lines start in `out`
        starts = [_Counts(0, 0, 0, -1, 0, -1, 0, (0,) * len(_STRINGS), (0,) * len(_STRINGS), 0)]
        for g in got:
            a = starts[-1]
            starts.append(a._replace(
                dec=a.dec + g.dec, pre=a.pre + g.pre, slow=a.slow + g.slow, lines=a.lines + g.lines,
                dec_str=tuple(map(sum, zip(a.dec_str, g.dec_str))),
                pre_str=tuple(map(sum, zip(a.pre_str, g.pre_str)))))
        list(workers.map(lambda i: _copy_piece(bufs[i], got[i], starts[i], spans[i][0],
                                            base_line, out), range(len(spans))))
    finally:
        view.release()
        with _POOL_LOCK:
            _PIECE_BUFFERS.extend(bufs)
            del _PIECE_BUFFERS[max(8, len(spans)):]

    def first(field: str) -> int:   # the first piece's that has one, as a line of the chunk
        return next((getattr(g, field) + base_line + a.lines for a, g in zip(starts, got)
                     if getattr(g, field) >= 0), -1)

    return starts[-1]._replace(first_bad_utf8=first("first_bad_utf8"),
                               n_bad_utf8=sum(g.n_bad_utf8 for g in got),
                               first_binary=first("first_binary"),
                               n_binary=sum(g.n_binary for g in got))


def _copy_piece(src: Buffers, got: _Counts, at: _Counts, start: int, base_line: int,
                out: Buffers) -> None:
    """One piece's rows into `out` from row/byte/line positions `at` (see `_scan_pieces`); runs on
    the pool (numpy copies drop the GIL)."""
    line0 = base_line + at.lines
    for piece, dst, n, r0, lens, s_at in (
            (src.dec, out.dec, got.dec, at.dec, got.dec_str, at.dec_str),
            (src.pre, out.pre, got.pre, at.pre, got.pre_str, at.pre_str)):
        if n:
            dst.i64[:, r0:r0 + n] = piece.i64[:, :n]
            dst.i64[1, r0:r0 + n] += line0   # line_no (i64 slot 1 of both kinds): rebased
            dst.i32[:, r0:r0 + n] = piece.i32[:, :n]
            dst.f64[:, r0:r0 + n] = piece.f64[:, :n]
            dst.i8[:, r0:r0 + n] = piece.i8[:, :n]
        for k in range(len(_STRINGS)):
            if r0 == 0:
                dst.soff[k, 0] = 0
            if n:
                dst.soff[k, r0 + 1:r0 + n + 1] = piece.soff[k, 1:n + 1] + s_at[k]
            if lens[k]:
                dst.sdata[k][s_at[k]:s_at[k] + lens[k]] = piece.sdata[k][:lens[k]]
    if got.slow:
        out.sl[at.slow:at.slow + got.slow, 0] = src.sl[:got.slow, 0] + start
        out.sl[at.slow:at.slow + got.slow, 1] = src.sl[:got.slow, 1] + line0


# What the scanner took after the capture prefix, as canonical text of each shape (bit 0: docker
# timestamp, bit 1: CRI stream, bit 2: process tag): how Python reads a prefix depends on the
# kinds of the tokens that follow it, never on their values.
_CANON_TS, _CANON_PROC, _CANON_STAMP = "2026-01-01T00:00:00Z", "X pid=1", "2026-01-01 00:00:00"


@lru_cache(maxsize=1 << 16)
def capture_parts(line_prefix: str, shape: int) -> dict | None:
    """The capture columns the Python parser gives a line the scanner took with this capture
    prefix and shape, or None when Python reads that line's prefix another way (the row is then
    handed back). `outer_ts_text` is among them when the prefix holds it (journald)."""
    if parse._ANY_HEADER.search(line_prefix) or "`" in line_prefix \
            or glued.starts_record(line_prefix):
        return None   # another record glued before this one: Python cuts the line (glued.py)
    head = (line_prefix + (_CANON_TS + " " if shape & 1 else "") + ("stdout F " if shape & 2 else "")
            + (f"({_CANON_PROC}) " if shape & 4 else "") + f"[{_CANON_STAMP}] ")
    p = prefix.locate(head)
    if (p.line_prefix != (line_prefix or None) or p.timestamp != _CANON_STAMP or p.rank != ""
            or p.ranks or p.location is not None or p.code or p.level is not None
            or p.logger is not None or p.process != (_CANON_PROC if shape & 4 else None)
            or (shape & 1 and p.outer_ts != _CANON_TS)):
        return None
    out = {c: v for c, v in p.capture().items()}
    if not shape & 1 and p.outer_ts is not None:
        if clock.not_a_date(p.outer_ts):
            return None  # the Python path rejects the line with the reason
        out["outer_ts_text"] = p.outer_ts
    return out


def resolve_capture(cols: dict[str, pa.Array]) -> tuple[dict[str, pa.Array], np.ndarray]:
    """Fill the capture columns of the scanner's rows from their prefixes (`capture_parts`, once
    per distinct prefix and shape); -> (columns of the rows kept, indices of the rows to hand back
    to the Python parser)."""
    n = len(cols["byte_offset"])
    lp = cols["line_prefix"]
    shape = cols["_shape"]
    if n == 0 or (lp.null_count == n and not pc.any(pc.not_equal(shape, 0)).as_py()):
        return cols, np.empty(0, np.int64)   # every row a plain `[ts ranks] ` line
    keys = pc.binary_join_element_wise(lp.fill_null(""), shape.cast(pa.string()), "\x00")
    enc = keys.dictionary_encode()
    idx = enc.indices
    parts = []
    for k in enc.dictionary.to_pylist():
        text, sh = k.rsplit("\x00", 1)
        parts.append(capture_parts(text, int(sh)))
    out = dict(cols)
    caps = [prefix.capture_columns(p)["capture"] if p else None for p in parts]
    if any(c is not None for c in caps):
        out["capture"] = pa.array(caps, pa.string()).take(idx)
    ots = [p.get("outer_ts_text") if p else None for p in parts]
    if any(v is not None for v in ots):
        # the scanner's docker timestamp, else the prefix's own (journald)
        out["outer_ts_text"] = pc.coalesce(cols["outer_ts_text"], pa.array(ots, pa.string()).take(idx))
    bad = np.array([p is None for p in parts], bool)
    if not bad.any():
        return out, np.empty(0, np.int64)
    redo_mask = bad[np.asarray(idx)]
    keep = pa.array(~redo_mask)
    return {k: v.filter(keep) for k, v in out.items()}, np.flatnonzero(redo_mask)
