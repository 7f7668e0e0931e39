"""Cut a physical line that holds several log records glued together into one piece per record:
a log pasted into an issue whose newlines were lost, a terminal or web view that joined lines
(`INFO 01-24 10:00:01 metrics.py:213] Avg prompt throughput: ... 0.0%. INFO 01-24 10:00:06
metrics.py:213] Avg prompt throughput: ...`). The inverse of `reassemble`'s joining of one record
hard-wrapped over several lines; `reassemble.Reassembler.feed` calls it before parsing a line, and
each piece is then parsed, stored (at its own byte offset) and held like a line of its own. Pure.

The rule. A line is cut only when it holds two or more metric headers (`Decode batch`, `Prefill
batch`, `SpecDecoding metrics:`, `Speculative metrics:`, `Avg prompt throughput:`), and only where
a known log-record start begins after the end of a complete message:
- every piece but the first starts with a log prefix that `prefix.split` reads whole and that
  carries the record's own timestamp, process tag or docker timestamp (`[2026-01-02 10:00:04 TP0] `,
  `(APIServer pid=1) INFO 05-07 04:56:27 [loggers.py:259] `, `INFO 01-24 10:00:06 metrics.py:213] `,
  a logging format's `2026-06-07 10:59:31,659 [INFO] x.y: `), after any capture prefix of a known
  shape (`svc-1  | `, `[pod/p/c] `, journald's `Nov 02 09:14:07 host unit[pid]: `);
- every piece but the last parses as a complete, well-formed metric record of its header's kind
  (`parse.well_formed`: typed values are strict, so a piece that ends in anything but its last
  value, a separator (`, `, `.`, a space or tab) or nothing, is not one);
- the last piece parses as a metric record or a metric rejection of its header's kind, as a line
  of its own would (cut off, the next line may continue it);
- no piece holds a log-record start after its header (text of no metric kind glued in, e.g.
  `[ts] Cache flushed: 3` after a decode window, would otherwise become a field of the record).
Where several places qualify, the latest (closest to the next header) is the cut: typed values are
strict, so only digits glued to a number could read two ways (`#queue-req: 37 [ts]` is 37, not 3
and a thread id 7 of a logging format). Anything else (no such place, a markdown table row,
inline code between the records, ANSI colour codes, a docker JSON line, undecodable bytes) leaves
the line whole: it parses as before, and a metric record parsed from it (another record's text in
its fields) is rejected by `reassemble` (unless quoted: a markdown cell or inline code holds one
record), so a glued line is never stored as a wrong row.

The C scanner never takes a line with two metric headers (a second `batch` header sends it to
Python; a vLLM header's first value is never a plain number), so both ingest paths store the same.

Not for: joining lines (see `reassemble`), parsing a record (see `parse`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from specwatch.logs import parse

# The metric headers and the kind each starts (parse routes by the same headers).
HEADERS = {"Decode batch": "sglang_decode", "Prefill batch": "sglang_prefill",
           "SpecDecoding metrics:": "vllm_spec_decode", "Speculative metrics:": "vllm_spec_decode",
           "Avg prompt throughput:": "vllm_throughput"}
_HEADER = re.compile("|".join(re.escape(h) for h in HEADERS))
# Where a log record's own prefix can begin inside a line: an SGLang bracket, a date-time (a
# logging format's, docker's RFC3339), a process tag, vLLM's `LEVEL MM-DD hh:mm:ss`. No metric
# message prints one of these after its header.
_RECORD_START = re.compile(
    r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}|\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}"
    r"|\((?:[\w.\-]+ )?pid=\d+|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}")
MAX_CAPTURE = 160   # characters of capture prefix looked at before a record start
MAX_PIECES = 256    # more headers than this on one line: not cut (a line of 256 records is not a paste)


@dataclass(slots=True)
class Piece:
    """One record of a glued line: where it starts in the line (characters), its text, its parse."""

    start: int
    text: str
    result: parse.Record | parse.Rejected


def several(line: str) -> bool:
    """Does `line` hold two or more metric headers? (A record's message never holds another's.)"""
    first = _HEADER.search(line)
    return first is not None and _HEADER.search(line, first.end()) is not None


def split(line: str, parse_line: Callable = parse.parse_line) -> list[Piece] | None:
    """The records glued on `line` (no newline), each with its parse; None when the line is not
    cut (one record, or not certainly several: it is parsed whole, as every line)."""
    if not several(line):
        return None
    if "\ufffd" in line or "\x1b" in line or "\r" in line or line.startswith('{"'):
        return None  # offsets would not be the file's, or the text is not what the line shows
    s = line.strip()
    if s.startswith("|") and s.endswith("|") and s.count("|") >= 3:
        return None  # a markdown table row: quoting, read whole by parse
    heads = list(_HEADER.finditer(line))
    if len(heads) > MAX_PIECES or "`" in line[heads[0].start():heads[-1].start()]:
        return None  # inline code between the records: quoted text, read whole by parse
    starts = [0]
    for prev, cur in zip(heads, heads[1:]):
        cut = _cut(line, starts[-1], prev, cur, parse_line)
        if cut is None:
            return None
        starts.append(cut)
    pieces = []
    for i, (at, head) in enumerate(zip(starts, heads)):
        end = starts[i + 1] if i + 1 < len(starts) else len(line)
        text = line[at:end]
        res = parse_line(text)
        if not _fits(text, head.end() - at, res, HEADERS[head.group(0)], last=end == len(line)):
            return None
        pieces.append(Piece(at, text, res))
    return pieces


def _fits(text: str, after: int, res, kind: str, last: bool) -> bool:
    """Is `text` one record of `kind` whose message (from `after` on) holds no other record's
    start: complete and well-formed, or (the last piece, read as a line of its own would be: the
    next line may continue it) any record or rejection of that kind?"""
    if _RECORD_START.search(text, after) or res is None or res.kind != kind:
        return False
    return last or isinstance(res, parse.Record) and parse.well_formed(res)


def _cut(line: str, begin: int, prev: re.Match, cur: re.Match, parse_line: Callable) -> int | None:
    """Where the record whose header is `cur` starts, the one before starting at `begin` with the
    header `prev`: the latest place between the headers where a known log prefix (after any
    capture prefix) leads to `cur` and the text from `begin` up to it is a complete record (the
    latest: `#queue-req: 37 [ts]` is 37, not 3 and a thread id 7). None if there is no such place."""
    lo, hi = prev.end(), cur.start()
    anchor = cur.group(0)
    cands: set[int] = set()
    for m in _RECORD_START.finditer(line, lo, hi):
        # the record starts there, or earlier at a capture prefix of a known shape (`svc-1  | `,
        # journald's `Nov 02 09:14:07 host unit[pid]: `), glued to the last value or not
        cands.update(range(max(lo + 1, m.start() - MAX_CAPTURE), m.start() + 1))
    for j in sorted(cands, reverse=True):
        if line[j].isspace():
            continue
        p = parse.message_prefix(line[j:hi], hi - j, anchor)
        if not (p.known and (p.timestamp or p.process or p.outer_ts)):
            continue
        res = parse_line(line[begin:j])
        if isinstance(res, parse.Record) and _fits(line[begin:j], prev.end() - begin, res,
                                                   HEADERS[prev.group(0)], last=False):
            return j
    return None
