"""Which target layer is each EAGLE-3 aux segment really? Align a capture against per-layer states.

File layout (safetensors, or a torch file holding a dict of tensors), rows = tokens:
  `layer_{k}` [T, d]   output of target layer k, for k = -1 .. L-1 (`layer_-1` = embedding output).
                       In SGLang's numbering, aux id k captures exactly `layer_{k}` (the *input* of
                       layer k+1), so valid ids are -1 .. L-2.
  `aux`       [T, C*d] the concatenated capture (C segments, normally 3), same T rows.
  optional: metadata `layer_ids` (JSON list; safetensors metadata, or a `layer_ids` tensor in a
  torch file): the ids the capture was configured with. `specwatch.engine.model.dump_hidden_states`
  writes this layout (both parts in one file, so `--dump F --capture F` works).

Method: every segment is compared with every layer by mean row-wise cosine
(`specwatch_kernels.aux_stats.aux_stats_reference`, candidates mode); the best layer is the match. The
segment's RMS is then checked against the per-layer RMS profile (hidden-state RMS grows with
depth): the match is `confirmed` when the RMS-closest layer agrees or when the matched layer's RMS
is within `RMS_CONFIRM_RATIO` of the segment's. Norms alone are never used to decide: adjacent
layers have similar norms, and a rescaled state has the right direction but a wrong norm.

Give it the features the draft was *trained* on to learn the ids its config needs; give it what a
server captured to learn which layers that server really delivers for its configured ids.

`probe_draft_ids` answers the other half for the built-in engine: which ids does a draft's weights
expect (teacher-forced draft/target agreement for every sorted id triple). Not a serving path.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from specwatch_kernels.aux_stats import aux_stats_reference
from specwatch import aux_layers

# A segment whose best cosine is below this matches no layer well (e.g. a capture of another model,
# or of other tokens); its suggestion is withheld. Same-token layer outputs of a trained model sit at
# 0.6-1.0 against their own layer; unrelated states at ~0.
MIN_MATCH_COSINE = 0.5
# The cosine winner must beat the runner-up by this much to count as unambiguous. Adjacent layers of
# the built-in target differ by 0.06-0.11 in cosine (engine.md §4: 0.89-0.94 between neighbours).
MIN_COSINE_MARGIN = 0.02
# RMS of the segment vs the matched layer: within this factor counts as the RMS profile agreeing.
# The built-in target's per-layer RMS steps by 7-15 % between layers; a 25 % band accepts bf16
# capture noise while still rejecting a segment two layers away.
RMS_CONFIRM_RATIO = 1.25
# Id triples scored per draft forward in `probe_draft_ids` (8 triples x 6 prompts x 127 tokens x 3d
# fp32 = 19 MB of features): batching cut the 56-triple probe from 13 s to ~1 s on 2 cores.
PROBE_BATCH = 8


class AlignError(ValueError):
    """A dump or capture file is missing a tensor or has the wrong shape (message names both)."""


@dataclass(frozen=True)
class SegmentMatch:
    segment: int
    layer: int | None            # matched layer k (`layer_{k}`); None when nothing matches
    cosine: float                # mean cosine to the matched (best) layer
    runner_up_layer: int | None
    runner_up_cosine: float | None
    rms: float                   # segment RMS
    layer_rms: float             # matched layer's RMS
    rms_closest_layer: int       # layer with the closest RMS (log scale)
    confirmed: bool              # cosine margin ok and the RMS profile agrees


@dataclass(frozen=True)
class AlignResult:
    dump_path: str
    capture_path: str
    tokens: int
    hidden_size: int
    num_layers: int                       # L (layers 0..L-1; the dump has L+1 tensors)
    layer_rms: list[float]                # RMS of layer_{-1} .. layer_{L-1}
    segments: list[SegmentMatch]
    cosine: list[list[float]]             # [C, L+1] mean cosine, columns = layers -1..L-1
    configured_ids: list[int] | None
    captured_layers: list[int | None]     # per segment
    offsets: list[int | None] | None      # captured - configured, per segment
    suggested_ids: list[int] | None       # SGLang ids that capture these layers (None if unsure)
    problems: list[str]
    rule: str = aux_layers.PLUS_ONE       # the target's SGLang capture rule (aux_layers)

    @property
    def matches_config(self) -> bool | None:
        if self.offsets is None or any(o is None for o in self.offsets):
            return None
        return all(o == 0 for o in self.offsets)

    @property
    def ok(self) -> bool:
        """Every segment confirmed (ids suggested) and no mismatch with the configured ids."""
        return self.suggested_ids is not None and self.matches_config is not False


# ----------------------------------------------------------------------------- loading


def load_tensors(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors, metadata) of a safetensors file, or of a torch file holding a dict of tensors."""
    path = Path(path)
    try:
        head = path.open("rb").read(16)
    except OSError as exc:
        raise AlignError(f"{path}: cannot read: {exc.strerror}") from None
    if path.suffix == ".safetensors" or (len(head) >= 9 and head[8:9] == b"{"):
        from safetensors import SafetensorError, safe_open
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = dict(f.metadata() or {})
                return {k: f.get_tensor(k) for k in f.keys()}, meta
        except (SafetensorError, OSError, ValueError) as exc:
            raise AlignError(f"{path}: not a readable safetensors file: {exc}") from None
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a bad file; all mean the same here
        raise AlignError(f"{path}: neither safetensors nor a torch file of tensors: "
                         f"{type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise AlignError(f"{path}: torch file holds a {type(obj).__name__}; expected a dict of "
                         f"tensors named layer_<k> and/or aux")
    meta = {}
    if "layer_ids" in obj and not isinstance(obj["layer_ids"], str):
        meta["layer_ids"] = json.dumps([int(i) for i in torch.as_tensor(obj.pop("layer_ids")).tolist()])
    return {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}, meta


def layer_stack(tensors: dict[str, torch.Tensor], path) -> torch.Tensor:
    """[T, L+1, d] fp32 from `layer_-1` .. `layer_{L-1}`; errors name the file and tensor."""
    ks = sorted(int(k[len("layer_"):]) for k in tensors
                if k.startswith("layer_") and k[len("layer_"):].lstrip("-").isdigit())
    if not ks:
        raise AlignError(f"{path}: no tensors named layer_<k> (k = -1 .. L-1: output of layer k, "
                         f"-1 = embedding output); found {sorted(tensors)[:8]}")
    want = list(range(-1, ks[-1] + 1))
    if ks != want:
        raise AlignError(f"{path}: layer tensors {ks} are not contiguous from -1; missing "
                         f"{sorted(set(want) - set(ks))}")
    first = tensors["layer_-1"]
    for k in ks:
        t = tensors[f"layer_{k}"]
        if t.dim() != 2 or t.shape != first.shape:
            raise AlignError(f"{path}: tensor layer_{k} has shape {tuple(t.shape)}; expected "
                             f"[T, d] = {tuple(first.shape)} like layer_-1")
    return torch.stack([tensors[f"layer_{k}"].float() for k in ks], dim=1)


def configured_ids_from(meta: dict[str, str], path) -> list[int] | None:
    if "layer_ids" not in meta:
        return None
    try:
        ids = json.loads(meta["layer_ids"])
        return [int(i) for i in ids]
    except (ValueError, TypeError):
        raise AlignError(f"{path}: metadata layer_ids={meta['layer_ids']!r} is not a JSON list of "
                         f"ints") from None


# ----------------------------------------------------------------------------- alignment


def align(layers: torch.Tensor, aux: torch.Tensor, configured_ids: list[int] | None = None,
          dump_path: str = "<dump>", capture_path: str = "<capture>",
          rule: str = aux_layers.PLUS_ONE) -> AlignResult:
    """Match each segment of aux [T, C*d] to one of layers [T, L+1, d] (columns = layers -1..L-1)."""
    if aux.dim() != 2:
        raise AlignError(f"{capture_path}: tensor aux has shape {tuple(aux.shape)}; expected [T, C*d]")
    tokens, n_layers1, d = layers.shape
    if aux.shape[0] != tokens:
        raise AlignError(f"{capture_path}: tensor aux has {aux.shape[0]} rows but {dump_path} "
                         f"layer_* tensors have {tokens}; both must hold the same tokens in order")
    if aux.shape[1] % d:
        raise AlignError(f"{capture_path}: tensor aux is {aux.shape[1]} wide, not a multiple of the "
                         f"hidden size d={d} of {dump_path}; is this capture from another model?")
    n_seg = aux.shape[1] // d
    stats = aux_stats_reference(aux, n_seg, candidates=layers)
    cos = stats.candidate_cosine  # [C, L+1]
    prof = aux_stats_reference(layers.reshape(tokens, n_layers1 * d), n_layers1).rms  # [L+1]
    log_prof = torch.log(prof.clamp(min=1e-30))
    segments, problems = [], []
    for c in range(n_seg):
        order = torch.argsort(cos[c], descending=True, stable=True)
        best, second = int(order[0]), (int(order[1]) if n_layers1 > 1 else None)
        rms = float(stats.rms[c])
        rms_closest = int(torch.argmin((log_prof - math.log(max(rms, 1e-30))).abs())) - 1
        best_cos = float(cos[c, best])
        ratio = max(rms, 1e-30) / max(float(prof[best]), 1e-30)
        margin_ok = second is None or best_cos - float(cos[c, second]) >= MIN_COSINE_MARGIN
        rms_ok = rms_closest == best - 1 or 1 / RMS_CONFIRM_RATIO <= ratio <= RMS_CONFIRM_RATIO
        matched = best_cos >= MIN_MATCH_COSINE
        if not matched:
            problems.append(f"segment {c}: best cosine {best_cos:.3f} (layer {best - 1}) is below "
                            f"{MIN_MATCH_COSINE}; the capture does not look like this model's states")
        elif not margin_ok:
            problems.append(f"segment {c}: layers {best - 1} and {second - 1} are within "
                            f"{MIN_COSINE_MARGIN} cosine; use more tokens")
        elif not rms_ok:
            problems.append(f"segment {c}: cosine says layer {best - 1} but its RMS {rms:.4g} is "
                            f"closest to layer {rms_closest} ({float(prof[rms_closest + 1]):.4g}); "
                            f"the capture may be rescaled or normalised")
        segments.append(SegmentMatch(
            segment=c, layer=best - 1 if matched else None, cosine=best_cos,
            runner_up_layer=None if second is None else second - 1,
            runner_up_cosine=None if second is None else float(cos[c, second]),
            rms=rms, layer_rms=float(prof[best]), rms_closest_layer=rms_closest,
            confirmed=matched and margin_ok and rms_ok))
    captured = [s.layer for s in segments]
    num_layers = n_layers1 - 1
    offsets = None
    if configured_ids is not None:
        if len(configured_ids) != n_seg:
            problems.append(f"configured ids {configured_ids} name {len(configured_ids)} layers but "
                            f"the capture has {n_seg} segments")
        else:
            # what the configured ids should deliver under the target's rule (PLUS_ONE: id k ->
            # output of layer k); an id that captures nothing has no offset
            expected = aux_layers.captured_outputs(rule, configured_ids, num_layers)
            offsets = [None if layer is None or e is None else layer - e
                       for layer, e in zip(captured, expected)]
    suggested = None
    if all(s.confirmed for s in segments):
        # ids that capture these layer outputs under the target's SGLang rule (aux_layers)
        suggested = aux_layers.ids_for_outputs(rule, list(captured), num_layers)
        if suggested is None:
            problems.append(f"segments match layers {captured}: no list of SGLang ids captures "
                            f"them under '{aux_layers.RULE_TEXT[rule]}' (e.g. the last layer's "
                            f"output, layer {num_layers - 1}, on a Llama-family target)")
    return AlignResult(str(dump_path), str(capture_path), tokens, d, num_layers,
                       [float(x) for x in prof], segments, [[float(x) for x in row] for row in cos],
                       configured_ids, captured, offsets, suggested, problems, rule)


def align_files(dump_path, capture_path, configured_ids: list[int] | None = None) -> AlignResult:
    """Load both files (they may be the same file) and align. Configured ids default to the
    capture's `layer_ids` metadata."""
    dump, dmeta = load_tensors(dump_path)
    if Path(capture_path) == Path(dump_path):
        cap, cmeta = dump, dmeta
    else:
        cap, cmeta = load_tensors(capture_path)
    if "aux" not in cap:
        raise AlignError(f"{capture_path}: no tensor named aux ([T, C*d], the concatenated capture); "
                         f"found {sorted(cap)[:8]}")
    if configured_ids is None:
        configured_ids = configured_ids_from(cmeta, capture_path)
    return align(layer_stack(dump, dump_path), cap["aux"], configured_ids, str(dump_path),
                 str(capture_path))


# ----------------------------------------------------------------------------- output


def to_json(res: AlignResult) -> dict:
    out = asdict(res)
    out["matches_config"] = res.matches_config
    return out


def render_text(res: AlignResult) -> str:
    lines = [f"capture {res.capture_path} vs per-layer states {res.dump_path}: {res.tokens} tokens, "
             f"d={res.hidden_size}, {res.num_layers} layers",
             "layer RMS profile (-1..L-1): " + " ".join(f"{x:.3g}" for x in res.layer_rms)]
    for s in res.segments:
        conf = res.configured_ids[s.segment] if res.configured_ids and s.segment < len(res.configured_ids) else None
        lines.append(
            f"  segment {s.segment}: layer {s.layer if s.layer is not None else '?'} "
            f"(cosine {s.cosine:.3f}; runner-up layer {s.runner_up_layer} {s.runner_up_cosine or 0:.3f}; "
            f"RMS {s.rms:.3g} vs layer {s.layer_rms:.3g}, RMS-closest layer {s.rms_closest_layer})"
            + (f"  configured id {conf}" if conf is not None else "")
            + ("" if s.confirmed else "  UNCONFIRMED"))
    if res.offsets is not None:
        lines.append(f"configured ids {res.configured_ids}; captured layers {res.captured_layers}; "
                     f"offset per id {res.offsets}")
    if res.suggested_ids is not None:
        lines.append(f"eagle_aux_hidden_state_layer_ids that capture these layers in SGLang "
                     f"({aux_layers.RULE_TEXT[res.rule]}): {res.suggested_ids}")
        if res.matches_config is False:
            lines.append(f"MISMATCH: the capture is not what ids {res.configured_ids} should deliver. "
                         f"If this capture is what the draft was trained on, set "
                         f"{res.suggested_ids}; if a server captured it for ids {res.configured_ids}, "
                         f"that server numbers layers off by {res.offsets}.")
        elif res.matches_config:
            lines.append("OK: every segment is the layer its configured id names.")
    for p in res.problems:
        lines.append(f"problem: {p}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- draft probe


@dataclass(frozen=True)
class ProbeResult:
    """Teacher-forced step-1 agreement (draft top-1 == target greedy next token) per id triple."""

    served_ids: list[int]
    served_agreement: float
    best_ids: list[int]
    best_agreement: float
    tokens: int
    top: list[tuple[list[int], float]]      # the 5 best candidates
    capture_check: AlignResult              # the served capture aligned against the layers


def probe_prompts(n: int = 6, length: int = 128) -> list[list[int]]:
    """Byte prompts from the held-out tail of the built-in corpus (the drafts never trained on it)."""
    from specwatch.engine import train

    text = train.CORPUS_PATH.read_bytes()[: train.CORPUS_BYTES]
    tail = text[int(len(text) * (1 - train.HELD_OUT_FRACTION)):]
    step = max(1, (len(tail) - length) // n)
    return [list(tail[i * step: i * step + length]) for i in range(n)]


@torch.inference_mode()
def probe_draft_ids(target_dir, draft_dir, served_ids=None, prompts=None) -> ProbeResult:
    """Which aux ids do the draft's weights expect? Scores every sorted id triple in [-1, L-2] by
    the draft's step-1 agreement with the target's greedy token, teacher-forced on `prompts`
    (default: `probe_prompts()`). The served capture is also aligned (cosine/RMS) as a check of
    the capture convention. Built-in engine models only (CPU, seconds)."""
    from specwatch.engine import model as em

    target = em.load_target(target_dir)
    draft = em.load_draft(draft_dir, target)
    L = target.cfg.num_hidden_layers
    served = list(served_ids if served_ids is not None else draft.cfg.aux_layer_ids)
    prompts = prompts or probe_prompts()
    n = min(len(p) for p in prompts)
    x = torch.tensor([p[:n] for p in prompts])  # [P, n]: equal lengths so prompts batch
    hidden: list = []
    logits, aux = target(x, torch.arange(n)[None].expand(len(prompts), -1),
                         capture=em.capture_layers(served, L), all_hidden=hidden)
    states = torch.stack(hidden, dim=2)  # [P, n, L+1, d], column j = layer j-1
    greedy = logits.argmax(-1)           # [P, n]: target's token after each position
    emb = target.embed_tokens(x[:, 1:])  # draft position p consumes token p+1 ...
    pos = torch.arange(n - 1)[None]
    triples = list(itertools.combinations(range(-1, L - 1), 3))
    scored = {}
    for i in range(0, len(triples), PROBE_BATCH):
        chunk = triples[i:i + PROBE_BATCH]
        # ... and the aux state at p; it predicts token p+2, the target's greedy[p+1]
        feats = torch.cat([torch.cat([states[:, :-1, k + 1] for k in t], dim=-1) for t in chunk])
        P = len(prompts)
        dlogits, _ = draft(emb.repeat(len(chunk), 1, 1), feats, pos.expand(P * len(chunk), -1))
        pred = draft.hot_token_id[dlogits.argmax(-1)].view(len(chunk), P, n - 1)
        hits = (pred == greedy[None, :, 1:]).flatten(1).float().mean(1)
        scored.update({t: float(h) for t, h in zip(chunk, hits)})
    total = len(prompts) * (n - 1)
    layers_rows = states.reshape(-1, L + 1, states.shape[-1])
    aux_rows = aux.reshape(-1, aux.shape[-1])
    ranked = sorted(scored.items(), key=lambda kv: (-kv[1], kv[0]))
    check = align(layers_rows, aux_rows, served, str(target_dir), "served capture")
    best = list(ranked[0][0])
    return ProbeResult(served, scored.get(tuple(sorted(served)), float("nan")), best, ranked[0][1],
                       total, [(list(k), v) for k, v in ranked[:5]], check)
