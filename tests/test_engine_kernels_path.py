"""The decoder through the Triton kernels: SPECWATCH_KERNELS=triton on CPU tensors, interpreted.

tests/conftest.py sets TRITON_INTERPRET=1, so `specwatch_kernels.ops` runs the real Triton programs (draft
top-k, candidate selection, organize, greedy verify) in the interpreter. Greedy output must equal
the torch-reference path and plain (draft-free) decoding token for token. A spy counts the calls
into the Triton launchers (it still runs them) so the test cannot pass on the references alone.
The CUDA cases run only where torch sees a GPU (never in CI; see benchmarks/gpu_engine_identity.py):
CUDA-graph steps equal eager steps and plain decoding, with no implicit device->host sync per step.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from specwatch_kernels import _draft_topk_triton, _select_tree_triton, _verify_tree_triton  # noqa: E402
from specwatch.engine.decode import Request, SpecDecoder  # noqa: E402
from specwatch.engine.model import models_dir  # noqa: E402
from specwatch.engine.train import line_start_prompts, load_corpus  # noqa: E402

TARGET = models_dir() / "target"
DRAFT = models_dir() / "draft-eagle3"
NEW_TOKENS = 12


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny matmuls: one thread avoids OpenMP spin-waiting on a busy 2-core CI box."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def prompts():
    _, held_out = load_corpus()
    return line_start_prompts(held_out, 2, 48)


@pytest.fixture(scope="module")
def plain(prompts):
    return serve(SpecDecoder(TARGET), prompts)


def serve(dec, prompts, temperature=0.0):
    """Both prompts in one batch (slot order, compaction and per-request paths all exercised)."""
    reqs = [Request(f"r{i}", list(p), NEW_TOKENS, temperature=temperature, seed=7)
            for i, p in enumerate(prompts)]
    dec.prefill(reqs)
    while not all(r.finished for r in reqs):
        dec.decode_step(reqs)
    for r in reqs:
        dec.release(r)
    return [r.output_ids for r in reqs]


@pytest.fixture
def triton_calls(monkeypatch):
    """Force the Triton path and count launcher calls by name."""
    monkeypatch.setenv("SPECWATCH_KERNELS", "triton")
    calls: dict[str, int] = {}
    for mod, name in [(_draft_topk_triton, "draft_topk_triton"), (_select_tree_triton, "select_tree_triton"),
                      (_select_tree_triton, "organize_triton"), (_verify_tree_triton, "verify_tree_triton")]:
        real = getattr(mod, name)

        def spy(*a, _real=real, _name=name, **kw):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*a, **kw)

        monkeypatch.setattr(mod, name, spy)
    return calls


@pytest.mark.parametrize("steps,topk,ndt", [(3, 1, 4), (3, 4, 8)], ids=["chain", "tree"])
def test_triton_path_equals_reference_and_plain(prompts, plain, triton_calls, monkeypatch, steps, topk, ndt):
    dec = SpecDecoder(TARGET, DRAFT, num_steps=steps, topk=topk, num_draft_tokens=ndt)
    via_triton = serve(dec, prompts)
    assert set(triton_calls) == {"draft_topk_triton", "select_tree_triton", "organize_triton",
                                 "verify_tree_triton"}, triton_calls
    monkeypatch.setenv("SPECWATCH_KERNELS", "torch")
    via_torch = serve(dec, prompts)
    assert via_triton == via_torch
    assert via_triton == plain
    assert all(len(o) == NEW_TOKENS for o in via_triton)


def test_triton_path_sampling_equals_reference(prompts, triton_calls, monkeypatch):
    """Sampling draws on the host from the request's generator: same seed, same tokens either way."""
    dec = SpecDecoder(TARGET, DRAFT, num_steps=2, topk=2, num_draft_tokens=4)
    via_triton = serve(dec, prompts, temperature=0.8)
    assert triton_calls.get("draft_topk_triton", 0) > 0
    monkeypatch.setenv("SPECWATCH_KERNELS", "torch")
    assert serve(dec, prompts, temperature=0.8) == via_triton


class _HostCopiesAsOnCuda(SpecDecoder):
    """The decoder with its CUDA-only branches of the eager step switched on (tree built with
    build_tree_device, one fused device->host copy per step, sampling distributions packed into it
    as fp32 bit patterns) but no pinned memory, which needs a GPU: the CI machine has none, so this
    is the only place those branches run there."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._on_cuda = True

    def _dev(self, data, dtype=torch.long):
        return torch.tensor(data, dtype=dtype)


@pytest.mark.parametrize("steps,topk,ndt", [(3, 4, 8), (1, 2, 3)], ids=["tree", "one-step"])
def test_cuda_host_copy_branches_change_nothing(prompts, monkeypatch, steps, topk, ndt):
    monkeypatch.setenv("SPECWATCH_KERNELS", "torch")
    kw = dict(num_steps=steps, topk=topk, num_draft_tokens=ndt)
    as_cuda = _HostCopiesAsOnCuda(TARGET, DRAFT, **kw)
    as_cpu = SpecDecoder(TARGET, DRAFT, **kw)
    assert serve(as_cuda, prompts) == serve(as_cpu, prompts)
    assert serve(as_cuda, prompts, temperature=0.7) == serve(as_cpu, prompts, temperature=0.7)


def test_device_errors_name_the_fix():
    with pytest.raises(ValueError, match="runs on 'cpu' or 'cuda'"):
        SpecDecoder(TARGET, device="meta")
    with pytest.raises(ValueError, match="not a torch device"):
        SpecDecoder(TARGET, device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA GPU.*device='cpu'"):
            SpecDecoder(TARGET, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_decoder_matches_plain_and_keeps_state_on_device(prompts, monkeypatch):
    monkeypatch.delenv("SPECWATCH_KERNELS", raising=False)
    dec = SpecDecoder(TARGET, DRAFT, num_steps=3, topk=4, num_draft_tokens=8, device="cuda")
    assert dec._tk.is_cuda and dec.hot.is_cuda and next(dec.target.parameters()).is_cuda
    spec = serve(dec, prompts)
    assert spec == serve(SpecDecoder(TARGET, device="cuda"), prompts)


# ----------------------------------------------------------------------------- server --device


def _launch(tmp_path, *args):
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = tmp_path / "server.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "specwatch.engine", "--host", "127.0.0.1",
                                 "--port", str(port), "--model-path", "builtin:target", *args],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tmp_path)
    return proc, port, log


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_server_device_cuda_without_gpu_exits_with_the_fix(tmp_path):
    proc, _, log = _launch(tmp_path, "--device", "cuda")
    assert proc.wait(timeout=90) == 1
    text = log.read_text(errors="replace")
    assert "device='cuda'" in text and "sees no CUDA GPU" in text and "--device cpu" in text, text[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_server_device_cuda_serves_greedy_like_the_cuda_decoder(tmp_path, monkeypatch):
    import http.client
    import json
    import signal
    import time

    from specwatch.engine import tokenizer

    monkeypatch.delenv("SPECWATCH_KERNELS", raising=False)
    proc, port, log = _launch(tmp_path, "--device", "cuda", "--speculative-algorithm", "EAGLE3",
                              "--speculative-draft-model-path", "builtin:draft-eagle3",
                              "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                              "--speculative-num-draft-tokens", "8")
    try:
        deadline, body = time.monotonic() + 120, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/generate", json.dumps(
                    {"text": "The module level function", "sampling_params": {"max_new_tokens": 40,
                                                                              "temperature": 0}}),
                    {"Content-Type": "application/json"})
                resp = conn.getresponse()
                if resp.status == 200:
                    body = json.loads(resp.read())
                    break
                resp.read()
            except OSError:
                pass
            time.sleep(0.1)
        assert body is not None, log.read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    dec = SpecDecoder(TARGET, device="cuda")
    req = Request("ref", tokenizer.encode("The module level function"), 40)
    dec.prefill([req])
    while not req.finished:
        dec.decode_step([req])
    assert body["output_ids"] == req.output_ids
    assert "cuda graph" in log.read_text(errors="replace")


def _serve_no_sync(dec, prompts, monkeypatch, new_tokens=NEW_TOKENS):
    """serve(), with every decode step under torch's sync debug mode "error": a step may not
    read the device back implicitly (.item(), .tolist(), blocking copies); its one explicit wait
    (after the graph's output copy) is let through and counted: exactly one per step. Greedy
    prompts within the prefill buckets prefill through their graph too: one wait per request."""
    waits = []
    real_wait = type(dec.graphs)._wait

    def wait(self):
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)
        real_wait(self)
        waits.append(1)
        torch.cuda.set_sync_debug_mode(mode)

    monkeypatch.setattr(type(dec.graphs), "_wait", wait)
    reqs = [Request(f"g{i}", list(p), new_tokens + 5 * i) for i, p in enumerate(prompts)]
    assert all(dec.graphs.fits_prefill(r) for r in reqs)
    dec.prefill(reqs)
    assert len(waits) == len(reqs)
    waits.clear()
    steps = 0
    while not all(r.finished for r in reqs):
        torch.cuda.set_sync_debug_mode("error")
        try:
            dec.decode_step(reqs)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        steps += 1
    for r in reqs:
        dec.release(r)
    assert len(waits) == steps
    monkeypatch.setattr(type(dec.graphs), "_wait", real_wait)
    return [r.output_ids for r in reqs]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kw", [dict(), dict(num_steps=3, topk=1, num_draft_tokens=4),
                                dict(num_steps=3, topk=4, num_draft_tokens=8)], ids=["plain", "chain", "tree"])
def test_cuda_graph_steps_equal_eager_steps_without_hidden_syncs(prompts, monkeypatch, kw):
    monkeypatch.delenv("SPECWATCH_KERNELS", raising=False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    draft = DRAFT if kw else None
    graph = SpecDecoder(TARGET, draft, device="cuda", **kw)
    # two decode graphs (dense and gather) per batch bucket, one prefill graph per prompt-length bucket
    assert graph.capture_cuda_graphs() == 2 * len(graph.graphs.buckets) + len(graph.graphs.prefill_buckets)
    assert len(graph.graphs.prefill_buckets) >= 1
    eager = SpecDecoder(TARGET, draft, device="cuda", cuda_graph=False, **kw)
    assert eager.graphs is None
    captured = len(graph.graphs._entries)
    via_graph = _serve_no_sync(graph, prompts, monkeypatch)
    assert via_graph == serve_lengths(eager, prompts)
    assert via_graph == serve_lengths(SpecDecoder(TARGET, device="cuda", cuda_graph=False), prompts)  # plain
    assert all(e.graph is not None for e in graph.graphs._entries.values())
    assert len(graph.graphs._entries) == captured  # nothing was captured while serving


def serve_lengths(dec, prompts, new_tokens=NEW_TOKENS):
    reqs = [Request(f"p{i}", list(p), new_tokens + 5 * i) for i, p in enumerate(prompts)]
    dec.prefill(reqs)
    while not all(r.finished for r in reqs):
        dec.decode_step(reqs)
    return [r.output_ids for r in reqs]
