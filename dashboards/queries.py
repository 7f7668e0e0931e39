"""The dashboard's SQL, in one place: selections over specwatch's views, nothing more.

Every metric shown comes from `config_summary` (flags included) or `decode_windows_scoped`
(specwatch/db/views.py, where the formulas live). What is here only picks rows and columns, labels them,
orders them, sums raw counts for display, and thins a time series for plotting.

Not for: metric formulas. If the dashboard needs a number the views don't have, add it to views.py.
Queries take their run ids as one `VARCHAR[]` parameter so the text stays constant (and cacheable).
"""
from __future__ import annotations

# A cheap fingerprint of everything the dashboard reads: it changes whenever ingest advances a
# checkpoint, a sweep inserts requests, or a run row is created or updated. Heavy queries are cached
# on it, so an idle dashboard polling every few seconds costs one small query per poll.
STAMP = """
SELECT
  (SELECT count(*) FROM runs) AS runs,
  (SELECT hash(list(runs ORDER BY run_id)) FROM runs) AS runs_hash,
  (SELECT coalesce(sum(offset_bytes), 0) FROM sources) AS ingested_bytes,
  (SELECT count(*) FROM run_sources) AS run_sources,
  (SELECT count(*) FROM requests) AS requests,
  (SELECT count(*) FROM alerts) AS alerts
"""

# The runs the sidebar offers, newest sweep last. `scope` groups runs without a sweep.
RUNS = """
SELECT run_id, run_name, coalesce(sweep_name, '(ingested logs)') AS scope, sweep_name, config_name,
  origin, concurrency, status, failure_reason, created_at, started_at, repeat_idx
FROM runs
ORDER BY sweep_name NULLS FIRST, config_name NULLS FIRST, concurrency NULLS FIRST, run_name
"""

# One row per run and server config: config_summary with its flags and the baseline's name.
# `config` is the label used everywhere: the sweep's config name, else the run (log file) name.
# `role` is `baseline` for a run that is its own baseline, `spec` for a speculative run.
COMPARE = """
WITH s AS (
  SELECT * FROM config_summary WHERE run_id IN (SELECT unnest(?::VARCHAR[]))
)
SELECT
  coalesce(s.config_name, s.run_name) AS config,
  s.run_name, s.sweep_name, s.concurrency,
  CASE WHEN s.speculative_algorithm IS NOT NULL THEN 'spec'
       WHEN s.baseline_run_id = s.run_id THEN 'baseline' END AS role,
  s.speculative_algorithm, s.speculative_num_steps AS steps, s.speculative_eagle_topk AS topk,
  s.speculative_num_draft_tokens AS draft_tokens, s.tp_size, s.dp_size,
  s.accept_len, s.accept_rate, s.accept_rate_printed,
  s.gen_throughput_tok_s, s.output_tok_s, s.speedup_gen, s.speedup_client,
  s.ttft_ms_p50, s.ttft_ms_p99, s.itl_ms_p50, s.itl_ms_p99,
  s.windows, s.status, s.failure_reason,
  s.low_accept_len, s.slower_than_baseline,
  b.run_name AS baseline, s.model_path, s.sglang_version, s.run_id, s.config_offset
FROM s
LEFT JOIN runs b ON b.run_id = s.baseline_run_id
ORDER BY s.sweep_name NULLS FIRST, s.model_path, role NULLS LAST, config, s.concurrency NULLS FIRST,
  s.config_offset NULLS FIRST
"""

# Decode windows of some runs for the time series. `t_s` is seconds since the run's first window,
# so runs recorded on different days overlay; `every` thins each (run, DP rank) series to about
# ? points for plotting (display only: summaries use every window, see config_summary).
WINDOWS = """
WITH w AS (
  SELECT d.run_id, coalesce(r.config_name, r.run_name) AS config, d.ts, d.dp_rank,
    d.accept_len, d.gen_throughput_tok_s, d.after_idle, d.byte_offset,
    row_number() OVER (PARTITION BY d.run_id, d.dp_rank ORDER BY d.byte_offset) AS n,
    count(*) OVER (PARTITION BY d.run_id, d.dp_rank) AS total
  FROM decode_windows_scoped d JOIN runs r USING (run_id)
  WHERE d.run_id IN (SELECT unnest(?::VARCHAR[]))
)
SELECT w.run_id, w.config, w.ts,
  -- since the run's start (runs.started_at, when the sweep measured it), else its first window
  date_diff('millisecond', coalesce(r.started_at, min(w.ts) OVER (PARTITION BY w.run_id)), w.ts) / 1000.0
    AS t_s, r.started_at IS NOT NULL AS from_start,
  coalesce(w.dp_rank, 0) AS dp_rank, w.accept_len, w.gen_throughput_tok_s, w.after_idle, w.total
FROM w JOIN runs r USING (run_id)
WHERE (n - 1) % greatest(1, ceil(total / ?)::BIGINT) = 0
ORDER BY w.run_id, w.dp_rank, w.byte_offset
"""

# Verify steps by number of accepted draft tokens, summed over a run's measured requests (warm-up
# and failed requests excluded). Index 0 of `spec_accept_histogram` counts steps accepting none.
HISTOGRAM = """
WITH h AS (
  SELECT q.run_id,
    generate_subscripts(q.spec_accept_histogram, 1) - 1 AS accepted_drafts,
    unnest(q.spec_accept_histogram) AS verify_steps
  FROM requests q
  WHERE q.run_id IN (SELECT unnest(?::VARCHAR[])) AND q.spec_accept_histogram IS NOT NULL
    AND NOT coalesce(q.is_warmup, false) AND coalesce(q.success, true)
)
SELECT h.run_id, coalesce(r.config_name, r.run_name) AS config, r.concurrency,
  h.accepted_drafts, sum(h.verify_steps) AS verify_steps
FROM h JOIN runs r USING (run_id)
GROUP BY ALL
ORDER BY config, r.concurrency NULLS FIRST, h.accepted_drafts
"""

# One row per measurement group (a sweep's config at one concurrency, repeats pooled) of the
# selected runs: config_verdicts (config_stats' speedup, interval, verdict with the concurrency's
# winner and note and the Pareto columns, evaluated once).
STATS = """
SELECT * FROM config_verdicts
WHERE group_id IN (SELECT group_id FROM run_metrics WHERE run_id IN (SELECT unnest(?::VARCHAR[])))
ORDER BY sweep_name NULLS FIRST, concurrency NULLS FIRST, speedup DESC NULLS LAST, config
"""

# Share of verify steps whose draft position k was accepted (view accept_positions).
POSITIONS = """
SELECT a.run_id, coalesce(r.config_name, r.run_name) AS config, r.concurrency, a.position,
  a.accepted_share, a.basis
FROM accept_positions a JOIN runs r USING (run_id)
WHERE a.run_id IN (SELECT unnest(?::VARCHAR[]))
ORDER BY config, r.concurrency NULLS FIRST, a.run_id, a.position
"""

# Warnings `specwatch tail` raised (alerts table), newest first.
ALERTS = """
SELECT a.raised_at, a.ts, coalesce(r.config_name, r.run_name, a.run_id) AS run, a.rule, a.severity,
  a.message, a.path, a.line_no, a.dp_rank, a.value, a.threshold, a.windows
FROM alerts a LEFT JOIN runs r USING (run_id)
ORDER BY a.raised_at DESC NULLS LAST, a.ts DESC NULLS LAST
"""

DEFAULT_SQL = """SELECT run_name, config_name, concurrency, accept_len, accept_rate,
  gen_throughput_tok_s, output_tok_s, speedup_gen, speedup_client, status
FROM config_summary
ORDER BY accept_len DESC NULLS LAST"""

# The traffic view (issue 30; db/slo_views.py): per group under an SLO (goodput, margin, verdict)
# and per config (max rate under the SLO, crossover load) of the selected runs' sweeps and
# configs, and accept length / e2e speedup by prompt category.
TRAFFIC_SLO = """
SELECT * FROM group_slo
WHERE group_id IN (SELECT group_id FROM run_metrics WHERE run_id IN (SELECT unnest(?::VARCHAR[])))
ORDER BY sweep_name, config, concurrency NULLS LAST, request_rate
"""
TRAFFIC_SCHEDULE = """
SELECT * FROM group_schedule
WHERE group_id IN (SELECT group_id FROM run_metrics WHERE run_id IN (SELECT unnest(?::VARCHAR[])))
ORDER BY sweep_name, request_rate, config
"""
TRAFFIC_PER_CONFIG = """
SELECT * FROM {view}
WHERE (sweep_name, config) IN (SELECT sweep_name, config_name FROM run_metrics
                               WHERE run_id IN (SELECT unnest(?::VARCHAR[])))
ORDER BY ALL
"""
TRAFFIC_CATEGORIES = """
SELECT * FROM category_stats
WHERE group_id IN (SELECT group_id FROM run_metrics WHERE run_id IN (SELECT unnest(?::VARCHAR[])))
  AND NOT is_baseline AND NOT rate_search_only
ORDER BY sweep_name, category, config, concurrency NULLS LAST, request_rate
"""
