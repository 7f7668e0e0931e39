"""Every sample log parses exactly as its approved golden (update: `python tests/goldens.py --update`)."""
from __future__ import annotations

import json

import pytest

from goldens import SAMPLES, golden_path, parse_all

LOGS = sorted(SAMPLES.glob("*.log"))


def test_every_sample_log_has_a_golden():
    assert len(LOGS) >= 8
    missing = [l.name for l in LOGS if not golden_path(l).exists()]
    assert not missing, f"no golden for {missing}; run python tests/goldens.py --update and read the diff"


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_parse_matches_golden(log):
    assert parse_all(log) == golden_path(log).read_text()


def _golden(name):
    return [json.loads(l) for l in golden_path(SAMPLES / name).read_text().splitlines()]


def test_goldens_hold_what_the_generator_wrote():
    # Independent of the parser: scripts/make_sample_logs.py writes 24 decode windows per rank
    # for the 0.5.23 logs, 12 per rank for the 2-rank DP log and 10 for the older eras.
    counts = {"sglang-0.5.23-llama8b-eagle3-s3k1.log": 24, "sglang-0.5.9-dp2-tp8-eagle3.log": 24,
              "sglang-0.4.2-tp2-eagle.log": 10, "sglang-0.5.4-iter-eagle3.log": 10}
    for name, n in counts.items():
        assert sum(r["kind"] == "sglang_decode" for r in _golden(name)) == n
    dp = [r for r in _golden("sglang-0.5.9-dp2-tp8-eagle3.log") if r["kind"] == "sglang_decode"]
    assert {r["rank"] for r in dp} == {"DP0 TP0", "DP1 TP4"}
    v = [r for r in _golden("vllm-0.11-eagle3.log") if r["kind"] == "vllm_spec_decode"]
    assert len(v) == 14 and all(len(r.get("per_position_acceptance_rate", [0] * 3)) == 3 for r in v[:12])
    cfg = [r for r in _golden("sglang-0.5.23-llama8b-eagle3-s5k4.log") if r["kind"] == "server_args"][0]
    assert (cfg["speculative_num_steps"], cfg["speculative_eagle_topk"],
            cfg["speculative_num_draft_tokens"]) == (5, 4, 8)


def test_garbage_golden_rejects_exactly_the_broken_lines():
    rows = _golden("garbage.log")
    rejected = {r["line_no"]: r["reason"] for r in rows if r["kind"] == "rejected"}
    assert set(rejected) == {3, 7, 8}
    assert "truncated" in rejected[8]
    # line 6: two records glued with no separator (a paste that lost its newline), one row each
    assert [r["kind"] for r in rows if r["line_no"] == 6] == ["sglang_decode"] * 2
    assert max(r["line_no"] for r in rows) == 9  # line 10 has no newline yet
