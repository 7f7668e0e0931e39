"""Turn one log line into zero or one typed record. Pure: no I/O, no state between lines.

Recognised: SGLang `Decode batch` / `Prefill batch` lines of every version 0.4.0-0.5.23, the
`server_args=` startup line (repr and dict forms), the readiness line and a few fatal/retraction
events; vLLM `Speculative metrics:` / `SpecDecoding metrics:` lines and the periodic throughput line.
Line shapes are declared in `specwatch/formats/lines.toml`; fields are parsed by key, never by
position, and unknown keys are kept. A line that starts like a metric line but is broken becomes a
`Rejected` with the reason and the field; every other line is noise (`None`).

Not for: reading files (see `ingest`), storing (see `store`), or computing metrics (see `store`'s
views): values here are exactly what the line printed.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from specwatch import formats as _formats

METRIC_KINDS = ("sglang_decode", "sglang_prefill", "vllm_spec_decode", "vllm_throughput")

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_DOCKER_TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z? ")
_RAY_TAG = re.compile(r"^\((\w+ pid=\d+(?:, ip=[\d.]+)?)\) ")
_SGLANG_BRACKET = re.compile(
    r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)((?: [A-Z][A-Z_]*\d+)*)\]\s*$")
_ANY_TS = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d+))?")
_LOGGING_PREFIX = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:\s*$")
_RANK_TAG = re.compile(r"([A-Z][A-Z_]*?)(\d+)$")
_VLLM_PREFIX = re.compile(
    r"^(?:\((?P<proc>[\w\-]+ pid=\d+)\) )?.*?(?:DEBUG|INFO|WARNING|ERROR)\s+"
    r"(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_BATCH_HEADER = re.compile(r"(Decode|Prefill) batch(?: \[(\d+)\])?[.,] ")
_VLLM_SPLIT = re.compile(r", (?=[A-Z#][^:,]*: )")
_KEY_CLEAN = re.compile(r"[^a-z0-9]+")
_UNIT_SUFFIX = re.compile(r"\s+(?:tokens/s|tokens|reqs)$")
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")

_RANK_NAMES = {"DP": "dp_rank", "TP": "tp_rank", "PP": "pp_rank", "EP": "ep_rank",
               "ATTN_CP": "attn_cp_rank", "MOE_DP": "moe_dp_rank"}

READY_TEXT = "The server is fired up and ready to roll!"
# Startup/runtime lines that doctor and sweep care about, by the text SGLang prints.
EVENT_TEXTS = (
    ("Initialization failed.", "init_failed"),
    ("Scheduler hit an exception", "scheduler_exception"),
    ("KV cache pool is full. Retract requests.", "retract"),
    ("Received sigquit from a child process", "sigquit"),
)


class Pct(float):
    """A value that was printed with a trailing `%` (stored as the number before the sign)."""


@dataclass(slots=True)
class Record:
    """One recognised line. `fields` holds every printed field under its normalised name."""

    kind: str
    timestamp: str | None = None   # as printed (SGLang: local time, no zone; vLLM: no year)
    rank: str | None = None        # SGLang rank tags as printed, e.g. "DP0 TP1"; "" = no tag
    process: str | None = None     # vLLM process tag / Ray actor tag
    ranks: dict[str, int] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    form: str | None = None        # server_args only: "repr" (<= 0.5.18) or "dict" (0.5.19+)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "timestamp": self.timestamp}
        if self.rank is not None:
            out["rank"] = self.rank
        if self.process is not None:
            out["process"] = self.process
        out.update(self.ranks)
        out.update(self.fields)
        return out


@dataclass(slots=True)
class Rejected:
    """A line that starts like a metric line but cannot be parsed."""

    kind: str          # the kind it looked like
    reason: str
    field: str | None = None


_key_cache: dict[str, str] = {}


def normalize_key(printed: str) -> str:
    """`#running-req` -> `running_req`, `gen throughput (token/s)` -> `gen_throughput`."""
    key = _key_cache.get(printed)
    if key is None:
        k = re.sub(r"\([^)]*\)", "", printed).replace("#", "").lower()
        key = _KEY_CLEAN.sub("_", k).strip("_")
        _key_cache[printed] = key
    return key


def _infer(text: str) -> Any:
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text == "True" or text == "False":
        return text == "True"
    if text.endswith("%") and _FLOAT.match(text[:-1]):
        return Pct(text[:-1])
    return text


def _typed(text: str, typ: str) -> Any:
    """Convert a printed value to its declared type; raises ValueError naming what was expected."""
    if typ == "int":
        if _INT.match(text):
            return int(text)
        raise ValueError("not a valid int")
    if typ == "float":
        if _FLOAT.match(text):
            return float(text)
        if text.lower() == "nan":
            return None
        raise ValueError("not a valid float")
    if typ == "bool":
        if text in ("True", "False"):
            return text == "True"
        raise ValueError("not True/False")
    if typ == "pct":
        num = text[:-1] if text.endswith("%") else text
        if _FLOAT.match(num):
            return Pct(num) if text.endswith("%") else float(num)
        if num.lower() == "nan":
            return "nan"
        raise ValueError("not a valid percentage")
    if typ == "float_list":
        try:
            return [float(x) for x in text.split(",")]
        except ValueError:
            raise ValueError("not a comma-separated list of numbers") from None
    return text


def _clean(line: str) -> str:
    line = line.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "\r" in line:
        # tqdm-style rewrites: the text after the last carriage return is what the terminal shows
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


def _split_prefix(prefix: str) -> tuple[str | None, str | None, dict[str, int], str | None] | None:
    """(timestamp, rank, ranks, process) from what precedes the message, or None if the prefix is
    not a log prefix (then the match is inside some other text, e.g. a traceback source line)."""
    process = None
    m = _DOCKER_TS.match(prefix)
    if m:
        prefix = prefix[m.end():]
    m = _RAY_TAG.match(prefix)
    if m:
        process = m.group(1)
        prefix = prefix[m.end():]
    m = _SGLANG_BRACKET.search(prefix)
    if m:
        tags = m.group(2).split()
        ranks = {}
        for tag in tags:
            t = _RANK_TAG.match(tag)
            if t:
                ranks[_RANK_NAMES.get(t.group(1), t.group(1).lower() + "_rank")] = int(t.group(2))
        return m.group(1), " ".join(tags), ranks, process
    if not prefix.strip():
        return None, None, {}, process
    m = None
    for m in _ANY_TS.finditer(prefix):
        pass
    if m:
        ts = f"{m.group(1)} {m.group(2)}" + (f".{m.group(3)}" if m.group(3) else "")
        return ts, None, {}, process
    if _LOGGING_PREFIX.match(prefix):
        return None, None, {}, process
    return None


def _parse_sglang_batch(line: str, m: re.Match, fmt: _formats.LineFormat) -> Record | Rejected | None:
    head = _split_prefix(line[:m.start()])
    if head is None:
        return None
    body = line[m.end():].rstrip()
    if body.endswith(","):
        body = body[:-1]
    first = body.split(": ", 1)[0]
    if normalize_key(first) != fmt.first_key:
        return None  # e.g. prose that happens to contain "Decode batch. "
    if "Decode batch" in body or "Prefill batch" in body:
        return Rejected(fmt.kind, "another log line is pasted into this one")
    fields: dict[str, Any] = {}
    last_key = None
    for frag in body.split(", "):
        key, sep, value = frag.partition(": ")
        if not sep:
            if last_key is not None and "=" in frag:
                # 0.4.9 SWA pools print `#token: full=N, swa=N`: the value itself contains ", "
                fields[last_key] = f"{fields[last_key]}, {frag}"
                continue
            return Rejected(fmt.kind, f"fragment {frag[:60]!r} is not 'key: value'", last_key)
        name = normalize_key(key)
        if name in fields:
            return Rejected(fmt.kind, f"duplicate key {key!r}", name)
        fields[name] = value.strip()
        last_key = name
    for name, text in fields.items():
        col = fmt.by_key.get(name)
        if col is not None and "=" not in text:
            try:
                fields[name] = _typed(text, col.type)
            except ValueError as exc:
                return Rejected(fmt.kind, f"{name}={text[:40]!r}: {exc}", name)
        else:
            fields[name] = _infer(text)
    missing = [r for r in fmt.required if r not in fields]
    if missing:
        return Rejected(fmt.kind, f"missing required field {missing[0]!r} (truncated line?)",
                        missing[0])
    if m.group(2) is not None:
        fields = {"forward_iter": int(m.group(2)), **fields}
    ts, rank, ranks, process = head
    return Record(fmt.kind, ts, rank if rank is not None else "", process, ranks, fields)


def _parse_vllm(line: str, at: int, anchor: str, fmt: _formats.LineFormat) -> Record | Rejected | None:
    prefix = line[:at]
    pm = _VLLM_PREFIX.match(prefix)
    if pm is None and prefix.strip():
        return None
    body = line[at + len(anchor):].strip()
    extra: dict[str, Any] = {}
    if fmt.kind == "vllm_throughput":
        # `Engine 000: ` / `2 Engines Aggregated: ` precede the anchor (which is a key itself)
        engine = prefix[pm.end():] if pm else prefix
        engine = engine.split("]", 1)[-1].strip().rstrip(":").strip()
        if engine:
            extra["engine"] = engine
        body = anchor + " " + body
    body = body.rstrip(".").rstrip().rstrip(",")
    fields: dict[str, Any] = dict(extra)
    for frag in _VLLM_SPLIT.split(body):
        key, sep, value = frag.partition(": ")
        if not sep:
            return Rejected(fmt.kind, f"fragment {frag[:60]!r} is not 'Key: value'")
        name = normalize_key(key)
        if name in fields:
            return Rejected(fmt.kind, f"duplicate key {key!r}", name)
        value = _UNIT_SUFFIX.sub("", value.strip())
        col = fmt.by_key.get(name)
        try:
            fields[name] = _typed(value, col.type) if col else _infer(value)
        except ValueError as exc:
            return Rejected(fmt.kind, f"{name}={value[:40]!r}: {exc}", name)
    missing = [r for r in fmt.required if r not in fields]
    if missing:
        return Rejected(fmt.kind, f"missing required field {missing[0]!r} (truncated line?)",
                        missing[0])
    ts = pm.group("ts") if pm else None
    proc = pm.group("proc") if pm else None
    return Record(fmt.kind, ts, None, proc, {}, fields)


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node)  # a non-literal repr such as an enum or a function: keep its text


_ANGLE = re.compile(r"<[^<>]*>")


def parse_server_args(text: str) -> dict[str, Any]:
    """`ServerArgs(a=1, ...)` (SGLang <= 0.5.18) or `{'a': 1, ...}` (0.5.19+) -> dict.

    Raises ValueError when the text is not one complete repr (e.g. a cut-off line)."""
    text = text.strip()
    try:
        tree = ast.parse(_ANGLE.sub(lambda m: repr(m.group(0)), text), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a complete ServerArgs(...) or dict repr ({exc.msg} at column "
                         f"{exc.offset})") from None
    if isinstance(tree, ast.Call):
        return {kw.arg: _literal(kw.value) for kw in tree.keywords if kw.arg}
    if isinstance(tree, ast.Dict):
        out = {}
        for k, v in zip(tree.keys, tree.values):
            if k is not None:
                out[str(_literal(k))] = _literal(v)
        return out
    raise ValueError("server_args is neither ServerArgs(...) nor a dict")


def _parse_server_args_line(line: str, at: int) -> Record | Rejected | None:
    head = _split_prefix(line[:at])
    if head is None:
        return None
    payload = line[at + len("server_args="):]
    if not (payload.startswith("ServerArgs(") or payload.startswith("{")):
        return None
    try:
        args = parse_server_args(payload)
    except ValueError as exc:
        return Rejected("server_args", str(exc))
    ts, rank, ranks, process = head
    return Record("server_args", ts, rank, process, ranks, args,
                  form="dict" if payload.startswith("{") else "repr")


def parse_line(line: str) -> Record | Rejected | None:
    """Parse one line (with or without its newline). None means: not a line specwatch stores."""
    i = line.find(" batch")
    if i >= 0:
        line = _clean(line)
        m = _BATCH_HEADER.search(line)
        if m:
            fmt = _DECODE if m.group(1) == "Decode" else _PREFILL
            return _parse_sglang_batch(line, m, fmt)
        return None
    i = line.find("server_args=")
    if i >= 0:
        line = _clean(line)
        return _parse_server_args_line(line, line.find("server_args="))
    if "metrics: " in line:
        line = _clean(line)
        for anchor in _SPEC.headers:
            i = line.find(anchor)
            if i >= 0:
                return _parse_vllm(line, i, anchor, _SPEC)
        return None
    i = line.find("Avg prompt throughput:")
    if i >= 0:
        line = _clean(line)
        return _parse_vllm(line, line.find("Avg prompt throughput:"), "Avg prompt throughput:", _TPUT)
    if READY_TEXT in line:
        line = _clean(line)
        head = _split_prefix(line[:line.find(READY_TEXT)])
        if head is not None:
            return Record("ready", head[0], head[1], head[3], head[2], {})
        return None
    for text, kind in EVENT_TEXTS:
        i = line.find(text)
        if i >= 0:
            line = _clean(line)
            i = line.find(text)
            head = _split_prefix(line[:i])
            if head is None:
                return None
            return Record(kind, head[0], head[1], head[3], head[2], {"message": line[i:][:2000]})
    return None


def check_samples(fmts: _formats.Formats) -> None:
    """Parse every declared sample and compare with its expectation; raise FormatError on drift."""
    problems = []
    for fmt in fmts.lines.values():
        for s in fmt.samples:
            got = parse_line(s.text)
            if not isinstance(got, Record) or got.kind != fmt.kind:
                problems.append(f"{fmt.kind} sample ({s.note}): parsed as {got!r}")
                continue
            d = got.as_dict()
            for k, want in s.expect.items():
                if k not in d or d[k] != want or type(d[k]) is bool and not isinstance(want, bool):
                    problems.append(f"{fmt.kind} sample ({s.note}): {k}={d.get(k, '<missing>')!r}, "
                                    f"expected {want!r}")
    for text in fmts.noise:
        got = parse_line(text)
        if isinstance(got, Rejected) or (isinstance(got, Record) and got.kind in METRIC_KINDS):
            problems.append(f"noise line parsed as {got!r}: {text[:80]!r}")
    for text, reason in fmts.malformed:
        got = parse_line(text)
        if not isinstance(got, Rejected) or reason not in got.reason:
            problems.append(f"malformed line should be rejected for {reason!r}, got {got!r}")
    if problems:
        raise _formats.FormatError(f"{_formats.FORMATS_FILE}: {len(problems)} sample(s) fail:\n  "
                                   + "\n  ".join(problems))


FORMATS = _formats.load()
_DECODE = FORMATS.lines["sglang_decode"]
_PREFILL = FORMATS.lines["sglang_prefill"]
_SPEC = FORMATS.lines["vllm_spec_decode"]
_TPUT = FORMATS.lines["vllm_throughput"]
check_samples(FORMATS)
