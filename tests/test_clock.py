"""Log timestamps (issue 26): one that cannot be a date is a rejected line with the reason (its
row had ts NULL and no word); a clock jump of years is warned with file:line and both times.
Through the real `specwatch ingest` on real files into a real DuckDB file, with the C scanner and
without it, and a file followed as it grows."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys

import duckdb
import pytest

from specwatch.logs import ingest
from tests.conftest import ROOT

DECODE = ("[{ts} TP0] Decode batch, #running-req: 4, #token: 4096, token usage: 0.02, accept len: "
          "2.50, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 100.00, "
          "#queue-req: 0\n")
PREFILL = ("[{ts} TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: "
           "0.01, #running-req: 0, #queue-req: 0\n")
VLLM = ("INFO {ts} [metrics.py:125] SpecDecoding metrics: Mean acceptance length: 3.73, Accepted: "
        "295 tokens, Drafted: 540 tokens, Per-position acceptance rate: 0.836, 0.702, "
        "Avg Draft acceptance rate: 54.6%\n")
DOCKER = "{ts} " + DECODE.replace("{ts}", "2026-06-07 11:00:00")

# (line template, printed timestamp, the reason's words): each cannot be a date and time
BAD = [
    (DECODE, "2025-13-45 25:61:61", "month must be in 1..12"),
    (DECODE, "2026-06-45 10:00:00", "day is out of range for month"),
    (DECODE, "2025-02-29 10:00:00", "day is out of range for month"),   # 2025 is no leap year
    (DECODE, "2026-06-07 24:00:00", "hour must be in 0..23"),
    (DECODE, "2026-06-07 10:61:00", "minute must be in 0..59"),
    (DECODE, "2026-06-07 10:00:61.5", "second must be in 0..59"),
    (DECODE, "0000-01-01 00:00:00", "year 0 is out of range"),
    (PREFILL, "2026-00-07 10:00:00", "month must be in 1..12"),
    (VLLM, "02-30 10:00:00", "day is out of range for month"),
    (VLLM, "13-01 10:00:00", "month must be in 1..12"),
    (DOCKER, "2026-06-31T11:00:00.123456789Z", "day is out of range for month"),
]


def _good(i: int) -> str:
    return f"2026-06-07 10:59:{i:02d}"


def _ingest(db, path, fast: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECWATCH_NO_FASTSCAN="0" if fast else "1")
    return subprocess.run([sys.executable, "-m", "specwatch.cli", "ingest", str(path), "--db",
                           str(db)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("fast", [True, False], ids=["C scanner", "Python only"])
def test_timestamps_that_are_no_dates_are_rejected_with_the_reason(tmp_path, fast):
    lines, bad_at = [], {}
    for i, (template, ts, _) in enumerate(BAD):
        lines.append(DECODE.format(ts=_good(2 * i)))
        lines.append(template.format(ts=ts))
        bad_at[len(lines)] = i
    lines.append(DECODE.format(ts=_good(59)))
    path = tmp_path / "server.log"
    path.write_text("".join(lines))
    db = tmp_path / "s.duckdb"
    p = _ingest(db, path, fast)
    assert p.returncode == 0, p.stderr
    assert f"{len(BAD)} rejected (see rejected_lines)" in p.stdout, p.stdout
    con = duckdb.connect(str(db), read_only=True)
    got = {no: (field, reason) for no, field, reason in con.execute(
        "SELECT line_no, field, reason FROM rejected_lines").fetchall()}
    assert set(got) == set(bad_at), got
    for no, i in bad_at.items():
        template, ts, words = BAD[i]
        field, reason = got[no]
        assert field == ("outer_ts_text" if template is DOCKER else "ts_text"), (ts, field)
        assert f"timestamp '{ts}' is not a date and time" in reason and words in reason, reason
    # the good lines around them are stored with the time they print, none with NULL ts
    stored = con.execute("SELECT ts FROM decode_windows ORDER BY byte_offset").fetchall()
    want = [dt.datetime(2026, 6, 7, 10, 59, 2 * i) for i in range(len(BAD))]
    assert [r[0] for r in stored] == want + [dt.datetime(2026, 6, 7, 10, 59, 59)]
    assert con.execute("SELECT count(*) FROM prefill_windows").fetchone()[0] == 0


JUMPS = [  # (timestamp, jumps from the line before)
    ("2025-06-07 10:00:00", False),
    ("2025-06-07 10:00:01", False),
    ("2080-06-07 10:00:02", True),     # 55 years ahead
    ("2080-06-07 10:00:03", False),
    ("2025-06-07 10:00:04", True),     # and back
    ("2025-06-07 09:00:05", False),    # a DST change: local time goes back 1 h
    ("2025-12-24 09:00:06", False),    # a server idle for 200 days
    ("1970-01-01 00:00:07", True),     # a clock reset to the epoch
]


@pytest.mark.parametrize("fast", [True, False], ids=["C scanner", "Python only"])
def test_a_clock_jump_is_warned_with_file_line_and_both_times(tmp_path, fast):
    path = tmp_path / "server.log"
    path.write_text("".join(DECODE.format(ts=ts) for ts, _ in JUMPS))
    db = tmp_path / "s.duckdb"
    p = _ingest(db, path, fast)
    assert p.returncode == 0, p.stderr
    first = next(i for i, (_, j) in enumerate(JUMPS) if j) + 1
    warned = [w for w in p.stderr.splitlines() if "jumps like this" in w]
    assert warned == [f"specwatch ingest: {path}:{first}: timestamp 2080-06-07 10:00:02 is 55.0 "
                      f"years after the one on line {first - 1} (2025-06-07 10:00:01) (3 jumps "
                      "like this); the clock was reset or logs were mixed into one file: "
                      "durations and idle gaps across it are wrong"], p.stderr
    # flagged, not lost: every line is stored with the time it prints
    con = duckdb.connect(str(db), read_only=True)
    got = [r[0] for r in con.execute("SELECT ts FROM decode_windows ORDER BY byte_offset").fetchall()]
    assert got == [dt.datetime.fromisoformat(ts) for ts, _ in JUMPS]


def test_a_jump_between_two_reads_of_a_growing_file_is_warned(tmp_path):
    """The last time read carries over to the next read (tail follows a file in many reads)."""
    path = tmp_path / "server.log"
    db = tmp_path / "s.duckdb"
    path.write_text(DECODE.format(ts="2026-06-07 10:00:00") + DECODE.format(ts="2026-06-07 10:00:01"))
    ing = ingest.FileIngestor(db, path, "r1")
    try:
        first = ing.poll()
        assert first.rows == 2 and not first.warnings
        with open(path, "a") as f:
            f.write(DECODE.format(ts="1970-01-01 00:00:02") + DECODE.format(ts="1970-01-01 00:00:03"))
        second = ing.poll()
    finally:
        ing.close()
    assert second.rows == 2
    assert [w.split(": timestamp ")[0] for w in second.warnings] == [f"{path}:3"], second.warnings
    assert "56.4 years before the one on line 2 (2026-06-07 10:00:01)" in second.warnings[0]
