"""The `specwatch` command keeps pyarrow from importing pandas (specwatch/startup.py, issue 28),
while pyarrow's explicit pandas APIs still work in that process. Real processes, a real log, a real
DuckDB file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parents[1]
LOG = REPO / "sample_logs" / "sglang-0.5.23-llama8b-eagle3-s3k1.log"

# runs the command's own entry point, then reports what the process holds
_PROBE = """
import json, sys
from specwatch.cli import main
sys.argv = ["specwatch", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
after = "pandas" in sys.modules
import pyarrow as pa
df = pa.table({"x": [1, 2]}).to_pandas()        # explicit API: imports pandas now
import pandas as pd
back = pa.table(pd.DataFrame({"y": [3.5]}))     # and pyarrow knows pandas from then on
ser = pa.array(pd.Series([4, 5]))
print(json.dumps({"code": code, "pandas_after_command": after, "df": df["x"].tolist(),
                  "back": back.column("y").to_pylist(), "series": ser.to_pylist()}))
"""


def _run(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_ingest_does_not_import_pandas_and_stores_the_rows(tmp_path):
    db = tmp_path / "runs.duckdb"
    got = _run("ingest", str(LOG), "--db", str(db))
    assert got["code"] in (0, None)
    assert got["pandas_after_command"] is False
    assert got["df"] == [1, 2] and got["back"] == [3.5] and got["series"] == [4, 5]
    decode_lines = sum(1 for line in LOG.read_text().splitlines() if "Decode batch" in line)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM decode_windows").fetchone()[0] == decode_lines > 0


@pytest.mark.parametrize("cmd", [["report"], ["doctor"]])
def test_read_commands_do_not_import_pandas(tmp_path, cmd):
    db = tmp_path / "runs.duckdb"
    _run("ingest", str(LOG), "--db", str(db))
    got = _run(*cmd, "--db", str(db))
    assert got["pandas_after_command"] is False


def test_a_process_that_loaded_pandas_first_is_left_alone():
    code = ("import pandas, pyarrow as pa, sys\n"
            "from specwatch import startup\n"
            "startup.skip_pandas_probe()\n"
            "t = pa.table(pandas.DataFrame({'z': [7]}))\n"
            "print(t.column('z').to_pylist(), type(t).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[7]", "Table"]


# the command's entry point under exit handlers and a finalizer of the caller's, which must all
# still run once the command has kept the collector off what lives until exit
_EXIT_PROBE = """
import atexit, gc, json, sys
out = sys.argv[1]
frozen_before = gc.get_freeze_count()

class Finalized:
    def __del__(self, open=open, out=out):   # freed by reference count as modules are cleared
        with open(out + ".del", "w") as f:
            f.write("ran")

KEEP = Finalized()

def at_exit():   # registered before the command: runs after everything it registered
    with open(out, "w") as f:
        json.dump({"frozen_before": frozen_before, "frozen_at_exit": gc.get_freeze_count(),
                   "unreachable_left": gc.collect()}, f)

atexit.register(at_exit)
from specwatch.cli import main
sys.argv = ["specwatch", *sys.argv[2:]]
main()
"""


def test_the_command_spares_the_collector_and_still_runs_exit_handlers(tmp_path):
    db, out = tmp_path / "runs.duckdb", tmp_path / "exit.json"
    proc = subprocess.run([sys.executable, "-c", _EXIT_PROBE, str(out), "ingest", str(LOG), "--db",
                           str(db)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "rows stored" in proc.stdout
    got = json.loads(out.read_text())
    assert got["frozen_before"] == 0
    # what the imports made, and at exit what the command left, is out of the collections
    assert got["frozen_at_exit"] > 10_000
    assert (tmp_path / "exit.json.del").read_text() == "ran"
    with duckdb.connect(str(db), read_only=True) as con:   # the store is whole after that exit
        assert con.execute("SELECT count(*) FROM decode_windows").fetchone()[0] > 0
