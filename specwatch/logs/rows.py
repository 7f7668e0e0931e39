"""Turn a chunk of complete log lines into typed table rows, ready for `store`.

This is the stage between `parse` (one line -> one record, the definition) and `store` (rows in,
exactly once): it maps records to the schema's columns, range-checks every value against its
column (an INTEGER past 2**31, a non-finite float, JSON that cannot be written) and turns a line
that the store could not hold into a `rejected_lines` row with the reason, so one bad line never
blocks the lines around it. With the C accelerator built (`fastscan`), canonical SGLang
decode/prefill lines skip the per-line Python work; both paths give identical rows.

Not for: reading files or checkpoints (see `ingest`), knowing any line format (see `parse`).
"""
from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
import pyarrow as pa

from specwatch.logs import clock, fastscan, parse, prefix, reassemble, values
from specwatch.db import schema, store

MAX_LINE_TEXT = 2000       # characters of a rejected line kept in rejected_lines

# Cheap byte-level prefilter: a line without one of these cannot be a stored record.
_ANCHORS = parse.ANCHORS  # every header parse routes by (its definition, not a copy)

_INT_RANGE = {"INTEGER": (-(2 ** 31), 2 ** 31 - 1), "BIGINT": (-(2 ** 63), 2 ** 63 - 1)}


def _checks(table: str) -> list[tuple[str, str]]:
    return [(name, sql.split()[0]) for name, sql in schema.columns(schema.TABLES[table])]


_CHECKS = {t: _checks(t) for t in schema.TABLES}
_PY_TYPES = {"VARCHAR": str, "JSON": str, "BOOLEAN": bool, "TIMESTAMP": dt.datetime}


def _value_problem(col: str, typ: str, x) -> str | None:
    if typ in ("INTEGER", "BIGINT"):
        if not isinstance(x, int) or isinstance(x, bool):
            return f"{col}={x!r}: not an integer"
        lo, hi = _INT_RANGE[typ]
        if not lo <= x <= hi:
            return f"{col}={x}: out of range for {typ} ({lo}..{hi})"
    elif typ == "DOUBLE":
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            return f"{col}={x!r}: not a number"
        if not math.isfinite(x):
            return f"{col}={x}: not a finite number"
    elif typ in _PY_TYPES and not isinstance(x, _PY_TYPES[typ]):
        return f"{col}={x!r}: not a {typ}"
    return None


def row_problem(table: str, row: dict) -> tuple[str, str] | None:
    """(column, reason) for the first value its column cannot hold faithfully (wrong type, an
    integer out of range, a non-finite float), or None."""
    for col, typ in _CHECKS[table]:
        v = row.get(col)
        if v is None:
            continue
        if typ.endswith("[]"):
            if not isinstance(v, list):
                return col, f"{col}={v!r}: not a list"
            for x in v:
                why = x is not None and _value_problem(col, typ[:-2], x)
                if why:
                    return col, why
            continue
        why = _value_problem(col, typ, v)
        if why:
            return col, why
    return None


def _dumps(value) -> str:
    """store.dumps, refusing what valid JSON cannot hold (inf, nan) instead of writing it."""
    return json.dumps(value, separators=(",", ":"), default=str, allow_nan=False)


class Batches:
    """Column lists (Python path) and Arrow tables (fast path) per table, filled chunk by chunk."""

    def __init__(self):
        self.tables: dict[str, dict[str, list]] = {}
        self.arrow: dict[str, list] = {}
        self.lines = 0      # complete lines these rows come from
        self.consumed = 0   # bytes of the chunk they come from (less when a record is held)
        self.aligned = 0    # decode windows kept when `parse_chunk(align=)` cut the chunk
        self.buffers = None  # the fastscan.Buffers the Arrow rows are views of

    def all(self) -> dict[str, list]:
        """{table: [column lists and/or Arrow tables]} for store.insert."""
        out = {t: [c] for t, c in self.tables.items()}
        for t, tbls in self.arrow.items():
            out.setdefault(t, []).extend(tbls)
        return out

    def relabel(self, source_id: str) -> None:
        """Every row's source_id becomes `source_id` (rows parsed before it was known)."""
        for cols in self.tables.values():
            cols["source_id"] = [source_id] * len(cols["source_id"])
        for tbls in self.arrow.values():
            for i, tbl in enumerate(tbls):
                at = tbl.schema.get_field_index("source_id")
                ids = pa.DictionaryArray.from_arrays(np.zeros(tbl.num_rows, np.int32),
                                                     pa.array([source_id]))
                tbls[i] = tbl.set_column(at, "source_id", ids)

    def add_arrow(self, table: str, tbl) -> None:
        self.arrow.setdefault(table, []).append(tbl)

    def add(self, table: str, row: dict) -> None:
        cols = self.tables.get(table)
        if cols is None:
            cols = self.tables[table] = {c: [] for c in schema.column_names(table)}
        for c, lst in cols.items():
            lst.append(row.get(c))

    def rows(self, table: str) -> list[dict]:
        cols = self.tables.get(table, {})
        names = list(cols)
        return [dict(zip(names, vals)) for vals in zip(*cols.values())]


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


_COLS = {kind: fmt for kind, fmt in parse.FORMATS.lines.items()}


def record_row(rec: parse.Record, source_id: str, offset: int, line_no: int) -> tuple[str, dict]:
    """(table, row) for one parsed record. Raises ValueError when a JSON column cannot hold a
    value (a non-finite float)."""
    row = {"source_id": source_id, "byte_offset": offset, "line_no": line_no,
           **prefix.capture_columns(rec.capture)}
    f = rec.fields
    if rec.kind in ("sglang_decode", "sglang_prefill"):
        row.update(ts=_ts(rec.timestamp), ts_text=rec.timestamp, rank=rec.rank,
                   process=rec.process, forward_iter=f.get("forward_iter"), **rec.ranks)
    elif rec.kind in ("vllm_spec_decode", "vllm_throughput"):
        row.update(ts_text=rec.timestamp, process=rec.process, engine=f.get("engine"))
    if rec.kind in _COLS:
        for key, value in f.items():
            col = _COLS[rec.kind].by_key.get(key)
            if col is None or value is None or isinstance(value, str) and col.type != "str":
                continue
            if col.type == "pct" and not isinstance(value, values.Pct):
                value = value * 100.0  # vLLM V0 prints the acceptance rate as a fraction
            row[col.column] = value
            if col.column == "graph_enabled":
                row["graph_device"] = key.split("_")[0]
        dev = parse.kv_cache_device(rec)
        if dev is not None:  # vLLM `<device> KV cache usage` (CPU builds print `CPU KV cache usage`)
            row["kv_cache_device"] = dev[1]
            if isinstance(f.get(dev[0]), float):
                row["gpu_kv_cache_usage_pct"] = f[dev[0]]
        # `fields` keeps what no typed column holds, so typed columns + fields = the whole line
        extra = {k: v for k, v in f.items()
                 if k not in _COLS[rec.kind].by_key and k not in ("forward_iter", "engine")
                 and (dev is None or k != dev[0])}
        row["fields"] = _dumps(extra) if extra else None
        row.update(parse.derived_columns(rec))  # outer timestamp; rates cut at the spec depth
        return schema.KIND_TABLE[rec.kind], row
    if rec.kind in parse.CONFIG_KINDS:  # SGLang server_args, vLLM engine config / args
        row.update(ts=_ts(rec.timestamp), ts_text=rec.timestamp, process=rec.process,
                   outer_ts_text=rec.outer_ts, form=rec.form, config_kind=rec.kind,
                   **parse.derived_columns(rec), args=_dumps(f))
        return "server_configs", row
    row.update(ts=_ts(rec.timestamp), kind=rec.kind, message=f.get("message"))
    return "events", row


def rejected_row(source_id: str, path: str, offset: int, line_no: int, kind: str, reason: str,
                 field: str | None, text: str) -> dict:
    return {"source_id": source_id, "byte_offset": offset, "line_no": line_no, "path": path,
            "kind": kind, "reason": reason, "field": field, "line_text": text[:MAX_LINE_TEXT]}


def safe_parse(text: str) -> parse.Record | parse.Rejected | None:
    """parse.parse_line, with a parser failure on this one line turned into a rejection."""
    try:
        return parse.parse_line(text)
    except Exception as exc:  # noqa: BLE001 - a parser bug on one line must not block the file
        return parse.Rejected("unknown", f"the parser failed on this line ({type(exc).__name__}: "
                              f"{str(exc)[:200]})")


def logical_row(lg: reassemble.Logical, source_id: str, path: str) -> tuple[str, dict]:
    """(table, row) for one logical record (a line, or lines joined by the reassembler). A
    record the store cannot hold becomes a rejected_lines row naming the column and why."""
    got = lg.result
    if isinstance(got, parse.Record):
        why = clock.not_a_date(got.timestamp)
        problem = ("ts_text", why) if why else None
        if problem is None and (why := clock.not_a_date(got.outer_ts)):
            problem = ("outer_ts_text", why)
        try:
            if problem is None:
                table, row = record_row(got, source_id, lg.offset, lg.line_no)
                problem = row_problem(table, row)
        except (ValueError, OverflowError) as exc:
            problem = (None, f"a value cannot be stored: {exc}")
        if problem is None:
            return table, row
        got = parse.Rejected(got.kind, problem[1], problem[0])
    return "rejected_lines", rejected_row(source_id, path, lg.offset, lg.line_no, got.kind,
                                          got.reason, got.field, lg.text)


# lines with NUL bytes: each is read from after its last NUL (reassemble.feed_chunk, the scanner)
_NUL_WARNING = ("NUL bytes skipped (binary data, or a hole: logrotate copytruncate under a writer "
                "without O_APPEND, a crash), the text after them read")


def _warn(result, path: str, what: str, first: int, n: int) -> None:
    if n:
        more = f" ({n} lines like this)" if n > 1 else ""
        result.warnings.append(f"{path}:{first}: {what}{more}; is this a log file?")


def fast_table(table: str, cols: dict[str, pa.Array], n: int, source_id: str) -> pa.Table:
    """An Arrow table in schema order from the scanner's typed arrays (absent columns NULL)."""
    arrays, names = [], []
    for name, sql in schema.columns(schema.TABLES[table]):
        typ = store._ARROW[sql.split()[0]]
        if name == "source_id":
            arr = pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), pa.array([source_id]))
        elif name in cols:
            arr = cols[name] if cols[name].type == typ else cols[name].cast(typ)
        else:
            arr = pa.nulls(n)  # NullType: no buffers; DuckDB casts it on insert
        arrays.append(arr)
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def _add(batches: Batches, result, lgs, source_id: str, path: str) -> None:
    for lg in lgs:
        if lg.result is None:
            continue
        table, row = logical_row(lg, source_id, path)
        batches.add(table, row)
        result.rejected += table == "rejected_lines"


def parse_chunk(data: bytes, source_id: str, path: str, start_offset: int, start_line: int,
                batches: Batches, result, fast: bool | None = None, final: bool = True,
                align: int = 0, buffers=None, last_ts: list | None = None) -> None:
    """Parse complete lines in `data` (which ends with a newline) into `batches`; counts rejected
    lines and adds warnings to `result`. Records hard-wrapped over several lines are joined
    (`reassemble`). A record still open at the end of `data` (it may go on in the next line) is
    flushed as it is when `final`, else left out: `batches.consumed` / `batches.lines` then say
    how far the rows go, and the caller reads again from there.

    With the C accelerator (`fast`, default: when built), canonical SGLang decode/prefill lines
    that the next line cannot continue are extracted in bulk and every other anchored line (and
    whatever follows a held record) goes through `parse`; without it, `parse` sees every
    anchored line. Both store identical rows (tests/test_fastscan.py, tests/test_fuzz.py).

    `align` (fast path only; 0: off): keep only the rows before the decode window whose index is
    the largest multiple of `align` (`consumed`/`lines` end there; the caller reads the rest again
    with the next chunk), so that every chunk but a file's last inserts whole DuckDB row groups of
    decode windows (see ingest.ROW_GROUP_ROWS). Not done when the chunk has fewer decode windows,
    or warned (its warnings cannot be split). `buffers`: a `fastscan.Buffers` to scan into; the
    set used is `batches.buffers` (its rows are views of it until stored). A clock jump between
    the rows kept (`clock.jumps`) is warned; `last_ts` carries the file's last [ts_us, line] from
    one call to the next."""
    r = reassemble.Reassembler(safe_parse)
    warned = len(result.warnings)
    if fast if fast is not None else fastscan.available():
        sr = fastscan.scan(data, start_offset, start_line, buffers)
        batches.buffers = sr.buffers
        slow_lines = _resolve_capture(sr, start_offset)
        taken = [np.asarray(c["byte_offset"]) for c in (sr.decode, sr.prefill)]
        cursor, lines = 0, sr.lines
        for rel, line_no in slow_lines.tolist():
            if rel < cursor:
                continue  # already fed, as what followed a held record
            while True:
                end = data.index(b"\n", rel)
                text = data[rel:end].decode("utf-8", errors="replace")
                _add(batches, result, r.feed(line_no, start_offset + rel, text), source_id, path)
                rel, line_no = end + 1, line_no + 1
                if not r.holding or rel >= len(data):
                    break
                at = start_offset + rel
                if any(len(t) and t[min(np.searchsorted(t, at), len(t) - 1)] == at for t in taken) \
                        or b"\x00" in data[rel:data.index(b"\n", rel)]:
                    # a line the scanner took starts a record of its own; NUL lines are skipped:
                    # neither continues the held one
                    _add(batches, result, r.flush(), source_id, path)
                    break
            cursor = rel
        _warn(result, path, "invalid UTF-8, read with replacement characters", sr.first_bad_utf8,
              sr.n_bad_utf8)
        _warn(result, path, _NUL_WARNING, sr.first_binary, sr.n_binary)
        cols = {"decode_windows": sr.decode, "prefill_windows": sr.prefill}
    else:
        bad_utf8: list[int] = []
        binary: list[int] = []
        _add(batches, result, reassemble.feed_chunk(r, data, start_offset, start_line, bad_utf8,
                                                    binary), source_id, path)
        lines = data.count(b"\n")
        _warn(result, path, "invalid UTF-8, read with replacement characters",
              bad_utf8[0] if bad_utf8 else -1, len(bad_utf8))
        _warn(result, path, _NUL_WARNING, binary[0] if binary else -1,
              len(binary))
        cols = {}
    consumed = len(data)
    if r.holding:
        if final:
            _add(batches, result, r.flush(), source_id, path)
        else:
            line_no, offset = r.pending
            consumed, lines = offset - start_offset, line_no - 1 - start_line
    if align and cols and len(result.warnings) == warned:
        cut = _aligned_cut(cols["decode_windows"], batches.tables.get("decode_windows"),
                           start_offset, start_offset + consumed, align)
        if cut is not None:
            offset, line_no, batches.aligned = cut
            consumed, lines = offset - start_offset, line_no - 1 - start_line
            result.rejected -= _drop_from(batches, offset)
    kept = []
    for table, c in cols.items():
        n = len(c["byte_offset"])
        offs = np.asarray(c["byte_offset"])
        if n and offs[-1] >= start_offset + consumed:  # nothing from a held record (or cut) on
            n = int(np.searchsorted(offs, start_offset + consumed))   # the scanner's rows are
            c = {k: v.slice(0, n) for k, v in c.items()}              # in byte order
        if n:
            batches.add_arrow(table, fast_table(table, c, n, source_id))
            kept.append(c)
    _warn_jumps(batches, kept, start_offset, path, result, [] if last_ts is None else last_ts)
    batches.lines += lines
    batches.consumed = consumed


_EPOCH = dt.datetime(1970, 1, 1)


def _warn_jumps(batches: Batches, fast: list[dict], start: int, path: str, result,
                last: list) -> None:
    """Warn about the first clock jump (and how many) among the rows from `start` on."""
    parts = [(np.asarray(c["byte_offset"]), np.asarray(c["line_no"]),
              np.asarray(c["ts"].cast(pa.int64()))) for c in fast]
    for cols in batches.tables.values():
        got = [(o, n, (t.replace(tzinfo=None) - _EPOCH) // dt.timedelta(microseconds=1))
               for o, n, t in zip(cols["byte_offset"], cols["line_no"], cols.get("ts", ()))
               if t is not None and o >= start]
        if got:
            parts.append(tuple(np.array(x, np.int64) for x in zip(*got)))
    if parts:   # (a copy only when the Python path stored rows with a time too)
        found = clock.jumps(*(parts[0] if len(parts) == 1 else map(np.concatenate, zip(*parts))),
                            last)
        if found:
            result.warnings.append(clock.describe_jump(path, found[0], len(found)))


def _resolve_capture(sr, start_offset: int) -> np.ndarray:
    """The scanner's rows get their capture columns (fastscan.resolve_capture); those whose prefix
    the Python parser reads another way join the lines it parses. -> (offset in the chunk, line
    number) of every line for the Python parser, in file order."""
    redo = []
    for name in ("decode", "prefill"):
        cols = getattr(sr, name)
        off, nos = cols["byte_offset"], cols["line_no"]
        kept, back = fastscan.resolve_capture(cols)
        setattr(sr, name, kept)
        if len(back):
            redo.append(np.stack([np.asarray(off)[back] - start_offset, np.asarray(nos)[back]], 1))
    if not redo:
        return sr.slow_lines
    lines = np.concatenate([sr.slow_lines, *redo])
    return lines[np.argsort(lines[:, 0], kind="stable")]


def _aligned_cut(fast: dict[str, pa.Array], slow: dict[str, list] | None, start: int, end: int,
                 align: int) -> tuple[int, int, int] | None:
    """(byte offset, line number, index) of the decode window whose index among those in [start, end) is
    the largest multiple of `align`; None when that is all of them or none. A stored row starts
    a record of its own (no record spans it), so the rows before it are complete."""
    offs = np.asarray(fast["byte_offset"])
    nos = np.asarray(fast["line_no"])
    if slow and slow["byte_offset"]:
        s_offs = np.asarray(slow["byte_offset"], np.int64)
        mine = s_offs >= start   # rows of this chunk (not of an earlier call into `batches`)
        offs = np.concatenate([offs, s_offs[mine]])
        nos = np.concatenate([nos, np.asarray(slow["line_no"], np.int64)[mine]])
        order = np.argsort(offs, kind="stable")
        offs, nos = offs[order], nos[order]
    n = int(np.searchsorted(offs, end))
    m = n // align * align
    if m == 0 or m == n:
        return None
    return int(offs[m]), int(nos[m]), m


def _drop_from(batches: Batches, offset: int) -> int:
    """Drop the Python-path rows at byte offsets >= `offset`; returns how many were rejected_lines
    rows (the caller's rejected count goes down by as many)."""
    dropped = 0
    for table, cols in batches.tables.items():
        offs = cols["byte_offset"]
        keep = [i for i, o in enumerate(offs) if o < offset]
        if len(keep) == len(offs):
            continue
        if table == "rejected_lines":
            dropped += len(offs) - len(keep)
        for name, vals in cols.items():
            cols[name] = [vals[i] for i in keep]
    return dropped


def _isolate(rows: list[dict], ok) -> tuple[list[dict], list[tuple[dict, str]]]:
    """Split `rows` into those `ok(rows)` accepts and (row, error) for the rest, by bisection:
    a few bad rows among many cost O(bad * log n) checks."""
    try:
        ok(rows)
        return rows, []
    except Exception as exc:  # noqa: BLE001 - whatever the store refuses, the row is the cause
        if len(rows) == 1:
            return [], [(rows[0], f"{type(exc).__name__}: {str(exc)[:300]}")]
    mid = len(rows) // 2
    a_ok, a_bad = _isolate(rows[:mid], ok)
    b_ok, b_bad = _isolate(rows[mid:], ok)
    return a_ok + b_ok, a_bad + b_bad


def parse_chunk_checked(con, data: bytes, source_id: str, path: str, start_offset: int,
                        start_line: int, result) -> Batches:
    """The fallback when a chunk's batch insert failed: parse every line through the Python
    definition and try each table's rows against Arrow and the store (a scratch copy of the table
    in `con`), sending each row that cannot be stored to rejected_lines with the error."""
    first = Batches()
    parse_chunk(data, source_id, path, start_offset, start_line, first, result, fast=False,
                final=True)  # `data` ends where the failed attempt's rows ended
    out = Batches()
    kinds = {v: k for k, v in schema.KIND_TABLE.items()}
    for table in list(first.tables):
        rows = first.rows(table)
        if table == "rejected_lines":
            for r in rows:
                out.add(table, r)
            continue
        scratch = f"_specwatch_check_{table}"
        con.execute(f"CREATE OR REPLACE TEMP TABLE {scratch} AS SELECT * FROM {table} LIMIT 0")

        def ok(subset, table=table, scratch=scratch):
            tbl = store.arrow_table(table, {c: [r.get(c) for r in subset]
                                            for c in schema.column_names(table)})
            con.register("_specwatch_check", tbl)
            try:
                con.execute(f"INSERT INTO {scratch} BY NAME SELECT * FROM _specwatch_check")
            finally:
                con.unregister("_specwatch_check")
                con.execute(f"DELETE FROM {scratch}")

        good, bad = _isolate(rows, ok)
        con.execute(f"DROP TABLE {scratch}")
        for r in good:
            out.add(table, r)
        for r, err in bad:
            rel = r["byte_offset"] - start_offset
            text = data[rel:data.index(b"\n", rel)].decode("utf-8", errors="replace")
            out.add("rejected_lines", rejected_row(
                source_id, path, r["byte_offset"], r["line_no"],
                kinds.get(table, table), f"the store refused this line: {err}", None, text))
            result.rejected += 1
    return out
