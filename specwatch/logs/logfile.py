"""Open a log file for reading, whether plain, compressed by logrotate (gzip, zstd, xz, bzip2) or
written as UTF-16.

A compressed file (`server.log.1.gz`, `server.log.2.zst`, `.xz`, `.bz2`) is recognised by its magic
bytes, not its name, and read through an anonymous scratch file holding the decompressed text, so
callers get a seekable file with a descriptor (pread, fstat) either way. A UTF-16 file (its byte
order mark: what Windows PowerShell 5's `>` and `Out-File` write, e.g. `kubectl logs pod >
server.log`) is read the same way, as UTF-8 text, up to its last complete line (a line still
being written waits, as in a plain file). Offsets are offsets in the text.

Also: which files the paths given to `ingest`/`parse` name (`expand_paths`), and standard input
as such a file (`spooled_stdin`).
Not for: deciding which files are rotated siblings (see `tail`), or identifying sources (`ingest`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


class IngestError(RuntimeError):
    """A file could not be read at all (missing, unreadable, a directory given as a file, ...)."""


_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"\xfd7zXZ\x00": "xz",
          b"BZh": "bzip2"}
# UTF-16 by its byte order mark (UTF-32's starts like UTF-16 LE's, so it is told apart first)
_BOM = {b"\xff\xfe\x00\x00": None, b"\x00\x00\xfe\xff": None,
        b"\xff\xfe": "utf-16-le", b"\xfe\xff": "utf-16-be"}


def _kind(head: bytes) -> str | None:
    for magic, name in _MAGIC.items():
        if head.startswith(magic) and (name != "bzip2" or head[3:4].isdigit()):
            return name
    return next((name for bom, name in _BOM.items() if head.startswith(bom)), None)


def compression(path: str | os.PathLike) -> str | None:
    """"gzip", "zstd", "xz", "bzip2" (by the format's magic bytes), "utf-16-le"/"utf-16-be" (by
    the byte order mark) when the file is read through a text copy (`open_log`), else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    return _kind(head)


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
    """A binary, seekable file object with the log's text: the file itself, or for a compressed or
    UTF-16 file (`server.log.1.gz`) an anonymous scratch file holding its text. Raises IngestError
    naming the file when it cannot be read or decompressed, or is a tar or zip archive."""
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
    head = fh.read(512)
    fh.seek(0)
    kind = _kind(head)
    if kind is None:
        _refuse_archive(path, head, fh)
        return fh
    out = tempfile.TemporaryFile(prefix="specwatch-")
    try:
        with fh:
            if kind.startswith("utf-16"):
                _transcode(fh, out, kind)
            else:
                shutil.copyfileobj(_decompressor(path, kind, fh), out, 1 << 20)
    except IngestError:
        out.close()
        raise
    except Exception as exc:  # noqa: BLE001 - gzip: OSError/EOFError; zstandard.ZstdError: Exception
        out.close()
        raise IngestError(f"{path}: cannot decompress ({kind}): {exc}; a file still being "
                          "compressed is read once it is complete") from None
    out.seek(0)
    _refuse_archive(path, out.read(512), out)
    out.seek(0)
    return out


def _refuse_archive(path: str, head: bytes, fh) -> None:
    """IngestError for a tar or zip archive (a support bundle, a CI artifact): its files would be
    read as one log, their lines mixed into one source and one run."""
    if head[257:262] == b"ustar":
        what, how = "a tar archive", f"tar xf {path} -C DIR"
    elif head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        what, how = "a zip archive", f"unzip {path} -d DIR"
    else:
        return
    fh.close()
    raise IngestError(f"{path}: {what}; specwatch reads each log file as a source of its own: "
                      f"extract it (`{how}`) and ingest DIR")


def _decompressor(path: str, kind: str, fh):
    """A readable stream of `fh`'s decompressed bytes."""
    if kind == "gzip":
        import gzip
        return gzip.GzipFile(fileobj=fh)
    if kind == "xz":
        import lzma
        return lzma.LZMAFile(fh)
    if kind == "bzip2":
        import bz2
        return bz2.BZ2File(fh)
    try:
        import zstandard
    except ImportError:
        raise IngestError(f"{path}: zstd-compressed; install the `zstandard` package to read "
                          "it") from None
    return zstandard.ZstdDecompressor().stream_reader(fh)


def _transcode(fh, out, encoding: str) -> None:
    """UTF-16 text of `fh` (after its byte order mark) -> UTF-8 in `out`, up to its last complete
    line. Text that is not valid UTF-16 becomes U+FFFD, as undecodable bytes of a plain log do."""
    import codecs
    fh.seek(2)
    dec = codecs.getincrementaldecoder(encoding)("replace")
    tail = ""
    while block := fh.read(1 << 20):
        text = tail + dec.decode(block)
        cut = text.rfind("\n") + 1
        out.write(text[:cut].encode("utf-8"))
        tail = text[cut:]


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


STDIN_NAME = "<stdin>"   # a source read from standard input (`specwatch ingest -`)


@contextlib.contextmanager
def spooled_stdin(stream):
    """`stream` (standard input: `kubectl logs POD | specwatch ingest -`) written to a scratch file
    named `stdin` (its run's default name), removed afterwards. A source is known by its content,
    not its path, so piping the same log again stores nothing twice."""
    with tempfile.TemporaryDirectory(prefix="specwatch-") as d:
        path = Path(d) / "stdin"
        with open(path, "wb") as f:
            shutil.copyfileobj(stream, f, 1 << 20)
        yield path
