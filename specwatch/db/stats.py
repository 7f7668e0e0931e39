"""The statistics over repeats, defined once as SQL views over `views.run_metrics`: measurement
groups, baseline matching, speedups with their 95% intervals, verdicts, winners, the Pareto.

The per-run metrics they pool (accept length, tok/s, latencies) are `views.py`'s; the CLI
(`report`), the dashboard and doctor read these views and recompute nothing.
"""
from __future__ import annotations

import re

from specwatch.db.views import LOW_ACCEPT_LEN

VIEWS: list[str] = []
# ---------------------------------------------------------------------------------------------
# Repeats, baselines and verdicts (issue 12). Every statistic is defined here, once.
#
# run_groups (one row per measurement group): the repeats of one sweep (config, load level), or
#   one ingested log's (run, server config). Carries what a baseline must match.
#
# group_baselines (one row per group that has a baseline candidate): the baseline group it is
#   compared with. A candidate must have the same model, TP, DP, PP size and load level (the same
#   concurrency, or the same request rate and arrivals: runs.arrival), and must
#   not have a different sampling fingerprint (runs.sampling_fingerprint: temperature, top_p, top_k,
#   ignore_eos, max tokens, chat template, seed, prompts). Preferred: the group itself (a baseline),
#   the same sweep, the same log, one with 2+ repeats (it can give an interval), then the latest. `baseline_match` says what kind of match it is:
#     self              the group is a baseline
#     same-sweep        measured in the same sweep (the comparison to trust)
#     other-sweep       a baseline from another sweep: check it ran on the same machine and load
#     same-log / other-log   ingested logs (no sweep): the same file / another file
#   plus, joined with '+': other-machine (runs.node_hostname differs), other-version (SGLang
#   versions differ), other-day (sweep runs made on
#   different days), sampling-unknown (either side has no fingerprint: an ingested log).
#     sampling-differs  the only candidates ran other sampling settings: NOT compared (no speedup).
#     simulated-vs-real the group's acceptance is simulated (SGLANG_SIMULATE_ACC_LEN, vLLM synthetic
#                       rejection sampling: run_metrics.simulated) and the only candidates' is not:
#                       NOT compared (no speedup); real-vs-simulated the other way round. A
#                       simulated group is compared only with baselines simulated alike.
#
# config_stats (one row per group). n = repeats = ok runs with a client tok/s. Formulas:
#   output_tok_s_mean   = Σ x_i / n over the repeats' client tok/s x_i
#   output_tok_s_median = the middle repeat (mean of the two middle ones for even n)
#   output_tok_s_sd     = sqrt(Σ (x_i − mean)² / (n − 1))            (NULL for n < 2)
#   output_tok_s_cv     = sd / mean                                    (coefficient of variation)
#   output_tok_s_ci_low/high = mean ∓ t(0.975, n − 1) · sd / sqrt(n)  (Student t, 95 %)
#   accept_len          = mean over repeats of the run's token-weighted accept length (the DEFAULT:
#                         Σ tokens / Σ verify steps over every sequence-step, what throughput follows,
#                         what SGLang prints); accept_len_sd/min/max its spread over repeats (0 for
#                         greedy decoding of the same prompts; noisy when sampling).
#   accept_len_request_weighted = mean over repeats of (mean over requests of each request's
#                         tokens / verify steps): weights every request equally, so short or easy
#                         requests pull it around; vLLM's per-request averages are of this kind.
#   accept_rate         = mean over repeats of config_summary.accept_rate.
#   joules_per_output_token_mean = mean over ok repeats of run_metrics.joules_per_output_token (GPU
#                         energy per output token, NVML; NULL without it); energy_repeats = how many;
#   joules_per_token_vs_baseline = joules_per_output_token_mean / the baseline group's (< 1: the
#                         config spends less energy per token than no speculation).
#   speedup             = exp(mean ln x_i − mean ln y_i): the ratio of the geometric mean client
#                         tok/s of the group (x) and of its baseline (y) (`speedup_basis` =
#                         'client'); when either side has no client numbers (ingested logs), of the
#                         server log's gen throughput ('server-log'). Geometric, because tok/s
#                         noise is multiplicative and a ratio of geometric means is the summary of
#                         ratios that does not depend on which side is the reference.
#   speedup_ci_low/high = a 95 % t interval on the log scale, exp'd back (`speedup_method`):
#     'paired'  (same-sweep baseline, every repeat i of both sides measured): the sweep runs
#               repeat i of every config in one interleaved block, so drift between blocks is
#               shared; d_i = ln x_i − ln y_i, se = sd(d) / sqrt(n), df = n − 1.
#     'welch'   (otherwise: another sweep's baseline, unequal repeats, server-log basis):
#               v_x = sd(ln x)² / n_x, v_y likewise, se = sqrt(v_x + v_y),
#               df = (v_x + v_y)² / (v_x² / (n_x − 1) + v_y² / (n_y − 1))   (Welch-Satterthwaite)
#     ci = speedup · exp(∓ t(0.975, floor(df)) · se); NULL with fewer than 2 repeats on a side
#               (floor after adding 1e-9, so that a df of 4 computed as 3.9999999 stays 4).
#                         Why not a bootstrap: with 3 repeats it has only 10 distinct resamples and
#                         its percentile interval is far too narrow; the t interval is honest at
#                         small n. The log scale keeps the interval positive and around its point
#                         estimate by construction.
#   verdict             = 'pays' when speedup_ci_low > 1, 'loses' when speedup_ci_high < 1,
#                         'unclear' otherwise (interval contains 1, fewer than 2 repeats, no
#                         comparable baseline); 'baseline' for a baseline's own row (speedup 1);
#                         'failed' when no run of the group measured anything; 'interrupted'
#                         when no run measured anything and every run that is not ok was
#                         interrupted (runs.status; Ctrl-C, SIGTERM, a stopped Ray worker).
#   verdict_reason      = why, in words; for a group measured under a lossy acceptance rule
#                         (run_groups.lossy_verification, views.lossy_sql) it says so: the
#                         verdict is kept (the throughput is real) but is not lossless decoding's.
#
# concurrency_winners (one row per sweep and load level, concurrency or request_rate): candidates
#   are the configs with a
#   speedup plus the baseline (speedup 1, interval [1, 1]). The best point estimate wins only when
#   its interval lies above every other candidate's (no overlap); else winner is NULL and
#   `note` says "no clear winner: A and B overlap" (B = the rival whose interval reaches highest).
#   `losers` lists the configs whose verdict is 'loses'.
#   Simulated-acceptance groups (run_groups.simulated) are ranked apart from real ones: one row
#   per sweep, concurrency and `simulated`.
# ---------------------------------------------------------------------------------------------

# Two-sided 95 % Student t quantiles t(0.975, df), from tables (checked against scipy in
# tests/test_stats.py). A non-integer Welch df uses the entry at or below it (conservative).
T975 = [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (5, 2.5706), (6, 2.4469),
        (7, 2.3646), (8, 2.3060), (9, 2.2622), (10, 2.2281), (11, 2.2010), (12, 2.1788),
        (13, 2.1604), (14, 2.1448), (15, 2.1314), (16, 2.1199), (17, 2.1098), (18, 2.1009),
        (19, 2.0930), (20, 2.0860), (21, 2.0796), (22, 2.0739), (23, 2.0687), (24, 2.0639),
        (25, 2.0595), (26, 2.0555), (27, 2.0518), (28, 2.0484), (29, 2.0452), (30, 2.0423),
        (40, 2.0211), (60, 2.0003), (120, 1.9799)]


def t975_sql(df: str) -> str:
    """SQL expression: t(0.975, df) for the SQL expression `df` (NULL when df < 1 or NULL)."""
    arms = [f"WHEN ({df}) < {hi} THEN {t}" for (lo, t), (hi, _) in zip(T975, T975[1:])]
    return (f"(CASE WHEN ({df}) IS NULL OR ({df}) < 1 THEN NULL {' '.join(arms)} "
            f"ELSE {T975[-1][1]} END)")


OK = "coalesce(status, 'ok') = 'ok'"

VIEWS.append(f"""
CREATE OR REPLACE VIEW run_groups AS
SELECT group_id,
  any_value(sweep_name) AS sweep_name, any_value(config_name) AS config_name,
  coalesce(any_value(config_name), any_value(run_name)) AS config,
  any_value(origin) AS origin, min(run_id) AS first_run_id,
  any_value(concurrency) AS concurrency, any_value(request_rate) AS request_rate,
  any_value(arrival) AS arrival, any_value(model_path) AS model_path,
  -- every run of the group was asked for by the rate search (not a planned load level)
  coalesce(bool_and(rate_search_step IS NOT NULL), false) AS rate_search_only,
  any_value(draft_model_path) AS draft_model_path,
  any_value(speculative_algorithm) AS speculative_algorithm,
  any_value(speculative_num_steps) AS speculative_num_steps,
  any_value(speculative_eagle_topk) AS speculative_eagle_topk,
  any_value(speculative_num_draft_tokens) AS speculative_num_draft_tokens,
  any_value(tp_size) AS tp_size, any_value(dp_size) AS dp_size, any_value(pp_size) AS pp_size,
  any_value(sampling_fingerprint) AS sampling_fingerprint,
  any_value(sglang_version) AS sglang_version, any_value(engine) AS engine,
  any_value(node_hostname) AS node_hostname,
  bool_and(speculative_algorithm IS NULL) AS is_baseline,
  coalesce(bool_or(simulated), false) AS simulated,
  coalesce(bool_or(lossy_verification), false) AS lossy_verification,
  min(created_at) AS first_created_at, max(created_at) AS last_created_at,
  count(*) FILTER (WHERE {OK} AND (output_tok_s IS NOT NULL OR gen_throughput_tok_s IS NOT NULL))
    AS runs_with_throughput
FROM run_metrics GROUP BY group_id
""")

VIEWS.append("""
CREATE OR REPLACE VIEW group_baselines AS
WITH cand AS (
  SELECT s.group_id, b.group_id AS candidate_group_id,
    coalesce(s.sampling_fingerprint <> b.sampling_fingerprint, false) AS sampling_differs,
    s.simulated <> b.simulated AS simulation_differs,
    s.simulated AS s_simulated,
    (s.sweep_name IS NOT NULL AND s.sweep_name = b.sweep_name) AS same_sweep,
    concat_ws('+',
      CASE WHEN s.sweep_name IS NOT NULL AND s.sweep_name = b.sweep_name THEN 'same-sweep'
           WHEN s.sweep_name IS NOT NULL AND b.sweep_name IS NOT NULL THEN 'other-sweep'
           WHEN s.first_run_id = b.first_run_id THEN 'same-log'
           ELSE 'other-log' END,
      CASE WHEN s.node_hostname <> b.node_hostname THEN 'other-machine' END,
      CASE WHEN s.sglang_version <> b.sglang_version THEN 'other-version' END,
      CASE WHEN s.sweep_name IS NOT NULL AND b.sweep_name IS NOT NULL
            AND CAST(s.last_created_at AS DATE) <> CAST(b.last_created_at AS DATE)
           THEN 'other-day' END,
      CASE WHEN s.sampling_fingerprint IS NULL OR b.sampling_fingerprint IS NULL
           THEN 'sampling-unknown' END) AS match_kind,
    row_number() OVER (PARTITION BY s.group_id ORDER BY
      s.simulated <> b.simulated,
      coalesce(s.sampling_fingerprint <> b.sampling_fingerprint, false),
      (b.group_id = s.group_id) DESC,
      (s.sweep_name IS NOT NULL AND s.sweep_name = b.sweep_name) DESC,
      (s.first_run_id = b.first_run_id) DESC,
      (b.runs_with_throughput >= 2) DESC,     -- one that can give an interval
      b.last_created_at DESC, b.group_id) AS pick
  FROM run_groups s JOIN run_groups b
    ON b.is_baseline AND b.runs_with_throughput > 0 AND b.model_path = s.model_path
   AND b.tp_size IS NOT DISTINCT FROM s.tp_size AND b.dp_size IS NOT DISTINCT FROM s.dp_size
   -- a server_args line without pp_size is from a version without pipeline parallelism: PP 1
   AND coalesce(b.pp_size, 1) = coalesce(s.pp_size, 1)
   AND b.concurrency IS NOT DISTINCT FROM s.concurrency
   AND b.request_rate IS NOT DISTINCT FROM s.request_rate
   AND (s.request_rate IS NULL OR b.arrival IS NOT DISTINCT FROM s.arrival)
)
SELECT group_id,
  CASE WHEN NOT (sampling_differs OR simulation_differs) THEN candidate_group_id END
    AS baseline_group_id,
  CASE WHEN sampling_differs OR simulation_differs THEN candidate_group_id END
    AS differing_baseline_group_id,
  CASE WHEN simulation_differs AND s_simulated THEN 'simulated-vs-real'
       WHEN simulation_differs THEN 'real-vs-simulated'
       WHEN sampling_differs THEN 'sampling-differs'
       WHEN candidate_group_id = group_id THEN 'self'
       ELSE match_kind END AS baseline_match
FROM cand WHERE pick = 1
""")

# config_summary (one row per run and server config): run_metrics plus the per-run speedups
# against the matched baseline group (group_baselines): the baseline run of the same repeat when
# there is one, else that group's latest.
#   speedup_gen    = gen_throughput_tok_s / baseline's gen_throughput_tok_s   (one run each)
#   speedup_client = output_tok_s / baseline's output_tok_s                    (one run each)
# These are single-run ratios, for a run's details and doctor; the speedup to trust, with its
# interval and verdict, is config_stats.speedup.
VIEWS.append(f"""
CREATE OR REPLACE VIEW config_summary AS
WITH pick AS (
  SELECT m.run_id, m.config_offset, b.run_id AS baseline_run_id,
    b.gen_throughput_tok_s AS baseline_gen_tok_s, b.output_tok_s AS baseline_output_tok_s,
    row_number() OVER (PARTITION BY m.run_id, m.config_offset ORDER BY
      (b.run_id = m.run_id) DESC, (b.repeat_idx IS NOT DISTINCT FROM m.repeat_idx) DESC,
      b.created_at DESC, b.run_id) AS k
  FROM run_metrics m JOIN group_baselines gb ON gb.group_id = m.group_id
  JOIN run_metrics b ON b.group_id = gb.baseline_group_id AND coalesce(b.status, 'ok') = 'ok'
   AND (b.gen_throughput_tok_s IS NOT NULL OR b.output_tok_s IS NOT NULL)
), final AS (
  SELECT m.*, gb.baseline_match, p.baseline_run_id,
    m.gen_throughput_tok_s / nullif(p.baseline_gen_tok_s, 0) AS speedup_gen,
    m.output_tok_s / nullif(p.baseline_output_tok_s, 0) AS speedup_client
  FROM run_metrics m LEFT JOIN group_baselines gb ON gb.group_id = m.group_id
  LEFT JOIN pick p ON p.run_id = m.run_id AND p.config_offset IS NOT DISTINCT FROM m.config_offset
   AND p.k = 1
)
SELECT *,
  (speculative_algorithm IS NOT NULL AND accept_len < {LOW_ACCEPT_LEN}) AS low_accept_len,
  coalesce(speedup_client < 1, speedup_gen < 1) AS slower_than_baseline
FROM final
""")

VIEWS.append(f"""
CREATE OR REPLACE VIEW config_stats AS
WITH per AS (
  SELECT group_id,
    count(*) AS runs,
    count(*) FILTER (WHERE NOT ({OK})) AS runs_failed,
    count(*) FILTER (WHERE status = 'interrupted') AS runs_interrupted,
    count(output_tok_s) FILTER (WHERE {OK}) AS repeats,
    avg(output_tok_s) FILTER (WHERE {OK}) AS output_tok_s_mean,
    median(output_tok_s) FILTER (WHERE {OK}) AS output_tok_s_median,
    stddev_samp(output_tok_s) FILTER (WHERE {OK}) AS output_tok_s_sd,
    count(gen_throughput_tok_s) FILTER (WHERE {OK}) AS gen_repeats,
    avg(gen_throughput_tok_s) FILTER (WHERE {OK}) AS gen_throughput_tok_s_mean,
    stddev_samp(gen_throughput_tok_s) FILTER (WHERE {OK}) AS gen_throughput_tok_s_sd,
    avg(accept_len) FILTER (WHERE {OK}) AS accept_len,
    stddev_samp(accept_len) FILTER (WHERE {OK}) AS accept_len_sd,
    min(accept_len) FILTER (WHERE {OK}) AS accept_len_min,
    max(accept_len) FILTER (WHERE {OK}) AS accept_len_max,
    avg(accept_len_request_weighted) FILTER (WHERE {OK}) AS accept_len_request_weighted,
    avg(accept_rate) FILTER (WHERE {OK}) AS accept_rate,
    avg(accept_rate_printed) FILTER (WHERE {OK}) AS accept_rate_printed,
    avg(ttft_ms_p50) FILTER (WHERE {OK}) AS ttft_ms_p50_mean,
    avg(ttft_ms_p99) FILTER (WHERE {OK}) AS ttft_ms_p99_mean,
    avg(itl_ms_p50) FILTER (WHERE {OK}) AS itl_ms_p50_mean,
    avg(itl_ms_p99) FILTER (WHERE {OK}) AS itl_ms_p99_mean,
    count(joules_per_output_token) FILTER (WHERE {OK}) AS energy_repeats,
    avg(joules_per_output_token) FILTER (WHERE {OK}) AS joules_per_output_token_mean,
    string_agg(DISTINCT failure_reason, '; ') AS failure_reasons,
    -- log scale: tok/s noise is multiplicative; speedups are ratios of geometric means
    avg(ln(output_tok_s)) FILTER (WHERE {OK} AND output_tok_s > 0) AS log_tok_s_mean,
    stddev_samp(ln(output_tok_s)) FILTER (WHERE {OK} AND output_tok_s > 0) AS log_tok_s_sd,
    avg(ln(gen_throughput_tok_s)) FILTER (WHERE {OK} AND gen_throughput_tok_s > 0) AS log_gen_mean,
    stddev_samp(ln(gen_throughput_tok_s)) FILTER (WHERE {OK} AND gen_throughput_tok_s > 0)
      AS log_gen_sd
  FROM run_metrics GROUP BY group_id
), pairs AS (
  -- repeat i of a config and repeat i of its same-sweep baseline ran in the same interleaved
  -- block (same concurrency and repeat index): d_i = ln x_i − ln y_i
  SELECT x.group_id, count(*) AS pairs, avg(ln(x.output_tok_s) - ln(y.output_tok_s)) AS d_mean,
    stddev_samp(ln(x.output_tok_s) - ln(y.output_tok_s)) AS d_sd
  FROM (SELECT DISTINCT group_id, run_id, repeat_idx, output_tok_s FROM run_metrics
        WHERE {OK} AND output_tok_s > 0) x
  JOIN group_baselines gb ON gb.group_id = x.group_id AND gb.baseline_match = 'same-sweep'
  JOIN (SELECT DISTINCT group_id, run_id, repeat_idx, output_tok_s FROM run_metrics
        WHERE {OK} AND output_tok_s > 0) y
    ON y.group_id = gb.baseline_group_id AND y.repeat_idx = x.repeat_idx
  GROUP BY x.group_id
), s AS (
  SELECT g.*, per.* EXCLUDE (group_id), gb.baseline_group_id, gb.differing_baseline_group_id,
    gb.baseline_match,
    per.output_tok_s_sd / nullif(per.output_tok_s_mean, 0) AS output_tok_s_cv,
    per.output_tok_s_mean - {t975_sql('per.repeats - 1')} * per.output_tok_s_sd
      / sqrt(per.repeats) AS output_tok_s_ci_low,
    per.output_tok_s_mean + {t975_sql('per.repeats - 1')} * per.output_tok_s_sd
      / sqrt(per.repeats) AS output_tok_s_ci_high
  FROM run_groups g JOIN per USING (group_id) LEFT JOIN group_baselines gb USING (group_id)
), j AS (
  SELECT s.*, b.config AS baseline_config, b.sweep_name AS baseline_sweep_name,
    CASE WHEN s.repeats > 0 AND b.repeats > 0 THEN 'client'
         WHEN s.gen_repeats > 0 AND b.gen_repeats > 0 THEN 'server-log' END AS speedup_basis,
    b.output_tok_s_mean AS baseline_output_tok_s_mean, b.repeats AS baseline_repeats,
    b.gen_throughput_tok_s_mean AS baseline_gen_throughput_tok_s_mean,
    b.gen_repeats AS baseline_gen_repeats,
    b.joules_per_output_token_mean AS baseline_joules_per_output_token_mean,
    s.joules_per_output_token_mean / nullif(b.joules_per_output_token_mean, 0)
      AS joules_per_token_vs_baseline,
    p.pairs, p.d_mean, p.d_sd,
    -- the basis' (log mean, log sd, n) of this group (x) and of its baseline (y)
    CASE WHEN s.repeats > 0 AND b.repeats > 0 THEN s.log_tok_s_mean ELSE s.log_gen_mean END AS lx,
    CASE WHEN s.repeats > 0 AND b.repeats > 0 THEN s.log_tok_s_sd ELSE s.log_gen_sd END AS sx,
    CASE WHEN s.repeats > 0 AND b.repeats > 0 THEN s.repeats ELSE s.gen_repeats END AS nx,
    CASE WHEN s.repeats > 0 AND b.repeats > 0 THEN b.log_tok_s_mean ELSE b.log_gen_mean END AS ly,
    CASE WHEN s.repeats > 0 AND b.repeats > 0 THEN b.log_tok_s_sd ELSE b.log_gen_sd END AS sy,
    CASE WHEN s.repeats > 0 AND b.repeats > 0 THEN b.repeats ELSE b.gen_repeats END AS ny
  FROM s LEFT JOIN s b ON b.group_id = s.baseline_group_id
  LEFT JOIN pairs p ON p.group_id = s.group_id
), v AS (
  SELECT *,
    CASE WHEN is_baseline OR lx IS NULL OR ly IS NULL OR nx < 2 OR ny < 2 THEN NULL
         WHEN speedup_basis = 'client' AND pairs = nx AND pairs = ny THEN 'paired'
         ELSE 'welch' END AS speedup_method,
    pow(sx, 2) / nx AS var_x, pow(sy, 2) / ny AS var_y
  FROM j
), ci AS (
  SELECT *,
    CASE WHEN is_baseline AND speedup_basis IS NOT NULL THEN 1.0
         ELSE exp(lx - ly) END AS speedup,
    CASE speedup_method WHEN 'paired' THEN d_sd / sqrt(pairs)
                        WHEN 'welch' THEN sqrt(var_x + var_y) END AS speedup_log_se,
    CASE speedup_method WHEN 'paired' THEN pairs - 1
         WHEN 'welch' THEN CASE WHEN var_x + var_y > 0 THEN pow(var_x + var_y, 2)
                                / (pow(var_x, 2) / (nx - 1) + pow(var_y, 2) / (ny - 1)) END
    END AS speedup_df
  FROM v
), bounds AS (
  SELECT *,
    CASE WHEN is_baseline THEN speedup
         WHEN speedup_method IS NULL THEN NULL
         WHEN speedup_log_se = 0 THEN speedup
         ELSE speedup * exp(-{t975_sql('floor(speedup_df + 1e-9)')} * speedup_log_se) END
      AS speedup_ci_low,
    CASE WHEN is_baseline THEN speedup
         WHEN speedup_method IS NULL THEN NULL
         WHEN speedup_log_se = 0 THEN speedup
         ELSE speedup * exp({t975_sql('floor(speedup_df + 1e-9)')} * speedup_log_se) END
      AS speedup_ci_high
  FROM ci
)
SELECT * EXCLUDE (lx, sx, nx, ly, sy, ny, var_x, var_y, d_mean, d_sd, log_tok_s_mean,
                 log_tok_s_sd, log_gen_mean, log_gen_sd),
  CASE WHEN is_baseline THEN 'baseline'
       WHEN runs_with_throughput = 0 AND runs_failed > 0 AND runs_interrupted = runs_failed
       THEN 'interrupted'
       WHEN runs_with_throughput = 0 AND runs_failed > 0 THEN 'failed'
       WHEN speedup_ci_low > 1 THEN 'pays'
       WHEN speedup_ci_high < 1 THEN 'loses'
       ELSE 'unclear' END AS verdict,
  CASE WHEN is_baseline THEN 'the no-speculation baseline itself'
       WHEN runs_with_throughput = 0 AND runs_failed > 0 AND runs_interrupted = runs_failed
       THEN 'every run was interrupted (Ctrl-C or SIGTERM) before it measured anything: not a '
            || 'failure of the config; re-run the sweep to measure it'
       WHEN runs_with_throughput = 0 AND runs_failed > 0 THEN 'every run failed: ' || failure_reasons
       WHEN baseline_match = 'simulated-vs-real' THEN
         'not compared: this config''s acceptance is simulated (SGLANG_SIMULATE_ACC_LEN or vLLM '
         || 'synthetic rejection sampling) and the only baseline ran real acceptance; measure a '
         || 'baseline launched with the same simulation, or drop the simulation'
       WHEN baseline_match = 'real-vs-simulated' THEN
         'not compared: the only baseline ran with simulated acceptance (SGLANG_SIMULATE_ACC_LEN '
         || 'or vLLM synthetic rejection sampling); measure a baseline without it'
       WHEN baseline_match = 'sampling-differs' THEN
         'not compared: the only baseline of this model, TP/DP/PP and concurrency ran other '
         || 'sampling settings (sampling_fingerprint); measure one with the same workload'
       WHEN baseline_group_id IS NULL THEN
         'no baseline of the same model, TP/DP/PP size and concurrency to compare with'
       WHEN speedup IS NULL THEN 'no throughput measured for this config or its baseline'
       WHEN nx < 2 OR ny < 2 THEN
         'one repeat: no interval; add repeats (repeats = 3 in the sweep file)'
       WHEN speedup_ci_low > 1 THEN 'the 95% interval of the speedup lies above 1'
       WHEN speedup_ci_high < 1 THEN 'the 95% interval of the speedup lies below 1'
       ELSE 'the 95% interval of the speedup contains 1: within noise; add repeats or '
            || 'accept that it does not matter' END
  || CASE WHEN lossy_verification AND NOT is_baseline THEN
       '; measured under a lossy acceptance rule (SGLang accept thresholds below 1.0 or vLLM '
       || 'rejection_sample_method ''fly''): not the speedup of lossless speculative decoding, '
       || 'and the outputs are not the target model''s (specwatch doctor)'
     ELSE '' END AS verdict_reason
FROM bounds
""")

VIEWS.append("""
CREATE OR REPLACE VIEW concurrency_winners AS
WITH c AS (
  SELECT sweep_name, concurrency, request_rate, simulated, config, verdict, speedup, is_baseline,
    speedup_ci_low AS lo, speedup_ci_high AS hi
  FROM config_stats
  WHERE sweep_name IS NOT NULL AND speedup IS NOT NULL
), r AS (
  SELECT *, row_number() OVER (PARTITION BY sweep_name, concurrency, request_rate, simulated
                               ORDER BY speedup DESC, config) AS rk
  FROM c
), rival AS (
  SELECT sweep_name, concurrency, request_rate, simulated,
    arg_max(config, coalesce(hi, 'Infinity'::DOUBLE)) AS rival,
    bool_or(hi IS NULL) AS rival_open, max(hi) AS rival_hi
  FROM r WHERE rk > 1 GROUP BY ALL
), losers AS (
  SELECT sweep_name, concurrency, request_rate, simulated,
    list(config ORDER BY config) FILTER (WHERE verdict = 'loses') AS losers,
    count(*) FILTER (WHERE verdict <> 'baseline') AS configs
  FROM c GROUP BY ALL
)
SELECT t.sweep_name, t.concurrency, t.request_rate, t.simulated,
  CASE WHEN coalesce(l.configs, 0) > 0 AND t.lo IS NOT NULL AND NOT coalesce(v.rival_open, false)
        AND (v.rival_hi IS NULL OR t.lo > v.rival_hi) THEN t.config END AS winner,
  t.config AS best_config, t.speedup AS best_speedup, t.lo AS best_speedup_ci_low,
  t.hi AS best_speedup_ci_high, v.rival AS runner_up, l.losers, l.configs,
  CASE WHEN coalesce(l.configs, 0) = 0 THEN
         'nothing compared: no speculative config has a comparable baseline here'
       WHEN t.lo IS NULL THEN 'no clear winner: one repeat gives no interval; add repeats'
       WHEN coalesce(v.rival_open, false) THEN
         'no clear winner: ' || v.rival || ' has no interval (one repeat); add repeats'
       WHEN (v.rival_hi IS NULL OR t.lo > v.rival_hi) AND t.is_baseline THEN
         t.config || ' wins: every speculative config is slower'
       WHEN v.rival_hi IS NULL OR t.lo > v.rival_hi THEN
         t.config || ' wins: its interval lies above every other config''s'
       ELSE 'no clear winner: ' || t.config || ' and ' || v.rival || ' overlap' END AS note
FROM r t LEFT JOIN rival v ON v.sweep_name = t.sweep_name AND v.concurrency IS NOT DISTINCT FROM t.concurrency
  AND v.request_rate IS NOT DISTINCT FROM t.request_rate AND v.simulated = t.simulated
LEFT JOIN losers l ON l.sweep_name = t.sweep_name AND l.concurrency IS NOT DISTINCT FROM t.concurrency
  AND l.request_rate IS NOT DISTINCT FROM t.request_rate AND l.simulated = t.simulated
WHERE t.rk = 1
""")

VIEWS.append("""
CREATE OR REPLACE VIEW config_flags AS
SELECT run_id, run_name, config_offset, low_accept_len, slower_than_baseline FROM config_summary
""")

# config_pareto (one row per measurement group, dashboard's Pareto chart; issue 16): the trade-off
# serving engineers tune, total throughput against what one user sees.
#   (x axis: config_stats.output_tok_s_mean, client, all requests together; join on group_id)
#   per_user_tok_s      = mean over ok repeats of 1000 / tpot_ms_p50: the median request's decode
#                         speed in tokens per second (TPOT = (e2e − TTFT) / (output tokens − 1));
#                         NULL without client latencies (ingested logs)
VIEWS.append(f"""
CREATE OR REPLACE VIEW config_pareto AS
-- per group; join config_stats on group_id for output_tok_s_mean (kept apart: one evaluation)
SELECT group_id, avg(1000.0 / nullif(tpot_ms_p50, 0)) FILTER (WHERE {OK}) AS per_user_tok_s,
  avg(tpot_ms_p50) FILTER (WHERE {OK}) AS tpot_ms_p50_mean
FROM run_metrics GROUP BY group_id
""")

# ---------------------------------------------------------------------------------------------
# Reading each pooled view once per query (issue 32). DuckDB plans and evaluates a view wherever
# it is named: config_stats named run_metrics eight times (itself, twice through run_groups,
# four times through group_baselines' self-join of run_groups), config_summary five times, and
# the dashboard's table (config_stats + concurrency_winners + config_pareto) about twenty: 0.6 s
# of planning for 80 runs, whatever the number of windows stored. `_once(body, names)` is `body`
# reading each of `names` once, as a MATERIALIZED common table expression that holds that view's
# own definition (the names renamed `_<name>`), so every formula still has one definition.
# config_verdicts (one row per measurement group) = config_stats with its concurrency's
#   winner (concurrency_winners.winner, .note AS winner_note) and the Pareto columns
#   (config_pareto.per_user_tok_s, tpot_ms_p50_mean), evaluated once: what the dashboard's
#   Compare table and `specwatch report --format html` show.
#   pareto_frontier = no other group of the same sweep and `simulated` has both a higher or equal
#   output_tok_s_mean and per_user_tok_s, one of them higher (NULL without both numbers).
# ---------------------------------------------------------------------------------------------
_VIEW_RE = re.compile(r"\s*CREATE OR REPLACE VIEW (\w+) AS\s(.*)", re.S)


# each view's SELECT as defined above (run_metrics, a views.py view: a read of the view itself)
_DEFS = {"run_metrics": "SELECT * FROM run_metrics",
         **{m.group(1): m.group(2) for m in map(_VIEW_RE.match, VIEWS) if m}}


def _renamed(sql: str, names) -> str:
    for n in names:
        sql = re.sub(rf"\b{n}\b", f"_{n}", sql)
    return sql


def _once(body: str, names: tuple[str, ...]) -> str:
    """`body` with each view in `names` (in dependency order) read once: see above."""
    ctes = [f"_{n} AS MATERIALIZED ({_renamed(_DEFS[n], names[:i])})" for i, n in enumerate(names)]
    return f"WITH {', '.join(ctes)}\nSELECT * FROM ({_renamed(body, names)}) _once"


def _redefine(name: str, body: str) -> None:
    i = next(i for i, sql in enumerate(VIEWS) if (m := _VIEW_RE.match(sql)) and m.group(1) == name)
    VIEWS[i] = f"CREATE OR REPLACE VIEW {name} AS {body}"


_POOLED = ("run_metrics", "run_groups", "group_baselines")
_redefine("config_summary", _once(_DEFS["config_summary"], _POOLED))
_redefine("config_stats", _once(_DEFS["config_stats"], _POOLED))
VIEWS.append("CREATE OR REPLACE VIEW config_verdicts AS " + _once("""
WITH v AS (
  SELECT s.*, w.winner, w.note AS winner_note, p.per_user_tok_s, p.tpot_ms_p50_mean
  FROM config_stats s
  LEFT JOIN concurrency_winners w
    ON w.sweep_name IS NOT DISTINCT FROM s.sweep_name
   AND w.concurrency IS NOT DISTINCT FROM s.concurrency
   AND w.request_rate IS NOT DISTINCT FROM s.request_rate AND w.simulated = s.simulated
  LEFT JOIN config_pareto p USING (group_id)
)
SELECT v.*,
  -- no group of the same sweep (and simulation) has both more total and more per-user tok/s
  CASE WHEN v.per_user_tok_s IS NOT NULL AND v.output_tok_s_mean IS NOT NULL THEN NOT EXISTS (
    SELECT 1 FROM v o
    WHERE o.sweep_name IS NOT DISTINCT FROM v.sweep_name AND o.simulated = v.simulated
      AND o.output_tok_s_mean >= v.output_tok_s_mean AND o.per_user_tok_s >= v.per_user_tok_s
      AND (o.output_tok_s_mean > v.output_tok_s_mean OR o.per_user_tok_s > v.per_user_tok_s))
  END AS pareto_frontier
FROM v
""", (*_POOLED, "config_stats", "concurrency_winners", "config_pareto")))

# config_pairs (one row per ordered pair of configs measured at one load of one sweep; issue 31):
#   how much faster config A (group_id) ran than config B (other_group_id), the comparison
#   `specwatch recommend` picks a schedule by. Same sweep, concurrency and `simulated`;
#   x_i, y_i = the repeats' client tok/s of A and B (ok runs).
#   ratio            = exp(mean ln x_i − mean ln y_i)   (A over B; B = the baseline gives
#                      config_stats.speedup)
#   ratio_ci_low/high = 95 % t interval on the log scale, exp'd back (`ratio_method`):
#     'paired'  every repeat i of both ran (the sweep's interleaved block i): d_i = ln x_i − ln y_i,
#               se = sd(d) / sqrt(n), df = n − 1
#     'welch'   otherwise: se = sqrt(sd(ln x)²/n_x + sd(ln y)²/n_y), Welch-Satterthwaite df
#     NULL with fewer than 2 repeats on a side; [ratio, ratio] when se = 0
#   ratio_verdict    = 'faster' (ratio_ci_low > 1), 'slower' (ratio_ci_high < 1), 'within noise'
#                      (the interval contains 1), 'no interval'
VIEWS.append(f"""
CREATE OR REPLACE VIEW config_pairs AS
WITH r AS (
  SELECT DISTINCT group_id, run_id, repeat_idx, ln(output_tok_s) AS lx
  FROM run_metrics WHERE {OK} AND output_tok_s > 0 AND sweep_name IS NOT NULL
), g AS (
  SELECT group_id, count(*) AS n, avg(lx) AS m, stddev_samp(lx) AS s FROM r GROUP BY group_id
), pg AS (
  SELECT x.*, g.n, g.m, g.s FROM run_groups x JOIN g USING (group_id)
), pairs AS (
  SELECT a.group_id AS a_id, b.group_id AS b_id, count(*) AS pairs,
    stddev_samp(a.lx - b.lx) AS d_sd
  FROM r a JOIN r b ON a.repeat_idx = b.repeat_idx AND a.group_id <> b.group_id
  GROUP BY ALL
), c AS (
  SELECT a.sweep_name, a.concurrency, a.request_rate, a.simulated, a.group_id, a.config,
    b.group_id AS other_group_id, b.config AS other_config, a.n AS repeats,
    b.n AS other_repeats, exp(a.m - b.m) AS ratio,
    CASE WHEN a.n < 2 OR b.n < 2 THEN NULL
         WHEN p.pairs = a.n AND p.pairs = b.n THEN 'paired' ELSE 'welch' END AS ratio_method,
    p.pairs, p.d_sd, pow(a.s, 2) / a.n AS va, pow(b.s, 2) / b.n AS vb, a.n AS na, b.n AS nb
  FROM pg a JOIN pg b
    ON a.sweep_name = b.sweep_name AND a.concurrency IS NOT DISTINCT FROM b.concurrency
   AND a.request_rate IS NOT DISTINCT FROM b.request_rate
   AND a.simulated = b.simulated AND a.group_id <> b.group_id
  LEFT JOIN pairs p ON p.a_id = a.group_id AND p.b_id = b.group_id
), se AS (
  SELECT *,
    CASE ratio_method WHEN 'paired' THEN d_sd / sqrt(pairs) WHEN 'welch' THEN sqrt(va + vb) END
      AS ratio_log_se,
    CASE ratio_method WHEN 'paired' THEN pairs - 1
         WHEN 'welch' THEN CASE WHEN va + vb > 0 THEN pow(va + vb, 2)
                                / (pow(va, 2) / (na - 1) + pow(vb, 2) / (nb - 1)) END END
      AS ratio_df
  FROM c
), b AS (
  SELECT *,
    CASE WHEN ratio_method IS NULL THEN NULL WHEN ratio_log_se = 0 THEN ratio
         ELSE ratio * exp(-{t975_sql('floor(ratio_df + 1e-9)')} * ratio_log_se) END
      AS ratio_ci_low,
    CASE WHEN ratio_method IS NULL THEN NULL WHEN ratio_log_se = 0 THEN ratio
         ELSE ratio * exp({t975_sql('floor(ratio_df + 1e-9)')} * ratio_log_se) END
      AS ratio_ci_high
  FROM se
)
SELECT sweep_name, concurrency, request_rate, simulated, group_id, config, other_group_id,
  other_config,
  repeats, other_repeats, ratio, ratio_ci_low, ratio_ci_high, ratio_method, ratio_df,
  CASE WHEN ratio_ci_low IS NULL THEN 'no interval' WHEN ratio_ci_low > 1 THEN 'faster'
       WHEN ratio_ci_high < 1 THEN 'slower' ELSE 'within noise' END AS ratio_verdict
FROM b
""")
