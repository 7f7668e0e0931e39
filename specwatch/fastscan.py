"""Bulk-ingest accelerator: the C scanner (`_fastscan.c`) turned into Arrow tables.

The scanner takes only the common, canonical SGLang decode/prefill lines and returns every other
line that carries an anchor to the caller, who parses it with `specwatch.parse` (the definition).
`tests/test_fastscan.py` checks both paths store identical rows. If the extension is not built,
`available()` is False and ingest uses `parse` for everything.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

try:
    from specwatch import _fastscan
except ImportError:  # no compiler at install time
    _fastscan = None

NULL_I64 = np.iinfo(np.int64).min
_DEV = np.array(["cuda", "cpu", "npu", "musa"], dtype=object)

# Column layouts, in the order of the enums in _fastscan.c.
_D_I64 = ["byte_offset", "line_no", "dp_rank", "tp_rank", "pp_rank", "ep_rank", "forward_iter",
          "running_req", "kv_tokens", "queue_req"]
_D_F64 = ["token_usage_frac", "accept_len", "accept_rate_printed", "gen_throughput_tok_s"]
_P_I64 = ["byte_offset", "line_no", "dp_rank", "tp_rank", "pp_rank", "ep_rank", "forward_iter",
          "new_seq", "new_tokens", "cached_tokens", "running_req", "queue_req"]
_P_F64 = ["token_usage_frac", "input_throughput_tok_s", "cache_hit_rate_pct"]


def available() -> bool:
    """True when the C scanner is built and not disabled (env SPECWATCH_NO_FASTSCAN=1)."""
    return _fastscan is not None and os.environ.get("SPECWATCH_NO_FASTSCAN") != "1"


@dataclass
class ScanResult:
    decode: dict[str, pa.Array]       # columns by store name (source_id not included)
    prefill: dict[str, pa.Array]
    slow_lines: np.ndarray            # [n, 2]: (offset in the buffer, line number) for the Python parser
    first_bad_utf8: int               # line number or -1
    n_bad_utf8: int
    first_binary: int
    n_binary: int


def _int_col(a: np.ndarray) -> pa.Array:
    return pa.array(a, mask=a == NULL_I64)


def _texts(buf: bytes, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """Strings from spans of `buf` (empty span -> NULL for JSON, "" otherwise is kept)."""
    lengths = (ends - starts).astype(np.int64)
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if len(starts):
        idx = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        data = np.frombuffer(buf, dtype=np.uint8)[idx]
    else:
        data = np.zeros(0, dtype=np.uint8)
    return pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets),
                                            pa.py_buffer(data.tobytes())).cast(pa.string())


def _scan_one(data: bytes, base_offset: int, base_line: int) -> ScanResult:
    """Scan `data` (complete lines, ending with a newline) starting at file offset `base_offset`,
    after `base_line` lines."""
    cap = data.count(b"\n") + 1
    di = np.empty((cap, len(_D_I64)), dtype=np.int64)
    df = np.empty((cap, len(_D_F64)), dtype=np.float64)
    dg = np.empty((cap, 2), dtype=np.int8)
    pi = np.empty((cap, len(_P_I64)), dtype=np.int64)
    pf = np.empty((cap, len(_P_F64)), dtype=np.float64)
    pg = np.empty((cap, 2), dtype=np.int8)
    tb = bytearray(len(data) + 64)
    to = np.empty((cap, 3), dtype=np.int64)
    sl = np.empty((cap, 2), dtype=np.int64)
    nd, npf, ns, ntext, fbad, nbad, fbin, nbin = _fastscan.scan(
        data, base_offset, base_line, di, df, dg, pi, pf, pg, tb, to, sl)
    text = bytes(tb[:ntext])
    spans = to[:nd + npf]
    is_pre = spans[:, 0] < 0
    spans = spans.copy()
    spans[is_pre, 0] = -1 - spans[is_pre, 0]
    out = []
    for n, i64, f64, g, names_i, names_f, sel in ((nd, di, df, dg, _D_I64, _D_F64, ~is_pre),
                                                  (npf, pi, pf, pg, _P_I64, _P_F64, is_pre)):
        sp = spans[sel]
        cols: dict[str, pa.Array] = {}
        for j, name in enumerate(names_i):
            cols[name] = _int_col(i64[:n, j].copy())
        for j, name in enumerate(names_f):
            v = f64[:n, j].copy()
            cols[name] = pa.array(v, mask=np.isnan(v))
        flag = g[:n, 0].copy()
        cols["graph_enabled"] = pa.array(flag == 1, mask=flag < 0)
        dev = g[:n, 1].astype(np.int64)
        cols["graph_device"] = pa.array(_DEV[np.clip(dev, 0, 3)], type=pa.string(), mask=dev < 0)
        fields = _texts(text, sp[:, 0], sp[:, 1])
        cols["fields"] = pc.if_else(pc.equal(pc.utf8_length(fields), 0), pa.scalar(None, pa.string()),
                                    fields)
        ts_text = _texts(text, sp[:, 1], sp[:, 2])
        cols["ts_text"] = ts_text
        cols["ts"] = pc.cast(ts_text, pa.timestamp("us"))
        out.append((cols, sp))
    # rank text: the span after ts up to the end of this row's text
    for cols, sp in out:
        ends = _row_ends(spans, sp, len(text))
        cols["rank"] = _texts(text, sp[:, 2], ends)
    return ScanResult(out[0][0], out[1][0], sl[:ns].copy(), fbad, nbad, fbin, nbin)


def scan(data: bytes, base_offset: int, base_line: int, workers: int = 2,
         min_split_bytes: int = 4 << 20) -> ScanResult:
    """Scan `data` (complete lines, ending with a newline) starting at file offset `base_offset`,
    after `base_line` lines. Large buffers are split at line boundaries and scanned on `workers`
    threads (the C scanner releases the GIL); results are concatenated in file order."""
    if workers <= 1 or len(data) < min_split_bytes:
        return _scan_one(data, base_offset, base_line)
    cuts = [0]
    for k in range(1, workers):
        cut = data.find(b"\n", len(data) * k // workers)
        if cut < 0 or cut + 1 <= cuts[-1]:
            break
        cuts.append(cut + 1)
    cuts.append(len(data))
    parts, line = [], base_line
    for a, b in zip(cuts, cuts[1:]):
        parts.append((a, b, line))
        line += data.count(b"\n", a, b)
    with ThreadPoolExecutor(len(parts)) as ex:
        results = list(ex.map(lambda p: _scan_one(data[p[0]:p[1]], base_offset + p[0], p[2]), parts))
    slow = [r.slow_lines + np.array([a, 0]) for r, (a, _, _) in zip(results, parts)]
    bad = [r for r in results if r.n_bad_utf8]
    binr = [r for r in results if r.n_binary]
    return ScanResult(
        {k: pa.concat_arrays([r.decode[k] for r in results]) for k in results[0].decode},
        {k: pa.concat_arrays([r.prefill[k] for r in results]) for k in results[0].prefill},
        np.concatenate(slow) if slow else np.zeros((0, 2), np.int64),
        bad[0].first_bad_utf8 if bad else -1, sum(r.n_bad_utf8 for r in results),
        binr[0].first_binary if binr else -1, sum(r.n_binary for r in results))


def _row_ends(all_spans: np.ndarray, sp: np.ndarray, text_len: int) -> np.ndarray:
    """End of each row's text = start of the next row's text in buffer order."""
    starts = np.sort(all_spans[:, 0])
    nxt = np.searchsorted(starts, sp[:, 0], side="right")
    return np.where(nxt < len(starts), starts[np.minimum(nxt, len(starts) - 1)], text_len)
