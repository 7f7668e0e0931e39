"""Open a log file for reading, whether plain or compressed by logrotate (gzip, zstd).

A compressed file (`server.log.1.gz`, `server.log.2.zst`) is recognised by its magic bytes, not its
name, and read through an anonymous scratch file holding the decompressed text, so callers get a
seekable file with a descriptor (pread, fstat) either way. Offsets are offsets in the text.

Also: which files the paths given to `ingest`/`parse` name (`expand_paths`).
Not for: deciding which files are rotated siblings (see `tail`), or identifying sources (`ingest`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


class IngestError(RuntimeError):
    """A file could not be read at all (missing, unreadable, a directory given as a file, ...)."""


_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


def compression(path: str | os.PathLike) -> str | None:
    """"gzip" or "zstd" when the file starts with that format's magic bytes, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return None
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    return None


def _open_regular(path: str):
    """open(path, "rb") for regular files only. Opened non-blocking first, so that a FIFO (or a
    device) named as a log is refused at once instead of waiting forever for a writer."""
    import fcntl
    import stat
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise IngestError(f"{path}: not a regular file (a FIFO, socket or device); specwatch "
                              "reads log files, and a pipe would be waited on forever")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_log(path: str | os.PathLike):
    """A binary, seekable file object with the log's text: the file itself, or for a gzip/zstd
    file (`server.log.1.gz`) an anonymous scratch file holding its decompressed bytes. Raises
    IngestError naming the file when it cannot be read or decompressed."""
    path = str(path)
    try:
        fh = _open_regular(path)
    except FileNotFoundError:
        raise IngestError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IngestError(f"{path}: is a directory") from None
    except PermissionError:
        raise IngestError(f"{path}: permission denied") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot open: {exc.strerror}") from None
    head = fh.read(4)
    fh.seek(0)
    kind = next((name for magic, name in _MAGIC.items() if head.startswith(magic)), None)
    if kind is None:
        return fh
    out = tempfile.TemporaryFile(prefix="specwatch-")
    try:
        with fh:
            if kind == "gzip":
                import gzip
                src = gzip.GzipFile(fileobj=fh)
            else:
                try:
                    import zstandard
                except ImportError:
                    raise IngestError(f"{path}: zstd-compressed; install the `zstandard` package "
                                      "to read it") from None
                src = zstandard.ZstdDecompressor().stream_reader(fh)
            shutil.copyfileobj(src, out, 1 << 20)
    except IngestError:
        out.close()
        raise
    except Exception as exc:  # noqa: BLE001 - gzip: OSError/EOFError; zstandard.ZstdError: Exception
        out.close()
        raise IngestError(f"{path}: cannot decompress ({kind}): {exc}; a file still being "
                          "compressed is read once it is complete") from None
    out.seek(0)
    return out


def expand_paths(paths: list[str]) -> tuple[list[tuple[Path, str]], list[str]]:
    """[(file, default run name)] for files and the files under directories, plus problems."""
    out, problems = [], []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file())
            if not files:
                problems.append(f"{path}: directory has no files")
            out.extend((f, str(f.relative_to(path))) for f in files)
        elif path.exists():
            out.append((path, path.name))
        else:
            problems.append(f"{path}: no such file or directory")
    return out, problems
