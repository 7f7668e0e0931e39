"""specwatch against real SGLang EAGLE-3 on one H200, end to end (issue 18).

Runs on the GPU machine only, inside the environment of the real-SGLang bundle (see
`../shared/real-sglang-h200/README.md`: `sglang` 0.5.12 + `sglang-kernel`, unpacked into a
`--target` site dir). It does what a user does, with specwatch's own commands:

  1. make the fixture models (`make_tiny_eagle3.py`: built, not trained, weights whose greedy
     acceptance is known in advance) and, when `--exported DIR` is given, use the built-in engine's
     weights exported to HF/SGLang layout (`specwatch.engine.export_hf`);
  2. write a sweep file with `engine = "sglang"` and run `specwatch run-sweep` on it: baseline,
     chain EAGLE-3 (steps 2 and 3, topk 1), tree drafting (topk 2), CUDA graphs on and off,
     concurrency 1 and 8, repeats;
  3. compare what specwatch stored with the fixture's predicted per-request histogram, with
     SGLang's own per-request `spec_accept_length` and with `/server_info`; count rejected lines;
  4. check teardown: no SGLang process left and GPU memory back to its starting level, after the
     sweep and after a SIGTERM mid-sweep;
  5. write `real_sglang_h200.md` (commit, SGLang version, weight hashes, tables, findings);
  6. `--phases rate` (issue 30): an open-loop sweep, the baseline and chain EAGLE-3 at Poisson
     request rates (`--rates`) under an [slo] (`--slo-ttft-ms`, `--slo-e2e-ms`,
     `--slo-percentile`), optionally a [rate_search]; GPU energy per run through NVML comes with
     it (issue 32). `benchmarks/real_sglang_rate_report.py` reads its database back on the CPU
     machine (views, and checks of the schedule, acceptance, goodput and energy of its own).

    python3 benchmarks/real_sglang_h200.py --site /tmp/site --tools .h200/tools --out /tmp/h200 \
        --pack $OUT/00-results.tgz

Carrying (measured 2026-12-05): the tracked tree is 21.3 MiB, the bundle's site.tar.xz 38.7 MiB
and DuckDB 2.0.1 15.4 MiB even as tar.xz -9e (24 MiB as a wheel), so one call cannot carry both
under the device's 64 MiB. Two calls on one warm machine (it waits 30 s between calls): first
carry DuckDB and unpack it to /tmp/duck (outside the checkout, so it stays), then carry the
bundle and run with PYTHONPATH=/tmp/duck:

    python3 benchmarks/real_sglang_h200.py --site /tmp/site --tools .h200/tools --out /tmp/h200 \
        --phases rate --pack $OUT/00-results.tgz --db-copy $OUT/real_rate.duckdb --budget-s 490

If the second call lands on a fresh machine (no DuckDB), the rate phase measures the same runs
through measure_on_node and pickles them (/tmp/h200/rate-measure/energy_results.pkl): store them
here with `energy_gpu.py store --results ... --db ... --no-table`.

Not a test: nothing here runs in CI (there is no GPU there). The contract tier
(`tests/contract/`) checks the same facts against the real package without a GPU.
"""
from __future__ import annotations

import argparse
import datetime as dt
import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The recipe's flags: the bundle leaves out FA3/flashinfer JIT, xgrammar and friends.
# Without --gpus the sweep starts every config's server at once (kept across repeats; one run
# loads at a time), so 6 servers share the GPU: 0.08 of its memory each.
# CUDA graphs (not the piecewise kind, which compiles with torch.compile) unless a config adds
# --disable-cuda-graph; the baseline specwatch adds gets the sweep's flags, so it has graphs.
COMMON_FLAGS = ["--attention-backend", "triton", "--sampling-backend", "pytorch",
                "--grammar-backend", "none", "--mem-fraction-static", "0.08",
                "--decode-log-interval", "8", "--enable-metrics", "--cuda-graph-max-bs", "8",
                "--disable-piecewise-cuda-graph"]
NO_GRAPH = ["--disable-cuda-graph"]
GRAPH: list[str] = []
# Printable-ASCII prompts: the fixture's target continues with the next printable byte.
PROMPTS = ["hello", "The quick brown fox", "0123", "speculative decoding", "EAGLE-3 drafts",
           "abcdefg", "Hopper H200", "pays or loses?"]


def sh(cmd: list[str] | str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=isinstance(cmd, str), text=True, capture_output=True, **kw)


def bundle_env(site: str) -> dict[str, str]:
    """The environment every process specwatch starts must inherit (the recipe's)."""
    env = dict(os.environ)
    libs = set()
    for sp in sh([sys.executable, "-c", "import site; print('\\n'.join(site.getsitepackages()))"]
                 ).stdout.split():
        for pat in ("libnvrtc.so.13*", "libcublas.so.13*", "libcublasLt.so.13*", "libcudart.so.13*"):
            libs.update(os.path.dirname(p) for p in glob.glob(f"{sp}/nvidia/**/{pat}",
                                                                recursive=True))
    nvcc = os.path.realpath(sh("command -v nvcc").stdout.strip() or "/usr/local/cuda/bin/nvcc")
    env.update({
        "PYTHONPATH": os.pathsep.join([site, str(ROOT)] + [p for p in env.get(
            "PYTHONPATH", "").split(os.pathsep) if p and p not in (site, str(ROOT))]),
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "TVM_FFI_CACHE_DIR": "/tmp/cache/tvm-ffi", "TRITON_CACHE_DIR": "/tmp/cache/triton",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/cache/inductor",
        "LD_LIBRARY_PATH": ":".join(sorted(libs) + [p for p in env.get(
            "LD_LIBRARY_PATH", "").split(":") if p]),
        "CUDA_HOME": env.get("CUDA_HOME") or str(Path(nvcc).parent.parent),
        "SGLANG_LOG_MS": "1",
    })
    return env


def gpu_memory_mib() -> list[int]:
    out = sh("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits").stdout
    return [int(x) for x in out.split()]


def gpu_apps() -> str:
    return sh("nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader"
              ).stdout.strip()


def sglang_procs() -> list[str]:
    out = sh("ps -eo pid=,args=").stdout.splitlines()
    return [line.strip() for line in out
            if ("sglang" in line or "specwatch.engine" in line) and "real_sglang_h200" not in line
            and "ps -eo" not in line]


class GpuWatch:
    """Samples, every `period_s` while a sweep runs, GPU memory and the live `sglang.launch_server`
    processes: how many servers were ever up at once, and the GPU memory in every gap between
    servers (teardown after each config: it must be back to the starting level)."""

    def __init__(self, period_s: float = 0.5):
        self.period_s, self.samples = period_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            servers = [p for p in sglang_procs() if "sglang.launch_server" in p]
            self.samples.append((time.monotonic(), len(servers), sum(gpu_memory_mib())))
            self._stop.wait(self.period_s)

    def __enter__(self) -> "GpuWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def summary(self, mem0: int) -> dict:
        gaps, cur = [], None   # GPU memory in each stretch with no server, after one had run
        seen = False
        for _, n, mem in self.samples:
            if n:
                seen, cur = True, None
            elif seen:
                if cur is None:
                    cur = []
                    gaps.append(cur)
                cur.append(mem)
        return {"samples": len(self.samples),
                "max_servers_at_once": max((n for _, n, _ in self.samples), default=0),
                "gpu_mem_mib_start": mem0,
                # the last sample of each gap (memory may take a moment to be released)
                "gpu_mem_mib_between_servers": [g[-1] for g in gaps],
                "gaps_back_to_start": sum(1 for g in gaps if g[-1] <= mem0 + 16),
                "gaps": len(gaps)}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def write_sweep(path: Path, name: str, target: str, draft: str, repeats: int, num_prompts: int,
                output_tokens: int, prompts: Path | str, configs: list[dict],
                concurrency: list[int] | None, engine: str = "sglang",
                traffic: list[str] = (), tables: list[str] = ()) -> None:
    """A sweep file as a user writes it. The built-in engine gets only the flags it shares with
    SGLang (not the bundle's backend choices). `concurrency` None: no closed-loop levels (an
    open-loop sweep gives `request_rate` in `traffic`, top-level lines); `tables`: lines of
    further tables ([slo], [rate_search]), written after [workload]."""
    def toml_list(xs):
        return "[" + ", ".join(json.dumps(x) for x in xs) + "]"
    flags = COMMON_FLAGS if engine == "sglang" else ["--decode-log-interval", "8"]
    lines = [f'name = "{name}"', f'engine = "{engine}"',
             *([f'launch_command = ["{sys.executable}", "-m", "sglang.launch_server"]']
               if engine == "sglang" else []),
             f'model = "{target}"', f'draft_model = "{draft}"', 'speculative_algorithm = "EAGLE3"',
             f"server_flags = {toml_list(flags)}",
             *([f"concurrency = {concurrency}"] if concurrency is not None else []),
             *traffic,
             f"repeats = {repeats}", "startup_timeout_s = 300", "request_timeout_s = 120",
             "stop_grace_s = 20", "", "[workload]", f'prompts = "{prompts}"',
             f"num_prompts = {num_prompts}", "warmup_requests = 2",
             f"output_tokens = {output_tokens}", "temperature = 0.0", "seed = 0", "", *tables, ""]
    for c in configs:
        lines.append("[[config]]")
        for k, v in c.items():
            lines.append(f"{k} = {toml_list(v) if isinstance(v, list) else json.dumps(v)}")
        lines.append("")
    path.write_text("\n".join(lines))


PACK: str | None = None       # --pack: also write this .tgz at every save()
WATCH: dict[str, dict] = {}   # per sweep database: GpuWatch.summary()
SAVE_PARTIAL = None           # main() sets it: merge a phase's results so far and save()


def save_partial(res: dict) -> None:
    """Save what a long phase measured so far (the budget can stop it in its next part)."""
    if SAVE_PARTIAL is not None:
        SAVE_PARTIAL(res)


def run_sweep(sweep: Path, db: Path, out_dir: Path, env: dict, timeout_s: float,
              log: Path, extra: tuple[str, ...] = ()) -> tuple[int | str, float]:
    """`specwatch run-sweep`; past `timeout_s` it gets SIGTERM (stores what it measured)."""
    t = time.monotonic()
    mem0 = sum(gpu_memory_mib())
    with open(log, "w") as f, GpuWatch() as watch:
        p = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "run-sweep", str(sweep),
                              "--db", str(db), "--out-dir", str(out_dir), *extra], env=env,
                             stdout=f, stderr=subprocess.STDOUT)
        try:
            rc: int | str = p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            rc = f"SIGTERM after {timeout_s:.0f} s (budget): {p.wait(timeout=60)}"
        time.sleep(2.0)   # one more sample after the last teardown
    WATCH[str(db)] = watch.summary(mem0)
    return rc, time.monotonic() - t


def sigterm_mid_sweep(sweep: Path, db: Path, out_dir: Path, env: dict, log: Path,
                      ready_timeout_s: float = 240) -> dict:
    """Start the sweep again (--force), SIGTERM specwatch once the first server answers /health
    and its load has begun, then look for survivors."""
    mem0 = gpu_memory_mib()
    f = open(log, "w")
    p = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "run-sweep", str(sweep), "--db",
                          str(db), "--out-dir", str(out_dir), "--force"], env=env, stdout=f,
                         stderr=subprocess.STDOUT)
    t0 = time.monotonic()
    sent = None
    while time.monotonic() - t0 < ready_timeout_s and p.poll() is None:
        text = log.read_text(errors="replace")
        if "ready in" in text:
            time.sleep(3.0)    # into the load
            p.send_signal(signal.SIGTERM)
            sent = time.monotonic() - t0
            break
        time.sleep(1.0)
    try:
        rc = p.wait(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "hung (killed)"
    f.close()
    time.sleep(3.0)
    return {"sigterm_after_s": sent, "exit_code": rc, "procs_left": sglang_procs(),
            "gpu_apps_left": gpu_apps(), "gpu_mem_mib_before": mem0,
            "gpu_mem_mib_after": gpu_memory_mib()}


def serve_and_generate(argv: list[str], env: dict, port: int, prompts: list[str], log: Path,
                       max_new: int = 64, ready_timeout_s: float = 240) -> dict:
    """Start one server (own session), greedy /generate each prompt, stop its group. For the
    identity check: the sweep's request rows hold no output text."""
    import urllib.request
    f = open(log, "w")
    p = subprocess.Popen(argv + ["--port", str(port)], env=env, stdout=f, stderr=subprocess.STDOUT,
                         start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    out: dict = {"texts": [], "meta": []}
    t0 = time.monotonic()
    try:
        while True:
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            if p.poll() is not None or time.monotonic() - t0 > ready_timeout_s:
                out["error"] = f"not ready (exit {p.poll()}); log {log}"
                return out
            time.sleep(1)
        out["ready_s"] = round(time.monotonic() - t0, 1)
        for text in prompts:
            body = json.dumps({"text": text, "sampling_params": {
                "max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}}).encode()
            req = urllib.request.Request(base + "/generate", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                js = json.loads(r.read())
            out["texts"].append(js.get("text"))
            m = js.get("meta_info") or {}
            out["meta"].append({k: m.get(k) for k in ("completion_tokens", "spec_verify_ct",
                                                      "spec_accept_length")})
    finally:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)
        except Exception:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        f.close()
    return out


def first_divergence(a: str | None, b: str | None) -> int | None:
    if a is None or b is None:
        return -1
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def analyse(db: Path, sweep_file: Path, predict, miss_mod: int | None) -> dict:
    try:
        return _analyse(db, sweep_file, predict, miss_mod)
    except Exception as exc:     # a results file with the error beats none
        return {"analyse_error": f"{type(exc).__name__}: {exc}"}


def _analyse(db: Path, sweep_file: Path, predict, miss_mod: int | None) -> dict:
    """Per run: what specwatch stored against the fixture's prediction for each request's own
    prompt (chain configs only: the predictor models topk 1)."""
    import duckdb

    from specwatch.run import load, sweepfile
    sw = sweepfile.load(str(sweep_file))
    _warm, specs = load.build_requests(sw.workload, load.read_prompts(sw.workload))
    con = duckdb.connect(str(db), read_only=True)
    q = lambda s, *a: con.execute(s, list(a)).fetchall()
    runs = q("""SELECT run_id, config_name, concurrency, repeat_idx, status, failure_reason,
                       server_accept_len, client_accept_len, output_tok_s, request_rate
                FROM runs ORDER BY config_name, concurrency, request_rate, repeat_idx""")
    summary = {r[0]: r for r in q("SELECT run_id, accept_len, accept_rate FROM config_summary")}
    rows = []
    for rid, cfg, conc, rep, status, reason, srv_al, cli_al, tok_s, rate in runs:
        reqs = q("""SELECT request_idx, output_tokens, spec_verify_ct, spec_accept_length,
                           spec_accept_histogram FROM requests
                    WHERE run_id = ? AND success AND NOT is_warmup ORDER BY request_idx""", rid)
        exact = total = 0
        chain = "k1" in cfg and predict is not None
        for idx, out_tok, vct, al, hist in reqs:
            total += 1
            if not chain or vct is None or hist is None:
                continue
            want = predict(specs[idx].prompt, out_tok, miss_mod)
            got = list(hist)
            while len(got) > len(want) and got[-1] == 0:
                got.pop()
            exact += int(got == want and vct == sum(want))
        srv = summary.get(rid)
        rows.append({"run_id": rid, "config": cfg, "concurrency": conc, "request_rate": rate,
                     "repeat": rep,
                     "status": status, "failure_reason": reason,
                     "window_accept_len": srv[1] if srv else None,
                     "accept_rate": srv[2] if srv else None,
                     "server_info_accept_len": srv_al, "client_accept_len": cli_al,
                     "output_tok_s": tok_s, "requests": total,
                     "requests_matching_prediction": exact if chain else None})
    rejected = q("""SELECT count(*) FROM rejected_lines""")[0][0]
    metric_rejected = q("""SELECT kind, reason, count(*) FROM rejected_lines GROUP BY ALL""")
    configs = q("""SELECT DISTINCT speculative_algorithm, model_path, draft_model_path,
                          sglang_version FROM server_configs""")
    con.close()
    return {"runs": rows, "rejected_lines": rejected, "rejected_by_kind": metric_rejected,
            "server_configs": configs}


def table(rows: list[dict], cols: list[str]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(out)


def exported_phase(args, env: dict, work: Path, out: Path, t_start: float) -> dict:
    """The built-in engine's own weights in both engines: real SGLang (exported HF/SGLang
    checkpoints) and the built-in engine on CUDA, same workload, same sweep shape."""
    exp = work / "exported"
    p = sh([sys.executable, "-m", "specwatch.engine.export_hf", str(exp)], env=env)
    res: dict = {"export": (p.stdout + p.stderr)[-300:]}
    manifest = exp / "MANIFEST.json"
    res["exported_weights"] = {k: v[:16] for k, v in json.loads(manifest.read_text()).get(
        "files", {}).items() if k.endswith(".safetensors")} if manifest.exists() else None
    spec = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
    real_cfgs = [{"name": "eagle3-s3k1d4", **spec},
                 {"name": "eagle3-s3k1d4-minus1", "draft_model": str(exp / "draft-eagle3-minus1"),
                  **spec},
                 {"name": "eagle3-s3k1d4-shifted",
                  "draft_model": str(exp / "draft-eagle3-shifted"), **spec},
                 # graphs off: does id -1 fail at graph capture or at the first forward?
                 {"name": "eagle3-s3k1d4-shifted-nograph",
                  "draft_model": str(exp / "draft-eagle3-shifted"), **spec,
                  "server_flags": NO_GRAPH}]
    if args.exported_configs:
        keep = set(args.exported_configs.split(","))
        real_cfgs = [c for c in real_cfgs if c["name"] in keep]
    parts = set(args.exported_parts.split(","))
    res["parts"] = sorted(parts)
    if "real" not in parts:
        real_cfgs = []
    sweep_real = work / "exported-real.toml"
    write_sweep(sweep_real, "exported-real", str(exp / "target"), str(exp / "draft-eagle3"),
                args.exported_repeats or args.repeats, args.exported_num_prompts, args.output_tokens,
                "builtin:mixed", real_cfgs,
                [1, 8])
    db = out / "exported.duckdb"
    left = args.budget_s - (time.monotonic() - t_start)
    if real_cfgs:
        # keep back what the later parts of this phase need
        later = 110 * ("builtin" in parts) + 90 * ("identity" in parts)
        rc, wall = run_sweep(sweep_real, db, out / "runs-exp", env, max(60, left - later - 20),
                             out / "exported-real.sweep.log")
        doctor = sh([sys.executable, "-m", "specwatch.cli", "doctor", "--db", str(db)], env=env)
        res["exported_real"] = {"exit_code": rc, "wall_s": round(wall, 1),
                                "gpu_watch": WATCH.get(str(db)),
                                "procs_left": sglang_procs(), "gpu_mem_mib_after": gpu_memory_mib(),
                                "doctor": doctor.stdout[-6000:] + doctor.stderr[-500:],
                                "sweep_log_tail": (out / "exported-real.sweep.log").read_text(
                                    errors="replace")[-3000:],
                                **analyse(db, sweep_real, None, None)}
        save_partial(res)
    if "builtin" not in parts and "identity" not in parts:
        return res
    # The same configs on the built-in engine (committed weights), on the GPU (--gpus 0).
    builtin_cfgs = [{"name": "eagle3-s3k1d4", **spec},
                    {"name": "eagle3-s3k1d4-minus1", "aux_layer_ids": [0, 2, 4], **spec},
                    {"name": "eagle3-s3k1d4-shifted", "draft_model": "builtin:draft-eagle3-shifted",
                     **spec}]
    if "builtin" not in parts:
        builtin_cfgs = []
    sweep_b = work / "exported-builtin.toml"
    write_sweep(sweep_b, "exported-builtin", "builtin:target", "builtin:draft-eagle3",
                args.repeats, args.exported_num_prompts, args.output_tokens, "builtin:mixed",
                builtin_cfgs, [1, 8], engine="builtin")
    if builtin_cfgs:
        left = args.budget_s - (time.monotonic() - t_start)
        rc_b, wall_b = run_sweep(sweep_b, out / "exported-builtin.duckdb", work / "runs-b", env,
                                 max(60, min(150, left - 110)), out / "exported-builtin.sweep.log",
                                 ("--gpus", "0"))
        res["exported_builtin"] = {"exit_code": rc_b, "wall_s": round(wall_b, 1),
                                   "procs_left": sglang_procs(),
                                   **analyse(out / "exported-builtin.duckdb", sweep_b, None, None)}
        save_partial(res)
    if "identity" not in parts:
        return res
    # Greedy identity: the same prompts through both engines with the correct draft.
    prompts = ["def fibonacci(n):", "The capital of France is", "Once upon a time",
               "import numpy as np\n", "Question: what is 17 * 3?\nAnswer:"]
    flags = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    real = serve_and_generate([sys.executable, "-m", "sglang.launch_server", "--model-path",
                               str(exp / "target"), "--speculative-draft-model-path",
                               str(exp / "draft-eagle3"), *flags, *COMMON_FLAGS],
                              env, 31000, prompts, out / "identity-real.log")
    built = serve_and_generate([sys.executable, "-m", "specwatch.engine", "--model-path",
                                "builtin:target", "--speculative-draft-model-path",
                                "builtin:draft-eagle3", *flags, "--device", "cuda"],
                               env, 31001, prompts, out / "identity-builtin.log")
    res["identity"] = {"real": real, "builtin": built,
                       "first_divergence_char": [first_divergence(a, b) for a, b in zip(
                           real.get("texts", []), built.get("texts", []))]}
    return res


def rate_sweep_lines(args) -> tuple[list[str], list[str]]:
    """The open-loop keys of the rate phase (issue 30): top-level lines and the [slo] /
    [rate_search] tables, as a user writes them (key names: specwatch/run/traffic.py)."""
    rates = [float(x) for x in args.rates.split(",")]
    top = [f"request_rate = {json.dumps(rates)}", 'arrival = "poisson"']
    slo = ["[slo]", f"ttft_ms = {args.slo_ttft_ms:g}", f"e2e_ms = {args.slo_e2e_ms:g}",
           f"percentile = {args.slo_percentile:g}", ""]
    if args.rate_search:
        lo, hi, steps = args.rate_search.split(",")
        slo += ["[rate_search]", f"min_rate = {float(lo):g}", f"max_rate = {float(hi):g}",
                f"steps = {int(steps)}", f"repeats = {args.rate_repeats}", ""]
    return top, slo


def rate_phase(args, env: dict, work: Path, out: Path, models: Path, prompts: Path,
               t_start: float) -> dict:
    """`specwatch run-sweep` open loop on real SGLang: the baseline and one chain EAGLE-3 config
    at Poisson request rates under an SLO (issue 30), CUDA graphs on. GPU energy per run comes
    with it wherever NVML is there (issue 32). Without DuckDB importable in the bundle env (the
    device cannot carry both it and the bundle in one call) the same runs are measured through
    `executors.measure_on_node` (benchmarks/energy_gpu.py measure: no store there) and pickled,
    to be stored on the CPU machine (energy_gpu.py store --no-table)."""
    cfg = [{"name": "eagle3-s3k1d4-graph", "speculative_num_steps": 3,
            "speculative_eagle_topk": 1, "server_flags": GRAPH}]
    top, tables = rate_sweep_lines(args)
    sweep = work / "rate.toml"
    write_sweep(sweep, "real-rate", str(models / "tiny-llama"), str(models / "tiny-eagle3"),
                args.rate_repeats, args.rate_num_prompts, args.output_tokens, prompts, cfg, None,
                traffic=top, tables=tables)
    res: dict = {"sweep_file": sweep.read_text()}
    has_duckdb = sh([sys.executable, "-c", "import duckdb; print(duckdb.__version__)"],
                    env=env)
    res["duckdb"] = has_duckdb.stdout.strip() or has_duckdb.stderr.strip()[-200:]
    left = args.budget_s - (time.monotonic() - t_start)
    db = out / "real_rate.duckdb"
    if has_duckdb.returncode == 0:
        rc, wall = run_sweep(sweep, db, out / "runs-rate", env, max(60, left - 25),
                             out / "rate.sweep.log")
        res.update({"mode": "run-sweep", "exit_code": rc, "wall_s": round(wall, 1),
                    "gpu_watch": WATCH.get(str(db)), "procs_left": sglang_procs(),
                    "gpu_apps_left": gpu_apps(), "gpu_mem_mib_after": gpu_memory_mib(),
                    "sweep_log_tail": (out / "rate.sweep.log").read_text(errors="replace")[-4000:]})
        from expected_histogram import predict   # noqa: E402 (--tools is on sys.path)
        res.update(analyse(db, sweep, predict, args.miss_mod))
        return res
    t = time.monotonic()
    with open(out / "rate.measure.log", "w") as f:
        p = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "energy_gpu.py"),
                              "measure", "--sweep", str(sweep), "--out", str(out / "rate-measure")],
                             env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            rc2: int | str = p.wait(timeout=max(60, left - 25))
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            rc2 = f"SIGINT after {left - 25:.0f} s (budget): {p.wait(timeout=60)}"
    res.update({"mode": "measure_on_node (no DuckDB here)", "exit_code": rc2,
                "wall_s": round(time.monotonic() - t, 1), "procs_left": sglang_procs(),
                "pickle": str(out / "rate-measure" / "energy_results.pkl"),
                "measure_log_tail": (out / "rate.measure.log").read_text(errors="replace")[-3000:]})
    return res


def save(report: dict, out: Path, t_start: float) -> None:
    """Write the results so far (a later phase may run out of time)."""
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    (out / "real_sglang_h200.json").write_text(json.dumps(report, indent=1, default=str))
    md = [f"# specwatch on real SGLang, one H200 ({report['started']})", "",
          f"commit {report['commit']}{' (dirty)' if report['dirty'] else ''}; "
          f"SGLang {report['sglang']}; {report['device']}; weights {report['weights']}", ""]
    for name, ph in report["phases"].items():
        if not isinstance(ph, dict):
            ph = {"value": ph}
        md.append(f"## {name}")
        if "runs" in ph:
            md.append(table(ph["runs"], ["config", "concurrency", "request_rate", "repeat",
                                         "status",
                                         "window_accept_len", "client_accept_len",
                                         "server_info_accept_len", "requests",
                                         "requests_matching_prediction", "output_tok_s",
                                         "failure_reason"]))
        md.append("")
        md.append("```\n" + json.dumps({k: v for k, v in ph.items() if k != "runs"}, indent=1,
                                       default=str) + "\n```")
    (out / "real_sglang_h200.md").write_text("\n".join(md) + "\n")
    if PACK:
        # the device tool returns a limited number of files: one archive of the small ones
        # (reports, sweep and server logs; not the databases) always comes back
        import tarfile
        tmp = Path(PACK + ".tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            for f in sorted(out.rglob("*")):
                if f.is_file() and f.suffix in (".json", ".md", ".log"):
                    tar.add(f, arcname=str(f.relative_to(out.parent)))
        tmp.replace(PACK)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", required=True, help="unpacked real-SGLang bundle (--target dir)")
    ap.add_argument("--tools", required=True, help="copy of ../shared/real-sglang-h200/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--exported", default=None, help="built-in weights exported to HF layout")
    ap.add_argument("--miss-mod", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--exported-num-prompts", type=int, default=32,
                    help="prompts per run in the exported phase: at c=8, 8 prompts give ~2 decode "
                         "windows per run (the first is dropped), too few to compare windows")
    ap.add_argument("--exported-parts", default="real,builtin,identity",
                    help="which parts of the exported phase run (comma-separated)")
    ap.add_argument("--exported-repeats", type=int, default=None,
                    help="repeats in the exported phase (default: --repeats)")
    ap.add_argument("--exported-configs", default=None,
                    help="only these real-SGLang configs in the exported phase (comma-separated "
                         "names; the baseline is always added)")
    ap.add_argument("--phases", default="fixture,sigterm",
                    help="comma-separated: fixture, sigterm, exported, rate (the open-loop rate "
                         "sweep under an SLO, issue 30; alone: --phases rate)")
    ap.add_argument("--rates", default="8,16,32,64,128,256",
                    help="rate phase: request rates (requests/s), Poisson arrivals")
    ap.add_argument("--rate-repeats", type=int, default=3)
    ap.add_argument("--rate-num-prompts", type=int, default=64)
    ap.add_argument("--slo-ttft-ms", type=float, default=200)
    ap.add_argument("--slo-e2e-ms", type=float, default=300)
    ap.add_argument("--slo-percentile", type=float, default=90)
    ap.add_argument("--rate-search", default=None,
                    help="rate phase: MIN,MAX,STEPS of a [rate_search] (each of its rounds "
                         "starts both servers again)")
    ap.add_argument("--db-copy", default=None,
                    help="rate phase: also copy its database here (e.g. $OUT/real_rate.duckdb)")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--fixture-configs", default=None,
                    help="only these fixture configs (comma-separated names)")
    ap.add_argument("--pack", default=None,
                    help="also write the reports and logs as this .tgz after every phase (name it "
                         "so it sorts first under $OUT: the device returns a limited number of files)")
    args = ap.parse_args()
    global PACK, SAVE_PARTIAL
    PACK = args.pack
    sys.path.insert(0, str(ROOT))
    t_start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = bundle_env(args.site)
    os.environ.update(env)
    work = Path("/tmp/sw-h200")
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"started": dt.datetime.now().isoformat(timespec="seconds"),
                    # the GPU machine gets a copy of the tree whose .git may lag: say the commit
                    "commit": os.environ.get("SPECWATCH_COMMIT") or sh(
                        ["git", "-C", str(ROOT), "rev-parse", "HEAD"]).stdout.strip(),
                    "dirty": bool(sh(["git", "-C", str(ROOT), "status", "--porcelain"]).stdout),
                    "device": sh("nvidia-smi -L").stdout.strip(),
                    "sglang": sh([sys.executable, "-c", "import sglang; print(sglang.__version__)"],
                                 env=env).stdout.strip(),
                    "gpu_mem_mib_start": gpu_memory_mib(), "phases": {}}
    sys.path.insert(0, args.tools)
    from expected_histogram import predict  # noqa: E402  (the fixture's own predictor)

    models = work / "models"
    if not (models / "tiny-llama").exists():
        p = sh([sys.executable, f"{args.tools}/make_tiny_eagle3.py", str(models),
                str(args.miss_mod)], env=env)
        report["make_models"] = (p.stdout + p.stderr)[-400:]
    report["weights"] = {str(f.relative_to(work)): sha256(f)
                         for f in sorted(models.glob("*/model.safetensors"))}
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    configs = [
        {"name": "eagle3-s3k1d4-nograph", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
         "server_flags": NO_GRAPH},
        {"name": "eagle3-s3k1d4-graph", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
         "server_flags": GRAPH},
        {"name": "eagle3-s2k1d3-graph", "speculative_num_steps": 2, "speculative_eagle_topk": 1,
         "server_flags": GRAPH},
        {"name": "eagle3-tree-s2k2d4-graph", "speculative_num_steps": 2,
         "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 4, "server_flags": GRAPH},
    ]
    if args.fixture_configs:
        configs = [c for c in configs if c["name"] in args.fixture_configs.split(",")]
    sweep = work / "fixture.toml"
    write_sweep(sweep, "real-fixture", str(models / "tiny-llama"), str(models / "tiny-eagle3"),
                args.repeats, args.num_prompts, args.output_tokens, prompts, configs, [1, 8])
    db = out / "real_sglang.duckdb"
    phase_errors = report.setdefault("phase_errors", {})

    def _partial(res: dict) -> None:
        report["phases"].update(res)
        save(report, out, t_start)
    SAVE_PARTIAL = _partial
    if args.phases.split(",")[0] == "exported":
        try:
            report["phases"].update(exported_phase(args, env, work, out, t_start))
        except Exception as exc:   # keep what was measured
            phase_errors["exported"] = f"{type(exc).__name__}: {exc}"
        save(report, out, t_start)
        args.phases = ",".join(args.phases.split(",")[1:])
    if "rate" in args.phases.split(","):
        try:
            report["phases"]["rate"] = rate_phase(args, env, work, out, models, prompts, t_start)
        except Exception as exc:   # keep what was measured
            phase_errors["rate"] = f"{type(exc).__name__}: {exc}"
        save(report, out, t_start)
        if args.db_copy and (out / "real_rate.duckdb").exists():
            import shutil
            shutil.copy(out / "real_rate.duckdb", args.db_copy)
    if "fixture" in args.phases.split(","):
        left = args.budget_s - (time.monotonic() - t_start)
        # reserve time only for the phases that follow (2026-12-01: a fixture-only call kept 120 s
        # for nothing and stopped the baseline while its first, cold start compiled kernels)
        later = {"sigterm", "exported"} & set(args.phases.split(","))
        rc, wall = run_sweep(sweep, db, out / "runs-fixture", env, max(60, left - (120 if later else 15)),
                             out / "fixture.sweep.log")
        report["phases"]["fixture"] = {"exit_code": rc, "wall_s": round(wall, 1),
                                       "gpu_watch": WATCH.get(str(db)),
                                       "procs_left": sglang_procs(), "gpu_apps_left": gpu_apps(),
                                       "gpu_mem_mib_after": gpu_memory_mib(),
                                       **analyse(db, sweep, predict, args.miss_mod)}
        save(report, out, t_start)
    if "sigterm" in args.phases and time.monotonic() - t_start < args.budget_s - 100:
        small = work / "sigterm.toml"
        write_sweep(small, "real-sigterm", str(models / "tiny-llama"), str(models / "tiny-eagle3"),
                    1, 64, 256, prompts, configs[1:2], [1])
        report["phases"]["sigterm"] = sigterm_mid_sweep(small, out / "sigterm.duckdb",
                                                        work / "runs-sigterm", env,
                                                        out / "sigterm.sweep.log")
        save(report, out, t_start)
    if "exported" in args.phases and time.monotonic() - t_start < args.budget_s - 150:
        try:
            report["phases"].update(exported_phase(args, env, work, out, t_start))
        except Exception as exc:   # keep what the earlier phases measured
            phase_errors["exported"] = f"{type(exc).__name__}: {exc}"
    save(report, out, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
