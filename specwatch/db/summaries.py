"""Per-run partial sums of decode windows, kept up to date as windows are stored.

`run_metrics` (views.py) reads the table `run_window_sums` instead of every decode window, so a
render costs a few rows per run however long the history. What is summed is `views.WINDOW_SUMS`,
over the windows `views.scoped_windows_sql` scopes to runs (the same text the view
`decode_windows_scoped` is made of); this module only decides which windows to (re)sum when:

- `fold_appended(con, source_id, from_offset)`: the store appended windows at byte offsets
  >= `from_offset` to a source (ingest, tail, a sweep's log); each run holding that range gets
  them added to its partitions. Costs the new windows, not the history.
- `rebuild(con, run_id, source_id)`: a run (re)scoped to a source (`store.attach_source`, a
  sweep's writer, re-ingest): that run's partitions on that source are summed from scratch.
  Costs that run's windows.
- `rebuild(con)`: everything, from scratch (a schema upgrade; benchmarks that fill tables by SQL).

Called inside the caller's transaction (the store's one writer). Sums are exact for counts and
integer sums; floating sums can differ from a one-pass sum by rounding only.
Leaf below store: imports only views and schema.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from specwatch.db import schema, views

TABLE = "run_window_sums"
KEY = ["run_id", "source_id", "config_offset", "dp_rank", "pp_rank"]
_SUMS = views.WINDOW_SUMS
_COLS = schema.column_names(TABLE)


def _aggregate(where: str, only_from: bool) -> str:
    """SELECT of run_window_sums rows over the scoped windows matching `where`. With `only_from`,
    rows before `$from` (the stored predecessors that make `after_idle` right) are not summed."""
    keep = "byte_offset >= $from" if only_from else "true"
    sums_k = ",\n    ".join(f"{expr} FILTER (WHERE {keep} AND NOT after_idle)"
                           f" AS {name}_k" for name, expr in _SUMS)
    # the partition's first window (row_number 1 is the only window after_idle because it is
    # first); with only_from, a partition that already has rows keeps its stored first window
    firsts = ",\n    ".join(f"{expr} FILTER (WHERE {keep} AND window_idx = 1)"
                           f" AS first_{name}" for name, expr in _SUMS)
    return f"""
SELECT {", ".join(KEY)},
    count(*) FILTER (WHERE {keep}) AS windows_all,
    max(byte_offset) AS last_byte_offset,
    arg_max(ts, byte_offset) AS last_ts,
    count(*) FILTER (WHERE {keep} AND NOT after_idle) AS windows_k,
    {sums_k},
    {firsts}
FROM ({views.scoped_windows_sql(where)}) GROUP BY ALL
HAVING count(*) FILTER (WHERE {keep}) > 0
"""


def _insert(con: duckdb.DuckDBPyConnection, select: str, params: dict) -> None:
    cols = ", ".join(_COLS)
    con.execute(f"INSERT INTO {TABLE} ({cols}) SELECT {cols} FROM ({select})", params)


def rebuild(con: duckdb.DuckDBPyConnection, run_id: str | None = None,
            source_id: str | None = None) -> None:
    """Sum from scratch: every partition, or those of one run on one source."""
    if run_id is None:
        con.execute(f"DELETE FROM {TABLE}")
        _insert(con, _aggregate("", only_from=False), {})
        return
    con.execute(f"DELETE FROM {TABLE} WHERE run_id = ? AND source_id = ?", [run_id, source_id])
    _insert(con, _aggregate("rs.run_id = $run AND rs.source_id = $src", only_from=False),
            {"run": run_id, "src": source_id})


def _predecessors(con: duckdb.DuckDBPyConnection, source_id: str, from_offset: int) -> list[int]:
    """Byte offsets of the last stored window of every partition on `source_id` before
    `from_offset`: the windows a fold reads along, so that the first new window's `after_idle`
    compares with its real predecessor."""
    return [int(r[0]) for r in con.execute(
        f"SELECT DISTINCT last_byte_offset FROM {TABLE} WHERE source_id = ? AND "
        "last_byte_offset < ?", [source_id, from_offset]).fetchall()]


def fold_appended(con: duckdb.DuckDBPyConnection, source_id: str, from_offset: int) -> None:
    """Add the windows stored at byte offsets >= `from_offset` of `source_id` to the partitions
    of every run that holds them. Each partition's last stored window is read along, so the first
    new window's `after_idle` compares with its real predecessor. This is the definition (SQL over
    `views.scoped_windows_sql`); `fold_windows` computes the same from the rows just inserted."""
    # The predecessors as literals, not a subquery: DuckDB prunes row groups by byte_offset for a
    # constant IN list but scans every stored window of the source for `IN (SELECT ...)`, which
    # made each fold cost the source's whole history (measured: 15/15 row groups vs 1-3).
    lasts = _predecessors(con, source_id, from_offset)
    pred = f" OR d.byte_offset IN ({', '.join(str(x) for x in lasts)})" if lasts else ""
    where = f"d.source_id = $src AND (d.byte_offset >= $from{pred})"
    delta = _aggregate(where, only_from=True)
    con.execute("CREATE OR REPLACE TEMP TABLE _specwatch_sums_delta AS " + delta,
                {"src": source_id, "from": from_offset})
    _merge_delta(con)


def fold_windows(con: duckdb.DuckDBPyConnection, source_id: str, from_offset: int,
                 tables: list) -> None:
    """What `fold_appended(con, source_id, from_offset)` does, computed with numpy from `tables`
    (the Arrow tables of decode_windows rows just inserted: every window of the source at
    offsets >= `from_offset`) instead of SQL over the stored windows: the same scoping to runs,
    server-config segments (ASOF), predecessors, `after_idle`, first windows and NULLs; the
    merge into the table is the same SQL. tests/test_fold.py checks both give equal sums.
    (Falls back to the SQL when views.WINDOW_SUMS is no longer what the numpy code sums.)
    In three steps, so that a writer can compute while DuckDB inserts the windows: `fold_reads`
    (the store), `fold_delta` (numpy only, no connection: any thread), `merge_delta`."""
    if not IN_STEP:
        fold_appended(con, source_id, from_offset)
        return
    merge_delta(con, fold_delta(fold_reads(con, source_id, from_offset), tables))


def merge_delta(con: duckdb.DuckDBPyConnection, delta: pa.Table | None) -> None:
    """Add `fold_delta`'s partial sums to the table (nothing when None)."""
    if delta is None:
        return
    con.register("_specwatch_fold_delta", delta)
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _specwatch_sums_delta AS "
                    "SELECT * FROM _specwatch_fold_delta")
    finally:
        con.unregister("_specwatch_fold_delta")
    _merge_delta(con)


def merge_deltas(con: duckdb.DuckDBPyConnection, deltas: list[pa.Table | None]) -> None:
    """`merge_delta` of each of `deltas` in turn (successive pieces of one source), as one merge:
    the deltas are first combined the way merging them one after the other would combine them
    (counts and sums added, NULL where every delta has NULL, the newest last window and last
    timestamp, the oldest first window)."""
    deltas = [d for d in deltas if d is not None and d.num_rows]
    if len(deltas) <= 1:
        merge_delta(con, deltas[0] if deltas else None)
        return
    both = pa.concat_tables([d.append_column("_seq", pa.array(np.full(d.num_rows, i), pa.int32()))
                             for i, d in enumerate(deltas)])
    ors = {f"{name}_k" for name, expr in _SUMS if expr.startswith("bool_or")}
    types = dict(schema.columns(schema.TABLES[TABLE]))
    exprs = []
    for c in _COLS:
        if c in KEY:
            continue
        agg = (f"arg_max({c}, _seq)" if c in ("last_byte_offset", "last_ts")
               else f"arg_min_null({c}, _seq)" if c.startswith("first_")
               else f"bool_or({c})" if c in ors else f"sum({c})")
        exprs.append(f"CAST({agg} AS {types[c].split()[0]}) AS {c}")
    con.register("_specwatch_fold_deltas", both)
    try:
        combined = con.sql(f"SELECT {', '.join(KEY)}, {', '.join(exprs)} "
                               "FROM _specwatch_fold_deltas GROUP BY ALL").to_arrow_table()
    finally:
        con.unregister("_specwatch_fold_deltas")
    merge_delta(con, combined.select(_COLS))


# What fold_delta computes with numpy (its `sums`): views.WINDOW_SUMS as written when it was.
# If the definition changes, fold_windows uses the SQL (fold_appended) until this is updated.
_NUMPY_SUMS = [
    ("al_num", "sum(accept_len * running_req)"),
    ("al_den", "sum(CASE WHEN accept_len IS NOT NULL THEN running_req END)"),
    ("ar_num", "sum(accept_rate_printed * running_req)"),
    ("ar_den", "sum(CASE WHEN accept_rate_printed IS NOT NULL THEN running_req END)"),
    ("gen_sum", "sum(gen_throughput_tok_s)"),
    ("gen_n", "count(gen_throughput_tok_s)"),
    ("graph", "bool_or(graph_enabled)"),
]
IN_STEP = _SUMS == _NUMPY_SUMS
_NULL_KEY = np.iinfo(np.int64).min
# decode_windows columns the sums read: (name, numpy dtype of its values)
_WINDOW_COLS = {"byte_offset": np.int64, "ts": np.int64, "dp_rank": np.int32, "pp_rank": np.int32,
                "accept_len": np.float64, "running_req": np.int32,
                "accept_rate_printed": np.float64, "gen_throughput_tok_s": np.float64,
                "graph_enabled": np.bool_}
_ARROW_OF = {np.int64: pa.int64(), np.int32: pa.int32(), np.float64: pa.float64(),
             np.bool_: pa.bool_()}


def _values(arrays: list, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of Arrow arrays of one column, concatenated; values under NULLs are 0."""
    vals, valid = [], []
    for arr in arrays:
        n = len(arr)
        if arr.type == pa.null() or arr.null_count == n:
            vals.append(np.zeros(n, dtype))
            valid.append(np.zeros(n, np.bool_))
            continue
        if pa.types.is_timestamp(arr.type):
            if arr.type.unit != "us" or arr.type.tz is not None:
                arr = arr.cast(pa.timestamp("us"))
            arr = arr.view(pa.int64())
        elif arr.type != _ARROW_OF[dtype]:
            arr = arr.cast(_ARROW_OF[dtype])
        if dtype is np.bool_:
            v = arr.fill_null(False).to_numpy(zero_copy_only=False)
        else:
            v = np.frombuffer(arr.buffers()[1], dtype, count=n, offset=arr.offset * np.dtype(dtype).itemsize)
        if arr.null_count:
            ok = arr.is_valid().to_numpy(zero_copy_only=False)
            v = np.where(ok, v, np.zeros(1, dtype))
        else:
            ok = np.ones(n, np.bool_)
        vals.append(v)
        valid.append(ok)
    return np.concatenate(vals), np.concatenate(valid)


def _codes(v: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """Dense codes of a nullable integer column (0 = NULL), their count, and the value of each
    code (_NULL_KEY for NULL)."""
    if not ok.any():
        return np.zeros(len(v), np.int64), 1, np.array([_NULL_KEY])
    key = np.where(ok, v.astype(np.int64), _NULL_KEY)
    lo, hi = int(v[ok].min()), int(v[ok].max())
    if hi - lo < 1 << 16:   # the common case (rank numbers): no sort
        code = np.where(ok, v.astype(np.int64) - lo + 1, 0)
        values = np.r_[_NULL_KEY, np.arange(lo, hi + 1, dtype=np.int64)]
        return code, hi - lo + 2, values
    values, code = np.unique(key, return_inverse=True)
    if values[0] != _NULL_KEY:
        values, code = np.r_[_NULL_KEY, values], code + 1
    return code.astype(np.int64), len(values), values


@dataclass
class FoldReads:
    """What a numpy fold reads from the store: the run ranges holding the source, the stored
    predecessors (offset, ts, dp_rank, pp_rank) of its partitions, its server_args offsets.
    Read after every table but decode_windows got the chunk's rows (its server configs count)."""
    source_id: str
    ranges: list
    pred: list
    cfg: np.ndarray


def fold_reads(con: duckdb.DuckDBPyConnection, source_id: str, from_offset: int) -> FoldReads:
    ranges = con.execute("SELECT run_id, offset_from, offset_to FROM run_sources "
                         "WHERE source_id = ? AND offset_from IS NOT NULL", [source_id]).fetchall()
    lasts = _predecessors(con, source_id, from_offset) if ranges else []
    pred = con.execute(   # only their offset, ts and ranks matter (never summed)
        "SELECT byte_offset, ts, dp_rank, pp_rank FROM decode_windows WHERE source_id = ? AND "
        f"byte_offset IN ({', '.join(str(x) for x in lasts)})", [source_id]).fetchall() \
        if lasts else []
    # server config segments: the latest server_args line at or before each window (ASOF)
    cfg = np.array([r[0] for r in con.execute(
        "SELECT byte_offset FROM server_configs WHERE source_id = ? AND "
        "coalesce(config_kind, 'server_args') = 'server_args' ORDER BY byte_offset",
        [source_id]).fetchall()], np.int64) if ranges else np.empty(0, np.int64)
    return FoldReads(source_id, ranges, pred, cfg)


def fold_delta(reads: FoldReads, tables: list) -> pa.Table | None:
    """The rows `_aggregate(..., only_from=True)` gives over the scoped windows of the source at
    offsets >= the fold's (`tables`) and their predecessors (`reads`), as Arrow; None when there
    are none. Mirrors views.scoped_windows_sql step by step. Touches no connection."""
    return _fold(reads, tables)[0]


def _fold(reads: FoldReads, tables: list) -> tuple[pa.Table | None, list | None]:
    """`fold_delta`, and the predecessors of windows that follow `tables` (`FoldReads.pred`: the
    last window of every partition, new or stored; None when the fold read no window)."""
    tables = [t for t in tables if t.num_rows]
    ranges, source_id = reads.ranges, reads.source_id
    if not tables or not ranges:
        return None, None
    cols = {name: [c for t in tables for c in t.column(name).chunks] for name in _WINDOW_COLS}
    n_pred = len(reads.pred)
    if n_pred:
        pred = dict(zip(("byte_offset", "ts", "dp_rank", "pp_rank"), zip(*reads.pred)))
        for name, dtype in _WINDOW_COLS.items():
            typ = pa.timestamp("us") if name == "ts" else _ARROW_OF[dtype]
            cols[name] = [pa.array(pred[name], typ) if name in pred else pa.nulls(n_pred)] \
                + cols[name]
    v = {name: _values(arrs, dtype) for (name, dtype), arrs in
         zip(_WINDOW_COLS.items(), cols.values())}
    off = v["byte_offset"][0]
    n = len(off)
    keep = np.arange(n) >= n_pred                              # byte_offset >= $from
    if n > 1 and not (off[1:] >= off[:-1]).all():
        order = np.argsort(off, kind="stable")
        v = {k: (a[order], b[order]) for k, (a, b) in v.items()}
        off, keep = v["byte_offset"][0], keep[order]
    cfg = reads.cfg
    cfg_code = np.searchsorted(cfg, off, side="right")        # 0: no config (NULL)
    dp_code, n_dp, dp_vals = _codes(*v["dp_rank"])
    pp_code, n_pp, pp_vals = _codes(*v["pp_rank"])
    # each run range holding a window gets its own copy of it (the JOIN with run_sources), in
    # byte order within each run (overlapping ranges of one run: the copies side by side)
    runs = sorted({r[0] for r in ranges})
    parts = []
    for run_id, lo, hi in ranges:
        take = np.flatnonzero((off >= lo) & (off < hi) if hi is not None else off >= lo)
        parts.append((runs.index(run_id), take))
    if len(parts) == 1 and len(parts[0][1]) == n:
        idx = None                                             # every window, once
        run_code = np.full(n, parts[0][0], np.int64)
    else:
        idx = np.concatenate([t for _, t in parts])
        run_code = np.concatenate([np.full(len(t), r, np.int64) for r, t in parts])
        if len(runs) < len(ranges):
            o = np.lexsort((off[idx], run_code))
            idx, run_code = idx[o], run_code[o]
        if not len(idx):
            return None, None

    def at(a: np.ndarray) -> np.ndarray:
        return a if idx is None else a[idx]

    g = ((run_code * (len(cfg) + 1) + at(cfg_code)) * n_dp + at(dp_code)) * n_pp + at(pp_code)
    m = len(g)
    # partitions: dense ids, and each row's predecessor in its partition (-1: its first row);
    # a stable sort by partition keeps byte order inside each
    keys, gd = np.unique(g, return_inverse=True) if g.max() >= 1 << 16 else (None, None)
    if keys is None:
        order = np.argsort(g.astype(np.uint16), kind="stable")   # radix sort
    else:
        order = np.argsort(gd, kind="stable")
    sg = g[order]
    starts = np.flatnonzero(np.r_[True, sg[1:] != sg[:-1]])
    ends = np.r_[starts[1:], m]
    n_g = len(starts)
    gd = np.empty(m, np.int64)
    gd[order] = np.repeat(np.arange(n_g), ends - starts)
    prev_sorted = np.r_[-1, order[:-1]]
    prev_sorted[starts] = -1
    prev = np.empty(m, np.int64)
    prev[order] = prev_sorted
    first = prev < 0                                           # window_idx = 1
    ts, ts_ok = at(v["ts"][0]), at(v["ts"][1])
    sec = ts // 1_000_000                                      # date_diff('second', ...)
    p = np.maximum(prev, 0)
    idle = ~first & ts_ok & ts_ok[p] & (sec - sec[p] > views.IDLE_GAP_S)
    kept = at(keep)
    k_rows = kept & ~(first | idle)                            # not after_idle

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(gd, mask, minlength=n_g).astype(np.int64)

    def fsum(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        # bincount adds in row (byte) order, one by one, as DuckDB's sum() does
        return np.bincount(gd, np.where(mask, x, 0.0), minlength=n_g)

    def isum(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        x = np.where(mask, x, 0)
        if m < 1 << 21:   # |x| < 2**31: every partial sum is exact in float64
            return np.bincount(gd, x, minlength=n_g).astype(np.int64)
        hi = np.bincount(gd, x >> 16, minlength=n_g)   # 16-bit halves, each exact
        lo = np.bincount(gd, x & 0xFFFF, minlength=n_g)
        return hi.astype(np.int64) * 65536 + lo.astype(np.int64)

    windows_all = count(kept)
    head = order[starts]                                       # each partition's first row
    out = {}
    out["run_id"] = pa.array([runs[i] for i in run_code[head]], pa.string())
    out["source_id"] = pa.array([source_id] * n_g, pa.string())
    c = at(cfg_code)[head]
    out["config_offset"] = pa.array(np.r_[np.int64(0), cfg][c], pa.int64(), mask=c == 0)
    for name, code, vals in (("dp_rank", dp_code, dp_vals), ("pp_rank", pp_code, pp_vals)):
        k = at(code)[head]
        out[name] = pa.array(vals[k].astype(np.int32), pa.int32(), mask=k == 0)
    out["windows_all"] = pa.array(windows_all, pa.int64())
    out["last_byte_offset"] = pa.array(at(off)[order[ends - 1]], pa.int64())
    # arg_max(ts, byte_offset) skips NULL ts: the ts of the last window that has one
    pos = np.maximum.reduceat(np.where(ts_ok[order], np.arange(m), -1), starts)
    out["last_ts"] = pa.array(ts[order[np.maximum(pos, 0)]], pa.timestamp("us"), mask=pos < 0)
    out["windows_k"] = pa.array(count(k_rows), pa.int64())
    col = {name: (at(v[name][0]), at(v[name][1])) for name in
           ("accept_len", "accept_rate_printed", "gen_throughput_tok_s", "graph_enabled")}
    rr, rr_ok = at(v["running_req"][0]).astype(np.int64), at(v["running_req"][1])

    # WINDOW_SUMS per partition over the kept windows not after idle (`_k`, all rows at once),
    # and over each partition's first window when it is new (`first_`, its head row only)
    hk = kept[head]
    for name, src in (("al", "accept_len"), ("ar", "accept_rate_printed")):
        x, ok = col[src]
        mm = k_rows & ok & rr_ok
        none = count(mm) == 0
        out[f"{name}_num_k"] = pa.array(fsum(x * rr, mm), pa.float64(), mask=none)
        out[f"{name}_den_k"] = pa.array(isum(rr, mm), pa.int64(), mask=none)
    gen, gen_ok = col["gen_throughput_tok_s"]
    cnt = count(k_rows & gen_ok)
    out["gen_sum_k"] = pa.array(fsum(gen, k_rows & gen_ok), pa.float64(), mask=cnt == 0)
    out["gen_n_k"] = pa.array(cnt, pa.int64())
    gr, gr_ok = col["graph_enabled"]
    out["graph_k"] = pa.array(count(k_rows & gr_ok & gr) > 0, pa.bool_(),
                              mask=count(k_rows & gr_ok) == 0)
    for name, src in (("al", "accept_len"), ("ar", "accept_rate_printed")):
        x, ok = (a[head] for a in col[src])
        mm = hk & ok & rr_ok[head]
        out[f"first_{name}_num"] = pa.array(x * rr[head], pa.float64(), mask=~mm)
        out[f"first_{name}_den"] = pa.array(rr[head], pa.int64(), mask=~mm)
    mm = hk & gen_ok[head]
    out["first_gen_sum"] = pa.array(gen[head], pa.float64(), mask=~mm)
    out["first_gen_n"] = pa.array(mm.astype(np.int64), pa.int64())
    mm = hk & gr_ok[head]
    out["first_graph"] = pa.array(gr[head], pa.bool_(), mask=~mm)
    out = {c: out[c] for c in _COLS}
    tbl = pa.table(out)
    # each partition's last window (a stored predecessor where it got no new one)
    last = order[ends - 1]
    cols_last = [at(v["byte_offset"][0])[last]] + [
        np.where(at(v[k][1])[last], at(v[k][0])[last].astype(np.int64), _NULL_KEY)
        for k in ("ts", "dp_rank", "pp_rank")]
    lasts = sorted({(int(o), *(None if x == _NULL_KEY else int(x) for x in rest))
                    for o, *rest in zip(*cols_last)})
    return (tbl.filter(pa.array(windows_all > 0)) if (windows_all == 0).any() else tbl), lasts


class FoldChain:
    """`fold_delta` over successive pieces of one source, none of them stored yet (a one-shot
    ingest streams a file's windows into one INSERT, `stream.append_stream_with_checkpoint`): each
    piece's fold reads its predecessors from the fold before it instead of the store, and the
    server_args offsets of the pieces so far beside the stored ones. Folds run in order on a
    thread of their own; `deltas()` are merged (`merge_delta`) in that order, which sums what a
    commit per piece would have."""

    def __init__(self, con: duckdb.DuckDBPyConnection, source_id: str, from_offset: int):
        self.reads = fold_reads(con, source_id, from_offset)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="specwatch-fold")
        self._futures: list = []

    def add(self, windows: list[pa.Table], server_configs: list) -> None:
        """Fold `windows` (the next piece's decode windows, Arrow tables) after the pieces added
        before; `server_configs`: that piece's server_configs rows (column lists or Arrow
        tables)."""
        cfg = _server_args_offsets(server_configs)
        self._futures.append(self._pool.submit(self._step, windows, cfg))

    def _step(self, windows: list[pa.Table], cfg: np.ndarray) -> pa.Table | None:
        if len(cfg) and self.reads.ranges:
            self.reads.cfg = np.concatenate([self.reads.cfg, cfg])
        delta, lasts = _fold(self.reads, windows)
        if lasts is not None:
            self.reads.pred = lasts
        return delta

    def deltas(self) -> list[pa.Table | None]:
        """Every piece's delta, in order (waits for the folds)."""
        return [f.result() for f in self._futures]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _server_args_offsets(parts: list) -> np.ndarray:
    """Sorted byte offsets of the server_args rows (config_kind NULL or 'server_args') among
    server_configs parts (column lists or Arrow tables), as `fold_reads` selects them."""
    offs = []
    for p in parts if isinstance(parts, list) else [parts]:
        cols = p.to_pydict() if isinstance(p, pa.Table) else p
        offs += [o for o, k in zip(cols["byte_offset"], cols.get("config_kind") or
                                   [None] * len(cols["byte_offset"]))
                 if k is None or k == "server_args"]
    return np.sort(np.array(offs, np.int64))


def _merge_delta(con: duckdb.DuckDBPyConnection) -> None:
    """Merge the partial sums in the temp table _specwatch_sums_delta into TABLE (and drop it)."""
    try:
        if not con.execute("SELECT count(*) FROM _specwatch_sums_delta").fetchone()[0]:
            return
        on = " AND ".join(f"o.{k} IS NOT DISTINCT FROM n.{k}" for k in KEY)
        # NULL + x = x (sum() of no rows is NULL); bool_or likewise ignores NULLs
        merged = [f"n.{k}" for k in KEY] + [
            # last_ts: arg_max(ts, byte_offset) skips NULL ts, so new windows that all have
            # none keep the stored one (was n.last_ts: NULL, unlike a from-scratch sum)
            "coalesce(o.windows_all, 0) + n.windows_all", "n.last_byte_offset",
            "coalesce(n.last_ts, o.last_ts)",
            "coalesce(o.windows_k, 0) + n.windows_k"]
        for name, expr in _SUMS:
            if expr.startswith("bool_or"):
                merged.append(f"coalesce(o.{name}_k OR n.{name}_k, o.{name}_k, n.{name}_k)")
            else:
                merged.append(f"CASE WHEN o.{name}_k IS NULL THEN n.{name}_k "
                              f"WHEN n.{name}_k IS NULL THEN o.{name}_k "
                              f"ELSE o.{name}_k + n.{name}_k END")
        merged += [f"CASE WHEN o.windows_all IS NULL THEN n.first_{name} ELSE o.first_{name} END"
                   for name, _ in _SUMS]
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _specwatch_sums_merged AS
            SELECT {", ".join(f"{e} AS {c}" for e, c in zip(merged, _COLS))}
            FROM _specwatch_sums_delta n LEFT JOIN {TABLE} o ON {on}""")
        con.execute(f"""DELETE FROM {TABLE} o WHERE EXISTS (
            SELECT 1 FROM _specwatch_sums_delta n WHERE {on})""")
        con.execute(f"INSERT INTO {TABLE} SELECT {', '.join(_COLS)} FROM _specwatch_sums_merged")
        con.execute("DROP TABLE _specwatch_sums_merged")
    finally:
        con.execute("DROP TABLE IF EXISTS _specwatch_sums_delta")


def differences(con: duckdb.DuckDBPyConnection, rel_tol: float = 1e-9) -> list[tuple]:
    """Partitions where the kept table and a from-scratch sum disagree (empty when they agree):
    [(key..., column, kept, scratch)]. For tests and `specwatch doctor`-style checks."""
    fresh = con.execute(_aggregate("", only_from=False)).fetchall()
    kept = con.execute(f"""SELECT {', '.join(_COLS)} FROM {TABLE} s WHERE EXISTS (
        SELECT 1 FROM run_sources rs WHERE rs.run_id = s.run_id AND rs.source_id = s.source_id)
        """).fetchall()
    names = [c for c in _COLS]
    index = {tuple(r[:len(KEY)]): r for r in kept}
    out = []
    seen = set()
    for row in fresh:
        key = tuple(row[:len(KEY)])
        seen.add(key)
        other = index.get(key)
        if other is None:
            out.append(key + ("(missing)", None, row))
            continue
        for name, a, b in zip(names[len(KEY):], other[len(KEY):], row[len(KEY):]):
            if isinstance(a, float) and isinstance(b, float):
                if abs(a - b) > rel_tol * max(1.0, abs(a), abs(b)):
                    out.append(key + (name, a, b))
            elif a != b:
                out.append(key + (name, a, b))
    out.extend(k + ("(extra)", index[k], None) for k in index if k not in seen)
    return out
