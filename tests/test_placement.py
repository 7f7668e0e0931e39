"""GPU placement (issue 11): a config occupies tp*pp*dp GPUs (tp*pp with DP attention), `--gpus`
hands each config that many ids, never the same id to two servers at once, and the runs table
records which ids each run had. Real sweep, real built-in engine servers (pinned to the CPU with
`--device cpu`: this box has no GPU, the ids are still handed out and exported)."""
from __future__ import annotations

import io
import json
from pathlib import Path

import duckdb

from specwatch.run import launch, sweep, sweepfile

SWEEP = """\
name = "place"
engine = "builtin"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "4", "--device", "cpu"]
concurrency = [1]
stop_grace_s = 5
env = {OMP_NUM_THREADS = "1"}

[workload]
prompts = "builtin:chat"
num_prompts = 2
warmup_requests = 0
output_tokens = 4

[[config]]
name = "dp2"
speculative_num_steps = 2
speculative_eagle_topk = 1
dp_size = 2

[[config]]
name = "tp2-dp2"
speculative_num_steps = 2
speculative_eagle_topk = 1
tp_size = 2
dp_size = 2
"""


def test_each_config_gets_tp_pp_dp_gpus_never_shared_and_recorded(tmp_path: Path):
    p = tmp_path / "place.toml"
    p.write_text(SWEEP)
    s = sweepfile.load(p)
    need = {c.name: launch.gpus_needed(c) for c in s.configs}
    assert need == {"baseline-dp2": 2, "baseline-tp2-dp2": 4, "dp2": 2, "tp2-dp2": 4}
    db = tmp_path / "s.duckdb"
    res = sweep.run_sweep(s, str(db), str(tmp_path / "runs"), gpus=(0, 1, 2),
                          progress=sweep.Progress(stream=io.StringIO(), tty=False))
    by = {o.config: o for o in res.outcomes}
    for name in ("baseline-dp2", "dp2"):
        assert by[name].status == "ok", by[name].failure_reason
        assert len(by[name].gpus) == 2
    for name in ("baseline-tp2-dp2", "tp2-dp2"):     # 4 > 3 GPUs: refused, never squeezed in
        assert by[name].status == "failed"
        assert "needs 4 GPUs" in by[name].failure_reason
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT config_name, gpu_ids, min(started_at), max(ended_at) FROM runs "
                           "WHERE status = 'ok' GROUP BY ALL").fetchall()
    finally:
        con.close()
    spans = {name: (set(json.loads(ids)), lo, hi) for name, ids, lo, hi in rows}
    assert {n: len(g) for n, (g, _, _) in spans.items()} == {"baseline-dp2": 2, "dp2": 2}
    (ga, la, ha), (gb, lb, hb) = spans["baseline-dp2"], spans["dp2"]
    # Two 2-GPU configs on 3 GPUs: they cannot run at once, so their runs never overlap.
    assert ha <= lb or hb <= la
    assert ga <= {0, 1, 2} and gb <= {0, 1, 2}
