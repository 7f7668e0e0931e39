"""The built-in engine as a real process: SGLang HTTP API on 127.0.0.1, SGLang-format log file.

One speculative server (EAGLE3, chain of 3, committed weights) serves most tests; a second,
--dp-size 2 --tp-size 2 server checks rank tags and a clean SIGTERM. Expected outputs come from
the decoder run in this process (greedy), SGLang's formulas, or the request itself.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specwatch.run import prom

REPO = Path(__file__).resolve().parents[1]
TARGET = "builtin:target"  # the committed weights (specwatch/engine/models)
DRAFT = "builtin:draft-eagle3"
INTERVAL = 4  # --decode-log-interval of the main server
STEPS = 3  # chain: topk 1, draft tokens 4
READ_TIMEOUT_S = 3.0  # the main server's request read deadline (slowloris test)
LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)((?: [A-Z]+\d+)*)\] (.*)$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m specwatch.engine` with stderr (SGLang's log) and stdout (access lines) in files."""

    def __init__(self, tmp: Path, args: list[str], env: dict | None = None) -> None:
        self.port = free_port()
        self.log_path = tmp / "server.log"
        self.access_path = tmp / "access.log"
        env = dict(os.environ, **(env or {}),
                   PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.started = time.perf_counter()
        with open(self.log_path, "wb") as err, open(self.access_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "specwatch.engine", "--host", "127.0.0.1",
                 "--port", str(self.port), *args], stdout=out, stderr=err, env=env, cwd=tmp)
        self.health_statuses: list[int] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                status, _ = self.request("GET", "/health", timeout=5)
            except OSError:
                time.sleep(0.02)
                continue
            self.health_statuses.append(status)
            if status == 200:
                self.ready_s = time.perf_counter() - self.started
                return
        self.stop()
        raise AssertionError(f"server not ready in 90 s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, body=None, timeout: float = 60,
                raw: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
            conn.request(method, path, data, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body=None):
        status, data = self.request(method, path, body)
        assert status == 200, (status, data[:500])
        return json.loads(data)

    def sse(self, path: str, body) -> list:
        """POST with stream=true; the `data:` payloads in order (JSON-decoded except [DONE])."""
        status, data = self.request("POST", path, body)
        assert status == 200, (status, data[:500])
        text = data.decode()
        assert text.endswith("data: [DONE]\n\n"), text[-200:]
        events = [e for e in text.split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events)
        return [e[6:] if e[6:] == "[DONE]" else json.loads(e[6:]) for e in events]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("engine"), [
        "--model-path", TARGET, "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", DRAFT, "--speculative-num-steps", str(STEPS),
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(STEPS + 1),
        "--decode-log-interval", str(INTERVAL), "--mem-fraction-static", "0.8",
        "--cuda-graph-max-bs-decode", "8", "--trust-remote-code", "--enable-metrics"],
        env={"SPECWATCH_ENGINE_READ_TIMEOUT_S": str(READ_TIMEOUT_S)})
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def greedy():
    """Greedy continuation by the decoder itself (no speculation, one request at a time)."""
    from specwatch.engine import decode, tokenizer

    dec = decode.SpecDecoder(TARGET, None)

    def run(prompt: str, max_new_tokens: int) -> list[int]:
        req = decode.Request(rid=f"ref-{prompt}-{max_new_tokens}", input_ids=tokenizer.encode(prompt),
                             max_new_tokens=max_new_tokens, temperature=0.0)
        dec.prefill([req])
        while not req.finished:
            dec.decode_step([req])
        dec.release(req)
        return req.output_ids

    return run


def gen(prompt: str, n: int, **extra) -> dict:
    return {"text": prompt, "sampling_params": {"max_new_tokens": n, "temperature": 0, **extra}}


def test_health_is_503_until_warmed_up_then_200(server):
    assert 503 in server.health_statuses and server.health_statuses[-1] == 200
    log = server.log()
    assert log.index("Uvicorn running on") < log.index("The server is fired up and ready to roll!")
    assert server.request("GET", "/health_generate")[0] == 200


def test_startup_lines_and_every_line_prefixed(server):
    log = server.log()
    # SGLang 0.5.23's startup line: the dict form (server_args.resolved_dict())
    args_line = next(l for l in log.splitlines() if "server_args={" in l)
    for part in ("'tp_size': 1", "'dp_size': 1", f"'decode_log_interval': {INTERVAL}",
                 "'speculative_algorithm': 'EAGLE3'", f"'speculative_num_steps': {STEPS}",
                 "'speculative_eagle_topk': 1", f"'speculative_num_draft_tokens': {STEPS + 1}",
                 "'max_running_requests': 48", "'mem_fraction_static': 0.8"):
        assert part in args_line
    assert server.json("GET", "/get_server_info")["version"] == "0.5.23"
    assert "type=LlamaForCausalLMEagle3" in log and "Load weight end. elapsed=" in log
    assert "Ignoring --mem-fraction-static=0.8" in log
    for line in log.splitlines():
        m = LINE.match(line)
        assert m, f"not SGLang-prefixed: {line!r}"
        assert m.group(2) == ""  # tp 1, dp 1: no rank tag (SGLang 0.4.7+)


def test_generate_greedy_equals_decoder_greedy(server, greedy):
    out = server.json("POST", "/generate", gen("The module level function", 40))
    expected = greedy("The module level function", 40)
    assert out["output_ids"] == expected
    from specwatch.engine import tokenizer
    assert out["text"] == tokenizer.decode(expected)
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 40}
    assert meta["prompt_tokens"] == len("The module level function")
    assert meta["completion_tokens"] == 40
    ct = meta["spec_verify_ct"]
    assert 1 <= ct <= 39
    assert meta["spec_accept_length"] == pytest.approx(40 / ct)  # SGLang 0.5.4+ definition
    hist = meta["spec_correct_drafts_histogram"]  # SGLang 0.5.12+ name; grows to the largest count
    assert len(hist) <= STEPS + 1 and hist[-1] > 0 and sum(hist) == ct
    drafts = sum(k * c for k, c in enumerate(hist))
    assert meta["spec_accept_rate"] == pytest.approx(drafts / (ct * STEPS))
    assert meta["e2e_latency"] > 0


def test_generate_stream_is_cumulative_and_ends_like_non_stream(server):
    body = gen("import os", 24)
    full = server.json("POST", "/generate", body)
    events = server.sse("/generate", {**body, "stream": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) >= 2
    lengths = [len(c["output_ids"]) for c in chunks]
    assert lengths == sorted(lengths) and lengths[0] >= 1
    for a, b in zip(chunks, chunks[1:]):
        assert b["text"].startswith(a["text"])
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["text"] == full["text"]
    assert chunks[-1]["output_ids"] == full["output_ids"]
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 24}


def test_stop_string_trims_text_and_reports_match(server, greedy):
    from specwatch.engine import tokenizer

    ref = tokenizer.decode(greedy("The value of", 60))
    m = re.compile(r"[A-Za-z][a-z ]{2}").search(ref, 10)
    assert m, f"no ASCII word in the greedy output {ref!r}"
    stop = m.group(0)  # a string the greedy output is known to contain
    cut = ref.index(stop)
    out = server.json("POST", "/generate", gen("The value of", 60, stop=[stop]))
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == ref[:cut]
    assert out["meta_info"]["completion_tokens"] == len((ref[:cut] + stop).encode())
    events = server.sse("/v1/completions", {"prompt": "The value of", "max_tokens": 60,
                                            "temperature": 0, "stop": stop, "stream": True})
    streamed = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert streamed == ref[:cut]  # a stop string is never sent, even in part
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_openai_completions_plain_and_streaming(server, greedy):
    from specwatch.engine import tokenizer

    body = {"model": "builtin:target", "prompt": "def main():", "max_tokens": 20, "temperature": 0}
    out = server.json("POST", "/v1/completions", body)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    choice = out["choices"][0]
    assert choice["text"] == tokenizer.decode(greedy("def main():", 20))
    assert choice["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 11, "completion_tokens": 20, "total_tokens": 31}
    events = server.sse("/v1/completions", {**body, "stream": True,
                                            "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 20
    text_chunks = events[:-2]
    assert "".join(e["choices"][0]["text"] for e in text_chunks) == choice["text"]
    assert text_chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_openai_chat_plain_and_streaming(server):
    body = {"model": "builtin:target", "messages": [{"role": "user", "content": "Say hello"}],
            "max_tokens": 16, "temperature": 0}
    out = server.json("POST", "/v1/chat/completions", body)
    assert out["object"] == "chat.completion"
    msg = out["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    assert out["usage"]["completion_tokens"] == 16
    events = server.sse("/v1/chat/completions", {**body, "stream": True})
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == msg["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_models_and_model_info(server):
    models = server.json("GET", "/v1/models")
    assert models["data"][0]["id"] == TARGET
    info = server.json("GET", "/model_info")
    assert info["is_generation"] is True and info["architectures"] == ["LlamaForCausalLM"]


def test_parallel_requests_get_their_own_greedy_outputs(server, greedy):
    prompts = [("The file", 16), ("import sys", 10), ("class A:", 14), ("return the", 20),
               ("For example", 8), ("os.path", 12)]
    results: dict[int, dict] = {}

    def worker(i: int) -> None:
        p, n = prompts[i]
        # two clients reuse one rid: SGLang-style clients may, the server must not care
        results[i] = server.json("POST", "/generate", {**gen(p, n), **({"rid": "dup"} if i < 2 else {})})

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, (p, n) in enumerate(prompts):
        assert results[i]["output_ids"] == greedy(p, n), p
    log = server.log()
    assert re.search(r"Decode batch, #running-req: [2-6],", log), "requests never shared a batch"


def test_bad_requests_get_4xx_json_and_server_keeps_serving(server):
    ctx = server.json("GET", "/v1/models")["data"][0]["max_model_len"]
    cases = [
        ("POST", "/generate", None, b"{not json"),
        ("POST", "/generate", gen("x", -1), None),
        ("POST", "/generate", {"text": "x", "bogus_field": 1}, None),
        ("POST", "/generate", {"text": 5}, None),
        ("POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": "ten"}}, None),
        ("POST", "/generate", {"text": "x", "sampling_params": {"temprature": 0}}, None),
        ("POST", "/generate", {"text": "x", "input_ids": [1]}, None),
        ("POST", "/generate", {"input_ids": [300]}, None),
        ("POST", "/generate", gen("x" * ctx, 10), None),  # prompt fills the context
        ("POST", "/generate", gen("x" * (ctx - 50), 100), None),  # prompt + new > context
        ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 4, "n": 3}, None),
        ("POST", "/v1/chat/completions", {"messages": "hi"}, None),
        ("POST", "/v1/completions", {"prompt": "x", "frobnicate": True}, None),
    ]
    for method, path, body, raw in cases:
        status, data = server.request(method, path, body, raw=raw)
        assert 400 <= status < 500, (path, body, status, data[:200])
        err = json.loads(data)
        message = err["message"] if path.startswith("/v1/") else err["error"]["message"]
        assert message
    assert server.request("GET", "/no/such/path")[0] == 404
    assert server.request("GET", "/generate")[0] == 405
    # keep-alive: an error answered before the body is used must not desync the connection
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        for method, path, body, want in (("POST", "/no/such/path", b'{"a": 1}', 404),
                                         ("POST", "/generate", b"{bad", 400),
                                         ("GET", "/v1/models", None, 200)):
            conn.request(method, path, body)
            resp = conn.getresponse()
            assert (resp.status, json.loads(resp.read()) is not None) == (want, True)
    finally:
        conn.close()
    ok = server.json("POST", "/generate", gen("still alive", 3))
    assert ok["meta_info"]["completion_tokens"] == 3


def _decode_lines(log: str) -> list[dict]:
    out = []
    for line in log.splitlines():
        m = LINE.match(line)
        if m and m.group(3).startswith("Decode batch, "):
            fields = dict(kv.split(": ", 1) for kv in m.group(3)[len("Decode batch, "):].split(", "))
            out.append({"tags": m.group(2).split(), **fields})
    return out


def test_flush_cache_then_decode_lines_every_interval_match_the_request(server):
    """After /flush_cache (forward_ct_decode = 0), one request of V verify steps gives V // N
    lines; each line's accept len x N is the tokens of its N steps (bs = 1)."""
    server.json("POST", "/generate", gen("warm", 20))
    assert "avg_spec_accept_length" in server.json("GET", "/server_info")["internal_states"][0]
    status, body = server.request("POST", "/flush_cache")
    assert status == 200 and body.startswith(b"Cache flushed.")
    assert "avg_spec_accept_length" not in server.json("GET", "/server_info")["internal_states"][0]
    before = server.log().rsplit("Cache flushed successfully!", 1)
    assert len(before) == 2

    out = server.json("POST", "/generate", gen("The standard library", 80))
    meta = out["meta_info"]
    verify_ct, completion = meta["spec_verify_ct"], meta["completion_tokens"]
    lines = _decode_lines(server.log().rsplit("Cache flushed successfully!", 1)[1])
    assert len(lines) == verify_ct // INTERVAL
    window_tokens = 0.0
    for line in lines:
        assert line["#running-req"] == "1" and line["#queue-req"] == "0"
        accept_len, accept_rate = float(line["accept len"]), float(line["accept rate"])
        assert 1.0 <= accept_len <= STEPS + 1
        # SGLang 0.5.11+: accept rate = (accept len - 1) / (num_draft_tokens - 1) for a chain
        assert accept_rate == pytest.approx((accept_len - 1) / STEPS, abs=0.006)
        assert float(line["gen throughput (token/s)"]) > 0
        window_tokens += accept_len * INTERVAL
    decode_tokens = completion - 1  # the first token comes from prefill
    rest_steps = verify_ct - len(lines) * INTERVAL
    slack = 0.005 * INTERVAL * len(lines)  # the line rounds accept len to 2 decimals
    assert rest_steps - slack <= decode_tokens - window_tokens <= rest_steps * (STEPS + 1) + slack
    info = server.json("GET", "/server_info")
    avg = info["internal_states"][0]["avg_spec_accept_length"]
    assert avg == pytest.approx(window_tokens / (len(lines) * INTERVAL), abs=0.006)


def test_server_info_fields(server):
    info = server.json("GET", "/server_info")
    assert info["version"] and info["speculative_algorithm"] == "EAGLE3"
    assert info["speculative_num_draft_tokens"] == STEPS + 1 and info["decode_log_interval"] == INTERVAL
    state = info["internal_states"][0]
    assert state["last_gen_throughput"] >= 0 and state["effective_max_running_requests_per_dp"] >= 1
    assert server.json("GET", "/get_server_info")["internal_states"]
    assert "Endpoint '/get_server_info' is deprecated" in server.log()


def test_metrics_text_has_sglang_names_and_labels(server):
    server.json("POST", "/generate", gen("metrics", 16))
    status, data = server.request("GET", "/metrics")
    assert status == 200
    text = data.decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            values[name_labels] = float(value)
    labels = '{model_name="%s",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"}' % TARGET
    for name in ("spec_accept_length", "spec_accept_rate", "gen_throughput", "num_running_reqs",
                 "num_queue_reqs", "token_usage"):
        assert f"# TYPE sglang:{name} gauge" in text
        assert f"sglang:{name}{labels}" in values
    assert 1.0 <= values[f"sglang:spec_accept_length{labels}"] <= STEPS + 1
    assert values[f"sglang:spec_num_steps{labels}"] == STEPS
    assert values[f"sglang:spec_num_draft_tokens{labels}"] == STEPS + 1
    # SGLang 0.5.23's tokenizer counters: model_name, engine_type (+ is_streaming on token counts)
    tok = 'model_name="%s",engine_type="unified"' % TARGET
    assert values['sglang:prompt_tokens_total{%s,is_streaming="false"}' % tok] >= len("metrics")
    gen_key = 'sglang:generation_tokens_total{%s,is_streaming="false"}' % tok
    verify_key = 'sglang:spec_verify_calls_total{%s}' % tok
    assert values[gen_key] >= 16 and values[verify_key] > 0
    # one more request: the counters move by exactly what its meta_info reports
    meta = server.json("POST", "/generate", gen("metrics again", 24))["meta_info"]
    page = prom.parse(server.request("GET", "/metrics")[1].decode())   # prometheus-client's parser
    after = {s.name: s.value for s in page if dict(s.labels).get("model_name") == TARGET
             and s.name.endswith("_total")}
    assert after["sglang:generation_tokens_total"] - values[gen_key] == meta["completion_tokens"]
    assert after["sglang:spec_verify_calls_total"] - values[verify_key] == meta["spec_verify_ct"] > 0



def test_log_has_zero_rejected_lines_for_specwatch_parser(server, tmp_path):
    server.json("POST", "/generate", gen("parse me", 12))
    log = tmp_path / "engine.log"  # both streams, as a launcher that merges them would write
    log.write_text(server.log() + server.access_path.read_text())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parsed = subprocess.run([sys.executable, "-m", "specwatch.cli", "parse", str(log), "--all"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert parsed.returncode == 0, parsed.stderr
    kinds = [json.loads(l)["kind"] for l in parsed.stdout.splitlines()]
    assert "rejected" not in kinds
    assert kinds.count("sglang_decode") == len(_decode_lines(server.log()))
    assert "server_args" in kinds and "ready" in kinds
    db = tmp_path / "x.duckdb"
    ing = subprocess.run([sys.executable, "-m", "specwatch.cli", "ingest", str(log), "--db", str(db)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert ing.returncode == 0, ing.stderr
    q = subprocess.run([sys.executable, "-m", "specwatch.cli", "sql",
                        "select count(*) as n from rejected_lines", "--db", str(db), "--format", "json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout)[0]["n"] == 0


@pytest.mark.slow  # a second server: ~15 s on a loaded 2-core box
def test_adaptive_schedule_picks_depth_by_batch_size_and_keeps_greedy_output(tmp_path, greedy):
    """--speculative-adaptive with a fixed schedule (one candidate per slot, what `specwatch
    recommend` writes): 3 steps alone, none from 3 requests up; outputs stay greedy."""
    cfg = tmp_path / "schedule.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [3]}, "3": {"candidate_steps": [0]}}))
    s = Server(tmp_path, ["--model-path", TARGET, "--speculative-algorithm", "EAGLE3",
                          "--speculative-draft-model-path", DRAFT, "--speculative-adaptive",
                          "--speculative-adaptive-config", str(cfg), "--decode-log-interval", "1"])
    try:
        alone = s.json("POST", "/generate", gen("The file", 24))
        prompts = [("import sys", 20), ("class A:", 20), ("return the", 20), ("For example", 20)]
        results: dict[int, dict] = {}
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(
            i, s.json("POST", "/generate", gen(*prompts[i])))) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        assert s.stop() == 0
    assert alone["output_ids"] == greedy("The file", 24)
    assert alone["meta_info"]["spec_verify_ct"] < 23     # drafted: fewer verifies than tokens
    for i, (p, n) in enumerate(prompts):
        assert results[i]["output_ids"] == greedy(p, n), p
    log = s.log()
    assert "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[3]" in log
    assert "speculative_adaptive': True" in log
    lines = _decode_lines(log)                            # one line per step (interval 1)
    big = [w for w in lines if int(w["#running-req"]) >= 3]
    small = [w for w in lines if int(w["#running-req"]) == 1]
    assert big and all(w["accept len"] == "1.00" for w in big), big   # steps 0: root only
    assert any(float(w["accept len"]) > 1 for w in small), small


def test_dp2_tp2_lines_are_rank_tagged_and_sigterm_exits_zero(tmp_path):
    s = Server(tmp_path, ["--model-path", TARGET, "--dp-size", "2", "--tp-size", "2",
                          "--decode-log-interval", "2"], env={"SGLANG_LOG_MS": "1"})
    try:
        threads = [threading.Thread(target=s.json, args=("POST", "/generate", gen(p, 12)))
                   for p in ("alpha", "beta", "gamma", "delta")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        # no --enable-metrics: SGLang mounts no /metrics page, so neither does the engine
        assert s.request("GET", "/metrics")[0] == 404
    finally:
        t0 = time.monotonic()
        rc = s.stop()
        stop_s = time.monotonic() - t0
    assert rc == 0 and stop_s < 10
    log = s.log()
    for rank in ("DP0 TP0", "DP1 TP0"):  # SGLANG_LOG_MS=1: milliseconds before the tags
        assert re.search(rf"^\[[\d-]+ [\d:]+\.\d{{3}} {rank}\] Decode batch, ", log, re.M), rank
        assert re.search(rf"^\[[\d-]+ [\d:]+\.\d{{3}} {rank}\] Prefill batch, ", log, re.M), rank
    assert "accept len" not in log  # no speculation: no accept fields
    assert re.search(r"^\[[^\]]*\d\] server_args=\{", log, re.M)  # main process: no tag


# ------------------------------------------------------------------ the engine stays up

def test_nan_inf_negative_and_tiny_temperatures_are_handled_like_sglang(server):
    """SGLang 0.5.23 SamplingParams: verify() refuses non-finite or negative temperatures (400);
    __post_init__ makes 0 <= temperature < 1e-6 greedy. The server survives every one."""
    for raw, shown in ((b"NaN", "nan"), (b"Infinity", "inf"), (b"-Infinity", "-inf"),
                       (b"-1e-40", "-1e-40")):
        body = b'{"text": "x", "sampling_params": {"max_new_tokens": 4, "temperature": ' + \
            raw + b"}}"
        status, data = server.request("POST", "/generate", raw=body)
        assert status == 400, (raw, status, data[:200])
        assert json.loads(data)["error"]["message"] == \
            f"temperature must be a non-negative finite number, got {shown}."
    greedy_out = server.json("POST", "/generate", gen("tiny temperature", 8))["output_ids"]
    for tiny in (1e-39, 5e-324, 9.9e-7):
        out = server.json("POST", "/generate", gen("tiny temperature", 8, temperature=tiny))
        assert out["output_ids"] == greedy_out, tiny
    status, data = server.request("POST", "/v1/completions", raw=b'{"prompt": "x", '
                                  b'"max_tokens": 2, "temperature": NaN}')
    assert status == 400 and "non-negative finite" in json.loads(data)["message"]
    assert server.request("GET", "/health")[0] == 200


def test_deep_and_huge_bodies_are_4xx_not_500(server):
    deep = b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, data = server.request("POST", "/generate", raw=deep)
    assert status == 400 and "nested too deeply" in json.loads(data)["error"]["message"]
    status, data = server.request("POST", "/v1/completions", raw=b"[" * 100_000)
    assert status == 400
    huge_int = b'{"text": "x", "sampling_params": {"max_new_tokens": ' + b"9" * 5000 + b"}}"
    status, data = server.request("POST", "/generate", raw=huge_int)
    assert status == 400 and "invalid JSON body" in json.loads(data)["error"]["message"]
    # A Content-Length over the limit is refused without reading (and the connection closed).
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as c:
        c.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 999999999999\r\n\r\n{")
        head = c.recv(4096)
    assert head.startswith(b"HTTP/1.1 413 "), head[:100]
    assert server.json("POST", "/generate", gen("still up", 2))["meta_info"]["completion_tokens"] == 2


def test_64_concurrent_clients_get_no_connection_resets(server):
    """A burst of 64 connections at once (listen backlog 5 reset a third of them)."""
    results: list = [None] * 64
    go = threading.Barrier(64)

    def client(i: int) -> None:
        go.wait()
        try:
            results[i] = server.request("POST", "/generate", gen(f"client {i}", 2), timeout=300)[0]
        except OSError as e:
            results[i] = repr(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert results == [200] * 64, [r for r in results if r != 200][:5]


def test_slowloris_and_idle_connections_are_cut_at_the_read_deadline(server):
    """Clients that send nothing, or a header line at a time, are shut down after the read
    deadline; the server keeps answering meanwhile and no handler thread is left waiting."""
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(20)]
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    slow.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < READ_TIMEOUT_S + 3:
            try:
                slow.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
            time.sleep(0.5)
        assert server.json("POST", "/generate", gen("not blocked", 2))["output_ids"]
        for c in idle + [slow]:
            c.settimeout(READ_TIMEOUT_S + 10)
            try:
                assert c.recv(1) == b""      # closed by the server
            except ConnectionResetError:
                pass
        assert time.monotonic() - t0 < 3 * READ_TIMEOUT_S + 20
    finally:
        for c in idle + [slow]:
            c.close()
    assert server.request("GET", "/health")[0] == 200


def test_an_exception_in_a_scheduler_step_fails_that_request_not_the_scheduler():
    """A real scheduler thread with the committed weights; a request the HTTP layer would have
    refused (a token id outside the vocabulary) makes the prefill raise IndexError inside the
    model: that request gets a 500 error event, the next one is served."""
    import queue as queue_mod

    from specwatch.engine import args as args_mod
    from specwatch.engine import scheduler as sched_mod

    parsed = args_mod.parse_args(["--model-path", TARGET, "--port", "0"])
    fatal: list = []
    s = sched_mod.Scheduler(parsed.server_args, dp_rank=None, device="cpu", context_len=256,
                            on_fatal=fatal.append)
    s.start()
    try:
        assert s.loaded.wait(120) and s.load_error is None
        bad: queue_mod.Queue = queue_mod.Queue()
        s.submit(sched_mod.GenRequest(rid="bad", index=0, input_ids=[1, 10**6], max_new_tokens=4,
                                      out=bad, temperature=0.0))
        ev = bad.get(timeout=120)
        assert isinstance(ev, sched_mod.ErrorEvent) and ev.status == 500
        assert "IndexError" in ev.message
        good: queue_mod.Queue = queue_mod.Queue()
        s.submit(sched_mod.GenRequest(rid="good", index=0, input_ids=[72, 105], max_new_tokens=3,
                                      out=good, temperature=0.0))
        while not isinstance(ev := good.get(timeout=120), sched_mod.FinishEvent):
            assert not isinstance(ev, sched_mod.ErrorEvent), ev
        assert len(ev.output_ids) == 3 and not fatal and s.is_alive()
    finally:
        s.stop()
        s.join(30)
