"""Every numeric option of the CLI has a finite range (issue 26): NaN, infinities and values past
the range are refused by the real `specwatch` process with the option and the range named, before
anything starts (`specwatch sql`'s options: tests/test_sql_bounds.py)."""
from __future__ import annotations

import pytest

from tests.conftest import run_cli

CASES = [  # (command and its other arguments, option, value, the range it must name)
    (["tail", "x.log"], "--poll-interval", "nan", "0.01<=x<=60"),
    (["tail", "x.log"], "--poll-interval", "0", "0.01<=x<=60"),
    (["tail", "x.log"], "--poll-interval", "inf", "0.01<=x<=60"),
    (["tail", "x.log"], "--alert-accept-len", "nan", "0<=x<=1024"),
    (["tail", "x.log"], "--alert-accept-len", "-1", "0<=x<=1024"),
    (["tail", "x.log"], "--alert-windows", "0", "1<=x<=1000000"),
    (["tail", "x.log"], "--alert-windows", "10000000000", "1<=x<=1000000"),
    (["tail", "x.log"], "--alert-trend-windows", "1", "2<=x<=1000000"),
    (["tail", "x.log"], "--alert-trend-drop", "nan", "0<x<=1"),
    (["tail", "x.log"], "--alert-trend-drop", "1.5", "0<x<=1"),
    (["tail", "x.log"], "--alert-rank-gap", "inf", "0<x<=100"),
    (["tail", "x.log"], "--alert-rank-gap", "nan", "0<x<=100"),
    (["dashboard"], "--port", "0", "1<=x<=65535"),
    (["dashboard"], "--port", "65536", "1<=x<=65535"),
    (["dashboard"], "--port", "-80", "1<=x<=65535"),
]


@pytest.mark.parametrize("cmd,opt,value,words", CASES,
                         ids=[f"{c[0]} {o} {v}" for c, o, v, _ in CASES])
def test_numeric_options_out_of_range_are_refused(tmp_path, cmd, opt, value, words):
    p = run_cli(*cmd, "--db", tmp_path / "s.duckdb", opt, value, check=False, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"Invalid value for '{opt}'" in p.stderr and words in p.stderr, p.stderr
    assert not (tmp_path / "s.duckdb").exists()     # refused before anything started
