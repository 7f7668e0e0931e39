"""Metric lines as capture paths print them (issue 28), generated from classes with a seeded RNG.

Each base line is printed from known values (its expected fields are those values, not a parse);
each capture class puts its prefix before it the way that tool prints it and says which parts a
reader must find. Lookalikes quote metrics in prose, code and tables without a complete message.
Used by tests/test_capture.py and benchmarks/bench_capture_recall.py.
"""
from __future__ import annotations

import datetime as dt
import json
import random
import string
from dataclasses import dataclass, field

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
LEVELS = ["INFO", "WARNING", "DEBUG"]


@dataclass
class Base:
    kind: str
    own: str          # the server's own log prefix, e.g. `[2026-11-20 10:00:00 TP0] `
    message: str      # the message after it
    expect: dict      # printed fields and prefix parts, from the values it was printed with
    sglang: bool = True  # a Python logging format may replace `own` (SGLANG_LOGGING_CONFIG_PATH)

    @property
    def text(self) -> str:
        return self.own + self.message


@dataclass
class Case:
    cls: str
    line: str
    base: Base
    parts: dict = field(default_factory=dict)   # prefix parts the capture class put there
    own_replaced: bool = False                  # the class printed its own log prefix


def _ts(rng: random.Random) -> tuple[str, tuple]:
    y, mo, d = 2026, rng.randint(1, 12), rng.randint(1, 28)
    h, mi, s = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
    return f"{y}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}", (y, mo, d, h, mi, s)


def _name(rng: random.Random, parts=("sglang", "vllm", "llm", "eagle3", "serve", "spec", "bench",
                                     "qwen", "llama", "node", "gpu", "api")) -> str:
    return "-".join(rng.sample(parts, rng.randint(1, 2)))


def bases(rng: random.Random) -> list[Base]:
    """One base line of each kind and era, with random values."""
    out = []
    ts, _ = _ts(rng)
    dp, tp = rng.randint(0, 3), rng.randint(0, 7)
    run, tok, q = rng.randint(1, 256), rng.randint(1, 10 ** 6), rng.randint(0, 40)
    use, al, ar = rng.randint(0, 99) / 100, rng.randint(100, 400) / 100, rng.randint(0, 99) / 100
    gen = rng.randint(100, 999999) / 100
    out.append(Base("sglang_decode", f"[{ts} DP{dp} TP{tp}] ",
                    f"Decode batch, #running-req: {run}, #token: {tok}, token usage: {use:.2f}, "
                    f"accept len: {al:.2f}, accept rate: {ar:.2f}, cuda graph: True, "
                    f"gen throughput (token/s): {gen:.2f}, #queue-req: {q}",
                    dict(timestamp=ts, rank=f"DP{dp} TP{tp}", dp_rank=dp, tp_rank=tp, running_req=run,
                         token=tok, token_usage=use, accept_len=al, accept_rate=ar, cuda_graph=True,
                         gen_throughput=gen, queue_req=q)))
    ts, _ = _ts(rng)
    out.append(Base("sglang_decode", f"[{ts}] ",
                    f"Decode batch. #running-req: {run}, #token: {tok}, token usage: {use:.2f}, "
                    f"accept len: {al:.2f}, cuda graph: False, gen throughput (token/s): {gen:.2f}, "
                    f"#queue-req: {q}, ",
                    dict(timestamp=ts, rank="", running_req=run, token=tok, accept_len=al,
                         cuda_graph=False, gen_throughput=gen, queue_req=q)))
    mn, mu = rng.randint(1, 64), rng.randint(0, 99) / 100
    lo, mid, hi = sorted(rng.randint(100, 500) / 100 for _ in range(3))
    out.append(Base("sglang_decode", f"[{ts} TP0] ",
                    f"Decode batch, #running-req: {run}, #full token: {tok}, full token usage: "
                    f"{use:.2f}, mamba num: {mn}, mamba usage: {mu:.2f}, accept len: {al:.2f}, accept "
                    f"rate: {ar:.2f}, est uncap acc len: {mid:.2f} [{lo:.2f}, {hi:.2f}], cuda graph: "
                    f"True, gen throughput (token/s): {gen:.2f}, #queue-req: {q}",
                    dict(timestamp=ts, rank="TP0", full_token=tok, full_token_usage=use,
                         mamba_num=mn, mamba_usage=mu, est_uncap_acc_len=mid,
                         est_uncap_acc_len_lo=lo, est_uncap_acc_len_hi=hi, queue_req=q)))
    seq, new, cached = rng.randint(1, 16), rng.randint(1, 32768), rng.randint(0, 4096)
    it = rng.randint(1000, 9999999) / 100
    out.append(Base("sglang_prefill", f"[{ts} DP{dp} TP{tp}] ",
                    f"Prefill batch, #new-seq: {seq}, #new-token: {new}, #cached-token: {cached}, "
                    f"token usage: {use:.2f}, #running-req: {run}, #queue-req: {q}, #pending-token: 0, "
                    f"cuda graph: False, input throughput (token/s): {it:.2f}",
                    dict(timestamp=ts, dp_rank=dp, new_seq=seq, new_token=new, cached_token=cached,
                         queue_req=q, input_throughput=it)))
    pid = rng.randint(1, 99999)
    vts = f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:" \
          f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    acc, dr = rng.randint(0, 5000), rng.randint(5000, 9000)
    pos = [rng.randint(0, 1000) / 1000 for _ in range(rng.randint(1, 5))]
    mal, rate = rng.randint(100, 500) / 100, rng.randint(0, 999) / 10
    out.append(Base("vllm_spec_decode", f"(APIServer pid={pid}) INFO {vts} [metrics.py:120] ",
                    f"SpecDecoding metrics: Mean acceptance length: {mal:.2f}, Accepted throughput: "
                    f"{gen:.2f} tokens/s, Drafted throughput: {it:.2f} tokens/s, Accepted: {acc} tokens, "
                    f"Drafted: {dr} tokens, Per-position acceptance rate: "
                    f"{', '.join(f'{p:.3f}' for p in pos)}, Avg Draft acceptance rate: {rate:.1f}%",
                    dict(timestamp=vts, process=f"APIServer pid={pid}", mean_acceptance_length=mal,
                         accepted=acc, drafted=dr, per_position_acceptance_rate=pos,
                         avg_draft_acceptance_rate=rate), sglang=False))
    out.append(Base("vllm_spec_decode", f"INFO {vts} [loggers.py:87] ",
                    f"SpecDecoding metrics: Draft acceptance rate: {rate:.1f}%, Accepted: {acc} "
                    f"tokens, Drafted: {dr} tokens",
                    dict(timestamp=vts, draft_acceptance_rate=rate, accepted=acc, drafted=dr),
                    sglang=False))
    dev = rng.choice(["GPU", "CPU", "XPU"])
    kv, hit = rng.randint(0, 999) / 10, rng.randint(0, 999) / 10
    w, s, c = (rng.randint(0, 9) for _ in range(3))
    out.append(Base("vllm_throughput", f"(APIServer pid={pid}) INFO {vts} [loggers.py:335] ",
                    f"Engine 000: Avg prompt throughput: {it:.1f} tokens/s, Avg generation "
                    f"throughput: {gen:.1f} tokens/s, Running: {run} reqs, Waiting: {q} reqs, KV fetch: "
                    f"{w} waiting to start, {s} in progress, {c} completed waiting, {dev} KV cache "
                    f"usage: {kv:.1f}%, Prefix cache hit rate: {hit:.1f}%",
                    dict(engine="Engine 000", avg_prompt_throughput=round(it, 1),
                         avg_generation_throughput=round(gen, 1), running=run, waiting=q,
                         kv_fetch=f"{w} waiting to start, {s} in progress, {c} completed waiting",
                         **{f"{dev.lower()}_kv_cache_usage": kv}, prefix_cache_hit_rate=hit),
                    sglang=False))
    n = rng.randint(2, 8)
    out.append(Base("vllm_throughput", f"(APIServer pid={pid}) INFO {vts} [loggers.py:335] ",
                    f"{n} Engines Aggregated: Avg prompt throughput: {it:.1f} tokens/s, Avg "
                    f"generation throughput: {gen:.1f} tokens/s, Running: {run} reqs, Waiting: {q} "
                    f"reqs, Preemptions: {c}, GPU KV cache usage: {kv:.1f}%",
                    dict(engine=f"{n} Engines Aggregated", running=run, preemptions=c,
                         gpu_kv_cache_usage=kv), sglang=False))
    ids = sorted(rng.sample(range(0, 80), 3))
    out.append(Base("vllm_aux_layers", f"(Worker pid={pid}) INFO {vts} [gpu_model_runner.py:5243] ",
                    f"Using auxiliary layers from speculative config: ({', '.join(map(str, ids))})",
                    dict(process=f"Worker pid={pid}", aux_layer_ids=ids, source="speculative config"),
                    sglang=False))
    steps = rng.randint(1, 7)
    out.append(Base("server_args", f"[{ts}] ",
                    f"server_args={{'model_path': '/models/{_name(rng)}', 'speculative_algorithm': "
                    f"'EAGLE3', 'speculative_num_steps': {steps}, 'tp_size': {tp + 1}}}",
                    dict(timestamp=ts, speculative_num_steps=steps, tp_size=tp + 1)))
    return out


def _path(rng: random.Random) -> str:
    stem = rng.choice(["server", "sglang", "vllm-serve", "run_03", "eagle3.s3k1"])
    ext = rng.choice([".log", ".txt", ".log.1", ".out"])
    return rng.choice([f"{stem}{ext}", f"logs/{_name(rng)}/{stem}{ext}", f"/var/log/{stem}{ext}",
                       f"C:\\Users\\dev\\runs\\{stem}{ext}", f"./{stem}{ext}"])


def _rfc3339(rng: random.Random) -> str:
    ts, _ = _ts(rng)
    frac = rng.choice(["", f".{rng.randint(0, 999):03d}", f".{rng.randint(0, 10 ** 9 - 1):09d}"])
    return ts.replace(" ", "T") + frac + rng.choice(["Z", "+00:00", "-0700"])


def capture(cls: str, rng: random.Random, base: Base) -> Case:
    """`base` as the capture path `cls` prints it."""
    line = base.text
    if cls == "compose":
        svc = _name(rng) + rng.choice(["-1", "-2", "_1", "-12", ""])
        p = f"{svc}{' ' * rng.randint(1, 6)}| "
        return Case(cls, p + line, base, dict(line_prefix=p, service=svc))
    if cls == "compose_timestamps":
        svc, ts = _name(rng) + "-1", _rfc3339(rng)
        p = f"{svc}  | "
        return Case(cls, f"{p}{ts} {line}", base, dict(line_prefix=p, service=svc, outer_ts=ts))
    if cls == "swarm":
        svc = f"{_name(rng)}.{rng.randint(1, 9)}.{rng.randint(10 ** 9, 10 ** 10):x}@node{rng.randint(1, 9)}"
        p = f"{svc}    | "
        return Case(cls, p + line, base, dict(line_prefix=p, service=svc))
    if cls == "kubectl":
        pod = f"{_name(rng)}-{rng.randint(0, 9)}{rng.choice(['', '-7d9f8c-xk2p'])}"
        ctr = rng.choice(["server", "sglang", "vllm", "main"])
        p = f"[pod/{pod}/{ctr}] "
        if rng.random() < 0.5:
            ts = _rfc3339(rng)
            return Case(cls, f"{p}{ts} {line}", base,
                        dict(line_prefix=p, pod=pod, container=ctr, outer_ts=ts))
        return Case(cls, p + line, base, dict(line_prefix=p, pod=pod, container=ctr))
    if cls == "journald":
        host, unit, pid = f"{_name(rng)}{rng.randint(1, 99)}", \
            rng.choice(["sglang", "vllm-serve", "specwatch-sweep", "python3", "sglang@0.service"]), \
            rng.randint(2, 4 * 10 ** 6)
        form = rng.randrange(3)
        if form == 0:
            ts = f"{rng.choice(MONTHS)} {rng.randint(1, 28):2d} {rng.randint(0, 23):02d}:" \
                 f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        elif form == 1:
            ts = f"{rng.choice(MONTHS)} {rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:" \
                 f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}"
        else:
            ts = _ts(rng)[0].replace(" ", "T") + "+0000"
        p = f"{ts} {host} {unit}[{pid}]: "
        return Case(cls, p + line, base, dict(line_prefix=p, outer_ts=ts, host=host, unit=unit,
                                              unit_pid=pid))
    if cls == "pylogging" and base.sglang:
        ts, _ = _ts(rng)
        ms, lvl = f"{rng.randint(0, 999):03d}", rng.choice(LEVELS)
        logger = rng.choice(["sglang.srt.managers.scheduler",
                             "sglang.srt.managers.scheduler_components.metrics_reporter",
                             "sglang.srt.entrypoints.engine"])
        form = rng.randrange(4)
        own = [f"{ts},{ms} [{lvl}] {logger}: ", f"{ts},{ms} - {logger} - {lvl} - ",
               f"[{ts},{ms}] [{lvl}] [{logger}] ", f"{lvl}:{logger}:"][form]
        parts = dict(log_level=lvl, logger=logger, timestamp=None if form == 3 else f"{ts},{ms}")
        return Case(cls, own + base.message, base, parts, own_replaced=True)
    if cls == "grep":
        form, path, n = rng.randrange(3), _path(rng), rng.randint(1, 10 ** 7)
        p = [f"{path}:{n}:", f"{n}:", f"{path}:"][form]
        parts = dict(line_prefix=p, src_path=None if form == 1 else path,
                     src_line=None if form == 2 else n)
        return Case(cls, p + line, base, parts)
    if cls == "fileref":
        path = _path(rng)
        tail = rng.choice(["", f":{rng.randint(1, 999)}", f":{rng.randint(1, 99)}-{rng.randint(100, 999)}"])
        p = f"@{path}{tail} "
        return Case(cls, p + line, base, dict(line_prefix=p, src_path=path))
    if cls == "markdown_code":
        before = rng.choice(["we see ", "After the upgrade: ", "- ", "1. here: ", "log: "])
        after = rng.choice(["", " (every 40 steps)", " and nothing else", "."])
        return Case(cls, f"{before}`{line}`{after}", base, dict(quoted="backticks"))
    if cls == "markdown_table":
        return Case(cls, f"| {rng.randint(0, 99)} | {_name(rng)} | `{line}` |", base,
                    dict(quoted="markdown"))
    if cls == "docker_json":
        ts = _rfc3339(rng).replace("+00:00", "Z").replace("-0700", "Z")
        stream = rng.choice(["stdout", "stderr"])
        return Case(cls, json.dumps({"log": line + "\n", "stream": stream, "time": ts}), base,
                    dict(outer_ts=ts))
    if cls == "cri":
        ts = _rfc3339(rng)
        return Case(cls, f"{ts} {rng.choice(['stdout', 'stderr'])} F {line}", base,
                    dict(outer_ts=ts))
    if cls == "grep_compose":
        path, n, svc = _path(rng), rng.randint(1, 99999), _name(rng) + "-1"
        p = f"{path}:{n}:{svc}  | "
        return Case(cls, p + line, base, dict(line_prefix=p, src_path=path, src_line=n, service=svc))
    if cls == "journald_json":
        # `journalctl -o json`: read as `journalctl -o short-iso-precise` prints the entry, in UTC
        us = rng.randint(17 * 10 ** 14, 18 * 10 ** 14)
        t = dt.datetime.fromtimestamp(us // 10 ** 6, dt.timezone.utc)
        ts = f"{t:%Y-%m-%dT%H:%M:%S}.{us % 10 ** 6:06d}+0000"
        host, unit, pid = f"{_name(rng)}{rng.randint(1, 99)}", rng.choice(
            ["sglang", "vllm", "python3", "serve"]), rng.randint(2, 4 * 10 ** 6)
        entry = {"__CURSOR": f"s={rng.getrandbits(64):x};i={rng.randint(1, 10 ** 6):x}",
                 "__REALTIME_TIMESTAMP": str(us), "__MONOTONIC_TIMESTAMP": str(rng.randint(1, 10 ** 12)),
                 "PRIORITY": "6", "_HOSTNAME": host, "SYSLOG_IDENTIFIER": unit, "_PID": str(pid),
                 "_COMM": unit, "MESSAGE": line}
        keys = list(entry)
        rng.shuffle(keys)
        if rng.random() < 0.3:   # journald's own order: cursor and timestamps first
            keys = list(entry)
        return Case(cls, json.dumps({k: entry[k] for k in keys}, separators=(",", ":")), base,
                    dict(line_prefix=f"{ts} {host} {unit}[{pid}]: ", outer_ts=ts, host=host,
                         unit=unit, unit_pid=pid))
    if cls == "shipper_json":
        return _shipper_json(rng, base)
    if cls == "json_logging" and base.sglang:
        # a JSON formatter in the server's logging config (python-json-logger through
        # SGLANG_LOGGING_CONFIG_PATH): the message alone, its own prefix as fields; sometimes
        # shipped on with the shipper's time around it
        ts, _ = _ts(rng)
        ms, lvl = f"{rng.randint(0, 999):03d}", rng.choice(LEVELS)
        logger = rng.choice(["sglang.srt.managers.scheduler",
                             "sglang.srt.managers.scheduler_components.metrics_reporter"])
        rec = {"asctime": f"{ts},{ms}", "levelname": lvl, "name": logger,
               "message": base.message, "taskName": None}
        parts = dict(log_level=lvl, logger=logger, timestamp=f"{ts},{ms}")
        if rng.random() < 0.4:
            outer = _rfc3339(rng)
            rec["@timestamp"], parts["outer_ts"] = outer, outer
        keys = list(rec)
        rng.shuffle(keys)
        return Case(cls, json.dumps({k: rec[k] for k in keys}), base, parts, own_replaced=True)
    if cls == "wrapper":
        # a launcher or supervisor that logs each line of its child with a record of its own,
        # whose message introduces the child's line (`... INFO sglang stdout: [ts TP0] ...`)
        ts, _ = _ts(rng)
        name, lvl = _name(rng), rng.choice(LEVELS)
        what = rng.choice(["stdout", "stderr", "output", "[server]", "log"])
        p = rng.choice([f"{ts},{rng.randint(0, 999):03d} {lvl} {name} {what}: ",
                        f"[{ts}] [{lvl}] {name}: ",
                        f"{ts} - {name} - {lvl} - {what}: ",
                        f"{lvl} {ts} {name}: "])
        return Case(cls, p + line, base, dict(line_prefix=p))
    if cls == "unknown":
        p = rng.choice(["> ", ">>> ", "* ", "1. ", "[step 3/9] ", "#12 ", "$ ", "Output: ",
                        "\u2502 ", "\U0001F680 ", "  > ", "(2) "])
        return Case(cls, p + line, base, dict(line_prefix=p))
    raise KeyError(cls)


def _shipper_json(rng: random.Random, base: Base) -> Case:
    """One JSON record of a log shipper or a cloud export holding `base`'s line, in the shape
    that tool writes (keys in any order): its time as written there, or as RFC3339 UTC where
    the record holds a number; its pod and container where it names them."""
    line = base.text
    secs = rng.randint(17 * 10 ** 8, 18 * 10 ** 8)
    t = dt.datetime.fromtimestamp(secs, dt.timezone.utc)
    iso, ms, us, ns = _rfc3339(rng), rng.randint(0, 999), rng.randint(0, 10 ** 6 - 1), \
        rng.randint(0, 10 ** 9 - 1)
    pod = f"{_name(rng)}-{rng.randint(0, 9)}-{rng.getrandbits(20):05x}"
    ctr = rng.choice(["server", "sglang", "vllm"])
    k8s = dict(pod=pod, container=ctr, line_prefix=f"[pod/{pod}/{ctr}] ")
    form = rng.randrange(10)
    if form == 0:     # Elasticsearch / ECS (Filebeat)
        rec, parts = {"@timestamp": iso, "message": line, "log.level": "info",
                      "host": {"name": _name(rng)}}, dict(outer_ts=iso)
    elif form == 1:   # Vector's kubernetes_logs source
        rec = {"message": line, "timestamp": iso, "stream": rng.choice(["stdout", "stderr"]),
               "kubernetes": {"pod_name": pod, "container_name": ctr, "pod_namespace": "serve"}}
        parts = dict(outer_ts=iso, **k8s)
    elif form == 2:   # Google Cloud Logging, a text entry of a GKE container
        rec = {"textPayload": line + rng.choice(["", "\n"]), "timestamp": iso,
               "severity": "INFO", "resource": {"type": "k8s_container", "labels": {
                   "pod_name": pod, "container_name": ctr, "namespace_name": "serve"}}}
        parts = dict(outer_ts=iso, **k8s)
    elif form == 3:   # Google Cloud Logging, a structured entry
        rec, parts = {"jsonPayload": {"message": line}, "timestamp": iso}, dict(outer_ts=iso)
    elif form == 4:   # CloudWatch Logs export: milliseconds since the epoch
        rec = {"timestamp": secs * 1000 + ms, "message": line,
               "ingestionTime": secs * 1000 + ms + 40}
        parts = dict(outer_ts=f"{t:%Y-%m-%dT%H:%M:%S}.{ms:03d}Z")
    elif form == 5:   # OpenTelemetry (OTLP JSON): nanoseconds as a string, body an AnyValue
        rec = {"timeUnixNano": str(secs * 10 ** 9 + ns), "severityText": "INFO",
               "body": {"stringValue": line}}
        parts = dict(outer_ts=f"{t:%Y-%m-%dT%H:%M:%S}.{ns:09d}Z")
    elif form == 6:   # Loki (logcli --output=jsonl)
        rec = {"labels": {"app": _name(rng)}, "line": line, "timestamp": iso}
        parts = dict(outer_ts=iso)
    elif form == 7:   # Fluent Bit's CRI parser: the flag in `logtag`, no newline
        rec = {"time": iso, "stream": "stdout", "logtag": "F", "log": line}
        parts = dict(outer_ts=iso)
    elif form == 8:   # a Go/zap-style shipper: seconds as a float
        rec = {"level": "info", "ts": secs + us / 10 ** 6, "msg": line}
        parts = dict(outer_ts=f"{t:%Y-%m-%dT%H:%M:%S}.{us:06d}Z")
    else:             # Elasticsearch hit as exported from Kibana
        rec = {"_index": "logs-serve", "_id": f"{rng.getrandbits(64):x}",
               "_source": {"message": line, "@timestamp": iso}}
        parts = dict(outer_ts=iso)
    keys = list(rec)
    rng.shuffle(keys)
    return Case("shipper_json", json.dumps({k: rec[k] for k in keys}), base, parts)


CLASSES = ("compose", "compose_timestamps", "swarm", "kubectl", "journald", "pylogging", "grep",
           "fileref", "markdown_code", "markdown_table", "docker_json", "cri", "grep_compose",
           "journald_json", "shipper_json", "json_logging", "wrapper", "unknown")


def case_of(rng: random.Random, cls: str, pool) -> Case:
    """One record of capture class `cls` (or "plain": as it is) on a base drawn from `pool()`,
    drawn again until one fits: a Python logging format only around SGLang lines, and only one
    that prints a time (`INFO:logger:` prints none: nothing tells where such a record starts)."""
    while True:
        base = rng.choice(pool())
        if cls == "plain":
            return Case(cls, base.text, base)
        if cls in ("pylogging", "json_logging") and not base.sglang:
            continue
        case = capture(cls, rng, base)
        if cls == "pylogging" and case.parts.get("timestamp") is None:
            continue
        return case


def cases(seed: int, variants: int = 4) -> list[Case]:
    """Every class x every base line, `variants` times with fresh random values."""
    rng = random.Random(seed)
    out = []
    for _ in range(variants):
        for cls in CLASSES:
            for base in bases(rng):
                if cls in ("pylogging", "json_logging") and not base.sglang:
                    continue
                if cls.startswith("markdown") and base.kind in ("server_args", "vllm_aux_layers"):
                    continue
                out.append(capture(cls, rng, base))
    return out


def lookalikes(seed: int, n: int = 200) -> list[str]:
    """Lines that quote a metric without being one: prose, source code, table headers, tracebacks,
    grep hits in source, incomplete messages after text of no known shape."""
    rng = random.Random(seed)
    bs = bases(rng)
    out = []
    for _ in range(n):
        b = rng.choice(bs)
        msg = b.message
        # cut inside a key (a cut at a segment boundary is a truncated record, not a quote)
        inside = [i for i in range(len(msg) // 4, len(msg) - 8)
                  if msg[i - 1].isalpha() and msg[i].isalpha() and ": " not in
                  msg[msg.rfind(", ", 0, i) + 1:i] and "metrics: " not in msg[:i][-9:]]
        cut = msg[:rng.choice(inside)] if inside else msg[:len(msg) // 2]
        k = rng.randrange(11)
        if k == 0:
            out.append(f"the {cut} line is printed every 40 steps")
        elif k == 1:
            out.append(f"    logger.info(f\"{msg.split(':')[0]}: {{n}}, ...\")")
        elif k == 2:
            keys = [f.split(": ")[0] for f in msg.split(", ")[:5]]
            out.append("| " + " | ".join(keys) + " |")
        elif k == 3:
            out.append(f"  File \"/srv/sglang/srt/x.py\", line {rng.randint(1, 999)}, in f: {msg}")
        elif k == 4:
            out.append(f"python/sglang/srt/managers/scheduler.py:{rng.randint(1, 3000)}:        "
                       f"msg = f\"{cut}{{x}}\"")
        elif k == 5:
            out.append(f"> {cut}")
        elif k == 6:
            out.append(f"I grep for `{msg.split(',')[0]}` and see {rng.randint(0, 99)} hits")
        elif k == 7:
            out.append(f"Q: why is `{cut}` cut off?")
        elif k == 8:
            out.append(f"{_name(rng)}: {msg.split(':')[0]}: {rng.random():.2f} in the report table")
        elif k == 9:   # a shipper's JSON record whose message is prose quoting a metric
            out.append(json.dumps({"message": f"the {cut} line is printed every 40 steps",
                                   "@timestamp": _rfc3339(rng)}))
        else:          # JSON that is no log record: a completion or a request holding a line
            key = rng.choice(["text", "prompt", "content", "output"])
            out.append(json.dumps({key: b.text, "meta_info": {"id": f"{rng.getrandbits(32):x}"}}))
    return out


PRINTABLE = [c for c in string.printable if c not in "\t\n\r\x0b\x0c"] + \
    list("éß中文─│▶✓\u00a0") + ["\U0001F680"]


def random_prefix(rng: random.Random) -> str:
    """Any printable text without a newline (a prefix holding a record header of its own is a
    pasted line, not a prefix: the caller leaves those out)."""
    n = rng.choice([0, 1, 2, 3, 5, 8, 13, 21, 40])
    return "".join(rng.choice(PRINTABLE) for _ in range(n))
