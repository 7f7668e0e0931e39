"""What a sweep measures after its planned runs: the rate search's next rates and adaptive repeats.

Both are decided from what is stored, through the views that define them (db/slo_views.py), so a
re-run resumes where the last one stopped and the decision is the report's own numbers:

Rate search ([rate_search], per config, baseline included): the bracket ends min_rate and
max_rate are planned with the first round (`plan_keys`). Then, over every rate group of the
config (the fixed request_rate list and the searched rates alike), followed from the lowest
rate: the first rate whose mean SLO margin is above 0 misses (a rate whose every run failed
misses too), the one before it meets; the next rate is their geometric mean (3 significant
digits), measured with rate_search.repeats repeats. It stops when the lowest rate misses (the
answer is below the range), none misses (above it), the two are within 2% of each other, or
`steps` rates have been bisected (besides the two ends).

Adaptive repeats (max_repeats, target_ci_width): every (config, load level) whose
`group_repeats.repeats_status` is 'more' gets its next repeat index, together with its
same-sweep baseline at that level (so the pair stays paired), until the speedup interval is
narrow enough or the group reaches max_repeats; a repeat index at or above max_repeats is never
measured, so failed runs cannot loop.

Not here: running anything (`sweep` runs each round like the first), the formulas (`slo_views`).
"""
from __future__ import annotations

import math
from pathlib import Path

from specwatch.db import store
from specwatch.run import traffic
from specwatch.run.measure import RunKey
from specwatch.run.sweepfile import Config, Sweep

CLOSE = 1.02        # a bracket this narrow (hi / lo) is searched no further


def plan_keys(sweep: Sweep) -> list[RunKey]:
    """The first round: every planned load level x repeat, plus the rate search's two ends."""
    t = sweep.traffic
    keys = [RunKey(c, r, rate) for r in range(sweep.repeats) for c, rate in t.levels()]
    rs = t.rate_search
    if rs is not None:
        for rate in (rs.min_rate, rs.max_rate):
            keys += [RunKey(None, r, rate, search_step=0) for r in range(rs.repeats)
                     if RunKey(None, r, rate) not in keys]
    return keys


def next_search_rate(margins: dict[float, float | None], bisected: int,
                     rs: traffic.RateSearch) -> float | None:
    """The next rate to search, from {rate: mean SLO margin (None: every run failed)} of the
    rates measured so far, and how many the search has bisected (ends not counted); None when
    done."""
    if any(r not in margins for r in (rs.min_rate, rs.max_rate)) or bisected >= rs.steps:
        return None
    rates = sorted(margins)
    miss = next((i for i, r in enumerate(rates) if margins[r] is None or margins[r] > 0), None)
    if miss is None or miss == 0:
        return None
    lo, hi = rates[miss - 1], rates[miss]
    nxt = traffic.round_rate(math.sqrt(lo * hi))
    if hi / lo <= CLOSE or not lo < nxt < hi or nxt in margins:
        return None
    return nxt


def next_round(sweep: Sweep, db: str) -> list[tuple[Config, list[RunKey]]]:
    """(config, runs) to measure next; [] when the search and the repeats are done."""
    t = sweep.traffic
    if (t.rate_search is None and t.max_repeats is None) or not Path(db).exists():
        return []
    by_name = {c.name: c for c in sweep.configs}
    todo: dict[str, list[RunKey]] = {}
    with store.reader(db) as con:
        if t.rate_search is not None:
            rs = t.rate_search
            rows = con.execute("""
                SELECT r.config_name, r.request_rate, any_value(g.slo_margin_mean),
                  bool_or(r.rate_search_step IS NOT NULL) AS searched
                FROM runs r
                LEFT JOIN (SELECT DISTINCT run_id, group_id FROM run_metrics) m USING (run_id)
                LEFT JOIN group_slo g USING (group_id)
                WHERE r.sweep_name = ? AND r.request_rate IS NOT NULL AND r.status <> 'running'
                GROUP BY r.config_name, r.request_rate""", [sweep.name]).fetchall()
            per: dict[str, dict[float, float | None]] = {}
            searched: dict[str, set[float]] = {}
            for name, rate, margin, was_searched in rows:
                per.setdefault(name, {})[rate] = margin
                if was_searched:
                    searched.setdefault(name, set()).add(rate)
            for name, margins in per.items():
                if name not in by_name:
                    continue
                bisected = len(searched.get(name, set()) - {rs.min_rate, rs.max_rate})
                nxt = next_search_rate(margins, bisected, rs)
                if nxt is not None:
                    step = bisected + 1
                    todo.setdefault(name, []).extend(
                        RunKey(None, r, nxt, search_step=step) for r in range(rs.repeats))
        if t.max_repeats is not None:
            more = con.execute("""
                SELECT g.config, b.config, g.concurrency, g.request_rate,
                  (SELECT max(repeat_idx) FROM runs r WHERE r.sweep_name = g.sweep_name
                     AND r.config_name = g.config
                     AND r.concurrency IS NOT DISTINCT FROM g.concurrency
                     AND r.request_rate IS NOT DISTINCT FROM g.request_rate) AS last
                FROM group_repeats g LEFT JOIN run_groups b ON b.group_id = g.baseline_group_id
                WHERE g.sweep_name = ? AND g.repeats_status = 'more'""",
                               [sweep.name]).fetchall()
            for name, base, conc, rate, last in more:
                nxt = (last if last is not None else -1) + 1
                if nxt >= t.max_repeats:
                    continue
                for who in (name, base):
                    if who in by_name:
                        k = RunKey(conc, nxt, rate)
                        if k not in todo.setdefault(who, []):
                            todo[who].append(k)
    return [(c, todo[c.name]) for c in sweep.configs if todo.get(c.name)]
