"""The per-batch-size speculation schedule to deploy, from a sweep's stored runs, in an engine's own
format, with the expected gain per band, its interval and the runs behind it.

`recommend(db, engine)` reads the store (config_stats, config_pairs, run_metrics; read-only,
through `query.run_sql`) and decides, per measured concurrency (a batch-size band):

  candidates  the sweep's configs one server can switch between by batch size: the no-speculation
              baseline (k = 0) and the chain configs (topk 1) of one draft and one TP/DP/PP shape
              (the "family" whose best configs gain most over the loads; the others are listed in
              `excluded` with why). Tree configs (topk > 1) cannot be part of a schedule: SGLang's
              adaptive mode serves topk 1 only and vLLM's schedule varies a chain's length.
              Configs with simulated acceptance, or served with a lossy acceptance rule
              (config_stats.lossy_verification), are excluded too: their speedup is not exact
              decoding's.
  --slo       limits on config_stats' mean latency percentiles (e.g. itl_ms_p99=50): a candidate
              over a limit at that load is left out there (unless none meets it: then all stay,
              and the band says so).
  the choice  start from the simplest candidate (the baseline, then fewer draft tokens) and move
              to a more complex one only when it is significantly faster than the choice so far
              (config_pairs: its ratio interval lies above 1); then, while some candidate is
              significantly faster than the choice, take the fastest of those. So the best config
              is chosen when its advantage is significant; otherwise the simpler config it does
              not beat significantly, and the reason names the ratio that did not exclude 1. A
              noisy config (a wide interval) never displaces one measured to be better.

Bands: measured concurrencies c_1 < ... < c_n give batch sizes [1, c_1], [c_1 + 1, c_2], ...,
the last one open-ended: a batch between two measured loads runs what the higher load chose.

The schedule, per engine (formats read from the real sources, not notes):
  vllm     `speculative_config.num_speculative_tokens_per_batch_size`: [[start, end, k], ...],
           inclusive, covering 1..max_batch_size without gaps, k = 0 = off, num_speculative_tokens
           = the largest k (vLLM 0.32: vllm/config/speculative.py, validated and expanded by
           vllm/v1/spec_decode/dynamic/utils.py, looked up per step in v1/core/sched/scheduler.py
           by the number of scheduled requests; a k above num_speculative_tokens is clamped).
  sglang   `--speculative-adaptive --speculative-adaptive-config FILE` with FILE =
           {"<batch-size lower bound>": {"candidate_steps": [k]}, ...}: one candidate per slot is a
           fixed schedule (no EMA moves), steps 0 = off (SGLang 0.5.23:
           srt/speculative/adaptive_spec_params.py, arg_groups/speculative_hook.py).
  builtin  the same flags and file (the built-in engine implements SGLang's adaptive mode,
           specwatch/engine/adaptive.py).

JSON document (`Recommendation.payload()`, `specwatch recommend --format json`):
  sweep, engine, source_engine ("builtin" | "sglang" | "vllm": where the runs were measured),
  family {speculative_algorithm, draft_model_path, aux_layer_ids, tp_size, dp_size, pp_size},
  slo {metric: limit},
  bands [{batch_size_min, batch_size_max (null = and above), concurrency, steps (k, 0 = off),
          config, group_id, choice ("significant" | "simpler" | "only"), reason,
          speedup, speedup_ci_low, speedup_ci_high, speedup_method  (chosen vs baseline;
          the baseline itself: 1 [1, 1]),
          fastest_config (best point estimate among the candidates),
          compared [{config, steps, ratio, ratio_ci_low, ratio_ci_high, ratio_method,
                     ratio_verdict}]  (the chosen config over each other candidate),
          slo_excluded [{config, reason}],
          evidence {config: [run_id, ...]}  (every candidate's runs)}],
  schedule  vllm: {"num_speculative_tokens_per_batch_size": [[s, e, k], ...]} ;
            sglang/builtin: the adaptive-config object; null when every band says k = 0,
  segments [[start, end or null, k], ...]  (bands with equal k merged),
  speculative_config (vllm: the whole --speculative-config object), flags (the server flags to
  add: the speculative ones, with `schedule.json` for the file's path), limits [text],
  excluded [{config, concurrency, reason}].

Not here: launching anything (`--verify` lives in specwatch/run/schedule_verify.py), printing.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from specwatch.db import query

ENGINES = ("sglang", "vllm", "builtin")
# --slo METRIC=LIMIT: config_stats' means over repeats of each run's percentile.
SLO_COLUMNS = {"ttft_ms_p50": "ttft_ms_p50_mean", "ttft_ms_p99": "ttft_ms_p99_mean",
               "itl_ms_p50": "itl_ms_p50_mean", "itl_ms_p99": "itl_ms_p99_mean"}
VERIFY_SUFFIX = "-verify"           # sweeps `--verify` measures; never a source by default
SCHEDULE_FILE = "schedule.json"
DEFAULT_MAX_BATCH_SIZE = 256        # vLLM 0.32's max_num_seqs for the API server on GPU
# SGLang 0.5.23 generate_decode_cuda_graph_batch_sizes with speculation (cuda_graph_hook.py):
# adaptive routing pads a batch up to one of these before picking the slot.
SGLANG_SPEC_GRAPH_BS = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
                        + list(range(72, 257, 8)))


class RecommendError(ValueError):
    """Nothing to recommend from (no sweep, no runs, a bad option); the message says what to do."""


@dataclass
class Band:
    batch_size_min: int
    batch_size_max: int | None
    concurrency: int
    steps: int
    config: str
    group_id: str
    choice: str
    reason: str
    speedup: float | None
    speedup_ci_low: float | None
    speedup_ci_high: float | None
    speedup_method: str | None
    fastest_config: str
    compared: list = field(default_factory=list)
    slo_excluded: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)


@dataclass
class Recommendation:
    sweep: str
    engine: str
    source_engine: str | None
    family: dict
    slo: dict
    bands: list[Band]
    schedule: dict | None
    segments: list
    speculative_config: dict | None
    flags: list[str]
    limits: list[str]
    excluded: list[dict]

    @property
    def max_steps(self) -> int:
        return max((b.steps for b in self.bands), default=0)

    def payload(self) -> dict:
        d = asdict(self)
        d["bands"] = [asdict(b) for b in self.bands]
        return d


def parse_slo(items) -> dict[str, float]:
    """`METRIC=LIMIT` strings -> {metric: limit}; RecommendError naming the bad one."""
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in SLO_COLUMNS:
            raise RecommendError(f"--slo {item!r}: expected METRIC=LIMIT with METRIC one of "
                                 f"{', '.join(SLO_COLUMNS)} (ms), e.g. --slo itl_ms_p99=50")
        try:
            limit = float(value)
        except ValueError:
            limit = math.nan
        if not math.isfinite(limit) or limit <= 0:
            raise RecommendError(f"--slo {item!r}: the limit must be a number of ms > 0")
        out[name] = limit
    return out


def _select(db, sql, params=None) -> list[dict]:
    return query.run_sql(db, sql, params or [], max_rows=100_000).dicts()


def pick_sweep(db, sweep: str | None) -> str:
    """`sweep`, checked, or the newest stored sweep that is not a `--verify` sweep."""
    rows = _select(db, "SELECT sweep_name, max(created_at) AS t FROM runs WHERE origin = 'sweep' "
                       "AND sweep_name IS NOT NULL GROUP BY 1 ORDER BY t DESC, 1")
    names = [r["sweep_name"] for r in rows]
    if sweep is not None:
        if sweep not in names:
            raise RecommendError(f"no sweep named {sweep!r} in {db} (stored: "
                                 f"{', '.join(names) or 'none'}); run it with "
                                 f"`specwatch run-sweep SWEEP.toml --db {db}`")
        return sweep
    own = [n for n in names if not n.endswith(VERIFY_SUFFIX)]
    if not own:
        raise RecommendError(f"no sweep runs in {db}: recommend needs measured loads; run "
                             f"`specwatch run-sweep SWEEP.toml --db {db}` first")
    return own[0]


def _norm_alg(alg: str | None, engine: str) -> str | None:
    if alg is None:
        return None
    return alg.lower() if engine == "vllm" else alg.upper()


def _deployable(row: dict, engine: str) -> str | None:
    """Why this config cannot be a step of `engine`'s schedule, or None."""
    if row["is_baseline"]:
        return None
    if row["dynamic"]:
        return "it is itself a per-batch-size schedule"
    if row["simulated"]:
        return "its acceptance is simulated (SGLANG_SIMULATE_ACC_LEN / vLLM synthetic)"
    if row["lossy"]:
        return ("its acceptance rule is lossy (SGLang accept thresholds below 1.0, or vLLM "
                "rejection_sample_method 'fly'): its speedup is not that of exact verification")
    topk, steps, ndt = (row["speculative_eagle_topk"], row["speculative_num_steps"],
                        row["speculative_num_draft_tokens"])
    if steps is None or steps < 1:
        return "its number of draft steps is not recorded"
    if topk not in (None, 1) or (ndt is not None and ndt != steps + 1):
        return (f"a tree (topk={topk}, draft tokens={ndt}): SGLang's adaptive mode serves topk 1 "
                "only and vLLM's schedule varies a chain's length")
    alg = (row["speculative_algorithm"] or "").upper()
    if engine in ("sglang", "builtin") and alg not in ("EAGLE", "EAGLE3", "NEXTN"):
        return (f"speculative_algorithm {row['speculative_algorithm']}: SGLang's adaptive mode "
                "serves EAGLE/EAGLE3 only")
    return None


def _family(row: dict, engine: str) -> tuple:
    return (_norm_alg(row["speculative_algorithm"], engine), row["draft_model_path"],
            row["aux_layer_ids"], row["tp_size"], row["dp_size"], row["pp_size"] or 1)


def _load(db, sweep: str) -> tuple[list[dict], dict, dict]:
    rows = _select(db, """
        SELECT s.group_id, s.config, s.concurrency, s.is_baseline, s.simulated, s.repeats,
          s.speculative_algorithm, s.speculative_num_steps, s.speculative_eagle_topk,
          s.speculative_num_draft_tokens, s.draft_model_path, s.tp_size, s.dp_size, s.pp_size,
          s.engine, s.speedup, s.speedup_ci_low, s.speedup_ci_high, s.speedup_method, s.verdict,
          s.output_tok_s_mean, s.output_tok_s_ci_low, s.output_tok_s_ci_high,
          s.ttft_ms_p50_mean, s.ttft_ms_p99_mean, s.itl_ms_p50_mean, s.itl_ms_p99_mean,
          m.aux_layer_ids, m.runs, coalesce(m.dynamic, false) AS dynamic,
          s.lossy_verification AS lossy
        FROM config_stats s LEFT JOIN (
          SELECT rm.group_id, any_value(rm.aux_layer_ids) AS aux_layer_ids,
            list(DISTINCT rm.run_id ORDER BY rm.run_id) FILTER (WHERE coalesce(rm.status, 'ok') = 'ok')
              AS runs,
            bool_or(coalesce(r.server_flags, '') LIKE '%--speculative-adaptive%'
                    OR d.run_id IS NOT NULL) AS dynamic
          FROM run_metrics rm JOIN runs r USING (run_id)
          LEFT JOIN (SELECT DISTINCT rs.run_id FROM run_sources rs JOIN server_configs c
                       ON c.source_id = rs.source_id AND c.byte_offset >= rs.offset_from
                      AND (rs.offset_to IS NULL OR c.byte_offset < rs.offset_to)
                     WHERE c.speculative_dynamic IS NOT NULL) d ON d.run_id = rm.run_id
          GROUP BY rm.group_id) m USING (group_id)
        WHERE s.sweep_name = ? AND s.concurrency IS NOT NULL AND s.repeats > 0
        ORDER BY s.concurrency, s.config""", [sweep])
    pairs = {(p["group_id"], p["other_group_id"]): p for p in _select(
        db, "SELECT * FROM config_pairs WHERE sweep_name = ?", [sweep])}
    by_load: dict[int, list[dict]] = {}
    for r in rows:
        by_load.setdefault(r["concurrency"], []).append(r)
    return rows, pairs, by_load


def _simplicity(r: dict) -> tuple:
    return (0, 0) if r["is_baseline"] else (r["speculative_num_steps"],
                                            r["speculative_num_draft_tokens"] or 0)


def fastest(cands: list[dict]) -> dict:
    """The best point estimate: by speedup (geometric means, the baseline at 1) when every
    candidate has one, else by mean tok/s."""
    if all(r["is_baseline"] or r["speedup"] is not None for r in cands):
        return max(cands, key=lambda r: 1.0 if r["is_baseline"] else r["speedup"])
    return max(cands, key=lambda r: r["output_tok_s_mean"] or 0)


def _fmt_ratio(p: dict | None) -> str:
    if p is None or p["ratio"] is None:
        return "not compared"
    if p["ratio_ci_low"] is None:
        return f"{p['ratio']:.2f} (one repeat: no interval)"
    return (f"{p['ratio']:.2f} [{p['ratio_ci_low']:.2f}, {p['ratio_ci_high']:.2f}] "
            f"({p['ratio_method']}, {p['repeats']} repeats)")


def _choose(cands: list[dict], pairs: dict) -> tuple[dict, str, str]:
    """(chosen row, choice, reason) among one load's candidates (see the module docstring)."""
    def faster(a, b):     # a significantly faster than b
        p = pairs.get((a["group_id"], b["group_id"]))
        return p is not None and p["ratio_ci_low"] is not None and p["ratio_ci_low"] > 1

    def name(r):
        return f"{r['config']} (k={0 if r['is_baseline'] else r['speculative_num_steps']})"

    def vs(ys):
        return "; ".join(
            f"{name(y)} (ratio {_fmt_ratio(pairs.get((chosen['group_id'], y['group_id'])))})"
            for y in ys)

    if len(cands) == 1:
        return cands[0], "only", "the only candidate measured at this load"
    # the simplest first; a more complex one replaces the choice only when it is significantly
    # faster than the choice so far; then whatever is still significantly faster, best first
    order = sorted(cands, key=_simplicity)
    chosen = order[0]
    for y in order[1:]:
        if faster(y, chosen):
            chosen = y
    while True:
        better = [y for y in cands if faster(y, chosen)]
        if not better:
            break
        chosen = fastest(better)
    top = fastest(cands)
    others = [y for y in cands if y is not chosen]
    simpler = [y for y in others if _simplicity(y) < _simplicity(chosen)]
    if all(faster(chosen, y) for y in others):
        return chosen, "significant", f"faster than every other candidate (intervals above 1): {vs(others)}"
    if chosen is top and simpler:
        beaten = [y for y in others if faster(chosen, y)]
        rest = [y for y in others if y not in beaten]
        return chosen, "significant", (
            f"the fastest point estimate, significantly faster than {vs(beaten)}; within noise of "
            f"{vs(rest)}, none of which is significantly faster than it")
    if chosen is top:
        return chosen, "simpler", (f"the simplest candidate and the fastest point estimate; no "
                                   f"other is significantly faster: {vs(others)}")
    p = pairs.get((top["group_id"], chosen["group_id"]))
    return chosen, "simpler", (f"the simpler config: the fastest point estimate {name(top)} is "
                               f"not significantly faster ({name(top)} / {name(chosen)} = "
                               f"{_fmt_ratio(p)}; the interval contains 1)")


def recommend(db, engine: str, sweep: str | None = None, slo: dict | None = None,
              max_batch_size: int = DEFAULT_MAX_BATCH_SIZE) -> Recommendation:
    """The schedule for `engine` from `sweep`'s stored runs (the newest sweep by default)."""
    if engine not in ENGINES:
        raise RecommendError(f"--engine {engine!r}: choose one of {', '.join(ENGINES)}")
    if max_batch_size < 1:
        raise RecommendError(f"--max-batch-size {max_batch_size}: must be >= 1")
    slo = dict(slo or {})
    sweep = pick_sweep(db, sweep)
    rows, pairs, by_load = _load(db, sweep)
    if not by_load:
        raise RecommendError(f"sweep {sweep!r} in {db} has no measured (ok) runs with a "
                             "concurrency; re-run it (failed configs are retried)")
    excluded: list[dict] = []
    members: dict[tuple, list[dict]] = {}
    for r in rows:
        why = _deployable(r, engine)
        if why is not None:
            excluded.append({"config": r["config"], "concurrency": r["concurrency"], "reason": why})
        elif not r["is_baseline"]:
            members.setdefault(_family(r, engine), []).append(r)
    family = _pick_family(members, by_load) if members else None
    for key, ms in members.items():
        if key != family:
            excluded += [{"config": r["config"], "concurrency": r["concurrency"], "reason": (
                f"another draft or shape ({_family_text(key)}); one server serves one: the "
                f"schedule uses {_family_text(family)}")} for r in ms]
    shape = family[3:] if family else None
    bands, prev = [], 0
    loads = sorted(by_load)
    for i, c in enumerate(loads):
        cands = [r for r in by_load[c] if (r["is_baseline"] and (
                    shape is None or (r["tp_size"], r["dp_size"], r["pp_size"] or 1) == shape))
                 or (family is not None and not r["is_baseline"]
                     and _deployable(r, engine) is None and _family(r, engine) == family)]
        if not cands:
            excluded.append({"config": "-", "concurrency": c, "reason": (
                "no baseline of the schedule's shape and no deployable config at this load")})
            continue
        slo_out, kept = [], cands
        if slo:
            kept = []
            for r in cands:
                over = [f"{m} {r[SLO_COLUMNS[m]]:.1f} > {lim:g} ms" for m, lim in slo.items()
                        if r[SLO_COLUMNS[m]] is not None and r[SLO_COLUMNS[m]] > lim]
                if over:
                    slo_out.append({"config": r["config"], "reason": "; ".join(over)})
                else:
                    kept.append(r)
        chosen, choice, reason = _choose(kept or cands, pairs)
        if slo and not kept:
            reason = "nothing meets the SLO here, so every candidate stays; " + reason
        top = fastest(kept or cands)
        base = chosen["is_baseline"]
        bands.append(Band(
            batch_size_min=prev + 1, batch_size_max=c if i < len(loads) - 1 else None,
            concurrency=c, steps=0 if base else chosen["speculative_num_steps"],
            config=chosen["config"], group_id=chosen["group_id"], choice=choice, reason=reason,
            speedup=1.0 if base else chosen["speedup"],
            speedup_ci_low=1.0 if base else chosen["speedup_ci_low"],
            speedup_ci_high=1.0 if base else chosen["speedup_ci_high"],
            speedup_method=None if base else chosen["speedup_method"],
            fastest_config=top["config"],
            compared=[{"config": y["config"],
                       "steps": 0 if y["is_baseline"] else y["speculative_num_steps"],
                       **{k: (pairs.get((chosen["group_id"], y["group_id"])) or {}).get(k)
                          for k in ("ratio", "ratio_ci_low", "ratio_ci_high", "ratio_method",
                                    "ratio_verdict")}}
                      for y in (kept or cands) if y is not chosen],
            slo_excluded=slo_out, evidence={r["config"]: r["runs"] or [] for r in cands}))
        prev = c
    sources = {r["engine"] for r in rows if r["engine"]}
    rec = Recommendation(
        sweep=sweep, engine=engine, source_engine=sources.pop() if len(sources) == 1 else None,
        family=dict(zip(("speculative_algorithm", "draft_model_path", "aux_layer_ids", "tp_size",
                         "dp_size", "pp_size"), family)) if family else {},
        slo=slo, bands=bands, schedule=None, segments=_segments(bands), speculative_config=None,
        flags=[], limits=[], excluded=excluded)
    _render_native(rec, max_batch_size)
    rec.limits = _limits(rec)
    return rec


def _pick_family(members: dict, by_load: dict) -> tuple:
    """The family whose best config gains most summed over the loads (ln speedup, gains only)."""
    def score(key):
        total = 0.0
        for c in by_load:
            best = max((r["speedup"] or 0 for r in members[key] if r["concurrency"] == c),
                       default=0)
            total += math.log(best) if best > 1 else 0.0
        return (total, -len(members[key]))
    return max(sorted(members, key=str), key=score)


def _family_text(key: tuple) -> str:
    alg, draft, aux, tp, dp, pp = key
    return (f"{alg} draft {draft}" + (f" aux ids {aux}" if aux else "")
            + f", tp {tp} dp {dp} pp {pp}")


def _segments(bands: list[Band]) -> list[list]:
    segs: list[list] = []
    for b in bands:
        if segs and segs[-1][2] == b.steps:
            segs[-1][1] = b.batch_size_max
        else:
            segs.append([b.batch_size_min, b.batch_size_max, b.steps])
    return segs


def _render_native(rec: Recommendation, max_batch_size: int) -> None:
    k_max = rec.max_steps
    if k_max == 0:
        return                              # no speculation anywhere: launch without it
    alg, draft = rec.family["speculative_algorithm"], rec.family["draft_model_path"]
    if rec.engine == "vllm":
        triples = [[s, e if e is not None else max(max_batch_size, s), k]
                   for s, e, k in rec.segments]
        rec.schedule = {"num_speculative_tokens_per_batch_size": triples}
        rec.speculative_config = {"method": alg, **({"model": draft} if draft else {}),
                                  "num_speculative_tokens": k_max, **rec.schedule}
        rec.flags = ["--speculative-config", json.dumps(rec.speculative_config)]
        return
    rec.schedule = {str(s): {"candidate_steps": [k]} for s, _, k in rec.segments}
    rec.flags = ["--speculative-algorithm", alg, "--speculative-draft-model-path", draft or "",
                 "--speculative-num-steps", str(k_max), "--speculative-eagle-topk", "1",
                 "--speculative-num-draft-tokens", str(k_max + 1), "--speculative-adaptive",
                 "--speculative-adaptive-config", SCHEDULE_FILE]


def _limits(rec: Recommendation) -> list[str]:
    out = []
    dp = rec.family.get("dp_size") or 1
    if rec.source_engine and rec.source_engine != rec.engine:
        out.append(f"measured on the {rec.source_engine} engine: the gains are that engine's; "
                   f"re-measure on {rec.engine} (`specwatch recommend --verify`) before trusting them")
    if rec.schedule is None:
        out.append("no band gains from speculation: serve without it")
        return out
    if len(rec.segments) == 1:
        out.append(f"the same k={rec.max_steps} at every measured load: a static config does the "
                   "same; measure higher loads to see where it stops paying")
    if rec.engine == "vllm":
        out.append(("" if dp == 1 else f"THIS SWEEP RAN data_parallel_size={dp}: ") +
                   "vLLM 0.32 drops the schedule under data parallelism (data_parallel_size > 1): "
                   "VllmConfig._maybe_disable_dynamic_sd_for_data_parallel logs one warning and "
                   f"serves the static num_speculative_tokens={rec.max_steps} at every batch size "
                   "(vllm#54748)")
        out.append("vLLM picks k by the number of requests scheduled in a step (prefills too) "
                   "and carries the last k past the last range up to max_num_seqs; with full CUDA "
                   "graphs the V1 runner falls back to PIECEWISE (VLLM_USE_V2_MODEL_RUNNER=1 keeps "
                   "full graphs)")
        return out
    if any(k == 0 for _, _, k in rec.segments):
        out.append("steps 0 keeps SGLang's draft extend running, so the draft KV stays warm; with "
                   "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 it goes cold and acceptance dips "
                   "after every upshift (`specwatch doctor` warns)")
    if rec.engine == "sglang":
        ends = [e for _, e, _ in rec.segments if e is not None and e not in SGLANG_SPEC_GRAPH_BS]
        if ends:
            out.append(f"SGLang pads the batch size up to a CUDA-graph batch size before routing: "
                       f"band end(s) {ends} are not in 0.5.23's default capture list, so batches "
                       f"just below the next band may already run its steps; pass "
                       f"--cuda-graph-bs-decode with them, or accept it")
        out.append("SGLang turns adaptive off (a warning, static steps) with attention DP or topk "
                   "!= 1; it needs the built-in EAGLE worker (no platform worker)")
    return out


def render_text(rec: Recommendation) -> str:
    lines = [f"sweep {rec.sweep} -> {rec.engine} schedule"
             + (f" (measured on {rec.source_engine})" if rec.source_engine else "")]
    if rec.family:
        lines.append(f"draft: {_family_text(tuple(rec.family.values()))}")
    if rec.slo:
        lines.append("slo: " + ", ".join(f"{k} <= {v:g} ms" for k, v in rec.slo.items()))
    lines.append("")
    lines.append(f"{'batch size':<12} {'k':>2}  {'config':<24} {'gain [95% CI]':<22} why")
    for b in rec.bands:
        bs = (f"{b.batch_size_min}+" if b.batch_size_max is None else str(b.batch_size_min)
              if b.batch_size_max == b.batch_size_min else f"{b.batch_size_min}-{b.batch_size_max}")
        gain = ("1.00 (baseline)" if b.steps == 0 else "?" if b.speedup is None
                else f"{b.speedup:.2f}" + (f" [{b.speedup_ci_low:.2f}, {b.speedup_ci_high:.2f}]"
                                           if b.speedup_ci_low is not None else " (no interval)"))
        lines.append(f"{bs:<12} {b.steps:>2}  {b.config:<24} {gain:<22} {b.reason}")
        for s in b.slo_excluded:
            lines.append(f"{'':<16}over the SLO: {s['config']}: {s['reason']}")
        lines.append(f"{'':<16}runs: " + "; ".join(f"{c}: {len(r)}" for c, r in b.evidence.items()))
    lines.append("")
    if rec.schedule is None:
        lines.append("schedule: none (no speculation at any load)")
    elif rec.engine == "vllm":
        lines.append("--speculative-config " + json.dumps(rec.speculative_config))
    else:
        lines.append(f"{SCHEDULE_FILE}: {json.dumps(rec.schedule)}")
        lines.append("flags: " + " ".join(rec.flags))
    for text in rec.limits:
        lines.append(f"limit: {text}")
    seen = set()
    for e in rec.excluded:
        if (e["config"], e["reason"]) not in seen:
            seen.add((e["config"], e["reason"]))
            lines.append(f"not in the schedule: {e['config']}: {e['reason']}")
    return "\n".join(lines) + "\n"
