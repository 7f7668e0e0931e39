"""Issue 28: a metric line is found by its message wherever the capture path puts it.

Cases come from classes (docker compose, swarm, kubectl --prefix, journald, Python logging formats,
grep, pasted file references, markdown, docker JSON, the JSON records of log shippers, cloud
exports and JSON logging formatters, CRI, stacked and unknown prefixes) with several random
variants each (tests/capture_cases.py, seeded); every expected value is the one the line was
printed with. Property: any printable prefix (no newline, no record header of its own) before a
valid line keeps the line's values exact, through the Python parser and the C scanner and into a
real DuckDB file. Lookalikes (prose, code, tables, tracebacks and JSON quoting a metric) store
nothing.
"""
from __future__ import annotations

import json
import random
import sys

import duckdb
import pytest

from conftest import ROOT
from specwatch.db import schema, store
from specwatch.logs import fastscan, glued, ingest, parse, prefix

sys.path.insert(0, str(ROOT / "tests"))
import capture_cases as cc  # noqa: E402

TABLES = ["decode_windows", "prefill_windows", "vllm_spec_windows", "vllm_throughput_windows",
          "server_configs", "events", "rejected_lines"]
fast_only = pytest.mark.skipif(not fastscan.available(), reason="C accelerator not built")


def expected(case: cc.Case) -> dict:
    exp = dict(case.base.expect)
    if case.own_replaced:   # a Python logging format printed its own prefix instead
        for k in ("timestamp", "rank", "dp_rank", "tp_rank"):
            exp.pop(k, None)
    exp.update(case.parts)
    return exp


def mismatches(rec, exp: dict) -> list:
    d = rec.as_dict() if isinstance(rec, parse.Record) else {}
    return [(k, d.get(k, "<missing>"), v) for k, v in exp.items()
            if (d.get(k) is not None if v is None else d.get(k, "<missing>") != v)]


@pytest.mark.parametrize("cls", cc.CLASSES)
def test_every_capture_class_and_variant_parses_exact(cls):
    cases = [c for c in cc.cases(seed=28, variants=5) if c.cls == cls]
    assert len(cases) >= 25 and len({c.line for c in cases}) == len(cases)
    wrong = []
    for c in cases:
        rec = parse.parse_line(c.line)
        if not isinstance(rec, parse.Record) or rec.kind != c.base.kind:
            wrong.append((c.line[:160], rec))
        elif (bad := mismatches(rec, expected(c))):
            wrong.append((c.line[:160], bad))
    assert not wrong, wrong[:3]


def test_lookalikes_are_noise():
    lines = cc.lookalikes(seed=7, n=3000) + [
        "| Decode batch | #running-req | #token | token usage | accept len | gen throughput (token/s) |",
        "| --- | --- | --- |", "see the `SpecDecoding metrics: Mean acceptance length` line",
        "Using auxiliary layers from speculative config: see the draft's config.json"]
    stored = [(t, r) for t in lines if (r := parse.parse_line(t)) is not None]
    assert not stored, stored[:3]
    # a bare message cut after its header is a truncated record (rejected, never a row)
    for t in ("Decode batch", "Prefill batch. #new-seq", "SpecDecoding metrics:"):
        assert isinstance(parse.parse_line(t), parse.Rejected)


def test_known_prefix_broken_message_is_rejected_unknown_is_noise():
    cut = ("[2026-11-20 10:00:00 TP0] Decode batch, #running-req: 24, #token: 30112, token usage: "
           "0.14, accept len: 3.2")
    for p in ("sglang-1  | ", "[pod/sglang-0/server] ", "Nov 20 10:00:00 h sglang[7]: ",
              "server.log:12:", "@runs/server.log "):
        got = parse.parse_line(p + cut)
        assert isinstance(got, parse.Rejected) and got.incomplete and got.line_prefix == p
    for p in ("> ", "the line ", "Q: "):
        assert parse.parse_line(p + cut) is None


def test_glued_records_after_unknown_text_are_no_one_record_but_cut_apart_each():
    # parse_line reads one record: two glued ones are none of it; ingest cuts such a line apart
    # first (glued.split, tests/test_glued.py) when the second starts with a log prefix
    rng = random.Random(3)
    for b in cc.bases(rng):
        if b.kind in parse.METRIC_KINDS:
            assert parse.parse_line(">> " + b.text + b.text) is None, b.kind
            pieces = glued.split(">> " + b.text + b.text)
            assert [p.start for p in pieces] == [0, len(b.text) + 3], b.kind
            assert all(mismatches(p.result, b.expect) == [] for p in pieces), b.kind


def test_a_capture_prefix_never_changes_what_the_scanner_or_parser_sees():
    # the prefix shape kinds: a docker timestamp, a CRI stream, a process tag, or none, after any
    # capture prefix; parts come from the prefix, the message's values are the line's own
    assert fastscan.capture_parts("sglang-1  | ", 0)["service"] == "sglang-1"
    assert fastscan.capture_parts("INFO ", 0) is None         # Python reads a level there
    assert fastscan.capture_parts("x Decode batch y ", 0) is None
    assert fastscan.capture_parts("Nov 20 10:00:00 h u[1]: ", 0)["outer_ts_text"] == "Nov 20 10:00:00"
    # two capture timestamps: Python reads the journald text as text of no known shape; so does
    # the scanner's row
    assert fastscan.capture_parts("Nov 20 10:00:00 h u[1]: ", 1) == {
        "line_prefix": "Nov 20 10:00:00 h u[1]: "}


def _write(path, lines):
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))


def _dump(db) -> dict[str, dict[int, dict]]:
    out = {}
    with store.reader(db) as con:
        for t in TABLES:
            cur = con.execute(f"SELECT * EXCLUDE (source_id) FROM {t} ORDER BY line_no")
            cols = [d[0] for d in cur.description]
            out[t] = {r[cols.index("line_no")]: _parts(dict(zip(cols, r))) for r in cur.fetchall()}
    return out


def _parts(row: dict) -> dict:
    """A stored row with its `capture` JSON object's parts beside its columns."""
    cap = row.get("capture")
    return {**row, **json.loads(cap)} if cap is not None else row


def _both(tmp_path, log, monkeypatch):
    fast, slow = tmp_path / "fast.duckdb", tmp_path / "slow.duckdb"
    ingest.ingest_paths(fast, [str(log)], run="r")
    monkeypatch.setenv("SPECWATCH_NO_FASTSCAN", "1")
    ingest.ingest_paths(slow, [str(log)], run="r")
    monkeypatch.delenv("SPECWATCH_NO_FASTSCAN")
    return _dump(fast), _dump(slow)


_COL = {  # the expected key -> (its store column, how the store holds it)
    "accept_len": "accept_len", "running_req": "running_req", "queue_req": "queue_req",
    "token": "kv_tokens", "full_token": "kv_tokens", "mamba_num": "mamba_num",
    "mamba_usage": "mamba_usage_frac", "new_token": "new_tokens", "accepted": "accepted_tokens",
    "drafted": "drafted_tokens", "running": "running_reqs", "gpu_kv_cache_usage":
    "gpu_kv_cache_usage_pct", "cpu_kv_cache_usage": "gpu_kv_cache_usage_pct",
    "xpu_kv_cache_usage": "gpu_kv_cache_usage_pct", "timestamp": "ts_text", "rank": "rank",
    "outer_ts": "outer_ts_text", "process": "process", "engine": "engine",
    "speculative_num_steps": "speculative_num_steps",
    **{c: c for c in prefix.CAPTURE_COLUMNS.values()},   # line_prefix, or a part of `capture`
}


def _stored_mismatches(row: dict, exp: dict, kind: str) -> list:
    bad = []
    for k, v in exp.items():
        col = _COL.get(k)
        if k == "aux_layer_ids":
            col, v = "aux_layer_ids", json.dumps(v)
        if col is None or col not in row:
            continue
        if (row[col] is not None) if v is None else row[col] != v:
            bad.append((col, row[col], v))
    return bad


@fast_only
def test_every_class_through_both_ingest_paths_into_duckdb(tmp_path, monkeypatch):
    rng = random.Random(5)
    cases = cc.cases(seed=11, variants=3)
    looks = cc.lookalikes(seed=12, n=400)
    lines, want = [], {}
    for c in cases:  # shuffled with the lookalikes: every neighbour kind meets every other
        lines.append(c)
    lines += looks
    rng.shuffle(lines)
    text = []
    for i, x in enumerate(lines, 1):
        if isinstance(x, cc.Case):
            want[i] = x
            text.append(x.line)
        else:
            text.append(x)
    log = tmp_path / "captured.log"
    _write(log, text)
    fast, slow = _both(tmp_path, log, monkeypatch)
    for t in TABLES:
        assert fast[t] == slow[t], t
    table = {**schema.KIND_TABLE}
    wrong = []
    for n, c in want.items():
        row = fast[table[c.base.kind]].get(n)
        if row is None:
            wrong.append((n, c.cls, c.base.kind, "not stored",
                          next((r["reason"] for r in [fast["rejected_lines"].get(n)] if r), None)))
        elif (bad := _stored_mismatches(row, expected(c), c.base.kind)):
            wrong.append((n, c.cls, bad))
    assert not wrong, wrong[:5]
    others = {n for t in TABLES for n in fast[t]} - set(want)
    assert not others, [text[n - 1] for n in sorted(others)][:5]   # lookalikes: nothing stored
    # the scanner took the prefixed SGLang lines itself (not all handed back to Python)
    sr = fastscan.scan(log.read_bytes(), 0, 0)
    taken = fastscan.resolve_capture(sr.decode)[0]
    assert sum(1 for v in taken["line_prefix"].to_pylist() if v) >= 5


def _property_lines(seed: int, n: int):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        base = rng.choice(cc.bases(rng))
        p = cc.random_prefix(rng)
        if parse._ANY_HEADER.search(p + base.own[:1]):
            continue  # holds a record header itself: a pasted line, not a prefix
        out.append((p, base))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_property_any_printable_prefix_keeps_the_values_python(seed):
    wrong = []
    for p, base in _property_lines(seed, 1500):
        rec = parse.parse_line(p + base.text)
        if not isinstance(rec, parse.Record) or rec.kind != base.kind:
            wrong.append((p, base.kind, rec))
            continue
        if (bad := mismatches(rec, base.expect)):
            wrong.append((p, bad))
        lp = rec.capture.get("line_prefix")
        if not p.startswith(lp or "") or (not p.strip(" ") and lp):
            wrong.append((p, "line_prefix", lp))
    assert not wrong, wrong[:5]


@fast_only
@pytest.mark.parametrize("seed", [4, 5])
def test_property_any_printable_prefix_keeps_the_values_in_duckdb(tmp_path, monkeypatch, seed):
    pl = _property_lines(seed, 2500)
    log = tmp_path / "prop.log"
    _write(log, [p + b.text for p, b in pl])
    fast, slow = _both(tmp_path, log, monkeypatch)
    for t in TABLES:
        assert fast[t] == slow[t], t
    wrong = []
    for n, (p, b) in enumerate(pl, 1):
        row = fast[schema.KIND_TABLE[b.kind]].get(n)
        if row is None:
            wrong.append((n, repr(p), b.kind, "not stored"))
        elif (bad := _stored_mismatches(row, b.expect, b.kind)):
            wrong.append((n, repr(p), bad))
        elif not p.startswith(row["line_prefix"] or ""):
            wrong.append((n, repr(p), row["line_prefix"]))
    assert not wrong, wrong[:5]
    sr = fastscan.scan(log.read_bytes(), 0, 0)
    assert len(fastscan.resolve_capture(sr.decode)[0]["byte_offset"]) > 80


@fast_only
def test_the_scanner_takes_sglang_lines_after_any_ascii_prefix_itself(tmp_path, monkeypatch):
    """The same rule natively: canonical SGLang lines after random printable ASCII prefixes are
    taken by the C scanner (the prefix read once by Python per distinct text), not handed back."""
    rng = random.Random(6)
    ascii_ = [c for c in cc.PRINTABLE if c.isascii() and c != "`"]
    lines, plain = [], 0
    for _ in range(3000):
        b = rng.choice([x for x in cc.bases(rng)[:4] if "est uncap" not in x.message])
        p = "".join(rng.choice(ascii_) for _ in range(rng.choice([0, 3, 8, 20])))
        if parse._ANY_HEADER.search(p):
            continue
        lines.append(p + b.text)
    log = tmp_path / "ascii.log"
    _write(log, lines)
    sr = fastscan.scan(log.read_bytes(), 0, 0)
    d, bd = fastscan.resolve_capture(sr.decode)
    p_, bp = fastscan.resolve_capture(sr.prefill)
    taken = len(d["byte_offset"]) + len(p_["byte_offset"])
    assert taken > 0.9 * len(lines), (taken, len(bd), len(bp), len(sr.slow_lines))
    fast, slow = _both(tmp_path, log, monkeypatch)
    for t in TABLES:
        assert fast[t] == slow[t], t
    assert len(fast["decode_windows"]) + len(fast["prefill_windows"]) == len(lines)


def test_compose_pieces_of_a_long_config_line_are_rejoined(tmp_path):
    """docker splits a message longer than 16 KiB; compose prints each piece with its prefix."""
    cfg = (ROOT / "tests/data/real_server_args/sglang-0.5.23-dict-eagle3.txt").read_text().strip()
    k = 16 * 1024
    pieces = ["sglang-1  | " + cfg[i:i + k] for i in range(0, len(cfg), k)]
    assert len(pieces) == 2
    dec = cc.bases(random.Random(1))[0]
    log = tmp_path / "compose.log"
    _write(log, pieces + ["sglang-1  | " + dec.text])
    db = tmp_path / "c.duckdb"
    ingest.ingest_paths(db, [str(log)], run="r")
    rows = _dump(db)
    assert list(rows["server_configs"]) == [1] and not rows["rejected_lines"]
    row = rows["server_configs"][1]
    assert row["service"] == "sglang-1" and json.loads(row["args"]) == parse.parse_line(cfg).fields
    assert list(rows["decode_windows"]) == [3]


def test_a_follower_stores_what_one_ingest_stores_on_a_growing_prefixed_log(tmp_path):
    """tail's path (FileIngestor holding at EOF) on a log written in random pieces, cut anywhere."""
    rng = random.Random(9)
    data = ("\n".join(c.line for c in cc.cases(seed=13, variants=2)) + "\n").encode()
    whole, grown = tmp_path / "whole.log", tmp_path / "grown.log"
    whole.write_bytes(data)
    ingest.ingest_paths(tmp_path / "a.duckdb", [str(whole)], run="r")
    ing = ingest.FileIngestor(tmp_path / "b.duckdb", grown, "r", chunk_bytes=16384,
                               hold_at_eof=True)
    at = 0
    with open(grown, "wb") as f:
        while at < len(data):
            step = rng.randint(500, 12000)
            f.write(data[at:at + step])
            f.flush()
            at += step
            ing.poll()
    ingest.HOLD_QUIET_S, quiet = 0.0, ingest.HOLD_QUIET_S
    try:
        while ing.poll().lines:
            pass
        ing.poll()
    finally:
        ingest.HOLD_QUIET_S = quiet
        ing.close()
    a, b = _dump(tmp_path / "a.duckdb"), _dump(tmp_path / "b.duckdb")
    for t in TABLES:
        assert a[t] == b[t], t
    assert sum(len(a[t]) for t in TABLES) > 200


def test_an_old_database_gets_the_values_in_their_columns(tmp_path):
    """A database made before these columns existed gains them last (ALTER ADD): inserts go by
    name, so no value lands in its neighbour's column."""
    db = tmp_path / "old.duckdb"
    new = {"line_prefix", "capture", "mamba_num", "mamba_usage_frac", "kv_cache_device",
           "aux_layer_ids", "aux_layers_source", "outer_ts_text", "process"}
    con = duckdb.connect(str(db))
    for t in schema.TABLES:
        cols = [(n, s) for n, s in schema.columns(schema.TABLES[t])
                if not (n in new and t in ("decode_windows", "prefill_windows", "server_configs",
                                           "vllm_spec_windows", "vllm_throughput_windows"))]
        con.execute(f"CREATE TABLE {t} ({', '.join(f'{n} {s}' for n, s in cols)})")
    con.execute("CREATE TABLE specwatch_meta (schema_version INTEGER)")
    con.execute("INSERT INTO specwatch_meta VALUES (18)")
    con.close()
    b = cc.bases(random.Random(2))[0]
    log = tmp_path / "s.log"
    _write(log, ["sglang-1  | " + b.text, "sglang-1  | " + b.text])
    ingest.ingest_paths(db, [str(log)])
    row = _dump(db)["decode_windows"][1]
    assert row["accept_len"] == b.expect["accept_len"] and row["service"] == "sglang-1"
    assert row["running_req"] == b.expect["running_req"] and row["ts_text"] == b.expect["timestamp"]


@pytest.mark.parametrize("capture", ["sglang-1  | ", "[pod/sglang-0/server] ", "logs/server.log:90:",
                                     "server.log:7:", "12:", "Nov 20 10:00:00 gpu-7 sglang[81]: ",
                                     "@c:\\runs\\server.txt "])
@pytest.mark.parametrize("exc", ["TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'",
                                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                                 "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm"])
def test_a_traceback_last_line_after_a_capture_prefix_is_the_same_event(capture, exc):
    """A server's fatal exception reads the same after any known capture prefix, grep's
    `FILE:N:` glued to the name included."""
    bare = parse.parse_line(exc)
    got = parse.parse_line(capture + exc)
    assert isinstance(got, parse.Record) and got.kind == bare.kind == "exception"
    assert got.fields == bare.fields == {"message": exc}
    assert got.capture.get("line_prefix") == capture
