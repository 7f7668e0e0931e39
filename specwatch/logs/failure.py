"""Why did a server die? `failure_cause(log_path)` reads the end of its log and names the cause.

A server that dies before it is ready usually says why in its log, and the exit code does not:
SGLang kills its own process tree when a child fails (the parent then exits with -9), so "exited
with code -9" hides e.g. a scheduler's `torch.OutOfMemoryError`. The cause is, in this order:

1. the exception line of the last Python traceback (the line after its frames, e.g.
   `ModuleNotFoundError: No module named 'vllm'`), skipping the ones a dying process tree adds
   (KeyboardInterrupt, SystemExit, BrokenPipeError, ...) and a parent's that only points at its
   child's (vLLM: `Engine core initialization failed. See root cause above.`); a traceback may
   start mid-line, as in SGLang's `Scheduler hit an exception: Traceback (most recent call
   last):`, or carry vLLM's logger prefix on every line (a worker's traceback, interleaved with
   other processes' lines);
2. an argparse error (`launch_server.py: error: unrecognized arguments: ...`);
3. a known fatal line without a traceback: CUDA out of memory, an NCCL error, SGLang's
   `Initialization failed. warmup error: ...`, the built-in engine's load or listen errors.

`decode_lines(path, lo, hi)` counts SGLang decode-window lines in a byte range of a log (a run
whose longest request took more decode steps than --decode-log-interval must have one), by the
parser's header routing (`parse.parse_line`), never by a substring.

Not here: ingesting the log (see `ingest`), deciding a run's status (see `measure`).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from specwatch.logs import parse

MAX_BYTES = 256 * 1024
MAX_CHARS = 300

_TRACEBACK = "Traceback (most recent call last):"
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
# Exceptions a process tree raises while it is being torn down: never the cause.
_SECONDARY = {"KeyboardInterrupt", "SystemExit", "BrokenPipeError", "ConnectionResetError",
              "ConnectionRefusedError", "EOFError", "asyncio.exceptions.CancelledError",
              "CancelledError", "zmq.error.ContextTerminated"}
_BARE = re.compile(r"(Error|Exception|Interrupt|Exit|Failure)$")
# An exception raised only to say a child process failed, naming no cause of its own (vLLM 0.32:
# `RuntimeError: Engine core initialization failed. See root cause above. ...`, `Exception:
# WorkerProc initialization failed due to an exception in a background process. See stack trace for
# root cause.`).
_POINTER = re.compile(r"[Ss]ee (?:the )?(?:root cause|stack trace for root cause)")
# vLLM's logger prefix (vllm/logger.py _FORMAT, 0.32: `{VLLM_LOGGING_PREFIX}(NAME pid=N) LEVEL
# MM-DD HH:MM:SS [file.py:N] `), found wherever it starts (after VLLM_LOGGING_PREFIX or a capture
# prefix); NAME is the process (`EngineCore`, `Worker_TP1`, `APIServer`, ...). Older releases log
# without the process tag.
_LOGGER_PREFIX = re.compile(r"(?P<proc>\([^()]+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                            r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]+:\d+\] ")
# argparse: `PROG: error: ...`; PROG may be two words (`sglang serve: error: ...`).
_ARGPARSE = re.compile(r"^(?:[\w./\-]+(?: [\w./\-]+)?: )?error: .+$")
_FATAL = [re.compile(p) for p in (
    r"(?:CUDA|HIP) out of memory.*", r"\w*OutOfMemoryError.*", r"Not enough memory\..*",
    r"NCCL error.*", r"nccl\w*Error.*", r"Initialization failed\. warmup error: .*",
    r"Scheduler failed to load the model: .*", r"cannot listen on .*",
    r"CUDA error: .*", r"Address already in use.*")]


def tail_lines(path: str | Path, max_bytes: int = MAX_BYTES) -> list[str]:
    """The lines of a log file's last `max_bytes` (the first dropped when it is probably cut);
    [] when the file cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > max_bytes and lines else lines


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3] + "..."


def _owner(line: str) -> tuple[str, str]:
    """(the process a line belongs to, the line without its logger prefix): vLLM logs a child's
    traceback one logger line per traceback line, `(Worker pid=16050) ERROR 12-04 17:15:44
    [multiproc_executor.py:953]   File ...`, and children's lines interleave."""
    m = _LOGGER_PREFIX.search(line)
    if m is None:
        return "", line
    return m.group("proc") or "", line[m.end():]


def exception_lines(lines: list[str]) -> list[str]:
    """The exception line of every traceback in `lines`, in order (a traceback's lines may carry
    vLLM's logger prefix; each process's traceback is followed on its own)."""
    out = []
    in_tb: set[str] = set()   # processes inside a traceback
    for raw in lines:
        proc, line = _owner(raw)
        if _TRACEBACK in line:
            in_tb.add(proc)
            continue
        if proc not in in_tb or not line.strip() or line[:1].isspace():
            continue
        m = _EXC_LINE.match(line.rstrip())
        # A bare word must look like an exception's name; anything else is another process's
        # line, interleaved with the traceback.
        if m and (m.group(2) is not None or _BARE.search(m.group(1))):
            out.append(line.rstrip())
            in_tb.discard(proc)
    return out


def failure_cause(log_path: str | Path) -> str | None:
    """The real cause of a server's death from the end of its log, or None if it says none."""
    lines = tail_lines(log_path)
    causes = [exc for exc in exception_lines(lines)
              if (name := _EXC_LINE.match(exc).group(1)) not in _SECONDARY
              and name.rsplit(".", 1)[-1] not in _SECONDARY]
    # a parent's exception that only points at its child's ("See root cause above") is the cause
    # only when the child's is not in the log
    real = [exc for exc in causes if not _POINTER.search(exc)]
    if real or causes:
        return _short((real or causes)[-1])
    for line in reversed(lines):
        if _ARGPARSE.match(line.strip()):
            return _short(line)
    for line in reversed(lines):
        for pat in _FATAL:
            m = pat.search(line)
            if m:
                return _short(m.group(0))
    return None


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_MODEL_FILE = re.compile(r"sglang/srt/models/(?P<module>\w+)\.py$")


@dataclass(frozen=True)
class AuxCaptureCrash:
    """A server that died inside a target model's EAGLE-3 aux-state capture: the frame that raised
    (in `sglang/srt/models/<module>.py`), its source line and the exception line."""

    module: str        # e.g. "llama" (sglang/srt/models/llama.py)
    line_no: int
    code: str          # the frame's source line, e.g. `aux_hidden_states.append(hidden_states + residual)`
    exception: str     # e.g. "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'"


def aux_capture_crash(lines: list[str]) -> AuxCaptureCrash | None:
    """The cause of death when it is a target model's aux-state capture: the last traceback in
    `lines` that ended in a primary exception (not one a dying process tree adds), when its
    innermost frame is in `sglang/srt/models/<module>.py` on a source line naming
    `aux_hidden_states`; else None.

    SGLang 0.4.10-0.5.20 Llama-family targets (0.5.12 measured on the H200) capture
    `hidden_states + residual` before layer `layers_to_capture[j]`; before layer 0 the residual is
    still None, so an id that maps to index 0 (-1 under the id+1 rule) raises TypeError at the
    first forward (CUDA-graph capture, or the warmup request without graphs). The frame is what is
    recognised, not the message: other exceptions raised by a capture line count too."""
    frame = code = None
    found: AuxCaptureCrash | None = None
    for i, line in enumerate(lines):
        if _TRACEBACK in line:
            frame = code = None
            continue
        m = _FRAME.match(line)
        if m:
            frame = m
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            code = nxt.strip() if nxt.strip() and not _FRAME.match(nxt) else None
            continue
        if frame is None or not line.strip() or line[:1].isspace():
            continue
        exc = _EXC_LINE.match(line.rstrip())
        if not exc or not (exc.group(2) is not None or _BARE.search(exc.group(1))):
            continue
        name = exc.group(1)
        if name not in _SECONDARY and name.rsplit(".", 1)[-1] not in _SECONDARY:
            mod = _MODEL_FILE.search(frame.group("file").replace("\\", "/"))
            found = (AuxCaptureCrash(mod.group("module"), int(frame.group("line")), code,
                                     _short(line)) if mod and code and "aux_hidden_states" in code
                     else None)
        frame = code = None
    return found


DECODE_MARK = b"Decode batch"   # cheap prefilter; the parser decides what is a decode window


def decode_lines(path: str | Path, lo: int | None, hi: int | None) -> int:
    """How many SGLang decode-window lines start in bytes [lo, hi) of the log: lines the parser
    routes as `sglang_decode` by their header (`parse.parse_line(...).kind`), stored or rejected
    as broken (a decode line cut short still shows that the server logged here). A line cut by
    `lo` is not counted; lookalikes (TokenSpeed's `Decode batch.`, a traceback's source line
    holding `Decode batch`, a mention inside another message) are not decode lines."""
    if lo is None or hi is None or hi <= lo:
        return 0
    n = 0
    try:
        with open(path, "rb") as fh:
            if lo > 0:
                fh.seek(lo - 1)
                if fh.read(1) != b"\n":
                    fh.readline()          # the rest of a line that started before lo
            while fh.tell() < hi:
                line = fh.readline()
                if not line:
                    break
                if DECODE_MARK in line:
                    rec = parse.parse_line(line.decode("utf-8", errors="replace"))
                    if rec is not None and rec.kind == "sglang_decode":
                        n += 1
    except OSError:
        return 0
    return n
