"""A log's clock: printed timestamps that cannot be dates, and jumps no running clock makes.

`not_a_date(text)` says why a timestamp as printed (SGLang's `2026-02-26 14:09:45.123`, logging's
`,123`, docker's RFC3339, vLLM's year-less `02-26 14:09:45`, journald's `Nov 02 09:14:07`, a bare
`14:09:45`) is no real date
and time (`2025-13-45 25:61:61`), or None. `rows` rejects such a line with that reason: its `ts`
would be NULL with no word, and its neighbours' times no longer place it.

`jumps(...)` finds consecutive records of one file whose clock moves back more than `BACK_S` or
forward more than `FORWARD_S`: valid dates, but a clock reset to 1970 or set 55 years ahead, or
two logs mixed into one file. `rows` warns about them (file:line, both times); the rows are
stored as printed, since no other time for them is known.

Not here: finding the timestamp in a line (see `prefix`), storing it (see `rows`).
"""
from __future__ import annotations

import datetime as dt

import numpy as np

_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
BACK_S = 2 * 3600            # SGLang prints local time: a DST change moves it back 1 h
FORWARD_S = 366 * 86400      # a server may sit idle for months between decode lines; not a year


def not_a_date(text: str | None) -> str | None:
    """Why `text` (a timestamp as the prefix parser found it) is no real date and time, or None."""
    if text is None:
        return None
    try:
        if len(text) >= 10 and text[4] == "-":          # with its year
            dt.datetime.fromisoformat(text)
        elif len(text) >= 14 and text[2] == "-":        # vLLM: MM-DD HH:MM:SS, no year
            dt.date(2000, int(text[:2]), int(text[3:5]))    # 2000: Feb 29 exists
            dt.time.fromisoformat(text[6:])
        elif len(text) >= 15 and text[:3].isalpha():    # journald/syslog: Mon DD HH:MM:SS, no year
            dt.date(2000, _MONTHS.index(text[:3]) + 1, int(text[4:6]))
            dt.time.fromisoformat(text[7:])
        else:                                           # time of day only
            dt.time.fromisoformat(text)
    except ValueError as exc:
        return f"timestamp {text!r} is not a date and time: {exc}"
    return None


def jumps(offsets: np.ndarray, line_nos: np.ndarray, ts_us: np.ndarray,
          last: list) -> list[tuple[int, int, int, int]]:
    """(line, ts_us, line before, its ts_us) for each record whose timestamp jumps from the one
    before it; records in any order (sorted by byte offset here), NULL times left out before.
    `last`: [ts_us, line] of the file's record before these ([] if none), updated in place."""
    if not len(ts_us):
        return []
    if len(offsets) > 1 and (offsets[1:] < offsets[:-1]).any():   # fast and Python rows mixed
        order = np.argsort(offsets, kind="stable")
        ts_us, line_nos = ts_us[order], line_nos[order]
    ts, nos = ts_us, line_nos
    if last:
        ts, nos = np.concatenate([[last[0]], ts]), np.concatenate([[last[1]], nos])
    step = np.diff(ts)
    bad = np.flatnonzero((step < -BACK_S * 1_000_000) | (step > FORWARD_S * 1_000_000))
    last[:] = [int(ts[-1]), int(nos[-1])]
    return [(int(nos[i + 1]), int(ts[i + 1]), int(nos[i]), int(ts[i])) for i in bad]


def describe_jump(path: str, jump: tuple[int, int, int, int], n: int) -> str:
    """The warning for the first of `n` jumps of one chunk."""
    line, ts, before, ts_before = jump
    step = (ts - ts_before) / 1e6
    size = f"{abs(step) / 86400 / 365.25:.1f} years" if abs(step) >= 86400 * 365.25 else \
        f"{abs(step) / 86400:.1f} days" if abs(step) >= 86400 else f"{abs(step) / 3600:.1f} h"
    more = f" ({n} jumps like this)" if n > 1 else ""
    return (f"{path}:{line}: timestamp {_show(ts)} is {size} {'after' if step > 0 else 'before'} "
            f"the one on line {before} ({_show(ts_before)}){more}; the clock was reset or logs "
            "were mixed into one file: durations and idle gaps across it are wrong")


def _show(ts_us: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=ts_us)).isoformat(sep=" ")
