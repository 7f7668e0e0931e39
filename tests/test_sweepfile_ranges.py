"""Every number of a sweep file has a finite range (issue 26): NaN, infinities, denormals, values
too big for what reads them, and ones below what an engine accepts are refused at load with
file:line, the key and the allowed range; the boundaries themselves load."""
from __future__ import annotations

import pytest

from specwatch.run import sweepfile
from specwatch.run.sweepfile import RANGES, SweepFileError

TOP = '''name = "t"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
'''
GRID = '''[[grid]]
speculative_num_steps = 2
speculative_eagle_topk = 1
'''

# (what, text after TOP, line of the bad key, key, words of the allowed range)
BAD = [
    ("nan timeout", "request_timeout_s = nan\n", 4, "request_timeout_s", "> 0 and <= 86400"),
    ("-nan timeout", "startup_timeout_s = -nan\n", 4, "startup_timeout_s", "> 0 and <= 86400"),
    ("inf timeout", "startup_timeout_s = inf\n", 4, "startup_timeout_s", "> 0 and <= 86400"),
    ("zero grace", "stop_grace_s = 0.0\n", 4, "stop_grace_s", "> 0 and <= 600"),
    ("negative grace", "stop_grace_s = -1\n", 4, "stop_grace_s", "> 0 and <= 600"),
    ("a year of startup", "startup_timeout_s = 3.2e7\n", 4, "startup_timeout_s", "<= 86400"),
    ("repeats 10^30", "repeats = 1000000000000000000000000000000\n", 4, "repeats", "1..1000"),
    ("repeats 0", "repeats = 0\n", 4, "repeats", "1..1000"),
    ("concurrency 10^9", "concurrency = [1, 1000000000]\n", 4, "concurrency", "1..4096"),
    ("concurrency 0", "concurrency = [0]\n", 4, "concurrency", "1..4096"),
    ("port 0", "port = 0\n", 4, "port", "1..65535"),
    ("port 2^16", "port = 65536\n", 4, "port", "1..65535"),
    ("nan temperature", "[workload]\ntemperature = nan\n", 5, "temperature", "0 or 0.01..2"),
    ("inf temperature", "[workload]\ntemperature = inf\n", 5, "temperature", "0 or 0.01..2"),
    ("denormal temperature", "[workload]\ntemperature = 5e-324\n", 5, "temperature",
     "0 or 0.01..2"),
    ("tiny temperature", "[workload]\ntemperature = 1e-7\n", 5, "temperature", "vLLM"),
    ("negative temperature", "[workload]\ntemperature = -0.5\n", 5, "temperature", "0 or 0.01..2"),
    ("hot temperature", "[workload]\ntemperature = 2.5\n", 5, "temperature", "0 or 0.01..2"),
    ("seed 2^64+1", "[workload]\nseed = 18446744073709551617\n", 5, "seed", "0..4294967295"),
    ("seed -1", "[workload]\nseed = -1\n", 5, "seed", "0..4294967295"),
    ("no prompts", "[workload]\nnum_prompts = 0\n", 5, "num_prompts", "1..1000000"),
    ("negative warm-up", "[workload]\nwarmup_requests = -1\n", 5, "warmup_requests", "0..10000"),
    ("output tokens min 0", "[workload]\noutput_tokens = {min = 0, max = 8}\n", 5,
     "output_tokens", "1..1048576"),
    ("output tokens 2^40", "[workload]\noutput_tokens = 1099511627776\n", 5, "output_tokens",
     "1..1048576"),
    ("input chars 10^12", "[workload]\ninput_chars = {min = 1, max = 1000000000000}\n", 5,
     "input_chars", "1..100000000"),
    ("grid steps 0", "[[grid]]\nspeculative_num_steps = [2, 0]\nspeculative_eagle_topk = 1\n",
     5, "speculative_num_steps", "1..64"),
    ("grid topk 10^6", "[[grid]]\nspeculative_num_steps = 2\nspeculative_eagle_topk = [1000000]\n",
     6, "speculative_eagle_topk", "1..64"),
    ("config draft tokens 1", "[[config]]\nname = \"a\"\nspeculative_num_steps = 2\n"
     "speculative_eagle_topk = 1\nspeculative_num_draft_tokens = 1\n", 8,
     "speculative_num_draft_tokens", "2..1024"),
    ("config tp 0", "[[config]]\nspeculative_num_steps = 2\nspeculative_eagle_topk = 1\n"
     "tp_size = 0\n", 7, "tp_size", "1..1024"),
    ("grid dp 10^5", GRID + "dp_size = [1, 100000]\n", 7, "dp_size", "1..1024"),
    ("grid pp -1", GRID + "pp_size = -1\n", 7, "pp_size", "1..1024"),
    ("aux id in a list of lists", GRID + "aux_layer_ids = [[1, 2], [3, 1000000]]\n", 7,
     "aux_layer_ids", "-1..4095"),
    ("vLLM speculative tokens 0", 'engine = "vllm"\n[[config]]\nname = "a"\n'
     "num_speculative_tokens = 0\n", 7, "num_speculative_tokens", "1..64"),
    ("aux id -2", "[[config]]\nspeculative_num_steps = 2\nspeculative_eagle_topk = 1\n"
     "aux_layer_ids = [-2, 1]\n", 7, "aux_layer_ids", "-1..4095"),
]


@pytest.mark.parametrize("what,body,line,key,allowed", BAD, ids=[b[0] for b in BAD])
def test_out_of_range_numbers_are_refused_with_file_line_key_and_range(tmp_path, what, body,
                                                                       line, key, allowed):
    p = tmp_path / "sweep.toml"
    p.write_text(TOP + body + ("" if "[[" in body else GRID))
    with pytest.raises(SweepFileError) as err:
        sweepfile.load(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}:{line}: {key}: "), msg
    assert "out of range; allowed: " in msg and allowed in msg, msg
    assert len(msg) < 400, msg     # a huge integer is shortened, not printed whole


def test_every_ranged_key_has_a_refused_case():
    """A key added to RANGES without a case here is untested."""
    tested = {b[3] for b in BAD}
    declared = {k for section in RANGES.values() for k in section}
    assert declared <= tested, sorted(declared - tested)


def test_huge_integer_is_shortened_in_the_message(tmp_path):
    p = tmp_path / "sweep.toml"
    p.write_text(TOP + "repeats = " + "9" * 400 + "\n" + GRID)
    with pytest.raises(SweepFileError, match=r"repeats: 999999\.\.\.\(400 digits\) is out of "
                                             r"range; allowed: 1\.\.1000"):
        sweepfile.load(p)


def test_the_boundaries_load(tmp_path):
    p = tmp_path / "sweep.toml"
    p.write_text(TOP + "port = 65535\nrepeats = 1000\nconcurrency = [1, 4096]\n"
                 "startup_timeout_s = 86400\nrequest_timeout_s = 0.5\nstop_grace_s = 600\n"
                 "[workload]\ntemperature = 0.01\nseed = 4294967295\nnum_prompts = 1\n"
                 "warmup_requests = 0\noutput_tokens = {min = 1, max = 1048576}\n"
                 "[[grid]]\nspeculative_num_steps = [1, 64]\nspeculative_eagle_topk = 1\n"
                 "aux_layer_ids = [[-1, 4095]]\n"
                 "[[config]]\nspeculative_num_steps = 3\nspeculative_eagle_topk = 64\n"
                 "speculative_num_draft_tokens = 2\n")
    s = sweepfile.load(p)
    assert (s.port, s.repeats, s.concurrency) == (65535, 1000, (1, 4096))
    assert (s.startup_timeout_s, s.request_timeout_s, s.stop_grace_s) == (86400.0, 0.5, 600.0)
    assert (s.workload.temperature, s.workload.seed) == (0.01, 4294967295)
    steps = sorted(c.speculative_num_steps for c in s.configs if not c.is_baseline)
    assert steps == [1, 3, 64]
    for t in ("0", "0.0", "2", "2.0"):
        p.write_text(TOP + f"[workload]\ntemperature = {t}\n" + GRID)
        assert sweepfile.load(p).workload.temperature == float(t)
