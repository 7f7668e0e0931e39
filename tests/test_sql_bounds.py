"""The read-only SQL sandbox's bounds (issue 26): a huge SQL text is refused before anything parses
it, and a user's SQL is parsed in the sandboxed child, not in the caller (the Streamlit server);
every DuckDB statement type, also one DuckDB's Python enum cannot name (`UPDATE EXTENSIONS`), is
allowed by rule or refused in one line; the numeric options of `specwatch sql` have ranges. Real
DuckDB files, the real `specwatch sql` process, real caller processes measured from outside."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import duckdb
import pytest

from specwatch.db import query
from tests.conftest import ROOT, run_cli


@pytest.fixture
def db(samples_db, tmp_path):
    path = tmp_path / "store.duckdb"
    shutil.copy(samples_db, path)
    return path


LONG = [  # (what, SQL of about n characters)
    ("a string literal", lambda n: "SELECT '" + "x" * n + "'"),
    ("a list", lambda n: "SELECT [" + ",".join(["1"] * (n // 2)) + "]"),
    ("nested parentheses", lambda n: "SELECT " + "(" * (n // 2) + "1" + ")" * (n // 2)),
    ("a comment", lambda n: "SELECT 1 -- " + "y" * n),
]

CALLER = """\
import json, sys, time
sys.path.insert(0, {root!r})
from specwatch.db import query


def kb(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))


sql = open({sql!r}).read()
open("/proc/self/clear_refs", "w").write("5")   # the peak (VmHWM) starts again from here
before = kb("VmRSS:")
t0 = time.monotonic()
try:
    query.run_sql({db!r}, sql, isolate={isolate})
    msg = "ran"
except query.QueryError as exc:
    msg = str(exc)
print(json.dumps({{"s": time.monotonic() - t0, "grew_mb": (kb("VmHWM:") - before) / 1024,
                  "msg": msg}}))
"""


def _caller(tmp_path, db, sql: str, isolate: bool) -> dict:
    """run_sql in a fresh process; its time, how much its peak memory grew, and the message."""
    (tmp_path / "q.sql").write_text(sql)
    script = tmp_path / "caller.py"
    script.write_text(CALLER.format(root=str(ROOT), db=str(db), sql=str(tmp_path / "q.sql"),
                                    isolate=isolate))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("what,make", LONG, ids=[x[0] for x in LONG])
@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "in process"])
def test_huge_sql_is_refused_before_it_is_parsed(db, tmp_path, what, make, isolate):
    """10 MB of SQL took 35 s and 5.3 GB in the caller; now one message, at once, costing nothing."""
    sql = make(10_000_000)
    got = _caller(tmp_path, db, sql, isolate)
    assert got["msg"].startswith(f"query is {len(sql):,} characters; at most 100,000 are parsed"), got
    assert got["s"] < 1.0 and got["grew_mb"] < 20, got


def test_the_length_limit_is_exact(db):
    at = "SELECT 1 AS one -- " + "z" * (query.MAX_SQL_CHARS - 19)
    assert len(at) == query.MAX_SQL_CHARS
    assert query.run_sql(db, at).rows == [(1,)]
    assert query.run_sql(db, at, isolate=True).rows == [(1,)]
    for isolate in (False, True):
        with pytest.raises(query.QueryError, match="query is 100,001 characters; at most 100,000"):
            query.run_sql(db, at + " ", isolate=isolate)


def test_the_cli_refuses_a_long_query_in_one_line(db):
    p = run_cli("sql", "SELECT '" + "x" * 120_000 + "'", "--db", db, check=False)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("Error: query is 120,009 characters; at most 100,000"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


PARSED = [  # just under the limit, each costs the parser ~80-170 MB
    ("nested parentheses", LONG[2][1]),
    ("a list with a syntax error after it", lambda n: LONG[1][1](n) + " FROM WHERE"),
    ("a list that runs", LONG[1][1]),
]


@pytest.mark.parametrize("what,make", PARSED, ids=[x[0] for x in PARSED])
def test_a_user_query_is_parsed_in_the_child_not_the_caller(db, tmp_path, what, make):
    """In the child, the caller's peak memory stays where it was; in process, the same text
    grows it (the control: what parsing costs)."""
    sql = make(query.MAX_SQL_CHARS - 1000)
    inside = _caller(tmp_path, db, sql, isolate=False)
    child = _caller(tmp_path, db, sql, isolate=True)
    assert inside["msg"] == child["msg"], (inside, child)   # the same answer either way
    assert inside["grew_mb"] > 50, inside                      # what parsing costs
    assert child["grew_mb"] < 15, child


# One statement of every type DuckDB's Python enum names (DuckDB 2.0), checked to parse as that
# type, and whether the sandbox runs it. Types no SQL text parses to in DuckDB 2.0:
NO_SQL_FORM = {"INVALID", "ANALYZE", "VARIABLE_SET", "CREATE_FUNC", "RELATION", "EXTENSION",
               "LOGICAL_PLAN"}
SAMPLES = {  # type: (SQL, runs)
    "SELECT": ("SUMMARIZE runs", True),
    "EXPLAIN": ("EXPLAIN ANALYZE SELECT count(*) FROM runs", True),
    "PRAGMA": ("PRAGMA version", True),
    "INSERT": ("INSERT INTO runs SELECT * FROM runs", False),
    "UPDATE": ("UPDATE runs SET run_name = 'x'", False),
    "CREATE": ("CREATE MACRO m(x) AS x + 1", False),
    "DELETE": ("TRUNCATE runs", False),
    "PREPARE": ("PREPARE p AS SELECT 1", False),
    "EXECUTE": ("EXECUTE p", False),
    "ALTER": ("COMMENT ON TABLE runs IS 'x'", False),
    "TRANSACTION": ("BEGIN TRANSACTION", False),
    "COPY": ("COPY runs TO '/tmp/specwatch-never.csv'", False),
    "DROP": ("DEALLOCATE p", False),
    "EXPORT": ("EXPORT DATABASE '/tmp/specwatch-never'", False),
    "VACUUM": ("ANALYZE runs", False),
    "CALL": ("CHECKPOINT", False),
    "SET": ("USE memory", False),
    "LOAD": ("INSTALL httpfs", False),
    "ATTACH": ("ATTACH ':memory:' AS m", False),
    "DETACH": ("DETACH m", False),
    "MULTI": ("PIVOT runs ON run_name USING count(*)", False),
    "COPY_DATABASE": ("COPY FROM DATABASE memory TO m (SCHEMA)", False),
    "MERGE_INTO": ("MERGE INTO runs USING runs r ON false WHEN MATCHED THEN DELETE", False),
}
# Parsed fine, but a type the Python enum cannot name: `.type` raised a ValueError traceback.
UNNAMED = ["UPDATE EXTENSIONS", "UPDATE EXTENSIONS (httpfs)", "EXPLAIN UPDATE EXTENSIONS",
           "/* c */ update extensions"]


def test_every_statement_type_has_a_sample():
    names = set(duckdb.StatementType.__members__)
    missing = names - NO_SQL_FORM - set(SAMPLES)
    assert not missing, (f"DuckDB {duckdb.__version__} has statement type(s) {sorted(missing)}: add "
                         "a sample to SAMPLES (the sandbox refuses them; check that it should)")
    for name, (sql, _) in SAMPLES.items():
        assert duckdb.extract_statements(sql)[0].type.name == name, sql


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_statement_type_runs_or_is_refused_in_one_line(db, name):
    sql, runs = SAMPLES[name]
    if runs:
        assert query.run_sql(db, sql).columns
        return
    with pytest.raises(query.QueryError) as err:
        query.run_sql(db, sql)
    first = sql.split()[0].upper()
    assert str(err.value).startswith(f"{first} statements are not allowed: specwatch sql is "
                                     "read-only"), str(err.value)


@pytest.mark.parametrize("sql", UNNAMED)
def test_a_type_the_python_enum_cannot_name_is_refused(db, sql):
    with pytest.raises(ValueError, match="is not a valid StatementType"):
        duckdb.extract_statements(sql.removeprefix("EXPLAIN "))[0].type
    with pytest.raises(query.QueryError) as err:
        query.run_sql(db, sql)
    first = "EXPLAIN" if sql.startswith("EXPLAIN") else "UPDATE"
    assert str(err.value).startswith(f"{first} statements are not allowed"), str(err.value)


def test_update_extensions_through_the_cli_is_one_line(db):
    p = run_cli("sql", "UPDATE EXTENSIONS", "--db", db, check=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip() == ("Error: UPDATE statements are not allowed: specwatch sql is "
                                "read-only and runs SELECT/WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN "
                                "or a read-only PRAGMA only (the store is written only by "
                                "ingest/tail/run-sweep)")


OPTIONS = [  # (option, value, the range it must name)
    ("--max-rows", "-1", "1<=x<=1000000"), ("--max-rows", "0", "1<=x<=1000000"),
    ("--max-rows", "1000001", "1<=x<=1000000"), ("--max-rows", "1e3", "not a valid integer"),
    ("--timeout", "nan", "0<x<=60"), ("--timeout", "inf", "0<x<=60"),
    ("--timeout", "-inf", "0<x<=60"), ("--timeout", "0", "0<x<=60"),
    ("--timeout", "61", "0<x<=60"), ("--memory-limit", "63", "64<=x<="),
    ("--memory-limit", "-1", "64<=x<="), ("--memory-limit", str(1 << 40), "64<=x<="),
]


@pytest.mark.parametrize("opt,value,words", OPTIONS, ids=[f"{o} {v}" for o, v, _ in OPTIONS])
def test_sql_options_out_of_range_are_refused(db, opt, value, words):
    p = run_cli("sql", "SELECT 1", "--db", db, opt, value, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"Invalid value for '{opt}'" in p.stderr and words in p.stderr, p.stderr
    assert "cut at" not in p.stderr


def test_the_library_refuses_what_the_cli_would(db):
    for kwargs, words in [({"max_rows": -1}, "row cap -1 is not in 1..1,000,000"),
                          ({"max_rows": 0}, "row cap 0"), ({"max_rows": True}, "row cap True"),
                          ({"timeout_s": float("nan")}, "timeout must be between 0 and 60"),
                          ({"timeout_s": float("inf")}, "timeout must be between 0 and 60"),
                          ({"memory_mb": 1, "isolate": True}, "memory limit 1 MB is not in 64..")]:
        with pytest.raises(query.QueryError, match=words.replace("(", r"\(")):
            query.run_sql(db, "SELECT 1", **kwargs)
    res = query.run_sql(db, "SELECT range FROM range(5)", max_rows=1, isolate=True)
    assert res.rows == [(0,)] and res.truncated
