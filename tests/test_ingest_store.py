"""Ingest into a real DuckDB file: idempotency, growth, partial lines, bad input, the report."""
from __future__ import annotations

import gzip
import subprocess
import sys

import duckdb
import pytest

from conftest import ROOT, SAMPLES, run_cli
from specwatch.logs import ingest
from specwatch.db import query, store

LINE = ("[2026-02-26 14:09:{s:02d} TP0] Decode batch, #running-req: {r}, #token: 100, token usage: 0.01, "
        "accept len: {al:.2f}, accept rate: 0.50, cuda graph: True, gen throughput (token/s): {t:.2f}, "
        "#queue-req: 0\n")
ARGS = ("[2026-02-26 14:08:00] server_args=ServerArgs(model_path='/m', tp_size=1, dp_size=1, "
        "speculative_algorithm={alg}, speculative_num_steps=3, speculative_eagle_topk=1, "
        "speculative_num_draft_tokens=4, decode_log_interval=40)\n")


def count(db, table):
    with store.reader(db) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_reingest_stores_nothing_twice_and_growth_continues(tmp_path, db):
    log = tmp_path / "s.log"
    log.write_text(ARGS.format(alg="'EAGLE3'") + "".join(LINE.format(s=i, r=4, al=2.0, t=100.0) for i in range(5)))
    ingest.ingest_paths(db, [str(log)])
    ingest.ingest_paths(db, [str(log)])
    assert count(db, "decode_windows") == 5 and count(db, "server_configs") == 1
    with open(log, "a") as f:
        f.write(LINE.format(s=10, r=4, al=3.0, t=100.0))
        f.write(LINE.format(s=11, r=4, al=3.0, t=100.0)[:50])  # partial last line
    res = ingest.ingest_paths(db, [str(log)])
    assert res[0].lines == 1 and count(db, "decode_windows") == 6
    with open(log, "a") as f:
        f.write(LINE.format(s=11, r=4, al=3.0, t=100.0)[50:])
    ingest.ingest_paths(db, [str(log)])
    with store.reader(db) as con:
        rows = con.execute("SELECT line_no, accept_len FROM decode_windows ORDER BY line_no").fetchall()
    assert rows == [(2, 2.0), (3, 2.0), (4, 2.0), (5, 2.0), (6, 2.0), (7, 3.0), (8, 3.0)]


def test_every_row_records_its_source_and_offset(tmp_path, db):
    log = tmp_path / "s.log"
    text = "noise line\n" + LINE.format(s=1, r=2, al=2.0, t=5.0)
    log.write_text(text)
    ingest.ingest_paths(db, [str(log)])
    with store.reader(db) as con:
        sid, off, ln = con.execute("SELECT source_id, byte_offset, line_no FROM decode_windows").fetchone()
        path = con.execute("SELECT path FROM sources WHERE source_id = ?", [sid]).fetchone()[0]
    assert (off, ln) == (len("noise line\n"), 2) and path == str(log)


def test_copied_file_is_recognised_as_the_same_source(tmp_path, db):
    a = tmp_path / "a.log"
    a.write_text("".join(LINE.format(s=i, r=1, al=2.0, t=5.0) for i in range(30)))
    ingest.ingest_paths(db, [str(a)], run="r")
    (tmp_path / "copy.log").write_bytes(a.read_bytes())
    ingest.ingest_paths(db, [str(tmp_path / "copy.log")], run="r")
    assert count(db, "decode_windows") == 30 and count(db, "sources") == 1


def test_report_weights_windows_and_drops_the_first(tmp_path, db):
    spec, base = tmp_path / "spec.log", tmp_path / "base.log"
    # windows (running_req, accept_len): the first is dropped as warm-up contaminated
    spec.write_text(ARGS.format(alg="'EAGLE3'") + LINE.format(s=0, r=1, al=1.0, t=1.0)
                    + LINE.format(s=1, r=3, al=3.0, t=300.0) + LINE.format(s=2, r=1, al=2.0, t=100.0))
    base.write_text(ARGS.format(alg="None") + LINE.format(s=0, r=1, al=0, t=1.0).replace("accept len: 0.00, accept rate: 0.50, ", "")
                    + LINE.format(s=1, r=4, al=0, t=100.0).replace("accept len: 0.00, accept rate: 0.50, ", ""))
    ingest.ingest_paths(db, [str(spec), str(base)])
    rows = {r["run_name"]: r for r in query.report(db).dicts()}
    s, b = rows["spec.log"], rows["base.log"]
    assert s["windows"] == 2 and s["accept_len"] == pytest.approx((3 * 3.0 + 1 * 2.0) / 4)
    assert s["accept_rate"] == pytest.approx((2.75 - 1) / 3)
    assert s["gen_throughput_tok_s"] == pytest.approx(200.0)
    assert b["accept_len"] is None and b["speculative_algorithm"] is None
    assert s["baseline_run_id"] == "base.log" and s["speedup_gen"] == pytest.approx(2.0)


def test_dp_ranks_are_summed(samples_db):
    r = query.report(samples_db, run="sglang-0.5.9-dp2-tp8-eagle3.log").dicts()[0]
    with store.reader(samples_db) as con:
        per_rank = con.execute(
            "SELECT dp_rank, avg(gen_throughput_tok_s) FROM decode_windows_scoped "
            "WHERE run_id = 'sglang-0.5.9-dp2-tp8-eagle3.log' AND NOT after_idle GROUP BY 1").fetchall()
    assert len(per_rank) == 2
    assert r["gen_throughput_tok_s"] == pytest.approx(sum(v for _, v in per_rank))


def test_sample_report_flags_the_collapsed_config(samples_db):
    rows = {r["run_name"]: r for r in query.report(samples_db).dicts()}
    bad = rows["sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log"]
    good = rows["sglang-0.5.23-llama8b-eagle3-s3k1.log"]
    assert bad["accept_len"] < 1.2 < 2.7 < good["accept_len"]
    assert bad["speedup_gen"] < 1.0 < good["speedup_gen"]
    # accept rate is recomputed comparably across versions: (AL-1)/(draft_tokens-1)
    old = rows["sglang-0.5.4-iter-eagle3.log"]
    assert old["accept_rate"] == pytest.approx((old["accept_len"] - 1) / 3)
    assert old["accept_rate_printed"] == pytest.approx(old["accept_len"] / 4, abs=0.01)
    v = rows["vllm-0.11-eagle3.log"]
    assert 2.5 < v["accept_len"] < 3.2 and 0.5 < v["accept_rate"] < 0.7


def test_rejected_lines_are_stored_with_reason(samples_db):
    with store.reader(samples_db) as con:
        rows = con.execute("SELECT line_no, field, reason FROM rejected_lines "
                           "WHERE path LIKE '%garbage.log' ORDER BY line_no").fetchall()
    assert [r[0] for r in rows] == [3, 7, 8]   # line 6 holds two glued records: both stored
    assert rows[1][1] == "accept_len"


def test_cli_bad_input_names_the_file_and_never_tracebacks(tmp_path, db):
    p = run_cli("ingest", tmp_path / "nope.log", "--db", db, check=False)
    assert p.returncode == 1 and "nope.log: no such file or directory" in p.stderr
    assert "Traceback" not in p.stderr
    d = tmp_path / "mixed"
    d.mkdir()
    (d / "bin.dat").write_bytes(bytes(range(256)) * 10)
    (d / "ok.log").write_text(LINE.format(s=1, r=1, al=2.0, t=1.0))
    p = run_cli("ingest", d, "--db", db, check=False)
    assert p.returncode == 0, p.stderr
    assert "bin.dat:1: NUL bytes skipped (binary data" in p.stderr and "Traceback" not in p.stderr
    assert "ok.log: 1 new lines, 1 rows stored" in p.stdout
    p = run_cli("parse", SAMPLES / "garbage.log", check=False)
    assert p.returncode == 0 and "garbage.log:2: invalid UTF-8" in p.stderr
    p = run_cli("parse", tmp_path / "missing.log", check=False)
    assert p.returncode == 1 and "missing.log" in p.stderr and "Traceback" not in p.stderr


def test_sql_is_read_only_capped_and_says_when_cut(samples_db):
    p = run_cli("sql", "SELECT * FROM decode_windows", "--db", samples_db, "--max-rows", "5",
                "--format", "csv")
    assert len(p.stdout.strip().splitlines()) == 6 and "cut at 5 rows" in p.stderr
    p = run_cli("sql", "DELETE FROM runs", "--db", samples_db, check=False)
    assert p.returncode == 1 and "read-only" in p.stderr
    with pytest.raises(query.QueryError, match="longer than"):
        query.run_sql(samples_db, "SELECT sum(a.range % 7) FROM range(10000000000000) a", timeout_s=0.5)
    p = run_cli("sql", "SELECT 1", "--db", samples_db.parent / "nope.duckdb", check=False)
    assert p.returncode == 1 and "no such database" in p.stderr


def test_report_json_and_store_readable_by_plain_duckdb(samples_db):
    import json
    p = run_cli("report", "--db", samples_db, "--format", "json")
    rows = json.loads(p.stdout)["runs"]       # per run; "configs" pools repeats (test_stats.py)
    assert {r["run_name"] for r in rows} >= {"sglang-0.5.23-llama8b-baseline.log", "vllm-0.11-eagle3.log"}
    con = duckdb.connect(str(samples_db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM config_summary").fetchone()[0] == len(rows)
    finally:
        con.close()


def test_two_logs_that_start_alike_stay_apart(tmp_path, db):
    # Two servers started in the same second with the same config write the same first KB.
    head = ARGS.format(alg="'EAGLE3'") * 6
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(head + "".join(LINE.format(s=i, r=1, al=2.0, t=5.0) for i in range(10)))
    b.write_text(head + "".join(LINE.format(s=i, r=2, al=3.0, t=7.0) for i in range(12)))
    ingest.ingest_paths(db, [str(a)], run="a")
    ingest.ingest_paths(db, [str(b)], run="b")
    assert count(db, "sources") == 2 and count(db, "decode_windows") == 22
    rows = {r["run_name"]: r for r in query.report(db).dicts()}
    assert rows["a"]["accept_len"] == pytest.approx(2.0) and rows["b"]["accept_len"] == pytest.approx(3.0)


def test_old_database_gains_new_columns(tmp_path, db):
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE sources (source_id VARCHAR PRIMARY KEY, path VARCHAR)")
    con.execute("CREATE TABLE specwatch_meta (schema_version INTEGER)")
    con.execute("INSERT INTO specwatch_meta VALUES (1)")
    con.close()
    log = tmp_path / "s.log"
    log.write_text(LINE.format(s=1, r=1, al=2.0, t=5.0))
    ingest.ingest_paths(db, [str(log)])
    assert count(db, "decode_windows") == 1


def test_copy_truncate_between_read_and_commit_still_continues_in_the_copy(tmp_path, db, monkeypatch):
    # logrotate copytruncate can run after ingest read a chunk and before it commits: the hash of the
    # last consumed bytes must come from what was read, or the copy would not continue the source.
    log, copy = tmp_path / "server.log", tmp_path / "server.log.1"
    log.write_text("".join(LINE.format(s=i % 60, r=1, al=2.0, t=5.0) for i in range(50)))
    real = ingest.parse_chunk

    def rotate_after_parse(*args, **kwargs):
        real(*args, **kwargs)
        copy.write_bytes(log.read_bytes())
        with open(log, "w") as f:  # truncate and go on writing other lines
            f.write("".join(LINE.format(s=i % 60, r=9, al=3.0, t=1.0) for i in range(80)))

    monkeypatch.setattr(ingest, "parse_chunk", rotate_after_parse)
    ing = ingest.FileIngestor(db, log, "r")
    ing.poll()
    ing.close()
    monkeypatch.setattr(ingest, "parse_chunk", real)
    assert count(db, "decode_windows") == 50
    ingest.ingest_paths(db, [str(copy)], run="r")
    assert count(db, "decode_windows") == 50 and count(db, "sources") == 1


def _pipe(db, data: bytes, *args) -> subprocess.CompletedProcess:
    """`... | specwatch ingest - --db DB ARGS` as a real process with `data` on its stdin."""
    return subprocess.run([sys.executable, "-m", "specwatch.cli", "ingest", "-", "--db", str(db),
                           *args], cwd=ROOT, input=data, capture_output=True, timeout=120)


def test_a_log_piped_into_ingest_dash_is_stored_once_as_stdin(tmp_path):
    db = tmp_path / "s.duckdb"
    log = (SAMPLES / "sglang-0.5.23-llama8b-eagle3-s3k1.log").read_bytes()
    p = _pipe(db, log)
    assert p.returncode == 0, p.stderr
    n = log.count(b"\n")
    assert f"<stdin>: {n} new lines".encode() in p.stdout
    again = _pipe(db, log)          # the same log piped again: nothing twice
    assert b"<stdin>: 0 new lines, 0 rows stored" in again.stdout
    vllm = (SAMPLES / "vllm-0.11-eagle3.log").read_bytes()
    assert _pipe(db, gzip.compress(vllm), "--run", "v").returncode == 0   # compressed, named
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT r.run_id, s.path FROM run_sources r JOIN sources s "
                           "USING (source_id) ORDER BY 1").fetchall() == [
            ("stdin", "<stdin>"), ("v", "<stdin>")]
        plain = tmp_path / "plain.duckdb"
        (tmp_path / "a.log").write_bytes(log)
        run_cli("ingest", tmp_path / "a.log", "--db", plain)
        with duckdb.connect(str(plain), read_only=True) as ref:
            q = "SELECT byte_offset, accept_len FROM decode_windows ORDER BY byte_offset"
            assert con.execute(q.replace("ORDER", "WHERE source_id IN (SELECT source_id FROM "
                                         "run_sources WHERE run_id = 'stdin') ORDER")
                               ).fetchall() == ref.execute(q).fetchall()
    empty = _pipe(db, b"")
    assert empty.returncode == 1 and b"<stdin>" in empty.stderr and b"Traceback" not in empty.stderr
    twice = subprocess.run([sys.executable, "-m", "specwatch.cli", "ingest", "-", "-", "--db",
                            str(db)], cwd=ROOT, input=b"", capture_output=True, timeout=60)
    assert twice.returncode == 2 and b"can be given once" in twice.stderr
