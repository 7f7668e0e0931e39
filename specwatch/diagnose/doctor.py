"""Explain why a speculative config underperforms, with the stored numbers and log lines behind it.

Reads the store read-only through `query.run_sql` (the `config_summary` and
`decode_windows_scoped` views, `events`, `requests`, `sources`) and never recomputes a metric the
views define. Each finding names its run, a code, a severity, the numbers and the exact log lines
(file, line number, byte offset) or request rows behind it, and a next step. A check whose inputs
are NULL says nothing: a missing number is never replaced by a default.

Codes (severity):
  accept_len_near_1 (error)        accept length < LOW_ACCEPT_LEN: the draft is not predicting.
  accept_len_below_sibling (error|warning) same draft, same spec shape, other aux ids did much
                                   better (error), or a little better in every repeat (warning).
  aux_ids_mismatch (error|warning) built-in engine only: the draft's weights agree with the target
                                   better under other aux ids (measured by `align.probe_draft_ids`).
  slower_than_baseline (error|warning) speedup < 1 at equal concurrency / batch size; a sweep
                                   config with repeats is judged once on its pooled speedup and
                                   interval (error when it lies below 1, warning when it holds 1).
  accept_rate_not_comparable (info) the printed accept rate uses an older SGLang definition.
  dp_ranks_disagree, cuda_graph_off, queue_growing, kv_pressure_retractions,
  first_window_contaminated (warning).
  config_failed (error)            the server died before it was ready: its real cause, its log, a hint.

Not a tuner: it says what is wrong and where to look, not which config is best (see `report`).
"""
from __future__ import annotations

import datetime as dt
import json
import math
import re
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specwatch import aux_layers, modelinfo
from specwatch.logs import failure
from specwatch.db import query
from specwatch.db.views import LOW_ACCEPT_LEN  # accept length below which the draft barely predicts

# A run whose accept length is at most this fraction of a sibling's (same sweep, so same prompts and
# seed; same draft weights, steps, topk, draft tokens and concurrency; other aux ids) is misconfigured
# rather than unlucky. Built-in engine, S=3: a slot shift costs 18 % (measured on the chat prompts:
# 2.22 vs 2.72) to 44 % (engine.md §4); every id +1 costs 6-13 %, which stays below this bar.
SIBLING_ACCEPT_RATIO = 0.85
# Below that bar a smaller loss is still the ids' doing when the repeats say so: a warning when the
# run's group and the sibling's group have >= 2 repeats each, every repeat of this one lies below
# every repeat of the sibling, and the ratio is at most SIBLING_WARN_RATIO. Real SGLang 0.5.12 on
# the H200, exported built-in weights, ids each one lower ([0, 2, 4] for [1, 3, 5]): 3.026 vs 3.304
# at c=1 (0.916), every repeat apart (benchmarks/results/real_sglang_h200.md).
SIBLING_WARN_RATIO = 0.97
# Built-in probe: other ids raising teacher-forced step-1 agreement by PROBE_MIN_GAIN is an error, by
# PROBE_WARN_GAIN a warning. Measured on the built-in draft (trained on [1,3,5], 762 probe tokens):
# served [-1,1,3] (slot shift) 0.50 vs 0.82; [0,2,4] (every id -1) 0.72; [2,4,6] (every id +1) 0.75;
# the runner-up to the right ids scores 0.006 below them, so 0.04 is well clear of noise.
PROBE_MIN_GAIN = 0.10
PROBE_WARN_GAIN = 0.04
# Speedup below 1 means speculation loses; no margin, because the number is already a window-weighted
# mean over the whole run, and the user asked "is it slower", not "is it much slower".
SLOWER_SPEEDUP = 1.0
# Gen throughput of ingested logs compares only at the same batch size: median running requests within
# this factor (decode throughput scales roughly with batch size at small batches).
BATCH_MATCH_RATIO = 1.25
# Without SGLang versions on both sides, an ingested baseline must be from within this many hours:
# a baseline from another day may be another SGLang, driver or GPU.
BASELINE_MAX_GAP_H = 24
# DP ranks serve the same config; accept lengths differing by more than this fraction of their mean,
# or gen throughput by more than this ratio, point at an unbalanced router or a sick GPU.
DP_ACCEPT_SPREAD = 0.15
DP_TPUT_RATIO = 1.3
# Queue growth: mean #queue-req of the last third of a rank's windows exceeds the first third's by at
# least this many requests and by QUEUE_GROWTH_FACTOR (needs QUEUE_MIN_WINDOWS windows to say "trend").
QUEUE_MIN_WINDOWS = 6
QUEUE_GROWTH_MIN_REQ = 4
QUEUE_GROWTH_FACTOR = 1.5
# KV pool near full: token usage at or above this, together with retractions, means requests are
# being evicted and recomputed; spec decoding's extra KV (draft tokens) makes it worse.
KV_USAGE_HIGH = 0.95
# CUDA graph off in at least this fraction of a run's windows (on a CUDA device).
GRAPH_OFF_FRACTION = 0.5
# Printed accept rate vs the comparable (0.5.11+) one: a difference above this (2 decimals printed,
# plus weighting) means the printing version used another definition.
RATE_DEF_TOL = 0.015
MAX_EVIDENCE_ROWS = 5
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Ref:
    """One stored row behind a finding: a log line (table, file, line_no, byte_offset) or a request."""

    table: str
    file: str | None = None
    line_no: int | None = None
    byte_offset: int | None = None
    run_id: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Evidence:
    numbers: dict                       # name -> stored (or, for the probe, measured) value
    rows: tuple[Ref, ...] = ()


@dataclass(frozen=True)
class Finding:
    run_id: str
    run: str                            # run name
    code: str
    severity: str                       # error | warning | info
    title: str
    evidence: Evidence
    suggestion: str
    config_offset: int | None = None    # which server_args line of the run (NULL: the run's config)


@dataclass
class _Ctx:
    summary: list[dict]
    scope: list[dict]
    windows: dict = field(default_factory=dict)     # (run_id, config_offset) -> [window dicts]
    batch: dict = field(default_factory=dict)       # (run_id, config_offset) -> (median batch, first ts)
    retracts: dict = field(default_factory=dict)    # run_id -> [event dicts]
    hist: dict = field(default_factory=dict)        # run_id -> (summed histogram, request refs)
    paths: dict = field(default_factory=dict)       # source_id -> path
    logs: dict = field(default_factory=dict)        # run_id -> [server log paths]
    launched: dict = field(default_factory=dict)    # run_id -> runs row (what a sweep launched)
    stats: dict = field(default_factory=dict)       # group_id -> config_stats row (repeats pooled)


class DoctorError(RuntimeError):
    """The run asked for is not in the store."""


# ----------------------------------------------------------------------------- loading


def _rows(db, sql, params=None, max_rows=1_000_000) -> list[dict]:
    return query.run_sql(db, sql, params, max_rows=max_rows).dicts()


def _load(db, run: str | None) -> _Ctx:
    summary = _rows(db, "SELECT * FROM config_summary ORDER BY run_id, config_offset NULLS FIRST")
    scope = [r for r in summary if run is None or run in (r["run_id"], r["run_name"])]
    if run is not None and not scope:
        raise DoctorError(f"no run named {run!r} in {db}; `specwatch report --db {db}` lists runs")
    ids = sorted({r["run_id"] for r in scope})
    ctx = _Ctx(summary, scope)
    ctx.stats = {r["group_id"]: r for r in _rows(db, """
        SELECT group_id, sweep_name, config_name, concurrency, repeats, verdict,
          speedup, speedup_ci_low, speedup_ci_high, speedup_basis, accept_len_min, accept_len_max
        FROM config_stats""")}
    if not ids:
        return ctx
    marks = ", ".join("?" * len(ids))
    for w in _rows(db, f"""
        SELECT run_id, config_offset, source_id, byte_offset, line_no, dp_rank, pp_rank, ts,
          running_req, queue_req, token_usage_frac, accept_len, accept_rate_printed,
          gen_throughput_tok_s, graph_enabled, graph_device, retracted_req, after_idle,
          rank_windows, cfg_disable_cuda_graph
        FROM decode_windows_scoped WHERE run_id IN ({marks})
        ORDER BY run_id, source_id, byte_offset""", ids):
        ctx.windows.setdefault((w["run_id"], w["config_offset"]), []).append(w)
    for b in _rows(db, """
        SELECT run_id, config_offset, median(running_req) AS batch, min(ts) AS first_ts
        FROM decode_windows_scoped WHERE NOT after_idle OR rank_windows = 1 GROUP BY ALL"""):
        ctx.batch[(b["run_id"], b["config_offset"])] = (b["batch"], b["first_ts"])
    for e in _rows(db, f"""
        SELECT rs.run_id, e.source_id, e.byte_offset, e.line_no, e.message FROM events e
        JOIN run_sources rs ON e.source_id = rs.source_id AND e.byte_offset >= rs.offset_from
         AND (rs.offset_to IS NULL OR e.byte_offset < rs.offset_to)
        WHERE e.kind = 'retract' AND rs.run_id IN ({marks}) ORDER BY e.byte_offset""", ids):
        ctx.retracts.setdefault(e["run_id"], []).append(e)
    for q in _rows(db, f"""
        SELECT run_id, request_idx, spec_accept_histogram FROM requests
        WHERE run_id IN ({marks}) AND success AND NOT coalesce(is_warmup, false)
          AND spec_accept_histogram IS NOT NULL ORDER BY run_id, request_idx""", ids):
        h = ctx.hist.setdefault(q["run_id"], ([], []))
        for i, n in enumerate(q["spec_accept_histogram"]):
            if i >= len(h[0]):
                h[0].append(0)
            h[0][i] += n or 0
        h[1].append(q["request_idx"])
    ctx.paths = {s["source_id"]: s["path"] for s in _rows(db, "SELECT source_id, path FROM sources")}
    for r in _rows(db, f"""SELECT DISTINCT rs.run_id, s.path FROM run_sources rs
                          JOIN sources s USING (source_id) WHERE rs.run_id IN ({marks})
                          ORDER BY s.path""", ids):
        ctx.logs.setdefault(r["run_id"], []).append(r["path"])
    ctx.launched = {r["run_id"]: r for r in _rows(
        db, f"""SELECT run_id, model_path, draft_model_path, server_log_tail FROM runs
                WHERE run_id IN ({marks})""", ids)}
    return ctx


def _ref(ctx: _Ctx, w: dict, note: str | None = None, table: str = "decode_windows") -> Ref:
    return Ref(table, ctx.paths.get(w["source_id"], w["source_id"]), w["line_no"], w["byte_offset"],
               note=note)


def _config_ref(ctx: _Ctx, row: dict) -> tuple[Ref, ...]:
    if row.get("config_offset") is None:
        return ()
    return (Ref("server_configs", ctx.paths.get(row["config_source_id"], row["config_source_id"]),
                None, row["config_offset"], note="server_args line (effective spec config)"),)


def _kept(ws: list[dict]) -> list[dict]:
    """The windows config_summary averages: not after idle, unless a rank has only that one."""
    return [w for w in ws if not w["after_idle"] or w["rank_windows"] == 1]


# ----------------------------------------------------------------------------- model files


def _local_dir(path: str | None) -> Path | None:
    return modelinfo.local_dir(path)


def _weights_id(row: dict) -> str | None:
    """Identity of a run's draft weights: sha1 of its weight files (read here if local, else as
    the sweep recorded it where the server ran), else the path."""
    path = row.get("draft_model_path")
    mi = modelinfo.info(path)
    return (mi.weights_sha1 if mi is not None and mi.weights_sha1 else None) \
        or row.get("draft_weights_sha1") or path


def _num_layers(model_path: str | None) -> int | None:
    mi = modelinfo.info(model_path)
    return mi.num_layers if mi is not None else None


def _ids(row: dict) -> list[int] | None:
    """The served aux ids: what the sweep configured, else the draft's config.json at the path the
    server_args line names (ingested logs), else None."""
    try:
        ids = json.loads(row["aux_layer_ids"]) if row.get("aux_layer_ids") else None
    except ValueError:
        ids = None
    if isinstance(ids, list):
        return [int(i) for i in ids]
    mi = modelinfo.info(row.get("draft_model_path"))
    return list(mi.aux_layer_ids) if mi is not None and mi.aux_layer_ids is not None else None


def _target(row: dict) -> tuple[str | None, int | None]:
    """(architecture, layer count) of the target from its config.json when it is local, else as
    the sweep recorded them where the server ran."""
    mi = modelinfo.info(row.get("model_path"))
    if mi is not None:
        return mi.architecture, mi.num_layers
    return row.get("target_architecture"), row.get("target_num_layers")


def _fmt_outputs(outputs: list) -> str:
    return "[" + ", ".join("nothing" if o is None else ("embedding" if o == -1 else f"layer {o}")
                           for o in outputs) + "]"


def capture_text(row: dict, ids: list[int]) -> str | None:
    """What these ids capture on this run's target, per SGLang's rule for its architecture; when
    the architecture is unknown, what each candidate rule would make of them (never a guess)."""
    arch, L = _target(row)
    if L is None:
        return None
    readings = aux_layers.read(arch, ids, L, row.get("sglang_version"))
    used, _ = aux_layers.rules_for(row.get("sglang_version"))
    if len(readings) == 1:
        (rd,) = readings.values()
        return (f"on {arch} ({L} layers; SGLang {used} rule: {aux_layers.RULE_TEXT[rd.rule]}) ids "
                f"{ids} capture the outputs {_fmt_outputs(rd.outputs)}")
    parts = [f"{aux_layers.RULE_TEXT[n]}: {_fmt_outputs(rd.outputs)}" for n, rd in readings.items()]
    return (f"the target's architecture ({arch or 'not in its config.json'}) has no verified SGLang "
            f"rule, so which layers ids {ids} capture depends on its model class; the rules SGLang "
            f"{used} uses would give: " + "; ".join(parts))


def describe_shift(served: list[int], want: list[int]) -> str:
    """'each id +2 (one slot: served [-1, 1, 3] = wanted ids slid right)' style offset text."""
    offs = [w - s for s, w in zip(sorted(served), sorted(want))]
    text = "offset per id " + ", ".join(f"{o:+d}" for o in offs)
    s, w = sorted(served), sorted(want)
    for k in (1, 2):
        if len(s) > k and s[k:] == w[:-k]:
            text += f" (slot shift: the served ids are the wanted ones moved {k} slot(s) toward layer -1)"
        if len(s) > k and w[k:] == s[:-k]:
            text += f" (slot shift: the served ids are the wanted ones moved {k} slot(s) toward the top)"
    if len(set(offs)) == 1 and offs[0] in (-1, 1):
        text += " (the +1 convention: SGLang captures the input of layer id+1)"
    return text


# ----------------------------------------------------------------------------- checks


def _spec_label(row: dict) -> str:
    parts = [row.get("speculative_algorithm") or "?"]
    for k, tag in (("speculative_num_steps", "s"), ("speculative_eagle_topk", "k"),
                   ("speculative_num_draft_tokens", "d"), ("concurrency", "c")):
        if row.get(k) is not None:
            parts.append(f"{tag}{row[k]}")
    return " ".join(parts)


def _step1(ctx: _Ctx, run_id: str) -> tuple[float | None, int]:
    """Fraction of verify steps that accepted >= 1 draft, from the requests' histograms."""
    h = ctx.hist.get(run_id)
    if not h or not sum(h[0]):
        return None, 0
    return 1 - h[0][0] / sum(h[0]), len(h[1])


def _sibling(ctx: _Ctx, row: dict) -> dict | None:
    """Best run of the same sweep (or, for ingested logs, likewise outside any sweep), target,
    draft weights, spec shape and concurrency with other aux ids."""
    ids = _ids(row)
    if ids is None:
        return None
    me = _weights_id(row)
    best = None
    for r in ctx.summary:
        if (r["run_id"] == row["run_id"] or r["sweep_name"] != row["sweep_name"]
                or r.get("accept_len") is None or r.get("speculative_algorithm") is None
                or _ids(r) in (None, ids)
                or any(r.get(k) != row.get(k) for k in (
                    "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "concurrency", "model_path", "tp_size"))
                or _weights_id(r) != me):
            continue
        if best is None or r["accept_len"] > best["accept_len"]:
            best = r
    return best


def _apart(ctx: _Ctx, row: dict, sib: dict) -> bool:
    """Every repeat of row's group below every repeat of sib's group (>= 2 repeats each)."""
    mine, theirs = ctx.stats.get(row.get("group_id")), ctx.stats.get(sib.get("group_id"))
    if not mine or not theirs or min(mine.get("repeats") or 0, theirs.get("repeats") or 0) < 2:
        return False
    hi, lo = mine.get("accept_len_max"), theirs.get("accept_len_min")
    return hi is not None and lo is not None and hi < lo


def _id_hints(row: dict) -> list[str]:
    """What the served ids capture on this target under SGLang's rule (only facts that are known)."""
    ids, (arch, L) = _ids(row), _target(row)
    if ids is None:
        return ["the served eagle_aux_hidden_state_layer_ids are not known for this run: the draft's "
                "config.json is not on this machine at the path the server_args line names"]
    if L is None:
        return [f"served ids {ids}; the target's config.json is not on this machine, so which "
                f"layers they capture is unknown: SGLang's rule depends on its architecture "
                f"(Llama-family: output of layer id; DeepseekV2/V3, Kimi-K2.5, GLM-4-MoE-Lite: "
                f"output of layer id-1 unless the first id is 1, and -1 captures nothing)"]
    readings = aux_layers.read(arch, ids, L, row.get("sglang_version"))
    hints = [capture_text(row, ids)]
    default = [2, L // 2, L - 3]  # SGLang's capture indices when the draft names no ids
    for name, rd in readings.items():
        tag = "" if len(readings) == 1 else f"under '{aux_layers.RULE_TEXT[name]}': "
        if rd.missing:
            lost = [ids[n] for n in rd.missing]
            hints.append(f"{tag}ids {lost} capture nothing on this {L}-layer target (no layer has "
                         f"that index), so the draft gets {len(ids) - len(lost)} of {len(ids)} "
                         f"states")
        elif -1 in rd.outputs:
            hints.append(f"{tag}id {ids[rd.outputs.index(-1)]} feeds the draft the embedding output "
                         f"(RMS ~70x below the layers); drafts are trained on mid/late layers, so a "
                         f"list with it usually slid by one slot")
        if rd.indices == default:
            hints.append(f"{tag}ids {ids} capture SGLang's default layers (indices {default}, what "
                         f"it captures when a draft names no ids)")
        elif rd.indices == [i + 1 for i in default]:
            want = aux_layers.ids_for_outputs(name, [i - 1 for i in default], L)
            hints.append(f"{tag}ids {ids} capture one layer later than SGLang's default capture "
                         f"(indices {default}); a draft trained on the default wants ids {want}")
    return hints


def check_accept(ctx: _Ctx, row: dict, ws: list[dict], probe) -> list[Finding]:
    al = row.get("accept_len")
    if al is None:
        return []
    kept = [w for w in _kept(ws) if w["accept_len"] is not None]
    worst = sorted(kept, key=lambda w: w["accept_len"])[:MAX_EVIDENCE_ROWS]
    rows = tuple(_ref(ctx, w, f"accept len {w['accept_len']:.2f}") for w in worst) + _config_ref(ctx, row)
    step1, n_req = _step1(ctx, row["run_id"])
    nums = {"accept_len": al, "windows": row.get("windows"),
            "speculative_num_steps": row.get("speculative_num_steps"),
            "speculative_num_draft_tokens": row.get("speculative_num_draft_tokens"),
            "accept_rate": row.get("accept_rate"), "aux_layer_ids": _ids(row)}
    if step1 is not None:
        nums.update(step1_acceptance=round(step1, 4), requests=n_req)
        rows += (Ref("requests", run_id=row["run_id"], note=f"{n_req} requests' spec_accept_histogram"),)
    sib = _sibling(ctx, row)
    hints = _id_hints(row)
    if probe is not None and probe.best_agreement - probe.served_agreement >= PROBE_WARN_GAIN:
        hints.insert(0, f"the draft's weights expect ids {probe.best_ids} (see aux_ids_mismatch)")
    generic = ("then check the draft vocab mapping (d2t / --speculative-token-map) and that the "
               "draft was trained for this exact target (same tokenizer and weights)")
    out = []
    if al < LOW_ACCEPT_LEN:
        out.append(Finding(
            row["run_id"], row["run_name"], "accept_len_near_1", "error",
            f"accept length {al:.2f} < {LOW_ACCEPT_LEN}: the draft is not predicting the target",
            Evidence(nums, rows), "; ".join(hints) + "; " + generic, row.get("config_offset")))
    severity = None
    if sib is not None and al <= SIBLING_ACCEPT_RATIO * sib["accept_len"]:
        severity = "error"
    elif sib is not None and al <= SIBLING_WARN_RATIO * sib["accept_len"] and _apart(ctx, row, sib):
        severity = "warning"
    if severity is not None:
        want, have = _ids(sib), _ids(row)
        n2 = dict(nums, sibling_run=sib["run_name"], sibling_accept_len=sib["accept_len"],
                  sibling_aux_layer_ids=want, ratio=round(al / sib["accept_len"], 4))
        s1, _ = _step1(ctx, sib["run_id"])
        if s1 is not None:
            n2["sibling_step1_acceptance"] = round(s1, 4)
        have_cap, want_cap = capture_text(row, have), capture_text(sib, want)
        arch, L = _target(row)
        n2.update(target_architecture=arch, target_num_layers=L)
        why = "; ".join(t for t in (have_cap, want_cap) if t)
        title = (f"aux ids {have} are wrong, {describe_shift(have, want)}" if severity == "error" else
                 f"aux ids {have} cost {1 - al / sib['accept_len']:.0%} of the accept length "
                 f"({describe_shift(have, want)}); every repeat of each lies apart, so it is the "
                 f"ids, not noise")
        out.append(Finding(
            row["run_id"], row["run_name"], "accept_len_below_sibling", severity,
            f"accept length {al:.2f} vs {sib['accept_len']:.2f} for the same draft with ids {want}: "
            + title,
            Evidence(n2, rows + (Ref("runs", run_id=sib["run_id"], note="sibling run"),)),
            f"serve eagle_aux_hidden_state_layer_ids = {want} (as in run {sib['run_name']})"
            + (f"; {why}" if why else ""),
            row.get("config_offset")))
    return out


def check_probe(ctx: _Ctx, row: dict, probe) -> list[Finding]:
    if probe is None or probe.best_agreement - probe.served_agreement < PROBE_WARN_GAIN:
        return []
    severity = "error" if probe.best_agreement - probe.served_agreement >= PROBE_MIN_GAIN else "warning"
    chk = probe.capture_check
    nums = {"served_ids": probe.served_ids, "served_step1_agreement": round(probe.served_agreement, 4),
            "best_ids": probe.best_ids, "best_step1_agreement": round(probe.best_agreement, 4),
            "probe_tokens": probe.tokens, "top_candidates": [[i, round(a, 4)] for i, a in probe.top],
            "captured_layers_by_cosine": chk.captured_layers,
            "capture_cosine": [round(s.cosine, 4) for s in chk.segments],
            "accept_len": row.get("accept_len")}
    return [Finding(
        row["run_id"], row["run_name"], "aux_ids_mismatch", severity,
        f"the draft expects aux ids {probe.best_ids}, served {probe.served_ids}: "
        f"{describe_shift(probe.served_ids, probe.best_ids)}",
        Evidence(nums, _config_ref(ctx, row)),
        f"set eagle_aux_hidden_state_layer_ids = {probe.best_ids} in the draft's config.json "
        f"(or `aux_layer_ids = {probe.best_ids}` in the sweep file); the served capture was checked "
        f"by cosine/RMS to be layers {chk.captured_layers}, so the engine's capture is right and the "
        f"ids are not", row.get("config_offset"))]


def _comparable_baseline(ctx: _Ctx, row: dict, base: dict) -> tuple[bool, dict]:
    me = ctx.batch.get((row["run_id"], row["config_offset"]))
    other = ctx.batch.get((base["run_id"], base["config_offset"]))
    info = {}
    if row.get("concurrency") is not None or base.get("concurrency") is not None:
        info.update(concurrency=row.get("concurrency"), baseline_concurrency=base.get("concurrency"))
        return row.get("concurrency") == base.get("concurrency"), info
    if not me or not other or me[0] is None or other[0] is None:
        return False, info
    info.update(median_running_req=me[0], baseline_median_running_req=other[0])
    if max(me[0], other[0]) > BATCH_MATCH_RATIO * max(min(me[0], other[0]), 1e-9):
        return False, info
    v1, v2 = row.get("sglang_version"), base.get("sglang_version")
    if v1 is not None or v2 is not None:
        info.update(sglang_version=v1, baseline_sglang_version=v2)
        return v1 == v2, info
    if me[1] is None or other[1] is None:
        return False, info
    gap_h = abs((me[1] - other[1]).total_seconds()) / 3600
    info["hours_apart"] = round(gap_h, 2)
    return gap_h <= BASELINE_MAX_GAP_H, info


def _speed_suggestion(row: dict, blocker: str | None, at: str, paying: list[int]) -> str:
    if blocker is not None:
        return f"fix the accept length first (see {blocker}): with a working draft this config may pay"
    sugg = (f"overhead dominates{at}: each step drafts {row.get('speculative_num_steps')} tokens "
            f"(topk {row.get('speculative_eagle_topk')}, {row.get('speculative_num_draft_tokens')} "
            f"verified) for an accept length of "
            f"{row['accept_len']:.2f}; " if row.get("accept_len") is not None else
            f"overhead dominates{at}; ")
    sugg += "try fewer --speculative-num-steps, a smaller --speculative-eagle-topk / num-draft-tokens"
    if paying:
        sugg += (f", or serve without speculation above batch size {max(paying)} (it pays at "
                 f"concurrency {', '.join(map(str, paying))})")
    else:
        sugg += ", or disable speculation at this batch size"
    return sugg


def _check_speed_repeats(ctx: _Ctx, row: dict, st: dict, base: dict, blocker: str | None) -> list[Finding]:
    """A sweep config with repeats: judged once per (config, concurrency) on its pooled speedup
    and 95 % interval (config_stats), never on one repeat's dip. 'loses' -> error; a point
    estimate below 1 whose interval contains 1 -> warning; anything else says nothing."""
    # one finding per group: on its first run among those diagnosed (`doctor --run` may name any)
    first = min(r["run_id"] for r in ctx.scope if r.get("group_id") == row.get("group_id"))
    if st["verdict"] == "pays" or st["speedup"] >= SLOWER_SPEEDUP or row["run_id"] != first:
        return []
    at = f" at concurrency {st['concurrency']}" if st.get("concurrency") is not None else ""
    by_conc = {r["concurrency"]: r for r in ctx.stats.values()
               if r["sweep_name"] == st["sweep_name"] and r["config_name"] == st["config_name"]
               and r["concurrency"] is not None and r.get("speedup") is not None}
    nums = {"baseline_run": base["run_name"], "speedup": st["speedup"],
            "speedup_ci_low": st["speedup_ci_low"], "speedup_ci_high": st["speedup_ci_high"],
            "repeats": st["repeats"], "verdict": st["verdict"], "speedup_basis": st["speedup_basis"],
            "concurrency": st.get("concurrency")}
    others = {str(c): r["speedup"] for c, r in sorted(by_conc.items()) if c != st.get("concurrency")}
    if others:
        nums["speedup_by_concurrency"] = others
    paying = sorted(c for c, r in by_conc.items() if r["verdict"] == "pays")
    interval = f"{st['speedup']:.2f} [95% CI {st['speedup_ci_low']:.2f}, {st['speedup_ci_high']:.2f}] over {st['repeats']} repeats"
    sugg = _speed_suggestion(row, blocker, at, paying)
    rows = _config_ref(ctx, row) + (Ref("runs", run_id=base["run_id"], note="baseline run"),)
    if st["verdict"] == "loses":
        return [Finding(row["run_id"], row["run_name"], "slower_than_baseline", "error",
                        f"speculation is slower than no speculation{at}: speedup {interval}",
                        Evidence(nums, rows), sugg, row.get("config_offset"))]
    return [Finding(row["run_id"], row["run_name"], "slower_than_baseline", "warning",
                    f"speculation may be slower than no speculation{at}: speedup {interval}; the "
                    f"interval contains 1, so this is within noise",
                    Evidence(nums, rows), "add repeats to tell; if it stays below 1: " + sugg,
                    row.get("config_offset"))]


def check_speed(ctx: _Ctx, row: dict, blocker: str | None = None) -> list[Finding]:
    """`blocker`: the code of an accept-length finding on the same run, to be fixed first."""
    base = next((r for r in ctx.summary if r["run_id"] == row.get("baseline_run_id")), None)
    if base is None:
        return []
    st = ctx.stats.get(row.get("group_id"))
    if st is not None and st.get("speedup_ci_low") is not None and st.get("speedup") is not None \
            and st.get("verdict") in ("pays", "loses", "unclear"):
        return _check_speed_repeats(ctx, row, st, base, blocker)
    nums = {"baseline_run": base["run_name"]}
    if row.get("speedup_client") is not None:
        if row["speedup_client"] >= SLOWER_SPEEDUP:
            return []
        nums.update(speedup_client=row["speedup_client"], output_tok_s=row["output_tok_s"],
                    baseline_output_tok_s=base["output_tok_s"], concurrency=row.get("concurrency"))
        what = f"client output {row['output_tok_s']:.1f} tok/s vs {base['output_tok_s']:.1f} without speculation"
    elif row.get("speedup_gen") is not None and row["speedup_gen"] < SLOWER_SPEEDUP:
        ok, info = _comparable_baseline(ctx, row, base)
        if not ok:
            return []
        nums.update(speedup_gen=row["speedup_gen"], gen_throughput_tok_s=row["gen_throughput_tok_s"],
                    baseline_gen_throughput_tok_s=base["gen_throughput_tok_s"], **info)
        what = (f"gen throughput {row['gen_throughput_tok_s']:.1f} tok/s vs "
                f"{base['gen_throughput_tok_s']:.1f} without speculation")
    else:
        return []
    speedup = nums.get("speedup_client", nums.get("speedup_gen"))
    at = f" at concurrency {row['concurrency']}" if row.get("concurrency") is not None else ""
    others = sorted((r["concurrency"], r["speedup_client"]) for r in ctx.summary
                    if r["sweep_name"] is not None and r["sweep_name"] == row["sweep_name"]
                    and r["config_name"] == row["config_name"] and r["run_id"] != row["run_id"]
                    and r["concurrency"] is not None and r["speedup_client"] is not None)
    if others:
        nums["speedup_client_by_concurrency"] = {str(c): s for c, s in others}
    paying = sorted({c for c, s in others if s >= SLOWER_SPEEDUP})
    rows = _config_ref(ctx, row) + (Ref("runs", run_id=base["run_id"], note="baseline run"),)
    return [Finding(row["run_id"], row["run_name"], "slower_than_baseline", "error",
                    f"speculation is slower than no speculation{at}: speedup {speedup:.2f} ({what})",
                    Evidence(nums, rows), _speed_suggestion(row, blocker, at, paying),
                    row.get("config_offset"))]


def check_accept_rate(ctx: _Ctx, row: dict) -> list[Finding]:
    al, pr, ar = row.get("accept_len"), row.get("accept_rate_printed"), row.get("accept_rate")
    ndt, steps = row.get("speculative_num_draft_tokens"), row.get("speculative_num_steps")
    # Without the draft-token count the comparable rate is not SGLang's (accept_len-1)/(N-1) (a
    # pasted log mixing vLLM windows, say): nothing to compare the printed rate with.
    if None in (al, pr, ar, ndt) or abs(pr - ar) <= RATE_DEF_TOL:
        return []
    if steps is not None and abs(pr - al / (steps + 1)) <= RATE_DEF_TOL:
        how = f"accept_len / (steps+1) = {al:.3f}/{steps + 1}, bonus token included (SGLang 0.5.4-0.5.5"
        how += ", or 0.5.6-0.5.10 when draft tokens = steps+1)" if ndt == steps + 1 else ")"
    elif ndt and abs(pr - al / ndt) <= RATE_DEF_TOL:
        how = f"accept_len / num_draft_tokens = {al:.3f}/{ndt}, bonus token included (SGLang 0.5.6-0.5.10)"
    else:
        how = "a definition that matches none of SGLang's three"
    return [Finding(
        row["run_id"], row["run_name"], "accept_rate_not_comparable", "info",
        f"printed accept rate {pr:.3f} is {how}; the comparable rate is {ar:.3f}",
        Evidence({"accept_rate_printed": pr, "accept_rate": ar, "accept_len": al,
                  "speculative_num_steps": steps, "speculative_num_draft_tokens": ndt},
                 _config_ref(ctx, row)),
        "compare runs of different SGLang versions by accept_rate ((accept_len-1)/(draft tokens-1)) "
        "or accept_len, never by the printed rate", row.get("config_offset"))]


def check_dp(ctx: _Ctx, row: dict, ws: list[dict]) -> list[Finding]:
    by = {}
    for w in _kept(ws):
        if w["dp_rank"] is not None:
            by.setdefault(w["dp_rank"], []).append(w)
    if len(by) < 2:
        return []
    per = {}
    for rank, rs in sorted(by.items()):
        den = sum(w["running_req"] or 0 for w in rs if w["accept_len"] is not None)
        al = (sum(w["accept_len"] * (w["running_req"] or 0) for w in rs if w["accept_len"] is not None)
              / den) if den else None
        tp = [w["gen_throughput_tok_s"] for w in rs if w["gen_throughput_tok_s"] is not None]
        per[rank] = (al, statistics.fmean(tp) if tp else None, rs)
    als = [v[0] for v in per.values() if v[0] is not None]
    tps = [v[1] for v in per.values() if v[1] is not None]
    spread = (max(als) - min(als)) / statistics.fmean(als) if len(als) > 1 and statistics.fmean(als) else 0
    ratio = max(tps) / min(tps) if len(tps) > 1 and min(tps) > 0 else 1
    if spread <= DP_ACCEPT_SPREAD and ratio <= DP_TPUT_RATIO:
        return []
    nums = {f"dp{r}": {"accept_len": v[0], "gen_throughput_tok_s": v[1], "windows": len(v[2])}
            for r, v in per.items()}
    nums.update(accept_len_spread=round(spread, 4), gen_throughput_ratio=round(ratio, 4))
    rows = tuple(_ref(ctx, v[2][0], f"first kept window of DP{r}") for r, v in per.items())
    return [Finding(row["run_id"], row["run_name"], "dp_ranks_disagree", "warning",
                    f"DP ranks disagree: accept length spread {spread:.0%}, gen throughput max/min {ratio:.2f}",
                    Evidence(nums, rows[:MAX_EVIDENCE_ROWS]),
                    "check the router's balance (#running-req per rank) and each rank's GPU; a rank "
                    "with a lower accept length may run another draft or config", row.get("config_offset"))]


def check_graph(ctx: _Ctx, row: dict, ws: list[dict]) -> list[Finding]:
    cuda = [w for w in _kept(ws) if w["graph_device"] == "cuda" and w["graph_enabled"] is not None]
    off = [w for w in cuda if not w["graph_enabled"]]
    disabled = any(w["cfg_disable_cuda_graph"] for w in ws)
    if not (cuda and len(off) >= GRAPH_OFF_FRACTION * len(cuda)) and not disabled:
        return []
    nums = {"windows_graph_off": len(off), "windows_on_cuda": len(cuda), "disable_cuda_graph": disabled}
    rows = tuple(_ref(ctx, w, "cuda graph: False") for w in off[:MAX_EVIDENCE_ROWS]) + _config_ref(ctx, row)
    return [Finding(row["run_id"], row["run_name"], "cuda_graph_off", "warning",
                    f"CUDA graph off in {len(off)} of {len(cuda)} decode windows"
                    + (" (--disable-cuda-graph)" if disabled else ""),
                    Evidence(nums, rows),
                    "speculative decoding launches many small kernels per step; without CUDA graphs "
                    "the launch overhead eats the gain. Remove --disable-cuda-graph, or raise "
                    "--cuda-graph-max-bs-decode (before SGLang 0.5.23: --cuda-graph-max-bs) above the "
                    "running batch size", row.get("config_offset"))]


def check_queue(ctx: _Ctx, row: dict, ws: list[dict]) -> list[Finding]:
    out = []
    by = {}
    for w in _kept(ws):
        by.setdefault((w["dp_rank"], w["pp_rank"]), []).append(w)
    for (dp, _), rs in sorted(by.items(), key=lambda kv: str(kv[0])):
        rs = [w for w in rs if w["queue_req"] is not None]
        if len(rs) < QUEUE_MIN_WINDOWS:
            continue
        third = len(rs) // 3
        q0 = statistics.fmean(w["queue_req"] for w in rs[:third])
        q1 = statistics.fmean(w["queue_req"] for w in rs[-third:])
        if q1 - q0 >= QUEUE_GROWTH_MIN_REQ and q1 >= QUEUE_GROWTH_FACTOR * q0:
            nums = {"queue_req_first_third_mean": q0, "queue_req_last_third_mean": q1,
                    "windows": len(rs), "dp_rank": dp}
            rows = (_ref(ctx, rs[0], f"#queue-req {rs[0]['queue_req']}"),
                    _ref(ctx, rs[-1], f"#queue-req {rs[-1]['queue_req']}"))
            out.append(Finding(row["run_id"], row["run_name"], "queue_growing", "warning",
                               f"waiting queue grows from {q0:.1f} to {q1:.1f} requests over the run",
                               Evidence(nums, rows),
                               "the server cannot keep up with the offered load: throughput and "
                               "latency numbers are not steady-state; lower the request rate or "
                               "concurrency, or raise --max-running-requests", row.get("config_offset")))
            break
    return out


def check_kv(ctx: _Ctx, row: dict, ws: list[dict]) -> list[Finding]:
    kept = [w for w in ws if w["token_usage_frac"] is not None]
    if not kept:
        return []
    top = max(kept, key=lambda w: w["token_usage_frac"])
    events = ctx.retracts.get(row["run_id"], [])
    retracted = [w for w in ws if (w["retracted_req"] or 0) > 0]
    if top["token_usage_frac"] < KV_USAGE_HIGH or not (events or retracted):
        return []
    nums = {"max_token_usage_frac": top["token_usage_frac"], "retract_events": len(events),
            "windows_with_retracted_req": len(retracted)}
    rows = (_ref(ctx, top, f"token usage {top['token_usage_frac']:.2f}"),) + tuple(
        Ref("events", ctx.paths.get(e["source_id"], e["source_id"]), e["line_no"], e["byte_offset"],
            note="KV cache pool is full. Retract requests.") for e in events[:MAX_EVIDENCE_ROWS - 1])
    return [Finding(row["run_id"], row["run_name"], "kv_pressure_retractions", "warning",
                    f"KV cache {top['token_usage_frac']:.0%} full with {len(events) + len(retracted)} retraction(s)",
                    Evidence(nums, rows),
                    "retracted requests are recomputed, which hides the speculation gain; lower "
                    "--max-running-requests or --speculative-num-draft-tokens, or raise "
                    "--mem-fraction-static", row.get("config_offset"))]


def check_first_window(ctx: _Ctx, row: dict, ws: list[dict]) -> list[Finding]:
    only = [w for w in ws if w["after_idle"] and w["rank_windows"] == 1]
    if not only:
        return []
    nums = {"ranks_with_one_window": len(only),
            # per rank, the only window's values: not the run's summary (named apart from it)
            "first_window_gen_throughput_tok_s": [w["gen_throughput_tok_s"] for w in only],
            "first_window_accept_len": [w["accept_len"] for w in only]}
    return [Finding(row["run_id"], row["run_name"], "first_window_contaminated", "warning",
                    "the summary rests on a single decode window per rank, the first after idle, whose "
                    "throughput includes warm-up/idle time and whose accept length can mix earlier steps",
                    Evidence(nums, tuple(_ref(ctx, w, "only window (after idle)") for w in only[:MAX_EVIDENCE_ROWS])),
                    "run longer (more output tokens or prompts) or lower --decode-log-interval so each "
                    "rank prints several windows", row.get("config_offset"))]


# ----------------------------------------------------------------------------- driver


def _probe(ctx: _Ctx, row: dict, cache: dict):
    """The built-in engine's id probe for this run, or None when it does not apply."""
    if row.get("engine") != "builtin":
        return None
    launched = ctx.launched.get(row["run_id"], {})
    t = _local_dir(row.get("model_path")) or _local_dir(launched.get("model_path"))
    d = _local_dir(row.get("draft_model_path")) or _local_dir(launched.get("draft_model_path"))
    if t is None or d is None or not (d / "model.safetensors").is_file():
        return None
    ids = _ids(row)
    key = (str(t), str(d), tuple(ids) if ids else None)
    if key not in cache:
        from specwatch.diagnose import align
        try:
            cache[key] = align.probe_draft_ids(t, d, ids)
        except (ValueError, OSError) as exc:  # ids out of range, unreadable weights: _id_hints says why
            print(f"specwatch doctor: {row['run_name']}: aux id probe skipped: {exc}", file=sys.stderr)
            cache[key] = None
    return cache[key]


# Known causes of a server that died before it was ready -> what to do (first match wins).
FAILURE_HINTS = (
    (re.compile(r"No module named '([\w.]+)'"),
     "the launch interpreter's environment lacks the Python module {0}: install it there (the "
     "interpreter of launch_command), or pick flags whose code paths do not import it"),
    (re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory", re.I),
     "the GPU ran out of memory: lower --mem-fraction-static or --max-running-requests, shorten "
     "--context-length, or give the config more GPUs (tp_size)"),
    (re.compile(r"NCCL", re.I),
     "an NCCL (multi-GPU communication) error: check that the config's GPUs are free and see "
     "each other (run with NCCL_DEBUG=INFO), and that no other server holds its ports"),
    (re.compile(r"unrecognized arguments|ambiguous option|invalid choice|error: argument"),
     "SGLang's parser rejected a flag: fix it in server_flags (run-sweep checks flags before "
     "launching for engine = \"sglang\"; `python -m sglang.launch_server --help` lists them)"),
    (re.compile(r"Address already in use|port .* (in use|not free)", re.I),
     "a port was taken: stop the process holding it, or let specwatch pick ports (no `port`)"),
)


def failure_hint(reason: str | None) -> str:
    for pat, text in FAILURE_HINTS:
        m = pat.search(reason or "")
        if m:
            return text.format(*m.groups())
    return "read the server log named here: its last exception says why it died"


def _capture_crash(ctx: _Ctx, row: dict) -> failure.AuxCaptureCrash | None:
    """The crash inside the target's aux capture, from the stored log tail or the log itself."""
    tail = ctx.launched.get(row["run_id"], {}).get("server_log_tail")
    crash = failure.aux_capture_crash((tail or "").splitlines())
    for path in ctx.logs.get(row["run_id"], []) if crash is None else ():
        crash = failure.aux_capture_crash(failure.tail_lines(path))
        if crash is not None:
            break
    return crash


def _index0_ids(row: dict, module: str) -> tuple[list[int], str | None]:
    """(served ids that SGLang maps to capture index 0, the rule used): index 0 is the input of
    the first layer, where the Llama-family loops of SGLang <= 0.5.20 have no residual yet. The
    rule is the target architecture's, else the one every architecture of `module` shares."""
    ids, (arch, L) = _ids(row), _target(row)
    version = row.get("sglang_version")
    name = aux_layers.rule(arch, version)
    if name is None:
        names = {aux_layers.rule(a, version) for a, m in aux_layers.MODULES.items() if m == module}
        name = names.pop() if len(names) == 1 else None
    if ids is None or name is None:
        return [], name
    idx = aux_layers.capture_indices(name, ids, L or max(ids, default=0) + 2)
    return [i for i, x in zip(ids, idx) if x == 0], name


def check_failed(ctx: _Ctx, row: dict) -> list[Finding]:
    """A config whose server died (or never got ready): its real cause, its log, and a hint. A
    death inside the target's EAGLE-3 aux capture names the ids behind it and the fix."""
    reason = row.get("failure_reason")
    logs = ctx.logs.get(row["run_id"], [])
    refs = tuple(Ref("sources", p, note="server log") for p in logs) + _config_ref(ctx, row)
    nums = {"status": row.get("status"), "failure_reason": reason, "server_logs": logs or None}
    name = row.get("config_name") or row["run_name"]
    title, hint = f"config {name} failed: {reason or 'no cause recorded'}", failure_hint(reason)
    crash = _capture_crash(ctx, row)   # the capture code runs only with EAGLE-3 / DFlash on
    if crash is not None:
        ids = _ids(row)
        bad, rule_name = _index0_ids(row, crash.module)
        where = f"sglang/srt/models/{crash.module}.py:{crash.line_no}"
        nums.update(aux_layer_ids=ids, crash_frame=where, crash_code=crash.code,
                    sglang_version=row.get("sglang_version"))
        version = f"SGLang {row['sglang_version']}" if row.get("sglang_version") else "SGLang"
        title = f"config {name} failed in the target's EAGLE-3 aux capture: "
        if bad:
            none_yet = ("NoneType" in crash.exception
                        and f", where {version}'s {crash.module}.py has no residual yet")
            title += (f"aux id {bad[0]} of {ids} maps" if len(bad) == 1 else
                      f"aux ids {bad} of {ids} map") + (
                f" to capture index 0, the input of the first layer{none_yet or ''}, so ")
        title += (f"`{crash.code}` ({where}) raised {crash.exception}"
                  + (f" [rule: {aux_layers.RULE_TEXT[rule_name]}]" if bad else ""))
        sib = _sibling(ctx, row)
        if sib is not None:
            want = _ids(sib)
            hint = (f"serve eagle_aux_hidden_state_layer_ids = {want} (as in run "
                    f"{sib['run_name']}: the same draft weights, accept length "
                    f"{sib['accept_len']:.2f}); {ids} vs {want}: {describe_shift(ids, want)}")
            refs += (Ref("runs", run_id=sib["run_id"], note="sibling run"),)
        elif bad:
            hint = (f"serve ids that each name a layer of the target (no id in {bad}): the ids "
                    f"the draft was trained with are in its training config; a list holding "
                    f"{bad} is often the trained one slid by one slot toward the embedding")
        else:
            served = f"the served ids {ids}" if ids is not None else (
                "the served ids (not recorded for this run: see the draft's config.json)")
            hint = (f"{served} reach the capture code at {where}; check that they name layers "
                    f"of this target and that the draft's hidden size matches it")
    return [Finding(row["run_id"], row["run_name"], "config_failed", "error", title,
                    Evidence(nums, refs), hint, row.get("config_offset"))]


def is_speculative(row: dict) -> bool:
    return row.get("speculative_algorithm") is not None


def diagnose(db, run: str | None = None) -> tuple[list[Finding], list[dict]]:
    """(findings, speculative config rows checked) for every run in the store, or only `run`."""
    ctx = _load(db, run)
    findings, checked, cache = [], [], {}
    for row in ctx.scope:
        if row.get("status") == "failed":
            checked.append(row)
            findings += check_failed(ctx, row)
            continue
        if not is_speculative(row) or row.get("status") not in (None, "ok"):
            continue
        checked.append(row)
        ws = ctx.windows.get((row["run_id"], row["config_offset"]), [])
        probe = _probe(ctx, row, cache)
        acc = check_accept(ctx, row, ws, probe) + check_probe(ctx, row, probe)
        findings += acc
        blocker = next((f.code for f in acc if f.severity == "error"), None)
        findings += check_speed(ctx, row, blocker)
        findings += check_accept_rate(ctx, row)
        findings += check_dp(ctx, row, ws)
        findings += check_graph(ctx, row, ws)
        findings += check_queue(ctx, row, ws)
        findings += check_kv(ctx, row, ws)
        findings += check_first_window(ctx, row, ws)
    findings.sort(key=lambda f: (f.run, f.config_offset or 0, SEVERITY_ORDER[f.severity], f.code))
    return findings, checked


def _num(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.4g}"
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat(sep=" ")
    return json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v)


def render_text(findings: list[Finding], checked: list[dict]) -> str:
    out, by_run = [], {}
    for f in findings:
        by_run.setdefault((f.run, f.config_offset), []).append(f)
    for row in checked:
        fs = by_run.get((row["run_name"], row.get("config_offset")), [])
        if not fs:
            continue
        out.append(f"run {row['run_name']} ({_spec_label(row)})")
        for f in fs:
            out.append(f"  {f.severity.upper()} {f.code}: {f.title}")
            out.append("    numbers: " + ", ".join(f"{k}={_num(v)}" for k, v in f.evidence.numbers.items()
                                                   if v is not None))
            for r in f.evidence.rows:
                where = (f"{r.file}:{r.line_no}" if r.line_no is not None else (r.file or "")) + \
                        (f" (byte {r.byte_offset})" if r.byte_offset is not None else "")
                out.append(f"    - {r.table} {where or r.run_id}{': ' + r.note if r.note else ''}")
            out.append(f"    next: {f.suggestion}")
    flagged = {(f.run_id) for f in findings if f.severity != "info"}
    clean = [r["run_name"] for r in checked if r["run_id"] not in flagged]
    n = {s: sum(f.severity == s for f in findings) for s in SEVERITY_ORDER}
    out.append(f"{len(checked)} speculative config(s) checked: {n['error']} error(s), "
               f"{n['warning']} warning(s), {n['info']} note(s)"
               + (f"; no problems found in: {', '.join(dict.fromkeys(clean))}" if clean else ""))
    return "\n".join(out)


def to_json(findings: list[Finding], checked: list[dict]) -> dict:
    return {"checked_runs": list(dict.fromkeys(r["run_name"] for r in checked)),
            "findings": [asdict(f) for f in findings]}


def main(db, run: str | None = None, fmt: str = "text", out=None) -> int:
    """CLI entry. Exit 0: no error or warning findings; 1: at least one; 2: the run is not stored."""
    out = out or sys.stdout
    try:
        findings, checked = diagnose(db, run)
    except (DoctorError, query.QueryError) as exc:
        print(f"specwatch doctor: {exc}", file=sys.stderr)
        return 2
    if fmt == "json":
        json.dump(to_json(findings, checked), out, indent=1, default=str)
        out.write("\n")
    else:
        out.write(render_text(findings, checked) + "\n")
    return 1 if any(f.severity != "info" for f in findings) else 0
