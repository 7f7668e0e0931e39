"""Bulk-ingest accelerator: the C scanner (`_fastscan.c`) filling Arrow column buffers directly.

The scanner takes only the common, canonical SGLang decode/prefill lines and returns every other
line that carries an anchor to the caller, who parses it with `specwatch.logs.parse` (the definition).
`tests/test_fastscan.py` and `tests/test_fuzz.py` check both paths store identical rows. If the
extension is not built, or `formats/lines.toml` no longer types the fields the way the scanner
assumes, `available()` is False and ingest uses `parse` for everything.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from specwatch.logs import parse

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
        i32=["dp_rank", "tp_rank", "pp_rank", "ep_rank", "running_req", "queue_req"],
        f64=["token_usage_frac", "accept_len", "accept_rate_printed", "gen_throughput_tok_s"],
        graph_device=True),
    "prefill": dict(
        i64=["byte_offset", "line_no", "forward_iter", "new_tokens", "cached_tokens", "ts"],
        i32=["dp_rank", "tp_rank", "pp_rank", "ep_rank", "new_seq", "running_req", "queue_req"],
        f64=["token_usage_frac", "input_throughput_tok_s", "cache_hit_rate_pct"],
        graph_device=False),
}
_STRINGS = ["ts_text", "rank", "fields"]

# What the scanner assumes formats/lines.toml declares (printed key -> (column, type)); it types
# these itself and treats every other declared key as "not mine".
_ASSUMED = {
    "sglang_decode": ({"running_req": ("running_req", "int"), "token": ("kv_tokens", "int"),
                       "token_usage": ("token_usage_frac", "float"),
                       "accept_len": ("accept_len", "float"),
                       "accept_rate": ("accept_rate_printed", "float"),
                       "cuda_graph": ("graph_enabled", "bool"),
                       "gen_throughput": ("gen_throughput_tok_s", "float"),
                       "queue_req": ("queue_req", "int")},
                      ("running_req", "gen_throughput", "queue_req"), "running_req"),
    "sglang_prefill": ({"new_seq": ("new_seq", "int"), "new_token": ("new_tokens", "int"),
                        "cached_token": ("cached_tokens", "int"),
                        "token_usage": ("token_usage_frac", "float"),
                        "running_req": ("running_req", "int"), "queue_req": ("queue_req", "int"),
                        "input_throughput": ("input_throughput_tok_s", "float"),
                        "cache_hit_rate": ("cache_hit_rate_pct", "pct"),
                        "cuda_graph": ("graph_enabled", "bool")},
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


class _Kind:
    """Caller-allocated column buffers for one table, in the layout _fastscan.c writes."""

    def __init__(self, spec: dict, cap: int, nbytes: int):
        self.spec = spec
        arena = _Arena([((len(spec["i64"]), cap), np.int64), ((len(spec["i32"]), cap), np.int32),
                        ((len(spec["f64"]), cap), np.float64), ((2, cap), np.int8),
                        ((3, cap + 1), np.int32)] + [((nbytes + 64,), np.uint8)] * 3)
        self.i64, self.i32, self.f64, self.i8, self.soff, *self.sdata = arena.arrays

    def buffers(self) -> tuple:
        return (self.i64, self.i32, self.f64, self.i8, self.soff, *self.sdata)

    def columns(self, n: int, str_lens) -> dict[str, pa.Array]:
        cols: dict[str, pa.Array] = {}
        for j, name in enumerate(self.spec["i64"]):
            typ = pa.timestamp("us") if name == "ts" else pa.int64()
            cols[name] = _fixed(typ, self.i64[j, :n], self.i64[j, :n] == NULL_I64)
        for j, name in enumerate(self.spec["i32"]):
            cols[name] = _fixed(pa.int32(), self.i32[j, :n], self.i32[j, :n] == NULL_I32)
        for j, name in enumerate(self.spec["f64"]):
            cols[name] = _fixed(pa.float64(), self.f64[j, :n], np.isnan(self.f64[j, :n]))
        flag = self.i8[0, :n]
        cols["graph_enabled"] = pa.Array.from_buffers(
            pa.bool_(), n, [_bits(flag >= 0), _bits(flag == 1)])
        if self.spec["graph_device"]:
            dev = self.i8[1, :n]
            idx = _fixed(pa.int8(), dev, dev < 0)
            cols["graph_device"] = pa.DictionaryArray.from_arrays(idx, _DEV).cast(pa.string())
        for k, name in enumerate(_STRINGS):
            off = self.soff[k, :n + 1]
            valid = None if name != "fields" else _bits(off[1:] != off[:-1])
            cols[name] = pa.Array.from_buffers(
                pa.string(), n, [valid, pa.py_buffer(off), pa.py_buffer(self.sdata[k][:str_lens[k]])])
        return cols


def _bits(mask: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(mask, bitorder="little"))


def _fixed(typ: pa.DataType, values: np.ndarray, null: np.ndarray) -> pa.Array:
    n = len(values)
    if n == 0:
        return pa.array([], type=typ)
    validity = _bits(~null) if null.any() else None
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(values)])


class Buffers:
    """The scanner's output buffers for chunks of up to `size` bytes. A bulk ingest gives a set
    back once the rows it holds are stored (`scan(..., buffers=)`): pages already mapped are
    written again instead of fresh ones faulted and zeroed for every chunk. The arrays of a
    ScanResult are views of its set: a set may only be reused when they are no longer needed."""

    def __init__(self, size: int):
        self.size = size
        cap = size // MIN_ROW_BYTES + 16
        self.dec = _Kind(_KINDS["decode"], cap, size)
        self.pre = _Kind(_KINDS["prefill"], cap, size)
        # a line handed back carries an anchor (>= 6 bytes) and its newline
        self.sl = _Arena([((size // 7 + 1, 2), np.int64)]).arrays[0]


def scan(data, base_offset: int, base_line: int, buffers: Buffers | None = None) -> ScanResult:
    """Scan `data` (complete lines, ending with a newline) starting at file offset `base_offset`,
    after `base_line` lines, into `buffers` (new ones when None or too small; the set used is
    `ScanResult.buffers`). The C scanner releases the GIL: ingest scans the next chunk on a
    thread while the previous one is inserted."""
    if buffers is None or buffers.size < len(data):
        buffers = Buffers(len(data))
    dec, pre, sl = buffers.dec, buffers.pre, buffers.sl
    nd, npf, ns, fbad, nbad, fbin, nbin, dlens, plens, nlines = _fastscan.scan(
        data, base_offset, base_line, dec.buffers(), pre.buffers(), sl)
    return ScanResult(dec.columns(nd, dlens), pre.columns(npf, plens), sl[:ns].copy(),
                      fbad, nbad, fbin, nbin, nlines, buffers)
