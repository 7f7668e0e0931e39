"""Contract 5: the per-request metadata specwatch reads is what real SGLang sends.

SGLang's own TokenizerManager._calculate_spec_decoding_metrics builds `meta_info` from a stub
batch output (the fields its detokenizer fills), a real HTTP server on 127.0.0.1 streams it the way
/generate does, and specwatch's load client must recover the histogram, verify count and tokens
that the request rows (requests.spec_accept_histogram, doctor's step-1 evidence) are made of."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from sglang.srt.managers import tokenizer_manager as tm

from specwatch.run import load

HIST = [3, 4, 2, 5]            # verify steps that accepted 0, 1, 2, 3 drafts
VERIFY_CT = sum(HIST)          # 14
CORRECT = sum(k * n for k, n in enumerate(HIST))
COMPLETION = CORRECT + VERIFY_CT


def real_meta_info(monkeypatch) -> dict:
    monkeypatch.setattr(tm, "get_spec", lambda: SimpleNamespace(speculative_num_draft_tokens=4))
    recv = SimpleNamespace(spec_verify_ct=[VERIFY_CT], spec_num_correct_drafts=[CORRECT],
                           completion_tokens=[COMPLETION], spec_correct_drafts_histogram=[HIST],
                           spec_num_cap_tokens=None, spec_num_block_accept_tokens=None,
                           spec_cap_lens_histogram=None)
    meta = {"prompt_tokens": 7, "completion_tokens": COMPLETION}
    tm.TokenizerManager._calculate_spec_decoding_metrics(object.__new__(tm.TokenizerManager),
                                                        meta, recv, 0)
    return meta


@pytest.fixture
def server():
    events: list[dict] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for e in events:
                self.wfile.write(b"data: " + json.dumps(e).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd.server_address[1], events
    httpd.shutdown()
    httpd.server_close()
    t.join(10)


def test_load_reads_what_real_sglang_sends(monkeypatch, server):
    meta = real_meta_info(monkeypatch)
    assert meta["spec_correct_drafts_histogram"] == HIST      # 0.5.12+ name, not spec_accept_*
    assert "spec_accept_histogram" not in meta
    port, events = server
    first = {"text": "a", "meta_info": {"prompt_tokens": 7, "completion_tokens": 1}}
    events += [first, {"text": "ab", "meta_info": meta}]
    res = load.send(port, load.RequestSpec("hi", COMPLETION), 0, False, 0.0, None, 30)
    assert res.success, res.error
    assert res.output_tokens == COMPLETION
    assert res.spec_verify_ct == VERIFY_CT
    assert res.spec_accept_length == pytest.approx(COMPLETION / VERIFY_CT)
    assert res.spec_accept_histogram == HIST


def test_engine_meta_info_uses_the_real_names(monkeypatch):
    """The built-in engine's /generate meta_info carries the same spec keys real SGLang does."""
    real = set(real_meta_info(monkeypatch))
    from specwatch.engine import http_api
    import inspect
    src = inspect.getsource(http_api)
    for key in real - {"prompt_tokens", "completion_tokens"}:
        assert f'"{key}"' in src, key
