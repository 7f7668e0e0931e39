"""`specwatch tail --metrics URL`: follow a server's Prometheus `/metrics` page into the store,
as `tail` follows a log (issue 32).

Every `every_s` seconds each endpoint's page is scraped (prom.scrape) and its engine metrics
(sampler.rows_of: counters and gauges named `engine:...`, no buckets) are kept for the run the
tail follows (`--run`, default the endpoint's host:port), `t_s` NULL. Rows are written in bursts,
at most one per `write_every_s`, each its own short transaction; a burst that cannot get the lock
(a reader holds it, a full disk) keeps its rows for the next one, so nothing is written twice
(the rows of one scrape share its `sampled_at`). Unlike a log, a page has no history: what was
not written when the process is killed (SIGKILL) is lost; SIGINT/SIGTERM write it first.
A page that cannot be read is reported once per distinct reason and tried again next time.

Lives in run/ (it speaks HTTP); the log half of `tail` is logs/tail.py.
"""
from __future__ import annotations

import datetime as dt
import logging
import signal
import threading
import time
from typing import Callable

from specwatch.db import schema, store
from specwatch.logs import ingest
from specwatch.run import load, prom, sampler

log = logging.getLogger(__name__)

EVERY_S = 1.0
WRITE_EVERY_S = 1.0


def default_run(endpoint: str) -> str:
    host, port = load.target_of(endpoint)
    return f"{host}:{port}"


class MetricsTail:
    def __init__(self, db: str, endpoints: list[str], run: str | None = None,
                 every_s: float = EVERY_S, write_every_s: float = WRITE_EVERY_S):
        self.db = str(db)
        self.targets = {e: load.target_of(e) for e in endpoints}   # LoadError on a bad URL
        self.run_ids = {e: run or default_run(e) for e in endpoints}
        self.every_s, self.write_every_s = every_s, write_every_s
        self.pending: list[dict] = []
        self.stored = 0
        self.scrapes = 0
        self._last_error: dict[str, str] = {}
        self._written_at = 0.0

    def scrape_all(self) -> None:
        now = dt.datetime.now()
        for e, target in self.targets.items():
            try:
                rows = sampler.rows_of(prom.scrape(target, timeout_s=min(5.0, 2 * self.every_s)),
                                       e, now, None)
            except prom.ScrapeError as exc:
                if self._last_error.get(e) != str(exc):
                    log.warning("specwatch tail: %s: %s; trying again", e, exc)
                    self._last_error[e] = str(exc)
                continue
            if e in self._last_error:
                log.warning("specwatch tail: %s answers again", e)
                del self._last_error[e]
            self.scrapes += 1
            self.pending += [{**r, "run_id": self.run_ids[e]} for r in rows]

    def flush(self, force: bool = False) -> None:
        if not self.pending or (not force and time.monotonic() - self._written_at
                                < self.write_every_s):
            return
        batch = self.pending
        cols = schema.column_names("metric_samples")
        try:
            with store.writer(self.db) as con:
                store.insert(con, "metric_samples", {c: [r.get(c) for r in batch] for c in cols})
        except (store.StoreLocked, store.StoreFull) as exc:
            log.warning("specwatch tail: %s; %d samples kept for the next write", exc, len(batch))
            return
        self.pending = self.pending[len(batch):]
        self.stored += len(batch)
        self._written_at = time.monotonic()

    def run(self, stop: threading.Event) -> None:
        """Scrape and write until `stop` is set; then write what is left."""
        for run_id in dict.fromkeys(self.run_ids.values()):
            ingest.ensure_run(self.db, run_id)
        try:
            while True:
                t = time.monotonic()
                self.scrape_all()
                self.flush()
                if stop.wait(max(0.0, self.every_s - (time.monotonic() - t))):
                    break
        finally:
            self.flush(force=True)


def alongside(pages: MetricsTail, follow_log: Callable[[threading.Event], None] | None) -> None:
    """Run `pages` until `follow_log(stop)` (tail's log half, run in this thread: it handles
    SIGINT/SIGTERM and returns once `stop` is set) returns; without a log half, until
    SIGINT/SIGTERM. The pages' last rows are written before this returns."""
    stop = threading.Event()
    if follow_log is None:
        restore = {sig: signal.signal(sig, lambda *_: stop.set())
                   for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            pages.run(stop)
        finally:
            for sig, handler in restore.items():
                signal.signal(sig, handler)
        return
    pager = threading.Thread(target=pages.run, args=(stop,), name="metrics-tail", daemon=True)
    pager.start()
    try:
        follow_log(stop)
    finally:
        stop.set()
        pager.join()
