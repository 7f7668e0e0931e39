"""The classes of lines issue 15/18/13 named: routing by the line's own header, real server_args of
every SGLang version at hand, prefix parts, quoting, reassembly of wrapped records, vLLM dynamic
depth and config lines, lookalikes, range-checked values and the bounded config parse."""
from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import pytest

from specwatch.logs import parse, prefix, reassemble

ROOT = Path(__file__).resolve().parent.parent
REAL = sorted((ROOT / "tests" / "data" / "real_server_args").glob("*.txt"))
DEC = ("[2026-02-26 14:09:45 TP0] Decode batch, #running-req: 24, #token: 30112, token usage: 0.14, "
       "accept len: 3.27, accept rate: 0.82, cuda graph: True, gen throughput (token/s): 2210.48, "
       "#queue-req: 0")
PRE = ("[2026-02-26 14:09:40 TP0] Prefill batch, #new-seq: 4, #new-token: 2048, #cached-token: 0, "
       "token usage: 0.01, #running-req: 20, #queue-req: 0, input throughput (token/s): 10543.21, "
       "cuda graph: False")
SPEC = ("(APIServer pid=1) INFO 06-07 04:22:04 [metrics.py:125] SpecDecoding metrics: Mean acceptance "
        "length: 3.00, Current speculative depth: 5, Accepted throughput: 0.13 tokens/s, Drafted "
        "throughput: 0.32 tokens/s, Accepted: 14 tokens, Drafted: 35 tokens, Per-position acceptance "
        "rate: 0.714, 0.429, 0.286, 0.286, 0.286, Avg Draft acceptance rate: 40.0%")
TPUT = ("(APIServer pid=1) INFO 06-07 04:22:04 [loggers.py:259] Engine 000: Avg prompt throughput: "
        "9.1 tokens/s, Avg generation throughput: 2.1 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%")


def _top_level_keys(line: str) -> list[str]:
    """Keys of a real server_args payload, read independently of the parser (Python's own ast on
    the payload, with the one non-literal SGLang prints, `<function ...>`, quoted)."""
    payload = line[line.index("server_args=") + len("server_args="):].strip()
    tree = ast.parse(re.sub(r"<[^<>]*>", "None", payload), mode="eval").body
    if isinstance(tree, ast.Call):
        return [kw.arg for kw in tree.keywords]
    return [k.value for k in tree.keys]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_every_real_server_args_line_is_a_config(path):
    line = path.read_text().rstrip("\n")
    rec = parse.parse_line(line)
    assert isinstance(rec, parse.Record) and rec.kind == "server_args", rec
    assert rec.form == ("dict" if "-dict-" in path.name else "repr")
    keys = _top_level_keys(line)
    assert len(keys) > 50 and list(rec.fields) == keys  # every field, in the printed order
    cols = parse.derived_columns(rec)
    assert cols["model_path"].startswith("/models/")
    alg = path.stem.split("-")[3].upper()
    assert cols["speculative_algorithm"] == (alg if alg != "EAGLE" else rec.fields[
        "speculative_algorithm"])
    if "dspark" in path.name:
        assert cols["speculative_block_size"] == 8
    if "dflash" in path.name:
        assert cols["speculative_block_size"] == 16


def test_real_0512_line_is_the_issue_18_case():
    line = (ROOT / "tests/data/real_server_args/sglang-0.5.12-repr-eagle.txt").read_text()
    assert " batch_notify_size=" in line and "pp_async_batch_depth" in line
    rec = parse.parse_line(line)
    assert rec.kind == "server_args" and rec.fields["batch_notify_size"] == 16


HEADERS = ["Decode batch, #running-req: 1, gen throughput (token/s): 1.00, #queue-req: 0",
           "Prefill batch, #new-seq: 1, #new-token: 1, #queue-req: 0",
           "SpecDecoding metrics: Mean acceptance length: 2.00, Avg Draft acceptance rate: 5.0%",
           "Speculative metrics: Draft acceptance rate: 0.5", "Avg prompt throughput: 1.0 tokens/s",
           "Initializing a V1 LLM engine (v1) with config: model='x'", "non-default args: {}",
           "The server is fired up and ready to roll!", "KV cache pool is full. Retract requests.",
           "ValueError: x", "x.py: error: y", "SGLANG_SIMULATE_ACC_LEN=3"]


@pytest.mark.parametrize("inner", HEADERS)
@pytest.mark.parametrize("path", [p for p in REAL if "0.5.12" in p.name or "dict-eagle3.txt" in
                                  p.name or "0.4.2" in p.name], ids=lambda p: p.name)
def test_a_header_inside_a_config_value_does_not_route_the_line(path, inner):
    """Every header text placed inside a string value of a real server_args line: still that
    server_args line, with the value intact."""
    line = path.read_text().rstrip("\n").replace("'/models/Llama-3.1-8B-Instruct'", repr(inner), 1)
    rec = parse.parse_line(line)
    assert isinstance(rec, parse.Record) and rec.kind == "server_args", rec
    assert rec.fields["model_path"] == inner


@pytest.mark.parametrize("inner", HEADERS)
def test_a_header_in_prose_or_source_is_noise(inner):
    for text in (f"the line `{inner[:13]}` is printed every 40 steps",
                 f"    msg = f\"{inner[:14]} {{x}}\"", f"  File \"x.py\", line 3, in f: {inner}"):
        got = parse.parse_line(text)
        assert not (isinstance(got, parse.Record) and got.kind in parse.METRIC_KINDS), (text, got)


OUTER = ["", "2026-06-07T10:59:31.659123456Z ", "2026-06-07T10:59:31+02:00 "]
PROC = ["", "(SGLangEngine pid=41820) ", "\x1b[36m(SGLangEngine pid=41820)\x1b[0m ",
        "(SchedulerActor pid=1234, ip=10.0.0.1) "]
STAMP = [("[2026-06-07 10:59:31 DP1 TP3] ", "2026-06-07 10:59:31", "DP1 TP3"),
         ("[2026-06-07 10:59:31.457] ", "2026-06-07 10:59:31.457", ""),
         ("2026-06-07 10:59:31,659 INFO scheduler.py:1203: ", "2026-06-07 10:59:31,659", ""),
         ("INFO 1234 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] ", None, "DP3 TP3 EP3"),
         ("INFO 06-07 10:59:31 [scheduler_metrics_mixin.py:222] ", "06-07 10:59:31", "")]


@pytest.mark.parametrize("outer", OUTER)
@pytest.mark.parametrize("proc", PROC)
@pytest.mark.parametrize("stamp,ts,rank", STAMP)
def test_every_prefix_part_is_kept_as_printed(outer, proc, stamp, ts, rank):
    body = DEC[DEC.index("Decode batch"):]
    rec = parse.parse_line(outer + proc + stamp + body + "\n")
    assert rec.kind == "sglang_decode" and rec.fields["gen_throughput"] == 2210.48
    assert rec.outer_ts == (outer.strip() or None)
    assert rec.process == (re.sub(r"\x1b\[[0-9;]*m", "", proc).strip()[1:-1] or None)
    assert rec.timestamp == ts and rec.rank == rank
    if rank:
        assert rec.ranks == prefix.rank_fields(rank.split())


@pytest.mark.parametrize("line", [DEC, PRE, SPEC, TPUT])
def test_quoted_in_markdown_or_backticks(line):
    msg_ts = "10:59:31.123"
    for text, quoted in ((f"| {msg_ts} | APIServer | `{line}` |", "markdown"),
                         (f"see `{line}` above", "backticks")):
        rec = parse.parse_line(text)
        assert rec.kind == parse.parse_line(line).kind and rec.quoted == quoted
        assert rec.fields == parse.parse_line(line).fields


def _lines(texts):
    off, out = 0, []
    for i, t in enumerate(texts, 1):
        out.append((i, off, t))
        off += len(t) + 1
    return out


@pytest.mark.parametrize("line", [DEC, PRE, SPEC, TPUT,
                                  (lambda t: t[:t.index(", ", 3000)] + ")")(
                                      (ROOT / "tests/data/real_server_args/sglang-0.5.9-repr-"
                                       "eagle.txt").read_text())],
                         ids=["decode", "prefill", "spec", "throughput", "server_args"])
def test_hard_wrap_at_every_point_is_reassembled_or_rejected(line):
    """A wrap after the header (the header is what marks a line as a record; a wrap inside the
    prefix leaves a first part nothing recognises, and a second part that is a bare line)."""
    whole = parse.parse_line(line)
    assert isinstance(whole, parse.Record)
    header = next(h for h in ("batch", "metrics:", "throughput:", "ServerArgs(") if h in line)
    start = line.index(header) + len(header)
    wrong = []
    for cut in range(start, len(line) - 1, 1 if len(line) < 400 else 7):
        for a, b in ((line[:cut], line[cut:]),  # split a word
                     (line[:cut].rstrip(" "), line[cut:].lstrip(" "))):  # the wrap ate a space
            if not b:
                continue
            out = list(reassemble.reassemble(_lines([a, b, "[2026-02-26 14:09:50] next"])))
            recs = [lg for lg in out if isinstance(lg.result, parse.Record)]
            for lg in recs:  # a record is either the whole record or nothing
                if lg.result.fields != whole.fields:
                    wrong.append((cut, a[-15:], b[:15], lg.result.fields))
            if not recs:  # rejected with a reason, never silently lost
                if not any(isinstance(lg.result, parse.Rejected) for lg in out):
                    wrong.append((cut, "lost"))
    assert not wrong, wrong[:5]


def test_wrap_over_many_lines_and_docker_16k_pieces():
    w = 90  # the header is on the first line
    out = list(reassemble.reassemble(_lines([SPEC[i:i + w] for i in range(0, len(SPEC), w)])))
    assert len(out) == 1 and out[0].result.fields == parse.parse_line(SPEC).fields
    assert out[0].parts == len(range(0, len(SPEC), w)) > 3
    cfg = (ROOT / "tests/data/real_server_args/sglang-0.5.23-dict-eagle3.txt").read_text().strip()
    msg = cfg.encode()
    k = reassemble.DOCKER_SPLIT
    pieces = [f"2026-11-20T10:00:00.{i:06d}Z " + msg[j:j + k].decode()
              for i, j in enumerate(range(0, len(msg), k))]
    assert len(pieces) == 2
    out = list(reassemble.reassemble(_lines(pieces + [pieces[0][:28] + DEC])))
    assert [lg.result.kind for lg in out] == ["server_args", "sglang_decode"]
    assert out[0].parts == 2 and out[0].result.fields == parse.parse_line(cfg).fields
    assert out[0].result.outer_ts == "2026-11-20T10:00:00.000000Z"
    # the first piece alone (its continuation lost) is rejected, not stored as a config
    alone = list(reassemble.reassemble(_lines([pieces[0], pieces[0][:28] + DEC])))
    assert isinstance(alone[0].result, parse.Rejected) and alone[0].result.kind == "server_args"


def test_a_fragment_without_continuation_is_rejected_with_a_reason():
    out = list(reassemble.reassemble(_lines([DEC[:120], PRE])))
    assert isinstance(out[0].result, parse.Rejected) and out[0].result.kind == "sglang_decode"
    assert out[1].result.kind == "sglang_prefill"
    # wrapped over three lines and cut in the third: rejected, says so
    out = list(reassemble.reassemble(_lines([DEC[:60], DEC[60:120], DEC[120:150]])))
    assert len(out) == 1 and "hard-wrapped over 3 lines" in out[0].result.reason


def test_dynamic_depth_cuts_per_position_rates_at_the_depth():
    line = SPEC.replace("Current speculative depth: 5", "Current speculative depth: 2") \
        .replace("0.714, 0.429, 0.286, 0.286, 0.286", "0.714, 0.429, 0.000, 0.000, 0.000")
    rec = parse.parse_line(line)
    assert rec.fields["per_position_acceptance_rate"] == [0.714, 0.429, 0.0, 0.0, 0.0]  # as printed
    assert rec.fields["current_speculative_depth"] == 2
    assert parse.derived_columns(rec)["per_position_acceptance_rate"] == [0.714, 0.429]
    no_depth = parse.parse_line(SPEC.replace("Current speculative depth: 5, ", ""))
    assert "per_position_acceptance_rate" not in parse.derived_columns(no_depth)


def test_every_later_vllm_segment_is_optional_but_the_last():
    optional = ["Current speculative depth: 5", "Accepted throughput: 0.13 tokens/s",
                "Drafted throughput: 0.32 tokens/s", "Accepted: 14 tokens", "Drafted: 35 tokens",
                "Per-position acceptance rate: 0.714, 0.429, 0.286, 0.286, 0.286"]
    for drop in optional:
        text = SPEC.replace(drop + ", ", "", 1)
        assert text != SPEC
        rec = parse.parse_line(text)
        assert isinstance(rec, parse.Record) and "avg_draft_acceptance_rate" in rec.fields, drop
    cut = parse.parse_line(SPEC[:SPEC.index(", Avg Draft")])
    assert isinstance(cut, parse.Rejected) and cut.incomplete


def test_vllm_config_lines_give_the_effective_config():
    eng = parse.parse_line(
        "(EngineCore_DP0 pid=9) INFO 09-04 10:58:20 [core.py:140] Initializing a V1 LLM engine "
        "(v0.33.0) with config: model='/m', speculative_config=SpeculativeConfig(method='ngram', "
        "model=None, num_spec_tokens=4), tokenizer='/m', dtype=torch.bfloat16, "
        "tensor_parallel_size=4, pipeline_parallel_size=2, data_parallel_size=2, "
        "compilation_config={\"level\": 3, \"x\": \"a, b=c\"}, kernel_config=KernelConfig(a=1)")
    c = parse.derived_columns(eng)
    assert (c["speculative_algorithm"], c["speculative_num_steps"], c["draft_model_path"]) == \
        ("ngram", 4, None)
    assert (c["tp_size"], c["pp_size"], c["dp_size"], c["engine_version"]) == (4, 2, 2, "0.33.0")
    assert eng.fields["compilation_config"] == {"level": 3, "x": "a, b=c"}
    off = parse.parse_line("INFO 09-04 10:58:20 [core.py:140] Initializing a V1 LLM engine "
                           "(v0.10.2) with config: model='/m', speculative_config=None, seed=0")
    assert parse.derived_columns(off)["speculative_algorithm"] is None
    args = parse.parse_line("(APIServer pid=1) INFO 09-04 10:58:01 [utils.py:233] non-default "
                            "args: {'model_tag': '/m', 'speculative_config': '{\"method\": "
                            "\"mtp\", \"num_speculative_tokens\": 1}'}")
    c = parse.derived_columns(args)
    assert (c["model_path"], c["speculative_algorithm"], c["speculative_num_steps"]) == ("/m", "mtp", 1)
    assert c["simulated"] is None  # not said: missing, never a default


@pytest.mark.parametrize("text,reason", [
    (DEC.replace("#running-req: 24", "#running-req: +3"), "not a valid int"),
    (DEC.replace("2210.48", "1e999"), "not a finite number"),
    (DEC.replace("Decode batch,", "Decode batch [99999999999999999999999],"), "out of range"),
    (DEC.replace("#token: 30112", "#token: 99999999999999999999"), "out of range"),
    (DEC.replace("#token: 30112", "#token: " + "9" * 5000), "out of range"),
    (SPEC.replace("Accepted: 14", "Accepted: 1" + "0" * 30), "out of range"),
    (SPEC.replace("0.714", "inf"), "finite"),
    (PRE.replace("10543.21", "1e400"), "not a finite number"),
])
def test_values_are_range_checked(text, reason):
    got = parse.parse_line(text)
    assert isinstance(got, parse.Rejected) and reason in got.reason, got


def test_nan_is_missing_and_big_ints_within_int64_are_kept():
    assert parse.parse_line(DEC.replace("2210.48", "nan")).fields["gen_throughput"] is None
    assert parse.parse_line(DEC.replace("#running-req: 24", "#running-req: 3000000000")) \
        .fields["running_req"] == 3000000000  # the INTEGER column check is the store's (rows.py)


@pytest.mark.parametrize("payload", [
    "ServerArgs(a=" + "[" * 100_000 + "]" * 100_000 + ")",
    "{'a': " + "(" * 5000 + ")" * 5000 + "}",
    "ServerArgs(" + ", ".join(f"k{i}='{'x' * 100}'" for i in range(20_000)) + ")",
])
def test_server_args_parse_is_bounded(payload):
    t = time.perf_counter()
    got = parse.parse_line("[2026-01-01 00:00:00] server_args=" + payload)
    assert isinstance(got, parse.Rejected) and got.kind == "server_args"
    assert ("nests deeper" in got.reason or "longer than" in got.reason), got.reason
    assert time.perf_counter() - t < 2.0


def test_lookalikes_are_their_own_kind_never_sglang_or_vllm():
    fmts = parse.FORMATS
    assert fmts.lookalike
    for s in fmts.lookalike:
        got = parse.parse_line(s.text)
        assert isinstance(got, parse.Rejected) and got.kind not in parse.METRIC_KINDS


def test_simulation_is_tagged_only_when_on():
    on = parse.parse_line("env SGLANG_SIMULATE_ACC_LEN=2.5 python -m sglang.launch_server")
    assert on.kind == "simulated" and on.fields["simulate_acc_len"] == 2.5
    for off in ("SGLANG_SIMULATE_ACC_LEN=-1 python -m sglang.launch_server",
                "SGLANG_SIMULATE_ACC_LEN=0 python x", "SGLANG_SIMULATE_ACC_LEN=abc"):
        assert parse.parse_line(off) is None


def test_c_fast_path_prefilter_holds_every_header():
    """A header parse routes by but the C scanner's prefilter lacks would be silently skipped on
    the fast path: every parse.ANCHORS entry must contain one of the C anchors."""
    src = (ROOT / "specwatch" / "logs" / "_fastscan.c").read_text()
    block = src[src.index("static const char *ANCHORS[]"):]
    c_anchors = re.findall(r'"((?:[^"\\]|\\.)*)"', block[:block.index("NULL")])
    for h in parse.ANCHORS:
        assert any(a.encode() in h + b" " for a in c_anchors), h  # a header ends a word


def _typed_ok(v) -> bool:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return True
    if isinstance(v, int):
        return -(2 ** 63) < v < 2 ** 63
    if isinstance(v, float):
        return v == v and v not in (float("inf"), float("-inf"))
    if isinstance(v, (list, tuple)):
        return all(_typed_ok(x) for x in v)
    if isinstance(v, dict):
        return all(_typed_ok(x) for x in v.values())
    return True


def test_fuzzed_real_lines_never_raise_and_stay_in_range():
    """Mutations of every kind of real line (fixed seed, thousands): parse_line and the
    reassembler return a record, a rejection or nothing, never raise; every metric value is a
    finite number within int64 or text."""
    import random
    rng = random.Random(15)
    base = [DEC, PRE, SPEC, TPUT] + [p.read_text().rstrip("\n") for p in REAL[:4]]
    for log in sorted((ROOT / "sample_logs").glob("*.log")):
        base += [t for t in log.read_text(errors="replace").splitlines()
                 if any(h.decode() in t for h in parse.ANCHORS)][:20]
    tokens = ["3000000000", "99999999999999999999999", "+3", "1e999", "-1e999", "nan", "inf", "",
              ", , ", ": ", "[", "]", "(", ")", "{", "}", "'", '"', "\x1b[0m", "\r", "|", "`",
              "Decode batch, ", "server_args=", "SpecDecoding metrics: ", "é", "\x00"]
    lines = []
    for _ in range(4000):
        t = rng.choice(base)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(t) + 1)
            op = rng.random()
            if op < 0.4:
                t = t[:i] + rng.choice(tokens) + t[i:]
            elif op < 0.7:
                t = t[:i] + t[i + rng.randint(1, 20):]
            else:
                t = t[:i]
        lines.append(t)
        got = parse.parse_line(t)
        assert got is None or isinstance(got, (parse.Record, parse.Rejected))
        if isinstance(got, parse.Record):
            # metric values are range-checked by the parser; a config's raw args may hold any
            # Python literal (stored as JSON), the store checks its typed columns (rows.py)
            if got.kind in parse.METRIC_KINDS:
                assert _typed_ok(got.fields), (t, got.fields)
            parse.derived_columns(got)
    n = sum(1 for _ in reassemble.reassemble(_lines(lines)))
    assert n > 1000


def test_new_formats_reach_the_store(tmp_path):
    """Real DuckDB: the vLLM config lines fill server_configs, the spec windows keep their depth
    with per-position rates cut at it, prefix parts are stored, and the real 0.5.12 server_args
    line gives its run a config (issue 18)."""
    from specwatch.logs import ingest
    from specwatch.db import store
    db = tmp_path / "f.duckdb"
    logs = ["vllm-0.26-dynamic-depth-k8s.log", "sglang-0.5.12-real-server-args.log",
            "sglang-0.5.23-dspark-simulated.log", "pasted-issue-report.log"]
    ingest.ingest_paths(db, [str(ROOT / "sample_logs" / n) for n in logs])
    with store.reader(db) as con:
        cfg = con.execute(
            "SELECT config_kind, engine_name, engine_version, speculative_algorithm, "
            "speculative_num_steps, tp_size, speculative_dynamic, speculative_block_size "
            "FROM server_configs ORDER BY speculative_algorithm, config_kind").fetchall()
        spec = con.execute("SELECT spec_depth, per_position_acceptance_rate, outer_ts_text, process "
                           "FROM vllm_spec_windows WHERE outer_ts_text IS NOT NULL "
                           "ORDER BY line_no").fetchall()
        ev = con.execute("SELECT kind FROM events ORDER BY kind").fetchall()
    assert ("server_args", "sglang", None, "DSPARK", None, 1, None, 8) in cfg
    assert ("server_args", "sglang", None, "EAGLE3", 3, 2, None, None) in cfg
    assert ("vllm_engine_config", "vllm", "0.26.1", "eagle3", 5, 2, None, None) in cfg
    assert ("vllm_args", "vllm", None, "eagle3", 5, 2, "[[1, 8, 5], [9, 64, 2]]", None) in cfg
    assert {d for d, *_ in spec} == {5, 2}
    assert all(len(r) == d for d, r, *_ in spec if r is not None)
    assert all(o.endswith("Z") and p == "APIServer pid=1" for _, _, o, p in spec)
    assert ("simulated",) in ev and ("exception",) in ev and ("arg_error",) in ev


def test_feed_chunk_equals_feeding_every_line():
    """Ingest's chunk feeder (anchored lines + the line after a held record) gives the same
    logical records as feeding every line, also when a wrapped record spans two chunks."""
    data = b""
    for log in sorted((ROOT / "sample_logs").glob("*.log")):
        raw = log.read_bytes()
        data += raw[:raw.rfind(b"\n") + 1]
    phys = [x + b"\n" for x in data.split(b"\n")[:-1]]
    want = [(lg.line_no, lg.offset, lg.result) for lg in reassemble.parse_stream(phys)
            if b"\x00" not in phys[lg.line_no - 1]]
    for cut in (len(data) // 3, data.index(b"Wrapped at 100 columns") + 200):
        cut = data.index(b"\n", cut) + 1
        r = reassemble.Reassembler()
        got = list(reassemble.feed_chunk(r, data[:cut], 0, 0))
        got += reassemble.feed_chunk(r, data[cut:], cut, data[:cut].count(b"\n"))
        got += r.flush()
        assert [(lg.line_no, lg.offset, lg.result) for lg in got] == want


def test_wrapped_samples_are_declared_and_checked():
    fmts = parse.FORMATS
    assert {s.kind for s in fmts.wrapped} >= {"sglang_decode", "sglang_prefill",
                                             "vllm_spec_decode", "vllm_throughput"}
    reassemble.check_wrapped(fmts)  # raises on drift
    broken = fmts.wrapped[0]
    import dataclasses
    bad = dataclasses.replace(fmts, wrapped=(dataclasses.replace(broken, expect={"queue_req": 9}),))
    with pytest.raises(Exception, match="queue_req=0, expected 9"):
        reassemble.check_wrapped(bad)


def test_cri_partial_lines_and_ray_dedup_suffix():
    """kubelet's CRI files split long lines at 16 KiB and flag the pieces `P`; Ray appends
    `[repeated Nx across cluster]` to deduplicated lines."""
    cfg = (ROOT / "tests/data/real_server_args/sglang-0.5.23-dict-eagle3.txt").read_text().strip()
    k = 16 * 1024
    pieces = [cfg[i:i + k] for i in range(0, len(cfg), k)]
    lines = [f"2026-11-20T10:00:00.{i:09d}Z stderr {'P' if i < len(pieces) - 1 else 'F'} {x}"
             for i, x in enumerate(pieces)]
    lines.append("2026-11-20T10:00:01.000000000Z stderr F " + DEC)
    out = [lg for lg in reassemble.reassemble(_lines(lines)) if lg.result is not None]
    assert [lg.result.kind for lg in out] == ["server_args", "sglang_decode"]
    assert out[0].result.fields == parse.parse_line(cfg).fields and out[0].parts == len(pieces)
    assert out[1].result.outer_ts == "2026-11-20T10:00:01.000000000Z"
    cut = 100
    short = [f"2026-11-20T10:00:02Z stdout P {DEC[:cut]}", f"2026-11-20T10:00:02Z stdout F {DEC[cut:]}"]
    out = [lg for lg in reassemble.reassemble(_lines(short)) if lg.result is not None]
    assert len(out) == 1 and out[0].result.fields == parse.parse_line(DEC).fields
    ray = parse.parse_line("(SGLangEngine pid=41820) " + DEC + " [repeated 3x across cluster]")
    assert ray.kind == "sglang_decode" and ray.fields["queue_req"] == 0


def test_vllm_runs_get_their_method_from_the_config_lines(tmp_path):
    """config_summary of an ingested vLLM log names the method, K and TP from its engine-config
    and non-default-args lines instead of 'vllm (unknown method)'."""
    from specwatch.logs import ingest
    from specwatch.db import store
    db = tmp_path / "v.duckdb"
    ingest.ingest_paths(db, [str(ROOT / "sample_logs" / "vllm-0.26-dynamic-depth-k8s.log"),
                             str(ROOT / "sample_logs" / "vllm-0.11-eagle3.log")])
    with store.reader(db) as con:
        rows = dict(con.execute(
            "SELECT run_name, (speculative_algorithm, speculative_num_steps, tp_size, model_path) "
            "FROM run_metrics").fetchall())
    assert rows["vllm-0.26-dynamic-depth-k8s.log"] == ("eagle3", 5, 2, "/models/Qwen3-8B")
    assert rows["vllm-0.11-eagle3.log"][:2] == ("eagle3", 3)  # from its non-default args line


def test_real_0512_h200_logs_store_every_decode_line_and_reject_none(tmp_path):
    """The unedited real SGLang 0.5.12 logs of 2026-12-02 (tests/data/real_sglang_0.5.12_h200):
    every decode line is a stored window with the numbers printed on it, its config comes from
    the 0.5.12 server_args repr, and no metric line is rejected; the two dead servers' logs store
    their config and no window."""
    import re
    from specwatch.logs import ingest
    from specwatch.db import store
    real = ROOT / "tests" / "data" / "real_sglang_0.5.12_h200"
    db = tmp_path / "r.duckdb"
    ingest.ingest_paths(db, [str(real / n) for n in (
        "eagle3-s3k1d4.log", "shifted-ids-graph.log", "shifted-ids-nograph.log")])
    text = (real / "eagle3-s3k1d4.log").read_text()
    printed = [(float(a), float(b)) for a, b in re.findall(
        r"\] Decode batch, .*?accept len: ([\d.]+), accept rate: ([\d.]+)", text)]
    assert len(printed) > 10
    with store.reader(db) as con:
        got = con.execute("""SELECT d.accept_len, d.accept_rate_printed FROM decode_windows d
                             JOIN sources s USING (source_id) WHERE s.path LIKE '%eagle3-s3k1d4.log'
                             ORDER BY d.byte_offset""").fetchall()
        rejected = con.execute("SELECT count(*) FROM rejected_lines").fetchone()[0]
        cfg = con.execute("""SELECT s.path, c.speculative_algorithm, c.speculative_num_steps,
                                    c.speculative_eagle_topk, c.speculative_num_draft_tokens
                             FROM server_configs c JOIN sources s USING (source_id)
                             ORDER BY s.path""").fetchall()
        dead_windows = con.execute("""SELECT count(*) FROM decode_windows d JOIN sources s
                                      USING (source_id) WHERE s.path LIKE '%shifted%'""").fetchone()[0]
    assert got == printed
    assert rejected == 0 and dead_windows == 0
    assert [c[1:] for c in cfg] == [("EAGLE3", 3, 1, 4)] * 3
