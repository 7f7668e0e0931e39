"""failure.decode_lines counts decode windows by the parser's header routing, never by the raw
substring `Decode batch` (the class of issue 18's " batch" routing bug): a real log file on disk
with real SGLang decode lines, another engine's lookalike, traceback source lines and messages
that mention the words."""
from __future__ import annotations

from specwatch.logs import failure, ingest
from specwatch.db import query

REAL = [  # real SGLang 0.5.9 lines (sample_logs/sglang-0.5.9-dp2-tp8-eagle3.log), two rank forms
    "[2026-03-02 08:00:51 DP0 TP0] Decode batch, #running-req: 8, #token: 4096, token usage: "
    "0.01, accept len: 2.57, accept rate: 0.64, cuda graph: True, gen throughput (token/s): "
    "2170.11, #queue-req: 0",
    "[2026-03-02 08:00:51] Decode batch, #running-req: 8, #token: 4096, token usage: 0.01, "
    "accept len: 2.55, accept rate: 0.64, cuda graph: True, gen throughput (token/s): 2206.05, "
    "#queue-req: 0",
    # logging-style prefix with the source location inside the rank bracket (issue 15)
    "INFO 1234 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch, #running-req: 8, "
    "#token: 4136, token usage: 0.01, accept len: 2.71, accept rate: 0.68, cuda graph: True, "
    "gen throughput (token/s): 3829.34, #queue-req: 0",
]
# a real decode line cut short: the server did log here (counted), but it is no stored window
CUT = "[2026-03-02 08:00:52] Decode batch, #running-req: 8, #token: 4136"
NOT_DECODE = [
    # TokenSpeed's lookalike (lines.toml [[lookalike]] tokenspeed_decode)
    "[2026-08-01 12:00:00] Decode batch. #dp-rank: 0, #running-req: 8, avg_seq_len: 812.5, "
    "#pages(active/cached/total): 120/40/4096, page ratio: 0.03, gen throughput (token/s): "
    "640.20, avg_accept_len: 2.61, accept_rate: 0.54, #queue-req: 0",
    # a traceback through SGLang's decode logging: its source lines hold the words
    "Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler_metrics_mixin.py", line 222, in '
    "log_decode_stats",
    '    msg = f"Decode batch, #running-req: {num_running_reqs}, #token: {num_used}, "',
    "ZeroDivisionError: division by zero",
    # messages that mention a decode batch
    "[2026-03-02 08:00:53] WARNING: no Decode batch, #running-req: line for 60 s",
    "[2026-03-02 08:00:53] Scheduler hit an exception: while logging Decode batch, "
    "#running-req: 8",
    "grep 'Decode batch, ' server.log | wc -l",
]


def test_only_the_parsers_decode_windows_count(tmp_path, db):
    log = tmp_path / "server.log"
    body = [NOT_DECODE[0], REAL[0], *NOT_DECODE[1:5], REAL[1], *NOT_DECODE[5:], REAL[2], CUT]
    text = "\n".join(body) + "\n"
    log.write_text(text)
    assert text.count("Decode batch") == 9          # what the old substring count said
    assert failure.decode_lines(log, 0, len(text.encode())) == 4    # REAL and CUT
    # the same count as the decode windows ingest stores from this file
    ingest.ingest_paths(db, [str(log)])
    assert query.run_sql(db, "SELECT count(*) FROM decode_windows").rows == [(3,)]
    # byte ranges: a line counts when it starts in [lo, hi); one cut by lo does not
    start = [0]
    for line in body:
        start.append(start[-1] + len(line.encode()) + 1)
    i0, i1 = body.index(REAL[0]), body.index(REAL[1])
    assert failure.decode_lines(log, start[i0], start[i0] + 1) == 1
    assert failure.decode_lines(log, start[i0] + 1, start[i1]) == 0
    assert failure.decode_lines(log, start[i0] + 1, start[i1] + 1) == 1
    assert failure.decode_lines(log, start[i1 + 1], start[-2]) == 1    # REAL[2]
    assert failure.decode_lines(log, None, 10) == 0 and failure.decode_lines(log, 5, 5) == 0
    assert failure.decode_lines(tmp_path / "missing.log", 0, 100) == 0
