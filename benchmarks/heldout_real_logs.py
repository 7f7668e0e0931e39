"""Held-out real logs: how many metric lines of real SGLang / vLLM log excerpts (pasted into public
GitHub issues, PRs and blog posts, 2024-2026; tests/data/heldout_real/SOURCES.md) specwatch stores
field-exact, and how many rows it stores that are not metric lines (false positives).

The oracle is tests/data/heldout_real/expected.json, written by hand from reading each line (never
by running specwatch): for every metric line its physical line number, table and key field values
(a list of them, in printed order, where records are glued on one physical line); every other line
must store nothing. The files are ingested with the real `specwatch ingest` command
into a real temporary DuckDB file, once with the C scanner (when built) and once with the Python
parser alone (SPECWATCH_NO_FASTSCAN=1); both must give the same verdicts.

    python benchmarks/heldout_real_logs.py [--dir tests/data/heldout_real] [--python-only]

Not for: timing (see bench_ingest.py) or the constructed capture-class cases (tests/test_capture.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "heldout_real"
TABLES = ("decode_windows", "prefill_windows", "vllm_spec_windows", "vllm_throughput_windows")


@dataclass
class FileResult:
    name: str
    expected: int = 0
    exact: int = 0
    missed: list[int] = field(default_factory=list)
    wrong: list[tuple[int, str, object, object]] = field(default_factory=list)  # line, key, got, want
    false_pos: list[tuple[int, str]] = field(default_factory=list)              # line, table

    @property
    def ok(self) -> bool:
        return self.exact == self.expected and not self.false_pos


def _same(got, want) -> bool:
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return got == want
    if isinstance(want, (int, float)):
        return isinstance(got, (int, float)) and not isinstance(got, bool) and \
            math.isclose(float(got), float(want), rel_tol=0, abs_tol=1e-9)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and \
            all(_same(g, w) for g, w in zip(got, want))
    return got == want


def ingest(paths: list[Path], db: Path, python_only: bool = False) -> None:
    """Real `specwatch ingest` of the files into the DuckDB file `db` (a fresh process)."""
    env = dict(os.environ)
    if python_only:
        env["SPECWATCH_NO_FASTSCAN"] = "1"
    cmd = [sys.executable, "-c", "from specwatch.cli import main; main()", "ingest",
           *map(str, paths), "--db", str(db)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"specwatch ingest failed ({proc.returncode}):\n{proc.stderr[-2000:]}")


def stored_rows(db: Path) -> dict[str, dict[int, list[tuple[str, dict]]]]:
    """{file name: {line_no: [(table, row as dict), ...]}} of every metric row in `db`."""
    out: dict[str, dict[int, list[tuple[str, dict]]]] = {}
    con = duckdb.connect(str(db), read_only=True)
    try:
        for table in TABLES:
            cur = con.execute(f"SELECT s.path, t.* FROM {table} t "
                              "JOIN sources s USING (source_id)")
            cols = [d[0] for d in cur.description]
            for row in cur.fetchall():
                d = dict(zip(cols, row))
                out.setdefault(Path(d["path"]).name, {}).setdefault(d["line_no"], []) \
                    .append((table, d))
    finally:
        con.close()
    return out


def _wants(want) -> list[dict]:
    """A line's expectations: one record, or a list of them (records glued on one line, in the
    order they were printed)."""
    return want if isinstance(want, list) else [want]


def evaluate(expected: dict, stored: dict) -> list[FileResult]:
    results = []
    for name, lines in expected.items():
        if name.startswith("_"):
            continue
        res = FileResult(name, expected=sum(len(_wants(w)) for w in lines.values()))
        got = stored.get(name, {})
        for line_no, rows in sorted(got.items()):
            wants = _wants(lines.get(str(line_no), []))
            for table in {t for t, _ in rows}:
                extra = sum(t == table for t, _ in rows) - sum(w["table"] == table for w in wants)
                res.false_pos += [(line_no, table)] * max(extra, 0)
        for key, want in lines.items():
            line_no = int(key)
            for k, w in enumerate(_wants(want)):
                # the k-th record of its table on the line, in byte order
                rows = sorted((r for t, r in got.get(line_no, []) if t == w["table"]),
                              key=lambda r: r["byte_offset"])
                nth = sum(x["table"] == w["table"] for x in _wants(want)[:k])
                if nth >= len(rows):
                    res.missed.append(line_no)
                    continue
                row = rows[nth]
                bad = [(line_no, c, row.get(c, "<no column>"), v) for c, v in w.items()
                       if c != "table" and not _same(row.get(c, "<no column>"), v)]
                if bad:
                    res.wrong.extend(bad)
                else:
                    res.exact += 1
        results.append(res)
    return results


def run(data: Path = DATA, python_only: bool = False) -> list[FileResult]:
    expected = json.loads((data / "expected.json").read_text())
    paths = [data / n for n in expected if not n.startswith("_")]
    with tempfile.TemporaryDirectory(prefix="heldout-") as tmp:
        db = Path(tmp) / "heldout.duckdb"
        ingest(paths, db, python_only=python_only)
        return evaluate(expected, stored_rows(db))


def table(results: list[FileResult]) -> str:
    w = max(len(r.name) for r in results)
    lines = [f"{'file':<{w}}  expected  exact  missed  wrong  false+"]
    for r in results:
        lines.append(f"{r.name:<{w}}  {r.expected:>8}  {r.exact:>5}  {len(r.missed):>6}  "
                     f"{len({x[0] for x in r.wrong}):>5}  {len(r.false_pos):>6}")
    exp = sum(r.expected for r in results)
    exact = sum(r.exact for r in results)
    fp = sum(len(r.false_pos) for r in results)
    pct = 100.0 * exact / exp if exp else 100.0
    lines.append(f"{'TOTAL':<{w}}  {exp:>8}  {exact:>5}  {exp - exact:>6}  {'':>5}  {fp:>6}"
                 f"   field-exact {pct:.1f}%, {len(results)} files")
    for r in results:
        for line_no in r.missed:
            lines.append(f"  missed   {r.name}:{line_no}")
        for line_no, k, got, want in r.wrong:
            lines.append(f"  wrong    {r.name}:{line_no} {k}={got!r}, expected {want!r}")
        for line_no, t in r.false_pos:
            lines.append(f"  false+   {r.name}:{line_no} stored in {t}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=DATA)
    ap.add_argument("--python-only", action="store_true",
                    help="only the Python parser (SPECWATCH_NO_FASTSCAN=1)")
    args = ap.parse_args(argv)
    modes = [True] if args.python_only else [False, True]
    ok = True
    for python_only in modes:
        results = run(args.dir, python_only)
        print(f"== {'Python parser only' if python_only else 'default ingest (C scanner if built)'}")
        print(table(results))
        ok &= all(r.ok for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
