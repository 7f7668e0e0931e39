"""`specwatch recommend --verify SWEEP.toml`: measure the recommended schedule against the best
single config at every load of the sweep.

From the sweep's stored runs, `diagnose.recommend` gives the schedule. A second sweep,
`<name>-verify`, then runs, interleaved as every sweep (`sweep.run_sweep_main`): the baseline, the
config that was fastest at each load in the stored runs (trees included: a schedule must hold its
own against whatever one would deploy statically), and `schedule-<hash>`, one more config that
serves the schedule (builtin/sglang: `--speculative-adaptive --speculative-adaptive-config
<out-dir>/<name>-verify/schedule-<hash>.json`; vllm: `num_speculative_tokens_per_batch_size` in
its speculative config). The hash names the schedule, so a changed recommendation is measured
anew and an unchanged one resumes.

The verdict per load reads `config_pairs` of the verify sweep: the schedule over the fastest single
config measured there (by geometric mean tok/s), with its 95 % interval:
  better        ratio_ci_low > 1
  as good       the interval contains 1 (within noise)
  worse         ratio_ci_high < 1
  no interval   fewer than 2 repeats on a side
and `at_least_as_good` = no load worse and every load has an interval (None when some has none).

Not here: choosing the schedule (diagnose/recommend.py), printing (cli.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from specwatch.db import query
from specwatch.diagnose import recommend as rec_mod
from specwatch.run import sweep as sweep_mod
from specwatch.run import sweepfile

SCHEDULE_PREFIX = "schedule-"


class VerifyError(RuntimeError):
    """The verification cannot start; the message says what to do."""


@dataclass
class LoadCheck:
    concurrency: int
    best_config: str | None
    best_tok_s: float | None
    best_tok_s_ci: tuple | None
    schedule_tok_s: float | None
    schedule_tok_s_ci: tuple | None
    schedule_speedup: float | None
    schedule_speedup_ci: tuple | None
    ratio: float | None
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    ratio_method: str | None
    verdict: str


@dataclass
class VerifyReport:
    sweep: str
    verify_sweep: str
    engine: str
    schedule_config: str | None
    schedule_file: str | None
    recommendation: dict
    loads: list[LoadCheck] = field(default_factory=list)
    at_least_as_good: bool | None = None
    failed_configs: list[str] = field(default_factory=list)
    interrupted: bool = False
    note: str | None = None

    def payload(self) -> dict:
        return dataclasses.asdict(self)


def schedule_config(sweep: sweepfile.Sweep, rec: rec_mod.Recommendation, out_dir: str
                    ) -> tuple[sweepfile.Config, str | None]:
    """(the Config that serves `rec`'s schedule, the adaptive-config file it reads or None)."""
    k = rec.max_steps
    names = {b.config for b in rec.bands if b.steps == k}
    base = next((c for c in sweep.configs if c.name in names), None)
    if base is None:
        raise VerifyError(f"{sweep.path}: the schedule's configs ({', '.join(sorted(names))}) are "
                          "not in the sweep file any more; run `specwatch recommend` on the sweep "
                          "the runs came from")
    digest = hashlib.sha1(json.dumps(rec.schedule, sort_keys=True).encode()).hexdigest()[:8]
    name = SCHEDULE_PREFIX + digest
    common = dict(name=name, speculative_num_steps=k, speculative_eagle_topk=1,
                  speculative_num_draft_tokens=k + 1, where=f"{sweep.path}: recommend --verify")
    if sweep.engine == "vllm":
        extra = json.loads(base.speculative_config) if base.speculative_config else {}
        extra.update(rec.schedule)
        return dataclasses.replace(base, **common, speculative_config=json.dumps(
            extra, sort_keys=True)), None
    path = Path(out_dir).resolve() / (sweep.name + rec_mod.VERIFY_SUFFIX) / f"{name}.json"
    flags = ("--speculative-adaptive", "--speculative-adaptive-config", str(path))
    return dataclasses.replace(base, **common, server_flags=base.server_flags + flags,
                               extra_flags=base.extra_flags + flags), str(path)


def best_singles(db, sweep_name: str) -> dict[int, str]:
    """{concurrency: the config with the highest geometric mean tok/s there} among the sweep's
    configs that are not schedules (trees and other drafts included)."""
    rows = query.run_sql(db, """
        SELECT concurrency, config, is_baseline, speedup, output_tok_s_mean FROM config_stats
        WHERE sweep_name = ? AND repeats > 0 AND concurrency IS NOT NULL AND NOT simulated
          AND config NOT LIKE ? ORDER BY concurrency, config""",
        [sweep_name, SCHEDULE_PREFIX + "%"], max_rows=100_000).dicts()
    out: dict[int, list] = {}
    for r in rows:
        out.setdefault(r["concurrency"], []).append(r)
    return {c: rec_mod.fastest(rs)["config"] for c, rs in out.items()}


def verify(sweep_file: str, db: str, out_dir: str, slo: dict | None = None,
           max_batch_size: int = rec_mod.DEFAULT_MAX_BATCH_SIZE, progress=None) -> VerifyReport:
    try:
        sweep = sweepfile.load(sweep_file)
    except sweepfile.SweepFileError as exc:
        raise VerifyError(str(exc)) from None
    rec = rec_mod.recommend(db, sweep.engine, sweep=sweep.name, slo=slo,
                            max_batch_size=max_batch_size)
    vname = sweep.name + rec_mod.VERIFY_SUFFIX
    report = VerifyReport(sweep.name, vname, sweep.engine, None, None, rec.payload())
    if rec.schedule is None:
        report.note = ("nothing to verify: the recommendation is no speculation at every load, "
                       "which is the baseline itself")
        return report
    sched, path = schedule_config(sweep, rec, out_dir)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(rec.schedule, indent=1) + "\n")
    bests = best_singles(db, sweep.name)
    keep = {c.name for c in sweep.configs if c.is_baseline} | set(bests.values())
    configs = tuple(c for c in sweep.configs if c.name in keep) + (sched,)
    vsweep = dataclasses.replace(sweep, name=vname, configs=configs, skipped=())
    try:
        _, result = sweep_mod.run_sweep_main(vsweep, db, out_dir, progress=progress)
    except sweep_mod.SweepError as exc:
        raise VerifyError(str(exc)) from None
    report.schedule_config, report.schedule_file = sched.name, path
    report.failed_configs = sweep_mod.failed_configs(db, vsweep)
    report.interrupted = result.interrupted
    report.loads = compare(db, vname, sched.name)
    verdicts = [lc.verdict for lc in report.loads]
    if len(report.loads) < len(sweep.concurrency) or "worse" in verdicts:
        report.at_least_as_good = False
    elif "no interval" in verdicts or "not measured" in verdicts:
        report.at_least_as_good = None
    else:
        report.at_least_as_good = True
    return report


def compare(db, verify_sweep: str, schedule: str) -> list[LoadCheck]:
    """Per load of the verify sweep: the schedule against the fastest single config there."""
    stats = query.run_sql(db, """
        SELECT concurrency, config, group_id, is_baseline, speedup, speedup_ci_low,
          speedup_ci_high, output_tok_s_mean, output_tok_s_ci_low, output_tok_s_ci_high
        FROM config_stats WHERE sweep_name = ? AND repeats > 0 ORDER BY concurrency, config""",
        [verify_sweep], max_rows=100_000).dicts()
    pairs = {(p["group_id"], p["other_group_id"]): p for p in query.run_sql(
        db, "SELECT * FROM config_pairs WHERE sweep_name = ?", [verify_sweep],
        max_rows=100_000).dicts()}
    loads: dict[int, list] = {}
    for r in stats:
        loads.setdefault(r["concurrency"], []).append(r)
    out = []
    for c, rows in sorted(loads.items()):
        s = next((r for r in rows if r["config"] == schedule), None)
        singles = [r for r in rows if r["config"] != schedule]
        best = rec_mod.fastest(singles) if singles else None
        p = pairs.get((s["group_id"], best["group_id"])) if s and best else None
        if s is None or best is None or p is None:
            verdict = "not measured"
        elif p["ratio_ci_low"] is None:
            verdict = "no interval"
        else:
            verdict = ("better" if p["ratio_ci_low"] > 1 else "worse" if p["ratio_ci_high"] < 1
                       else "as good")
        out.append(LoadCheck(
            concurrency=c, best_config=best and best["config"],
            best_tok_s=best and best["output_tok_s_mean"],
            best_tok_s_ci=best and (best["output_tok_s_ci_low"], best["output_tok_s_ci_high"]),
            schedule_tok_s=s and s["output_tok_s_mean"],
            schedule_tok_s_ci=s and (s["output_tok_s_ci_low"], s["output_tok_s_ci_high"]),
            schedule_speedup=s and s["speedup"],
            schedule_speedup_ci=s and (s["speedup_ci_low"], s["speedup_ci_high"]),
            ratio=p and p["ratio"], ratio_ci_low=p and p["ratio_ci_low"],
            ratio_ci_high=p and p["ratio_ci_high"], ratio_method=p and p["ratio_method"],
            verdict=verdict))
    return out


def render_text(rep: VerifyReport) -> str:
    lines = [f"verify: {rep.engine} schedule of sweep {rep.sweep}, measured as sweep "
             f"{rep.verify_sweep}" + (f" (config {rep.schedule_config})" if rep.schedule_config
                                      else "")]
    if rep.note:
        return "\n".join(lines + [rep.note]) + "\n"
    if rep.schedule_file:
        lines.append(f"schedule file: {rep.schedule_file}")

    def ci(v, lohi, digits=0):
        if v is None:
            return "-"
        if not lohi or lohi[0] is None:
            return f"{v:.{digits}f}"
        return f"{v:.{digits}f} [{lohi[0]:.{digits}f}, {lohi[1]:.{digits}f}]"

    lines.append(f"{'c':>4}  {'best single config':<24} {'its tok/s [95%]':<20} "
                 f"{'schedule tok/s [95%]':<20} {'schedule / best [95%]':<22} verdict")
    for lc in rep.loads:
        ratio = ci(lc.ratio, (lc.ratio_ci_low, lc.ratio_ci_high), 2)
        lines.append(f"{lc.concurrency:>4}  {lc.best_config or '-':<24} "
                     f"{ci(lc.best_tok_s, lc.best_tok_s_ci):<20} "
                     f"{ci(lc.schedule_tok_s, lc.schedule_tok_s_ci):<20} {ratio:<22} {lc.verdict}")
    verdict = {True: "the schedule is at least as good as the best single config at every load",
               False: "the schedule is NOT at least as good everywhere (see the rows above)",
               None: "undecided: a load has no interval (add repeats)"}[rep.at_least_as_good]
    lines.append(verdict)
    if rep.failed_configs:
        lines.append(f"failed configs: {', '.join(rep.failed_configs)}")
    return "\n".join(lines) + "\n"
