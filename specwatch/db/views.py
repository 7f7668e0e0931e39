"""Every per-run metric specwatch reports, defined once as a SQL view over the stored raw rows:
decode windows scoped to runs, the window rule, `run_metrics`, `accept_positions`.

The statistics over repeats (baselines, speedups, intervals, verdicts) are `stats.py`'s views over
these. The CLI (`report`), the dashboard and doctor read the views; none of them recomputes a
metric. Formulas are documented beside each view. Imports nothing from specwatch.
"""
from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# Derived views: every metric specwatch reports is defined here, once, with its formula.
#
# decode_windows_scoped: each decode window of each run (via run_sources byte ranges) with the
#   effective server config (the latest server_args line before it in the same file, an ASOF join)
#   and `after_idle`: the window is the first of its (run, file, config, DP rank, PP rank) or
#   follows the previous one by more than 60 s. Such a window's gen throughput divides by a time
#   that includes warm-up/idle, and its accept length can mix in steps from before the run
#   (LOG_FORMATS §4.3), so summaries drop it unless it is the only window of its rank.
#
# run_rank_metrics (one row per run, server config and DP rank): the same sums per DP rank (PP ranks
#   of one DP rank pooled); accept_len = Σ(accept_len_w · running_req_w) / Σ running_req_w over the
#   rank's kept windows, rank_gen_tok_s = the mean gen throughput of its kept windows. run_metrics
#   pools these; doctor's DP check compares them.
# run_metrics (one row per run and server config; config_summary adds the per-run speedups):
#   accept_len          = Σ(accept_len_w · running_req_w) / Σ running_req_w over kept windows.
#                         A window's accept_len is Σ tokens / Σ batch sizes over its steps; weighting
#                         by the batch size printed at the window's end approximates Σ batch sizes.
#   accept_rate         = (accept_len − 1) / (speculative_num_draft_tokens − 1): the fraction of
#                         proposed draft tokens accepted (SGLang 0.5.11+ definition), recomputed from
#                         accept_len so that logs of every version compare. NULL without draft tokens.
#   accept_rate_printed = the same weighting over the printed `accept rate` (its definition depends on
#                         the SGLang version: 0.5.4-0.5.5 /(steps+1), 0.5.6-0.5.10 /draft_tokens incl.
#                         bonus, 0.5.11+ as accept_rate). For display only.
#   gen_throughput_tok_s = Σ over DP ranks of the mean `gen throughput` of that rank's kept windows
#                         (each scheduler prints its own; system throughput is their sum).
#   output_tok_s, ttft/itl/tpot/e2e percentiles: client-side, from the run's load (sweeps only).
#   joules_per_output_token = gpu_energy_j / output_tokens: the GPU energy NVML counted over the
#                         run's load (all its GPUs) per output token of its measured requests;
#                         NULL without NVML (runs.gpu_energy_j, run/energy.py).
#   accept_len_request_weighted = mean over the run's measured requests of output tokens / verify
#                         steps (client side, sweeps only); accept_len above is token-weighted.
#   group_id            = the repeats a statistic pools: a sweep's (config, load level: its
#                         concurrency or request rate), or an ingested log's (run, server config).
#   vLLM runs: accept_len = 1 + Δaccepted / Δdrafts and accept_rate = Δaccepted / Δdraft tokens
#                         from the run's own /metrics counter deltas (runs.spec_*, sweeps), else
#                         from the log's `SpecDecoding metrics:` windows in the run's byte range:
#                         Σ(mean acceptance length · drafted) / Σ drafted, Σ accepted / Σ drafted
#                         (the windows are 10 s of wall time, so they straddle runs; the counters
#                         are exact). gen_throughput_tok_s = mean non-zero `Avg generation throughput`.
#   SGLang runs without decode windows (attach mode without a log): accept_len = Δ
#                         sglang:generation_tokens_total / Δ sglang:spec_verify_calls_total over
#                         the run's /metrics samples (run_metric_deltas; SGLang's per-request
#                         completion_tokens / spec_verify_ct, summed; needs --enable-metrics).
#   One accept length on every engine: tokens committed per verify step, the bonus token
#                         included = 1 + accepted drafts / verify steps (SGLang's `accept len`, vLLM's
#                         `Mean acceptance length`). vLLM counts only steps that had a draft (an
#                         ngram step without a match is no draft), SGLang every decode step.
#   served_by           = the engine that served the run: the sweep's `engine` (sglang, vllm,
#                         builtin), else what the log's lines are: 'vllm' when the run's range has
#                         vLLM stats or config lines, 'sglang' when it has SGLang decode windows or
#                         follows an SGLang server_args line; NULL when the log shows neither.
#                         doctor words its advice in this engine's flags.
#   lossy_verification  = the engine accepted drafts by a relaxed rule (`lossy_sql`): the config's
#                         server_args line (the windows' config, else the latest before the run's
#                         range) has SGLang speculative_accept_threshold_single/_acc below 1.0, or
#                         a vLLM config line in the run's range has rejection_sample_method 'fly'.
#                         False = the log shows a lossless rule or none.
#   speedups, baseline matching, repeats, intervals and verdicts: see config_stats below.
# ---------------------------------------------------------------------------------------------
# low_accept_len     = speculative run whose accept_len < LOW_ACCEPT_LEN (the draft barely predicts:
#                        typically wrong eagle_aux_hidden_state_layer_ids or a draft/target mismatch;
#                        healthy EAGLE-3 drafts sit at 2-4)
# slower_than_baseline = speedup_client < 1, or speedup_gen < 1 when no client numbers exist
# (columns of config_summary, so a reader evaluates the view once; doctor explains them in depth)
LOW_ACCEPT_LEN = 1.5
IDLE_GAP_S = 60
# A lossy acceptance rule (doctor's lossy_verification; recommend leaves such configs out):
# SGLang accepts a draft token whose target probability exceeds threshold_single, else with
# probability min(1, p / threshold_acc) (sglang/srt/arg_groups/fields/spec.py, 0.5.23; 1.0 = exact
# rejection sampling); vLLM's rejection_sample_method 'fly' is lossy ('standard' and 'block' are
# not, 'synthetic' is simulated acceptance; vllm/config/speculative.py, 0.33-0.34).
SGLANG_THRESHOLDS = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")
VLLM_LOSSY_METHODS = {"fly": "FLy: lossy, entropy-gated deferred acceptance"}


def method_sql(c: str) -> str:
    """SQL: vLLM's rejection_sample_method in server_configs row `c`'s args (its speculative_config
    logged as a dict, or as the JSON text the flag was given as), else NULL."""
    return (f"json_extract_string(TRY_CAST({c}.args->>'speculative_config' AS JSON), "
            "'$.rejection_sample_method')")


def lossy_sql(c: str) -> str:
    """SQL: does server_configs row `c` print a lossy acceptance rule? (NULL when it prints none.)"""
    relaxed = " OR ".join(f"TRY_CAST({c}.args->>'{k}' AS DOUBLE) < 1.0" for k in SGLANG_THRESHOLDS)
    methods = ", ".join(f"'{m}'" for m in VLLM_LOSSY_METHODS)
    return f"({relaxed} OR {method_sql(c)} IN ({methods}))"


# The window rule, once: a run's statistics keep a window unless it is `after_idle` while its
# (run, file, config, DP rank, PP rank) partition has other windows. SQL over
# `decode_windows_scoped` and the same rule on one of its rows (a dict) for Python readers.
KEPT_WINDOW_SQL = "(NOT after_idle OR rank_windows = 1)"


def kept_window(w: dict) -> bool:
    """`KEPT_WINDOW_SQL` for one row of `decode_windows_scoped`."""
    return not w["after_idle"] or w["rank_windows"] == 1


def scoped_windows_sql(where: str = "") -> str:
    """The decode windows of each run with their server config, `after_idle`, `rank_windows` and
    `window_idx` (1 for the partition's first window, in byte order):
    the one definition, used by the view `decode_windows_scoped` (no `where`) and by
    specwatch/db/summaries.py for a few runs or a source's newest windows (`where` filters the joined
    rows, aliases `d` = decode_windows and `rs` = run_sources, before the window functions)."""
    return f"""
WITH scoped AS (
  SELECT rs.run_id, d.*
  FROM decode_windows d
  JOIN run_sources rs
    ON d.source_id = rs.source_id AND d.byte_offset >= rs.offset_from
   AND (rs.offset_to IS NULL OR d.byte_offset < rs.offset_to)
  {("WHERE " + where) if where else ""}
), cfg AS (
  SELECT s.*, c.byte_offset AS config_offset,
         c.model_path AS cfg_model_path, c.draft_model_path AS cfg_draft_model_path,
         c.speculative_algorithm AS cfg_speculative_algorithm,
         c.speculative_num_steps AS cfg_speculative_num_steps,
         c.speculative_eagle_topk AS cfg_speculative_eagle_topk,
         c.speculative_num_draft_tokens AS cfg_speculative_num_draft_tokens,
         c.tp_size AS cfg_tp_size, c.dp_size AS cfg_dp_size,
         c.decode_log_interval AS cfg_decode_log_interval, c.sglang_version AS cfg_sglang_version,
         c.disable_cuda_graph AS cfg_disable_cuda_graph
  FROM scoped s ASOF LEFT JOIN (
    SELECT * FROM server_configs WHERE coalesce(config_kind, 'server_args') = 'server_args') c
    ON s.source_id = c.source_id AND s.byte_offset >= c.byte_offset
)
SELECT *,
  (row_number() OVER w = 1
   OR coalesce(date_diff('second', lag(ts) OVER w, ts) > {IDLE_GAP_S}, false)) AS after_idle,
  count(*) OVER (PARTITION BY run_id, source_id, config_offset, dp_rank, pp_rank) AS rank_windows,
  row_number() OVER w AS window_idx
FROM cfg
WINDOW w AS (PARTITION BY run_id, source_id, config_offset, dp_rank, pp_rank ORDER BY byte_offset)
"""


# The partial sums of a run's decode windows that run_metrics needs, per (run, source, server
# config, DP rank, PP rank): kept in the table run_window_sums as windows are stored
# (specwatch/db/summaries.py), so a render reads a few rows per run instead of every window.
# (name, aggregate over windows) — `_k` over the windows not after idle, `first_` over the
# partition's first window (kept only when it is the rank's only window: see run_metrics):
WINDOW_SUMS = [
    ("al_num", "sum(accept_len * running_req)"),
    ("al_den", "sum(CASE WHEN accept_len IS NOT NULL THEN running_req END)"),
    ("ar_num", "sum(accept_rate_printed * running_req)"),
    ("ar_den", "sum(CASE WHEN accept_rate_printed IS NOT NULL THEN running_req END)"),
    ("gen_sum", "sum(gen_throughput_tok_s)"),
    ("gen_n", "count(gen_throughput_tok_s)"),
    ("graph", "bool_or(graph_enabled)"),
]
# Kept windows of a partition: those not after idle, or its first one when it is the only one.
_KEPT = "CASE WHEN windows_all = 1 THEN first_{0} ELSE {0}_k END"

# run_metric_deltas (one row per run and /metrics counter, a name ending in `_total`): what the
#   counter counted during the run's load = Σ over its label sets of (last sample − first sample);
#   a label set first seen after the run's first scrape of that endpoint was created during the
#   load (Prometheus clients create a labelled child at its first increment): its delta is its last
#   value. `reset` = a label set went down (the server restarted): its delta is NULL.
VIEWS = [
    """
CREATE OR REPLACE VIEW run_metric_deltas AS
WITH s AS (
  SELECT run_id, endpoint, name, labels, min(sampled_at) AS first_at,
    arg_min(value, sampled_at) AS first_value, arg_max(value, sampled_at) AS last_value
  FROM metric_samples WHERE run_id IS NOT NULL AND suffix(name, '_total')
  GROUP BY ALL
), f AS (
  SELECT run_id, endpoint, min(sampled_at) AS scraped_from FROM metric_samples
  WHERE run_id IS NOT NULL GROUP BY ALL
)
SELECT s.run_id, s.name,
  CASE WHEN NOT bool_or(s.last_value < s.first_value)
       THEN sum(CASE WHEN s.first_at > f.scraped_from THEN s.last_value
                     ELSE s.last_value - s.first_value END) END AS delta,
  bool_or(s.last_value < s.first_value) AS reset, count(*) AS label_sets
FROM s JOIN f USING (run_id, endpoint)
GROUP BY ALL
""",
    f"CREATE OR REPLACE VIEW decode_windows_scoped AS {scoped_windows_sql()}",
    f"""
CREATE OR REPLACE VIEW run_rank_metrics AS
WITH kept AS (
  SELECT * FROM run_window_sums s
  -- a partition counts while its run still holds that source (writers re-scope runs)
  WHERE EXISTS (SELECT 1 FROM run_sources rs WHERE rs.run_id = s.run_id
                                               AND rs.source_id = s.source_id)
    AND CASE WHEN windows_all = 1 THEN 1 ELSE windows_k END > 0
), per_rank AS (
  -- accept_len numerator/denominator: Σ accept_len·running_req and Σ running_req (WINDOW_SUMS)
  SELECT run_id, source_id AS config_source_id, config_offset, dp_rank,
    sum(CASE WHEN windows_all = 1 THEN 1 ELSE windows_k END) AS windows,
    sum({_KEPT.format("al_num")}) AS al_num,
    sum({_KEPT.format("al_den")}) AS al_den,
    sum({_KEPT.format("ar_num")}) AS ar_num,
    sum({_KEPT.format("ar_den")}) AS ar_den,
    -- the mean gen throughput of the rank's kept windows
    sum({_KEPT.format("gen_sum")}) / nullif(sum({_KEPT.format("gen_n")}), 0) AS rank_gen_tok_s,
    bool_or({_KEPT.format("graph")}) AS graph_enabled
  FROM kept GROUP BY ALL
)
SELECT *, al_num / nullif(al_den, 0) AS accept_len FROM per_rank
""",
    """
CREATE OR REPLACE VIEW run_metrics AS
WITH per_rank AS (
  SELECT * FROM run_rank_metrics
), per_cfg AS (
  SELECT run_id, config_source_id, config_offset,
    count(*) AS dp_ranks,
    sum(windows) AS windows,
    sum(al_num) / nullif(sum(al_den), 0) AS accept_len,
    sum(ar_num) / nullif(sum(ar_den), 0) AS accept_rate_printed,
    sum(rank_gen_tok_s) AS gen_throughput_tok_s,
    bool_or(graph_enabled) AS graph_enabled
  FROM per_rank GROUP BY ALL
), vllm AS (
  -- vLLM prints per-interval counters: accept_len = Σ(mean_acceptance_length · drafted) / Σ drafted,
  -- accept_rate = Σ accepted / Σ drafted (accepted drafts / proposed drafts, as SGLang 0.5.11+).
  SELECT rs.run_id, count(*) AS windows,
    sum(v.mean_acceptance_length * v.drafted_tokens)
      / nullif(sum(CASE WHEN v.mean_acceptance_length IS NOT NULL THEN v.drafted_tokens END), 0)
      AS accept_len,
    sum(v.accepted_tokens) / nullif(sum(v.drafted_tokens), 0) AS accept_rate
  FROM vllm_spec_windows v JOIN run_sources rs
    ON v.source_id = rs.source_id AND v.byte_offset >= rs.offset_from
   AND (rs.offset_to IS NULL OR v.byte_offset < rs.offset_to)
  GROUP BY rs.run_id
), vllm_tput AS (
  -- mean of the non-idle periodic lines (vLLM logs idle periods at DEBUG, but 0.0 lines happen)
  SELECT rs.run_id, avg(t.avg_generation_throughput_tok_s) AS gen_tok_s
  FROM vllm_throughput_windows t JOIN run_sources rs
    ON t.source_id = rs.source_id AND t.byte_offset >= rs.offset_from
   AND (rs.offset_to IS NULL OR t.byte_offset < rs.offset_to)
  WHERE t.avg_generation_throughput_tok_s > 0
  GROUP BY rs.run_id
), vcfg AS (
  -- vLLM's effective config: its engine-config and `non-default args` lines in the run's byte
  -- range (parse.derived_columns), each column's latest printed value
  SELECT rs.run_id,
    arg_max(c.model_path, c.byte_offset) FILTER (WHERE c.model_path IS NOT NULL) AS model_path,
    arg_max(c.draft_model_path, c.byte_offset) FILTER (WHERE c.draft_model_path IS NOT NULL)
      AS draft_model_path,
    arg_max(c.speculative_algorithm, c.byte_offset)
      FILTER (WHERE c.speculative_algorithm IS NOT NULL) AS speculative_algorithm,
    arg_max(c.speculative_num_steps, c.byte_offset)
      FILTER (WHERE c.speculative_num_steps IS NOT NULL) AS speculative_num_steps,
    arg_max(c.tp_size, c.byte_offset) FILTER (WHERE c.tp_size IS NOT NULL) AS tp_size,
    arg_max(c.dp_size, c.byte_offset) FILTER (WHERE c.dp_size IS NOT NULL) AS dp_size,
    arg_max(c.pp_size, c.byte_offset) FILTER (WHERE c.pp_size IS NOT NULL) AS pp_size,
    bool_or(c.simulated) AS simulated,         -- synthetic rejection sampling
    bool_or(@LOSSY_C@) AS lossy_verification
  FROM server_configs c JOIN run_sources rs
    ON c.source_id = rs.source_id AND c.byte_offset >= rs.offset_from
   AND (rs.offset_to IS NULL OR c.byte_offset < rs.offset_to)
  WHERE c.config_kind IN ('vllm_engine_config', 'vllm_args')
  GROUP BY rs.run_id
), sa AS (
  SELECT source_id, byte_offset, @LOSSY_SC@ AS lossy FROM server_configs
  WHERE coalesce(config_kind, 'server_args') = 'server_args'
), sim_cfg AS (
  -- SGLang logs nothing about SGLANG_SIMULATE_ACC_LEN: a server_args line is simulated when a
  -- `simulated` event (the env var > 0 in a launch line or env dump, e.g. specwatch's own
  -- `specwatch: launching env ...` line) precedes it in the same file with no other server_args
  -- line between them (the next server start after the event)
  SELECT DISTINCT c.source_id, c.byte_offset
  FROM events e ASOF JOIN sa c ON e.source_id = c.source_id AND e.byte_offset < c.byte_offset
  WHERE e.kind = 'simulated'
), run_sim AS (
  -- runs without decode windows (client numbers only): the server_args line their byte range
  -- follows
  SELECT rs.run_id, bool_or(sc.source_id IS NOT NULL) AS simulated, bool_or(c.lossy) AS lossy,
    bool_or(c.source_id IS NOT NULL) AS cfg
  FROM run_sources rs ASOF LEFT JOIN sa c
    ON rs.source_id = c.source_id AND rs.offset_from >= c.byte_offset
  LEFT JOIN sim_cfg sc ON sc.source_id = c.source_id AND sc.byte_offset = c.byte_offset
  GROUP BY rs.run_id
), prom AS (
  -- SGLang's /metrics counters over the run's load (run_metric_deltas): generation tokens and
  -- verify calls (attach mode without a log has no decode windows)
  SELECT run_id,
    sum(delta) FILTER (WHERE name = 'sglang:generation_tokens_total') AS gen_tokens,
    sum(delta) FILTER (WHERE name = 'sglang:spec_verify_calls_total') AS verify_calls
  FROM run_metric_deltas GROUP BY run_id
), req AS (
  -- request-weighted accept length: the mean over measured requests of each one's own
  -- output tokens / verify steps (short or easy requests count as much as long ones)
  SELECT run_id, avg(output_tokens / spec_verify_ct) AS accept_len_request_weighted
  FROM requests
  WHERE success AND NOT coalesce(is_warmup, false) AND spec_verify_ct > 0
  GROUP BY run_id
), rows AS (
  SELECT
    r.run_id, r.run_name, r.origin, r.sweep_name, r.config_name, r.engine, r.concurrency,
    coalesce(r.engine, CASE WHEN vl.run_id IS NOT NULL OR vt.run_id IS NOT NULL
                              OR vc.run_id IS NOT NULL THEN 'vllm'
                            WHEN p.run_id IS NOT NULL OR rsim.cfg THEN 'sglang' END) AS served_by,
    r.request_rate, r.arrival, r.rate_search_step,
    r.repeat_idx, r.status, r.failure_reason, r.created_at,
    p.config_source_id, p.config_offset,
    coalesce(c.model_path, vc.model_path, r.model_path) AS model_path,
    coalesce(c.draft_model_path, vc.draft_model_path, r.draft_model_path) AS draft_model_path,
    CASE WHEN p.config_offset IS NOT NULL THEN c.speculative_algorithm
         WHEN vl.run_id IS NOT NULL THEN coalesce(vc.speculative_algorithm, r.speculative_algorithm,
                                                  'vllm (unknown method)')
         ELSE coalesce(vc.speculative_algorithm, r.speculative_algorithm) END
      AS speculative_algorithm,
    coalesce(c.speculative_num_steps, vc.speculative_num_steps, r.speculative_num_steps)
      AS speculative_num_steps,
    coalesce(c.speculative_eagle_topk, r.speculative_eagle_topk) AS speculative_eagle_topk,
    coalesce(c.speculative_num_draft_tokens, r.speculative_num_draft_tokens)
      AS speculative_num_draft_tokens,
    coalesce(c.tp_size, vc.tp_size, r.tp_size) AS tp_size,
    coalesce(c.dp_size, vc.dp_size, r.dp_size) AS dp_size,
    coalesce(c.pp_size, vc.pp_size) AS pp_size,
    r.sampling_fingerprint, r.node_hostname,
    coalesce(c.sglang_version, r.sglang_version) AS sglang_version,
    r.aux_layer_ids, r.draft_weights_sha1, r.target_architecture, r.target_num_layers,
    -- simulated acceptance: SGLANG_SIMULATE_ACC_LEN (sim_cfg) or vLLM's synthetic rejection
    -- sampling (server_configs.simulated); false = the log shows no simulation
    (coalesce(c.simulated, false) OR coalesce(vc.simulated, false)
     OR CASE WHEN p.config_offset IS NOT NULL THEN sc.source_id IS NOT NULL
             ELSE coalesce(rsim.simulated, false) END) AS simulated,
    (coalesce(CASE WHEN p.config_offset IS NOT NULL THEN @LOSSY_C@ ELSE rsim.lossy END, false)
     OR coalesce(vc.lossy_verification, false)) AS lossy_verification,
    p.dp_ranks, coalesce(p.windows, vl.windows, 0) AS windows,
    coalesce(p.accept_len, 1 + r.spec_accepted_tokens / nullif(r.spec_drafts, 0), vl.accept_len,
             pm.gen_tokens / nullif(pm.verify_calls, 0)) AS accept_len,
    coalesce(r.spec_accepted_tokens / nullif(r.spec_draft_tokens, 0), vl.accept_rate)
      AS vllm_accept_rate,
    p.accept_rate_printed, coalesce(p.gen_throughput_tok_s, vt.gen_tok_s) AS gen_throughput_tok_s,
    p.graph_enabled,
    r.output_tok_s, r.request_per_s, r.requests_ok, r.requests_failed,
    r.ttft_ms_p50, r.ttft_ms_p90, r.ttft_ms_p99, r.itl_ms_p50, r.itl_ms_p90, r.itl_ms_p99,
    r.tpot_ms_p50, r.tpot_ms_p99, r.e2e_ms_p50, r.e2e_ms_p99,
    r.client_accept_len, r.server_accept_len,
    r.output_tokens, r.gpu_energy_j, r.gpu_energy_method,
    r.gpu_energy_j / nullif(r.output_tokens, 0) AS joules_per_output_token,
    CASE WHEN coalesce(c.speculative_algorithm, r.speculative_algorithm) IS NOT NULL
         THEN req.accept_len_request_weighted END AS accept_len_request_weighted
  FROM runs r LEFT JOIN per_cfg p USING (run_id)
  -- the config each group of windows ran under (the server_args line they were ASOF-joined to)
  LEFT JOIN server_configs c ON c.source_id = p.config_source_id AND c.byte_offset = p.config_offset
  LEFT JOIN vllm vl ON vl.run_id = r.run_id LEFT JOIN vllm_tput vt ON vt.run_id = r.run_id
  LEFT JOIN vcfg vc ON vc.run_id = r.run_id
  LEFT JOIN req ON req.run_id = r.run_id
  LEFT JOIN prom pm ON pm.run_id = r.run_id
  LEFT JOIN sim_cfg sc ON sc.source_id = p.config_source_id AND sc.byte_offset = p.config_offset
  LEFT JOIN run_sim rsim ON rsim.run_id = r.run_id
), grouped AS (
  SELECT *,
    CASE WHEN vllm_accept_rate IS NOT NULL THEN vllm_accept_rate
         WHEN speculative_algorithm IS NOT NULL AND speculative_num_draft_tokens > 1
         THEN (accept_len - 1) / (speculative_num_draft_tokens - 1) END AS accept_rate
  FROM rows
)
SELECT *,
  -- repeats of one measurement share a group: a sweep's (config, load level); an ingested
  -- log's (run, server config) is a group of its own
  CASE WHEN origin = 'sweep' AND sweep_name IS NOT NULL AND config_name IS NOT NULL
       THEN sweep_name || '/' || config_name || '/c' || coalesce(CAST(concurrency AS VARCHAR), '-')
            || coalesce('/rps' || CAST(request_rate AS VARCHAR), '')
       ELSE run_id || '@' || coalesce(CAST(config_offset AS VARCHAR), '-') END AS group_id
FROM grouped
""".replace("@LOSSY_C@", lossy_sql("c")).replace("@LOSSY_SC@", lossy_sql("server_configs")),
]

# accept_positions (one row per run and draft position k = 1, 2, ...; issue 16):
#   accepted_share = the share of verify steps whose draft token at position k was accepted.
#   From request histograms (spec_accept_histogram h, h_j = verify steps accepting exactly j
#   drafts; measured requests only): Σ_(j ≥ k) h_j / Σ_j h_j (position k is accepted iff at
#   least k drafts are). From vLLM logs (`Per-position acceptance rate`): Σ(rate_k · drafted) /
#   Σ drafted over the run's windows. `basis` says which.
VIEWS.append("""
CREATE OR REPLACE VIEW accept_positions AS
WITH h AS (
  SELECT run_id, generate_subscripts(spec_accept_histogram, 1) - 1 AS j,
    unnest(spec_accept_histogram) AS n
  FROM requests
  WHERE spec_accept_histogram IS NOT NULL AND NOT coalesce(is_warmup, false) AND coalesce(success, true)
), t AS (SELECT run_id, j, sum(n) AS n FROM h GROUP BY ALL
), req AS (
  SELECT run_id, j AS position,
    sum(n) OVER (PARTITION BY run_id ORDER BY j DESC) / nullif(sum(n) OVER (PARTITION BY run_id), 0)
      AS accepted_share, 'requests' AS basis
  FROM t
), v AS (
  SELECT rs.run_id, generate_subscripts(w.per_position_acceptance_rate, 1) AS position,
    unnest(w.per_position_acceptance_rate) AS rate, w.drafted_tokens
  FROM vllm_spec_windows w JOIN run_sources rs
    ON w.source_id = rs.source_id AND w.byte_offset >= rs.offset_from
   AND (rs.offset_to IS NULL OR w.byte_offset < rs.offset_to)
  WHERE w.per_position_acceptance_rate IS NOT NULL
)
SELECT run_id, position, accepted_share, basis FROM req WHERE position >= 1
UNION ALL
SELECT run_id, position, sum(rate * drafted_tokens) / nullif(sum(drafted_tokens), 0), 'vllm log'
FROM v GROUP BY run_id, position
""")
