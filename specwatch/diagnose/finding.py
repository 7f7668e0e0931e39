"""What doctor says: a finding (run, code, severity, numbers, the stored rows behind it, next
step) and its two renderings, text for the terminal and a JSON-ready dict.

Not here: loading the store (context), the checks (auxids, speed, serving), exit codes (cli).
"""
from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import asdict, dataclass

MAX_EVIDENCE_ROWS = 5
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)


class Ref:
    """One stored row behind a finding: a log line (table, file, line_no, byte_offset) or a request."""

    table: str
    file: str | None = None
    line_no: int | None = None
    byte_offset: int | None = None
    run_id: str | None = None
    note: str | None = None


@dataclass(frozen=True)


class Evidence:
    numbers: dict                       # name -> stored (or, for the probe, measured) value
    rows: tuple[Ref, ...] = ()


@dataclass(frozen=True)


class Finding:
    run_id: str
    run: str                            # run name
    code: str
    severity: str                       # error | warning | info
    title: str
    evidence: Evidence
    suggestion: str
    config_offset: int | None = None    # which server_args line of the run (NULL: the run's config)


def _spec_label(row: dict) -> str:
    parts = [row["speculative_algorithm"] or "?"]
    for k, tag in (("speculative_num_steps", "s"), ("speculative_eagle_topk", "k"),
                   ("speculative_num_draft_tokens", "d"), ("concurrency", "c")):
        if row[k] is not None:
            parts.append(f"{tag}{row[k]}")
    return " ".join(parts)


def format_number(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat(sep=" ")
    return json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v)


def render_text(findings: list[Finding], checked: list[dict]) -> str:
    out, by_run = [], {}
    for f in findings:
        by_run.setdefault((f.run, f.config_offset), []).append(f)
    for row in checked:
        fs = by_run.get((row["run_name"], row["config_offset"]), [])
        if not fs:
            continue
        out.append(f"run {row['run_name']} ({_spec_label(row)})")
        for f in fs:
            out.append(f"  {f.severity.upper()} {f.code}: {f.title}")
            out.append("    numbers: " + ", ".join(f"{k}={format_number(v)}" for k, v in f.evidence.numbers.items()
                                                   if v is not None))
            for r in f.evidence.rows:
                where = (f"{r.file}:{r.line_no}" if r.line_no is not None else (r.file or "")) + \
                        (f" (byte {r.byte_offset})" if r.byte_offset is not None else "")
                out.append(f"    - {r.table} {where or r.run_id}{': ' + r.note if r.note else ''}")
            out.append(f"    next: {f.suggestion}")
    flagged = {(f.run_id) for f in findings if f.severity != "info"}
    clean = [r["run_name"] for r in checked if r["run_id"] not in flagged]
    n = {s: sum(f.severity == s for f in findings) for s in SEVERITY_ORDER}
    out.append(f"{len(checked)} speculative config(s) checked: {n['error']} error(s), "
               f"{n['warning']} warning(s), {n['info']} note(s)"
               + (f"; no problems found in: {', '.join(dict.fromkeys(clean))}" if clean else ""))
    return "\n".join(out)


def to_json(findings: list[Finding], checked: list[dict]) -> dict:
    return {"checked_runs": list(dict.fromkeys(r["run_name"] for r in checked)),
            "findings": [asdict(f) for f in findings]}
