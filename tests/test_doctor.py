"""specwatch doctor on real DuckDB files built by the real ingest: sample logs, constructed logs
whose line numbers the test knows, and sweep-shaped runs. Expected values come from the logs the
tests write (or from the views, queried independently), never from doctor itself."""
from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import pytest

from click.testing import CliRunner

from conftest import SAMPLES, run_cli
from specwatch import cli
from specwatch.diagnose import auxids, doctor
from specwatch.logs import failure, ingest
from specwatch.db import query, store

WRONG = "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log"
SPEC_ARGS = (SAMPLES / WRONG).read_text().splitlines()[0]  # a 0.5.23 dict-form server_args line


def _problems(findings):
    return [f for f in findings if f.severity != "info"]


# ----------------------------------------------------------------------------- sample logs


def test_samples_flag_exactly_the_collapsed_config(samples_db):
    findings, checked = doctor.diagnose(samples_db)
    flagged = {f.run for f in _problems(findings)}
    # pasted-issue-report.log is a parser sample of pasted fragments (one window per rank, no
    # server_args): doctor may say its summary rests on single windows, nothing about its config
    pasted = "pasted-issue-report.log"
    assert {f.code for f in _problems(findings) if f.run == pasted} <= {"first_window_contaminated"}
    assert flagged - {pasted} == {WRONG}
    codes = {f.code for f in findings if f.run == WRONG}
    assert {"accept_len_near_1", "slower_than_baseline"} <= codes
    checked_names = {r["run_name"] for r in checked}
    # baselines (no speculation) are never diagnosed; every speculative sample is
    assert not any("baseline" in n for n in checked_names)
    assert {"sglang-0.5.23-llama8b-eagle3-s3k1.log", "sglang-0.5.9-dp2-tp8-eagle3.log",
            "vllm-0.11-eagle3.log", WRONG} <= checked_names


def test_evidence_points_at_stored_rows(samples_db):
    findings, _ = doctor.diagnose(samples_db)
    summary = {r["run_name"]: r for r in query.run_sql(
        samples_db, "SELECT run_name, accept_len, speedup_gen FROM config_summary").dicts()}
    seen_windows = 0
    for f in findings:
        if "accept_len" in f.evidence.numbers and f.evidence.numbers["accept_len"] is not None:
            assert f.evidence.numbers["accept_len"] == summary[f.run]["accept_len"]
        if "speedup_gen" in f.evidence.numbers:
            assert f.evidence.numbers["speedup_gen"] == summary[f.run]["speedup_gen"]
        assert f.evidence.rows, f"{f.code} has no rows behind it"
        for ref in f.evidence.rows:
            if ref.table != "decode_windows":
                continue
            got = query.run_sql(samples_db, """
                SELECT d.line_no, d.accept_len FROM decode_windows d JOIN sources s USING (source_id)
                WHERE s.path = ? AND d.byte_offset = ?""", [ref.file, ref.byte_offset]).rows
            assert got and got[0][0] == ref.line_no
            raw = Path(ref.file).read_bytes()
            line = raw[ref.byte_offset:].split(b"\n", 1)[0].decode()
            assert line == raw.split(b"\n")[ref.line_no - 1].decode()  # \r (tqdm) is not a line end
            assert "Decode batch" in line and f"accept len: {got[0][1]:.2f}" in line
            seen_windows += 1
    assert seen_windows >= 5


def test_cli_json_has_the_finding_fields_and_exits_1_with_problems_0_clean_2_unknown_run(samples_db):
    proc = run_cli("doctor", "--db", samples_db, "--format", "json", check=False)
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"checked_runs", "findings"}
    for f in out["findings"]:
        assert set(f) == {"run_id", "run", "code", "severity", "title", "evidence", "suggestion",
                          "config_offset"}
        assert f["severity"] in ("error", "warning", "info")
        assert set(f["evidence"]) == {"numbers", "rows"} and f["suggestion"]
        for r in f["evidence"]["rows"]:
            assert set(r) == {"table", "file", "line_no", "byte_offset", "run_id", "note"}
    clean = run_cli("doctor", "--db", samples_db, "--run", "sglang-0.5.23-llama8b-eagle3-s3k1.log",
                    check=False)
    assert clean.returncode == 0 and "0 error(s), 0 warning(s)" in clean.stdout
    text = run_cli("doctor", "--db", samples_db, "--run", WRONG, check=False)
    assert text.returncode == 1
    assert "ERROR accept_len_near_1" in text.stdout and f"{WRONG}:" in text.stdout
    missing = run_cli("doctor", "--db", samples_db, "--run", "no-such-run", check=False)
    assert missing.returncode == 2 and "no run named 'no-such-run'" in missing.stderr


def test_baseline_only_store_gets_no_findings_and_exit_0(db):
    ingest.ingest_paths(db, [str(SAMPLES / "sglang-0.5.1-baseline.log"),
                             str(SAMPLES / "sglang-0.5.23-llama8b-baseline.log")])
    findings, checked = doctor.diagnose(db)
    assert findings == [] and checked == []
    res = CliRunner().invoke(cli.cli, ["doctor", "--db", str(db)])
    assert res.exit_code == 0 and "0 speculative config(s) checked" in res.stdout


# ----------------------------------------------------------------------------- constructed logs


def _decode(ts: dt.datetime, tag: str, running: int, usage: float, al: float, graph: bool,
            tput: float, queue: int) -> str:
    pre = f"[{ts:%Y-%m-%d %H:%M:%S}{' ' + tag if tag else ''}]"
    rate = (al - 1) / 3
    return (f"{pre} Decode batch, #running-req: {running}, #token: {int(usage * 400000)}, "
            f"token usage: {usage:.2f}, accept len: {al:.2f}, accept rate: {rate:.2f}, "
            f"cuda graph: {graph}, gen throughput (token/s): {tput:.2f}, #queue-req: {queue}")


def _write(path: Path, lines: list[str]) -> dict[str, int]:
    """Write lines; return {marker: 1-based line number} for lines tagged '@marker ' up front."""
    marks, out = {}, []
    for i, ln in enumerate(lines, 1):
        if ln.startswith("@"):
            marker, ln = ln[1:].split(" ", 1)
            marks[marker] = i
        out.append(ln)
    path.write_text("\n".join(out) + "\n")
    return marks


def _ingest(db, path: Path, run: str, **fields) -> None:
    ingest.ingest_paths(db, [str(path)], run=run)
    if fields:
        with store.writer(db) as con:
            store.upsert_run(con, {"run_id": run, **fields})


def _codes(findings, run):
    return {f.code: f for f in findings if f.run == run}


def test_operational_findings_cite_the_lines(db, tmp_path):
    t0 = dt.datetime(2026, 11, 2, 10, 0, 0)
    args = SPEC_ARGS.replace("'dp_size': 1", "'dp_size': 2").replace(
        "'disable_cuda_graph': False", "'disable_cuda_graph': True")
    lines = [args]
    for i in range(12):
        ts = t0 + dt.timedelta(seconds=i + 1)
        usage = 0.97 if i == 9 else 0.6
        queue = 1 if i < 4 else (3 if i < 8 else 12)
        m0 = "@usage " if i == 9 else ("@q0 " if i == 1 else ("@qlast " if i == 11 else ""))
        lines.append(m0 + _decode(ts, "DP0 TP0", 8, usage, 2.9, False, 900.0, queue))
        lines.append(_decode(ts, "DP1 TP1", 8, 0.6, 2.0, False, 500.0, 0))
        if i == 10:
            lines.append(f"@retract [{ts:%Y-%m-%d %H:%M:%S} DP0 TP0] KV cache pool is full. Retract "
                         f"requests. #retracted_reqs: 3, #new_tokens_gained: 2048")
    marks = _write(tmp_path / "ops.log", lines)
    _ingest(db, tmp_path / "ops.log", "ops")
    got = _codes(doctor.diagnose(db)[0], "ops")
    assert {"dp_ranks_disagree", "cuda_graph_off", "queue_growing", "kv_pressure_retractions"} <= set(got)
    dp = got["dp_ranks_disagree"].evidence.numbers
    assert dp["dp0"]["accept_len"] == pytest.approx(2.9) and dp["dp1"]["accept_len"] == pytest.approx(2.0)
    assert dp["gen_throughput_ratio"] == pytest.approx(900 / 500, rel=1e-3)
    assert got["cuda_graph_off"].evidence.numbers["disable_cuda_graph"] is True
    # 11 kept windows per rank (the first is after idle) -> 22 cuda-graph-off windows
    assert got["cuda_graph_off"].evidence.numbers["windows_graph_off"] == 22
    q = got["queue_growing"].evidence
    assert [r.line_no for r in q.rows] == [marks["q0"], marks["qlast"]]
    kv = got["kv_pressure_retractions"].evidence
    assert kv.numbers["max_token_usage_frac"] == pytest.approx(0.97)
    assert [r.line_no for r in kv.rows] == [marks["usage"], marks["retract"]]
    assert kv.rows[1].table == "events"


def test_single_window_run_is_contaminated(db, tmp_path):
    t0 = dt.datetime(2026, 11, 2, 11, 0, 0)
    marks = _write(tmp_path / "one.log", [SPEC_ARGS, "@only " + _decode(t0, "", 8, 0.1, 2.8, True, 300.0, 0)])
    _ingest(db, tmp_path / "one.log", "one")
    got = _codes(doctor.diagnose(db)[0], "one")
    assert set(got) == {"first_window_contaminated"}
    assert got["first_window_contaminated"].evidence.rows[0].line_no == marks["only"]


def _run_log(path: Path, t0: dt.datetime, al: float, tput: float, spec: bool = True) -> None:
    head = SPEC_ARGS if spec else (SAMPLES / "sglang-0.5.23-llama8b-baseline.log").read_text().splitlines()[0]
    # a distinct first line: ingest treats files whose first 1 KB match as copies of one source
    rows = [f"[{t0:%Y-%m-%d %H:%M:%S}] log of {path.stem}", head]
    for i in range(6):
        line = _decode(t0 + dt.timedelta(seconds=i + 1), "", 4, 0.1, al, True, tput, 0)
        rows.append(line if spec else line.replace(f"accept len: {al:.2f}, accept rate: {(al - 1) / 3:.2f}, ", ""))
    _write(path, rows)


def test_sweep_sibling_names_the_slot_shift_and_slowdown_says_where_speculation_pays(db, tmp_path):
    """Same draft and shape, ids [-1,1,3] vs [1,3,5]: doctor names the slot shift and the ids. The
    correct config pays at c=1 but not at c=4: disable above batch size 1. The shifted config's
    slowdown defers to its accept-length finding."""
    t0 = dt.datetime(2026, 11, 3, 9, 0, 0)
    common = dict(origin="sweep", sweep_name="sw", engine="sglang", status="ok",
                  draft_model_path="/nonexistent/eagle3-draft", model_path="/models/Llama-3.1-8B-Instruct",
                  speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                  speculative_num_draft_tokens=4, tp_size=1, dp_size=1)
    plan = [  # run, config, concurrency, accept len, gen tok/s, client tok/s, ids
        ("good-c4", "good", 4, 3.5, 1800.0, 200.0, [1, 3, 5]),
        ("good-c1", "good", 1, 3.5, 600.0, 150.0, [1, 3, 5]),
        ("shift-c4", "shifted", 4, 1.9, 900.0, 180.0, [-1, 1, 3]),
        ("shift-c1", "shifted", 1, 1.9, 300.0, 110.0, [-1, 1, 3]),
    ]
    for i, (run, cfg, conc, al, tput, client, ids) in enumerate(plan):
        _run_log(tmp_path / f"{run}.log", t0 + dt.timedelta(minutes=i), al, tput)
        _ingest(db, tmp_path / f"{run}.log", run, run_name=run, config_name=cfg, concurrency=conc,
                output_tok_s=client, aux_layer_ids=json.dumps(ids), **common)
    for i, (conc, client) in enumerate([(4, 250.0), (1, 100.0)]):
        run = f"base-c{conc}"
        _run_log(tmp_path / f"{run}.log", t0 + dt.timedelta(minutes=5 + i), 0, 1000.0, spec=False)
        _ingest(db, tmp_path / f"{run}.log", run, run_name=run, config_name="baseline",
                concurrency=conc, output_tok_s=client, is_baseline=True,
                **{**common, "speculative_algorithm": None, "draft_model_path": None,
                   "speculative_num_steps": None, "speculative_eagle_topk": None,
                   "speculative_num_draft_tokens": None})
    findings, _ = doctor.diagnose(db)
    shifted = _codes(findings, "shift-c4")
    sib = shifted["accept_len_below_sibling"]
    assert sib.evidence.numbers["sibling_run"] == "good-c4"
    assert sib.evidence.numbers["sibling_aux_layer_ids"] == [1, 3, 5]
    assert sib.evidence.numbers["ratio"] == pytest.approx(1.9 / 3.5, rel=1e-3)
    assert "+2, +2, +2" in sib.title and "slot shift" in sib.title
    assert "[1, 3, 5]" in sib.suggestion
    slow = shifted["slower_than_baseline"]
    assert slow.evidence.numbers["speedup_client"] == pytest.approx(180 / 250)
    assert slow.suggestion.startswith("fix the accept length first (see accept_len_below_sibling)")
    good = _codes(findings, "good-c4")
    assert set(good) == {"slower_than_baseline"}
    g = good["slower_than_baseline"].evidence.numbers
    assert g["speedup_client"] == pytest.approx(200 / 250)
    assert g["speedup_client_by_concurrency"] == {"1": pytest.approx(1.5)}
    assert "above batch size 1" in good["slower_than_baseline"].suggestion
    # at c=1 both pay; the shifted one still has the wrong ids (sibling at its own concurrency)
    assert _problems([f for f in findings if f.run == "good-c1"]) == []
    c1 = _codes(findings, "shift-c1")
    assert set(c1) == {"accept_len_below_sibling"}
    assert c1["accept_len_below_sibling"].evidence.numbers["sibling_run"] == "good-c1"


def test_builtin_run_probe_names_the_ids(db, tmp_path):
    """A built-in engine run served with [-1, 1, 3] (stored run row + its log): doctor's probe loads
    the stored target and draft and names [1, 3, 5], the ids the draft was trained on."""
    from specwatch.engine import models_dir
    if not (models_dir() / "draft-eagle3" / "model.safetensors").is_file():
        pytest.skip("built-in draft weights not present")
    _run_log(tmp_path / "b.log", dt.datetime(2026, 11, 4, 9, 0, 0), 2.2, 40.0)
    _ingest(db, tmp_path / "b.log", "b", engine="builtin", model_path="builtin:target",
            draft_model_path="builtin:draft-eagle3", aux_layer_ids="[-1, 1, 3]")
    got = _codes(doctor.diagnose(db)[0], "b")
    mis = got["aux_ids_mismatch"]
    assert mis.severity == "error" and mis.evidence.numbers["best_ids"] == [1, 3, 5]
    assert mis.evidence.numbers["served_ids"] == [-1, 1, 3]
    assert "[1, 3, 5]" in mis.suggestion
    assert "accept_len_near_1" not in got          # 2.2 is not near 1: only the probe sees it


def test_describe_shift_names_slot_and_convention():
    assert "slot shift" in auxids.describe_shift([-1, 1, 3], [1, 3, 5])
    assert "+1 convention" in auxids.describe_shift([2, 4, 6], [1, 3, 5]) or \
        "-1, -1, -1" in auxids.describe_shift([2, 4, 6], [1, 3, 5])
    assert auxids.describe_shift([1, 3, 5], [2, 4, 6]).startswith("offset per id +1, +1, +1")


# ----------------------------------------------------------------------------- end to end (slow)

E2E_SWEEP = """\
name = "doctor-e2e"
engine = "builtin"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
speculative_algorithm = "EAGLE3"
server_flags = ["--decode-log-interval", "8"]
concurrency = [1]

[workload]
prompts = "builtin:mixed"
num_prompts = 4
warmup_requests = 1
output_tokens = 48
temperature = 0.0
seed = 0

[[config]]
name = "correct"
speculative_num_steps = 3
speculative_eagle_topk = 1

[[config]]
name = "shifted"
speculative_num_steps = 3
speculative_eagle_topk = 1
aux_layer_ids = [-1, 1, 3]
"""


def _accept_len(draft_dir, prompts: list[str], tokens: int = 64, aux_layer_ids=None) -> float:
    """Greedy accept length of the built-in decoder: Σ tokens after the first / Σ verify steps."""
    from specwatch.engine.decode import Request, SpecDecoder

    dec = SpecDecoder("builtin:target", draft_dir, num_steps=3, topk=1, aux_layer_ids=aux_layer_ids)
    reqs = [Request(f"r{i}", list(p.encode()), tokens) for i, p in enumerate(prompts)]
    dec.prefill(reqs)
    while not all(r.finished for r in reqs):
        dec.decode_step([r for r in reqs if not r.finished])
    return sum(len(r.output_ids) - 1 for r in reqs) / sum(r.spec_verify_ct for r in reqs)


@pytest.mark.slow
def test_e2e_shifted_ids_flagged_and_suggestion_restores_accept_len(tmp_path):
    """Built-in engine sweep with correct and slot-shifted aux ids: doctor flags only the shifted
    run, names the offset and the ids; a draft dir carrying the suggested ids gets the accept
    length of the correct run back (measured by the engine's decoder, not by doctor)."""
    from specwatch.engine import models_dir
    draft = models_dir() / "draft-eagle3"
    if not (draft / "model.safetensors").is_file():
        pytest.skip("built-in draft weights not present")
    sweep_file = tmp_path / "sweep.toml"
    sweep_file.write_text(E2E_SWEEP)
    db = tmp_path / "e2e.duckdb"
    run_cli("run-sweep", sweep_file, "--db", db, "--out-dir", tmp_path / "runs", timeout=400)
    stored = {r["config_name"]: r for r in query.run_sql(
        db, "SELECT config_name, run_name, accept_len FROM config_summary").dicts()}
    findings, _ = doctor.diagnose(db)
    shifted = _codes(findings, stored["shifted"]["run_name"])
    mis = shifted["aux_ids_mismatch"]
    assert mis.severity == "error"
    assert mis.evidence.numbers["served_ids"] == [-1, 1, 3]
    suggested = mis.evidence.numbers["best_ids"]
    assert suggested == [1, 3, 5]          # what the draft was trained on (engine/models/README.md)
    assert "+2, +2, +2" in mis.title and "slot shift" in mis.title
    assert mis.evidence.numbers["captured_layers_by_cosine"] == [-1, 1, 3]
    # the store-only signal fires when the same-prompt accept lengths differ enough
    ratio = stored["shifted"]["accept_len"] / stored["correct"]["accept_len"]
    assert ("accept_len_below_sibling" in shifted) == (ratio <= auxids.SIBLING_ACCEPT_RATIO)
    correct = _codes(findings, stored["correct"]["run_name"])
    assert not {"aux_ids_mismatch", "accept_len_near_1", "accept_len_below_sibling"} & set(correct)
    # apply the suggestion: a draft dir copy whose config.json carries the suggested ids
    fixed = tmp_path / "draft-fixed"
    fixed.mkdir()
    for f in draft.iterdir():
        if f.name != "config.json":
            (fixed / f.name).symlink_to(f.resolve())
    cfg = json.loads((models_dir() / "draft-eagle3-shifted" / "config.json").read_text()
                     if (models_dir() / "draft-eagle3-shifted").is_dir() else (draft / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = suggested
    (fixed / "config.json").write_text(json.dumps(cfg))
    prompts = [json.loads(ln)["prompt"] for ln in
               (Path(__file__).resolve().parent.parent / "specwatch" / "run" / "workloads" / "chat.jsonl")
               .read_text().splitlines()[:4]]
    al_fixed = _accept_len(fixed, prompts)
    al_served = _accept_len(fixed, prompts, aux_layer_ids=[-1, 1, 3])  # same prompts, shifted ids
    print(f"stored accept_len correct={stored['correct']['accept_len']:.3f} "
          f"shifted={stored['shifted']['accept_len']:.3f}; decoder on 4 chat prompts: "
          f"suggested ids {al_fixed:.3f}, shifted ids {al_served:.3f}")
    assert al_fixed >= 0.9 * stored["correct"]["accept_len"]
    assert al_fixed >= 1.15 * stored["shifted"]["accept_len"]
    assert al_fixed >= 1.15 * al_served


# ----------------------------------------------------------------------------- aux ids per architecture

BASE_ARGS = (SAMPLES / "sglang-0.5.23-llama8b-baseline.log").read_text().splitlines()[0]


def _deployment(root: Path, arch: str) -> dict[str, Path]:
    """A 61-layer target (config.json only) and one draft's weights in two dirs whose config.json
    serve ids [-1, 2, 30] and [2, 30, 58] (the deployment issue 11 describes)."""
    target = root / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": [arch],
                                                    "num_hidden_layers": 61}))
    weights = bytes(range(256)) * 64
    dirs = {"target": target}
    for name, ids in (("wrong", [-1, 2, 30]), ("right", [2, 30, 58])):
        d = root / f"draft-{name}"
        d.mkdir()
        (d / "model.safetensors").write_bytes(weights)
        (d / "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}))
        dirs[name] = d
    return dirs


def _sglang_0523_log(path: Path, t0: dt.datetime, target: Path, draft: Path | None, al: float,
                     tput: float) -> None:
    """A SGLang 0.5.23 log: its dict-form server_args line naming these paths, then decode lines
    in the reporter's format (tests/contract checks it byte for byte against the real one)."""
    from specwatch.engine import sglang_log
    head = SPEC_ARGS if draft else BASE_ARGS
    head = head.replace("/models/Llama-3.1-8B-Instruct", str(target)).replace(
        "/models/sglang-EAGLE3-LLaMA3.1-Instruct-8B", str(draft))
    rows = [f"[{t0:%Y-%m-%d %H:%M:%S}] log of {path.stem}", head]
    for i in range(6):
        ts = t0 + dt.timedelta(seconds=i + 1)
        msg = sglang_log.decode_line(
            num_running_reqs=4, num_tokens=900 + 40 * i, token_usage=0.01,
            accept_len=al if draft else None, accept_rate=(al - 1) / 3 if draft else None,
            graph="cuda graph", gen_throughput_tok_s=tput, num_queue_reqs=0)
        rows.append(f"[{ts:%Y-%m-%d %H:%M:%S}] {msg.replace('cuda graph: False', 'cuda graph: True')}")
    _write(path, rows)


def _diagnose_deployment(db, tmp_path, arch):
    dirs = _deployment(tmp_path, arch)
    t0 = dt.datetime(2026, 11, 20, 9, 0, 0)
    _sglang_0523_log(tmp_path / "base.log", t0, dirs["target"], None, 0, 1000.0)
    _sglang_0523_log(tmp_path / "ids-wrong.log", t0 + dt.timedelta(minutes=1), dirs["target"],
                     dirs["wrong"], 1.12, 700.0)
    _sglang_0523_log(tmp_path / "ids-right.log", t0 + dt.timedelta(minutes=2), dirs["target"],
                     dirs["right"], 2.85, 1900.0)
    # plain ingest: no sweep, no stored aux ids; doctor reads the config.json files themselves
    ingest.ingest_paths(db, [str(tmp_path / n) for n in ("base.log", "ids-wrong.log",
                                                          "ids-right.log")])
    return doctor.diagnose(db)[0]


def test_ingested_deepseek_deployment_names_the_wrong_ids_and_never_the_right_ones(db, tmp_path):
    findings = _diagnose_deployment(db, tmp_path, "DeepseekV3ForCausalLM")
    wrong = _codes(findings, "ids-wrong.log")
    sib = wrong["accept_len_below_sibling"]
    assert sib.evidence.numbers["aux_layer_ids"] == [-1, 2, 30]
    assert sib.evidence.numbers["sibling_run"] == "ids-right.log"
    assert sib.evidence.numbers["sibling_aux_layer_ids"] == [2, 30, 58]
    assert sib.evidence.numbers["target_architecture"] == "DeepseekV3ForCausalLM"
    assert sib.evidence.numbers["target_num_layers"] == 61
    assert "aux ids [-1, 2, 30] are wrong" in sib.title
    assert sib.suggestion.startswith("serve eagle_aux_hidden_state_layer_ids = [2, 30, 58]")
    # DeepseekV3 in SGLang 0.5.23: ids are indices unless the first is 1; -1 captures nothing
    assert "ids [-1, 2, 30] capture the outputs [nothing, layer 1, layer 29]" in sib.suggestion
    assert "ids [2, 30, 58] capture the outputs [layer 1, layer 29, layer 57]" in sib.suggestion
    near1 = wrong["accept_len_near_1"]
    assert "ids [-1] capture nothing on this 61-layer target" in near1.suggestion
    assert "slower_than_baseline" in wrong
    right = [f for f in findings if f.run == "ids-right.log"]
    assert _problems(right) == []
    for f in findings:  # nothing anywhere calls [2, 30, 58] wrong or late
        assert "[2, 30, 58] are wrong" not in f.title + f.suggestion
        assert "one layer later" not in f.title + f.suggestion


def test_ingested_llama_deployment_gives_the_llama_rule(db, tmp_path):
    findings = _diagnose_deployment(db, tmp_path, "LlamaForCausalLM")
    wrong = _codes(findings, "ids-wrong.log")
    sib = wrong["accept_len_below_sibling"]
    assert sib.evidence.numbers["sibling_aux_layer_ids"] == [2, 30, 58]
    assert "slot shift" in sib.title
    # Llama-family: index = id + 1, so id k captures the output of layer k; -1 = the embedding
    assert "ids [-1, 2, 30] capture the outputs [embedding, layer 2, layer 30]" in sib.suggestion
    assert "ids [2, 30, 58] capture the outputs [layer 2, layer 30, layer 58]" in sib.suggestion
    near1 = wrong["accept_len_near_1"].suggestion
    assert "feeds the draft the embedding output" in near1 and "capture nothing" not in near1
    assert _problems([f for f in findings if f.run == "ids-right.log"]) == []


def test_unknown_architecture_lists_the_rules_instead_of_guessing(db, tmp_path):
    findings = _diagnose_deployment(db, tmp_path, "SomeNewForCausalLM")
    near1 = _codes(findings, "ids-wrong.log")["accept_len_near_1"].suggestion
    assert "has no verified SGLang rule" in near1
    assert "[embedding, layer 2, layer 30]" in near1          # the Llama-family reading
    assert "[nothing, layer 1, layer 29]" in near1            # the DeepseekV2/V3 reading


@pytest.mark.parametrize("reason, hint", [
    ("ModuleNotFoundError: No module named 'vllm'", "lacks the Python module vllm"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "lower --mem-fraction-static"),
    ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
     "NCCL_DEBUG=INFO"),
    ("sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
     "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill", "fix it in server_flags"),
    ("server exited with code 1", "read the server log"),
])
def test_failed_configs_are_reported_with_cause_log_and_hint(db, tmp_path, reason, hint):
    log = tmp_path / "server.log"
    _write(log, [SPEC_ARGS, f"[2026-11-04 10:00:05] {reason}"])
    _ingest(db, log, "dead", run_name="dead", config_name="chain", status="failed",
            failure_reason=reason, origin="sweep", sweep_name="sw", engine="sglang",
            speculative_algorithm="EAGLE3")
    findings, checked = doctor.diagnose(db)
    (f,) = [f for f in findings if f.run == "dead"]
    assert f.code == "config_failed" and f.severity == "error"
    assert f.title == f"config chain failed: {reason}"
    assert hint in f.suggestion
    assert f.evidence.numbers["failure_reason"] == reason
    assert str(log) in [r.file for r in f.evidence.rows]
    assert "dead" in [r["run_name"] for r in checked]
    res = CliRunner().invoke(cli.cli, ["doctor", "--db", str(db)])
    assert res.exit_code == 1 and f"config_failed: config chain failed: {reason}" in res.stdout


def test_repeats_are_judged_pooled_and_a_small_but_consistent_id_loss_warns(db, tmp_path):
    """A sweep with 3 repeats per config: one repeat below the baseline is not an error when the
    config's 95% interval holds 1 (one warning per config, with the interval); a config whose
    interval lies below 1 gets one error, not one per repeat; ids that cost 8% of the accept
    length in every repeat (real SGLang, exported weights: [0, 2, 4] for [1, 3, 5]) warn."""
    t0 = dt.datetime(2026, 11, 4, 9, 0, 0)
    common = dict(origin="sweep", sweep_name="rep", engine="sglang", status="ok",
                  draft_model_path="/nonexistent/eagle3-draft", model_path="/models/Llama-3.1-8B-Instruct",
                  speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                  speculative_num_draft_tokens=4, tp_size=1, dp_size=1, concurrency=1)
    base_tok_s = (100.0, 104.0, 97.0)
    plan = {  # config: (accept len per repeat, client tok/s per repeat, ids)
        "good": ((3.30, 3.31, 3.29), (96.0, 118.0, 99.0), [1, 3, 5]),
        "minus1": ((3.03, 3.02, 3.04), (112.0, 115.0, 108.0), [0, 2, 4]),
        "slow": ((3.30, 3.31, 3.29), (71.0, 73.0, 69.0), [1, 3, 5]),
    }
    n = 0
    for rep in range(3):
        run = f"baseline-r{rep}"
        _run_log(tmp_path / f"{run}.log", t0 + dt.timedelta(minutes=n), 0, 1000.0, spec=False)
        n += 1
        _ingest(db, tmp_path / f"{run}.log", run, run_name=run, config_name="baseline", repeat_idx=rep,
                output_tok_s=base_tok_s[rep], is_baseline=True,
                **{**common, "speculative_algorithm": None, "draft_model_path": None,
                   "speculative_num_steps": None, "speculative_eagle_topk": None,
                   "speculative_num_draft_tokens": None})
        for cfg, (als, toks, ids) in plan.items():
            run = f"{cfg}-r{rep}"
            _run_log(tmp_path / f"{run}.log", t0 + dt.timedelta(minutes=n), als[rep], 900.0)
            n += 1
            _ingest(db, tmp_path / f"{run}.log", run, run_name=run, config_name=cfg, repeat_idx=rep,
                    output_tok_s=toks[rep], aux_layer_ids=json.dumps(ids), **common)
    findings, _ = doctor.diagnose(db)
    speed = [f for f in findings if f.code == "slower_than_baseline"]
    # good-r0 alone is below its baseline (0.96), but good's interval holds 1 and its point is above 1
    assert not [f for f in speed if f.run.startswith(("good", "minus1"))]
    slow = [f for f in speed if f.run.startswith("slow")]
    assert len(slow) == 1 and slow[0].severity == "error"
    nums = slow[0].evidence.numbers
    assert nums["verdict"] == "loses" and nums["repeats"] == 3
    assert nums["speedup_ci_high"] < 1
    geo = math.exp(sum(math.log(t / b) for t, b in zip(plan["slow"][1], base_tok_s)) / 3)
    assert nums["speedup"] == pytest.approx(geo, rel=1e-6)
    assert "over 3 repeats" in slow[0].title
    ids = [f for f in findings if f.code == "accept_len_below_sibling"]
    assert {f.run for f in ids} == {"minus1-r0", "minus1-r1", "minus1-r2"}
    assert all(f.severity == "warning" for f in ids)
    assert ids[0].evidence.numbers["sibling_aux_layer_ids"] == [1, 3, 5]
    assert "cost 8% of the accept length" in ids[0].title
    assert ids[0].suggestion.startswith("serve eagle_aux_hidden_state_layer_ids = [1, 3, 5]")
    # asked about one repeat, doctor still gives that config's pooled finding
    one, _ = doctor.diagnose(db, "slow-r2")
    assert [(f.run, f.code, f.severity) for f in one if f.code == "slower_than_baseline"] == \
        [("slow-r2", "slower_than_baseline", "error")]


# ----------------------------------------------------------------------------- real SGLang deaths

REAL_0512 = Path(__file__).parent / "data" / "real_sglang_0.5.12_h200"   # see its README.md
CAPTURE_LINE = "aux_hidden_states.append(hidden_states + residual)"
TYPE_ERROR = "TypeError: unsupported operand type(s) for +: 'Tensor' and 'NoneType'"


@pytest.mark.parametrize("log", ["shifted-ids-graph.log", "shifted-ids-nograph.log"])
def test_real_0512_death_in_the_aux_capture_is_recognised(log):
    """Real SGLang 0.5.12 on the H200, ids [-1, 1, 3]: it dies in llama.py's capture, with and
    without CUDA graphs (graph capture vs the warmup request); the healthy log has no such death."""
    lines = (REAL_0512 / log).read_text().splitlines()
    assert failure.aux_capture_crash(lines) == failure.AuxCaptureCrash(
        "llama", 395, CAPTURE_LINE, TYPE_ERROR)
    assert failure.aux_capture_crash((REAL_0512 / "eagle3-s3k1d4.log").read_text().splitlines()) is None


def _tb(frames: list[tuple[str, int, str]], exc: str, head: str = "") -> list[str]:
    out = [f"{head}Traceback (most recent call last):"]
    for file, line, code in frames:
        out += [f'  File "{file}", line {line}, in forward', f"    {code}"]
    return out + [exc, ""]


def test_only_a_primary_death_on_a_capture_line_counts():
    qwen = "/usr/lib/python3.12/site-packages/sglang/srt/models/qwen2.py"
    capture = _tb([("/x/sglang/srt/managers/scheduler.py", 10, "self.run()"),
                   (qwen, 363, "aux_hidden_states.append(hidden_states)")],
                  "RuntimeError: shape '[4, 2048]' is invalid", head="[x] Scheduler hit an exception: ")
    got = failure.aux_capture_crash(capture)
    assert (got.module, got.line_no, got.exception) == ("qwen2", 363, "RuntimeError: shape '[4, 2048]' is invalid")
    # a dying tree's secondary exception after it does not hide it
    secondary = _tb([("/x/sglang/srt/managers/detokenizer_manager.py", 5, "loop()")], "KeyboardInterrupt")
    assert failure.aux_capture_crash(capture + secondary) == got
    # an out-of-memory inside the same model file, on another line, is not a capture death
    oom = _tb([(qwen, 370, "hidden_states, residual = layer(")],
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert failure.aux_capture_crash(oom) is None
    # the last primary death decides: a capture death followed by a later OOM is the OOM
    assert failure.aux_capture_crash(capture + oom) is None
    # a capture-like line outside sglang/srt/models/ (a user's script) is not one
    assert failure.aux_capture_crash(_tb([("/home/u/train.py", 3, CAPTURE_LINE)], TYPE_ERROR)) is None


def _failed_sweep(db, tmp_path, sibling_sha1: str) -> None:
    """The real sweep of 2026-12-02 as stored: the draft served with ids [1, 3, 5] measured, the
    same weights (recorded sha1) with ids [-1, 1, 3] died. The model paths are not on this
    machine, as when a database is copied off the GPU host."""
    common = dict(origin="sweep", sweep_name="exported-real", engine="sglang",
                  model_path="/gpu-host/exported/target", speculative_algorithm="EAGLE3",
                  speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4,
                  tp_size=1, concurrency=1, sglang_version="0.5.12",
                  target_architecture="LlamaForCausalLM", target_num_layers=8)
    good, dead = tmp_path / "good.log", tmp_path / "dead.log"
    # the logs name the GPU host's paths; move them off this machine's /tmp (which may hold an
    # export at the same place) so that only what the database recorded can match the drafts
    for src, dst in (("eagle3-s3k1d4.log", good), ("shifted-ids-graph.log", dead)):
        dst.write_text((REAL_0512 / src).read_text().replace("/tmp/sw-h200/", "/gpu-host/"))
    _ingest(db, good, "good", run_name="eagle3-s3k1d4/c1", config_name="eagle3-s3k1d4",
            status="ok", aux_layer_ids="[1, 3, 5]", draft_model_path="/gpu-host/exported/draft-eagle3",
            draft_weights_sha1=sibling_sha1, output_tok_s=648.1, **common)
    tail = "\n".join(dead.read_text().splitlines()[-40:])
    _ingest(db, dead, "dead", run_name="eagle3-s3k1d4-shifted/c1", config_name="eagle3-s3k1d4-shifted",
            status="failed", failure_reason=f"{TYPE_ERROR} (server exited with code -9 before it "
            "was ready)", server_log_tail=tail, aux_layer_ids="[-1, 1, 3]",
            draft_model_path="/gpu-host/exported/draft-eagle3-shifted",
            draft_weights_sha1="3a0a7030022f", **common)


def test_real_0512_aux_capture_death_names_the_ids_and_the_fix(db, tmp_path):
    _failed_sweep(db, tmp_path, sibling_sha1="3a0a7030022f")
    findings, _ = doctor.diagnose(db)
    (f,) = [f for f in findings if f.run == "eagle3-s3k1d4-shifted/c1"]
    assert (f.code, f.severity) == ("config_failed", "error")
    assert ("aux id -1 of [-1, 1, 3] maps to capture index 0, the input of the first layer, where "
            "SGLang 0.5.12's llama.py has no residual yet") in f.title
    assert f"`{CAPTURE_LINE}` (sglang/srt/models/llama.py:395) raised {TYPE_ERROR}" in f.title
    assert f.suggestion.startswith("serve eagle_aux_hidden_state_layer_ids = [1, 3, 5] (as in run "
                                   "eagle3-s3k1d4/c1: the same draft weights")
    assert "moved 1 slot(s) toward layer -1" in f.suggestion
    assert f.evidence.numbers["crash_frame"] == "sglang/srt/models/llama.py:395"
    assert ("runs", "good") in [(r.table, r.run_id) for r in f.evidence.rows]
    assert not [g for g in findings if g.run == "eagle3-s3k1d4/c1" and g.code == "config_failed"]


def test_capture_death_without_a_same_weights_sibling_says_which_id_not_a_guess(db, tmp_path):
    _failed_sweep(db, tmp_path, sibling_sha1="another-draft")
    (f,) = [f for f in doctor.diagnose(db)[0] if f.run == "eagle3-s3k1d4-shifted/c1"]
    assert "aux id -1 of [-1, 1, 3] maps to capture index 0" in f.title
    assert "no id in [-1]" in f.suggestion and "[1, 3, 5]" not in f.suggestion


def test_capture_death_with_unrecorded_ids_says_so(db, tmp_path):
    """An ingested log of a dead server (no sweep row with ids, draft not on this machine): the
    capture frame is still named, and the hint says the ids are not known instead of guessing."""
    dead = tmp_path / "dead.log"
    dead.write_text((REAL_0512 / "shifted-ids-nograph.log").read_text().replace("/tmp/sw-h200/", "/gpu-host/"))
    _ingest(db, dead, "dead", run_name="dead", status="failed", failure_reason=TYPE_ERROR)
    (f,) = [f for f in doctor.diagnose(db)[0] if f.run == "dead"]
    assert f.code == "config_failed"
    assert f"`{CAPTURE_LINE}` (sglang/srt/models/llama.py:395) raised {TYPE_ERROR}" in f.title
    assert "maps to capture index 0" not in f.title
    assert f.suggestion.startswith("the served ids (not recorded for this run")
