"""The one writer of sweep results: what `measure.measure_config` returns goes into DuckDB here.

Only the driver process (the one running `specwatch run-sweep`) calls this module; measuring code,
local or on Ray nodes, never opens the database. For one config result, `store_result`:

  1. writes the log bytes a remote executor returned to `out_dir/<sweep>/<config>/<node>-<name>`
     (so `sources.path` names the node) and ingests the server log to its end with the
     checkpointed, exactly-once ingest (also when the server died before it was ready: the
     failed launch's `server_configs` and `events` are kept);
  2. in one transaction per config: upserts the `runs` rows, replaces their `run_sources` byte
     ranges, `requests` and `metric_samples` (so storing the same result twice stores nothing
     twice);
  3. writes one Parquet file per run, `out_dir/<sweep>/<config>/<run>.parquet`: the run's `runs`
     columns plus its requests as a list column, so a cluster's results are readable with
     `read_parquet('runs/**/*.parquet', union_by_name=true)` from any DuckDB client.

Storing is idempotent, so the local executors store a config's partial result after every run
(a driver that crashes loses at most the run in progress) and again at the end. A lock held by
another process (a long reader, `tail`) is waited out and retried (`RETRY_S`), never a lost run.
`LiveIngest` tails a local server's log into the database while the load runs (driver thread).
"""
from __future__ import annotations

import datetime as dt
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from specwatch.logs import ingest
from specwatch.db import schema, store
from specwatch.run.measure import ConfigResult, RunResult

RETRY_S = 600.0          # give up storing a measured result only after this long locked out
INGEST_POLL_S = 0.5


def _retrying(fn, what: str):
    deadline = time.monotonic() + RETRY_S
    delay = 0.2
    while True:
        try:
            return fn()
        except store.StoreError as exc:
            # held by another process past store.LOCK_WAIT_S, or a full disk: wait and retry
            transient = isinstance(exc, (store.StoreLocked, store.StoreFull))
            if not transient or time.monotonic() > deadline:
                raise store.StoreError(f"{exc} (while storing {what})") from None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def mark_running(db: str, rows: list[dict]) -> None:
    """Before a config is measured: its runs as `running`, dropping what an earlier attempt
    stored for them (a crash leaves `running`, which resume measures again)."""
    now = dt.datetime.now()
    full = [{**r, "status": "running", "failure_reason": None, "server_log_tail": None,
             "created_at": now, "started_at": None, "ended_at": None} for r in rows]
    _retrying(lambda: _write(db, full, {}, {}, reset=True), f"{len(rows)} runs")


def store_targets(db: str, sweep_name: str, traffic) -> None:
    """The sweep's [slo] and adaptive-repeat targets (`sweep_targets`, one row per sweep), as the
    sweep file says now: the SLO views judge every stored run of the sweep by them."""
    slo = traffic.slo
    row = {"sweep_name": sweep_name, "updated_at": dt.datetime.now(),
           "target_ci_width": traffic.target_ci_width, "max_repeats": traffic.max_repeats,
           **({f"slo_{k}": getattr(slo, k) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}
              | {"slo_percentile": slo.percentile} if slo is not None else {})}

    def go():
        with store.writer(db) as con:
            con.execute("BEGIN")
            try:
                con.execute("DELETE FROM sweep_targets WHERE sweep_name = ?", [sweep_name])
                store.insert(con, "sweep_targets", {k: [v] for k, v in row.items()})
                con.execute("COMMIT")
            except BaseException:
                store.rollback(con)
                raise
    _retrying(go, f"the targets of sweep {sweep_name}")


def store_rows(db: str, rows: list[dict]) -> None:
    """Runs that were never measured (e.g. a config that cannot be placed)."""
    _retrying(lambda: _write(db, rows, {}, {}, reset=True), f"{len(rows)} runs")


def local_log(result: ConfigResult, out_dir: str | Path) -> Path | None:
    """The log file to ingest: the server's own (local), or a copy of returned bytes (remote)."""
    if result.log_bytes is None:
        return Path(result.log_path) if result.log_path else None
    node = (result.hostname or "node") + (f"-{result.ray_node_id[:8]}" if result.ray_node_id
                                          else "") + (f"-{result.slurm_job_id}" if
                                                      result.slurm_job_id else "") + (
        f"_{result.slurm_array_task_id}" if result.slurm_array_task_id is not None else "")
    path = Path(out_dir) / result.sweep / result.config / f"{node}-{Path(result.log_path).name}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.stat().st_size != len(result.log_bytes):
        tmp = path.with_suffix(".part")
        tmp.write_bytes(result.log_bytes)
        os.replace(tmp, path)
    return path


def ingest_log(db: str, path: Path | None) -> str | None:
    """Ingest the log to its end; returns its source id (None: no log, or nothing complete)."""
    if path is None or not path.exists():
        return None

    def go():
        ing = ingest.FileIngestor(db, path)
        try:
            return ing.poll().source_id
        finally:
            ing.close()
    try:
        return _retrying(go, str(path))
    except ingest.IngestError:
        return None


def store_result(db: str, result: ConfigResult, out_dir: str | Path,
                 parquet: bool = True, skip: set[str] | frozenset = frozenset()) -> set[str]:
    """Store one config's result (see the module docstring); safe to call again. `skip`: run
    ids already stored from this same result (a run is final once measured), so storing after
    every run costs one run each time. Returns the run ids stored."""
    source_id = ingest_log(db, local_log(result, out_dir))
    node = {"node_hostname": result.hostname, "sglang_version": result.sglang_version,
            "ray_node_id": result.ray_node_id,
            "ray_retries": result.ray_retries, "slurm_job_id": result.slurm_job_id,
            "slurm_array_task_id": result.slurm_array_task_id}
    rows, reqs, ranges, samples = [], {}, {}, {}
    runs = [r for r in result.runs if r.run_id not in skip]
    for r in runs:
        rows.append({**r.row, **{k: v for k, v in node.items() if v is not None}})
        reqs[r.run_id] = r.requests
        samples[r.run_id] = r.metric_samples
        if source_id is not None and r.offset_from is not None:
            ranges[r.run_id] = (source_id, r.offset_from, r.offset_to)
    if rows:
        _retrying(lambda: _write(db, rows, reqs, ranges, reset=True, samples=samples),
                  f"config {result.config}")
    if parquet:
        for r, row in zip(runs, rows):
            write_parquet(Path(out_dir) / result.sweep / result.config, r, row)
    return {r.run_id for r in runs}


def _write(db: str, rows: list[dict], requests: dict[str, list[dict]],
           sources: dict[str, tuple[str, int, int]], reset: bool = False,
           samples: dict[str, list[dict]] | None = None) -> None:
    """Upsert run rows, with their log ranges, request rows and /metrics samples, in one
    transaction. `reset`: first drop what an earlier attempt stored for these runs."""
    samples = samples or {}
    with store.writer(db) as con:
        con.execute("BEGIN")
        try:
            for row in rows:
                rid = row["run_id"]
                if reset or rid in requests:
                    con.execute("DELETE FROM requests WHERE run_id = ?", [rid])
                if reset or rid in sources:
                    con.execute("DELETE FROM run_sources WHERE run_id = ?", [rid])
                if reset or rid in samples:
                    con.execute("DELETE FROM metric_samples WHERE run_id = ?", [rid])
                store.upsert_run(con, row)
                if rid in sources:
                    store.attach_source(con, rid, *sources[rid])
                reqs = requests.get(rid)
                if reqs:
                    cols: dict[str, list] = {c: [] for c in ("run_id",) + tuple(reqs[0])}
                    for r in reqs:
                        cols["run_id"].append(rid)
                        for k, v in r.items():
                            cols[k].append(v)
                    store.insert(con, "requests", cols)
                if samples.get(rid):
                    store.insert(con, "metric_samples", {
                        c: [rid if c == "run_id" else m.get(c) for m in samples[rid]]
                        for c in schema.column_names("metric_samples")})
            con.execute("COMMIT")
        except BaseException:
            store.rollback(con)   # a failed ROLLBACK (disk full) must not hide the real error
            raise


def write_parquet(folder: Path, run: RunResult, row: dict) -> Path:
    """One file per run: its `runs` columns and a `requests` list column (atomic replace)."""
    folder.mkdir(parents=True, exist_ok=True)
    cols = schema.column_names("runs")
    tbl = store.arrow_table("runs", {c: [row.get(c)] for c in cols})
    req_tbl = store.arrow_table("requests", {c: [q.get(c, row["run_id"] if c == "run_id" else None)
                                                 for q in run.requests]
                                             for c in schema.column_names("requests")})
    reqs = pa.array([req_tbl.to_pylist()], pa.list_(pa.struct(list(req_tbl.schema))))
    tbl = tbl.append_column("requests", reqs)
    path = folder / ("-".join(run.run_id.rsplit("/", 2)[-2:]) + ".parquet")   # c4-r0, rps2-r0
    tmp = path.with_suffix(".parquet.part")
    pq.write_table(tbl, tmp)
    os.replace(tmp, path)
    return path


class LiveIngest:
    """Driver thread: ingests a local server log while it is written (so `report` and the
    dashboard see decode windows during the load). Only the driver process writes."""

    def __init__(self, db: str, path: str):
        # the server is still writing: a record at the end waits for its next line (or a quiet
        # poll); `ingest_log` after the server stopped stores whatever is left
        self.ing = ingest.FileIngestor(db, path, hold_at_eof=True)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="live-ingest", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(INGEST_POLL_S):
            try:
                self.ing.poll()
            except (store.StoreError, ingest.IngestError, OSError):
                pass   # the log file is the buffer: what is not stored now is stored next time

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.ing.close()
