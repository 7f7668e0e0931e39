"""A config whose runs were only interrupted (Ctrl-C, SIGTERM, a stopped Ray worker) is
`interrupted`, not `failed`: its own verdict in config_stats and the report, and its own list
after run-sweep ("interrupted configs (re-run to measure): ..."). A real DuckDB file, the real
CLI; the run-sweep listing itself is checked in test_sweep_e2e's Ctrl-C test."""
from __future__ import annotations

import datetime as dt

from conftest import run_cli
from specwatch.db import query, store
from specwatch.run import sweep, sweepfile

T0 = dt.datetime(2026, 11, 20, 10, 0, 0)
SWEEP = """\
name = "cut"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
concurrency = [1]
[workload]
prompts = "builtin:chat"
num_prompts = 2
output_tokens = 4
""" + "".join(f"""
[[config]]
name = "{n}"
speculative_num_steps = {k}
speculative_eagle_topk = 1
""" for k, n in enumerate(("cut", "broken", "mixed", "fine"), start=2))


def _run(con, config, rep, status, tok_s=None, reason=None):
    spec = config != "baseline"
    store.upsert_run(con, dict(
        run_id=f"cut/{config}/c1/r{rep}", run_name=f"{config}/c1/r{rep}", origin="sweep",
        sweep_name="cut", config_name=config, concurrency=1, repeat_idx=rep, status=status,
        failure_reason=reason, model_path="builtin:target", tp_size=1, dp_size=1,
        is_baseline=not spec, speculative_algorithm="EAGLE3" if spec else None,
        speculative_num_steps=2 if spec else None, speculative_eagle_topk=1 if spec else None,
        speculative_num_draft_tokens=3 if spec else None, output_tok_s=tok_s, created_at=T0))


def test_interrupted_config_is_its_own_verdict_and_list(db, tmp_path):
    (tmp_path / "cut.toml").write_text(SWEEP)
    s = sweepfile.load(tmp_path / "cut.toml")
    stop = "interrupted (Ctrl-C or SIGTERM) before this run"
    with store.writer(db) as con:
        for rep in (0, 1):
            _run(con, "baseline", rep, "ok", 100.0 + rep)
            _run(con, "fine", rep, "ok", 150.0 + rep)
            _run(con, "cut", rep, "interrupted", reason=stop)
        _run(con, "broken", 0, "failed", reason="server exited with code 1 before it was ready")
        _run(con, "broken", 1, "interrupted", reason=stop)
        _run(con, "mixed", 0, "ok", 140.0)
        _run(con, "mixed", 1, "interrupted", reason=stop)
    st = {r["config"]: r for r in query.run_sql(db, "SELECT * FROM config_stats").dicts()}
    assert st["cut"]["verdict"] == "interrupted" and st["cut"]["runs_interrupted"] == 2
    assert st["cut"]["verdict_reason"].startswith("every run was interrupted")
    # one real failure among the interruptions: failed, with its cause
    assert st["broken"]["verdict"] == "failed"
    assert "server exited with code 1" in st["broken"]["verdict_reason"]
    # something was measured: judged on what was (one repeat: no interval)
    assert st["mixed"]["verdict"] == "unclear" and st["mixed"]["repeats"] == 1
    assert st["fine"]["verdict"] in ("pays", "unclear", "loses")
    assert sweep.failed_configs(str(db), s) == ["broken"]
    assert sweep.interrupted_configs(str(db), s) == ["cut", "mixed"]
    out = run_cli("report", "--db", db).stdout
    cut = next(line for line in out.splitlines() if line.startswith("cut "))
    assert cut.rstrip().endswith("interrupted"), out
    broken = next(line for line in out.splitlines() if line.startswith("broken "))
    assert broken.rstrip().endswith("failed"), out
