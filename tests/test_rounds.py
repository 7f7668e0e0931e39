"""The rounds after a sweep's plan (run/rounds.py): the rate search's next rate and adaptive
repeats, decided from what is stored (a real DuckDB file with known rows)."""
from __future__ import annotations

import pytest

from specwatch.db import store
from specwatch.run import rounds, sweepfile, traffic
from specwatch.run.measure import RunKey
from test_slo_views import run, targets

RS = traffic.RateSearch(min_rate=1.0, max_rate=16.0, steps=3, repeats=2)


@pytest.mark.parametrize("margins,bisected,want", [
    ({1.0: -0.5}, 0, None),                                   # an end not measured yet: wait
    ({1.0: -0.5, 16.0: 0.4}, 0, 4.0),                         # sqrt(1 * 16)
    ({1.0: -0.5, 4.0: 0.1, 16.0: 0.4}, 1, 2.0),               # sqrt(1 * 4)
    ({1.0: -0.5, 4.0: -0.1, 16.0: 0.4}, 1, 8.0),              # sqrt(4 * 16)
    ({1.0: -0.5, 2.0: None, 16.0: 0.4}, 1, 1.41),             # every run at 2 failed: a miss
    ({1.0: 0.2, 16.0: 0.4}, 0, None),                         # misses at the lowest: below
    ({1.0: -0.2, 16.0: -0.1}, 0, None),                       # meets everywhere: above
    ({1.0: -0.5, 4.0: -0.1, 16.0: 0.4}, 3, None),             # `steps` bisected: done
    ({1.0: -0.5, 1.01: 0.3, 16.0: 0.4}, 1, None),             # bracket within 2%: done
    # the fixed list's rates narrow the bracket too; the first miss from the lowest counts
    ({1.0: -0.5, 3.0: -0.2, 6.0: 0.2, 10.0: -0.1, 16.0: 0.4}, 0, 4.24),
])
def test_next_search_rate_bisects_the_first_bracket(margins, bisected, want):
    got = rounds.next_search_rate(margins, bisected, RS)
    assert got == (pytest.approx(want) if want is not None else None)


def test_search_rates_have_three_significant_digits():
    rs = traffic.RateSearch(1.0, 10.0, 3, 1)
    assert rounds.next_search_rate({1.0: -1, 10.0: 1}, 0, rs) == 3.16


SWEEP = """name = "ad"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
concurrency = [1, 4]
repeats = 2
max_repeats = 4
target_ci_width = 0.05
[[grid]]
speculative_num_steps = 2
speculative_eagle_topk = 1
"""


def test_plan_keys_are_levels_by_repeats_plus_the_search_ends(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SWEEP.replace("concurrency = [1, 4]", "concurrency = [1]\nrequest_rate = [2, 16]")
                 + "[slo]\nttft_ms = 100\n[rate_search]\nmin_rate = 2\nmax_rate = 32\n"
                 "repeats = 1\n")
    keys = rounds.plan_keys(sweepfile.load(p))
    assert keys == [RunKey(1, 0), RunKey(None, 0, 2.0), RunKey(None, 0, 16.0), RunKey(1, 1),
                    RunKey(None, 1, 2.0), RunKey(None, 1, 16.0), RunKey(None, 0, 32.0)]
    assert [k.search_step for k in keys] == [None] * 6 + [0]   # 2/s is planned: not searched


def test_adaptive_repeats_ask_for_the_next_repeat_with_the_baseline(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SWEEP)
    sweep = sweepfile.load(p)
    db = tmp_path / "ad.duckdb"
    spec = sweep.configs[1].name
    with store.writer(db) as con:
        # c=1: ratios 1.5 / 1.8 (a wide interval: more); c=4: 1.2 / 1.2001 (narrow: target)
        for conc, ratios in ((1, (1.5, 1.8)), (4, (1.2, 1.2001))):
            for rep, ratio in enumerate(ratios):
                run(con, "ad", "baseline", rep, conc=conc, tok_s=100.0)
                run(con, "ad", spec, rep, conc=conc, tok_s=100.0 * ratio)
        targets(con, "ad", target_ci_width=0.05, max_repeats=4)
    todo = rounds.next_round(sweep, str(db))
    assert [(c.name, keys) for c, keys in todo] == [("baseline", [RunKey(1, 2)]),
                                                     (spec, [RunKey(1, 2)])]
    with store.writer(db) as con:               # repeats 2 and 3 measured, still wide: the cap
        for rep, ratio in ((2, 1.4), (3, 1.9)):
            run(con, "ad", "baseline", rep, conc=1, tok_s=100.0)
            run(con, "ad", spec, rep, conc=1, tok_s=100.0 * ratio)
    assert rounds.next_round(sweep, str(db)) == []


def test_a_failed_repeat_still_moves_on_so_the_rounds_end(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(SWEEP.replace("concurrency = [1, 4]", "concurrency = [1]"))
    sweep = sweepfile.load(p)
    spec = sweep.configs[1].name
    db = tmp_path / "f.duckdb"
    with store.writer(db) as con:
        for rep, ratio in enumerate((1.5, 1.8)):
            run(con, "ad", "baseline", rep, conc=1, tok_s=100.0)
            run(con, "ad", spec, rep, conc=1, tok_s=100.0 * ratio)
        run(con, "ad", spec, 2, conc=1, status="failed", tok_s=None)
        run(con, "ad", "baseline", 2, conc=1, status="failed", tok_s=None)
        targets(con, "ad", target_ci_width=0.05, max_repeats=4)
    todo = rounds.next_round(sweep, str(db))
    assert [keys for _, keys in todo] == [[RunKey(1, 3)], [RunKey(1, 3)]]
    with store.writer(db) as con:
        run(con, "ad", spec, 3, conc=1, status="failed", tok_s=None)
    assert rounds.next_round(sweep, str(db)) == []     # index 4 = max_repeats: never measured
