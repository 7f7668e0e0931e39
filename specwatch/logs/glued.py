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
A record of no metric kind whose message ends in `:` is never cut off the metric record after
it: it introduces it (`... INFO sglang stdout: [ts TP0] Decode batch, ...`, a wrapper that logs a
child's output), and is kept as that record's prefix.
Where several places qualify, the latest (closest to the next header) is the cut: typed values are
strict, so only digits glued to a number could read two ways (`#queue-req: 37 [ts]` is 37, not 3
and a thread id 7 of a logging format). Anything else (no such place, a markdown table row,
inline code between the records, ANSI colour codes, a docker JSON line, undecodable bytes) leaves
the line whole: it parses as before, and a metric record parsed from it (another record's text in
its fields) is rejected by `reassemble` (unless quoted: a markdown cell or inline code holds one
record), so a glued line is never stored as a wrong row.

Records of no metric kind glued before, between or after metric records (`..., #queue-req: 0,
[ts TP0] Cache flushed: 3`, `... 0.0%. ERROR 06-19 ... Engine iteration timed out...`) are cut by
the same rule: their start is a log prefix with the record's own time or process tag (a bare
date-time only with a level, logger, location or rank beside it); one that another record follows
must have a balanced message (quotes, brackets: a prompt or a config string that quotes records is
not cut) and parse as noise or an event/readiness record; each such piece is then read as a line
of its own. A metric record whose message still holds a record start after its header is
rejected by `reassemble` (`glued_on`), never stored with the other record in its fields.

The C scanner never takes a line with two metric headers (a second `batch` header sends it to
Python; a vLLM header's first value is never a plain number), so both ingest paths store the same.

Not for: joining lines (see `reassemble`), parsing a record (see `parse`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from specwatch.logs import parse, prefix

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
# What every record start holds (its time `:dd:dd`, or a process tag's `pid=`): searched first, as
# it is ~5x cheaper than _RECORD_START over a metric message (0.8 vs 4.3 us per decode line)
_HINT = re.compile(r":\d\d:\d\d|pid=")
MAX_CAPTURE = 160   # characters of capture prefix looked at before a record start
MAX_OPEN = 240     # characters of log prefix looked at for a record of no metric kind
_BARE_NUM = re.compile(r"\d+[ \t]")
MAX_PIECES = 256    # more headers than this on one line: not cut (a line of 256 records is not a paste)


@dataclass(slots=True)
class Piece:
    """One record of a glued line: where it starts in the line (characters), its text, its parse."""

    start: int
    text: str
    result: parse.Record | parse.Rejected


def candidate(line: str) -> bool:
    """Might `line` hold several records (two metric headers, or a record of no metric kind glued
    before or after its one)? False for nearly every line, cheaply: then `split` cuts nothing and
    `glued_on` is False, and the caller asks neither."""
    first = _HEADER.search(line)
    return first is not None and (_HEADER.search(line, first.end()) is not None
                                  or _mixed(line, first))


def split(line: str, parse_line: Callable = parse.parse_line) -> list[Piece] | None:
    """The records glued on `line` (no newline), each with its parse (None for a piece of no
    kind specwatch stores); None when the line is not cut (one record, or not certainly several:
    it is parsed whole, as every line)."""
    if not candidate(line):
        return None
    if "\ufffd" in line or "\x1b" in line or "\r" in line or line.startswith('{"'):
        return None  # offsets would not be the file's, or the text is not what the line shows
    s = line.strip()
    if s.startswith("|") and s.endswith("|") and s.count("|") >= 3:
        return None  # a markdown table row: quoting, read whole by parse
    heads = list(_HEADER.finditer(line))
    if len(heads) > MAX_PIECES or "`" in line[heads[0].start():heads[-1].start()]:
        return None  # inline code between the records: quoted text, read whole by parse
    at, head, msg, i = 0, heads[0], 0, 1
    p0 = parse.message_prefix(line, head.start(), head.group(0))
    if not p0.known and "`" not in line:
        k = _opens(line, 0, head.start())
        if k is not None:
            head, msg, i = None, k, 0   # a record of no metric kind first, then the metric one
    cuts: list[tuple[int, re.Match | None]] = []
    while True:
        nxt = heads[i] if i < len(heads) else None
        limit = nxt.start() if nxt else len(line)
        if head is not None:   # a metric record from `at`
            j = _cut(line, at, head, nxt, parse_line) if nxt else None
            if j is not None:
                cuts.append((at, head))
                at, head, i = j, nxt, i + 1
                continue
            c = None if "`" in line else _cut_to_text(line, at, head, limit, parse_line)
            cuts.append((at, head))
            if c is None:
                if nxt is not None:
                    return None
                break
            at, head, msg = c[0], None, c[1]
            continue
        # a record of no metric kind from `at`, its message from `msg`
        c = _after_text(line, msg, nxt, limit)
        if c is None:
            if nxt is not None:
                return None   # a metric header inside its message: quoted, not cut
            cuts.append((at, None))
            break
        j, k = c
        if not _complete_text(line[at:j], j - msg, parse_line):
            return None
        if k is None and line[msg:j].rstrip().endswith(":"):
            # a message that ends in `:` right before a metric record introduces it: a wrapper
            # that logs its child's lines (`2026-06-07 10:59:31,659 INFO sglang stdout: [ts TP0]
            # Decode batch, ...`: a launcher, a supervisor) puts a record of its own before each;
            # that record is the line's prefix (`Traceback (most recent call last):` before
            # another record of no metric kind is cut as any)
            return None
        cuts.append((at, None))
        if k is None:
            at, head, i = j, nxt, i + 1
        else:
            at, msg = j, k
    pieces = []
    for n, (at, head) in enumerate(cuts):
        end = cuts[n + 1][0] if n + 1 < len(cuts) else len(line)
        text = line[at:end]
        if head is None:
            res = parse_line(text.rstrip(" \t") if end < len(line) else text)
            pieces.append(Piece(at, text, res))
            continue
        res = parse_line(text)
        if not _fits(text, head.end() - at, res, HEADERS[head.group(0)], last=end == len(line)):
            return None
        pieces.append(Piece(at, text, res))
    return pieces if len(pieces) > 1 else None


def glued_on(text: str) -> bool:
    """Does a metric record's line hold another record: a second metric header, or a log-record
    start after its header (`..., #queue-req: 0, [ts TP0] Cache flushed: 3`)? Such a line that
    `split` could not cut is rejected, never stored with the other record's text in its fields."""
    if text.startswith('{"'):
        text = prefix.clean(text)   # a docker JSON line: its message (its time is no glued record)
    first = _HEADER.search(text)
    return first is not None and (_HEADER.search(text, first.end()) is not None
                                  or _start_after(text, first.end()) is not None)


def starts_record(text: str) -> bool:
    """Does `text` hold a log record's own start (a time, a process tag)? A wrapped record's
    continuation never does (`reassemble` does not join such a line)."""
    return _start_after(text) is not None


def _start_after(text: str, pos: int = 0) -> re.Match | None:
    """The first record start in `text` from `pos` (`_HINT` first: most texts hold none)."""
    return _RECORD_START.search(text, pos) if _HINT.search(text, pos) else None


def _mixed(line: str, first: re.Match) -> bool:
    """Might `line`, with one metric header `first`, hold a record of no metric kind glued after
    the metric record or before it? (Cheap tests first: most lines are one record.)"""
    if _start_after(line, first.end()) is not None:
        return True
    if _own_start_only(line, first.start()):
        return False
    return _RECORD_START.search(line, 1, first.start()) is not None and \
        not parse.message_prefix(line, first.start(), first.group(0)).known


_GAP = re.compile(r"[)\] \t]{0,3}")


def _own_start_only(line: str, end: int) -> bool:
    """Do the record starts before `end` form one chain from the line's first character (its own
    prefix: `[ts TP0] `, `(APIServer pid=1) INFO 05-07 04:56:27 `, `(SGLangEngine pid=4) [ts] `),
    with nothing but `)`, `]` and blanks between them? Then no record can be glued before the
    metric one (a cut needs a record start of its own), and the line's prefix is not parsed a
    second time here (the Python path: 40% more time per line when it was)."""
    at = 0
    for m in _RECORD_START.finditer(line, 0, end):
        if m.start() != at and not (at and _GAP.fullmatch(line, at, m.start())):
            return False
        at = m.end()
    return at > 0


def _boundary(line: str, j: int) -> bool:
    """Can a record start at `j`: not inside a word or number (`...: 12svc-1  | `)."""
    return j == 0 or not (line[j - 1].isalnum() or line[j - 1] == "_") or line[j] in "[("


def _opens(line: str, j: int, limit: int) -> int | None:
    """Where the message starts of a record of any kind whose log prefix (after any capture
    prefix) `prefix.split` reads whole from `j` and which carries its own time or process tag
    (a bare date-time only with a level, logger, source location or rank bracket beside it: a
    date in prose is no record start; a capture path's time alone is not the record's own);
    the message holds text before `limit`. None if none."""
    best = None
    end = min(limit, j + MAX_OPEN)
    for k in range(j + 1, end):
        if not (line[k - 1] in " \t" and line[k] not in " \t"):
            continue
        p = prefix.split(line[j:k])
        if p is not None and (p.process or p.timestamp and (
                p.rank is not None or p.level or p.logger or p.location)):
            best = k
    return best


def _balanced(text: str) -> bool:
    """Quotes paired and brackets closed: text that ends inside a string or a call (`note='`,
    `logger.info(f"`) is not a complete message, whatever follows it is quoted."""
    if text.count('"') % 2 or text.count("'") % 2:
        return False
    stack = []
    for ch in text:
        if ch in "([{":
            stack.append(ch)
        elif ch in ")]}":
            if not stack or "([{"[")]}".index(ch)] != stack.pop():
                return False
    return not stack


def _complete_text(text: str, n_msg: int, parse_line: Callable) -> bool:
    """Is `text`, a record of no metric kind that another record follows on the line (its
    message the last `n_msg` characters), complete: its message balanced, and noise or an
    event/readiness record as a line of its own (never a config or a rejection: those are read
    whole)?"""
    message = text[len(text) - n_msg:]
    if not _balanced(message) or not message.strip():
        return False
    res = parse_line(text.rstrip(" \t"))
    return res is None or isinstance(res, parse.Record) and res.kind not in parse.METRIC_KINDS \
        and res.kind not in parse.CONFIG_KINDS


def _cut_to_text(line: str, begin: int, head: re.Match, limit: int, parse_line: Callable
                 ) -> tuple[int, int] | None:
    """Where a record of no metric kind starts after the metric record from `begin` (header
    `head`), and where its message starts: the latest place at the first log-record start after
    the header (after any capture prefix) where the text before is a complete, well-formed
    metric record. None if there is none."""
    m = _RECORD_START.search(line, head.end(), limit)
    if m is None:
        return None
    kind = HEADERS[head.group(0)]
    for j in range(m.start(), max(head.end(), m.start() - MAX_CAPTURE), -1):
        if line[j].isspace() or not _boundary(line, j):
            continue
        k = _opens(line, j, limit)
        if k is None:
            continue
        res = parse_line(line[begin:j])
        if isinstance(res, parse.Record) and _fits(line[begin:j], head.end() - begin, res, kind,
                                                   last=False):
            return j, k
    return None


def _after_text(line: str, msg: int, nxt: re.Match | None, limit: int
                ) -> tuple[int, int | None] | None:
    """The next record after a record of no metric kind whose message starts at `msg`: (where it
    starts, None) for the metric record of header `nxt`, (where it starts, where its message
    starts) for another record of no metric kind; the earliest place (a capture prefix belongs to
    the record after it), never a bare number (a thread id reads two ways). None if none."""
    for m in _RECORD_START.finditer(line, msg + 1, limit):
        for j in range(max(msg + 1, m.start() - MAX_CAPTURE), m.start() + 1):
            if line[j].isspace() or not _boundary(line, j) or _BARE_NUM.match(line, j):
                continue
            if nxt is not None:
                p = parse.message_prefix(line[j:limit], limit - j, nxt.group(0))
                if p.known and (p.timestamp or p.process or p.outer_ts):
                    return j, None
            k = _opens(line, j, limit)
            if k is not None:
                return j, k
    return None


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
