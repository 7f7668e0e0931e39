"""doctor's checks of per-batch-size speculation schedules: where a stored run's config hits a
limit of the engine's schedule (the limits `specwatch recommend` prints with a schedule).

Codes (severity):
  schedule_dropped_under_dp (warning)  a vLLM run with `num_speculative_tokens_per_batch_size` and
      data_parallel_size > 1: vLLM 0.32 drops the schedule (vllm/config/vllm.py,
      VllmConfig._maybe_disable_dynamic_sd_for_data_parallel: one warning_once, then the static
      num_speculative_tokens at every batch size; vllm#54748).
  adaptive_steps0_cold_draft (warning | info)  an SGLang (or built-in) run with
      --speculative-adaptive whose config has a steps-0 slot, launched with
      SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1 (warning): SGLang 0.5.23 then skips the draft
      extend while drafting is off (eagle_worker_v2.py `_stub_skipped_draft_extend`), the draft
      KV goes cold and acceptance dips after every upshift. Without that variable the extend runs
      and the draft stays warm (nothing to say). When the launch environment is unknown (a log
      specwatch did not launch), an info note.

Inputs: the run's server_configs rows (their `speculative_dynamic` and `args`), the adaptive
config file the run named (read when it is still there; SGLang's default config otherwise), and
the launch line specwatch writes first in every server log it starts (`specwatch: launching env
NAME=value ...`; read from the log file: no stored row keeps the launch environment).
Not here: choosing a schedule (recommend.py).
"""
from __future__ import annotations

import json
import shlex

from specwatch.diagnose.context import Context, select
from specwatch.diagnose.finding import Evidence, Finding, Ref

SKIP_ENV = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"
LAUNCH_PREFIX = "specwatch: launching "
HEAD_BYTES = 65536
# SGLang 0.5.23 EnvBool: these are true; false/0/no/n and anything else (warned) are not
TRUE_VALUES = ("true", "1", "yes", "y")
# SGLang 0.5.23 adaptive_spec_params.DEFAULT_ADAPTIVE_CONFIG's slots with a steps-0 candidate
DEFAULT_ZERO_SLOTS = ["8", "32", "64"]


def load(db, ctx: Context) -> dict[str, list[dict]]:
    """run_id -> the server_configs rows with a schedule in that run's byte range (scope runs)."""
    ids = sorted({r["run_id"] for r in ctx.scope})
    out: dict[str, list[dict]] = {}
    if not ids:
        return out
    for c in select(db, f"""
            SELECT rs.run_id, c.source_id, c.byte_offset, c.line_no, c.config_kind, c.dp_size,
              c.speculative_dynamic, c.args
            FROM server_configs c JOIN run_sources rs ON c.source_id = rs.source_id
             AND c.byte_offset >= rs.offset_from
             AND (rs.offset_to IS NULL OR c.byte_offset < rs.offset_to)
            WHERE rs.run_id IN ({", ".join("?" * len(ids))}) AND c.speculative_dynamic IS NOT NULL
            ORDER BY rs.run_id, c.source_id, c.byte_offset""", ids):
        out.setdefault(c["run_id"], []).append(c)
    return out


def _ref(ctx: Context, c: dict, note: str) -> Ref:
    return Ref("server_configs", ctx.paths.get(c["source_id"], c["source_id"]), c["line_no"],
               c["byte_offset"], note=note)


def _arg(c: dict, key: str):
    try:
        return (json.loads(c["args"]) if isinstance(c["args"], str) else c["args"] or {}).get(key)
    except (ValueError, AttributeError):
        return None


def check_schedule(ctx: Context, row: dict, configs: dict[str, list[dict]]) -> list[Finding]:
    """The findings for one speculative run; `configs` = load(db, ctx)."""
    out = []
    for c in configs.get(row["run_id"], []):
        if c["speculative_dynamic"] == "adaptive":
            if row["config_offset"] is None or c["byte_offset"] == row["config_offset"]:
                out += _check_steps0(ctx, row, c)
        elif (c["dp_size"] or row["dp_size"] or 1) > 1:
            out.append(Finding(
                row["run_id"], row["run_name"], "schedule_dropped_under_dp", "warning",
                f"vLLM ignored the batch-size schedule: data_parallel_size="
                f"{c['dp_size'] or row['dp_size']} (vLLM 0.32 drops "
                "num_speculative_tokens_per_batch_size under data parallelism)",
                Evidence({"num_speculative_tokens_per_batch_size": c["speculative_dynamic"],
                          "data_parallel_size": c["dp_size"] or row["dp_size"],
                          "static_num_speculative_tokens": row["speculative_num_steps"]},
                         (_ref(ctx, c, "the schedule and the DP size it was launched with"),)),
                "every batch size ran num_speculative_tokens: serve the schedule with "
                "data_parallel_size=1 per replica (several servers behind a router), or pick one k "
                "for all loads (`specwatch recommend --engine vllm` shows each band's)",
                row["config_offset"]))
            break
    return out


def _zero_slots(path) -> tuple[list[str] | None, str]:
    """(slots whose candidates include 0, where that came from); None when unreadable."""
    if path is None:
        return DEFAULT_ZERO_SLOTS, "SGLang's DEFAULT_ADAPTIVE_CONFIG (no config file)"
    try:
        cfg = json.loads(open(path).read())
        return [k for k, e in cfg.items() if k.isdigit() and isinstance(e, dict)
                and 0 in (e.get("candidate_steps") or [])], path
    except (OSError, ValueError, AttributeError):
        return None, path


def _launch_env(ctx: Context, row: dict) -> dict | None:
    """The SGLANG_*/VLLM_* variables of specwatch's launch line in the run's log, or None when no
    log of the run has one (not launched by specwatch, or the file is gone)."""
    for path in ctx.logs.get(row["run_id"], []):
        try:
            with open(path, "rb") as f:
                head = f.read(HEAD_BYTES).decode(errors="replace")
        except OSError:
            continue
        for line in head.splitlines():
            if line.startswith(LAUNCH_PREFIX):
                try:
                    words = shlex.split(line[len(LAUNCH_PREFIX):])
                except ValueError:
                    continue
                env = {}
                if words[:1] == ["env"]:
                    for w in words[1:]:
                        if "=" not in w:
                            break
                        k, v = w.split("=", 1)
                        env[k] = v
                return env
    return None


def _check_steps0(ctx: Context, row: dict, c: dict) -> list[Finding]:
    path = _arg(c, "speculative_adaptive_config")
    slots, source = _zero_slots(path)
    if not slots:
        return []
    env = _launch_env(ctx, row)
    value = None if env is None else env.get(SKIP_ENV)
    numbers = {"steps0_slots": slots, "adaptive_config": source, SKIP_ENV: value}
    refs = (_ref(ctx, c, "server_args: speculative_adaptive=True"),)
    if env is not None and (value is None or value.lower() not in TRUE_VALUES):
        return []          # the draft extend runs during steps 0: the draft stays warm
    if env is None:
        return [Finding(
            row["run_id"], row["run_name"], "adaptive_steps0_cold_draft", "info",
            f"adaptive slots {slots} turn drafting off; if the server ran with {SKIP_ENV}=1 its "
            "draft KV went cold there and acceptance dips after each upshift (the launch "
            "environment is not in this log)", Evidence(numbers, refs),
            f"leave {SKIP_ENV} unset (SGLang's default keeps the draft warm during steps 0)",
            row["config_offset"])]
    return [Finding(
        row["run_id"], row["run_name"], "adaptive_steps0_cold_draft", "warning",
        f"{SKIP_ENV}={value} with steps-0 adaptive slots {slots}: the draft extend is skipped "
        "while drafting is off, so every upshift drafts from a cold draft state and acceptance "
        "dips", Evidence(numbers, refs),
        f"unset {SKIP_ENV} (the draft extend then keeps the draft warm, at one draft forward per "
        "step), or give those slots a positive step", row["config_offset"])]
