"""Follow growing log files and ingest their new complete lines as they appear, exactly once.

Each followed path is read from its committed checkpoint to the last complete line whenever its
directory reports a change (watchdog/inotify) and at least every `poll_interval_s` (for file systems
that deliver no events). Rapid appends coalesce: a wake-up always reads everything up to EOF.

Rotation: `ingest.FileIngestor` keeps the open file between polls, so a file renamed away (logrotate
`create`) or deleted is drained through its old descriptor before the new file is read, and a file
truncated in place (copy-truncate) or replaced starts a new source. Rotated siblings in the same
directory (`server.log.1`, `server.log-20250101`) are checked whenever they change, and at start: a
sibling that continues a stored source whose checkpoint is behind (the copy made by copy-truncate,
or a file renamed while `tail` was not running) is drained from that checkpoint. A sibling with a
rotation name (`.N`, `-DATE`) that continues no stored source is read from its start if it was
modified after the run began being followed (it was created and rotated away while `tail` was
down); older ones are archives and are never ingested.

Database lock (ARCHITECTURE decision 2): each write burst opens the database, commits rows and
checkpoint in one transaction, and closes it. Bursts are paced so the file is free at least two
thirds of the time: the next burst waits `max(MIN_WRITE_GAP_S, 2 x the last burst's duration)`,
and appends that arrive meanwhile go into that next burst. A burst that cannot get the lock (a
reader holds it for long) is retried at the next wake-up: the log file is the buffer.

Not for: line formats (see `parse`), file identity and checkpoints (see `ingest`), the database
(see `store`).
"""
from __future__ import annotations

import logging
import os
import re
import signal
import stat
import threading
import time
from pathlib import Path
from typing import Callable

from specwatch.logs import alerts, ingest
from specwatch.db import store

log = logging.getLogger(__name__)

# Measured on a 2-core CI box (`benchmarks/bench_tail_latency.py`): one burst of ~50 decode lines
# holds the lock ~40-60 ms (open ~10, insert ~15, checkpoint-on-close ~25), a read-only reader
# ~30 ms. A 100 ms floor keeps readers' waits short while the lag stays well under 1 s.
MIN_WRITE_GAP_S = 0.1
BURST_DUTY_FACTOR = 2.0
# Alert rules read what was stored in a burst of their own; once a second keeps that cost small
# (bench_tail_latency) while a warning still comes within a second of its window being stored.
MONITOR_EVERY_S = 1.0

# Events caused by anyone reading a file (including us) must not wake us up again.
_IGNORED_EVENTS = {"opened", "closed_no_write", "attrib"}


class TailError(store.StoreError):
    """A path that cannot be followed (a directory, ...). A StoreError so the CLI reports it."""


class TailStopped(store.StoreError):
    """A second SIGINT/SIGTERM arrived while the tail was still waiting to store."""


def _is_sibling(name: str, base: str) -> bool:
    return name.startswith(base + ".") or name.startswith(base + "-")


# Names logrotate gives rotated files: `.1`, `.2`, ... or dateext `-20250101`, `-2025-01-01-1700`,
# compressed or not (`.1.gz`, `.2.zst`, `.3.xz`, `.4.bz2`: `ingest.open_log` reads them). Not
# `.err` or `-worker1`: those may be other logs that share the prefix.
_ROTATED_SUFFIX = re.compile(r"[.-][0-9][0-9._-]*(?:\.gz|\.zst|\.xz|\.bz2)?")


def _following_since(db: str, run_id: str) -> float:
    """When this run started being followed: its earliest source's first commit, or now."""
    with store.writer(db) as con:
        first = con.execute("SELECT min(s.first_seen) FROM sources s JOIN run_sources r "
                            "USING (source_id) WHERE r.run_id = ?", [run_id]).fetchone()[0]
    return first.timestamp() if first is not None else time.time()


class _Follower:
    """One followed path: its ingestor plus the rotated siblings that may hold its unread lines."""

    def __init__(self, db: str, path: str, run_id: str):
        self.db = db
        self.path = os.path.abspath(path)
        self.dir, self.name = os.path.split(self.path)
        self.run_id = run_id
        # a growing file: a record the next line may continue (hard-wrapped, a docker piece)
        # waits for that line or for a poll that finds the file quiet, never stored cut off
        self.main = ingest.FileIngestor(db, self.path, run_id, hold_at_eof=True)
        self._checked: dict[str, tuple] = {}   # sibling path -> (dev, ino, size, mtime) last drained
        self._missing = False
        self._db_abs = os.path.abspath(db)
        # Rotated files modified after this (epoch s) that continue no stored source were written
        # while this run was followed, but rotated away while tail was down: read them whole.
        # Older ones are archives from before and are left alone.
        self.adopt_after: float | None = None

    def wants(self, name: str) -> bool:
        return name == self.name or _is_sibling(name, self.name)

    def close(self) -> None:
        self.main.close()

    def poll(self) -> ingest.IngestResult:
        result = ingest.IngestResult(self.path)
        try:
            result.merge(self.main.poll())
            if self._missing:
                log.warning("specwatch tail: %s: appeared, following it", self.path)
            self._missing = False
        except ingest.IngestError as exc:
            # Not created yet, or between delete and recreate: wait for it (the old file, if
            # any, was drained before the error).
            if not self._missing:
                log.warning("specwatch tail: %s; waiting for it", exc)
            self._missing = True
        result.merge(self._drain_siblings())
        return result

    def _drain_siblings(self) -> ingest.IngestResult:
        result = ingest.IngestResult(self.path)
        try:
            names = os.listdir(self.dir)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return result
        seen = set()
        for name in names:
            if not _is_sibling(name, self.name):
                continue
            path = os.path.join(self.dir, name)
            if path.startswith(self._db_abs):
                continue  # the database (or its WAL) next to the log, e.g. server.log.duckdb
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            seen.add(path)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if self._checked.get(path) == key:
                continue
            rotated = _ROTATED_SUFFIX.fullmatch(name[len(self.name):]) is not None
            ing = ingest.FileIngestor(self.db, path, self.run_id, known_only=True,
                                      adopt_modified_after=self.adopt_after if rotated else None)
            try:
                result.merge(ing.poll())
            except ingest.IngestError:
                continue  # rotated away again meanwhile; the next listing sees where it went
            finally:
                ing.close()
            self._checked[path] = key
        for path in set(self._checked) - seen:
            del self._checked[path]
        return result


class _Watch:
    """Wakes `wake` when something changes in the followed files' directories (inotify where
    available). Directories that do not exist yet are retried at each `ensure()`."""

    def __init__(self, followers: list[_Follower], wake: threading.Event):
        self.followers = followers
        self.wake = wake
        self.observer = None
        self.watched: set[str] = set()
        try:
            from watchdog.observers import Observer
            self.observer = Observer()
            self.observer.daemon = True
            self.observer.start()
        except Exception as exc:  # no inotify (limits, platform): polling alone still works
            log.warning("specwatch tail: file events unavailable (%s); polling only", exc)
            self.observer = None

    def ensure(self) -> None:
        if self.observer is None:
            return
        from watchdog.events import FileSystemEventHandler

        watch = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event):
                if event.event_type in _IGNORED_EVENTS:
                    return
                for p in (event.src_path, getattr(event, "dest_path", "")):
                    if p and watch.relevant(os.fsdecode(p)):
                        watch.wake.set()
                        return

        for d in {f.dir for f in self.followers} - self.watched:
            if not os.path.isdir(d):
                continue
            try:
                self.observer.schedule(Handler(), d, recursive=False)
                self.watched.add(d)
            except OSError as exc:
                log.warning("specwatch tail: cannot watch %s (%s); polling it", d, exc)
                self.watched.add(d)  # do not retry every poll

    def relevant(self, path: str) -> bool:
        d, name = os.path.split(path)
        return any(f.dir == d and f.wants(name) for f in self.followers)

    def stop(self) -> None:
        if self.observer is None:
            return
        # watchdog 7 logs a spurious error when its emitter thread sees the stop mid-read.
        wd_log = logging.getLogger("watchdog.observers.inotify")
        quiet = _DropMessage("called when the thread is inactive")
        wd_log.addFilter(quiet)
        try:
            self.observer.stop()
            self.observer.join(timeout=5)
        finally:
            wd_log.removeFilter(quiet)


class _DropMessage(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def follow(db: str | Path, paths: list[str], run: str | None = None, poll_interval_s: float = 0.25,
           stop: threading.Event | None = None,
           on_ingest: Callable[[ingest.IngestResult], None] | None = None,
           rules: alerts.Rules | None = None, board: alerts.Board | None = None) -> None:
    """Follow `paths` and ingest new complete lines into `db` until SIGINT/SIGTERM (when called from
    the main thread) or until `stop` is set; then drain once more and return.

    Each file's lines belong to run `run` (default: the file's name), created if missing; every
    source read under a followed path, including its rotated siblings, is attached to that run.
    `on_ingest(result)` is called after each poll of a file that stored lines. With `rules` (or a
    `board`), the stored decode windows are judged by `alerts` rules: warnings go to the `alerts`
    table and, with a `board`, to the terminal with a status line per file.

    A database that is locked past the writers' wait, or on a full disk, is retried at the next
    wake-up (the log keeps the lines); a corrupt one ends the tail with its message.
    """
    db = str(db)
    if not paths:
        raise TailError("nothing to follow: give at least one log file")
    for p in paths:
        if os.path.isdir(p):
            raise TailError(f"{p}: is a directory; tail follows files (give the log file's path)")
        try:
            mode = os.stat(p).st_mode
        except OSError:
            continue   # not there yet: waited for
        if not stat.S_ISREG(mode):
            raise TailError(f"{p}: not a regular file (a FIFO, socket or device); tail follows "
                            "log files, and reading a pipe would wait forever")
    stop = stop or threading.Event()
    wake = threading.Event()
    followers = [_Follower(db, p, run or Path(p).name) for p in paths]
    since = {}
    for run_id in dict.fromkeys(f.run_id for f in followers):
        ingest.ensure_run(db, run_id)
        since[run_id] = _following_since(db, run_id)
    for f in followers:
        f.adopt_after = since[f.run_id]
    monitor = None
    if rules is not None or board is not None:
        monitor = alerts.Monitor(db, [(f.path, f.run_id) for f in followers], rules,
                                 on_alert=board.alert if board else None,
                                 on_status=board.status if board else None)
        monitor.update()   # history: rules get their state, nothing old fires again

    restore = {}
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum, frame):
            if stop.is_set():
                # A second signal: stop now, even while waiting for a held database (the log
                # keeps what is not stored; the next tail continues from the checkpoint).
                raise TailStopped(f"stopped by signal {signum} while the database was busy; "
                                  "lines not yet stored are read by the next tail or ingest")
            stop.set()
            wake.set()
        for sig in (signal.SIGINT, signal.SIGTERM):
            restore[sig] = signal.signal(sig, on_signal)

    watch = _Watch(followers, wake)
    locked_since = last_error = None
    judge, judge_at = False, 0.0
    try:
        next_write_at = 0.0
        while True:
            watch.ensure()
            if stop.is_set():
                break
            wait_s = next_write_at - time.monotonic()
            if wait_s > 0 and stop.wait(wait_s):  # pace bursts; appends meanwhile join the next
                break
            wake.clear()
            started = time.monotonic()
            try:
                wrote = _poll_all(followers, on_ingest)
                judge = judge or wrote
                if judge and monitor is not None and time.monotonic() >= judge_at:
                    monitor.update()   # its own short burst, so at most every MONITOR_EVERY_S
                    judge, judge_at = False, time.monotonic() + MONITOR_EVERY_S
            except (store.StoreLocked, store.StoreFull) as exc:
                # Held past the writer's wait, or no space: the log keeps the lines for later.
                if locked_since is None or str(exc) != last_error:
                    locked_since = locked_since or time.monotonic()
                    log.warning("specwatch tail: %s; will retry", exc)
                last_error = str(exc)
                wrote = False
            else:
                if locked_since is not None:
                    log.warning("specwatch tail: database writable again after %.1f s",
                                time.monotonic() - locked_since)
                    locked_since = last_error = None
            if wrote:
                ended = time.monotonic()
                next_write_at = ended + max(MIN_WRITE_GAP_S, BURST_DUTY_FACTOR * (ended - started))
            wake.wait(poll_interval_s)
            if board is not None:
                board.tick()
        # Final drain: whatever was complete when we were asked to stop gets stored, a record
        # held at the end of a file included (nothing will continue it now).
        for f in followers:
            f.main.hold_at_eof = False
        try:
            if (_poll_all(followers, on_ingest) or judge) and monitor is not None:
                monitor.update()
        except (store.StoreLocked, store.StoreFull) as exc:
            log.warning("specwatch tail: %s; stopping with the rest unstored (the next tail or "
                        "ingest continues from the last checkpoint)", exc)
    finally:
        watch.stop()
        for f in followers:
            f.close()
        for sig, handler in restore.items():
            signal.signal(sig, handler)


def _poll_all(followers: list[_Follower], on_ingest) -> bool:
    wrote = False
    for f in followers:
        result = f.poll()
        for w in result.warnings:
            log.warning("specwatch tail: %s", w)
        if result.lines or result.rows:
            wrote = True
            if on_ingest is not None:
                on_ingest(result)
    return wrote
