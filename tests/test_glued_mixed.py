"""A metric record and records of no metric kind glued on one physical line (a paste that lost its
newlines: `..., #queue-req: 0, [ts TP0] Cache flushed: 3`, vllm-project/vllm#5697's throughput
record followed by `ERROR ... Engine iteration timed out...`): the line is cut where a record
start follows a complete message (specwatch/logs/glued.py), and every piece is stored as a line of
its own would be: the metric record with exactly its own values (its `fields` holding only its
own keys), an event or readiness record as the event, anything else skipped as noise. Through the
real ingest into real DuckDB files, with the C scanner and with the Python parser alone; both
store the same rows. Lookalikes (a prompt or a config string quoting records, prose, code,
tables) store no metric row.

Cases are built from classes: metric bases of every kind and era (tests/capture_cases.py and
lines.toml's prefixed samples, as tests/test_glued.py) and records of no metric kind of SGLang,
vLLM (V0 `LEVEL mm-dd hh:mm:ss file.py:N]`, V1 `(Proc pid=N) LEVEL ... [file.py:N]`) and uvicorn,
each under the same capture class (none, docker compose, swarm, kubectl, journald, CRI, Python
logging), in every order (metric first, last, between), glued with nothing, spaces or a tab.
"""
from __future__ import annotations

import json
import random
import sys

from conftest import ROOT
from specwatch.logs import fastscan, parse

sys.path.insert(0, str(ROOT / "tests"))
import capture_cases as cc  # noqa: E402
from test_glued import (CAPTURES, METRIC_TABLES, TABLES, _ingest, check_lookalikes,  # noqa: E402
                        _mismatches, _record, _same_but_place, _write, expected)


def _md_hms(rng: random.Random) -> str:
    return f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:" \
           f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"


def _other(rng: random.Random) -> list[cc.Base]:
    """Records of no metric kind, as the servers print them: (kind "noise": stores nothing on a
    line of its own; "event": an event/readiness row)."""
    ts, md, pid = cc._ts(rng)[0], _md_hms(rng), rng.randint(2, 99999)
    tp, port = rng.randint(0, 7), rng.randint(1024, 65535)
    proc = rng.choice(["APIServer", "EngineCore_DP0", "VllmWorker rank=0"])
    proc = proc if " " not in proc else "VllmWorker"
    lvl = rng.choice(["INFO", "WARNING", "ERROR"])
    return [
        cc.Base("noise", f"[{ts} TP{tp}] ", f"Cache flushed: {rng.randint(0, 9)}", {}),
        cc.Base("noise", f"[{ts}] ", f'INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" '
                f"200 OK", {}),
        cc.Base("event", f"[{ts}] ", parse.READY_TEXT, {}),
        cc.Base("event", f"[{ts} TP{tp}] ", "KV cache pool is full. Retract requests. "
                f"#retracted_reqs: {rng.randint(1, 9)}, #new_token_ratio: 0.{rng.randint(1, 9)}",
                {}),
        cc.Base("noise", f"[{ts} TP{tp}] ", f"Load weight end. type=LlamaForCausalLM, "
                f"avail mem={rng.randint(1, 70)}.{rng.randint(10, 99)} GB", {}),
        cc.Base("noise", f"ERROR {md} async_llm_engine.py:{rng.randint(30, 900)}] ",
                "Engine iteration timed out. This should never happen!", {}, sglang=False),
        cc.Base("noise", f"WARNING {md} scheduler.py:{rng.randint(30, 1500)}] ",
                f"Sequence group {rng.randint(0, 99)} is preempted by PreemptionMode.RECOMPUTE mode "
                "because there is not enough KV cache space.", {}, sglang=False),
        cc.Base("noise", f"({proc} pid={pid}) {lvl} {md} [core.py:{rng.randint(30, 900)}] ",
                f"Model loading took {rng.randint(1, 80)}.{rng.randint(0, 9)} GiB and "
                f"{rng.randint(1, 99)}.{rng.randint(0, 99)} seconds", {}, sglang=False),
        cc.Base("noise", f"(APIServer pid={pid}) ", f'INFO:     10.0.0.{rng.randint(1, 254)}:'
                f'{port} - "GET /metrics HTTP/1.1" 200 OK', {}, sglang=False),
        cc.Base("event", f"({proc} pid={pid}) ERROR {md} [core.py:{rng.randint(30, 900)}] ",
                "ValueError: the scheduler hit an exception", {}, sglang=False),
    ]


def _other_case(rng: random.Random, cls: str) -> cc.Case:
    return cc.case_of(rng, cls, lambda: _other(rng))


ORDERS = ["MN", "MNN", "NM", "NNM", "MNM", "NMN", "MMN", "NMM", "NMNM", "MNNM"]


def mixed_lines(seed: int, n: int) -> list[tuple[str, list[cc.Case]]]:
    """`n` lines of metric (M) and other (N) records glued in the orders above."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cls = CAPTURES[i % len(CAPTURES)]
        order = ORDERS[(i // len(CAPTURES)) % len(ORDERS)]
        recs = [_record(rng, cls) if o == "M" else _other_case(rng, cls) for o in order]
        line = ""
        for j, c in enumerate(recs):
            if j:
                line += rng.choice(["", " ", "\t", "   "] if c.line[0] in "[(" else [" ", "  ", "\t"])
            line += c.line
        out.append((line, recs))
    return out


def _leading(recs: list[cc.Case]) -> bool:
    """A record of no metric kind before the first metric record, under a capture class."""
    return recs[0].base.kind in ("noise", "event") and recs[0].cls != "plain"


def _both(tmp_path, monkeypatch, lines):
    log = tmp_path / "mixed.log"
    _write(log, [t for t, _ in lines])
    return [_ingest(tmp_path, log, monkeypatch, py, "mixed")
            for py in ([False, True] if fastscan.available() else [True])]


def _on_lines(got: dict, keep) -> dict:
    return {t: {k: r for k, r in rows.items() if keep(k[0])} for t, rows in got.items()}


def test_metric_and_other_records_glued_are_each_stored_as_on_lines_of_their_own(tmp_path,
                                                                                  monkeypatch):
    lines = mixed_lines(11, 240)
    alone = tmp_path / "alone.log"
    _write(alone, [c.line for _, recs in lines for c in recs])
    ref = _ingest(tmp_path, alone, monkeypatch, False, "alone")
    assert not ref["rejected_lines"]
    by_line = {n: (t, row) for t in TABLES for (n, _), row in ref[t].items()}
    paths = _both(tmp_path, monkeypatch, lines)
    if len(paths) == 2:
        # both ingest paths store the same rows, column for column
        assert _on_lines(paths[0], lambda n: True) == _on_lines(paths[1], lambda n: True)
        paths = paths[1:]
    n_metric = n_event = 0
    for got in paths:
        assert not got["rejected_lines"], list(got["rejected_lines"].values())[:2]
        on_line: dict[int, list] = {}
        for t in TABLES:
            for (ln, off), r in got[t].items():
                on_line.setdefault(ln, []).append((off, t, r))
        wrong, k = [], 0
        for i, (text, recs) in enumerate(lines):
            want = []
            for c in recs:
                k += 1
                if c.base.kind == "noise":
                    assert k not in by_line, (c.line, by_line[k])
                else:
                    assert k in by_line, c.line
                    want.append((c, *by_line[k]))
            rows = sorted(on_line.get(i + 1, []), key=lambda x: x[0])
            if [t for _, t, _ in rows] != [t for _, t, _ in want]:
                wrong.append((i + 1, [t for _, t, _ in rows], [t for _, t, _ in want], text[:300]))
                continue
            for (_, table, row), (c, _, ref_row) in zip(rows, want):
                if not _same_but_place(row, ref_row):
                    wrong.append((i + 1, c.cls, table, {x: (row.get(x), ref_row.get(x)) for x in
                                                        row if row.get(x) != ref_row.get(x)}))
                elif table in METRIC_TABLES:
                    n_metric += 1
                    if (bad := _mismatches(row, expected(c))):
                        wrong.append((i + 1, c.cls, bad))
                else:
                    n_event += 1
        assert not wrong, wrong[:3]
        assert sum(len(v) for v in on_line.values()) == sum(len(got[t]) for t in TABLES)
    assert n_metric >= 300 and n_event >= 40


def test_both_paths_equal_where_another_record_comes_first_under_a_capture_prefix(tmp_path,
                                                                                  monkeypatch):
    lines = [(t, recs) for t, recs in mixed_lines(11, 240) if _leading(recs)]
    assert len(lines) >= 60
    c_path, py_path = _both(tmp_path, monkeypatch, lines)
    assert c_path == py_path


def test_issue_examples(tmp_path, monkeypatch):
    # the two examples of the brief: the decode record keeps only its own fields; vllm#5697's
    # throughput record (text of no known shape before it) is stored, the ERROR lines are noise
    ex = ["[2026-01-02 10:00:00 TP0] Decode batch, #running-req: 3, #token: 812, token usage: "
          "0.01, gen throughput (token/s): 97.20, #queue-req: 0, [2026-01-02 10:00:01 TP0] Cache "
          "flushed: 3",
          "[Bug]: INFO 06-19 11:23:59 metrics.py:341] Avg prompt throughput: 3526.1 tokens/s, Avg "
          "generation throughput: 115.2 tokens/s, Running: 8 reqs, Swapped: 0 reqs, Pending: 0 "
          "reqs, GPU KV cache usage: 0.9%, CPU KV cache usage: 0.0%. ERROR 06-19 11:25:01 "
          "async_llm_engine.py:535] Engine iteration timed out. This should never happen! ERROR "
          "06-19 11:25:01 async_llm_engine.py:52] Engine background task failed"]
    log = tmp_path / "ex.log"
    _write(log, ex)
    for py in ([False, True] if fastscan.available() else [True]):
        got = _ingest(tmp_path, log, monkeypatch, py, "ex")
        (d,) = got["decode_windows"].values()
        assert (d["running_req"], d["kv_tokens"], d["queue_req"]) == (3, 812, 0)
        assert all("flushed" not in str(v) for v in d.values())
        (t,) = got["vllm_throughput_windows"].values()
        assert (t["ts_text"], t["running_reqs"], t["gpu_kv_cache_usage_pct"]) == \
            ("06-19 11:23:59", 8, 0.9)
        assert not got["rejected_lines"] and not got["events"]


def _lookalikes(rng: random.Random) -> tuple[list[str], list[str]]:
    """(store no metric row, and no event either; a config line: its config row only; quoted: a
    table cell or inline code, read whole as one quoted record as before, never cut) lines
    quoting metric and other records together."""
    none, config, quoted = [], [], []
    for _ in range(30):
        m, o = _record(rng, "plain").line, _other_case(rng, "plain").line
        ts, md, pid = cc._ts(rng)[0], _md_hms(rng), rng.randint(2, 9999)
        none += [
            # vLLM logs a request's prompt: a pasted log in it is quoted text
            f"(APIServer pid={pid}) INFO {md} [logger.py:39] Received request cmpl-{pid}: "
            f"prompt: '{o} {m}', params: SamplingParams(n=1)",
            f"(APIServer pid={pid}) INFO {md} [logger.py:39] Received request cmpl-{pid}: "
            f"prompt: '{m} {o}', params: SamplingParams(n=1)",
            f'[{ts}] logger.info("{o} {m}")',
            f"[{ts}] User wrote: \"{m}\" then {o}",
            f'The log says "{o}" and then "{m}"',
            f'  File "/srv/sglang/srt/x.py", line {rng.randint(1, 999)}, in f: {o} {m}',
            json.dumps({"a": o, "b": m}),
        ]
        quoted += [f"| {rng.randint(1, 9)} | {o} | {m} |", f"`{o}` and `{m}`", f"{m} `{o}`",
                   f"`{o} {m}`"]
        config.append(f"[{ts}] server_args=ServerArgs(model_path='/m', note='{o} {m}', tp_size=1)")
    return none, config, quoted


def test_lookalikes_of_mixed_lines_store_no_metric_row(tmp_path, monkeypatch):
    check_lookalikes(tmp_path, monkeypatch, *_lookalikes(random.Random(5)), rejected_ok=True)
