"""A new database starts as a copy of an empty one, built once per machine and schema.

Creating specwatch's schema in a fresh file costs ~0.25 s, nearly all of it DuckDB binding the
22 views (each nested view is bound again inside the next); copying a closed empty database of
the same schema is ~1 ms. `place` copies the cached empty database to a path that does not exist
yet; the cache is keyed by the DuckDB version and the text of every module that defines the
schema (any change there builds a new one), lives in `$SPECWATCH_CACHE_DIR` (default
`~/.cache/specwatch/schema`), and is written to a temporary file and renamed, so a reader never
sees a partial one. Best effort: when the cache cannot be written or read, or a copy cannot be
placed, the caller creates the schema itself as before (`store.ensure_schema` runs on every
writer anyway and would bring a copy of an older schema up to date).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import duckdb

# the modules whose text defines what an empty database holds
_DEFINING = ("schema.py", "views.py", "stats.py", "slo_views.py", "summaries.py", "store.py")
_key: str | None = None


def cache_dir() -> Path:
    env = os.environ.get("SPECWATCH_CACHE_DIR")
    return Path(env) / "schema" if env else Path.home() / ".cache" / "specwatch" / "schema"


def key() -> str:
    """What the empty database depends on: DuckDB's version (its storage format) and the schema
    modules' text."""
    global _key
    if _key is None:
        h = hashlib.sha256(duckdb.__version__.encode())
        here = Path(__file__).parent
        for name in _DEFINING:
            h.update(name.encode() + b"\0" + (here / name).read_bytes())
        _key = h.hexdigest()[:16]
    return _key


def _empty(build: Callable[[str], None]) -> Path | None:
    """The cached empty database, built with `build(path)` when it is not there yet."""
    d = cache_dir()
    path = d / f"empty-{key()}.duckdb"
    if path.is_file():
        return path
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=d, prefix=".build-") as tmp:
            scratch = os.path.join(tmp, "empty.duckdb")
            build(scratch)
            if os.path.exists(scratch + ".wal"):   # not closed cleanly: do not keep it
                return None
            os.replace(scratch, path)
    except (OSError, duckdb.Error):
        return None
    return path


def place(path: str, build: Callable[[str], None]) -> bool:
    """Copy the empty database to `path`, which must not exist; True when a copy was placed.
    Never replaces a file: a writer that created `path` meanwhile keeps its own."""
    src = _empty(build)
    if src is None:
        return False
    parent = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".specwatch-new-", suffix=".duckdb")
    except OSError:
        return False
    try:
        os.fchmod(fd, 0o666 & ~_umask())   # the mode DuckDB would create it with
        with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
            shutil.copyfileobj(f, out)
        os.link(tmp, path)   # fails if the path exists: nothing is ever overwritten
        return True
    except OSError:
        return False
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _umask() -> int:
    try:   # Linux: read it; os.umask() would set it, racing other threads
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def forget(path: str | os.PathLike) -> None:
    """Drop a cached empty database that could not be opened (its copy at `path` too)."""
    for p in (path, cache_dir() / f"empty-{key()}.duckdb"):
        try:
            os.unlink(p)
        except OSError:
            pass
