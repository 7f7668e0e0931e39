"""What `specwatch tail` says while it follows a live server: a status line per followed file and
a warning when a rule fires (issue 16). Warnings are also stored in the `alerts` table.

Rules, evaluated on each stored decode window of a speculative run (SGLang `Decode batch`, vLLM
`SpecDecoding metrics`; windows without an accept length, i.e. no speculation, are counted but
never judged), per DP rank where that matters:
  - `low_accept_len`: accept length below `accept_len_min` for `windows` consecutive windows of
    one DP rank: the draft stopped predicting the target.
  - `no_accept`: the stuck signature `accept len: 1.00, accept rate: 0.00` with requests running,
    for `windows` consecutive windows: no draft token is accepted at all (wrong draft model or
    aux layer ids; doctor says which).
  - `accept_len_trend`: the mean accept length of the last `trend_windows` windows fell more than
    `trend_drop_frac` below the mean of the first `trend_windows` (the first window after start,
    warm-up, excluded): a slow decline over uptime.
  - `dp_rank_disagree`: one DP rank's mean accept length over its last `rank_windows` windows is
    more than `rank_gap_frac` away from the median of the other ranks' (a rank with a different
    draft, a stuck rank).
A rule fires once and re-arms when its condition clears, so a long collapse is one warning.

The monitor reads the windows the tail has just stored (it is the writer already), so rules see
exactly what the store holds; on start it reads the recent history without firing, so a restarted
tail does not repeat old warnings. An alert is keyed by (source, line, rule): never stored twice.

Not for: metric formulas (views.py), following files (tail.py).
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from specwatch.db import store

SEED_WINDOWS = 200   # per source, read at start to give rules their history without firing


@dataclass
class Rules:
    """Thresholds; the `specwatch tail` flags of the same names set them."""
    accept_len_min: float = 1.5
    windows: int = 2
    trend_windows: int = 10
    trend_drop_frac: float = 0.2
    rank_windows: int = 5
    rank_gap_frac: float = 0.25


@dataclass
class Window:
    source_id: str
    byte_offset: int
    line_no: int
    ts: dt.datetime | None
    dp_rank: int | None
    running_req: int | None
    accept_len: float | None
    accept_rate_printed: float | None
    gen_throughput_tok_s: float | None


@dataclass
class Alert:
    rule: str
    message: str
    window: Window
    value: float
    threshold: float
    windows: int
    path: str = ""
    run_id: str = ""


@dataclass
class Status:
    """What the status line of one followed file shows."""
    path: str
    windows: int = 0
    accept_len: float | None = None
    accept_rate_printed: float | None = None
    gen_throughput_tok_s: float | None = None    # latest window of each DP rank, summed
    last_ts: dt.datetime | None = None
    alerts: int = 0

    def line(self, now: dt.datetime | None = None) -> str:
        now = now or dt.datetime.now()
        parts = [f"{os.path.basename(self.path)}: {self.windows} windows"]
        if self.accept_len is not None:
            parts.append(f"accept len {self.accept_len:.2f}")
        if self.accept_rate_printed is not None:
            parts.append(f"accept rate {self.accept_rate_printed:.2f}")
        if self.gen_throughput_tok_s is not None:
            parts.append(f"gen {self.gen_throughput_tok_s:.1f} tok/s")
        if self.last_ts is not None:
            parts.append(f"lag {_age(now - self.last_ts)}")
        if self.alerts:
            parts.append(f"{self.alerts} warning{'s' if self.alerts > 1 else ''}")
        return " · ".join(parts)


def _age(d: dt.timedelta) -> str:
    s = max(0.0, d.total_seconds())
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} d"


class _Stream:
    """Rule state for one followed file (all its sources, in the order they were stored)."""

    def __init__(self, path: str, rules: Rules):
        self.path = path
        self.name = os.path.basename(path)
        self.rules = rules
        self.status = Status(path)
        self.low: dict[int | None, int] = {}        # dp rank -> consecutive low windows
        self.good: dict[int | None, deque[float]] = {}   # dp rank -> last accept lengths above
        self.stuck = 0
        self.fired: set[tuple] = set()              # (rule, rank) currently firing
        self.early: list[float] = []                # first trend_windows accept lengths (after 1st)
        self.recent: deque[float] = deque(maxlen=rules.trend_windows)
        self.per_rank: dict[int | None, deque[float]] = {}
        self.latest: dict[int | None, Window] = {}
        self.seen_spec = 0

    def _fire(self, key: tuple, alert: Alert, out: list[Alert]) -> None:
        if key not in self.fired:
            self.fired.add(key)
            alert.path = self.path
            out.append(alert)

    def feed(self, w: Window) -> list[Alert]:
        r, out = self.rules, []
        st = self.status
        st.windows += 1
        self.latest[w.dp_rank] = w
        st.last_ts = w.ts or st.last_ts
        ranks = list(self.latest.values())
        st.accept_len = w.accept_len
        st.accept_rate_printed = w.accept_rate_printed
        gens = [x.gen_throughput_tok_s for x in ranks if x.gen_throughput_tok_s is not None]
        st.gen_throughput_tok_s = sum(gens) if gens else None
        if w.accept_len is None:
            return out
        al = w.accept_len
        rank_txt = f" (DP rank {w.dp_rank})" if w.dp_rank is not None else ""
        # the stuck signature first: it is the more specific diagnosis of a low accept length
        stuck = al <= 1.0 + 1e-9 and (w.accept_rate_printed or 0.0) <= 1e-9 and (w.running_req or 0) > 0
        self.stuck = self.stuck + 1 if stuck else 0
        if self.stuck >= r.windows:
            self._fire(("no_accept",), Alert(
                "no_accept",
                f"{self.name}: accept len 1.00, accept rate 0.00 with {w.running_req} running "
                f"requests for {self.stuck} windows: no draft token is accepted; the draft is not "
                "helping (wrong draft model or aux layer ids?); run `specwatch doctor`",
                w, al, 1.0, self.stuck), out)
        elif not stuck:
            self.fired.discard(("no_accept",))
        low = self.low[w.dp_rank] = self.low.get(w.dp_rank, 0) + 1 if al < r.accept_len_min else 0
        good = self.good.setdefault(w.dp_rank, deque(maxlen=5))
        if low == 0:
            good.append(al)
        if low >= r.windows and self.stuck < r.windows:
            was = f"; it was {statistics.fmean(good):.2f} before" if good else ""
            self._fire(("low_accept_len", w.dp_rank), Alert(
                "low_accept_len",
                f"{self.name}: accept length {al:.2f} < {r.accept_len_min:.2f} for {low} "
                f"consecutive windows{rank_txt}{was}: the draft no longer predicts the target; "
                "check the draft model and aux layer ids (`specwatch doctor`)",
                w, al, r.accept_len_min, low), out)
        elif low == 0:
            self.fired.discard(("low_accept_len", w.dp_rank))
        # trend over uptime (the very first window is warm-up)
        self.seen_spec += 1
        if self.seen_spec > 1:
            if len(self.early) < r.trend_windows:
                self.early.append(al)
            else:
                self.recent.append(al)
        if len(self.early) == r.trend_windows and len(self.recent) == r.trend_windows:
            e, n = statistics.fmean(self.early), statistics.fmean(self.recent)
            floor = e * (1 - r.trend_drop_frac)
            if n < floor:
                self._fire(("accept_len_trend",), Alert(
                    "accept_len_trend",
                    f"{self.name}: accept length trending down: {n:.2f} over the last "
                    f"{r.trend_windows} windows against {e:.2f} over the first "
                    f"{r.trend_windows} ({(n / e - 1) * 100:+.0f}%)",
                    w, n, floor, 2 * r.trend_windows), out)
            elif n >= e * (1 - r.trend_drop_frac / 2):
                self.fired.discard(("accept_len_trend",))
        # DP ranks against each other
        q = self.per_rank.setdefault(w.dp_rank, deque(maxlen=r.rank_windows))
        q.append(al)
        full = {k: statistics.fmean(v) for k, v in self.per_rank.items()
                if k is not None and len(v) == r.rank_windows}
        if w.dp_rank is not None and w.dp_rank in full and len(full) >= 2:
            # the outlier: farthest from the median of all ranks (of two, the lower one)
            med = statistics.median(full.values())
            rank = max(full, key=lambda k: (round(abs(full[k] - med), 6), -full[k]))
            mine = full[rank]
            others = statistics.median(v for k, v in full.items() if k != rank)
            gap = abs(mine - others) / others if others else 0.0
            if gap > r.rank_gap_frac:
                self._fire(("dp_rank_disagree",), Alert(
                    "dp_rank_disagree",
                    f"{self.name}: DP rank {rank} accept length {mine:.2f} against "
                    f"{others:.2f} on the other ranks (last {r.rank_windows} windows each, "
                    f"{gap * 100:.0f}% apart): ranks should run the same draft",
                    self.latest[rank], mine, others, r.rank_windows * len(full)), out)
            elif gap <= r.rank_gap_frac / 2:
                self.fired.discard(("dp_rank_disagree",))
        st.alerts += len(out)
        return out


# SGLang decode windows, and vLLM spec-decoding windows read the same way: mean acceptance length
# is the accept length, the draft acceptance rate the accept rate, tokens drafted stand for
# "requests running" (none drafted = idle); vLLM prints no year, so no log time and no lag.
_WINDOWS = """(
  SELECT source_id, byte_offset, line_no, ts, dp_rank, running_req, accept_len,
    accept_rate_printed, gen_throughput_tok_s FROM decode_windows
  UNION ALL
  SELECT source_id, byte_offset, line_no, NULL::TIMESTAMP, NULL::INTEGER,
    least(drafted_tokens, 2147483647)::INTEGER, mean_acceptance_length,
    draft_acceptance_rate_pct / 100, NULL::DOUBLE FROM vllm_spec_windows)"""
_COLS = ("source_id, byte_offset, line_no, ts, dp_rank, running_req, accept_len, "
         "accept_rate_printed, gen_throughput_tok_s")


class Monitor:
    """Evaluates the rules on what `tail` stored, stores alerts, reports them and the status.

    `targets`: [(followed path, run id)]. `on_alert(alert)` and `on_status([Status])` are called
    after each `update()`."""

    def __init__(self, db: str, targets: list[tuple[str, str]], rules: Rules | None = None,
                 on_alert: Callable[[Alert], None] | None = None,
                 on_status: Callable[[list[Status]], None] | None = None):
        self.db = str(db)
        self.rules = rules or Rules()
        self.targets = [(os.path.abspath(p), run) for p, run in targets]
        self.streams = {p: _Stream(p, self.rules) for p, _ in self.targets}
        self.marks: dict[str, int] = {}   # source id -> last byte_offset judged
        self.on_alert = on_alert
        self.on_status = on_status
        self._seeded = False

    def statuses(self) -> list[Status]:
        return [self.streams[p].status for p, _ in self.targets]

    def _owner(self, path: str) -> str | None:
        d, name = os.path.split(os.path.abspath(path))
        for p, _ in self.targets:
            pd, pn = os.path.split(p)
            if d == pd and (name == pn or name.startswith(pn + ".") or name.startswith(pn + "-")):
                return p
        return None

    def update(self) -> list[Alert]:
        """Judge the windows stored since the last call; store and report what fired."""
        fired: list[Alert] = []
        with store.writer(self.db) as con:
            for path, run_id in self.targets:
                srcs = con.execute(
                    "SELECT s.source_id, s.path FROM sources s JOIN run_sources r USING (source_id) "
                    "WHERE r.run_id = ? ORDER BY s.first_seen, s.source_id", [run_id]).fetchall()
                for source_id, spath in srcs:
                    if self._owner(spath) != path:
                        continue
                    stream = self.streams[path]
                    mark = self.marks.get(source_id)
                    if mark is None and not self._seeded:
                        rows = con.execute(
                            f"SELECT * FROM (SELECT {_COLS} FROM {_WINDOWS} WHERE source_id = ? "
                            "ORDER BY byte_offset DESC LIMIT ?) ORDER BY byte_offset",
                            [source_id, SEED_WINDOWS]).fetchall()
                        n_before = con.execute(f"SELECT count(*) FROM {_WINDOWS} WHERE "
                                               "source_id = ?", [source_id]).fetchone()[0]
                        for row in rows:
                            stream.feed(Window(*row))   # history: state only, nothing fires
                        stream.status.windows = n_before
                        stream.status.alerts = 0
                        self.marks[source_id] = rows[-1][1] if rows else -1
                        continue
                    rows = con.execute(
                        f"SELECT {_COLS} FROM {_WINDOWS} WHERE source_id = ? AND byte_offset > ? "
                        "ORDER BY byte_offset", [source_id, -1 if mark is None else mark]).fetchall()
                    for row in rows:
                        for a in stream.feed(Window(*row)):
                            a.run_id = run_id
                            fired.append(a)
                    if rows:
                        self.marks[source_id] = rows[-1][1]
            if fired:
                _store(con, fired)
        self._seeded = True
        for a in fired:
            if self.on_alert:
                self.on_alert(a)
        if self.on_status:
            self.on_status(self.statuses())
        return fired


def _store(con, fired: list[Alert]) -> None:
    now = dt.datetime.now()
    con.execute("BEGIN")
    try:
        for a in fired:
            w = a.window
            con.execute(
                "INSERT INTO alerts SELECT ?, ?, ?, ?, ?, ?, ?, 'warning', ?, ?, ?, ?, ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM alerts WHERE source_id = ? AND byte_offset = ? "
                "AND rule = ?)",
                [a.run_id, w.source_id, w.byte_offset, w.line_no, a.path, w.dp_rank, a.rule,
                 a.value, a.threshold, a.windows, w.ts, now, a.message,
                 w.source_id, w.byte_offset, a.rule])
        con.execute("COMMIT")
    except BaseException:
        store.rollback(con)
        raise


class Board:
    """The terminal side: status lines redrawn in place (a TTY only) and warning lines above
    them. Off a terminal only the warnings are written, one per line."""

    def __init__(self, out=None, tty: bool | None = None, min_redraw_s: float = 0.5):
        self.out = out or sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.drawn = 0
        self.lines: list[str] = []
        self.statuses: list[Status] = []
        self.min_redraw_s = min_redraw_s
        self._last = 0.0

    def _clear(self) -> None:
        if self.tty and self.drawn:
            self.out.write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0

    def _draw(self) -> None:
        if not self.tty:
            return
        now = dt.datetime.now()
        try:   # one screen row per status line, or redrawing in place miscounts
            width = os.get_terminal_size(self.out.fileno()).columns - 1
        except (OSError, ValueError, AttributeError):
            width = 0
        width = width if width > 0 else 159   # a pseudo-terminal may report no size
        for s in self.statuses:
            self.out.write(s.line(now)[:max(20, width)] + "\n")
        self.drawn = len(self.statuses)
        self._last = time.monotonic()

    def alert(self, a: Alert) -> None:
        self._clear()
        self.out.write(f"specwatch tail: WARNING: {a.message}\n")
        self._draw()
        self.out.flush()

    def note(self, text: str) -> None:
        """Any other line for the terminal (tail's log warnings), printed above the status."""
        self._clear()
        self.out.write(text.rstrip("\n") + "\n")
        self._draw()
        self.out.flush()

    def handler(self) -> logging.Handler:
        """A logging handler that prints through `note`, so log lines do not tear the status."""
        board = self

        class _ToBoard(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                try:
                    board.note(self.format(record))
                except Exception:  # noqa: BLE001 - logging must never raise
                    self.handleError(record)
        return _ToBoard()

    def status(self, statuses: list[Status], force: bool = True) -> None:
        self.statuses = statuses
        if not self.tty or (not force and time.monotonic() - self._last < self.min_redraw_s):
            return
        self._clear()
        self._draw()
        self.out.flush()

    def tick(self) -> None:
        """Keep `lag` current while nothing arrives."""
        if self.statuses:
            self.status(self.statuses, force=False)
