"""The sweep file's traffic keys (traffic.py): load levels, arrivals, SLO, rate search, adaptive
repeats, each bad value refused with file:line and key; and the bundled prompt sets' licenses."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specwatch.run import sweepfile, traffic
from specwatch.run.sweepfile import SweepFileError

ROOT = Path(__file__).resolve().parent.parent
HEAD = """\
name = "t"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
"""
GRID = """
[[grid]]
speculative_num_steps = 2
speculative_eagle_topk = 1
"""


def load(tmp_path: Path, body: str, workload: str = "[workload]\nnum_prompts = 8\n"):
    p = tmp_path / "sweep.toml"
    p.write_text(HEAD + body + "\n" + workload + GRID)
    return sweepfile.load(p)


def refused(tmp_path: Path, body: str, workload: str = "[workload]\nnum_prompts = 8\n") -> str:
    with pytest.raises(SweepFileError) as e:
        load(tmp_path, body, workload)
    return str(e.value)


def test_without_traffic_keys_a_sweep_is_closed_loop_at_concurrency_1(tmp_path):
    t = load(tmp_path, "").traffic
    assert t == traffic.Traffic()
    assert t.levels() == [(1, None)] and t.arrival_json() is None


def test_rates_and_concurrencies_are_levels_side_by_side(tmp_path):
    s = load(tmp_path, "concurrency = [1, 4]\nrequest_rate = [0.5, 2, 8]\nrepeats = 3\n")
    assert s.concurrency == (1, 4)
    assert s.traffic.levels() == [(1, None), (4, None), (None, 0.5), (None, 2.0), (None, 8.0)]
    assert json.loads(s.traffic.arrival_json()) == {"process": "poisson"}


def test_a_rate_sweep_has_no_closed_levels_unless_asked(tmp_path):
    s = load(tmp_path, "request_rate = [1, 2]\n")
    assert s.concurrency == () and s.traffic.levels() == [(None, 1.0), (None, 2.0)]


def test_gamma_arrivals_carry_their_burstiness(tmp_path):
    t = load(tmp_path, 'request_rate = [1]\narrival = "gamma"\nburstiness = 0.25\n').traffic
    assert (t.arrival, t.burstiness) == ("gamma", 0.25)
    assert json.loads(t.arrival_json()) == {"process": "gamma", "burstiness": 0.25}


def test_a_trace_is_read_at_load_time_relative_to_the_sweep_file(tmp_path):
    (tmp_path / "tr.jsonl").write_text("".join(
        json.dumps({"offset_s": i * 0.5, "input_len": 20, "output_len": 8}) + "\n"
        for i in range(10)))
    t = load(tmp_path, 'trace = "tr.jsonl"\n').traffic
    assert t.arrival == "trace" and t.trace == str((tmp_path / "tr.jsonl").resolve())
    assert json.loads(t.arrival_json()) == {"process": "trace", "trace_sha1": t.trace_sha1}
    assert len(t.trace_sha1) == 40
    assert t.levels() == [(None, pytest.approx(2.0))]     # its own pace: 9 gaps in 4.5 s
    msg = refused(tmp_path, 'trace = "tr.jsonl"\n', "[workload]\nnum_prompts = 11\n")
    assert "num_prompts: 11 but the trace" in msg and "has 10 requests" in msg
    (tmp_path / "tr.jsonl").write_text('{"offset_s": 1}\n{"offset_s": 0}\n')
    msg = refused(tmp_path, 'trace = "tr.jsonl"\n')
    assert re.search(r"sweep.toml:4: trace: .*tr.jsonl:2: offset_s: .*sort the trace", msg), msg


def test_slo_search_and_adaptive_repeats(tmp_path):
    s = load(tmp_path, """request_rate = [1, 4]
repeats = 3
max_repeats = 8
target_ci_width = 0.05
[slo]
ttft_ms = 500
tpot_ms = 40
percentile = 90
[rate_search]
min_rate = 0.5
max_rate = 16
steps = 3
""")
    t = s.traffic
    assert t.slo == traffic.Slo(ttft_ms=500.0, tpot_ms=40.0, percentile=90.0)
    assert t.rate_search == traffic.RateSearch(0.5, 16.0, 3, 3)       # repeats: the sweep's
    assert (t.max_repeats, t.target_ci_width) == (8, 0.05)


BAD = [
    # (body, line, what the message says)
    ("request_rate = []\n", 4, "request_rate: give a non-empty list"),
    ("request_rate = [1, 1]\n", 4, "lists a rate twice"),
    ('request_rate = ["fast"]\n', 4, "request_rate: expected a list of numbers"),
    ("request_rate = [0]\n", 4, "request_rate: 0 is out of range"),
    ("request_rate = [-2]\n", 4, "out of range"),
    ("request_rate = [nan]\n", 4, "out of range"),
    ("request_rate = [inf]\n", 4, "out of range"),
    ("request_rate = [2e6]\n", 4, "out of range"),
    ("request_rate = [1]\nconcurrency = []\n", 5, "concurrency: give a non-empty list"),
    ('request_rate = [1]\narrival = "uniform"\n', 5, "'uniform' is not one of poisson, gamma"),
    ("request_rate = [1]\nburstiness = 2\n", 5, 'set arrival = "gamma"'),
    ('request_rate = [1]\narrival = "gamma"\n', 5, "needs burstiness"),
    ('request_rate = [1]\narrival = "gamma"\nburstiness = 0\n', 6, "burstiness: 0 is out of"),
    ('request_rate = [1]\narrival = "gamma"\nburstiness = nan\n', 6, "out of range"),
    ('arrival = "trace"\n', 4, 'needs trace = "FILE.jsonl"'),
    ('request_rate = [1]\ntrace = "nope.jsonl"\narrival = "poisson"\n', 5,
     'only with arrival = "trace"'),
    ('trace = "nope.jsonl"\n', 4, "cannot read the trace"),
    ("max_repeats = 5\nrepeats = 2\n", 4, "add target_ci_width"),
    ("target_ci_width = 0.05\nrepeats = 2\n", 4, "add max_repeats"),
    ("repeats = 1\nmax_repeats = 5\ntarget_ci_width = 0.1\n", 4, "adaptive repeats start from"),
    ("repeats = 4\nmax_repeats = 3\ntarget_ci_width = 0.1\n", 5, "max_repeats: 3 is below"),
    ("repeats = 2\nmax_repeats = 5\ntarget_ci_width = 0\n", 6, "target_ci_width: 0 is out"),
    ("repeats = 2\nmax_repeats = 1\ntarget_ci_width = 0.1\n", 5, "max_repeats: 1 is out"),
    ("[slo]\n", 4, "give at least one limit"),
    ("[slo]\nttft = 5\n", 5, "ttft: unknown key in [slo]"),
    ("[slo]\nttft_ms = -1\n", 5, "ttft_ms: -1 is out of range"),
    ("[slo]\ne2e_ms = inf\n", 5, "out of range"),
    ("[slo]\nttft_ms = 100\npercentile = 0\n", 6, "percentile: 0 is out of range"),
    ("[slo]\nttft_ms = 100\npercentile = 101\n", 6, "out of range"),
    ('[slo]\ntpot_ms = "fast"\n', 5, "tpot_ms: expected a number"),
    ("[rate_search]\nmin_rate = 1\nmax_rate = 4\n", 4, "add an [slo] table"),
    ("[slo]\nttft_ms = 100\n[rate_search]\nmax_rate = 4\n", 6, "min_rate is missing"),
    ("[slo]\nttft_ms = 100\n[rate_search]\nmin_rate = 4\nmax_rate = 4\n", 8,
     "max_rate: must be above"),
    ("[slo]\nttft_ms = 100\n[rate_search]\nmin_rate = 1\nmax_rate = 4\nsteps = 50\n", 9,
     "steps: 50 is out of range"),
    ("[slo]\nttft_ms = 100\n[rate_search]\nmin_rate = 0\nmax_rate = 4\n", 7, "min_rate: 0 is"),
]


@pytest.mark.parametrize("body,line,what", BAD)
def test_bad_traffic_keys_name_file_line_and_key(tmp_path, body, line, what):
    msg = refused(tmp_path, body)
    assert msg.startswith(f"{tmp_path / 'sweep.toml'}:{line}: "), msg
    assert what in msg, msg


def test_a_rate_needs_two_requests_per_run(tmp_path):
    msg = refused(tmp_path, "request_rate = [1]\n", "[workload]\nnum_prompts = 1\n")
    assert "num_prompts: a request rate needs at least 2 requests" in msg


def test_traffic_numbers_all_have_ranges():
    """Every numeric traffic key is range-checked (NaN, inf, 0 or negative never pass)."""
    numeric = {k for k, v in traffic.TOP_KEYS.items() if "number" in v or "integer" in v}
    assert numeric == set(traffic.RANGES[""])
    for section, keys in (("slo", traffic.SLO_KEYS), ("rate_search", traffic.SEARCH_KEYS)):
        assert set(keys) == set(traffic.RANGES[section])


def test_every_bundled_prompt_set_is_named_with_its_license():
    d = ROOT / "specwatch" / "run" / "workloads"
    readme = (d / "README.md").read_text()
    assert "SPDX-License-Identifier: CC0-1.0" in (d / "LICENSE").read_text()
    for f in sorted(d.glob("*.jsonl")):
        row = next(r for r in readme.splitlines() if r.startswith(f"| `{f.stem}` |"))
        assert row.rstrip().endswith("| CC0-1.0 |"), row
        rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        assert {r["category"] for r in rows} == {f.stem}
        assert f"| {len(rows)} |" in row, row
        assert f.stem in sweepfile.PROMPT_SETS
