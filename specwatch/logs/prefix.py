"""The text around a log message: quoting (markdown table rows, backticks), terminal control
codes, and the line prefix (outer docker/k8s timestamp, process tag, timestamp, rank, level,
source location). Pure functions on one line of text.

A prefix is accepted only if every token before the message is a known prefix token; anything
else (prose, a traceback's source line, a key of some other line) means the header found is not
the start of a message, and the caller treats the line as noise. Timestamps are kept exactly as
printed (`2026-06-07 10:59:31,659` keeps its comma); turning them into `ts` is the store's job.

Not for: the message itself (see `parse`).
"""
from __future__ import annotations

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
_NAME_BRACKET = re.compile(r"\[[A-Za-z][\w.\-]{0,39}\]")            # VLLM_LOGGING_PREFIX, `[vllm]`
_TAG_BRACKET = re.compile(r"\[((?:[A-Z][A-Z_]*\d+)(?: [A-Z][A-Z_]*\d+)*)\]")
_TS = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
                 r"|\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?"    # vLLM: no year
                 r"|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?")                # time only
_LEVEL = re.compile(r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?::[\w.]+:|:)?(?=\s|$)")
_LOC = re.compile(r"[\w.\-/]+\.py:\d+(?:\]|:)"                     # vLLM <= 0.6 `metrics.py:400]`
                  r"|[\w.]+:\w+:\d+(?= )")                              # loguru `module:function:42`
_SEP = re.compile(r"[|\-](?= )")                                     # loguru's ` | ` and ` - `
_NUM = re.compile(r"\d+(?=\s)")                                        # a pid/thread id
_SPACE = re.compile(r"[ \t]*")
_RANK_TAG = re.compile(r"([A-Z][A-Z_]*?)(\d+)$")
RANK_NAMES = {"DP": "dp_rank", "TP": "tp_rank", "PP": "pp_rank", "EP": "ep_rank",
              "ATTN_CP": "attn_cp_rank", "MOE_DP": "moe_dp_rank"}
_MD_CELL_TS = re.compile(r"^(?:\d{4}-\d{2}-\d{2}[ T])?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?Z?$")
_MD_CELL_PROC = re.compile(r"^[A-Za-z][\w\-]*(?: pid=\d+)?$")


@dataclass(slots=True)
class Prefix:
    """Every part of a line's prefix, each as printed (None = absent)."""

    outer_ts: str | None = None     # docker/k8s RFC3339 timestamp before everything
    process: str | None = None      # `APIServer pid=1`, `SGLangEngine pid=41820`, Ray actor tag
    timestamp: str | None = None    # the log record's own timestamp, exactly as printed
    rank: str | None = None         # rank tags as printed, e.g. "DP3 TP3 EP3"; None = no bracket
    ranks: dict[str, int] = field(default_factory=dict)
    level: str | None = None
    location: str | None = None     # source location, e.g. scheduler_metrics_mixin.py:222
    quoted: str | None = None       # "markdown" | "backticks" when the line was quoted


def clean(line: str) -> str:
    """Drop the newline, terminal colour codes and tqdm-style carriage-return rewrites."""
    line = line.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        # the text after the last carriage return is what the terminal shows
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    if line.endswith("cluster]"):
        line = _RAY_REPEATED.sub("", line)
    return line


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


def split(prefix: str) -> Prefix | None:
    """Parse what precedes a message. None if it holds anything that is not a prefix token."""
    p = Prefix()
    pos, n = 0, len(prefix)
    pos = _SPACE.match(prefix, pos).end()
    m = OUTER_TS.match(prefix, pos)
    if m:
        p.outer_ts = m.group(0)
        pos = m.end()
        if (m := CRI.match(prefix, pos + 1)):
            pos = m.end() - 1
    while True:
        pos = _SPACE.match(prefix, pos).end()
        if pos >= n:
            return p
        c = prefix[pos]
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
        elif c == "[" and (m := _NAME_BRACKET.match(prefix, pos)):
            pass  # a logger name or prefix
        elif c in "|-" and (m := _SEP.match(prefix, pos)):
            pass
        elif c.isdigit() and p.timestamp is None and (m := _TS.match(prefix, pos)):
            p.timestamp = m.group(0)
        elif c.isupper() and p.level is None and (m := _LEVEL.match(prefix, pos)):
            p.level = m.group(0).split(":")[0]
        elif p.location is None and (m := _LOC.match(prefix, pos)):
            p.location = m.group(0)[:-1]
        elif c.isdigit() and (m := _NUM.match(prefix, pos)):
            pass  # a pid or thread id printed by a custom logging format
        else:
            return None
        pos = m.end()
