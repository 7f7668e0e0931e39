"""Join records that were hard-wrapped over several physical lines, between splitting a file into
lines and `parse.parse_line`. The only stateful step of parsing; deterministic and pure apart from
the one record it holds.

Two wraps are known: a log pasted into an issue or a terminal and wrapped at a width (the
continuation has no log prefix of its own), and docker's json-file driver splitting a message
longer than 16 KiB into pieces that `docker logs --timestamps` prints each with its own RFC3339
timestamp (the continuation is a timestamp followed by the rest of the message). A record is
held while it looks cut off (`Rejected.incomplete`, or a docker piece of 16 KiB), and every
complete-looking record is held for one line (a wrap at a segment boundary leaves a first part
that parses whole: only a following continuation that adds fields tells); the next line, if it
is a continuation (it does not start a record of its own, `STARTS_RECORD`), is joined (directly, or with the space a wrap may have eaten) and the
join parsed again. Exactly one complete parse is accepted; two different complete parses are
ambiguous and rejected with the reason; a cut-off record that nothing continues stays rejected.
A fragment is never emitted as a complete record.

How to call it (ingest, `specwatch parse`): feed every line that carries a `parse.ANCHORS`
anchor, and also the next physical line whenever `holding` is True (after any record); collect what `feed` and, at
the end of the input, `flush` return. While `holding`, `pending` is where the held record starts:
a follower that must not commit a half record commits up to there and re-reads from it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from specwatch.logs import formats as _formats
from specwatch.logs import glued, parse, prefix

DOCKER_SPLIT = 16 * 1024    # bytes of message per docker json-file log entry
# A complete-looking record of these kinds is held for one line: a wrap at a segment boundary
# leaves a first part that parses whole, and only the next line tells.
HOLD_KINDS = (*parse.METRIC_KINDS, *parse.CONFIG_KINDS)
MAX_PARTS = 64
MAX_CHARS = 1 << 20
# A line that starts a record of its own (or a traceback): never a continuation. The C fast path
# may take a line only when the next physical line matches this, is blank, or is the end.
_STARTS_RECORD = STARTS_RECORD = re.compile(
    r"\s*(?:\[\d{4}-\d{2}-\d{2}[ T]|\(\w[\w.\-]* pid=\d+|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
    r"[ :]|\d{4}-\d{2}-\d{2}[ T]\d{2}:|\d{2}-\d{2} \d{2}:\d{2}|Traceback |File \"|specwatch: "
    r"|\||```|#{1,6} )")  # markdown rows, fences and headings start their own text
# A line that holds an SGLang batch record of its own after whatever prefix (a capture prefix:
# `sglang-1  | [ts] Decode batch, ...`) is never a continuation either.
_OWN_RECORD = re.compile(r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?: [A-Z][A-Z_]*\d+)*\] "
                         r"(?:Decode|Prefill) batch")


@dataclass(slots=True)
class Logical:
    """One logical record: where its first physical line starts, its text, what it parsed to."""

    line_no: int
    offset: int
    text: str
    result: parse.Record | parse.Rejected | None
    parts: int = 1


def _docker_piece(text: str, rec) -> bool:
    """A docker json-file piece: the message after the outer timestamp (or after a docker compose
    service prefix) is exactly 16 KiB."""
    if not isinstance(rec, parse.Record):
        return False
    lp = rec.capture.get("line_prefix")
    if lp and text.startswith(lp):
        msg = text[len(lp):]
    elif prefix.OUTER_TS.match(text):
        msg = text.split(" ", 1)[1]
    else:
        return False
    return len(msg.encode("utf-8", "replace")) == DOCKER_SPLIT


def _extends(old: parse.Record, new: parse.Record) -> bool:
    """Does `new` continue the complete-looking `old`: the same fields, of which only the last
    may have grown (a number cut after its digits), plus at least one more field; or the same
    fields with the last one's typed value grown?"""
    keys = list(old.fields)
    if not keys or list(new.fields)[:len(keys)] != keys:
        return False
    last = keys[-1]
    if any(new.fields[k] != old.fields[k] for k in keys[:-1]):
        return False
    fmt = parse.FORMATS.lines.get(old.kind)
    typed = fmt is not None and last in fmt.by_key and fmt.by_key[last].type != "str"
    if len(new.fields) > len(keys):
        return new.fields[last] == old.fields[last] or typed
    return typed and new.fields[last] != old.fields[last]


def _cri_partial(text: str) -> bool:
    """A CRI log line flagged P: the message continues on the next line (kubelet splits at 16 KiB)."""
    m = prefix.OUTER_TS.match(text)
    c = prefix.CRI.match(text, m.end() + 1) if m else None
    return c is not None and c.group(1) == "P"


def _holdable(text: str, rec) -> bool:
    return (isinstance(rec, parse.Rejected) and rec.incomplete) or _docker_piece(text, rec) \
        or _cri_partial(text)


_NO, _CONSUMED, _JOINED = 0, 1, 2


class Reassembler:
    def __init__(self, parse_line: Callable = parse.parse_line):
        self.parse_line = parse_line
        self._held: Logical | None = None
        self._texts: list[str] = []       # candidate joined texts of the held record
        self._docker = False              # the held record came with a docker/k8s timestamp

    @property
    def holding(self) -> bool:
        return self._held is not None

    @property
    def pending(self) -> tuple[int, int] | None:
        """(line_no, byte offset) of the held record's first line, or None."""
        return (self._held.line_no, self._held.offset) if self._held else None

    def feed(self, line_no: int, offset: int, text: str) -> list[Logical]:
        """One physical line (newline optional) -> the logical records it completes."""
        text = text.rstrip("\r\n")
        out: list[Logical] = []
        if self._held is not None:
            status, done = self._continue(text)
            if status == _JOINED:
                return [done]
            if status == _CONSUMED:
                return []
            out.append(self._give_up())
        several = glued.candidate(text)   # (nearly every line: no)
        pieces = glued.split(text, self.parse_line) if several else None
        if pieces:
            # several records glued on one line: each stored at its own offset; the last one is
            # then held like any line (the next line may continue it)
            for pc in pieces[:-1]:
                out.append(Logical(line_no, offset + _nbytes(text, pc.start), pc.text, pc.result))
            last = pieces[-1]
            offset += _nbytes(text, last.start)
            text, rec = last.text, last.result
        else:
            rec = self.parse_line(text)
            if several and isinstance(rec, parse.Record) and rec.kind in parse.METRIC_KINDS \
                    and rec.quoted is None and glued.glued_on(text):
                # a second metric header inside the record's message: records glued that could
                # not be cut apart (their fields would hold the other record's text)
                rec = parse.Rejected(rec.kind, "another log line is pasted into this one (glued "
                                     "records that cannot be cut apart)")
        clean = prefix.clean(text) if rec is not None else ""
        if isinstance(rec, parse.Record) and rec.kind in HOLD_KINDS or \
                rec is not None and _holdable(clean, rec):
            self._held = Logical(line_no, offset, text, rec)
            self._texts = [clean if text.startswith('{"') else text]  # docker JSON: its message
            self._docker = prefix.OUTER_TS.match(clean) is not None
            return out
        out.append(Logical(line_no, offset, text, rec))
        return out

    def flush(self) -> list[Logical]:
        """At the end of the input: the held record, as it is."""
        return [self._give_up()] if self._held is not None else []

    def _give_up(self) -> Logical:
        held, self._held, self._texts = self._held, None, []
        if isinstance(held.result, parse.Rejected) and held.parts > 1:
            r = held.result
            held.result = parse.Rejected(r.kind, f"{r.reason}; hard-wrapped over {held.parts} "
                                         "lines and still incomplete", r.field)
        return held

    def _continue(self, text: str) -> tuple[int, Logical | None]:
        held = self._held
        clean = prefix.clean(text)
        if not clean.isprintable() or "\ufffd" in clean:
            return _NO, None  # binary or undecodable bytes never continue a record
        if _OWN_RECORD.search(clean):
            return _NO, None
        m = prefix.OUTER_TS.match(clean)
        rest, c = "", None
        res = held.result
        lp = res.capture.get("line_prefix") if isinstance(res, parse.Record) else res.line_prefix
        if lp and clean.startswith(lp) and not self._docker:
            # the same capture prefix (docker compose prints each 16 KiB piece with it): the
            # continuation is what follows it, joined as it is
            rest = clean[len(lp):]
            if not rest or _STARTS_RECORD.match(rest):
                return _NO, None
            joins = [t + rest for t in self._texts]
        elif self._docker:
            if not m:
                return _NO, None
            rest = clean[m.end() + 1:]
            c = prefix.CRI.match(rest)
            if c:
                rest = rest[c.end():]
            if not rest or _STARTS_RECORD.match(rest):
                return _NO, None
            joins = [t + rest for t in self._texts]
        else:
            if m or not clean.strip() or _STARTS_RECORD.match(clean):
                return _NO, None
            joins = []
            for t in self._texts:
                joins.append(t + clean)
                if not t.endswith(" ") and not clean.startswith(" "):
                    joins.append(t + " " + clean)
        if glued.starts_record(rest or clean):
            return _NO, None  # holds a log-record start (`svc-2  | [ts] Cache flushed: 0`): its own
        parts = held.parts + 1
        if parts > MAX_PARTS or len(joins[0]) > MAX_CHARS:
            return _NO, None
        if isinstance(self.parse_line(clean), parse.Record):
            return _NO, None  # a record of its own (after a capture prefix of any shape)
        complete, partial = [], []
        whole = isinstance(held.result, parse.Record) and not _docker_piece(held.text, held.result)
        for j in joins:
            r = self.parse_line(j)
            if isinstance(r, parse.Record) and r.kind == held.result.kind and \
                    (not whole or _extends(held.result, r)):
                complete.append((j, r))
            elif isinstance(r, parse.Rejected) and r.incomplete:
                partial.append(j)
        if complete:
            # A wrap that split a word joins directly, one that ate a space joins with it: the
            # join that leaves fewer keys the format does not declare is the wrap's undoing.
            fmt = parse.FORMATS.lines.get(held.result.kind)
            unknown = [sum(k not in fmt.by_key for k in r.fields) if fmt else 0
                       for _, r in complete]
            complete = [c for c, u in zip(complete, unknown) if u == min(unknown)]
            j, r = complete[0]
            if any(x.as_dict() != r.as_dict() for _, x in complete[1:]):
                if whole:
                    return _NO, None  # keep the complete record; the line is its own
                r = parse.Rejected(held.result.kind, f"hard-wrapped record: line "
                                   f"{held.line_no + parts - 1} continues it in more than one "
                                   "way; not stored as a record")
                self._held, self._texts = None, []
                return _JOINED, Logical(held.line_no, held.offset, j, r, parts)
            if (self._docker or lp) and rest and (
                    len(rest.encode("utf-8", "replace")) == DOCKER_SPLIT or
                    c is not None and c.group(1) == "P"):
                held.text, held.result, held.parts, self._texts = j, r, parts, [j]
                return _CONSUMED, None  # another full piece: the message may go on
            r.parts = parts
            self._held, self._texts = None, []
            return _JOINED, Logical(held.line_no, held.offset, j, r, parts)
        if partial:
            held.text, held.parts, self._texts = partial[0], parts, partial[:4]
            return _CONSUMED, None
        return _NO, None


def _nbytes(text: str, chars: int) -> int:
    """UTF-8 bytes of the first `chars` characters of `text` (a piece's offset in its line)."""
    head = text[:chars]
    return chars if head.isascii() else len(head.encode("utf-8"))


def reassemble(lines: Iterable[tuple[int, int, str]]) -> Iterator[Logical]:
    """(line_no, offset, text) of every physical line -> logical records, in order."""
    r = Reassembler()
    for line_no, offset, text in lines:
        yield from r.feed(line_no, offset, text)
    yield from r.flush()


def feed_chunk(r: Reassembler, data: bytes, start_offset: int, start_line: int,
               bad_utf8: list[int] | None = None, binary: list[int] | None = None
               ) -> Iterator[Logical]:
    """Complete lines in `data` (ending with a newline; file offset `start_offset`, after
    `start_line` lines) -> the logical records they complete, for ingest's Python path: only
    lines with a `parse.ANCHORS` anchor are parsed, plus the line after a held record (its
    continuation has no anchor). A line with NUL bytes is read from after the last one (its number
    appended to `binary`), undecodable ones with replacement characters (appended to `bad_utf8`).
    The held record stays in `r` across chunks: call `r.flush()` at the end of the input, or, when
    more may come, commit only up to `r.pending` and feed from there again next time."""
    anchors = parse.ANCHORS
    offset, line_no = start_offset, start_line
    for raw in data.split(b"\n")[:-1]:
        line_no += 1
        here = offset
        offset += len(raw) + 1
        if b"\x00" in raw:
            # NUL bytes are never text a logger wrote (a copytruncate hole under a writer without
            # O_APPEND, a crash before the data reached the disk): what follows the last one is
            # the line, at its own offset; it never continues a held record
            if binary is not None:
                binary.append(line_no)
            if r.holding:
                yield from r.flush()
            cut = raw.rindex(b"\x00") + 1
            raw, here = raw[cut:], here + cut
            if not raw:
                continue
        if not r.holding:
            for a in anchors:
                if a in raw:
                    break
            else:
                continue
        for lg in r.feed(line_no, here, _text(raw, line_no, bad_utf8)):
            if lg.result is not None:
                yield lg


def _text(raw: bytes, line_no: int, bad_utf8: list[int] | None) -> str:
    """A line's text; invalid UTF-8 read with replacement characters and its number noted."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if bad_utf8 is not None:
            bad_utf8.append(line_no)
        return raw.decode("utf-8", errors="replace")


def parse_stream(raw_lines: Iterable[bytes], bad_utf8: list[int] | None = None
                 ) -> Iterator[Logical]:
    """Complete lines as bytes (a file object) -> every logical record or rejection, reassembled;
    a last line without its newline is left out (it may still be written). Every line is fed, so
    continuations without an anchor are seen. Lines that are not valid UTF-8 are read with
    replacement characters and their numbers appended to `bad_utf8`."""
    r = Reassembler()
    offset = 0
    for line_no, raw in enumerate(raw_lines, 1):
        if not raw.endswith(b"\n"):
            break
        for lg in r.feed(line_no, offset, _text(raw, line_no, bad_utf8)):
            if lg.result is not None:
                yield lg
        offset += len(raw)
    yield from r.flush()


def check_wrapped(fmts) -> None:
    """Reassemble every `[[wrapped]]` sample of lines.toml and compare with its expectation."""
    problems = []
    for s in fmts.wrapped:
        lines = s.text.split("\n")
        off, feed = 0, []
        for i, t in enumerate(lines, 1):
            feed.append((i, off, t))
            off += len(t) + 1
        got = [lg for lg in reassemble(feed) if lg.result is not None]
        r = got[0].result if len(got) == 1 else None
        if "reason" in s.expect:
            if not isinstance(r, parse.Rejected) or s.expect["reason"] not in r.reason:
                problems.append(f"wrapped {s.kind} ({s.note}): should be rejected for "
                                f"{s.expect['reason']!r}, got {[lg.result for lg in got]!r}")
            continue
        if not isinstance(r, parse.Record) or r.kind != s.kind or r.parts != len(lines):
            problems.append(f"wrapped {s.kind} ({s.note}): got {[lg.result for lg in got]!r}")
            continue
        d = r.as_dict()
        for k, want in s.expect.items():
            if d.get(k, "<missing>") != want:
                problems.append(f"wrapped {s.kind} ({s.note}): {k}={d.get(k, '<missing>')!r}, "
                                f"expected {want!r}")
    if problems:
        raise _formats.FormatError(f"{_formats.FORMATS_FILE}: {len(problems)} wrapped sample(s) "
                                   "fail:\n  " + "\n  ".join(problems))


check_wrapped(parse.FORMATS)
