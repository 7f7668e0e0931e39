"""Doctor's advice in the words of the engine that served the run (run_metrics.served_by): a vLLM
run is told vLLM's flags and capture rule, an SGLang run SGLang's, whatever the check. Real vLLM
0.32 logs (tests/data/vllm: an EAGLE-3 server on CPU, and one that died loading an SGLang-layout
draft) and real engine messages (quoted from vLLM 0.32's and SGLang 0.5.23's sources) go through a
real DuckDB file; expected texts are the engines' own flag names, written out here."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specwatch.db import query, store
from specwatch.diagnose import doctor
from specwatch.logs import failure, ingest

DATA = Path(__file__).parent / "data" / "vllm"
VLLM_LOG = DATA / "eagle3-cpu-0.32.0.log"
VLLM_DIED = DATA / "eagle3-sglang-layout-fail-cpu-0.32.0.log"
SGLANG_FLAGS = ("--mem-fraction-static", "--max-running-requests", "--context-length",
                "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-token-map",
                "sglang.launch_server")
VLLM_FLAGS = ("--gpu-memory-utilization", "--max-num-seqs", "--max-model-len",
              "num_speculative_tokens", "vllm.entrypoints")


def _text(f) -> str:
    return f.title + " " + f.suggestion


# ----------------------------------------------------------------------------- which engine


def test_served_by_names_the_engine_of_sweeps_and_of_ingested_logs(tmp_path):
    db = tmp_path / "s.duckdb"
    sglang_log = Path(__file__).parent.parent / "sample_logs" / "sglang-0.5.23-llama8b-eagle3-s3k1.log"
    ingest.ingest_paths(db, [str(VLLM_LOG)], run="vllm-log")
    ingest.ingest_paths(db, [str(sglang_log)], run="sglang-log")
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "sweep-builtin", "engine": "builtin", "origin": "sweep"})
        store.upsert_run(con, {"run_id": "nothing", "origin": "ingest"})
    got = dict(query.run_sql(db, "SELECT run_id, served_by FROM config_summary").rows)
    assert got == {"vllm-log": "vllm", "sglang-log": "sglang", "sweep-builtin": "builtin",
                   "nothing": None}


# ----------------------------------------------------------------------------- failed servers


def _failed(tmp_path, engine: str, reason: str, log: Path | None = None):
    db = tmp_path / f"{engine}.duckdb"
    log = log or tmp_path / "server.log"
    if not log.exists():
        log.write_text(f"{reason}\n")
    ingest.ingest_paths(db, [str(log)], run="dead")
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "dead", "run_name": "dead", "config_name": "c",
                               "status": "failed", "failure_reason": reason, "origin": "sweep",
                               "sweep_name": "sw", "engine": engine,
                               "speculative_algorithm": "eagle3" if engine == "vllm" else "EAGLE3"})
    (f,) = [f for f in doctor.diagnose(db)[0] if f.run == "dead"]
    assert f.code == "config_failed"
    return f


# (reason, what vLLM is told, what SGLang is told): reasons quoted from the engines' sources
REASONS = [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     ("--gpu-memory-utilization", "--max-num-seqs", "--max-model-len"),
     ("--mem-fraction-static", "--max-running-requests", "--context-length")),
    # vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory (0.32)
    ("ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB KV "
     "cache is needed, which is larger than the available KV cache memory (1.50 GiB). Based on "
     "the available memory, the estimated maximum model length is 12288. Try increasing "
     "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
     "`max_model_len` when initializing the engine.",
     ("raise --gpu-memory-utilization or lower --max-model-len",),
     ("raise --mem-fraction-static or lower --context-length",)),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
     "when initializing the engine",
     ("raise --gpu-memory-utilization",), ("raise --mem-fraction-static",)),
    # sglang/srt/model_executor/pool_configurator.py (0.5.23)
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
     ("raise --gpu-memory-utilization",), ("raise --mem-fraction-static",)),
    ("api_server.py: error: unrecognized arguments: --speculative-num-steps 3",
     ("vLLM's parser rejected a flag", "python -m vllm.entrypoints.openai.api_server --help"),
     ("SGLang's parser rejected a flag", "python -m sglang.launch_server --help")),
]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("reason, on_vllm, on_sglang", REASONS)
def test_a_failed_server_is_told_its_own_engines_flags(tmp_path, engine, reason, on_vllm,
                                                       on_sglang):
    f = _failed(tmp_path, engine, reason)
    want, other = (on_vllm, SGLANG_FLAGS) if engine == "vllm" else (on_sglang, VLLM_FLAGS)
    for text in want:
        assert text in f.suggestion, (engine, f.suggestion)
    assert not [flag for flag in other if flag in f.suggestion], f.suggestion


def test_a_real_vllm_worker_death_names_the_workers_exception_and_the_fix(tmp_path):
    """The real log ends with the API server's `RuntimeError: Engine core initialization failed.
    See root cause above.`; the cause is the worker's ValueError, 120 lines up, each of its
    traceback lines behind `(Worker pid=16050) ERROR ... [multiproc_executor.py:953] `."""
    cause = failure.failure_cause(VLLM_DIED)
    assert cause.startswith("ValueError: There is no module or parameter named "
                            "'draft_id_to_target_id' in Eagle3LlamaForCausalLM.")
    f = _failed(tmp_path, "vllm", cause, VLLM_DIED)
    assert "draft_vocab_size" in f.suggestion and "d2t and t2d" in f.suggestion


def _tb(prefix: str, frames: int, exc: str) -> list[str]:
    return ([f"{prefix}Traceback (most recent call last):"]
            + [f'{prefix}  File "x{i}.py", line {i}, in f{i}' for i in range(frames)]
            + [f"{prefix}    raise", f"{prefix}{exc}"])


@pytest.mark.parametrize("order", ["worker_first", "interleaved"])
def test_prefixed_tracebacks_of_several_processes_are_followed_each_on_its_own(tmp_path, order):
    """vLLM's children log tracebacks line by line behind their logger prefix, and their lines
    interleave: each process's exception is its own, and a parent's pointer to its child's
    (`See root cause above`) is never the cause while the child's is in the log."""
    worker = _tb("(Worker_TP1 pid=7) ERROR 12-04 17:15:44 [multiproc_executor.py:953] ", 5,
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB")
    core = _tb("(EngineCore pid=6) ERROR 12-04 17:15:45 [core.py:1510] ", 4,
               "Exception: WorkerProc initialization failed due to an exception in a background "
               "process. See stack trace for root cause.")
    noise = "(Worker_TP0 pid=5) INFO 12-04 17:15:44 [gpu_worker.py:1] Dog: a line: of text"
    if order == "worker_first":
        lines = worker + core
    else:   # the core's traceback starts while the worker's is still being written
        lines = [x for pair in zip(worker, core + [noise] * len(worker)) for x in pair]
    lines += _tb("", 3, "RuntimeError: Engine core initialization failed. See root cause above. "
                 "Failed core proc(s): {}")
    log = tmp_path / "s.log"
    log.write_text("\n".join(lines) + "\n")
    assert failure.failure_cause(log) == \
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.00 GiB"
    # without the child's traceback the pointer is all there is, and it is named
    log.write_text("\n".join(lines[-6:]) + "\n")
    assert failure.failure_cause(log).startswith("RuntimeError: Engine core initialization failed")


# ----------------------------------------------------------------------------- slower than baseline


def _sweep(tmp_path, engine: str) -> list:
    """A sweep measured at concurrency 1 and 8: speculation pays at 1, loses at 8 (client tok/s,
    three repeats each, no log: as attach mode stores it)."""
    db = tmp_path / f"{engine}.duckdb"
    spec = ({"speculative_algorithm": "eagle3", "speculative_num_steps": 3,
             "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
            if engine == "vllm" else
            {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
             "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8})
    toks = {("base", 1): (100, 101, 99), ("spec", 1): (150, 152, 149),
            ("base", 8): (700, 705, 698), ("spec", 8): (500, 505, 498)}
    with store.writer(db) as con:
        for (cfg, conc), values in toks.items():
            for rep, v in enumerate(values):
                store.upsert_run(con, {
                    "run_id": f"{cfg}-c{conc}-r{rep}", "run_name": f"{cfg}-c{conc}-r{rep}",
                    "origin": "sweep", "sweep_name": "sw", "config_name": cfg, "engine": engine,
                    "concurrency": conc, "repeat_idx": rep, "status": "ok",
                    "is_baseline": cfg == "base", "output_tok_s": float(v),
                    "model_path": "/nonexistent/target", "tp_size": 1,
                    **(spec if cfg == "spec" else {})})
    return doctor.diagnose(db)[0]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_slower_than_baseline_advises_in_the_engines_flags(tmp_path, engine):
    (f,) = [f for f in _sweep(tmp_path, engine) if f.code == "slower_than_baseline"]
    assert f.severity == "error" and "at concurrency 8" in f.title
    s = f.suggestion
    assert "it pays at concurrency 1" in s and "above batch size 1" in s
    assert "None" not in s
    if engine == "vllm":
        assert "each step drafts 3 tokens for an accept length" not in s   # no accept length here
        assert "a smaller num_speculative_tokens in --speculative-config" in s
        assert "num_speculative_tokens_per_batch_size" in s
        assert "`specwatch recommend --engine vllm`" in s
        assert not [flag for flag in SGLANG_FLAGS if flag in s], s
    else:
        assert "--speculative-num-steps" in s and "--speculative-eagle-topk" in s
        assert "--speculative-adaptive" in s and "`specwatch recommend --engine sglang`" in s
        assert "num_speculative_tokens" not in s


# ----------------------------------------------------------------------------- low accept length


def _vllm_low(tmp_path, method: str, accept_len: float, draft_config: bool = True) -> list:
    """The real vLLM EAGLE-3 log served as `method`, its acceptance lowered to `accept_len`, its
    aux-layer line saying ids (1, 15, 28), the models it names written here (Llama target, 32
    layers; the draft's config.json with those ids unless `draft_config` is false)."""
    models = tmp_path / "models"
    for name, cfg in (("tiny-llama", {"architectures": ["LlamaForCausalLM"],
                                      "num_hidden_layers": 32}),
                      ("tiny-eagle3-vllm", {"architectures": ["LlamaForCausalLMEagle3"],
                                            "eagle_config": {
                                                "eagle_aux_hidden_state_layer_ids": [1, 15, 28]}})):
        if name == "tiny-eagle3-vllm" and not draft_config:
            continue
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps(cfg))
    text = VLLM_LOG.read_text().replace("MODEL_DIR", str(models))
    text = re.sub(r"Mean acceptance length: [\d.]+", f"Mean acceptance length: {accept_len:.2f}", text)
    text = text.replace("from speculative config: (0, 1, 2)", "from speculative config: (1, 15, 28)")
    text = text.replace("'method': 'eagle3'", f"'method': '{method}'").replace(
        "method='eagle3'", f"method='{method}'")
    log = tmp_path / f"{method}.log"
    log.write_text(text)
    db = tmp_path / "s.duckdb"
    ingest.ingest_paths(db, [str(log)])
    (row,) = query.run_sql(db, "SELECT served_by, speculative_algorithm, accept_len "
                               "FROM config_summary").rows
    assert row == ("vllm", method, pytest.approx(accept_len, abs=0.005))
    return doctor.diagnose(db)[0]


@pytest.mark.parametrize("draft_config", [True, False], ids=["draft-config", "log-only"])
def test_a_low_accept_length_on_vllm_reads_the_ids_by_vllms_rule(tmp_path, draft_config):
    """The ids are those vLLM's aux-layer line says it served, with or without the draft's
    config.json on this machine."""
    findings = _vllm_low(tmp_path, "eagle3", 1.1, draft_config)
    (f,) = [f for f in findings if f.code == "accept_len_near_1"]
    assert f.evidence.numbers["aux_layer_ids"] == [1, 15, 28]
    s = f.suggestion
    # vLLM captures at the ids as given: id k is the output of layer k-1 (SGLang: layer k)
    assert "vLLM 0.34.0 rule" in s and "SGLang" not in s
    assert "ids [1, 15, 28] capture the outputs [layer 0, layer 14, layer 27]" in s
    assert "the d2t tensor in its weights" in s and "--speculative-token-map" not in s


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_a_low_accept_length_without_a_trained_draft_says_nothing_of_aux_ids(tmp_path, method):
    (f,) = [f for f in _vllm_low(tmp_path, method, 1.2) if f.code == "accept_len_near_1"]
    assert f"{method} drafts copy text from the prompt" in f.suggestion
    assert "aux" not in _text(f) and "ids" not in f.suggestion and "d2t" not in f.suggestion
    assert f.evidence.numbers["aux_layer_ids"] is None
