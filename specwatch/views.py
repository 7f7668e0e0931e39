"""Every metric specwatch reports, defined once as a SQL view over the stored raw rows.

The CLI (`report`), the dashboard and doctor read these views; none of them recomputes a metric.
Formulas are documented beside each view. Leaf module: imports nothing from specwatch.
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
# config_summary (one row per run and server config):
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
#   baseline_run_id     = a run of the same model, TP and DP size without speculation: the run
#                         itself if it is one, else same sweep and concurrency preferred, then same
#                         concurrency, then any; latest first.
#   vLLM runs: accept_len = Σ(mean acceptance length · drafted) / Σ drafted; accept_rate =
#                         Σ accepted / Σ drafted; gen_throughput_tok_s = mean non-zero
#                         `Avg generation throughput`.
#   speedup_gen         = gen_throughput_tok_s / baseline's gen_throughput_tok_s.
#   speedup_client      = output_tok_s / baseline's output_tok_s (equal concurrency only).
# ---------------------------------------------------------------------------------------------
# low_accept_len     = speculative run whose accept_len < LOW_ACCEPT_LEN (the draft barely predicts:
#                        typically wrong eagle_aux_hidden_state_layer_ids or a draft/target mismatch;
#                        healthy EAGLE-3 drafts sit at 2-4)
# slower_than_baseline = speedup_client < 1, or speedup_gen < 1 when no client numbers exist
# (columns of config_summary, so a reader evaluates the view once; doctor explains them in depth)
LOW_ACCEPT_LEN = 1.5
IDLE_GAP_S = 60

VIEWS = [
    f"""
CREATE OR REPLACE VIEW decode_windows_scoped AS
WITH scoped AS (
  SELECT rs.run_id, d.*
  FROM decode_windows d
  JOIN run_sources rs
    ON d.source_id = rs.source_id AND d.byte_offset >= rs.offset_from
   AND (rs.offset_to IS NULL OR d.byte_offset < rs.offset_to)
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
  FROM scoped s ASOF LEFT JOIN server_configs c
    ON s.source_id = c.source_id AND s.byte_offset >= c.byte_offset
)
SELECT *,
  (row_number() OVER w = 1
   OR coalesce(date_diff('second', lag(ts) OVER w, ts) > {IDLE_GAP_S}, false)) AS after_idle,
  count(*) OVER (PARTITION BY run_id, source_id, config_offset, dp_rank, pp_rank) AS rank_windows
FROM cfg
WINDOW w AS (PARTITION BY run_id, source_id, config_offset, dp_rank, pp_rank ORDER BY byte_offset)
""",
    """
CREATE OR REPLACE VIEW config_summary AS
WITH kept AS (
  SELECT * FROM decode_windows_scoped WHERE NOT after_idle OR rank_windows = 1
), per_rank AS (
  SELECT run_id, source_id AS config_source_id, config_offset, dp_rank,
    count(*) AS windows,
    sum(accept_len * running_req) AS al_num,
    sum(CASE WHEN accept_len IS NOT NULL THEN running_req END) AS al_den,
    sum(accept_rate_printed * running_req) AS ar_num,
    sum(CASE WHEN accept_rate_printed IS NOT NULL THEN running_req END) AS ar_den,
    avg(gen_throughput_tok_s) AS rank_gen_tok_s,
    bool_or(graph_enabled) AS graph_enabled
  FROM kept GROUP BY ALL
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
), rows AS (
  SELECT
    r.run_id, r.run_name, r.origin, r.sweep_name, r.config_name, r.engine, r.concurrency,
    r.repeat_idx, r.status, r.failure_reason, r.created_at,
    p.config_source_id, p.config_offset,
    coalesce(c.model_path, r.model_path) AS model_path,
    coalesce(c.draft_model_path, r.draft_model_path) AS draft_model_path,
    CASE WHEN p.config_offset IS NOT NULL THEN c.speculative_algorithm
         WHEN vl.run_id IS NOT NULL THEN coalesce(r.speculative_algorithm, 'vllm (unknown method)')
         ELSE r.speculative_algorithm END AS speculative_algorithm,
    coalesce(c.speculative_num_steps, r.speculative_num_steps) AS speculative_num_steps,
    coalesce(c.speculative_eagle_topk, r.speculative_eagle_topk) AS speculative_eagle_topk,
    coalesce(c.speculative_num_draft_tokens, r.speculative_num_draft_tokens)
      AS speculative_num_draft_tokens,
    coalesce(c.tp_size, r.tp_size) AS tp_size,
    coalesce(c.dp_size, r.dp_size) AS dp_size,
    c.sglang_version AS sglang_version,
    r.aux_layer_ids,
    p.dp_ranks, coalesce(p.windows, vl.windows, 0) AS windows,
    coalesce(p.accept_len, vl.accept_len) AS accept_len, vl.accept_rate AS vllm_accept_rate,
    p.accept_rate_printed, coalesce(p.gen_throughput_tok_s, vt.gen_tok_s) AS gen_throughput_tok_s,
    p.graph_enabled,
    r.output_tok_s, r.request_per_s, r.requests_ok, r.requests_failed,
    r.ttft_ms_p50, r.ttft_ms_p90, r.ttft_ms_p99, r.itl_ms_p50, r.itl_ms_p90, r.itl_ms_p99,
    r.tpot_ms_p50, r.tpot_ms_p99, r.e2e_ms_p50, r.e2e_ms_p99,
    r.client_accept_len, r.server_accept_len
  FROM runs r LEFT JOIN per_cfg p USING (run_id)
  -- the config each group of windows ran under (the server_args line they were ASOF-joined to)
  LEFT JOIN server_configs c ON c.source_id = p.config_source_id AND c.byte_offset = p.config_offset
  LEFT JOIN vllm vl ON vl.run_id = r.run_id LEFT JOIN vllm_tput vt ON vt.run_id = r.run_id
), with_rate AS (
  SELECT *,
    CASE WHEN vllm_accept_rate IS NOT NULL THEN vllm_accept_rate
         WHEN speculative_algorithm IS NOT NULL AND speculative_num_draft_tokens > 1
         THEN (accept_len - 1) / (speculative_num_draft_tokens - 1) END AS accept_rate
  FROM rows
), matched AS (
  SELECT s.run_id, s.config_offset, b.run_id AS baseline_run_id,
    b.gen_throughput_tok_s AS baseline_gen_tok_s, b.output_tok_s AS baseline_output_tok_s,
    row_number() OVER (PARTITION BY s.run_id, s.config_offset ORDER BY
      (b.run_id = s.run_id) DESC,
      (b.sweep_name IS NOT DISTINCT FROM s.sweep_name) DESC,
      (b.concurrency IS NOT DISTINCT FROM s.concurrency) DESC,
      b.created_at DESC, b.run_id) AS pick
  FROM with_rate s JOIN with_rate b
    ON b.speculative_algorithm IS NULL AND b.model_path = s.model_path
   AND coalesce(b.status, 'ok') = 'ok'
   AND b.tp_size IS NOT DISTINCT FROM s.tp_size AND b.dp_size IS NOT DISTINCT FROM s.dp_size
   AND (b.gen_throughput_tok_s IS NOT NULL OR b.output_tok_s IS NOT NULL)
)
, final AS (
SELECT w.*, m.baseline_run_id,
  w.gen_throughput_tok_s / nullif(m.baseline_gen_tok_s, 0) AS speedup_gen,
  CASE WHEN (SELECT concurrency FROM runs WHERE run_id = m.baseline_run_id)
            IS NOT DISTINCT FROM w.concurrency
       THEN w.output_tok_s / nullif(m.baseline_output_tok_s, 0) END AS speedup_client
FROM with_rate w LEFT JOIN matched m
  ON m.run_id = w.run_id AND m.config_offset IS NOT DISTINCT FROM w.config_offset AND m.pick = 1
)
SELECT *,
  (speculative_algorithm IS NOT NULL AND accept_len < LOW_ACCEPT_LEN) AS low_accept_len,
  coalesce(speedup_client < 1, speedup_gen < 1) AS slower_than_baseline
FROM final
""".replace("LOW_ACCEPT_LEN", str(LOW_ACCEPT_LEN)),
]

VIEWS.append("""
CREATE OR REPLACE VIEW config_flags AS
SELECT run_id, run_name, config_offset, low_accept_len, slower_than_baseline FROM config_summary
""")
