"""Why did a server die? `failure_cause(log_path)` reads the end of its log and names the cause.

A server that dies before it is ready usually says why in its log, and the exit code does not:
SGLang kills its own process tree when a child fails (the parent then exits with -9), so "exited
with code -9" hides e.g. a scheduler's `torch.OutOfMemoryError`. The cause is, in this order:

1. the exception line of the last Python traceback (the line after its frames, e.g.
   `ModuleNotFoundError: No module named 'vllm'`), skipping the ones a dying process tree adds
   (KeyboardInterrupt, SystemExit, BrokenPipeError, ...); a traceback may start mid-line, as in
   SGLang's `Scheduler hit an exception: Traceback (most recent call last):`;
2. an argparse error (`launch_server.py: error: unrecognized arguments: ...`);
3. a known fatal line without a traceback: CUDA out of memory, an NCCL error, SGLang's
   `Initialization failed. warmup error: ...`, the built-in engine's load or listen errors.

`decode_lines(path, lo, hi)` counts SGLang decode-window lines in a byte range of a log (a run
whose longest request took more decode steps than --decode-log-interval must have one).

Not here: ingesting the log (see `ingest`), deciding a run's status (see `measure`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

MAX_BYTES = 256 * 1024
MAX_CHARS = 300

_TRACEBACK = "Traceback (most recent call last):"
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
# Exceptions a process tree raises while it is being torn down: never the cause.
_SECONDARY = {"KeyboardInterrupt", "SystemExit", "BrokenPipeError", "ConnectionResetError",
              "ConnectionRefusedError", "EOFError", "asyncio.exceptions.CancelledError",
              "CancelledError", "zmq.error.ContextTerminated"}
_BARE = re.compile(r"(Error|Exception|Interrupt|Exit|Failure)$")
# argparse: `PROG: error: ...`; PROG may be two words (`sglang serve: error: ...`).
_ARGPARSE = re.compile(r"^(?:[\w./\-]+(?: [\w./\-]+)?: )?error: .+$")
_FATAL = [re.compile(p) for p in (
    r"(?:CUDA|HIP) out of memory.*", r"\w*OutOfMemoryError.*", r"Not enough memory\..*",
    r"NCCL error.*", r"nccl\w*Error.*", r"Initialization failed\. warmup error: .*",
    r"Scheduler failed to load the model: .*", r"cannot listen on .*",
    r"CUDA error: .*", r"Address already in use.*")]


def _tail_lines(path: str | Path) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - MAX_BYTES))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > MAX_BYTES and lines else lines


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."


def exception_lines(lines: list[str]) -> list[str]:
    """The exception line of every traceback in `lines`, in order."""
    out = []
    in_tb = False
    for line in lines:
        if _TRACEBACK in line:
            in_tb = True
            continue
        if not in_tb or not line.strip() or line[:1].isspace():
            continue
        m = _EXC_LINE.match(line.rstrip())
        # A bare word must look like an exception's name; anything else is another process's
        # line, interleaved with the traceback.
        if m and (m.group(2) is not None or _BARE.search(m.group(1))):
            out.append(line.rstrip())
            in_tb = False
    return out


def failure_cause(log_path: str | Path) -> str | None:
    """The real cause of a server's death from the end of its log, or None if it says none."""
    lines = _tail_lines(log_path)
    for exc in reversed(exception_lines(lines)):
        name = _EXC_LINE.match(exc).group(1)
        if name not in _SECONDARY and name.rsplit(".", 1)[-1] not in _SECONDARY:
            return _short(exc)
    for line in reversed(lines):
        if _ARGPARSE.match(line.strip()):
            return _short(line)
    for line in reversed(lines):
        for pat in _FATAL:
            m = pat.search(line)
            if m:
                return _short(m.group(0))
    return None


DECODE_MARK = b"Decode batch"   # every SGLang decode-window line (LOG_FORMATS), the built-in's too


def decode_lines(path: str | Path, lo: int | None, hi: int | None) -> int:
    """How many decode-window lines the log holds in bytes [lo, hi)."""
    if lo is None or hi is None or hi <= lo:
        return 0
    n, carry = 0, b""
    try:
        with open(path, "rb") as fh:
            fh.seek(lo)
            left = hi - lo
            while left > 0:
                chunk = fh.read(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)
                data = carry + chunk
                n += data.count(DECODE_MARK)
                carry = data[-(len(DECODE_MARK) - 1):]   # too short to hold a whole mark
    except OSError:
        return 0
    return n
