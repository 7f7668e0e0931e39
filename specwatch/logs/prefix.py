"""The text around a log message: quoting (markdown table rows, backticks), terminal control
codes, JSON log records (docker, journald, log shippers, cloud exports), and the line prefix.
Pure functions on one line of text.

A line is `[capture prefix][log prefix]message`. The log prefix is what the server's logger printed
(SGLang's `[ts ranks] `, vLLM's `(APIServer pid=1) INFO 06-07 04:22:04 [loggers.py:259] `, a
Python logging format's timestamp, level and logger, a Ray actor tag, docker's or kubectl's RFC3339
timestamp). The capture prefix is what the way the log was captured put before it: docker compose
(`sglang-1  | `), `kubectl logs --prefix` (`[pod/NAME/CONTAINER] `), journald / syslog
(`Nov 02 09:14:07 host unit[pid]: `), `grep -n`/`-H` (`server.log:1042:`), a pasted file
reference (`@c:\\logs\\server.txt `), or any other text. Known shapes are parsed into their parts;
the capture prefix is also kept whole as printed (`Prefix.line_prefix`).

`split` accepts a prefix only if every token is a known one. `locate` never refuses: when `split`
does, the log prefix is taken to start at the first strong log-prefix token (a bracketed SGLang
timestamp, a docker timestamp, a process tag, vLLM's `LEVEL MM-DD hh:mm:ss`, ...) from which the
rest splits, everything before it is unknown capture text, and `Prefix.known` is False: the caller
then accepts only a complete, well-formed message (prose that quotes a metric is not a metric line).
Timestamps are kept exactly as printed (`2026-06-07 10:59:31,659` keeps its comma); turning them
into `ts` is the store's job.

Not for: the message itself (see `parse`).
"""
from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# docker --timestamps / kubectl --timestamps: RFC3339 with optional fraction and zone
OUTER_TS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?(?= )")
# CRI (containerd/CRI-O, kubelet's files under /var/log/pods): `TS stdout F msg`; P = partial line
CRI = re.compile(r"(?:stdout|stderr) ([PF]) ")
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]$")  # Ray's log deduplication
# Ray prints `(Actor pid=N)`, `(pid=N)` for tasks, `, ip=...` for remote nodes; vLLM `(APIServer pid=N)`
_PROC = re.compile(r"\(((?:[\w.\-]+ )?pid=\d+(?:, ip=[\d.:a-fA-F]+)?)\)")
# SGLang: [2026-02-26 14:09:45(.mmm)( TAG)*]
_SGL_BRACKET = re.compile(
    r"\[(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)((?: [A-Z][A-Z_]*\d+)*)\]")
# logging-style bracket with rank tags and/or a source location: [DP3 TP3 EP3 file.py:222]
_LOC_BRACKET = re.compile(r"\[((?:[A-Z][A-Z_]*\d+ )*)([\w.\-/]+(?::\w+)?:\d+)\]")
_LEVELS = "DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL"
_LEVEL_BRACKET = re.compile(rf"\[({_LEVELS})\]")                     # %(levelname)s in brackets
_NAME_BRACKET = re.compile(r"\[([A-Za-z][\w.\-]{0,79})\]")           # VLLM_LOGGING_PREFIX, [logger]
_TAG_BRACKET = re.compile(r"\[((?:[A-Z][A-Z_]*\d+)(?: [A-Z][A-Z_]*\d+)*)\]")
_TS = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
                 r"|\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?"    # vLLM: no year
                 r"|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?")                # time only
# a level, also `INFO:logger.name:` (logging.basicConfig's default format)
_LEVEL = re.compile(rf"(?:{_LEVELS})(?::([\w.]+):|:)?(?=\s|$)")
_LOC = re.compile(r"[\w.\-/]+\.py:\d+(?:\]|:)"                     # vLLM <= 0.6 `metrics.py:400]`
                  r"|[\w.]+:\w+:\d+(?= )")                              # loguru `module:function:42`
# %(name)s of a Python logging format: a dotted logger name, alone or before ': '
_LOGGER_NAME = re.compile(r"[A-Za-z_]\w*(?:\.\w+)+")
_LOGGER = re.compile(rf"({_LOGGER_NAME.pattern}):?(?=\s)")
_SEP = re.compile(r"[|\-](?= )")                                     # loguru's ` | ` and ` - `
_NUM = re.compile(r"\d+(?=\s)")                                        # a pid/thread id
_SPACE = re.compile(r"[ \t]*")
_RANK_TAG = re.compile(r"([A-Z][A-Z_]*?)(\d+)$")
RANK_NAMES = {"DP": "dp_rank", "TP": "tp_rank", "PP": "pp_rank", "EP": "ep_rank",
              "ATTN_CP": "attn_cp_rank", "MOE_DP": "moe_dp_rank"}
_MD_CELL_TS = re.compile(r"^(?:\d{4}-\d{2}-\d{2}[ T])?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?Z?$")
_MD_CELL_PROC = re.compile(r"^[A-Za-z][\w\-]*(?: pid=\d+)?$")
# markup that closes a quoted line, glued after its last value (no log message ends in one)
_CLOSERS = re.compile(r"(?:[ \t]*(?:`+|\*\*|__|~~~|\\|</(?:code|pre|samp|kbd|tt)>))+[ \t]*$")

# Capture-path shapes (before the log prefix).
_PATH = r"(?:[A-Za-z]:[\\/])?[^\s:\[\](){}`|'\"]*[./\\][^\s:\[\](){}`|'\"]*"
# grep -H -n `FILE:N:`, grep -n `N:`, grep -H `FILE:`; a file name holds a `/` or `\` or ends
# like a log file (a dotted logger name `sglang.srt.x:` is not one); `N:` is not a time's `hh:`
_LOGFILE = r"(?:[A-Za-z]:[\\/])?(?:[^\s:\[\](){}`|'\"]*[/\\][^\s:\[\](){}`|'\"]*|[\w.\-]+\.(?:log|txt|out|err|jsonl?)(?:\.\d+)?)"
_GREP = re.compile(rf"(?:({_LOGFILE}):)?(?:(\d+):(?!\d\d[:.,]|\d\d$))?")
# a file reference pasted before a line (editors' chat panes): `@path`, `@path:12`, `@path:12-20`
_FILEREF = re.compile(rf"@({_PATH})(?::(\d+)(?:-\d+)?)?(?= )")
# docker compose / `docker service logs`: `name-1  | ` (service names: letters, digits, _.-@)
_COMPOSE = re.compile(r"([A-Za-z0-9][\w.\-@]*) *\| ")
# kubectl logs --prefix: `[pod/NAME/CONTAINER] `
_KUBECTL = re.compile(r"\[pod/([^/\s\[\]]+)/([^/\s\[\]]+)\](?= )")
_K8S_NAME = re.compile(r"[^/\s\[\]]+")
_MONTH = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
# journald (journalctl short / short-precise / short-iso) and syslog files: `TS host unit[pid]: `
_JOURNALD = re.compile(
    rf"((?:{_MONTH}) [ \d]\d \d{{2}}:\d{{2}}:\d{{2}}(?:\.\d+)?"
    r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r" ([^\s\[\]:]+) ([^\s\[\]:]+?)(?:\[(\d+)\])?: ")
# Unknown text that says the message after it is source code, not logged: a traceback frame
# (`File "x.py", line 3, in f`). (A message in a string literal ends in its closing quote, and
# `{x}` placeholders are not values: neither is a complete message.)
_CODE = re.compile(r"""^\s*File "[^"]*", line \d+""")
# Where a log prefix can start after unknown text: tokens too specific to occur in prose.
_STRONG = re.compile(
    r"\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}|\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}"
    r"|\((?:[\w.\-]+ )?pid=\d+|\[pod/|[A-Za-z0-9][\w.\-@]* *\| "
    rf"|(?:{_MONTH}) [ \d]\d \d{{2}}:\d{{2}}:\d{{2}} |(?:{_LEVELS}) \d{{2}}-\d{{2}} \d{{2}}:")


@dataclass(slots=True)
class Prefix:
    """Every part of a line's prefix, each as printed (None = absent)."""

    outer_ts: str | None = None     # the capture path's timestamp: docker/k8s RFC3339, journald
    process: str | None = None      # `APIServer pid=1`, `SGLangEngine pid=41820`, Ray actor tag
    timestamp: str | None = None    # the log record's own timestamp, exactly as printed
    rank: str | None = None         # rank tags as printed, e.g. "DP3 TP3 EP3"; None = no bracket
    ranks: dict[str, int] = field(default_factory=dict)
    level: str | None = None
    location: str | None = None     # source location, e.g. scheduler_metrics_mixin.py:222
    quoted: str | None = None       # "markdown" | "backticks" when the line was quoted
    logger: str | None = None       # a Python logging format's %(name)s
    line_prefix: str | None = None  # the capture prefix, as printed (known shapes or any text)
    service: str | None = None      # docker compose service / container name
    pod: str | None = None          # kubectl logs --prefix
    container: str | None = None
    host: str | None = None         # journald / syslog
    unit: str | None = None
    unit_pid: int | None = None
    src_path: str | None = None     # grep -H file name, or a pasted @file reference
    src_line: int | None = None     # grep -n line number (or the reference's line)
    known: bool = True              # False: the capture prefix holds text of no known shape
    code: bool = False              # ... and that text is source code or a traceback frame

    def capture(self) -> dict:
        """The capture prefix and its parts, logger and level that are present, by name
        (`level` is `log_level`)."""
        return {CAPTURE_COLUMNS[k]: getattr(self, k) for k in CAPTURE_PARTS
                if getattr(self, k) is not None}


# The capture parts a record keeps beside its prefix ...
CAPTURE_PARTS = ("line_prefix", "service", "pod", "container", "host", "unit", "unit_pid",
                 "src_path", "src_line", "logger", "level")
# ... and the name each is kept under (`level` is `log_level` there)
CAPTURE_COLUMNS = {k: ("log_level" if k == "level" else k) for k in CAPTURE_PARTS}


def capture_columns(parts: dict) -> dict:
    """A record's capture parts (Prefix.capture()) as stored: `line_prefix` and the JSON object
    `capture` of the other parts (None when there are none). The one serialization for both
    ingest paths."""
    rest = {k: parts[k] for k in CAPTURE_COLUMNS.values()
            if k != "line_prefix" and parts.get(k) is not None}
    return {"line_prefix": parts.get("line_prefix"),
            "capture": json.dumps(rest, separators=(",", ":")) if rest else None}


def clean(line: str) -> str:
    """Drop the newline, a run of NUL bytes or a byte order mark before the text, terminal colour
    codes and tqdm-style carriage-return rewrites; a JSON log record becomes its message as its
    capture path prints it (`unjson`)."""
    line = line.rstrip("\r\n")
    if "\0" in line:
        # NUL bytes are never text a logger wrote: a hole left by logrotate's copytruncate under
        # a writer without O_APPEND (`> server.log`), or a crash before the data reached the
        # disk. What follows the last one is a line of its own.
        line = line[line.rindex("\0") + 1:]
    if line.startswith("\ufeff"):   # a byte order mark (the file's first line, Windows tools)
        line = line[1:]
    if line.startswith('{"'):
        line = unjson(line)
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        # the text after the last carriage return is what the terminal shows
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if line.endswith("cluster]"):
        line = _RAY_REPEATED.sub("", line)
    return line


def unjson(line: str) -> str:
    """A JSON log line -> the line as its capture path prints it as text. docker's json-file
    driver (`/var/lib/docker/containers/*/*-json.log`) writes
    `{"log":"msg\\n","stream":"stderr","time":"2026-...Z"}`: -> `2026-...Z stderr F msg` (P when
    the piece has no newline: docker split a message longer than 16 KiB; a whole line of a record
    that names its Kubernetes pod, `[pod/NAME/CONTAINER] TS msg`); `journalctl -o json`:
    see `_journal_json`; any other JSON log record (a log shipper's or a cloud export's): see
    `_record_json`. Other lines unchanged."""
    try:
        d = json.loads(line)
    except ValueError:
        return line
    if not isinstance(d, dict):
        return line
    if "MESSAGE" in d and "log" not in d:
        return _journal_json(d, line)
    if not isinstance(d.get("log"), str):
        return _record_json(d, line)
    msg = d["log"]
    # Fluent Bit's CRI parser keeps the flag in `logtag` and drops the newline
    whole = d["logtag"] == "F" if d.get("logtag") in ("F", "P") else msg.endswith("\n")
    msg = msg.rstrip("\r\n")
    t, stream = d.get("time"), d.get("stream")
    if not (isinstance(t, str) and OUTER_TS.match(t + " ")):
        return f"{_pod_prefix(d)}{msg}"
    if whole and (pod := _pod_prefix(d)):   # a shipper's record of a pod: as kubectl prints it
        return f"{pod}{t} {msg}"
    if isinstance(stream, str) and stream in ("stdout", "stderr"):
        return f"{t} {stream} {'F' if whole else 'P'} {msg}"
    return msg


# Where a JSON log record keeps the logged line, in the order they are tried: Elastic/ECS,
# Datadog, Vector, Fluent Bit (`Message_Key`), CloudWatch Logs exports (`message`); Go/zap-style
# shippers (`msg`); Google Cloud Logging (`textPayload`, or `jsonPayload.message` of a structured
# entry); OpenTelemetry (`body`, in OTLP JSON `{"stringValue": ...}`); Loki/Grafana exports
# (`line`); AWS (`@message`); Elasticsearch hits (`_source.message`).
_MESSAGE_KEYS = ("message", "msg", "textPayload", "body", "line", "@message")
_NESTED_MESSAGE = ("jsonPayload", "fields", "record", "_source")
# ... and its time: RFC3339 text, or a number (or a string of digits: OTLP's `timeUnixNano`) of
# seconds, ms, us or ns since the epoch
_TIME_KEYS = ("@timestamp", "timestamp", "time", "ts", "date", "timeUnixNano",
              "observedTimeUnixNano", "receiveTimestamp")


def _record_json(d: dict, line: str) -> str:
    """A JSON log record of a log shipper or a cloud export -> `TS msg` as `kubectl logs
    --timestamps` prints a line (and `[pod/NAME/CONTAINER] ` before it when the record names its
    Kubernetes pod and container, as `--prefix` prints them), so the prefix rules read its parts.
    The line is the first string under a known message key (`_MESSAGE_KEYS`), at the top or one
    level down under `_NESTED_MESSAGE` (where its time and pod are looked for first); a record
    with none is returned unchanged."""
    for rec in (d, *(d[k] for k in _NESTED_MESSAGE if isinstance(d.get(k), dict))):
        msg = next((m for m in map(_text, (rec.get(k) for k in _MESSAGE_KEYS)) if m is not None),
                   None)
        if msg is not None:
            break
    else:
        return line
    msg = msg.rstrip("\r\n")
    times = (_rfc3339(r.get(k)) for r in (rec, d) for k in _TIME_KEYS)
    ts = next((t for t in times if t is not None), None)
    pod = _pod_prefix(rec) or _pod_prefix(d)
    return f"{pod}{ts + ' ' if ts else ''}{_own_prefix(rec)}{msg}"


def _own_prefix(rec: dict) -> str:
    """The record's own logging prefix as a Python logging format prints it, `ASCTIME LEVEL
    logger: `, from a JSON formatter's fields (python-json-logger under SGLANG_LOGGING_CONFIG_PATH
    or VLLM_LOGGING_CONFIG_PATH: `asctime`, `levelname`, `name`); only the fields it has."""
    parts = []
    t, lvl, name = rec.get("asctime"), rec.get("levelname"), rec.get("name")
    if isinstance(t, str) and _TS.fullmatch(t):
        parts.append(t)
    if isinstance(lvl, str) and re.fullmatch(_LEVELS, lvl):
        parts.append(lvl)
    if parts and isinstance(name, str) and _LOGGER_NAME.fullmatch(name):
        parts.append(name + ":")
    return " ".join(parts) + " " if parts else ""


def _text(v) -> str | None:
    """A message value: a string, or OTLP's AnyValue holding one."""
    if isinstance(v, dict):
        v = v.get("stringValue")
    return v if isinstance(v, str) else None


def _rfc3339(v) -> str | None:
    """A record's time as RFC3339 text: a string that is one already (kept as written), or a
    number since the epoch in s, ms, us or ns by its size (CloudWatch: ms), in UTC."""
    if isinstance(v, str) and v.isdigit() and len(v) < 21:
        v = int(v)
    if isinstance(v, str):
        return v if OUTER_TS.match(v + " ") else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e20:
        return None
    digits = next(e for e in (0, 3, 6, 9, 12) if v < 1e11 * 10 ** e)
    if digits > 9:
        return None
    if isinstance(v, int):
        whole, frac = divmod(v, 10 ** digits)
    else:   # a fraction of a second: to the microsecond
        us = round(v * 10 ** (6 - digits))
        (whole, frac), digits = divmod(us, 10**6), 6
    try:
        t = dt.datetime.fromtimestamp(whole, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return f"{t:%Y-%m-%dT%H:%M:%S}" + (f".{frac:0{digits}d}" if digits else "") + "Z"


def _pod_prefix(d: dict) -> str:
    """`[pod/NAME/CONTAINER] ` for a record that names its Kubernetes pod and container (Fluent
    Bit's and Fluentd's kubernetes filter: `kubernetes.pod_name`/`container_name`; Google Cloud
    Logging: `resource.labels.pod_name`/`container_name`), else ''."""
    for meta in (d.get("kubernetes"), (d.get("resource") or {}).get("labels")
                 if isinstance(d.get("resource"), dict) else None):
        if isinstance(meta, dict):
            pod, con = meta.get("pod_name"), meta.get("container_name")
            if isinstance(pod, str) and isinstance(con, str) and \
                    _K8S_NAME.fullmatch(pod) and _K8S_NAME.fullmatch(con):
                return f"[pod/{pod}/{con}] "
    return ""


def _journal_json(d: dict, line: str) -> str:
    """`journalctl -o json` (one entry a line, every field a string; MESSAGE a list of byte values
    when it is not UTF-8) -> the entry as `journalctl -o short-iso-precise` prints it, in UTC:
    `2026-06-07T10:59:31.659000+0000 host unit[pid]: msg` (the parts `_JOURNALD` reads; without a
    host or unit, `TS msg`; without a time, `msg`). Other JSON lines unchanged."""
    msg = d["MESSAGE"]
    if isinstance(msg, list) and all(isinstance(b, int) and 0 <= b < 256 for b in msg):
        msg = bytes(msg).decode("utf-8", "replace")
    if not isinstance(msg, str):
        return line
    msg = msg.rstrip("\r\n")
    us = d.get("__REALTIME_TIMESTAMP")
    if not (isinstance(us, str) and us.isdigit()):
        return msg
    t = dt.datetime.fromtimestamp(int(us) // 10**6, dt.timezone.utc)
    ts = f"{t:%Y-%m-%dT%H:%M:%S}.{int(us) % 10**6:06d}+0000"
    host, unit = d.get("_HOSTNAME"), d.get("SYSLOG_IDENTIFIER") or d.get("_COMM")
    pid = d.get("SYSLOG_PID") or d.get("_PID")
    if not (isinstance(host, str) and isinstance(unit, str) and host and unit
            and _JOURNALD.fullmatch(f"{ts} {host} {unit}: ")):
        return f"{ts} {msg}"
    tag = f"[{pid}]" if isinstance(pid, str) and pid.isdigit() else ""
    return f"{ts} {host} {unit}{tag}: {msg}"


def unquote(line: str, anchor: str) -> tuple[str, Prefix | None]:
    """A log line quoted in a markdown table row or in backticks -> (the line, what the quoting
    told about it). Unquoted lines come back unchanged with None."""
    s = line.strip()
    if s.startswith("|") and s.endswith("|") and s.count("|") >= 3:
        cells = [c.strip() for c in s[1:-1].split("|")]
        for i, cell in enumerate(cells):
            if anchor in cell:
                info = Prefix(quoted="markdown")
                for c in cells[:i]:
                    c = c.strip("`* ")
                    if info.timestamp is None and _MD_CELL_TS.match(c):
                        info.timestamp = c
                    elif info.process is None and _MD_CELL_PROC.match(c):
                        info.process = c
                return _strip_ticks(cell), info
    i = line.find(anchor)
    a = line.rfind("`", 0, i)
    if a >= 0:
        b = line.find("`", i)
        if b > i:
            return line[a + 1:b], Prefix(quoted="backticks")
    tail = line.rstrip(" \t")[-1:]
    m = _CLOSERS.search(line, i + 1) if i >= 0 and tail and tail in "`*_~\\>" else None
    if m is not None:
        # a pasted log's last line with the markup that closes it glued on: a code fence
        # (`...#queue-req: 0```), bold, an HTML `</code>`/`</pre>`, a markdown hard break `\`
        return line[:m.start()], Prefix(quoted="markdown")
    return line, None


def _strip_ticks(cell: str) -> str:
    if cell.startswith("`") and cell.endswith("`") and len(cell) >= 2:
        return cell.strip("`")
    return cell


def rank_fields(tags: list[str]) -> dict[str, int]:
    ranks = {}
    for tag in tags:
        t = _RANK_TAG.match(tag)
        if t:
            ranks[RANK_NAMES.get(t.group(1), t.group(1).lower() + "_rank")] = int(t.group(2))
    return ranks


def _capture(prefix: str, pos: int, p: Prefix, first: bool) -> re.Match | None:
    """A capture-path token at `pos` (filling `p`), or None. `first`: nothing before it."""
    c = prefix[pos]
    if first and c == "@" and (m := _FILEREF.match(prefix, pos)):
        p.src_path, p.src_line = m.group(1), int(m.group(2)) if m.group(2) else None
        return m
    if first and p.src_path is None and (m := _GREP.match(prefix, pos)) and m.end() > pos:
        p.src_path, p.src_line = m.group(1), int(m.group(2)) if m.group(2) else None
        return m
    if c == "[" and p.pod is None and (m := _KUBECTL.match(prefix, pos)):
        p.pod, p.container = m.group(1), m.group(2)
        return m
    if p.host is None and p.outer_ts is None and (c.isdigit() or c in "ADFJMNOS") and \
            (m := _JOURNALD.match(prefix, pos)):
        p.outer_ts, p.host, p.unit = m.group(1), m.group(2), m.group(3)
        p.unit_pid = int(m.group(4)) if m.group(4) else None
        return m
    if p.service is None and c.isalnum() and (m := _COMPOSE.match(prefix, pos)) and \
            not _LEVEL.match(prefix, pos):
        p.service = m.group(1)
        return m
    return None


def _split(prefix: str, start: int) -> Prefix | None:
    p = Prefix()
    pos, n = start, len(prefix)
    capture = True        # capture tokens come before any log-prefix token
    capture_end = start
    while True:
        pos = _SPACE.match(prefix, pos).end()
        if pos >= n:
            if capture_end > start:
                p.line_prefix = prefix[start:capture_end]
            return p
        c = prefix[pos]
        if capture and (m := _capture(prefix, pos, p, pos == start)):
            capture_end = _SPACE.match(prefix, m.end()).end()
            pos = m.end()
            continue
        if capture and p.outer_ts is None and c.isdigit() and (m := OUTER_TS.match(prefix, pos)):
            p.outer_ts = m.group(0)
            pos = m.end()
            if (m := CRI.match(prefix, pos + 1)):
                pos = m.end() - 1
            capture = False
            continue
        capture = False
        if c == "(" and p.process is None and (m := _PROC.match(prefix, pos)):
            p.process = m.group(1)
        elif c == "[" and p.rank is None and (m := _SGL_BRACKET.match(prefix, pos)):
            if p.timestamp is not None:
                return None
            p.timestamp = m.group(1)
            tags = m.group(2).split()
            p.rank, p.ranks = " ".join(tags), rank_fields(tags)
        elif c == "[" and p.location is None and (m := _LOC_BRACKET.match(prefix, pos)):
            tags = m.group(1).split()
            if tags:
                p.rank, p.ranks = " ".join(tags), rank_fields(tags)
            p.location = m.group(2)
        elif c == "[" and p.rank is None and (m := _TAG_BRACKET.match(prefix, pos)):
            tags = m.group(1).split()
            p.rank, p.ranks = " ".join(tags), rank_fields(tags)
        elif c == "[" and p.level is None and (m := _LEVEL_BRACKET.match(prefix, pos)):
            p.level = m.group(1)
        elif c == "[" and (m := _NAME_BRACKET.match(prefix, pos)):
            if "." in m.group(1) and p.logger is None:
                p.logger = m.group(1)  # `[sglang.srt.managers.scheduler]`; `[vllm]` is a name
        elif c in "|-" and (m := _SEP.match(prefix, pos)):
            pass
        elif c.isdigit() and p.timestamp is None and (m := _TS.match(prefix, pos)):
            p.timestamp = m.group(0)
        elif c.isupper() and p.level is None and (m := _LEVEL.match(prefix, pos)):
            p.level = m.group(0).split(":")[0]
            if m.group(1):
                p.logger = m.group(1)
        elif p.location is None and (m := _LOC.match(prefix, pos)):
            p.location = m.group(0)[:-1]
        elif p.logger is None and (c.isalpha() or c == "_") and (m := _LOGGER.match(prefix, pos)):
            p.logger = m.group(1)
        elif c.isdigit() and (m := _NUM.match(prefix, pos)):
            pass  # a pid or thread id printed by a custom logging format
        else:
            return None
        pos = m.end()


def split(prefix: str) -> Prefix | None:
    """Parse what precedes a message. None if it holds anything that is not a prefix token."""
    return _split(prefix, 0)


def locate(head: str) -> Prefix:
    """Parse what precedes a message, keeping unknown text: `split` when every token is known,
    else the log prefix from the first strong token from which the rest splits (the text before
    it is `line_prefix`, `known` False); with no such token, all of `head` is `line_prefix`."""
    p = _split(head, 0)
    if p is not None:
        return p
    for m in _STRONG.finditer(head):
        k = m.start()
        if k == 0 or (head[k].isdigit() and head[k - 1].isalnum()):
            continue  # inside a number or word: not where a timestamp starts
        q = _split(head, k)
        if q is not None:
            q.line_prefix = head[:k] + (q.line_prefix or "")
            q.known = False
            q.code = _CODE.search(head[:k].rstrip()) is not None
            return q
    return Prefix(line_prefix=head or None, known=not head.strip(),
                  code=_CODE.search(head.rstrip()) is not None)
