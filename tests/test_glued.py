"""Records glued on one physical line (a paste whose newlines were lost, a terminal or web view
that joined lines) are each stored as if the newlines were there: with the values the record has
on a line of its own, at its own byte offset, with the physical line's number (specwatch/logs/
glued.py). Through the real ingest into real DuckDB files, with the C scanner and with the Python
parser alone (SPECWATCH_NO_FASTSCAN=1); both store the same rows. Lookalikes (prose, code, config
JSON, a server_args line, noise glued between two records) store no metric row.

Cases are built from classes (tests/capture_cases.py bases of every kind and era, and the
declared samples of formats/lines.toml that start with a log prefix), each under a capture class
(none, docker compose, swarm, kubectl, journald, CRI, Python logging), 2 to 5 records a line,
glued with nothing, one space, spaces or a tab.
"""
from __future__ import annotations

import json
import random
import sys

import pytest

from conftest import ROOT, drain
from specwatch.db import store
from specwatch.logs import fastscan, glued, ingest, parse, prefix

sys.path.insert(0, str(ROOT / "tests"))
import capture_cases as cc  # noqa: E402

TABLES = ["decode_windows", "prefill_windows", "vllm_spec_windows", "vllm_throughput_windows",
          "server_configs", "events", "rejected_lines"]
METRIC_TABLES = TABLES[:4]
fast_only = pytest.mark.skipif(not fastscan.available(), reason="C accelerator not built")
CAPTURES = ("plain", "compose", "compose_timestamps", "swarm", "kubectl", "journald", "cri",
            "pylogging")
SEPS = ["", " ", "\t", "   ", " \t "]


def _declared() -> list[cc.Base]:
    """lines.toml's metric samples that start with a log prefix (a record start of their own)."""
    out = []
    for fmt in parse.FORMATS.lines.values():
        if fmt.kind not in parse.METRIC_KINDS:
            continue
        for s in fmt.samples:
            m = glued._HEADER.search(s.text)
            p = m and parse.message_prefix(s.text, m.start(), m.group(0))
            if p and p.known and (p.timestamp or p.process) and not p.line_prefix and not p.outer_ts \
                    and p.quoted is None and "`" not in s.text and s.text == s.text.rstrip("*"):
                out.append(cc.Base(fmt.kind, "", s.text, dict(s.expect), sglang=False))
    return out


DECLARED = _declared()


def _record(rng: random.Random, cls: str) -> cc.Case:
    """A metric record: the generated bases, and (but under a logging format) lines.toml's
    prefixed samples."""
    return cc.case_of(rng, cls, lambda: [b for b in cc.bases(rng) if b.kind in parse.METRIC_KINDS]
                      + (DECLARED if cls != "pylogging" else []))


def glued_lines(seed: int, n: int) -> list[tuple[str, list[tuple[int, cc.Case]]]]:
    """`n` lines of 2-5 records each: (line, [(character offset of the record, its case)])."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cls = CAPTURES[i % len(CAPTURES)]
        recs = [_record(rng, cls) for _ in range(rng.randint(2, 5))]
        if rng.random() < 0.15:   # text of no known shape before the first record (a quote, a list)
            p = rng.choice(["> ", "* ", "1. ", "Output: ", "$ "])
            recs[0] = cc.Case("unknown", p + recs[0].line, recs[0].base, {}, recs[0].own_replaced)
        line, at = "", []
        for j, c in enumerate(recs):
            if j:
                # nothing between two records only where no capture name could take the last
                # digits of a value (`...: 12.5svc-1  | ` reads two ways: such a line is not cut)
                seps = SEPS if not c.line[0].isalnum() else SEPS[1:]
                line += rng.choice(seps)
            at.append((len(line), c))
            line += c.line
        out.append((line, at))
    return out


def expected(case: cc.Case) -> dict:
    """The printed values of a capture_cases base (a declared sample's are lines.toml's own,
    checked when loaded; here it must store as it does on a line of its own) and the capture
    parts."""
    exp = {} if any(case.base is b for b in DECLARED) else dict(case.base.expect)
    if case.own_replaced:
        for k in ("timestamp", "rank", "dp_rank", "tp_rank"):
            exp.pop(k, None)
    exp.update(case.parts)
    return exp


def _write(path, lines) -> list[int]:
    data = [t.encode("utf-8") for t in lines]
    path.write_bytes(b"\n".join(data) + b"\n")
    starts, off = [], 0
    for d in data:
        starts.append(off)
        off += len(d) + 1
    return starts


def _dump(db) -> dict[str, dict[tuple[int, int], dict]]:
    out = {}
    with store.reader(db) as con:
        for t in TABLES:
            cur = con.execute(f"SELECT * EXCLUDE (source_id) FROM {t} ORDER BY byte_offset")
            cols = [d[0] for d in cur.description]
            out[t] = {(r[cols.index("line_no")], r[cols.index("byte_offset")]): dict(zip(cols, r))
                      for r in cur.fetchall()}
    return out


def _ingest(tmp_path, log, monkeypatch, python_only: bool, name: str):
    db = tmp_path / f"{name}-{int(python_only)}.duckdb"
    if python_only:
        monkeypatch.setenv("SPECWATCH_NO_FASTSCAN", "1")
    try:
        ingest.ingest_paths(db, [str(log)], run="r")
    finally:
        monkeypatch.delenv("SPECWATCH_NO_FASTSCAN", raising=False)
    return _dump(db)


_COL = {"accept_len": "accept_len", "running_req": "running_req", "queue_req": "queue_req",
        "token": "kv_tokens", "full_token": "kv_tokens", "mamba_num": "mamba_num",
        "new_token": "new_tokens", "accepted": "accepted_tokens", "drafted": "drafted_tokens",
        "running": "running_reqs", "gpu_kv_cache_usage": "gpu_kv_cache_usage_pct",
        "timestamp": "ts_text", "rank": "rank", "outer_ts": "outer_ts_text", "process": "process",
        "engine": "engine", **{c: c for c in prefix.CAPTURE_COLUMNS.values()}}


def _parts(row: dict) -> dict:
    cap = row.get("capture")
    return {**row, **json.loads(cap)} if cap is not None else row


def _mismatches(row: dict, exp: dict) -> list:
    row = _parts(row)
    return [(col, row.get(col), v) for k, v in exp.items() if (col := _COL.get(k)) is not None
            and ((row.get(col) is not None) if v is None else row.get(col) != v)]


def _same_but_place(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in ("byte_offset", "line_no")} == \
        {k: v for k, v in b.items() if k not in ("byte_offset", "line_no")}


@pytest.mark.parametrize("seed", [1, 2])
def test_glued_records_are_each_stored_as_on_lines_of_their_own(tmp_path, monkeypatch, seed):
    lines = glued_lines(seed, 120)
    log, alone = tmp_path / "glued.log", tmp_path / "alone.log"
    starts = _write(log, [t for t, _ in lines])
    _write(alone, [c.line for _, at in lines for _, c in at])
    want = {}   # (line_no, byte_offset) -> (case, its line number in alone.log)
    n_alone = 0
    for i, (text, at) in enumerate(lines):
        for ch, c in at:
            n_alone += 1
            want[i + 1, starts[i] + len(text[:ch].encode("utf-8"))] = (c, n_alone)
    ref = _ingest(tmp_path, alone, monkeypatch, False, "alone")
    ref_rows = {n: (t, row) for t in METRIC_TABLES for (n, _), row in ref[t].items()}
    assert len(ref_rows) == n_alone   # every record stores on a line of its own
    paths = [_ingest(tmp_path, log, monkeypatch, py, "glued")
             for py in ([False, True] if fastscan.available() else [True])]
    for got in paths:
        assert got == paths[0]   # both ingest paths: the same rows, column for column
        assert not got["rejected_lines"], list(got["rejected_lines"].values())[:2]
        wrong = []
        for key, (c, n) in want.items():
            table, ref_row = ref_rows[n]
            row = got[table].get(key)
            if row is None:
                wrong.append((key, c.cls, "not stored", lines[key[0] - 1][0][:200]))
            elif not _same_but_place(row, ref_row) or (bad := _mismatches(row, expected(c))):
                wrong.append((key, c.cls, [(k, row.get(k), ref_row.get(k)) for k in row if k
                                           not in ("byte_offset", "line_no")
                                           and row.get(k) != ref_row.get(k)] or bad))
        assert not wrong, wrong[:3]
        stored = {k for t in METRIC_TABLES for k in got[t]}
        assert stored == set(want)
    assert len(want) >= 350 and len({c.cls for c, _ in want.values()}) == len(CAPTURES) + 1


def _lookalikes(rng: random.Random) -> tuple[list[str], list[str], list[str]]:
    """(store nothing, store no metric row, not cut at all) lines built from real records."""
    nothing, no_metric, uncut = [], [], []
    for _ in range(40):
        r1, r2 = (_record(rng, "plain").line for _ in range(2))
        ts = cc._ts(rng)[0]
        nothing += [f'The log says "{r1}" and then "{r2}"', f"compare {r1} with {r2}",
                    f"before: {r1} after: {r2}",
                    f'  File "/srv/sglang/srt/x.py", line {rng.randint(1, 999)}, in f: {r1} {r2}',
                    json.dumps({"log_prefix": r1, "other": r2}),
                    f'    logger.info(f"{r1}" + f"{r2}")']
        # (a record of no metric kind glued between two metric records, `{r1}, [ts TP0] Cache
        # flushed: 3, {r2}`, is cut into its records: tests/test_glued_mixed.py)
        no_metric += [f"[{ts}] server_args=ServerArgs(model_path='/m', note='{r1} {r2}', tp_size=1)"]
        uncut += [f"| 1 | `{r1}` | `{r2}` |", f"`{r1}` and `{r2}`", f"{r1} `{r2}`"]
    return nothing, no_metric, uncut


def check_lookalikes(tmp_path, monkeypatch, nothing: list[str], config: list[str],
                     uncut: list[str], rejected_ok: bool = False) -> None:
    """No line is cut; on both ingest paths the `nothing` lines store no row of any table (but
    rejected lines where `rejected_ok`: a quoted record found incomplete), and the `config` lines
    (server_args holding glued-looking text) one server_args row each; no metric row, no event."""
    assert all(glued.split(t) is None for t in nothing + config + uncut)
    log = tmp_path / "look.log"
    _write(log, nothing + config)
    for py in [False, True] if fastscan.available() else [True]:
        got = _ingest(tmp_path, log, monkeypatch, py, "look")
        assert not [k for t in METRIC_TABLES for k in got[t]], "metric rows from lookalikes"
        kept = [t for t in TABLES if not (rejected_ok and t == "rejected_lines")]
        assert not [k for t in kept for k in got[t] if k[0] <= len(nothing)]
        assert not got["events"] and len(got["server_configs"]) == len(config)
        assert all(r["config_kind"] == "server_args" for r in got["server_configs"].values())


def test_lookalikes_store_no_metric_row(tmp_path, monkeypatch):
    check_lookalikes(tmp_path, monkeypatch, *_lookalikes(random.Random(9)))


def test_a_glued_record_cut_by_a_wrap_is_joined_and_every_record_stays_once(tmp_path, monkeypatch):
    # the last record of a glued line hard-wrapped onto the next line (a terminal's width): the
    # reassembler holds it (at its own offset inside the line) and joins the continuation
    rng = random.Random(4)
    lines, want = [], []
    for _ in range(30):
        r = [_record(rng, "plain").line for _ in range(3)]
        cut = r[2].index(", ", len(r[2]) // 2) + 2
        lines += [f"{r[0]} {r[1]} {r[2][:cut]}", r[2][cut:]]
        want.append(r)
    log = tmp_path / "wrapped.log"
    starts = _write(log, lines)
    results = [_ingest(tmp_path, log, monkeypatch, py, "w") for py in (False, True)]
    assert results[0] == results[1]
    got = {k for t in METRIC_TABLES for k in results[0][t]}
    exp = set()
    for i, r in enumerate(want):
        n = 2 * i + 1
        exp |= {(n, starts[n - 1]), (n, starts[n - 1] + len(r[0]) + 1),
                (n, starts[n - 1] + len(r[0]) + len(r[1]) + 2)}
    assert got == exp and not results[0]["rejected_lines"]


def test_chunk_ends_and_a_follower_store_each_glued_record_once(tmp_path):
    # a chunk or a poll that ends after a glued line holds its last record at an offset inside
    # the line and reads on from there: the rows are those of one whole read
    lines = [t for t, _ in glued_lines(7, 60)]
    log = tmp_path / "g.log"
    _write(log, lines)
    whole, small = tmp_path / "whole.duckdb", tmp_path / "small.duckdb"
    ingest.ingest_paths(whole, [str(log)], run="r")
    drain(small, log, chunk_bytes=4096, overlap=True)
    assert _dump(whole) == _dump(small)
    follow = tmp_path / "follow.log"
    fdb = tmp_path / "follow.duckdb"
    ing = ingest.FileIngestor(fdb, follow, "r", hold_at_eof=True)
    with open(follow, "wb") as f:
        for t in lines[:30]:
            f.write(t.encode() + b"\n")
            f.flush()
            ing.poll()
        f.write(b"\n".join(t.encode() for t in lines[30:]) + b"\n")
    ing.poll()
    ing.close()
    ing = ingest.FileIngestor(fdb, follow, "r")   # a one-shot read stores what was held
    ing.poll()
    ing.close()
    assert _dump(fdb) == _dump(whole)
