"""Write `sample_logs/`: deterministic, realistic-looking SGLang and vLLM logs of several eras.

The lines follow the format strings in shared/formats/LOG_FORMATS.md (constructed, not captured).
Re-running produces byte-identical files (fixed seed, fixed clock). Run from the repo root:
    python scripts/make_sample_logs.py
"""
from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "sample_logs"
MODEL = "/models/Llama-3.1-8B-Instruct"
DRAFT = "/models/sglang-EAGLE3-LLaMA3.1-Instruct-8B"


def server_args_repr(**kw) -> str:
    base = dict(model_path=MODEL, tokenizer_path=MODEL, tokenizer_mode="auto", skip_tokenizer_init=False,
                load_format="auto", trust_remote_code=False, dtype="auto", kv_cache_dtype="auto",
                quantization=None, context_length=None, device="cuda", served_model_name=MODEL,
                chat_template=None, is_embedding=False, revision=None, host="127.0.0.1", port=30000,
                mem_fraction_static=0.8, max_running_requests=None, max_total_tokens=None,
                chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy="fcfs",
                schedule_conservativeness=1.0, cpu_offload_gb=0, tp_size=1, dp_size=1, pp_size=1,
                ep_size=1, stream_interval=1, random_seed=42, log_level="info", log_requests=False,
                show_time_cost=False, enable_metrics=False, decode_log_interval=40,
                speculative_algorithm=None, speculative_draft_model_path=None,
                speculative_num_steps=None, speculative_eagle_topk=None,
                speculative_num_draft_tokens=None, speculative_accept_threshold_single=1.0,
                speculative_accept_threshold_acc=1.0, speculative_token_map=None,
                attention_backend="flashinfer", disable_cuda_graph=False, cuda_graph_max_bs=160,
                enable_dp_attention=False, custom_sigquit_handler=None)
    base.update(kw)
    return base


def fmt_repr(args: dict) -> str:
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def fmt_dict(args: dict) -> str:
    return "server_args=" + repr(args)


class Clock:
    def __init__(self, start: str):
        self.t = dt.datetime.fromisoformat(start)

    def tick(self, s: float) -> None:
        self.t += dt.timedelta(seconds=s)

    def stamp(self, ms: bool = False) -> str:
        return self.t.strftime("%Y-%m-%d %H:%M:%S") + (f".{self.t.microsecond // 1000:03d}" if ms else "")


def startup_noise(c: Clock, spec: bool, tags: list[str]) -> list[str]:
    out = []
    if spec:
        out.append(f"[{c.stamp()}] Overlap scheduler is disabled because of using eagle speculative decoding.")
        out.append(f"[{c.stamp()}] Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.")
    for tag in tags:
        out.append(f"[{c.stamp()}{tag}] Load weight end. elapsed=4.21 s, type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.10 GB, mem usage=15.06 GB.")
        if spec:
            out.append(f"[{c.stamp()}{tag}] Load weight end. elapsed=0.52 s, type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=61.30 GB, mem usage=0.80 GB.")
        out.append(f"[{c.stamp()}{tag}] max_total_num_tokens=413000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=131072, available_gpu_mem=12.20 GB")
    out.append("Capturing batches (bs=160 avail_mem=20.27 GB):  45%|████▌     | 10/22 [00:02<00:02,  4.81it/s]\rCapturing batches (bs=48 avail_mem=20.20 GB): 100%|██████████| 22/22 [00:04<00:00,  5.01it/s]")
    if spec:
        out.append(f"[{c.stamp()}{tags[0]}] Capture draft cuda graph begin. This can take up to several minutes. avail mem=19.80 GB")
        out.append(f"[{c.stamp()}{tags[0]}] Capture draft cuda graph end. Time elapsed: 6.12 s. mem usage=0.41 GB. avail mem=19.39 GB.")
    return out


def serve_log(path: Path, *, era: str, args: dict, spec: bool, al: float, base_tps: float,
              draft_tokens: int | None, tags: list[str], windows: int, seed: int,
              start: str = "2026-10-31 08:59:50", with_noise: bool = True) -> None:
    """A server's life: startup, warmup, one load at concurrency 8, decode windows per DP rank."""
    rng = random.Random(seed)
    c = Clock(start)
    lines = []
    if era == "0.5.23":
        lines.append(f"[{c.stamp()}] {fmt_dict(args)}")
    else:
        lines.append(f"[{c.stamp()}] {fmt_repr(args)}")
    if with_noise:
        lines += startup_noise(c, spec, tags)
    c.tick(20)
    # warmup request
    for tag in tags[:1]:
        lines.append(_prefill(era, c, tag, 1, 7, 0, 0, 0, rng))
    lines.append(f"[{c.stamp()}] INFO:     127.0.0.1:40012 - \"POST /generate HTTP/1.1\" 200 OK")
    lines.append(f"[{c.stamp()}] The server is fired up and ready to roll!")
    c.tick(30)
    lines.append(f"[{c.stamp()}] INFO:     127.0.0.1:40020 - \"POST /flush_cache HTTP/1.1\" 200 OK")
    for tag in tags:
        lines.append(_prefill(era, c, tag, 8, 8 * 512, 0, 8, 0, rng))
    for w in range(windows):
        c.tick(1.0 + rng.random() * 0.2)
        for tag in tags:
            a = max(1.0, rng.gauss(al, 0.08)) if spec else None
            tps = base_tps * (rng.gauss(1.0, 0.03)) * (1.0 if w else 0.55)  # first window: idle gap
            lines.append(_decode(era, c, tag, 8, 4096 + 40 * w, a, draft_tokens, tps, rng))
        if with_noise and w == windows // 2:
            lines.append(f"[{c.stamp()}] INFO:     127.0.0.1:40031 - \"POST /generate HTTP/1.1\" 200 OK")
            lines.append(f"[{c.stamp()}] Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use '/server_info' instead.")
    path.write_text("\n".join(lines) + "\n")


def _prefill(era, c, tag, seqs, new, cached, running, queue, rng) -> str:
    usage = 0.01
    if era.startswith("0.4"):
        return (f"[{c.stamp()}{tag}] Prefill batch. #new-seq: {seqs}, #new-token: {new}, #cached-token: {cached}, "
                f"cache hit rate: 0.00%, token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}")
    if era == "0.5.1":
        return (f"[{c.stamp()}{tag}] Prefill batch. #new-seq: {seqs}, #new-token: {new}, #cached-token: {cached}, "
                f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, ")
    if era == "0.5.4":
        return (f"[{c.stamp()}{tag}] Prefill batch [{rng.randint(1, 99)}], #new-seq: {seqs}, #new-token: {new}, "
                f"#cached-token: {cached}, token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, ")
    if era == "0.5.9":
        return (f"[{c.stamp()}{tag}] Prefill batch, #new-seq: {seqs}, #new-token: {new}, #cached-token: {cached}, "
                f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
                f"input throughput (token/s): {new / 0.05:.2f}, cuda graph: False")
    return (f"[{c.stamp()}{tag}] Prefill batch, #new-seq: {seqs}, #new-token: {new}, #cached-token: {cached}, "
            f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, #pending-token: 0, "
            f"cuda graph: False, input throughput (token/s): {new / 0.05:.2f}")


def _decode(era, c, tag, running, tokens, al, draft_tokens, tps, rng) -> str:
    usage = tokens / 413000
    spec = ""
    if al is not None:
        if era.startswith("0.4") or era == "0.5.1":
            spec = f"accept len: {al:.2f}, "
        elif era in ("0.5.4",):
            spec = f"accept len: {al:.2f}, accept rate: {al / 4:.2f}, "
        elif era == "0.5.9":
            spec = f"accept len: {al:.2f}, accept rate: {al / draft_tokens:.2f}, "
        else:
            spec = f"accept len: {al:.2f}, accept rate: {(al - 1) / (draft_tokens - 1):.2f}, "
    head = {"0.4.2": "Decode batch.", "0.5.1": "Decode batch.", "0.5.4": f"Decode batch [{rng.randint(100, 9999)}],"}.get(era, "Decode batch,")
    graph = "" if era == "0.4.2" else "cuda graph: True, "
    trail = ", " if era in ("0.5.1", "0.5.4") else ""
    return (f"[{c.stamp()}{tag}] {head} #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            f"{spec}{graph}gen throughput (token/s): {tps:.2f}, #queue-req: 0{trail}")


def vllm_log(path: Path) -> None:
    rng = random.Random(7)
    lines = [
        "INFO 10-20 09:00:00 [__init__.py:216] Automatically detected platform cuda.",
        "(APIServer pid=2236552) INFO 10-20 09:00:03 [api_server.py:1839] vLLM API server version 0.11.0",
        "(APIServer pid=2236552) INFO 10-20 09:00:03 [utils.py:233] non-default args: {'model': '/models/Llama-3.1-8B-Instruct', 'speculative_config': {'method': 'eagle3', 'model': '/models/EAGLE3-LLaMA3.1-8B', 'num_speculative_tokens': 3}}",
        "(EngineCore_DP0 pid=2236700) INFO 10-20 09:00:40 [gpu_model_runner.py:2602] Model loading took 15.9 GiB and 5.1 seconds",
        "(APIServer pid=2236552) INFO 10-20 09:01:00 [launcher.py:44] Route: /v1/completions, Methods: POST",
        "(APIServer pid=2236552) INFO:     127.0.0.1:51234 - \"POST /v1/completions HTTP/1.1\" 200 OK",
    ]
    for i in range(12):
        s = 10 + i * 10
        acc = [round(max(0.0, min(1.0, rng.gauss(p, 0.02))), 3) for p in (0.80, 0.61, 0.43)]
        drafted = 9000 + rng.randint(0, 800)
        accepted = int(drafted * sum(acc) / 3)
        mal = 1 + sum(acc)
        lines.append(f"(APIServer pid=2236552) INFO 10-20 09:01:{s % 60:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {rng.uniform(50, 150):.1f} tokens/s, Avg generation throughput: {rng.uniform(800, 950):.1f} tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: {rng.uniform(2, 4):.1f}%, Prefix cache hit rate: {rng.uniform(30, 50):.1f}%")
        lines.append(f"(APIServer pid=2236552) INFO 10-20 09:01:{s % 60:02d} [metrics.py:96] SpecDecoding metrics: Mean acceptance length: {mal:.2f}, Accepted throughput: {accepted / 10:.2f} tokens/s, Drafted throughput: {drafted / 10:.2f} tokens/s, Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: {acc[0]:.3f}, {acc[1]:.3f}, {acc[2]:.3f}, Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%")
    lines.append("INFO 04-10 08:00:01 [loggers.py:87] SpecDecoding metrics: Draft acceptance rate: 62.5%, Accepted: 250 tokens, Drafted: 400 tokens")
    lines.append("INFO 11-02 10:00:00 metrics.py:400] Speculative metrics: Draft acceptance rate: 0.652, System efficiency: 0.530, Number of speculative tokens: 5, Number of accepted tokens: 3912, Number of draft tokens: 6000, Number of emitted tokens: 5300.")
    lines.append("INFO 11-02 10:00:00 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 512.3 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 1 reqs, GPU KV cache usage: 2.5%, CPU KV cache usage: 0.0%.")
    path.write_text("\n".join(lines) + "\n")


def garbage_log(path: Path) -> None:
    good = "[2026-02-26 14:09:45 TP0] Decode batch, #running-req: 24, #token: 30112, token usage: 0.14, accept len: 3.27, accept rate: 0.82, cuda graph: True, gen throughput (token/s): 2210.48, #queue-req: 0"
    parts = [
        good.encode(),
        bytes(range(256)).replace(b"\n", b""),                       # binary bytes
        b"[2026-02-26 14:09:46 TP0] Decode batch, #running-req: 2\xff\xfe4, #token: 1, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0",  # invalid UTF-8
        b"x" * (1 << 20),                                             # a 1 MB line
        good.replace("14:09:45", "14:09:47").encode(),
        (good + good).encode(),                                       # two records glued: each stored
        good.replace("accept len: 3.27, ", "accept len: three, ").encode(),
        b"[2026-02-26 14:09:48 TP0] Decode batch, #running-req: 24, #token: 30112, token usage: 0.14, accept len: 3.1",  # truncated
        "[2026-02-26 14:09:49] Prefill batch, #new-seq: 4, #new-token: 2048, #cached-token: 0, token usage: 0.01, #running-req: 20, #queue-req: 0, input throughput (token/s): 1.00, cuda graph: False".encode(),
    ]
    # the last line has no newline: a writer died mid-line
    path.write_bytes(b"\n".join(parts) + b"\n" + good.replace("14:09:45", "14:09:50").encode()[:80])


REAL_ARGS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_server_args"
DOCKER_SPLIT = 16 * 1024


def _real_args(name: str) -> str:
    """The `server_args=...` message of a real SGLang ServerArgs (tests/data/real_server_args,
    produced from the published wheels by scripts/make_real_server_args.py)."""
    line = (REAL_ARGS / name).read_text().rstrip("\n")
    return line[line.index("server_args="):]


def _docker(stamp: dt.datetime, msg: str) -> list[str]:
    """`docker logs --timestamps` lines of one message: json-file splits at 16 KiB of message,
    and each piece is printed with its own RFC3339 timestamp."""
    raw = msg.encode()
    pieces = [raw[i:i + DOCKER_SPLIT] for i in range(0, len(raw), DOCKER_SPLIT)] or [b""]
    out = []
    for k, piece in enumerate(pieces):
        t = stamp + dt.timedelta(microseconds=37 * k)
        out.append(t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z " + piece.decode())
    return out


def sglang_ray_docker_pp_log(path: Path) -> None:
    """SGLang 0.5.23 under Ray in docker: docker timestamps, the real 18 KB server_args dict split
    by docker at 16 KiB, `(SGLangEngine pid=41820)` tags in ANSI colour, PP=2 with speculation."""
    rng = random.Random(11)
    c = Clock("2026-11-20 10:00:00")
    lines: list[str] = []
    tag = "\x1b[36m(SGLangEngine pid=41820)\x1b[0m "

    def emit(msg: str, ray: bool = True) -> None:
        lines.extend(_docker(c.t, (tag if ray else "") + msg))

    emit(f"[{c.stamp()}] " + _real_args("sglang-0.5.23-dict-eagle3-pp2-tree.txt"))
    emit(f"[{c.stamp()}] Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.")
    c.tick(30)
    emit(f"[{c.stamp()}] The server is fired up and ready to roll!")
    for w in range(8):
        c.tick(1.0 + rng.random() * 0.1)
        for pp in ("PP0", "PP1"):
            al = rng.gauss(2.6, 0.05)
            emit(f"[{c.stamp()} {pp} TP0] Decode batch, #running-req: 8, #token: {4096 + 40 * w}, "
                 f"token usage: 0.02, accept len: {al:.2f}, accept rate: {(al - 1) / 5:.2f}, "
                 f"cuda graph: True, gen throughput (token/s): {rng.gauss(900, 20):.2f}, #queue-req: 0")
    path.write_text("\n".join(lines) + "\n")


def vllm_dynamic_depth_log(path: Path) -> None:
    """vLLM (2026, dynamic speculative depth) under kubectl --timestamps: non-default args with a
    per-batch-size schedule, the engine-config line, throughput and SpecDecoding lines whose depth
    moves between windows (positions past the depth print 0.000), one window with its optional
    segments left out."""
    rng = random.Random(12)
    t = dt.datetime.fromisoformat("2026-09-04 10:58:01")
    lines = []

    def emit(proc: str, loc: str, msg: str) -> None:
        lines.append(t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z "
                     f"({proc}) INFO {t.strftime('%m-%d %H:%M:%S')} [{loc}] {msg}")

    emit("APIServer pid=1", "utils.py:233", "vLLM API server version 0.26.1")
    emit("APIServer pid=1", "startup.py:96", "non-default args: {'model': '/models/Qwen3-8B', "
         "'tensor_parallel_size': 2, 'speculative_config': {'method': 'eagle3', 'model': "
         "'/models/Qwen3-8B-EAGLE3', 'num_speculative_tokens': 5, "
         "'num_speculative_tokens_per_batch_size': [(1, 8, 5), (9, 64, 2)]}}")
    t += dt.timedelta(seconds=19)
    emit("EngineCore_DP0 pid=212", "core.py:123", "Initializing a V1 LLM engine (v0.26.1) with config: "
         "model='/models/Qwen3-8B', speculative_config=SpeculativeConfig(method='eagle3', "
         "model='/models/Qwen3-8B-EAGLE3', num_spec_tokens=5), tokenizer='/models/Qwen3-8B', "
         "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, "
         "trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=40960, download_dir=None, "
         "load_format=auto, tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1, "
         "decode_context_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
         "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, "
         "served_model_name=/models/Qwen3-8B, enable_prefix_caching=True, enable_chunked_prefill=True, "
         "pooler_config=None, compilation_config={\"level\":3,\"cudagraph_capture_sizes\":[16, 8, 4, 2, 1]}")
    for w in range(10):
        t += dt.timedelta(seconds=10)
        depth = 5 if w < 5 else 2
        rates = [max(0.0, 0.85 - 0.15 * i + rng.gauss(0, 0.01)) if i < depth else 0.0 for i in range(5)]
        drafts = 100 + rng.randint(0, 20)
        accepted = int(sum(rates) * drafts)
        drafted = drafts * depth
        emit("APIServer pid=1", "loggers.py:259", f"Engine 000: Avg prompt throughput: {rng.uniform(50, 90):.1f} tokens/s, "
             f"Avg generation throughput: {rng.uniform(300, 400):.1f} tokens/s, Running: {8 if w < 5 else 32} reqs, "
             f"Waiting: 0 reqs, GPU KV cache usage: {rng.uniform(2, 5):.1f}%, Prefix cache hit rate: 0.0%")
        if w == 7:
            emit("APIServer pid=1", "metrics.py:125", f"SpecDecoding metrics: Mean acceptance length: "
                 f"{1 + accepted / drafts:.2f}, Current speculative depth: {depth}, Accepted throughput: "
                 f"{accepted / 10:.2f} tokens/s, Drafted throughput: {drafted / 10:.2f} tokens/s, "
                 f"Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%")
            continue
        emit("APIServer pid=1", "metrics.py:125", f"SpecDecoding metrics: Mean acceptance length: "
             f"{1 + accepted / drafts:.2f}, Current speculative depth: {depth}, Accepted throughput: "
             f"{accepted / 10:.2f} tokens/s, Drafted throughput: {drafted / 10:.2f} tokens/s, "
             f"Accepted: {accepted} tokens, Drafted: {drafted} tokens, Per-position acceptance rate: "
             + ", ".join(f"{r:.3f}" for r in rates) + f", Avg Draft acceptance rate: {100 * accepted / drafted:.1f}%")
    path.write_text("\n".join(lines) + "\n")


def sglang_0512_real_args_log(path: Path) -> None:
    """SGLang 0.5.12 with its real ServerArgs repr (which holds `batch_notify_size` and
    `pp_async_batch_depth`: issue 18's dropped line), EAGLE-3 decode lines of that era."""
    rng = random.Random(13)
    c = Clock("2026-05-20 10:00:00")
    lines = [f"[{c.stamp()}] " + _real_args("sglang-0.5.12-repr-eagle.txt")]
    lines.append(f"[{c.stamp()}] Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding.")
    c.tick(25)
    lines.append(f"[{c.stamp()}] The server is fired up and ready to roll!")
    for w in range(6):
        c.tick(1.1)
        al = rng.gauss(3.0, 0.05)
        lines.append(f"[{c.stamp()} TP0] Decode batch, #running-req: 4, #token: {2048 + 30 * w}, token usage: 0.01, "
                     f"accept len: {al:.2f}, accept rate: {(al - 1) / 3:.2f}, cuda graph: True, "
                     f"gen throughput (token/s): {rng.gauss(700, 15):.2f}, #queue-req: 0")
    path.write_text("\n".join(lines) + "\n")


def sglang_dspark_simulated_log(path: Path) -> None:
    """SGLang 0.5.23 DSPARK (real server_args dict, block size 8) launched with
    SGLANG_SIMULATE_ACC_LEN: the launch line carries the env, decode lines print cap len and
    block accept len."""
    rng = random.Random(14)
    c = Clock("2026-11-21 09:00:00")
    lines = ["specwatch: launching env SGLANG_SIMULATE_ACC_LEN=3.5 python -m sglang.launch_server "
             "--model-path /models/Qwen3-8B --speculative-algorithm DSPARK "
             "--speculative-draft-model-path /models/draft --speculative-dspark-block-size 8",
             f"[{c.stamp()}] " + _real_args("sglang-0.5.23-dict-dspark.txt")]
    c.tick(20)
    lines.append(f"[{c.stamp()}] The server is fired up and ready to roll!")
    for w in range(6):
        c.tick(1.0)
        lines.append(f"[{c.stamp()}] Decode batch, #running-req: 8, #token: {8192 + 64 * w}, token usage: 0.04, "
                     f"accept len: 3.50, accept rate: 0.36, cap len: {rng.gauss(4.2, 0.05):.2f}, "
                     f"block accept len: {rng.gauss(3.8, 0.05):.2f}, cuda graph: True, "
                     f"gen throughput (token/s): {rng.gauss(1200, 25):.2f}, #queue-req: 0")
    path.write_text("\n".join(lines) + "\n")


def pasted_report_log(path: Path) -> None:
    """What people paste into issues and reports: markdown table rows and backticks around log
    lines, bare lines with the prefix cut off, records hard-wrapped at 100 columns, logging-style
    rank brackets, other engines' lookalike lines, a traceback's last line and an argparse error,
    and a wrapped record whose continuation never came (rejected, not stored as a record)."""
    dec = ("[2026-06-07 10:59:31 TP0] Decode batch, #running-req: 16, #token: 30112, token usage: 0.14, "
           "accept len: 3.27, accept rate: 0.57, cuda graph: True, gen throughput (token/s): 2210.48, #queue-req: 0")
    spec = ("(APIServer pid=1) INFO 06-07 04:22:04 [metrics.py:125] SpecDecoding metrics: Mean acceptance "
            "length: 3.00, Current speculative depth: 5, Accepted throughput: 0.13 tokens/s, Drafted "
            "throughput: 0.32 tokens/s, Accepted: 14 tokens, Drafted: 35 tokens, Per-position acceptance "
            "rate: 0.714, 0.429, 0.286, 0.286, 0.286, Avg Draft acceptance rate: 40.0%")

    def wrap(text: str, width: int = 100) -> list[str]:
        return [text[i:i + width] for i in range(0, len(text), width)]

    lines = [
        "## Repro",
        "",
        "| time | process | line |",
        "|---|---|---|",
        "| 04:22:04.341 | APIServer | `Engine 000: Avg prompt throughput: 9.1 tokens/s, Avg generation throughput: 2.1 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%` |",
        "| 04:22:04.341 | APIServer | `SpecDecoding metrics: Mean acceptance length: 3.00, Current speculative depth: 5, Accepted throughput: 0.13 tokens/s, Drafted throughput: 0.32 tokens/s, Accepted: 14 tokens, Drafted: 35 tokens, Per-position acceptance rate: 0.714, 0.429, 0.286, 0.286, 0.286, Avg Draft acceptance rate: 40.0%` |",
        "",
        "The scheduler printed `" + dec.replace("14:14", "14:14") + "` and then slowed down.",
        "",
        "Engine 000: Avg prompt throughput: 120.4 tokens/s, Avg generation throughput: 880.2 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.1%, Prefix cache hit rate: 41.7%",
        "INFO 1234 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch, #running-req: 12, #token: 20480, token usage: 0.09, accept len: 2.74, accept rate: 0.58, cuda graph: True, gen throughput (token/s): 1404.20, #queue-req: 0",
        "2026-06-07 10:59:31,659 INFO scheduler_metrics_mixin.py:222: Decode batch, #running-req: 2, #token: 600, token usage: 0.00, cuda graph: True, gen throughput (token/s): 80.00, #queue-req: 0",
        "",
        "Wrapped at 100 columns by the issue form:",
        "",
        *wrap(dec.replace("10:59:31", "10:59:32")),
        *wrap(spec),
        "",
        "Lookalikes from other engines in the same report:",
        "[2026-08-01 12:00:00] Decode batch. #dp-rank: 0, #running-req: 8, avg_seq_len: 812.5, #pages(active/cached/total): 120/40/4096, page ratio: 0.03, gen throughput (token/s): 640.20, avg_accept_len: 2.61, accept_rate: 0.54, #queue-req: 0",
        "(APIServer pid=1) INFO 09-04 11:01:16 [metrics.py:160] SpecDecoding timing (mean ms/step over 40 steps): target_forward: 12.310, draft_total: 3.220, verify: 0.410, sample: 0.120, per-position draft: [0.800, 0.790, 0.810]",
        "",
        "And the server that never started:",
        "launch_server.py: error: argument --speculative-algorithm: invalid choice: 'EAGLE4' (choose from 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE', 'NGRAM')",
        "ModuleNotFoundError: No module named 'sgl_kernel'",
        "",
        "Cut off by the paste (its continuation never came):",
        dec.replace("10:59:31", "10:59:33")[:120],
        "",
        "(end of report)",
    ]
    path.write_text("\n".join(lines) + "\n")


def sglang_k8s_cri_log(path: Path) -> None:
    """A kubelet CRI log file (/var/log/pods/...): `TS stderr F msg`, lines over 16 KiB split into
    `P` pieces (the real 0.5.23 server_args dict), uvicorn access lines on stdout."""
    rng = random.Random(16)
    c = Clock("2026-11-22 07:00:00")
    lines = []

    def emit(stream: str, msg: str) -> None:
        raw = msg.encode()
        pieces = [raw[i:i + DOCKER_SPLIT] for i in range(0, len(raw), DOCKER_SPLIT)] or [b""]
        for k, piece in enumerate(pieces):
            flag = "P" if k < len(pieces) - 1 else "F"
            lines.append(c.t.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{k:03d}Z {stream} {flag} " + piece.decode())

    emit("stderr", f"[{c.stamp()}] " + _real_args("sglang-0.5.23-dict-eagle3.txt"))
    c.tick(30)
    emit("stderr", f"[{c.stamp()}] The server is fired up and ready to roll!")
    for w in range(6):
        c.tick(1.0)
        al = rng.gauss(2.9, 0.05)
        emit("stderr", f"[{c.stamp()}] Decode batch, #running-req: 4, #token: {1024 + 16 * w}, token usage: 0.01, "
                       f"accept len: {al:.2f}, accept rate: {(al - 1) / 3:.2f}, cuda graph: True, "
                       f"gen throughput (token/s): {rng.gauss(640, 10):.2f}, #queue-req: 0")
        emit("stdout", f"[{c.stamp()}] INFO:     10.0.0.7:51234 - \"POST /generate HTTP/1.1\" 200 OK")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    spec = dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=DRAFT)
    # One model, SGLang 0.5.23 (dict server_args), TP=1: baseline + three EAGLE-3 configs.
    serve_log(OUT / "sglang-0.5.23-llama8b-baseline.log", era="0.5.23", spec=False, al=0, base_tps=1010.0,
              draft_tokens=None, tags=[""], windows=24, seed=1, args=server_args_repr())
    serve_log(OUT / "sglang-0.5.23-llama8b-eagle3-s3k1.log", era="0.5.23", spec=True, al=2.9, base_tps=1890.0,
              draft_tokens=4, tags=[""], windows=24, seed=2, start="2026-10-31 09:10:00",
              args=server_args_repr(**spec, speculative_num_steps=3, speculative_eagle_topk=1,
                                    speculative_num_draft_tokens=4, max_running_requests=48))
    serve_log(OUT / "sglang-0.5.23-llama8b-eagle3-s5k4.log", era="0.5.23", spec=True, al=3.55, base_tps=2080.0,
              draft_tokens=8, tags=[""], windows=24, seed=3, start="2026-10-31 09:20:00",
              args=server_args_repr(**spec, speculative_num_steps=5, speculative_eagle_topk=4,
                                    speculative_num_draft_tokens=8, max_running_requests=48))
    serve_log(OUT / "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log", era="0.5.23", spec=True, al=1.1,
              base_tps=870.0, draft_tokens=4, tags=[""], windows=24, seed=4, start="2026-10-31 09:30:00",
              args=server_args_repr(**spec, speculative_num_steps=3, speculative_eagle_topk=1,
                                    speculative_num_draft_tokens=4, max_running_requests=48))
    # Older eras and multi-rank tags.
    serve_log(OUT / "sglang-0.4.2-tp2-eagle.log", era="0.4.2", spec=True, al=3.1, base_tps=1400.0,
              draft_tokens=None, tags=[" TP0"], windows=10, seed=5, start="2025-01-28 10:00:00",
              args=server_args_repr(tp_size=2, speculative_algorithm="EAGLE",
                                    speculative_draft_model_path="/models/EAGLE-LLaMA3-Instruct-8B",
                                    speculative_num_steps=5, speculative_eagle_topk=8,
                                    speculative_num_draft_tokens=64))
    serve_log(OUT / "sglang-0.5.1-baseline.log", era="0.5.1", spec=False, al=0, base_tps=980.0,
              draft_tokens=None, tags=[""], windows=10, seed=6, start="2025-08-25 10:00:00",
              args=server_args_repr())
    serve_log(OUT / "sglang-0.5.4-iter-eagle3.log", era="0.5.4", spec=True, al=3.12, base_tps=900.0,
              draft_tokens=4, tags=[""], windows=10, seed=8, start="2025-10-27 16:40:00",
              args=server_args_repr(**spec, speculative_num_steps=3, speculative_eagle_topk=1,
                                    speculative_num_draft_tokens=4))
    serve_log(OUT / "sglang-0.5.9-dp2-tp8-eagle3.log", era="0.5.9", spec=True, al=2.6, base_tps=3900.0,
              draft_tokens=4, tags=[" DP0 TP0", " DP1 TP4"], windows=12, seed=9, start="2026-03-02 08:00:00",
              args=server_args_repr(**spec, tp_size=8, dp_size=2, enable_dp_attention=True,
                                    speculative_num_steps=3, speculative_eagle_topk=1,
                                    speculative_num_draft_tokens=4))
    vllm_log(OUT / "vllm-0.11-eagle3.log")
    garbage_log(OUT / "garbage.log")
    # 2026 formats and the ways logs reach us (issue 15, 18)
    sglang_ray_docker_pp_log(OUT / "sglang-0.5.23-ray-docker-pp2-eagle3.log")
    vllm_dynamic_depth_log(OUT / "vllm-0.26-dynamic-depth-k8s.log")
    sglang_0512_real_args_log(OUT / "sglang-0.5.12-real-server-args.log")
    sglang_dspark_simulated_log(OUT / "sglang-0.5.23-dspark-simulated.log")
    pasted_report_log(OUT / "pasted-issue-report.log")
    sglang_k8s_cri_log(OUT / "sglang-0.5.23-k8s-cri.log")


if __name__ == "__main__":
    main()
