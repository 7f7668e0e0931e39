"""The stored schema, declared once: one dataclass per table; DDL and inserts derive from them.

Units are in column names (`_tok_s`, `_ms`, `_frac`, `_pct`). Every row that came from a log line
carries `source_id` (the file's identity, see `sources`), `byte_offset` (where the line starts) and
`line_no` (1-based), which together are its idempotency key. Missing values are NULL, never a
default. The derived views (`config_summary`, ...) live in `views.py`, next to their formulas.

This module is a leaf: it imports nothing from specwatch.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from dataclasses import dataclass, fields

SCHEMA_VERSION = 31   # 31: run_metrics/config_summary.served_by (the engine doctor words its advice for; stop 43); 30: run_metrics/config_summary/run_groups/config_stats.lossy_verification, config_stats.verdict_reason says so (stop 42); 29: run_arrivals.schedule_rate_req_s, schedule_cv, schedule_kept, schedule_reason; view group_schedule (issue 30); 28: capture-prefix parts in one JSON column `capture` beside line_prefix (issue 28; the ten part columns of 20 stay NULL in older databases); 27: crossover over planned levels, category_stats.rate_search_only (issue 30); 26: run_groups.rate_search_only, group_slo carries the limits (issue 30); 25: runs.request_rate, arrival, rate_search_step; requests.category, arrival_offset_ms, send_offset_ms; table sweep_targets; SLO views (issue 30); 24: config_verdicts.pareto_frontier (issue 32); 23: table metric_samples (/metrics and NVML samples per run), runs.gpu_energy_j/gpu_energy_gpus/gpu_energy_method, run_metrics.joules_per_output_token, config_stats energy columns, view config_verdicts, pooled views read once (issue 32); 22: view config_pairs (pairwise ratios, issue 31); 21: runs.spec_drafts, spec_draft_tokens, spec_accepted_tokens, spec_accepted_per_pos and run_metrics reading them (vLLM /metrics deltas, issue 29); 20: capture-prefix columns on line rows, decode/prefill mamba columns, vLLM kv_cache_device, server_configs aux_layer_ids (issue 28); 19: runs.slurm_job_id, slurm_array_task_id (issue 33); 18: runs.draft_weights_sha1, target_architecture, target_num_layers (issue 18); 17: runs.sglang_version (issue 18); 16: decode_windows_scoped.window_idx (issue 15); 15: config_pareto per group only (issue 16); 14: views carry `simulated` (issue 15)


def _t(sql: str):
    """Annotate a field with its DuckDB type."""
    return dataclasses.field(default=None, metadata={"sql": sql})


@dataclass
class Source:
    """One log file identity and its ingest checkpoint. A file is the same source while its first
    `fingerprint_len` bytes hash to `fingerprint` and the (up to) 1 KB just before `offset_bytes`
    hash to `tail_fingerprint`; rotation, truncation or replacement makes a new one. The second hash
    keeps two logs that start alike (same config, same second) apart.
    `offset_bytes` (always at a line boundary) and `lines_done` advance in the same transaction as
    the rows read before them."""

    source_id: str = _t("VARCHAR PRIMARY KEY")
    path: str = _t("VARCHAR")
    device: int = _t("BIGINT")
    inode: int = _t("BIGINT")
    fingerprint: str = _t("VARCHAR")
    fingerprint_len: int = _t("INTEGER")
    offset_bytes: int = _t("BIGINT")
    lines_done: int = _t("BIGINT")
    first_seen: dt.datetime = _t("TIMESTAMP")
    updated_at: dt.datetime = _t("TIMESTAMP")
    tail_fingerprint: str = _t("VARCHAR")


@dataclass
class Run:
    """A named unit of evidence: an ingested log (`origin='ingest'`), or one measurement of a sweep
    config at one concurrency and repeat (`origin='sweep'`). Spec config columns hold what the run
    was launched with (sweep) or NULL (ingest: the log's own server_args line is used instead).
    Client-side metrics come from the load generator; NULL for ingested logs."""

    run_id: str = _t("VARCHAR PRIMARY KEY")
    run_name: str = _t("VARCHAR")
    origin: str = _t("VARCHAR")
    created_at: dt.datetime = _t("TIMESTAMP")
    sweep_name: str = _t("VARCHAR")
    config_name: str = _t("VARCHAR")
    engine: str = _t("VARCHAR")
    is_baseline: bool = _t("BOOLEAN")
    concurrency: int = _t("INTEGER")
    # open loop (issue 30): the asked request rate (NULL: closed loop at `concurrency`), what the
    # arrivals were (JSON: process, burstiness or the trace's sha1), and the rate search's step
    # that asked for the run (0: a bracket end; NULL: a planned level)
    request_rate: float = _t("DOUBLE")
    arrival: str = _t("VARCHAR")
    rate_search_step: int = _t("INTEGER")
    repeat_idx: int = _t("INTEGER")
    status: str = _t("VARCHAR")             # ok | failed | skipped | running
    failure_reason: str = _t("VARCHAR")
    server_log_tail: str = _t("VARCHAR")
    model_path: str = _t("VARCHAR")
    draft_model_path: str = _t("VARCHAR")
    speculative_algorithm: str = _t("VARCHAR")
    speculative_num_steps: int = _t("INTEGER")
    speculative_eagle_topk: int = _t("INTEGER")
    speculative_num_draft_tokens: int = _t("INTEGER")
    tp_size: int = _t("INTEGER")
    dp_size: int = _t("INTEGER")
    aux_layer_ids: str = _t("VARCHAR")      # JSON list, as configured in the draft
    server_flags: str = _t("VARCHAR")       # JSON list of the extra flags passed
    started_at: dt.datetime = _t("TIMESTAMP")
    ended_at: dt.datetime = _t("TIMESTAMP")
    duration_s: float = _t("DOUBLE")
    requests_ok: int = _t("INTEGER")
    requests_failed: int = _t("INTEGER")
    output_tokens: int = _t("BIGINT")
    output_tok_s: float = _t("DOUBLE")      # client: Σ output tokens / load wall time
    request_per_s: float = _t("DOUBLE")
    ttft_ms_p50: float = _t("DOUBLE")
    ttft_ms_p90: float = _t("DOUBLE")
    ttft_ms_p99: float = _t("DOUBLE")
    itl_ms_p50: float = _t("DOUBLE")
    itl_ms_p90: float = _t("DOUBLE")
    itl_ms_p99: float = _t("DOUBLE")
    tpot_ms_p50: float = _t("DOUBLE")
    tpot_ms_p90: float = _t("DOUBLE")
    tpot_ms_p99: float = _t("DOUBLE")
    e2e_ms_p50: float = _t("DOUBLE")
    e2e_ms_p90: float = _t("DOUBLE")
    e2e_ms_p99: float = _t("DOUBLE")
    client_accept_len: float = _t("DOUBLE")  # Σ completion tokens / Σ spec_verify_ct of responses
    server_accept_len: float = _t("DOUBLE")  # the server's accept length for this run: SGLang
    #   /server_info avg_spec_accept_length after the load; vLLM 1 + Δaccepted / Δdrafts below
    # vLLM's /metrics spec-decode counters, the run's share (scraped before and after its load,
    # summed over engines; run/prom.py): verify steps with a draft, draft tokens proposed, draft
    # tokens accepted, and accepted per draft position (JSON list). NULL: not vLLM or no page.
    spec_drafts: int = _t("BIGINT")
    spec_draft_tokens: int = _t("BIGINT")
    spec_accepted_tokens: int = _t("BIGINT")
    spec_accepted_per_pos: str = _t("VARCHAR")
    # Where and when a sweep run was measured (measure/sweep): its position in the sweep's
    # interleaved order and the seed that shuffled it, the GPU ids it had (JSON list), the node,
    # how often Ray retried its task after a lost node, and the endpoint when attached (not launched).
    run_order: int = _t("INTEGER")
    order_seed: int = _t("BIGINT")
    gpu_ids: str = _t("VARCHAR")
    node_hostname: str = _t("VARCHAR")
    # SGLang's version in the interpreter that launched the server (sweeps; NULL for ingested
    # logs and the built-in engine): SGLang 0.5.x logs do not print it, and aux-id capture rules
    # differ between versions (aux_layers.py)
    sglang_version: str = _t("VARCHAR")
    # What the model files said where the server was launched (NULL when not local there, e.g. a
    # hub id): so `doctor` on a copy of the database, away from the files, still matches drafts by
    # their weights and reads the ids against the target's architecture and depth.
    draft_weights_sha1: str = _t("VARCHAR")   # modelinfo.weights_sha1 of the draft's directory
    target_architecture: str = _t("VARCHAR")  # the target's config.json architectures[0]
    target_num_layers: int = _t("INTEGER")    # the target's num_hidden_layers
    ray_node_id: str = _t("VARCHAR")
    ray_retries: int = _t("INTEGER")
    # --executor slurm: the Slurm job (the array's job id; a task controller's pid in submitit's
    # local mode) and the array task that measured the run (NULL for a plain job, local mode)
    slurm_job_id: str = _t("VARCHAR")
    slurm_array_task_id: int = _t("INTEGER")
    attached_endpoint: str = _t("VARCHAR")
    # GPU energy over the run's load (issue 32; run/energy.py): Σ over the GPUs in gpu_energy_gpus
    # (NVML indices, JSON list) of the energy NVML counted from the load's start to its end, in J;
    # gpu_energy_method 'nvml_energy_counter' (nvmlDeviceGetTotalEnergyConsumption, mJ) or
    # 'nvml_power_samples' (trapezoid over nvmlDeviceGetPowerUsage samples, where the counter is
    # not supported). NULL without NVML (no NVIDIA GPU, nvidia-ml-py not installed, attach mode).
    gpu_energy_j: float = _t("DOUBLE")
    gpu_energy_gpus: str = _t("VARCHAR")
    gpu_energy_method: str = _t("VARCHAR")
    # JSON of what decides the generated tokens (sampling.sampling_fingerprint): temperature, top_p,
    # top_k, ignore_eos, max tokens, chat template on/off, seed, prompts. NULL = unknown (ingested log).
    # A speedup is computed only against a baseline with the same fingerprint (stats.py, group_baselines).
    sampling_fingerprint: str = _t("VARCHAR")


@dataclass
class RunSource:
    """Which byte range of which log file belongs to a run ([offset_from, offset_to); NULL = open)."""

    run_id: str = _t("VARCHAR")
    source_id: str = _t("VARCHAR")
    offset_from: int = _t("BIGINT")
    offset_to: int = _t("BIGINT")


@dataclass
class _LineRow:
    source_id: str = _t("VARCHAR")
    byte_offset: int = _t("BIGINT")
    line_no: int = _t("BIGINT")


@dataclass
class _CapturedRow(_LineRow):
    """What the way a log was captured put before a line's own log prefix (specwatch/logs/
    prefix.py), as printed and parsed into its parts where the shape is known; NULL = absent."""

    line_prefix: str = _t("VARCHAR")        # the capture prefix whole, e.g. `sglang-1  | `, any text
    # its parts where the shape is known, as a JSON object of those present (prefix.CAPTURE_PARTS:
    # service (docker compose), pod/container (kubectl --prefix), host/unit/unit_pid (journald),
    # src_path/src_line (grep -H -n, a pasted @file), logger/log_level (a Python logging format)),
    # e.g. capture->>'service'. One column, not one each: DuckDB writes every NULL of a column
    # (ten all-NULL columns cost 0.23 s per 2M lines, 10% of an ingest)
    capture: str = _t("JSON")


@dataclass
class _SglangRow(_CapturedRow):
    ts: dt.datetime = _t("TIMESTAMP")       # local time as printed, no zone
    ts_text: str = _t("VARCHAR")
    rank: str = _t("VARCHAR")               # tags as printed, "" = none
    outer_ts_text: str = _t("VARCHAR")      # capture timestamp: docker/k8s RFC3339, journald
    process: str = _t("VARCHAR")            # Ray actor / process tag, e.g. SGLangEngine pid=41820
    dp_rank: int = _t("INTEGER")
    tp_rank: int = _t("INTEGER")
    pp_rank: int = _t("INTEGER")
    ep_rank: int = _t("INTEGER")
    forward_iter: int = _t("BIGINT")


@dataclass
class DecodeWindow(_SglangRow):
    """One SGLang `Decode batch` line: averages over the last `decode_log_interval` decode steps of
    one DP rank. `accept_rate_printed` follows the printing version's definition (three exist);
    compare `config_summary.accept_rate` instead."""

    running_req: int = _t("INTEGER")
    kv_tokens: int = _t("BIGINT")
    token_usage_frac: float = _t("DOUBLE")
    accept_len: float = _t("DOUBLE")
    accept_rate_printed: float = _t("DOUBLE")
    graph_enabled: bool = _t("BOOLEAN")
    graph_device: str = _t("VARCHAR")       # cuda | cpu | npu | musa (the printed label)
    gen_throughput_tok_s: float = _t("DOUBLE")
    queue_req: int = _t("INTEGER")
    retracted_req: int = _t("INTEGER")
    fwd_occupancy_pct: float = _t("DOUBLE")
    mamba_num: int = _t("INTEGER")          # hybrid SSM pools: mamba states in use (`mamba num`)
    mamba_usage_frac: float = _t("DOUBLE")
    fields: str = _t("JSON")                # every printed field, by normalised name


@dataclass
class PrefillWindow(_SglangRow):
    """One SGLang `Prefill batch` line (one prefill or prefill chunk)."""

    new_seq: int = _t("INTEGER")
    new_tokens: int = _t("BIGINT")
    cached_tokens: int = _t("BIGINT")
    token_usage_frac: float = _t("DOUBLE")
    running_req: int = _t("INTEGER")
    queue_req: int = _t("INTEGER")
    input_throughput_tok_s: float = _t("DOUBLE")
    cache_hit_rate_pct: float = _t("DOUBLE")
    graph_enabled: bool = _t("BOOLEAN")
    mamba_usage_frac: float = _t("DOUBLE")
    fields: str = _t("JSON")


@dataclass
class VllmSpecWindow(_CapturedRow):
    """One vLLM `SpecDecoding metrics:` (V1) or `Speculative metrics:` (V0) line."""

    ts_text: str = _t("VARCHAR")            # vLLM prints no year
    process: str = _t("VARCHAR")
    outer_ts_text: str = _t("VARCHAR")      # capture timestamp: docker/k8s RFC3339, journald
    mean_acceptance_length: float = _t("DOUBLE")
    accepted_tokens: int = _t("BIGINT")
    drafted_tokens: int = _t("BIGINT")
    draft_acceptance_rate_pct: float = _t("DOUBLE")
    accepted_throughput_tok_s: float = _t("DOUBLE")
    drafted_throughput_tok_s: float = _t("DOUBLE")
    per_position_acceptance_rate: list = _t("DOUBLE[]")  # cut at spec_depth where printed
    spec_depth: int = _t("INTEGER")         # `Current speculative depth` (dynamic depth builds)
    per_position_drafted_tokens: list = _t("INTEGER[]")  # per-position denominators, if printed
    emitted_tokens: int = _t("BIGINT")
    num_speculative_tokens: int = _t("INTEGER")
    system_efficiency: float = _t("DOUBLE")
    fields: str = _t("JSON")


@dataclass
class VllmThroughputWindow(_CapturedRow):
    """One vLLM periodic `Avg prompt throughput: ...` line."""

    ts_text: str = _t("VARCHAR")
    process: str = _t("VARCHAR")
    outer_ts_text: str = _t("VARCHAR")
    engine: str = _t("VARCHAR")
    avg_prompt_throughput_tok_s: float = _t("DOUBLE")
    avg_generation_throughput_tok_s: float = _t("DOUBLE")
    running_reqs: int = _t("INTEGER")
    waiting_reqs: int = _t("INTEGER")
    # the KV cache usage of the device the engine runs on (`<device> KV cache usage`, GPU on CUDA
    # builds); kv_cache_device says which (GPU, CPU, XPU, ...). V0's CPU swap usage is in `fields`.
    gpu_kv_cache_usage_pct: float = _t("DOUBLE")
    kv_cache_device: str = _t("VARCHAR")
    prefix_cache_hit_rate_pct: float = _t("DOUBLE")
    fields: str = _t("JSON")


@dataclass
class ServerConfig(_CapturedRow):
    """The effective (resolved) config from a `server_args=` startup line. It applies to the decode
    and prefill lines that follow it in the same source, until the next one."""

    ts: dt.datetime = _t("TIMESTAMP")
    form: str = _t("VARCHAR")               # repr (<= 0.5.18) | dict (0.5.19+)
    model_path: str = _t("VARCHAR")
    draft_model_path: str = _t("VARCHAR")
    speculative_algorithm: str = _t("VARCHAR")
    speculative_num_steps: int = _t("INTEGER")
    speculative_eagle_topk: int = _t("INTEGER")
    speculative_num_draft_tokens: int = _t("INTEGER")
    tp_size: int = _t("INTEGER")
    dp_size: int = _t("INTEGER")
    ep_size: int = _t("INTEGER")
    pp_size: int = _t("INTEGER")
    decode_log_interval: int = _t("INTEGER")
    disable_cuda_graph: bool = _t("BOOLEAN")
    sglang_version: str = _t("VARCHAR")
    # vLLM too (`vllm_engine_config` / `vllm_args` lines): see parse.derived_columns
    ts_text: str = _t("VARCHAR")
    process: str = _t("VARCHAR")
    config_kind: str = _t("VARCHAR")        # server_args | vllm_engine_config | vllm_args
    engine_name: str = _t("VARCHAR")        # sglang | vllm
    engine_version: str = _t("VARCHAR")
    speculative_block_size: int = _t("INTEGER")   # DFLASH / DSPARK block size
    speculative_dynamic: str = _t("VARCHAR")      # "adaptive" (SGLang) or vLLM's schedule JSON
    simulated: bool = _t("BOOLEAN")         # synthetic acceptance (vLLM); SGLang: `simulated` event
    # vLLM `Using (Eagle3 )auxiliary layers from <source>: (ids)` (config_kind vllm_aux_layers):
    # the target layers whose hidden states the EAGLE-3 draft reads, and where vLLM took them from
    aux_layer_ids: str = _t("VARCHAR")      # JSON list, as printed
    aux_layers_source: str = _t("VARCHAR")  # speculative config | config | model
    outer_ts_text: str = _t("VARCHAR")
    args: str = _t("JSON")


@dataclass
class Event(_LineRow):
    """Readiness, fatal and retraction lines (kind: ready, init_failed, scheduler_exception, ...)."""

    ts: dt.datetime = _t("TIMESTAMP")
    kind: str = _t("VARCHAR")
    message: str = _t("VARCHAR")


@dataclass
class RejectedLine(_LineRow):
    """A line that started like a metric line but could not be parsed, with the reason."""

    path: str = _t("VARCHAR")
    kind: str = _t("VARCHAR")
    reason: str = _t("VARCHAR")
    field: str = _t("VARCHAR")
    line_text: str = _t("VARCHAR")          # first 2000 characters


@dataclass
class Request:
    """One request of a sweep's load: success or the error, latencies and the response's spec meta."""

    run_id: str = _t("VARCHAR")
    request_idx: int = _t("INTEGER")
    is_warmup: bool = _t("BOOLEAN")
    success: bool = _t("BOOLEAN")
    error: str = _t("VARCHAR")
    prompt_tokens: int = _t("INTEGER")
    output_tokens: int = _t("INTEGER")
    ttft_ms: float = _t("DOUBLE")
    tpot_ms: float = _t("DOUBLE")
    e2e_ms: float = _t("DOUBLE")
    itl_ms: list = _t("DOUBLE[]")
    spec_verify_ct: int = _t("INTEGER")
    spec_accept_length: float = _t("DOUBLE")
    spec_accept_histogram: list = _t("INTEGER[]")  # verify steps by accepted drafts, if reported
    started_at: dt.datetime = _t("TIMESTAMP")
    category: str = _t("VARCHAR")            # the prompt's task (chat, code, ...), if it names one
    arrival_offset_ms: float = _t("DOUBLE")  # when the arrival process asked for it (open loop)
    send_offset_ms: float = _t("DOUBLE")     # when it was really sent; both from the load's start


@dataclass
class SweepTarget:
    """What a sweep asks of its runs (the sweep file's [slo], target_ci_width and max_repeats),
    written by run-sweep each time it starts; the SLO views (slo_views.py) read it, so changing
    the SLO and re-running re-judges stored runs without measuring them again."""

    sweep_name: str = _t("VARCHAR PRIMARY KEY")
    slo_ttft_ms: float = _t("DOUBLE")
    slo_tpot_ms: float = _t("DOUBLE")
    slo_itl_ms: float = _t("DOUBLE")
    slo_e2e_ms: float = _t("DOUBLE")
    slo_percentile: float = _t("DOUBLE")
    target_ci_width: float = _t("DOUBLE")
    max_repeats: int = _t("INTEGER")
    updated_at: dt.datetime = _t("TIMESTAMP")


@dataclass
class Alert:
    """A warning `specwatch tail` raised while following a log (rules: `specwatch/logs/alerts.py`):
    which rule, the decode window that fired it (`source_id`, `byte_offset`, `line_no`: also its
    idempotency key with `rule`), what was measured against what threshold, and the message."""

    run_id: str = _t("VARCHAR")
    source_id: str = _t("VARCHAR")
    byte_offset: int = _t("BIGINT")
    line_no: int = _t("BIGINT")
    path: str = _t("VARCHAR")
    dp_rank: int = _t("INTEGER")
    rule: str = _t("VARCHAR")       # low_accept_len | no_accept | accept_len_trend | dp_rank_disagree
    severity: str = _t("VARCHAR")   # warning
    value: float = _t("DOUBLE")     # the measured value that crossed `threshold`
    threshold: float = _t("DOUBLE")
    windows: int = _t("INTEGER")    # decode windows the rule looked at
    ts: dt.datetime = _t("TIMESTAMP")         # log time of the firing window
    raised_at: dt.datetime = _t("TIMESTAMP")  # wall clock when tail raised it
    message: str = _t("VARCHAR")


@dataclass
class MetricSample:
    """One sample of a server's Prometheus `/metrics` page, or of NVML, taken while a run was
    measured (sweeps and attach mode: run/scrape.py, every `metrics_interval_s`) or while
    `specwatch tail --metrics URL` followed an endpoint. `name` and `labels` (JSON object, keys
    sorted) as the page printed them (`sglang:spec_accept_length`, `vllm:spec_decode_num_drafts_total`);
    NVML samples are named `nvml:gpu_power_w` / `nvml:gpu_energy_j` with label `gpu` (NVML index).
    `t_s` = seconds since the run's load began (NULL for tail). A run's samples are replaced as a
    whole when the run is stored again; tail's are keyed by (endpoint, sampled_at, name, labels)."""

    run_id: str = _t("VARCHAR")
    endpoint: str = _t("VARCHAR")        # http://host:port scraped, or 'nvml'
    sampled_at: dt.datetime = _t("TIMESTAMP")
    t_s: float = _t("DOUBLE")
    name: str = _t("VARCHAR")
    labels: str = _t("VARCHAR")
    value: float = _t("DOUBLE")


@dataclass
class RunWindowSums:
    """Partial sums of one run's decode windows per (source, server config, DP rank, PP rank),
    kept up to date as windows are stored (`specwatch/db/summaries.py`), so `run_metrics` reads these
    instead of every window. What each sum is, and how `run_metrics` combines them, is in views.py
    (`WINDOW_SUMS`); not a metric itself. `windows_all` counts every window, the `_k` sums skip the
    windows after idle (`after_idle`), the `first_` columns are the partition's first window."""

    run_id: str = _t("VARCHAR")
    source_id: str = _t("VARCHAR")
    config_offset: int = _t("BIGINT")
    dp_rank: int = _t("INTEGER")
    pp_rank: int = _t("INTEGER")
    windows_all: int = _t("BIGINT")
    last_byte_offset: int = _t("BIGINT")
    last_ts: dt.datetime = _t("TIMESTAMP")
    windows_k: int = _t("BIGINT")
    al_num_k: float = _t("DOUBLE")
    al_den_k: int = _t("BIGINT")
    ar_num_k: float = _t("DOUBLE")
    ar_den_k: int = _t("BIGINT")
    gen_sum_k: float = _t("DOUBLE")
    gen_n_k: int = _t("BIGINT")
    graph_k: bool = _t("BOOLEAN")
    first_al_num: float = _t("DOUBLE")
    first_al_den: int = _t("BIGINT")
    first_ar_num: float = _t("DOUBLE")
    first_ar_den: int = _t("BIGINT")
    first_gen_sum: float = _t("DOUBLE")
    first_gen_n: int = _t("BIGINT")
    first_graph: bool = _t("BOOLEAN")


TABLES: dict[str, type] = {
    "sources": Source,
    "runs": Run,
    "run_sources": RunSource,
    "decode_windows": DecodeWindow,
    "prefill_windows": PrefillWindow,
    "vllm_spec_windows": VllmSpecWindow,
    "vllm_throughput_windows": VllmThroughputWindow,
    "server_configs": ServerConfig,
    "events": Event,
    "rejected_lines": RejectedLine,
    "requests": Request,
    "sweep_targets": SweepTarget,
    "alerts": Alert,
    "run_window_sums": RunWindowSums,
    "metric_samples": MetricSample,
}

# Which table each parsed record kind goes to.
KIND_TABLE = {
    "sglang_decode": "decode_windows",
    "sglang_prefill": "prefill_windows",
    "vllm_spec_decode": "vllm_spec_windows",
    "vllm_throughput": "vllm_throughput_windows",
    "server_args": "server_configs",
    "vllm_engine_config": "server_configs",
    "vllm_args": "server_configs",
    "vllm_aux_layers": "server_configs",
}


def columns(cls: type) -> list[tuple[str, str]]:
    """[(name, duckdb type)] in declaration order (base-class fields first)."""
    return [(f.name, f.metadata["sql"]) for f in fields(cls)]


def ddl(table: str) -> str:
    cols = ",\n  ".join(f"{name} {sql}" for name, sql in columns(TABLES[table]))
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {cols}\n)"


def column_names(table: str) -> list[str]:
    return [f.name for f in fields(TABLES[table])]


def python_type(cls: type, name: str):
    return typing.get_type_hints(cls)[name]
