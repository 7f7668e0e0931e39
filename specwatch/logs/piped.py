"""`specwatch ingest -`: a log piped into standard input (`kubectl logs POD | specwatch ingest -`)
ingested as a file among the others.

It is spooled to a scratch file named `stdin` (its run's default name, `logfile.spooled_stdin`),
ingested as any file, and its source stored under the path `<stdin>`. A source is known by its
content, so piping the same log again stores nothing twice.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from specwatch.logs import identity, ingest, logfile


def ingest_inputs(db: str | Path, paths: list[str], run: str | None, stdin) -> list:
    """`ingest.ingest_paths` of `paths`, where `-` (at most once) is `stdin` (a binary stream)."""
    if paths.count("-") > 1:
        raise ValueError("`-` (standard input) can be given once")
    with contextlib.ExitStack() as stack:
        spool = stack.enter_context(logfile.spooled_stdin(stdin)) if "-" in paths else None
        results = ingest.ingest_paths(db, [str(spool) if p == "-" else p for p in paths], run)
        for r in results:
            if spool is not None and r.path == str(spool):
                if r.source_id is not None:
                    identity.relabel_source(db, r.source_id, logfile.STDIN_NAME)
                r.path = logfile.STDIN_NAME
                r.warnings = [w.replace(str(spool), logfile.STDIN_NAME) for w in r.warnings]
    return results
