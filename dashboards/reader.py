"""The dashboard's reads: which database, and one Reader per render.

A cheap change stamp first, then cached heavy queries keyed on it. A writer holding the lock longer
than the reader waits, or a store not created yet, never shows as an error: the view keeps the last
data it read and says it is waiting. Every read goes through `specwatch.db.query.run_sql`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys

import pandas as pd
import streamlit as st

import queries as Q
from specwatch.db import query, store

SQL_TIMEOUT_S = 10.0


def db_path() -> str:
    """`-- --db FILE` after the script (the launcher passes it), else env SPECWATCH_DB."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:])
    return args.db or os.environ.get("SPECWATCH_DB") or store.DEFAULT_DB


@st.cache_data(max_entries=64, show_spinner=False)
def _cached(db: str, stamp: tuple, sql: str, params: tuple, max_rows: int) -> tuple[pd.DataFrame, bool]:
    res = query.run_sql(db, sql, list(params), max_rows=max_rows)
    return pd.DataFrame.from_records(res.rows, columns=res.columns), res.truncated


def _not_ready(exc: Exception) -> bool:
    """The store is missing or not initialised yet (a sweep about to create it)."""
    msg = str(exc)
    return "no such database" in msg or "does not exist" in msg


class Reader:
    def __init__(self, db: str):
        self.db = db
        self.waiting = False        # a read fell back to older data because the writer held on
        self.missing = False        # no database (yet)
        self.stamp = self._stamp()

    def _stamp(self) -> tuple | None:
        try:
            with st.spinner("Waiting for the writer to release the database…"):
                res = query.run_sql(self.db, Q.STAMP, timeout_s=SQL_TIMEOUT_S)
        except (store.StoreError, query.QueryError) as exc:
            if isinstance(exc, store.StoreCorrupt):
                st.error(str(exc))
                st.stop()
            if _not_ready(exc):
                self.missing = True
                return None
            self.waiting = True
            return st.session_state.get("_last_stamp")
        stamp = tuple(res.rows[0])
        st.session_state["_last_stamp"] = stamp
        return stamp

    def df(self, sql: str, params: tuple = (), max_rows: int = 100_000) -> pd.DataFrame:
        key = ("_last", sql, params)
        if self.missing:
            return pd.DataFrame()
        try:
            with st.spinner("Waiting for the writer to release the database…"):
                df, _ = _cached(self.db, self.stamp, sql, params, max_rows)
        except (store.StoreError, query.QueryError) as exc:
            if _not_ready(exc):
                self.missing = True
                return pd.DataFrame()
            self.waiting = True
            return st.session_state.get(key, pd.DataFrame())
        st.session_state[key] = df
        return df

    def note(self, refresh_s: int | None) -> None:
        now = dt.datetime.now().strftime("%H:%M:%S")
        every = f"refreshes every {refresh_s} s" if refresh_s else "auto-refresh off"
        if self.waiting:
            st.caption(f"⏳ Waiting for the writer: the database is busy, showing the last data read "
                       f"({every}).")
        else:
            st.caption(f"Read at {now} · {every} · `{self.db}`")

    def missing_note(self) -> None:
        st.info(f"No specwatch data in `{self.db}` yet. It appears once `specwatch ingest`, `tail` "
                "or `run-sweep` writes there; this page refreshes on its own.")


def page_reader(db: str) -> Reader:
    """The full run's Reader (one stamp, one wait per page), or a fresh one for a fragment rerun."""
    return st.session_state.get("_page_reader") or Reader(db)
