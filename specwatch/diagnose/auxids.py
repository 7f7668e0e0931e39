"""Is the draft fed the layers it was trained on? The aux-layer id checks of doctor: accept length
near 1, a sibling run of the same draft weights that did better with other ids, the built-in
engine's id probe, what served ids capture under the serving engine's per-architecture rule
(SGLang's, or vLLM's on a vLLM run), and a server death inside the target's aux capture.

Model facts (layer counts, a draft's ids, weight identity) come from `modelinfo`, capture rules
from `aux_layers`. Not here: speed (speed), serving health and failed configs (serving).
"""
from __future__ import annotations

import json
import sys

from specwatch import aux_layers, modelinfo
from specwatch.db import views
from specwatch.db.views import LOW_ACCEPT_LEN  # accept length below which the draft barely predicts
from specwatch.diagnose.context import Context, config_ref, window_ref
from specwatch.diagnose.finding import MAX_EVIDENCE_ROWS, Evidence, Finding, Ref
from specwatch.logs import failure

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


# ----------------------------------------------------------------------------- model facts


def _weights_id(row: dict) -> str | None:
    """Identity of a run's draft weights: sha1 of its weight files (read here if local, else as
    the sweep recorded it where the server ran), else the path."""
    path = row["draft_model_path"]
    mi = modelinfo.info(path)
    return (mi.weights_sha1 if mi is not None and mi.weights_sha1 else None) \
        or row["draft_weights_sha1"] or path


def served_ids(row: dict) -> list[int] | None:
    """The served aux ids: what the sweep configured (or, on vLLM, what its aux-layer line says it
    served: doctor fills that in), else the draft's config.json at the path the server_args line
    names (ingested logs), else None."""
    try:
        ids = json.loads(row["aux_layer_ids"]) if row["aux_layer_ids"] else None
    except ValueError:
        ids = None
    if isinstance(ids, list):
        return [int(i) for i in ids]
    return modelinfo.aux_layer_ids(row["draft_model_path"])


def target_of(row: dict) -> tuple[str | None, int | None]:
    """(architecture, layer count) of the target from its config.json when it is local, else as
    the sweep recorded them where the server ran."""
    mi = modelinfo.info(row["model_path"], hash_weights=False)
    if mi is not None:
        return mi.architecture, mi.num_layers
    return row["target_architecture"], row["target_num_layers"]


def _fmt_outputs(outputs: list) -> str:
    return "[" + ", ".join("nothing" if o is None else ("embedding" if o == -1 else f"layer {o}")
                           for o in outputs) + "]"


def uses_aux_layers(row: dict) -> bool:
    """Whether the run's method feeds its draft the target's aux hidden states (EAGLE-3, and the
    DFlash family on SGLang): only then do aux ids decide its accept length."""
    return str(row["speculative_algorithm"] or "").lower() in aux_layers.AUX_METHODS


def _readings(row: dict, ids: list[int], L: int) -> tuple[str, str, dict]:
    """(engine, the verified version whose rules apply, {rule: Reading}) for the engine that served
    the run (run_metrics.served_by; the built-in engine captures as SGLang does)."""
    arch = target_of(row)[0]
    if row["served_by"] == "vllm":
        return "vLLM", aux_layers.vllm_version(), aux_layers.read(arch, ids, L, engine="vllm")
    used, _ = aux_layers.rules_for(row["sglang_version"])
    return "SGLang", used, aux_layers.read(arch, ids, L, row["sglang_version"])


def capture_text(row: dict, ids: list[int]) -> str | None:
    """What these ids capture on this run's target, per the serving engine's rule for its
    architecture; when the architecture is unknown, what each candidate rule would make of them
    (never a guess)."""
    arch, L = target_of(row)
    if L is None:
        return None
    engine, used, readings = _readings(row, ids, L)
    if len(readings) == 1:
        (rd,) = readings.values()
        return (f"on {arch} ({L} layers; {engine} {used} rule: {aux_layers.RULE_TEXT[rd.rule]}) ids "
                f"{ids} capture the outputs {_fmt_outputs(rd.outputs)}")
    if not readings:
        return (f"the target's architecture ({arch or 'not in its config.json'}) has no verified "
                f"{engine} {used} rule, so which layers ids {ids} capture is not known here "
                f"(vLLM captures at the ids as given in "
                f"{', '.join(aux_layers.vllm_architectures())})")
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


def _step1(ctx: Context, run_id: str) -> tuple[float | None, int]:
    """Fraction of verify steps that accepted >= 1 draft, from the requests' histograms."""
    h = ctx.hist.get(run_id)
    if not h or not sum(h[0]):
        return None, 0
    return 1 - h[0][0] / sum(h[0]), len(h[1])


def sibling(ctx: Context, row: dict) -> dict | None:
    """Best run of the same sweep (or, for ingested logs, likewise outside any sweep), target,
    draft weights, spec shape and concurrency with other aux ids."""
    ids = served_ids(row)
    if ids is None:
        return None
    me = _weights_id(row)
    best = None
    for r in ctx.summary:
        if (r["run_id"] == row["run_id"] or r["sweep_name"] != row["sweep_name"]
                or r["accept_len"] is None or r["speculative_algorithm"] is None
                or served_ids(r) in (None, ids)
                or any(r[k] != row[k] for k in (
                    "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "concurrency", "model_path", "tp_size"))
                or _weights_id(r) != me):
            continue
        if best is None or r["accept_len"] > best["accept_len"]:
            best = r
    return best


def _apart(ctx: Context, row: dict, sib: dict) -> bool:
    """Every repeat of row's group below every repeat of sib's group (>= 2 repeats each)."""
    mine, theirs = ctx.stats.get(row["group_id"]), ctx.stats.get(sib["group_id"])
    if not mine or not theirs or min(mine["repeats"] or 0, theirs["repeats"] or 0) < 2:
        return False
    hi, lo = mine["accept_len_max"], theirs["accept_len_min"]
    return hi is not None and lo is not None and hi < lo


def _id_hints(row: dict) -> list[str]:
    """What the served ids capture on this target under the serving engine's rule (only facts that
    are known)."""
    ids, L = served_ids(row), target_of(row)[1]
    if ids is None:
        return ["the served eagle_aux_hidden_state_layer_ids are not known for this run: the draft's "
                "config.json is not on this machine at the path the server_args line names"]
    if L is None:
        if row["served_by"] == "vllm":
            return [f"served ids {ids}; the target's config.json is not on this machine, so which "
                    f"layers they capture is unknown (vLLM: id k captures the output of layer "
                    f"k-1, 0 the embedding output)"]
        return [f"served ids {ids}; the target's config.json is not on this machine, so which "
                f"layers they capture is unknown: SGLang's rule depends on its architecture "
                f"(Llama-family: output of layer id; DeepseekV2/V3, Kimi-K2.5, GLM-4-MoE-Lite: "
                f"output of layer id-1 unless the first id is 1, and -1 captures nothing)"]
    engine, _, readings = _readings(row, ids, L)
    hints = [capture_text(row, ids)]
    # the capture indices when the draft names no ids: SGLang's and vLLM's
    # (get_eagle3_default_aux_hidden_state_layers, interfaces.py 0.32) are the same
    default = [2, L // 2, L - 3]
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
            hints.append(f"{tag}ids {ids} capture {engine}'s default layers (indices {default}, "
                         f"what it captures when a draft names no ids)")
        elif rd.indices == [i + 1 for i in default]:
            want = aux_layers.ids_for_outputs(name, [i - 1 for i in default], L)
            hints.append(f"{tag}ids {ids} capture one layer later than {engine}'s default "
                         f"capture (indices {default}); a draft trained on the default wants ids "
                         f"{want}")
    return hints


def _method_hint(row: dict, after_ids: bool) -> str:
    """What else to check for a low accept length, by method and serving engine."""
    method = str(row["speculative_algorithm"] or "").lower()
    if method in ("ngram", "ngram_gpu", "suffix"):
        return (f"{method} drafts copy text from the prompt and earlier output, so they are accepted "
                "only where the output repeats it (code edits, retrieval, summaries); on this "
                "traffic serve without speculation or with a trained draft model")
    mapping = ("the d2t tensor in its weights, which vLLM loads whenever it is there"
               if row["served_by"] == "vllm" else "d2t / --speculative-token-map")
    return (("then " if after_ids else "") + f"check the draft vocab mapping ({mapping}) and that "
            "the draft was trained for this exact target (same tokenizer and weights)")


def check_accept(ctx: Context, row: dict, ws: list[dict], probe) -> list[Finding]:
    al = row["accept_len"]
    if al is None:
        return []
    kept = [w for w in ws if views.kept_window(w) and w["accept_len"] is not None]
    worst = sorted(kept, key=lambda w: w["accept_len"])[:MAX_EVIDENCE_ROWS]
    rows = tuple(window_ref(ctx, w, f"accept len {w['accept_len']:.2f}") for w in worst) + config_ref(ctx, row)
    step1, n_req = _step1(ctx, row["run_id"])
    nums = {"accept_len": al, "windows": row["windows"],
            "speculative_num_steps": row["speculative_num_steps"],
            "speculative_num_draft_tokens": row["speculative_num_draft_tokens"],
            "accept_rate": row["accept_rate"],
            "aux_layer_ids": served_ids(row) if uses_aux_layers(row) else None}
    if step1 is not None:
        nums.update(step1_acceptance=round(step1, 4), requests=n_req)
        rows += (Ref("requests", run_id=row["run_id"], note=f"{n_req} requests' spec_accept_histogram"),)
    sib = sibling(ctx, row)
    hints = _id_hints(row) if uses_aux_layers(row) else []
    if probe is not None and probe.best_agreement - probe.served_agreement >= PROBE_WARN_GAIN:
        hints.insert(0, f"the draft's weights expect ids {probe.best_ids} (see aux_ids_mismatch)")
    hints.append(_method_hint(row, bool(hints)))
    out = []
    if al < LOW_ACCEPT_LEN:
        out.append(Finding(
            row["run_id"], row["run_name"], "accept_len_near_1", "error",
            f"accept length {al:.2f} < {LOW_ACCEPT_LEN}: the draft is not predicting the target",
            Evidence(nums, rows), "; ".join(hints), row["config_offset"]))
    severity = None
    if sib is not None and al <= SIBLING_ACCEPT_RATIO * sib["accept_len"]:
        severity = "error"
    elif sib is not None and al <= SIBLING_WARN_RATIO * sib["accept_len"] and _apart(ctx, row, sib):
        severity = "warning"
    if severity is not None:
        want, have = served_ids(sib), served_ids(row)
        n2 = dict(nums, sibling_run=sib["run_name"], sibling_accept_len=sib["accept_len"],
                  sibling_aux_layer_ids=want, ratio=round(al / sib["accept_len"], 4))
        s1, _ = _step1(ctx, sib["run_id"])
        if s1 is not None:
            n2["sibling_step1_acceptance"] = round(s1, 4)
        have_cap, want_cap = capture_text(row, have), capture_text(sib, want)
        arch, L = target_of(row)
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
            row["config_offset"]))
    return out


def check_probe(ctx: Context, row: dict, probe) -> list[Finding]:
    if probe is None or probe.best_agreement - probe.served_agreement < PROBE_WARN_GAIN:
        return []
    severity = "error" if probe.best_agreement - probe.served_agreement >= PROBE_MIN_GAIN else "warning"
    chk = probe.capture_check
    nums = {"served_ids": probe.served_ids, "served_step1_agreement": round(probe.served_agreement, 4),
            "best_ids": probe.best_ids, "best_step1_agreement": round(probe.best_agreement, 4),
            "probe_tokens": probe.tokens, "top_candidates": [[i, round(a, 4)] for i, a in probe.top],
            "captured_layers_by_cosine": chk.captured_layers,
            "capture_cosine": [round(s.cosine, 4) for s in chk.segments],
            "accept_len": row["accept_len"]}
    return [Finding(
        row["run_id"], row["run_name"], "aux_ids_mismatch", severity,
        f"the draft expects aux ids {probe.best_ids}, served {probe.served_ids}: "
        f"{describe_shift(probe.served_ids, probe.best_ids)}",
        Evidence(nums, config_ref(ctx, row)),
        f"set eagle_aux_hidden_state_layer_ids = {probe.best_ids} in the draft's config.json "
        f"(or `aux_layer_ids = {probe.best_ids}` in the sweep file); the served capture was checked "
        f"by cosine/RMS to be layers {chk.captured_layers}, so the engine's capture is right and the "
        f"ids are not", row["config_offset"])]


def probe_ids(ctx: Context, row: dict, cache: dict):
    """The built-in engine's id probe for this run, or None when it does not apply."""
    if row["engine"] != "builtin":
        return None
    launched = ctx.launched.get(row["run_id"], {})
    t = modelinfo.local_dir(row["model_path"]) or modelinfo.local_dir(launched.get("model_path"))
    d = modelinfo.local_dir(row["draft_model_path"]) or modelinfo.local_dir(launched.get("draft_model_path"))
    if t is None or d is None or not (d / "model.safetensors").is_file():
        return None
    ids = served_ids(row)
    key = (str(t), str(d), tuple(ids) if ids else None)
    if key not in cache:
        from specwatch.diagnose import align
        try:
            cache[key] = align.probe_draft_ids(t, d, ids)
        except (ValueError, OSError) as exc:  # ids out of range, unreadable weights: _id_hints says why
            print(f"specwatch doctor: {row['run_name']}: aux id probe skipped: {exc}", file=sys.stderr)
            cache[key] = None
    return cache[key]


def capture_crash(ctx: Context, row: dict) -> failure.AuxCaptureCrash | None:
    """The crash inside the target's aux capture, from the stored log tail or the log itself."""
    tail = ctx.launched.get(row["run_id"], {}).get("server_log_tail")
    crash = failure.aux_capture_crash((tail or "").splitlines())
    for path in ctx.logs.get(row["run_id"], []) if crash is None else ():
        crash = failure.aux_capture_crash(failure.tail_lines(path))
        if crash is not None:
            break
    return crash


def index0_ids(row: dict, module: str) -> tuple[list[int], str | None]:
    """(served ids that SGLang maps to capture index 0, the rule used): index 0 is the input of
    the first layer, where the Llama-family loops of SGLang <= 0.5.20 have no residual yet. The
    rule is the target architecture's, else the one every architecture of `module` shares."""
    ids, (arch, L) = served_ids(row), target_of(row)
    version = row["sglang_version"]
    name = aux_layers.rule(arch, version)
    if name is None:
        names = {aux_layers.rule(a, version) for a, m in aux_layers.MODULES.items() if m == module}
        name = names.pop() if len(names) == 1 else None
    if ids is None or name is None:
        return [], name
    idx = aux_layers.capture_indices(name, ids, L or max(ids, default=0) + 2)
    return [i for i, x in zip(ids, idx) if x == 0], name
