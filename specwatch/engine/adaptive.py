"""Per-batch-size speculation depth for the built-in engine: SGLang's adaptive speculative decoding.

`--speculative-adaptive --speculative-adaptive-config FILE` mean here what they mean in SGLang
0.5.23 (read from the sglang-0.5.23 wheel: srt/speculative/adaptive_spec_params.py,
adaptive_runtime_state.py, eagle_worker_v2.py, arg_groups/speculative_hook.py):

- FILE is JSON. Every key made of digits is a batch-size lower bound ("slot"); its entry holds
  `candidate_steps` (a non-empty list of ints >= 0) and optional knobs `ema_alpha` (0.2),
  `update_interval` (5), `warmup_batches` (10), `up_hysteresis` (0.0), `down_hysteresis`
  (-0.25), `ceiling_coeff` (0). Other top-level keys are knobs shared by every slot (a slot's
  own value wins). Without FILE, SGLang's DEFAULT_ADAPTIVE_CONFIG below.
- Each decode step runs the steps of the slot of the running batch size: the largest key <= the
  batch size (the smallest key below every key), after padding the batch size up to a CUDA-graph
  batch size when graphs are captured.
- Within a slot the steps move among its candidates by an EMA of accepted drafts per request
  (rise when EMA > steps - 0.5 + up_hysteresis, fall to a lower candidate p when EMA <=
  p - 0.5 + down_hysteresis, 0.5 + down_hysteresis for p = 0), re-decided every
  `update_interval` verify steps after `warmup_batches`. A slot with one candidate is a fixed
  schedule: that is what `specwatch recommend` writes.
- Steps 0 turns drafting off for that step: a one-node verify (a plain target step), and the
  draft extend still runs, so the draft KV stays warm (SGLang's default; with
  SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 SGLang skips it and an upshift drafts from a cold
  state: the built-in engine honours that variable the same way, see decode.py).
- Only topk 1 (draft tokens = steps + 1); attention DP or topk != 1 turn adaptive off with
  SGLang's warning (args.py).

Not here: torch, the decoder (decode.py runs a step at the depth given), the scheduler loop.
"""

from __future__ import annotations

import bisect
import json
import math
from pathlib import Path
from typing import Callable

# SGLang 0.5.23 adaptive_spec_params.DEFAULT_ADAPTIVE_CONFIG.
DEFAULT_ADAPTIVE_CONFIG: dict[str, dict] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}
# The knobs a slot reads (SGLang's AdaptiveStepSlot.__init__), with its defaults.
KNOBS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10, "down_hysteresis": -0.25,
         "up_hysteresis": 0.0, "ceiling_coeff": 0}


class AdaptiveConfigError(ValueError):
    """The adaptive config file cannot be used; the message names the file, key and fix."""


def load_config(cfg_path: str | None) -> tuple[dict, dict[int, dict]]:
    """(the whole JSON object, {batch-size lower bound: its entry}) as SGLang's
    `_load_adaptive_config` reads them; AdaptiveConfigError where SGLang raises (and where the
    file is unreadable or not a JSON object, which SGLang reports as a traceback)."""
    where = cfg_path or "DEFAULT_ADAPTIVE_CONFIG"
    if cfg_path is None:
        cfg = DEFAULT_ADAPTIVE_CONFIG
    else:
        try:
            cfg = json.loads(Path(cfg_path).read_text())
        except OSError as e:
            raise AdaptiveConfigError(f"--speculative-adaptive-config {cfg_path}: cannot read it: "
                                      f"{e.strerror}") from None
        except ValueError as e:
            raise AdaptiveConfigError(f"--speculative-adaptive-config {cfg_path}: not JSON: {e}"
                                      ) from None
        if not isinstance(cfg, dict):
            raise AdaptiveConfigError(f"--speculative-adaptive-config {cfg_path}: expected a JSON "
                                      'object such as {"1": {"candidate_steps": [3]}}')
    entries: dict[int, dict] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                           for s in steps)):
            raise AdaptiveConfigError(
                f"{where}: BS {key}: candidate_steps must be a list of non-negative ints, "
                f"got {steps!r}")
        entries[int(key)] = entry
    if not entries:
        raise AdaptiveConfigError(
            f"{where}: speculative_adaptive_config must contain at least one integer-string BS "
            f'key, e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(cfg)}')
    return cfg, entries


def candidate_steps(cfg_path: str | None) -> list[int]:
    """The union of every slot's candidate steps (SGLang sizes its runtime states by it)."""
    _, entries = load_config(cfg_path)
    return sorted({s for e in entries.values() for s in e["candidate_steps"]})


class StepSlot:
    """SGLang 0.5.23 `AdaptiveStepSlot`: the steps of one batch-size slot and their EMA."""

    def __init__(self, initial_steps: int, cfg: dict, log: Callable[[str], None]):
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        knobs = {k: cfg.get(k, v) for k, v in KNOBS.items()}
        self.ema_alpha = knobs["ema_alpha"]
        self.update_interval = knobs["update_interval"]
        self.warmup_batches = knobs["warmup_batches"]
        self.down_hysteresis = knobs["down_hysteresis"]
        self.up_hysteresis = knobs["up_hysteresis"]
        self.ceiling_coeff = knobs["ceiling_coeff"]
        self.log = log
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, accepted_per_req: list[int]) -> bool:
        """Feed one verify step's accepted drafts per request; True when the steps changed."""
        if not accepted_per_req:
            return False
        if self.current_steps > 0:
            batch_avg = sum(accepted_per_req) / len(accepted_per_req)
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len \
                + self.ema_alpha * batch_avg
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = old_idx = self.candidate_steps.index(old)
        if old == 0:   # probe the smallest positive candidate after a steps-0 interval
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if idx >= old_idx:
            while idx < len(self.candidate_steps) - 1:
                if self.ema_accept_len > self.candidate_steps[idx] - 0.5 + self.up_hysteresis:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:   # caps only downward moves
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> bool:
        if target == old:
            return False
        self.current_steps = target
        self.log(f"Adaptive spec params updated: steps {old} -> {target} "
                 f"(ema_accept_len={self.ema_accept_len:.2f})")
        return True


class AdaptiveParams:
    """SGLang 0.5.23 `AdaptiveSpeculativeParams`: batch size -> slot -> its current steps."""

    def __init__(self, initial_steps: int, cfg_path: str | None,
                 log: Callable[[str], None] = lambda msg: None):
        cfg, entries = load_config(cfg_path)
        self.bounds = sorted(entries)
        self.slots = {bs: StepSlot(initial_steps, {**cfg, **entries[bs]}, log)
                      for bs in self.bounds}
        self.cuda_graph_bs: list[int] | None = None
        first = self.slots[self.bounds[0]]
        log(f"AdaptiveSpeculativeParams initialized: steps={first.current_steps}, "
            f"candidate_steps={first.candidate_steps}")

    @property
    def candidate_steps(self) -> list[int]:
        return sorted({s for slot in self.slots.values() for s in slot.candidate_steps})

    def set_cuda_graph_bs(self, cuda_graph_bs: list[int] | None) -> None:
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def steps_for_batch(self, batch_size: int) -> int:
        return self.route(batch_size).current_steps

    def on_verify_complete(self, accepted_per_req: list[int], batch_size: int) -> int | None:
        """The new steps of the batch size's slot when its EMA moves them, else None."""
        slot = self.route(batch_size)
        return slot.current_steps if slot.update(accepted_per_req) else None

    def route(self, batch_size: int) -> StepSlot:
        padded = batch_size
        if self.cuda_graph_bs is not None:
            i = bisect.bisect_left(self.cuda_graph_bs, batch_size)
            padded = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch_size
        i = bisect.bisect_right(self.bounds, padded) - 1
        return self.slots[self.bounds[max(0, i)]]
