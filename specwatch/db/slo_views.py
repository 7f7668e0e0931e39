"""Traffic, SLO and load-curve metrics, defined once as SQL views (issue 30).

Over the stored request rows of sweep runs (`requests.send_offset_ms`, `arrival_offset_ms`,
`category`), the sweep's targets (`sweep_targets`: the [slo] limits, the adaptive-repeat target)
and the statistics over repeats (`stats.config_stats`). The CLI (`report`), the dashboard and the
sweep's rounds (`run/rounds.py`) read these views and recompute nothing.

run_arrivals (one row per run with send times; measured requests only, failed ones included):
  achieved_rate_req_s = (n − 1) / (last send − first send)     (requests really sent per second)
  arrival_cv          = sd / mean of the n − 1 gaps between consecutive sends (1 for Poisson,
                        1/sqrt(burstiness) for gamma arrivals)
  send_lateness_ms_*  = send_offset_ms − arrival_offset_ms: how late the load generator sent a
                        request against its arrival time (open loop only)
  schedule_rate_req_s, schedule_cv = the same two over the arrival times asked (arrival_offset_ms)
  schedule_kept       = |achieved_rate / schedule_rate − 1| <= SCHEDULE_RATE_TOL and
                        |arrival_cv − schedule_cv| <= SCHEDULE_CV_TOL: the server saw the traffic
                        asked (NULL closed loop); false with schedule_reason (the numbers, and
                        what to do) when the client could not send on time (a starved client
                        machine: a CPU server on the same cores sends late bursts)

group_schedule (one row per open-loop group): runs, runs_off_schedule (schedule_kept false), the
  worst run's send_lateness_ms_p50 and its schedule_reason. `report` names every group with a
  run off schedule: its goodput and latencies are at other traffic than asked.

run_slo (one row per run of a sweep with an [slo]; p = slo_percentile):
  a request is good   when it succeeded and, for each limit set: ttft_ms <= slo_ttft_ms,
                      coalesce(tpot_ms, 0) <= slo_tpot_ms (one token: no TPOT, as vLLM counts it),
                      its own p-th percentile ITL <= slo_itl_ms (none: passes), e2e_ms <= slo_e2e_ms
  goodput_req_s       = good requests / duration_s      (vLLM's request goodput, DistServe's idea)
  slo_attainment_frac = good requests / measured requests
  <metric>_at_slo_pct = the p-th percentile of ttft/tpot/e2e over the run's successful requests,
                        and of every ITL of them (linear interpolation, as numpy's default)
  slo_margin          = max over the limits set of ln(<metric>_at_slo_pct / limit): <= 0 exactly
                        when every limited percentile is within its limit; a log ratio, so 0.1
                        means "10.5% over the tightest limit" whatever the metric
  meets_slo           = slo_margin <= 0

group_slo (one row per measurement group with an SLO; n = ok runs):
  goodput_req_s_mean, _ci_low/high = mean ∓ t(0.975, n − 1) · sd / sqrt(n)
  slo_margin_mean, _ci_low/high    = the same over the runs' slo_margin
  slo_verdict = 'meets' (margin interval <= 0), 'misses' (> 0), 'unclear' (contains 0); with one
                repeat, by the point alone (slo_verdict_reason says so)

config_max_rate (one row per sweep config with request-rate groups under an SLO): the highest rate
  that meets the SLO. The margin curve m(ln rate) over the config's rate groups (the fixed
  request_rate list and the rate search's rates alike), followed from the lowest rate, first
  crosses 0 between the last rate that meets and the first that misses; linear interpolation on
  ln(rate) there gives max_rate_req_s. Its interval: the same crossing of the upper band
  (slo_margin_ci_high: the pessimistic curve) gives the low end, of the lower band the high end.
  max_rate_state (and _low_state, _high_state for the ends):
    'crosses' the value is that crossing
    'below'   the curve already misses at the lowest measured rate: the value is below it (NULL)
    'above'   it meets at every measured rate: the value is above the highest (NULL)
  max_rate_meeting_req_s = the highest measured rate, below the first miss, whose group meets.

config_crossover (one row per sweep config and load kind, 'concurrency' or 'request_rate'): the
  load at which speculation stops beating the baseline. The curve ln(speedup) over the config's
  loads (config_stats rows with a speedup; the sweep's own levels, not the rate search's rates:
  those are placed for the SLO, not for the speedup), followed from the lowest load, first falls
  through 0;
  linear interpolation on ln(load) gives crossover_load. Interval: the crossing of
  ln(speedup_ci_low) (falls first) to that of ln(speedup_ci_high). States as above, with
  'below' = slower than the baseline already at the lowest load, 'above' = faster at every load.

group_repeats (one row per group of a sweep with adaptive repeats):
  speedup_ci_width = (speedup_ci_high − speedup_ci_low) / speedup
  repeats_status   = 'target' (width <= target_ci_width), 'cap' (repeats >= max_repeats before
                     that: stopped on the cap), 'more' (measure another repeat), 'baseline',
                     'no interval' (no speedup to narrow: no comparable baseline, n < 2 ...)

category_stats (one row per group and prompt category; ok runs, successful measured requests):
  accept_len   = mean over repeats of Σ output tokens / Σ verify steps of the category's requests
                 (token-weighted, as run_metrics.client_accept_len)
  speedup_e2e  = exp(mean over repeats of d_r), d_r = mean over the category's requests of
                 ln(baseline e2e_ms / this config's e2e_ms), each request matched with the same
                 request (request_idx: same prompt, same max tokens) of the same-sweep baseline's
                 run of the same repeat; how much sooner such a request completes. 95% interval:
                 t over the repeats' d_r (NULL for one repeat).
"""
from __future__ import annotations

from specwatch.db.stats import OK, t975_sql

VIEWS: list[str] = []
LIMITS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
# a run kept its arrival schedule when the sends' rate and gap CV are the schedule's within these
# (the load generator's own bounds: benchmarks/bench_load_generator.py)
SCHEDULE_RATE_TOL = 0.02
SCHEDULE_CV_TOL = 0.1


def pct_sql(sorted_list: str, p: str) -> str:
    """SQL: the p-th percentile (p in 0..100) of an ascending-sorted list, linearly interpolated
    (numpy's default, load.percentile); NULL for an empty or NULL list."""
    pos = f"((len({sorted_list}) - 1) * ({p}) / 100.0)"
    lo = f"CAST(floor({pos}) AS BIGINT) + 1"
    hi = f"CAST(ceil({pos}) AS BIGINT) + 1"
    return (f"(CASE WHEN len({sorted_list}) > 0 THEN list_extract({sorted_list}, {lo}) + "
            f"(list_extract({sorted_list}, {hi}) - list_extract({sorted_list}, {lo})) * "
            f"({pos} - floor({pos})) END)")


def first_crossing_sql(src: str, keys: str, x: str, y: str, falling: bool = False) -> str:
    """SQL: one row per `keys` of `src` with (state, x_cross): where y(x), followed in x order
    over its non-NULL points, first crosses 0 upwards (from <= 0 to > 0; `falling`: from >= 0 to
    < 0), linearly interpolated; state 'crosses', 'below' (already past 0 at the lowest x) or
    'above' (never crosses up to the highest x)."""
    sign = "-" if falling else ""
    return f"""
SELECT {keys},
  CASE WHEN bool_or(i = 1 AND y > 0) THEN 'below' WHEN count(xc) > 0 THEN 'crosses'
       ELSE 'above' END AS state,
  CASE WHEN NOT bool_or(i = 1 AND y > 0) THEN min(xc) END AS x_cross
FROM (
  SELECT *, CASE WHEN y <= 0 AND y2 > 0 THEN x + (0 - y) * (x2 - x) / (y2 - y) END AS xc
  FROM (
    SELECT {keys}, {x} AS x, {sign}({y}) AS y,
      lead({x}) OVER w AS x2, lead({sign}({y})) OVER w AS y2, row_number() OVER w AS i
    FROM {src} WHERE ({y}) IS NOT NULL AND ({x}) IS NOT NULL
    WINDOW w AS (PARTITION BY {keys} ORDER BY {x})
  )
) GROUP BY {keys}
"""


VIEWS.append(f"""
CREATE OR REPLACE VIEW run_arrivals AS
WITH s AS (
  SELECT run_id, send_offset_ms, arrival_offset_ms,
    send_offset_ms - lag(send_offset_ms) OVER (PARTITION BY run_id
                                               ORDER BY send_offset_ms, request_idx) AS gap_ms,
    arrival_offset_ms - lag(arrival_offset_ms) OVER (PARTITION BY run_id
                                                     ORDER BY arrival_offset_ms, request_idx)
      AS due_gap_ms
  FROM requests
  WHERE NOT coalesce(is_warmup, false) AND send_offset_ms IS NOT NULL
), a AS (
  SELECT run_id, count(*) AS requests_sent,
    (count(*) - 1) * 1000.0 / nullif(max(send_offset_ms) - min(send_offset_ms), 0)
      AS achieved_rate_req_s,
    stddev_samp(gap_ms) / nullif(avg(gap_ms), 0) AS arrival_cv,
    (count(arrival_offset_ms) - 1) * 1000.0
      / nullif(max(arrival_offset_ms) - min(arrival_offset_ms), 0) AS schedule_rate_req_s,
    stddev_samp(due_gap_ms) / nullif(avg(due_gap_ms), 0) AS schedule_cv,
    quantile_cont(send_offset_ms - arrival_offset_ms, 0.5) AS send_lateness_ms_p50,
    quantile_cont(send_offset_ms - arrival_offset_ms, 0.99) AS send_lateness_ms_p99,
    max(send_offset_ms - arrival_offset_ms) AS send_lateness_ms_max
  FROM s GROUP BY run_id
), k AS (
  SELECT *,
    CASE WHEN schedule_rate_req_s IS NULL OR achieved_rate_req_s IS NULL THEN NULL
         ELSE abs(achieved_rate_req_s / schedule_rate_req_s - 1) <= {SCHEDULE_RATE_TOL}
              AND abs(coalesce(arrival_cv, 0) - coalesce(schedule_cv, 0)) <= {SCHEDULE_CV_TOL}
    END AS schedule_kept
  FROM a
)
SELECT *,
  CASE WHEN NOT schedule_kept THEN
    printf('sent at %.3g/s against the schedule''s %.3g/s, gaps CV %.2f against %.2f, '
           || 'sends %.0f ms late at p50 (max %.0f ms): the client did not keep the arrival '
           || 'schedule, so the server saw other traffic than asked; run the load where the '
           || 'client has a free core (a CPU server on the same cores starves it)',
           achieved_rate_req_s, schedule_rate_req_s, coalesce(arrival_cv, 0),
           coalesce(schedule_cv, 0), send_lateness_ms_p50, send_lateness_ms_max) END
    AS schedule_reason
FROM k
""")

VIEWS.append("""
CREATE OR REPLACE VIEW group_schedule AS
SELECT g.sweep_name, g.config, g.config_name, g.is_baseline, g.concurrency, g.request_rate,
  m.group_id, count(*) AS runs, count(*) FILTER (WHERE NOT a.schedule_kept) AS runs_off_schedule,
  max(a.send_lateness_ms_p50) AS send_lateness_ms_p50_max,
  arg_max(a.schedule_reason, a.send_lateness_ms_p50) FILTER (WHERE NOT a.schedule_kept)
    AS schedule_reason
FROM run_arrivals a
JOIN (SELECT DISTINCT run_id, group_id FROM run_metrics) m USING (run_id)
JOIN run_groups g USING (group_id)
WHERE a.schedule_kept IS NOT NULL
GROUP BY ALL
""")

_at = {m: pct_sql(f"{m}s", "slo_percentile") for m in LIMITS}
VIEWS.append(f"""
CREATE OR REPLACE VIEW run_slo AS
WITH t AS (
  SELECT r.run_id, r.duration_s, g.slo_ttft_ms, g.slo_tpot_ms, g.slo_itl_ms, g.slo_e2e_ms,
    coalesce(g.slo_percentile, 99) AS slo_percentile
  FROM runs r JOIN sweep_targets g ON g.sweep_name = r.sweep_name
  WHERE coalesce(g.slo_ttft_ms, g.slo_tpot_ms, g.slo_itl_ms, g.slo_e2e_ms) IS NOT NULL
), q AS (
  SELECT t.*, x.success, x.ttft_ms, x.tpot_ms, x.e2e_ms, x.itl_ms,
    {pct_sql('list_sort(x.itl_ms)', 't.slo_percentile')} AS request_itl_ms
  FROM t JOIN requests x USING (run_id)
  WHERE NOT coalesce(x.is_warmup, false)
), per AS (
  SELECT run_id, any_value(duration_s) AS duration_s, any_value(slo_ttft_ms) AS slo_ttft_ms,
    any_value(slo_tpot_ms) AS slo_tpot_ms, any_value(slo_itl_ms) AS slo_itl_ms,
    any_value(slo_e2e_ms) AS slo_e2e_ms, any_value(slo_percentile) AS slo_percentile,
    count(*) AS requests,
    count(*) FILTER (WHERE success
      AND (slo_ttft_ms IS NULL OR ttft_ms <= slo_ttft_ms)
      AND (slo_tpot_ms IS NULL OR coalesce(tpot_ms, 0) <= slo_tpot_ms)
      AND (slo_itl_ms IS NULL OR coalesce(request_itl_ms, 0) <= slo_itl_ms)
      AND (slo_e2e_ms IS NULL OR e2e_ms <= slo_e2e_ms)) AS good_requests,
    list_sort(list(ttft_ms) FILTER (WHERE success AND ttft_ms IS NOT NULL)) AS ttft_mss,
    list_sort(list(tpot_ms) FILTER (WHERE success AND tpot_ms IS NOT NULL)) AS tpot_mss,
    list_sort(flatten(list(itl_ms) FILTER (WHERE success AND itl_ms IS NOT NULL))) AS itl_mss,
    list_sort(list(e2e_ms) FILTER (WHERE success AND e2e_ms IS NOT NULL)) AS e2e_mss
  FROM q GROUP BY run_id
), pcts AS (
  SELECT * EXCLUDE (ttft_mss, tpot_mss, itl_mss, e2e_mss),
    {_at['ttft_ms']} AS ttft_ms_at_slo_pct, {_at['tpot_ms']} AS tpot_ms_at_slo_pct,
    {_at['itl_ms']} AS itl_ms_at_slo_pct, {_at['e2e_ms']} AS e2e_ms_at_slo_pct
  FROM per
)
SELECT *, good_requests / nullif(duration_s, 0) AS goodput_req_s,
  good_requests / nullif(requests, 0) AS slo_attainment_frac,
  slo_margin <= 0 AS meets_slo
FROM (
  SELECT *, greatest({', '.join(f'ln({m}_at_slo_pct / slo_{m})' for m in LIMITS)}) AS slo_margin
  FROM pcts
)
""")


def _ci(mean: str, sd: str, n: str, sign: str) -> str:
    return f"{mean} {sign} {t975_sql(f'{n} - 1')} * {sd} / sqrt({n})"


VIEWS.append(f"""
CREATE OR REPLACE VIEW group_slo AS
WITH x AS (
  SELECT m.group_id, s.*, a.achieved_rate_req_s, a.arrival_cv
  FROM run_slo s
  JOIN (SELECT DISTINCT run_id, group_id, status FROM run_metrics) m USING (run_id)
  LEFT JOIN run_arrivals a USING (run_id)
  WHERE {OK.replace('status', 'm.status')}
), per AS (
  SELECT group_id, count(*) AS slo_repeats,
    any_value(slo_percentile) AS slo_percentile, any_value(slo_ttft_ms) AS slo_ttft_ms,
    any_value(slo_tpot_ms) AS slo_tpot_ms, any_value(slo_itl_ms) AS slo_itl_ms,
    any_value(slo_e2e_ms) AS slo_e2e_ms,
    avg(goodput_req_s) AS goodput_req_s_mean, stddev_samp(goodput_req_s) AS goodput_req_s_sd,
    avg(slo_attainment_frac) AS slo_attainment_frac,
    avg(slo_margin) AS slo_margin_mean, stddev_samp(slo_margin) AS slo_margin_sd,
    count(slo_margin) AS margin_n,
    count(*) FILTER (WHERE meets_slo) AS runs_meeting_slo,
    avg(ttft_ms_at_slo_pct) AS ttft_ms_at_slo_pct, avg(tpot_ms_at_slo_pct) AS tpot_ms_at_slo_pct,
    avg(itl_ms_at_slo_pct) AS itl_ms_at_slo_pct, avg(e2e_ms_at_slo_pct) AS e2e_ms_at_slo_pct,
    avg(achieved_rate_req_s) AS achieved_rate_req_s, avg(arrival_cv) AS arrival_cv
  FROM x GROUP BY group_id
), ci AS (
  SELECT g.sweep_name, g.config, g.config_name, g.is_baseline, g.concurrency, g.request_rate,
    per.*,
    {_ci('goodput_req_s_mean', 'goodput_req_s_sd', 'slo_repeats', '-')} AS goodput_req_s_ci_low,
    {_ci('goodput_req_s_mean', 'goodput_req_s_sd', 'slo_repeats', '+')} AS goodput_req_s_ci_high,
    {_ci('slo_margin_mean', 'slo_margin_sd', 'margin_n', '-')} AS slo_margin_ci_low,
    {_ci('slo_margin_mean', 'slo_margin_sd', 'margin_n', '+')} AS slo_margin_ci_high
  FROM per JOIN run_groups g USING (group_id)
)
SELECT *,
  CASE WHEN slo_margin_mean IS NULL THEN NULL
       WHEN slo_margin_ci_high IS NULL THEN CASE WHEN slo_margin_mean <= 0 THEN 'meets'
                                                 ELSE 'misses' END
       WHEN slo_margin_ci_high <= 0 THEN 'meets'
       WHEN slo_margin_ci_low > 0 THEN 'misses'
       ELSE 'unclear' END AS slo_verdict,
  CASE WHEN slo_margin_mean IS NULL THEN 'no successful request to measure'
       WHEN slo_margin_ci_high IS NULL THEN 'one repeat: by its point alone, no interval'
       WHEN slo_margin_ci_high <= 0 THEN 'the 95% interval of the margin lies within the SLO'
       WHEN slo_margin_ci_low > 0 THEN 'the 95% interval of the margin lies outside the SLO'
       ELSE 'the 95% interval of the margin contains the limit: add repeats' END
    AS slo_verdict_reason
FROM ci
""")

_MR = "group_slo_rates"
VIEWS.append(f"""
CREATE OR REPLACE VIEW config_max_rate AS
WITH {_MR} AS MATERIALIZED (
  SELECT * FROM group_slo WHERE request_rate > 0 AND sweep_name IS NOT NULL
), pt AS ({first_crossing_sql(_MR, 'sweep_name, config', 'ln(request_rate)', 'slo_margin_mean')}
), lo AS ({first_crossing_sql(_MR, 'sweep_name, config', 'ln(request_rate)',
                              'slo_margin_ci_high')}
), hi AS ({first_crossing_sql(_MR, 'sweep_name, config', 'ln(request_rate)',
                              'slo_margin_ci_low')}
), span AS (
  SELECT sweep_name, config, any_value(is_baseline) AS is_baseline, count(*) AS rates_measured,
    min(request_rate) AS min_rate_req_s, max(request_rate) AS max_measured_rate_req_s,
    min(request_rate) FILTER (WHERE slo_margin_mean > 0) AS first_miss_req_s,
    any_value(slo_percentile) AS slo_percentile
  FROM {_MR} GROUP BY ALL
), meet AS (
  SELECT s.sweep_name, s.config, max(g.request_rate) AS max_rate_meeting_req_s
  FROM span s JOIN {_MR} g USING (sweep_name, config)
  WHERE g.slo_margin_mean <= 0 AND g.request_rate < coalesce(s.first_miss_req_s, 'Infinity')
  GROUP BY ALL
)
SELECT s.sweep_name, s.config, s.is_baseline, s.rates_measured, s.min_rate_req_s,
  s.max_measured_rate_req_s, s.slo_percentile, m.max_rate_meeting_req_s,
  exp(pt.x_cross) AS max_rate_req_s, pt.state AS max_rate_state,
  exp(lo.x_cross) AS max_rate_ci_low, lo.state AS max_rate_low_state,
  exp(hi.x_cross) AS max_rate_ci_high, hi.state AS max_rate_high_state,
  CASE pt.state
    WHEN 'crosses' THEN 'meets the SLO up to ' || round(exp(pt.x_cross), 3)
                        || ' requests/s (interpolated between the last rate that meets and the '
                        || 'first that misses)'
    WHEN 'below' THEN 'misses the SLO already at the lowest measured rate ('
                      || s.min_rate_req_s || ' requests/s): measure lower rates'
    WHEN 'above' THEN 'meets the SLO at every measured rate up to ' || s.max_measured_rate_req_s
                      || ' requests/s: measure higher rates'
  END AS max_rate_note
FROM span s JOIN pt USING (sweep_name, config) LEFT JOIN lo USING (sweep_name, config)
LEFT JOIN hi USING (sweep_name, config) LEFT JOIN meet m USING (sweep_name, config)
""")

_CX = "crossover_points"
_K = "sweep_name, config, load_kind"
VIEWS.append(f"""
CREATE OR REPLACE VIEW config_crossover AS
WITH {_CX} AS MATERIALIZED (
  SELECT sweep_name, config, 'concurrency' AS load_kind, concurrency::DOUBLE AS load, speedup,
    speedup_ci_low, speedup_ci_high
  FROM config_stats WHERE NOT is_baseline AND speedup > 0 AND concurrency > 0
    AND request_rate IS NULL AND sweep_name IS NOT NULL
  UNION ALL
  SELECT sweep_name, config, 'request_rate', request_rate, speedup, speedup_ci_low,
    speedup_ci_high
  FROM config_stats WHERE NOT is_baseline AND speedup > 0 AND request_rate > 0
    AND sweep_name IS NOT NULL AND NOT rate_search_only
), pt AS ({first_crossing_sql(_CX, _K, 'ln(load)', 'ln(speedup)', falling=True)}
), lo AS ({first_crossing_sql(_CX, _K, 'ln(load)', 'ln(speedup_ci_low)', falling=True)}
), hi AS ({first_crossing_sql(_CX, _K, 'ln(load)', 'ln(speedup_ci_high)', falling=True)}
), span AS (
  SELECT {_K}, count(*) AS loads_measured, min(load) AS min_load, max(load) AS max_load
  FROM {_CX} GROUP BY ALL
)
SELECT s.*, exp(pt.x_cross) AS crossover_load, pt.state AS crossover_state,
  exp(lo.x_cross) AS crossover_ci_low, lo.state AS crossover_low_state,
  exp(hi.x_cross) AS crossover_ci_high, hi.state AS crossover_high_state,
  CASE pt.state
    WHEN 'crosses' THEN 'speculation stops paying at ' || s.load_kind || ' '
                        || round(exp(pt.x_cross), 3)
    WHEN 'below' THEN 'slower than the baseline already at the lowest measured '
                      || s.load_kind || ' (' || s.min_load || ')'
    WHEN 'above' THEN 'faster than the baseline at every measured ' || s.load_kind
                      || ' up to ' || s.max_load
  END AS crossover_note
FROM span s JOIN pt USING ({_K}) LEFT JOIN lo USING ({_K}) LEFT JOIN hi USING ({_K})
""")

VIEWS.append("""
CREATE OR REPLACE VIEW group_repeats AS
SELECT c.group_id, c.sweep_name, c.config, c.concurrency, c.request_rate, c.is_baseline,
  c.repeats, c.baseline_group_id, t.target_ci_width, t.max_repeats,
  (c.speedup_ci_high - c.speedup_ci_low) / nullif(c.speedup, 0) AS speedup_ci_width,
  CASE WHEN c.is_baseline THEN 'baseline'
       WHEN c.speedup_ci_low IS NULL THEN 'no interval'
       WHEN (c.speedup_ci_high - c.speedup_ci_low) / nullif(c.speedup, 0) <= t.target_ci_width
       THEN 'target'
       WHEN c.repeats >= t.max_repeats THEN 'cap'
       ELSE 'more' END AS repeats_status
FROM config_stats c JOIN sweep_targets t ON t.sweep_name = c.sweep_name
WHERE t.max_repeats IS NOT NULL
""")

VIEWS.append(f"""
CREATE OR REPLACE VIEW category_stats AS
WITH q AS (
  SELECT m.group_id, m.run_id, m.repeat_idx, x.request_idx, x.category, x.output_tokens,
    x.spec_verify_ct, x.e2e_ms
  FROM (SELECT DISTINCT group_id, run_id, repeat_idx, status FROM run_metrics) m
  JOIN requests x USING (run_id)
  WHERE {OK.replace('status', 'm.status')} AND x.success AND NOT coalesce(x.is_warmup, false)
    AND x.category IS NOT NULL
), acc AS (
  SELECT group_id, run_id, repeat_idx, category, count(*) AS requests,
    sum(output_tokens) FILTER (WHERE spec_verify_ct > 0)
      / nullif(sum(spec_verify_ct) FILTER (WHERE spec_verify_ct > 0), 0) AS accept_len
  FROM q GROUP BY ALL
), pair AS (
  SELECT s.group_id, s.repeat_idx, s.category, avg(ln(b.e2e_ms / s.e2e_ms)) AS d
  FROM q s
  JOIN group_baselines gb ON gb.group_id = s.group_id AND gb.baseline_match = 'same-sweep'
  JOIN q b ON b.group_id = gb.baseline_group_id AND b.repeat_idx = s.repeat_idx
   AND b.request_idx = s.request_idx
  WHERE s.e2e_ms > 0 AND b.e2e_ms > 0
  GROUP BY ALL
), per AS (
  SELECT a.group_id, a.category, count(*) AS repeats, sum(a.requests) AS requests,
    avg(a.accept_len) AS accept_len, count(p.d) AS speedup_repeats, avg(p.d) AS d_mean,
    stddev_samp(p.d) AS d_sd
  FROM acc a LEFT JOIN pair p USING (group_id, repeat_idx, category)
  GROUP BY ALL
)
SELECT g.sweep_name, g.config, g.concurrency, g.request_rate, g.is_baseline,
  g.rate_search_only, per.group_id,
  per.category, per.repeats, per.requests, per.accept_len, per.speedup_repeats,
  exp(per.d_mean) AS speedup_e2e,
  exp({_ci('per.d_mean', 'per.d_sd', 'per.speedup_repeats', '-')}) AS speedup_e2e_ci_low,
  exp({_ci('per.d_mean', 'per.d_sd', 'per.speedup_repeats', '+')}) AS speedup_e2e_ci_high
FROM per JOIN run_groups g USING (group_id)
""")
