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

import duckdb

from specwatch import schema, views

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


def fold_appended(con: duckdb.DuckDBPyConnection, source_id: str, from_offset: int) -> None:
    """Add the windows stored at byte offsets >= `from_offset` of `source_id` to the partitions
    of every run that holds them. Each partition's last stored window is read along, so the first
    new window's `after_idle` compares with its real predecessor."""
    # The predecessors as literals, not a subquery: DuckDB prunes row groups by byte_offset for a
    # constant IN list but scans every stored window of the source for `IN (SELECT ...)`, which
    # made each fold cost the source's whole history (measured: 15/15 row groups vs 1-3).
    lasts = [r[0] for r in con.execute(
        f"SELECT DISTINCT last_byte_offset FROM {TABLE} WHERE source_id = ? AND "
        "last_byte_offset < ?", [source_id, from_offset]).fetchall()]
    pred = f" OR d.byte_offset IN ({', '.join(str(int(x)) for x in lasts)})" if lasts else ""
    where = f"d.source_id = $src AND (d.byte_offset >= $from{pred})"
    delta = _aggregate(where, only_from=True)
    con.execute("CREATE OR REPLACE TEMP TABLE _specwatch_sums_delta AS " + delta,
                {"src": source_id, "from": from_offset})
    try:
        if not con.execute("SELECT count(*) FROM _specwatch_sums_delta").fetchone()[0]:
            return
        on = " AND ".join(f"o.{k} IS NOT DISTINCT FROM n.{k}" for k in KEY)
        # NULL + x = x (sum() of no rows is NULL); bool_or likewise ignores NULLs
        merged = [f"n.{k}" for k in KEY] + [
            "coalesce(o.windows_all, 0) + n.windows_all", "n.last_byte_offset", "n.last_ts",
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
